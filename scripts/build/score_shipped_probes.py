"""Score the shipped probes and detectors of a model as shipped, on the labelled questions each never saw
(:mod:`grade.studies.shipped_probes`), and write ``results/<model>/shipped_probes.csv`` and
``shipped_detectors.csv``, which ``scripts/build/run_benchmark.py`` folds into the numbers the verdict and detector
cards cite (``grade/assets/measured``). The detectors' training rows are the train and validation rows of the
capped benchmark run they were built from (``scripts/build/build_detectors.py``), checked against their recorded balances.

    python scripts/build/score_shipped_probes.py --labels-at a27493d^     # Qwen2.5-Coder-1.5B-Instruct

``--labels-at``: the commit whose label files the probes were built from (later relabelling, e.g. MMLU's, changes
which rows the training table held); the rebuilt split is checked against the probe's recorded class balances.
Needs the feature stores the probes trained on (data/probe_features, ``scripts/build/restore_benchmark_caches.sh``) and
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

ROOT = Path(__file__).resolve().parents[2]
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

    sys.path.insert(0, str(ROOT / "scripts" / "build"))
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
    write(out, rows_out)
    write(out.with_name("shipped_detectors.csv"), score_detectors(model, args.data_root))
    return 0


def write(path: Path, rows: list[dict]) -> None:
    with path.open("w", newline="", encoding="utf-8") as fh:
        writer = csv.DictWriter(fh, fieldnames=COLUMNS)
        writer.writeheader()
        for row in rows:
            writer.writerow({k: (f"{v:.4f}" if isinstance(v, float) else v) for k, v in row.items()})
    print(path)


def score_detectors(model: str, data_root: Path) -> list[dict]:
    """Every shipped detector of ``model`` on the labelled questions outside the capped run's train and
    validation rows it was built from; the tables read from ``data_root``'s benchmark caches."""
    from grade.commands.benchmark import DATA_FOLDERS, config_from_args, repository_runs
    from grade.commands.cli import build_parser
    from grade.studies.benchmark import build_tables
    from grade.studies.shipped_probes import DETECTOR_METHOD, detector_seen, score_detector_unseen
    from grade.verdict.detectors import Detector, detectors_for

    extra = list(repository_runs()[f"{model}-capped"][1])
    cap = extra.index("--max-per-class")
    end = next(i for i in range(cap + 1, len(extra)) if extra[i].startswith("--"))
    every = extra[:cap + 1] + ["1000000"] + extra[end:]  # the same run with every labelled question
    # the label files are the checkout's (tracked); only the caches come from data_root
    cache = ["--cache-dir", str(Path(data_root) / DATA_FOLDERS["benchmark"])]

    def tables(run_args):
        args = build_parser().parse_args(["benchmark", "--model", model, *run_args, *cache, "--offline",
                                          "--variants", "none"])
        return build_tables(config_from_args(args), None, lambda line: None).tables

    capped, everything = tables(extra), tables(every)
    rows = []
    for path in detectors_for(model):
        detector = Detector.load(path)
        seen = detector_seen(detector, capped)
        print(f"{detector.name}: " + ("training rows found again" if seen is not None else
                                      "its training rows cannot be found again: not scored"))
        if seen is None:
            continue
        method = DETECTOR_METHOD.format(form=detector.spec.measured_as)
        for dataset, m in score_detector_unseen(detector, seen, everything).items():
            rows.append({"dataset": dataset, "method": method, "probe": detector.name,
                         **{k: m[k] for k in ("n", "positives", "acc", "acc_lo", "acc_hi", "auroc", "auroc_lo",
                                              "auroc_hi")}, "protocol": "unseen", "labels_at": "HEAD"})
            print(f"  {dataset}: AUROC {m['auroc']:.3f} [{m['auroc_lo']:.3f}, {m['auroc_hi']:.3f}] on {m['n']} "
                  f"unseen questions ({m['positives']} answerable)")
    return rows


if __name__ == "__main__":
    sys.exit(main())
