"""Step-wise ``pos`` in pieces (grade.gradients.analysis.step_pieces): the same features as one shared pass on a real
multi-step trace with SmolLM2, groups sized from the memory bound; and cooperative cancellation
(grade.models.cancel) stopping an analysis between its passes."""

from __future__ import annotations

import threading

import numpy as np
import pytest

import grade
import grade.tasks.prompts
from grade.gradients.memory import _delta_bytes_per_token, step_pieces
from grade.models.cancel import Cancelled, cancellable, check_cancelled


def test_step_pieces_fit_the_bound_and_never_split_below_one_step():
    ends = [100, 120, 150, 200, 260, 300]
    assert step_pieces(ends, 10, None) == [range(6)]
    groups = step_pieces(ends, 10, 3000)  # 2 steps of <= 150 tokens fit, 2 of 200 do not
    assert [list(g) for g in groups] == [[0, 1], [2], [3], [4], [5]]
    for g in groups:
        assert len(g) == 1 or len(g) * ends[g[-1]] * 10 <= 3000
    assert [list(g) for g in step_pieces(ends, 10, 1)] == [[k] for k in range(6)]  # below one step: one each
    assert [list(g) for g in step_pieces(ends, 1, 10**9)] == [list(range(6))]
    assert step_pieces([], 10, 100) == []


def test_cancellation_is_checked_only_inside_its_block():
    event = threading.Event()
    check_cancelled()  # outside any block: never raises
    with cancellable(event):
        check_cancelled()
        event.set()
        with pytest.raises(Cancelled):
            check_cancelled()
    check_cancelled()


def _trace() -> dict:
    """The shortest GSM8K dev-set problem whose reference solution has at least 6 steps (a real multi-step trace; a
    longer one only costs more passes)."""
    from grade.gradients.losses import split_steps
    from grade.tasks.tasks import read_jsonl, resolve_dataset

    rows = (row for _, row in read_jsonl(resolve_dataset("gsm8k")[1]))
    return min((r for r in rows if len(split_steps(r.get("solution") or "")) >= 6),
               key=lambda r: len(r["question"]) + len(r["solution"]))


@pytest.mark.slow
@pytest.mark.parametrize("spectra", [False, True])
def test_pieces_give_the_features_of_one_shared_pass(smollm, spectra):
    row = _trace()
    options = dict(task="gsm8k", loss="pos", response=row["solution"], steps=True, spectra=spectra,
                   token_scores=True, step_passes="shared")
    whole = grade.analyze(smollm, row["question"], step_memory_mb=None, **options)
    # a bound that holds the Δ of two steps of the whole sequence: several groups
    two_steps = 2 * len(whole.input_ids) * _delta_bytes_per_token(smollm) / 2**20
    pieces = grade.analyze(smollm, row["question"], step_memory_mb=two_steps, **options)
    assert whole.timings["step_pieces"] == 1 and pieces.timings["step_pieces"] >= 3
    assert len(whole.steps) >= 6 and [(s.start, s.end) for s in pieces.steps] == [(s.start, s.end) for s in whole.steps]
    # float32 rounding of other batch shapes: on the AMD EPYC VM one ill-conditioned layer-0 step ratio moved by
    # 1.1e-5 (relative); the routes' documented gap on Qwen is 2.8e-5 (bench/RESULTS.md section 8)
    np.testing.assert_allclose([s.rank_ratio for s in pieces.steps], [s.rank_ratio for s in whole.steps], rtol=5e-5)
    np.testing.assert_allclose([s.srank_g for s in pieces.steps], [s.srank_g for s in whole.steps], rtol=5e-5)
    np.testing.assert_allclose([s.loss_value for s in pieces.steps], [s.loss_value for s in whole.steps], rtol=1e-5)
    assert np.array_equal(np.isnan(pieces.token_scores), np.isnan(whole.token_scores))
    # relative to the largest score, as bench/trace_page.py compares routes (single tokens near zero differ more)
    scale = np.nanmax(np.abs(whole.token_scores))
    assert np.nanmax(np.abs(pieces.token_scores - whole.token_scores)) / scale < 1e-5
    np.testing.assert_allclose(pieces.token_surprisal, whole.token_surprisal, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(pieces.rank_ratio, whole.rank_ratio, rtol=1e-5)


@pytest.mark.slow
def test_a_cancelled_analysis_stops_after_the_pass_it_is_in(smollm):
    """The event is set from inside the model's first forward pass (a hook on its first layer): the analysis
    raises Cancelled before a second pass, where the whole trace needs one pass per step."""
    from grade.models.architectures import down_projections

    row = _trace()
    event, passes = threading.Event(), []

    def first_layer_ran(module, inputs, output):
        passes.append(1)
        event.set()

    hook = down_projections(smollm.model)[0].register_forward_hook(first_layer_ran)
    try:
        with cancellable(event), pytest.raises(Cancelled):
            grade.analyze(smollm, row["question"], task="gsm8k", loss="pos", response=row["solution"], steps=True,
                          spectra=False, step_passes="prefix")
    finally:
        hook.remove()
    assert len(passes) == 1
    # the model is free and whole afterwards
    result = grade.analyze(smollm, row["question"], task="gsm8k", loss="pos", response=row["solution"], steps=True,
                           spectra=False, step_passes="prefix")
    assert len(result.steps) >= 6


@pytest.mark.slow
def test_a_cancelled_generation_stops_within_one_token(smollm):
    """Cancel reaches text generation too: the event is set from inside the model's third forward pass (the
    prompt, then one pass per new token), and the torch loop stops before choosing another token."""
    from grade.models.architectures import down_projections
    from grade.models.generation import TorchBackend, encode_prompt, settings_for_task

    prompt = encode_prompt(smollm.tokenizer, grade.tasks.prompts.format_prompt(smollm.tokenizer, "Count from one to fifty.",
                                                                         task="qa"))
    backend, settings = TorchBackend(smollm), settings_for_task("qa", 40)  # the torch loop (llama.cpp: its own check)
    event, passes = threading.Event(), []

    def layer_ran(module, inputs, output):
        passes.append(1)
        if len(passes) == 3:
            event.set()

    hook = down_projections(smollm.model)[0].register_forward_hook(layer_ran)
    try:
        with smollm.lock, cancellable(event), pytest.raises(Cancelled):
            backend.generate_ids([prompt], settings, None)
    finally:
        hook.remove()
    assert len(passes) == 3
    with smollm.lock:
        assert len(backend.generate_ids([prompt], settings, None)[0][0]) > 3  # free and whole afterwards
