"""The task registry: one :class:`TaskSpec` per task, the only vocabulary of tasks in the package.

A task fixes how a question is prompted (its instruction), what the app calls it, how long an answer may run
and where it ends (its answer format), how a reply is checked (its checker), which replies count as the same
answer (its answer key) and how sample accuracy becomes a label. A task without a checker (``cot``) is a
prompt style only: it has an instruction and an answer format and is never labelled.

The prompts (:data:`grade.tasks.prompts.INSTRUCTIONS`), the labelling tasks (:data:`grade.tasks.tasks.TASKS`,
:func:`grade.tasks.tasks.is_correct`, :func:`grade.tasks.tasks.answer_key`, :func:`grade.tasks.tasks.answer_format`) and the
trace readers (:data:`grade.traces.TRACE_TASKS`: the step-wise tasks) all read this table. To add a task, add
one entry to :data:`REGISTRY`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from ..common.errors import InputError
from .grading import gsm8k_correct, gsm8k_final_number, math_answer, math_correct, mmlu_letter, normalize_answer, \
    normalize_latex, qa_lenient, qa_strict

#: Short answers are one line; reasoning answers stop when a model starts a new question (base models
#: continue the few-shot pattern) or writes blank lines. A stop string counts only after some content.
LINE_STOPS: tuple[str, ...] = ("\n",)
REASONING_STOPS: tuple[str, ...] = ("\nQuestion:", "\n\n\n")

#: ``checker(reply, answers, choices, lenient) -> correct``
Checker = Callable[[str, list, "list | None", bool], bool]
#: ``key(reply, choices) -> the answer two replies must share, or None``
AnswerKey = Callable[[str, "list | None"], "str | None"]


@dataclass(frozen=True)
class AnswerFormat:
    """How long an answer of a task may run and where it ends (see :class:`TaskSpec`)."""

    max_new_tokens: int
    stop_strings: tuple[str, ...]


@dataclass(frozen=True)
class TaskSpec:
    """How questions of one task are prompted, sampled, checked and labelled.

    ``max_new_tokens`` and ``stop_strings`` are the answer format: every generated answer of the task
    (labels' samples, the baselines' greedy answer and samples, ``analyze(generate=True)``, the app)
    is at most that long and ends at the first stop string.
    ``unanswerable_below`` / ``answerable_from`` are the reference label thresholds on the sample
    accuracy: label 0 if accuracy < ``unanswerable_below``, 1 if accuracy >= ``answerable_from``,
    no label in between. They are compared as exact fractions (see :func:`grade.tasks.tasks.label_for_accuracy`).
    ``instruction`` ends the prompt (``document_instruction`` instead when a document comes first);
    ``checker`` (None: a prompt style, never labelled) and ``key`` (None: the normalised reply) judge replies.
    """

    name: str
    prompt_task: str
    max_new_tokens: int
    unanswerable_below: float
    answerable_from: float
    default_samples: int = 10
    stop_strings: tuple[str, ...] = ()
    #: responses are chains of thought, scored one step at a time under ``pos`` (GRADE_pos for reasoning)
    stepwise: bool = False
    instruction: str = ""
    document_instruction: str | None = None
    display_name: str = ""
    #: questions come with answer options (A to D), which a question typed into the app does not have
    choices: bool = False
    checker: Checker | None = None
    key: AnswerKey | None = None

    @property
    def labelled(self) -> bool:
        """A labelling task (it has a checking rule), not a prompt style only."""
        return self.checker is not None

    def answer_format(self, max_new_tokens: int | None = None) -> AnswerFormat:
        return AnswerFormat(int(max_new_tokens or self.max_new_tokens), self.stop_strings)

    def is_correct(self, reply: str, answers: list, choices: list | None = None, *, lenient: bool = False) -> bool:
        if self.checker is None:
            raise ValueError(f"task {self.name!r} has no checking rule")
        return self.checker(reply, answers, choices, lenient)

    def answer_key(self, reply: str, choices: list | None = None) -> str | None:
        return self.key(reply, choices) if self.key is not None else normalize_answer(reply) or None


# --------------------------------------------------------------------------------------------------
# checkers and answer keys (module functions: a TaskSpec travels to Ray workers)


def _check_qa(reply: str, answers: list, choices: list | None, lenient: bool) -> bool:
    return qa_lenient(reply, answers) if lenient else qa_strict(reply, answers)


def _check_mmlu(reply: str, answers: list, choices: list | None, lenient: bool) -> bool:
    letter = mmlu_letter(reply, choices, lenient=lenient)
    return letter is not None and letter in {a.strip().upper() for a in answers}


def _check_gsm8k(reply: str, answers: list, choices: list | None, lenient: bool) -> bool:
    return gsm8k_correct(reply, answers, lenient=lenient)


def _check_math(reply: str, answers: list, choices: list | None, lenient: bool) -> bool:
    return math_correct(reply, answers, lenient=lenient)


def _key_mmlu(reply: str, choices: list | None) -> str | None:
    return mmlu_letter(reply, choices, lenient=True)


def _key_gsm8k(reply: str, choices: list | None) -> str | None:
    value = gsm8k_final_number(reply)
    if value is None:
        return None
    value += 0.0  # -0.0 and 0.0 are one answer
    return str(int(value)) if value.is_integer() else repr(value)


def _key_math(reply: str, choices: list | None) -> str | None:
    answer = math_answer(reply)
    return normalize_latex(answer) if answer is not None else None


REGISTRY: dict[str, TaskSpec] = {
    "qa": TaskSpec(
        "qa", "qa", 12, 0.2, 0.8, stop_strings=LINE_STOPS,
        instruction="Answer the question with one or a few words, using only your own knowledge.",
        document_instruction="Answer the question with one or a few words. You may use the document above.",
        display_name="Short answer (facts)", checker=_check_qa),
    "mmlu": TaskSpec(
        "mmlu", "mmlu", 12, 0.2, 0.8, stop_strings=LINE_STOPS,  # room for a chat model's "The correct answer is C."
        instruction="Answer the multiple-choice question with the letter (A, B, C or D) of the correct option.",
        display_name="Multiple choice (A to D)", choices=True, checker=_check_mmlu, key=_key_mmlu),
    "gsm8k": TaskSpec(
        "gsm8k", "gsm8k", 256, 0.4, 0.6, stop_strings=REASONING_STOPS, stepwise=True,
        instruction="Solve the problem. Reason briefly, step by step, then give the final answer on its own line "
                    "as '#### <number>'.",
        display_name="Math word problem (reasoning, #### answer)", checker=_check_gsm8k, key=_key_gsm8k),
    "math": TaskSpec(
        "math", "math", 512, 0.2, 0.8, stop_strings=REASONING_STOPS, stepwise=True,
        instruction="Solve the problem. Reason step by step and put the final answer in \\boxed{}.",
        display_name="Competition math (answer in \\boxed{})", checker=_check_math, key=_key_math),
    "cot": TaskSpec(
        "cot", "cot", 256, 0.2, 0.8, stop_strings=REASONING_STOPS,
        instruction="Answer the question. Reason step by step in short sentences.",
        display_name="Open question, step by step"),
}


def task_spec(name: str) -> TaskSpec | None:
    """The spec of ``name``; ``qa_doc`` (the with-document wording of short QA) is ``qa``."""
    return REGISTRY.get("qa" if name == "qa_doc" else name)


#: The labelling tasks (with a checking rule) and the prompt styles that are not labelled (only their answer
#: format counts): two views of :data:`REGISTRY`.
TASKS: dict[str, TaskSpec] = {name: spec for name, spec in REGISTRY.items() if spec.labelled}
PROMPT_ONLY_TASKS: dict[str, TaskSpec] = {name: spec for name, spec in REGISTRY.items() if not spec.labelled}


#: The tasks a question typed without answer options can be asked under (the app's choice), in registry order.
TYPED_TASKS: tuple[str, ...] = tuple(name for name, spec in REGISTRY.items() if not spec.choices)


def answer_format(task: str, max_new_tokens: int | None = None) -> AnswerFormat:
    """The answer format of ``task`` (a labelling task or a prompt style such as ``cot``);
    ``max_new_tokens`` overrides the length (e.g. the length a labels file was sampled with)."""
    spec = task_spec(task)
    if spec is None:
        raise InputError(f"unknown task {task!r}; use one of {', '.join(REGISTRY)}")
    return spec.answer_format(max_new_tokens)
