"""Capture ``h`` (input of each MLP down projection) and ``o`` (its output) during one forward pass.

Hooks are registered inside a context manager and always removed. The output of every down projection
is kept in the autograd graph so that ``torch.autograd.grad(loss, capture.outputs)`` returns
``Δ = ∂L/∂o`` for all layers in one activation-only backward pass: no parameter needs ``requires_grad``
and no weight gradient is ever formed.

Two options cut the memory of long inputs (GPU use), both exact:

* ``recompute``: every MLP block keeps only its input (d_model values per token) for the backward
  pass instead of its gate/up activations (3 x d_ff values per token, over half of all saved
  activations of a Llama layer); the backward pass redoes the gate/up projections (not the down
  projection). Costs a second pass of those two products (~10-25% more time for a GRADE pass).
* ``grams``: the hook forms ``C_h = h hᵀ`` (n x n, float32) at once and drops h (n x d_ff), which is
  what the fast path needs; exact spectra need h itself.

A third, ``per_layer``, bounds the memory of the exact route: every decoder layer keeps only its input
(d_model values per token) for the backward pass and runs again there, one layer at a time; h is not kept
from the forward pass but taken from that re-run, and handed with the layer's Δ to ``per_layer(index, h,
Δ)`` as soon as both exist, then dropped. What is held at once is then the layers' inputs and Δ (2 x d_model
values per token and layer) and one layer's activations, instead of every layer's activations and h (4 x
d_ff + ~8 x d_model values per token and layer). Costs one more forward pass.
"""

from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Callable, Iterator

import torch

from ..models.architectures import decoder_layers, down_projections
from ..models.models import model_lock

@dataclass
class MLPCapture:
    """Per-layer tensors of the last forward pass, batch dimension kept.

    hidden[l]: (batch, n, d_ff), detached (None with ``grams``).  outputs[l]: (batch, n, d_model), in
    the autograd graph.  grams[l]: (n, n) float32 ``h hᵀ`` of the first sequence (only with ``grams``).
    """

    hidden: list[torch.Tensor | None] = field(default_factory=list)
    outputs: list[torch.Tensor | None] = field(default_factory=list)
    grams: list[torch.Tensor | None] = field(default_factory=list)
    hidden_width: int | None = None  # d_ff
    deltas: list[torch.Tensor | None] = field(default_factory=list)  # with ``per_layer``: Δ until its h comes

    def complete(self) -> bool:
        features = self.grams if any(g is not None for g in self.grams) else self.hidden
        return all(t is not None for t in features) and all(t is not None for t in self.outputs)


#: MLP classes computing ``down_proj(act_fn(gate_proj(x)) * up_proj(x))``, recomputed by a small
#: autograd function; other MLPs fall back to torch's generic activation checkpointing.
GATED_MLPS = frozenset({"LlamaMLP", "MistralMLP", "Qwen2MLP", "Qwen3MLP", "GemmaMLP", "Gemma2MLP", "Gemma3MLP"})


class _GateUpRecomputed(torch.autograd.Function):
    """``act(gate(x)) * up(x)`` of a gated MLP, keeping only x for the backward pass (which redoes the
    two projections): 1 x d_model values per token instead of 3 x d_ff."""

    @staticmethod
    def forward(ctx, x, mlp):
        ctx.mlp = mlp
        ctx.save_for_backward(x)
        return mlp.act_fn(mlp.gate_proj(x)) * mlp.up_proj(x)

    @staticmethod
    def backward(ctx, grad_h):
        (x,) = ctx.saved_tensors
        mlp = ctx.mlp
        if isinstance(mlp.act_fn, torch.nn.SiLU):  # written out: no graph, no nested autograd call
            gate, up = mlp.gate_proj(x), mlp.up_proj(x)
            grad_gate = torch.ops.aten.silu_backward(grad_h * up, gate)
            grad_up = grad_h * torch.nn.functional.silu(gate)
            return torch.addmm(grad_gate.flatten(0, -2) @ mlp.gate_proj.weight, grad_up.flatten(0, -2),
                               mlp.up_proj.weight).view_as(x), None
        with torch.enable_grad():
            x = x.detach().requires_grad_(True)
            h = mlp.act_fn(mlp.gate_proj(x)) * mlp.up_proj(x)
        return torch.autograd.grad(h, x, grad_h)[0], None


def _mlp_blocks(model: torch.nn.Module, down_projs: list[torch.nn.Module]) -> list[torch.nn.Module]:
    """The MLP module holding each down projection; none where the MLP *is* the decoder layer (OPT)."""
    names = {module: name for name, module in model.named_modules()}
    blocks = []
    for down in down_projs:
        parent_name = names[down].rpartition(".")[0]
        if not isinstance(model.get_submodule(parent_name.rpartition(".")[0]), torch.nn.ModuleList):
            blocks.append(model.get_submodule(parent_name))
    return blocks


def _recompute_forward(mlp: torch.nn.Module):
    """Make ``mlp`` keep only its input for the backward pass; returns an undo function.

    Gated MLPs of known classes use :class:`_GateUpRecomputed` (cheap: one Python call per layer and
    pass); others go through non-reentrant ``torch.utils.checkpoint``, which keeps the graph (so
    ``autograd.grad`` w.r.t. tensors made inside still works) and re-runs the block only up to the last
    tensor the backward needs.
    """
    from torch.utils.checkpoint import checkpoint

    original = mlp.forward
    gated = type(mlp).__name__ in GATED_MLPS

    def forward(x, *args, **kwargs):
        if not (torch.is_grad_enabled() and x.requires_grad):  # nothing to save below the graph's start
            return original(x, *args, **kwargs)
        if gated and not args and not kwargs:
            return mlp.down_proj(_GateUpRecomputed.apply(x, mlp))
        return checkpoint(original, x, *args, use_reentrant=False, **kwargs)

    return _replace_forward(mlp, forward)


def _replace_forward(module: torch.nn.Module, forward) -> Callable[[], None]:
    """Set ``module.forward`` to ``forward`` on the instance; returns the function that puts back what was there
    (the instance's own forward where it had one, else the class's)."""
    had_own = "forward" in module.__dict__
    previous = module.__dict__.get("forward")
    module.forward = forward

    def undo():
        if had_own:
            module.forward = previous
        else:
            del module.forward

    return undo


def _cache_free(kwargs: dict) -> dict:
    """A decoder layer's keyword arguments for its re-run: without the key/value cache, which the first run
    filled and a re-run would fill twice (the prompt's pass starts from an empty cache, so attention over
    the layer's own keys is the same computation)."""
    from transformers.cache_utils import Cache

    return {k: (None if isinstance(v, Cache) else v) for k, v in kwargs.items()}


def _recompute_layer(layer: torch.nn.Module):
    """Make a decoder layer keep only its input for the backward pass, which runs it again (non-reentrant
    ``torch.utils.checkpoint``: the graph stays whole, so Δ of the MLP outputs made inside still comes out
    of ``autograd.grad``); returns an undo function."""
    from torch.utils.checkpoint import checkpoint

    original = layer.forward

    def forward(hidden_states, *args, **kwargs):
        if not (torch.is_grad_enabled() and hidden_states.requires_grad):  # below the graph's start
            return original(hidden_states, *args, **kwargs)
        runs = []

        def run(x):
            runs.append(None)
            return original(x, *args, **(kwargs if len(runs) == 1 else _cache_free(kwargs)))

        return checkpoint(run, hidden_states, use_reentrant=False)

    return _replace_forward(layer, forward)


@contextmanager
def capture_mlp(model: torch.nn.Module, *, recompute: bool = False, grams: bool = False,
                per_layer: Callable[[int, torch.Tensor, torch.Tensor], None] | None = None) -> Iterator[MLPCapture]:
    """Context manager: hooks every down projection of ``model`` while the block runs.

    Holds the model's lock for the whole block, so captures from two threads cannot mix. ``recompute``,
    ``grams`` and ``per_layer`` trade time for memory (see the module docstring); with ``per_layer`` the
    backward pass must run inside the block, and ``capture.hidden`` stays empty.
    """
    from .stable_rank import gram_matrix  # spectra does not import capture; kept local to stay that way

    modules = down_projections(model)
    n_layers = len(modules)
    capture = MLPCapture(hidden=[None] * n_layers, outputs=[None] * n_layers, grams=[None] * n_layers,
                         deltas=[None] * n_layers)

    def hand_over(index: int):
        if capture.hidden[index] is not None and capture.deltas[index] is not None:
            h, delta = capture.hidden[index], capture.deltas[index]
            capture.hidden[index] = capture.deltas[index] = None
            per_layer(index, h[0], delta.reshape(delta.shape[-2:]))

    def make_pre_hook(index: int):
        def pre_hook(module, args):
            h = args[0].detach()
            h = h.unsqueeze(0) if h.dim() == 2 else h
            # The forward's h is kept only where the layer will not run again (the lowest: nothing below it
            # needs a gradient); the others' h comes from their re-run in the backward pass.
            if capture.outputs[index] is not None or not args[0].requires_grad:
                capture.hidden[index] = h
                hand_over(index)

        return pre_hook

    def make_delta_hook(index: int):
        def delta_hook(grad):
            capture.deltas[index] = grad.detach()
            hand_over(index)

        return delta_hook

    def make_hook(index: int):
        def hook(module, args, output):
            if capture.outputs[index] is not None:  # a re-run during backward (checkpointing): keep the forward's
                return None
            h = args[0].detach()
            # OPT flattens (batch, n) into one token axis before its MLP; we analyse one sequence at a time.
            h = h.unsqueeze(0) if h.dim() == 2 else h
            capture.hidden_width = h.shape[-1]
            if grams:
                capture.grams[index] = gram_matrix(h[0])
            elif per_layer is None:
                capture.hidden[index] = h
            if not output.requires_grad:
                # Parameters are frozen, so the lowest MLP output is where the graph must start;
                # everything above depends on it through the residual stream.
                output = output.detach().requires_grad_(True)
            capture.outputs[index] = output
            if per_layer is not None:
                output.register_hook(make_delta_hook(index))
            return output

        return hook

    with model_lock(model):
        handles = [m.register_forward_hook(make_hook(i)) for i, m in enumerate(modules)]
        undo = [_recompute_forward(m) for m in _mlp_blocks(model, modules)] if recompute else []
        if per_layer is not None:
            handles += [m.register_forward_pre_hook(make_pre_hook(i)) for i, m in enumerate(modules)]
            undo += [_recompute_layer(layer) for layer in decoder_layers(model)]
        try:
            yield capture
        finally:
            for handle in handles:
                handle.remove()
            for restore in undo:
                restore()
