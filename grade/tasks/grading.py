"""Answer grading: is a model's reply the gold answer? One checker per answer kind, strict (the reference
pipeline) and lenient, with no notion of tasks or datasets (:mod:`grade.tasks.tasks` says which checker a task
uses: :func:`grade.tasks.tasks.is_correct`).

* short answers (TriviaQA, NQ-open, HotpotQA, the sample facts): SQuAD normalisation, alias match;
* multiple choice (MMLU): the answer letter;
* GSM8K: the final number;
* MATH: the last ``\\boxed{}`` answer, compared as LaTeX normalised to sympy.
"""

from __future__ import annotations

import math
import re
import string
import unicodedata

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


#: "The answer is 15", "the final answer is: $\\boxed{15}$": the number a reply states as its answer.
_STATED_NUMBER = re.compile(r"answer is:?\s*\$?(?:\\\(|\\\[)?\s*(?:\\boxed\{)?\s*\$?\s*(-?\d[\d,]*(?:\.\d+)?|-?\.\d+)", re.I)


def gsm8k_final_number(reply: str) -> float | None:
    """Reference extraction: the number after ``####``; else the one number of the last ``\\boxed{}``; else the
    number of the last "answer is ..." statement; else the longest number on the last non-empty line; else the
    longest number anywhere. Commas are dropped; ``None`` if there is no number.

    The boxed and stated answers come before the longest-number rule because bigger models end with a sentence
    that holds several numbers ("30 - 15 = 15 more days. The answer is 15.")."""
    if "####" in reply:
        found = _numbers(reply.split("####", 1)[1])
        if found:
            return _to_number(found[0])
    boxed = _numbers(last_boxed(reply) or "")
    if len(boxed) == 1:
        return _to_number(boxed[0])
    stated = [_to_number(m.group(1)) for m in _STATED_NUMBER.finditer(reply)]
    if stated and stated[-1] is not None:
        return stated[-1]
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
