"""Question sets: the shared benchmark subsets, the teaching sets, any JSONL file of the shared schema and the
``hf:`` route to Hugging Face datasets, read into :class:`Question` records (:func:`load_questions`). What a
question's task means (its prompt, answer format, checker) is :mod:`grade.tasks.registry`'s; whether a reply is
right, :func:`grade.tasks.tasks.is_correct`.
"""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass, field
from importlib import resources
from pathlib import Path
from typing import Iterable

from ..common.errors import InputError
from ..common.visible import is_blank as _is_blank
from .hf_datasets import hf_dataset, is_hf_name
from ..common.io import check_input_file, find_jsonl, iter_jsonl, jsonl_stem
from .registry import TASKS, TaskSpec

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
    from the Hugging Face Hub (``hf:gsm8k``, ``hf:mmlu:test``: :mod:`grade.tasks.hf_datasets`) or a path."""
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
    if not isinstance(row["question"], str) or _is_blank(row["question"]):
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
