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
import math
from importlib import resources
import os
import re
import string
import unicodedata
from collections import Counter
from dataclasses import asdict, dataclass, field
from fractions import Fraction
from pathlib import Path
from typing import Iterable, Literal

from .errors import InputError
from .hf_datasets import hf_dataset, is_hf_name
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


#: Short answers are one line; reasoning answers stop when a model starts a new question (base models
#: continue the few-shot pattern) or writes blank lines. A stop string counts only after some content.
LINE_STOPS: tuple[str, ...] = ("\n",)
REASONING_STOPS: tuple[str, ...] = ("\nQuestion:", "\n\n\n")


@dataclass(frozen=True)
class TaskSpec:
    """How questions of one task are prompted, sampled, checked and labelled.

    ``max_new_tokens`` and ``stop_strings`` are the answer format: every generated answer of the task
    (labels' samples, the baselines' greedy answer and samples, ``analyze(generate=True)``, the app)
    is at most that long and ends at the first stop string.
    ``unanswerable_below`` / ``answerable_from`` are the reference label thresholds on the sample
    accuracy: label 0 if accuracy < ``unanswerable_below``, 1 if accuracy >= ``answerable_from``,
    no label in between. They are compared as exact fractions (see :func:`label_for_accuracy`).
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


TASKS: dict[str, TaskSpec] = {
    "qa": TaskSpec("qa", "qa", 12, 0.2, 0.8, stop_strings=LINE_STOPS),
    "mmlu": TaskSpec("mmlu", "mmlu", 4, 0.2, 0.8, stop_strings=LINE_STOPS),
    "gsm8k": TaskSpec("gsm8k", "gsm8k", 256, 0.4, 0.6, stop_strings=REASONING_STOPS, stepwise=True),
    "math": TaskSpec("math", "math", 512, 0.2, 0.8, stop_strings=REASONING_STOPS, stepwise=True),
}

#: Prompt styles that are not labelling tasks (no checking rule): only their answer format counts.
PROMPT_ONLY_TASKS: dict[str, TaskSpec] = {
    "cot": TaskSpec("cot", "cot", 256, 0.2, 0.8, stop_strings=REASONING_STOPS),
}


@dataclass(frozen=True)
class AnswerFormat:
    """How long an answer of a task may run and where it ends (see :class:`TaskSpec`)."""

    max_new_tokens: int
    stop_strings: tuple[str, ...]


def answer_format(task: str, max_new_tokens: int | None = None) -> AnswerFormat:
    """The answer format of ``task`` (a labelling task or a prompt style such as ``cot``);
    ``max_new_tokens`` overrides the length (e.g. the length a labels file was sampled with)."""
    task = "qa" if task == "qa_doc" else task  # the with-document wording of short QA
    spec = TASKS.get(task) or PROMPT_ONLY_TASKS.get(task)
    if spec is None:
        known = ", ".join(list(TASKS) + list(PROMPT_ONLY_TASKS))
        raise InputError(f"unknown task {task!r}; use one of {known}")
    return AnswerFormat(int(max_new_tokens or spec.max_new_tokens), spec.stop_strings)


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
# Short answers (TriviaQA, NQ-open, HotpotQA, sample_data facts)

_ARTICLES = re.compile(r"\b(a|an|the)\b")
_PUNCT = set(string.punctuation) | {"‘", "’", "“", "”", "–", "—", "…", "«", "»"}


def normalize_answer(text: str, *, strip_accents: bool = False) -> str:
    """Reference normalisation: unicode NFD, lowercase, no punctuation, no articles, single spaces.

    ``strip_accents`` also drops the combining marks NFD splits off ("Pelé" -> "pele"); the lenient
    matcher uses it, the strict one (like the reference) does not.
    """
    text = unicodedata.normalize("NFD", text)
    if strip_accents:
        text = "".join(c for c in text if not unicodedata.combining(c))
    text = text.lower()
    text = "".join(" " if c in _PUNCT else c for c in text)
    text = _ARTICLES.sub(" ", text)
    return " ".join(text.split())


def _first_sentence(reply: str) -> str:
    return reply.strip().split(".", 1)[0]


def qa_strict(reply: str, answers: list[str]) -> bool:
    """Reference short-answer match: the text before the first ``.`` equals an alias once normalised.

    The whole reply is tried too, so that answers with dots ("N. Lenin", "Mt. Blanc") can match.
    """
    preds = {normalize_answer(_first_sentence(reply)), normalize_answer(reply)} - {""}
    return any(normalize_answer(a) in preds for a in answers)


def qa_lenient(reply: str, answers: list[str]) -> bool:
    """Some alias appears in the reply as whole words, once both are normalised (accents dropped too)."""
    text = f" {normalize_answer(reply, strip_accents=True)} "
    for alias in answers:
        gold = normalize_answer(alias, strip_accents=True)
        if gold and f" {gold} " in text:
            return True
    return False


# ----------------------------------------------------------------------------------------------
# Multiple choice (MMLU)

_LEADING_LETTER = re.compile(r"^[\s\"'(\[*]*([ABCD])(?![A-Za-z])")
_MARKUP = re.compile(r"</?[a-zA-Z][^>]{0,20}>|\*\*")
_ANSWER_IS = re.compile(r"answer(?:\s+is)?\s*[:=]?\s*\(?\s*([ABCD])(?![A-Za-z])", re.IGNORECASE)


def mmlu_letter(reply: str, choices: list[str] | None = None, *, lenient: bool = False) -> str | None:
    """Predicted letter: the A-D the reply starts with (reference).

    Lenient also reads "The answer is B" / "Answer: (B)" and a reply that starts with exactly one
    option's text.
    """
    reply = _MARKUP.sub("", reply)  # "<strong>B</strong>", "**B**": formatting, not an answer
    m = _LEADING_LETTER.match(reply)
    if m:
        return m.group(1)
    if not lenient:
        return None
    m = _ANSWER_IS.search(reply)
    if m:
        return m.group(1).upper()
    if choices:
        text = normalize_answer(reply, strip_accents=True)
        hits = [
            letter
            for letter, choice in zip("ABCD", choices)
            if (c := normalize_answer(choice, strip_accents=True)) and text.startswith(c)
        ]
        if len(hits) == 1:
            return hits[0]
    return None


# ----------------------------------------------------------------------------------------------
# Final numbers (GSM8K)

_NUMBER = re.compile(r"-?\d[\d,]*(?:\.\d+)?|-?\.\d+")


def _to_number(text: str) -> float | None:
    text = text.replace(",", "").rstrip(".")
    if text in ("", "-", "."):
        return None
    try:
        value = float(text)
    except ValueError:
        return None
    return value if math.isfinite(value) else None


def _numbers(text: str) -> list[str]:
    return [n for n in _NUMBER.findall(text) if _to_number(n) is not None]


def gsm8k_final_number(reply: str) -> float | None:
    """Reference extraction: the number after ``####``; else the longest number on the last non-empty
    line; else the longest number anywhere. Commas are dropped; ``None`` if there is no number."""
    if "####" in reply:
        found = _numbers(reply.split("####", 1)[1])
        if found:
            return _to_number(found[0])
    lines = [line for line in reply.splitlines() if line.strip()]
    for text in ([lines[-1]] if lines else []) + [reply]:
        found = _numbers(text)
        if found:
            return _to_number(max(found, key=lambda n: len(n.replace(",", ""))))
    return None


def last_number(reply: str) -> float | None:
    found = _numbers(reply)
    return _to_number(found[-1]) if found else None


def numbers_equal(a: float | None, b: float | None, rel_tol: float = 1e-6) -> bool:
    return a is not None and b is not None and math.isclose(a, b, rel_tol=rel_tol, abs_tol=1e-9)


def gsm8k_correct(reply: str, answers: list[str], *, lenient: bool = False) -> bool:
    """Final number equals a gold answer. Lenient also accepts the reply's last number."""
    gold = [_to_number(a) for a in answers]
    preds = [gsm8k_final_number(reply)] + ([last_number(reply)] if lenient else [])
    return any(numbers_equal(p, g) for p in preds for g in gold)


# ----------------------------------------------------------------------------------------------
# Competition math (MATH)


def _braced(text: str, start: int) -> tuple[str, int] | None:
    """Contents of the brace group opening at ``text[start] == '{'`` and the index after it."""
    if start >= len(text) or text[start] != "{":
        return None
    depth = 0
    for i in range(start, len(text)):
        if text[i] == "{":
            depth += 1
        elif text[i] == "}":
            depth -= 1
            if depth == 0:
                return text[start + 1 : i], i + 1
    return None  # unbalanced: the answer was cut off


def last_boxed(text: str) -> str | None:
    """Contents of the last ``\\boxed{...}`` (or ``\\fbox{...}``, or ``\\boxed 5``), nested braces kept."""
    best = None
    for m in re.finditer(r"\\(?:boxed|fbox)\s*", text):
        if m.end() < len(text) and text[m.end()] == "{":
            group = _braced(text, m.end())
            if group is not None:
                best = group[0]
        else:
            bare = re.match(r"[^\s$]+", text[m.end():])
            if bare:
                best = bare.group(0)
    return best


def math_answer(reply: str, *, lenient: bool = False) -> str | None:
    """Reference extraction: the last ``\\boxed{}``, else the last ``$...$``; lenient falls back to
    the last number."""
    boxed = last_boxed(reply)
    if boxed is not None:
        return boxed
    dollars = re.findall(r"\$([^$]+)\$", reply)
    if dollars:
        return dollars[-1]
    if lenient:
        found = _numbers(reply)
        return found[-1] if found else None
    return None


_UNIT_WORDS = (
    "degrees?|cm|centimeters?|meters?|m|km|kilometers?|inch(?:es)?|feet|foot|ft|units?|square|sq|"
    "cents?|dollars?|hours?|minutes?|seconds?|days?|weeks?|years?|mph|miles?|pounds?|lbs?|ounces?|"
    "grams?|kg|liters?|gallons?|students?|people|ways|points?"
)


def normalize_latex(text: str) -> str:
    """Canonical form of a LaTeX answer for string comparison (after the MATH ``strip_string`` idea).

    Drops spacing commands, ``\\left``/``\\right``, ``\\$``, degree and percent signs, trailing unit
    words and ``x =`` prefixes; ``\\dfrac``/``\\tfrac`` -> ``\\frac``; ``\\frac12`` -> ``\\frac{1}{2}``;
    ``\\sqrt2`` -> ``\\sqrt{2}``; thousands separators and all spaces removed.
    """
    s = str(text).strip()
    s = s.replace("\n", " ").replace("\\!", "").replace("\\,", "").replace("\\;", "").replace("\\:", "")
    s = s.replace("\\ ", " ").replace("~", " ")
    s = re.sub(r"\\(?:displaystyle|textstyle)", "", s)
    s = re.sub(r"\\[dt]frac", r"\\frac", s)
    s = s.replace("\\left", "").replace("\\right", "")
    s = s.replace("\\{", "{").replace("\\}", "}")
    s = s.replace("^{\\circ}", "").replace("^\\circ", "").replace("°", "")
    s = s.replace("\\$", "").replace("$", "")
    s = s.replace("\\%", "").replace("%", "")
    # \text{...} / \mbox{...}: unit words disappear, other text keeps its content
    s = re.sub(r"\\(?:text|textbf|mbox|mathrm|mathbf)\{\s*(?:" + _UNIT_WORDS + r")(?:\^?\{?\d\}?)?\s*\}", "", s)
    s = re.sub(r"\\(?:text|textbf|mbox|mathrm|mathbf)\{([^{}]*)\}", r"\1", s)
    s = re.sub(r"\s+(?:" + _UNIT_WORDS + r")(?:\^?\{?\d\}?)?\s*$", "", s)
    s = s.strip().rstrip(".").strip()
    # "x = 5" -> "5" (a short variable on the left of a single "=")
    if s.count("=") == 1 and len(s.split("=")[0].strip()) <= 2:
        s = s.split("=")[1]
    s = re.sub(r"\\sqrt\s*([^{[\s\\])", r"\\sqrt{\1}", s)
    s = re.sub(r"\\frac\s*([^{\s\\])\s*([^{\s\\])", r"\\frac{\1}{\2}", s)
    s = re.sub(r"\\frac\s*\{([^{}]*)\}\s*([^{\s\\])", r"\\frac{\1}{\2}", s)
    if re.fullmatch(r"-?\d{1,3}(,\d{3})+(\.\d+)?", s.strip()):
        s = s.replace(",", "")
    s = s.replace(" ", "")
    s = re.sub(r"(?<![\d}])\.(\d)", r"0.\1", s)  # ".5" -> "0.5"
    if re.fullmatch(r"-?\d+\.\d*?0+", s):
        s = s.rstrip("0").rstrip(".")  # "2.50" -> "2.5", "3.0" -> "3"
    return s


def _replace_command(s: str, command: str, arity: int, build) -> str | None:
    """Rewrite every ``\\command{a}{b}`` (innermost first) with ``build(a, b)``; None if unbalanced."""
    while True:
        i = s.rfind(command)
        if i < 0:
            return s
        pos, args = i + len(command), []
        for _ in range(arity):
            group = _braced(s, pos)
            if group is None:
                return None
            args.append(group[0])
            pos = group[1]
        s = s[:i] + build(*args) + s[pos:]


def latex_to_sympy(text: str):
    """A small LaTeX -> sympy parser for answers (numbers, fractions, roots, pi, powers, products).

    Returns a sympy expression, or ``None`` when the answer uses anything else (never raises).
    """
    import sympy
    from sympy.parsing.sympy_parser import (
        convert_xor,
        implicit_multiplication_application,
        parse_expr,
        standard_transformations,
    )

    s = normalize_latex(text)
    if not s or len(s) > 80:
        return None
    s = re.sub(r"\\sqrt\[([^\]]+)\]\{", r"\\root{\1}{", s)
    s = _replace_command(s, "\\frac", 2, lambda a, b: f"(({a})/({b}))")
    s = s and _replace_command(s, "\\root", 2, lambda n, a: f"(({a})**(1/({n})))")
    s = s and _replace_command(s, "\\sqrt", 1, lambda a: f"sqrt({a})")
    if s is None:
        return None
    s = s.replace("\\pi", " pi ").replace("\\cdot", "*").replace("\\times", "*").replace("\\infty", " oo ")
    s = s.replace("{", "(").replace("}", ")").replace("^", "**")
    if "\\" in s or s.count("**") > 3 or re.search(r"\*\*\(?\d{4,}", s):
        return None  # unknown command, or a power too large to evaluate safely
    if not re.fullmatch(r"[0-9a-zA-Z+\-*/().\s]*", s):
        return None
    try:
        transformations = standard_transformations + (implicit_multiplication_application, convert_xor)
        return parse_expr(s, transformations=transformations, evaluate=True)
    except Exception:  # sympy raises many types (SyntaxError, TypeError, TokenError...) on odd input
        return None


def _sympy_equal(a, b) -> bool:
    import sympy

    try:
        diff = sympy.expand(a - b)
        if diff == 0:
            return True
        symbols = sorted(diff.free_symbols, key=str)
        if not symbols:
            if b.free_symbols:
                return False
            value = complex(sympy.N(diff, 30))
            scale = max(1.0, abs(complex(sympy.N(b, 30))))
            return abs(value) <= 1e-8 * scale
        # symbolic answers: equal at a few points is equal for our purposes (and never hangs)
        for point in (0.37, 1.21, -2.3, 3.7):
            value = complex(sympy.N(diff.subs({s: point + k * 0.11 for k, s in enumerate(symbols)}), 30))
            if not math.isfinite(abs(value)) or abs(value) > 1e-8:
                return False
        return True
    except Exception:
        return False


def _split_top_level(s: str) -> list[str]:
    parts, depth, current = [], 0, ""
    for c in s:
        if c in "([{":
            depth += 1
        elif c in ")]}":
            depth -= 1
        if c == "," and depth == 0:
            parts.append(current)
            current = ""
        else:
            current += c
    parts.append(current)
    return parts


def math_equivalent(pred: str | None, gold: str) -> bool:
    """Math-aware equality of two LaTeX answers (``\\frac12`` == ``0.5`` == ``\\dfrac{1}{2}``).

    Tries, in order: equal normalised strings; equal sympy values; element-wise equality of tuples,
    intervals and lists with the same brackets. Never raises; anything unparsable compares as text.
    """
    if pred is None or not str(pred).strip():
        return False
    a, b = normalize_latex(pred), normalize_latex(gold)
    if a == b:
        return True
    if a.count(",") and a.count(",") == b.count(","):
        brackets = lambda s: (s[:1], s[-1:]) if s[:1] in "([{" else ("", "")  # noqa: E731
        if brackets(a) == brackets(b):
            open_, close = brackets(a)
            inner_a = a[len(open_) : len(a) - len(close)]
            inner_b = b[len(open_) : len(b) - len(close)]
            pa, pb = _split_top_level(inner_a), _split_top_level(inner_b)
            if len(pa) == len(pb) > 1:
                return all(math_equivalent(x, y) for x, y in zip(pa, pb))
    ea, eb = latex_to_sympy(a), latex_to_sympy(b)
    if ea is None or eb is None:
        return False
    return _sympy_equal(ea, eb)


def math_correct(reply: str, answers: list[str], *, lenient: bool = False) -> bool:
    pred = math_answer(reply, lenient=lenient)
    return any(math_equivalent(pred, gold) for gold in answers)


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
    lenient = matcher == "lenient"
    if question.task == "qa":
        return qa_lenient(reply, question.answers) if lenient else qa_strict(reply, question.answers)
    if question.task == "mmlu":
        letter = mmlu_letter(reply, question.choices, lenient=lenient)
        return letter is not None and letter in {a.strip().upper() for a in question.answers}
    if question.task == "gsm8k":
        return gsm8k_correct(reply, question.answers, lenient=lenient)
    if question.task == "math":
        return math_correct(reply, question.answers, lenient=lenient)
    raise InputError(f"unknown task {question.task!r}")


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
    if task == "mmlu":
        return mmlu_letter(text, choices, lenient=True)
    if task == "gsm8k":
        value = gsm8k_final_number(text)
        if value is None:
            return None
        value += 0.0  # -0.0 and 0.0 are one answer
        return str(int(value)) if value.is_integer() else repr(value)
    if task == "math":
        answer = math_answer(text)
        return normalize_latex(answer) if answer is not None else None
    return normalize_answer(text) or None


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
