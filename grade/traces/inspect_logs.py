"""Reasoning traces from Inspect AI eval logs (the ``.eval`` and ``.json`` logs the ``inspect_ai`` package writes).

The log is read with ``inspect_ai``'s own reader (:func:`inspect_ai.log.read_eval_log`, attachments resolved),
after a ``.eval`` (a zip archive) has passed :func:`grade.common.bounded.check_zip`, since that reader decompresses
whole members in memory; an optional dependency: ``pip install 'grade-studio[inspect]'``. Each sample of the log is one trace:

* ``doc_id`` is the sample's id, ``sample`` its epoch minus one (0 for a one-epoch run);
* ``question`` is the sample's input: the text itself, or the text of its user messages when the input is a
  chat (the dataset's input, before any solver added a prompt template);
* ``response`` is the model's output completion;
* ``correct`` comes from one scorer's per-sample score (the log's first scorer; ``metric`` names another):
  ``"C"`` / ``"I"`` (inspect_ai's CORRECT / INCORRECT), 1 / 0 or true / false. Any other value (partial
  credit ``"P"``, no answer ``"N"``, 0.5, a dict) leaves ``correct`` unknown, and a note counts those traces;
* ``answers`` come from the sample's target (GSM8K's text after ``####``, MATH's last ``\\boxed{}``);
* ``cut_off`` comes from the output's stop reason (``ModelOutput.stop_reason``, its first choice's): true for
  ``"max_tokens"`` (the request's token limit) and ``"model_length"`` (the model's context ran out), false for
  the other reasons the model gives, unknown for ``"unknown"``.

The task (GSM8K or MATH: the prompt and answer check) comes from ``task``, else from the eval's task name or
its dataset's name or location; samples that ended in an error or have no output are skipped, with a note.
"""

from __future__ import annotations

import json
import zipfile
from pathlib import Path
from typing import Any

from ..common.bounded import check_zip
from ..common.errors import InputError
from ..tasks.grading import last_boxed
from .sources import TraceItem, TraceSource, _check_task, trace_id

INSTALL = "pip install 'grade-studio[inspect]'"
#: inspect_ai's CORRECT / INCORRECT score values (``inspect_ai.scorer.CORRECT``, ``INCORRECT``).
_LETTERS = {"C": True, "I": False}


def is_inspect_log(path: str | Path) -> bool:
    """Whether ``path`` is an Inspect AI log: a ``.eval`` file, or a ``.json`` file whose top-level object has
    ``eval`` and ``samples`` keys (checked without reading a large log into memory where ijson is installed)."""
    path = Path(path)
    suffix = path.suffix.lower()
    if suffix == ".eval":
        return True
    if suffix != ".json" or not path.is_file():
        return False
    wanted = {"eval", "samples"}
    try:
        import ijson  # inspect_ai depends on it
    except ImportError:
        ijson = None
    try:
        with path.open("rb") as f:
            if ijson is None:
                top = json.load(f)
                return isinstance(top, dict) and wanted <= top.keys()
            seen: set[str] = set()
            for prefix, event, value in ijson.parse(f):
                if prefix == "" and event == "map_key":
                    seen.add(value)
                    if wanted <= seen:
                        return True
                elif prefix == "" and event in ("start_array", "string", "number", "boolean", "null"):
                    return False  # the top level is not an object
            return False
    except Exception:  # not JSON at all: the other readers say what is wrong with it
        return False


def _read_log(path: Path):
    if not path.is_file():
        raise InputError(f"trace file {path} does not exist")
    try:
        from inspect_ai.log import read_eval_log
    except ImportError:
        raise InputError(f"{path} is an Inspect AI eval log; reading it needs the inspect_ai package: {INSTALL}") from None
    if zipfile.is_zipfile(path):
        # inspect_ai decodes whole members in memory: a bomb is refused here first, from the central directory and
        # then by counting every member's bytes as they decompress (grade.common.bounded)
        check_zip(path, what="Inspect AI eval log")
    try:
        # events are the bulk of a log and no trace needs them
        return read_eval_log(str(path), resolve_attachments=True, exclude_fields={"events"})
    except Exception as exc:  # a corrupt zip, invalid JSON, a schema mismatch, ...: one line, not a traceback
        detail = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:200]
        raise InputError(f"{path} is not a readable Inspect AI eval log ({type(exc).__name__}: {detail})") from None


def _task_from_eval(spec) -> str | None:
    dataset = getattr(spec, "dataset", None)
    for name in (getattr(spec, "task", None), getattr(spec, "task_registry_name", None),
                 getattr(dataset, "name", None), getattr(dataset, "location", None)):
        name = str(name or "").lower()
        if "gsm" in name:
            return "gsm8k"
        if "math" in name:
            return "math"
    return None


def _scorer_names(log, samples) -> list[str]:
    """The scorers in the log's order (the eval's scorer list where the log has one, else the samples')."""
    names = [s.name for s in getattr(log.eval, "scorers", None) or [] if getattr(s, "name", None)]
    for sample in samples:
        names.extend((sample.scores or {}).keys())
    return list(dict.fromkeys(names))


def _question_text(value: Any) -> str | None:
    if isinstance(value, str):
        return value
    if isinstance(value, list):  # a chat: the user messages' text
        texts = [getattr(m, "text", "") for m in value if getattr(m, "role", None) == "user"]
        return "\n\n".join(t for t in texts if t and t.strip())
    return None


def _answers(target: Any, task: str) -> tuple[str, ...]:
    targets = target if isinstance(target, list) else [target]
    answers = []
    for text in targets:
        text = "" if text is None else str(text)
        if task == "gsm8k" and "####" in text:
            text = text.split("####", 1)[1].replace(",", "")
        elif task == "math":
            text = last_boxed(text) or text
        if text.strip():
            answers.append(text.strip())
    return tuple(answers)


#: Stop reasons (``inspect_ai.model.StopReason``) that end a generation before the model finished it.
_CUT_OFF = {"max_tokens", "model_length"}


def _cut_off(output) -> bool | None:
    """Whether the generation stopped at a token limit; None where the log does not say."""
    if output is None or not getattr(output, "choices", None):
        return None
    reason = getattr(output.choices[0], "stop_reason", None)
    return None if reason in (None, "unknown") else reason in _CUT_OFF


def _correct(value: Any) -> bool | None:
    """True / False for inspect_ai's C / I, 1 / 0 and true / false; None for any other score value."""
    if isinstance(value, bool):
        return value
    if isinstance(value, str):
        return _LETTERS.get(value.strip().upper())
    if isinstance(value, (int, float)) and float(value) in (0.0, 1.0):
        return float(value) == 1.0
    return None


def read_inspect_log(path: str | Path, *, task: str | None = None, metric: str | None = None,
                     filter_name: str | None = None, prompt: str = "task", limit: int | None = None) -> TraceSource:
    """Traces of an Inspect AI eval log (see the module docstring); ``metric`` names the scorer."""
    path = Path(path)
    if filter_name or prompt != "task":
        raise InputError("--filter and --prompt run apply to lm-evaluation-harness samples files only")
    if limit is not None and limit < 1:
        raise InputError("--limit must be at least 1")
    log = _read_log(path)
    samples = list(log.samples or [])
    if not samples:
        raise InputError(f"{path} holds no samples (log status {log.status}; a log written with "
                         "--no-log-samples keeps only the scores)")
    task = _check_task(task) or _task_from_eval(log.eval)
    if task is None:
        dataset = log.eval.dataset.name or log.eval.dataset.location
        raise InputError(f"{path}: cannot tell GSM8K from MATH from task {log.eval.task!r}"
                         f"{f' or dataset {dataset!r}' if dataset else ''}; give --task gsm8k or --task math")
    scorers = _scorer_names(log, samples)
    if not scorers:
        raise InputError(f"{path} has no scores: score the log first (inspect score)")
    if metric is None:
        metric = scorers[0]
    elif metric not in scorers:
        raise InputError(f"{path} has no scorer {metric!r}; it has {', '.join(scorers)}")

    order = {sample_id: k for k, sample_id in enumerate(log.eval.dataset.sample_ids or [])}
    samples.sort(key=lambda s: (order.get(s.id, len(order)), s.epoch))  # dataset order, then epoch
    items: list[TraceItem] = []
    notes: list[str] = []
    errored, no_output, unscored, seen = [], [], [], set()
    other_values: dict[str, int] = {}
    for sample in samples:
        key = trace_id(sample.id, max(int(sample.epoch or 1) - 1, 0))
        if key in seen:
            raise InputError(f"{path}: sample {sample.id!r}, epoch {sample.epoch} appears twice")
        seen.add(key)
        if sample.error is not None:
            errored.append(key)
            continue
        response = sample.output.completion if sample.output is not None else ""
        if not response.strip():
            no_output.append(key)
            continue
        question = _question_text(sample.input)
        if not question or not question.strip():
            raise InputError(f"{path}: sample {sample.id!r} (epoch {sample.epoch}) has no input text")
        score = (sample.scores or {}).get(metric)
        correct = None
        if score is None:
            unscored.append(key)
        else:
            correct = _correct(score.value)
            if correct is None:
                shown = repr(score.value)[:40]
                other_values[shown] = other_values.get(shown, 0) + 1
        items.append(TraceItem(str(sample.id), max(int(sample.epoch or 1) - 1, 0), question, response, correct,
                               task, f"scorer {metric}", _answers(sample.target, task), cut_off=_cut_off(sample.output)))
    if not items:
        raise InputError(f"{path} holds no finished samples with output ({len(errored)} ended in an error, "
                         f"{len(no_output)} have no output)")
    if log.status != "success":
        notes.append(f"the log's status is {log.status}: only the samples it holds were read")
    if errored:
        notes.append(f"{len(errored)} samples ended in an error and were skipped (first: {errored[0]})")
    if no_output:
        notes.append(f"{len(no_output)} samples have no model output and were skipped (first: {no_output[0]})")
    if unscored:
        notes.append(f"{len(unscored)} traces have no {metric} score; their correctness is unknown")
    if other_values:
        values = ", ".join(f"{v} ({n})" for v, n in other_values.items())
        notes.append(f"{sum(other_values.values())} traces have a {metric} score that is not correct / incorrect "
                     f"(C / I, 1 / 0, true / false): {values}; their correctness is unknown")
    if len(scorers) > 1:
        notes.append(f"correctness from scorer {metric} (the log also has {', '.join(s for s in scorers if s != metric)})")
    if limit is not None:
        items = items[:limit]
    return TraceSource(str(path), "inspect", task, items, metric, None, "task", scorers, [], notes)
