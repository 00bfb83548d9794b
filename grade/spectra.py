"""Spectra and stable ranks of ``C_h = h hᵀ`` and ``C_g = C_h⁺ h gᵀ g hᵀ C_h⁺``.

With ``g = Δᵀ h`` we have ``h gᵀ = C_h Δ``, hence ``C_g = P Δ Δᵀ P`` with ``P = C_h⁺ C_h``, the
projector onto the range of ``C_h`` (= the column space of h). Neither the weight gradient nor a
pseudo-inverse is ever formed:

* exact route (:func:`layer_spectrum`): an SVD of h in float64 gives the eigenvalues of ``C_h``
  (squared singular values) and ``U_r``, an orthonormal basis of the range; the eigenvalues of ``C_g``
  are the squared singular values of ``U_rᵀ Δ`` (r x d_model).
* fast route (:func:`stable_ranks_fast`): when h has full row rank, ``P = I`` and ``C_g = Δ Δᵀ``, so
  the stable ranks need only traces, Frobenius norms and the top eigenvalue (Lanczos), batched
  over layers on the model's device. A Cholesky factorisation certifies full rank; layers where it
  fails go through the exact route.

Shapes: h is (n, d_ff), Δ is (n, d_model), eigenvalue vectors are (n,), sorted descending.
"""

from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass
from typing import Literal, Sequence

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


def _gram_into(out: torch.Tensor, x: torch.Tensor) -> None:
    """``out <- x xᵀ`` for one layer. x: (n, d) in any dtype, out: (n, n) in the compute dtype.

    Half-precision inputs on a GPU go through the tensor cores with float32 accumulation and a float32
    result (``out_dtype``), so no float32 copy of x is ever made; elsewhere x is upcast one layer at a
    time. Either way the products of bf16/fp16 values are exact and only the float32 sums round.
    """
    if x.dtype == out.dtype:
        torch.mm(x, x.T, out=out)
        return
    if x.is_cuda and x.dtype in (torch.bfloat16, torch.float16) and out.dtype == torch.float32:
        try:
            torch.mm(x, x.T, out_dtype=torch.float32, out=out)
            return
        except (TypeError, RuntimeError):  # torch without mm(out_dtype=...): upcast instead
            pass
    with _exact_tf32_for_half_inputs(x):
        wide = x.to(out.dtype)
        torch.mm(wide, wide.T, out=out)


def _start_vectors(gram: torch.Tensor) -> torch.Tensor:
    """(B, n) unit start vectors: the diagonal (positive overlap with the top eigenvector of most PSD
    matrices) plus a fixed pseudo-random part, so that no start is orthogonal to it by symmetry."""
    batch, n = gram.shape[0], gram.shape[-1]
    noise = torch.randn(n, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    noise = (noise / noise.norm()).to(gram.device, gram.dtype)
    diag = gram.diagonal(dim1=-2, dim2=-1)
    v = diag / diag.norm(dim=-1, keepdim=True).clamp_min(torch.finfo(gram.dtype).tiny) + 0.25 * noise
    return v / v.norm(dim=-1, keepdim=True)


def _top_eigenvalue(gram: torch.Tensor, iterations: int, *, rtol: float = 1e-7, check_every: int = 8) -> torch.Tensor:
    """Largest eigenvalue of a batch of PSD matrices (B, n, n), returned in float64 on the CPU (B,).

    Lanczos with full re-orthogonalisation, then Rayleigh-Ritz on the Krylov basis Q: the answer is the
    top eigenvalue θ of ``Qᵀ G Q``, never above λ₁ (interlacing) and at least as good as power iteration
    with the same number of products; it converges like exp(-2k·sqrt(gap)) instead of (λ₂/λ₁)^(2k), so
    clustered top eigenvalues (random-like activations) are resolved too. Each step reads each matrix
    once (memory-bound, like power iteration). Every ``check_every`` steps the Ritz residual
    ``r = ‖G y - θ y‖`` bounds the error by ``min(r, r²/gap)``; the run stops once that is below
    ``rtol·θ`` for every matrix, or after ``min(iterations, n)`` steps.
    """
    batch, n = gram.shape[0], gram.shape[-1]
    steps = max(1, min(iterations, n))
    basis = gram.new_zeros(batch, steps, n)  # rows q_j
    images = gram.new_zeros(batch, steps, n)  # rows G q_j
    # Below this the Krylov space is exhausted (invariant subspace found): stop growing it.
    scale = gram.diagonal(dim1=-2, dim2=-1).sum(-1, keepdim=True)
    breakdown = scale * (n * torch.finfo(gram.dtype).eps)
    q = _start_vectors(gram)
    top = None
    for j in range(steps):
        basis[:, j] = q
        w = torch.bmm(gram, q.unsqueeze(-1)).squeeze(-1)
        images[:, j] = w
        known = basis[:, : j + 1]
        for _ in range(2):  # "twice is enough" (Kahan-Parlett) for an orthonormal basis in finite precision
            w = w - torch.bmm(torch.bmm(w.unsqueeze(1), known.transpose(1, 2)), known).squeeze(1)
        norm = w.norm(dim=-1, keepdim=True)
        q = torch.where(norm > breakdown, w / norm.clamp_min(torch.finfo(gram.dtype).tiny), torch.zeros_like(w))
        k = j + 1
        if k == steps or (k >= 2 * check_every and k % check_every == 0):
            top, converged = _ritz_top(basis[:, :k], images[:, :k], rtol)
            if converged:
                break
    return top


def _ritz_top(basis: torch.Tensor, images: torch.Tensor, rtol: float) -> tuple[torch.Tensor, bool]:
    """Top Ritz value (B,) float64 CPU of Qᵀ G Q, and whether its error bound is below ``rtol`` for all."""
    projected = torch.bmm(basis, images.transpose(1, 2)).double().cpu()  # (B, k, k) = Qᵀ G Q
    projected = (projected + projected.transpose(1, 2)) / 2
    values, vectors = torch.linalg.eigh(projected)
    theta = values[:, -1].clamp_min(0)
    s = vectors[:, :, -1].to(basis.device, basis.dtype).unsqueeze(1)  # (B, 1, k)
    residual = (torch.bmm(s, images) - theta.to(basis.device, basis.dtype)[:, None, None] * torch.bmm(s, basis)).norm(dim=-1)
    residual = residual.squeeze(1).double().cpu()
    gap = (values[:, -1] - values[:, -2]).clamp_min(0) if values.shape[1] > 1 else torch.full_like(theta, float("inf"))
    bound = torch.minimum(residual, residual.square() / gap.clamp_min(torch.finfo(torch.float64).tiny))
    return theta, bool((bound <= rtol * theta).all())


def _srank_from_gram(gram: torch.Tensor, top: torch.Tensor, kind: SRankKind) -> torch.Tensor:
    """Stable ranks (B,) in float64 from grams (B, n, n) and their top eigenvalues (B,) (float64, CPU)."""
    if kind == "pre":
        numerator = gram.diagonal(dim1=-2, dim2=-1).sum(-1).double().cpu()
        value = numerator / top
    else:
        numerator = gram.square().sum((-2, -1)).double().cpu()
        value = numerator / top.square()
    return torch.where(top > 0, value, torch.zeros_like(value))


@dataclass
class FastStableRanks:
    srank_h: torch.Tensor  # (L,) float64, CPU
    srank_g: torch.Tensor  # (L,) float64, CPU
    full_rank: torch.Tensor  # (L,) bool: layers where P = I was certified


def stable_ranks_fast(
    hidden: torch.Tensor | Sequence[torch.Tensor],
    deltas: torch.Tensor | Sequence[torch.Tensor],
    kind_h: SRankKind,
    kind_g: SRankKind,
    *,
    iterations: int = 64,
    compute_dtype: torch.dtype = torch.float32,
    cholesky_chunk: int = 8,
) -> FastStableRanks:
    """Stable ranks for a stack of layers, no eigen-decomposition. hidden: (L, n, d_ff), deltas: (L, n, d_model).

    Either argument may also be a sequence of L per-layer tensors (no stacked copy is made). The 2L
    grams are written into one (2L, n, n) ``compute_dtype`` buffer, from bf16 tensor cores with float32
    accumulation on a GPU; one batched Lanczos run (``iterations`` steps, see :func:`_top_eigenvalue`)
    gives every top eigenvalue. Layers whose ``C_h`` is not certified full rank by a Cholesky
    factorisation get ``full_rank = False``; callers recompute those with :func:`layer_spectrum`.
    """
    n_layers = len(hidden)
    n, d_ff = hidden[0].shape[-2], hidden[0].shape[-1]
    device = hidden[0].device
    grams = torch.empty(2 * n_layers, n, n, dtype=compute_dtype, device=device)
    for layer in range(n_layers):
        # A model split across GPUs (device_map) leaves each layer's tensors on its own GPU: one layer
        # at a time is copied to the first layer's device (a no-op when they are already there).
        _gram_into(grams[layer], hidden[layer].to(device))
        _gram_into(grams[n_layers + layer], deltas[layer].to(device))
    gram_h = grams[:n_layers]
    # Full rank <=> C_h positive definite; Cholesky is the cheapest certificate and never raises with _ex.
    # Chunks bound the factor's memory; the scaling keeps tiny or huge activations inside float range.
    full_rank = torch.zeros(n_layers, dtype=torch.bool, device=device)
    if n <= d_ff:
        for first in range(0, n_layers, cholesky_chunk):
            chunk = gram_h[first : first + cholesky_chunk]
            scale = chunk.diagonal(dim1=-2, dim2=-1).mean(-1).clamp_min(torch.finfo(compute_dtype).tiny)
            _, info = torch.linalg.cholesky_ex(chunk / scale[:, None, None])
            full_rank[first : first + cholesky_chunk] = info == 0
    top = _top_eigenvalue(grams, iterations)
    return FastStableRanks(
        srank_h=_srank_from_gram(gram_h, top[:n_layers], kind_h),
        srank_g=_srank_from_gram(grams[n_layers:], top[n_layers:], kind_g),
        full_rank=full_rank.cpu(),
    )
