"""The reference recipe and the float64 literal formula, for benchmarks and accuracy tests.

Nothing in the engine calls this module. It exists so that speed and accuracy claims can be checked
side by side against:

* :func:`reference_recipe`: the computation path of the published GRADE code. It makes every MLP down
  projection weight trainable, runs ``loss.backward()`` to materialise the weight gradients
  ``g = ∂L/∂W = Δᵀ h`` (d_model x d_ff per layer, in the model's dtype), and then, per layer and in
  float32: ``G = h hᵀ``, ``pinv(G)``, ``M = h gᵀ g hᵀ``, ``C_g = pinv(G) M pinv(G)`` and a full SVD of
  ``C_g``, plus an SVD of ``h hᵀ`` for the hidden-state side.
* :func:`literal_stable_ranks`: the paper's formula evaluated literally in float64 from h and Δ
  (forming g, the pseudo-inverse and ``C_g``, then ``eigvalsh``): slow, but the ground truth that both
  the reference recipe and the engine's fast path are compared against.

Shapes: h is (n, d_ff), Δ is (n, d_model), g is (d_model, d_ff).
"""

from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Callable, Iterator, Sequence

import numpy as np
import torch

from ..models.architectures import down_projections
from ..models.models import model_lock
from .stable_rank import SRankKind, rank_ratio, stable_rank


@dataclass
class RankRatios:
    """Per-layer stable ranks and their ratio (NaN where a solver failed)."""

    srank_h: np.ndarray  # (L,)
    srank_g: np.ndarray  # (L,)
    rank_ratio: np.ndarray  # (L,)
    failures: list[int] = field(default_factory=list)  # layers whose SVD/pinv raised


def _ratios(pairs: Sequence[tuple[float, float]], failures: list[int]) -> RankRatios:
    srank_h = np.array([h for h, _ in pairs], dtype=np.float64)
    srank_g = np.array([g for _, g in pairs], dtype=np.float64)
    ratio = np.array([np.nan if np.isnan(h) or np.isnan(g) else rank_ratio(g, h) for h, g in pairs])
    return RankRatios(srank_h, srank_g, ratio, failures)


# ----------------------------------------------------------------------------- float64 ground truth


def literal_layer(h: torch.Tensor, delta: torch.Tensor, kind_h: SRankKind, kind_g: SRankKind, device=None):
    """(srank_h, srank_g) of one layer by the literal formula in float64.

    ``C_h = h hᵀ``; ``g = Δᵀ h``; ``C_g = C_h⁺ h gᵀ g hᵀ C_h⁺``; eigenvalues by ``eigvalsh``. The
    pseudo-inverse uses torch's default cut (eigenvalues below n·eps·λ₁ count as zero).
    """
    device = device if device is not None else h.device
    h64 = h.detach().to(device, torch.float64)
    d64 = delta.detach().to(device, torch.float64)
    c_h = h64 @ h64.T
    g = d64.T @ h64  # the weight gradient, (d_model, d_ff)
    hg = h64 @ g.T  # (n, d_model)
    pinv = torch.linalg.pinv(c_h, hermitian=True)
    c_g = pinv @ (hg @ hg.T) @ pinv
    c_g = (c_g + c_g.T) / 2  # exact symmetry for eigvalsh; the asymmetry is rounding only
    eig_h = torch.linalg.eigvalsh(c_h).flip(0).cpu()
    eig_g = torch.linalg.eigvalsh(c_g).flip(0).cpu()
    return stable_rank(eig_h, kind_h), stable_rank(eig_g, kind_g)


def literal_stable_ranks(
    hidden: Sequence[torch.Tensor],
    deltas: Sequence[torch.Tensor],
    kind_h: SRankKind = "pre",
    kind_g: SRankKind = "pre",
    *,
    device=None,
    layers: Sequence[int] | None = None,
) -> RankRatios:
    """Literal float64 formula for every layer (or ``layers``). hidden[l]: (n, d_ff), deltas[l]: (n, d_model).

    ``device`` picks where the float64 work runs (default: where the tensors are). Layers not listed in
    ``layers`` get NaN.
    """
    wanted = set(range(len(hidden))) if layers is None else set(layers)
    pairs = [
        literal_layer(h, d, kind_h, kind_g, device) if i in wanted else (np.nan, np.nan)
        for i, (h, d) in enumerate(zip(hidden, deltas))
    ]
    return _ratios(pairs, [])


# ----------------------------------------------------------------------------- the published recipe


def recipe_layer(h: torch.Tensor, weight_grad: torch.Tensor, kind_h: SRankKind, kind_g: SRankKind):
    """The published per-layer computation, in float32. h: (n, d_ff), weight_grad: (d_model, d_ff).

    Raises ``torch.linalg.LinAlgError`` (a RuntimeError) when an SVD does not converge.
    """
    b = h.detach().T.float()  # (d_ff, n)
    a = weight_grad.detach().T.float()  # (d_ff, d_model)
    gram = b.T @ b  # (n, n)
    gram_pinv = torch.linalg.pinv(gram)
    m = b.T @ a @ a.T @ b  # (n, n), evaluated left to right as published
    c_g = gram_pinv @ m @ gram_pinv
    _, s_g, _ = torch.linalg.svd(c_g, full_matrices=False)
    _, s_h, _ = torch.linalg.svd((h.detach() @ h.detach().T).float(), full_matrices=False)
    return stable_rank(s_h.sort(descending=True).values, kind_h), stable_rank(s_g.sort(descending=True).values, kind_g)


def recipe_rank_ratios(
    hidden: Sequence[torch.Tensor],
    weight_grads: Sequence[torch.Tensor],
    kind_h: SRankKind = "pre",
    kind_g: SRankKind = "pre",
) -> RankRatios:
    """The recipe's per-layer spectral step for every layer; a layer whose solver fails gets NaN."""
    pairs, failures = [], []
    for layer, (h, g) in enumerate(zip(hidden, weight_grads)):
        try:
            pairs.append(recipe_layer(h, g, kind_h, kind_g))
        except RuntimeError:  # LinAlgError: SVD / pinv did not converge
            pairs.append((np.nan, np.nan))
            failures.append(layer)
    return _ratios(pairs, failures)


@contextmanager
def _trainable_down_projections(model: torch.nn.Module) -> Iterator[list[torch.nn.Module]]:
    """Down projection weights require grad inside the block; flags and .grad are restored after."""
    modules = down_projections(model)
    params = [m.weight for m in modules]
    flags = [p.requires_grad for p in params]
    try:
        for p in params:
            p.grad = None
            p.requires_grad_(True)
        yield modules
    finally:
        for p, flag in zip(params, flags):
            p.grad = None
            p.requires_grad_(flag)


def reference_weight_gradients(
    model: torch.nn.Module, input_ids: torch.Tensor, loss_fn: Callable[[torch.Tensor], torch.Tensor]
) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
    """Forward + ``loss.backward()`` with trainable down projections, as the published code does.

    input_ids: (1, n). loss_fn: logits (n, vocab) -> scalar. Returns per layer h (n, d_ff) and the
    weight gradient (d_model, d_ff), both in the model's dtype.
    """
    hidden: dict[int, torch.Tensor] = {}
    with model_lock(model), _trainable_down_projections(model) as modules:
        handles = [
            m.register_forward_hook(lambda mod, args, out, i=i: hidden.__setitem__(i, args[0].detach()))
            for i, m in enumerate(modules)
        ]
        try:
            with torch.enable_grad():
                logits = model(input_ids=input_ids, use_cache=False).logits[0]
                loss_fn(logits).backward()
            grads = [m.weight.grad.detach() for m in modules]
        finally:
            for handle in handles:
                handle.remove()
    return [hidden[i][0] for i in range(len(modules))], grads


def reference_recipe(
    model: torch.nn.Module,
    input_ids: torch.Tensor,
    loss_fn: Callable[[torch.Tensor], torch.Tensor],
    kind_h: SRankKind = "pre",
    kind_g: SRankKind = "pre",
) -> RankRatios:
    """The whole published pipeline for one input: weight gradients, then per-layer pinv + SVDs."""
    hidden, grads = reference_weight_gradients(model, input_ids, loss_fn)
    result = recipe_rank_ratios(hidden, grads, kind_h, kind_g)
    del hidden, grads
    return result
