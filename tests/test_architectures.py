"""Every architecture in the MLP table runs end to end on a tiny random-weight model built from a config."""

import pytest
import torch
import transformers

import grade
from grade.gradients.analysis import _forward
from grade.models.architectures import ARCHITECTURES, down_projections
from grade.common.errors import UnsupportedArchitectureError
from grade.gradients.losses import entropy_at_last_position

VOCAB = 49152  # the SmolLM2 tokenizer's, so the tiny models can share its tokenizer
SMALL = dict(vocab_size=VOCAB, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
             num_key_value_heads=2, max_position_embeddings=256)

CONFIGS = {
    "llama": lambda: transformers.LlamaConfig(**SMALL),
    "mistral": lambda: transformers.MistralConfig(**SMALL),
    "qwen2": lambda: transformers.Qwen2Config(**SMALL),
    "qwen3": lambda: transformers.Qwen3Config(**SMALL, head_dim=8),
    "gemma": lambda: transformers.GemmaConfig(**SMALL, head_dim=8),
    "gemma2": lambda: transformers.Gemma2Config(**SMALL, head_dim=8),
    "gemma3_text": lambda: transformers.Gemma3TextConfig(**SMALL, head_dim=8),
    "phi3": lambda: transformers.Phi3Config(**SMALL),
    "gpt2": lambda: transformers.GPT2Config(vocab_size=VOCAB, n_embd=32, n_inner=64, n_layer=2, n_head=4, n_positions=256),
    "gpt_neox": lambda: transformers.GPTNeoXConfig(vocab_size=VOCAB, hidden_size=32, intermediate_size=64,
                                                   num_hidden_layers=2, num_attention_heads=4, max_position_embeddings=256),
    "opt": lambda: transformers.OPTConfig(vocab_size=VOCAB, hidden_size=32, ffn_dim=64, num_hidden_layers=2,
                                          num_attention_heads=4, max_position_embeddings=256, word_embed_proj_dim=32),
}


def test_every_table_row_has_a_tiny_config():
    families = {ARCHITECTURES[k] for k in CONFIGS}
    assert families == set(ARCHITECTURES.values())


@pytest.fixture(scope="module")
def tokenizer(smollm):
    return smollm.tokenizer


def build_folder(tmp_path, config, tokenizer):
    torch.manual_seed(0)
    model = transformers.AutoModelForCausalLM.from_config(config)
    folder = tmp_path / config.model_type
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


@pytest.mark.slow
@pytest.mark.parametrize("model_type", sorted(CONFIGS))
def test_architecture_end_to_end(tmp_path, tokenizer, model_type):
    config = CONFIGS[model_type]()
    folder = build_folder(tmp_path, config, tokenizer)
    lm = grade.load_model(str(folder))
    assert lm.n_layers == 2
    result = grade.analyze(lm, "What is the capital of Peru?")
    assert result.rank_ratio.shape == (2,)
    assert (result.rank_ratio > 0).all() and (result.srank_h >= 1).all()
    fast = grade.analyze(lm, "What is the capital of Peru?", spectra=False)
    assert fast.rank_ratio == pytest.approx(result.rank_ratio, rel=1e-3)
    pos = grade.analyze(lm, "What is 2 + 2?", loss="pos", response="It is 4. Done.", steps=True)
    assert len(pos.steps) == 2

    # Δᵀh is the down projection's weight gradient, whatever the module type (Linear or GPT-2's Conv1D).
    ids = lm.tokenizer("Name a prime number.", add_special_tokens=False)["input_ids"]
    projections = down_projections(lm.model)
    for p in projections:
        p.weight.requires_grad_(True)
    with torch.enable_grad():
        capture, logits, _ = _forward(lm, ids, keep_hidden=False)
        value = entropy_at_last_position(logits)
        deltas = torch.autograd.grad(value, capture.outputs, retain_graph=True)
        value.backward()
    for p, h, d in zip(projections, capture.hidden, deltas):
        g = d.reshape(h.shape[1], -1).T @ h[0]  # (d_model, d_ff)
        expected = p.weight.grad if p.weight.shape == g.shape else p.weight.grad.T  # Conv1D stores Wᵀ
        torch.testing.assert_close(g, expected, rtol=1e-4, atol=1e-8)


@pytest.mark.slow
def test_unsupported_architecture_lists_supported(tmp_path, tokenizer):
    config = transformers.BloomConfig(vocab_size=VOCAB, hidden_size=32, n_layer=2, n_head=4)
    folder = build_folder(tmp_path, config, tokenizer)
    with pytest.raises(UnsupportedArchitectureError) as info:
        grade.load_model(str(folder))
    message = str(info.value)
    assert "bloom" in message and "llama" in message and "gpt2" in message


def test_batched_and_per_loss_backward_give_the_same_step_gradients(tmp_path, tokenizer):
    """The GPU's one batched backward (vmap) and the CPU's K backward passes are the same Δ_k."""
    from grade.gradients.analysis import activation_grads

    lm = grade.load_model(str(build_folder(tmp_path, CONFIGS["llama"](), tokenizer)))
    ids = lm.tokenizer("First step. Second step. Third step.", add_special_tokens=False)["input_ids"]
    with torch.enable_grad():
        capture, logits, _ = _forward(lm, ids, keep_hidden=False)
        log_probs = torch.log_softmax(logits[:-1].float(), dim=-1)
        token_nll = -log_probs.gather(1, torch.tensor(ids[1:])[:, None])[:, 0]
        thirds = torch.tensor_split(token_nll, 3)
        losses = torch.stack([part.mean() for part in thirds])
        per_loss = activation_grads(losses, capture.outputs, batched=False)  # keeps the graph
        batched = activation_grads(losses, capture.outputs, batched=True)
    assert len(batched) == len(per_loss) == lm.n_layers
    for b, p in zip(batched, per_loss):
        assert b.shape == p.shape == (3, len(ids), 32)
        torch.testing.assert_close(b, p, rtol=1e-5, atol=1e-7)
    # causality: step 1's loss leaves the tokens after step 1 untouched
    end_first = len(thirds[0]) + 1
    assert per_loss[0][0, end_first:].abs().max() == 0


def test_character_level_tokenizer_is_refused(smollm):
    """transformers 5.17 turns Gemma-3's GGUF vocabulary into one token per character: refuse such a tokenizer."""
    from tokenizers import Tokenizer, models, pre_tokenizers

    from grade.common.errors import ModelLoadError
    from grade.models.models import _TOKENIZER_PROBE, check_tokenizer_is_not_character_level

    characters = sorted(set(_TOKENIZER_PROBE))
    backend = Tokenizer(models.WordLevel({c: i for i, c in enumerate(["<unk>", *characters])}, unk_token="<unk>"))
    backend.pre_tokenizer = pre_tokenizers.Split("", behavior="isolated")
    per_character = transformers.PreTrainedTokenizerFast(tokenizer_object=backend, unk_token="<unk>")
    assert len(per_character(_TOKENIZER_PROBE)["input_ids"]) == len(_TOKENIZER_PROBE)

    with pytest.raises(ModelLoadError, match="character level"):
        check_tokenizer_is_not_character_level(per_character, "broken.gguf")
    check_tokenizer_is_not_character_level(smollm.tokenizer, "SmolLM2")  # a real word-piece tokenizer passes
