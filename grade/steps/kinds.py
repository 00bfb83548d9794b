"""The one vocabulary of reasoning-error kinds: annotation files, the trace store, its export, ``grade steperrors``
and the pages all name a step's error by one of :data:`ERROR_KINDS` and show it as :data:`KIND_LABELS`.

Older names (the store's first list, the injected errors of :mod:`grade.steps.step_errors`) are read through
:data:`ALIASES`, so a store or file written before this table keeps its meaning.
"""

from __future__ import annotations

import re

#: Kind id -> what a user reads. The ids are what files and the store hold; the order is the order of every menu.
KIND_LABELS = {
    "calculation": "calculation slip",
    "misread": "misread question",
    "plan": "wrong plan or operation",
    "double_count_or_omission": "double count or omission",
    "units": "unit error",
    "algebra": "algebra error",
    "final_answer": "wrong final statement",
    "other": "other",
}
#: Every kind an analyst or annotation file can give (the last one catches the rest).
ERROR_KINDS = tuple(KIND_LABELS)

#: Other names of a kind: the store's first list, the injected errors and the labels themselves.
ALIASES = {
    "arithmetic slip": "calculation",
    "own arithmetic slip": "calculation",
    "result changed": "calculation",
    "question number copied wrong": "misread",
    "wrong operation": "plan",
    "dropped step": "double_count_or_omission",
    "omission": "double_count_or_omission",
    **{label: kind for kind, label in KIND_LABELS.items()},
}


def canonical_kind(name: str | None) -> str | None:
    """The kind id of ``name`` (an id, a label or an older name; case and spaces ignored); None stays None.
    Raises ValueError for a name that is none of them."""
    if name is None:
        return None
    key = re.sub(r"\s+", " ", str(name).strip().lower())
    if key in KIND_LABELS:
        return key
    if key.replace(" ", "_") in KIND_LABELS:
        return key.replace(" ", "_")
    if key in ALIASES:
        return ALIASES[key]
    raise ValueError(f"unknown error kind {name!r}; use one of {', '.join(ERROR_KINDS)}")


def kind_label(name: str | None) -> str | None:
    """What a user reads for ``name`` (any name :func:`canonical_kind` accepts)."""
    kind = canonical_kind(name)
    return None if kind is None else KIND_LABELS[kind]


# Keyword rules for annotations that give the error's reason in words but no kind (the external annotated sets,
# see grade/datasets/real_step_errors/README.md): the first rule whose pattern the reason matches wins.
_REASON_RULES = (
    ("misread", r"理解错误|理解|审题|看错|题意|misunderst|misread|misinterpret|mistak\w* the (question|problem)|question (says|states|asks|stated)"
                r"|not what the (question|problem)|wrong(ly)? (read|copied)|incorrectly (read|copied)|the problem (says|states)"),
    ("units", r"单位|换算|\bunits?\b|conver(t|sion)|\bper (hour|minute|day)\b.*\binstead\b"),
    ("double_count_or_omission", r"忘|遗漏|漏|重复|多算|少算|\bforg[eo]t|omit|ignor|neglect|did ?n[o']t (consider|account|include|take)|missing"
                                 r"|double[- ]count|counted twice|twice|left out|overlook|fail\w* to (consider|account|include)"),
    ("calculation", r"计算|算错|calculat\w* (error|mistake)|computation\w*|arithmetic|miscalculat|incorrect(ly)? calculat"
                    r"|wrong(ly)? calculat|calculated incorrectly|calculation is (wrong|incorrect)|result (is|was) wrong"
                    r"|should be \$?-?\d|equals? \$?-?\d+ not|is not equal to"),
    ("algebra", r"equation|simplif|\bsolv|derivative|integra|expand|factor|\bsign\b|inequalit|substitut"),
    ("final_answer", r"final answer|the answer (should|is)|choice|option"),
    ("plan", r"逻辑|思路|方法|公式|错误|no need|nowhere|should not|shouldn't|instead of|approach|formula|method|assum|logic|reason|should (use|be|have)|relation|concept|interpret|wrong|incorrect"),
)


def kind_from_reason(reason: str, *, math: bool = False) -> str:
    """A kind for an annotator's written reason, by the keyword rules above (``algebra`` only where ``math``)."""
    text = str(reason or "").lower()
    for kind, pattern in _REASON_RULES:
        if kind == "algebra" and not math:
            continue
        if re.search(pattern, text):
            return kind
    return "other"
