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
mmlu    its letter is the gold letter                4               a new line          < 0.2 / >= 0.8
gsm8k   its final number equals the gold number      256             a new "Question:"   < 0.4 / >= 0.6
math    its boxed answer is equivalent to the gold   512             a new "Question:"   < 0.2 / >= 0.8
======  ===========================================  ==============  ==================  ============

``cot`` (step-by-step reasoning, :mod:`grade.prompts`) is a prompt style without a checking rule: it
has an answer format (:func:`answer_format`) and nothing else. This module is the one place where
these task semantics live: the labeller, the features, the baselines, ``analyze`` and the app all
ask it (answer length and stop rule: :func:`answer_format`; same answer: :func:`answer_key`;
majority: :func:`majority_answer`).

Two matchers per task. ``strict`` follows the reference pipeline; ``lenient`` accepts more phrasings
(small models answer in sentences: "The capital of France is Paris." fails the strict short-answer
match but passes the lenient one). See :func:`is_correct`.
"""

from __future__ import annotations

import json
from importlib import resources
import os
from collections import Counter
from dataclasses import asdict, dataclass, field
from fractions import Fraction
from pathlib import Path
from typing import Iterable, Literal

from .errors import InputError
from .grading import (gsm8k_correct, gsm8k_final_number, last_boxed, last_number, latex_to_sympy, math_answer,
                      math_correct, math_equivalent, mmlu_letter, normalize_answer, normalize_latex, numbers_equal,
                      qa_lenient, qa_strict)
from .hf_datasets import hf_dataset, is_hf_name
from .registry import LINE_STOPS, REASONING_STOPS, REGISTRY, AnswerFormat, TaskSpec, task_spec  # noqa: F401
from .io import check_input_file, find_jsonl, iter_jsonl, jsonl_stem

Matcher = Literal["strict", "lenient"]
MATCHERS: tuple[str, ...] = ("strict", "lenient")

#: Shared benchmark subsets (``<datasets dir>/<name>/dev.jsonl``) and the task each one uses.
DATASET_TASKS: dict[str, str] = {
    "triviaqa": "qa",
    "nq_open": "qa",
    "hotpotqa": "qa",
    "mmlu": "mmlu",
    "gsm8k": "gsm8k",
    "math": "math",
}
DATASETS: tuple[str, ...] = tuple(DATASET_TASKS)

#: Package data (importlib.resources, so an installed package finds them too): the benchmark subsets
#: (``datasets/<name>/dev.jsonl.xz``) and the teaching sets (``sample_data/<name>.jsonl``).
PACKAGE_DATASETS_DIR = Path(str(resources.files("grade") / "datasets"))
SAMPLE_DATA_DIR = Path(str(resources.files("grade") / "sample_data"))


#: The labelling tasks (with a checking rule) and the prompt styles that are not labelled (only their answer
#: format counts): two views of :data:`grade.registry.REGISTRY`.
TASKS: dict[str, TaskSpec] = {name: spec for name, spec in REGISTRY.items() if spec.labelled}
PROMPT_ONLY_TASKS: dict[str, TaskSpec] = {name: spec for name, spec in REGISTRY.items() if not spec.labelled}


def answer_format(task: str, max_new_tokens: int | None = None) -> AnswerFormat:
    """The answer format of ``task`` (a labelling task or a prompt style such as ``cot``);
    ``max_new_tokens`` overrides the length (e.g. the length a labels file was sampled with)."""
    spec = task_spec(task)
    if spec is None:
        raise InputError(f"unknown task {task!r}; use one of {', '.join(REGISTRY)}")
    return spec.answer_format(max_new_tokens)


@dataclass
class Question:
    """One question of a dataset, ready to prompt and to check.

    ``context`` is the passage placed before the question in the prompt, or ``None`` for a
    closed-book question (HotpotQA carries a context that is only used with ``with_context``).
    ``extra`` keeps any further fields of the row (e.g. ``steps`` in ``sample_data/math_steps.jsonl``).
    """

    id: str
    question: str
    answers: list[str]
    task: str = "qa"
    dataset: str = ""
    context: str | None = None
    choices: list[str] | None = None
    solution: str | None = None
    subject: str | None = None
    extra: dict = field(default_factory=dict)

    @property
    def spec(self) -> TaskSpec:
        return TASKS[self.task]

    def prompt(self, tokenizer) -> str:
        """The full prompt text for this question (chat template when the tokenizer has one)."""
        from .prompts import format_prompt

        return format_prompt(
            tokenizer, self.question, task=self.spec.prompt_task, context=self.context, choices=self.choices
        )

    def to_dict(self) -> dict:
        return asdict(self)


# ----------------------------------------------------------------------------------------------
# Loading


def datasets_dir() -> Path:
    """Folder of the benchmark subsets: ``$GRADE_DATASETS_DIR``, else the copies inside the package."""
    env = os.environ.get("GRADE_DATASETS_DIR")
    return Path(env).expanduser() if env else PACKAGE_DATASETS_DIR


def sample_datasets() -> list[str]:
    """Names of the question sets in ``sample_data/`` (usable wherever a dataset name is)."""
    return sorted(p.stem for p in SAMPLE_DATA_DIR.glob("*.jsonl"))


def resolve_dataset(name_or_path: str | os.PathLike) -> tuple[str, Path]:
    """``(dataset name, JSONL path)`` for a shared dataset name, a ``sample_data`` name, a full split
    from the Hugging Face Hub (``hf:gsm8k``, ``hf:mmlu:test``: :mod:`grade.hf_datasets`) or a path."""
    text = str(name_or_path).strip()
    if not text:
        raise InputError("no dataset given")
    if is_hf_name(text):
        return hf_dataset(text)
    if text in DATASET_TASKS:
        path = find_jsonl(datasets_dir() / text, "dev")
        if path is None:
            raise InputError(
                f"dataset {text!r} not found in {datasets_dir() / text}; set GRADE_DATASETS_DIR to the folder "
                f"holding {text}/dev.jsonl"
            )
        return text, path
    if (SAMPLE_DATA_DIR / f"{text}.jsonl").is_file():
        return text, SAMPLE_DATA_DIR / f"{text}.jsonl"
    path = Path(text).expanduser()
    if path.is_file():
        return jsonl_stem(path), path
    if os.path.lexists(path):  # a folder, a FIFO, a device, a dangling link: say so, never read it
        check_input_file(path, "dataset file")
    known = ", ".join(list(DATASETS) + sample_datasets())
    raise InputError(f"unknown dataset {text!r}: use one of {known}, hf:<name>[:<split>] (the full split from "
                     "the Hugging Face Hub), or the path of a JSONL file")


def infer_task(row: dict, dataset: str | None = None) -> str:
    """Task of a row: its own ``task`` field, else the dataset's, else guessed from its fields."""
    task = row.get("task")
    if task:
        if task not in TASKS:
            raise InputError(f"row {row.get('id')!r}: unknown task {task!r}; use one of {', '.join(TASKS)}")
        return task
    if dataset in DATASET_TASKS:
        return DATASET_TASKS[dataset]
    if row.get("choices"):
        return "mmlu"
    solution = row.get("solution") or ""
    if "####" in solution:
        return "gsm8k"
    if "\\boxed" in solution:
        return "math"
    return "qa"


_KNOWN_FIELDS = {"id", "question", "answers", "task", "context", "choices", "solution", "subject"}


def question_from_row(row: dict, *, dataset: str = "", with_context: bool = False, where: str = "") -> Question:
    """Validate one JSONL row and turn it into a :class:`Question`."""
    where = where or f"row {row.get('id')!r}"
    if not isinstance(row, dict):
        raise InputError(f"{where}: expected a JSON object")
    for key in ("id", "question", "answers"):
        if key not in row:
            raise InputError(f"{where}: missing field {key!r}")
    answers = row["answers"]
    if isinstance(answers, str):
        answers = [answers]
    if not isinstance(answers, list) or not answers or not all(isinstance(a, str) for a in answers):
        raise InputError(f"{where}: 'answers' must be a non-empty list of strings")
    if not isinstance(row["question"], str) or not row["question"].strip():
        raise InputError(f"{where}: 'question' is empty" if not row["question"] else f"{where}: 'question' must be text")
    if isinstance(row["id"], bool) or not isinstance(row["id"], (str, int)):
        raise InputError(f"{where}: 'id' must be text or a whole number")
    for key in ("task", "context", "solution", "subject"):
        if row.get(key) is not None and not isinstance(row[key], str):
            raise InputError(f"{where}: {key!r} must be text or null")
    choices = row.get("choices")
    if choices is not None and (not isinstance(choices, list) or not all(isinstance(c, str) for c in choices)):
        raise InputError(f"{where}: 'choices' must be a list of texts")
    if row.get("task") and row["task"] not in TASKS:
        raise InputError(f"{where}: unknown task {row['task']!r}; use one of {', '.join(TASKS)}")
    task = infer_task(row, dataset)
    if task == "mmlu":
        if not choices or len(choices) != 4:
            raise InputError(f"{where}: a multiple-choice row needs 4 'choices'")
        if not all(a.strip().upper() in {"A", "B", "C", "D"} for a in answers):
            raise InputError(f"{where}: multiple-choice 'answers' must be letters A-D")
    return Question(
        id=str(row["id"]),
        question=row["question"],
        answers=list(answers),
        task=task,
        dataset=dataset,
        context=(row.get("context") or None) if with_context else None,
        choices=list(choices) if choices else None,
        solution=row.get("solution"),
        subject=row.get("subject"),
        extra={k: v for k, v in row.items() if k not in _KNOWN_FIELDS},
    )


def read_jsonl(path: str | os.PathLike) -> Iterable[tuple[int, dict]]:
    """``(line number, object)`` for each non-empty line; a bad line (bytes, JSON) raises :class:`InputError`."""
    for number, row, problem in iter_jsonl(path):
        if problem:
            raise InputError(f"{path}, line {number}: {problem}")
        yield number, row


def load_questions(
    dataset: str | os.PathLike,
    *,
    limit: int | None = None,
    offset: int = 0,
    with_context: bool = False,
    skipped: list[str] | None = None,
) -> list[Question]:
    """Questions of a dataset, in file order (the shared files are already shuffled).

    Parameters
    ----------
    dataset : a shared dataset name (:data:`DATASETS`), a ``sample_data`` set name, or a JSONL path.
    limit, offset : take rows ``offset .. offset+limit-1``.
    with_context : put each row's ``context`` into the prompt (HotpotQA's supporting paragraphs,
        ``sample_data/with_document.jsonl``); closed-book otherwise.
    skipped : where the reasons of bad rows (skipped, not counted in ``limit`` / ``offset``) go.
    """
    name, path = resolve_dataset(dataset)
    questions: list[Question] = []
    seen: set[str] = set()
    problems: list[str] = []  # a bad row is skipped and counted; the batch goes on
    for number, row, problem in iter_jsonl(path):
        where = f"{path}, line {number}"
        try:
            if problem:
                raise InputError(f"{where}: {problem}")
            q = question_from_row(row, dataset=name, with_context=with_context, where=where)
            if q.id in seen:
                raise InputError(f"{where}: duplicate id {q.id!r}")
        except InputError as exc:
            problems.append(str(exc))
            continue
        seen.add(q.id)
        questions.append(q)
    if skipped is not None:
        skipped.extend(problems)
    if not questions:
        raise InputError(f"{path} holds no questions" + (f"; first problem: {problems[0]}" if problems else ""))
    end = None if limit is None else offset + limit
    return questions[offset:end]


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
