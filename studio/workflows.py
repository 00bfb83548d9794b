"""What the pages do with the engine, without any Streamlit: one function per user action.

Every function takes the loaded model (shared) and returns plain data that the page keeps in its own
``st.session_state``; nothing is stored at module level, so concurrent sessions cannot see each
other's results. The engine holds the model's lock for each forward/backward pass and generation.
"""

from __future__ import annotations

import dataclasses
import json
import re
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import numpy as np

import grade
import grade.tasks.prompts
import grade.tasks.registry
from grade.verdict.detectors import (
    ANSWER_STATISTICS,
    DetectorVerdict,
    disagreement,
    needed_statistics,
    question_statistics,
    verdicts,
)
from grade.common.errors import InputError, ProbeError
from grade.models.generation import greedy_answer, settings_for_task, shorter_answer
from grade.tasks.tasks import answer_format
from grade.verdict.verdict import Verdict, detector_reads_answer, probe_verdict as verdict_of, withheld

from .resources import ProbeInfo
from .served import LOCAL_LIMITS, Limits, check_answer_tokens, check_cot_tokens, check_question, check_trace_text

Progress = Callable[[str], None]

MAX_QUESTION_CHARS = LOCAL_LIMITS.question_chars
MAX_CONTEXT_CHARS = LOCAL_LIMITS.context_chars
#: Home's question types: the typed ones and multiple choice (a choices box), in the registry's order.
HOME_TASKS: tuple[str, ...] = tuple(grade.tasks.registry.REGISTRY)
#: The letters of a multiple-choice question's options, as its prompt writes them and its grader reads them.
CHOICE_LETTERS = "ABCD"


def home_answer_tokens(task: str, limits: Limits = LOCAL_LIMITS) -> int:
    """Home's answer length before the user changes it: the length the task's labels were sampled with (the
    answer the labels, and so the verdicts' evidence, judge), within this studio's cap."""
    return min(answer_format(task).max_new_tokens, limits.answer_tokens)


def raised_answer_tokens(tokens: int, limits: Limits = LOCAL_LIMITS) -> int | None:
    """The next answer length to offer after an answer was cut off at ``tokens``: twice as long, within the cap;
    None at the cap."""
    return None if tokens >= limits.answer_tokens else min(2 * tokens, limits.answer_tokens)


_OPTION_MARK = re.compile(r"^\s*(?:\(?[A-Da-d][.):]|[A-Da-d]\s*[-–]|\d+[.)])\s+")


def parse_choices(text: str | None) -> list[str]:
    """The options of a multiple-choice question typed one per line (a leading "A." / "(b)" / "1." the user
    typed is dropped: the prompt letters them itself); empty lines are skipped. Raises InputError unless there
    are 2 to 4: the multiple-choice prompt and its letter rule know A to D."""
    options = [_OPTION_MARK.sub("", line).strip() for line in (text or "").splitlines()]
    options = [o for o in options if o]
    if not 2 <= len(options) <= len(CHOICE_LETTERS):
        raise InputError(f"A multiple-choice question needs 2 to {len(CHOICE_LETTERS)} options, one per line in the "
                         f"choices box (it has {len(options)}).")
    return options


def asked_text(question: str, choices: list[str] | None) -> str:
    """The question as analysed: with its lettered options where it has some (what a result is cached under)."""
    question = (question or "").strip()
    if not choices:
        return question
    return question + "\n" + "\n".join(f"{letter}. {c}" for letter, c in zip(CHOICE_LETTERS, choices))


def home_examples(model: str | None) -> dict[str, tuple[str, str | None, str]]:
    """Home's example questions: a few from the shipped datasets, and the loaded model's own known / wrong
    ones (by its labels). label -> (question, context, task)."""
    from .resources import load_questions, model_examples

    examples: dict[str, tuple[str, str | None, str]] = {
        "Capital of France (well known)": ("What is the capital of France?", None, "qa"),
    }
    for row in model_examples(model) if model else []:
        examples[row["label"]] = (row["question"], row.get("context"), row.get("task") or "qa")
    for row in _reading_right(load_questions("triviaqa", 10), 3):
        examples[f"TriviaQA: {row['question'][:60]}"] = (row["question"], None, "qa")
    for row in _reading_right(load_questions("hotpotqa", 10), 2):
        examples[f"HotpotQA + document: {row['question'][:50]}"] = (row["question"], row.get("context"), "qa")
    for row in _reading_right(load_questions("gsm8k", 10), 1):
        examples[f"GSM8K: {row['question'][:60]}"] = (row["question"], None, "gsm8k")
    return examples


#: A digit between lower-case letters: a typo in the published data ("grou0p", "cou8ntry" in TriviaQA), which the
#: datasets keep as published. (It would also skip "h2o": not among the rows the examples are taken from.)
_TYPO = re.compile(r"[a-z]\d+[a-z]")


def _reading_right(rows: list[dict], n: int) -> list[dict]:
    """The first ``n`` of ``rows`` whose question has no typo of :data:`_TYPO`: an example is read aloud in class."""
    return [row for row in rows if not _TYPO.search(row["question"])][:n]


def trace_example_problems(model: str) -> list[dict]:
    """The Reasoning trace problems whose reference solutions ship analysed: the model's own solved and failed
    ones, then the one the page opens on (the first of the GSM8K dev set)."""
    from .resources import load_questions, trace_examples

    return list(trace_examples(model)) + load_questions("gsm8k", 1)


# ------------------------------------------------------------------ results as files (safetensors + JSON)

SAVED_FORMAT = 1
#: Arrays that may be written as float16 when asked (``half=``): hidden states sit far inside its range and
#: are only drawn (Projections' star). Spectra are not among them: C_g's eigenvalues fall below float16's
#: smallest number, and the Spectra page counts them against thresholds down to 1e-6 of the largest.
HALF_PRECISION_OK = ("last_hidden",)


def _result_parts(result: grade.GradeResult, half: tuple[str, ...] = (),
                  hidden_layers: list[int] | None = None) -> tuple[dict[str, np.ndarray], dict]:
    """(arrays, JSON fields) of a :class:`grade.GradeResult`: its arrays (``steps.<k>.<name>`` for a step's)
    as float32, or float16 for those in ``half`` that fit, and every other field as it is. With
    ``hidden_layers``, only those rows of ``last_hidden`` (L + 1, d) are kept; the others load as NaN."""
    from grade.gradients.result import StepResult

    def stored(name: str, value) -> np.ndarray:
        array = np.ascontiguousarray(value, dtype=np.float32)
        if name in half and name in HALF_PRECISION_OK and np.all(np.abs(array[np.isfinite(array)]) < 6e4):
            return array.astype(np.float16)
        return array

    arrays = {name: stored(name, getattr(result, name)) for name in grade.GradeResult._ARRAYS
              if getattr(result, name) is not None}
    for k, step in enumerate(result.steps):
        arrays.update({f"steps.{k}.{name}": stored(name, getattr(step, name)) for name in StepResult._ARRAYS
                       if getattr(step, name) is not None})
    skip = set(grade.GradeResult._ARRAYS) | set(StepResult._ARRAYS) | set(grade.GradeResult._NOT_SAVED) | {"layers"}
    fields = {f.name: getattr(result, f.name) for f in dataclasses.fields(result)
              if f.name not in skip and f.name != "steps"}
    if hidden_layers is not None and "last_hidden" in arrays:
        fields["last_hidden_rows"] = {"kept": [int(i) for i in hidden_layers], "shape": list(arrays["last_hidden"].shape)}
        arrays["last_hidden"] = np.ascontiguousarray(arrays["last_hidden"][list(hidden_layers)])
    fields["steps"] = [{f.name: getattr(s, f.name) for f in dataclasses.fields(s) if f.name not in skip}
                       for s in result.steps]
    return arrays, fields


def _result_from_parts(arrays: dict[str, np.ndarray], fields: dict) -> grade.GradeResult:
    result = grade.GradeResult.from_dict(fields)  # arrays absent: None, filled in below
    rows = fields.get("last_hidden_rows")
    for name, value in arrays.items():
        parts = name.split(".")
        value = np.asarray(value, dtype=np.float64 if value.dtype == np.float32 else np.float32)
        if name == "last_hidden" and rows:
            full = np.full(rows["shape"], np.nan, dtype=value.dtype)
            full[rows["kept"]] = value
            value = full
        if parts[0] == "steps":
            setattr(result.steps[int(parts[1])], parts[2], value)
        else:
            setattr(result, name, value)
    return result


def save_parts(path: str | Path, kind: str, arrays: dict[str, np.ndarray], fields: dict) -> tuple[Path, Path]:
    """``path.safetensors`` (arrays) and ``path.json`` (everything else), written atomically together."""
    from safetensors.numpy import save_file

    from grade.verdict.artifacts import jsonable
    from grade.common.io import atomic_paths

    path = Path(path)
    weights, meta = path.with_name(path.name + ".safetensors"), path.with_name(path.name + ".json")
    weights.parent.mkdir(parents=True, exist_ok=True)
    with atomic_paths(weights, meta) as (weights_tmp, meta_tmp):
        save_file(arrays, str(weights_tmp))
        meta_tmp.write_text(json.dumps(jsonable({"kind": kind, "format": SAVED_FORMAT, **fields}), ensure_ascii=False,
                                       indent=1) + "\n", encoding="utf-8")
    return weights, meta


def load_parts(path: str | Path, kind: str) -> tuple[dict[str, np.ndarray], dict]:
    from safetensors.numpy import load_file

    from grade.common.errors import GradeError

    path = Path(path)
    try:
        fields = json.loads(path.with_name(path.name + ".json").read_text(encoding="utf-8"))
        arrays = load_file(str(path.with_name(path.name + ".safetensors")))
    except (OSError, ValueError) as exc:
        raise GradeError(f"saved {kind} {path.name} could not be read: {exc}") from exc
    if fields.get("kind") != kind or fields.get("format") != SAVED_FORMAT:
        raise GradeError(f"{path.name} is not a saved {kind} of format {SAVED_FORMAT}")
    return arrays, fields


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
    origin: dict[str, Any] | None = None  # a shipped result: what was asked, where and how it was computed
    max_new_tokens: int | None = None  # the answer length it was generated with
    cut_off: bool = False  # the answer stopped at max_new_tokens before it ended: the model had not finished
    choices: list[str] | None = None  # a multiple-choice question's options (lettered A-D in its prompt)

    def as_cached(self, computed_at: float) -> "QuestionAnalysis":
        """A copy marked as coming from the cache (the stored object itself is shared and left alone)."""
        return dataclasses.replace(self, from_cache=True, computed_at=computed_at)

    def save(self, path: str | Path, half: tuple[str, ...] = (),
             hidden_layers: list[int] | None = None) -> tuple[Path, Path]:
        """Write ``path.safetensors`` (the result's arrays; those named in ``half`` as float16 where
        :data:`HALF_PRECISION_OK` allows; of the hidden states only ``hidden_layers`` if given) and
        ``path.json`` (the rest). Returns both paths."""
        arrays, fields = _result_parts(self.result, half, hidden_layers)
        return save_parts(path, "question analysis", arrays, {
            "result": fields, "answer": self.answer, "model_label": self.model_label, "seconds": self.seconds,
            "verdict": dataclasses.asdict(self.verdict) if self.verdict is not None else None,
            "probe_problem": self.probe_problem, "detectors_problem": self.detectors_problem,
            "detector_verdicts": [dataclasses.asdict(v) for v in self.detector_verdicts],
            "computed_at": self.computed_at, "origin": self.origin, "max_new_tokens": self.max_new_tokens,
            "cut_off": self.cut_off, "choices": self.choices})

    @classmethod
    def load(cls, path: str | Path) -> "QuestionAnalysis":
        """What :meth:`save` wrote (arrays come back as float64, as computed)."""
        arrays, fields = load_parts(path, "question analysis")
        return cls(result=_result_from_parts(arrays, fields["result"]), answer=fields["answer"],
                   verdict=Verdict(**fields["verdict"]) if fields.get("verdict") else None,
                   model_label=fields["model_label"], seconds=fields.get("seconds") or {},
                   probe_problem=fields.get("probe_problem"),
                   detector_verdicts=[DetectorVerdict(**v) for v in fields.get("detector_verdicts") or []],
                   detectors_problem=fields.get("detectors_problem"), computed_at=fields["computed_at"],
                   origin=fields.get("origin"), max_new_tokens=fields.get("max_new_tokens"),
                   cut_off=bool(fields.get("cut_off")), choices=fields.get("choices"))

    @property
    def disagreement(self) -> str | None:
        """One sentence when the probe and the other detectors do not all say the same, else None (verdicts
        withheld, :meth:`withheld`, do not vote)."""
        votes = [("the GRADE probe", self.verdict.answerable)] if self.verdict is not None and self.probe_withheld is None else []
        return disagreement(votes + [(v.title, v.answerable) for v in self.detector_verdicts if self.withheld(v) is None])

    @property
    def probe_withheld(self) -> str | None:
        """Why the probe's verdict is not presented as meaningful (:func:`grade.verdict.verdict.withheld`), else None."""
        if self.verdict is None:
            return None
        return withheld(reads_answer=self.verdict.loss == "pos", cut_off=self.cut_off, max_new_tokens=self.max_new_tokens,
                        in_range=self.verdict.in_range)

    def withheld(self, detector: DetectorVerdict) -> str | None:
        """Why a detector's verdict is not presented as meaningful on this answer, else None."""
        return withheld(reads_answer=detector_reads_answer(detector.name), cut_off=self.cut_off,
                        max_new_tokens=self.max_new_tokens)

    def correct(self, gold: str | None) -> bool | None:
        """Whether the answer is right by the task's own grader against ``gold`` (one accepted answer; for
        multiple choice its letter), None without a gold answer (:func:`grade_answer`)."""
        return grade_answer(self.result.task, self.answer, gold, self.choices)


def grade_answer(task: str, answer: str, gold: str | None, choices: list[str] | None = None) -> bool | None:
    """``answer`` marked right or wrong against ``gold`` by ``task``'s grader, the labels' lenient reading
    (:mod:`grade.tasks.grading`: short answer = the gold words in the reply; multiple choice = the letter;
    GSM8K = the final number; MATH = the boxed answer). ``gold`` may hold several accepted answers separated
    by "|". None when no gold answer is given."""
    spec = grade.tasks.registry.task_spec(task)
    accepted = [g.strip() for g in (gold or "").split("|") if g.strip()]
    if not accepted or spec is None or spec.checker is None:
        return None
    if spec.choices:
        accepted = [g.upper().strip("().") for g in accepted]
    return bool(spec.is_correct(answer, accepted, choices, lenient=True))


def check_inputs(question: str, context: str | None, limits: Limits = LOCAL_LIMITS) -> tuple[str, str | None]:
    """Reject what the engine would reject, with the app's own (tighter) length limits."""
    from grade.common.visible import is_blank

    question = (question or "").strip()
    context = (context or "").strip() or None
    if is_blank(context):
        context = None
    if is_blank(question):  # the CLI's rule: nothing visible once spaces and invisible characters are removed
        raise InputError("Please type a question first: the question box is empty.")
    check_question(question, limits, context)  # the served caps' one check (studio.served)
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
    choices: list[str] | None = None,
) -> QuestionAnalysis:
    """Features (with spectra and hidden states), the greedy answer, the probe's verdict and the verdicts
    of ``detectors`` (:mod:`grade.verdict.detectors`, loaded for this model) for one question.

    The feature loss follows the probe (``pre`` if none). Under ``pre`` the answer is generated
    separately, only to show it; under ``pos`` it is the response the features are computed on. Either
    way it is the answer the labels judge: the task's length (unless ``max_new_tokens``) and stop rule.
    ``choices``: a multiple-choice question's options (task ``mmlu``: lettered A-D in the prompt, as MMLU's
    labelled questions were asked). The result says whether the answer was cut off by its length.
    """
    say = progress or (lambda line: None)
    question, context = check_inputs(question, context, limits)
    if grade.tasks.registry.REGISTRY.get(task) is not None and grade.tasks.registry.REGISTRY[task].choices:
        if not choices:
            raise InputError("A multiple-choice question needs its options: one per line in the choices box.")
    elif choices:
        raise InputError(f"Only a multiple-choice question takes options (this one is {task!r}).")
    max_new_tokens = check_answer_tokens(max_new_tokens or answer_format(task).max_new_tokens, limits)
    # the labelled questions' own prompt (grade.tasks.question_sets.Question.prompt): options lettered after it
    prompt = (grade.tasks.prompts.format_prompt(lm.tokenizer, question, task=task, context=context, choices=choices)
              if choices else None)
    loss = probe_loss(probe_info)
    srank = str((probe_info.metadata.get("srank") if probe_info else None) or "paper")
    seconds: dict[str, float] = {}
    shown = None  # the greedy answer as generated, where this function generated it
    if loss == "pos":
        say("Generating the answer and computing GRADE features (pos loss) ...")
        t = time.perf_counter()
        result = grade.analyze(lm, question, context=context, task=task, loss="pos", generate=True, srank=srank,
                               keep_hidden=True, max_new_tokens=max_new_tokens, memory_mb=limits.analysis_memory_mb,
                               prompt=prompt)
        answer = result.response or ""
        # generation stops at the length only when no stop rule ended it first: every token was used
        cut_off = len(result.input_ids) - (result.response_start or 0) >= max_new_tokens
        seconds["analysis_s"] = time.perf_counter() - t
    else:
        say("Computing GRADE features (entropy after the prompt) ...")
        t = time.perf_counter()
        # The answer (where torch generates it) and the detectors' pass over it start from this pass's key/value
        # cache instead of reading the prompt again: on a CPU a pass over a short prompt costs about as much
        # as the whole answer (bench/home_speed.py).
        result = grade.analyze(lm, question, context=context, task=task, loss="pre", srank=srank, keep_hidden=True,
                               keep_prompt_pass=True, memory_mb=limits.analysis_memory_mb, prompt=prompt)
        seconds["analysis_s"] = time.perf_counter() - t
        say("Generating the model's answer ...")
        t = time.perf_counter()
        shown = greedy_answer(lm, result.prompt, task=task, max_new_tokens=max_new_tokens,
                              prompt_pass=result.prompt_pass)
        answer = shown.text
        cut_off = shown.finish == "length"
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
    result.prompt_pass = None  # the cache is for this analysis' own passes, not for the analysis cache to keep
    return QuestionAnalysis(result=result, answer=answer, verdict=verdict, model_label=model_label, seconds=seconds,
                            probe_problem=problem, detector_verdicts=others, max_new_tokens=max_new_tokens,
                            cut_off=cut_off, choices=list(choices) if choices else None)


def probe_verdict(probe, probe_info: ProbeInfo, lm: grade.LoadedModel, result: grade.GradeResult) -> Verdict:
    """P(answerable) from the probe, after its own check that model, depth, loss and srank variant fit
    (:func:`grade.verdict.verdict.probe_verdict`)."""
    return verdict_of(probe, result, name=probe_info.name, lm=lm)


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
    origin: dict[str, Any] | None = None  # a shipped result: what was asked, where and how it was computed
    computed_at: float = field(default_factory=time.time)

    def save(self, path: str | Path) -> tuple[Path, Path]:
        """Write ``path.safetensors`` (the result's arrays) and ``path.json`` (the rest). Returns both paths."""
        arrays, fields = _result_parts(self.result)
        return save_parts(path, "trace analysis", arrays, {
            "result": fields, "title": self.title, "question": self.question, "response": self.response,
            "display_tokens": self.display_tokens, "correct": self.correct, "computed_at": self.computed_at,
            "origin": self.origin})

    @classmethod
    def load(cls, path: str | Path) -> "Trace":
        arrays, fields = load_parts(path, "trace analysis")
        return cls(title=fields["title"], question=fields["question"], response=fields["response"],
                   result=_result_from_parts(arrays, fields["result"]), display_tokens=fields["display_tokens"],
                   correct=fields.get("correct"), origin=fields.get("origin"), computed_at=fields["computed_at"])

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
        """(signals, step of each response token, shock, surprisal): :func:`grade.steps.locate.signals_of_result`."""
        from grade.steps.locate import signals_of_result

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


@dataclass(frozen=True)
class GeneratedTrace:
    """A generated chain of thought; ``cut_off``: generation stopped at ``max_new_tokens`` before the answer ended
    (the trace may have no final answer, so "wrong" would only mean unfinished)."""

    text: str
    cut_off: bool
    max_new_tokens: int


def generate_trace(lm: grade.LoadedModel, question: str, task: str = "gsm8k", max_new_tokens: int | None = 192,
                   limits: Limits = LOCAL_LIMITS) -> GeneratedTrace:
    """The model's greedy chain-of-thought answer to a math question (the task's stop rule; ``None``:
    the task's length too), and whether the length cut it off."""
    question, _ = check_inputs(question, None, limits)
    max_new_tokens = check_cot_tokens(max_new_tokens or answer_format(task).max_new_tokens, limits)
    prompt = grade.tasks.prompts.format_prompt(lm.tokenizer, question, task=task)
    answer = greedy_answer(lm, prompt, task=task, max_new_tokens=max_new_tokens)
    return GeneratedTrace(answer.text, answer.finish == "length", max_new_tokens)


def generate_cot(lm: grade.LoadedModel, question: str, task: str = "gsm8k", max_new_tokens: int | None = 192,
                 limits: Limits = LOCAL_LIMITS) -> str:
    """The text of :func:`generate_trace`."""
    return generate_trace(lm, question, task, max_new_tokens, limits).text


def analyze_trace(lm: grade.LoadedModel, question: str, response: str, *, title: str, task: str = "gsm8k",
                  gold: list[str] | None = None, limits: Limits = LOCAL_LIMITS,
                  progress: Callable[[str], None] | None = None) -> Trace:
    """Step-wise ``pos`` analysis of ``response`` with per-token scores (shock and surprisal).

    The trace is measured first (characters, tokens, steps: each step costs a backward pass and a
    spectrum per layer) and refused with a message above ``limits``. While it runs, ``progress`` gets one line
    per finished step group (steps done of all, seconds so far); past ``limits.trace_seconds`` it stops with
    one message naming how far it got (:func:`trace_progress`)."""
    question, _ = check_inputs(question, None, limits)
    from grade.common.visible import is_blank

    if is_blank(response):
        raise InputError(f"{title}: the reasoning trace is empty; generate one or paste one.")
    check_trace_text(question, response, lm.tokenizer, limits)  # characters before tokens, then tokens and steps
    # No eigen-decompositions: stable ranks through their identities and token shock from C_g = ΔΔᵀ where C_h is
    # certified full rank, the exact route's values (bench/trace_page.py measures both routes side by side).
    from grade.common.progress import reporting

    with reporting(trace_progress(title, limits, progress)):
        result = grade.analyze(lm, question, task=task, loss="pos", response=response.strip(), steps=True,
                               spectra=False, token_scores=True, step_memory_mb=limits.step_memory_mb)
    start = result.response_start or 0
    display = [lm.tokenizer.decode([i], skip_special_tokens=False) for i in result.input_ids[start:]]
    return Trace(title=title, question=question, response=response.strip(), result=result, display_tokens=display,
                 correct=check_numeric_answer(response, gold) if gold else None)


def trace_progress(title: str, limits: Limits, progress: Callable[[str], None] | None = None):
    """A :func:`grade.common.progress.reporting` callback for one trace: a line to ``progress`` per report, and an
    InputError once ``limits.trace_seconds`` have passed with steps still to do (0: no time bound)."""
    started = time.monotonic()

    def on_steps(done: int, total: int, unit: str) -> None:
        elapsed = time.monotonic() - started
        if limits.trace_seconds and elapsed > limits.trace_seconds and done < total:
            raise InputError(f"{title}: stopped after {done} of {total} {unit} and {elapsed:.0f} s; this studio "
                             f"analyses a trace for at most {limits.trace_seconds:g} s. Shorten it or merge steps.")
        if progress is not None:
            # a step costs about its prefix's length: the work done grows as done², all of it as total²
            left = f", about {elapsed * (total ** 2 - done ** 2) / done ** 2:.0f} s left" if 0 < done < total else ""
            progress(f"Analyzing {title}: {done}/{total} {unit} done ({elapsed:.0f} s{left})")

    return on_steps


def check_numeric_answer(response: str, gold: list[str]) -> bool | None:
    """GSM8K check (:func:`grade.tasks.tasks.gsm8k_correct`, lenient: the number after '####', else the last number)."""
    from grade.tasks.tasks import gsm8k_correct

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
