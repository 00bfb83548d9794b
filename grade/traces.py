"""Error analysis of many reasoning traces: read an evaluation run, score every trace step-wise, triage.

Inputs (:func:`read_traces` tells them apart by their fields):

* an **lm-evaluation-harness samples file** (``lm_eval ... --log_samples`` writes
  ``samples_<task>_<date>.jsonl``): one object per document and filter with ``doc_id``, ``doc`` (the
  dataset row), ``target``, ``arguments``, ``resps`` ([[text, ...]]: the generations), ``filtered_resps``,
  ``filter``, ``metrics`` and each metric's value. Correctness is the file's metric (``exact_match`` by
  default) under one filter (the file's first, e.g. ``strict-match`` for GSM8K); a document with several
  generations (``repeats``, self-consistency) has one document-level metric, so its traces are
  re-scored one by one with :func:`grade.tasks.is_correct` against the gold answer (the ``source``
  column says which). GSM8K and MATH tasks (``gsm8k*``, ``minerva_math*``, ``hendrycks_math*``, ...);
* this project's **trace JSONL**: ``question``, ``response``, ``correct`` (true / false / null), optional
  ``doc_id`` (or ``id``), ``sample``, ``task``, ``answers``, and ``error_step`` / ``error_kind`` where the
  first wrong step is known (1-based, in the steps of :func:`grade.losses.split_steps`; the step-error
  benchmark's traces carry them);
* a **labels file** of :mod:`grade.labeling` with full samples: each sampled answer is a trace, scored as
  the labeller scored it. :func:`generate_traces` writes one: the model's own traces, as GRADE_pos is
  defined;
* an **Inspect AI eval log** (``.eval``, or ``.json`` with ``eval`` and ``samples``), read with ``inspect_ai``'s
  own reader (optional: ``pip install 'grade-studio[inspect]'``): one trace per sample and epoch, correct from
  a scorer's C / I (the first scorer; ``--metric`` names another). See :mod:`grade.inspect_logs`.

Each trace gets a step-wise ``pos`` analysis (:func:`grade.analyze` with ``steps=True``): a rank ratio per
step and layer, GRADE_pos (their mean), per-token epistemic shock (row sums of ``C_g``) and token surprisal,
and a ``suspect_step``: the step that :data:`grade.locate.DEFAULT_LOCATOR` ranks first as where the trace
goes wrong (the arithmetic / provenance check of :mod:`grade.step_checks`, then surprisal), with the
per-step signals behind it. How often each signal finds a known wrong step: ``python -m grade steperrors``.

The **trace store** is a folder::

    meta.json                  model, loss, srank and where the traces came from
    traces/part-*.parquet      one row per trace (columns: :data:`TRACE_SCHEMA`)
    tokens/part-*.parquet      one row per response token (:data:`TOKEN_SCHEMA`)
    annotations.json           the analyst's error step and kind per trace
    generated.jsonl            (generation only) the sampled traces, as a labels file

Parts are written as :mod:`grade.features` writes its store (atomically, one per finished chunk, a
chunk's tokens before its traces), so an interrupted run keeps every finished chunk and a re-run only
analyses the traces not yet stored. Steps are numbered from 1 wherever a user sees them
(``peak_step``, ``error_step``, the ``step`` of a token); token ``position`` counts response tokens from 0.

Aggregates (:func:`aggregate`) put numbers on the paper's case study: where the shock peaks in correct
and wrong traces (step position, token class), how often the peak step is the step an analyst marked as
the error, and how well GRADE_pos ranks wrong traces (AUROC with a bootstrap interval, beside trace
length and the plain cross-entropy).
"""

from __future__ import annotations

import json
import logging
import math
import os
import re
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from . import __version__
from .batch.parts import PartStore
from .batch.runner import run_local
from .errors import GradeError, InputError
from .locate import DEFAULT_LOCATOR, locate, ranked_steps, step_signals

log = logging.getLogger(__name__)

FORMAT_VERSION = 2  # 2: step-error localization columns and token surprisal
#: Error kinds an analyst can mark (the last one catches the rest).
ERROR_KINDS = ("arithmetic slip", "misread question", "wrong operation", "unit error", "other")
#: Token classes of :func:`token_class`.
TOKEN_CLASSES = ("number", "operator", "word", "other")
TRACE_TASKS = ("gsm8k", "math")
PROMPTS = ("task", "run")

ProgressCallback = Callable[[int, int, str], None]  # (traces done, traces to do, id of the last trace)

TRACE_SCHEMA = pa.schema(
    [
        ("trace_id", pa.string()),  # "<doc_id>:<sample>", the store's key
        ("doc_id", pa.string()),
        ("sample", pa.int32()),  # index of the generation within its document (0 for one per document)
        ("task", pa.string()),
        ("source", pa.string()),  # where ``correct`` comes from, e.g. "metric exact_match, filter strict-match"
        ("question", pa.string()),
        ("response", pa.string()),
        ("answers", pa.list_(pa.string())),  # gold answers, when the input names them
        ("correct", pa.bool_()),  # null: not known
        ("model", pa.string()),
        ("loss", pa.string()),
        ("srank", pa.string()),
        ("n_layers", pa.int32()),
        ("n_tokens", pa.int32()),  # response tokens
        ("n_steps", pa.int32()),
        ("grade_pos", pa.float64()),  # mean over steps and layers of the rank ratio
        ("loss_value", pa.float64()),  # mean over steps of the step's cross-entropy
        ("rank_ratio", pa.list_(pa.float64())),  # (L,) mean over steps: the GRADE_pos feature vector
        ("step_texts", pa.list_(pa.string())),  # (K,)
        ("step_ratio", pa.list_(pa.float64())),  # (K,) mean over layers: the step's shock
        ("step_loss", pa.list_(pa.float64())),  # (K,)
        ("step_start", pa.list_(pa.int32())),  # (K,) first response token of each step
        ("step_ratios", pa.list_(pa.list_(pa.float64()))),  # (K, L)
        ("peak_step", pa.int32()),  # 1-based step with the largest step_ratio
        ("peak_step_text", pa.string()),
        ("peak_step_ratio", pa.float64()),
        ("peak_token", pa.string()),  # the token with the largest shock
        ("peak_token_position", pa.int32()),
        ("peak_token_step", pa.int32()),
        ("peak_token_class", pa.string()),
        # step-error localization (grade.locate): the default locator's ranking and the signals behind it
        ("locator", pa.string()),  # name of the locator behind suspect_step
        ("suspect_step", pa.int32()),  # 1-based: the step the locator ranks first
        ("suspect_step_text", pa.string()),
        ("step_ranking", pa.list_(pa.int32())),  # (K,) 1-based steps, most suspect first
        ("step_check", pa.list_(pa.float64())),  # (K,) the check's score, 0 = nothing found
        ("step_findings", pa.list_(pa.string())),  # (K,) each step's check findings as a JSON list
        ("step_surprisal_max", pa.list_(pa.float64())),  # (K,)
        ("step_surprisal_mean", pa.list_(pa.float64())),  # (K,)
        ("step_shock_max", pa.list_(pa.float64())),  # (K,)
        ("step_shock_mean", pa.list_(pa.float64())),  # (K,)
        ("known_error_step", pa.int32()),  # 1-based first wrong step given with the trace (a benchmark's), or null
        ("known_error_kind", pa.string()),
        ("seconds", pa.float64()),  # analysis time of this trace
        ("format_version", pa.int32()),
        ("package_version", pa.string()),
    ]
)

TOKEN_SCHEMA = pa.schema(
    [
        ("trace_id", pa.string()),
        ("position", pa.int32()),  # index among the response tokens
        ("step", pa.int32()),  # 1-based
        ("token", pa.string()),  # decoded text of the token
        ("token_class", pa.string()),
        ("shock", pa.float32()),  # in [0, 1] within its trace, see :func:`token_shock`
        ("surprisal", pa.float32()),  # nats: cross-entropy of the token given everything before it
        ("scores", pa.list_(pa.float32())),  # (L,) raw row sums of C_g
    ]
)


# --------------------------------------------------------------------------------------------------
# traces to analyse


@dataclass(frozen=True)
class TraceItem:
    """One reasoning trace to analyse (picklable: it travels to Ray workers)."""

    doc_id: str
    sample: int
    question: str
    response: str
    correct: bool | None
    task: str = "gsm8k"
    source: str = ""
    answers: tuple[str, ...] = ()
    prompt: str | None = None  # a ready prompt (the run's own); None: this project's task prompt
    error_step: int | None = None  # 1-based first wrong step, where the input knows it (a benchmark)
    error_kind: str | None = None

    @property
    def trace_id(self) -> str:
        return trace_id(self.doc_id, self.sample)


def trace_id(doc_id: Any, sample: int) -> str:
    return f"{doc_id}:{int(sample)}"


@dataclass
class TraceSource:
    """What :func:`read_traces` found in a file: the traces and how they were read."""

    path: str
    format: str  # "lm-eval", "jsonl", "labels" or "inspect"
    task: str
    items: list[TraceItem]
    metric: str | None = None
    filter: str | None = None
    prompt: str = "task"
    metrics: list[str] = field(default_factory=list)  # the metrics the file offers (lm-eval)
    filters: list[str] = field(default_factory=list)  # its filters (lm-eval)
    notes: list[str] = field(default_factory=list)  # what a user should know (duplicates dropped, re-scoring)

    def describe(self) -> dict[str, Any]:
        """The reading settings (stored in the store's meta.json; a resumed run must match them)."""
        return {"file": Path(self.path).name, "format": self.format, "task": self.task, "metric": self.metric,
                "filter": self.filter, "prompt": self.prompt}


_LM_EVAL_BOOKKEEPING = {"doc_id", "doc", "target", "arguments", "resps", "filtered_resps", "filter", "metrics",
                        "doc_hash", "prompt_hash", "target_hash"}
_QUESTION_KEYS = ("question", "problem", "Question", "Problem", "input", "query")


def _read_objects(path: Path, skipped: list[str] | None = None) -> list[tuple[int, dict]]:
    """The JSON objects of a trace file with their line numbers. A line over the reader's byte bound is
    skipped unread (named in ``skipped``); any other bad line stops the read with one message."""
    from .io import MAX_LINE_BYTES, check_input_file, iter_jsonl

    check_input_file(path, "trace file")
    rows = []
    for number, row, problem in iter_jsonl(path):  # bad bytes are a problem too, not a traceback
        if problem and row is None and skipped is not None and problem.startswith("longer than"):
            skipped.append(f"line {number} is longer than {MAX_LINE_BYTES:,} bytes and was skipped unread")
            continue
        if problem:
            raise InputError(f"{path}, line {number}: {problem}")
        if not isinstance(row, dict):
            raise InputError(f"{path}, line {number}: expected a JSON object")
        rows.append((number, row))
    if not rows:
        raise InputError(f"{path} holds no traces")
    return rows


def _check_task(task: str | None) -> str | None:
    if task is not None and task not in TRACE_TASKS:
        raise InputError(f"unknown task {task!r}; use {' or '.join(TRACE_TASKS)}")
    return task


def _task_from_name(path: Path) -> str | None:
    """GSM8K or MATH from an lm-eval file name (``samples_gsm8k_cot_2024-...jsonl``)."""
    name = path.name.lower()
    match = re.match(r"samples_(.+?)_\d{4}-\d{2}-\d{2}t", name)
    task = match.group(1) if match else name
    if "gsm" in task:
        return "gsm8k"
    if "math" in task:
        return "math"
    return None


def _gold_answers(doc: dict, target: Any, task: str) -> tuple[str, ...]:
    from .tasks import last_boxed

    target = "" if target is None else str(target)
    if task == "gsm8k":
        for text in (doc.get("answer"), target):
            if isinstance(text, str) and "####" in text:
                return (text.split("####", 1)[1].strip().replace(",", ""),)
        return (target.strip(),) if target.strip() else ()
    for value in (doc.get("answer"), last_boxed(str(doc.get("solution") or "")), target):
        if isinstance(value, str) and value.strip():
            return (value.strip(),)
    return ()


def _rescore(task: str, response: str, answers: Sequence[str]) -> bool | None:
    from .tasks import Question, is_correct

    if not answers:
        return None
    return bool(is_correct(Question(id="", question="", answers=list(answers), task=task), response, "strict"))


def _metric_value(value: Any, metric: str, where: str) -> bool | None:
    if value is None:
        return None
    if isinstance(value, bool):
        return value
    if isinstance(value, (int, float)) and float(value) in (0.0, 1.0):
        return float(value) == 1.0
    raise InputError(f"{where}: metric {metric!r} is {value!r}, not a per-trace 0/1 score; choose another --metric")


def _run_prompt(arguments: Any, where: str) -> str:
    """The prompt the run generated from: ``gen_args_0.arg_0`` (older files: ``arguments[0][0]``)."""
    prompt = None
    if isinstance(arguments, dict):
        first = arguments.get("gen_args_0")
        prompt = first.get("arg_0") if isinstance(first, dict) else None
    elif isinstance(arguments, list) and arguments and isinstance(arguments[0], list) and arguments[0]:
        prompt = arguments[0][0]
    if not isinstance(prompt, str) or not prompt.strip():
        raise InputError(f"{where}: no prompt text in 'arguments' (use --prompt task)")
    return prompt


def read_lm_eval_samples(path: str | Path, *, task: str | None = None, metric: str | None = None,
                         filter_name: str | None = None, prompt: str = "task",
                         rows: list[tuple[int, dict]] | None = None) -> TraceSource:
    """Traces of an lm-evaluation-harness samples file (see the module docstring)."""
    path = Path(path)
    rows = rows if rows is not None else _read_objects(path)
    if prompt not in PROMPTS:
        raise InputError(f"unknown prompt {prompt!r}; use task (this project's prompt) or run (the file's)")
    for number, row in rows:
        for key in ("doc_id", "doc", "resps"):
            if key not in row:
                raise InputError(f"{path}, line {number}: missing field {key!r} of an lm-evaluation-harness sample")
    filters = list(dict.fromkeys(str(row.get("filter", "none")) for _, row in rows))
    chosen_filter = filter_name or filters[0]
    if chosen_filter not in filters:
        raise InputError(f"{path} has no filter {chosen_filter!r}; it has {', '.join(filters)}")
    rows = [(n, r) for n, r in rows if str(r.get("filter", "none")) == chosen_filter]
    offered = list(dict.fromkeys(m for _, r in rows for m in (r.get("metrics") or [])))
    if not offered:  # older files name no metrics: every scalar field that is not bookkeeping
        offered = list(dict.fromkeys(k for _, r in rows for k, v in r.items()
                                     if k not in _LM_EVAL_BOOKKEEPING and isinstance(v, (int, float, bool))))
    if metric is None:
        if "exact_match" in offered:
            metric = "exact_match"
        elif len(offered) == 1:
            metric = offered[0]
        else:
            raise InputError(f"{path}: choose the correctness metric with --metric ({', '.join(offered) or 'none found'})")
    elif metric not in offered:
        raise InputError(f"{path} has no metric {metric!r}; it has {', '.join(offered) or 'none'}")
    first_doc = rows[0][1]["doc"] if isinstance(rows[0][1].get("doc"), dict) else {}
    task = _check_task(task) or _task_from_name(path) or ("math" if "problem" in first_doc else
                                                          "gsm8k" if "question" in first_doc else None)
    if task is None:
        raise InputError(f"{path}: cannot tell GSM8K from MATH; give --task gsm8k or --task math")

    items: list[TraceItem] = []
    notes: list[str] = []
    seen: set[str] = set()
    duplicates = rescored = 0
    for number, row in rows:
        where = f"{path}, line {number}"
        doc = row["doc"]
        if not isinstance(doc, dict):
            raise InputError(f"{where}: 'doc' is not an object")
        question = next((doc[k] for k in _QUESTION_KEYS if isinstance(doc.get(k), str) and doc[k].strip()), None)
        if question is None:
            raise InputError(f"{where}: no question in 'doc' (looked for {', '.join(_QUESTION_KEYS)})")
        resps = row["resps"]
        texts = resps[0] if isinstance(resps, list) and resps and isinstance(resps[0], list) else resps
        if not isinstance(texts, list) or not all(isinstance(t, str) for t in texts):
            raise InputError(f"{where}: 'resps' holds no generated text (a multiple-choice task?); "
                             "only generation tasks have reasoning traces")
        doc_id = str(row["doc_id"])
        if doc_id in seen:
            duplicates += 1
            continue
        seen.add(doc_id)
        answers = _gold_answers(doc, row.get("target"), task)
        run_prompt = _run_prompt(row.get("arguments"), where) if prompt == "run" else None
        if len(texts) == 1:
            correct = _metric_value(row.get(metric), metric, where)
            source = f"metric {metric}, filter {chosen_filter}"
            items.append(TraceItem(doc_id, 0, question, texts[0], correct, task, source, answers, run_prompt))
            continue
        for k, text in enumerate(texts):  # repeats: the file's metric is per document, not per trace
            rescored += 1
            items.append(TraceItem(doc_id, k, question, text, _rescore(task, text, answers), task,
                                   f"re-scored ({task}, strict): {len(texts)} generations per document",
                                   answers, run_prompt))
    if duplicates:
        notes.append(f"{duplicates} repeated doc_id rows under filter {chosen_filter} were dropped (the first kept)")
    if rescored:
        notes.append(f"{rescored} traces come from documents with several generations; the file's {metric} is per "
                     f"document, so each was re-scored against the gold answer")
    if len(filters) > 1:
        notes.append(f"correctness from filter {chosen_filter} (the file also has {', '.join(f for f in filters if f != chosen_filter)})")
    return TraceSource(str(path), "lm-eval", task, items, metric, chosen_filter, prompt, offered, filters, notes)


def _read_project_jsonl(path: Path, rows: list[tuple[int, dict]], task: str | None) -> TraceSource:
    items, seen = [], set()
    for number, row in rows:
        where = f"{path}, line {number}"
        question, response = row.get("question"), row.get("response")
        if not isinstance(question, str) or not question.strip():
            raise InputError(f"{where}: 'question' is missing or empty")
        if not isinstance(response, str):
            raise InputError(f"{where}: 'response' is missing")
        row_task = _check_task(row.get("task") or task) or "gsm8k"
        answers = row.get("answers") or ()
        answers = tuple([answers] if isinstance(answers, str) else [str(a) for a in answers])
        correct = row.get("correct")
        if correct is not None and correct not in (0, 1, True, False):
            raise InputError(f"{where}: 'correct' is {correct!r}; use true, false or null")
        source = "file"
        if correct is None and "correct" not in row and answers:
            correct, source = _rescore(row_task, response, answers), f"re-scored ({row_task}, strict)"
        doc_id = str(row.get("doc_id", row.get("id", number - 1)))
        sample = int(row.get("sample", 0))
        key = trace_id(doc_id, sample)
        if key in seen:
            raise InputError(f"{where}: trace {key} (doc_id:sample) appears twice")
        seen.add(key)
        error_step = row.get("error_step")
        if error_step is not None and (isinstance(error_step, bool) or not isinstance(error_step, int) or error_step < 1):
            raise InputError(f"{where}: 'error_step' is {error_step!r}; use a step number from 1, or leave it out")
        error_kind = row.get("error_kind")
        items.append(TraceItem(doc_id, sample, question, response, None if correct is None else bool(correct),
                               row_task, source, answers, error_step=error_step,
                               error_kind=None if error_kind is None else str(error_kind)))
    tasks = {i.task for i in items}
    return TraceSource(str(path), "jsonl", tasks.pop() if len(tasks) == 1 else "mixed", items)


def _read_labels(path: Path, rows: list[tuple[int, dict]], task: str | None) -> TraceSource:
    items = []
    for number, row in rows:
        samples, scores = row.get("samples"), row.get("scores")
        if not isinstance(samples, list) or not isinstance(scores, list) or len(samples) != len(scores):
            raise InputError(f"{path}, line {number}: a labels record needs 'samples' and one score per sample")
        row_task = _check_task(row.get("task") or task) or "gsm8k"
        if row_task not in TRACE_TASKS:
            raise InputError(f"{path}, line {number}: task {row_task!r} has no reasoning traces")
        source = f"generated, scored {row.get('matcher', 'strict')}"
        for k, (text, score) in enumerate(zip(samples, scores)):
            items.append(TraceItem(str(row["id"]), k, row["question"], text, bool(score), row_task, source,
                                   tuple(str(a) for a in row.get("answers") or ())))
    tasks = {i.task for i in items}
    return TraceSource(str(path), "labels", tasks.pop() if len(tasks) == 1 else "mixed", items)


def read_traces(path: str | Path, *, task: str | None = None, metric: str | None = None,
                filter_name: str | None = None, prompt: str = "task", limit: int | None = None) -> TraceSource:
    """Traces of an lm-evaluation-harness samples file, a trace JSONL, a labels file or an Inspect AI eval log.

    Parameters
    ----------
    task : ``gsm8k`` or ``math`` (default: from the file name, the rows, else gsm8k): the prompt and,
        where traces are re-scored, the answer check.
    metric, filter_name : lm-eval only: the per-trace 0/1 metric (default ``exact_match``) and the
        filter whose rows are read (default: the file's first).
    prompt : ``task`` (this project's prompt for the task, with the model's chat template) or ``run``
        (lm-eval only: the exact prompt of the run, ``arguments.gen_args_0.arg_0``).
    limit : only the first ``limit`` traces.
    """
    path = Path(path)
    from .inspect_logs import is_inspect_log, read_inspect_log

    if is_inspect_log(path):  # metric names the scorer
        return read_inspect_log(path, task=task, metric=metric, filter_name=filter_name, prompt=prompt, limit=limit)
    skipped: list[str] = []
    rows = _read_objects(path, skipped)
    first = rows[0][1]
    if "doc_id" in first and ("doc" in first or "resps" in first):
        source = read_lm_eval_samples(path, task=task, metric=metric, filter_name=filter_name, prompt=prompt, rows=rows)
    else:
        if metric or filter_name or prompt != "task":
            raise InputError("--metric, --filter and --prompt run apply to lm-evaluation-harness samples files only")
        if "response" in first:
            source = _read_project_jsonl(path, rows, _check_task(task))
        elif "samples" in first and "scores" in first:
            source = _read_labels(path, rows, _check_task(task))
        else:
            raise InputError(f"{path}, line {rows[0][0]}: not an lm-evaluation-harness sample (doc_id, doc, resps), "
                             "a trace (question, response, correct) or a labels record (samples, scores)")
    if limit is not None:
        if limit < 1:
            raise InputError("--limit must be at least 1")
        source.items = source.items[:limit]
    source.notes.extend(skipped)
    return source


# --------------------------------------------------------------------------------------------------
# one trace


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


def token_shock(scores: np.ndarray) -> np.ndarray:
    """Per-token shock in [0, 1] within one trace. scores: (L, n) raw row sums of C_g -> (n,).

    Layers have very different scales, so each layer's absolute scores are divided by their largest value
    over the trace's tokens, then averaged over layers and divided by the largest result (the Reasoning
    trace page's scale, for one trace).
    """
    scores = np.abs(np.asarray(scores, dtype=np.float64))
    if scores.size == 0:
        return np.zeros(scores.shape[-1] if scores.ndim == 2 else 0)
    top = np.nanmax(scores, axis=1, keepdims=True)
    top[~(top > 0)] = 1.0
    values = np.nanmean(scores / top, axis=0)
    peak = np.nanmax(values) if values.size else 0.0
    return np.nan_to_num(values / peak if peak > 0 else values)


def trace_records(item: TraceItem, result, display_tokens: list[str], seconds: float) -> tuple[dict, list[dict]]:
    """The store's trace row and token rows of one analysed trace (``result``: a step-wise ``pos``
    :class:`~grade.result.GradeResult` with token scores)."""
    start = result.response_start or 0
    steps = result.steps
    ratios = np.stack([s.rank_ratio for s in steps])  # (K, L)
    step_ratio = ratios.mean(axis=1)
    scores = result.token_scores[:, start:]  # (L, n_response)
    shock = token_shock(scores)
    step_of = np.zeros(scores.shape[1], dtype=int)
    for k, step in enumerate(steps, 1):
        step_of[step.start - start : step.end - start] = k
    peak = int(np.argmax(step_ratio))
    peak_token = int(np.argmax(shock)) if shock.size else 0
    classes = [token_class(t) for t in display_tokens]
    surprisal = (result.token_surprisal[start:] if result.token_surprisal is not None
                 else np.full(scores.shape[1], np.nan))
    signals = step_signals(item.question, [s.text for s in steps], ratios, [s.loss_value for s in steps],
                           step_of, shock, surprisal)
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


def analyze_trace_item(lm, item: TraceItem, *, srank: str = "paper") -> tuple[dict, list[dict]]:
    """Step-wise GRADE_pos and token shock of one trace; returns (trace row, token rows)."""
    from .analysis import analyze
    from .labeling import MAX_CHARS_PER_TOKEN

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
    return trace_records(item, result, display, seconds)


def _analysed(lm, items: Iterable[TraceItem], srank: str, skipped: list) -> Iterable[tuple[TraceItem, dict | None]]:
    for item in items:
        try:
            row, tokens = analyze_trace_item(lm, item, srank=srank)
        except GradeError as exc:  # one bad trace (too long for the model, empty) must not stop a run
            log.warning("skipped trace %s: %s", item.trace_id, exc)
            skipped.append((item.trace_id, str(exc)))
            yield item, None
            continue
        yield item, {"trace": row, "tokens": tokens}


# --------------------------------------------------------------------------------------------------
# the store


def _missing(value) -> bool:
    """None, NaN or pandas' NA."""
    import pandas as pd

    return value is None or bool(pd.isna(value))


def _atomic_write_text(path: Path, text: str) -> None:
    from .io import atomic_write

    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write(path, text)


_ANNOTATION_LOCKS: dict[str, threading.Lock] = {}
_LOCKS_GUARD = threading.Lock()


def _lock_for(path: Path) -> threading.Lock:
    with _LOCKS_GUARD:
        return _ANNOTATION_LOCKS.setdefault(str(path.resolve()), threading.Lock())


class TraceStore:
    """A trace store folder (see the module docstring). Reading never needs a model."""

    def __init__(self, path: str | Path):
        self.path = Path(path)
        if self.path.exists() and not self.path.is_dir():
            raise InputError(f"{self.path} exists and is not a trace store folder")

    # ------------------------------------------------------------------ layout
    @property
    def traces_dir(self) -> Path:
        return self.path / "traces"

    @property
    def tokens_dir(self) -> Path:
        return self.path / "tokens"

    @property
    def meta_path(self) -> Path:
        return self.path / "meta.json"

    @property
    def annotations_path(self) -> Path:
        return self.path / "annotations.json"

    def exists(self) -> bool:
        return self.meta_path.is_file()

    # ------------------------------------------------------------------ metadata
    def meta(self) -> dict:
        if not self.exists():
            raise InputError(f"{self.path} is not a trace store (no meta.json); make one with `python -m grade traces`")
        try:
            return json.loads(self.meta_path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            raise InputError(f"{self.meta_path} cannot be read: {exc}") from None

    def prepare(self, model: str, srank: str, source: dict) -> None:
        """Create the store, or check that a resumed run matches what it holds."""
        wanted = {"model": model, "loss": "pos", "srank": srank, "source": source}
        if self.exists():
            have = self.meta()
            if have.get("format_version", 1) != FORMAT_VERSION:
                raise InputError(f"{self.path} was written by an older version (format {have.get('format_version', 1)}, "
                                 f"now {FORMAT_VERSION}); it can still be opened, but new traces go to another --out")
            for key in ("model", "loss", "srank"):
                if have.get(key) != wanted[key]:
                    raise InputError(f"{self.path} holds traces of {key} {have.get(key)!r}; this run uses "
                                     f"{wanted[key]!r}: use another --out")
            old = have.get("source") or {}
            for key, value in source.items():
                if key in old and old[key] != value:
                    raise InputError(f"{self.path} holds traces read with {key}={old[key]!r}; this run uses "
                                     f"{value!r}: use the same settings to resume, or another --out")
            return
        self.traces_dir.mkdir(parents=True, exist_ok=True)
        self.tokens_dir.mkdir(parents=True, exist_ok=True)
        _atomic_write_text(self.meta_path, json.dumps({**wanted, "format_version": FORMAT_VERSION,
                                                       "package_version": __version__,
                                                       "created": time.strftime("%Y-%m-%dT%H:%M:%S")}, indent=2))

    # ------------------------------------------------------------------ rows
    def done_keys(self) -> set[str]:
        keys: set[str] = set()
        for part in PartStore(self.traces_dir).parts():
            keys.update(pq.read_table(part, columns=["trace_id"]).column("trace_id").to_pylist())
        return keys

    def write(self, results: list[dict]) -> None:
        """Append analysed traces (``{"trace": row, "tokens": [rows]}`` each): tokens first, so that a stored
        trace always has its tokens (tokens of a trace that a kill left unstored are dropped on reading)."""
        if not results:
            return
        tokens = [t for r in results for t in r["tokens"]]
        if tokens:
            PartStore(self.tokens_dir).write(tokens, TOKEN_SCHEMA)
        PartStore(self.traces_dir).write([r["trace"] for r in results], TRACE_SCHEMA)

    def version(self) -> int:
        """Changes whenever rows or annotations are added (for caches)."""
        files = list(self.traces_dir.glob("part-*.parquet")) if self.traces_dir.is_dir() else []
        if self.annotations_path.exists():
            files.append(self.annotations_path)
        return sum(f.stat().st_mtime_ns + f.stat().st_size for f in files) + len(files)

    def traces(self, *, annotated: bool = True):
        """One row per trace (pandas DataFrame, :data:`TRACE_SCHEMA` columns), in the order analysed;
        with ``annotated`` also ``error_step``, ``error_kind`` and ``note`` from the annotations."""
        import pandas as pd

        parts = PartStore(self.traces_dir).parts()
        frames = [pq.read_table(p).to_pandas() for p in parts]
        frame = pd.concat(frames, ignore_index=True) if frames else TRACE_SCHEMA.empty_table().to_pandas()
        frame = frame.drop_duplicates("trace_id", keep="last").reset_index(drop=True)
        frame["correct"] = frame["correct"].astype("boolean")
        if annotated:
            notes = self.annotations()
            known = dict(zip(frame["trace_id"], zip(frame.get("known_error_step", [None] * len(frame)),
                                                   frame.get("known_error_kind", [None] * len(frame)))))
            # the analyst's mark where there is one, else the step the input gave (a benchmark's known error)
            frame["error_step"] = pd.array(
                [notes[t].get("error_step") if t in notes else (None if _missing(known[t][0]) else int(known[t][0]))
                 for t in frame["trace_id"]], dtype="Int64")
            frame["error_kind"] = [notes[t].get("kind") if t in notes else known[t][1] for t in frame["trace_id"]]
            frame["note"] = [notes.get(t, {}).get("note") for t in frame["trace_id"]]
        return frame

    def tokens(self, trace: str | None = None):
        """Token rows (pandas DataFrame, :data:`TOKEN_SCHEMA` columns) of one trace or of all stored traces."""
        import pandas as pd
        import pyarrow.compute as pc

        parts = PartStore(self.tokens_dir).parts()
        tables = []
        for part in parts:
            table = pq.read_table(part)
            if trace is not None:
                table = table.filter(pc.equal(table["trace_id"], trace))
            if table.num_rows:
                tables.append(table)
        frame = pa.concat_tables(tables).to_pandas() if tables else TOKEN_SCHEMA.empty_table().to_pandas()
        # A chunk killed between its two writes leaves tokens without a trace; a re-run writes them again.
        stored = self.done_keys()
        frame = frame[frame["trace_id"].isin(stored)]
        return frame.drop_duplicates(["trace_id", "position"], keep="last").sort_values(
            ["trace_id", "position"], kind="stable").reset_index(drop=True)

    # ------------------------------------------------------------------ annotations
    def annotations(self) -> dict[str, dict]:
        """trace_id -> {"error_step": int | None, "kind": str, "note": str, "updated": str}."""
        if not self.annotations_path.exists():
            return {}
        try:
            data = json.loads(self.annotations_path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            raise InputError(f"{self.annotations_path} cannot be read: {exc}") from None
        return dict(data.get("annotations") or {})

    def annotate(self, trace: str, *, error_step: int | None, kind: str | None, note: str = "") -> dict:
        """Save (or, with no step, kind or note, remove) the analyst's mark for one trace; atomic."""
        frame = self.traces(annotated=False)
        match = frame[frame["trace_id"] == trace]
        if match.empty:
            raise InputError(f"no trace {trace!r} in {self.path}")
        n_steps = int(match.iloc[0]["n_steps"])
        if error_step is not None and not 1 <= int(error_step) <= n_steps:
            raise InputError(f"error step {error_step} is outside 1..{n_steps}")
        if kind is not None and kind not in ERROR_KINDS:
            raise InputError(f"unknown error kind {kind!r}; use one of {', '.join(ERROR_KINDS)}")
        entry = {"error_step": None if error_step is None else int(error_step), "kind": kind, "note": note or "",
                 "updated": time.strftime("%Y-%m-%dT%H:%M:%S")}
        with _lock_for(self.annotations_path):
            notes = self.annotations()
            if error_step is None and kind is None and not note:
                notes.pop(trace, None)
            else:
                notes[trace] = entry
            _atomic_write_text(self.annotations_path, json.dumps(
                {"format_version": FORMAT_VERSION, "annotations": notes}, indent=1, ensure_ascii=False))
        return entry

    def export_annotations(self, fmt: str = "csv") -> str:
        """Annotated traces as CSV or JSONL text: ids, correctness, GRADE_pos, the peak step and the mark."""
        frame = self.traces()
        frame = frame[frame["error_step"].notna() | frame["error_kind"].notna() | frame["note"].fillna("").astype(bool)]
        columns = ["trace_id", "doc_id", "sample", "correct", "grade_pos", "n_steps", "peak_step", "peak_step_text",
                   "peak_token", "peak_token_step", "error_step", "error_kind", "note"]
        texts = frame["step_texts"].tolist()
        frame = frame[columns].copy()
        frame["error_step_text"] = [None if _missing(step) else str(list(steps)[int(step) - 1])
                                    for steps, step in zip(texts, frame["error_step"])]
        if fmt == "csv":
            return frame.to_csv(index=False)
        if fmt == "jsonl":
            records = json.loads(frame.to_json(orient="records"))
            return "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records)
        raise InputError(f"unknown export format {fmt!r}; use csv or jsonl")


# --------------------------------------------------------------------------------------------------
# running


@dataclass(frozen=True)
class TraceWork:
    """Ray work: step-wise analyses of a chunk of traces (see :mod:`grade.batch.ray_backend`)."""

    srank: str = "paper"

    def process(self, lm, items: list[TraceItem]) -> dict:
        skipped: list[tuple[str, str]] = []
        results = [r for _, r in _analysed(lm, items, self.srank, skipped) if r is not None]
        return {"results": results, "skipped": skipped}


class TraceStoreSink:
    """The sink of a trace run: the trace store (on Ray written by the driver only)."""

    def __init__(self, store: TraceStore):
        self.store = store
        self.out = store.path

    def key(self, item: TraceItem) -> str:
        return item.trace_id

    def done_keys(self) -> set:
        return self.store.done_keys()

    def write(self, results: list[dict]) -> None:
        self.store.write(results)


def analyze_traces(lm, source: TraceSource, out: str | Path, *, srank: str = "paper", chunk_size: int = 8,
                   progress: bool = False, callback: ProgressCallback | None = None):
    """Analyse the traces of ``source`` not yet in the store ``out``, in this process
    (:func:`grade.batch.run_local`).

    Every ``chunk_size`` traces a part is written; an exception (Ctrl-C, or one raised by ``callback``
    to stop the run) still writes the traces finished before it. Returns a
    :class:`grade.batch.RunReport`.
    """
    if chunk_size < 1:
        raise InputError("--chunk-size must be at least 1")
    store = TraceStore(out)
    store.prepare(lm.name, srank, source.describe())

    def work(todo, report):
        for item, result in _analysed(lm, todo, srank, report.skipped):
            if result is not None:
                report.busy_seconds += result["trace"]["seconds"]
            yield item.trace_id, result

    return run_local(source.items, work, TraceStoreSink(store), chunk_size=chunk_size, progress=progress,
                     desc="traces", unit="trace", callback=callback)


def analyze_traces_distributed(spec, source: TraceSource, out: str | Path, *, srank: str = "paper",
                               chunk_size: int = 8, cluster=None, progress: bool = False, callback=None):
    """:func:`analyze_traces` on Ray workers (:func:`grade.batch.run_on_ray`): same store, same rows."""
    from .batch.ray_backend import ClusterOptions, run_on_ray

    store = TraceStore(out)
    store.prepare(spec.name, srank, source.describe())
    return run_on_ray(source.items, TraceWork(srank), TraceStoreSink(store), spec, cluster or ClusterOptions(),
                      chunk_size=chunk_size, progress=progress, callback=callback)


def generate_traces(lm_or_spec, dataset: str, out: str | Path, *, n_per_problem: int, limit: int | None = None,
                    offset: int = 0, matcher: str = "strict", seed: int = 0, max_new_tokens: int | None = None,
                    questions_per_batch: int = 4, cluster=None, progress: bool = False) -> Path:
    """Sample ``n_per_problem`` traces per problem of a GSM8K / MATH dataset with the model itself, into
    ``<out>/generated.jsonl`` (a labels file, :func:`grade.labeling.label_questions`: seeded per problem
    and sample, resumable, each trace scored). ``lm_or_spec``: a loaded model, or a
    :class:`grade.models.ModelSpec` to sample on Ray workers. Returns the file's path."""
    from .tasks import load_questions

    if n_per_problem < 1:
        raise InputError("--generate must be at least 1")
    questions = load_questions(dataset, limit=limit, offset=offset)
    wrong = sorted({q.task for q in questions} - set(TRACE_TASKS))
    if wrong:
        raise InputError(f"dataset {dataset!r} is a {', '.join(wrong)} set; traces come from gsm8k or math problems")
    path = Path(out) / "generated.jsonl"
    path.parent.mkdir(parents=True, exist_ok=True)
    if cluster is not None:
        from .labeling import label_questions_distributed

        label_questions_distributed(lm_or_spec, questions, path, n_samples=n_per_problem, matcher=matcher, seed=seed,
                                    max_new_tokens=max_new_tokens, questions_per_batch=questions_per_batch,
                                    cluster=cluster, progress=progress)
    else:
        from .labeling import label_questions

        label_questions(lm_or_spec, questions, path, n_samples=n_per_problem, matcher=matcher, seed=seed,
                        max_new_tokens=max_new_tokens, questions_per_batch=questions_per_batch,
                        show_progress=progress)
    return path


# --------------------------------------------------------------------------------------------------
# aggregates


def json_doc_id(doc_id: str, fmt: str | None):
    """lm-eval numbers its documents: give their ids back as integers."""
    return int(doc_id) if fmt == "lm-eval" and re.fullmatch(r"-?\d+", str(doc_id)) else doc_id


def summary_rows(frame, fmt: str | None = None) -> list[dict]:
    """The per-trace summary of ``python -m grade traces --json``."""
    rows = []
    for r in frame.itertuples(index=False):
        row = {"doc_id": json_doc_id(r.doc_id, fmt), "sample": int(r.sample),
               "correct": None if _missing(r.correct) else bool(r.correct),
               "grade_pos": float(r.grade_pos), "n_steps": int(r.n_steps), "peak_step": int(r.peak_step)}
        suspect = getattr(r, "suspect_step", None)
        if not _missing(suspect):  # stores of format 1 have none
            row.update(suspect_step=int(suspect), suspect_step_text=r.suspect_step_text, locator=r.locator,
                       step_ranking=[int(k) for k in r.step_ranking], step_texts=list(r.step_texts),
                       flagged_steps=[k + 1 for k, v in enumerate(r.step_check) if v > 0])
        rows.append(row)
    return rows


#: Scores that could rank wrong traces above correct ones; higher = more likely wrong, fixed in advance.
RANKING_SCORES = {
    "GRADE_pos": "grade_pos",
    "peak step ratio": "peak_step_ratio",
    "mean CE loss": "loss_value",
    "length (tokens)": "n_tokens",
    "steps": "n_steps",
}


def _thirds(relative: np.ndarray) -> dict[str, float]:
    if not len(relative):
        return {"first_third": math.nan, "middle_third": math.nan, "last_third": math.nan}
    return {"first_third": float(np.mean(relative < 1 / 3)),
            "middle_third": float(np.mean((relative >= 1 / 3) & (relative <= 2 / 3))),
            "last_third": float(np.mean(relative > 2 / 3))}


def aggregate(frame, tokens=None, *, n_boot: int = 1000, seed: int = 0) -> dict[str, Any]:
    """Numbers for the case study, from :meth:`TraceStore.traces` (and its tokens, for base rates).

    Returns a JSON-able dict:

    * ``counts``: traces, correct, wrong, unknown;
    * ``ranking``: per score of :data:`RANKING_SCORES`, AUROC for "wrong" (1) against "correct" (0) with a
      stratified percentile bootstrap interval (:func:`grade.metrics.bootstrap_ci`); higher scores are
      taken to mean "wrong" for every score, decided before looking at any data;
    * ``peak_position``: per group (correct, wrong), where in the trace the peak step lies: mean relative
      position (0 = first step, 1 = last; traces with one step left out) and the share in each third;
    * ``peak_token_class``: per group, the class of the highest-shock token, beside each class's share of all
      response tokens (the rate a peak would have by chance);
    * ``annotations``: over traces with a marked error step, how often the peak step (and the peak token's
      step) is that step, beside the chance rate (mean 1/K) and within one step.
    """
    from .metrics import auroc, bootstrap_ci

    correct = frame["correct"]
    known = correct.notna().to_numpy()
    is_wrong = (~correct.fillna(True).astype(bool)).to_numpy()
    groups = {"correct": known & ~is_wrong, "wrong": known & is_wrong}
    out: dict[str, Any] = {"counts": {"traces": int(len(frame)), "correct": int(groups["correct"].sum()),
                                      "wrong": int(groups["wrong"].sum()), "unknown": int((~known).sum())}}
    ranking = []
    y = is_wrong[known].astype(int)
    for name, column in RANKING_SCORES.items():
        s = frame[column].to_numpy(dtype=np.float64)[known]
        value = auroc(y, s) if len(y) else math.nan
        lo, hi = bootstrap_ci(y, s, auroc, n_boot=n_boot, seed=seed) if math.isfinite(value) else (math.nan, math.nan)
        ranking.append({"score": name, "auroc": value, "lo": lo, "hi": hi, "n": int(len(y)), "wrong": int(y.sum())})
    out["ranking"] = ranking

    positions = []
    steps = frame["n_steps"].to_numpy()
    peak = frame["peak_step"].to_numpy()
    for group, mask in groups.items():
        multi = mask & (steps > 1)
        relative = (peak[multi] - 1) / (steps[multi] - 1)
        positions.append({"group": group, "n": int(mask.sum()), "n_multi_step": int(multi.sum()),
                          "mean_relative": float(relative.mean()) if len(relative) else math.nan,
                          "last_step": float(np.mean(peak[multi] == steps[multi])) if multi.any() else math.nan,
                          **_thirds(relative)})
    out["peak_position"] = positions

    classes = []
    for group, mask in groups.items():
        picked = frame.loc[mask, "peak_token_class"]
        classes.append({"group": f"{group}: peak token", "n": int(mask.sum()),
                        **{c: float(np.mean(picked == c)) if len(picked) else math.nan for c in TOKEN_CLASSES}})
    if tokens is not None and len(tokens):
        for group, mask in groups.items():
            ids = set(frame.loc[mask, "trace_id"])
            picked = tokens.loc[tokens["trace_id"].isin(ids), "token_class"]
            classes.append({"group": f"{group}: all tokens", "n": int(len(picked)),
                            **{c: float(np.mean(picked == c)) if len(picked) else math.nan for c in TOKEN_CLASSES}})
    out["peak_token_class"] = classes

    notes: dict[str, Any] = {"annotated": 0}
    if "error_step" in frame:
        marked = frame[frame["error_step"].notna()]
        notes["annotated"] = int((frame["error_step"].notna() | frame["error_kind"].notna()).sum())
        notes["with_step"] = int(len(marked))
        if len(marked):
            error = marked["error_step"].astype(int).to_numpy()
            notes["peak_step_is_error_step"] = float(np.mean(marked["peak_step"].to_numpy() == error))
            if "suspect_step" in marked:  # stores of format 1 have no suspect step
                suspect = marked["suspect_step"].to_numpy(dtype=float)
                notes["suspect_step_is_error_step"] = float(np.mean(suspect == error))
            notes["peak_token_step_is_error_step"] = float(np.mean(marked["peak_token_step"].to_numpy() == error))
            notes["peak_step_within_one"] = float(np.mean(np.abs(marked["peak_step"].to_numpy() - error) <= 1))
            notes["chance"] = float(np.mean(1.0 / marked["n_steps"].to_numpy()))
        kinds = frame["error_kind"].dropna()
        notes["kinds"] = {k: int((kinds == k).sum()) for k in ERROR_KINDS if (kinds == k).any()}
    out["annotations"] = notes
    return out


def _fmt(value, digits: int = 3) -> str:
    return "n/a" if value is None or (isinstance(value, float) and not math.isfinite(value)) else f"{value:.{digits}f}"


def aggregate_markdown(agg: dict[str, Any]) -> str:
    """The aggregates as Markdown tables (the command's text output)."""
    c = agg["counts"]
    lines = [f"{c['traces']} traces: {c['correct']} correct, {c['wrong']} wrong, {c['unknown']} unknown", "",
             "Ranking wrong traces above correct ones (AUROC, 95% bootstrap interval; higher score = wrong)", "",
             "| score | AUROC | interval |", "|---|---|---|"]
    for r in agg["ranking"]:
        lines.append(f"| {r['score']} | {_fmt(r['auroc'])} | [{_fmt(r['lo'], 2)}, {_fmt(r['hi'], 2)}] |")
    lines += ["", "Where the step shock peaks (relative position 0 = first step, 1 = last)", "",
              "| traces | n | mean position | first third | middle third | last third | last step |",
              "|---|---|---|---|---|---|---|"]
    for r in agg["peak_position"]:
        lines.append(f"| {r['group']} | {r['n']} | {_fmt(r['mean_relative'], 2)} | {_fmt(r['first_third'], 2)} | "
                     f"{_fmt(r['middle_third'], 2)} | {_fmt(r['last_third'], 2)} | {_fmt(r['last_step'], 2)} |")
    lines += ["", "Token class of the highest-shock token, beside the share of each class among all tokens", "",
              "| tokens | n | " + " | ".join(TOKEN_CLASSES) + " |", "|---|---|" + "---|" * len(TOKEN_CLASSES)]
    for r in agg["peak_token_class"]:
        lines.append(f"| {r['group']} | {r['n']} | " + " | ".join(_fmt(r[k], 2) for k in TOKEN_CLASSES) + " |")
    a = agg["annotations"]
    if a.get("with_step"):
        if "suspect_step_is_error_step" in a:
            lines += ["", f"Annotated or known error steps: {a['with_step']}; the suspect step "
                          f"({DEFAULT_LOCATOR}) is the error step in {_fmt(a['suspect_step_is_error_step'], 2)} of them "
                          f"(chance {_fmt(a['chance'], 2)})"]
        lines += ["", f"Annotated error steps: {a['with_step']}; the peak step is the error step in "
                      f"{_fmt(a['peak_step_is_error_step'], 2)} of them (peak token's step: "
                      f"{_fmt(a['peak_token_step_is_error_step'], 2)}; within one step: {_fmt(a['peak_step_within_one'], 2)}; "
                      f"chance {_fmt(a['chance'], 2)})"]
    return "\n".join(lines)
