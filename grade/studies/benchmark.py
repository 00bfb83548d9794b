"""The benchmark: GRADE next to the baselines, on the same labelled questions of one model.

For a list of datasets (labelled files) it fills the caches that are missing (GRADE_pre / GRADE_pos
feature stores and per-question baseline scores, under ``<cache dir>/<model>/``; only this part needs
the model, loaded on first use) and then runs every study from the caches alone
(:func:`grade.studies.run_studies`):

* the main table: Acc and AUROC (95% bootstrap CI) per method and dataset;
* transfer: the supervised detectors trained on dataset A, tested on dataset B;
* robustness: the same test questions with a reworded instruction / added irrelevant text;
* ablations, confidently wrong questions, and the with/without-document and short/long-document studies.

``offline`` never loads the model: the tables are regenerated from the caches in seconds. With
``eval_labels_dir`` the questions of ``<eval_labels_dir>/<dataset>.jsonl`` (never seen during
development) are the test set and every development row trains or validates.

Every feature row, the perturbed ones included, is made by :func:`grade.batch.features.extract_features`
into a :class:`~grade.batch.features.FeatureStore`: one response rule under ``pos``
(:func:`grade.batch.features.given_response`), one record schema.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import numpy as np

from ..verdict.detectors.baselines import BaselineConfig, cache_path, read_cache, read_caches, safe_name, score_items, task_prompt
from ..common.errors import InputError
from ..batch.features import FeatureStore, extract_features, load_features, row_key
from ..common.io import find_jsonl, open_text
from ..models.models import LoadedModel
from . import BenchmarkResult, Protocol, assign_splits, build_table, length_halves, read_labels, run_studies, select_rows
from .runs import OPTIONAL_STUDIES, chosen_studies

log = logging.getLogger(__name__)

DEFAULT_DATASETS = ("triviaqa", "nq_open", "hotpotqa", "mmlu", "gsm8k", "math")
SAMPLING_ROWS = ("all", "eval", "none")


@dataclass
class BenchmarkConfig:
    """What one benchmark run covers. Relative paths are relative to the working directory; the package
    names no folder of its own (``python -m grade benchmark`` keeps the documented defaults).

    cache_dir : feature stores and baseline caches, ``<cache_dir>/<model>/{features,baselines}``.
    datasets : label file stems looked up in ``labels_dirs``, or ``NAME=FILE[,FILE...]`` to pool files.
    labels_dirs : folders searched in order (default: ``<cache_dir>/<model>/labels`` only).
    features : extra feature stores (from ``grade extract``) to reuse before computing.
    sampling_rows : rows that get the sampling baselines: ``all``, ``eval`` (validation + test), ``none``.
    variants : perturbations for the robustness study (test rows only).
    robustness_datasets : datasets that get the perturbed runs (None: all eligible).
    document_pair : (WITH, WITHOUT): the same questions with and without their document.
    length_split : datasets split at the median length of their documents for a short/long study.
    studies : which of :data:`grade.studies.runs.OPTIONAL_STUDIES` run besides the main table (None: all; "none": none).
    """

    model: str
    cache_dir: Path
    datasets: list[str] = field(default_factory=lambda: list(DEFAULT_DATASETS))
    labels_dirs: list[Path] | None = None
    eval_labels_dir: Path | None = None
    features: list[Path] = field(default_factory=list)
    offline: bool = False
    protocol: Protocol = field(default_factory=Protocol)
    samples: int = 10
    sampling_rows: str = "eval"
    variants: list[str] = field(default_factory=lambda: ["reworded", "irrelevant"])
    robustness_datasets: list[str] | None = None
    document_pair: tuple[str, str] | None = None
    length_split: list[str] = field(default_factory=list)
    batch_size: int | None = None  # rows a batched model pass takes (None: the rule of grade.models.sizing)
    studies: tuple[str, ...] | list[str] | None = OPTIONAL_STUDIES  # a tuple after __post_init__

    def __post_init__(self):
        if self.sampling_rows not in SAMPLING_ROWS:
            raise InputError(f"sampling rows must be one of {', '.join(SAMPLING_ROWS)}")
        self.cache_dir = Path(self.cache_dir)
        if self.labels_dirs is None:
            self.labels_dirs = [self.cache_dir / safe_name(self.model) / "labels"]
        self.labels_dirs = [Path(d) for d in self.labels_dirs]
        self.variants = [v for v in self.variants if v != "none"]
        self.studies = chosen_studies(self.studies)


class LazyModel:
    """Loads the model on first use only, so a run with full caches never touches it."""

    def __init__(self, load: Callable[[], LoadedModel], offline: bool):
        self._load, self.offline, self.lm = load, offline, None

    def get(self) -> LoadedModel:
        if self.lm is None:
            if self.offline:
                raise InputError("the caches are incomplete and --offline forbids loading the model")
            self.lm = self._load()
        return self.lm


def feature_store(cache: Path, model: str, dataset: str, variant: str, loss: str) -> FeatureStore:
    """``<cache>/<model>/features/<dataset>[.<variant>].<loss>.parquet``."""
    name = dataset + ("" if variant == "original" else f".{variant}")
    return FeatureStore(Path(cache) / safe_name(model) / "features" / f"{name}.{loss}.parquet")


def ensure_features(model: LazyModel, store: FeatureStore, rows: list[dict], variant: str, loss: str, extra,
                    say: Callable[[str], None], batch_size: int | None = None):
    """Feature DataFrame for ``rows`` under ``variant`` (computing the missing ones unless offline).

    A stored ``pos`` row whose response is no longer the row's is missing too (computed again, or
    left out offline): every row scores the response :func:`grade.batch.features.given_response` names.
    """
    import pandas as pd

    have, frames = set(), []
    if extra is not None and variant == "original":
        wanted = {row_key(r) for r in rows}
        keys = list(zip(extra["dataset"], extra["id"], extra["has_context"].astype(bool)))
        sub = extra[[(k in wanted) and l == loss for k, l in zip(keys, extra["loss"])]]
        if len(sub):
            frames.append(sub)
            have |= set(zip(sub["dataset"], sub["id"], sub["has_context"].astype(bool)))
    stale = store.stale_keys(rows) if loss == "pos" else set()
    have |= store.keys() - stale
    missing = [r for r in rows if row_key(r) not in have]
    if missing and not model.offline:
        lm = model.get()
        t = time.perf_counter()
        say(f"  GRADE_{loss} features ({variant}) for {len(missing)} questions -> {store.path}")
        prompt_for = None if variant == "original" else (lambda row: task_prompt(lm, row, variant))
        extract_features(lm, missing, store.path, loss=loss, keep_hidden=False, chunk_size=16, prompt_for=prompt_for,
                         batch_size=batch_size)
        say(f"  ... {time.perf_counter() - t:.0f} s")
        stale = set()
    elif missing:
        say(f"  {len(missing)} questions have no GRADE_{loss} features ({variant}); offline: left out")
    if store.parts():
        frame = store.read(hidden=False)
        if stale:
            keys = zip(frame["dataset"], frame["id"], frame["has_context"].astype(bool))
            frame = frame[[k not in stale for k in keys]]
        frames.append(frame)
    return pd.concat(frames, ignore_index=True) if frames else None


def ensure_baselines(model: LazyModel, cache: Path, name: str, dataset: str, rows: list[dict],
                     sampling_rows: list[dict], variant: str, config: BaselineConfig,
                     say: Callable[[str], None], batch_size: int | None = None) -> dict:
    """Baseline records (id -> record) for ``rows`` (computing the missing passes unless offline)."""
    main = cache_path(cache, name, dataset, variant)
    samples = cache_path(cache, name, dataset, variant, part="samples")
    for path, todo_rows, parts in ((main, rows, ("answer", "ic", "judge")), (samples, sampling_rows, ("samples",))):
        if not todo_rows:
            continue
        done = read_cache(path)
        missing = [r for r in todo_rows if str(r["id"]) not in done]
        if not missing:
            continue
        if model.offline:
            say(f"  {len(missing)} questions lack baseline passes {'+'.join(parts)} ({variant}); offline: left out")
            continue
        lm = model.get()
        t = time.perf_counter()
        say(f"  baselines {'+'.join(parts)} ({variant}) for {len(missing)} questions -> {path}")

        def progress(i, n, record):
            if i == n or i % 10 == 0:
                say(f"    {i}/{n}  {time.perf_counter() - t:.0f} s")

        score_items(lm, missing, path, variant=variant, config=config, parts=parts, callback=progress,
                    batch_size=batch_size)
    return read_caches([main, samples])


def label_files(spec: str, dirs: list[Path]) -> tuple[str, list[Path]]:
    """``name`` -> the first ``<dir>/<name>.jsonl[.xz|.gz]`` found; ``NAME=FILE,FILE`` -> those files pooled."""
    if "=" in spec:
        name, files = spec.split("=", 1)
        return name.strip(), [Path(f).expanduser() for f in files.split(",") if f.strip()]
    for folder in dirs:
        found = find_jsonl(folder, spec)
        if found is not None:
            return spec, [found]
    return spec, []


def display_path(path: Path) -> str:
    """A path as the summary records it: relative to the working directory where it lies below it."""
    try:
        return str(Path(path).resolve().relative_to(Path.cwd().resolve()))
    except ValueError:
        return str(path)


def two_way_split(y, train_share: float, seed: int):
    """Development rows -> train / val (stratified, seeded) when a separate test set is given."""
    from ..verdict.probe import stratified_split

    train, val = stratified_split(y, fractions=(train_share, 1 - train_share), seed=seed)
    split = np.empty(len(y), dtype=object)
    split[train], split[val] = "train", "val"
    return split


@dataclass
class BenchmarkTables:
    """What the studies read, assembled from the caches: one :class:`~grade.studies.Table` per benchmarked
    dataset (``tables``; its ``split`` is the protocol's), the perturbed test questions, each dataset's
    class counts and split (``info``), tables kept for the with/without-document study only (``aside``),
    each row's document length (``lengths``) and notes for the summary."""

    tables: dict = field(default_factory=dict)
    perturbed: dict = field(default_factory=dict)
    info: dict = field(default_factory=dict)
    aside: dict = field(default_factory=dict)
    lengths: dict = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)


def run_benchmark(config: BenchmarkConfig, load_model: Callable[[], LoadedModel],
                  say: Callable[[str], None] = log.info) -> BenchmarkResult:
    """Fill the missing caches (loading the model through ``load_model`` only if one is missing and the
    run is not offline) and run every study. Returns the :class:`~grade.studies.BenchmarkResult`."""
    built = build_tables(config, load_model, say)
    tables, info, notes = built.tables, built.info, built.notes
    if not tables:  # still worth writing down: which datasets were looked at and why none qualified
        from dataclasses import asdict

        notes.append(f"No dataset has at least {config.protocol.min_per_class} labelled questions of each class for "
                     f"{config.model}: nothing was benchmarked.")
        return BenchmarkResult(config.model, asdict(config.protocol), info, [], [], [], [], [], notes)
    # the pairs, and their notes, only for a run that studies them
    pairs = condition_pairs(config, tables, built.aside, built.lengths, notes) if "conditions" in config.studies else {}
    return run_studies(config.model, tables, built.perturbed, info, config.protocol, notes=notes, condition_pairs=pairs,
                       studies=config.studies)


def build_tables(config: BenchmarkConfig, load_model: Callable[[], LoadedModel] | None,
                 say: Callable[[str], None] = log.info) -> BenchmarkTables:
    """The benchmark's tables: label files read, rows selected and split by the protocol, the missing
    caches filled (``load_model`` is called only then; None or ``config.offline``: never), everything
    assembled per dataset. Other readers of the benchmark's questions and splits (the shipped
    detectors, ``scripts/build/build_detectors.py``) start here too."""
    protocol, cache = config.protocol, config.cache_dir
    extra = load_features(config.features, hidden=False) if config.features else None
    baseline_config = BaselineConfig(n_samples=config.samples)
    model = LazyModel(load_model, config.offline or load_model is None)

    tables, perturbed, info = {}, {}, {}
    aside: dict = {}  # tables built for the with/without-document study only (below min_per_class)
    lengths: dict = {}  # dataset -> document length of each row, for length_split
    study_only = {config.document_pair[1]} if config.document_pair else set()
    notes: list[str] = []
    for spec in config.datasets:
        dataset, paths = label_files(spec, config.labels_dirs)
        missing_files = [p for p in paths if not p.is_file()]
        if not paths or missing_files:
            where = ", ".join(display_path(p) for p in missing_files) or " or ".join(
                display_path(d / f"{dataset}.jsonl") for d in config.labels_dirs)
            info[dataset] = {"eligible": False, "reason": f"no labelled file ({where})"}
            say(f"{dataset}: no labelled file ({where})")
            continue
        labelled = [row for p in paths for row in read_labels(p)]
        all_rows = sum(1 for p in paths for line in open_text(p) if line.strip())
        rows, entry = select_rows(labelled, protocol, dataset)
        entry["labelled_files"] = [display_path(p) for p in paths]
        entry["questions_sampled"] = all_rows
        entry["no_label"] = all_rows - len(labelled)
        eval_rows = []
        if config.eval_labels_dir:
            eval_path = find_jsonl(config.eval_labels_dir, dataset)
            if eval_path is None:
                entry.update(eligible=False, reason=f"no labelled file {Path(config.eval_labels_dir) / dataset}.jsonl")
            else:
                dev_ids = {r["id"] for r in rows}
                eval_rows = [r for r in read_labels(eval_path) if r["id"] not in dev_ids]
                y_eval = np.array([r["label"] for r in eval_rows])
                entry["eval"] = {"answerable": int(y_eval.sum()), "unanswerable": int(len(y_eval) - y_eval.sum())}
        for_study_only = False
        if not entry["eligible"]:
            entry.setdefault("reason", f"fewer than {protocol.min_per_class} questions in one class "
                                       f"({entry['answerable']} answerable, {entry['unanswerable']} unanswerable)")
            info[dataset] = entry
            # A condition of the with/without-document study needs only a few of each class to fit and test on.
            if dataset in study_only and min(entry["answerable"], entry["unanswerable"]) >= 5 and not config.eval_labels_dir:
                for_study_only = True
                entry["reason"] += "; used in the with/without-document study only"
                say(f"{dataset}: not in the main table ({entry['reason']})")
            else:
                say(f"{dataset}: skipped, {entry['reason']}")
                continue
        y = np.array([r["label"] for r in rows])
        if config.eval_labels_dir:
            train_val = np.array(protocol.fractions[:2]) / sum(protocol.fractions[:2])
            split_dev = two_way_split(y, train_val[0], protocol.seed)
            rows = rows + eval_rows
            split = np.concatenate([split_dev, np.array(["test"] * len(eval_rows), dtype=object)])
            y = np.array([r["label"] for r in rows])
        else:
            split = assign_splits([r["id"] for r in rows], y, protocol)
        entry["split"] = {part: {"n": int((split == part).sum()), "answerable": int(y[split == part].sum())}
                          for part in ("train", "val", "test")}
        entry["confidently_wrong_test"] = None
        info[dataset] = entry
        say(f"{dataset}: {entry['answerable']} answerable, {entry['unanswerable']} unanswerable; "
            f"using {len(rows)} (" + ", ".join(f"{k} {v['n']}" for k, v in entry["split"].items()) + ")")

        features = {loss: ensure_features(model, feature_store(cache, config.model, dataset, "original", loss), rows,
                                          "original", loss, extra, say, config.batch_size) for loss in ("pre", "pos")}
        sampling = {"all": rows, "none": [],
                    "eval": [r for r, s in zip(rows, split) if s in ("val", "test")]}[config.sampling_rows]
        scores = ensure_baselines(model, cache, config.model, dataset, rows, sampling, "original", baseline_config, say,
                                  config.batch_size)
        table = build_table(dataset, "original", rows, split, features=features, baseline_cache=scores)
        if for_study_only:
            aside[dataset] = table
            continue
        entry["confidently_wrong_test"] = int(table.confidently_wrong[table.rows("test")].sum())
        tables[dataset] = table
        lengths[dataset] = np.array([len(r.get("context") or r["question"]) for r in rows])

        if config.variants and (config.robustness_datasets is None or dataset in config.robustness_datasets):
            test_rows = [r for r, s in zip(rows, split) if s == "test"]
            for variant in config.variants:
                vfeatures = {loss: ensure_features(model, feature_store(cache, config.model, dataset, variant, loss),
                                                   test_rows, variant, loss, None, say, config.batch_size)
                             for loss in ("pre", "pos")}
                vsampling = test_rows if config.sampling_rows != "none" else []
                vscores = ensure_baselines(model, cache, config.model, dataset, test_rows, vsampling, variant,
                                           baseline_config, say, config.batch_size)
                perturbed[(dataset, variant)] = build_table(dataset, variant, test_rows,
                                                            np.array(["test"] * len(test_rows), dtype=object),
                                                            features=vfeatures, baseline_cache=vscores)
    skipped = [d for d, e in info.items() if not e.get("eligible")]
    if skipped:
        notes.append("Not benchmarked: " + "; ".join(f"{d} ({info[d].get('reason')})" for d in skipped) + ".")
    return BenchmarkTables(tables, perturbed, info, aside, lengths, notes)


def condition_pairs(config: BenchmarkConfig, tables: dict, aside: dict, lengths: dict, notes: list[str]) -> dict:
    """Study name -> (table, table) for :func:`grade.studies.condition_transfer`."""
    pairs = {}
    if config.document_pair:
        with_doc, without = config.document_pair
        first, second = tables.get(with_doc) or aside.get(with_doc), tables.get(without) or aside.get(without)
        if first is None or second is None:
            notes.append(f"With/without-document study not run: {with_doc} and {without} need labelled questions "
                         f"of both classes (at least 5 each without the document).")
        else:
            pairs["with/without document"] = (first, second)
    for name in config.length_split or []:
        if name not in tables:
            notes.append(f"Short/long study not run for {name}: it is not in the main table.")
            continue
        short, long, median = length_halves(tables[name], lengths[name], config.protocol)
        pairs[f"short/long ({name})"] = (short, long)
        counts = ", ".join(f"{t.dataset} {len(t.y)} questions ({int(t.y.sum())} answerable)" for t in (short, long))
        notes.append(f"Short/long study on {name}: split at the median document length of {median:.0f} characters; "
                     f"{counts}.")
    return pairs


def write_results(result: BenchmarkResult, out: str | Path, *, figures: bool = True) -> list[Path]:
    """The result's tables (:meth:`~grade.studies.BenchmarkResult.save`) and, where Plotly is installed,
    its figures as PNG (:func:`grade.studies.report.write_figures`)."""
    written = result.save(out)
    if figures:
        from .report import write_figures

        written += write_figures(result, out)
    return written
