"""``analyze``: one question in, one :class:`~grade.result.GradeResult` out.

Pipeline: tokenise -> one forward pass with hooks (h and o of every MLP down projection) -> loss ->
one activation-only backward pass (``Δ = ∂L/∂o``; for step-wise ``pos``, one backward per step over the
shared forward pass, or on a CPU one pass per prefix where that is cheaper) -> per-layer spectra ->
stable ranks and rank ratios.
"""

from __future__ import annotations

import inspect
import time
from typing import Literal

import numpy as np
import torch

from . import __version__
from .capture import capture_mlp
from .errors import InputError, NumericalError
from .generation import encode_prompt, greedy_answer
from .losses import Step, entropy_at_last_position, response_cross_entropy, steps_for_response, token_surprisal
from .models import LoadedModel
from .prompts import format_prompt
from .result import GradeResult, StepResult
from .spectra import (
    SRankKind,
    check_finite,
    layer_spectrum,
    rank_ratios,
    stable_rank,
    stable_ranks_checked,
    stable_ranks_prefixes_checked,
)
from .tasks import answer_format

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


def validate_question(question: str, max_chars: int = 20000) -> str:
    if question is None or not str(question).strip():
        raise InputError("the question is empty")
    if len(question) > max_chars:
        raise InputError(f"the question is {len(question)} characters long; the limit is {max_chars}")
    return question.strip()


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
    capture, logits, _, hidden_states = forward_with_capture(lm, input_ids, keep_hidden, 0)
    return capture, logits, hidden_states


def forward_with_capture(
    lm: LoadedModel, input_ids: list[int], keep_hidden: bool, logits_from: int, *, low_memory: bool = False
):
    """Forward pass with capture; returns (capture, logits (n - first, vocab), first, hidden states or None).

    Only positions ``first..n-1`` get logits (``first`` is ``logits_from`` where the model supports
    ``logits_to_keep``, else 0): the LM head's product, its backward and the (n, vocab) buffers are the
    largest avoidable costs of a GRADE pass, and the losses read a few rows only. ``low_memory``
    captures with activation recomputation and keeps ``h hᵀ`` instead of h (see :mod:`grade.capture`).
    """
    ids = torch.tensor([input_ids], device=lm.device)
    first = logits_from if logits_from > 0 and _accepts_logits_to_keep(lm.model) else 0
    extra = {"logits_to_keep": len(input_ids) - first} if first else {}
    with capture_mlp(lm.model, recompute=low_memory, grams=low_memory) as capture:
        out = lm.model(input_ids=ids, use_cache=False, output_hidden_states=keep_hidden, **extra)
    return capture, out.logits[0], first, (out.hidden_states if keep_hidden else None)


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
    per_loss = [torch.autograd.grad(loss, outputs, retain_graph=True) for loss in losses]
    return [torch.stack([grads[layer].reshape(grads[layer].shape[-2:]) for grads in per_loss]) for layer in range(len(outputs))]


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
    :func:`grade.spectra.exact_where_uncertified`). deltas[l]: (n, d_model) -> (L, n)."""
    rows = np.stack([(d.double() @ d.double().sum(0)).cpu().numpy() for d in deltas])
    for layer, spec in exact.items():
        rows[layer] = spec.row_sums_g.numpy()
    return rows


def _steps_from_shared_pass(hidden: list[torch.Tensor], deltas: list[torch.Tensor], losses: torch.Tensor,
                            step_spans: list[Step], kinds, spectra: bool, row_sums: bool = False) -> list[StepResult]:
    """StepResult per step from one forward pass over the whole sequence: hidden[l] (N, d_ff), deltas[l]
    (K, N, d_model) with step k's Δ in row k (zero past the step's end)."""
    n_layers = len(deltas)
    ends = [s.end for s in step_spans]
    shared = None if spectra else stable_ranks_prefixes_checked(hidden, deltas, ends, *kinds)
    results = []
    for k, step in enumerate(step_spans):
        if shared is not None:
            sh, sg, ratio = shared[k].srank_h, shared[k].srank_g, shared[k].rank_ratio
            rows = _full_rank_row_sums([d[k, : step.end] for d in deltas], shared[k].exact) if row_sums else None
            eh = eg = None
        else:
            sh, sg, ratio, eh, eg, rows = layer_features(
                [h[: step.end] for h in hidden], [d[k, : step.end] for d in deltas], kinds, spectra
            )
        scores = rows[:, step.start : step.end] if rows is not None else np.full((n_layers, step.end - step.start), np.nan)
        results.append(StepResult(step.text, step.start, step.end, float(losses[k].detach()), sh, sg, ratio, scores, eh, eg))
    return results


def layer_features(hidden: list[torch.Tensor], deltas: list[torch.Tensor], kinds, spectra: bool,
                   row_sums: bool = False):
    """Per-layer (srank_h, srank_g, ratio) and, with ``spectra``, eigenvalues and row sums (with
    ``row_sums`` and no ``spectra``: row sums from the fast route, no eigenvalues).

    hidden[l]: (n, d_ff), deltas[l]: (n, d_model).
    """
    n_layers = len(hidden)
    kind_h, kind_g = kinds
    if spectra:  # (the fast route checks through its grams' traces, without a sync per layer)
        for layer, (h, d) in enumerate(zip(hidden, deltas)):
            check_finite(h, f"layer {layer} activation h")
            check_finite(d, f"layer {layer} gradient Δ")
    srank_h = np.zeros(n_layers)
    srank_g = np.zeros(n_layers)
    eig_h = eig_g = rows = None
    if spectra:
        n = hidden[0].shape[0]
        eig_h, eig_g, rows = np.zeros((n_layers, n)), np.zeros((n_layers, n)), np.zeros((n_layers, n))
        for layer in range(n_layers):
            spec = layer_spectrum(hidden[layer], deltas[layer])
            srank_h[layer] = stable_rank(spec.eig_h, kind_h)
            srank_g[layer] = stable_rank(spec.eig_g, kind_g)
            eig_h[layer], eig_g[layer], rows[layer] = spec.eig_h.numpy(), spec.eig_g.numpy(), spec.row_sums_g.numpy()
    else:
        checked = stable_ranks_checked(hidden, deltas, kind_h, kind_g)  # per-layer lists: no stacked copies
        srank_h[:], srank_g[:] = checked.srank_h, checked.srank_g
        rows = _full_rank_row_sums(deltas, checked.exact) if row_sums else None
    return srank_h, srank_g, rank_ratios(srank_g, srank_h), eig_h, eig_g, rows


def prefix_passes_are_cheaper(device: torch.device | str, ends: list[int], n_tokens: int) -> bool:
    """Whether step-wise ``pos`` should run one pass per prefix instead of sharing one forward pass.

    Sharing costs one forward over all N tokens plus K backward passes over N tokens (exact per-step Δ
    needs one vector-Jacobian product per step); per prefix costs a forward and a backward over each
    prefix e_k. Only where arithmetic is the limit (a CPU) does the token count decide: there a
    backward pass costs about twice a forward pass (measured on the embedded SmolLM2), so sharing
    costs ~N·(1 + 2K) and prefixes ~3·Σe_k. On a GPU the K backward passes are batched into one and the
    shared pass wins (bench/RESULTS.md, section 3).
    """
    if torch.device(device).type != "cpu":
        return False
    return n_tokens * (1 + 2 * len(ends)) > 3 * sum(ends)


def _steps_by_prefix(lm: LoadedModel, input_ids: list[int], step_spans: list[Step], kinds, spectra: bool,
                     keep_hidden: bool, timings: dict[str, float], row_sums: bool = False):
    """Step-wise ``pos`` one prefix at a time: for step k a forward pass over the prefix ending with
    step k, its loss, a backward pass and its spectra. Same features as the shared pass (causal
    attention: a prefix's activations are the full sequence's), fewer operations on a CPU when steps
    are spread over a long response. Returns (StepResult per step, last-prompt-token hidden states, per-token
    surprisal (n,), NaN outside the steps)."""
    results, hidden_states = [], None
    surprisal = np.full(len(input_ids), np.nan)
    timings.update(forward_s=0.0, backward_s=0.0, spectra_s=0.0)
    for k, step in enumerate(step_spans):
        prefix = input_ids[: step.end]
        t = time.perf_counter()
        with torch.enable_grad():
            capture, logits, first, states = forward_with_capture(lm, prefix, keep_hidden and k == 0, step.start - 1)
            timings["forward_s"] += time.perf_counter() - t
            ids = torch.tensor(prefix[first:], device=logits.device)
            loss = response_cross_entropy(logits, ids, step.start - first, step.end - first)
            surprisal[step.start : step.end] = token_surprisal(logits, ids, step.start - first, step.end - first).cpu().numpy()
            if not torch.isfinite(loss):
                raise NumericalError("the loss is NaN or inf; the model may be unstable in this dtype (try float32)")
            t = time.perf_counter()
            deltas = activation_grads(loss, capture.outputs)
            timings["backward_s"] += time.perf_counter() - t
        if states is not None:
            hidden_states = states
        t = time.perf_counter()
        hidden = [h[0] for h in capture.hidden]
        del capture, logits
        sh, sg, ratio, eh, eg, rows = layer_features(hidden, [d[0] for d in deltas], kinds, spectra, row_sums)
        timings["spectra_s"] += time.perf_counter() - t
        scores = rows[:, step.start : step.end] if rows is not None else np.full((len(hidden), step.end - step.start), np.nan)
        results.append(StepResult(step.text, step.start, step.end, float(loss.detach()), sh, sg, ratio, scores, eh, eg))
    return results, hidden_states, surprisal


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
) -> GradeResult:
    """GRADE features of one question.

    Parameters
    ----------
    lm : a model from :func:`grade.load_model`.
    question, context : the question and an optional supporting document.
    task : prompt style, see :data:`grade.prompts.TASKS`.
    loss : ``"pre"`` (entropy after the prompt) or ``"pos"`` (cross-entropy of the response).
    response : the response to score under ``pos``; with ``generate=True`` the model's greedy answer
        is used (and reported) instead: its own tokens, up to the task's stop rule
        (:func:`grade.generation.greedy_answer`).
    max_new_tokens : with ``generate``: the answer's length; default: the task's
        (:func:`grade.tasks.answer_format`).
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

    Returns
    -------
    GradeResult with ``rank_ratio`` of shape (L,).
    """
    timings: dict[str, float] = {}
    t0 = time.perf_counter()
    question = validate_question(question)
    if loss not in ("pre", "pos"):
        raise InputError(f"unknown loss {loss!r}; use pre or pos")
    if prompt is None:
        prompt = format_prompt(lm.tokenizer, question, task=task, context=context)
    # The same encoding the label sampler used: a base model's plain prompt needs its BOS token.
    prompt_ids = encode_prompt(lm.tokenizer, prompt)
    limit = min(max_tokens, lm.max_context)
    if len(prompt_ids) > limit:
        raise InputError(f"the prompt has {len(prompt_ids)} tokens; this model accepts at most {limit}")

    response_ids: list[int] = []
    if loss == "pos":
        if generate:
            t = time.perf_counter()
            # Bounded before it starts: an answer that could not fit would be refused after generating.
            room = limit - len(prompt_ids)
            length = min(answer_format(task, max_new_tokens).max_new_tokens, room)
            answer = greedy_answer(lm, prompt_ids, task=task, max_new_tokens=length)
            response_ids = answer.answer_ids
            response = lm.tokenizer.decode(response_ids, skip_special_tokens=True)
            timings["generate_s"] = time.perf_counter() - t
        elif response is not None and response.strip():
            response_ids = _encode(lm, response)
        if not response_ids:
            raise InputError("the pos loss needs a non-empty response (give one, or ask to generate)")
        if len(prompt_ids) + len(response_ids) > limit:
            raise InputError(
                f"prompt and response have {len(prompt_ids) + len(response_ids)} tokens; this model accepts at most {limit}"
            )
    input_ids = prompt_ids + response_ids
    response_start = len(prompt_ids) if loss == "pos" else None
    kinds = srank_kinds(loss, srank)

    if low_memory is None:  # below a few hundred tokens activations are small and launches dominate
        low_memory = torch.device(lm.device).type == "cuda" and len(input_ids) >= LOW_MEMORY_MIN_TOKENS
    # Token scores without spectra: row sums from the fast route (``token_scores`` is reused below for the array).
    row_sums = bool(token_scores) and not spectra and loss == "pos"
    low_memory = low_memory and not spectra and not steps and not row_sums

    step_spans: list[Step] = []
    if loss == "pos" and steps:
        step_spans = steps_for_response(lm.tokenizer, response_ids, len(prompt_ids), response)
    if step_passes not in ("auto", "shared", "prefix"):
        raise InputError(f"unknown step_passes {step_passes!r}; use auto, shared or prefix")
    by_prefix = bool(step_spans) and (
        step_passes == "prefix"
        or (step_passes == "auto" and prefix_passes_are_cheaper(lm.device, [s.end for s in step_spans], len(input_ids)))
    )

    t = time.perf_counter()
    if by_prefix:
        step_results, hidden_states, surprisal = _steps_by_prefix(lm, input_ids, step_spans, kinds, spectra, keep_hidden,
                                                                  timings, row_sums)
    else:
        with torch.enable_grad():
            logits_from = len(input_ids) - 1 if loss == "pre" else len(prompt_ids) - 1
            capture, logits, first, hidden_states = forward_with_capture(
                lm, input_ids, keep_hidden, logits_from, low_memory=low_memory
            )
            timings["forward_s"] = time.perf_counter() - t
            # logits[i] belongs to position first + i; shifting the ids and spans by `first` keeps the losses' indexing.
            ids_tensor = torch.tensor(input_ids[first:], device=logits.device)
            if loss == "pre":
                losses = entropy_at_last_position(logits)
            elif step_spans:
                losses = torch.stack(
                    [response_cross_entropy(logits, ids_tensor, s.start - first, s.end - first) for s in step_spans]
                )
            else:
                losses = response_cross_entropy(logits, ids_tensor, len(prompt_ids) - first, len(input_ids) - first)
            if not torch.isfinite(losses).all():
                raise NumericalError("the loss is NaN or inf; the model may be unstable in this dtype (try float32)")
            surprisal = None
            if loss == "pos":
                surprisal = np.full(len(input_ids), np.nan)
                surprisal[len(prompt_ids):] = token_surprisal(logits, ids_tensor, len(prompt_ids) - first,
                                                              len(input_ids) - first).cpu().numpy()
            t = time.perf_counter()
            deltas = activation_grads(losses, capture.outputs)  # per layer (K, n, d_model)
            timings["backward_s"] = time.perf_counter() - t
        hidden = [h[0] for h in capture.hidden] if not low_memory else None  # (n, d_ff) per layer
        grams, hidden_width = capture.grams, capture.hidden_width
        del capture, logits

        t = time.perf_counter()
        if step_spans:
            step_results = _steps_from_shared_pass(hidden, deltas, losses, step_spans, kinds, spectra, row_sums)
        elif low_memory:
            srank_h, srank_g, ratio = _fast_features_from_grams(
                grams,
                [d[0] for d in deltas],
                kinds,
                hidden_width,
                lambda layers: _hidden_of_layers(lm, input_ids, layers),
            )
            eig_h = eig_g = rows = token_scores = None
            loss_value = float(losses.detach())
        else:
            srank_h, srank_g, ratio, eig_h, eig_g, rows = layer_features(hidden, [d[0] for d in deltas], kinds, spectra,
                                                                         row_sums)
            token_scores = None
            if loss == "pos" and rows is not None:
                token_scores = np.full_like(rows, np.nan)
                token_scores[:, response_start:] = rows[:, response_start:]
            loss_value = float(losses.detach())
        timings["spectra_s"] = time.perf_counter() - t

    if step_spans:
        token_scores = np.full((len(step_results[0].srank_h), len(input_ids)), np.nan)
        for step in step_results:
            token_scores[:, step.start : step.end] = step.token_scores
        srank_h = np.mean([s.srank_h for s in step_results], axis=0)
        srank_g = np.mean([s.srank_g for s in step_results], axis=0)
        ratio = np.mean([s.rank_ratio for s in step_results], axis=0)
        eig_h = eig_g = None
        loss_value = float(np.mean([s.loss_value for s in step_results]))
    else:
        step_results = []
    timings["total_s"] = time.perf_counter() - t0

    last_hidden = None
    if hidden_states is not None:
        last = len(prompt_ids) - 1
        # .cpu() per layer: under a device_map the hidden states live on several GPUs.
        last_hidden = torch.stack([hs[0, last].detach().float().cpu() for hs in hidden_states]).numpy()
    return GradeResult(
        model=lm.name,
        loss=loss,
        srank=srank,
        task=task,
        question=question,
        context=context,
        prompt=prompt,
        response=response if loss == "pos" else None,
        input_ids=list(input_ids),
        tokens=lm.tokenizer.convert_ids_to_tokens(input_ids),
        response_start=response_start,
        loss_value=loss_value,
        srank_h=srank_h,
        srank_g=srank_g,
        rank_ratio=ratio,
        eig_h=eig_h,
        eig_g=eig_g,
        token_scores=token_scores,
        last_hidden=last_hidden,
        token_surprisal=surprisal,
        steps=step_results,
        timings=timings,
        package_version=__version__,
    )
