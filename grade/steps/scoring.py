"""The field's scoring of first-error answers: the exact first wrong step on erroneous traces, "none" on correct
ones, their harmonic mean (F1), top-k rankings, chance rates and bootstrap intervals; and scoring by paragraph
(each step counts for the paragraph it starts in), as annotators of multi-paragraph traces mark them.

Every study and test that scores a step verifier or locator reads these; :class:`~grade.steps.verifier.StepVerifier`
chooses its thresholds with :func:`first_error_f1`.
"""

from __future__ import annotations

import re
from typing import Sequence

import numpy as np

from ..gradients.losses import split_steps

def first_error_f1(predicted: Sequence[int | None], first_wrong: Sequence[int | None]) -> dict:
    """{"wrong_exact": share of erroneous traces whose prediction is their first wrong step, "none_acc": share
    of correct traces predicted None, "f1": their harmonic mean}; NaN where a group is empty."""
    hits_wrong = [p == e for p, e in zip(predicted, first_wrong) if e is not None]
    hits_ok = [p is None for p, e in zip(predicted, first_wrong) if e is None]
    a = float(np.mean(hits_wrong)) if hits_wrong else float("nan")
    b = float(np.mean(hits_ok)) if hits_ok else float("nan")
    f1 = 2 * a * b / (a + b) if a + b > 0 else 0.0
    return {"wrong_exact": a, "none_acc": b, "f1": f1}


def chance_f1(mean_inverse_steps: float) -> tuple[float, float]:
    """(F1, q) of the best rule that ignores the trace: "none" with probability q, else a uniformly random step
    (exact on an erroneous trace with probability (1 - q) x mean 1/K)."""
    q = np.linspace(0, 1, 1001)
    a, b = (1 - q) * mean_inverse_steps, q
    with np.errstate(invalid="ignore", divide="ignore"):
        f1 = np.where(a + b > 0, 2 * a * b / (a + b), 0.0)
    best = int(np.argmax(f1))
    return float(f1[best]), float(q[best])


#: A paragraph break: a blank line (how the authors of multi-line traces, and annotators scoring by paragraph, cut them).
PARAGRAPH_BREAK = re.compile(r"\n[ \t]*\n")


def step_paragraphs(trace: str, spans: Sequence[tuple[int, int]] | None = None) -> np.ndarray:
    """(K,) 0-based paragraph (blank-line separated block) in which each step of ``trace`` starts (its first
    non-space character); ``spans`` default: :func:`split_steps`."""
    spans = split_steps(trace) if spans is None else spans
    breaks = [m.end() for m in PARAGRAPH_BREAK.finditer(trace)]
    out = []
    for start, end in spans:
        text = trace[start:end]
        first = start + (len(text) - len(text.lstrip()))
        out.append(sum(b <= first for b in breaks))
    return np.array(out, dtype=int)


def by_paragraph(predicted: Sequence[int | None], scores: Sequence[np.ndarray], first_wrong: Sequence[int | None],
                 paragraphs: Sequence[np.ndarray]) -> tuple[list, list, list]:
    """Step-level answers as paragraph-level ones (for :func:`first_error_metrics`): a step -> the paragraph it
    starts in, a paragraph's ranking score -> its steps' highest. Paragraphs are renumbered over those that hold a
    step start. Returns (predicted, scores, first_wrong) per trace."""
    out_pred, out_scores, out_wrong = [], [], []
    for p, sc, e, para in zip(predicted, scores, first_wrong, paragraphs):
        ids = {v: i for i, v in enumerate(sorted(set(int(x) for x in para)))}
        mapped = np.array([ids[int(x)] for x in para])
        merged = np.full(len(ids), -np.inf)
        for k, v in enumerate(np.asarray(sc, float)):
            merged[mapped[k]] = max(merged[mapped[k]], v)
        out_pred.append(None if p is None else int(mapped[p]))
        out_scores.append(merged)
        out_wrong.append(None if e is None else int(mapped[e]))
    return out_pred, out_scores, out_wrong


def first_error_metrics(predicted: Sequence[int | None], scores: Sequence[np.ndarray], first_wrong: Sequence[int | None],
                        *, n_boot: int = 1000, seed: int = 0,
                        final_correct: Sequence[bool | None] | None = None) -> dict:
    """The field's scores with 95 % bootstrap intervals (erroneous and correct traces resampled apart) and
    chance rates.

    predicted : 0-based suspect step or None per trace; scores : (K,) ranking scores per trace (higher = more
    suspect; top-1 / top-3 ignore the threshold); first_wrong : 0-based or None; final_correct : where the
    predictions used each trace's known final answer, the chance rates are those of the trace-blind rule that uses
    it too ("none" where the answer is right, a uniformly random step where it is wrong).
    Returns {"n_wrong", "n_correct", "steps_mean", "f1", "wrong_exact", "none_acc", "top1", "top3"}, each score
    {"value", "low", "high", "chance"}.
    """
    from .locate import _hit_at

    wrong = [i for i, e in enumerate(first_wrong) if e is not None]
    ok = [i for i, e in enumerate(first_wrong) if e is None]
    exact = np.array([float(predicted[i] == first_wrong[i]) for i in wrong])
    none = np.array([float(predicted[i] is None) for i in ok])
    top1 = np.array([_hit_at(np.asarray(scores[i], float), first_wrong[i], 1) for i in wrong])
    top3 = np.array([_hit_at(np.asarray(scores[i], float), first_wrong[i], 3) for i in wrong])
    k = np.array([len(scores[i]) for i in wrong], dtype=float)
    inv = float(np.mean(1 / k)) if len(k) else float("nan")

    def f1(a, b):
        return 2 * a * b / (a + b) if a + b > 0 else 0.0

    rng = np.random.default_rng(seed)
    bw = rng.integers(0, max(len(wrong), 1), size=(n_boot, len(wrong)))
    bo = rng.integers(0, max(len(ok), 1), size=(n_boot, len(ok)))
    mean = lambda x, b: x[b].mean(axis=1) if x.size else np.full(n_boot, np.nan)  # noqa: E731
    boots = {"wrong_exact": mean(exact, bw), "none_acc": mean(none, bo), "top1": mean(top1, bw),
             "top3": mean(top3, bw)}
    boots["f1"] = np.array([f1(a, b) for a, b in zip(boots["wrong_exact"], boots["none_acc"])])
    values = {"wrong_exact": exact.mean() if exact.size else np.nan, "none_acc": none.mean() if none.size else np.nan,
              "top1": top1.mean() if top1.size else np.nan, "top3": top3.mean() if top3.size else np.nan}
    values["f1"] = f1(values["wrong_exact"], values["none_acc"]) if exact.size and none.size else np.nan
    # chance: the trace-blind rule of :func:`chance_f1` at its best q (exact, none) and a random ranking (top-k)
    f1_chance, q = chance_f1(inv) if len(k) else (float("nan"), float("nan"))
    chance = {"wrong_exact": (1 - q) * inv, "none_acc": q, "top1": inv,
              "top3": float(np.mean(np.minimum(3, k) / k)) if len(k) else float("nan"), "f1": f1_chance}
    if final_correct is not None and len(k) and ok:
        a = float(np.mean([(final_correct[i] is False) / len(scores[i]) for i in wrong]))
        b = float(np.mean([final_correct[i] is not False for i in ok]))
        chance.update(wrong_exact=a, none_acc=b, f1=f1(a, b))
    out: dict = {"n_wrong": len(wrong), "n_correct": len(ok), "steps_mean": float(k.mean()) if len(k) else None}
    for name, v in values.items():
        out[name] = {"value": float(v), "low": float(np.nanpercentile(boots[name], 2.5)),
                     "high": float(np.nanpercentile(boots[name], 97.5)), "chance": chance[name]}
    return out
