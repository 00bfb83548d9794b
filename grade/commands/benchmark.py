"""``python -m grade benchmark``: GRADE next to the baselines, on the same labelled questions.

For one model and a list of datasets (labelled files ``<labels-dir>/<dataset>.jsonl``) it fills the
caches that are missing (GRADE_pre / GRADE_pos feature stores and per-question baseline scores, under
``<cache-dir>/<model>/``; this part loads the model) and then writes, from the caches alone:

* ``main_table.md`` / ``main_table.csv``: Acc and AUROC (95% bootstrap CI) per method and dataset;
* ``transfer.csv``: train the supervised detectors on dataset A, test on dataset B;
* ``robustness.csv``: the same test questions with a reworded instruction / added irrelevant text;
* ``ablations.csv``: probe on all layers vs a threshold on one ratio, rank ratio vs srank(C_g), layer thirds;
* ``confidently_wrong.csv``: accuracy where all samples agree and are wrong;
* figures (Plotly HTML, PNG when Kaleido renders) and ``summary.json`` (class counts, protocol, notes).

``--offline`` never loads the model: the tables are regenerated from the caches in seconds.
``--eval-labels-dir`` scores questions never seen during development: every development row trains
(and validates), the rows of ``<eval-labels-dir>/<dataset>.jsonl`` are the test set.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from ..io import find_jsonl, open_text
from .common import add_model_arguments

REPO_ROOT = Path(__file__).resolve().parents[2]
DEFAULT_DATASETS = ("triviaqa", "nq_open", "hotpotqa", "mmlu", "gsm8k", "math")


def register(sub) -> None:
    p = sub.add_parser("benchmark", help="GRADE vs baselines: tables, transfer, robustness, ablations",
                       description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_model_arguments(p)
    p.add_argument("--datasets", nargs="+", default=list(DEFAULT_DATASETS),
                   help="label file stems looked up in --labels-dir (default: the six shared datasets), or "
                        "NAME=FILE[,FILE...] to pool labelled files under one name")
    p.add_argument("--labels-dir", nargs="+", default=None,
                   help="folders searched in order for <dataset>.jsonl (default: data/labels/<model>, then "
                        "data/benchmark/labels/<model>)")
    p.add_argument("--eval-labels-dir", default=None,
                   help="labelled files of unseen questions: train on all of --labels-dir, test on these")
    p.add_argument("--cache-dir", default=str(REPO_ROOT / "data" / "benchmark"),
                   help="feature stores and baseline caches (default: data/benchmark)")
    p.add_argument("--features", nargs="*", default=[],
                   help="extra GRADE feature stores (from `grade extract`) to reuse before computing")
    p.add_argument("--out", default=None, help="results folder (default: results/<model>)")
    p.add_argument("--offline", action="store_true", help="never load the model: use the caches only")
    p.add_argument("--min-per-class", type=int, default=30, help="a dataset needs this many questions of each class")
    p.add_argument("--max-per-class", nargs="+", default=None, metavar="N | DATASET=N",
                   help="cap each class (seeded), a compute budget: N for every dataset, DATASET=N for one "
                        "(e.g. 60 mmlu=250)")
    p.add_argument("--fractions", type=float, nargs=3, default=(0.6, 0.2, 0.2), metavar=("TRAIN", "VAL", "TEST"))
    p.add_argument("--seed", type=int, default=42)
    p.add_argument("--n-boot", type=int, default=1000, help="bootstrap draws for the AUROC intervals")
    p.add_argument("--samples", type=int, default=10, help="K fresh samples for self-consistency and EigenScore")
    p.add_argument("--sampling-rows", choices=("all", "eval", "none"), default="eval",
                   help="rows that get the sampling baselines: all, validation+test (default), none")
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
    p.add_argument("--no-figures", action="store_true")
    p.add_argument("--threads", type=int, default=1, help="torch CPU threads (default 1: the machine is shared)")
    p.set_defaults(func=run)


def _log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


class _ModelHandle:
    """Loads the model on first use only, so a run with full caches never touches it."""

    def __init__(self, args):
        self.args, self.lm = args, None

    def get(self):
        if self.lm is None:
            if self.args.offline:
                from ..errors import InputError

                raise InputError("the caches are incomplete and --offline forbids loading the model")
            from .common import load_model_from_args

            self.lm = load_model_from_args(self.args, _log)
        return self.lm


def _feature_store(cache: Path, model: str, dataset: str, variant: str, loss: str) -> Path:
    from ..baselines import safe_name

    name = dataset + ("" if variant == "original" else f".{variant}")
    return cache / safe_name(model) / "features" / f"{name}.{loss}.parquet"


def _perturbed_feature_records(lm, rows: list[dict], variant: str, loss: str):
    """GRADE features of rows under a perturbed prompt, as rows of the feature-store schema."""
    from .. import __version__
    from ..analysis import analyze
    from ..baselines import task_prompt
    from ..errors import GradeError
    from ..features import FEATURE_VERSION, MAX_NEW_TOKENS, most_frequent_sample

    for row in rows:
        task = row.get("task") or "qa"
        response = None
        if loss == "pos":
            response = row.get("response") or most_frequent_sample(row.get("samples"))
        try:
            result = analyze(lm, row["question"], context=row.get("context") or None, task=task, loss=loss,
                             response=response, generate=loss == "pos" and response is None, spectra=False,
                             max_new_tokens=MAX_NEW_TOKENS.get(task, 64), prompt=task_prompt(lm, row, variant))
        except GradeError as exc:
            _log(f"  skipped {row['id']} ({variant}, {loss}): {exc}")
            continue
        yield {
            "id": row["id"], "dataset": row["dataset"], "label": int(row["label"]),
            "accuracy": float(row.get("accuracy") or float("nan")), "task": task,
            "has_context": bool(row.get("context")), "question": row["question"], "response": result.response,
            "model": result.model, "loss": loss, "srank": result.srank, "n_layers": result.n_layers,
            "n_tokens": len(result.input_ids), "loss_value": result.loss_value,
            "rank_ratio": [float(x) for x in result.rank_ratio], "srank_h": [float(x) for x in result.srank_h],
            "srank_g": [float(x) for x in result.srank_g], "hidden": None, "feature_version": FEATURE_VERSION,
            "package_version": __version__,
        }


def _write_store_part(store: Path, records: list[dict]) -> None:
    import os
    import uuid

    import pyarrow as pa
    import pyarrow.parquet as pq

    from ..features import SCHEMA

    store.mkdir(parents=True, exist_ok=True)
    name = f"part-{len(list(store.glob('part-*.parquet'))):05d}-{uuid.uuid4().hex[:8]}.parquet"
    tmp = store / f".{name}.tmp"
    pq.write_table(pa.Table.from_pylist(records, schema=SCHEMA), tmp, compression="zstd")
    os.replace(tmp, store / name)


def _ensure_features(handle, store: Path, rows: list[dict], variant: str, loss: str, extra) -> "object":
    """Feature DataFrame for ``rows`` (computing the missing ones unless offline)."""
    import pandas as pd

    from ..features import extract_features, load_features, row_key, stored_keys

    have = set()
    frames = []
    if extra is not None and variant == "original":
        wanted = {row_key(r) for r in rows}
        keys = list(zip(extra["dataset"], extra["id"], extra["has_context"].astype(bool)))
        sub = extra[[(k in wanted) and l == loss for k, l in zip(keys, extra["loss"])]]
        if len(sub):
            frames.append(sub)
            have |= set(zip(sub["dataset"], sub["id"], sub["has_context"].astype(bool)))
    have |= stored_keys(store)
    missing = [r for r in rows if row_key(r) not in have]
    if missing and not handle.args.offline:
        lm = handle.get()
        t = time.perf_counter()
        _log(f"  GRADE_{loss} features ({variant}) for {len(missing)} questions -> {store}")
        if variant == "original":
            extract_features(lm, missing, store, loss=loss, keep_hidden=False, chunk_size=16)
        else:
            buffer = []
            for record in _perturbed_feature_records(lm, missing, variant, loss):
                buffer.append(record)
                if len(buffer) >= 16:
                    _write_store_part(store, buffer)
                    buffer = []
            if buffer:
                _write_store_part(store, buffer)
        _log(f"  ... {time.perf_counter() - t:.0f} s")
    elif missing:
        _log(f"  {len(missing)} questions have no GRADE_{loss} features ({variant}); offline: left out")
    if store.is_dir() and any(store.glob("part-*.parquet")):
        frames.append(load_features(store, hidden=False))
    return pd.concat(frames, ignore_index=True) if frames else None


def _ensure_baselines(handle, cache: Path, model: str, dataset: str, rows: list[dict], sampling_rows: list[dict],
                      variant: str, config) -> dict:
    from ..baselines import cache_path, read_caches, score_items

    main = cache_path(cache, model, dataset, variant)
    samples = cache_path(cache, model, dataset, variant, part="samples")
    for path, todo_rows, parts in ((main, rows, ("answer", "ic", "judge")), (samples, sampling_rows, ("samples",))):
        if not todo_rows:
            continue
        from ..baselines import read_cache

        done = read_cache(path)
        missing = [r for r in todo_rows if str(r["id"]) not in done]
        if not missing:
            continue
        if handle.args.offline:
            _log(f"  {len(missing)} questions lack baseline passes {'+'.join(parts)} ({variant}); offline: left out")
            continue
        lm = handle.get()
        t = time.perf_counter()
        _log(f"  baselines {'+'.join(parts)} ({variant}) for {len(missing)} questions -> {path}")

        def progress(i, n, record):
            if i == n or i % 10 == 0:
                _log(f"    {i}/{n}  {time.perf_counter() - t:.0f} s")

        score_items(lm, missing, path, variant=variant, config=config, parts=parts, progress=progress)
    return read_caches([main, samples])


def parse_caps(values: list[str] | None) -> tuple[int | None, dict[str, int]]:
    """``["60", "mmlu=250"]`` -> ``(60, {"mmlu": 250})``: the default cap per class and the datasets'
    own caps."""
    from ..errors import InputError

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


def run(args: argparse.Namespace) -> int:
    import numpy as np

    from ..baselines import BaselineConfig, safe_name
    from ..errors import InputError
    from ..evaluation import Protocol, assign_splits, build_table, read_labels, run_benchmark, select_rows, write_results
    from ..features import load_features

    if args.threads:
        import torch

        torch.set_num_threads(args.threads)
    cache = Path(args.cache_dir)
    default_cap, dataset_caps = parse_caps(args.max_per_class)
    protocol = Protocol(fractions=tuple(args.fractions), seed=args.seed, min_per_class=args.min_per_class,
                        max_per_class=default_cap, max_per_class_by_dataset=dataset_caps, n_boot=args.n_boot)
    labels_dirs = [Path(d) for d in args.labels_dir] if args.labels_dir else [
        REPO_ROOT / "data" / "labels" / safe_name(args.model), cache / safe_name(args.model) / "labels"]
    out = Path(args.out) if args.out else REPO_ROOT / "results" / safe_name(args.model)
    extra = load_features(args.features, hidden=False) if args.features else None
    config = BaselineConfig(n_samples=args.samples)
    handle = _ModelHandle(args)
    variants = [v for v in (args.variants or []) if v != "none"]

    tables, perturbed, info = {}, {}, {}
    aside: dict = {}  # tables built for the with/without-document study only (below --min-per-class)
    lengths: dict = {}  # dataset -> document length of each row, for --length-split
    study_only = {args.document_pair[1]} if args.document_pair else set()
    notes = []
    for spec in args.datasets:
        dataset, paths = _label_files(spec, labels_dirs)
        missing_files = [p for p in paths if not p.is_file()]
        if not paths or missing_files:
            where = ", ".join(_display(p) for p in missing_files) or " or ".join(_display(d / f"{dataset}.jsonl") for d in labels_dirs)
            info[dataset] = {"eligible": False, "reason": f"no labelled file ({where})"}
            _log(f"{dataset}: no labelled file ({where})")
            continue
        labelled = [row for p in paths for row in read_labels(p)]
        all_rows = sum(1 for p in paths for line in open_text(p) if line.strip())
        rows, entry = select_rows(labelled, protocol, dataset)
        entry["labelled_files"] = [_display(p) for p in paths]
        entry["questions_sampled"] = all_rows
        entry["no_label"] = all_rows - len(labelled)
        eval_rows = []
        if args.eval_labels_dir:
            eval_path = find_jsonl(args.eval_labels_dir, dataset)
            if eval_path is None:
                entry.update(eligible=False, reason=f"no labelled file {Path(args.eval_labels_dir) / dataset}.jsonl")
            else:
                eval_rows = read_labels(eval_path)
                dev_ids = {r["id"] for r in rows}
                eval_rows = [r for r in eval_rows if r["id"] not in dev_ids]
                y_eval = np.array([r["label"] for r in eval_rows])
                entry["eval"] = {"answerable": int(y_eval.sum()), "unanswerable": int(len(y_eval) - y_eval.sum())}
        for_study_only = False
        if not entry["eligible"]:
            entry.setdefault("reason", f"fewer than {protocol.min_per_class} questions in one class "
                                       f"({entry['answerable']} answerable, {entry['unanswerable']} unanswerable)")
            info[dataset] = entry
            # A condition of the with/without-document study needs only a few of each class to fit and test on.
            if dataset in study_only and min(entry["answerable"], entry["unanswerable"]) >= 5 and not args.eval_labels_dir:
                for_study_only = True
                entry["reason"] += "; used in the with/without-document study only"
                _log(f"{dataset}: not in the main table ({entry['reason']})")
            else:
                _log(f"{dataset}: skipped, {entry['reason']}")
                continue
        y = np.array([r["label"] for r in rows])
        if args.eval_labels_dir:
            train_val = np.array(protocol.fractions[:2]) / sum(protocol.fractions[:2])
            split_dev = _two_way_split(y, train_val[0], protocol.seed)
            rows = rows + eval_rows
            split = np.concatenate([split_dev, np.array(["test"] * len(eval_rows), dtype=object)])
            y = np.array([r["label"] for r in rows])
        else:
            split = assign_splits([r["id"] for r in rows], y, protocol)
        entry["split"] = {part: {"n": int((split == part).sum()), "answerable": int(y[split == part].sum())}
                          for part in ("train", "val", "test")}
        entry["confidently_wrong_test"] = None
        info[dataset] = entry
        _log(f"{dataset}: {entry['answerable']} answerable, {entry['unanswerable']} unanswerable; "
             f"using {len(rows)} (" + ", ".join(f"{k} {v['n']}" for k, v in entry["split"].items()) + ")")

        features = {loss: _ensure_features(handle, _feature_store(cache, args.model, dataset, "original", loss), rows,
                                           "original", loss, extra) for loss in ("pre", "pos")}
        sampling = {"all": rows, "none": [], "eval": [r for r, s in zip(rows, split) if s in ("val", "test")]}[args.sampling_rows]
        scores = _ensure_baselines(handle, cache, args.model, dataset, rows, sampling, "original", config)
        table = build_table(dataset, "original", rows, split, features=features, baseline_cache=scores)
        if for_study_only:
            aside[dataset] = table
            continue
        entry["confidently_wrong_test"] = int(table.confidently_wrong[table.rows("test")].sum())
        tables[dataset] = table
        lengths[dataset] = np.array([len(r.get("context") or r["question"]) for r in rows])

        if variants and (args.robustness_datasets is None or dataset in args.robustness_datasets):
            test_rows = [r for r, s in zip(rows, split) if s == "test"]
            for variant in variants:
                vfeatures = {loss: _ensure_features(handle, _feature_store(cache, args.model, dataset, variant, loss),
                                                    test_rows, variant, loss, None) for loss in ("pre", "pos")}
                vsampling = test_rows if args.sampling_rows != "none" else []
                vscores = _ensure_baselines(handle, cache, args.model, dataset, test_rows, vsampling, variant, config)
                perturbed[(dataset, variant)] = build_table(dataset, variant, test_rows,
                                                            np.array(["test"] * len(test_rows), dtype=object),
                                                            features=vfeatures, baseline_cache=vscores)
    skipped = [d for d, e in info.items() if not e.get("eligible")]
    if skipped:
        notes.append("Not benchmarked: " + "; ".join(f"{d} ({info[d].get('reason')})" for d in skipped) + ".")
    t = time.perf_counter()
    if not tables:  # still worth writing down: which datasets were looked at and why none qualified
        from dataclasses import asdict

        from ..evaluation import BenchmarkResult

        notes.append(f"No dataset has at least {protocol.min_per_class} labelled questions of each class for "
                     f"{args.model}: nothing was benchmarked.")
        result = BenchmarkResult(args.model, asdict(protocol), info, [], [], [], [], [], notes)
    else:
        pairs = _condition_pairs(args, tables, aside, lengths, protocol, notes)
        result = run_benchmark(args.model, tables, perturbed, info, protocol, notes=notes, condition_pairs=pairs)
    written = write_results(result, out, figures=not args.no_figures)
    _log(f"studies {time.perf_counter() - t:.1f} s; wrote {len(written)} files to {out}")
    print((out / "main_table.md").read_text(encoding="utf-8"))
    return 0


def _condition_pairs(args, tables: dict, aside: dict, lengths: dict, protocol, notes: list[str]) -> dict:
    """Study name -> (table, table) for :func:`grade.evaluation.condition_transfer`."""
    from ..evaluation import length_halves

    pairs = {}
    if args.document_pair:
        with_doc, without = args.document_pair
        first, second = tables.get(with_doc) or aside.get(with_doc), tables.get(without) or aside.get(without)
        if first is None or second is None:
            notes.append(f"With/without-document study not run: {with_doc} and {without} need labelled questions "
                         f"of both classes (at least 5 each without the document).")
        else:
            pairs["with/without document"] = (first, second)
    for name in args.length_split or []:
        if name not in tables:
            notes.append(f"Short/long study not run for {name}: it is not in the main table.")
            continue
        short, long, median = length_halves(tables[name], lengths[name], protocol)
        pairs[f"short/long ({name})"] = (short, long)
        counts = ", ".join(f"{t.dataset} {len(t.y)} questions ({int(t.y.sum())} answerable)" for t in (short, long))
        notes.append(f"Short/long study on {name}: split at the median document length of {median:.0f} characters; "
                     f"{counts}.")
    return pairs


def _display(path: Path) -> str:
    try:
        return str(path.resolve().relative_to(REPO_ROOT))
    except ValueError:
        return str(path)


def _label_files(spec: str, dirs: list[Path]) -> tuple[str, list[Path]]:
    """``name`` -> the first ``<dir>/<name>.jsonl[.xz|.gz]`` found; ``NAME=FILE,FILE`` -> those files pooled."""
    if "=" in spec:
        name, files = spec.split("=", 1)
        return name.strip(), [Path(f).expanduser() for f in files.split(",") if f.strip()]
    for folder in dirs:
        found = find_jsonl(folder, spec)
        if found is not None:
            return spec, [found]
    return spec, []


def _two_way_split(y, train_share: float, seed: int):
    """Development rows -> train / val (stratified, seeded) when a separate test set is given."""
    import numpy as np

    from ..probe import stratified_split

    train, val = stratified_split(y, fractions=(train_share, 1 - train_share), seed=seed)
    split = np.empty(len(y), dtype=object)
    split[train], split[val] = "train", "val"
    return split
