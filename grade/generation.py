"""Text generation helpers (greedy answers for analysis)."""

from __future__ import annotations

import torch

from .errors import InputError
from .models import LoadedModel


def greedy_response(lm: LoadedModel, prompt_ids: list[int], max_new_tokens: int = 64) -> list[int]:
    """Token ids of the model's greedy answer, without the end-of-turn token.

    At most ``max_new_tokens`` and never more than the model's context leaves after the prompt."""
    room = lm.max_context - len(prompt_ids)
    if max_new_tokens < 1 or room < 1:
        raise InputError(f"no room for an answer: {max_new_tokens} new tokens asked for, the prompt has "
                         f"{len(prompt_ids)} of the model's {lm.max_context} tokens")
    max_new_tokens = min(max_new_tokens, room)
    tokenizer = lm.tokenizer
    ids = torch.tensor([prompt_ids], device=lm.device)
    with lm.lock, torch.no_grad():
        out = lm.model.generate(
            ids,
            attention_mask=torch.ones_like(ids),
            max_new_tokens=max_new_tokens,
            do_sample=False,
            pad_token_id=tokenizer.pad_token_id,
        )
    new = out[0, ids.shape[1] :].tolist()
    stop = set(_stop_ids(lm))
    for i, token in enumerate(new):
        if token in stop:
            return new[:i]
    return new


def _stop_ids(lm: LoadedModel) -> list[int]:
    ids = []
    eos = lm.model.generation_config.eos_token_id
    ids += eos if isinstance(eos, list) else [eos] if eos is not None else []
    if lm.tokenizer.eos_token_id is not None:
        ids.append(lm.tokenizer.eos_token_id)
    return ids
