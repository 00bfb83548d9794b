"""``analyze``: one question in, one :class:`~grade.gradients.result.GradeResult` out.

Pipeline (the stages of :func:`analyze`): prepare the inputs (tokenise, generate or encode the response, cut
the steps) -> one forward pass with hooks (h and o of every MLP down projection) -> loss -> one
activation-only backward pass (``Δ = ∂L/∂o``) -> per-layer spectra -> stable ranks and rank ratios ->
the result. Step-wise ``pos`` needs one backward pass per step: its steps go in groups that share a
forward pass over their prefix, sized so that their Δ fit a memory bound (on a CPU one pass per prefix
where that is cheaper).
"""

from __future__ import annotations

import inspect
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Literal

import numpy as np
import torch

from .. import __version__
from ..common.progress import report
from ..models.cancel import check_cancelled
from .capture import capture_mlp
from ..common.errors import InputError, NumericalError
from ..common.visible import validate_question
from ..models.generation import PromptPass, encode_prompt, greedy_answer, left_padded, output_cache
from .losses import Step, entropy_at_last_position, response_cross_entropy, steps_for_response, token_surprisal
from ..models.models import LoadedModel
from ..tasks.prompts import format_prompt
from .memory import (DEFAULT_STEP_MEMORY_MB, _delta_bytes_per_token, layer_by_layer_fits_better,
                     prefix_passes_are_cheaper, step_pieces)
from .result import GradeResult, StepResult
from .stable_rank import (
    SRankKind,
    check_finite,
    layer_spectrum,
    rank_ratios,
    stable_rank,
    stable_ranks_checked,
    stable_ranks_checked_rows,
    stable_ranks_prefixes_checked,
)
from ..tasks.tasks import answer_format

LossKind = Literal["pre", "pos"]
SRankVariant = Literal["paper", "sum", "squared"]

DEFAULT_MAX_TOKENS = 4096
#: ``low_memory=None`` turns the low-memory capture on for CUDA inputs of at least this many tokens.
LOW_MEMORY_MIN_TOKENS = 256


def srank_kinds(loss: LossKind, variant: SRankVariant) -> tuple[SRankKind, SRankKind]:
    """Which stable-rank formula the C_h and C_g sides use.

    ``paper``: Σλ/λ₁ for ``pre``, Σλ²/λ₁² for ``pos`` (the paper's equations, our default).
    ``sum`` / ``squared``: one formula for every loss (the reference code's CE features use ``sum``).
    """
    if variant == "paper":
        kind: SRankKind = "pre" if loss == "pre" else "pos"
    elif variant in ("sum", "squared"):
        kind = "pre" if variant == "sum" else "pos"
    else:
        raise InputError(f"unknown stable-rank variant {variant!r}; use paper, sum or squared")
    return kind, kind


def _encode(lm: LoadedModel, text: str) -> list[int]:
    """Ids of a response or other continuation: no special tokens added."""
    return lm.tokenizer(text, add_special_tokens=False)["input_ids"]


def _accepts_logits_to_keep(model: torch.nn.Module) -> bool:
    try:
        return "logits_to_keep" in inspect.signature(model.forward).parameters
    except (TypeError, ValueError):
        return False


def _forward(lm: LoadedModel, input_ids: list[int], keep_hidden: bool):
    """Forward pass with capture; returns (capture, logits (n, vocab), hidden states or None)."""
    capture, logits, _, hidden_states, _ = forward_with_capture(lm, input_ids, keep_hidden, 0)
    return capture, logits, hidden_states


def forward_with_capture(
    lm: LoadedModel, input_ids: list[int], keep_hidden: bool, logits_from: int, *, low_memory: bool = False,
    keep_cache: bool = False,
):
    """Forward pass with capture; returns (capture, logits (n - first, vocab), first, hidden states or None,
    the key/value cache or None).

    Only positions ``first..n-1`` get logits (``first`` is ``logits_from`` where the model supports
    ``logits_to_keep``, else 0): the LM head's product, its backward and the (n, vocab) buffers are the
    largest avoidable costs of a GRADE pass, and the losses read a few rows only. ``low_memory``
    captures with activation recomputation and keeps ``h hᵀ`` instead of h (see :mod:`grade.gradients.capture`).
    ``keep_cache`` also returns the pass's key/value cache (still attached to the autograd graph).
    """
    with captured_forward(lm, input_ids, keep_hidden, logits_from, low_memory=low_memory,
                          keep_cache=keep_cache) as passed:
        return passed


@contextmanager
def captured_forward(lm: LoadedModel, input_ids: list[int], keep_hidden: bool, logits_from: int, *,
                     low_memory: bool = False, keep_cache: bool = False, per_layer=None):
    """:func:`forward_with_capture` whose hooks stay on until the block ends: with ``per_layer`` (the layer by
    layer route of :func:`grade.gradients.capture.capture_mlp`) the backward pass must run inside it."""
    ids = torch.tensor([input_ids], device=lm.device)
    first = logits_from if logits_from > 0 and _accepts_logits_to_keep(lm.model) else 0
    extra = {"logits_to_keep": len(input_ids) - first} if first else {}
    with capture_mlp(lm.model, recompute=low_memory, grams=low_memory, per_layer=per_layer) as capture:
        out = lm.model(input_ids=ids, use_cache=keep_cache, output_hidden_states=keep_hidden, **extra)
        yield (capture, out.logits[0], first, (out.hidden_states if keep_hidden else None),
               output_cache(out) if keep_cache else None)


def activation_grads(losses: torch.Tensor, outputs: list[torch.Tensor], batched: bool | None = None) -> list[torch.Tensor]:
    """Δ for every layer: (K, n, d_model) per layer for K losses; ``batched``: one batched backward
    pass for all K (default: everywhere but on a CPU), else K backward passes over the same graph."""
    # Outputs are (1, n, d), or (n, d) where the model flattens tokens (OPT); either way one sequence.
    if losses.dim() == 0:
        return [g.reshape(1, *g.shape[-2:]) for g in torch.autograd.grad(losses, outputs)]
    # On a GPU the K backward passes batched into one (K·n rows per matrix product) cost little more
    # than one pass, which is bound by kernel launches at these sizes. A CPU is bound by arithmetic
    # either way, and there the batched (vmap) kernels were 1.5x slower than K plain backward passes
    # over the same graph (SmolLM2, K = 16 steps, 707 tokens: 157 s vs 100 s on one loaded core).
    if batched is None:
        batched = losses.device.type != "cpu"
    if batched:
        eye = torch.eye(losses.numel(), device=losses.device, dtype=losses.dtype)
        try:
            # retain_graph: an op without a batching rule can fail midway, after the backward pass has
            # already freed part of the graph, and the fallback below needs the whole graph again
            # (seen with Qwen2.5 on an H200: "Trying to backward through the graph a second time").
            grads = torch.autograd.grad(losses, outputs, grad_outputs=eye, is_grads_batched=True, retain_graph=True)
            return [g.reshape(len(eye), *g.shape[-2:]) for g in grads]
        except RuntimeError:  # an op without a batching rule: one backward per loss instead
            pass
    # Each loss's Δ goes straight into its row: stacking a list of them would hold every Δ twice at the end.
    out: list[torch.Tensor] = []
    for k, loss in enumerate(losses):
        check_cancelled()
        grads = torch.autograd.grad(loss, outputs, retain_graph=True)
        if not out:
            out = [torch.empty((len(losses), *g.shape[-2:]), dtype=g.dtype, device=g.device) for g in grads]
        for layer, g in enumerate(grads):
            out[layer][k] = g.reshape(g.shape[-2:])
        del grads
    return out


def _hidden_of_layers(lm: LoadedModel, input_ids: list[int], layers: list[int]) -> dict[int, torch.Tensor]:
    """h (n, d_ff) of some layers, from one more forward pass without gradients (the low-memory path
    keeps only h hᵀ; layers the fast route cannot certify need h itself)."""
    ids = torch.tensor([input_ids], device=lm.device)
    extra = {"logits_to_keep": 1} if _accepts_logits_to_keep(lm.model) else {}
    with torch.no_grad(), capture_mlp(lm.model) as capture:
        lm.model(input_ids=ids, use_cache=False, **extra)
    return {layer: capture.hidden[layer][0] for layer in layers}


def _fast_features_from_grams(grams: list[torch.Tensor], deltas: list[torch.Tensor], kinds, hidden_width: int, fetch_hidden):
    """Fast-path (srank_h, srank_g, ratio) from ``h hᵀ`` per layer (n, n) and Δ per layer (n, d_model);
    ``fetch_hidden(layers)`` returns h for the layers that need the exact route."""
    # stable_ranks_fast raises NumericalError for a non-finite h or Δ (their grams' traces show it).
    checked = stable_ranks_checked(None, deltas, *kinds, hidden_grams=grams, hidden_width=hidden_width,
                                   fetch_hidden=fetch_hidden)
    return checked.srank_h, checked.srank_g, checked.rank_ratio


def _full_rank_row_sums(deltas: list[torch.Tensor], exact: dict) -> np.ndarray:
    """Row sums of C_g per layer without an eigen-decomposition where C_h has full row rank (P = I, so
    C_g = Δ Δᵀ: Δ (Δᵀ 1) in float64), the exact spectra's elsewhere (``exact``: layer -> spectrum, see
    :func:`grade.gradients.stable_rank.exact_where_uncertified`). deltas[l]: (n, d_model) -> (L, n)."""
    rows = np.stack([(d.double() @ d.double().sum(0)).cpu().numpy() for d in deltas])
    for layer, spec in exact.items():
        rows[layer] = spec.row_sums_g.numpy()
    return rows


class _LayerSpectra:
    """The exact route's per-layer numbers, filled one layer at a time (in any order: the streamed pass hands
    layers over as its backward pass reaches them). Call with (layer, h (n, d_ff), Δ (n, d_model))."""

    def __init__(self, n_layers: int, n: int, kinds):
        self.kinds = kinds
        self.srank_h, self.srank_g = np.zeros(n_layers), np.zeros(n_layers)
        self.eig_h, self.eig_g, self.rows = np.zeros((n_layers, n)), np.zeros((n_layers, n)), np.zeros((n_layers, n))

    def __call__(self, layer: int, h: torch.Tensor, delta: torch.Tensor) -> None:
        check_cancelled()  # a float64 eigen-decomposition per layer: the longest stretch without a check
        check_finite(h, f"layer {layer} activation h")
        check_finite(delta, f"layer {layer} gradient Δ")
        spec = layer_spectrum(h, delta)
        self.srank_h[layer] = stable_rank(spec.eig_h, self.kinds[0])
        self.srank_g[layer] = stable_rank(spec.eig_g, self.kinds[1])
        self.eig_h[layer], self.eig_g[layer], self.rows[layer] = \
            spec.eig_h.numpy(), spec.eig_g.numpy(), spec.row_sums_g.numpy()


def layer_features(hidden: list[torch.Tensor], deltas: list[torch.Tensor], kinds, spectra: bool,
                   row_sums: bool = False):
    """Per-layer (srank_h, srank_g, ratio) and, with ``spectra``, eigenvalues and row sums (with
    ``row_sums`` and no ``spectra``: row sums from the fast route, no eigenvalues).

    hidden[l]: (n, d_ff), deltas[l]: (n, d_model).
    """
    n_layers = len(hidden)
    kind_h, kind_g = kinds
    srank_h = np.zeros(n_layers)
    srank_g = np.zeros(n_layers)
    eig_h = eig_g = rows = None
    if spectra:
        spectra_of = _LayerSpectra(n_layers, hidden[0].shape[0], kinds)
        for layer in range(n_layers):
            spectra_of(layer, hidden[layer], deltas[layer])
        srank_h, srank_g, eig_h, eig_g, rows = spectra_of.srank_h, spectra_of.srank_g, spectra_of.eig_h, \
            spectra_of.eig_g, spectra_of.rows
    else:
        checked = stable_ranks_checked(hidden, deltas, kind_h, kind_g)  # per-layer lists: no stacked copies
        srank_h[:], srank_g[:] = checked.srank_h, checked.srank_g
        rows = _full_rank_row_sums(deltas, checked.exact) if row_sums else None
    return srank_h, srank_g, rank_ratios(srank_g, srank_h), eig_h, eig_g, rows


@dataclass
class _Inputs:
    """What the passes analyse: the prompt, the response and the steps, as token ids."""

    question: str
    prompt: str
    prompt_ids: list[int]
    response: str | None
    response_ids: list[int]
    step_spans: list[Step]

    @property
    def input_ids(self) -> list[int]:
        return self.prompt_ids + self.response_ids


@dataclass
class _Features:
    """What the passes measured (arrays per layer; ``steps`` for step-wise ``pos``)."""

    srank_h: np.ndarray
    srank_g: np.ndarray
    rank_ratio: np.ndarray
    loss_value: float
    eig_h: np.ndarray | None = None
    eig_g: np.ndarray | None = None
    token_scores: np.ndarray | None = None
    surprisal: np.ndarray | None = None
    hidden_states: tuple | None = None
    steps: list[StepResult] = field(default_factory=list)
    prompt_cache: object | None = None  # ``pre`` with keep_prompt_pass: the pass's key/value cache ...
    last_logits: torch.Tensor | None = None  # ... and its last position's logits (vocab,)


def _encoded_prompt(lm: LoadedModel, question: str, *, context, task, prompt, max_tokens
                    ) -> tuple[str, str, list[int], int]:
    """``(question, prompt, prompt_ids, limit)``: the checked question, its prompt and token ids, and the most tokens
    prompt and response may have together; a prompt over that limit is refused."""
    question = validate_question(question)
    if prompt is None:
        prompt = format_prompt(lm.tokenizer, question, task=task, context=context)
    # The same encoding the label sampler used: a base model's plain prompt needs its BOS token.
    prompt_ids = encode_prompt(lm.tokenizer, prompt)
    limit = min(max_tokens, lm.max_context)
    if len(prompt_ids) > limit:
        raise InputError(f"the prompt has {len(prompt_ids)} tokens; this model accepts at most {limit}")
    return question, prompt, prompt_ids, limit


def _answer_length(task: str, max_new_tokens: int | None, room: int) -> int:
    """Tokens a generated response may have: the task's answer length (or ``max_new_tokens``) within the ``room``
    the context leaves. Bounded before generating: an answer that could not fit would be refused after it."""
    return min(answer_format(task, max_new_tokens).max_new_tokens, room)


def _prepare_inputs(lm: LoadedModel, question: str, *, context, task, loss, response, generate, steps,
                    max_new_tokens, max_tokens, prompt, timings, answer=None) -> _Inputs:
    """Check the request, build and encode the prompt, get the response (given, generated within the
    context left, or ``answer``: that generation already made, by :func:`analyze_batch`) and cut it into steps;
    every refusal comes before a pass over the model."""
    question, prompt, prompt_ids, limit = _encoded_prompt(lm, question, context=context, task=task, prompt=prompt,
                                                          max_tokens=max_tokens)
    if loss not in ("pre", "pos"):
        raise InputError(f"unknown loss {loss!r}; use pre or pos")
    response_ids: list[int] = []
    if loss == "pos":
        if generate:
            if answer is None:
                check_cancelled()
                t = time.perf_counter()
                answer = greedy_answer(lm, prompt_ids, task=task,
                                       max_new_tokens=_answer_length(task, max_new_tokens, limit - len(prompt_ids)))
                timings["generate_s"] = time.perf_counter() - t
            response_ids = answer.answer_ids
            response = lm.tokenizer.decode(response_ids, skip_special_tokens=True)
        elif response is not None and response.strip():
            response_ids = _encode(lm, response)
        if not response_ids:
            raise InputError("the pos loss needs a non-empty response (give one, or ask to generate)")
        if len(prompt_ids) + len(response_ids) > limit:
            raise InputError(
                f"prompt and response have {len(prompt_ids) + len(response_ids)} tokens; this model accepts at most {limit}"
            )
    step_spans = steps_for_response(lm.tokenizer, response_ids, len(prompt_ids), response) if loss == "pos" and steps else []
    return _Inputs(question, prompt, prompt_ids, response if loss == "pos" else None, response_ids, step_spans)


def _one_loss_pass(lm: LoadedModel, inputs: _Inputs, loss: LossKind, kinds, *, spectra: bool, keep_hidden: bool,
                   low_memory: bool, layer_by_layer: bool, row_sums: bool, keep_cache: bool,
                   timings: dict) -> _Features:
    """``pre``, or ``pos`` of the whole response: one forward pass, one loss, one backward pass, spectra
    (with ``layer_by_layer``, in the backward pass: see :func:`grade.gradients.capture.capture_mlp`)."""
    input_ids, n_prompt = inputs.input_ids, len(inputs.prompt_ids)
    check_cancelled()
    t = time.perf_counter()
    # Layer by layer (bounded memory, one more forward pass): the exact spectra, computed as the backward
    # pass reaches each layer.
    by_layer = _LayerSpectra(lm.n_layers, len(input_ids), kinds) if layer_by_layer else None
    logits_from = len(input_ids) - 1 if loss == "pre" else n_prompt - 1
    with torch.enable_grad(), captured_forward(lm, input_ids, keep_hidden, logits_from, low_memory=low_memory,
                                               keep_cache=keep_cache, per_layer=by_layer) as passed:
        capture, logits, first, hidden_states, cache = passed
        last_logits = logits[-1].detach() if keep_cache else None
        timings["forward_s"] = time.perf_counter() - t
        # logits[i] belongs to position first + i; shifting the ids and spans by `first` keeps the losses' indexing.
        ids = torch.tensor(input_ids[first:], device=logits.device)
        if loss == "pre":
            value = entropy_at_last_position(logits)
        else:
            value = response_cross_entropy(logits, ids, n_prompt - first, len(input_ids) - first)
        if not torch.isfinite(value):
            raise NumericalError("the loss is NaN or inf; the model may be unstable in this dtype (try float32)")
        surprisal = None
        if loss == "pos":
            surprisal = np.full(len(input_ids), np.nan)
            surprisal[n_prompt:] = token_surprisal(logits, ids, n_prompt - first, len(input_ids) - first).cpu().numpy()
        check_cancelled()
        t = time.perf_counter()
        if by_layer is not None:  # Δ of every layer reaches by_layer through its hook; only the lowest is asked for
            torch.autograd.grad(value, capture.outputs[0])
            if any(h is not None for h in capture.hidden) or any(d is not None for d in capture.deltas):
                raise NumericalError("a layer's activations and gradient did not meet in the backward pass")
        else:
            deltas = [d[0] for d in activation_grads(value, capture.outputs)]  # (n, d_model) per layer
        timings["backward_s"] = time.perf_counter() - t
        hidden = [h[0] for h in capture.hidden] if not (low_memory or by_layer) else None  # (n, d_ff) per layer
        grams, hidden_width = capture.grams, capture.hidden_width
        del capture, logits, passed

    t = time.perf_counter()
    token_scores = eig_h = eig_g = None
    if by_layer is not None:  # spectra were computed in the backward pass (its seconds count there)
        srank_h, srank_g, eig_h, eig_g, rows = by_layer.srank_h, by_layer.srank_g, by_layer.eig_h, by_layer.eig_g, \
            by_layer.rows
        ratio = rank_ratios(srank_g, srank_h)
        if loss == "pos":
            token_scores = np.full_like(rows, np.nan)
            token_scores[:, n_prompt:] = rows[:, n_prompt:]
    elif low_memory:
        srank_h, srank_g, ratio = _fast_features_from_grams(grams, deltas, kinds, hidden_width,
                                                            lambda layers: _hidden_of_layers(lm, input_ids, layers))
    else:
        srank_h, srank_g, ratio, eig_h, eig_g, rows = layer_features(hidden, deltas, kinds, spectra, row_sums)
        if loss == "pos" and rows is not None:
            token_scores = np.full_like(rows, np.nan)
            token_scores[:, n_prompt:] = rows[:, n_prompt:]
    timings["spectra_s"] = time.perf_counter() - t
    return _Features(srank_h, srank_g, ratio, float(value.detach()), eig_h, eig_g, token_scores, surprisal,
                     hidden_states, prompt_cache=cache, last_logits=last_logits)


def _step_group(lm: LoadedModel, input_ids: list[int], spans: list[Step], kinds, *, spectra: bool, keep_hidden: bool,
                row_sums: bool, surprisal: np.ndarray, timings: dict, done: int = 0, total: int | None = None):
    """One group of consecutive steps: a forward pass over the prefix ending with the group's last step, one
    backward pass per step, its steps' features. Same values as the whole sequence's pass (causal
    attention: a prefix's activations are the full sequence's). Fills ``surprisal`` for the group's tokens;
    returns (StepResult per step, hidden states of the pass or None). Reports each step as its features are done
    (``done`` steps before the group, of ``total``): one group may hold every step of a trace."""
    end = spans[-1].end
    t = time.perf_counter()
    with torch.enable_grad():
        capture, logits, first, hidden_states, _ = forward_with_capture(lm, input_ids[:end], keep_hidden,
                                                                        spans[0].start - 1)
        timings["forward_s"] += time.perf_counter() - t
        ids = torch.tensor(input_ids[first:end], device=logits.device)
        losses = torch.stack([response_cross_entropy(logits, ids, s.start - first, s.end - first) for s in spans])
        surprisal[spans[0].start : end] = token_surprisal(logits, ids, spans[0].start - first, end - first).cpu().numpy()
        if not torch.isfinite(losses).all():
            raise NumericalError("the loss is NaN or inf; the model may be unstable in this dtype (try float32)")
        check_cancelled()
        t = time.perf_counter()
        # One step: its scalar loss, exactly the per-prefix pass; several: one backward per step (K, n, d_model).
        deltas = activation_grads(losses if len(spans) > 1 else losses[0], capture.outputs)
        timings["backward_s"] += time.perf_counter() - t
    hidden = [h[0] for h in capture.hidden]  # (n, d_ff) per layer
    del capture, logits

    t = time.perf_counter()
    n_layers, results = len(deltas), []
    # Several steps share their grams through the prefix route of the fast stable ranks; one step is one sequence.
    shared = stable_ranks_prefixes_checked(hidden, deltas, [s.end for s in spans], *kinds) \
        if len(spans) > 1 and not spectra else None
    for k, step in enumerate(spans):
        check_cancelled()
        step_deltas = [d[k, : step.end] for d in deltas]
        if shared is not None:
            sh, sg, ratio = shared[k].srank_h, shared[k].srank_g, shared[k].rank_ratio
            rows = _full_rank_row_sums(step_deltas, shared[k].exact) if row_sums else None
            eh = eg = None
        else:
            sh, sg, ratio, eh, eg, rows = layer_features([h[: step.end] for h in hidden], step_deltas, kinds, spectra,
                                                         row_sums)
        scores = rows[:, step.start : step.end] if rows is not None else np.full((n_layers, step.end - step.start), np.nan)
        results.append(StepResult(step.text, step.start, step.end, float(losses[k].detach()), sh, sg, ratio, scores, eh, eg))
        if total is not None and k + 1 < len(spans):  # the group's last step is reported by the caller
            report(done + k + 1, total, "steps")
    timings["spectra_s"] += time.perf_counter() - t
    return results, hidden_states


def _stepwise_passes(lm: LoadedModel, inputs: _Inputs, kinds, *, spectra: bool, keep_hidden: bool, row_sums: bool,
                     by_prefix: bool, budget_bytes: int | None, timings: dict) -> _Features:
    """Step-wise ``pos``: the steps in groups (:func:`step_pieces`; one per prefix with ``by_prefix``), each
    group's pass freed before the next, so that what is held at once is bounded by ``budget_bytes`` and one
    prefix's pass, not by the number of steps. Features are the means over steps."""
    input_ids, spans = inputs.input_ids, inputs.step_spans
    groups = [range(k, k + 1) for k in range(len(spans))] if by_prefix else \
        step_pieces([s.end for s in spans], _delta_bytes_per_token(lm), budget_bytes)
    timings.update(forward_s=0.0, backward_s=0.0, spectra_s=0.0, step_pieces=float(len(groups)))
    surprisal = np.full(len(input_ids), np.nan)
    steps, hidden_states = [], None
    report(0, len(spans), "steps")
    for i, group in enumerate(groups):
        check_cancelled()
        results, states = _step_group(lm, input_ids, [spans[k] for k in group], kinds, spectra=spectra,
                                      keep_hidden=keep_hidden and i == 0, row_sums=row_sums, surprisal=surprisal,
                                      timings=timings, done=len(steps), total=len(spans))
        steps += results
        hidden_states = states if states is not None else hidden_states
        report(len(steps), len(spans), "steps")
    token_scores = np.full((len(steps[0].srank_h), len(input_ids)), np.nan)
    for step in steps:
        token_scores[:, step.start : step.end] = step.token_scores
    return _Features(
        srank_h=np.mean([s.srank_h for s in steps], axis=0),
        srank_g=np.mean([s.srank_g for s in steps], axis=0),
        rank_ratio=np.mean([s.rank_ratio for s in steps], axis=0),
        loss_value=float(np.mean([s.loss_value for s in steps])),
        token_scores=token_scores, surprisal=surprisal, hidden_states=hidden_states, steps=steps,
    )


def _assemble_result(lm: LoadedModel, inputs: _Inputs, features: _Features, *, loss: LossKind, srank: SRankVariant,
                     task: str, context: str | None, timings: dict) -> GradeResult:
    last_hidden = None
    if features.hidden_states is not None:
        last = len(inputs.prompt_ids) - 1
        # .cpu() per layer: under a device_map the hidden states live on several GPUs.
        last_hidden = torch.stack([hs[0, last].detach().float().cpu() for hs in features.hidden_states]).numpy()
    prompt_pass = None
    if features.prompt_cache is not None and last_hidden is not None:
        prompt_pass = PromptPass.detached(inputs.prompt_ids, features.prompt_cache, features.last_logits, last_hidden)
    input_ids = inputs.input_ids
    return GradeResult(
        model=lm.name,
        loss=loss,
        srank=srank,
        task=task,
        question=inputs.question,
        context=context,
        prompt=inputs.prompt,
        response=inputs.response,
        input_ids=list(input_ids),
        tokens=lm.tokenizer.convert_ids_to_tokens(input_ids),
        response_start=len(inputs.prompt_ids) if loss == "pos" else None,
        loss_value=features.loss_value,
        srank_h=features.srank_h,
        srank_g=features.srank_g,
        rank_ratio=features.rank_ratio,
        eig_h=features.eig_h,
        eig_g=features.eig_g,
        token_scores=features.token_scores,
        last_hidden=last_hidden,
        token_surprisal=features.surprisal,
        steps=features.steps,
        timings=timings,
        package_version=__version__,
        prompt_pass=prompt_pass,
    )


def _low_memory_default(lm: LoadedModel, n_tokens: int) -> bool:
    """The grams route (:func:`captured_forward`'s ``low_memory``) where it pays: on a GPU from
    :data:`LOW_MEMORY_MIN_TOKENS` tokens on; below a few hundred tokens activations are small and launches dominate."""
    return torch.device(lm.device).type == "cuda" and n_tokens >= LOW_MEMORY_MIN_TOKENS


def analyze(
    lm: LoadedModel,
    question: str,
    *,
    context: str | None = None,
    task: str = "qa",
    loss: LossKind = "pre",
    response: str | None = None,
    generate: bool = False,
    steps: bool = False,
    srank: SRankVariant = "paper",
    spectra: bool = True,
    keep_hidden: bool = False,
    max_new_tokens: int | None = None,
    max_tokens: int = DEFAULT_MAX_TOKENS,
    prompt: str | None = None,
    low_memory: bool | None = None,
    step_passes: Literal["auto", "shared", "prefix"] = "auto",
    token_scores: bool | None = None,
    step_memory_mb: float | None = DEFAULT_STEP_MEMORY_MB,
    keep_prompt_pass: bool = False,
    memory_mb: float | None = None,
) -> GradeResult:
    """GRADE features of one question.

    Parameters
    ----------
    lm : a model from :func:`grade.load_model`.
    question, context : the question and an optional supporting document.
    task : prompt style, see :data:`grade.tasks.prompts.TASKS`.
    loss : ``"pre"`` (entropy after the prompt) or ``"pos"`` (cross-entropy of the response).
    response : the response to score under ``pos``; with ``generate=True`` the model's greedy answer
        is used (and reported) instead: its own tokens, up to the task's stop rule
        (:func:`grade.models.generation.greedy_answer`).
    max_new_tokens : with ``generate``: the answer's length; default: the task's
        (:func:`grade.tasks.tasks.answer_format`).
    steps : under ``pos``, cut the response into punctuation-delimited steps, one loss per step.
    srank : stable-rank formula, see :func:`srank_kinds`.
    spectra : compute full eigenvalue spectra and token scores (exact, float64). ``False`` takes the
        fast path (stable-rank identities only), for batch feature extraction.
    keep_hidden : also keep the last prompt token's hidden state at every layer (for baselines).
    max_tokens : refuse inputs longer than this (and always longer than the model's context).
    prompt : a ready prompt text, bypassing the chat template (``question`` is still recorded).
    low_memory : for the fast path with one loss: recompute MLP activations during the backward pass
        and keep ``h hᵀ`` instead of h (on Llama-3.1-8B shapes about half the peak memory for 10-25%
        more time; results are the same). ``None`` (default) turns it on for CUDA devices from
        :data:`LOW_MEMORY_MIN_TOKENS` tokens on, where memory is the limit; on CPUs arithmetic is.
    step_passes : how step-wise ``pos`` gets each step's Δ: ``"shared"`` (one forward pass over the whole
        sequence, one backward per step), ``"prefix"`` (one forward and backward pass per prefix) or
        ``"auto"`` (the cheaper, see :func:`prefix_passes_are_cheaper`). The results are the same up to
        rounding.
    token_scores : per-token epistemic shock (row sums of C_g) under ``pos``; default: with ``spectra``.
        Without spectra they come from ``C_g = Δ Δᵀ`` on layers whose C_h is certified full rank (the
        exact route elsewhere): the same values without any eigen-decomposition.
    step_memory_mb : step-wise ``pos`` sharing a pass holds every step's Δ, (K, n, d_model) per layer;
        with a bound, the steps are computed in groups whose Δ fit it (:func:`step_pieces`: each group one
        forward pass over its prefix), with the same features up to rounding. ``None``: one group.
    memory_mb : a bound (MB) on what the analysis holds beyond the model: where the whole pass's estimate
        (:func:`analysis_memory_bytes`) is over it, the exact route runs layer by layer (one more forward
        pass; the same numbers up to rounding). ``None``: the whole pass.
    keep_prompt_pass : under ``pre``, keep the forward pass's key/value cache, last logits and last hidden
        states as ``result.prompt_pass`` (:class:`grade.models.generation.PromptPass`, not saved with the result), so
        that a pass over an answer (the detectors') need not run the prompt again. Implies ``keep_hidden``.

    Returns
    -------
    GradeResult with ``rank_ratio`` of shape (L,).

    Raises
    ------
    grade.models.cancel.Cancelled : inside :func:`grade.models.cancel.cancellable` once its event is set (checked between
        passes, step groups, steps and layers).
    """
    timings: dict[str, float] = {}
    t0 = time.perf_counter()
    if step_passes not in ("auto", "shared", "prefix"):
        raise InputError(f"unknown step_passes {step_passes!r}; use auto, shared or prefix")
    if step_memory_mb is not None and not step_memory_mb > 0:
        raise InputError(f"step_memory_mb must be positive (or None for no bound), not {step_memory_mb!r}")
    inputs = _prepare_inputs(lm, question, context=context, task=task, loss=loss, response=response,
                             generate=generate, steps=steps, max_new_tokens=max_new_tokens, max_tokens=max_tokens,
                             prompt=prompt, timings=timings)
    kinds = srank_kinds(loss, srank)
    # Token scores without spectra: row sums from the fast route.
    row_sums = bool(token_scores) and not spectra and loss == "pos"
    if inputs.step_spans:
        by_prefix = step_passes == "prefix" or (step_passes == "auto" and prefix_passes_are_cheaper(
            lm.device, [s.end for s in inputs.step_spans], len(inputs.input_ids)))
        budget = None if step_memory_mb is None else int(step_memory_mb * 1024 * 1024)
        features = _stepwise_passes(lm, inputs, kinds, spectra=spectra, keep_hidden=keep_hidden, row_sums=row_sums,
                                    by_prefix=by_prefix, budget_bytes=budget, timings=timings)
    else:
        if low_memory is None:
            low_memory = _low_memory_default(lm, len(inputs.input_ids))
        keep_cache = keep_prompt_pass and loss == "pre"
        n_response = len(inputs.response_ids) if loss == "pos" else 0
        features = _one_loss_pass(lm, inputs, loss, kinds, spectra=spectra, keep_hidden=keep_hidden or keep_cache,
                                  low_memory=low_memory and not spectra and not steps and not row_sums,
                                  layer_by_layer=spectra and layer_by_layer_fits_better(
                                      lm, len(inputs.input_ids), n_response, memory_mb),
                                  row_sums=row_sums, keep_cache=keep_cache, timings=timings)
    timings["total_s"] = time.perf_counter() - t0
    return _assemble_result(lm, inputs, features, loss=loss, srank=srank, task=task, context=context, timings=timings)


# --------------------------------------------------------------------------------------------------
# many questions at once


def analyze_batch(lm: LoadedModel, requests: list[dict], *, loss: LossKind = "pre", srank: SRankVariant = "paper",
                  keep_hidden: bool = False, batch_size: int | None = None) -> list:
    """:func:`analyze` of many questions with ``spectra=False`` (the fast path), one result per request in order:
    a :class:`GradeResult`, or the :class:`~grade.common.errors.GradeError` that refused that request (one bad
    question never stops the others).

    ``requests``: keyword arguments of :func:`analyze` per question (``question`` and optionally ``context``,
    ``task``, ``prompt``, ``response``, ``generate``, ``steps``, ``max_new_tokens``). The questions go through
    batched passes: sequences left-padded into one forward pass with the MLP capture, one loss per row (the entropy
    after the prompt under ``pre``, the response's cross-entropy under ``pos``), one backward pass of their sum (rows
    do not interact, so each row's Δ is its own loss's), then each row's stable ranks from its own tokens. Longer
    sequences are grouped together (less padding), ``batch_size`` rows a pass (default:
    :func:`grade.models.sizing.batch_size` of a ``grade`` pass, from the device's free memory and the model's
    shape). Responses to generate come from batched greedy decoding first (:func:`_batched_answers`). The values
    are :func:`analyze`'s up to float rounding. Step-wise ``pos`` requests (``steps``: one backward pass per step)
    run one at a time through :func:`analyze`.
    """
    from ..models.sizing import batches
    from ..common.errors import GradeError

    results: list = [None] * len(requests)
    batched = [i for i, request in enumerate(requests) if loss == "pre" or not request.get("steps")]
    for i in sorted(set(range(len(requests))) - set(batched)):
        try:
            results[i] = analyze(lm, loss=loss, srank=srank, spectra=False, keep_hidden=keep_hidden, **requests[i])
        except GradeError as exc:
            results[i] = exc
    timings: dict[int, dict[str, float]] = {i: {} for i in batched}
    answers = _batched_answers(lm, {i: requests[i] for i in batched}, timings, results) if loss == "pos" else {}
    prepared: dict[int, _Inputs] = {}
    for i in batched:
        if results[i] is not None:  # refused before its answer was generated
            continue
        request = requests[i]
        try:
            prepared[i] = _prepare_inputs(lm, request["question"], context=request.get("context"),
                                          task=request.get("task") or "qa", loss=loss, response=request.get("response"),
                                          generate=bool(request.get("generate")), steps=False,
                                          max_new_tokens=request.get("max_new_tokens"),
                                          max_tokens=request.get("max_tokens", DEFAULT_MAX_TOKENS),
                                          prompt=request.get("prompt"), timings=timings[i], answer=answers.get(i))
        except GradeError as exc:
            results[i] = exc
    keys = list(prepared)
    kinds = srank_kinds(loss, srank)
    logits_per_row = 1 if loss == "pre" else 1 + max((len(prepared[i].response_ids) for i in keys), default=0)
    for group in batches(lm, [len(prepared[i].input_ids) for i in keys], kind="grade", override=batch_size,
                         logits_per_row=logits_per_row):
        chunk = [keys[k] for k in group]
        try:
            features = _batched_passes(lm, [prepared[i] for i in chunk], loss, kinds, keep_hidden=keep_hidden,
                                       timings=[timings[i] for i in chunk])
        except GradeError:
            features = None
        for k, i in enumerate(chunk):
            request = requests[i]
            try:
                if features is None or features[k] is None:  # a row the batched pass could not take: alone
                    features_i = _one_loss_pass(lm, prepared[i], loss, kinds, spectra=False, keep_hidden=keep_hidden,
                                                low_memory=_low_memory_default(lm, len(prepared[i].input_ids)),
                                                layer_by_layer=False, row_sums=False, keep_cache=False,
                                                timings=timings[i])
                else:
                    features_i = features[k]
                results[i] = _assemble_result(lm, prepared[i], features_i, loss=loss, srank=srank,
                                              task=request.get("task") or "qa", context=request.get("context"),
                                              timings=timings[i])
            except GradeError as exc:
                results[i] = exc
    return results


def _batched_answers(lm: LoadedModel, requests: dict[int, dict], timings: dict[int, dict], refused: list) -> dict:
    """The greedy answers of the ``pos`` requests that ask for one (``generate``), index -> Generation, decoded
    together: the requests of one task and one answer length (:func:`_answer_length`) share
    :func:`grade.models.generation.generate`'s batches, so that each row gets the length and stop rule
    :func:`analyze` would give it. A request refused before generating gets its error in ``refused``."""
    from ..common.errors import GradeError
    from ..models.generation import generate, settings_for_task

    groups: dict[tuple[str, int], list[tuple[int, list[int]]]] = {}
    for i, request in requests.items():
        if not request.get("generate"):
            continue
        task = request.get("task") or "qa"
        try:
            _, _, prompt_ids, limit = _encoded_prompt(lm, request["question"], context=request.get("context"),
                                                      task=task, prompt=request.get("prompt"),
                                                      max_tokens=request.get("max_tokens", DEFAULT_MAX_TOKENS))
        except GradeError as exc:
            refused[i] = exc
            continue
        length = _answer_length(task, request.get("max_new_tokens"), limit - len(prompt_ids))
        groups.setdefault((task, length), []).append((i, prompt_ids))
    answers: dict[int, object] = {}
    for (task, length), members in groups.items():
        if length < 1:  # no room for an answer: left to _prepare_inputs, which refuses it as analyze does
            continue
        check_cancelled()
        t = time.perf_counter()
        generated = generate(lm, [ids for _, ids in members], settings_for_task(task, length))
        seconds = (time.perf_counter() - t) / len(members)
        for (i, _), rows in zip(members, generated):
            answers[i] = rows[0]
            timings[i]["generate_s"] = seconds
    return answers


def _batched_passes(lm: LoadedModel, batch: list[_Inputs], loss: LossKind, kinds, *, keep_hidden: bool,
                    timings: list[dict]) -> list[_Features | None]:
    """One forward pass of the left-padded sequences with the capture and one backward pass of the summed losses
    (``pre``: the entropy after each prompt; ``pos``: each response's mean cross-entropy): :class:`_Features` per
    row (None for a row whose numbers were not finite, to be redone alone, where :func:`analyze` says why)."""
    ids_list = [x.input_ids for x in batch]
    width, rows = max(map(len, ids_list)), len(ids_list)
    ids, mask, positions = left_padded(lm, ids_list)
    # Left padding ends every row at the last position: the last `keep` positions hold every logit a loss reads
    # (the last one under pre; under pos, each response's tokens and the position before its first).
    keep = 1 if loss == "pre" else 1 + max(len(x.response_ids) for x in batch)
    extra = {"logits_to_keep": keep} if _accepts_logits_to_keep(lm.model) else {}
    check_cancelled()
    t = time.perf_counter()
    with torch.enable_grad(), capture_mlp(lm.model) as capture:
        out = lm.model(input_ids=ids, attention_mask=mask, position_ids=positions, use_cache=False,
                       output_hidden_states=keep_hidden, **extra)
        if capture.hidden[0] is None or capture.hidden[0].shape[0] != rows:  # a model that flattens rows (OPT)
            return [None] * rows
        logits = out.logits[:, -keep:]
        surprisal: list[np.ndarray | None] = [None] * rows
        if loss == "pre":
            log_p = torch.log_softmax(logits[:, -1].float(), dim=-1)
            values = -(log_p.exp() * log_p).sum(-1)  # (rows,): entropy_at_last_position of each row
        else:
            window = ids[:, width - keep:]  # the ids of the kept logits' positions
            values = torch.stack([response_cross_entropy(logits[r], window[r], keep - len(x.response_ids), keep)
                                  for r, x in enumerate(batch)])
            for r, x in enumerate(batch):
                surprisal[r] = np.full(len(x.input_ids), np.nan)
                surprisal[r][len(x.prompt_ids):] = token_surprisal(
                    logits[r], window[r], keep - len(x.response_ids), keep).cpu().numpy()
        forward_s = time.perf_counter() - t
        finite = torch.isfinite(values)
        check_cancelled()
        t = time.perf_counter()
        grads = torch.autograd.grad(values.masked_fill(~finite, 0.0).sum(), capture.outputs)
        backward_s = time.perf_counter() - t
        hidden = list(capture.hidden)
        states = out.hidden_states if keep_hidden else None
        del capture, out, logits
    finite = finite.cpu().tolist()
    kept = [r for r in range(rows) if finite[r]]
    t = time.perf_counter()
    # every row's own tokens (no padding), the rows of one length in one fast-route run
    checked = stable_ranks_checked_rows([[h[r, width - len(ids_list[r]):] for h in hidden] for r in kept],
                                        [[g[r, width - len(ids_list[r]):] for g in grads] for r in kept], *kinds)
    spectra_s = time.perf_counter() - t
    features: list[_Features | None] = [None] * rows
    for r, ranks in zip(kept, checked):
        if ranks is None:
            continue
        first = width - len(ids_list[r])
        timings[r].update(forward_s=forward_s / rows, backward_s=backward_s / rows, spectra_s=spectra_s / len(kept),
                          batch_rows=float(rows))
        row_states = tuple(h[r:r + 1, first:] for h in states) if states is not None else None
        features[r] = _Features(ranks.srank_h, ranks.srank_g, ranks.rank_ratio, float(values[r].detach()),
                                surprisal=surprisal[r], hidden_states=row_states)
    return features
