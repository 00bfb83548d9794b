"""Score the shipped probes of a model as shipped, on the labelled questions each never saw
(:mod:`grade.studies.shipped_probes`), and write ``results/<model>/shipped_probes.csv``, which
``scripts/run_benchmark.py`` folds into the numbers the verdict card cites (``grade/assets/measured``).

    python scripts/score_shipped_probes.py --labels-at a27493d^     # Qwen2.5-Coder-1.5B-Instruct

``--labels-at``: the commit whose label files the probes were built from (later relabelling, e.g. MMLU's, changes
which rows the training table held); the rebuilt split is checked against the probe's recorded class balances.
Needs the feature stores the probes trained on (data/probe_features, ``scripts/restore_benchmark_caches.sh``) and
the benchmark's stores of every labelled question (data/benchmark/<model>/crossfit_features). CPU, a minute.
"""

from __future__ import annotations

import argparse
import csv
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

COLUMNS = ("dataset", "method", "probe", "n", "positives", "acc", "acc_lo", "acc_hi", "auroc", "auroc_lo", "auroc_hi",
           "protocol", "labels_at")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="qwen2.5-coder-1.5b-instruct")
    parser.add_argument("--labels-at", required=True, help="the commit whose label files the probes were built from")
    parser.add_argument("--data-root", type=Path, default=ROOT, help="where data/ holds the feature stores")
    parser.add_argument("--out", type=Path, default=None, help="default results/<model>/shipped_probes.csv")
    args = parser.parse_args()

    from grade.batch.features import load_features
    from grade.studies.shipped_probes import METHOD, score_unseen, seen_questions
    from grade.verdict.probe import Probe, list_probes
    from grade.verdict.training_sets import MAX_PER_CLASS, MAX_UNANSWERABLE_PER_SET
    from grade.verdict.verdict import default_probe

    sys.path.insert(0, str(ROOT / "scripts"))
    from build_probes import KINDS, PROBE_LABELS_DIR

    model = args.model
    benchmark = args.data_root / "data" / "benchmark" / model / "crossfit_features"
    rows_out = []
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        (tmp / "labels").mkdir()
        archive = subprocess.run(["git", "archive", args.labels_at, f"data/labels/{model}"], cwd=ROOT, check=True,
                                 capture_output=True).stdout
        subprocess.run(["tar", "-x", "-C", str(tmp)], input=archive, check=True)
        shutil.move(str(tmp / "data" / "labels" / model), tmp / "labels" / model)
        shutil.copytree(args.data_root / "data" / "probe_features" / model, tmp / "features" / model)  # extract_all refreshes it
        probes = list_probes()
        for loss in ("pre", "pos"):
            seen_of: dict = {}
            for store in sorted((benchmark / loss).glob("*.parquet")):
                frame = load_features(store, hidden=False)
                task = frame["task"].mode().iloc[0]
                info = default_probe(model, probes, loss=loss, task=task)
                if info is None or info.loss != loss:
                    continue
                if info.name not in seen_of:
                    kind = info.metadata.get("kind_of_question")
                    seen_of[info.name] = seen_questions(
                        info, loss, [tmp / "labels", PROBE_LABELS_DIR], tmp / "features",
                        max_unanswerable=MAX_PER_CLASS if kind else MAX_UNANSWERABLE_PER_SET,
                        datasets=KINDS[kind] if kind else None)
                    print(f"{info.name}: " + ("split found again" if seen_of[info.name] is not None else
                                              "its split cannot be found again from these stores: not scored"))
                seen = seen_of[info.name]
                if seen is None:
                    continue
                probe = Probe.load(info.path)
                for dataset, m in score_unseen(probe, seen, {store.stem: frame}).items():
                    rows_out.append({"dataset": dataset, "method": METHOD.format(loss=loss), "probe": info.name,
                                     **{k: m[k] for k in ("n", "positives", "acc", "acc_lo", "acc_hi", "auroc",
                                                          "auroc_lo", "auroc_hi")},
                                     "protocol": "unseen", "labels_at": args.labels_at})
                    print(f"  {dataset}: AUROC {m['auroc']:.3f} [{m['auroc_lo']:.3f}, {m['auroc_hi']:.3f}] on {m['n']} "
                          f"unseen questions ({m['positives']} answerable)")
    out = args.out or ROOT / "results" / model / "shipped_probes.csv"
    with out.open("w", newline="", encoding="utf-8") as fh:
        writer = csv.DictWriter(fh, fieldnames=COLUMNS)
        writer.writeheader()
        for row in rows_out:
            writer.writerow({k: (f"{v:.4f}" if isinstance(v, float) else v) for k, v in row.items()})
    print(out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
