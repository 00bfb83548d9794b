"""What the trace pages say about where a trace goes wrong, without Streamlit: the ranked steps of one trace
and, beside every view, how often that view found a known wrong step on the step-error benchmark.

The numbers come from :func:`grade.steps.locate.measured_accuracy` (``python -m grade steperrors``, shipped per
embedded model); a model without them gets a sentence saying so rather than borrowed numbers.
"""

from __future__ import annotations

import functools
import json
from pathlib import Path

import pandas as pd

from grade.steps.locate import DEFAULT_LOCATOR, LOCATORS, StepSignals, locate, measured_accuracy, ranked_steps

#: The views a page offers -> the locator whose benchmark numbers belong next to it.
VIEWS = {
    "suspect step": DEFAULT_LOCATOR,
    "epistemic shock (heatmap)": "shock_max",
    "token surprisal (heatmap)": "surprisal_max",
    "peak step (step rank ratio)": "rank_ratio",
}
#: The benchmark's groups, as a page names them.
GROUPS = {"injected: all": "injected errors in reference solutions", "own: all": "the model's own arithmetic slips"}


def _short(name: str) -> str:
    return name.split("/")[-1]


def accuracy_line(model: str, view: str) -> str:
    """One sentence: the view's measured top-1 on the benchmark's groups, with the chance rate beside it."""
    locator = VIEWS[view]
    results = measured_accuracy(_short(model))
    if results is None:
        return (f"How often the {view} is the wrong step has not been measured for {_short(model)} "
                "(`python -m grade steperrors`); read it as a hint, not a finding.")
    parts = []
    for group, words in GROUPS.items():
        metrics = results["groups"].get(group, {}).get(locator)
        if metrics and metrics.get("n"):
            top1 = metrics["top1"]
            parts.append(f"{top1['value']:.0%} of {metrics['n']} traces with {words} "
                         f"(chance {top1['chance']:.0%})")
    if not parts:
        return f"The {view} has no benchmark numbers for {_short(model)}."
    # "peak step (step rank ratio)" -> "peak step": the locator's description says the rest, once
    return (f"Measured top-1 of the {view.split(' (')[0]} ({LOCATORS[locator][0]}) on GSM8K traces whose first wrong step is "
            f"known: {'; '.join(parts)}.")


#: ``scripts/studies/train_step_verifier.py --grade-features`` on the GSM8K annotation files: the verifier with and without
#: GRADE's step features, trained and scored alike.
GRADE_IN_VERIFIER = "results/step_errors/{model}/verifier_{model}_grade_gsm8k.json.xz"
WITH_GRADE = "GRADE + hidden(0.75,1.0)+scalars, first-step target, injected+dev+own (no return)"
WITHOUT_GRADE = "hidden(0.75,1.0)+scalars, first-step target, injected+dev+own (completions, no return)"


@functools.lru_cache(maxsize=8)
def _grade_in_verifier_test(path: Path) -> dict:
    """The test-half scores of that results file ({} where it is missing), read once per process (the page reruns
    on every widget change)."""
    from grade.common.io import read_text

    return json.loads(read_text(path))["test"] if path.is_file() else {}


def grade_in_verifier_line(model: str, root: Path | None = None) -> str:
    """One sentence: what GRADE's step features added to the step verifier on real annotated traces, measured
    (both F1 with their intervals and the chance rate), or "" where that was not measured for ``model``."""
    root = Path(__file__).resolve().parent.parent if root is None else root
    test = _grade_in_verifier_test(root / GRADE_IN_VERIFIER.format(model=_short(model)))
    if WITH_GRADE not in test or WITHOUT_GRADE not in test:
        return ""
    with_, without = test[WITH_GRADE]["f1"], test[WITHOUT_GRADE]["f1"]
    return (f"Given to the step verifier beside its own features, these per-step GRADE features did not improve it "
            f"on {test[WITH_GRADE]['n_wrong'] + test[WITH_GRADE]['n_correct']} annotated traces: first-error F1 "
            f"{with_['value']:.2f} [{with_['low']:.2f}, {with_['high']:.2f}] with them, {without['value']:.2f} "
            f"[{without['low']:.2f}, {without['high']:.2f}] without (chance {with_['chance']:.2f}).")


def ranked_table(step_texts, signals: StepSignals) -> pd.DataFrame:
    """The steps from most to least suspect under the default locator, with what the check found and the
    signals behind the ranking; ``step`` is 1-based."""
    scores = locate(signals, DEFAULT_LOCATOR)
    order = ranked_steps(scores)
    values = signals.values
    return pd.DataFrame({
        "rank": range(1, len(order) + 1),
        "step": order,
        "text": [str(step_texts[k - 1]).strip()[:160] for k in order],
        "check": ["; ".join(f["detail"] for f in signals.findings[k - 1]) or "" for k in order],
        "max surprisal": [float(values["surprisal_max"][k - 1]) for k in order],
        "step rank ratio": [float(values["rank_ratio"][k - 1]) for k in order],
        "max shock": [float(values["shock_max"][k - 1]) for k in order],
    })


def ranked_style(ranked: pd.DataFrame):
    """:func:`ranked_table` as a page shows it in a static table (whose text wraps): three decimals, no index."""
    numbers = [c for c in ("max surprisal", "step rank ratio", "max shock") if c in ranked]
    return ranked.style.format({c: "{:.3f}" for c in numbers}).hide(axis="index")


# ------------------------------------------------------------------------------------ the step verifier

#: The token colouring by the step verifier's probability per step (a page's colour choice).
VERIFIER_VIEW = "step verifier (probability per step)"
#: What a page says where the verifier finds no first wrong step (its suspect step is None).
NO_STEP = "no step stands out"


def _missing(value) -> bool:
    return value is None or bool(pd.isna(value))


def outcome(correct=None, cut_off=None, response: str | None = None, gold=None):
    """What the step verifier is told of a trace's final answer, on every page: the library's one rule
    (:func:`grade.steps.outcome.decide_outcome`, as ``grade traces`` applies it), given a store's ``correct`` and
    ``cut_off`` (nulls and NaN read as not known) or a response and the gold answers a person typed."""
    from grade.steps.outcome import decide_outcome

    return decide_outcome(correct=None if _missing(correct) else bool(correct),
                          response=response, answers=[str(g) for g in (gold or []) if str(g).strip()],
                          cut_off=not _missing(cut_off) and bool(cut_off))


def known_outcome(correct, cut_off=None):
    """A stored trace's final answer as the verifier is told it: right or wrong by the run's grading, nothing where
    not graded or cut off at its token limit (:func:`outcome`)."""
    return outcome(correct, cut_off).final_correct


def trace_outcome(response: str, gold) -> bool | None:
    """The final answer of ``response`` against the gold answers a person typed (none typed: None), graded as the
    verifier's outcome rule grades it (:func:`outcome`)."""
    return outcome(response=response, gold=gold).final_correct


def verifier_verdict(reader: str, probability, final_correct, task: str = "gsm8k") -> tuple[int | None, float]:
    """The step verifier's suspect step (1-based, None: none stands out) and the threshold it used, for a trace
    whose per-step probabilities were read once, under what is known of its final answer now
    (:func:`known_outcome`): a gold answer typed or changed after the reading re-decides the verdict without
    reading the trace again. The thresholds are the shipped verifier's (its asset file) for the trace's level
    (``task``: the prompt style it was read under), as :func:`grade.steps.verifier.verify_trace` uses them."""
    import numpy as np

    from grade.steps.verifier import shipped_verifier, trace_level

    verifier = shipped_verifier(_short(reader).lower())
    if verifier is None:
        return None, float("nan")
    from grade.steps.outcome import Outcome

    p = np.asarray([float(x) for x in probability])
    level = trace_level(task)
    suspect = verifier.suspect(p, final_correct=final_correct, level=level)
    threshold = Outcome(final_correct, "unknown" if final_correct is None else "known", "").threshold(verifier, level)
    return (None if suspect is None else int(suspect) + 1), float(0.0 if threshold is None else threshold)


def outcome_line(final_correct, reason: str | None = None) -> str:
    """Which of the verifier's two rules a verdict used, and why, in words."""
    from grade.steps.outcome import PROTOCOLS

    protocol = "unknown" if final_correct is None else "known"
    why = f" ({reason})" if reason else ""
    return f"Verdict under the protocol \"{PROTOCOLS[protocol]}\"{why}."


def verdict_label(step) -> str:
    """The verifier's suspect step in a table cell: "step k", or :data:`NO_STEP` where it is None / null."""
    return NO_STEP if _missing(step) else f"step {int(step)}"


@functools.lru_cache(maxsize=8)
def _localizes(reader: str) -> bool:
    """Whether the verifier shipped for ``reader`` spreads one probability of a wrong step over the steps (its
    localizer: :class:`grade.steps.verifier.StepVerifier`), so that its threshold applies to their sum."""
    from grade.steps.verifier import shipped_verifier

    verifier = shipped_verifier(_short(reader).lower())
    return verifier is not None and verifier.localizer


def verdict_line(step, probability, threshold: float, final_correct=None, reader: str | None = None) -> str:
    """The verifier's verdict on one trace in one Markdown sentence (``step`` 1-based or None; ``probability``
    per step; ``final_correct``: the final answer's known correctness, None / null where not known; ``reader``:
    the verifier's reader, whose rule the sentence names)."""
    p = [float(x) for x in probability]
    if not _missing(final_correct) and not bool(final_correct) and not _missing(step):
        k = int(step)
        return (f"**Step {k} stands out**, P = {p[k - 1]:.2f}: the final answer is wrong, so some step is, and this "
                "one is the verifier's most likely first wrong step.")
    top = max(range(len(p)), key=lambda k: p[k]) if p else None
    if reader is not None and _localizes(reader):
        wrong = sum(p)
        if _missing(step):
            highest = f" (the likeliest first wrong one: step {top + 1}, P = {p[top]:.2f})" if top is not None else ""
            return (f"**{NO_STEP.capitalize()}**: the probability that some step is wrong, {wrong:.2f}, does not pass "
                    f"{threshold:.2f}{highest}.")
        k = int(step)
        return (f"**Step {k} stands out**, P = {p[k - 1]:.2f}: the probability that some step is wrong, {wrong:.2f}, "
                f"passes {threshold:.2f}, and this step is the likeliest first wrong one.")
    if _missing(step):
        highest = f" (the highest: step {top + 1}, P = {p[top]:.2f})" if top is not None else ""
        return f"**{NO_STEP.capitalize()}**: no step's probability of being the first wrong one passes {threshold:.2f}{highest}."
    k = int(step)
    return f"**Step {k} stands out**, P = {p[k - 1]:.2f}: the first step whose probability passes {threshold:.2f}."


@functools.lru_cache(maxsize=8)
def _verifier_info(reader: str) -> dict:
    from grade.steps.verifier import shipped_verifier

    verifier = shipped_verifier(reader)
    return dict(verifier.info) if verifier is not None else {}


def verifier_accuracy_line(reader: str, final_known: bool = False) -> str:
    """The measured accuracy of the verifier shipped for ``reader`` on real annotated traces, with the chance
    rates, and today's suspect step's beside it (its ``measured``, written by the training script);
    ``final_known``: the numbers of its rule for traces whose final answer's correctness is known, where measured."""
    info = _verifier_info(_short(reader).lower())
    m = (final_known and info.get("measured_final_known")) or info.get("measured") or {}
    if not m.get("f1"):
        return "This verifier's accuracy on annotated traces has not been measured; read it as a hint, not a finding."

    def score(name: str) -> str:
        s = m[name]
        return f"{s['value']:.2f} [{s['low']:.2f}, {s['high']:.2f}] (chance {s['chance']:.2f})"

    known = " with the final answer's correctness known" if m is info.get("measured_final_known") else ""
    line = (f"Measured on real traces of {info.get('traces_model', 'another model')} whose first wrong step a reader "
            f"marked ({m['n_wrong']} with an error, {m['n_correct']} correct, never trained on){known}: F1 {score('f1')}, "
            f"the first wrong step exactly in {m['wrong_exact']['value']:.0%}, \"{NO_STEP}\" on "
            f"{m['none_acc']['value']:.0%} of the correct traces, the wrong step among its top three in {score('top3')}.")
    today = m.get("locator_today")
    if today:
        line += (f" The suspect step below never says none: F1 {today['f1']['value']:.2f}, top-3 "
                 f"{today['top3']['value']:.2f} on the same traces.")
    return line


def reader_line(reader: str, model: str) -> str:
    """Which model read the trace for the verifier, where it is not the model the page analyses with."""
    if _short(reader).lower() == _short(model).lower():
        return f"Read by {reader}, one forward pass."
    return (f"Read by {reader}, the verifier's reader (one forward pass), not by {_short(model)}: the shipped verifier "
            "reads any model's trace text that way, as it was measured.")


def probability_table(step_texts, probability) -> pd.DataFrame:
    """The verifier's per-step probability beside each step (1-based)."""
    return pd.DataFrame({"step": range(1, len(probability) + 1),
                         "P(first wrong)": [float(p) for p in probability],
                         "text": [str(t).strip() for t in step_texts]})
