"""Metrics of a detector's scores against labels: the one place where AUROC and friends are computed.

Pure functions of arrays (``y``: 0/1 labels, ``s``: scores, higher = answerable), used by the probe
(:mod:`grade.verdict.probe`, early selection and reported metrics) and the benchmark studies
(:mod:`grade.studies`). Two dictionaries come out of here, for two readers:

* :func:`binary_metrics` (probes, their JSON metadata and the app): ``accuracy`` and ``auroc``, None
  where undefined, and the ROC curve's points;
* :func:`heldout_metrics` (benchmark tables, CSV columns): ``acc``, ``auroc`` with its bootstrap
  interval ``auroc_lo`` / ``auroc_hi``, NaN where undefined.

Selective answering (:func:`accuracy_coverage`, :func:`selective_metrics`): the model answers the questions
a detector scores highest and abstains on the rest; the accuracy of what it answers against the share it
answers (coverage) is the risk-coverage curve, read as accuracy rather than risk (risk = 1 - accuracy).
"""

from __future__ import annotations

from typing import Any, Callable

import numpy as np


def auroc(y, s) -> float:
    """Area under the ROC curve (Mann-Whitney form, ties count one half); NaN with one class or a
    non-finite score. y: (n,) 0/1, s: (n,) scores."""
    from scipy.stats import rankdata

    y = np.asarray(y).astype(bool)
    s = np.asarray(s, dtype=np.float64)
    n_pos, n_neg = int(y.sum()), int((~y).sum())
    if n_pos == 0 or n_neg == 0 or not np.isfinite(s).all():
        return float("nan")
    ranks = rankdata(s, method="average")
    return float((ranks[y].sum() - n_pos * (n_pos + 1) / 2) / (n_pos * n_neg))


def _stratified_draws(y: np.ndarray, n_boot: int, seed: int) -> np.ndarray:
    """(n_boot, n) question indices, each row a bootstrap draw that resamples each class separately."""
    rng = np.random.default_rng(seed)
    pos, neg = np.flatnonzero(y == 1), np.flatnonzero(y == 0)
    # rng.integers is what rng.choice(pos, len(pos)) draws from, without choice's checks per call: the same rows
    rows = [np.concatenate([pos[rng.integers(0, len(pos), len(pos))] if len(pos) else pos,
                            neg[rng.integers(0, len(neg), len(neg))] if len(neg) else neg]) for _ in range(n_boot)]
    return np.stack(rows) if rows else np.zeros((0, len(y)), dtype=int)


def _draw_groups(y: np.ndarray, s: np.ndarray, draws: np.ndarray, descending: bool) -> tuple[np.ndarray, np.ndarray]:
    """(draws, groups) counts of every bootstrap draw's questions and of its answerable ones in each group of tied
    scores of ``s``, the groups in score order (highest first where ``descending``). A draw's tie groups are those of
    ``s``, so these counts give what a sort of each draw would, without sorting it."""
    values, group = np.unique(-s if descending else s, return_inverse=True)
    n_draws, n_groups = len(draws), len(values)
    flat = (group.ravel()[draws] + n_groups * np.arange(n_draws)[:, None]).ravel()
    count = np.bincount(flat, minlength=n_draws * n_groups).reshape(n_draws, n_groups)
    positive = np.bincount(flat, weights=(y != 0)[draws].ravel(), minlength=n_draws * n_groups)
    return count, positive.reshape(n_draws, n_groups)


def _auroc_draws(y: np.ndarray, s: np.ndarray, draws: np.ndarray) -> np.ndarray:
    """:func:`auroc` of every bootstrap draw (rows of question indices) at once: the Mann-Whitney form, a tie group's
    questions each ranked at the group's average rank. The same numbers as draw by draw (ranks are halves of whole
    numbers, so their sums are exact in any order)."""
    count, positive = _draw_groups(y, s, draws, descending=False)
    below = np.cumsum(count, axis=1) - count  # questions ranked under each group
    n_pos = positive.sum(axis=1)
    n_neg = draws.shape[1] - n_pos
    with np.errstate(invalid="ignore", divide="ignore"):
        values = ((positive * (below + (count + 1) / 2)).sum(axis=1) - n_pos * (n_pos + 1) / 2) / (n_pos * n_neg)
    return np.where((n_pos > 0) & (n_neg > 0), values, np.nan)


def _metric_rows(metric: Callable[[np.ndarray, np.ndarray], float], y: np.ndarray, s: np.ndarray,
                 draws: np.ndarray) -> np.ndarray:
    """``metric`` of every bootstrap draw (rows of question indices into y and s): AUROC, the benchmark's most
    frequent metric, for all draws at once (:func:`_auroc_draws`); any other metric draw by draw."""
    if metric is auroc and len(draws):
        return _auroc_draws(y, s, draws)
    return np.asarray([metric(yr, sr) for yr, sr in zip(y[draws], s[draws])], dtype=np.float64)


def bootstrap_ci(y, s, metric: Callable[[np.ndarray, np.ndarray], float] = auroc, *,
                 n_boot: int = 1000, ci: float = 0.95, seed: int = 0) -> tuple[float, float]:
    """Percentile bootstrap interval of ``metric(y, s)``, resampling each class separately (so
    every draw keeps the test set's class counts and AUROC stays defined)."""
    y = np.asarray(y).astype(int)
    s = np.asarray(s, dtype=np.float64)
    if len(y) == 0 or not np.isfinite(s).all():
        return float("nan"), float("nan")
    draws = _stratified_draws(y, n_boot, seed)
    return _percentile_interval(_metric_rows(metric, y, s, draws), ci)


def _percentile_interval(values: np.ndarray, ci: float) -> tuple[float, float]:
    """The ``ci`` percentile interval of a metric's bootstrap values, those that are defined."""
    values = values[np.isfinite(values)]
    if not len(values):
        return float("nan"), float("nan")
    alpha = (1 - ci) / 2
    return float(np.quantile(values, alpha)), float(np.quantile(values, 1 - alpha))


def paired_bootstrap_diff(y, s_a, s_b, metric: Callable[[np.ndarray, np.ndarray], float] = auroc, *,
                          n_boot: int = 1000, ci: float = 0.95, seed: int = 0) -> dict[str, float]:
    """``metric(y, s_a) - metric(y, s_b)`` for two detectors scored on the same questions, with a paired
    percentile bootstrap: each draw resamples the questions (each class separately, as :func:`bootstrap_ci`)
    and scores both detectors on the same draw, so what the two share does not widen the interval.

    y, s_a, s_b: (n,). Keys: ``diff``, ``lo``, ``hi`` (the interval) and ``p`` (two-sided: twice the smaller
    share of draws on either side of 0, at most 1); NaN where undefined."""
    y = np.asarray(y).astype(int)
    a, b = np.asarray(s_a, dtype=np.float64), np.asarray(s_b, dtype=np.float64)
    out = {"diff": float("nan"), "lo": float("nan"), "hi": float("nan"), "p": float("nan")}
    if not len(y) or not (np.isfinite(a).all() and np.isfinite(b).all()):
        return out
    out["diff"] = metric(y, a) - metric(y, b)
    idx = _stratified_draws(y, n_boot, seed)
    draws = _metric_rows(metric, y, a, idx) - _metric_rows(metric, y, b, idx)
    draws = draws[np.isfinite(draws)]
    if len(draws):
        alpha = (1 - ci) / 2
        out["lo"], out["hi"] = float(np.quantile(draws, alpha)), float(np.quantile(draws, 1 - alpha))
        out["p"] = float(min(1.0, 2 * min((draws <= 0).mean(), (draws >= 0).mean())))
    return out


def best_threshold(y, s) -> float:
    """The cut (``score >= t`` = answerable) with the best accuracy on (y, s): midpoints of sorted
    distinct scores, plus 'everything answerable' and 'nothing answerable'."""
    s = np.asarray(s, dtype=np.float64)
    y = np.asarray(y).astype(int)
    ok = np.isfinite(s)
    s, y = s[ok], y[ok]
    if not len(s):
        return 0.0
    values = np.unique(s)
    cuts = np.concatenate([[values[0] - 1.0], (values[:-1] + values[1:]) / 2, [values[-1] + 1.0]])
    accs = [((s >= t).astype(int) == y).mean() for t in cuts]
    return float(cuts[int(np.argmax(accs))])


def roc_points(y, p) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(fpr, tpr, thresholds) of the ROC curve (scikit-learn, ``drop_intermediate=True``)."""
    from sklearn.metrics import roc_curve

    fpr, tpr, thr = roc_curve(np.asarray(y).astype(int), np.asarray(p, dtype=float))
    thr = np.where(np.isfinite(thr), thr, 1.0)  # the first point's +inf is not JSON
    return fpr, tpr, thr


def binary_metrics(y, p, *, threshold: float = 0.5, roc: bool = True) -> dict[str, Any]:
    """n, positives, accuracy at ``threshold``, AUROC (None when one class only) and ROC points."""
    y = np.asarray(y).astype(int)
    p = np.asarray(p, dtype=float)
    area = auroc(y, p) if len(np.unique(y)) == 2 else float("nan")
    out: dict[str, Any] = {
        "n": int(len(y)),
        "positives": int(y.sum()),
        "accuracy": float(((p >= threshold).astype(int) == y).mean()) if len(y) else None,
        "auroc": None if np.isnan(area) else area,
    }
    if roc and out["auroc"] is not None:
        fpr, tpr, thr = roc_points(y, p)
        out["roc"] = {"fpr": fpr.round(5).tolist(), "tpr": tpr.round(5).tolist(), "threshold": thr.round(5).tolist()}
    return out


def heldout_metrics(y, s, threshold: float, *, with_auroc: bool = True, n_boot: int = 1000, ci: float = 0.95,
                 seed: int = 0) -> dict[str, Any]:
    """n, positives, missing scores, accuracy at the threshold (a missing score counts as
    'unanswerable'), AUROC and its bootstrap interval (NaN where undefined or a score is missing)."""
    y = np.asarray(y).astype(int)
    s = np.asarray(s, dtype=np.float64)
    finite = np.isfinite(s)
    pred = np.where(finite, s >= threshold, False).astype(int)
    out = {"n": int(len(y)), "positives": int(y.sum()), "missing": int((~finite).sum()),
           "acc": float((pred == y).mean()) if len(y) else float("nan"),
           "auroc": float("nan"), "auroc_lo": float("nan"), "auroc_hi": float("nan")}
    if with_auroc and finite.all():
        out["auroc"] = auroc(y, s)
        out["auroc_lo"], out["auroc_hi"] = bootstrap_ci(y, s, auroc, n_boot=n_boot, ci=ci, seed=seed)
    return out


def _expected_correct(y, s) -> np.ndarray:
    """(n + 1,) expected number of right answers among the k highest-scored questions, k = 0..n.

    Questions with equal scores cannot be told apart by any threshold, so where the k-th cut falls inside
    a group of ties the model answers a random part of that group: each answered question of the group
    counts the group's share of answerable ones (the expectation over every order of the ties, as AUROC
    counts a tie one half)."""
    y = np.asarray(y, dtype=np.float64)
    s = np.asarray(s, dtype=np.float64)
    order = np.argsort(-s, kind="stable")
    ys, ss = y[order], s[order]
    group = np.cumsum(np.r_[True, ss[1:] != ss[:-1]]) - 1 if len(ss) else np.zeros(0, dtype=int)
    share = np.bincount(group, weights=ys) / np.bincount(group)
    return np.r_[0.0, np.cumsum(share[group])]


def _expected_correct_draws(y: np.ndarray, s: np.ndarray, draws: np.ndarray) -> np.ndarray:
    """(draws, n + 1): :func:`_expected_correct` of every bootstrap draw (rows of question indices) at once, without
    sorting a draw: a draw's tie groups are those of ``s``, so it is enough to count how many of each group's
    questions, and of its answerable ones, the draw holds. The same numbers as row by row (the groups come in the
    same order; a group's answerable count is a whole number however it is summed)."""
    count, positive = _draw_groups(np.asarray(y), np.asarray(s, dtype=np.float64), draws, descending=True)
    with np.errstate(invalid="ignore", divide="ignore"):  # a group a draw misses is repeated 0 times
        share = positive / count
    n_draws, n = draws.shape
    per_question = np.repeat(share.ravel(), count.ravel()).reshape(n_draws, n)
    return np.concatenate([np.zeros((n_draws, 1)), np.cumsum(per_question, axis=1)], axis=1)


def accuracy_coverage(y, s) -> tuple[np.ndarray, np.ndarray]:
    """The accuracy-coverage (risk-coverage) curve of selective answering.

    Parameters
    ----------
    y : (n,) 0/1, 1 = the model's answer is right.
    s : (n,) detector scores, higher = answerable; every score finite.

    Returns
    -------
    coverage : (n,) k / n for k = 1..n, the share of questions answered.
    accuracy : (n,) expected accuracy of the k highest-scored questions (ties: see
        :func:`_expected_correct`). At full coverage it is the base rate ``y.mean()``; a score unrelated to
        ``y`` stays there at every coverage, and ``s = y`` (the oracle) gives 1 up to ``y.mean()``.
    """
    correct = _expected_correct(y, s)
    k = np.arange(1, len(correct))
    return k / max(len(k), 1), correct[1:] / k


def accuracy_at_coverage(y, s, coverage: float = 0.5) -> float:
    """Accuracy (expected right answers over questions answered) when the model answers the ``coverage``
    share of questions it scores highest (a fractional question is answered with that probability); NaN without questions or with a
    non-finite score. y, s: (n,)."""
    s = np.asarray(s, dtype=np.float64)
    if not len(s) or not np.isfinite(s).all() or not 0 < coverage <= 1:
        return float("nan")
    correct = _expected_correct(y, s)
    m = coverage * len(s)
    return float(np.interp(m, np.arange(len(correct)), correct) / m)


def area_under_accuracy_coverage(y, s) -> float:
    """Mean accuracy over the coverages 1/n, 2/n, ..., 1 (the area under :func:`accuracy_coverage`; 1 - AURC):
    the base rate for a score unrelated to the labels; NaN without questions or with a non-finite score."""
    s = np.asarray(s, dtype=np.float64)
    if not len(s) or not np.isfinite(s).all():
        return float("nan")
    return float(accuracy_coverage(y, s)[1].mean())


def selective_metrics(y, s, *, coverage: float = 0.5, n_boot: int = 1000, ci: float = 0.95,
                      seed: int = 0) -> dict[str, Any]:
    """Selective answering by one detector on one test set: accuracy at ``coverage`` and the area under the
    accuracy-coverage curve, each with the stratified bootstrap interval of :func:`bootstrap_ci` (class
    counts are kept in every draw, so the base rate is fixed and the interval is that of the gain over
    answering everything too), beside the base rate (answering everything, = chance) and the oracle's.

    y, s: (n,). Keys: n, positives, coverage, base_rate, acc_at_coverage (+ _lo, _hi), auacc (+ _lo, _hi),
    oracle_acc_at_coverage, oracle_auacc; NaN where a score is missing or undefined.
    """
    y = np.asarray(y).astype(int)
    s = np.asarray(s, dtype=np.float64)
    at = lambda yy, ss: accuracy_at_coverage(yy, ss, coverage)  # noqa: E731
    out: dict[str, Any] = {"n": int(len(y)), "positives": int(y.sum()), "coverage": coverage,
                           "base_rate": float(y.mean()) if len(y) else float("nan"),
                           "acc_at_coverage": at(y, s), "auacc": area_under_accuracy_coverage(y, s),
                           "oracle_acc_at_coverage": at(y, y), "oracle_auacc": area_under_accuracy_coverage(y, y)}
    if not len(y) or not np.isfinite(s).all() or not 0 < coverage <= 1:
        out["acc_at_coverage_lo"], out["acc_at_coverage_hi"] = bootstrap_ci(y, s, at, n_boot=n_boot, ci=ci, seed=seed)
        out["auacc_lo"], out["auacc_hi"] = bootstrap_ci(y, s, area_under_accuracy_coverage, n_boot=n_boot, ci=ci,
                                                        seed=seed)
        return out
    # Both intervals from the same draws (bootstrap_ci with the same seed draws them alike), every draw's curve at
    # once: accuracy_at_coverage's np.interp on the grid 0..n, and area_under_accuracy_coverage's mean, along rows.
    correct = _expected_correct_draws(y, s, _stratified_draws(y, n_boot, seed))
    n, m = len(y), coverage * len(y)
    j = min(int(np.floor(m)), n)
    at_values = correct[:, j] if j == m else (correct[:, j + 1] - correct[:, j]) / 1.0 * (m - j) + correct[:, j]
    out["acc_at_coverage_lo"], out["acc_at_coverage_hi"] = _percentile_interval(at_values / m, ci)
    out["auacc_lo"], out["auacc_hi"] = _percentile_interval((correct[:, 1:] / np.arange(1, n + 1)).mean(axis=1), ci)
    return out


def majority_accuracy(n: int | None, positives: int | None) -> float | None:
    """The accuracy of always answering the larger class of ``n`` questions of which ``positives`` are answerable:
    the chance rate beside a detector's accuracy (None where either count is unknown or n is 0)."""
    if not n or positives is None:
        return None
    return max(positives, n - positives) / n


def class_balance(y) -> dict[str, Any]:
    y = np.asarray(y).astype(int)
    return {"n": int(len(y)), "answerable": int(y.sum()), "unanswerable": int(len(y) - y.sum()),
            "answerable_share": round(float(y.mean()), 4) if len(y) else None}


def cross_validated_auroc(x, y, seed: int = 0, folds: int = 5) -> float:
    """AUROC of out-of-fold predictions of a logistic regression on standardised ``x`` (n, k) for 0/1 ``y``
    (n,), stratified ``folds``-fold: how much a feature set says about answerability, before any probe."""
    from sklearn.linear_model import LogisticRegression
    from sklearn.model_selection import StratifiedKFold, cross_val_predict
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    model = make_pipeline(StandardScaler(), LogisticRegression(max_iter=5000))
    split = StratifiedKFold(folds, shuffle=True, random_state=seed)
    return auroc(y, cross_val_predict(model, x, y, cv=split, method="predict_proba")[:, 1])
