"""What a person reads for a name the code uses: datasets, table columns, error kinds, in one table each.

Pages, cards and reports show :func:`dataset_title`, :func:`column_title` and :func:`kind_title` instead of the
identifiers (``nq_open``, ``auroc_lo``, ``pre/gsm8k.parquet``) under which files and tables keep them; a name not
in a table is turned into words by :func:`words` rather than shown raw.
"""

from __future__ import annotations

import re
from typing import Iterable

#: Dataset identifiers (``grade.tasks.registry``, the results tables) -> their published names.
DATASET_TITLES = {
    "triviaqa": "TriviaQA",
    "nq_open": "NQ-Open",
    "hotpotqa": "HotpotQA (with its paragraphs)",
    "hotpotqa_closed": "HotpotQA (closed book)",
    "hotpotqa_short": "HotpotQA (short paragraphs)",
    "hotpotqa_long": "HotpotQA (long paragraphs)",
    "hotpotqa:short": "HotpotQA (short paragraphs)",
    "hotpotqa:long": "HotpotQA (long paragraphs)",
    "gsm8k": "GSM8K",
    "math": "MATH",
    "mmlu": "MMLU",
    "facts": "world facts",
    "facts_known": "world facts (known)",
    "facts_unknown": "world facts (unknown)",
    "math_steps": "math word problems",
    "with_document": "questions with a document",
    "reworded": "reworded questions",
    "arithmetic": "arithmetic",
    "all": "all datasets",
}

#: Column identifiers of the results tables and stores -> headers.
COLUMN_TITLES = {
    "dataset": "dataset",
    "method": "method",
    "variant": "variant",
    "loss": "loss",
    "n": "n",
    "positives": "answerable",
    "answerable": "answerable",
    "unanswerable": "unanswerable",
    "acc": "accuracy",
    "auroc": "AUROC",
    "auroc_lo": "AUROC 95% interval, low",
    "auroc_hi": "AUROC 95% interval, high",
    "lo": "95% interval: low",
    "hi": "95% interval: high",
    "acc_lo": "accuracy 95% interval, low",
    "acc_hi": "accuracy 95% interval, high",
    "auroc_rel_change": "AUROC change (relative)",
    "auroc_perturbed": "AUROC perturbed",
    "acc_perturbed": "accuracy perturbed",
    "missing": "without features",
    "acc_rel_change": "accuracy change (relative)",
    "n_multi_step": "traces of several steps",
    "n_steps": "steps",
    "n_tokens": "tokens",
    "wrong": "wrong",
    "score": "score",
    "train": "trained on",
    "test": "tested on",
    "study": "study",
    "times_chosen": "chosen (of 5 folds)",
    "base_rate": "answering everything",
    "coverage": "share answered",
    "acc_at_coverage": "accuracy at 50% answered",
    "auacc": "area under the curve",
    "share": "share",
    "class": "token class",
    "share_of_tokens": "share of all tokens",
    "share_of_peaks": "share of peak tokens",
    "mean": "mean",
    "median": "median",
    "position": "relative position",
    "traces": "traces",
    "group": "group",
    "mean_relative": "mean relative position",
    "last_step": "share in the last step",
    "first_third": "first third",
    "middle_third": "middle third",
    "last_third": "last third",
}

#: Loss identifiers -> words.
LOSS_TITLES = {"pre": "loss pre (the prompt alone)", "pos": "loss pos (the model's answer)"}


def words(name: str) -> str:
    """An identifier without a table entry as words: underscores become spaces, a file path its file's stem."""
    text = str(name)
    if "/" in text or text.endswith((".parquet", ".jsonl", ".csv", ".json")):
        text = text.rstrip("/").split("/")[-1].split(".")[0]
    return re.sub(r"_+", " ", text).strip()


def dataset_title(name: str) -> str:
    """``nq_open`` -> "NQ-Open"; a feature file's path (``pre/gsm8k.parquet``) -> its dataset's title."""
    text = str(name)
    key = text.rstrip("/").split("/")[-1].split(".")[0] if ("/" in text or "." in text) else text
    return DATASET_TITLES.get(key, DATASET_TITLES.get(text, words(text)))


def column_title(name: str) -> str:
    return COLUMN_TITLES.get(str(name), words(name))


def titled_columns(columns: Iterable[str]) -> dict[str, str]:
    """A rename map for a table's columns (``frame.rename(columns=titled_columns(frame.columns))``)."""
    return {c: column_title(c) for c in columns}


def kind_title(kind) -> str:
    """An error kind as a person reads it: the one vocabulary's label (:func:`grade.steps.kinds.kind_label`, which
    also reads the older names), else the kind in words."""
    if kind is None:
        return ""
    try:
        from ..steps.kinds import kind_label

        return kind_label(kind) or ""
    except (ImportError, ValueError):  # a name outside the vocabulary: shown, in words
        return words(kind)
