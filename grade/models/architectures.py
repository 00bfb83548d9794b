"""Where the MLP lives, per architecture.

GRADE needs, in every decoder layer, the MLP's down projection ``W``: its input is the intermediate
activation ``h`` (n x d_ff) and its output is the MLP output ``o`` (n x d_model). This table is the only
place in the package that knows model internals; add a row to support a new family. The tokens that
end a generated answer (:func:`end_of_answer_ids`) are model knowledge too and live here.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ..common.errors import UnsupportedArchitectureError


@dataclass(frozen=True)
class MLPLayout:
    """Dotted attribute paths, relative to the model object."""

    layers: tuple[str, ...]  # candidate paths to the list of decoder layers, first match wins
    down_proj: str  # path from one decoder layer to the down projection module
    note: str = ""


_LLAMA_LIKE = MLPLayout(
    layers=("model.layers", "model.language_model.layers", "language_model.model.layers"),
    down_proj="mlp.down_proj",
)

#: ``config.model_type`` -> layout.
ARCHITECTURES: dict[str, MLPLayout] = {
    "llama": _LLAMA_LIKE,
    "mistral": _LLAMA_LIKE,
    "qwen2": _LLAMA_LIKE,
    "qwen3": _LLAMA_LIKE,
    "gemma": _LLAMA_LIKE,
    "gemma2": _LLAMA_LIKE,
    "gemma3": _LLAMA_LIKE,
    "gemma3_text": _LLAMA_LIKE,
    "phi3": MLPLayout(("model.layers",), "mlp.down_proj", "gate and up projections are fused (gate_up_proj)"),
    "gpt2": MLPLayout(("transformer.h",), "mlp.c_proj", "Conv1D: weight is stored transposed"),
    "gpt_neox": MLPLayout(("gpt_neox.layers",), "mlp.dense_4h_to_h"),
    "opt": MLPLayout(("model.decoder.layers",), "fc2", "the MLP is not a submodule: fc1/fc2 sit on the layer"),
}


#: End-of-turn tokens of chat templates (ChatML, Gemma, Llama 3). In a chat, an answer ends there even
#: where the generation config names only the end-of-text token.
END_OF_TURN_TOKENS: tuple[str, ...] = ("<|im_end|>", "<end_of_turn>", "<|eot_id|>")


def end_of_answer_ids(model: torch.nn.Module, tokenizer) -> set[int]:
    """Tokens that end a generated answer: the generation config's EOS ids, the tokenizer's EOS and,
    for a tokenizer with a chat template, the end-of-turn tokens it knows."""
    ids: set[int] = set()
    config = getattr(model, "generation_config", None)
    eos = getattr(config, "eos_token_id", None)
    ids.update(eos if isinstance(eos, list) else [eos] if eos is not None else [])
    if getattr(tokenizer, "eos_token_id", None) is not None:
        ids.add(tokenizer.eos_token_id)
    if getattr(tokenizer, "chat_template", None):
        for token in END_OF_TURN_TOKENS:
            tid = tokenizer.convert_tokens_to_ids(token)
            if isinstance(tid, int) and tid != tokenizer.unk_token_id:
                ids.add(tid)
    return ids


def supported_architectures() -> list[str]:
    return sorted(ARCHITECTURES)


def _get_path(obj, dotted: str):
    for part in dotted.split("."):
        obj = getattr(obj, part)
    return obj


def layout_for(model: torch.nn.Module) -> MLPLayout:
    model_type = getattr(getattr(model, "config", None), "model_type", None)
    try:
        return ARCHITECTURES[model_type]
    except KeyError:
        raise UnsupportedArchitectureError(
            f"architecture {model_type!r} is not supported; supported: {', '.join(supported_architectures())}"
        ) from None


def decoder_layers(model: torch.nn.Module) -> list[torch.nn.Module]:
    """Every decoder layer, bottom to top."""
    layout = layout_for(model)
    for path in layout.layers:
        try:
            return list(_get_path(model, path))
        except AttributeError:
            continue
    raise UnsupportedArchitectureError(
        f"{model.config.model_type!r} model has none of the expected layer lists {layout.layers}"
    )


def down_projections(model: torch.nn.Module) -> list[torch.nn.Module]:
    """The down projection module of every decoder layer, bottom to top."""
    down_proj = layout_for(model).down_proj
    return [_get_path(layer, down_proj) for layer in decoder_layers(model)]
