"""Question sets and answer checking: datasets -> :class:`Question` records -> correct / wrong.

Datasets are JSONL files in one schema (``grade/datasets/README.md``): ``id``, ``question``,
``answers`` and optionally ``context``, ``choices``, ``solution``, ``subject``. The benchmark subsets
ship inside the package (``grade/datasets``, with their sources and licenses; ``$GRADE_DATASETS_DIR``
points elsewhere); the
teaching sets in ``grade/sample_data/``; any other file of the same schema can be given by path.

Every question has a *task*, which fixes its prompt, its answer length and stop rule, how a reply is
checked and which replies count as the same answer:

======  ===========================================  ==============  ==================  ============
task    reply is correct when                        max new tokens  answer ends at      labels 0 / 1
======  ===========================================  ==============  ==================  ============
qa      it matches an alias (short factual answer)   12              a new line          < 0.2 / >= 0.8
mmlu    its letter is the gold letter                12              a new line          < 0.2 / >= 0.8
gsm8k   its final number equals the gold number      256             a new "Question:"   < 0.4 / >= 0.6
math    its boxed answer is equivalent to the gold   512             a new "Question:"   < 0.2 / >= 0.8
======  ===========================================  ==============  ==================  ============

``cot`` (step-by-step reasoning, :mod:`grade.tasks.prompts`) is a prompt style without a checking rule: it
has an answer format (:func:`answer_format`) and nothing else. The task semantics live in one table,
:data:`grade.tasks.registry.REGISTRY`; this module applies them, and the labeller, the features, the baselines,
``analyze`` and the app ask it (answer length and stop rule: :func:`answer_format`; same answer:
:func:`answer_key`; majority: :func:`majority_answer`). Reading question sets is
:mod:`grade.tasks.question_sets`'s and grading a reply against a gold answer :mod:`grade.tasks.grading`'s; their
names are importable from here too.

Two matchers per task. ``strict`` follows the reference pipeline; ``lenient`` accepts more phrasings
(small models answer in sentences: "The capital of France is Paris." fails the strict short-answer
match but passes the lenient one). See :func:`is_correct`.
"""

from __future__ import annotations

from collections import Counter
from fractions import Fraction
from typing import Iterable, Literal

from ..common.errors import InputError
from .grading import (gsm8k_correct, gsm8k_final_number, last_boxed, last_number, latex_to_sympy, math_answer,  # noqa: F401
                      math_correct, math_equivalent, mmlu_letter, normalize_answer, normalize_latex, numbers_equal,
                      qa_lenient, qa_strict)
from .question_sets import (DATASET_TASKS, DATASETS, PACKAGE_DATASETS_DIR, SAMPLE_DATA_DIR, Question,  # noqa: F401
                            datasets_dir, infer_task, load_questions, question_from_row, read_jsonl, resolve_dataset,
                            sample_datasets)
from .registry import (LINE_STOPS, PROMPT_ONLY_TASKS, REASONING_STOPS, REGISTRY, TASKS, AnswerFormat,  # noqa: F401
                       TaskSpec, answer_format, task_spec)

Matcher = Literal["strict", "lenient"]
MATCHERS: tuple[str, ...] = ("strict", "lenient")

# ----------------------------------------------------------------------------------------------
# Dispatch and labels


def is_correct(question: Question, reply: str, matcher: Matcher = "strict") -> bool:
    """Whether ``reply`` answers ``question`` correctly.

    ``strict`` (reference): short QA = exact match of the text before the first "." against an
    alias; MMLU = the letter the reply starts with; GSM8K = the reference final-number extraction;
    MATH = last boxed answer, math-aware equality.
    ``lenient``: short QA = an alias appears as whole words anywhere in the reply; MMLU = also
    "answer is B" / option text; GSM8K = also the reply's last number; MATH = also the last number
    when nothing is boxed.
    """
    if matcher not in MATCHERS:
        raise InputError(f"unknown matcher {matcher!r}; use strict or lenient")
    spec = TASKS.get(question.task)
    if spec is None:
        raise InputError(f"unknown task {question.task!r}")
    return spec.is_correct(reply, question.answers, question.choices, lenient=matcher == "lenient")


def scored_stepwise(task: str) -> bool:
    """Whether a labelled row of ``task`` is scored step-wise under ``pos`` (:attr:`TaskSpec.stepwise`)."""
    return task in TASKS and TASKS[task].stepwise


# ----------------------------------------------------------------------------------------------
# Same answer, majority answer


def answer_key(task: str, text: str, choices: list[str] | None = None) -> str | None:
    """What two replies must share to count as the same answer, or ``None`` when a reply has none.

    Short QA: the normalised reply; MMLU: the predicted letter (lenient reading); GSM8K: the final
    number (written so that equal numbers give equal keys); MATH: the normalised last boxed answer.
    Used for the labeller's majority answer, self-consistency and "confidently wrong".
    """
    spec = REGISTRY.get(task)
    return spec.answer_key(text, choices) if spec is not None else normalize_answer(text) or None


def majority(keys: Iterable[str | None]) -> tuple[str | None, int]:
    """The most frequent answer key and how many replies give it; ``None`` (no answer) never wins and
    ties go to the key seen first. ``(None, 0)`` when no reply has an answer."""
    keys = list(keys)
    counts = Counter(k for k in keys if k is not None)
    if not counts:
        return None, 0
    best = max(counts.values())
    winner = next(k for k in keys if k is not None and counts[k] == best)
    return winner, best


def majority_answer(task: str, samples: list[str] | None, choices: list[str] | None = None) -> str | None:
    """The first sample that gives the majority answer (see :func:`majority`); the first sample when
    none has an answer, ``None`` without samples. This is the response the reference scores under
    ``L_pos`` (written to labels as ``majority``)."""
    samples = [s for s in (samples or []) if isinstance(s, str)]
    if not samples:
        return None
    keys = [answer_key(task, s, choices) for s in samples]
    winner, _ = majority(keys)
    if winner is None:
        return samples[0]
    return next(s for s, k in zip(samples, keys) if k == winner)


def label_for_accuracy(n_correct: int, n_samples: int, spec: TaskSpec) -> int | None:
    """1 (answerable) if accuracy >= ``answerable_from``, 0 if < ``unanswerable_below``, else None.

    Compared as exact fractions: with 10 samples and the 0.2 / 0.8 thresholds, 0 means at most 1
    correct and 1 means at least 8 (float sums such as 0.1 + 0.1 + 0.1 would blur the edges).
    """
    if n_samples <= 0:
        return None
    acc = Fraction(n_correct, n_samples)
    if acc >= Fraction(str(spec.answerable_from)):
        return 1
    if acc < Fraction(str(spec.unanswerable_below)):
        return 0
    return None
