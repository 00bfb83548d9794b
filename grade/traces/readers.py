"""Reading traces: lm-evaluation-harness samples files, this project's trace JSONL, labels files and Inspect AI
logs (:mod:`grade.traces.inspect_logs`), told apart by :func:`read_traces`."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Sequence

from ..common.errors import InputError
from ..common.visible import is_blank as _is_blank
from ..tasks.grading import last_boxed
from .inspect_logs import is_inspect_log, read_inspect_log
from .sources import PROMPTS, TRACE_TASKS, TraceItem, TraceSource, _check_task, trace_id

_LM_EVAL_BOOKKEEPING = {"doc_id", "doc", "target", "arguments", "resps", "filtered_resps", "filter", "metrics",
                        "doc_hash", "prompt_hash", "target_hash"}
_QUESTION_KEYS = ("question", "problem", "Question", "Problem", "input", "query")


def _read_objects(path: Path, skipped: list[str] | None = None) -> list[tuple[int, dict]]:
    """The JSON objects of a trace file with their line numbers. A line over the reader's byte bound is
    skipped unread (named in ``skipped``); any other bad line stops the read with one message."""
    from ..common.io import MAX_LINE_BYTES, check_input_file, iter_jsonl

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
    if not rows:  # a file whose only lines were skipped says which and why
        raise InputError(f"{path} holds no traces" + (f": {'; '.join(skipped[:3])}" if skipped else ""))
    return rows


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
    from ..tasks.tasks import Question, is_correct

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
    # a bad row is named and skipped, as the other trace readers do; a file with no good row is refused
    bad: list[str] = []
    kept = []
    for number, row in rows:
        missing = [key for key in ("doc_id", "doc", "resps") if key not in row]
        if missing:
            bad.append(f"line {number} skipped: missing field {missing[0]!r} of an lm-evaluation-harness sample")
        else:
            kept.append((number, row))
    if not kept:
        raise InputError(f"{path}, {bad[0].replace(' skipped:', ':')}")
    rows = kept
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
            bad.append(f"line {number} skipped: 'doc' is not an object")
            continue
        question = next((doc[k] for k in _QUESTION_KEYS if isinstance(doc.get(k), str) and not _is_blank(doc[k])), None)
        if question is None:
            bad.append(f"line {number} skipped: no question in 'doc' (looked for {', '.join(_QUESTION_KEYS)})")
            continue
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
    if not items and bad:
        raise InputError(f"{path}, {bad[0].replace(' skipped:', ':')}")
    notes.extend(bad)
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
        if not isinstance(question, str) or _is_blank(question):
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
    raw_ids = [row.get("doc_id", row.get("id", 0)) for _, row in rows]
    # ids given as JSON numbers come back as numbers in --json (a caller matches them as it wrote them)
    int_ids = all(isinstance(i, int) and not isinstance(i, bool) for i in raw_ids)
    return TraceSource(str(path), "jsonl", tasks.pop() if len(tasks) == 1 else "mixed", items, int_ids=int_ids)


def _read_labels(path: Path, rows: list[tuple[int, dict]], task: str | None) -> TraceSource:
    items, limits = [], set()
    for number, row in rows:
        samples, scores = row.get("samples"), row.get("scores")
        if not isinstance(samples, list) or not isinstance(scores, list) or len(samples) != len(scores):
            raise InputError(f"{path}, line {number}: a labels record needs 'samples' and one score per sample")
        # labels written before the flag existed have no cut_off: not known, which is not "not cut off"
        cut_off = row.get("cut_off")
        if cut_off is None:
            cut_off = [None] * len(samples)
        elif not isinstance(cut_off, list) or len(cut_off) != len(samples):
            raise InputError(f"{path}, line {number}: 'cut_off' needs one true / false per sample")
        row_task = _check_task(row.get("task") or task) or "gsm8k"
        if row_task not in TRACE_TASKS:
            raise InputError(f"{path}, line {number}: task {row_task!r} has no reasoning traces")
        limits.add(row.get("max_new_tokens"))
        source = f"generated, scored {row.get('matcher', 'strict')}"
        for k, (text, score, cut) in enumerate(zip(samples, scores, cut_off)):
            items.append(TraceItem(str(row["id"]), k, row["question"], text, bool(score), row_task, source,
                                   tuple(str(a) for a in row.get("answers") or ()),
                                   cut_off=None if cut is None else bool(cut)))
    tasks = {i.task for i in items}
    limit = limits.pop() if len(limits) == 1 else None  # records of several lengths (tasks) name no one limit
    return TraceSource(str(path), "labels", tasks.pop() if len(tasks) == 1 else "mixed", items,
                       max_new_tokens=limit if isinstance(limit, int) else None)


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
