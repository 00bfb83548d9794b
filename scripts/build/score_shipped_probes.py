"""The held-out split the shipped probes and detectors of a model are measured on, drawn before they are trained,
and their scores on it (:mod:`grade.studies.shipped_probes`).

    python scripts/build/score_shipped_probes.py --draw-split     # once, before build_probes / build_detectors
    python scripts/build/build_probes.py --only ...               # both leave the split's questions out
    python scripts/build/build_detectors.py --models ...
    python scripts/build/score_shipped_probes.py                  # results/<model>/heldout_scores.csv.xz
    python scripts/build/run_benchmark.py --readme-only           # folds them into grade/assets/measured

``--draw-split`` writes ``results/<model>/heldout_split.csv`` (dataset, id, label of every held-out question;
seeded, per dataset and class, :func:`~grade.studies.shipped_probes.draw_heldout`) from the stores of every
labelled question (``data/benchmark/<model>/crossfit_features``, restored by
``scripts/build/restore_benchmark_caches.sh``). Scoring needs those stores and the benchmark's baseline caches
(the detectors' statistics). CPU, a minute; no model is loaded.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

LOSSES = ("pre", "pos")


def stores(model: str, data_root: Path) -> dict:
    """{(loss, benchmark dataset name): feature table} of every labelled question."""
    from grade.batch.features import load_features
    from grade.studies.shipped_probes import BENCHMARK_NAMES

    folder = data_root / "data" / "benchmark" / model / "crossfit_features"
    found = {(loss, BENCHMARK_NAMES.get(p.stem, p.stem)): load_features(p, hidden=False)
             for loss in LOSSES for p in sorted((folder / loss).glob("*.parquet"))}
    if not found:
        raise SystemExit(f"error: no feature stores in {folder}; run scripts/build/restore_benchmark_caches.sh first")
    return found


def draw(model: str, data_root: Path, out: Path) -> None:
    import pandas as pd

    from grade.studies.shipped_probes import draw_heldout

    frames = stores(model, data_root)
    keys = {loss: {(d, str(i)) for (l, d), f in frames.items() if l == loss for i in f["id"]} for loss in LOSSES}
    rows = pd.concat([f[["id", "label"]].assign(dataset=d) for (loss, d), f in frames.items() if loss == "pre"],
                     ignore_index=True)
    rows = rows[rows["label"].isin([0, 1])]
    rows["id"] = rows["id"].astype(str)
    rows["scored"] = [all((d, i) in keys[loss] for loss in LOSSES) for d, i in zip(rows["dataset"], rows["id"])]
    split = draw_heldout(rows)
    held = split[split["heldout"]][["dataset", "id", "label"]].sort_values(["dataset", "id"])
    held.to_csv(out, index=False)
    counts = held.groupby("dataset")["label"].agg(["size", "sum"])
    for dataset, row in counts.iterrows():
        print(f"  {dataset}: {row['size']} held out ({row['sum']} answerable)")
    print(out)


def score(model: str, data_root: Path, split_path: Path, out: Path) -> None:
    import pandas as pd

    from grade.commands.benchmark import every_question_config
    from grade.studies.shipped_probes import every_question_tables, heldout_detector_scores, heldout_probe_scores
    from grade.verdict.detectors import Detector, detectors_for

    heldout = pd.read_csv(split_path, dtype={"id": str})
    rows = heldout_probe_scores(model, heldout, stores(model, data_root))
    detectors = [Detector.load(p) for p in detectors_for(model)]
    rows += heldout_detector_scores(detectors, every_question_tables(model, data_root, every_question_config(model, data_root)).tables, heldout)
    frame = pd.DataFrame(rows)
    frame.to_csv(out, index=False, float_format="%.6g")
    summary = frame.groupby(["method", "dataset"])["label"].agg(["size", "sum"])
    print(summary.to_string())
    print(out)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="qwen2.5-coder-1.5b-instruct")
    parser.add_argument("--data-root", type=Path, default=ROOT, help="where data/ holds the feature stores")
    parser.add_argument("--draw-split", action="store_true", help="draw the held-out split (before training)")
    parser.add_argument("--out-dir", type=Path, default=None, help="default results/<model>")
    args = parser.parse_args()
    import subprocess

    subprocess.run(["bash", str(ROOT / "scripts/build/restore_benchmark_caches.sh"), "--labels"], check=True)  # the label files kept in history
    from grade.studies.shipped_probes import SCORES_FILE, SPLIT_FILE

    out_dir = args.out_dir or ROOT / "results" / args.model
    if args.draw_split:
        draw(args.model, args.data_root, out_dir / SPLIT_FILE)
    else:
        score(args.model, args.data_root, ROOT / "results" / args.model / SPLIT_FILE, out_dir / SCORES_FILE)
    return 0


if __name__ == "__main__":
    sys.exit(main())
