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
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from ..common.metrics import bootstrap_ci, class_balance, heldout_metrics
from ..verdict.measured import DETECTOR_ITSELF, PROBE_METHODS

#: The benchmark's name of a labelled file's dataset where the two differ (the store's ``hotpotqa`` is closed book).
BENCHMARK_NAMES = {"hotpotqa": "hotpotqa_closed", "hotpotqa_context": "hotpotqa"}
#: The names the cards look the numbers up by (grade.verdict.measured): the probe itself, a detector itself.
METHOD, DETECTOR_METHOD = PROBE_METHODS[0], DETECTOR_ITSELF


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
