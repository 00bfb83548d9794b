"""How much memory an analysis holds, and the routes chosen by it: step-wise ``pos`` in pieces of a gradient budget,
prefix passes or one pass over shared prefixes, the whole pass or layer by layer past a bound
(:func:`grade.gradients.analysis.analyze` decides with these; the studio's queue claims by
:func:`analysis_memory_bytes`)."""

from __future__ import annotations

import torch

from ..models.models import LoadedModel

#: Default bound (MB) on the per-step gradients step-wise ``pos`` holds at once (``analyze(step_memory_mb=...)``).
DEFAULT_STEP_MEMORY_MB = 256


def prefix_passes_are_cheaper(device: torch.device | str, ends: list[int], n_tokens: int) -> bool:
    """Whether step-wise ``pos`` should run one pass per prefix instead of sharing one forward pass.

    Sharing costs one forward over all N tokens plus K backward passes over N tokens (exact per-step Δ
    needs one vector-Jacobian product per step); per prefix costs a forward and a backward over each
    prefix e_k. Only where arithmetic is the limit (a CPU) does the token count decide: there a
    backward pass costs about twice a forward pass (measured on the embedded SmolLM2), so sharing
    costs ~N·(1 + 2K) and prefixes ~3·Σe_k. On a GPU the K backward passes are batched into one and the
    shared pass wins (bench/RESULTS.md, section 3).
    """
    if torch.device(device).type != "cpu":
        return False
    return n_tokens * (1 + 2 * len(ends)) > 3 * sum(ends)


def step_pieces(ends: list[int], bytes_per_token: int, budget_bytes: int | None) -> list[range]:
    """Consecutive groups of steps (indices into ``ends``) whose per-step gradients fit ``budget_bytes``.

    A group shares one forward pass over the prefix ending with its last step and holds Δ of each of its
    steps over that prefix at once: ``len(group) · ends[last] · bytes_per_token`` (``bytes_per_token``: one
    token's Δ over every layer). That product is what grew with steps x tokens x layers; each group is as
    long as it fits, and never shorter than one step. ``budget_bytes=None``: one group.
    """
    if budget_bytes is None:
        return [range(len(ends))] if ends else []
    groups, first = [], 0
    while first < len(ends):
        last = first + 1
        while last < len(ends) and (last + 1 - first) * ends[last] * bytes_per_token <= budget_bytes:
            last += 1
        groups.append(range(first, last))
        first = last
    return groups


def _delta_bytes_per_token(lm: LoadedModel) -> int:
    """Bytes of Δ for one token over every layer (the MLP output width times the layers, in the model's dtype)."""
    text_config = _text_config(lm)
    width = next(int(v) for v in (getattr(text_config, name, None) for name in ("hidden_size", "n_embd", "d_model"))
                 if v)
    return width * lm.n_layers * torch.finfo(lm.dtype).bits // 8


def _shape(lm: LoadedModel) -> tuple[int, int, int, int]:
    """(bytes of one token's d_model values in one layer, d_ff, vocabulary, bytes per element)."""
    text_config = _text_config(lm)
    width = _delta_bytes_per_token(lm) // lm.n_layers
    element = torch.finfo(lm.dtype).bits // 8
    d_ff = int(getattr(text_config, "intermediate_size", None) or getattr(text_config, "n_inner", None)
               or 4 * width // element)
    vocab = int(getattr(text_config, "vocab_size", 0) or len(lm.tokenizer))
    return width, d_ff, vocab, element


def _text_config(lm: LoadedModel):
    config = lm.model.config
    return getattr(config, "get_text_config", lambda: config)()


def _heads(lm: LoadedModel) -> tuple[int, int]:
    """(attention heads, key/value heads) of the text model (16 where the config does not say)."""
    text_config = _text_config(lm)
    heads = int(getattr(text_config, "num_attention_heads", 0) or 16)
    return heads, int(getattr(text_config, "num_key_value_heads", 0) or heads)


def analysis_memory_bytes(lm: LoadedModel, n_tokens: int, n_response: int = 0, n_steps: int = 0,
                          step_memory_mb: float | None = DEFAULT_STEP_MEMORY_MB, memory_mb: float | None = None,
                          layer_by_layer: bool | None = None) -> int:
    """A rough estimate of the memory one analysis holds at its peak beyond the model's weights: what a queue
    claims for it against an operator's budget (``studio.queue``). Counted per token: the activations a
    backward pass keeps (about 5 d_ff + 8 d_model values per layer for a gated MLP and attention), h of
    every layer, the logits of the response in three copies (float32), and Δ: one pass's, or under
    step-wise ``pos`` the largest step group that ``step_memory_mb`` allows (at least one step's).
    ``layer_by_layer`` (default: as :func:`analyze` with ``memory_mb`` chooses): the exact route computed
    layer by layer holds the layers' inputs and one layer's activations, h and float64 spectra instead.
    Checked against measured peaks in bench/RESULTS.md (sections 8 and 14), not exact."""
    width, d_ff, vocab, element = _shape(lm)
    logits = 3 * max(n_response, 1) * vocab * 4
    if layer_by_layer is None:
        layer_by_layer = n_steps <= 1 and layer_by_layer_fits_better(lm, n_tokens, n_response, memory_mb)
    if layer_by_layer:
        # Per token: the inputs of every layer (and the hidden states) with slack; one layer's activations,
        # its h and the lowest layer's; the float64 spectra of one layer (h, the QR's copies) and the
        # allocator's slack, 8 x d_ff float64 values, fitted to Qwen2.5-1.5B at the caps (bench/RESULTS.md
        # section 14). Per token pair: one layer's attention scores, probabilities and their gradients, and
        # the n x n float64 factors of the spectra.
        heads, _ = _heads(lm)
        held = n_tokens * ((lm.n_layers + 1) * 2 * width + 6 * d_ff * element + 8 * width + 2 * d_ff * element
                           + 8 * d_ff * 8) + n_tokens**2 * (4 * heads * 4 + 6 * 8)
        return held + logits
    activations = n_tokens * lm.n_layers * (6 * d_ff * element + 8 * width)
    deltas = n_tokens * _delta_bytes_per_token(lm)
    if n_steps > 1:
        held = n_steps * deltas
        deltas = held if step_memory_mb is None else max(deltas, min(held, int(step_memory_mb * 2**20)))
    return activations + logits + deltas


def layer_by_layer_fits_better(lm: LoadedModel, n_tokens: int, n_response: int, memory_mb: float | None) -> bool:
    """Whether an exact analysis of one loss runs layer by layer: where the whole pass would hold more than
    ``memory_mb`` (``None``: no bound, never)."""
    return memory_mb is not None and analysis_memory_bytes(
        lm, n_tokens, n_response, layer_by_layer=False) > memory_mb * 2**20


def generation_memory_bytes(lm: LoadedModel, n_prompt: int, n_new: int) -> int:
    """A rough estimate of the memory one generation holds beyond the weights (no gradients): the key/value cache
    of every layer over prompt and answer, the prefill's largest layer activations over the prompt (the gated
    MLP's 3 x d_ff and ~8 x d_model values per token, one layer at a time) and its attention scores, and the
    last position's logits (``generate`` keeps one position's; three float32 copies for the sampler)."""
    width, d_ff, vocab, element = _shape(lm)
    heads, kv_heads = _heads(lm)
    kv_width = width * kv_heads // heads  # bytes of one token's keys (or values) in one layer
    n_total = n_prompt + n_new
    cache = 2 * lm.n_layers * kv_width * n_total
    prefill = n_prompt * (3 * d_ff * element + 8 * width) + n_prompt**2 * heads * 4
    return cache + prefill + 3 * vocab * 4
