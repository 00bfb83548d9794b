"""How one answer is decoded (:class:`DecodeSettings`) and where its text ends (stop strings): what every
generation backend shares, the transformers loop (:mod:`grade.models.generation`) and llama.cpp
(:mod:`grade.models.backends`) alike."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from ..common.errors import InputError


@dataclass(frozen=True)
class DecodeSettings:
    """How one answer is decoded.

    ``temperature`` 0 is greedy decoding (argmax); above 0 every row samples from its own seeded
    stream. ``top_k`` None keeps the whole vocabulary for top-p. ``stop_strings``: an answer ends once
    its text holds one of them after some content (a leading newline is not a stop).
    """

    max_new_tokens: int
    temperature: float = 0.0
    top_p: float = 1.0
    top_k: int | None = None
    stop_strings: tuple[str, ...] = ()

    def __post_init__(self):
        if self.max_new_tokens < 1:
            raise InputError("max_new_tokens must be at least 1")
        if self.temperature < 0:
            raise InputError("the temperature cannot be negative (0 is greedy decoding)")
        if not 0 < self.top_p <= 1:
            raise InputError("top_p must be in (0, 1]")
        if self.top_k is not None and self.top_k < 1:
            raise InputError("top_k must be at least 1")

    @property
    def greedy(self) -> bool:
        return self.temperature == 0


def cut_at_stop(text: str, stops: Sequence[str]) -> tuple[str, bool]:
    """Text up to the first stop string that follows some content (a leading newline is not a stop),
    and whether one was found."""
    lead = len(text) - len(text.lstrip())
    cut = min((i for s in stops if (i := text.find(s, lead)) >= 0), default=-1)
    return (text[:cut], True) if cut >= 0 else (text, False)


def hits_stop(text: str, stops: Sequence[str]) -> bool:
    return bool(stops) and cut_at_stop(text, stops)[1]
