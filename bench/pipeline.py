"""The pieces the benchmarks time or check, built from the engine's own functions.

* :func:`floor_pass`: the physical floor of a GRADE pass: one forward (logits of the last position
  only) and one activation-only backward down to the lowest MLP output (the deepest point any Δ needs).
* :func:`capture_tensors`: h and Δ of every layer exactly as :func:`grade.analyze` computes them, for
  comparing the spectral routes on identical inputs.
* :func:`prefix_recompute`: step-wise GRADE_pos the slow way, one forward + backward per prefix.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from grade.gradients.analysis import activation_grads, forward_with_capture, layer_features, srank_kinds
from grade.models.architectures import down_projections
from grade.models.models import model_lock
from grade.gradients.losses import entropy_at_last_position, response_cross_entropy
from grade.models.models import LoadedModel


def floor_pass(lm: LoadedModel, input_ids: torch.Tensor) -> None:
    """Forward (last-position logits) + activation-only backward to the lowest down projection's output.

    input_ids: (1, n). No activation is captured and no weight gradient is formed; this is the least
    work that yields every Δ.
    """
    lowest: list[torch.Tensor] = []

    def start_graph(module, args, output):
        output = output.detach().requires_grad_(True)
        lowest.append(output)
        return output

    model = lm.model
    with model_lock(model), torch.enable_grad():
        handle = down_projections(model)[0].register_forward_hook(start_graph)
        try:
            logits = model(input_ids=input_ids, use_cache=False, logits_to_keep=1).logits[0]
        finally:
            handle.remove()
        torch.autograd.grad(entropy_at_last_position(logits), lowest)


@dataclass
class Captured:
    hidden: list[torch.Tensor]  # L x (n, d_ff)
    deltas: list[torch.Tensor]  # L x (n, d_model)
    loss: float


def capture_tensors(lm: LoadedModel, input_ids: list[int], *, span: tuple[int, int] | None = None) -> Captured:
    """h and Δ of every layer for the ``pre`` loss, or for the mean cross-entropy of tokens ``span``."""
    logits_from = len(input_ids) - 1 if span is None else span[0] - 1
    with torch.enable_grad():
        capture, logits, first, _, _ = forward_with_capture(lm, input_ids, False, logits_from)
        if span is None:
            loss = entropy_at_last_position(logits)
        else:
            ids = torch.tensor(input_ids[first:], device=logits.device)
            loss = response_cross_entropy(logits, ids, span[0] - first, span[1] - first)
        deltas = activation_grads(loss, capture.outputs)
    return Captured([h[0] for h in capture.hidden], [d[0] for d in deltas], float(loss.detach()))


def capture_steps(lm: LoadedModel, input_ids: list[int], spans: list[tuple[int, int]]) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
    """One forward and the batched backward of the step-wise pos path: h per layer (n, d_ff) and Δ per
    layer (K, n, d_model), as :func:`grade.analyze` computes them for ``steps=True``."""
    with torch.enable_grad():
        capture, logits, first, _, _ = forward_with_capture(lm, input_ids, False, spans[0][0] - 1)
        ids = torch.tensor(input_ids[first:], device=logits.device)
        losses = torch.stack([response_cross_entropy(logits, ids, s - first, e - first) for s, e in spans])
        deltas = activation_grads(losses, capture.outputs)
    return [h[0] for h in capture.hidden], deltas


def prefix_recompute(lm: LoadedModel, input_ids: list[int], spans: list[tuple[int, int]], srank: str = "paper"):
    """Step-wise rank ratios the slow way: for step k, run the engine's pass on the prefix ending with
    step k (logits only where the loss needs them). Returns a (K, L) array."""
    kinds = srank_kinds("pos", srank)
    ratios = []
    for start, end in spans:
        captured = capture_tensors(lm, input_ids[:end], span=(start, end))
        ratios.append(layer_features(captured.hidden, captured.deltas, kinds, False)[2])
        del captured
    return np.array(ratios)
