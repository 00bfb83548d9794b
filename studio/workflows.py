"""What the pages do with the engine, without any Streamlit: one function per user action.

Every function takes the loaded model (shared) and returns plain data that the page keeps in its own
``st.session_state``; nothing is stored at module level, so concurrent sessions cannot see each
other's results. The engine holds the model's lock for each forward/backward pass and generation.
"""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass, field
from typing import Callable

import numpy as np

import grade
from grade.detectors import (
    ANSWER_STATISTICS,
    DetectorVerdict,
    disagreement,
    needed_statistics,
    question_statistics,
    verdicts,
)
from grade.errors import InputError, ProbeError
from grade.probe import probe_inputs
from grade.generation import greedy_answer, settings_for_task, shorter_answer
from grade.tasks import answer_format

from .resources import ProbeInfo, probe_probability
from .served import LOCAL_LIMITS, Limits, check_answer_tokens, check_cot_tokens, check_trace

Progress = Callable[[str], None]

MAX_QUESTION_CHARS = LOCAL_LIMITS.question_chars
MAX_CONTEXT_CHARS = LOCAL_LIMITS.context_chars


@dataclass
class Verdict:
    probability: float  # P(the model can answer)
    probe_name: str
    auroc: float | None
    loss: str

    @property
    def answerable(self) -> bool:
        return self.probability >= 0.5


@dataclass
class QuestionAnalysis:
    """Home page result: the features, the model's answer, the probe's verdict and the other detectors'."""

    result: grade.GradeResult  # features with spectra (loss = the probe's loss, else "pre")
    answer: str
    verdict: Verdict | None
    model_label: str
    seconds: dict[str, float] = field(default_factory=dict)
    probe_problem: str | None = None  # why there is no verdict (no probe, or it does not fit the model)
    detector_verdicts: list[DetectorVerdict] = field(default_factory=list)
    detectors_problem: str | None = None  # why some or all other detectors are missing
    computed_at: float = field(default_factory=time.time)  # when it was computed (time.time())
    from_cache: bool = False  # True when Home took it from the analysis cache instead of computing it

    def as_cached(self, computed_at: float) -> "QuestionAnalysis":
        """A copy marked as coming from the cache (the stored object itself is shared and left alone)."""
        return dataclasses.replace(self, from_cache=True, computed_at=computed_at)

    @property
    def disagreement(self) -> str | None:
        """One sentence when the probe and the other detectors do not all say the same, else None."""
        votes = [("the GRADE probe", self.verdict.answerable)] if self.verdict is not None else []
        return disagreement(votes + [(v.title, v.answerable) for v in self.detector_verdicts])


def check_inputs(question: str, context: str | None, limits: Limits = LOCAL_LIMITS) -> tuple[str, str | None]:
    """Reject what the engine would reject, with the app's own (tighter) length limits."""
    question = (question or "").strip()
    context = (context or "").strip() or None
    if not question:
        raise InputError("Please type a question first: the question box is empty.")
    if len(question) > limits.question_chars:
        raise InputError(f"The question is {len(question):,} characters long; the limit is {limits.question_chars:,}. "
                         "Put long material in the document box instead.")
    if context and len(context) > limits.context_chars:
        raise InputError(f"The document is {len(context):,} characters long; the limit is {limits.context_chars:,}.")
    return question, context


def probe_loss(probe_info: ProbeInfo | None) -> str:
    loss = probe_info.loss if probe_info is not None else None
    return loss if loss in ("pre", "pos") else "pre"


def analyze_question(
    lm: grade.LoadedModel,
    question: str,
    *,
    context: str | None = None,
    task: str = "qa",
    probe=None,
    probe_info: ProbeInfo | None = None,
    max_new_tokens: int | None = None,
    progress: Progress | None = None,
    model_label: str = "",
    limits: Limits = LOCAL_LIMITS,
    detectors: list | None = None,
) -> QuestionAnalysis:
    """Features (with spectra and hidden states), the greedy answer, the probe's verdict and the verdicts
    of ``detectors`` (:mod:`grade.detectors`, loaded for this model) for one question.

    The feature loss follows the probe (``pre`` if none). Under ``pre`` the answer is generated
    separately, only to show it; under ``pos`` it is the response the features are computed on. Either
    way it is the answer the labels judge: the task's length (unless ``max_new_tokens``) and stop rule.
    """
    say = progress or (lambda line: None)
    question, context = check_inputs(question, context, limits)
    max_new_tokens = check_answer_tokens(max_new_tokens or answer_format(task).max_new_tokens, limits)
    loss = probe_loss(probe_info)
    srank = str((probe_info.metadata.get("srank") if probe_info else None) or "paper")
    seconds: dict[str, float] = {}
    shown = None  # the greedy answer as generated, where this function generated it
    if loss == "pos":
        say("Generating the answer and computing GRADE features (pos loss) ...")
        t = time.perf_counter()
        result = grade.analyze(lm, question, context=context, task=task, loss="pos", generate=True, srank=srank,
                               keep_hidden=True, max_new_tokens=max_new_tokens)
        answer = result.response or ""
        seconds["analysis_s"] = time.perf_counter() - t
    else:
        say("Computing GRADE features (entropy after the prompt) ...")
        t = time.perf_counter()
        result = grade.analyze(lm, question, context=context, task=task, loss="pre", srank=srank, keep_hidden=True)
        seconds["analysis_s"] = time.perf_counter() - t
        say("Generating the model's answer ...")
        t = time.perf_counter()
        shown = greedy_answer(lm, result.prompt, task=task, max_new_tokens=max_new_tokens)
        answer = shown.text
        seconds["generation_s"] = time.perf_counter() - t
    verdict, problem = None, None
    if probe is not None and probe_info is not None:
        say("Asking the probe ...")
        try:
            verdict = probe_verdict(probe, probe_info, lm, result)
        except ProbeError as exc:  # the features are still worth showing
            problem = f"probe {probe_info.name!r} does not fit: {exc}"
    others: list[DetectorVerdict] = []
    if detectors:
        # The answer-based detectors read the answer at the task's length, as in their training data:
        # a longer answer than the one shown is generated first.
        say("Asking the other detectors (the answer at the task's length) ...")
        t = time.perf_counter()
        needed = needed_statistics(detectors, task, bool(context))
        refused = {}
        task_tokens = answer_format(task).max_new_tokens
        # The app's cap on generated tokens holds for that answer too (an answer shown whole needs none).
        if task_tokens > limits.answer_tokens and (
                shown is None or shorter_answer(lm.tokenizer, shown, settings_for_task(task)) is None):
            refused = {s: f"the answer it reads ({task_tokens} tokens) is longer than this app generates "
                          f"({limits.answer_tokens})" for s in ANSWER_STATISTICS if s in needed}
            needed = [s for s in needed if s not in refused]
        values, missing = question_statistics(lm, result.prompt, task=task, result=result, shown_answer=shown,
                                              statistics=needed) if needed else ({}, {})
        others = verdicts(detectors, values, task=task, has_context=bool(context), missing={**missing, **refused})
        seconds["detectors_s"] = time.perf_counter() - t
    return QuestionAnalysis(result=result, answer=answer, verdict=verdict, model_label=model_label, seconds=seconds,
                            probe_problem=problem, detector_verdicts=others)


def probe_verdict(probe, probe_info: ProbeInfo, lm: grade.LoadedModel, result: grade.GradeResult) -> Verdict:
    """P(answerable) from the probe, after its own check that model, depth, loss and srank variant fit."""
    probe.check_compatible(lm, result.n_layers, result.loss, srank=result.srank)
    return Verdict(probability=probe_probability(probe, probe_inputs(result, probe.inputs)[0]),
                   probe_name=probe_info.name,
                   auroc=probe_info.auroc, loss=probe_loss(probe_info))


# ---------------------------------------------------------------------------- reasoning traces


@dataclass
class Trace:
    """A chain-of-thought response analysed step by step (``pos`` loss, one loss per step)."""

    title: str
    question: str
    response: str
    result: grade.GradeResult
    display_tokens: list[str]  # decoded response tokens
    correct: bool | None = None

    @property
    def step_texts(self) -> list[str]:
        return [s.text for s in self.result.steps]

    @property
    def step_ratios(self) -> np.ndarray:
        """(K, L) rank ratio per step and layer."""
        return np.stack([s.rank_ratio for s in self.result.steps]) if self.result.steps else np.zeros((0, self.result.n_layers))

    @property
    def grade_pos(self) -> float:
        """GRADE_pos of the whole response: mean over steps and layers of the rank ratio."""
        return float(self.result.grade)

    def localization(self):
        """(signals, step of each response token, shock, surprisal): :func:`grade.locate.signals_of_result`."""
        from grade.locate import signals_of_result

        return signals_of_result(self.result)

    def surprisal_tokens(self):
        """(surprisal (1, n_response) in nats, step index per response token): the heatmap's other colouring."""
        start = self.result.response_start or 0
        _, step_of = self.scored_tokens()
        values = self.result.token_surprisal[start:] if self.result.token_surprisal is not None else np.zeros(0)
        return np.asarray(values, dtype=float)[None, :], step_of

    def scored_tokens(self):
        """(scores (L, n_response), step index per response token)."""
        start = self.result.response_start or 0
        scores = self.result.token_scores[:, start:] if self.result.token_scores is not None else np.zeros((self.result.n_layers, 0))
        step_of = [-1] * scores.shape[1]
        for k, step in enumerate(self.result.steps):
            for i in range(step.start - start, step.end - start):
                if 0 <= i < len(step_of):
                    step_of[i] = k
        return scores, step_of


def generate_cot(lm: grade.LoadedModel, question: str, task: str = "gsm8k", max_new_tokens: int | None = 192,
                 limits: Limits = LOCAL_LIMITS) -> str:
    """The model's greedy chain-of-thought answer to a math question (the task's stop rule; ``None``:
    the task's length too)."""
    question, _ = check_inputs(question, None, limits)
    max_new_tokens = check_cot_tokens(max_new_tokens or answer_format(task).max_new_tokens, limits)
    prompt = grade.prompts.format_prompt(lm.tokenizer, question, task=task)
    return greedy_answer(lm, prompt, task=task, max_new_tokens=max_new_tokens).text


def analyze_trace(lm: grade.LoadedModel, question: str, response: str, *, title: str, task: str = "gsm8k",
                  gold: list[str] | None = None, limits: Limits = LOCAL_LIMITS) -> Trace:
    """Step-wise ``pos`` analysis of ``response`` with per-token scores (shock and surprisal).

    The trace is measured first (characters, tokens, steps: each step costs a backward pass and a
    spectrum per layer) and refused with a message above ``limits``."""
    from grade.losses import steps_for_response

    question, _ = check_inputs(question, None, limits)
    if not response or not response.strip():
        raise InputError(f"{title}: the reasoning trace is empty; generate one or paste one.")
    text = response.strip()
    if len(text) > limits.trace_chars:  # before tokenising a text that may be huge
        check_trace(len(text), 0, 0, limits)
    ids = lm.tokenizer(text, add_special_tokens=False)["input_ids"]
    check_trace(len(text), len(ids), len(steps_for_response(lm.tokenizer, ids, 0, text)), limits)
    # No eigen-decompositions: stable ranks through their identities and token shock from C_g = ΔΔᵀ where C_h is
    # certified full rank, the exact route's values (bench/trace_page.py measures both routes side by side).
    result = grade.analyze(lm, question, task=task, loss="pos", response=response.strip(), steps=True, spectra=False,
                           token_scores=True, step_memory_mb=limits.step_memory_mb)
    start = result.response_start or 0
    display = [lm.tokenizer.decode([i], skip_special_tokens=False) for i in result.input_ids[start:]]
    return Trace(title=title, question=question, response=response.strip(), result=result, display_tokens=display,
                 correct=check_numeric_answer(response, gold) if gold else None)


def check_numeric_answer(response: str, gold: list[str]) -> bool | None:
    """GSM8K check (:func:`grade.tasks.gsm8k_correct`, lenient: the number after '####', else the last number)."""
    from grade.tasks import gsm8k_correct

    return bool(gsm8k_correct(response, gold, lenient=True))


def join_steps(steps: list[str]) -> str:
    """Re-assemble edited steps into one response (steps keep their own trailing whitespace)."""
    parts = [s for s in steps if s.strip()]
    text = ""
    for part in parts:
        if text and not text[-1].isspace() and not part[0].isspace():
            text += " "
        text += part
    return text.strip()
