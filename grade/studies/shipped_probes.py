"""The shipped probes scored as shipped, on the labelled questions each of them never saw.

The cross-fitted benchmark (:mod:`grade.studies.crossfit`) measures the shipped probe's *form*, refitted on each
dataset's folds. What a user gets is one artifact (``grade/assets/probes``), trained once on a capped, pooled split
of the labels of its day. This module measures that artifact: it finds again the questions the probe trained and
early-stopped on (the training table rebuilt from the feature stores and the label files it was built from, split
by :func:`grade.verdict.probe.training.split_rows`, the split checked against the class balances the probe's
metadata recorded: a probe whose split cannot be found again is not scored), and scores every other labelled
question of the benchmark's stores with the probe the app would pick for its task
(:func:`grade.verdict.verdict.default_probe`), with today's labels. These numbers are what the verdict card cites
(:mod:`grade.verdict.measured`, method ``GRADE_<loss> (shipped probe)``).

Those leftover questions are not a fair sample (the probes trained on nearly every answerable question), so a model
with every labelled question's features (Qwen2.5-Coder-1.5B-Instruct) gets a **held-out split drawn before
training** (:func:`draw_heldout`): per dataset and class, seeded, large enough that every pool of datasets the cards
cite (:data:`grade.verdict.detectors.routing.QUESTION_KINDS`) holds at least :data:`HELDOUT_TARGET` questions of each
class. The shipped probes and detectors are trained on the rest (``scripts/build/build_probes.py``,
``scripts/build/build_detectors.py``) and scored here on the split, each question by what the app would use for it
(:func:`heldout_probe_scores`, :func:`heldout_detector_scores`): ``results/<model>/heldout_scores.csv.xz``, from
which :func:`grade.verdict.measured.build_measured` computes every cited row, per dataset and pooled.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from ..common.metrics import bootstrap_ci, class_balance, heldout_metrics
from ..verdict.measured import DETECTOR_ITSELF, PROBE_METHODS
from ..verdict.detectors.routing import QUESTION_KINDS, kind_of_dataset

#: The benchmark's name of a labelled file's dataset where the two differ (the store's ``hotpotqa`` is closed book).
BENCHMARK_NAMES = {"hotpotqa": "hotpotqa_closed", "hotpotqa_context": "hotpotqa"}
#: The names the cards look the numbers up by (grade.verdict.measured): the probe itself, a detector itself.
METHOD, DETECTOR_METHOD = PROBE_METHODS[0], DETECTOR_ITSELF
#: Each pool of datasets a card cites gets at least this many held-out questions of each class where it has them
#: (40, grade.verdict.measured.MIN_PER_CLASS, with a margin for a class a store lacks a few rows of).
HELDOUT_TARGET = 48
#: The held-out share of each dataset and class: at least this much (a fair sample of every dataset) and at most
#: the upper bound (the probe keeps most of a thin class to learn from; MMLU's 82 answerable questions meet it).
HELDOUT_FRACTIONS = (0.2, 0.55)
HELDOUT_SEED = 2026
SPLIT_FILE, SCORES_FILE = "heldout_split.csv", "heldout_scores.csv.xz"


def _metrics(y: np.ndarray, p: np.ndarray, threshold: float, n_boot: int, ci: float, seed: int) -> dict:
    """AUROC with its interval and accuracy at ``threshold`` with its interval (both stratified bootstraps)."""
    m = heldout_metrics(y, p, threshold, n_boot=n_boot, ci=ci, seed=seed)
    m["acc_lo"], m["acc_hi"] = bootstrap_ci(y, p, lambda t, s: float(((s >= threshold) == t).mean()),
                                            n_boot=n_boot, ci=ci, seed=seed)
    return m


def seen_questions(info, loss: str, labels_dirs: list[Path], features_dir: Path, *, max_unanswerable: int,
                   datasets: tuple[str, ...] | None = None) -> set[tuple[str, str]] | None:
    """(dataset, id) of the rows ``info``'s probe trained or early-stopped on (its train and validation parts),
    rebuilt from ``features_dir`` (a copy: the stores are brought in line with ``labels_dirs``' label files, which
    must be those the probe was built from); None when the rebuilt split's class balances differ from those the
    probe recorded."""
    from ..verdict.probe.training import split_rows
    from ..verdict.training_sets import MAX_PER_CLASS, current_rows, extract_all

    stores = extract_all(info.model, loss, labels_dirs, features_dir, compute=False, max_unanswerable=max_unanswerable)
    df = current_rows(stores, hidden=False)
    if datasets:
        df = df[df["dataset"].isin(datasets)]
    df = df.reset_index(drop=True)
    split = info.metadata["training_data"]["split"]
    _, _, parts = split_rows(df, seed=split["seed"], fractions=tuple(split["fractions"]),
                             max_per_class=info.metadata["training_data"].get("max_per_class") or MAX_PER_CLASS)
    y = df["label"].to_numpy().astype(int)
    if any(class_balance(y[rows]) != split[name] for name, rows in zip(("train", "validation", "test"), parts)):
        return None
    used = np.concatenate(parts[:2])
    return set(zip(df["dataset"].iloc[used], df["id"].iloc[used].astype(str)))


def score_unseen(probe, seen: set[tuple[str, str]], store_frames: dict, *, n_boot: int = 1000, ci: float = 0.95,
                 seed: int = 0) -> dict[str, dict]:
    """Per benchmark dataset: ``probe``'s AUROC (bootstrap interval) and accuracy at its threshold on the labelled
    rows of ``store_frames`` ({store name: feature table}) not in ``seen``."""
    from ..verdict.probe import probe_inputs

    out = {}
    for store_name, frame in store_frames.items():
        rows = frame[frame["label"].isin([0, 1])]
        rows = rows[[(d, str(i)) not in seen for d, i in zip(rows["dataset"], rows["id"])]]
        if rows.empty or rows["label"].nunique() < 2:
            continue
        y = rows["label"].to_numpy().astype(int)
        p = np.asarray(probe.predict_proba(probe_inputs(rows, probe.inputs)))[:, 1]
        out[BENCHMARK_NAMES.get(store_name, store_name)] = _metrics(y, p, probe.threshold, n_boot, ci, seed)
    return out


# ------------------------------------------------------------------------------------------------ detectors


def detector_seen(detector, tables: dict) -> dict[str, set[str]] | None:
    """Per dataset, the ids a shipped detector trained or selected on: the train and validation rows of the
    benchmark tables it was built from (``tables``: the capped run's :func:`grade.studies.benchmark.build_tables`);
    None when their class balances differ from those the detector recorded."""
    seen = {}
    for dataset, kind in detector.kinds.items():
        table = tables.get(dataset)
        if table is None:
            return None
        for part, name in (("train", "train"), ("val", "validation")):
            rows = table.rows(part)
            if kind.get(name) != {"n": int(len(rows)), "answerable": int(table.y[rows].sum())}:
                return None
        seen[dataset] = {str(i) for i in table.ids[table.rows(("train", "val"))]}
    return seen


def score_detector_unseen(detector, seen: dict[str, set[str]], tables: dict, *, n_boot: int = 1000, ci: float = 0.95,
                          seed: int = 0) -> dict[str, dict]:
    """Per dataset the detector was trained on: its AUROC (bootstrap interval) and accuracy at its threshold on
    the rows of ``tables`` (every labelled question: :class:`~grade.studies.tables.Table` per dataset) outside
    ``seen`` whose statistic the caches hold."""
    from ..verdict.detectors.model_statistics import table_statistic

    out = {}
    for dataset in detector.kinds:
        table = tables.get(dataset)
        if table is None:
            continue
        X = table_statistic(table, detector.spec.statistic)
        keep = np.isfinite(X).all(axis=1) & ~np.isin(table.ids.astype(str), list(seen[dataset]))
        y = table.y[keep].astype(int)
        if len(y) == 0 or len(np.unique(y)) < 2:
            continue
        p = detector.predict_proba(X[keep], [dataset] * len(y))[:, 1]
        out[dataset] = _metrics(y, p, float(detector.metadata.get("threshold", 0.5)), n_boot, ci, seed)
    return out


# ------------------------------------------------------------------------------------------------ held-out split


def heldout_fraction(answerable: int, unanswerable: int, target: int = HELDOUT_TARGET) -> float:
    """The share of a pool (and of each of its datasets and classes) held out: enough that the smaller class
    gives ``target`` questions, within :data:`HELDOUT_FRACTIONS`."""
    low, high = HELDOUT_FRACTIONS
    smaller = min(answerable, unanswerable)
    return high if smaller <= 0 else float(np.clip(target / smaller, low, high))


def draw_heldout(rows, seed: int = HELDOUT_SEED):
    """The held-out split, drawn before any training. ``rows``: a frame of every labelled question (``dataset``
    in benchmark names, ``id``, ``label`` 0/1, ``scored``: False where some store lacks the question's features,
    e.g. MATH's GRADE_pos); returns it with a boolean ``heldout`` column. Per pool of datasets a card cites, the
    share :func:`heldout_fraction` of its smaller class among the questions every store scores; each dataset,
    class and ``scored`` group then gives that share (rounded up), picked by a seeded permutation."""
    import pandas as pd

    rows = rows.reset_index(drop=True).copy()
    rows["pool"] = [getattr(kind_of_dataset(d), "name", d) for d in rows["dataset"]]
    rng = np.random.default_rng(seed)
    held = np.zeros(len(rows), dtype=bool)
    for _, pool in rows.groupby("pool", sort=True):
        scored = pool[pool["scored"]]
        share = heldout_fraction(int(scored["label"].sum()), int((scored["label"] == 0).sum()))
        for _, group in pool.groupby(["dataset", "label", "scored"], sort=True):
            order = np.sort(group.index.to_numpy())  # the frame's order is the label files'; ids sorted within
            order = order[np.argsort(group.loc[order, "id"].astype(str).to_numpy(), kind="stable")]
            take = int(np.ceil(share * len(order)))
            held[rng.permutation(order)[:take]] = True
    rows["heldout"] = held
    return pd.DataFrame(rows.drop(columns="pool"))


def heldout_probe_scores(model: str, heldout, store_frames: dict, probes=None):
    """Each held-out question scored by the shipped probe the app picks for its task
    (:func:`grade.verdict.verdict.default_probe`), per loss. ``heldout``: :func:`draw_heldout`'s held-out rows;
    ``store_frames``: {(loss, benchmark dataset name): feature table}. Returns rows of (dataset, id, label, method,
    probe, score, threshold)."""
    from ..verdict.probe import Probe, list_probes, probe_inputs
    from ..verdict.verdict import default_probe

    probes = list_probes() if probes is None else probes
    keys = set(zip(heldout["dataset"], heldout["id"].astype(str)))
    out, loaded = [], {}
    for (loss, dataset), frame in sorted(store_frames.items()):
        rows = frame[np.array([(dataset, str(i)) in keys for i in frame["id"]], dtype=bool) & frame["label"].isin([0, 1])]
        for task, part in rows.groupby("task"):
            info = default_probe(model, probes, loss=loss, task=task)
            if info is None or info.loss != loss:
                continue
            probe = loaded.setdefault(info.name, Probe.load(info.path))
            p = np.asarray(probe.predict_proba(probe_inputs(part, probe.inputs)))[:, 1]
            out += [{"dataset": dataset, "id": str(i), "label": int(y), "method": METHOD.format(loss=loss),
                     "probe": info.name, "score": float(v), "threshold": float(probe.threshold)}
                    for i, y, v in zip(part["id"], part["label"], p)]
    return out


def heldout_detector_scores(detectors, tables: dict, heldout):
    """Each held-out question scored by each shipped detector under the kind the app routes its question to
    (:meth:`~grade.verdict.detectors.Detector.kind_of` of its task and document condition). ``tables``: every
    labelled question's benchmark tables (:class:`~grade.studies.tables.Table` per dataset). Rows as
    :func:`heldout_probe_scores`' (``probe``: the detector's name)."""
    from ..verdict.detectors.model_statistics import table_statistic

    keys = set(zip(heldout["dataset"], heldout["id"].astype(str)))
    out = []
    for detector in detectors:
        method = DETECTOR_METHOD.format(form=detector.spec.measured_as)
        threshold = float(detector.metadata.get("threshold", 0.5))
        for dataset, table in sorted(tables.items()):
            X = table_statistic(table, detector.spec.statistic)
            rows = np.flatnonzero(np.isfinite(X).all(axis=1)
                                  & np.array([(dataset, str(i)) in keys for i in table.ids], dtype=bool))
            if not len(rows):
                continue
            task = str(table.task[rows[0]]) if table.task is not None else "qa"
            has_context = bool(table.has_context[rows[0]]) if table.has_context is not None else False
            kind, _ = detector.kind_of(task, has_context)
            if kind is None:
                continue
            p = detector.predict_proba(X[rows], [kind] * len(rows))[:, 1]
            out += [{"dataset": dataset, "id": str(table.ids[r]), "label": int(table.y[r]), "method": method,
                     "probe": detector.name, "score": float(v), "threshold": threshold} for r, v in zip(rows, p)]
    return out


def read_split(path: Path) -> set[tuple[str, str]]:
    """(benchmark dataset name, id) of every question of a held-out split file (:data:`SPLIT_FILE`)."""
    import csv

    with Path(path).open(encoding="utf-8", newline="") as fh:
        return {(row["dataset"], str(row["id"])) for row in csv.DictReader(fh)}


def labels_without_heldout(model: str, labels_dirs: list[Path], split_path: Path, out_dir: Path) -> list[Path]:
    """Copies of ``model``'s label files (:func:`grade.verdict.training_sets.label_files`) without the questions of
    the held-out split at ``split_path``, written under ``out_dir/<model>/``; returns ``[out_dir]``, the labels
    folder a build trains from, so that the split stays out of every probe and detector it builds."""
    import json

    from ..batch.features import read_labelled
    from ..common.io import jsonl_stem
    from ..verdict.training_sets import label_files

    held = read_split(split_path)
    folder = Path(out_dir) / model
    folder.mkdir(parents=True, exist_ok=True)
    for file in label_files(model, labels_dirs):
        name = BENCHMARK_NAMES.get(jsonl_stem(file), jsonl_stem(file))
        rows = [r for r in read_labelled(file, keep_unlabelled=True) if (name, str(r.get("id"))) not in held]
        with (folder / f"{jsonl_stem(file)}.jsonl").open("w", encoding="utf-8") as fh:
            fh.writelines(json.dumps(r, ensure_ascii=False) + "\n" for r in rows)
    return [Path(out_dir)]


def every_question_tables(model: str, data_root: Path, config):
    """The benchmark's tables (:class:`~grade.studies.benchmark.BenchmarkTables`) of every labelled question of
    ``model`` built from ``config`` (:func:`grade.commands.benchmark.every_question_config`: the datasets of its
    repository run without a cap, the caches read from ``data_root``); the prompt entropy (GRADE_pre's loss, the
    "Entropy after the prompt" detector's statistic) taken from the feature stores of every labelled question
    (``crossfit_features``) where the run's own caches lack it."""
    from ..batch.features import load_features
    from .benchmark import build_tables

    built = build_tables(config, None, lambda line: None)
    tables = built.tables
    folder = Path(config.cache_dir) / model / "crossfit_features" / "pre"
    for store in sorted(folder.glob("*.parquet")):
        frame = load_features(store, hidden=False)
        table = tables.get(BENCHMARK_NAMES.get(store.stem, store.stem))
        if table is None:
            continue
        loss = dict(zip(frame["id"].astype(str), frame["loss_value"]))
        values = np.array([loss.get(str(i), np.nan) for i in table.ids], dtype=float)
        table.prompt_entropy = (values if table.prompt_entropy is None
                                else np.where(np.isfinite(table.prompt_entropy), table.prompt_entropy, values))
    return built


def split_for_heldout(tables: dict, held: set[tuple[str, str]], seed: int = 42, validation: float = 0.25) -> dict:
    """``tables`` with their split replaced: the held-out questions (``held``: (dataset, id)) are the test rows, the
    rest train and validation (``validation`` of each dataset and class, seeded), so that a detector fitted on them
    never sees a held-out question."""
    rng = np.random.default_rng(seed)
    for dataset, table in tables.items():
        split = np.array(["train"] * len(table.ids), dtype=object)
        test = np.array([(dataset, str(i)) in held for i in table.ids], dtype=bool)
        split[test] = "test"
        for label in (0, 1):
            rest = np.flatnonzero(~test & (table.y == label))
            split[rng.permutation(rest)[:int(round(validation * len(rest)))]] = "val"
        table.split = split
    return tables
