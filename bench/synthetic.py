"""A real-shaped model with random weights and a word-level tokenizer, for machines without weights.

The GPU benchmark runs on a device with no network and no checkpoints: the model is built from a
config (Llama-3.1-8B's shape by default) with random weights, directly on the device and in bf16.
The tokenizer maps the words ``t0 .. t{V-4}``, ``.``, ``<unk>`` and ``<eos>`` one-to-one onto the
vocabulary, so a prompt of n words is exactly n tokens and ``grade.analyze`` runs unchanged.
"""

from __future__ import annotations

import torch

from grade.models.models import LoadedModel

LLAMA_31_8B = dict(
    hidden_size=4096,
    intermediate_size=14336,
    num_hidden_layers=32,
    num_attention_heads=32,
    num_key_value_heads=8,
    vocab_size=128256,
    max_position_embeddings=131072,
    rope_theta=500000.0,
    rms_norm_eps=1e-5,
)


def word_tokenizer(vocab_size: int):
    """A fast tokenizer whose every word is one token: ``t{i}`` -> i, then ``.``, ``<unk>``, ``<eos>``."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {f"t{i}": i for i in range(vocab_size - 3)}
    vocab.update({".": vocab_size - 3, "<unk>": vocab_size - 2, "<eos>": vocab_size - 1})
    tok = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tok.decoder = decoders.WordPiece(prefix="##", cleanup=False)  # joins words with single spaces
    return PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="<unk>", eos_token="<eos>")


def random_llama(device: str = "cuda", dtype: torch.dtype = torch.bfloat16, seed: int = 0, **overrides) -> LoadedModel:
    """A LlamaForCausalLM of Llama-3.1-8B's shape (or ``overrides``) with random weights, made on ``device``."""
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(**{**LLAMA_31_8B, **overrides}, attn_implementation="sdpa")
    torch.manual_seed(seed)
    previous = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        with torch.device(device):
            model = LlamaForCausalLM(config)
    finally:
        torch.set_default_dtype(previous)
    model.eval()
    for p in model.parameters():
        p.requires_grad_(False)
    name = "random-llama-" + ("3.1-8b-shape" if not overrides else "custom")
    return LoadedModel(name, model, word_tokenizer(config.vocab_size), torch.device(device), dtype)


def words(ids) -> str:
    """The text that :func:`word_tokenizer` turns back into ``ids`` (ids below vocab_size - 3)."""
    return " ".join(f"t{int(i)}" for i in ids)
