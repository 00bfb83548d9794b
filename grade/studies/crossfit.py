"""The cross-fitted benchmark: every labelled question scored by detectors that never saw it.

The balanced, capped protocol (:mod:`grade.studies.runs`: one 60/20/20 split of a few hundred capped rows)
tests on 16-24 questions a dataset; here every labelled question is a test question once.

Protocol (per dataset)
----------------------
* Folds: stratified ``k``-fold by question over every labelled row (``k`` = 5, seeded): ``folds`` (n,) in
  ``[0, k)``. A row's fold depends only on the label file, so caches that arrive later (baselines of more
  rows, more feature rows) keep every row's fold.
* Trained detectors (GRADE's probes, Align-P, SAPLMA) are fitted once per fold on the rows of the other
  folds that have their inputs, and score the rows of that fold. Whatever they choose (the MLP's epoch,
  logistic regression's C, Align-P's layer, the GRADE variant of ``GRADE_* (selected)``) is chosen on a
  stratified inner split of those training rows; probes decide at 0.5, as the paper's.
* Training-free scores (P-Entropy, IC, CoE-R/C, self-consistency, EigenScore) need no fit; their accuracy
  uses the cut with the best accuracy on the training folds. Judge is a yes/no answer (accuracy only).
  Length_pre / Length_pos (tokens the GRADE loss is computed over) pick their direction and cut on the
  training folds.
* Tables: the main table scores every method on the same questions, the rows of a dataset that have every
  method's inputs; ``all_questions`` scores each method on every row it has inputs for. AUROC and accuracy
  with stratified bootstrap intervals of the pooled out-of-fold scores (:mod:`grade.common.metrics`), selective
  answering, a paired bootstrap of each detector's AUROC difference to P-Entropy's and to length's on the
  rows both scored, transfer (a detector's fold models scoring another dataset's questions they never
  saw) and the confidently wrong questions.

Data shapes
-----------
:class:`CrossfitData`, one per dataset, row-aligned (n labelled questions):

* ``ids`` (n,) str, ``y`` (n,) 0/1 (1 = answerable), ``folds`` (n,) int, ``confidently_wrong`` (n,) bool;
* ``grade[loss]`` for loss in pre / pos: ``rank_ratio``, ``srank_h``, ``srank_g`` (n, L), ``loss_value`` and
  ``n_tokens`` (n,); NaN rows where the question has no feature row;
* ``scores[method]`` (n,) training-free scores, NaN where not cached;
* ``align[layer]`` (n, d) last prompt token states, ``saplma`` (n, d): NaN rows where not cached.

Scores, thresholds and selections are kept per column (:class:`Column`: ``scores`` (n,), ``thresholds``
(k,)) and written as ``crossfit_scores.csv.xz`` (one row per question, one column per method and GRADE
variant) with ``crossfit_state.json.xz`` (per column: the fingerprint of its inputs, the per-fold thresholds
and choices). A column whose fingerprint is unchanged is read back instead of refitted: new baseline caches
refit only the baselines, a relabelled dataset only that dataset.
"""

from __future__ import annotations

import hashlib
import json
import logging
import lzma
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import numpy as np

from ..common.io import atomic_write, read_text
from ..common.metrics import auroc, best_threshold

log = logging.getLogger(__name__)

#: Bump when a change to this module changes any fitted score: every stored column is then refitted.
CROSSFIT_VERSION = 1
LOSSES = ("pre", "pos")
TRAINING_FREE = ("P-Entropy", "IC", "CoE-R", "CoE-C", "Self-consistency", "EigenScore", "Judge")
LENGTHS = ("Length_pre", "Length_pos")
INPUT_KINDS = ("rank_ratio", "sranks", "sranks_loss", "loss")
BANDS = ("all", "early", "middle", "late")
#: The shipped probes' estimator per dataset (scripts/build/build_probes.py, ``CONFIGS``): GSM8K's own probes are
#: logistic regressions; every other dataset is served by the general MLP.
SHIPPED_ESTIMATOR = {"gsm8k": "logreg"}


def main_methods() -> tuple[str, ...]:
    """The main table's rows, in order (GRADE's forms first)."""
    grade = tuple(f"GRADE_{loss}{form}" for form in ("", " (shipped)", " (selected)") for loss in LOSSES)
    return (*grade, "P-Entropy", "Judge", "IC", "Align-P", "SAPLMA", "CoE-R", "CoE-C", "Self-consistency",
            "EigenScore", *LENGTHS)


SUPERVISED = tuple(m for m in main_methods() if m.startswith("GRADE")) + ("Align-P", "SAPLMA")


@dataclass(frozen=True)
class Variant:
    """One GRADE detector: which loss, what it reads, which layers, which estimator.

    inputs: ``rank_ratio`` (the paper's), ``sranks`` (log srank(C_h), log srank(C_g) per layer), ``sranks_loss``
    (those and the loss: the shipped probes'), ``loss`` (the loss value alone: a reference, never selected).
    band: all layers or one third of them (early / middle / late)."""

    loss: str
    inputs: str = "rank_ratio"
    band: str = "all"
    estimator: str = "mlp"

    @property
    def key(self) -> str:
        return f"GRADE_{self.loss}[{self.estimator},{self.inputs},{self.band}]"

    def matrix(self, data: "CrossfitData") -> np.ndarray:
        """(n, w) inputs; NaN rows where the question has no feature row."""
        g = data.grade.get(self.loss)
        if g is None:
            return np.full((len(data.y), 1), np.nan)
        L = g["rank_ratio"].shape[1]
        third = max(1, L // 3)
        cols = {"all": slice(0, L), "early": slice(0, third), "middle": slice(third, 2 * third),
                "late": slice(2 * third, L)}[self.band]
        loss = g["loss_value"][:, None]
        if self.inputs == "loss":
            return loss
        if self.inputs == "rank_ratio":
            return g["rank_ratio"][:, cols]
        # a layer whose gradient vanished has stable rank 0: the floor keeps its log finite, as grade.verdict.probe.inputs does
        logs = [np.log(np.maximum(g[name][:, cols], 1e-6)) for name in ("srank_h", "srank_g")]
        return np.hstack(logs + ([loss] if self.inputs == "sranks_loss" else []))


def paper_variant(loss: str) -> Variant:
    return Variant(loss, "rank_ratio", "all", "mlp")


def shipped_variant(loss: str, dataset: str) -> Variant:
    return Variant(loss, "sranks_loss", "all", SHIPPED_ESTIMATOR.get(dataset, "mlp"))


def variant_pool(loss: str, mlp: bool = True) -> list[Variant]:
    """The variants ``GRADE_<loss> (selected)`` chooses from on inner folds: logistic regression on all
    layers' ratios, on the two stable ranks apart, and on those and the loss in every band; and (``mlp``) the
    paper's MLP on all layers' ratios and on the stable ranks with the loss. The loss alone is not GRADE and
    is left out. (Bands of the ratios alone were left out for time: on two shared cores each variant costs
    five fits per dataset and loss.)"""
    pool = [Variant(loss, "rank_ratio", "all", "logreg"), Variant(loss, "sranks", "all", "logreg")]
    pool += [Variant(loss, "sranks_loss", band, "logreg") for band in BANDS]
    if mlp:
        pool += [Variant(loss, "rank_ratio", "all", "mlp"), Variant(loss, "sranks_loss", "all", "mlp")]
    return pool


def reported_variants(loss: str, dataset: str, mlp: bool = True) -> list[Variant]:
    """Every variant fitted and reported (``grade_variants.csv``): the pool, the paper's and the shipped form,
    the loss alone."""
    out = variant_pool(loss, mlp) + [paper_variant(loss), shipped_variant(loss, dataset), Variant(loss, "loss", "all", "logreg")]
    return list(dict.fromkeys(out))


# --------------------------------------------------------------------------------------------------
# data


@dataclass
class CrossfitData:
    """Everything known about one dataset's labelled questions, row-aligned (shapes: module docstring)."""

    name: str
    ids: np.ndarray
    y: np.ndarray
    folds: np.ndarray
    confidently_wrong: np.ndarray
    grade: dict[str, dict[str, np.ndarray]] = field(default_factory=dict)
    scores: dict[str, np.ndarray] = field(default_factory=dict)
    align: dict[int, np.ndarray] = field(default_factory=dict)
    saplma: np.ndarray | None = None
    sources: dict[str, str] = field(default_factory=dict)  # what was read, for the summary

    def has_inputs(self, method: str) -> np.ndarray:
        """(n,) bool: the rows ``method`` can score."""
        n = len(self.y)
        if method.startswith("GRADE_"):
            loss = method.split("_")[1].split(" ")[0].split("[")[0]
            g = self.grade.get(loss)
            return np.zeros(n, bool) if g is None else np.isfinite(g["rank_ratio"]).all(axis=1) & np.isfinite(g["loss_value"])
        if method == "Align-P":
            return np.zeros(n, bool) if not self.align else np.all([np.isfinite(x).all(axis=1) for x in self.align.values()], axis=0)
        if method == "SAPLMA":
            return np.zeros(n, bool) if self.saplma is None else np.isfinite(self.saplma).all(axis=1)
        if method in LENGTHS:
            g = self.grade.get(method.split("_")[1])
            return np.zeros(n, bool) if g is None else np.isfinite(g["n_tokens"])
        s = self.scores.get(method)
        return np.zeros(n, bool) if s is None else np.isfinite(s)


def assign_folds(y: np.ndarray, k: int = 5, seed: int = 42) -> np.ndarray:
    """(n,) fold of each row: stratified by label, shuffled with ``seed``."""
    from sklearn.model_selection import StratifiedKFold

    folds = np.full(len(y), -1, dtype=int)
    for f, (_, test) in enumerate(StratifiedKFold(k, shuffle=True, random_state=seed).split(np.zeros(len(y)), y)):
        folds[test] = f
    return folds


def load_dataset(name: str, label_paths: list[Path], *, features_dir: Path | None, cache_dir: Path | None,
                 model: str, k: int = 5, seed: int = 42) -> CrossfitData:
    """One dataset's labelled rows with whatever inputs exist: the feature stores
    ``<features_dir>/<loss>/<label file stem>.parquet`` and the baseline caches of ``name``
    (:func:`grade.verdict.detectors.baselines.cache_path`, main and samples part). Missing inputs stay NaN."""
    import pandas as pd

    from ..verdict.detectors.baselines import SCORE_KEYS, cache_path, decode_vector, read_caches
    from ..batch.features import feature_matrix
    from .tables import confidently_wrong, read_labels

    rows = [r for p in label_paths for r in read_labels(p)]
    ids = np.array([str(r["id"]) for r in rows], dtype=object)
    if len(set(ids)) != len(ids):
        raise ValueError(f"{name}: a question id appears twice in {label_paths}")
    y = np.array([int(r["label"]) for r in rows])
    data = CrossfitData(name, ids, y, assign_folds(y, k, seed), np.array([confidently_wrong(r) for r in rows]))
    position = {i: j for j, i in enumerate(ids)}
    with_context = {str(r["id"]): bool(r.get("context")) for r in rows}
    stem = Path(label_paths[0]).name.split(".jsonl")[0] if len(label_paths) == 1 else name
    for loss in LOSSES:
        path = None if features_dir is None else Path(features_dir) / loss / f"{stem}.parquet"
        if path is None or not path.exists():
            continue
        frame = pd.read_parquet(path, columns=["id", "has_context", "rank_ratio", "srank_h", "srank_g", "loss_value",
                                               "n_tokens"]).drop_duplicates("id")
        frame = frame[frame["id"].astype(str).isin(position)]
        # a store of the other condition (with / without the document) has the same ids: refuse it
        wrong = [i for i, c in zip(frame["id"].astype(str), frame["has_context"]) if bool(c) != with_context[i]]
        if wrong:
            raise ValueError(f"{path}: {len(wrong)} rows were computed with{'out' if with_context[wrong[0]] else ''} "
                             f"the document, unlike the labelled questions of {name}")
        where = np.array([position[str(i)] for i in frame["id"]], dtype=int)
        g = {}
        for column in ("rank_ratio", "srank_h", "srank_g"):
            values = feature_matrix(frame, column) if len(frame) else np.zeros((0, 1))
            g[column] = np.full((len(y), values.shape[1]), np.nan)
            g[column][where] = values
        for column in ("loss_value", "n_tokens"):
            g[column] = np.full(len(y), np.nan)
            g[column][where] = frame[column].to_numpy(dtype=float)
        data.grade[loss] = g
        data.sources[f"features_{loss}"] = str(path)
    if cache_dir is not None:
        paths = [cache_path(cache_dir, model, name), cache_path(cache_dir, model, name, part="samples")]
        cache = read_caches(paths)
        records = [cache.get(i) for i in ids]
        for method, key in SCORE_KEYS.items():
            values = np.array([np.nan if r is None or r.get(key) is None else float(r[key]) for r in records])
            if np.isfinite(values).any():
                data.scores[method] = values
        layers = sorted({int(layer) for r in records if r for layer in r.get("align_hidden", {})})
        for layer in layers:
            data.align[layer] = _stack([None if r is None or str(layer) not in r.get("align_hidden", {})
                                        else decode_vector(r["align_hidden"][str(layer)]) for r in records])
        if any(r is not None and r.get("saplma_hidden") for r in records):
            data.saplma = _stack([decode_vector(r["saplma_hidden"]) if r and r.get("saplma_hidden") else None for r in records])
        data.sources["baselines"] = ", ".join(str(p) for p in paths if p.exists())
    return data


def _stack(vectors: list) -> np.ndarray:
    """(n, d) float32 with NaN rows where a vector is None."""
    d = next(len(v) for v in vectors if v is not None)
    out = np.full((len(vectors), d), np.nan, dtype=np.float32)
    for i, v in enumerate(vectors):
        if v is not None:
            out[i] = v
    return out


# --------------------------------------------------------------------------------------------------
# fitting


@dataclass
class Column:
    """One method's (or variant's) cross-fitted scores on one dataset.

    scores : (n,) out-of-fold score, higher = answerable; NaN where the row has no inputs.
    thresholds : (k,) the cut each fold's predictions use (``score >= threshold`` = answerable).
    auroc : False for Judge (a decision, no ranking).
    extra : per-fold choices (Align-P's layer and C, the selected GRADE variant), inner AUROCs."""

    scores: np.ndarray
    thresholds: np.ndarray
    auroc: bool = True
    extra: dict = field(default_factory=dict)
    fingerprint: str = ""

    def predictions(self, folds: np.ndarray) -> np.ndarray:
        """(n,) 1 = answerable; a missing score counts as unanswerable."""
        t = self.thresholds[folds]
        return np.where(np.isfinite(self.scores), self.scores >= t, False).astype(int)


def fingerprint(*parts) -> str:
    """A digest of a column's inputs (arrays by their bytes), so that a stored column is reused only when
    nothing it was computed from changed."""
    h = hashlib.sha256(f"crossfit-v{CROSSFIT_VERSION}".encode())
    for part in parts:
        if isinstance(part, np.ndarray):
            a = np.ascontiguousarray(part)
            h.update(str((a.dtype.str, a.shape)).encode())
            h.update(a.tobytes() if a.dtype != object else "\x1f".join(map(str, a.ravel())).encode())
        else:
            h.update(repr(part).encode())
    return h.hexdigest()[:20]


def inner_split(y: np.ndarray, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Positions (into ``y``) of a stratified 75 / 25 split of a fold's training rows: what is chosen
    inside the training folds is chosen on it."""
    from ..verdict.probe import stratified_split

    return stratified_split(y, fractions=(0.75, 0.25), seed=seed)


class Fitted:
    """A fitted detector: ``score(rows) -> (m,)`` for rows of its own dataset, ``apply(data, rows)`` for rows
    of another (transfer), and the cut its predictions use."""

    def __init__(self, score: Callable[[np.ndarray], np.ndarray], threshold: float = 0.5,
                 apply: Callable[["CrossfitData", np.ndarray], np.ndarray] | None = None, **info):
        self.score, self.threshold, self.apply, self.info = score, threshold, apply, info


def fit_estimator(estimator: str, X: np.ndarray, y: np.ndarray, seed: int, epochs: int = 100) -> Fitted:
    """The paper's MLP or logistic regression (:class:`grade.verdict.probe.Probe`), its epoch or C chosen on a
    stratified 15 % of ``X`` (inside the training rows)."""
    from ..verdict.probe import Probe

    # Probe checks that the width is a layer count of its ``inputs``; a band of stable ranks is not, and a
    # rank-ratio probe takes any width: the name is metadata only here.
    probe = Probe(estimator, seed=seed, epochs=epochs, inputs="rank_ratio").fit(X, y)
    return Fitted(lambda Z: probe.predict_proba(Z)[:, 1], 0.5)


def crossfit_column(data: CrossfitData, ok: np.ndarray, fit: Callable[[np.ndarray], Fitted], *,
                    with_auroc: bool = True, models: list | None = None) -> Column:
    """Fit ``fit(train_rows)`` once per fold on the ``ok`` rows of the other folds; score that fold's ``ok``
    rows. ``train_rows`` are indices into ``data``; the returned column's scores are NaN outside ``ok``.
    ``models`` (a list) receives each fold's fitted detector, for transfer."""
    k = int(data.folds.max()) + 1
    scores = np.full(len(data.y), np.nan)
    thresholds = np.full(k, np.nan)
    infos = []
    for f in range(k):
        train = np.flatnonzero(ok & (data.folds != f))
        test = np.flatnonzero(ok & (data.folds == f))
        if len(np.unique(data.y[train])) < 2:
            infos.append({"skipped": "one class in training"})
            if models is not None:
                models.append(None)
            continue
        fitted = fit(train)
        thresholds[f] = fitted.threshold
        if len(test):
            scores[test] = fitted.score(test)
        infos.append(fitted.info)
        if models is not None:
            models.append(fitted)
    extra = {"folds": infos} if any(infos) else {}
    return Column(scores, thresholds, with_auroc, extra)


def grade_fit(data: CrossfitData, variant: Variant, seed: int, epochs: int) -> Callable[[np.ndarray], Fitted]:
    X = variant.matrix(data)

    def fit(train: np.ndarray) -> Fitted:
        inner = fit_estimator(variant.estimator, X[train], data.y[train], seed, epochs)
        return Fitted(lambda rows: inner.score(X[rows]), inner.threshold,
                      lambda other, rows: inner.score(variant.matrix(other)[rows]))

    return fit


def align_fit(data: CrossfitData, seed: int) -> Callable[[np.ndarray], Fitted]:
    """Align-P: logistic regression on one layer's last prompt token state; the layer and C chosen on the
    inner split of the training rows, then refitted on all of them."""
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    def model(C):
        return make_pipeline(StandardScaler(), LogisticRegression(C=C, max_iter=2000, random_state=seed))

    def fit(train: np.ndarray) -> Fitted:
        a, b = inner_split(data.y[train], seed)
        best = None
        for layer in sorted(data.align):
            x = data.align[layer]
            for C in (0.01, 0.1, 1.0, 10.0):
                m = model(C).fit(x[train[a]], data.y[train[a]])
                score = auroc(data.y[train[b]], m.predict_proba(x[train[b]])[:, 1])
                key = (score if np.isfinite(score) else 0.5, -C, -layer)  # ties: stronger regularisation, earlier layer
                if best is None or key > best[0]:
                    best = (key, layer, C)
        _, layer, C = best
        m = model(C).fit(data.align[layer][train], data.y[train])
        return Fitted(lambda rows: m.predict_proba(data.align[layer][rows])[:, 1], 0.5,
                      lambda other, rows: m.predict_proba(other.align[layer][rows])[:, 1], layer=layer, C=C)

    return fit


def saplma_fit(data: CrossfitData, seed: int) -> Callable[[np.ndarray], Fitted]:
    """SAPLMA's fixed recipe (:class:`grade.verdict.detectors.SaplmaMLP`): nothing to choose."""
    from ..verdict.detectors import SaplmaMLP

    def fit(train: np.ndarray) -> Fitted:
        m = SaplmaMLP(seed).fit(data.saplma[train], data.y[train])
        return Fitted(lambda rows: m.predict_proba(data.saplma[rows])[:, 1], 0.5,
                      lambda other, rows: m.predict_proba(other.saplma[rows])[:, 1])

    return fit


def training_free_fit(data: CrossfitData, method: str) -> Callable[[np.ndarray], Fitted]:
    """A score used as it is: only the accuracy cut is fitted (best accuracy on the training rows). Length
    also picks its direction there (longer = less or more answerable)."""
    if method in LENGTHS:
        values = data.grade[method.split("_")[1]]["n_tokens"]
    else:
        values = data.scores[method]

    def fit(train: np.ndarray) -> Fitted:
        if method == "Judge":  # 1 = "I can answer", 0 = "Unknown": a decision already
            return Fitted(lambda rows: values[rows], 0.5)
        sign = -1.0 if method in LENGTHS and auroc(data.y[train], values[train]) < 0.5 else 1.0
        return Fitted(lambda rows: sign * values[rows], best_threshold(data.y[train], sign * values[train]), sign=sign)

    return fit


def select_column(data: CrossfitData, variants: list[Variant], columns: dict[str, Column], seed: int, epochs: int,
                  ok: np.ndarray) -> Column:
    """``GRADE_<loss> (selected)``: per fold, the variant with the best AUROC on the inner split of that
    fold's training rows (each variant fitted on the inner part only), then that variant's own fold model
    (fitted on all the training rows, in ``columns``) scores the fold."""
    k = int(data.folds.max()) + 1
    scores = np.full(len(data.y), np.nan)
    thresholds = np.full(k, 0.5)
    chosen, inner = [], []
    matrices = {v.key: v.matrix(data) for v in variants}
    for f in range(k):
        train = np.flatnonzero(ok & (data.folds != f))
        test = np.flatnonzero(ok & (data.folds == f))
        a, b = inner_split(data.y[train], seed)
        results = {}
        for v in variants:
            X = matrices[v.key]
            m = fit_estimator(v.estimator, X[train[a]], data.y[train[a]], seed, epochs)
            results[v.key] = auroc(data.y[train[b]], m.score(X[train[b]]))
        best = max(variants, key=lambda v: (np.nan_to_num(results[v.key], nan=0.5), v.estimator == "logreg"))
        chosen.append(best.key)
        inner.append({key: round(float(value), 4) for key, value in results.items()})
        scores[test] = columns[best.key].scores[test]
        thresholds[f] = columns[best.key].thresholds[f]
    return Column(scores, thresholds, True, {"chosen": chosen, "inner_auroc": inner})


# --------------------------------------------------------------------------------------------------
# running


@dataclass
class CrossfitConfig:
    """What one cross-fitted run reads and how it fits.

    datasets : name -> its labelled files (as :func:`grade.studies.benchmark.label_files` resolves ``NAME=FILE``).
    features_dir : ``<features_dir>/<loss>/<label file stem>.parquet`` feature stores of every labelled row.
    cache_dir : baseline caches, ``<cache_dir>/<model>/baselines/<name>[.samples].jsonl``.
    store : a results folder whose ``crossfit_scores.csv.xz`` / ``crossfit_state.json.xz`` are reused where the
        fingerprints match (normally the output folder)."""

    model: str
    datasets: dict[str, list[Path]]
    features_dir: Path | None
    cache_dir: Path | None
    k: int = 5
    seed: int = 42
    n_boot: int = 1000
    ci: float = 0.95
    epochs: int = 100
    min_per_class: int = 10
    #: the paper's MLP in the inner selection too: one more MLP fit per fold and variant; on two shared CPU
    #: cores that doubles the run, so by default the selection is among logistic regressions and both MLP
    #: forms are reported as rows of their own
    mlp_in_selection: bool = False
    store: Path | None = None


@dataclass
class CrossfitRun:
    """The data and every fitted column: ``columns[dataset][column name]``; ``models`` keeps each supervised
    method's fold detectors (for transfer) where they were fitted in this run."""

    config: CrossfitConfig
    data: dict[str, CrossfitData]
    columns: dict[str, dict[str, Column]]
    info: dict[str, dict]
    notes: list[str] = field(default_factory=list)
    models: dict = field(default_factory=dict)


def read_store(folder: Path | None) -> tuple[dict, dict]:
    """(state, {dataset: {column: (ids (n,), scores (n,))}}) of a results folder; empty without one."""
    state = read_state(folder) if folder is not None else None
    if state is None:
        return {}, {}
    import pandas as pd

    frame = pd.read_csv(Path(folder) / "crossfit_scores.csv.xz", dtype={"id": str, "dataset": str})
    stored = {}
    for name, part in frame.groupby("dataset", sort=False):
        stored[name] = {c: (part["id"].to_numpy(dtype=object), part[c].to_numpy(dtype=float)) for c in part.columns
                        if c not in ("dataset", "id", "label", "fold", "confidently_wrong")}
    return state, stored


def run_crossfit(config: CrossfitConfig, say: Callable[[str], None] = log.info,
                 on_dataset: Callable[["CrossfitRun"], None] | None = None) -> CrossfitRun:
    """Load every dataset, fit (or reuse) every column; ``on_dataset(run)`` after each dataset (the command
    saves the scores there, so that an interrupted run resumes)."""
    import time

    state, stored = read_store(config.store)
    data, columns, info = {}, {}, {}
    run = CrossfitRun(config, data, columns, info)
    for name, paths in config.datasets.items():
        if not paths or not all(Path(p).is_file() for p in paths):
            info[name] = {"eligible": False, "reason": f"no labelled file ({', '.join(map(str, paths)) or name})"}
            say(f"{name}: {info[name]['reason']}")
            continue
        d = load_dataset(name, [Path(p) for p in paths], features_dir=config.features_dir, cache_dir=config.cache_dir,
                         model=config.model, k=config.k, seed=config.seed)
        entry = {"labelled": int(len(d.y)), "answerable": int(d.y.sum()), "unanswerable": int(len(d.y) - d.y.sum()),
                 "labelled_files": [str(p) for p in paths], "sources": d.sources}
        entry["eligible"] = min(entry["answerable"], entry["unanswerable"]) >= config.min_per_class
        if not entry["eligible"]:
            entry["reason"] = (f"fewer than {config.min_per_class} questions in one class ({entry['answerable']} "
                               f"answerable, {entry['unanswerable']} unanswerable)")
            info[name] = entry
            say(f"{name}: skipped, {entry['reason']}")
            continue
        info[name], data[name] = entry, d
        t = time.perf_counter()
        columns[name] = fit_dataset(run, d, state.get("datasets", {}).get(name, {}), stored.get(name, {}), say)
        entry["inputs"] = {m: int(d.has_inputs(m).sum()) for m in main_methods() if d.has_inputs(m).any()}
        say(f"{name}: {len(d.y)} questions ({entry['answerable']} answerable), {time.perf_counter() - t:.0f} s")
        if on_dataset is not None:
            on_dataset(run)
    return run


def _reuse(fp: str, name: str, d: CrossfitData, state: dict, stored: dict) -> Column | None:
    saved = state.get(name)
    if not saved or saved.get("fingerprint") != fp or name not in stored:
        return None
    ids, values = stored[name]
    if len(ids) != len(d.ids) or not (ids == d.ids).all():
        return None
    return Column(values, np.array(saved["thresholds"], dtype=float), saved.get("auroc", True), saved.get("extra", {}), fp)


def fit_dataset(run: CrossfitRun, d: CrossfitData, state: dict, stored: dict, say) -> dict[str, Column]:
    """Every column of one dataset: the GRADE variants, the selected GRADE per loss, the baselines."""
    cfg = run.config
    out: dict[str, Column] = {}
    base = (d.ids, d.y, d.folds, cfg.seed)

    def get(name: str, ok: np.ndarray, fit, inputs, *, with_auroc=True) -> Column:
        fp = fingerprint(name, *base, ok, *inputs, cfg.epochs if name.startswith("GRADE") else 0)
        column = _reuse(fp, name, d, state, stored)
        if column is None:
            models: list = []
            column = crossfit_column(d, ok, fit, with_auroc=with_auroc, models=models)
            column.fingerprint = fp
            run.models[(d.name, name)] = models  # transfer scores other datasets with them
            say(f"  {d.name}: fitted {name} on {int(ok.sum())} questions")
        return column

    for loss in LOSSES:
        if loss not in d.grade:
            continue
        ok = d.has_inputs(f"GRADE_{loss}")
        if len(np.unique(d.y[ok])) < 2 or min(np.bincount(d.y[ok], minlength=2)) < cfg.k:
            run.notes.append(f"{d.name}: GRADE_{loss} not fitted ({int(ok.sum())} questions with features, "
                             f"{int(d.y[ok].sum())} answerable)")
            continue
        for v in reported_variants(loss, d.name, cfg.mlp_in_selection):
            out[v.key] = get(v.key, ok, grade_fit(d, v, cfg.seed, cfg.epochs), (v.matrix(d),))
        pool = variant_pool(loss, cfg.mlp_in_selection)
        sel = f"GRADE_{loss} (selected)"
        fp = fingerprint(sel, *base, ok, *[out[v.key].fingerprint for v in pool])
        column = _reuse(fp, sel, d, state, stored)
        if column is None:
            say(f"  {d.name}: selecting among {len(pool)} GRADE_{loss} variants on inner splits")
            column = select_column(d, pool, out, cfg.seed, cfg.epochs, ok)
            column.fingerprint = fp
        out[sel] = column
        for alias, v in ((f"GRADE_{loss}", paper_variant(loss)), (f"GRADE_{loss} (shipped)", shipped_variant(loss, d.name))):
            out[alias] = out[v.key]
            if (d.name, v.key) in run.models:
                run.models[(d.name, alias)] = run.models[(d.name, v.key)]
    for method, fit, inputs in (("Align-P", lambda: align_fit(d, cfg.seed), lambda: tuple(d.align[l] for l in sorted(d.align))),
                                ("SAPLMA", lambda: saplma_fit(d, cfg.seed), lambda: (d.saplma,))):
        ok = d.has_inputs(method)
        if ok.sum() and min(np.bincount(d.y[ok], minlength=2)) >= cfg.k:
            out[method] = get(method, ok, fit(), inputs())
    for method in (*TRAINING_FREE, *LENGTHS):
        ok = d.has_inputs(method)
        if ok.sum() and len(np.unique(d.y[ok])) == 2:
            values = d.scores.get(method) if method not in LENGTHS else d.grade[method.split("_")[1]]["n_tokens"]
            out[method] = get(method, ok, training_free_fit(d, method), (values,), with_auroc=method != "Judge")
    return out


#: Every column's per-question scores of a cross-fitted results folder (written by grade.studies.crossfit_report)
SCORES_FILE = "crossfit_scores.csv.xz"
#: What those scores were computed from (fingerprints, per-fold thresholds and choices), xz-compressed JSON
STATE_FILE = "crossfit_state.json.xz"


def read_state(folder: str | Path) -> dict | None:
    """The :data:`STATE_FILE` of a results folder (decompressed within the project's caps), or None where it has
    none."""
    path = Path(folder) / STATE_FILE
    return json.loads(read_text(path)) if path.is_file() else None


def write_state(folder: str | Path, state: dict, default=None) -> Path:
    """Write :data:`STATE_FILE` atomically (a run stopped while writing leaves the previous state readable)."""
    return atomic_write(Path(folder) / STATE_FILE, lzma.compress(
        (json.dumps(state, indent=1, default=default) + "\n").encode("utf-8"), preset=9 | lzma.PRESET_EXTREME))


def test_scores(folder: str | Path) -> list[dict]:
    """The main table's per-question scores of a cross-fitted results folder, long form (dataset, method, id,
    label, score, fold) in the order :func:`~grade.studies.crossfit_tables.main_rows` computes them: per dataset,
    each method of ``main_table.csv`` on the questions every one of them scores. Empty for another folder."""
    import pandas as pd

    folder = Path(folder)
    if not ((folder / SCORES_FILE).is_file() and (folder / "main_table.csv").is_file()):
        return []
    scores = pd.read_csv(folder / SCORES_FILE, dtype={"id": str, "dataset": str})
    main = pd.read_csv(folder / "main_table.csv")
    rows = []
    for name, part in scores.groupby("dataset", sort=False):
        methods = [m for m in main.loc[main["dataset"] == name, "method"] if m in part.columns]
        common = part[np.logical_and.reduce([np.isfinite(part[m].to_numpy(float)) for m in methods])] if methods else part[:0]
        for m in methods:
            rows += [{"dataset": name, "method": m, "id": i, "label": int(y), "score": float(s), "fold": int(f)}
                     for i, y, s, f in zip(common["id"], common["label"], common[m], common["fold"])]
    return rows
