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
  fails are checked again in float64 and, where that fails too, go through the exact route
  (:func:`exact_where_uncertified`; :func:`stable_ranks_checked` and
  :func:`stable_ranks_prefixes_checked` are the fast route with that fallback).

Shapes: h is (n, d_ff), Δ is (n, d_model), eigenvalue vectors are (n,), sorted descending.
"""

from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass
from typing import Callable, Literal, Sequence

import numpy as np
import torch

from ..common.errors import NumericalError

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


def rank_ratios(srank_g, srank_h) -> np.ndarray:
    """:func:`rank_ratio` per layer: (L,) float64."""
    return np.array([rank_ratio(float(g), float(h)) for g, h in zip(srank_g, srank_h)])


def range_tolerance(singular_values: torch.Tensor, n: int) -> float:
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
        if n < h64.shape[1]:
            # h is wide (n tokens << d_ff): with hᵀ = QR, h = Rᵀ Qᵀ has the singular values and left
            # singular vectors of the small Rᵀ (n x n). Same numbers as the SVD of h, without forming
            # its right vectors (n x d_ff), which made LAPACK's SVD 6x slower (64 x 8960, one thread).
            r = torch.linalg.qr(h64.T, mode="r")[1]
            u, s, _ = torch.linalg.svd(r.T)
        else:
            u, s, _ = torch.linalg.svd(h64, full_matrices=False)
    except RuntimeError:  # LAPACK's divide-and-conquer can fail to converge; the Gram route cannot
        evals, vecs = torch.linalg.eigh(h64 @ h64.T)
        s, order = evals.clamp_min(0).sqrt().sort(descending=True)
        u = vecs[:, order]
    keep = s > range_tolerance(s, n) if s.numel() else s.bool()
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


def gram_into(out: torch.Tensor, x: torch.Tensor) -> None:
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


def _batched_gram(x: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """``x xᵀ`` per batch entry, (K, n, n) in ``dtype`` for x (K, n, d); half inputs on a GPU use
    tensor cores with a float32 result, as in :func:`gram_into`."""
    if x.dtype != dtype and x.is_cuda and x.dtype in (torch.bfloat16, torch.float16) and dtype == torch.float32:
        try:
            return torch.bmm(x, x.transpose(1, 2), out_dtype=torch.float32)
        except (TypeError, RuntimeError):  # torch without bmm(out_dtype=...)
            pass
    with _exact_tf32_for_half_inputs(x):
        wide = x.to(dtype)
        return torch.bmm(wide, wide.transpose(1, 2))


def gram_matrix(x: torch.Tensor) -> torch.Tensor:
    """``x xᵀ`` (n, n) for x (n, d): float32 (float64 for float64 input), accumulated as in :func:`gram_into`."""
    dtype = torch.float64 if x.dtype == torch.float64 else torch.float32
    out = torch.empty(x.shape[0], x.shape[0], dtype=dtype, device=x.device)
    gram_into(out, x)
    return out


def _start_vectors(gram: torch.Tensor) -> torch.Tensor:
    """(B, 2, n) unit start vectors, two per matrix. The first is the diagonal (positive overlap with the
    top eigenvector of most PSD matrices, e.g. Grams of activations) plus a fixed pseudo-random part;
    the second is a fixed pseudo-random vector on its own. One start can be all but orthogonal to the
    top eigenvector (a gradient Gram of a random-weight model gave an overlap of 3e-5 with the first,
    and Lanczos settled on λ₂, 0.7% low); the chance that both are is negligible."""
    n = gram.shape[-1]
    noise = torch.stack([torch.randn(n, generator=torch.Generator().manual_seed(seed), dtype=torch.float64) for seed in (0, 1)])
    noise = (noise / noise.norm(dim=-1, keepdim=True)).to(gram.device, gram.dtype)
    diag = gram.diagonal(dim1=-2, dim2=-1)
    first = diag / diag.norm(dim=-1, keepdim=True).clamp_min(torch.finfo(gram.dtype).tiny) + 0.25 * noise[0]
    first = first / first.norm(dim=-1, keepdim=True)
    return torch.stack([first, noise[1].expand_as(first)], dim=1)


def top_eigenvalue(gram: torch.Tensor, iterations: int, *, rtol: float = 1e-7, check_every: int = 16) -> torch.Tensor:
    """Largest eigenvalue of a batch of PSD matrices (B, n, n), returned in float64 on the CPU (B,).

    Lanczos with full re-orthogonalisation, then Rayleigh-Ritz on the Krylov basis Q: the answer is the
    top eigenvalue θ of ``Qᵀ G Q``, never above λ₁ (interlacing) and at least as good as power iteration
    with the same number of products; it converges like exp(-2k·sqrt(gap)) instead of (λ₂/λ₁)^(2k), so
    clustered top eigenvalues (random-like activations) are resolved too. Two Krylov sequences per
    matrix, from different starts (see :func:`_start_vectors`), guard against a start nearly orthogonal
    to the top eigenvector; each step reads each matrix once for both (memory-bound, like power iteration). Every ``check_every`` steps the Ritz residual
    ``r = ‖G y - θ y‖`` bounds the error by ``min(r, r²/gap)``; a matrix is done once that is below
    ``rtol·θ``, and the run stops when all are, or after ``min(iterations, n)`` steps.
    """
    batch, n = gram.shape[0], gram.shape[-1]
    steps = max(1, min(iterations, n))
    starts = _start_vectors(gram)  # (B, S, n): S Krylov sequences per matrix, sharing each read of it
    per_matrix = starts.shape[1]
    sequences = batch * per_matrix  # sequence r belongs to matrix r // S
    basis = gram.new_zeros(sequences, steps, n)  # rows q_j
    images = gram.new_zeros(sequences, steps, n)  # rows G q_j
    # trace >= λ₁, so a residual below 16·eps·trace is rounding noise of G q: the Krylov space is exhausted.
    breakdown = gram.diagonal(dim1=-2, dim2=-1).sum(-1, keepdim=True) * (16 * torch.finfo(gram.dtype).eps)
    breakdown = breakdown.repeat_interleave(per_matrix, dim=0)
    q = starts.reshape(sequences, n)
    theta = torch.zeros(sequences, dtype=torch.float64)
    pending = torch.arange(sequences)  # sequences whose θ has not met the tolerance yet
    for j in range(steps):
        basis[:, j] = q
        w = torch.bmm(gram, q.view(batch, per_matrix, n).transpose(1, 2)).transpose(1, 2).reshape(sequences, n)
        images[:, j] = w
        known = basis[:, : j + 1]
        for _ in range(2):  # "twice is enough" (Kahan-Parlett) for an orthonormal basis in finite precision
            w = torch.baddbmm(w.unsqueeze(1), torch.bmm(w.unsqueeze(1), known.transpose(1, 2)), known, alpha=-1).squeeze(1)
        norm = w.norm(dim=-1, keepdim=True)
        q = torch.where(norm > breakdown, w / norm.clamp_min(torch.finfo(gram.dtype).tiny), torch.zeros_like(w))
        k = j + 1
        if k == steps or k % check_every == 0:  # a check costs a small eigh per matrix on the CPU: not every step
            if len(pending) == sequences:
                values, done = _ritz_top(basis[:, :k], images[:, :k], rtol)
            else:
                rows = pending.to(gram.device)
                values, done = _ritz_top(basis[rows, :k], images[rows, :k], rtol)
            theta[pending] = values
            pending = pending[~done]
            if len(pending) == 0:
                break
    return theta.view(batch, per_matrix).amax(dim=1)  # Ritz values never exceed λ₁: the larger is closer


#: The largest Ritz problem (k x k) solved on the GPU; larger ones go to the host (see :func:`_ritz_top`).
SMALL_EIGH_ON_GPU = 32


def _ritz_top(basis: torch.Tensor, images: torch.Tensor, rtol: float) -> tuple[torch.Tensor, torch.Tensor]:
    """Top Ritz value (B,) float64 CPU of Qᵀ G Q, and whether its error bound is below ``rtol·θ`` (B,)."""
    # (B, k, k) = Qᵀ G Q in float64, on a GPU where it is (a batch of small eigh there is one launch; on the
    # host it was a third of a batched analysis's spectra time), else on the CPU
    projected = torch.bmm(basis, images.transpose(1, 2)).double()
    projected = (projected + projected.transpose(1, 2)) / 2
    if projected.is_cuda and projected.shape[-1] > SMALL_EIGH_ON_GPU:
        # above 32 rows cuSOLVER's batched (Jacobi) eigh gives way to one solver call per matrix: slower than the host
        projected = projected.cpu()
    values, vectors = torch.linalg.eigh(projected)
    theta = values[:, -1].clamp_min(0)
    s = vectors[:, :, -1].to(device=basis.device, dtype=basis.dtype).unsqueeze(1)  # (B, 1, k)
    residual = (torch.bmm(s, images) - theta.to(device=basis.device, dtype=basis.dtype)[:, None, None]
                * torch.bmm(s, basis)).norm(dim=-1)
    residual = residual.squeeze(1).double().cpu()
    values, theta = values.cpu(), theta.cpu()
    gap = (values[:, -1] - values[:, -2]).clamp_min(0) if values.shape[1] > 1 else torch.full_like(theta, float("inf"))
    bound = torch.minimum(residual, residual.square() / gap.clamp_min(torch.finfo(torch.float64).tiny))
    return theta, bound <= rtol * theta


def _stable_ranks_of(grams: torch.Tensor, kind: SRankKind, top: torch.Tensor, traces: torch.Tensor) -> torch.Tensor:
    """Stable ranks (B,) float64 CPU from grams (B, n, n), their top eigenvalues and traces (float64, CPU)."""
    if kind == "pre":
        value = traces / top
    else:
        value = grams.square().sum((-2, -1)).double().cpu() / top.square()
    return torch.where(top > 0, value, torch.zeros_like(value))


def _traces(grams: torch.Tensor) -> torch.Tensor:
    """Traces (B,) float64 CPU: one transfer, and a cheap NaN/inf test (a bad entry of h or Δ reaches them)."""
    return grams.diagonal(dim1=-2, dim2=-1).sum(-1).double().cpu()


def _require_finite(traces_h: torch.Tensor, traces_g: torch.Tensor, n_layers: int) -> None:
    """Raise for the first layer whose h or Δ is not finite; traces are laid out (..., L) flattened."""
    for what, traces in (("activation h", traces_h), ("gradient Δ", traces_g)):
        bad = torch.nonzero(~torch.isfinite(traces)).flatten()
        if len(bad):
            raise NumericalError(
                f"layer {int(bad[0]) % n_layers} {what} contains NaN or inf values; the model may be unstable in this dtype (try float32)"
            )


_STREAMS: dict = {}


def _side_streams(device: torch.device, count: int, offset: int = 0) -> list:
    """The same CUDA side streams on every call: the caching allocator keeps memory per stream, so
    fresh streams each time would mean fresh allocations (and their cost) each time."""
    key = torch.device(device).index if torch.device(device).index is not None else torch.cuda.current_device()
    pool = _STREAMS.setdefault(key, [])
    while len(pool) < offset + count:
        pool.append(torch.cuda.Stream(torch.device("cuda", key)))
    return pool[offset : offset + count]


#: A layer the float32 Cholesky could not certify is checked again in float64 before the exact route:
#: its smallest eigenvalue must clear the literal formula's pinv cut (λ > λ₁·n·eps, see
#: :func:`range_tolerance`) by this factor, far above the rounding error of a float64 Gram (~n·eps·λ₁).
FLOAT64_CERTIFICATE_MARGIN = 1e3


def full_rank_in_float64(h: torch.Tensor) -> bool:
    """Whether ``C_h = h hᵀ`` (h: (n, d_ff)) is full rank under the literal formula's cut, so ``P = I``.

    The float32 certificate fails once ``C_h``'s condition number nears 1/(n·eps₃₂) ~ 1e5, which long
    inputs reach (activations of 700 tokens: 1e6-1e8) while the float64 cut is ~1e-13 of λ₁. Eigenvalues
    alone (no vectors) cost about an eighth of the exact route's SVD, and the fast route's stable ranks
    of that layer stay valid when this returns True.
    """
    n, width = h.shape[-2], h.shape[-1]
    if n > width:
        return False
    h64 = h.detach().to("cpu", torch.float64)
    try:
        eig = torch.linalg.eigvalsh(h64 @ h64.T)
    except RuntimeError:  # no convergence: leave it to the exact route
        return False
    top = eig[-1]
    return bool(top > 0 and eig[0] > FLOAT64_CERTIFICATE_MARGIN * top * n * torch.finfo(torch.float64).eps)


def cholesky_info(gram_h: torch.Tensor | Sequence[torch.Tensor], chunk: int) -> torch.Tensor:
    """Per matrix (L,), on the device: 0 if safely positive definite, else the order of the first
    leading minor that is not.

    Safely: every pivot of the Cholesky factorisation (of the matrix scaled to mean diagonal 1) is
    at least n·eps of the compute dtype. A plain ``info == 0`` is not enough: rounding lets float32
    Cholesky succeed on exactly singular grams (say, two identical rows of h), where the float64
    formula's pseudo-inverse cuts a direction and P != I. On the CPU, chunks of ``chunk`` matrices
    bound the extra memory (a scaled copy and the factor); on a GPU, one matrix per stream.
    """
    n_mats = len(gram_h)
    device = gram_h[0].device
    info = torch.zeros(n_mats, dtype=torch.int64, device=device)
    if gram_h[0].is_cuda and CERTIFICATE_STREAMS > 1 and gram_h[0].shape[-1] >= CERTIFICATE_STREAMS_MIN_N:
        # cuSOLVER factors a batch one matrix after another, each latency-bound on a few SMs: one
        # matrix per stream, several streams at once.
        main = torch.cuda.current_stream(device)
        streams = _side_streams(device, min(CERTIFICATE_STREAMS, n_mats), offset=1)
        for stream in streams:
            stream.wait_stream(main)
        for i in range(n_mats):
            with torch.cuda.stream(streams[i % len(streams)]):
                info[i : i + 1] = _first_bad_pivot(_scaled(gram_h[i].unsqueeze(0)))
        for stream in streams:
            main.wait_stream(stream)
        return info
    if gram_h[0].is_cuda:  # a GPU's memory takes larger chunks, and each chunk is a few launches
        chunk = max(chunk, GPU_CHOLESKY_CHUNK)
    for first in range(0, n_mats, chunk):
        info[first : first + chunk] = _first_bad_pivot(_scaled(torch.stack([gram_h[i] for i in range(first, min(n_mats, first + chunk))])))
    return info


#: Concurrent CUDA streams for the certificate of matrices of at least CERTIFICATE_STREAMS_MIN_N rows
#: (smaller ones: one batched call on one stream, fewer launches). Measured on an H200: 32 matrices of
#: 2048 took 17 ms on 4 streams and 25 ms batched; at 1024 rows, 14 ms vs 7.5 ms.
CERTIFICATE_STREAMS = 4
CERTIFICATE_STREAMS_MIN_N = 1536
#: Matrices per batched Cholesky call on a GPU below CERTIFICATE_STREAMS_MIN_N rows (at most 2 x 64 x 1536² float32
#: values, 1.2 GB, at once).
GPU_CHOLESKY_CHUNK = 64


def _scaled(block: torch.Tensor) -> torch.Tensor:
    """A copy of (B, n, n) scaled to mean diagonal 1 (keeps tiny or huge activations in float range)."""
    return block / block.diagonal(dim1=-2, dim2=-1).mean(-1).clamp_min(torch.finfo(block.dtype).tiny)[:, None, None]


def _first_bad_pivot(block: torch.Tensor) -> torch.Tensor:
    """(B,) 1-based position of the first Cholesky pivot below n·eps (or where LAPACK stopped), 0 if none."""
    n = block.shape[-1]
    factor, lapack = torch.linalg.cholesky_ex(block)
    pivots = factor.diagonal(dim1=-2, dim2=-1).square()
    positions = torch.arange(n, device=block.device)
    bad = ~(pivots >= n * torch.finfo(block.dtype).eps) | ((lapack[:, None] > 0) & (positions >= lapack[:, None] - 1))
    return torch.where(bad.any(-1), bad.to(torch.int8).argmax(-1) + 1, 0)


def _start_cholesky(gram_h: torch.Tensor | Sequence[torch.Tensor], chunk: int):
    """Launch the full-rank certificate and return a function that gives its pivots (L,) on the CPU.

    On a GPU it runs on a side stream: the factorisations are latency-bound, so they overlap with the
    bandwidth-bound Lanczos products. The grams must stay alive until the function is called.
    """
    if not gram_h[0].is_cuda:
        info = cholesky_info(gram_h, chunk).cpu()
        return lambda: info
    main = torch.cuda.current_stream(gram_h[0].device)
    side = _side_streams(gram_h[0].device, 1)[0]
    side.wait_stream(main)
    with torch.cuda.stream(side):
        info = cholesky_info(gram_h, chunk)

    def result() -> torch.Tensor:
        main.wait_stream(side)
        return info.cpu()

    return result


def start_full_rank_certificate(hidden_grams: Sequence[torch.Tensor], hidden_width: int | None, *, chunk: int = 8):
    """Start the Cholesky certificate of each layer's ``h hᵀ`` now (on a GPU: in the background, e.g.
    during the backward pass); returns a function giving ``full_rank`` (L,) bool, for
    :func:`stable_ranks_fast`'s ``certificate``."""
    n = hidden_grams[0].shape[0]
    if hidden_width is not None and n > hidden_width:
        return lambda: torch.zeros(len(hidden_grams), dtype=torch.bool)
    pivots = _start_cholesky(hidden_grams, chunk)
    return lambda: pivots() == 0


@dataclass
class FastStableRanks:
    srank_h: torch.Tensor  # (L,) float64, CPU
    srank_g: torch.Tensor  # (L,) float64, CPU
    full_rank: torch.Tensor  # (L,) bool: layers where P = I was certified


def stable_ranks_fast(
    hidden: torch.Tensor | Sequence[torch.Tensor] | None,
    deltas: torch.Tensor | Sequence[torch.Tensor],
    kind_h: SRankKind,
    kind_g: SRankKind,
    *,
    iterations: int = 128,
    compute_dtype: torch.dtype = torch.float32,
    cholesky_chunk: int = 8,
    hidden_grams: Sequence[torch.Tensor] | None = None,
    hidden_width: int | None = None,
    certificate=None,
) -> FastStableRanks:
    """Stable ranks for a stack of layers, no eigen-decomposition. hidden: (L, n, d_ff), deltas: (L, n, d_model).

    Either argument may also be a sequence of L per-layer tensors (no stacked copy is made). The 2L
    grams are written into one (2L, n, n) ``compute_dtype`` buffer, from bf16 tensor cores with float32
    accumulation on a GPU; one batched Lanczos run (``iterations`` steps, see :func:`top_eigenvalue`)
    gives every top eigenvalue. Layers whose ``C_h`` is not certified full rank by a Cholesky
    factorisation get ``full_rank = False``; callers check those with :func:`full_rank_in_float64` and
    recompute the ones it rejects with :func:`layer_spectrum`.
    With ``hidden_grams`` (L x (n, n), ``h hᵀ`` formed earlier, see :func:`gram_matrix`) ``hidden`` may
    be None; ``hidden_width`` (d_ff) then decides whether full rank is possible at all, and
    ``certificate`` may be the result of :func:`start_full_rank_certificate` on those grams.
    Raises :class:`NumericalError` if h or Δ of a layer is not finite.
    """
    n_layers = len(deltas)
    n = deltas[0].shape[-2]
    d_ff = hidden_width if hidden is None else hidden[0].shape[-1]
    device = deltas[0].device
    grams = torch.empty(2 * n_layers, n, n, dtype=compute_dtype, device=device)
    for layer in range(n_layers):
        # A model split across GPUs (device_map) leaves each layer's tensors on its own GPU: one layer
        # at a time is copied to the first layer's device (a no-op when they are already there).
        if hidden_grams is not None:
            grams[layer].copy_(hidden_grams[layer])
        else:
            gram_into(grams[layer], hidden[layer].to(device))
        gram_into(grams[n_layers + layer], deltas[layer].to(device))
    return _fast_of_grams(grams, d_ff, kind_h, kind_g, iterations=iterations, cholesky_chunk=cholesky_chunk,
                          certificate=certificate)


def _fast_of_grams(grams: torch.Tensor, d_ff: int, kind_h: SRankKind, kind_g: SRankKind, *, iterations: int = 128,
                   cholesky_chunk: int = 8, certificate=None) -> FastStableRanks:
    """:func:`stable_ranks_fast` from its buffer: grams (2L, n, n), the L ``h hᵀ`` then the L ``Δ Δᵀ``."""
    n_layers = grams.shape[0] // 2
    traces = _traces(grams)
    _require_finite(traces[:n_layers], traces[n_layers:], n_layers)
    gram_h = grams[:n_layers]
    # Full rank <=> C_h positive definite; Cholesky is the cheapest certificate and never raises with _ex.
    if certificate is None:
        certificate = start_full_rank_certificate(gram_h, d_ff, chunk=cholesky_chunk)
    top = top_eigenvalue(grams, iterations)
    full_rank = certificate()
    return FastStableRanks(
        srank_h=_stable_ranks_of(gram_h, kind_h, top[:n_layers], traces[:n_layers]),
        srank_g=_stable_ranks_of(grams[n_layers:], kind_g, top[n_layers:], traces[n_layers:]),
        full_rank=full_rank,
    )


def stable_ranks_prefixes(
    hidden: Sequence[torch.Tensor],
    deltas: Sequence[torch.Tensor],
    ends: Sequence[int],
    kind_h: SRankKind,
    kind_g: SRankKind,
    *,
    iterations: int = 128,
    compute_dtype: torch.dtype = torch.float32,
    cholesky_chunk: int = 8,
    max_buffer_bytes: int = 1 << 29,
) -> FastStableRanks:
    """Fast-route stable ranks of K prefixes of one sequence (step-wise ``pos``); results are (K, L).

    hidden: L x (N, d_ff) for the whole sequence; deltas: L x (K, N, d_model), step k's Δ (zero past
    its prefix); ends: the K prefix lengths. Step k needs ``C_h`` of the first ``ends[k]`` tokens, the
    leading block of the full ``h hᵀ``: that is formed once per layer, and one Cholesky factorisation of
    it certifies every prefix shorter than its first failing pivot (leading minors of a positive definite
    matrix are positive definite). All (step, layer) grams go zero-padded (same trace, norm and top
    eigenvalue) into batches of at most ``max_buffer_bytes`` for one Lanczos run each.
    """
    n_layers, n_steps = len(deltas), len(ends)
    d_ff = hidden[0].shape[-1]
    device = deltas[0].device
    full_h = torch.empty(n_layers, hidden[0].shape[0], hidden[0].shape[0], dtype=compute_dtype, device=device)
    for layer in range(n_layers):
        gram_into(full_h[layer], hidden[layer].to(device))
    _require_finite(_traces(full_h), torch.zeros(1), n_layers)
    pivots = _start_cholesky(full_h, cholesky_chunk)()
    ends_t = torch.tensor(list(ends))
    full_rank = ((pivots[None, :] == 0) | (ends_t[:, None] < pivots[None, :])) & (ends_t[:, None] <= d_ff)
    srank_h = torch.zeros(n_steps, n_layers, dtype=torch.float64)
    srank_g = torch.zeros(n_steps, n_layers, dtype=torch.float64)
    first = 0
    while first < n_steps:  # chunks of steps whose zero-padded grams fit the buffer
        last = first + 1
        while last < n_steps and (last + 1 - first) * 2 * n_layers * ends[last] ** 2 * 4 <= max_buffer_bytes:
            last += 1
        size = max(ends[first:last])
        grams = torch.zeros(last - first, 2 * n_layers, size, size, dtype=compute_dtype, device=device)
        for i, k in enumerate(range(first, last)):
            grams[i, :n_layers, : ends[k], : ends[k]] = full_h[:, : ends[k], : ends[k]]
        for layer in range(n_layers):  # Δ_k is zero past its prefix, so its full gram is already padded
            grams[:, n_layers + layer] = _batched_gram(deltas[layer][first:last, :size].to(device), compute_dtype)
        flat = grams.view(-1, size, size)
        traces = _traces(flat).view(last - first, 2 * n_layers)
        _require_finite(torch.zeros(1), traces[:, n_layers:].flatten(), n_layers)
        top = top_eigenvalue(flat, iterations).view(last - first, 2 * n_layers)
        srank_h[first:last] = _stable_ranks_of(grams[:, :n_layers].reshape(-1, size, size), kind_h,
                                               top[:, :n_layers].flatten(), traces[:, :n_layers].flatten()).view(-1, n_layers)
        srank_g[first:last] = _stable_ranks_of(grams[:, n_layers:].reshape(-1, size, size), kind_g,
                                               top[:, n_layers:].flatten(), traces[:, n_layers:].flatten()).view(-1, n_layers)
        del grams, flat
        first = last
    return FastStableRanks(srank_h=srank_h, srank_g=srank_g, full_rank=full_rank)


# --------------------------------------------------------------------------------------------------
# the fast route with its exact fallback


def exact_where_uncertified(
    srank_h: np.ndarray,
    srank_g: np.ndarray,
    full_rank,
    layer_pair: Callable[[int], tuple[torch.Tensor, torch.Tensor]],
    kind_h: SRankKind,
    kind_g: SRankKind,
) -> dict[int, LayerSpectrum]:
    """The fast route's fallback, in place: every layer the Cholesky certificate left uncertified
    (``full_rank`` False) is checked again in float64 (:func:`full_rank_in_float64`); where that fails
    too, its stable ranks are recomputed by the exact route (:func:`layer_spectrum`).

    srank_h, srank_g: (L,) float64 arrays from the fast route, corrected in place. ``layer_pair(l)``
    gives that layer's (h (n, d_ff), Δ (n, d_model)). Returns the exact spectra computed, by layer.
    """
    exact: dict[int, LayerSpectrum] = {}
    for layer in np.flatnonzero(~np.asarray(full_rank, dtype=bool)).tolist():
        h, delta = layer_pair(layer)
        if full_rank_in_float64(h):
            continue
        spec = layer_spectrum(h, delta)
        srank_h[layer] = stable_rank(spec.eig_h, kind_h)
        srank_g[layer] = stable_rank(spec.eig_g, kind_g)
        exact[layer] = spec
    return exact


@dataclass
class CheckedStableRanks:
    """Per-layer stable ranks (L,) float64 from the fast route, corrected where it could not certify
    full rank; ``exact``: the layers that took the exact route, with their spectra."""

    srank_h: np.ndarray
    srank_g: np.ndarray
    exact: dict[int, LayerSpectrum]

    @property
    def rank_ratio(self) -> np.ndarray:
        return rank_ratios(self.srank_g, self.srank_h)


def stable_ranks_checked(
    hidden: Sequence[torch.Tensor] | None,
    deltas: Sequence[torch.Tensor],
    kind_h: SRankKind,
    kind_g: SRankKind,
    *,
    hidden_grams: Sequence[torch.Tensor] | None = None,
    hidden_width: int | None = None,
    fetch_hidden: Callable[[list[int]], dict[int, torch.Tensor]] | None = None,
) -> CheckedStableRanks:
    """:func:`stable_ranks_fast` and then :func:`exact_where_uncertified`: the stable ranks of every
    layer, as the exact route would give them. hidden: L x (n, d_ff) (or None with ``hidden_grams``:
    then ``fetch_hidden(layers)`` must return h of the layers that need the exact route), deltas:
    L x (n, d_model)."""
    fast = stable_ranks_fast(hidden, deltas, kind_h, kind_g, hidden_grams=hidden_grams, hidden_width=hidden_width)
    srank_h = fast.srank_h.double().cpu().numpy().copy()
    srank_g = fast.srank_g.double().cpu().numpy().copy()
    full_rank = fast.full_rank.cpu().numpy()
    if hidden is None:
        uncertified = np.flatnonzero(~full_rank).tolist()
        hidden = fetch_hidden(uncertified) if uncertified else {}
    exact = exact_where_uncertified(srank_h, srank_g, full_rank, lambda l: (hidden[l], deltas[l]), kind_h, kind_g)
    return CheckedStableRanks(srank_h, srank_g, exact)


def _row_grams(hidden: Sequence[Sequence[torch.Tensor]], deltas: Sequence[Sequence[torch.Tensor]],
               compute_dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """:func:`stable_ranks_fast`'s buffer for R rows of one length on one GPU, (2·R·L, n, n) with row k's layer l at
    k·L + l in each half, each layer's R grams from one batched product: 2L launches instead of 2RL (at the 8B
    shape, a batch of 16 launched 1,024 small products one by one)."""
    rows, n_layers = len(deltas), len(deltas[0])
    n, device = deltas[0][0].shape[-2], deltas[0][0].device
    grams = torch.empty(2 * rows * n_layers, n, n, dtype=compute_dtype, device=device)
    for layer in range(n_layers):
        for offset, tensors in ((0, hidden), (rows * n_layers, deltas)):
            stacked = torch.stack([t[layer].to(device) for t in tensors])  # (R, n, width): one row of the batch each
            grams[offset + layer: offset + rows * n_layers: n_layers] = _batched_gram(stacked, compute_dtype)
    return grams


def stable_ranks_checked_rows(
    hidden: Sequence[Sequence[torch.Tensor]],
    deltas: Sequence[Sequence[torch.Tensor]],
    kind_h: SRankKind,
    kind_g: SRankKind,
    *,
    max_buffer_bytes: int | None = None,
) -> list[CheckedStableRanks | None]:
    """:func:`stable_ranks_checked` of R rows of a batched pass (each row its own question), rows of the same
    length in one fast-route run: their R·L layers' grams in one buffer and one Lanczos run, so a batch costs a
    few launches and host round trips per length instead of per row. hidden[r]: L x (n_r, d_ff), deltas[r]:
    L x (n_r, d_model). Returns one :class:`CheckedStableRanks` per row, None for a row whose h or Δ is not
    finite (its caller redoes it alone, where the error names the layer). The values are each row's own
    :func:`stable_ranks_checked` (every matrix's Lanczos sequences and certificate are its own).
    ``max_buffer_bytes`` bounds one run's buffers (default: 4 GiB on a GPU, 256 MiB on a CPU)."""
    if max_buffer_bytes is None:
        max_buffer_bytes = (1 << 32) if deltas and deltas[0][0].is_cuda else (1 << 28)
    out: list[CheckedStableRanks | None] = [None] * len(hidden)
    by_length: dict[int, list[int]] = {}
    for r, row in enumerate(deltas):
        by_length.setdefault(row[0].shape[-2], []).append(r)
    for n, rows in by_length.items():
        n_layers = len(deltas[rows[0]])
        per_row = 2 * n_layers * n * n * 4 * 3  # the grams, and Lanczos's basis and images at up to n steps
        step = max(1, max_buffer_bytes // per_row)
        for first in range(0, len(rows), step):
            chunk = rows[first:first + step]
            try:
                # one batched product per layer on a GPU, where launches are the cost; on a CPU each matrix's own
                # product, as stable_ranks_checked forms it (the same rounding, and no stacked copy of h)
                if deltas[chunk[0]][0].is_cuda and len(chunk) > 1:
                    fast = _fast_of_grams(_row_grams([hidden[r] for r in chunk], [deltas[r] for r in chunk]),
                                          hidden[chunk[0]][0].shape[-1], kind_h, kind_g)
                else:
                    fast = stable_ranks_fast([h for r in chunk for h in hidden[r]],
                                             [d for r in chunk for d in deltas[r]], kind_h, kind_g)
            except NumericalError:
                if len(chunk) == 1:
                    continue
                for r in chunk:  # which row is not finite: each alone
                    out[r] = stable_ranks_checked_rows([hidden[r]], [deltas[r]], kind_h, kind_g)[0]
                continue
            srank_h = fast.srank_h.double().cpu().numpy().reshape(len(chunk), n_layers)
            srank_g = fast.srank_g.double().cpu().numpy().reshape(len(chunk), n_layers)
            full_rank = fast.full_rank.cpu().numpy().reshape(len(chunk), n_layers)
            for k, r in enumerate(chunk):
                sh, sg = srank_h[k].copy(), srank_g[k].copy()
                exact = exact_where_uncertified(sh, sg, full_rank[k], lambda l, r=r: (hidden[r][l], deltas[r][l]),
                                                kind_h, kind_g)
                out[r] = CheckedStableRanks(sh, sg, exact)
    return out


def stable_ranks_prefixes_checked(
    hidden: Sequence[torch.Tensor],
    deltas: Sequence[torch.Tensor],
    ends: Sequence[int],
    kind_h: SRankKind,
    kind_g: SRankKind,
) -> list[CheckedStableRanks]:
    """:func:`stable_ranks_prefixes` and then :func:`exact_where_uncertified` for every prefix: one
    :class:`CheckedStableRanks` per step. hidden: L x (N, d_ff); deltas: L x (K, N, d_model)."""
    fast = stable_ranks_prefixes(hidden, deltas, ends, kind_h, kind_g)
    out = []
    for k, end in enumerate(ends):
        srank_h, srank_g = fast.srank_h[k].numpy().copy(), fast.srank_g[k].numpy().copy()
        exact = exact_where_uncertified(srank_h, srank_g, fast.full_rank[k].numpy(),
                                        lambda l, k=k, end=end: (hidden[l][:end], deltas[l][k, :end]), kind_h, kind_g)
        out.append(CheckedStableRanks(srank_h, srank_g, exact))
    return out
