"""The spectral shortcuts against the literal formula, in float64, on the embedded model's real activations."""

import numpy as np
import pytest
import torch

import grade
import grade.models.architectures
from grade.gradients.analysis import _forward, activation_grads
from grade.gradients.losses import entropy_at_last_position, response_cross_entropy
from grade.tasks.prompts import format_prompt
from grade.gradients.stable_rank import full_rank_in_float64, layer_spectrum, stable_rank, stable_ranks_fast

# Questions written for these tests only (not in sample_data or the shared sets).
QUESTIONS = [
    "Which metal is liquid at room temperature?",
    "In what year did the first person walk on the Moon, and who was it?",
    "What is the boiling point of water at sea level in degrees Fahrenheit?",
]


def capture_h_delta(lm, question, loss="pre"):
    prompt = format_prompt(lm.tokenizer, question)
    ids = lm.tokenizer(prompt, add_special_tokens=False)["input_ids"]
    with torch.enable_grad():
        capture, logits, _ = _forward(lm, ids, keep_hidden=False)
        value = entropy_at_last_position(logits)
        deltas = activation_grads(value, capture.outputs)
    return [h[0].double() for h in capture.hidden], [d[0].double() for d in deltas]


def literal(h, delta, kind):
    """C_h = h hᵀ, g = Δᵀh, C_g = C_h⁺ (h gᵀ g hᵀ) C_h⁺, stable ranks of both: the method's text, verbatim."""
    c_h = h @ h.T
    g = delta.T @ h
    pinv = torch.linalg.pinv(c_h)
    c_g = pinv @ (h @ g.T @ g @ h.T) @ pinv
    eig_h = torch.linalg.eigvalsh(c_h).flip(0)
    eig_g = torch.linalg.eigvalsh((c_g + c_g.T) / 2).flip(0)
    cond = float(eig_h[0] / eig_h[-1]) if eig_h[-1] > 0 else float("inf")
    return stable_rank(eig_h, kind), stable_rank(eig_g, kind), cond


@pytest.mark.slow
@pytest.mark.parametrize("question", QUESTIONS)
def test_rank_ratio_matches_literal_formula(smollm, question):
    hs, ds = capture_h_delta(smollm, question)
    result = grade.analyze(smollm, question)
    fast = grade.analyze(smollm, question, spectra=False)
    checked = 0
    for layer, (h, d) in enumerate(zip(hs, ds)):
        sh, sg, cond = literal(h, d, "pre")
        if cond >= 1e6:
            continue
        checked += 1
        expected = sg / sh
        assert result.rank_ratio[layer] == pytest.approx(expected, rel=1e-4), layer
        assert fast.rank_ratio[layer] == pytest.approx(expected, rel=1e-4), layer
    assert checked >= len(hs) // 2  # the comparison must actually cover most layers


@pytest.mark.slow
def test_pos_kind_matches_literal_formula(smollm):
    hs, ds = capture_h_delta(smollm, QUESTIONS[0])
    for h, d in list(zip(hs, ds))[::7]:
        sh, sg, cond = literal(h, d, "pos")
        spec = layer_spectrum(h, d)
        if cond < 1e6:
            assert stable_rank(spec.eig_g, "pos") / stable_rank(spec.eig_h, "pos") == pytest.approx(sg / sh, rel=1e-4)


@pytest.mark.slow
def test_weight_gradient_is_delta_transpose_h(smollm):
    """g = Δᵀh equals the autograd gradient of every down-projection weight."""
    model = smollm.model
    prompt = format_prompt(smollm.tokenizer, QUESTIONS[1])
    ids = smollm.tokenizer(prompt, add_special_tokens=False)["input_ids"]
    projections = grade.models.architectures.down_projections(model)
    try:
        for p in projections:
            p.weight.requires_grad_(True)
            p.weight.grad = None
        with torch.enable_grad():
            capture, logits, _ = _forward(smollm, ids, keep_hidden=False)
            value = entropy_at_last_position(logits)
            deltas = torch.autograd.grad(value, capture.outputs, retain_graph=True)
            value.backward()
        for p, h, d in zip(projections, capture.hidden, deltas):
            g = d[0].T @ h[0]
            torch.testing.assert_close(g, p.weight.grad, rtol=1e-4, atol=1e-7)
    finally:
        for p in projections:
            p.weight.requires_grad_(False)
            p.weight.grad = None


def test_projector_identity_on_rank_deficient_h():
    """When h is rank deficient, C_g = P Δ Δᵀ P still matches the pinv formula (float64, synthetic)."""
    gen = torch.Generator().manual_seed(0)
    n, d_ff, d_model, rank = 12, 40, 16, 5
    h = torch.randn(n, rank, generator=gen, dtype=torch.float64) @ torch.randn(rank, d_ff, generator=gen, dtype=torch.float64)
    delta = torch.randn(n, d_model, generator=gen, dtype=torch.float64)
    spec = layer_spectrum(h, delta)
    assert spec.range_rank == rank
    c_h = h @ h.T
    g = delta.T @ h
    pinv = torch.linalg.pinv(c_h, hermitian=True, rtol=1e-10)
    c_g = pinv @ h @ g.T @ g @ h.T @ pinv
    expected = torch.linalg.eigvalsh(c_g).flip(0)
    torch.testing.assert_close(spec.eig_g[:rank], expected[:rank], rtol=1e-6, atol=1e-8)
    torch.testing.assert_close(spec.row_sums_g, c_g.sum(1), rtol=1e-6, atol=1e-8)
    for kind in ("pre", "pos"):
        assert stable_rank(spec.eig_g, kind) == pytest.approx(stable_rank(expected, kind), rel=1e-8)


def test_fast_route_matches_exact_route_on_random_layers():
    gen = torch.Generator().manual_seed(1)
    hidden = torch.randn(4, 20, 64, generator=gen, dtype=torch.float64)
    deltas = torch.randn(4, 20, 24, generator=gen, dtype=torch.float64) * torch.linspace(0.1, 3, 24, dtype=torch.float64)
    for kind in ("pre", "pos"):
        fast = stable_ranks_fast(hidden, deltas, kind, kind, compute_dtype=torch.float64, iterations=200)
        assert fast.full_rank.all()
        for layer in range(4):
            spec = layer_spectrum(hidden[layer], deltas[layer])
            assert float(fast.srank_h[layer]) == pytest.approx(stable_rank(spec.eig_h, kind), rel=1e-6)
            assert float(fast.srank_g[layer]) == pytest.approx(stable_rank(spec.eig_g, kind), rel=1e-6)


def test_fast_route_flags_rank_deficient_layers():
    gen = torch.Generator().manual_seed(2)
    low = torch.randn(10, 3, generator=gen) @ torch.randn(3, 32, generator=gen)
    full = torch.randn(10, 32, generator=gen)
    fast = stable_ranks_fast(torch.stack([low, full]), torch.randn(2, 10, 8, generator=gen), "pre", "pre")
    assert fast.full_rank.tolist() == [False, True]


def test_zero_gradient_gives_zero_ratio_not_nan():
    spec = layer_spectrum(torch.randn(6, 10, dtype=torch.float64), torch.zeros(6, 4, dtype=torch.float64))
    assert stable_rank(spec.eig_g, "pre") == 0.0
    assert np.isfinite(stable_rank(spec.eig_h, "pre"))


def _ill_conditioned(gen, n, width, smallest):
    """(n, width) float64 with singular values from 1 down to ``smallest`` (log-spaced)."""
    u, _ = torch.linalg.qr(torch.randn(n, n, generator=gen, dtype=torch.float64))
    v, _ = torch.linalg.qr(torch.randn(width, n, generator=gen, dtype=torch.float64))
    return u @ torch.diag(torch.logspace(0, np.log10(smallest), n, dtype=torch.float64)) @ v.T


def test_float64_certificate_rescues_ill_conditioned_full_rank_layers():
    """Long inputs give activations whose C_h is too ill-conditioned for the float32 Cholesky but full
    rank under the literal formula's cut: the float64 check certifies them, and the fast route's stable
    ranks of those layers equal the exact route's (P = I). (The literal formula itself loses digits
    here: its two pseudo-inverses have norm 1e8 each, so it is not the yardstick at this condition.)"""
    gen = torch.Generator().manual_seed(3)
    h = _ill_conditioned(gen, 40, 96, 1e-4)  # cond(C_h) = 1e8: beyond float32, far from the float64 cut
    delta = torch.randn(40, 24, generator=gen, dtype=torch.float64)
    fast = stable_ranks_fast([h.float()], [delta.float()], "pos", "pos")
    assert not fast.full_rank[0]
    assert full_rank_in_float64(h.float())
    spec = layer_spectrum(h, delta)
    assert spec.range_rank == 40
    assert float(fast.srank_h[0]) == pytest.approx(stable_rank(spec.eig_h, "pos"), rel=1e-5)
    assert float(fast.srank_g[0]) == pytest.approx(stable_rank(spec.eig_g, "pos"), rel=1e-5)


def test_float64_certificate_rejects_rank_deficient_and_near_cut_layers():
    gen = torch.Generator().manual_seed(4)
    h = torch.randn(12, 40, generator=gen, dtype=torch.float64)
    assert full_rank_in_float64(h)
    assert not full_rank_in_float64(torch.cat([h, h[:1]]))  # a repeated token row: P != I
    assert not full_rank_in_float64(_ill_conditioned(gen, 30, 60, 1e-7))  # within the margin of the cut
    assert not full_rank_in_float64(torch.randn(50, 40, generator=gen))  # more tokens than width


def test_uncertified_layers_take_the_exact_route():
    """The fast route's fallback lives in grade.gradients.stable_rank: a layer whose h repeats a row (C_h singular, so
    P != I) is recomputed exactly; a full-rank layer keeps its fast values."""
    from grade.gradients.stable_rank import stable_ranks_checked, stable_ranks_prefixes_checked

    gen = torch.Generator().manual_seed(0)
    full = torch.randn(12, 64, generator=gen, dtype=torch.float64)
    singular = full.clone()
    singular[5] = singular[2]
    hidden = [full.float(), singular.float()]
    deltas = [torch.randn(12, 16, generator=gen).float() for _ in hidden]
    checked = stable_ranks_checked(hidden, deltas, "pos", "pos")
    assert set(checked.exact) == {1}
    for layer, (h, d) in enumerate(zip(hidden, deltas)):
        spec = layer_spectrum(h, d)
        assert checked.srank_h[layer] == pytest.approx(stable_rank(spec.eig_h, "pos"), rel=1e-4)
        assert checked.srank_g[layer] == pytest.approx(stable_rank(spec.eig_g, "pos"), rel=1e-4)
    np.testing.assert_allclose(checked.rank_ratio, checked.srank_g / checked.srank_h)
    # the same decision per prefix: the repeated row is inside the second prefix only
    per_step = [torch.stack([torch.cat([d[:4], torch.zeros_like(d[4:])]), d]) for d in deltas]  # Δ_k zero past its end
    steps = stable_ranks_prefixes_checked(hidden, per_step, [4, 12], "pos", "pos")
    assert [set(s.exact) for s in steps] == [set(), {1}]


def test_rows_of_one_length_share_a_run_and_keep_their_own_values():
    """The batched pass's rows (grade.gradients.stable_rank.stable_ranks_checked_rows): rows of one length go
    through one fast-route run, a rank-deficient layer of one row still takes the exact route, a row with a NaN
    gives None without costing the others theirs, and every row equals its own stable_ranks_checked."""
    from grade.gradients.stable_rank import stable_ranks_checked, stable_ranks_checked_rows

    gen = torch.Generator().manual_seed(5)

    def row(n):
        return [torch.randn(n, 64, generator=gen) for _ in range(3)], [torch.randn(n, 16, generator=gen) for _ in range(3)]

    rows = [row(12), row(12), row(9), row(12)]
    rows[1][0][2][5] = rows[1][0][2][2]  # a repeated token row in one layer of one row: P != I there
    rows[3][1][0][0, 0] = float("nan")
    checked = stable_ranks_checked_rows([h for h, _ in rows], [d for _, d in rows], "pos", "pos")
    assert checked[3] is None and all(c is not None for c in checked[:3])
    assert set(checked[1].exact) == {2} and not checked[0].exact
    for (hidden, deltas), got in zip(rows[:3], checked[:3]):
        alone = stable_ranks_checked(hidden, deltas, "pos", "pos")
        np.testing.assert_allclose(got.srank_h, alone.srank_h, rtol=1e-6)
        np.testing.assert_allclose(got.srank_g, alone.srank_g, rtol=1e-6)
        np.testing.assert_allclose(got.rank_ratio, alone.rank_ratio, rtol=1e-6)
