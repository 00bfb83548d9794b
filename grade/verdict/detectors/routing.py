"""Which labelled datasets a question is like (:func:`closest_datasets`: the one rule every card on a screen asks,
the probe's and each detector's), a detector's answer on one question: which of its training datasets applies
(:func:`closest_kind`, inside that rule), each detector's verdict (:func:`verdicts`) and the sentence the app
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


@dataclass(frozen=True)
class QuestionKind:
    """A kind of question and the labelled datasets whose numbers speak for it, pooled (benchmark names)."""

    name: str
    title: str  # how a card's reader would call such questions
    tasks: tuple[str, ...]
    with_document: bool | None  # None: either
    datasets: tuple[str, ...]


#: The one closest-dataset rule, first match wins. Short answers without a document pool every labelled set of
#: such questions (one of them alone has too few answerable questions on a model that knows little), with a
#: document HotpotQA with its paragraphs, and each other task its own benchmark. ``facts`` and ``arithmetic`` are
#: this project's own labelled sets (the small models' benchmark).
QUESTION_KINDS: tuple[QuestionKind, ...] = (
    QuestionKind("short_document", "short answers with a document", ("qa", "qa_doc"), True, ("hotpotqa",)),
    QuestionKind("short", "short answers, no document", ("qa",), False,
                 ("triviaqa", "nq_open", "hotpotqa_closed", "facts")),
    QuestionKind("multiple_choice", "multiple choice (A to D)", ("mmlu",), None, ("mmlu",)),
    QuestionKind("word_problem", "grade-school word problems", ("gsm8k", "cot"), None, ("gsm8k", "arithmetic")),
    QuestionKind("competition_math", "competition math", ("math",), None, ("math",)),
)


@dataclass(frozen=True)
class QuestionsLike:
    """What :func:`closest_datasets` says of one question: its kind and the datasets (among those measured) that
    every card on the screen cites, pooled; ``datasets`` is empty when none of them was measured."""

    task: str
    has_context: bool
    kind: QuestionKind | None
    datasets: tuple[str, ...]
    why: str = ""

    @property
    def key(self) -> str:
        """The name a pooled row is stored under (``grade.verdict.measured``): the datasets joined by ``+``."""
        return pooled_name(self.datasets)


def pooled_name(datasets) -> str:
    return "+".join(datasets)


def question_kind(task: str, has_context: bool) -> QuestionKind | None:
    """The kind of a question of ``task`` with or without a document (:data:`QUESTION_KINDS`), None where no
    kind has its task."""
    task = "qa" if task == "qa_doc" else task
    for kind in QUESTION_KINDS:
        if task in kind.tasks and kind.with_document in (None, bool(has_context)):
            return kind
    return None


def kind_of_dataset(dataset: str) -> QuestionKind | None:
    """The kind whose pool holds ``dataset`` (a benchmark name), None for a dataset no kind pools."""
    return next((kind for kind in QUESTION_KINDS if dataset in kind.datasets), None)


def closest_datasets(task: str, has_context: bool, available=None) -> QuestionsLike:
    """The datasets whose numbers every card cites for a question of ``task`` (with or without a document): its
    kind's pool (:data:`QUESTION_KINDS`) among ``available`` (the measured datasets; None: all of the pool); where
    none of them was measured, the pool of the nearest kind (:data:`RELATED_TASKS`) that was, said in ``why``."""
    task = "qa" if task == "qa_doc" else task
    has = (lambda d: True) if available is None else set(available).__contains__
    kind = question_kind(task, has_context)
    if kind is not None and (found := tuple(d for d in kind.datasets if has(d))):
        return QuestionsLike(task, bool(has_context), kind, found)
    # the same task with the other document condition, then the related tasks
    nearest = [(task, not has_context)] + [(t, doc) for t in RELATED_TASKS.get(task, ())
                                           for doc in (has_context, not has_context)]
    for related, doc in nearest:
        other = question_kind(related, doc)
        if other is not None and other != kind and (found := tuple(d for d in other.datasets if has(d))):
            mine = kind.title if kind is not None else f"{task} questions"
            return QuestionsLike(task, bool(has_context), other, found,
                                 f"none of {mine} were measured; {other.title} are the nearest")
    return QuestionsLike(task, bool(has_context), kind, (), "no labelled questions like this one were measured")


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
    # the one closest-dataset rule first (the datasets the cards cite), then the tiers below among those
    like = closest_datasets(task, has_context, kinds)
    candidates = like.datasets if like.datasets and not like.why else tuple(kinds)

    def tier(meta: dict) -> int:
        same_doc = bool(meta.get("with_document")) == bool(has_context)
        if meta.get("task") == task:
            return 0 if same_doc else 1
        if meta.get("task") in related:
            return 2 if same_doc else 3
        return 4

    def size(name: str) -> int:
        return int(((kinds[name].get("test") or {}).get("n")) or 0)

    best = min(candidates, key=lambda name: (tier(kinds[name]), -size(name), name))
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
