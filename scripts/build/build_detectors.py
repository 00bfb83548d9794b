"""Build the detectors the app shows beside GRADE's verdict (``make detectors``).

For each embedded model with a benchmark run (:data:`run_benchmark.RUNS`, the run named after the
model), offline, from the benchmark's caches only (``data/benchmark/<model>/{features,baselines}``:
``scripts/build/restore_benchmark_caches.sh`` restores them from the repository's history, no model is loaded):

1. the benchmark's tables are assembled exactly as ``python -m grade benchmark`` assembles them
   (:func:`grade.studies.benchmark.build_tables`: the same labelled files, per-class caps and seeded 60/20/20
   train / validation / test split per dataset); for a model with a held-out split drawn before training
   (``results/<model>/heldout_split.csv``, ``scripts/build/score_shipped_probes.py --draw-split``), every
   labelled question instead, the split's questions as the test rows and the rest 75/25 train / validation;
2. every detector of :data:`grade.verdict.detectors.DETECTORS` is fitted on the train rows of all datasets
   together, selects what it selects on their validation rows, and is scored on each dataset's test
   rows, which it never saw (AUROC with a 95% stratified-bootstrap interval, :mod:`grade.common.metrics`);
3. ``grade/assets/detectors/<model>-<name>.{safetensors,json}`` are written (the JSON records the
   sources with their SHA-256, the protocol, the split and the metrics), then
   ``grade/assets/detectors/README.md``.

Usage: ``python scripts/build/build_detectors.py [--models smollm2-135m-instruct ...] [--threads 1]``.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import sys
from dataclasses import asdict
from pathlib import Path

from grade.verdict.detectors.baselines import cache_path
from grade.studies.benchmark import build_tables, feature_store
from grade.commands.benchmark import every_question_config
from grade.studies.shipped_probes import SPLIT_FILE, every_question_tables, read_split, split_for_heldout
from grade.commands.cli import build_parser
from grade.commands.benchmark import config_from_args, repository_runs
from grade.verdict.detectors import DETECTORS, SHIPPED_DETECTORS_DIR, Detector, detector_file, fit_detector

ROOT = Path(__file__).resolve().parents[2]
RUNS = repository_runs()  # the benchmark's runs: one place for which files each model uses

MODELS = ("smollm2-135m-instruct", "gemma-3-270m", "qwen2.5-coder-1.5b-instruct")


def log(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _relative(path: Path) -> str:
    path = Path(path)
    return str((path if path.is_absolute() else ROOT / path).resolve().relative_to(ROOT))


def sources(config, built) -> list[dict]:
    """Every file the tables were read from, with its SHA-256 (labels, feature stores, baseline caches)."""
    files = []
    for dataset, table in built.tables.items():
        files += [ROOT / p for p in built.info[dataset]["labelled_files"]]
        store = feature_store(config.cache_dir, config.model, dataset, "original", "pre").path
        files += sorted(store.glob("**/*.parquet")) if store.is_dir() else [store]
        files += [cache_path(config.cache_dir, config.model, dataset)]
    return [{"path": _relative(f), "sha256": _sha256(f)} for f in files if Path(f).is_file()]


def build(model: str, out_dir: Path) -> list[Detector]:
    import subprocess

    subprocess.run(["bash", str(ROOT / "scripts/build/restore_benchmark_caches.sh"), "--labels"], check=True)  # the label files kept in history
    name, extra = model, RUNS[model][1]
    split = ROOT / "results" / model / SPLIT_FILE
    if split.is_file():  # every labelled question, the held-out split drawn before training as the test rows
        extra = [a for a in extra if a != "--crossfit"] + ["--max-per-class", "1000000"]
    args = build_parser().parse_args(["benchmark", "--model", RUNS[name][0], *extra, "--offline", "--variants", "none"])
    config = config_from_args(args)
    if split.is_file():
        built = every_question_tables(model, ROOT, every_question_config(model, ROOT))
        built.tables = split_for_heldout(built.tables, read_split(split))
        log(f"  every labelled question; the {len(read_split(split))} of {split.relative_to(ROOT)} are the test rows")
    else:
        built = build_tables(config, None, lambda line: log(f"  {line}"))
    if not built.tables:
        raise SystemExit(f"error: no benchmark table for {model}; restore the caches first "
                         "(scripts/build/restore_benchmark_caches.sh)")
    missing = [d for d, t in built.tables.items() if t.prompt_entropy is None or t.saplma is None]
    if missing:
        raise SystemExit(f"error: the caches of {model} lack {', '.join(missing)}; restore them first "
                         "(scripts/build/restore_benchmark_caches.sh)")
    protocol = config.protocol
    # grade.benchmark is grade.studies.benchmark now; the shipped detectors record the old name, and their JSON's
    # digest keys Home's shipped results, so the text stays as they have it until both are rebuilt together
    training_data = {
        "benchmark_run": f"scripts/build/run_benchmark.py RUNS[{name!r}] (offline, grade.benchmark.build_tables)",
        "sources": sources(config, built),
        "protocol": {k: v for k, v in asdict(protocol).items() if k not in ("probe_kind", "probe_epochs")},
        "split": "per dataset: the benchmark's seeded split stratified by label (train / validation / test); "
                 "fitted on the train rows of all datasets together, selected on their validation rows, "
                 "scored on each dataset's test rows",
        "datasets": {d: {k: v for k, v in built.info[d].items() if k in ("answerable", "unanswerable", "kept", "split")}
                     for d in built.tables},
    }
    detectors = []
    for detector_name in DETECTORS:
        detector = fit_detector(detector_name, built.tables, model=model, seed=protocol.seed, n_boot=protocol.n_boot,
                                ci=protocol.ci, training_data=training_data, say=log)
        detector.save(detector_file(model, detector_name, out_dir))
        metrics = detector.metadata["metrics"]["test_by_dataset"]
        log(f"  {detector_name}: " + ", ".join(f"{d} {m['auroc']:.3f}" for d, m in metrics.items()))
        detectors.append(detector)
    return detectors


def _fmt(x) -> str:
    return "–" if x is None or x != x else f"{x:.2f}"


def write_readme(out_dir: Path) -> Path:
    """The README of every detector file in ``out_dir`` (from their JSON, so it always equals the files)."""
    lines = ["# Detectors beside GRADE's verdict", "",
             "Generated by `scripts/build/build_detectors.py` from the detector files in this folder (do not edit by hand).",
             "Each is fitted on the benchmark's training questions (`data/benchmark/<model>`, restored by "
             "`scripts/build/restore_benchmark_caches.sh`) and scored on each dataset's held-out test questions: AUROC "
             "[95% stratified-bootstrap interval], accuracy at P = 0.5, test questions (answerable). "
             "Computed on the 2-core CPU development machine, offline, without loading a model.", ""]
    for model in MODELS:
        found = [Detector.load(p) for name in DETECTORS if (p := detector_file(model, name, out_dir)).is_file()]
        if not found:
            continue
        lines += [f"## {model}", "", "| detector | dataset | task | document | AUROC | Acc | test n (answerable) |",
                  "|---|---|---|---|---|---|---|"]
        for detector in found:
            for dataset, m in detector.metadata["metrics"]["test_by_dataset"].items():
                kind = detector.kinds[dataset]
                lines.append(f"| {detector.spec.title} | {dataset} | {kind['task']} | "
                             f"{'with' if kind['with_document'] else 'without'} | {_fmt(m['auroc'])} "
                             f"[{_fmt(m['auroc_lo'])}, {_fmt(m['auroc_hi'])}] | {_fmt(m['acc'])} | "
                             f"{m['n']} ({m['positives']}) |")
        lines.append("")
    path = out_dir / "README.md"
    path.write_text("\n".join(lines), encoding="utf-8")
    return path


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", nargs="+", default=list(MODELS), choices=MODELS)
    parser.add_argument("--out-dir", type=Path, default=SHIPPED_DETECTORS_DIR.resolve())
    parser.add_argument("--threads", type=int, default=1, help="torch CPU threads (default 1: the machine is shared)")
    args = parser.parse_args()
    import torch

    torch.set_num_threads(args.threads)
    os.chdir(ROOT)  # the benchmark's runs name their files relative to the repository
    for model in args.models:
        log(f"{model}:")
        build(model, args.out_dir)
    log(f"wrote {write_readme(args.out_dir)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
