"""Model-free checks of a reasoning trace's steps: arithmetic and provenance.

* **arithmetic**: every ``expression = value`` (chains ``a = b = c`` pair by pair) is re-evaluated
  exactly with sympy; the stated value must match to the precision it is written with (``10/3 = 3.33``
  passes, ``14 + 7 = 22`` does not). LaTeX (``\\frac``, ``\\times``, ``\\(...\\)``), currency signs,
  thousands separators, percentages and unit words between a number and its operator (``5 hours *
  60 = 300``) are tolerated.
* **provenance**: every number a step *uses* (everything but the stated results of its equations) must
  come from somewhere: the question (digits or number words such as "twice", "a dozen"), an earlier
  step, earlier in the same step, or a short list of everyday constants (:data:`CONSTANTS`). A number
  with no source is a misread or invented quantity.

:func:`check_steps` returns the findings of each step; the first step with a finding is where a
trace most plausibly goes wrong first (:mod:`grade.steps.locate` ranks steps with it). The checks read only
text: they know nothing of the model and cost microseconds.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from fractions import Fraction
from typing import Sequence

#: Numbers a step may use without a source: units of time and counting that word problems leave unsaid.
CONSTANTS = frozenset({0, 1, 2, 100, Fraction(1, 2)})
FINDING_KINDS = ("arithmetic", "provenance")

_NUMBER_WORDS = {
    "zero": 0, "one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6, "seven": 7, "eight": 8, "nine": 9,
    "ten": 10, "eleven": 11, "twelve": 12, "thirteen": 13, "fourteen": 14, "fifteen": 15, "sixteen": 16,
    "seventeen": 17, "eighteen": 18, "nineteen": 19, "twenty": 20, "thirty": 30, "forty": 40, "fifty": 50,
    "sixty": 60, "seventy": 70, "eighty": 80, "ninety": 90, "hundred": 100, "thousand": 1000, "million": 1000000,
    "twice": 2, "double": 2, "doubles": 2, "doubled": 2, "half": 2, "halves": 2, "triple": 3, "tripled": 3,
    "thrice": 3, "third": 3, "thirds": 3, "quarter": 4, "quarters": 4, "fourth": 4, "fifth": 5, "sixth": 6,
    "seventh": 7, "eighth": 8, "ninth": 9, "tenth": 10, "dozen": 12, "dozens": 12, "score": 20, "pair": 2,
    "pairs": 2, "couple": 2, "week": 7, "weeks": 7, "hour": 60, "hours": 60, "minute": 60, "minutes": 60,
    "day": 24, "days": 24, "year": (12, 52, 365), "years": (12, 52, 365), "month": 30, "months": 30, "percent": 100,
    "quadruple": 4, "weekly": 7, "daily": 24, "hourly": 60, "cents": 100, "cent": 100, "dollar": 100,
    "dollars": 100, "feet": 12, "foot": 12, "yard": 3, "yards": 3, "inches": 12, "meter": 100, "meters": 100,
    "kilometer": 1000, "kilometers": 1000, "kg": 1000, "pound": 16, "pounds": 16, "gallon": 4, "gallons": 4,
    "quart": 4, "quarts": 4, "decade": 10, "decades": 10, "century": 100,
}


@dataclass(frozen=True)
class Finding:
    """One thing a check found wrong in a step.

    ``kind`` is ``arithmetic`` or ``provenance``; ``text`` the expression or number as written (after
    normalisation); ``detail`` a sentence an analyst reads (``"14 + 7 = 21, not 22"``).
    """

    kind: str
    text: str
    detail: str

    def to_dict(self) -> dict:
        return {"kind": self.kind, "text": self.text, "detail": self.detail}


# ------------------------------------------------------------------------------------------------
# normalisation: LaTeX and prose -> plain arithmetic tokens

_FRAC = re.compile(r"\\[dt]?frac\s*\{([^{}]*)\}\s*\{([^{}]*)\}")
_FRAC_DIGITS = re.compile(r"\\[dt]?frac\s*(\d)\s*(\d)")  # \frac23
_TEXT = re.compile(r"\\(?:text|textbf|mathrm|mbox|operatorname)\s*\{([^{}]*)\}")
_BOXED = re.compile(r"\\boxed\s*\{([^{}]*)\}")
_THOUSANDS = re.compile(r"(?<=\d),(?=\d{3}(?!\d))")
_TIMES_X = re.compile(r"(?<=[\d)%])\s*[xX×]\s*(?=[\d($.])")
_BARE_DECIMAL = re.compile(r"(?<![\d.])\.(?=\d)")
_CLOCK = re.compile(r"\b\d{1,2}:\d{2}\b")
_IMPLICIT_TIMES = re.compile(r"(?<=\d)\s*(?=\()")
_REPLACEMENTS = (
    ("\\times", " * "), ("\\cdot", " * "), ("\\div", " / "), ("×", " * "), ("·", " * "), ("÷", " / "),
    ("−", "-"), ("–", "-"), ("\\left", ""), ("\\right", ""), ("\\%", "%"), ("\\$", "$"), ("\\,", ""),
    ("\\;", " "), ("\\!", ""), ("\\approx", " ≈ "), ("\\neq", " ≠ "), ("\\(", " "), ("\\)", " "),
    ("\\[", " "), ("\\]", " "), ("\\quad", " "), ("**", " "), ("`", " "), ("\\sqrt", " sqrt"),
)


def normalise(text: str) -> str:
    """Plain arithmetic from a step's prose and LaTeX: ``\\frac{3}{4} \\times 40,000`` -> ``(3)/(4) * 40000``."""
    for _ in range(4):  # nested \frac and \text, innermost first
        new = _BOXED.sub(r" \1 ", _TEXT.sub(r" \1 ", _FRAC.sub(r"((\1)/(\2))", _FRAC_DIGITS.sub(r"((\1)/(\2))", text))))
        if new == text:
            break
        text = new
    for old, new in _REPLACEMENTS:
        text = text.replace(old, new)
    text = text.replace("{", "(").replace("}", ")").replace("$", " ")
    text = _CLOCK.sub(" clock ", _THOUSANDS.sub("", text))  # 7:50 is a time of day, not arithmetic
    return _IMPLICIT_TIMES.sub(" * ", _TIMES_X.sub(" * ", _BARE_DECIMAL.sub("0.", text)))


# A number (with a decimal part and an optional percent sign), an operator, an (in)equality sign, a
# word, or anything else. Signs are operators; the parser puts unary minus back.
_TOKEN = re.compile(r"(?P<num>\d+(?:\.\d+)?%?)|(?P<op>[-+*/^()])|(?P<eq>=|≈|\bequals\b)|(?P<word>[A-Za-z][A-Za-z'’]*)|(?P<other>\S)")
_ARITHMETIC_WORDS = {"of": "*", "times": "*", "x": "*", "plus": "+", "minus": "-"}
#: Short words that are units, not variables ("5 m", "20kg"); any other word of one or two letters is a variable.
_SHORT_UNITS = {"kg", "km", "cm", "mm", "ml", "lb", "oz", "ft", "in", "hr", "mi", "yd", "am", "pm", "st", "nd", "rd",
                "th", "of", "to", "at", "on", "by", "is", "an", "a", "as", "or"}


def _variable(token: "_Token") -> bool:
    """A one-letter word, or a two-letter one glued to what comes before (``2xy``), that is not a unit."""
    if token.kind != "word" or token.text.lower() in _SHORT_UNITS:
        return False
    return len(token.text) == 1 or (len(token.text) == 2 and token.glued)
_MAX_UNIT_WORDS = 3


@dataclass
class _Token:
    kind: str  # num, op, eq, word, other, newline
    text: str
    glued: bool = False  # no space before it: "2xy" (a variable after a number), not "2 xy"


def _tokens(text: str) -> list[_Token]:
    out = []
    for line_no, line in enumerate(text.split("\n")):
        if line_no:
            out.append(_Token("newline", "\n"))
        end = None
        for m in _TOKEN.finditer(line):
            out.append(_Token(m.lastgroup, m.group(), glued=end == m.start()))
            end = m.end()
    return out


def _number(text: str) -> Fraction:
    if text.endswith("%"):
        return Fraction(text[:-1]) / 100
    return Fraction(text)


def _decimals(text: str) -> int:
    text = text.rstrip("%")
    return len(text.split(".", 1)[1]) if "." in text else 0


@dataclass
class _Expr:
    tokens: list[_Token]  # numbers and operators only (unit words dropped)
    complete: bool = True  # False where a variable or word cut it (``16 + x``): its value is not the whole side

    @property
    def has_operator(self) -> bool:
        return any(t.kind == "op" and t.text not in "()" for t in self.tokens[1:])

    def source(self) -> str:
        return " ".join(t.text for t in self.tokens)


def _parse_value(tokens: list[_Token]) -> Fraction | None:
    """Exact value of an arithmetic token run, or None where it is not one well-formed expression."""
    import sympy

    parts = []
    for t in tokens:
        if t.kind == "num":
            value = _number(t.text)
            parts.append(f"({value.numerator}/{value.denominator})" if value.denominator != 1 else str(value.numerator))
        elif t.text == "^":
            parts.append("**")
        else:
            parts.append(t.text)
    source = " ".join(parts)
    if "**" in source:  # a power tower could take forever to evaluate exactly
        exponents = re.findall(r"\*\*\s*\(?(\d+)", source)
        if any(int(e) > 64 for e in exponents):
            return None
    try:
        value = sympy.sympify(source, rational=True, evaluate=True)
    except Exception:  # sympy raises many kinds for malformed input: any of them means "not an expression"
        return None
    if not getattr(value, "is_Rational", False):
        return None
    return Fraction(int(value.p), int(value.q))


def _is_binary(t: _Token) -> bool:
    return t.kind == "op" and t.text not in "()"


def _arithmetic_word(tokens: list[_Token], j: int) -> bool:
    """``times``, ``x``, ``plus`` or ``minus`` between a number and the next number."""
    return (tokens[j].kind == "word" and tokens[j].text.lower() in _ARITHMETIC_WORDS and tokens[j].text.lower() != "of"
            and j + 1 < len(tokens) and tokens[j + 1].kind == "num")


def _read_expr(tokens: list[_Token], j: int, after_word: bool = False) -> tuple[_Expr | None, int]:
    """The arithmetic expression starting at tokens[j] and the index after it: numbers, operators,
    parentheses, ``of`` after a percentage, ``times`` between numbers, and unit words after a number
    (at most :data:`_MAX_UNIT_WORDS`, with rates such as ``pups/mouse``) when an operator or ``=`` follows."""
    n = len(tokens)
    out: list[_Token] = []
    depth = 0
    # "+ 5" or "- 3" right after a word continues an expression of words ("... Mike has - 3"): not its whole value
    complete = not (j < n and _is_binary(tokens[j]) and (tokens[j].text != "-" or after_word))
    while j < n:
        t = tokens[j]
        if t.kind == "num" or _is_binary(t):
            out.append(t)
        elif t.text == "(":
            depth += 1
            out.append(t)
        elif t.text == ")":
            if depth == 0:
                break
            depth -= 1
            out.append(t)
        elif t.kind == "word" and len(out) > 1 and out[-1].text == "/" and out[-2].kind == "num":
            out.pop()  # $900/day: a rate's unit, not a division by a variable
            continue
        elif _variable(t) and not _arithmetic_word(tokens, j):
            complete = False  # 9m - 7, 5x + 2, 2xy: a variable, not a unit
            break
        elif t.kind == "word" and out and out[-1].kind == "num":
            word = t.text.lower()
            if (word == "of" and out[-1].text.endswith("%")) or _arithmetic_word(tokens, j):
                out.append(_Token("op", _ARITHMETIC_WORDS[word]))
                j += 1
                continue
            k, words = j, 0
            while k < n and words < _MAX_UNIT_WORDS and tokens[k].kind == "word" and not _arithmetic_word(tokens, k):
                if _variable(tokens[k]):  # "0 or n^2 - 4": the words lead into algebra, not a unit
                    complete = False
                    break
                k, words = k + 1, words + 1
                if k + 1 < n and tokens[k].text == "/" and tokens[k + 1].kind == "word":  # a rate: 6 pups/mouse
                    k += 1
            if complete and k < n and (tokens[k].kind == "eq" or _is_binary(tokens[k]) or (k > j and _arithmetic_word(tokens, k))):
                j = k
                continue
            break
        else:
            if t.kind == "word" and out and _is_binary(out[-1]):
                complete = False  # 16 + x: a variable, so the numbers alone are not the side's value
            break
        j += 1
    while out and _is_binary(out[-1]):
        out.pop()
    while depth > 0 and out and out[0].text == "(":  # an opening parenthesis of the prose around it
        out.pop(0)
        depth -= 1
    if not any(t.kind == "num" for t in out):
        return None, j
    return _Expr(out, complete), j


def _expressions(tokens: list[_Token]) -> list[tuple[list[_Expr], list[str]]]:
    """Chains of arithmetic expressions joined by ``=`` / ``≈``: [(expressions, the signs between)]."""
    chains: list[tuple[list[_Expr], list[str]]] = []
    current: list[_Expr] = []
    signs: list[str] = []

    def close() -> None:
        if len(current) > 1:
            chains.append((list(current), list(signs)))
        current.clear()
        signs.clear()

    i, n = 0, len(tokens)
    while i < n:
        t = tokens[i]
        if t.kind == "eq" and current:
            expr, j = _read_expr(tokens, i + 1)
            if expr is None:
                close()
                i += 1
                continue
            signs.append(t.text)
            current.append(expr)
            i = j
        elif t.kind in ("num", "op"):
            close()
            after_word = i > 0 and tokens[i - 1].kind in ("word", "other")
            expr, j = _read_expr(tokens, i, after_word=after_word)
            if expr is not None and t.text == "(" and t.glued and tokens[i - 1].kind == "word":
                expr.complete = False  # f(3), sqrt(144): a function's argument, not the side's value
            if expr is not None:
                current.append(expr)
            i = max(j, i + 1)
        else:
            close()
            i += 1
    close()
    return chains


def _matches(value: Fraction, stated: _Expr, approximate: bool) -> bool:
    """Whether ``stated`` (a number as written, or an expression) equals ``value`` to its written precision
    (``100 - 53 = 47%`` holds: a percentage may state the count of a hundred)."""
    if len(stated.tokens) == 1 and stated.tokens[0].text.endswith("%"):
        plain = _Expr([_Token("num", stated.tokens[0].text[:-1])])
        if _matches(value, plain, approximate):
            return True
    target = _parse_value(stated.tokens)
    if target is None:
        return True  # nothing to compare
    if len(stated.tokens) == 1:  # a plain number: its decimals say how precise it is
        tolerance = Fraction(1, 2 * 10 ** _decimals(stated.tokens[0].text))
        if stated.tokens[0].text.endswith("%"):
            tolerance /= 100
    else:
        tolerance = Fraction(0)
    if approximate:
        tolerance = max(tolerance, abs(value) / 100)
    slack = max(abs(value), Fraction(1)) * Fraction(1, 10**9)
    return abs(value - target) <= tolerance + slack


# ------------------------------------------------------------------------------------------------
# provenance

_LIST_MARKER = re.compile(r"^\s*(?:[-*•]\s+)?(?:\(?\d{1,2}[.)]\s|step\s+\d{1,2}\s*[:.)]\s)?", re.IGNORECASE | re.MULTILINE)
_NUMBER_IN_TEXT = re.compile(r"\d+(?:\.\d+)?")
_FRACTION_IN_TEXT = re.compile(r"(\d+)\s*/\s*(\d+)")


def known_numbers(text: str) -> set[Fraction]:
    """Every quantity ``text`` states: its numbers (percentages also as fractions), number words, and the
    value of each written fraction ``a/b``."""
    plain = normalise(text)
    found: set[Fraction] = set()
    for m in _NUMBER_IN_TEXT.finditer(plain):
        value = Fraction(m.group())
        found.add(value)
        found.add(value / 100)
    for m in _FRACTION_IN_TEXT.finditer(plain):
        if int(m.group(2)):
            found.add(Fraction(int(m.group(1)), int(m.group(2))))
    for tens, units in re.findall(r"\b(twenty|thirty|forty|fifty|sixty|seventy|eighty|ninety)[- ](one|two|three|four|"
                                  r"five|six|seven|eight|nine)\b", plain.lower()):
        found.add(Fraction(_NUMBER_WORDS[tens] + _NUMBER_WORDS[units]))
    for word in re.findall(r"[a-z]+", plain.lower()):
        values = _NUMBER_WORDS.get(word, ())
        for value in values if isinstance(values, tuple) else (values,):
            value = Fraction(value)
            found.update((value, 1 / value) if value else (value,))  # "a third": 3 and 1/3
    return found


def _explained(value: Fraction, known: set[Fraction]) -> bool:
    if value in known or value in CONSTANTS:
        return True
    # the same quantity in other units of ten (cents and dollars, percent and fraction)
    return any(value * k in known or value / k in known for k in (100, 1000))


# ------------------------------------------------------------------------------------------------
# the checks


def check_step(step: str, known: set[Fraction]) -> list[Finding]:
    """Findings of one step, given the quantities known before it (updated in place with the step's)."""
    findings: list[Finding] = []
    text = _LIST_MARKER.sub(" ", step)
    tokens = _tokens(normalise(text))
    results: set[Fraction] = set()  # the values the step states as results: they need no source
    for exprs, signs in _expressions(tokens):
        left = None  # the nearest computing side before: "12 + 18 = 30 = 31" checks 31 against 12 + 18 too
        for previous, right, sign in zip(exprs, exprs[1:], signs):
            if previous.has_operator and previous.complete:
                left = previous
            # the left side must compute something: "4 dozen = 4 * 12" defines, it does not calculate
            if left is None or not right.complete:
                continue
            value = _parse_value(left.tokens)
            if value is None:
                continue
            if len(right.tokens) == 1:
                results.add(_number(right.tokens[0].text))
            if not _matches(value, right, sign == "≈"):
                findings.append(Finding("arithmetic", f"{left.source()} {sign} {right.source()}",
                                        f"{left.source()} = {_format(value)}, not {right.source()}"))
    for t in tokens:
        if t.kind != "num":
            continue
        value = _number(t.text)
        forms = (value, value * 100) if t.text.endswith("%") else (value,)  # 60% is the 60 of "100 - 40 = 60"
        if not any(v in results or _explained(v, known) for v in forms):
            findings.append(Finding("provenance", t.text, f"{t.text} is not in the question or an earlier step"))
        known.update(forms)
    known |= known_numbers(text)
    return findings


def check_steps(question: str, steps: Sequence[str]) -> list[list[Finding]]:
    """Findings per step (same length as ``steps``). A step's numbers are known to the steps after it."""
    known = known_numbers(question)
    return [check_step(step, known) for step in steps]


def _format(value: Fraction) -> str:
    if value.denominator == 1:
        return str(value.numerator)
    as_float = float(value)
    return f"{as_float:.6g}" if math.isfinite(as_float) else str(value)
