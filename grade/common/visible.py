"""The one rule for text that shows nothing: :func:`is_blank` is true when a text is empty once whitespace and the
invisible characters are removed (Unicode format characters such as U+200B ZERO WIDTH SPACE, U+FEFF, U+2060 and the
bidirectional marks; control characters; and the few letters that draw nothing, such as U+3164 HANGUL FILLER).
The CLI and :func:`grade.gradients.analysis.analyze` (:func:`validate_question`), the readers of labelled rows and
the app (:func:`studio.workflows.check_inputs`) all ask it, so a question of spaces and U+200B is refused everywhere
alike.
"""

from __future__ import annotations

import unicodedata

from .errors import InputError

#: Letters and symbols (not of a format category) that render as blank space.
BLANK_LETTERS = frozenset("\u115f\u1160\u3164\uffa0\u2800\u180e")


def is_invisible(char: str) -> bool:
    """Whether one character shows nothing: whitespace, a control or format character, or a blank letter."""
    return char.isspace() or char in BLANK_LETTERS or unicodedata.category(char) in ("Cc", "Cf", "Zs", "Zl", "Zp")


def is_blank(text) -> bool:
    """Whether ``text`` is None, not a string, or empty after removing every invisible character."""
    return not isinstance(text, str) or all(is_invisible(char) for char in text)


def validate_question(question: str, max_chars: int = 20000) -> str:
    """``question`` stripped, or :class:`InputError` if it shows nothing or is longer than ``max_chars``."""
    if is_blank(question):  # also a question of spaces and zero-width characters only
        raise InputError("the question is empty (nothing visible once spaces and invisible characters are removed)")
    if len(question) > max_chars:
        raise InputError(f"the question is {len(question)} characters long; the limit is {max_chars}")
    return question.strip()
