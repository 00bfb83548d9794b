"""Training a detector on the benchmark's tables: fitted on every table's train rows, selected on their
validation rows, measured on each dataset's held-out test questions."""

from __future__ import annotations

from typing import Callable

import numpy as np

from ..artifacts import check_finite_scores
from ...common.errors import ProbeError
from ...common.metrics import heldout_metrics
from .model_statistics import table_statistic
from .estimators import KindLogistic, SaplmaMLP
from .files import Detector
from .specs import THRESHOLD, spec_of


def fit_detector(name: str, tables: dict, *, model: str, seed: int = 42, n_boot: int = 1000, ci: float = 0.95,
                 training_data: dict | None = None, say: Callable[[str], None] = lambda line: None) -> Detector:
    """Fit detector ``name`` on the train rows of every benchmark table (:func:`grade.studies.benchmark.build_tables`;
    ``tables``: dataset -> :class:`~grade.studies.Table`), pick what it picks on their validation rows, and
    measure it on each table's test rows. A row without the statistic (a cache that lacks it) is left out.
    """
    spec = spec_of(name)
    parts: dict[str, list] = {"train": [], "val": [], "test": []}
    kinds: dict[str, dict] = {}
    for dataset, table in tables.items():
        X = table_statistic(table, spec.statistic)
        ok = np.isfinite(X).all(axis=1)
        if not ok.any():
            say(f"  {dataset}: no {spec.statistic} values; left out")
            continue
        meta = {"task": _most_common(table.task) if table.task is not None else None,
                "with_document": bool(np.mean(table.has_context) >= 0.5) if table.has_context is not None else False}
        for part in parts:
            rows = table.rows(part)
            rows = rows[ok[rows]]
            parts[part].append((dataset, X[rows], table.y[rows]))
            meta[part if part != "val" else "validation"] = {"n": int(len(rows)), "answerable": int(table.y[rows].sum())}
        kinds[dataset] = meta

    def stack(part):
        chunks = parts[part]
        return (np.concatenate([c[1] for c in chunks]), np.concatenate([c[2] for c in chunks]),
                np.concatenate([[c[0]] * len(c[2]) for c in chunks]).astype(object))

    if not kinds:
        raise ProbeError(f"no benchmark table holds {spec.statistic} values")
    (X, y, k), (Xv, yv, kv) = stack("train"), stack("val")
    if spec.estimator == "kind-logistic":
        estimator = KindLogistic(sorted(kinds), seed).fit(X, k, y, Xv, kv, yv)
    else:
        estimator = SaplmaMLP(seed).fit(X, y).half_precision()  # the fixed recipe selects nothing on validation
    detector = Detector(spec, estimator, {"name": name, "model": model, "input_dim": int(X.shape[1]), "seed": seed,
                                          "kinds": kinds, "training": estimator.training,
                                          "training_data": training_data or {}})
    by_dataset, all_y, all_p = {}, [], []
    for dataset, Xt, yt in parts["test"]:
        p = detector.predict_proba(Xt, [dataset] * len(yt))[:, 1]
        by_dataset[dataset] = heldout_metrics(yt, p, THRESHOLD, n_boot=n_boot, ci=ci)
        all_y.append(yt)
        all_p.append(p)
    check_finite_scores(np.concatenate(all_p), "detector", "test")  # a diverged fit is an error, never a file
    detector.metadata["metrics"] = {"test": heldout_metrics(np.concatenate(all_y), np.concatenate(all_p), THRESHOLD,
                                                            n_boot=n_boot, ci=ci),
                                    "test_by_dataset": by_dataset}
    return detector


def _most_common(values) -> str:
    names, counts = np.unique(np.asarray(values, dtype=str), return_counts=True)
    return str(names[int(np.argmax(counts))])
