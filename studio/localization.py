"""What the trace pages say about where a trace goes wrong, without Streamlit: the ranked steps of one trace
and, beside every view, how often that view found a known wrong step on the step-error benchmark.

The numbers come from :func:`grade.steps.locate.measured_accuracy` (``python -m grade steperrors``, shipped per
embedded model); a model without them gets a sentence saying so rather than borrowed numbers.
"""

from __future__ import annotations

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
