"""The exact route computed layer by layer (issue 32, item 1): the same numbers as the whole pass, at most the
lowest layer's h held beside the one being used, the prompt's cache filled once, the LM head applied to the
positions whose loss is taken only, and the memory claim following the route the analysis takes."""

from __future__ import annotations

import numpy as np
import pytest
import torch

pytestmark = pytest.mark.slow  # the embedded model

QUESTION = "What is the capital of France?"
DOCUMENT = "Paris is the capital of France and sits on the Seine. " * 6
ANSWER = "Paris, on the Seine. It is the largest city of France."
TOLERANCE = 5e-5


@pytest.fixture(scope="module")
def pairs(smollm, one_torch_thread):
    """(whole pass, layer by layer) per route; ``memory_mb`` tiny enough that every analysis goes layer by layer."""
    from grade.gradients.analysis import analyze

    routes = {"pre": dict(loss="pre", keep_hidden=True, keep_prompt_pass=True), "pos": dict(loss="pos", response=ANSWER)}
    return {name: tuple(analyze(smollm, QUESTION, context=DOCUMENT, memory_mb=bound, **kw) for bound in (None, 1e-6))
            for name, kw in routes.items()}


@pytest.mark.parametrize("route", ["pre", "pos"])
def test_layer_by_layer_gives_the_whole_pass_numbers(pairs, route):
    whole, pieces = pairs[route]
    assert pieces.loss_value == pytest.approx(whole.loss_value, abs=1e-6)
    for name in ("srank_h", "srank_g", "rank_ratio"):
        np.testing.assert_allclose(getattr(pieces, name), getattr(whole, name), rtol=TOLERANCE, atol=1e-7, err_msg=name)
    for name in ("eig_h", "eig_g"):
        a, b = getattr(pieces, name), getattr(whole, name)
        assert np.abs(a - b).max() <= TOLERANCE * np.abs(b).max(), name
    if route == "pos":
        a, b = pieces.token_scores, whole.token_scores
        assert np.array_equal(np.isnan(a), np.isnan(b))
        assert np.nanmax(np.abs(a - b)) <= TOLERANCE * np.nanmax(np.abs(b))


def test_layer_by_layer_fills_the_prompt_cache_once(pairs):
    whole, pieces = pairs["pre"]
    n = len(pieces.input_ids)
    for a, b in zip(whole.prompt_pass.cache.layers, pieces.prompt_pass.cache.layers):
        assert b.keys.shape[-2] == n  # a re-run appending to the cache would double it
        torch.testing.assert_close(b.keys, a.keys, rtol=0, atol=1e-6)
    np.testing.assert_allclose(pieces.last_hidden, whole.last_hidden, rtol=0, atol=1e-5)


def test_at_most_the_lowest_layers_h_is_held_beside_the_one_handed_over(smollm, one_torch_thread):
    from grade.gradients.analysis import captured_forward
    from grade.gradients.losses import entropy_at_last_position
    from grade.models.generation import encode_prompt
    from grade.tasks.prompts import format_prompt

    ids = encode_prompt(smollm.tokenizer, format_prompt(smollm.tokenizer, QUESTION, context=DOCUMENT))
    held, order = [], []

    def per_layer(index, h, delta):
        held.append(sum(t is not None for t in capture.hidden))
        order.append(index)
        assert h.shape == (len(ids), capture.hidden_width) and delta.shape[0] == len(ids)

    with torch.enable_grad(), captured_forward(smollm, ids, False, len(ids) - 1, per_layer=per_layer) as passed:
        capture, logits = passed[0], passed[1]
        assert sum(t is not None for t in capture.hidden) == 1  # the lowest layer's, which never runs again
        torch.autograd.grad(entropy_at_last_position(logits), capture.outputs[0])
    assert sorted(order) == list(range(smollm.n_layers))
    assert max(held) <= 1


@pytest.mark.parametrize("loss", ["pre", "pos"])
def test_the_lm_head_reads_only_the_positions_whose_loss_is_taken(smollm, one_torch_thread, loss):
    from grade.gradients.analysis import analyze

    rows = []
    handle = smollm.model.get_output_embeddings().register_forward_hook(
        lambda module, args, output: rows.append(args[0].shape[-2]))
    try:
        result = analyze(smollm, QUESTION, loss=loss, response=ANSWER if loss == "pos" else None, spectra=False)
    finally:
        handle.remove()
    n_response = len(result.input_ids) - (result.response_start or len(result.input_ids))
    assert rows == [1 if loss == "pre" else n_response + 1]


def test_the_memory_claim_follows_the_route_the_analysis_takes(smollm):
    from grade.gradients.memory import analysis_memory_bytes, layer_by_layer_fits_better

    n = 1800
    whole = analysis_memory_bytes(smollm, n, layer_by_layer=False)
    pieces = analysis_memory_bytes(smollm, n, layer_by_layer=True)
    assert pieces < whole / 2
    bound = (pieces + whole) / 2 / 2**20
    assert layer_by_layer_fits_better(smollm, n, 0, bound)
    assert analysis_memory_bytes(smollm, n, memory_mb=bound) == pieces
    assert not layer_by_layer_fits_better(smollm, 20, 0, bound)  # a short question: the whole pass, no re-run
    assert analysis_memory_bytes(smollm, 20, memory_mb=bound) == analysis_memory_bytes(smollm, 20)
    assert not layer_by_layer_fits_better(smollm, n, 0, None)
