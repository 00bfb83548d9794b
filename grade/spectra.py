"""Spectra and stable ranks of ``C_h = h hᵀ`` and ``C_g = C_h⁺ h gᵀ g hᵀ C_h⁺``.

With ``g = Δᵀ h`` we have ``h gᵀ = C_h Δ``, hence ``C_g = P Δ Δᵀ P`` with ``P = C_h⁺ C_h``, the
projector onto the range of ``C_h`` (= the column space of h). Neither the weight gradient nor a
pseudo-inverse is ever formed:

* exact route (:func:`layer_spectrum`): an SVD of h in float64 gives the eigenvalues of ``C_h``
  (squared singular values) and ``U_r``, an orthonormal basis of the range; the eigenvalues of ``C_g``
  are the squared singular values of ``U_rᵀ Δ`` (r x d_model).
* fast route (:func:`stable_ranks_fast`): when h has full row rank, ``P = I`` and ``C_g = Δ Δᵀ``, so
  the stable ranks need only traces, Frobenius norms and the top eigenvalue (power iteration), batched
  over layers on the model's device. A Cholesky factorisation certifies full rank; layers where it
  fails go through the exact route.

Shapes: h is (n, d_ff), Δ is (n, d_model), eigenvalue vectors are (n,), sorted descending.
"""

from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass
from typing import Literal

import torch

from .errors import NumericalError

SRankKind = Literal["pre", "pos"]


def stable_rank(eigenvalues: torch.Tensor, kind: SRankKind) -> float:
    """``Σλ/λ₁`` (``pre``) or ``Σλ²/λ₁²`` (``pos``) of a non-negative spectrum; 0 for a zero matrix."""
    lam = eigenvalues.clamp_min(0)
    top = lam.max()
    if top <= 0:
        return 0.0
    lam = lam / top
    return float(lam.sum() if kind == "pre" else (lam * lam).sum())


def naive_rank(eigenvalues: torch.Tensor, threshold: float) -> int:
    """Number of eigenvalues above ``threshold`` after dividing by the largest (the paper's naive rank)."""
    top = eigenvalues.max()
    if top <= 0:
        return 0
    return int((eigenvalues / top > threshold).sum())


def rank_ratio(srank_g: float, srank_h: float) -> float:
    return srank_g / srank_h if srank_h > 0 else 0.0


def _range_tolerance(singular_values: torch.Tensor, n: int) -> float:
    # Same cut as pinv(C_h) in float64 (rtol = n·eps on the eigenvalues of C_h = σ²), so our P is the
    # projector the literal formula uses.
    eps = torch.finfo(torch.float64).eps
    return float(singular_values.max()) * (n * eps) ** 0.5


@dataclass
class LayerSpectrum:
    """Everything GRADE derives from one layer's (h, Δ)."""

    eig_h: torch.Tensor  # (n,) eigenvalues of C_h, descending
    eig_g: torch.Tensor  # (n,) eigenvalues of C_g, descending (zeros past the rank)
    row_sums_g: torch.Tensor  # (n,) row sums of C_g: the per-token "epistemic shock"
    range_rank: int  # rank of C_h used for the projector


def check_finite(tensor: torch.Tensor, what: str) -> None:
    if not torch.isfinite(tensor).all():
        raise NumericalError(f"{what} contains NaN or inf values; the model may be unstable in this dtype (try float32)")


def layer_spectrum(h: torch.Tensor, delta: torch.Tensor) -> LayerSpectrum:
    """Exact route, in float64 on the CPU. h: (n, d_ff), delta: (n, d_model)."""
    h64 = h.detach().to("cpu", torch.float64)
    d64 = delta.detach().to("cpu", torch.float64)
    n = h64.shape[0]
    try:
        u, s, _ = torch.linalg.svd(h64, full_matrices=False)
    except RuntimeError:  # LAPACK's divide-and-conquer can fail to converge; the Gram route cannot
        evals, vecs = torch.linalg.eigh(h64 @ h64.T)
        s, order = evals.clamp_min(0).sqrt().sort(descending=True)
        u = vecs[:, order]
    keep = s > _range_tolerance(s, n) if s.numel() else s.bool()
    basis = u[:, keep]  # (n, r)
    projected = basis.T @ d64  # (r, d_model)
    eig_h = torch.zeros(n, dtype=torch.float64)
    eig_h[: s.numel()] = s**2
    eig_g = torch.zeros(n, dtype=torch.float64)
    if projected.numel():
        sg = torch.linalg.svdvals(projected)
        eig_g[: sg.numel()] = sg**2
    # C_g·1 = U_r (B (Bᵀ (U_rᵀ 1))) without forming the n x n matrix.
    row_sums = basis @ (projected @ (projected.T @ basis.sum(0)))
    return LayerSpectrum(eig_h=eig_h, eig_g=eig_g, row_sums_g=row_sums, range_rank=int(keep.sum()))


@contextmanager
def _exact_tf32_for_half_inputs(tensor: torch.Tensor):
    """Allow TF32 tensor cores when the inputs are bf16/fp16: their values are exact in TF32, and the
    products accumulate in float32, so this is as accurate as plain float32 at tensor-core speed."""
    if not (tensor.is_cuda and tensor.dtype in (torch.bfloat16, torch.float16)):
        yield
        return
    previous = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = True
    try:
        yield
    finally:
        torch.backends.cuda.matmul.allow_tf32 = previous


def _top_eigenvalue(gram: torch.Tensor, iterations: int) -> torch.Tensor:
    """Largest eigenvalue of a batch of PSD matrices (..., n, n) by power iteration + Rayleigh quotient.

    The Rayleigh quotient's error shrinks like (λ₂/λ₁)^(2k); when λ₂ ≈ λ₁ it is small anyway, so the
    value (unlike the vector) is accurate after a few dozen steps.
    """
    v = gram.sum(-1, keepdim=True) + gram.diagonal(dim1=-2, dim2=-1).unsqueeze(-1)  # a start with positive overlap
    v = v / v.norm(dim=-2, keepdim=True).clamp_min(torch.finfo(gram.dtype).tiny)
    for _ in range(iterations):
        w = gram @ v
        v = w / w.norm(dim=-2, keepdim=True).clamp_min(torch.finfo(gram.dtype).tiny)
    return (v.transpose(-1, -2) @ gram @ v).squeeze(-1).squeeze(-1)


def _srank_from_gram(gram: torch.Tensor, kind: SRankKind, iterations: int) -> torch.Tensor:
    top = _top_eigenvalue(gram, iterations)
    if kind == "pre":
        total = gram.diagonal(dim1=-2, dim2=-1).sum(-1)
        value = total / top
    else:
        value = gram.square().sum((-2, -1)) / top.square()
    return torch.where(top > 0, value, torch.zeros_like(value))


@dataclass
class FastStableRanks:
    srank_h: torch.Tensor  # (L,)
    srank_g: torch.Tensor  # (L,)
    full_rank: torch.Tensor  # (L,) bool: layers where P = I was certified


def stable_ranks_fast(
    hidden: torch.Tensor,
    deltas: torch.Tensor,
    kind_h: SRankKind,
    kind_g: SRankKind,
    *,
    iterations: int = 64,
    compute_dtype: torch.dtype = torch.float32,
) -> FastStableRanks:
    """Stable ranks for a stack of layers, no eigen-decomposition. hidden: (L, n, d_ff), deltas: (L, n, d_model).

    Grams are formed with the inputs' dtype (bf16 tensor cores on a GPU) and accumulated into
    ``compute_dtype``. Layers whose ``C_h`` is not certified full rank get ``full_rank = False``; callers
    recompute those with :func:`layer_spectrum`.
    """
    n = hidden.shape[-2]
    with _exact_tf32_for_half_inputs(hidden):
        h = hidden.to(compute_dtype)
        d = deltas.to(compute_dtype)
        gram_h = h @ h.transpose(1, 2)
        gram_g = d @ d.transpose(1, 2)
    # Full rank ⇔ C_h positive definite; Cholesky is the cheapest certificate and never raises with _ex.
    scale = gram_h.diagonal(dim1=-2, dim2=-1).mean(-1).clamp_min(torch.finfo(compute_dtype).tiny)
    _, info = torch.linalg.cholesky_ex(gram_h / scale[:, None, None])
    full_rank = (info == 0) & (n <= hidden.shape[-1])
    return FastStableRanks(
        srank_h=_srank_from_gram(gram_h, kind_h, iterations),
        srank_g=_srank_from_gram(gram_g, kind_g, iterations),
        full_rank=full_rank,
    )
