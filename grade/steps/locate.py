"""Where does a reasoning trace go wrong? Per-step signals, the locators that rank steps with them, and
how well each finds a known first wrong step.

Three layers, in lm-polygraph's manner:

* **signals** (:func:`step_signals`): per-step statistics of one analysed trace, each (K,) for K steps:
  the step rank ratio (all layers, a layer band), its change from the previous step, epistemic shock
  (max, mean), the step's cross-entropy, token surprisal (max, mean) and the arithmetic / provenance
  check of :mod:`grade.steps.step_checks`. Pure functions of a trace-store row and its token rows.
* **locators** (:data:`LOCATORS`, :class:`StepProbe`): a score per step from the signals, higher = more
  likely the first wrong step. :data:`DEFAULT_LOCATOR` gives ``suspect_step``.
* **metrics** (:func:`localization_metrics`): top-1, top-3 and step-AUROC of a locator against known
  error steps, with bootstrap intervals and the chance rates beside them.

Steps are 1-based wherever a user sees them (``suspect_step``, ``error_step``); arrays here are 0-based.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Callable, Mapping, Sequence

import numpy as np

from .step_checks import check_steps

#: Signals that need no model at all (the check) and those from the model's pass.
SIGNALS = ("check", "rank_ratio", "rank_ratio_band", "rank_ratio_change", "shock_max", "shock_mean", "step_loss",
           "surprisal_max", "surprisal_mean")
#: The layer band (fraction of depth, start and end) of ``rank_ratio_band``: the top fifth of the layers, chosen
#: among contiguous bands on the injected errors of the benchmark's train split only (results/step_errors).
LAYER_BAND = (0.8, 1.0)
#: The check's score: an arithmetic error outranks an unexplained number; earlier findings outrank later ones
#: (the *first* wrong step), each in (0, 1] so that a model signal can break ties below them.
CHECK_WEIGHTS = {"arithmetic": 2.0, "provenance": 1.0}


@dataclass
class StepSignals:
    """Per-step signals of one trace: each array (K,). ``findings`` lists each step's check findings."""

    values: dict[str, np.ndarray]
    findings: list[list[dict]]

    @property
    def n_steps(self) -> int:
        return len(self.findings)

    def matrix(self, names: Sequence[str]) -> np.ndarray:
        """(K, len(names)) of the named signals."""
        return np.stack([self.values[n] for n in names], axis=1)


def _per_step(values: np.ndarray, steps: np.ndarray, n_steps: int, how: Callable) -> np.ndarray:
    out = np.full(n_steps, np.nan)
    for k in range(n_steps):
        chosen = values[steps == k + 1]
        chosen = chosen[np.isfinite(chosen)]
        if chosen.size:
            out[k] = how(chosen)
    return out


def check_scores(findings: Sequence[Sequence[dict]]) -> np.ndarray:
    """(K,) the check's score per step: 0 without findings, else its strongest kind's weight plus a bonus for
    coming early (so that the first flagged step ranks first)."""
    n = len(findings)
    out = np.zeros(n)
    for k, found in enumerate(findings):
        if found:
            out[k] = max(CHECK_WEIGHTS[f["kind"]] for f in found) + (n - k) / (n + 1)
    return out


def step_signals(question: str, step_texts: Sequence[str], step_ratios: np.ndarray, step_loss: Sequence[float],
                 token_steps: np.ndarray | None = None, shock: np.ndarray | None = None,
                 surprisal: np.ndarray | None = None) -> StepSignals:
    """Signals of one trace.

    Parameters
    ----------
    step_ratios : (K, L) rank ratio per step and layer.
    step_loss : (K,) each step's cross-entropy.
    token_steps : (n,) 1-based step of each response token; with ``shock`` (n,) and ``surprisal`` (n,).
    """
    ratios = np.asarray(step_ratios, dtype=float).reshape(len(step_texts), -1)
    n_steps, n_layers = ratios.shape
    lo, hi = int(round(LAYER_BAND[0] * n_layers)), max(int(round(LAYER_BAND[1] * n_layers)), 1)
    step_ratio = ratios.mean(axis=1)
    change = np.diff(step_ratio, prepend=step_ratio[:1])
    findings = [[f.to_dict() for f in found] for found in check_steps(question, step_texts)]
    values = {
        "check": check_scores(findings),
        "rank_ratio": step_ratio,
        "rank_ratio_band": ratios[:, lo:hi].mean(axis=1),
        "rank_ratio_change": change,
        "step_loss": np.asarray(step_loss, dtype=float),
    }
    nan = np.full(n_steps, np.nan)
    have_tokens = token_steps is not None
    for name, series, how in (("shock_max", shock, np.max), ("shock_mean", shock, np.mean),
                              ("surprisal_max", surprisal, np.max), ("surprisal_mean", surprisal, np.mean)):
        values[name] = (_per_step(np.asarray(series, dtype=float), np.asarray(token_steps), n_steps, how)
                        if have_tokens and series is not None else nan.copy())
    return StepSignals(values, findings)


def token_shock(scores: np.ndarray) -> np.ndarray:
    """Per-token shock in [0, 1] within one trace. scores: (L, n) raw row sums of C_g -> (n,).

    Layers have very different scales, so each layer's absolute scores are divided by their largest value
    over the trace's tokens, then averaged over layers and divided by the largest result (the Reasoning
    trace page's scale, for one trace).
    """
    scores = np.abs(np.asarray(scores, dtype=np.float64))
    if scores.size == 0:
        return np.zeros(scores.shape[-1] if scores.ndim == 2 else 0)
    top = np.nanmax(scores, axis=1, keepdims=True)
    top[~(top > 0)] = 1.0
    values = np.nanmean(scores / top, axis=0)
    peak = np.nanmax(values) if values.size else 0.0
    return np.nan_to_num(values / peak if peak > 0 else values)


def signals_of_result(result) -> tuple[StepSignals, np.ndarray, np.ndarray, np.ndarray]:
    """Signals of a step-wise ``pos`` :class:`~grade.gradients.result.GradeResult` with token scores.

    Returns (signals, step of each response token (n,) 1-based, shock (n,) in [0, 1], surprisal (n,) nats).
    """
    start = result.response_start or 0
    n = len(result.input_ids) - start
    step_of = np.zeros(n, dtype=int)
    for k, step in enumerate(result.steps, 1):
        step_of[step.start - start: step.end - start] = k
    shock = token_shock(result.token_scores[:, start:]) if result.token_scores is not None else np.full(n, np.nan)
    surprisal = (np.asarray(result.token_surprisal[start:], dtype=float) if result.token_surprisal is not None
                 else np.full(n, np.nan))
    ratios = np.stack([s.rank_ratio for s in result.steps])
    signals = step_signals(result.question, [s.text for s in result.steps], ratios,
                           [s.loss_value for s in result.steps], step_of, shock, surprisal)
    return signals, step_of, shock, surprisal


# ------------------------------------------------------------------------------------------------
# locators


def _rank01(values: np.ndarray) -> np.ndarray:
    """Values mapped to [0, 1) by rank within the trace (NaN lowest), for tie-breaking below the check."""
    values = np.where(np.isfinite(values), values, -np.inf)
    order = np.argsort(np.argsort(values, kind="stable"), kind="stable")
    return order / max(len(values), 1)


def _signal(name: str) -> Callable[[StepSignals], np.ndarray]:
    return lambda s: s.values[name]


def _check_then(name: str) -> Callable[[StepSignals], np.ndarray]:
    """The check's flagged steps first (earliest first), the others ordered by a model signal."""
    return lambda s: 10.0 * s.values["check"] + _rank01(s.values[name])


#: name -> (description, locator). Every locator maps StepSignals to (K,) scores, higher = more suspect.
LOCATORS: dict[str, tuple[str, Callable[[StepSignals], np.ndarray]]] = {
    "check+surprisal": ("arithmetic / provenance check, then max token surprisal", _check_then("surprisal_max")),
    "check": ("arithmetic / provenance check alone (ties: earliest flagged)", _signal("check")),
    "surprisal_max": ("max token surprisal in the step", _signal("surprisal_max")),
    "step_loss": ("step cross-entropy (the mean token surprisal of the step)", _signal("step_loss")),
    "rank_ratio": ("step rank ratio, mean over layers (the Traces page's peak step)", _signal("rank_ratio")),
    "rank_ratio_band": ("step rank ratio, top fifth of the layers", _signal("rank_ratio_band")),
    "rank_ratio_change": ("change of the step rank ratio from the previous step", _signal("rank_ratio_change")),
    "shock_max": ("max epistemic shock in the step (the heatmap's brightest token)", _signal("shock_max")),
    "shock_mean": ("mean epistemic shock in the step", _signal("shock_mean")),
}
#: The locator behind ``suspect_step``: the best on the benchmark's injected and own errors (results/step_errors).
DEFAULT_LOCATOR = "check+surprisal"


def locate(signals: StepSignals, locator: str = DEFAULT_LOCATOR) -> np.ndarray:
    """(K,) scores of one locator (higher = more suspect)."""
    if locator not in LOCATORS:
        raise KeyError(f"unknown locator {locator!r}; one of {', '.join(LOCATORS)}")
    return np.asarray(LOCATORS[locator][1](signals), dtype=float)


def ranked_steps(scores: np.ndarray) -> list[int]:
    """1-based steps from most to least suspect (ties: the earlier step first; NaN last)."""
    keyed = np.where(np.isfinite(scores), scores, -np.inf)
    return [int(k) + 1 for k in sorted(range(len(keyed)), key=lambda k: (-keyed[k], k))]


# ------------------------------------------------------------------------------------------------
# a learned step-level probe


#: Per-step features of :class:`StepProbe`, besides the per-layer step rank ratios: each z-scored within its
#: trace, since a probe compares steps of one trace.
PROBE_SCALARS = ("step_loss", "surprisal_max", "shock_max", "shock_mean", "rank_ratio_change")
GRADE_FEATURES = ("shock_max", "shock_mean", "rank_ratio_change")  # besides the per-layer ratios


def _zscore(x: np.ndarray) -> np.ndarray:
    x = np.where(np.isfinite(x), x, np.nan)
    mean = np.nanmean(x, axis=0, keepdims=True) if len(x) else 0
    std = np.nanstd(x, axis=0, keepdims=True) if len(x) else 1
    std = np.where(np.isfinite(std) & (std > 0), std, 1.0)
    return np.nan_to_num((x - mean) / std)


class StepProbe:
    """Logistic regression over per-step features, trained on traces with a known error step.

    Features per step (z-scored within the trace): the per-layer step rank ratios (L) and
    :data:`PROBE_SCALARS`; with ``grade=False`` only those that need no backward pass (loss and surprisal),
    to measure what GRADE's signals add. Saved as JSON (coefficients only).
    """

    def __init__(self, grade: bool = True, C: float = 1.0):
        self.grade = grade
        self.C = C
        self.coef_: np.ndarray | None = None
        self.intercept_: float = 0.0
        self.n_layers_: int | None = None

    def _features(self, signals: StepSignals, step_ratios: np.ndarray) -> np.ndarray:
        scalars = [n for n in PROBE_SCALARS if self.grade or n not in GRADE_FEATURES]
        parts = [signals.matrix(scalars)]
        if self.grade:
            parts.append(np.asarray(step_ratios, dtype=float).reshape(signals.n_steps, -1))
        return _zscore(np.concatenate(parts, axis=1))

    def fit(self, traces: Sequence[tuple[StepSignals, np.ndarray, int]]) -> "StepProbe":
        """traces: (signals, step_ratios (K, L), error step 1-based)."""
        from sklearn.linear_model import LogisticRegression

        X = np.concatenate([self._features(s, r) for s, r, _ in traces])
        y = np.concatenate([(np.arange(s.n_steps) == e - 1).astype(int) for s, _, e in traces])
        model = LogisticRegression(C=self.C, max_iter=2000, class_weight="balanced").fit(X, y)
        self.coef_, self.intercept_ = model.coef_[0], float(model.intercept_[0])
        self.n_layers_ = int(np.asarray(traces[0][1]).reshape(traces[0][0].n_steps, -1).shape[1])
        return self

    def score(self, signals: StepSignals, step_ratios: np.ndarray) -> np.ndarray:
        """(K,) log-odds that each step is the error step."""
        if self.coef_ is None:
            raise RuntimeError("the step probe is not fitted")
        return self._features(signals, step_ratios) @ self.coef_ + self.intercept_

    def to_json(self) -> str:
        return json.dumps({"grade": self.grade, "C": self.C, "coef": [float(c) for c in self.coef_],
                           "intercept": self.intercept_, "n_layers": self.n_layers_, "scalars": list(PROBE_SCALARS)})

    @classmethod
    def from_json(cls, text: str) -> "StepProbe":
        data = json.loads(text)
        probe = cls(bool(data["grade"]), float(data["C"]))
        probe.coef_ = np.asarray(data["coef"], dtype=float)
        probe.intercept_ = float(data["intercept"])
        probe.n_layers_ = data.get("n_layers")
        return probe


# ------------------------------------------------------------------------------------------------
# metrics


def _hit_at(scores: np.ndarray, error: int, k: int) -> float:
    """Chance that the error step (0-based) is among the top k under random tie-breaking."""
    s = np.where(np.isfinite(scores), scores, -np.inf)
    above = int(np.sum(s > s[error]))
    tied = int(np.sum(s == s[error]))
    return float(np.clip((k - above) / tied, 0.0, 1.0))


def _step_auroc(scores: np.ndarray, error: int) -> float:
    s = np.where(np.isfinite(scores), scores, -np.inf)
    others = np.delete(s, error)
    if not others.size:
        return float("nan")
    return float((np.sum(others < s[error]) + 0.5 * np.sum(others == s[error])) / others.size)


def localization_metrics(per_trace: Sequence[tuple[np.ndarray, int]], *, n_boot: int = 1000,
                         seed: int = 0) -> dict:
    """Top-1, top-3 and step-AUROC over traces, each with a 95 % bootstrap interval and its chance rate.

    per_trace : (scores (K,), error step 1-based) per trace.
    Returns {"n", "steps_mean", "top1": {"value", "low", "high", "chance"}, "top3": ..., "step_auroc": ...}.
    """
    if not per_trace:
        return {"n": 0}
    rows = []
    for scores, error in per_trace:
        scores = np.asarray(scores, dtype=float)
        k = len(scores)
        rows.append((_hit_at(scores, error - 1, 1), _hit_at(scores, error - 1, 3), _step_auroc(scores, error - 1),
                     1.0 / k, min(3, k) / k, k))
    table = np.array(rows, dtype=float)
    rng = np.random.default_rng(seed)
    boots = rng.integers(0, len(table), size=(n_boot, len(table)))
    out: dict = {"n": len(table), "steps_mean": float(table[:, 5].mean())}
    for name, col, chance in (("top1", 0, float(table[:, 3].mean())), ("top3", 1, float(table[:, 4].mean())),
                              ("step_auroc", 2, 0.5)):
        values = table[:, col]
        means = np.nanmean(values[boots], axis=1)  # every draw at once: the same sums as draw by draw
        out[name] = {"value": float(np.nanmean(values)), "low": float(np.nanpercentile(means, 2.5)),
                     "high": float(np.nanpercentile(means, 97.5)), "chance": chance}
    return out


#: Package data: ``<model>.json``, the results of ``python -m grade steperrors`` for an embedded model.
MEASURED_DIR = "assets/step_errors"


def measured_accuracy(model: str) -> dict | None:
    """The step-error benchmark's results for ``model`` as shipped (``{"groups": {group: {locator: metrics}},
    "machine": ...}``, see :func:`grade.steps.step_errors.score_store`), or None where it was not measured."""
    from importlib import resources

    path = resources.files("grade") / MEASURED_DIR / f"{model}.json"
    if not path.is_file():
        return None
    return json.loads(path.read_text(encoding="utf-8"))


def signals_of_row(row: Mapping, tokens=None) -> StepSignals:
    """Signals of one trace-store row (and its token rows, a DataFrame, for shock and surprisal)."""
    token_steps = shock = surprisal = None
    if tokens is not None and len(tokens):
        token_steps = tokens["step"].to_numpy()
        shock = tokens["shock"].to_numpy(dtype=float)
        surprisal = tokens["surprisal"].to_numpy(dtype=float) if "surprisal" in tokens else None
    ratios = np.array([list(r) for r in row["step_ratios"]], dtype=float)
    return step_signals(row["question"], list(row["step_texts"]), ratios, list(row["step_loss"]), token_steps, shock,
                        surprisal)
