"""The reference recipe and literal formula (grade.gradients.reference), and the engine's performance paths
checked against them: low-memory capture, step-wise shared spectra, Lanczos on clustered spectra."""

from pathlib import Path

import numpy as np
import pytest
import torch

import grade
from grade.models.models import LoadedModel
from grade.gradients.reference import literal_stable_ranks, recipe_rank_ratios, reference_recipe
from grade.gradients.stable_rank import top_eigenvalue, layer_spectrum, stable_rank, stable_ranks_fast, stable_ranks_prefixes
from grade.gradients.losses import entropy_at_last_position

from bench.synthetic import random_llama, word_tokenizer, words


def random_layers(n=24, d_ff=96, d_model=40, layers=3, seed=0):
    gen = torch.Generator().manual_seed(seed)
    hidden = [torch.randn(n, d_ff, generator=gen, dtype=torch.float64) for _ in range(layers)]
    deltas = [torch.randn(n, d_model, generator=gen, dtype=torch.float64) * torch.linspace(0.2, 2, d_model, dtype=torch.float64)
              for _ in range(layers)]
    return hidden, deltas


@pytest.mark.parametrize("kind", ["pre", "pos"])
def test_literal_formula_equals_projector_route(kind):
    hidden, deltas = random_layers()
    hidden[1] = hidden[1][:, :8] @ torch.randn(8, 96, dtype=torch.float64)  # rank-deficient: P != I
    literal = literal_stable_ranks(hidden, deltas, kind, kind)
    for layer, (h, d) in enumerate(zip(hidden, deltas)):
        spec = layer_spectrum(h, d)
        assert literal.srank_h[layer] == pytest.approx(stable_rank(spec.eig_h, kind), rel=1e-8)
        assert literal.srank_g[layer] == pytest.approx(stable_rank(spec.eig_g, kind), rel=1e-7)


def test_recipe_is_close_to_literal_on_well_conditioned_layers():
    hidden, deltas = random_layers()
    truth = literal_stable_ranks(hidden, deltas, "pre", "pre").rank_ratio
    grads = [(d.T @ h).float() for h, d in zip(hidden, deltas)]
    recipe = recipe_rank_ratios([h.float() for h in hidden], grads, "pre", "pre")
    assert not recipe.failures
    np.testing.assert_allclose(recipe.rank_ratio, truth, rtol=1e-3)


@pytest.fixture(scope="module")
def tiny_llama():
    return random_llama("cpu", torch.float32, hidden_size=64, intermediate_size=192, num_hidden_layers=3,
                        num_attention_heads=4, num_key_value_heads=2, vocab_size=300)


def test_reference_recipe_restores_the_model_and_agrees_with_the_engine(tiny_llama):
    ids = torch.randint(0, 297, (30,), generator=torch.Generator().manual_seed(3))
    ref = reference_recipe(tiny_llama.model, ids.unsqueeze(0), entropy_at_last_position)
    assert all(not p.requires_grad and p.grad is None for p in tiny_llama.model.parameters())
    ours = grade.analyze(tiny_llama, "q", prompt=words(ids.tolist()), spectra=True)
    np.testing.assert_allclose(ref.rank_ratio, ours.rank_ratio, rtol=1e-3)


def test_low_memory_capture_gives_the_standard_results(tiny_llama):
    prompt = words(torch.randint(0, 297, (40,), generator=torch.Generator().manual_seed(4)).tolist())
    for loss, response in (("pre", None), ("pos", "t5 t9 t11 t2")):
        low = grade.analyze(tiny_llama, "q", prompt=prompt, loss=loss, response=response, spectra=False, low_memory=True)
        std = grade.analyze(tiny_llama, "q", prompt=prompt, loss=loss, response=response, spectra=False, low_memory=False)
        np.testing.assert_allclose(low.rank_ratio, std.rank_ratio, rtol=1e-6)
        assert low.loss_value == pytest.approx(std.loss_value, rel=1e-6)
    assert "forward" not in tiny_llama.model.model.layers[1].mlp.__dict__  # the patch is undone


def test_low_memory_capture_on_a_non_gated_mlp_uses_checkpointing():
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(0)
    model = GPT2LMHeadModel(GPT2Config(n_embd=48, n_layer=2, n_head=2, vocab_size=300, n_positions=128)).eval()
    for p in model.parameters():
        p.requires_grad_(False)
    lm = LoadedModel("tiny-gpt2", model, word_tokenizer(300), torch.device("cpu"), torch.float32)
    prompt = words(range(10, 40))
    low = grade.analyze(lm, "q", prompt=prompt, spectra=False, low_memory=True)
    std = grade.analyze(lm, "q", prompt=prompt, spectra=False, low_memory=False)
    np.testing.assert_allclose(low.rank_ratio, std.rank_ratio, rtol=1e-6)


def test_prefix_spectra_match_per_prefix_fast_route():
    gen = torch.Generator().manual_seed(5)
    n, ends = 30, [12, 20, 30]
    hidden = [torch.randn(n, 64, generator=gen) for _ in range(2)]
    hidden[1][15] = hidden[1][3]  # a repeated row: prefixes past position 15 are rank-deficient
    deltas = [torch.randn(len(ends), n, 16, generator=gen) for _ in range(2)]
    for d in deltas:
        for k, end in enumerate(ends):
            d[k, end:] = 0  # Δ of a step is zero past its prefix
    shared = stable_ranks_prefixes(hidden, deltas, ends, "pos", "pos")
    assert shared.full_rank.tolist() == [[True, True], [True, False], [True, False]]
    for k, end in enumerate(ends):
        single = stable_ranks_fast([h[:end] for h in hidden], [d[k, :end] for d in deltas], "pos", "pos")
        assert single.full_rank.tolist() == shared.full_rank[k].tolist()
        np.testing.assert_allclose(shared.srank_h[k], single.srank_h, rtol=1e-5)
        np.testing.assert_allclose(shared.srank_g[k], single.srank_g, rtol=1e-5)


def test_lanczos_resolves_a_clusteredtop_eigenvalue():
    # Marchenko-Pastur-like spectrum: many eigenvalues near the top, trace >> λ₁ (random-weight models).
    gen = torch.Generator().manual_seed(6)
    x = torch.randn(2, 600, 2400, generator=gen)
    gram = x @ x.transpose(1, 2)
    exact = torch.linalg.eigvalsh(gram.double())[:, -1]
    top = top_eigenvalue(gram, 128)
    np.testing.assert_allclose(top.numpy(), exact.numpy(), rtol=1e-6)



def test_certificate_rejects_exactly_singular_grams():
    from grade.gradients.stable_rank import cholesky_info

    gen = torch.Generator().manual_seed(7)
    x = torch.randn(3, 90, 200, generator=gen)
    x[1, 57] = x[1, 20]  # two identical rows of h: singular from the 58th leading minor on
    x[2] = torch.randn(90, 50, generator=gen) @ torch.randn(50, 200, generator=gen)  # rank 50
    info = cholesky_info(x @ x.transpose(1, 2), chunk=2).tolist()
    assert info[0] == 0 and info[1] == 58 and 50 < info[2] <= 90


def test_lanczos_finds_thetop_eigenvalue_when_one_start_misses_it():
    """A real failure, kept as data: the gradient Gram (81 x 81, float64) of step 0, layer 12 of the
    step-wise benchmark on a random-weight Llama-3.1-8B-shaped model (H100, K = 8). The diagonal-based
    start has an overlap of 3e-5 with the top eigenvector, and Lanczos from it alone settled on λ₂
    (0.7% below λ₁), which put 1.4% into that layer's rank ratio. The second start catches it."""
    from grade.gradients.stable_rank import _start_vectors

    gram = torch.from_numpy(np.load(Path(__file__).parent / "data" / "lanczos_first_start_misses_top.npy"))
    values, vectors = torch.linalg.eigh(gram)
    starts = _start_vectors(gram.unsqueeze(0))[0]
    assert abs(float(starts[0] @ vectors[:, -1])) < 1e-3  # the case this test is about
    for dtype in (torch.float64, torch.float32):
        top = top_eigenvalue(gram.to(dtype).unsqueeze(0), 128)
        assert float(top[0]) == pytest.approx(float(values[-1]), rel=1e-6)
