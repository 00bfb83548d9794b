"""The benchmark's studies, run on cached features: GRADE next to the baselines.

Everything here works from files, never from a model, so the tables regenerate in seconds:

* labels: ``<labels dir>/<dataset>.jsonl`` (``grade label``: id, question, task, samples, accuracy, label);
* GRADE features: Parquet feature stores (:mod:`grade.features`), one per (dataset, variant, loss);
* baseline scores: the per-question JSONL caches of :mod:`grade.baselines`.

:mod:`grade.benchmark` fills the caches (that part needs the model) and then calls :func:`run_studies`
here; the metrics are :mod:`grade.metrics`'s, the figures :mod:`grade.report`'s. A
:class:`BenchmarkResult` saves itself as CSV + JSON + Markdown and loads back (:meth:`BenchmarkResult.save`,
:meth:`BenchmarkResult.load`); it draws nothing.

Protocol (per model and dataset)
--------------------------------
* Rows with a label; a dataset enters only if each class has at least ``min_per_class`` rows
  (the others are reported with their counts). ``max_per_class`` caps each class (seeded), as the
  reference caps at 1000: a compute budget, not a balancing step.
* One seeded split, stratified by label: train / validation / test (default 60 / 20 / 20). With
  ``--eval-labels`` (questions never seen during development) every development row is used for
  training and validation and the new rows are the test set.
* Supervised methods train on train and select on validation (GRADE: the paper's MLP probe with
  early selection; Align-P: layer and C; SAPLMA: fixed recipe). Training-free scores are used as
  they are; their accuracy uses the threshold that maximises accuracy on train + validation
  (their AUROC needs no threshold). Judge is a yes/no answer: accuracy only.
* AUROC with a percentile bootstrap confidence interval (stratified resampling of the test set,
  ``n_boot`` draws), so that small test sets are not over-read.

Every score is oriented so that higher = answerable; none is flipped after looking at test data.
Single-feature GRADE ablations (a threshold on one layer's ratio) pick their direction on train.
"""

from __future__ import annotations

import json
import logging
import math
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from .baselines import SCORE_KEYS, decode_vector
from .errors import InputError
from .metrics import auroc, best_threshold, heldout_metrics
from .tasks import answer_key

log = logging.getLogger(__name__)

GRADE_METHODS = ("GRADE_pre", "GRADE_pos")
SUPERVISED = ("GRADE_pre", "GRADE_pos", "Align-P", "SAPLMA")
UNSUPERVISED = ("P-Entropy", "IC", "CoE-R", "CoE-C", "Self-consistency", "EigenScore")
#: Length alone (tokens the loss is computed over: the prompt for pre, prompt + response for pos), a
#: threshold whose direction is fitted on train: GRADE's features grow with the input, so every table shows
#: how much of a detector's AUROC length alone already gives (on GSM8K it is a strong confound).
LENGTH_METHODS = ("Length_pre", "Length_pos")
METHOD_ORDER = ("GRADE_pre", "GRADE_pos", "P-Entropy", "Judge", "IC", "Align-P", "SAPLMA", "CoE-R", "CoE-C",
                "Self-consistency", "EigenScore", *LENGTH_METHODS)


@dataclass
class Protocol:
    """Settings of one benchmark run (all recorded next to the results)."""

    fractions: tuple[float, float, float] = (0.6, 0.2, 0.2)
    seed: int = 42
    min_per_class: int = 30
    max_per_class: int | None = None
    #: dataset -> its own cap, where it differs from ``max_per_class``
    max_per_class_by_dataset: dict[str, int] = field(default_factory=dict)
    n_boot: int = 1000
    ci: float = 0.95
    probe_kind: str = "mlp"
    probe_epochs: int = 100  # the paper's maximum; the best validation epoch is kept


def metrics(y: np.ndarray, s: np.ndarray, threshold: float, protocol: Protocol, *, with_auroc: bool = True,
            seed: int = 0) -> dict[str, Any]:
    """:func:`grade.metrics.heldout_metrics` with the protocol's bootstrap settings."""
    return heldout_metrics(y, s, threshold, with_auroc=with_auroc, n_boot=protocol.n_boot, ci=protocol.ci, seed=seed)


# --------------------------------------------------------------------------------------------------
# data


@dataclass
class Table:
    """Everything known about one (dataset, variant) of one model, row-aligned.

    ``split``: "train" / "val" / "test" per row. ``grade[name]``: (n, L) arrays (``pre`` / ``pos``
    rank ratios, ``srank_g_pre`` ...). ``scores[method]``: (n,) training-free scores (NaN where not
    computed). ``align[layer]``: (n, d) last prompt token states. ``saplma``: (n, d). ``prompt_entropy``:
    (n,) entropy after the prompt, the GRADE_pre loss (NaN where a row has no ``pre`` features).
    """

    dataset: str
    variant: str
    ids: np.ndarray
    y: np.ndarray
    split: np.ndarray
    grade: dict[str, np.ndarray] = field(default_factory=dict)
    scores: dict[str, np.ndarray] = field(default_factory=dict)
    align: dict[int, np.ndarray] = field(default_factory=dict)
    saplma: np.ndarray | None = None
    confidently_wrong: np.ndarray | None = None
    source: np.ndarray | None = None  # each row's own dataset field (differs from ``dataset`` when pooled)
    prompt_entropy: np.ndarray | None = None
    task: np.ndarray | None = None  # each row's task ("qa", "mmlu", "gsm8k", ...)
    has_context: np.ndarray | None = None  # whether the row's prompt carries a document

    def subset(self, rows: np.ndarray, name: str, split: np.ndarray) -> "Table":
        """The given rows as a table of their own, with a new split."""
        return Table(name, self.variant, self.ids[rows], self.y[rows], np.asarray(split, dtype=object),
                     grade={k: v[rows] for k, v in self.grade.items()},
                     scores={k: v[rows] for k, v in self.scores.items()},
                     align={k: v[rows] for k, v in self.align.items()},
                     saplma=None if self.saplma is None else self.saplma[rows],
                     confidently_wrong=None if self.confidently_wrong is None else self.confidently_wrong[rows],
                     source=None if self.source is None else self.source[rows],
                     prompt_entropy=None if self.prompt_entropy is None else self.prompt_entropy[rows],
                     task=None if self.task is None else self.task[rows],
                     has_context=None if self.has_context is None else self.has_context[rows])

    def rows(self, part: str | tuple[str, ...]) -> np.ndarray:
        parts = (part,) if isinstance(part, str) else part
        return np.flatnonzero(np.isin(self.split, parts))

    def has(self, method: str) -> bool:
        if method in GRADE_METHODS:
            return method.split("_")[1] in self.grade
        if method == "Align-P":
            return bool(self.align)
        if method == "SAPLMA":
            return self.saplma is not None
        if method == "Judge":
            return "Judge" in self.scores
        return method in self.scores and np.isfinite(self.scores[method]).any()


def read_labels(path: str | Path) -> list[dict]:
    """Labelled rows (label 0/1 only) of one JSONL file."""
    from .features import read_labelled

    return read_labelled(path)


def confidently_wrong(row: dict) -> bool:
    """All samples give the same answer (:func:`grade.tasks.answer_key`) and none is correct."""
    samples = row.get("samples") or []
    if not samples or row.get("accuracy") is None or float(row["accuracy"]) > 0:
        return False
    keys = {answer_key(row.get("task") or "qa", s, row.get("choices")) for s in samples}
    return len(keys) == 1 and None not in keys


def select_rows(rows: list[dict], protocol: Protocol, dataset: str | None = None) -> tuple[list[dict], dict[str, Any]]:
    """Class counts, and the rows kept (the dataset's cap per class, seeded). ``info['eligible']``
    says whether each class has ``min_per_class`` rows."""
    y = np.array([int(r["label"]) for r in rows], dtype=int)
    counts = {"answerable": int((y == 1).sum()), "unanswerable": int((y == 0).sum())}
    keep = np.arange(len(rows))
    cap = protocol.max_per_class_by_dataset.get(dataset, protocol.max_per_class) if dataset else protocol.max_per_class
    if cap:
        rng = np.random.default_rng(protocol.seed)
        chosen = []
        for cls in (0, 1):
            idx = np.flatnonzero(y == cls)
            chosen.extend(sorted(rng.permutation(idx)[:cap].tolist()))
        keep = np.array(sorted(chosen), dtype=int)
    kept = [rows[i] for i in keep]
    info = {**counts, "kept": len(kept),
            "eligible": min(counts.values()) >= protocol.min_per_class}
    return kept, info


def assign_splits(ids: list[str], y: np.ndarray, protocol: Protocol) -> np.ndarray:
    from .probe import stratified_split

    split = np.empty(len(ids), dtype=object)
    for name, idx in zip(("train", "val", "test"), stratified_split(y, fractions=protocol.fractions, seed=protocol.seed)):
        split[idx] = name
    return split


def _grade_arrays(frame, ids: list[str]) -> dict[str, np.ndarray]:
    """(n, L) rank ratios and stable ranks for ``ids`` from a feature DataFrame (NaN rows if absent)."""
    from .features import feature_matrix

    frame = frame.drop_duplicates("id").set_index("id")
    present = [i for i in ids if i in frame.index]
    if not present:
        return {}
    sub = frame.loc[present]
    out = {}
    where = [{i: k for k, i in enumerate(ids)}[i] for i in present]
    for column in ("rank_ratio", "srank_g", "srank_h"):
        values = feature_matrix(sub, column)
        full = np.full((len(ids), values.shape[1]), np.nan)
        full[where] = values
        out[column] = full
    if "n_tokens" in sub.columns:
        out["n_tokens"] = np.full(len(ids), np.nan)
        out["n_tokens"][where] = sub["n_tokens"].to_numpy(dtype=float)
    return out


def build_table(dataset: str, variant: str, rows: list[dict], split: np.ndarray, *,
                features: dict[str, Any], baseline_cache: dict[str, dict] | None) -> Table:
    """Assemble a :class:`Table` from label rows, feature DataFrames (``{"pre": df, "pos": df}``) and
    a baseline cache (id -> record)."""
    ids = [str(r["id"]) for r in rows]
    table = Table(dataset, variant, np.array(ids, dtype=object), np.array([int(r["label"]) for r in rows]),
                  np.asarray(split, dtype=object))
    table.confidently_wrong = np.array([confidently_wrong(r) for r in rows])
    table.source = np.array([str(r.get("dataset") or dataset) for r in rows], dtype=object)
    table.task = np.array([str(r.get("task") or "qa") for r in rows], dtype=object)
    table.has_context = np.array([bool(r.get("context")) for r in rows])
    for loss, frame in features.items():
        if frame is None:
            continue
        arrays = _grade_arrays(frame, ids)
        if arrays:
            table.grade[loss] = arrays["rank_ratio"]
            table.grade[f"srank_g_{loss}"] = arrays["srank_g"]
            table.grade[f"srank_h_{loss}"] = arrays["srank_h"]
            if "n_tokens" in arrays:
                table.scores[f"Length_{loss}"] = arrays["n_tokens"]
        if loss == "pre" and "loss_value" in frame.columns:
            entropy = frame.drop_duplicates("id").set_index("id")["loss_value"]
            table.prompt_entropy = np.array([float(entropy[i]) if i in entropy.index else np.nan for i in ids])
    cache = baseline_cache or {}
    records = [cache.get(i) for i in ids]
    if any(r is not None for r in records):
        for method, key in SCORE_KEYS.items():
            values = np.array([np.nan if r is None or r.get(key) is None else float(r[key]) for r in records])
            if np.isfinite(values).any():
                table.scores[method] = values
        layers = sorted({int(k) for r in records if r for k in r.get("align_hidden", {})})
        if all(r is not None for r in records):
            for layer in layers:
                table.align[layer] = np.stack([decode_vector(r["align_hidden"][str(layer)]) for r in records])
            table.saplma = np.stack([decode_vector(r["saplma_hidden"]) for r in records])
    return table


# --------------------------------------------------------------------------------------------------
# scorers: fit on a table's train/val rows, score any rows of any table


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
        from .probe import Probe

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
        from .probe import Probe

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
    :class:`grade.detectors.SaplmaMLP` (MLP 256-128-64, Adam lr 1e-3, 5 epochs, batch 32, inputs
    standardised on train)."""

    name = "SAPLMA"

    def __init__(self, seed: int = 42, epochs: int = 5, batch_size: int = 32, lr: float = 1e-3):
        self.seed, self.epochs, self.batch_size, self.lr = seed, epochs, batch_size, lr

    def fit(self, table, train, val):
        from .detectors import SaplmaMLP

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


def evaluate_method(method: str, table: Table, protocol: Protocol, scorer: Scorer | None = None,
                    test_table: Table | None = None, test_rows: np.ndarray | None = None) -> tuple[dict[str, Any], Scorer]:
    """Fit ``method`` on ``table``'s train/val rows and score the test rows of ``test_table``
    (default: the same table). Returns (metrics, fitted scorer)."""
    test_table = test_table or table
    if scorer is None:
        scorer = make_scorer(method, protocol).fit(table, table.rows("train"), table.rows("val"))
    rows = test_table.rows("test") if test_rows is None else test_rows
    s = scorer.score(test_table, rows)
    m = metrics(test_table.y[rows], s, scorer.threshold, protocol, with_auroc=scorer.auroc,
                seed=_seed_of(method, table.dataset, test_table.dataset, test_table.variant))
    return m, scorer


# --------------------------------------------------------------------------------------------------
# the studies


def main_table(tables: dict[str, Table], protocol: Protocol, methods=METHOD_ORDER) -> tuple[list[dict], dict]:
    """One row per (dataset, method): Acc, AUROC and its CI on the test split. Also returns the
    fitted scorers, ``{(dataset, method): scorer}``, for the other studies."""
    from .errors import GradeError

    rows, fitted = [], {}
    for name, table in tables.items():
        for method in methods:
            if not table.has(method):
                continue
            try:
                m, scorer = evaluate_method(method, table, protocol)
            except GradeError as exc:  # e.g. partial caches left one class in a training split
                log.warning("%s on %s not scored: %s", method, name, exc)
                continue
            fitted[(name, method)] = scorer
            extra = {"layer": scorer.layer} if method == "Align-P" else {}
            rows.append({"dataset": name, "method": method, **m, **extra})
    return rows, fitted


def transfer_matrix(tables: dict[str, Table], fitted: dict, protocol: Protocol, methods=SUPERVISED) -> list[dict]:
    """Train on A (its fitted scorer), test on B's test split, for every ordered pair.

    When A and B share questions (one dataset asked under two conditions), B's test rows whose
    question was in A's train or validation split are left out, so nothing seen in training is tested.
    """
    out = []
    for method in methods:
        for a, ta in tables.items():
            if (a, method) not in fitted:
                continue
            seen = set(ta.ids[ta.rows(("train", "val"))])
            for b, tb in tables.items():
                if not tb.has(method):
                    continue
                rows = np.array([i for i in tb.rows("test") if tb.ids[i] not in seen], dtype=int)
                if len(rows) == 0 or len(set(tb.y[rows])) < 2:
                    continue
                m, _ = evaluate_method(method, ta, protocol, scorer=fitted[(a, method)], test_table=tb, test_rows=rows)
                out.append({"method": method, "train": a, "test": b, **m})
    return out


def source_tables(tables: dict[str, Table], protocol: Protocol) -> dict[str, Table]:
    """The sources of pooled datasets as tables of their own (``pool:source``), each with its own
    stratified split, for a transfer study between them. Sources with one class are left out."""
    out = {}
    for name, table in tables.items():
        if table.source is None or len(set(table.source)) < 2:
            continue
        for source in sorted(set(table.source)):
            rows = np.flatnonzero(table.source == source)
            y = table.y[rows]
            if min(int(y.sum()), int(len(y) - y.sum())) < 3:
                continue
            split = assign_splits(list(table.ids[rows]), y, protocol)
            out[f"{name}:{source}"] = table.subset(rows, f"{name}:{source}", split)
    return out


def robustness(tables: dict[str, Table], perturbed: dict[tuple[str, str], Table], fitted: dict,
               protocol: Protocol, methods=METHOD_ORDER) -> list[dict]:
    """Scorers fitted on the original prompts, applied to the same test questions with a perturbed
    prompt. Relative change = (perturbed - original) / original, on the rows present in both."""
    out = []
    for (name, variant), pt in perturbed.items():
        table = tables.get(name)
        if table is None:
            continue
        position = {i: k for k, i in enumerate(pt.ids)}
        rows = np.array([k for k in table.rows("test") if table.ids[k] in position], dtype=int)
        prow = np.array([position[table.ids[k]] for k in rows], dtype=int)
        if len(rows) == 0 or len(set(table.y[rows])) < 2:
            continue
        for method in methods:
            if (name, method) not in fitted or not pt.has(method):
                continue
            scorer = fitted[(name, method)]
            base, _ = evaluate_method(method, table, protocol, scorer=scorer, test_rows=rows)
            new, _ = evaluate_method(method, table, protocol, scorer=scorer, test_table=pt, test_rows=prow)
            if new["missing"] == new["n"]:
                continue
            rel = lambda key: (new[key] - base[key]) / base[key] if base[key] and np.isfinite(base[key]) else float("nan")  # noqa: E731
            out.append({"dataset": name, "variant": variant, "method": method, "n": base["n"],
                        "acc": base["acc"], "acc_perturbed": new["acc"], "acc_rel_change": rel("acc"),
                        "auroc": base["auroc"], "auroc_perturbed": new["auroc"], "auroc_rel_change": rel("auroc")})
    return out


def ablations(tables: dict[str, Table], protocol: Protocol) -> list[dict]:
    """GRADE variants on the test split: probe on all layers vs a threshold on the mean / last /
    middle layer ratio; rank ratio vs the raw gradient stable rank srank(C_g); layer thirds."""
    out = []
    for name, table in tables.items():
        for loss in ("pre", "pos"):
            if loss not in table.grade:
                continue
            L = table.grade[loss].shape[1]
            third = max(1, L // 3)
            probe = lambda feature, layers=None, kind=protocol.probe_kind: ProbeScorer(  # noqa: E731
                feature, kind, layers, protocol.seed, protocol.probe_epochs)
            variants: list[tuple[str, Scorer]] = [
                ("probe, all layers (rank ratio)", probe(loss)),
                ("logistic regression, all layers", probe(loss, kind="logreg")),
                ("threshold on the mean ratio", LayerThreshold(loss, "mean")),
                ("threshold on the last layer's ratio", LayerThreshold(loss, "last")),
                ("threshold on the middle layer's ratio", LayerThreshold(loss, "middle")),
                ("probe on srank(C_g) (raw gradient)", probe(f"srank_g_{loss}")),
                (f"probe, first third (layers 0-{third - 1})", probe(loss, slice(0, third))),
                (f"probe, middle third (layers {third}-{2 * third - 1})", probe(loss, slice(third, 2 * third))),
                (f"probe, last third (layers {2 * third}-{L - 1})", probe(loss, slice(2 * third, L))),
            ]
            for label, scorer in variants:
                if scorer.feature not in table.grade:
                    continue
                scorer.fit(table, table.rows("train"), table.rows("val"))
                m, _ = evaluate_method(f"GRADE_{loss}", table, protocol, scorer=scorer)
                out.append({"dataset": name, "loss": loss, "variant": label, **m})
    return out


def confidently_wrong_study(tables: dict[str, Table], fitted: dict, protocol: Protocol) -> list[dict]:
    """Accuracy of every method on the test questions where all samples agree and are wrong (label
    0 throughout: accuracy = share flagged unanswerable), pooled over datasets and per dataset."""
    out = []
    pooled: dict[str, list[tuple[np.ndarray, float]]] = {}
    for name, table in tables.items():
        rows = np.array([k for k in table.rows("test") if table.confidently_wrong[k]], dtype=int)
        for method in METHOD_ORDER:
            if (name, method) not in fitted:
                continue
            scorer = fitted[(name, method)]
            s = scorer.score(table, rows) if len(rows) else np.array([])
            pred = np.where(np.isfinite(s), s >= scorer.threshold, True)
            pooled.setdefault(method, []).append(pred)
            out.append({"dataset": name, "method": method, "n": int(len(rows)),
                        "acc": float((pred == 0).mean()) if len(rows) else float("nan")})
    for method, preds in pooled.items():
        pred = np.concatenate(preds) if preds else np.array([])
        out.append({"dataset": "all", "method": method, "n": int(len(pred)),
                    "acc": float((pred == 0).mean()) if len(pred) else float("nan")})
    return out


def length_halves(table: Table, lengths: np.ndarray, protocol: Protocol) -> tuple[Table, Table, float]:
    """``table``'s rows split at the median of ``lengths`` (e.g. the characters of each question's
    supporting document) into a short and a long half, each with its own stratified split.
    Returns (short, long, median). Rows at the median go to the short half."""
    lengths = np.asarray(lengths, dtype=float)
    median = float(np.median(lengths))
    halves = []
    for name, rows in ((f"{table.dataset}:short", np.flatnonzero(lengths <= median)),
                       (f"{table.dataset}:long", np.flatnonzero(lengths > median))):
        halves.append(table.subset(rows, name, assign_splits(list(table.ids[rows]), table.y[rows], protocol)))
    return halves[0], halves[1], median


def condition_transfer(study: str, first: Table, second: Table, protocol: Protocol,
                       methods=SUPERVISED) -> list[dict]:
    """The supervised detectors trained under one condition and tested under the other, both ways,
    next to each condition's own test split.

    ``first`` and ``second`` hold questions asked two ways (with and without the supporting
    document; short and long documents). A detector fitted on one table's train/validation rows is
    tested on *every* row of the other table whose question it did not see in training: it never
    saw that condition either, so nothing needs holding back, and the larger test set narrows the
    interval. Rows: study, method, train, test, n, positives, acc, auroc and its CI.
    """
    from .errors import GradeError

    out = []
    for method in methods:
        for a, b in ((first, second), (second, first)):
            if not (a.has(method) and b.has(method)):
                continue
            try:
                scorer = make_scorer(method, protocol).fit(a, a.rows("train"), a.rows("val"))
            except GradeError as exc:  # a class missing from a small training split
                log.warning("%s not fitted on %s: %s", method, a.dataset, exc)
                continue
            own, _ = evaluate_method(method, a, protocol, scorer=scorer)
            out.append({"study": study, "method": method, "train": a.dataset, "test": a.dataset, **own})
            seen = set(a.ids[a.rows(("train", "val"))])
            rows = np.array([i for i in range(len(b.ids)) if b.ids[i] not in seen], dtype=int)
            if len(rows) == 0 or len(set(b.y[rows])) < 2:
                continue
            other, _ = evaluate_method(method, a, protocol, scorer=scorer, test_table=b, test_rows=rows)
            out.append({"study": study, "method": method, "train": a.dataset, "test": b.dataset, **other})
    return out


@dataclass
class BenchmarkResult:
    """Every study of one benchmark run; saves itself as CSV + JSON + Markdown (:meth:`save`) and reads
    back (:meth:`load`). Figures are drawn elsewhere (:mod:`grade.report`, the app)."""

    model: str
    protocol: dict
    datasets: dict[str, dict]  # per dataset: class counts, eligibility, split sizes, reason
    main: list[dict]
    transfer: list[dict]
    robustness: list[dict]
    ablations: list[dict]
    confidently_wrong: list[dict]
    notes: list[str] = field(default_factory=list)
    conditions: list[dict] = field(default_factory=list)  # with/without document, short/long document

    #: CSV file per study (only studies with rows are written)
    TABLES = ("main_table", "transfer", "robustness", "ablations", "confidently_wrong", "conditions")

    def _rows(self, name: str) -> list[dict]:
        return getattr(self, "main" if name == "main_table" else name)

    def save(self, out: str | Path) -> list[Path]:
        """``main_table.{csv,md}``, ``transfer.csv``, ``robustness.csv``, ``ablations.csv``,
        ``confidently_wrong.csv``, ``conditions.csv`` and ``summary.json`` under ``out``."""
        out = Path(out)
        out.mkdir(parents=True, exist_ok=True)
        written = []
        for name in self.TABLES:
            rows = self._rows(name)
            if rows:
                write_csv(rows, out / f"{name}.csv")
                written.append(out / f"{name}.csv")
        (out / "main_table.md").write_text(main_markdown(self), encoding="utf-8")
        written.append(out / "main_table.md")
        summary = {"model": self.model, "protocol": self.protocol, "datasets": self.datasets, "notes": self.notes}
        (out / "summary.json").write_text(json.dumps(summary, indent=2, default=float) + "\n", encoding="utf-8")
        written.append(out / "summary.json")
        return written

    @classmethod
    def load(cls, folder: str | Path) -> "BenchmarkResult":
        """A result read back from a results folder (CSV + summary.json)."""
        import pandas as pd

        folder = Path(folder)
        summary_path = folder / "summary.json"
        if not summary_path.is_file():
            raise InputError(f"{folder} holds no benchmark results (no summary.json)")
        summary = json.loads(summary_path.read_text(encoding="utf-8"))

        def rows(name: str) -> list[dict]:
            path = folder / f"{name}.csv"
            if not path.is_file():
                return []
            frame = pd.read_csv(path)
            return [{k: (float("nan") if isinstance(v, float) and math.isnan(v) else v) for k, v in r.items()}
                    for r in frame.to_dict("records")]

        return cls(model=summary.get("model", folder.name), protocol=summary.get("protocol", {}),
                   datasets=summary.get("datasets", {}), main=rows("main_table"), transfer=rows("transfer"),
                   robustness=rows("robustness"), ablations=rows("ablations"),
                   confidently_wrong=rows("confidently_wrong"), notes=summary.get("notes", []),
                   conditions=rows("conditions"))


def run_studies(model: str, tables: dict[str, Table], perturbed: dict[tuple[str, str], Table],
                  dataset_info: dict[str, dict], protocol: Protocol, *, notes: list[str] | None = None,
                  studies: tuple[str, ...] = ("transfer", "robustness", "ablations", "confidently_wrong"),
                  condition_pairs: dict[str, tuple[Table, Table]] | None = None) -> BenchmarkResult:
    """All studies on assembled tables (see :func:`build_table`). ``condition_pairs``: study name ->
    two tables of the same questions under two conditions (see :func:`condition_transfer`)."""
    if not tables:
        raise InputError("no dataset has enough labelled questions of each class for a benchmark")
    main, fitted = main_table(tables, protocol)
    transfer = []
    if "transfer" in studies:
        transfer = transfer_matrix(tables, fitted, protocol)
        sources = source_tables(tables, protocol)
        if len(sources) > 1:
            _, fitted_sources = main_table(sources, protocol, methods=SUPERVISED)
            transfer += [{**r, "between_sources": True} for r in transfer_matrix(sources, fitted_sources, protocol)]
            notes = list(notes or []) + [
                "Transfer between the sources of a pooled dataset (rows named pool:source) uses each source's own "
                "split; these sources are smaller than the 30-per-class bar, so read them as exploratory."]
    return BenchmarkResult(
        model=model,
        protocol=asdict(protocol),
        datasets=dataset_info,
        main=main,
        transfer=transfer,
        robustness=robustness(tables, perturbed, fitted, protocol) if "robustness" in studies else [],
        ablations=ablations(tables, protocol) if "ablations" in studies else [],
        confidently_wrong=confidently_wrong_study(tables, fitted, protocol) if "confidently_wrong" in studies else [],
        notes=list(notes or []),
        conditions=[r for name, (a, b) in (condition_pairs or {}).items() for r in condition_transfer(name, a, b, protocol)],
    )


# --------------------------------------------------------------------------------------------------
# output


def format_number(x: float, digits: int = 3) -> str:
    return "–" if x is None or (isinstance(x, float) and not math.isfinite(x)) else f"{x:.{digits}f}"


def main_markdown(result: BenchmarkResult) -> str:
    """Methods as rows, datasets as column pairs: ``Acc`` and ``AUROC [95% CI]``."""
    datasets = list(dict.fromkeys(r["dataset"] for r in result.main))
    if not datasets:
        return "No dataset qualified for the benchmark (see summary.json for the class counts).\n"
    cell = {(r["dataset"], r["method"]): r for r in result.main}
    head = "| method | " + " | ".join(f"{d} Acc | {d} AUROC [95% CI]" for d in datasets) + " |"
    sep = "|---|" + "---|---|" * len(datasets)
    lines = [head, sep]
    for method in METHOD_ORDER:
        if not any((d, method) in cell for d in datasets):
            continue
        parts = []
        for d in datasets:
            r = cell.get((d, method))
            if r is None:
                parts += ["n/a", "n/a"]
                continue
            a = format_number(r["auroc"])
            ci = f" [{format_number(r['auroc_lo'], 2)}, {format_number(r['auroc_hi'], 2)}]" if math.isfinite(r["auroc"]) else ""
            parts += [format_number(r["acc"]), a + ci]
        lines.append(f"| {method} | " + " | ".join(parts) + " |")
    tests = ", ".join(f"{d}: n={cell[(d, next(m for m in METHOD_ORDER if (d, m) in cell))]['n']}"
                      f" ({cell[(d, next(m for m in METHOD_ORDER if (d, m) in cell))]['positives']} answerable)"
                      for d in datasets)
    lines.append("")
    lines.append(f"Test sets: {tests}.")
    return "\n".join(lines) + "\n"


def write_csv(rows: list[dict], path: Path) -> None:
    import pandas as pd

    path.parent.mkdir(parents=True, exist_ok=True)
    pd.DataFrame(rows).to_csv(path, index=False, float_format="%.4f")
