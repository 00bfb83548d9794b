"""``python -m grade benchmark``: GRADE next to the baselines, on the same labelled questions.

For one model and a list of datasets (labelled files ``<labels-dir>/<dataset>.jsonl``) it fills the
caches that are missing (GRADE_pre / GRADE_pos feature stores and per-question baseline scores, under
``<cache-dir>/<model>/``; this part loads the model) and then writes, from the caches alone
(:mod:`grade.studies.benchmark` does the work; this command only reads its arguments):

* ``main_table.md`` / ``main_table.csv``: Acc and AUROC (95% bootstrap CI) per method and dataset;
* ``transfer.csv``: train the supervised detectors on dataset A, test on dataset B;
* ``robustness.csv``: the same test questions with a reworded instruction / added irrelevant text;
* ``ablations.csv``: probe on all layers vs a threshold on one ratio, rank ratio vs srank(C_g), layer thirds;
* ``confidently_wrong.csv``: accuracy where all samples agree and are wrong;
* ``selective_answering.{md,csv}``: the model answers the test questions a detector scores highest and
  abstains on the rest: accuracy at 50 % coverage and the area under the accuracy-coverage curve, with
  ``test_scores.csv.xz`` (the per-question test scores the curves are drawn from);
* figures as PNG (where Plotly and Kaleido can render) and ``summary.json`` (class counts, protocol, notes).

``--offline`` never loads the model: the tables are regenerated from the caches in seconds.
The folders default to this repository's layout, relative to the working directory: labels in
``data/labels/<model>``, caches in ``data/benchmark`` (:data:`DATA_FOLDERS`; the ``grade`` package itself
takes every folder as an argument).
``--eval-labels-dir`` scores questions never seen during development: every development row trains
(and validates), the rows of ``<eval-labels-dir>/<dataset>.jsonl`` are the test set.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from .common import add_model_arguments
from .engine import add_batch_argument, say_precision_note

#: The repository's data folders, relative to the working directory: the command's documented defaults
#: (the package below takes folders as arguments) and the folders :func:`repository_runs` reads.
DATA_FOLDERS = {"labels": Path("data/labels"), "benchmark": Path("data/benchmark"),
                "probe_labels": Path("data/probe_training/labels")}


def repository_runs() -> dict[str, tuple[str, list[str]]]:
    """The runs behind ``results/`` (:func:`grade.studies.benchmark_runs.benchmark_runs`) on this repository's data
    folders, relative to its root (run them from there)."""
    from ..studies.benchmark_runs import benchmark_runs

    return benchmark_runs(**DATA_FOLDERS)


def register(sub) -> None:
    p = sub.add_parser("benchmark", help="GRADE vs baselines: tables, transfer, robustness, ablations",
                       description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    # Nothing of grade.studies is imported here: it loads torch, and `grade --help` or a mistyped argument must not
    # wait for it. The defaults and choices below are BenchmarkConfig's, which checks them when the command runs.
    add_model_arguments(p)
    p.add_argument("--datasets", nargs="+", default=None,
                   help="label file stems looked up in --labels-dir (default: the six shared datasets), or "
                        "NAME=FILE[,FILE...] to pool labelled files under one name")
    p.add_argument("--labels-dir", nargs="+", default=None,
                   help="folders searched in order for <dataset>.jsonl (default: data/labels/<model>, then "
                        "<cache-dir>/<model>/labels)")
    p.add_argument("--eval-labels-dir", default=None,
                   help="labelled files of unseen questions: train on all of --labels-dir, test on these")
    p.add_argument("--cache-dir", default=str(DATA_FOLDERS["benchmark"]),
                   help="feature stores and baseline caches (default: data/benchmark, below the working directory)")
    p.add_argument("--features", nargs="*", default=[],
                   help="extra GRADE feature stores (from `grade extract`) to reuse before computing")
    p.add_argument("--out", default=None, help="results folder (default: results/<model>, below the working directory)")
    p.add_argument("--offline", action="store_true", help="never load the model: use the caches only")
    p.add_argument("--min-per-class", type=int, default=30, help="a dataset needs this many questions of each class")
    p.add_argument("--max-per-class", nargs="+", default=None, metavar="N | DATASET=N",
                   help="cap each class (seeded), a compute budget: N for every dataset, DATASET=N for one "
                        "(e.g. 60 mmlu=250)")
    p.add_argument("--fractions", type=float, nargs=3, default=(0.6, 0.2, 0.2), metavar=("TRAIN", "VAL", "TEST"))
    p.add_argument("--seed", type=int, default=42)
    p.add_argument("--n-boot", type=int, default=1000, help="bootstrap draws for the AUROC intervals")
    p.add_argument("--samples", type=int, default=10, help="K fresh samples for self-consistency and EigenScore")
    p.add_argument("--sampling-rows", default="eval",
                   help="rows that get the sampling baselines: all, eval (validation + test; the default), none")
    p.add_argument("--variants", nargs="*", default=["reworded", "irrelevant"],
                   help="perturbations for the robustness study (test rows only); none to skip")
    p.add_argument("--robustness-datasets", nargs="*", default=None,
                   help="datasets that get the perturbed runs (default: all eligible)")
    p.add_argument("--document-pair", nargs=2, metavar=("WITH", "WITHOUT"), default=None,
                   help="two datasets of --datasets holding the same questions with and without their supporting "
                        "document: detectors trained on one are tested on the other (WITHOUT may have fewer than "
                        "--min-per-class questions of a class; it then serves this study only)")
    p.add_argument("--length-split", nargs="*", default=[], metavar="DATASET",
                   help="split these datasets at the median length of their documents (characters; the question's "
                        "where there is none) and test detectors trained on the short half on the long half and back")
    p.add_argument("--crossfit", action="store_true",
                   help="score every labelled question out of sample (stratified k-fold by question; "
                        "grade.studies.crossfit) instead of one capped split; reads --features-dir and --cache-dir")
    p.add_argument("--features-dir", default=None,
                   help="with --crossfit: feature stores <dir>/<loss>/<label file stem>.parquet of every labelled "
                        "question (default: data/probe_features/<model>)")
    p.add_argument("--folds", type=int, default=5, help="with --crossfit: k of the k-fold")
    p.add_argument("--studies", nargs="*", default=None, metavar="STUDY",
                   help="which studies run besides the main table and selective answering: transfer, robustness, "
                        "ablations, confidently_wrong, conditions (the --document-pair / --length-split studies) "
                        "(default: all; none: only the main table)")
    p.add_argument("--no-figures", action="store_true")
    p.add_argument("--threads", type=int, default=1, help="torch CPU threads (default 1: the machine is shared)")
    add_batch_argument(p)
    p.set_defaults(func=run)


def _log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def parse_caps(values: list[str] | None) -> tuple[int | None, dict[str, int]]:
    """``["60", "mmlu=250"]`` -> ``(60, {"mmlu": 250})``: the default cap per class and the datasets'
    own caps."""
    from ..common.errors import InputError

    default, by_dataset = None, {}
    for value in values or []:
        name, _, number = value.rpartition("=")
        try:
            cap = int(number)
        except ValueError:
            raise InputError(f"--max-per-class takes N or DATASET=N, not {value!r}") from None
        if cap < 1:
            raise InputError(f"--max-per-class must be at least 1, not {value!r}")
        if name:
            by_dataset[name] = cap
        else:
            default = cap
    return default, by_dataset


def every_question_config(model: str, data_root: str | Path, run: str | None = None):
    """The benchmark configuration of every labelled question of ``model``: the datasets of its repository run
    ``run`` (default the run named after the model) without a cap, the caches read from ``data_root``, offline,
    no GRADE variants (what :func:`grade.studies.shipped_probes.every_question_tables` builds the tables from)."""
    parser = argparse.ArgumentParser(prog="grade")
    register(parser.add_subparsers(dest="command"))
    extra = [a for a in repository_runs()[run or model][1] if a != "--crossfit"]
    args = parser.parse_args(["benchmark", "--model", model, *extra, "--max-per-class", "1000000",
                              "--cache-dir", str(Path(data_root) / DATA_FOLDERS["benchmark"]), "--offline",
                              "--variants", "none"])
    return config_from_args(args)


def config_from_args(args: argparse.Namespace):
    from ..verdict.detectors.baselines import safe_name
    from ..studies.benchmark import DEFAULT_DATASETS, BenchmarkConfig
    from ..studies import Protocol

    default_cap, dataset_caps = parse_caps(args.max_per_class)
    protocol = Protocol(fractions=tuple(args.fractions), seed=args.seed, min_per_class=args.min_per_class,
                        max_per_class=default_cap, max_per_class_by_dataset=dataset_caps, n_boot=args.n_boot)
    cache = Path(args.cache_dir)
    labels_dirs = ([Path(d) for d in args.labels_dir] if args.labels_dir else
                   [DATA_FOLDERS["labels"] / safe_name(args.model), cache / safe_name(args.model) / "labels"])
    return BenchmarkConfig(
        model=args.model, datasets=list(args.datasets or DEFAULT_DATASETS), labels_dirs=labels_dirs,
        eval_labels_dir=Path(args.eval_labels_dir) if args.eval_labels_dir else None,
        cache_dir=cache, features=[Path(f) for f in args.features], offline=args.offline,
        protocol=protocol, samples=args.samples, sampling_rows=args.sampling_rows, variants=list(args.variants or []),
        robustness_datasets=args.robustness_datasets,
        document_pair=tuple(args.document_pair) if args.document_pair else None, length_split=list(args.length_split or []),
        batch_size=args.batch_size, studies=args.studies,
    )


def run(args: argparse.Namespace) -> int:
    import time

    from ..verdict.detectors.baselines import safe_name
    from ..studies.benchmark import run_benchmark, write_results
    from .common import load_model_from_args

    if args.threads:
        import torch

        torch.set_num_threads(args.threads)
    if args.crossfit:
        return run_crossfit_command(args)
    config = config_from_args(args)
    say_precision_note(args, args.batch_size, quiet=config.offline)  # offline: no model pass, nothing to say
    result = run_benchmark(config, lambda: load_model_from_args(args, _log), _log)
    out = Path(args.out) if args.out else Path("results") / safe_name(args.model)
    t = time.perf_counter()
    written = write_results(result, out, figures=not args.no_figures)
    _log(f"wrote {len(written)} files to {out} ({time.perf_counter() - t:.1f} s)")
    print((out / "main_table.md").read_text(encoding="utf-8"))
    return 0


def run_crossfit_command(args: argparse.Namespace) -> int:
    """``--crossfit``: :func:`grade.studies.crossfit.run_crossfit` on the labelled files, written by
    :func:`grade.studies.crossfit_report.write_crossfit` (it never loads the model)."""
    from ..verdict.detectors.baselines import safe_name
    from ..studies.benchmark import label_files
    from ..studies.crossfit import CrossfitConfig, run_crossfit
    from ..studies.crossfit_report import save_store, write_crossfit

    config = config_from_args(args)
    out = Path(args.out) if args.out else Path("results") / safe_name(args.model)
    features = Path(args.features_dir) if args.features_dir else Path("data/probe_features") / safe_name(args.model)
    datasets = dict(label_files(spec, config.labels_dirs) for spec in config.datasets)
    cross = CrossfitConfig(model=args.model, datasets=datasets, features_dir=features, cache_dir=Path(args.cache_dir),
                           k=args.folds, seed=args.seed, n_boot=args.n_boot, min_per_class=args.min_per_class, store=out)
    written = write_crossfit(run_crossfit(cross, _log, on_dataset=lambda run: save_store(run, out)), out)
    _log(f"wrote {len(written)} files to {out}")
    print((out / "main_table.md").read_text(encoding="utf-8"))
    return 0
