"""Where a reasoning trace is cut into steps, on the formats other models write, and which tokens each step owns.

The spaces between two steps stay with the step before (the annotation files number steps in these spans, and
dropping a step drops its own separator); a token belongs to the step of its first visible character
(``grade.gradients.losses.steps_for_response``), so that a word's glued leading space (" Each") does not put it into
the step before.
"""

from __future__ import annotations

import pytest

from grade.gradients.losses import split_steps, steps_for_response


def _texts(text: str) -> list[str]:
    return [text[a:b].strip() for a, b in split_steps(text)]


def _covers(text: str) -> None:
    spans = split_steps(text)
    assert spans[0][0] == 0 and spans[-1][1] == len(text)
    assert all(a[1] == b[0] for a, b in zip(spans, spans[1:]))  # no gap, no overlap


def test_a_sentence_break_keeps_the_space_with_the_sentence_before():
    text = "She pays 20 dollars after the reduction. Each week she saves 5 dollars."
    spans = split_steps(text)
    assert [text[a:b] for a, b in spans] == ["She pays 20 dollars after the reduction. ", "Each week she saves 5 dollars."]


def test_an_indented_bullet_is_a_step_of_its_own():
    text = "She has two kinds:\n  - 3 apples.\n  - 2 pears.\n\nSo 3 + 2 = 5."
    spans = split_steps(text)
    # the indentation after a full stop's line break stays with the step before, after a colon's with the next:
    # either way, the dash's token lands in its own step (below, with a tokenizer)
    assert [text[a:b].strip() for a, b in spans] == ["She has two kinds:", "- 3 apples.", "- 2 pears.", "So 3 + 2 = 5."]
    _covers(text)


@pytest.mark.parametrize("text, steps", [
    ("## Step 1: Count the pens\nTom has 3 boxes of 4 pens, so 3 * 4 = 12 pens.\n\n## Step 2: Give some away\n"
     "He gives away 5, so 12 - 5 = 7.\n\nThe answer is 7.",
     ["## Step 1: Count the pens", "Tom has 3 boxes of 4 pens, so 3 * 4 = 12 pens.", "## Step 2: Give some away",
      "He gives away 5, so 12 - 5 = 7.", "The answer is 7."]),
    ("1. **Count the pens:** 3 * 4 = 12.\n2. **Give some away:** 12 - 5 = 7.\n\n**Answer:** 7",
     ["1. **Count the pens:** 3 * 4 = 12.", "2. **Give some away:** 12 - 5 = 7.", "**Answer:** 7"]),
    ("Tom has 3 boxes of 4 pens. That makes 12 pens.\n\nHe gives away 5 of them. He keeps 7.",
     ["Tom has 3 boxes of 4 pens.", "That makes 12 pens.", "He gives away 5 of them.", "He keeps 7."]),
    ("The price is 3.5 dollars, so two cost\n\\[ 2 \\cdot 3.5 = 7.0 \\]\nThe answer is \\(\\boxed{7}\\).",
     ["The price is 3.5 dollars, so two cost", "\\[ 2 \\cdot 3.5 = 7.0 \\]", "The answer is \\(\\boxed{7}\\)."]),
    ("- Apples: 3.\n- Pears: 2.\nTotal: 5.", ["- Apples: 3.", "- Pears: 2.", "Total: 5."]),
])
def test_other_models_formats(text, steps):
    """"## Step k" headings, numbered bold items, plain paragraphs, a one-line LaTeX display, "-" bullets: one step
    per line or sentence, a list marker with the step it opens, a decimal point never a break."""
    assert _texts(text) == steps
    _covers(text)


def test_a_display_block_over_several_lines_is_cut_at_its_lines():
    """What a multi-line LaTeX display gives today: a step per line, its delimiters included. Kept so: the annotation
    files (grade/datasets/real_step_errors) number their first wrong step in these steps."""
    text = "So\n\\[\nx = 4\n\\]\nThe answer is 4."
    assert _texts(text) == ["So", "\\[", "x = 4", "\\]", "The answer is 4."]


@pytest.mark.slow
def test_each_token_is_in_the_step_of_its_word(smollm):
    """With SmolLM2's tokenizer (" Each", "\\n ", " -" are single tokens): no step ends with the next one's first word,
    and a bullet's dash is the first token of its own step; the steps' text is split_steps' own."""
    tok = smollm.tokenizer
    text = ("So the cost after the reduction. Each week she saves 5 dollars.\n  - She has 3 apples.\n"
            "  - She buys 2 more.\n\nSo 3 + 2 = 5.")
    ids = tok(text, add_special_tokens=False)["input_ids"]
    steps = steps_for_response(tok, ids, 0, text)
    words = [[tok.decode([i]) for i in ids[s.start:s.end]] for s in steps]
    assert [w[0].strip() for w in words] == ["So", "Each", "-", "-", "So"]
    assert all(w[-1].strip() in (".", "") for w in words)  # every step ends on its own full stop or a line break
    assert [s.text for s in steps] == [text[a:b] for a, b in split_steps(text)]
