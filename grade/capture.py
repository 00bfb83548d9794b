"""Capture ``h`` (input of each MLP down projection) and ``o`` (its output) during one forward pass.

Hooks are registered inside a context manager and always removed. The output of every down projection
is kept in the autograd graph so that ``torch.autograd.grad(loss, capture.outputs)`` returns
``Δ = ∂L/∂o`` for all layers in one activation-only backward pass: no parameter needs ``requires_grad``
and no weight gradient is ever formed.
"""

from __future__ import annotations

import threading
import weakref
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Iterator

import torch

from .architectures import down_projections

_model_locks: "weakref.WeakKeyDictionary[torch.nn.Module, threading.RLock]" = weakref.WeakKeyDictionary()
_registry_lock = threading.Lock()


def model_lock(model: torch.nn.Module) -> threading.RLock:
    """One re-entrant lock per model object: hooks are per module, so two analyses must not overlap."""
    with _registry_lock:
        lock = _model_locks.get(model)
        if lock is None:
            lock = _model_locks[model] = threading.RLock()
        return lock


@dataclass
class MLPCapture:
    """Per-layer tensors of the last forward pass, batch dimension kept.

    hidden[l]: (batch, n, d_ff), detached.  outputs[l]: (batch, n, d_model), in the autograd graph.
    """

    hidden: list[torch.Tensor | None] = field(default_factory=list)
    outputs: list[torch.Tensor | None] = field(default_factory=list)

    def complete(self) -> bool:
        return all(t is not None for t in self.hidden) and all(t is not None for t in self.outputs)


@contextmanager
def capture_mlp(model: torch.nn.Module) -> Iterator[MLPCapture]:
    """Context manager: hooks every down projection of ``model`` while the block runs.

    Holds the model's lock for the whole block, so captures from two threads cannot mix.
    """
    modules = down_projections(model)
    capture = MLPCapture(hidden=[None] * len(modules), outputs=[None] * len(modules))

    def make_hook(index: int):
        def hook(module, args, output):
            h = args[0].detach()
            # OPT flattens (batch, n) into one token axis before its MLP; we analyse one sequence at a time.
            capture.hidden[index] = h.unsqueeze(0) if h.dim() == 2 else h
            if not output.requires_grad:
                # Parameters are frozen, so the lowest MLP output is where the graph must start;
                # everything above depends on it through the residual stream.
                output = output.detach().requires_grad_(True)
            capture.outputs[index] = output
            return output

        return hook

    with model_lock(model):
        handles = [m.register_forward_hook(make_hook(i)) for i, m in enumerate(modules)]
        try:
            yield capture
        finally:
            for handle in handles:
                handle.remove()
