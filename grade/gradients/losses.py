"""The three GRADE losses, computed from one forward pass's logits.

* ``pre``: entropy of the next-token distribution at the last prompt position (no answer needed).
* ``pos``: mean cross-entropy of the response tokens given the prompt.
* step-wise ``pos``: the response is cut into punctuation-delimited steps; step k's loss is the mean
  cross-entropy of step k's tokens only. With causal attention, the activations of the full sequence at
  positions up to the end of step k equal those of the prefix ending with step k, so one forward pass
  serves all K steps.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import torch
import torch.nn.functional as F

# A step ends after . ! ? or ; followed by whitespace (so "3.5" stays whole), or at a newline. Colons do not
# end a step: "Step 1: add the pens" is one step.
STEP_BOUNDARY = re.compile(r"(?<=[.!?;])\s+|\n+")
# A list marker ("1.", "b)", "iv.", "Step 2.") is not a step of its own: it opens the step that follows it.
LIST_MARKER = re.compile(r"(?:step\s*)?(?:\d{1,3}|[a-z]|[ivx]{1,4})[.)]", re.IGNORECASE)


def entropy_at_last_position(logits: torch.Tensor) -> torch.Tensor:
    """logits: (n, vocab) -> scalar entropy (nats) of softmax(logits[-1])."""
    log_p = F.log_softmax(logits[-1].float(), dim=-1)
    return -(log_p.exp() * log_p).sum()


def response_cross_entropy(logits: torch.Tensor, input_ids: torch.Tensor, start: int, end: int) -> torch.Tensor:
    """Mean CE of tokens ``input_ids[start:end]``, each predicted from the position before it.

    logits: (n, vocab), input_ids: (n,), 1 <= start < end <= n.
    """
    predicted = logits[start - 1 : end - 1].float()
    return F.cross_entropy(predicted, input_ids[start:end])


def token_surprisal(logits: torch.Tensor, input_ids: torch.Tensor, start: int, end: int) -> torch.Tensor:
    """Per-token CE (surprisal, nats) of ``input_ids[start:end]``, detached: (end - start,).

    The terms whose mean is :func:`response_cross_entropy`; the plain token-level signal that step-error
    locators are compared with.
    """
    with torch.no_grad():
        predicted = logits[start - 1 : end - 1].detach().float()
        return F.cross_entropy(predicted, input_ids[start:end], reduction="none")


@dataclass(frozen=True)
class Step:
    """A reasoning step: characters [char_start, char_end) of the response, tokens [start, end) of the sequence."""

    text: str
    char_start: int
    char_end: int
    start: int
    end: int


def split_steps(response: str) -> list[tuple[int, int]]:
    """Character spans of the punctuation-delimited steps of ``response`` (whitespace stays with the step before;
    a list marker stays with the step it opens)."""
    spans, start = [], 0
    for match in STEP_BOUNDARY.finditer(response):
        text = response[start : match.start()].strip()
        if text and not LIST_MARKER.fullmatch(text):
            spans.append((start, match.end()))
            start = match.end()
    if response[start:].strip():
        spans.append((start, len(response)))
    elif spans:
        spans[-1] = (spans[-1][0], len(response))
    return spans


def token_char_ends(tokenizer, token_ids: list[int]) -> list[int]:
    """For each response token, the length of the decoded text up to and including it."""
    ends, previous = [], 0
    for i in range(len(token_ids)):
        length = len(tokenizer.decode(token_ids[: i + 1], skip_special_tokens=False))
        previous = max(previous, length)
        ends.append(previous)
    return ends


def steps_for_response(tokenizer, response_ids: list[int], offset: int, response_text: str | None = None) -> list[Step]:
    """Cut a tokenised response into steps.

    ``offset`` is the sequence index of the first response token. A token belongs to the step in which its first
    visible character lies (a token of whitespace only: where it starts): most tokenizers glue a word's leading
    space to it (" Each", " -"), and that space ends the step before, so a token placed where it starts put the
    next sentence's first word, or a bullet's dash, into the step before. Every step gets at least one token
    (steps too short to own a token merge into the next).
    """
    text = tokenizer.decode(response_ids, skip_special_tokens=False) if response_text is None else response_text
    ends = token_char_ends(tokenizer, response_ids)
    starts = [0] + ends[:-1]
    anchors = [a + (len(text[a:b]) - len(text[a:b].lstrip()) if text[a:b].strip() else 0)
               for a, b in zip(starts, ends)]
    steps: list[Step] = []
    token = 0
    for char_start, char_end in split_steps(text):
        first = token
        while token < len(response_ids) and anchors[token] < char_end:
            token += 1
        if token > first:
            steps.append(Step(text[char_start:char_end], char_start, char_end, offset + first, offset + token))
    if token < len(response_ids):  # trailing special tokens (e.g. end of turn) join the last step
        if steps:
            last = steps[-1]
            steps[-1] = Step(last.text, last.char_start, last.char_end, last.start, offset + len(response_ids))
        else:
            steps.append(Step(text, 0, len(text), offset, offset + len(response_ids)))
    return steps
