"""A detector's answer on one question: which training dataset the question is like, so that its calibration and
test AUROC apply (:func:`closest_kind`), each detector's verdict (:func:`verdicts`) and the sentence the app
shows when verdicts differ (:func:`disagreement`). Detectors are read through their public methods only."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Sequence

import numpy as np

from ...common.errors import ProbeError
from .specs import THRESHOLD


#: Tasks whose questions are most alike, for a question whose own task no training dataset has.
RELATED_TASKS: dict[str, tuple[str, ...]] = {
    "qa": ("mmlu",), "mmlu": ("qa",), "gsm8k": ("math", "cot"), "math": ("gsm8k", "cot"), "cot": ("gsm8k", "math"),
}


def closest_kind(kinds: dict[str, dict], task: str, has_context: bool) -> tuple[str | None, str]:
    """(training dataset, why) closest to a question of ``task``, with or without a document.

    In this order: the same task and document condition; the same task; a related task
    (:data:`RELATED_TASKS`) with the same document condition; a related task. Among several, the
    dataset with the most test questions (its AUROC is the most precise), then the name. None when no
    training dataset has the task or a related one: a calibration and an AUROC measured on other kinds
    of questions would say nothing about this one.
    """
    if not kinds:
        raise ProbeError("the detector names no training dataset")
    task = "qa" if task == "qa_doc" else task
    related = RELATED_TASKS.get(task, ())

    def tier(meta: dict) -> int:
        same_doc = bool(meta.get("with_document")) == bool(has_context)
        if meta.get("task") == task:
            return 0 if same_doc else 1
        if meta.get("task") in related:
            return 2 if same_doc else 3
        return 4

    def size(name: str) -> int:
        return int(((kinds[name].get("test") or {}).get("n")) or 0)

    best = min(kinds, key=lambda name: (tier(kinds[name]), -size(name), name))
    doc = "with a document" if has_context else "without a document"
    level = tier(kinds[best])
    if level == 4:
        return None, (f"it was trained on no {task} question nor one of a related task "
                      f"(only on {', '.join(sorted(kinds))})")
    reason = {0: f"the same task, {doc}",
              1: f"the same task; none of its training datasets is {doc}",
              2: f"the nearest task ({kinds[best].get('task')}), {doc}",
              3: f"the nearest task ({kinds[best].get('task')})"}[level]
    return best, reason


@dataclass
class DetectorVerdict:
    """One detector's answer on one question, with the test AUROC of the kind of question it was asked."""

    name: str
    title: str
    probability: float | None  # P(the model can answer); None: see ``problem``
    kind: str | None = None  # the training dataset whose calibration and test AUROC apply
    kind_reason: str = ""
    test: dict[str, Any] = field(default_factory=dict)  # heldout_metrics on that dataset's test questions
    problem: str | None = None
    summary: str = ""  # what the detector reads, in one line

    @property
    def answerable(self) -> bool | None:
        return None if self.probability is None else self.probability >= THRESHOLD

    @property
    def auroc(self) -> float | None:
        value = self.test.get("auroc")
        return None if value is None or not np.isfinite(value) else float(value)


def verdicts(detectors: Sequence, statistics: dict[str, np.ndarray], *, task: str, has_context: bool,
             missing: dict[str, str] | None = None) -> list[DetectorVerdict]:
    """Each detector's verdict (``detectors``: :class:`~grade.verdict.detectors.Detector` s) from a question's statistics
    (:func:`~grade.verdict.detectors.model_statistics.question_statistics`)."""
    out = []
    for detector in detectors:
        kind, reason = detector.kind_of(task, has_context)
        verdict = DetectorVerdict(detector.name, detector.spec.title, None, kind, reason,
                                  detector.test_metrics(kind) if kind else {}, summary=detector.spec.summary)
        value = statistics.get(detector.spec.statistic)
        if kind is None:
            verdict.problem = reason
        elif value is None:
            verdict.problem = (missing or {}).get(detector.spec.statistic, f"no {detector.spec.statistic} value")
        else:
            try:
                verdict.probability = float(detector.predict_proba(np.asarray(value)[None, :], [kind])[0, 1])
            except ProbeError as exc:
                verdict.problem = str(exc)
        out.append(verdict)
    return out


def needed_statistics(detectors: Sequence, task: str, has_context: bool) -> list[str]:
    """The statistics a question must be given for the detectors that can judge it (no pass for the others)."""
    return sorted({d.spec.statistic for d in detectors if d.kind_of(task, has_context)[0] is not None})


def _in_sentence(title: str) -> str:
    """A title inside a sentence: lower-case first letter, unless the word is an acronym (P-Entropy, GRADE)."""
    return title if title[1:2].isupper() or title[1:2] == "-" else title[:1].lower() + title[1:]


def _names(names: list[str]) -> str:
    names = [_in_sentence(n) for n in names]
    return names[0] if len(names) == 1 else ", ".join(names[:-1]) + " and " + names[-1]


def disagreement(votes: Sequence[tuple[str, bool | None]]) -> str | None:
    """One sentence when some detectors say the model can answer and others say it cannot, else None.
    ``votes``: (detector title, answerable) pairs; None (no verdict) takes no side."""
    yes = [name for name, vote in votes if vote is True]
    no = [name for name, vote in votes if vote is False]
    if not yes or not no:
        return None
    say = lambda names: "says" if len(names) == 1 else "say"  # noqa: E731
    return (f"The detectors disagree: {_names(yes)} {say(yes)} the model can answer; "
            f"{_names(no)} {say(no)} it cannot.")
