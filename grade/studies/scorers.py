"""Scorers: each method fitted on a table's train / validation rows and scoring any rows of any table
(:func:`make_scorer`, :func:`evaluate_method`)."""

from __future__ import annotations

from typing import Any

import numpy as np

from ..common.metrics import auroc, best_threshold
from .tables import GRADE_METHODS, LENGTH_METHODS, Protocol, Table, metrics


class Scorer:
    name = ""
    threshold = 0.5
    auroc = True

    def fit(self, table: Table, train: np.ndarray, val: np.ndarray) -> "Scorer":
        return self

    def score(self, table: Table, rows: np.ndarray) -> np.ndarray:  # pragma: no cover - interface
        raise NotImplementedError


class ProbeScorer(Scorer):
    """The paper's probe (or logistic regression) on a per-layer GRADE array, optionally a layer subset."""

    def __init__(self, feature: str = "pre", kind: str = "mlp", layers: slice | None = None, seed: int = 42,
                 epochs: int = 100):
        self.feature, self.kind, self.layers, self.seed, self.epochs = feature, kind, layers, seed, epochs

    def _x(self, table: Table, rows: np.ndarray) -> np.ndarray:
        x = table.grade[self.feature][rows]
        return x[:, self.layers] if self.layers is not None else x

    def fit(self, table, train, val):
        from ..verdict.probe import Probe

        ok_tr = np.isfinite(self._x(table, train)).all(axis=1)
        ok_va = np.isfinite(self._x(table, val)).all(axis=1)
        train, val = train[ok_tr], val[ok_va]
        self.probe = Probe(self.kind, seed=self.seed, epochs=self.epochs).fit(self._x(table, train), table.y[train],
                                                         self._x(table, val), table.y[val])
        return self

    def score(self, table, rows):
        x = self._x(table, rows)
        out = np.full(len(rows), np.nan)
        ok = np.isfinite(x).all(axis=1)
        if ok.any():
            out[ok] = self.probe.predict_proba(x[ok])[:, 1]
        return out


class LayerThreshold(Scorer):
    """A threshold on one scalar made from the GRADE array: the mean over layers, or one layer.
    The direction (higher or lower = answerable) is chosen on train, the cut on train + val."""

    def __init__(self, feature: str = "pre", reduce: str = "mean"):
        self.feature, self.reduce = feature, reduce

    def _s(self, table, rows):
        x = table.grade[self.feature][rows]
        if self.reduce == "mean":
            return x.mean(axis=1)
        layer = {"last": x.shape[1] - 1, "middle": x.shape[1] // 2}[self.reduce]
        return x[:, layer]

    def fit(self, table, train, val):
        s = self._s(table, train)
        self.sign = 1.0 if not (auroc(table.y[train], s) < 0.5) else -1.0
        both = np.concatenate([train, val])
        self.threshold = best_threshold(table.y[both], self.sign * self._s(table, both))
        return self

    def score(self, table, rows):
        return self.sign * self._s(table, rows)


class LengthScorer(Scorer):
    """Length alone: the number of tokens the loss was computed over; the direction (longer = more or less
    answerable) is chosen on train, the cut on train + val, as :class:`LayerThreshold` does."""

    def __init__(self, method: str):
        self.name = method

    def fit(self, table, train, val):
        s = table.scores[self.name]
        ok = np.isfinite(s[train])
        self.sign = 1.0 if not (auroc(table.y[train][ok], s[train][ok]) < 0.5) else -1.0
        both = np.concatenate([train, val])
        both = both[np.isfinite(s[both])]
        self.threshold = best_threshold(table.y[both], self.sign * s[both])
        return self

    def score(self, table, rows):
        return self.sign * table.scores[self.name][rows]


class AlignP(Scorer):
    """Align-P: logistic regression (scikit-learn, standardised, C chosen on validation) on the last
    prompt token's hidden state; the layer (middle to late) is chosen on validation AUROC."""

    name = "Align-P"

    def __init__(self, seed: int = 42):
        self.seed = seed

    def fit(self, table, train, val):
        from ..verdict.probe import Probe

        best = None
        for layer, x in sorted(table.align.items()):
            probe = Probe("logreg", seed=self.seed).fit(x[train], table.y[train], x[val], table.y[val])
            a = auroc(table.y[val], probe.predict_proba(x[val])[:, 1])
            key = (a if np.isfinite(a) else 0.5, -layer)  # ties: the earlier layer
            if best is None or key > best[0]:
                best = (key, layer, probe)
        _, self.layer, self.probe = best
        return self

    def score(self, table, rows):
        return self.probe.predict_proba(table.align[self.layer][rows])[:, 1]


class SAPLMA(Scorer):
    """SAPLMA (Azaria & Mitchell 2023) on hidden_states[-12] of the answer's last token: the estimator
    :class:`grade.verdict.detectors.SaplmaMLP` (MLP 256-128-64, Adam lr 1e-3, 5 epochs, batch 32, inputs
    standardised on train)."""

    name = "SAPLMA"

    def __init__(self, seed: int = 42, epochs: int = 5, batch_size: int = 32, lr: float = 1e-3):
        self.seed, self.epochs, self.batch_size, self.lr = seed, epochs, batch_size, lr

    def fit(self, table, train, val):
        from ..verdict.detectors import SaplmaMLP

        self.model = SaplmaMLP(self.seed, self.epochs, self.batch_size, self.lr).fit(table.saplma[train], table.y[train])
        return self

    def score(self, table, rows):
        return self.model.predict_proba(table.saplma[rows])[:, 1]


class FixedScore(Scorer):
    """A training-free score; only the accuracy threshold is fitted (best accuracy on train + val)."""

    def __init__(self, method: str):
        self.name = method
        self.auroc = method != "Judge"

    def fit(self, table, train, val):
        if self.name == "Judge":
            self.threshold = 0.5  # 1 = "I can answer", 0 = "Unknown": a decision already
            return self
        both = np.concatenate([train, val])
        self.threshold = best_threshold(table.y[both], table.scores[self.name][both])
        return self

    def score(self, table, rows):
        return table.scores[self.name][rows]


def make_scorer(method: str, protocol: Protocol) -> Scorer:
    if method in GRADE_METHODS:
        return ProbeScorer(method.split("_")[1], protocol.probe_kind, seed=protocol.seed, epochs=protocol.probe_epochs)
    if method == "Align-P":
        return AlignP(seed=protocol.seed)
    if method == "SAPLMA":
        return SAPLMA(seed=protocol.seed)
    if method in LENGTH_METHODS:
        return LengthScorer(method)
    return FixedScore(method)


def _seed_of(*parts: str) -> int:
    import hashlib

    return int.from_bytes(hashlib.sha256("|".join(parts).encode()).digest()[:4], "little")


def evaluate_scores(method: str, table: Table, protocol: Protocol, scorer: Scorer | None = None,
                    test_table: Table | None = None,
                    test_rows: np.ndarray | None = None) -> tuple[dict[str, Any], Scorer, np.ndarray]:
    """Fit ``method`` on ``table``'s train/val rows and score the test rows of ``test_table``
    (default: the same table). Returns (metrics, fitted scorer, the (n_test,) scores the metrics read)."""
    test_table = test_table or table
    if scorer is None:
        scorer = make_scorer(method, protocol).fit(table, table.rows("train"), table.rows("val"))
    rows = test_table.rows("test") if test_rows is None else test_rows
    s = scorer.score(test_table, rows)
    m = metrics(test_table.y[rows], s, scorer.threshold, protocol, with_auroc=scorer.auroc,
                seed=_seed_of(method, table.dataset, test_table.dataset, test_table.variant))
    return m, scorer, s


def evaluate_method(method: str, table: Table, protocol: Protocol, scorer: Scorer | None = None,
                    test_table: Table | None = None, test_rows: np.ndarray | None = None) -> tuple[dict[str, Any], Scorer]:
    """:func:`evaluate_scores` without the scores: (metrics, fitted scorer)."""
    m, scorer, _ = evaluate_scores(method, table, protocol, scorer, test_table, test_rows)
    return m, scorer
