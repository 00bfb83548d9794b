"""How many items a batched model pass takes at once: the one rule every batched command asks
(:func:`batch_size`), from the device's free memory and the model's shape, with the user's ``--batch-size``
over it.

What a row of a batch holds, per token (:func:`bytes_per_token`), by the kind of pass:

* ``generate``: its key/value cache, ``2 x layers x key/value heads x head width`` values, and the logits of
  one step (``vocab`` float32 values a row, counted once per row, not per token);
* ``forward``: a pass without gradients that keeps every layer's hidden states (the detectors' pass over prompt
  and answer: ``(layers + 1) x d_model``), its key/value cache and the logits of the positions it reads;
* ``grade``: a GRADE pass, forward with the MLP capture and an activation-only backward: per layer the MLP
  input h (``d_ff``) and output (``d_model``) kept by the capture, their gradient Δ, and what autograd saves to
  get there (attention and MLP inputs, gate and up projections: about ``4 d_model + 3 d_ff``).

A batch takes :data:`MEMORY_SHARE` of the free memory at most. On a CPU the memory is seldom the limit:
arithmetic is, and padding and uneven answer lengths cost more than a large batch saves there, so a CPU batch
is capped at :data:`CPU_MAX_BATCH` rows (a question with ten samples is ten rows).
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from ..common.errors import InputError

#: share of the free device memory a batch may fill (the rest: the allocator's slack, other buffers)
MEMORY_SHARE = 0.6
#: most rows a batch holds on a CPU, where arithmetic and not memory bounds a batch (see the module docstring)
CPU_MAX_BATCH = 8
#: most rows a batch holds anywhere: beyond it a GPU gains little and a lost batch costs much
MAX_BATCH = 512
KINDS = ("generate", "forward", "grade")


@dataclass(frozen=True)
class ModelShape:
    """What a batch's memory depends on, read off a model's config."""

    layers: int
    d_model: int
    d_ff: int
    kv_heads: int
    head_dim: int
    vocab: int
    dtype_bytes: int

    @classmethod
    def of(cls, lm) -> "ModelShape":
        config = lm.model.config
        config = getattr(config, "get_text_config", lambda: config)()
        d_model = int(getattr(config, "hidden_size", None) or getattr(config, "n_embd", 0) or 0)
        heads = int(getattr(config, "num_attention_heads", None) or getattr(config, "n_head", 1) or 1)
        kv_heads = int(getattr(config, "num_key_value_heads", None) or heads)
        head_dim = int(getattr(config, "head_dim", None) or (d_model // heads if heads else d_model))
        d_ff = int(getattr(config, "intermediate_size", None) or getattr(config, "ffn_dim", None)
                   or getattr(config, "n_inner", None) or 4 * d_model)
        vocab = int(getattr(config, "vocab_size", 0) or 0)
        dtype_bytes = int(getattr(lm, "dtype", None).itemsize if hasattr(getattr(lm, "dtype", None), "itemsize") else 4)
        return cls(int(lm.n_layers), d_model, d_ff, kv_heads, head_dim, vocab, dtype_bytes)


def bytes_per_token(shape: ModelShape, kind: str) -> int:
    """Bytes one token of one row holds during a pass of ``kind`` (see the module docstring)."""
    b, L = shape.dtype_bytes, shape.layers
    kv = 2 * L * shape.kv_heads * shape.head_dim * b
    if kind == "generate":
        return kv
    if kind == "forward":
        return kv + (L + 1) * shape.d_model * 4  # hidden states are read in float32
    if kind == "grade":
        return kv + L * (3 * shape.d_model + shape.d_ff + 4 * shape.d_model + 3 * shape.d_ff) * b
    raise InputError(f"unknown kind of pass {kind!r}; use {', '.join(KINDS)}")


def free_memory_bytes(device) -> int:
    """Free memory of ``device``: the GPU's free memory (CUDA), else the host's available memory."""
    import torch

    device = torch.device(device)
    if device.type == "cuda":
        free, _ = torch.cuda.mem_get_info(device)
        # the caching allocator keeps the blocks an earlier pass freed: the device counts them as used, this
        # process can reuse them (without this a second batch after a large one was sized as if it had ~nothing)
        cached = torch.cuda.memory_reserved(device) - torch.cuda.memory_allocated(device)
        return int(free + max(0, cached))
    try:
        with open("/proc/meminfo", encoding="ascii") as handle:
            for line in handle:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return int(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_AVPHYS_PAGES"))


def batch_size(lm, *, tokens: int, kind: str, rows_per_item: int = 1, logits_per_row: int = 1,
               override: int | None = None, free_bytes: int | None = None) -> int:
    """Items per batch for a pass of ``kind`` over rows of up to ``tokens`` tokens (prompt and answer),
    ``rows_per_item`` rows an item (samples per question), each row reading ``logits_per_row`` positions of
    logits: ``override`` (``--batch-size``) where given, else as many as fill :data:`MEMORY_SHARE` of the
    free memory (``free_bytes``: that memory, read from the device when None), at least 1, at most
    :data:`MAX_BATCH` rows (:data:`CPU_MAX_BATCH` on a CPU)."""
    if override is not None:
        if override < 1:
            raise InputError("the batch size must be at least 1")
        return int(override)
    shape = ModelShape.of(lm)
    per_row = max(1, tokens) * bytes_per_token(shape, kind) + max(1, logits_per_row) * shape.vocab * 4 * 2
    per_item = per_row * max(1, rows_per_item)
    free = free_memory_bytes(lm.device) if free_bytes is None else free_bytes
    fits = int(MEMORY_SHARE * free // per_item)
    import torch

    rows = CPU_MAX_BATCH if torch.device(lm.device).type == "cpu" else MAX_BATCH
    return max(1, min(rows // max(1, rows_per_item), fits))


def batches(lm, lengths: list[int], *, kind: str, override: int | None = None, rows_per_item: int = 1,
            logits_per_row: int = 1) -> list[list[int]]:
    """Indices of items of ``lengths`` tokens in batches for passes of ``kind``: longest first (rows of like
    length share a batch, so little is padding), each batch as large as :func:`batch_size` allows for its longest
    item. The helper for any batched pass over many items (the GRADE passes, a verifier's reading)."""
    order = sorted(range(len(lengths)), key=lambda i: -lengths[i])
    out, start = [], 0
    while start < len(order):
        size = batch_size(lm, tokens=lengths[order[start]], kind=kind, override=override,
                          rows_per_item=rows_per_item, logits_per_row=logits_per_row)
        out.append(order[start:start + size])
        start += size
    return out
