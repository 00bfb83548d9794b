"""Training a probe on a stored feature table (:mod:`grade.batch.features`), with its held-out measurements."""

from __future__ import annotations

from typing import Any

import numpy as np

from ...common.errors import InputError
from ...common.metrics import class_balance
from .estimator import EpochCallback, Probe, stratified_split
from .inputs import INPUTS, check_input_values, check_inputs, probe_inputs


def split_rows(df, *, seed: int = 42, fractions: tuple[float, float, float] = (0.7, 0.15, 0.15),
               holdout_datasets: tuple[str, ...] = (), max_per_class: int | None = None):
    """How :func:`train_from_features` splits a feature table (index 0..n-1): (held (n,) bool, pool (m,) row
    indices, (train, validation, test) row indices). The one place the split is decided, so that the rows a shipped
    probe trained on can be found again (:mod:`grade.studies.shipped_probes`)."""
    held = df["dataset"].isin(holdout_datasets).to_numpy()
    pool = np.flatnonzero(~held)
    if "group" in df and held.any():  # never train on another wording of a held-out question
        pool = pool[~df["group"].iloc[pool].isin(set(df["group"][held])).to_numpy()]
    if max_per_class:
        rng = np.random.default_rng(seed)
        keep = []
        for cls in (0, 1):
            idx = pool[df["label"].to_numpy()[pool] == cls]
            keep.extend(rng.permutation(idx)[:max_per_class].tolist() if len(idx) > max_per_class else idx.tolist())
        pool = np.array(sorted(keep), dtype=int)
    # Split whole questions: one asked with and without its document lands in one part only; a
    # ``group`` column (e.g. one fact in several wordings) groups rows further.
    group = df.groupby(["group"] if "group" in df else ["dataset", "id"], sort=False).ngroup().to_numpy()
    strata = (df["dataset"].astype(str) + "|" + df["label"].astype(str)).to_numpy()
    first = {}
    for i in pool:
        first.setdefault(group[i], i)
    groups = np.array(list(first))
    parts = stratified_split(strata[[first[g] for g in groups]], fractions=fractions, seed=seed)
    part_of = {g: k for k, idx in enumerate(parts) for g in groups[idx]}
    return held, pool, tuple(pool[[part_of[group[i]] == k for i in pool]] for k in range(3))


def train_from_features(
    df,
    *,
    kind: str = "mlp",
    seed: int = 42,
    fractions: tuple[float, float, float] = (0.7, 0.15, 0.15),
    holdout_datasets: tuple[str, ...] = (),
    max_per_class: int | None = None,
    callback: EpochCallback | None = None,
    sources: list[str] | None = None,
    inputs: str = "rank_ratio",
) -> tuple[Probe, dict[str, Any]]:
    """Train a probe on a feature table (see :mod:`grade.batch.features`) and measure it.

    Rows are split train / validation / test, stratified by dataset and label (seeded), keeping the
    rows of one question (or of one ``group``, where the table has that column) together. Datasets in
    ``holdout_datasets`` are kept out of all three and scored separately: the probe never sees them,
    which measures transfer to a new kind of question. ``max_per_class`` caps each class (random,
    seeded), as the reference does with 1000. ``inputs`` names what the probe reads (:data:`INPUTS`).

    Returns the fitted probe (metadata filled in, metrics included) and the report dict that is
    also stored under ``metadata["metrics"]``.
    """
    check_inputs(inputs)
    if df.empty:
        raise InputError("no feature rows to train on")
    for column, what in (("model", "models"), ("loss", "loss variants"), ("srank", "stable-rank variants")):
        values = sorted(df[column].unique())
        if len(values) > 1:
            raise InputError(f"the features mix {what}: {', '.join(values)}; train one probe per combination")
    unknown = set(holdout_datasets) - set(df["dataset"])
    if unknown:
        raise InputError(f"held-out dataset(s) {', '.join(sorted(unknown))} not in the features")
    df = df.reset_index(drop=True)
    held, pool, (tr, va, te) = split_rows(df, seed=seed, fractions=fractions, holdout_datasets=holdout_datasets,
                                          max_per_class=max_per_class)
    check_input_values(df.iloc[np.concatenate([pool, np.flatnonzero(held)])], inputs)
    X = probe_inputs(df, inputs)
    y = df["label"].to_numpy().astype(int)
    if min(len(tr), len(va), len(te)) == 0 or len(np.unique(y[tr])) < 2:
        balance = class_balance(y[pool])
        raise InputError(
            f"{balance['n']} rows ({balance['answerable']} answerable, {balance['unanswerable']} unanswerable) are "
            f"too few to split into training ({len(tr)}), validation ({len(va)}) and test ({len(te)}) rows with both "
            "classes in training; add rows or change the fractions"
        )
    info = {
        "model": df["model"].iloc[0],
        "loss": df["loss"].iloc[0],
        "srank": df["srank"].iloc[0],
        "feature_definition": INPUTS[inputs],
        "training_data": {
            "sources": sources or [],
            "datasets": {
                name: {**class_balance(group["label"]), "with_document": int(group["has_context"].sum())}
                for name, group in df.iloc[pool].groupby("dataset")
            },
            "split": {"fractions": list(fractions), "seed": seed, "stratified_by": "dataset and label, whole questions",
                      "train": class_balance(y[tr]), "validation": class_balance(y[va]), "test": class_balance(y[te])},
            "holdout_datasets": list(holdout_datasets),
            "max_per_class": max_per_class,
        },
    }
    probe = Probe(kind, seed=seed, inputs=inputs).fit(X[tr], y[tr], X[va], y[va], callback=callback, info=info)

    def by_dataset(rows):
        out = {}
        for name in sorted(set(df["dataset"].iloc[rows])):
            sub = rows[df["dataset"].to_numpy()[rows] == name]
            out[name] = probe.evaluate(X[sub], y[sub], roc=False)
        return out

    report: dict[str, Any] = {"test": probe.evaluate(X[te], y[te]), "test_by_dataset": by_dataset(te)}
    held_rows = np.flatnonzero(held)
    if len(held_rows):
        report["holdout"] = probe.evaluate(X[held_rows], y[held_rows])
        report["holdout_by_dataset"] = by_dataset(held_rows)
    probe.metadata["metrics"] = report
    return probe, report


def format_metrics(report: dict[str, Any]) -> str:
    """A small text table of a :func:`train_from_features` report."""
    lines = [f"{'split':<10} {'dataset':<22} {'n':>5} {'pos':>5} {'acc':>6} {'auroc':>6}"]

    def row(split, name, m):
        auroc = "  -  " if m["auroc"] is None else f"{m['auroc']:.3f}"
        lines.append(f"{split:<10} {name:<22} {m['n']:>5} {m['positives']:>5} {m['accuracy']:>6.3f} {auroc:>6}")

    for split in ("test", "holdout"):
        if split in report:
            row(split, "(all)", report[split])
            for name, m in report.get(f"{split}_by_dataset", {}).items():
                row(split, name, m)
    return "\n".join(lines)
