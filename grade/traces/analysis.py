"""One trace analysed: the step-wise ``pos`` analysis of a :class:`~grade.traces.sources.TraceItem` as the rows
of a trace store (:func:`analyze_trace_item`), token classes and shock, and the Ray work (:class:`TraceWork`)."""

from __future__ import annotations

import json
import logging
import time
from dataclasses import dataclass
from typing import Iterable

import numpy as np

from .. import __version__
from ..common.errors import GradeError, InputError
from ..steps.locate import DEFAULT_LOCATOR, check_scores, locate, ranked_steps, signals_of_result, token_shock  # noqa: F401 (token_shock: re-exported)
from ..steps.outcome import decide_outcome
from .sources import TraceItem
from .store import FORMAT_VERSION

log = logging.getLogger(__name__)


#: Token classes of :func:`token_class`.
TOKEN_CLASSES = ("number", "operator", "word", "other")


_OPERATOR_CHARS = set("+-*/×÷=<>^%()−·≈±")
_LATEX_OPERATORS = {"\\times", "\\cdot", "\\div", "\\frac", "\\dfrac", "\\pm", "\\le", "\\ge", "\\leq", "\\geq",
                    "\\sqrt", "\\neq", "\\approx"}


def token_class(token: str) -> str:
    """``number`` (has a digit), ``operator`` (only arithmetic signs, or a LaTeX operator), ``word`` (has a
    letter) or ``other`` (punctuation, white space)."""
    text = token.strip()
    if not text:
        return "other"
    if any(c.isdigit() for c in text):
        return "number"
    if all(c in _OPERATOR_CHARS for c in text) or text in _LATEX_OPERATORS:
        return "operator"
    if any(c.isalpha() for c in text):
        return "word"
    return "other"


def verifier_columns(verdict, reader: str | None) -> dict:
    """The store's step-verifier columns of one trace (``verdict``: a
    :class:`~grade.steps.verifier.VerifierResult`, or None where the verifier did not run: all null)."""
    if verdict is None:
        return {"verifier_reader": None, "verifier_suspect_step": None, "verifier_suspect_step_text": None,
                "verifier_threshold": None, "step_verifier_probability": None}
    step = verdict.suspect_step
    return {"verifier_reader": reader, "verifier_suspect_step": step,
            "verifier_suspect_step_text": None if step is None else verdict.step_texts[step - 1],
            "verifier_threshold": float(verdict.threshold),
            "step_verifier_probability": [float(p) for p in verdict.step_probability]}


def verify_item(lm, item: TraceItem, response: str) -> dict:
    """:func:`verifier_columns` of one trace: its reader (:func:`grade.steps.verifier.load_reader`) reads it,
    one forward pass. A trace the verifier cannot read (too long for the reader, no reader shipped) keeps the
    GRADE analysis and null verifier columns, with a warning: the slower analysis is not lost for the faster."""
    from ..steps.verifier import load_reader, verify_trace

    try:
        reader = load_reader(lm)
        if reader is None:
            return verifier_columns(None, None)
        # the run's own grading says whether the final answer is right, unless the reply was cut at its limit
        final = decide_outcome(correct=item.correct, cut_off=item.cut_off).final_correct
        return verifier_columns(verify_trace(reader, item.question, response, task=item.task, final_correct=final),
                                reader.name)
    except GradeError as exc:
        log.warning("no step verifier for trace %s: %s", item.trace_id, exc)
        return verifier_columns(None, None)


#: The store's columns that only the step-wise GRADE analysis fills: null in a row of a verifier-only triage
#: (:func:`verifier_only_record`), until ``grade traces --fill-grade`` analyses that trace.
GRADE_COLUMNS = ("n_layers", "n_tokens", "grade_pos", "loss_value", "rank_ratio", "step_ratio", "step_loss",
                 "step_start", "step_ratios", "peak_step", "peak_step_text", "peak_step_ratio", "peak_token",
                 "peak_token_position", "peak_token_step", "peak_token_class", "locator", "suspect_step",
                 "suspect_step_text", "step_ranking", "step_surprisal_max", "step_surprisal_mean", "step_shock_max",
                 "step_shock_mean")


def grade_pending(frame):
    """Boolean Series: the rows of a trace store frame whose GRADE analysis has not run (verifier-only triage)."""
    return frame["grade_pos"].isna()


def verifier_only_record(reader, item: TraceItem, model: str, srank: str = "paper",
                         features=None) -> tuple[dict, list[dict]]:
    """A trace triaged without GRADE: the step verifier (one forward pass of ``reader``, the loaded reader model of
    :func:`grade.steps.verifier.load_reader`) and the model-free check, as a store row whose GRADE columns
    (:data:`GRADE_COLUMNS`) are null and no token rows. ``model``: the model whose run the trace is from (the store's
    model). ``features``: the trace's features where a batch already read them
    (:func:`grade.steps.verifier.step_features_batch`). Raises InputError where the reader cannot read the trace."""
    from ..steps.verifier import verify_trace

    response = item.response.strip()
    if not response:
        raise InputError("the response is empty")
    t = time.perf_counter()
    final = decide_outcome(correct=item.correct, cut_off=item.cut_off).final_correct
    verdict = verify_trace(reader, item.question, response, task=item.task, final_correct=final, features=features)
    findings = verdict.findings  # the check of these steps, which the verifier's features read
    row = {name: None for name in GRADE_COLUMNS}
    row.update({
        "trace_id": item.trace_id, "doc_id": item.doc_id, "sample": item.sample, "task": item.task,
        "source": item.source, "question": item.question, "response": response, "answers": list(item.answers),
        "correct": item.correct, "model": model, "loss": "pos", "srank": srank, "n_steps": len(verdict.step_texts),
        "step_texts": list(verdict.step_texts),
        "step_check": [float(x) for x in check_scores(findings)],
        "step_findings": [json.dumps(found) for found in findings],
        "known_error_step": item.error_step, "known_error_kind": item.error_kind, "cut_off": item.cut_off,
        **verifier_columns(verdict, reader.name),
        "seconds": float(time.perf_counter() - t), "format_version": FORMAT_VERSION, "package_version": __version__,
    })
    return row, []


def trace_records(item: TraceItem, result, display_tokens: list[str], seconds: float,
                  verifier: dict | None = None) -> tuple[dict, list[dict]]:
    """The store's trace row and token rows of one analysed trace (``result``: a step-wise ``pos``
    :class:`~grade.gradients.result.GradeResult` with token scores; ``verifier``: :func:`verifier_columns`,
    default all null)."""
    start = result.response_start or 0
    steps = result.steps
    ratios = np.stack([s.rank_ratio for s in steps])  # (K, L)
    step_ratio = ratios.mean(axis=1)
    scores = result.token_scores[:, start:]  # (L, n_response)
    signals, step_of, shock, surprisal = signals_of_result(result)
    peak = int(np.argmax(step_ratio))
    peak_token = int(np.argmax(shock)) if shock.size else 0
    classes = [token_class(t) for t in display_tokens]
    ranking = ranked_steps(locate(signals, DEFAULT_LOCATOR))
    row = {
        "trace_id": item.trace_id,
        "doc_id": item.doc_id,
        "sample": item.sample,
        "task": item.task,
        "source": item.source,
        "question": item.question,
        "response": result.response,
        "answers": list(item.answers),
        "correct": item.correct,
        "model": result.model,
        "loss": result.loss,
        "srank": result.srank,
        "n_layers": result.n_layers,
        "n_tokens": int(scores.shape[1]),
        "n_steps": len(steps),
        "grade_pos": float(result.grade),
        "loss_value": float(result.loss_value),
        "rank_ratio": [float(x) for x in result.rank_ratio],
        "step_texts": [s.text for s in steps],
        "step_ratio": [float(x) for x in step_ratio],
        "step_loss": [float(s.loss_value) for s in steps],
        "step_start": [int(s.start - start) for s in steps],
        "step_ratios": ratios.tolist(),
        "peak_step": peak + 1,
        "peak_step_text": steps[peak].text,
        "peak_step_ratio": float(step_ratio[peak]),
        "peak_token": display_tokens[peak_token] if display_tokens else "",
        "peak_token_position": peak_token,
        "peak_token_step": int(step_of[peak_token]) if shock.size else 0,
        "peak_token_class": classes[peak_token] if classes else "other",
        "locator": DEFAULT_LOCATOR,
        "suspect_step": ranking[0],
        "suspect_step_text": steps[ranking[0] - 1].text,
        "step_ranking": ranking,
        "step_check": [float(x) for x in signals.values["check"]],
        "step_findings": [json.dumps(found) for found in signals.findings],
        **{f"step_{name}": [float(x) for x in signals.values[name]]
           for name in ("surprisal_max", "surprisal_mean", "shock_max", "shock_mean")},
        "known_error_step": item.error_step,
        "known_error_kind": item.error_kind,
        "cut_off": item.cut_off,
        **(verifier or verifier_columns(None, None)),
        "seconds": float(seconds),
        "format_version": FORMAT_VERSION,
        "package_version": __version__,
    }
    tokens = [
        {"trace_id": item.trace_id, "position": i, "step": int(step_of[i]), "token": display_tokens[i],
         "token_class": classes[i], "shock": float(shock[i]), "surprisal": float(surprisal[i]),
         "scores": np.nan_to_num(scores[:, i].astype(np.float32)).tolist()}
        for i in range(scores.shape[1])
    ]
    return row, tokens


def analyze_trace_item(lm, item: TraceItem, *, srank: str = "paper", verify: bool = True) -> tuple[dict, list[dict]]:
    """Step-wise GRADE_pos and token shock of one trace, and with ``verify`` the step verifier's verdict (a
    forward pass, seconds beside the analysis's backward pass per step); returns (trace row, token rows)."""
    from ..gradients.analysis import analyze
    from ..batch.labeling import MAX_CHARS_PER_TOKEN

    response = item.response if item.prompt is not None else item.response.strip()
    if not response.strip():
        raise InputError("the response is empty")
    # bounded before tokenizing: a 5 MB response would cost gigabytes only to be refused as too long
    if len(item.question) + len(response) + len(item.prompt or "") > MAX_CHARS_PER_TOKEN * lm.max_context:
        raise InputError(f"question and response have {len(item.question) + len(response):,} characters, more than "
                         f"this model's {lm.max_context} tokens can hold")
    t = time.perf_counter()
    # Token shock from the fast route (C_g = ΔΔᵀ where C_h is certified full rank): the exact route's values
    # without its float64 eigen-decompositions, which cost as much as the backward passes on a CPU.
    result = analyze(lm, item.question, task=item.task, loss="pos", response=response, steps=True, spectra=False,
                     token_scores=True, srank=srank, prompt=item.prompt)
    seconds = time.perf_counter() - t
    start = result.response_start or 0
    display = [lm.tokenizer.decode([i], skip_special_tokens=False) for i in result.input_ids[start:]]
    # read with the GSM8K prompt whatever the item's task or prompt: the setting the verifier was measured in
    verdict = verify_item(lm, item, response) if verify else None
    return trace_records(item, result, display, seconds, verdict)


def _analysed(lm, items: Iterable[TraceItem], srank: str, skipped: list,
              verify: bool = True) -> Iterable[tuple[TraceItem, dict | None]]:
    for item in items:
        try:
            row, tokens = analyze_trace_item(lm, item, srank=srank, verify=verify)
        except GradeError as exc:  # one bad trace (too long for the model, empty) must not stop a run
            log.warning("skipped trace %s: %s", item.trace_id, exc)
            skipped.append((item.trace_id, str(exc)))
            yield item, None
            continue
        yield item, {"trace": row, "tokens": tokens}


def _triaged(reader, items: Iterable[TraceItem], model: str, srank: str,
             skipped: list) -> Iterable[tuple[TraceItem, dict | None]]:
    """The verifier-only rows of ``items``, the reader's forward passes batched over each chunk of traces
    (:func:`grade.steps.verifier.step_features_batch`)."""
    from ..steps.verifier import step_features_batch

    items = list(items)
    t = time.perf_counter()
    features = step_features_batch(reader, [(i.question, i.response.strip(), i.task) for i in items])
    share = (time.perf_counter() - t) / max(len(items), 1)  # each trace's part of the batched reading
    for item, read in zip(items, features):
        try:
            # a trace the batch refused goes the one-trace way, which names why (an empty response, too long)
            row, tokens = verifier_only_record(reader, item, model, srank,
                                               features=None if isinstance(read, GradeError) else read)
            row["seconds"] += share
        except GradeError as exc:
            log.warning("skipped trace %s: %s", item.trace_id, exc)
            skipped.append((item.trace_id, str(exc)))
            yield item, None
            continue
        yield item, {"trace": row, "tokens": tokens}


@dataclass(frozen=True)
class TraceWork:
    """Ray work: step-wise analyses of a chunk of traces (see :mod:`grade.batch.ray_backend`)."""

    srank: str = "paper"
    verify: bool = True

    def process(self, lm, items: list[TraceItem]) -> dict:
        skipped: list[tuple[str, str]] = []
        results = [r for _, r in _analysed(lm, items, self.srank, skipped, self.verify) if r is not None]
        return {"results": results, "skipped": skipped}
