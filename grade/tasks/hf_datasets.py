"""Full benchmark splits from the Hugging Face Hub: ``--dataset hf:<name>[:<split>]``.

The subsets in ``grade/datasets`` are samples of public benchmarks; where a network exists, the whole
split they were drawn from (or another split) can be used instead. Each Hub row is converted into
this project's JSONL schema by the rules of ``grade/datasets/README.md`` (same ids, answers, solution,
context), so a question that is also in a shipped subset gives the same row in both (MATH's ids
aside: the Hub copy has no problem file names). The converted file is written once to
``<cache dir>/datasets/hf-<name>-<split>.jsonl`` and read from there afterwards, offline too.

``datasets`` is an optional dependency (``pip install 'grade-studio[hf]'``), imported only here and
only when a split is not in the cache yet. Only datasets stored as data files are used: no loading
script, so nothing from the Hub is ever executed (``trust_remote_code`` is never set).
"""

from __future__ import annotations

import json
import re
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterable, Iterator

from ..common.errors import InputError
from .grading import last_boxed
from ..common.io import atomic_path, ensure_output_folder

PREFIX = "hf:"
INSTALL_HINT = "pip install 'grade-studio[hf]'"


# --------------------------------------------------------------------------------------------------
# row converters: one Hub row -> one row of the project schema (grade/datasets/README.md)


def project_row(row_id: str, question: str, answers: list[str], *, solution: str | None = None,
                context: str | None = None, choices: list[str] | None = None, subject: str | None = None) -> dict:
    """A row with the keys in the order of the shipped files."""
    return {"id": row_id, "question": question, "answers": answers, "solution": solution, "context": context,
            "choices": choices, "subject": subject}


_CALCULATOR = re.compile(r"<<.*?>>")


def gsm8k_row(row: dict, row_id: str) -> dict:
    """GSM8K (``question``, ``answer``): the number after ``####`` without thousands separators, plus
    the original string when it had them; the solution without the ``<<...>>`` calculator notes."""
    final = row["answer"].split("####")[-1].strip()
    plain = final.replace(",", "")
    answers = [plain] if plain == final else [plain, final]
    return project_row(row_id, row["question"], answers, solution=_CALCULATOR.sub("", row["answer"]))


def nq_open_row(row: dict, row_id: str) -> dict:
    """NQ-open (``question``, ``answer``: list): every reference answer as given."""
    return project_row(row_id, row["question"], list(row["answer"]))


def triviaqa_row(row: dict, row_id: str) -> dict:
    """TriviaQA (``question``, ``answer.aliases``): the aliases in order, exact duplicates removed."""
    return project_row(row_id, row["question"], list(dict.fromkeys(row["answer"]["aliases"])))


def hotpotqa_row(row: dict, row_id: str) -> dict:
    """HotpotQA, distractor setting (``context`` and ``supporting_facts`` as parallel lists): the gold
    paragraphs in their context order, each ``Title: text`` with whitespace collapsed, joined by a
    blank line. The sentences carry their own leading spaces, so they are joined with nothing."""
    gold = set(row["supporting_facts"]["title"])
    paragraphs = [" ".join(f"{title}: {''.join(sentences)}".split())
                  for title, sentences in zip(row["context"]["title"], row["context"]["sentences"]) if title in gold]
    return project_row(row_id, row["question"], [row["answer"]], context="\n\n".join(paragraphs) or None)


def mmlu_row(row: dict, row_id: str) -> dict:
    """MMLU (``answer`` is the index of the right choice): the letter, the four choices, the subject."""
    return project_row(row_id, row["question"], ["ABCD"[int(row["answer"])]], choices=list(row["choices"]),
                       subject=row["subject"])


#: MATH problems whose answer is not the last box of the solution (grade/datasets/README.md): this one
#: boxes its notation and leaves the answer unboxed on purpose.
MATH_ANSWER_OVERRIDES: dict[str, str] = {
    "Let $\\boxed{N}$ mean the number of whole number divisors of $N$. For example, $\\boxed{3}=2$, because "
    "$3$ has two divisors, $1$ and $3.$ Find the value of \\[\\boxed{\\boxed{11}\\times\\boxed{20}}\\]": "6",
}


def math_row(row: dict, row_id: str) -> dict:
    """MATH (``problem``, ``solution``, ``type``): the answer is the last boxed expression of the
    solution, unmodified LaTeX (no answer when the solution boxes nothing: the row is left out)."""
    answer = MATH_ANSWER_OVERRIDES.get(row["problem"]) or last_boxed(row["solution"])
    return project_row(row_id, row["problem"], [answer] if answer else [], solution=row["solution"],
                       subject=row["type"])


# --------------------------------------------------------------------------------------------------
# which Hub dataset each name stands for


@dataclass(frozen=True)
class HubDataset:
    """One benchmark on the Hub.

    ``splits`` maps each offered Hub split to the name it has in row ids (the original release's:
    NQ-open's ``validation`` is its ``dev`` file, MMLU's is ``val``), so that the ids are those of
    the shipped subsets; the first split is the default: the one the shipped subset was drawn from.
    ``configs`` are loaded one after the other (MATH is one config per subject). ``row_id`` builds
    the id from the split's id name, the config, the row and its number; ``numbered_by`` says which
    rows are numbered together (MMLU counts rows per subject, as in its per-subject CSV files).
    """

    hub_id: str
    configs: tuple[str, ...]
    splits: dict[str, str]
    convert: Callable[[dict, str], dict]
    row_id: Callable[[str, str, dict, int], str]
    numbered_by: Callable[[str, dict], str] = lambda config, row: config

    @property
    def default_split(self) -> str:
        return next(iter(self.splits))


MATH_SUBJECTS = ("algebra", "counting_and_probability", "geometry", "intermediate_algebra", "number_theory",
                 "prealgebra", "precalculus")

HUB_DATASETS: dict[str, HubDataset] = {
    "gsm8k": HubDataset("openai/gsm8k", ("main",), {"train": "train", "test": "test"}, gsm8k_row,
                        lambda split, config, row, n: f"gsm8k-{split}-{n}"),
    # rc.nocontext is the rc config (same rows, same order) without its evidence documents, which
    # the schema does not keep and which make rc a download of gigabytes.
    "triviaqa": HubDataset("mandarjoshi/trivia_qa", ("rc.nocontext",), {"train": "train", "validation": "validation"},
                           triviaqa_row, lambda split, config, row, n: f"triviaqa-rc-{split}-{n}"),
    "nq_open": HubDataset("google-research-datasets/nq_open", ("nq_open",), {"validation": "dev", "train": "train"},
                          nq_open_row, lambda split, config, row, n: f"nq_open-{split}-{n}"),
    "hotpotqa": HubDataset("hotpotqa/hotpot_qa", ("distractor",), {"validation": "dev", "train": "train"},
                           hotpotqa_row, lambda split, config, row, n: row["id"]),
    "mmlu": HubDataset("cais/mmlu", ("all",), {"validation": "val", "test": "test", "dev": "dev"}, mmlu_row,
                       lambda split, config, row, n: f"mmlu-{row['subject']}-{split}-{n}",
                       numbered_by=lambda config, row: row["subject"]),
    # The Hub copy of MATH does not keep the problems' file names (test/algebra/1535.json), so its ids
    # are numbered per subject instead.
    "math": HubDataset("EleutherAI/hendrycks_math", MATH_SUBJECTS, {"test": "test", "train": "train"}, math_row,
                       lambda split, config, row, n: f"math-{split}-{config}-{n}"),
}

HF_NAMES: tuple[str, ...] = tuple(PREFIX + name for name in HUB_DATASETS)


def is_hf_name(text: str) -> bool:
    return text.startswith(PREFIX)


def parse_hf_name(text: str) -> tuple[str, str]:
    """``(dataset name, Hub split)`` of ``hf:<name>[:<split>]``; unknown names and splits raise InputError."""
    name, _, split = text[len(PREFIX):].strip().partition(":")
    spec = HUB_DATASETS.get(name)
    if spec is None:
        raise InputError(f"unknown Hugging Face dataset {text!r}: use one of {', '.join(HF_NAMES)} "
                         "(optionally :<split>)")
    split = split or spec.default_split
    if split not in spec.splits:
        raise InputError(f"{PREFIX}{name} has no split {split!r}: use one of {', '.join(spec.splits)}")
    return name, split


# --------------------------------------------------------------------------------------------------
# fetching and caching


def cached_path(name: str, split: str) -> Path:
    from ..common.io import cache_dir

    return cache_dir() / "datasets" / f"hf-{name}-{split}.jsonl"


def _import_datasets(name: str):
    try:
        import datasets
    except ImportError:
        raise InputError(f"{PREFIX}{name} needs the optional 'datasets' library: {INSTALL_HINT} "
                         f"(the shipped subset, --dataset {name}, works without it)") from None
    return datasets


def hub_rows(name: str, split: str) -> Iterator[tuple[str, dict]]:
    """``(config, row)`` for every row of the split, configs in order; any failure of the Hub or of the
    ``datasets`` library becomes one InputError line (a failure while the caller handles a row does
    not pass through here)."""
    spec = HUB_DATASETS[name]
    datasets = _import_datasets(name)
    try:
        for config in spec.configs:
            # streaming reads only this split's files: a plain load would prepare every split first
            # (HotpotQA's train split alone is about 0.5 GB, MMLU's auxiliary_train 100k rows)
            for row in datasets.load_dataset(spec.hub_id, config, split=split, streaming=True):
                yield config, row
    except Exception as exc:  # network, Hub and library errors alike: all leave the user offline-only
        reason = (str(exc).strip().splitlines() or [""])[0][:200]
        raise InputError(
            f"could not load {spec.hub_id} ({split}) from the Hugging Face Hub ({type(exc).__name__}"
            f"{': ' + reason if reason else ''}); {PREFIX} datasets need network access the first time, "
            f"while the shipped subsets (--dataset {name}) work offline") from None


def convert_rows(name: str, split: str, rows: Iterable[tuple[str, dict]]) -> Iterator[dict]:
    """The project rows of ``(config, Hub row)`` pairs, ids numbered as :class:`HubDataset` says.

    A row without any answer (a MATH solution that boxes nothing) is left out: it could not be checked.
    """
    spec = HUB_DATASETS[name]
    id_split = spec.splits[split]
    numbers: Counter = Counter()
    for config, row in rows:
        try:
            group = spec.numbered_by(config, row)
            number = numbers[group]
            numbers[group] += 1
            converted = spec.convert(row, spec.row_id(id_split, config, row, number))
        except (KeyError, TypeError, ValueError, IndexError) as exc:  # the Hub copy changed its layout
            raise InputError(f"a row of {spec.hub_id} ({config}, {split}) is not laid out as {__name__} expects "
                             f"({type(exc).__name__}: {exc}); the shipped subset (--dataset {name}) still works"
                             ) from None
        if converted["answers"]:
            yield converted


def hf_dataset(text: str) -> tuple[str, Path]:
    """``(dataset name, converted JSONL)`` for ``hf:<name>[:<split>]``, fetched and converted on first use.

    The name is the plain dataset name (``gsm8k``), so that rows get that dataset's task.
    """
    name, split = parse_hf_name(text)
    path = cached_path(name, split)
    if path.is_file():
        return name, path
    ensure_output_folder(path.parent, "dataset cache folder")
    written = 0
    with atomic_path(path) as tmp, open(tmp, "w", encoding="utf-8") as out:
        for row in convert_rows(name, split, hub_rows(name, split)):
            out.write(json.dumps(row, ensure_ascii=False) + "\n")
            written += 1
        if not written:
            raise InputError(f"{HUB_DATASETS[name].hub_id} ({split}) holds no row with an answer")
    return name, path
