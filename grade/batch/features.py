"""Batch GRADE features for labelled questions, stored as Parquet.

Input: labelled JSONL (one object a line) with at least ``id``, ``question`` and ``label``
(1 = answerable, 0 = not; ``null`` rows are skipped), optionally ``task``, ``context``, ``choices``,
``dataset``, ``accuracy``, ``samples`` (the model's sampled answers), ``majority`` (the most frequent
sample) and ``response``.

Output: a *feature store* (:class:`FeatureStore`), a folder (conventionally named
``something.parquet``) of Parquet part files, one per chunk of extracted rows.
``pandas.read_parquet(folder)`` reads it whole; :func:`load_features` does the same for one or several
stores (or single ``.parquet`` files). Parts are written atomically (temporary name, then rename), so
an interrupted run keeps every finished chunk and a re-run skips the rows already stored: nothing is
lost or duplicated. The local path (:func:`extract_features`), the Ray driver
(:mod:`grade.batch.ray_backend`) and the benchmark (:mod:`grade.studies.benchmark`) all write through it.

Columns (one row per question):

====================  ============================  ===============================================
column                type                          meaning
====================  ============================  ===============================================
id, dataset           str                           row identity; with ``has_context`` the key
label                 int8                          1 answerable, 0 not
accuracy              float64 (NaN if absent)       sample accuracy behind the label
task                  str                           prompt style used
has_context           bool                          a supporting document was in the prompt
question              str                           the question text
response              str or null                   scored response (``pos`` only)
model, loss, srank    str                           model name, ``pre``/``pos``, stable-rank variant
n_layers, n_tokens    int32                         L; tokens analysed (prompt [+ response])
loss_value            float64                       value of the loss whose gradient was taken
rank_ratio            list<float64>, length L       the GRADE feature vector (layer 0 first)
srank_h, srank_g      list<float64>, length L       stable ranks of C_h and C_g per layer
hidden                list<list<float32>>, (L+1, d) last prompt token's hidden state per layer,
                                                    embeddings first (for hidden-state baselines)
feature_version       int32                         :data:`FEATURE_VERSION`
package_version       str                           grade version that wrote the row
====================  ============================  ===============================================

Per-layer values are list columns (not ``ratio_00..``) so one schema fits models of any depth;
:func:`feature_matrix` and :func:`hidden_states` turn them into dense arrays.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from .. import __version__
from ..common.errors import GradeError, InputError
from ..common.visible import is_blank as _is_blank
from .parts import PartStore
from .runner import RunReport, model_for_backend, run_local, write_in_chunks
from ..common.io import atomic_path, check_input_file, iter_jsonl, jsonl_stem

log = logging.getLogger(__name__)

FEATURE_VERSION = 1

ProgressCallback = Callable[[int, int, str], None]  # (rows done, rows to do, id of the last row)

SCHEMA = pa.schema(
    [
        ("id", pa.string()),
        ("dataset", pa.string()),
        ("label", pa.int8()),
        ("accuracy", pa.float64()),
        ("task", pa.string()),
        ("has_context", pa.bool_()),
        ("question", pa.string()),
        ("response", pa.string()),
        ("model", pa.string()),
        ("loss", pa.string()),
        ("srank", pa.string()),
        ("n_layers", pa.int32()),
        ("n_tokens", pa.int32()),
        ("loss_value", pa.float64()),
        ("rank_ratio", pa.list_(pa.float64())),
        ("srank_h", pa.list_(pa.float64())),
        ("srank_g", pa.list_(pa.float64())),
        ("hidden", pa.list_(pa.list_(pa.float32()))),
        ("feature_version", pa.int32()),
        ("package_version", pa.string()),
    ]
)


# --------------------------------------------------------------------------------------------------
# labelled input


def label_value(value: Any) -> tuple[int | None, str | None]:
    """What a label is, for every reader of labelled files: ``(label, problem)``. 1 / 0, true / false and 1.0 / 0.0
    are labels (JSON writers differ in how they spell them), null is no label; anything else is a problem."""
    if value is None:
        return None, None
    if isinstance(value, (bool, int, float)) and value in (0, 1):
        return int(value), None
    return None, f"label {repr(value)[:40]}; use 1, 0, true, false or null"


def labelled_row_problem(row: Any) -> str | None:
    """Why a labelled row cannot be analysed (one short phrase), or None when its fields are usable.

    Every field is type-checked here, so that a bad row is skipped with a reason instead of failing
    deep inside the analysis (or, worse, being read wrongly: ``"choices": "abcd"`` is not four
    options).
    """
    from ..tasks.prompts import TASKS

    def text_or_null(key: str) -> bool:
        return row.get(key) is None or isinstance(row[key], str)

    if not isinstance(row, dict):
        return "not a JSON object"
    question = row.get("question")
    if not isinstance(question, str) or _is_blank(question):
        return "no question" if not question else f"'question' must be text, not {type(question).__name__}"
    if "id" in row and (isinstance(row["id"], bool) or not isinstance(row["id"], (str, int))):
        return "'id' must be text or a whole number"
    for key in ("dataset", "context", "response", "majority"):
        if not text_or_null(key):
            return f"'{key}' must be text or null, not {type(row[key]).__name__}"
    problem = label_value(row.get("label"))[1]
    if problem:
        return problem
    task = row.get("task")
    if task is not None and task != "" and task not in TASKS:
        return f"unknown task {task!r}; use one of {', '.join(TASKS)}"
    choices = row.get("choices")
    if choices is not None and choices != []:
        if not isinstance(choices, list) or not all(isinstance(c, str) and c.strip() for c in choices):
            return "'choices' must be a list of non-empty texts"
        if not 2 <= len(choices) <= 4:
            return f"'choices' has {len(choices)} options; a prompt takes 2 to 4 (A-D)"
    samples = row.get("samples")
    if samples is not None and (not isinstance(samples, list) or not all(isinstance(x, str) for x in samples)):
        return "'samples' must be a list of texts"
    accuracy = row.get("accuracy")
    if accuracy is not None and (isinstance(accuracy, bool) or not isinstance(accuracy, (int, float))
                                 or not 0.0 <= accuracy <= 1.0):
        return f"'accuracy' must be a number from 0 to 1 or null, not {accuracy!r}"
    return None


def read_labelled(paths: str | Path | Iterable[str | Path], *, keep_unlabelled: bool = False,
                  skipped: list[str] | None = None) -> list[dict[str, Any]]:
    """Rows of one or several labelled JSONL files (``.gz`` / ``.xz`` too), in file order.

    Rows whose ``label`` is null are dropped (the reference drops the uncertain middle), unless
    ``keep_unlabelled``. A missing ``dataset`` defaults to the file's stem. A bad row (bad bytes, not
    JSON, a field of the wrong type, see :func:`labelled_row_problem`) is skipped: its
    ``"path:line: reason"`` is appended to ``skipped`` (or logged when that is None) and the rest of
    the file is read. Raises :class:`~grade.common.errors.InputError` for a missing file or one in which
    no row at all is valid.
    """
    if isinstance(paths, (str, Path)):
        paths = [paths]
    rows: list[dict[str, Any]] = []
    seen: dict[tuple, str] = {}
    for path in map(Path, paths):
        check_input_file(path, "labelled file")
        valid, first_problem = 0, None
        for number, row, problem in iter_jsonl(path):
            problem = problem or labelled_row_problem(row)
            if problem:
                where = f"{path}:{number} {problem}"
                first_problem = first_problem or where
                if skipped is None:
                    log.warning("skipped %s", where)
                else:
                    skipped.append(where)
                continue
            valid += 1
            row.setdefault("id", f"{jsonl_stem(path)}-{number}")
            row["id"] = str(row["id"])
            row["dataset"] = str(row.get("dataset") or jsonl_stem(path))
            key = row_key(row)
            if key in seen:  # an id written twice (e.g. by two runs on one labels file): read once
                where = f"{path}:{number} repeats {row['dataset']}/{row['id']} of {seen[key]}"
                if skipped is None:
                    log.warning("skipped %s", where)
                else:
                    skipped.append(where)
                continue
            seen[key] = f"{path.name}:{number}"
            if row.get("choices") == []:
                row["choices"] = None
            label = row.get("label")
            if label is None and not keep_unlabelled:
                continue
            if label is not None:
                row["label"] = label_value(label)[0]
            rows.append(row)
        if first_problem and not valid:
            raise InputError(f"no usable row in {path}; first: {first_problem}")
    return rows


def _prompt_for(lm, row: dict[str, Any]) -> str | None:
    """A prompt built here only where ``analyze`` cannot build it itself (multiple-choice options)."""
    if not row.get("choices"):
        return None
    from ..tasks.prompts import format_prompt

    return format_prompt(lm.tokenizer, row["question"], task=row.get("task") or "qa", context=row.get("context"),
                         choices=list(row["choices"]))


def given_response(row: dict[str, Any]) -> str | None:
    """The response a ``pos`` row is scored on, if the row brings one: its ``response``, else its
    ``majority`` answer (written by the labeller), else the majority answer of its ``samples``
    (:func:`grade.tasks.tasks.majority_answer`). None: the model's greedy answer is scored instead."""
    from ..tasks.tasks import majority_answer

    return (row.get("response") or row.get("majority")
            or majority_answer(row.get("task") or "qa", row.get("samples"), row.get("choices")) or None)


def analyze_row(lm, row: dict[str, Any], *, loss: str = "pre", srank: str = "paper", keep_hidden: bool = True,
                prompt: str | None = None, spectra: bool = False):
    """``grade.analyze`` of one labelled row with the fast path. Under ``pos`` the response is
    :func:`given_response`, else the model's greedy answer (the row's answer length, else the task's).
    ``prompt`` replaces the row's own prompt (a perturbed wording, see :func:`grade.verdict.detectors.baselines.task_prompt`).
    ``spectra`` asks for every eigenvalue (the exact route) instead of the fast path's features alone.

    Chain-of-thought tasks (GSM8K, MATH: :attr:`grade.tasks.tasks.TaskSpec.stepwise`) are scored step-wise
    under ``pos``: one loss per step, and the row's rank ratios are the mean of the step ratios (the
    paper's GRADE_pos for reasoning)."""
    from ..gradients.analysis import analyze

    return analyze(lm, loss=loss, srank=srank, spectra=spectra, keep_hidden=keep_hidden,
                   **_row_request(lm, row, loss, prompt))


def feature_record(row: dict[str, Any], result) -> dict[str, Any]:
    """One row of the store's schema (:data:`SCHEMA`) from a labelled row and its analysis."""
    accuracy = row.get("accuracy")
    hidden = result.last_hidden
    return {
        "id": row["id"],
        "dataset": row["dataset"],
        "label": int(row["label"]) if row.get("label") is not None else None,
        "accuracy": float(accuracy) if isinstance(accuracy, (int, float)) else math.nan,
        "task": result.task,
        "has_context": bool(row.get("context")),
        "question": result.question,
        "response": result.response,
        "model": result.model,
        "loss": result.loss,
        "srank": result.srank,
        "n_layers": result.n_layers,
        "n_tokens": len(result.input_ids),
        "loss_value": result.loss_value,
        "rank_ratio": [float(x) for x in result.rank_ratio],
        "srank_h": [float(x) for x in result.srank_h],
        "srank_g": [float(x) for x in result.srank_g],
        "hidden": None if hidden is None else np.asarray(hidden, dtype=np.float32).tolist(),
        "feature_version": FEATURE_VERSION,
        "package_version": __version__,
    }


def feature_rows(lm, rows, *, loss: str = "pre", srank: str = "paper", keep_hidden: bool = True,
                 skipped: list | None = None, prompt_for: Callable[[dict], str] | None = None,
                 batch_size: int | None = None) -> Iterator[tuple[dict, dict | None]]:
    """``(row, record)`` for each row (record None where the row cannot be analysed: too long, no
    response...; its ``(dataset, id, reason)`` goes to ``skipped``). ``prompt_for(row)`` gives a
    perturbed prompt. The rows go through batched passes (:func:`grade.gradients.analysis.analyze_batch`,
    ``batch_size`` rows a pass, default the rule of :func:`grade.models.sizing.batch_size`; step-wise ``pos``
    rows one at a time), a batch's worth of rows at a time; the values are those of :func:`analyze_row`, one row
    at a time, up to float rounding."""
    from ..gradients.analysis import analyze_batch

    rows = list(rows)
    chunk = _grade_chunk(lm, rows, loss, batch_size, prompt_for)
    for start in range(0, len(rows), chunk):
        part, requests, results = rows[start:start + chunk], {}, {}
        for k, row in enumerate(part):
            try:
                requests[k] = _row_request(lm, row, loss, prompt_for(row) if prompt_for else None)
            except GradeError as exc:  # one bad row must not stop a batch
                results[k] = exc
        results.update(zip(requests, analyze_batch(lm, list(requests.values()), loss=loss, srank=srank,
                                                   keep_hidden=keep_hidden, batch_size=batch_size)))
        for k, row in enumerate(part):
            result = results[k]
            if isinstance(result, GradeError):
                _skip(row, result, skipped)
                yield row, None
            else:
                yield row, feature_record(row, result)


def _row_request(lm, row: dict[str, Any], loss: str, prompt: str | None) -> dict[str, Any]:
    """:func:`grade.gradients.analysis.analyze`'s arguments for one labelled row (:func:`analyze_row`), as one
    request of :func:`grade.gradients.analysis.analyze_batch`. Under ``pos`` the response is
    :func:`given_response`, else the model's greedy answer, step-wise for chain-of-thought tasks."""
    from ..tasks.tasks import scored_stepwise

    task = row.get("task") or "qa"
    request = {"question": row["question"], "context": row.get("context") or None, "task": task,
               "max_new_tokens": row.get("max_new_tokens"),
               "prompt": prompt if prompt is not None else _prompt_for(lm, row)}
    if loss == "pos":
        response = given_response(row)
        request.update(response=response, generate=response is None, steps=scored_stepwise(task))
    return request


def _grade_chunk(lm, rows: list[dict], loss: str, batch_size: int | None, prompt_for) -> int:
    """Rows handed to one :func:`~grade.gradients.analysis.analyze_batch` call: one batch of the longest prompt
    (and, under ``pos``, the longest response it may have: :func:`grade.models.sizing.batch_size`), so that a
    progress bar moves once a batch."""
    from ..models.sizing import batch_size as size_rule
    from ..models.generation import encode_prompt
    from ..tasks.prompts import format_prompt
    from ..tasks.tasks import answer_format

    if batch_size is not None or not rows:
        return max(1, batch_size or 1)
    longest = answer = 1
    for row in rows:
        try:
            prompt = (prompt_for(row) if prompt_for else None) or _prompt_for(lm, row) or format_prompt(
                lm.tokenizer, row["question"], task=row.get("task") or "qa", context=row.get("context") or None)
        except GradeError:
            continue
        n = len(encode_prompt(lm.tokenizer, prompt))
        if loss == "pos":
            response = given_response(row)
            m = (len(lm.tokenizer.encode(response, add_special_tokens=False)) if response is not None else
                 answer_format(row.get("task") or "qa", row.get("max_new_tokens")).max_new_tokens)
            n, answer = n + m, max(answer, m)
        longest = max(longest, n)
    return size_rule(lm, tokens=longest, kind="grade", logits_per_row=answer + 1 if loss == "pos" else 1)


def _skip(row: dict, exc: Exception, skipped: list | None) -> None:
    log.warning("skipped %s/%s: %s", row["dataset"], row["id"], exc)
    if skipped is not None:
        skipped.append((row["dataset"], row["id"], str(exc)))


# --------------------------------------------------------------------------------------------------
# the feature store


def row_key(row: dict[str, Any]) -> tuple[str, str, bool]:
    """``(dataset, id, has_context)``: one question asked with and without its document is two rows."""
    return (str(row["dataset"]), str(row["id"]), bool(row.get("context")))


class FeatureStore(PartStore):
    """A folder of Parquet part files holding feature rows (:data:`SCHEMA`), one part per written chunk.

    Parameters
    ----------
    path : the folder (conventionally ``something.parquet``); created by :meth:`create`.
    """

    what = "a feature store"

    def keys(self) -> set[tuple[str, str, bool]]:
        """:func:`row_key` of every stored row (empty for a missing store)."""
        keys: set[tuple[str, str, bool]] = set()
        for part in self.parts():
            table = pq.read_table(part, columns=["dataset", "id", "has_context"])
            keys.update(zip(*(table.column(c).to_pylist() for c in ("dataset", "id", "has_context"))))
        return keys

    def check(self, model: str, loss: str, srank: str) -> None:
        """Refuse to mix features of another model, loss or stable-rank variant into this store."""
        parts = self.parts()
        if not parts:
            return
        first = pq.read_table(parts[0], columns=["model", "loss", "srank"]).slice(0, 1).to_pylist()
        if first and (first[0]["model"], first[0]["loss"], first[0]["srank"]) != (model, loss, srank):
            have = first[0]
            raise InputError(
                f"{self.path} holds features of model {have['model']}, loss {have['loss']}, srank {have['srank']}; "
                f"this run is {model}, {loss}, {srank}: use another --out"
            )

    def write(self, records: list[dict[str, Any]], schema: pa.Schema = SCHEMA) -> Path | None:
        """Write one chunk of feature rows atomically: a reader never sees a half-written part."""
        return super().write(records, schema)

    def stale_keys(self, rows: list[dict[str, Any]]) -> set[tuple[str, str, bool]]:
        """Keys of stored ``pos`` rows whose scored response is no longer the row's
        (:func:`given_response`): they must be computed again."""
        current = {row_key(r): r for r in rows}
        stale = set()
        for part in self.parts():
            data = pq.read_table(part, columns=["dataset", "id", "has_context", "loss", "response"]).to_pylist()
            for rec in data:
                key = (rec["dataset"], rec["id"], rec["has_context"])
                row = current.get(key)
                if row is not None and rec["loss"] == "pos":
                    wanted = given_response(row)
                    if wanted is not None and wanted != rec["response"]:
                        stale.add(key)
        return stale

    def refresh(self, rows: list[dict[str, Any]], loss: str) -> tuple[int, int]:
        """Bring stored rows in line with the current labelled rows (labels are redone when a labelling
        run is repeated): a changed label or accuracy is rewritten in place; under ``pos`` a row whose
        scored response changed is removed, so that the next extraction computes it again.

        Returns (rows relabelled, rows removed). Part files are rewritten atomically.
        """
        current = {row_key(r): r for r in rows if r.get("label") is not None}
        stale = self.stale_keys(list(current.values())) if loss == "pos" else set()
        relabelled = removed = 0
        for part in self.parts():
            table = pq.read_table(part)
            data = table.select(["dataset", "id", "has_context", "label", "accuracy"]).to_pylist()
            keep, labels, accuracies, changed = [], [], [], False
            for rec in data:
                key = (rec["dataset"], rec["id"], rec["has_context"])
                row = current.get(key)
                label, accuracy = rec["label"], rec["accuracy"]
                if key in stale:
                    removed += 1
                    changed = True
                elif row is not None:
                    new_acc = row.get("accuracy")
                    new_acc = float(new_acc) if isinstance(new_acc, (int, float)) else math.nan
                    if int(row["label"]) != label or not (new_acc == accuracy or (math.isnan(new_acc) and math.isnan(accuracy))):
                        label, accuracy = int(row["label"]), new_acc
                        relabelled += 1
                        changed = True
                keep.append(key not in stale)
                labels.append(label)
                accuracies.append(accuracy)
            if not changed:
                continue
            table = table.set_column(table.schema.get_field_index("label"), "label", pa.array(labels, pa.int8()))
            table = table.set_column(table.schema.get_field_index("accuracy"), "accuracy", pa.array(accuracies, pa.float64()))
            table = table.filter(pa.array(keep))
            if table.num_rows:
                with atomic_path(part) as tmp:
                    pq.write_table(table, tmp, compression="zstd")
            else:
                part.unlink()
        return relabelled, removed

    def read(self, *, columns: list[str] | None = None, hidden: bool = True):
        """The stored rows as one DataFrame (see :func:`load_features`)."""
        return load_features(self.path, columns=columns, hidden=hidden)


def stored_keys(store: str | Path) -> set[tuple[str, str, bool]]:
    """:func:`row_key` of every row already in a store (empty for a missing store)."""
    return FeatureStore(store).keys()


@dataclass
class ExtractionReport:
    """What one :func:`extract_features` call did."""

    store: Path
    written: int = 0  # rows added by this call
    already: int = 0  # rows found in the store and skipped
    relabelled: int = 0  # stored rows whose label changed in the input (updated in place)
    removed: int = 0  # stored pos rows whose response changed (computed again)
    skipped: list[tuple[str, str, str]] = field(default_factory=list)  # (dataset, id, reason)

    def __str__(self) -> str:
        refreshed = f", {self.relabelled} relabelled" if self.relabelled else ""
        refreshed += f", {self.removed} redone (response changed)" if self.removed else ""
        return (f"{self.written} rows written, {self.already} already stored{refreshed}, "
                f"{len(self.skipped)} skipped -> {self.store}")


def extract_features(
    lm,
    rows: list[dict[str, Any]],
    out: str | Path,
    *,
    loss: str = "pre",
    srank: str = "paper",
    keep_hidden: bool = True,
    chunk_size: int = 32,
    progress: bool = False,
    callback: ProgressCallback | None = None,
    prompt_for: Callable[[dict], str] | None = None,
    backend: str = "local",
    cluster=None,
    batch_size: int | None = None,
):
    """Compute features of labelled rows and append them to the store ``out`` (a folder).

    Rows whose :func:`row_key` is already stored are skipped, so an interrupted run can simply be
    repeated. Stored rows are first brought in line with ``rows`` (:meth:`FeatureStore.refresh`): a label
    that changed since is updated, a ``pos`` row whose response changed is computed again. Every ``chunk_size`` rows a part file is written; the rows finished before an exception
    (Ctrl-C included) are written too before it propagates. The loop is :func:`grade.batch.run_local`
    (``backend="local"``) or :func:`grade.batch.run_on_ray` (``backend="ray"``): same store, same rows, same values.

    Parameters
    ----------
    lm : a model from :func:`grade.load_model`, or a :class:`grade.models.models.ModelSpec` (loaded here, or by
        every Ray worker).
    rows : labelled rows, e.g. from :func:`read_labelled`; rows without a label are ignored.
    loss, srank : see :func:`grade.analyze`.
    progress : show a progress bar on stderr.
    callback : called after every row with (rows done, rows to do, id); on Ray after every written chunk with
        (rows done, rows to do, the :class:`~grade.batch.RayRun`).
    prompt_for : ``row -> prompt``: analyse every row under another wording of its prompt (the
        benchmark's robustness study, :func:`grade.verdict.detectors.baselines.task_prompt`); local only.
    backend : ``local`` (this process) or ``ray`` (:data:`grade.batch.BACKENDS`).
    cluster : where and how wide a Ray run goes (:class:`grade.batch.ClusterOptions`; default a local cluster).
    batch_size : rows a batched pass (:func:`feature_rows`; default from the device's free memory).

    Returns an :class:`ExtractionReport` (local) or a :class:`grade.batch.RunReport` (Ray: workers, chunks
    sent again).
    """
    lm = model_for_backend(lm, backend, cluster)
    if backend == "ray":
        from .ray_backend import ClusterOptions, run_on_ray

        if prompt_for is not None:
            raise InputError("prompt_for (another wording of every prompt) runs on the local backend only")
        work = FeatureWork(loss, srank, keep_hidden, batch_size)
        rows = [r for r in rows if r.get("label") is not None]
        sink = FeatureStoreSink(out, lm.name, loss, srank, rows)
        return run_on_ray(rows, work, sink, lm, cluster or ClusterOptions(), chunk_size=chunk_size,
                          progress=progress, callback=callback)
    sink = FeatureStoreSink(out, lm.name, loss, srank)
    report = ExtractionReport(store=sink.out)
    report.relabelled, report.removed = sink.store.refresh(rows, loss)

    def work(todo, report):
        for row, record in feature_rows(lm, todo, loss=loss, srank=srank, keep_hidden=keep_hidden,
                                        skipped=report.skipped, prompt_for=prompt_for, batch_size=batch_size):
            yield row["id"], record

    labelled = [row for row in rows if row.get("label") is not None]
    return run_local(labelled, work, sink, chunk_size=chunk_size, report=report, progress=progress,
                     desc=f"features {loss}", unit="q", callback=callback, warn_duplicates=True)


@dataclass(frozen=True)
class FeatureWork:
    """Ray work: GRADE features of labelled rows, :func:`analyze_row` on each, as the local path."""

    loss: str = "pre"
    srank: str = "paper"
    keep_hidden: bool = True
    batch_size: int | None = None

    def process(self, lm, rows: list[dict]) -> dict:
        skipped: list[tuple[str, str, str]] = []
        records = [record for _, record in feature_rows(lm, rows, loss=self.loss, srank=self.srank,
                                                        keep_hidden=self.keep_hidden, skipped=skipped,
                                                        batch_size=self.batch_size)
                   if record is not None]
        return {"results": records, "skipped": skipped}


class FeatureStoreSink:
    """The sink of a feature run: the Parquet feature store (:class:`FeatureStore`): one
    part file per finished chunk, stored rows first brought in line with the labelled rows as locally."""

    def __init__(self, out: str | Path, model: str, loss: str, srank: str, rows: list[dict] | None = None):
        self.store = FeatureStore(out).create()
        self.out = self.store.path
        self.store.check(model, loss, srank)
        if rows is not None:
            self.store.refresh(rows, loss)

    def key(self, row: dict) -> tuple:
        return row_key(row)

    def done_keys(self) -> set:
        return self.store.keys()

    def write(self, records: list[dict]) -> None:
        self.store.write(records)


class _InMemory:
    """A sink that keeps the records in a list (:func:`features_of_rows`)."""

    def __init__(self):
        self.records: list[dict[str, Any]] = []

    def write(self, records: list[dict[str, Any]]) -> None:
        self.records.extend(records)


def features_of_rows(lm, rows: list[dict[str, Any]], *, loss: str = "pre", srank: str = "paper",
                     keep_hidden: bool = False, progress: bool = False,
                     callback: ProgressCallback | None = None, batch_size: int | None = None):
    """Like :func:`extract_features` but in memory: a DataFrame (same columns) and the skipped rows."""
    import pandas as pd

    skipped: list[tuple[str, str, str]] = []
    sink, report = _InMemory(), RunReport(out=Path())
    pairs = ((row["id"], record) for row, record in feature_rows(lm, rows, loss=loss, srank=srank,
                                                                 keep_hidden=keep_hidden, skipped=skipped,
                                                                 batch_size=batch_size))
    write_in_chunks(sink, pairs, total=len(rows), chunk_size=max(1, len(rows)), report=report, progress=progress,
                    desc=f"features {loss}", unit="q", callback=callback)
    table = pa.Table.from_pylist(sink.records, schema=SCHEMA)
    return table.to_pandas(), skipped


# --------------------------------------------------------------------------------------------------
# reading features back


def load_features(paths: str | Path | Iterable[str | Path], *, columns: list[str] | None = None,
                  hidden: bool = True):
    """One DataFrame from feature stores (folders) and/or single Parquet files.

    ``hidden=False`` skips the (large) hidden-state column. Raises InputError for missing paths.
    """
    import pandas as pd

    from ..common.bounded import read_parquet

    if isinstance(paths, (str, Path)):
        paths = [paths]
    frames = []
    for path in map(Path, paths):
        if path.is_dir():
            files = FeatureStore(path).parts()
        elif path.is_file():
            files = [path]
        else:
            raise InputError(f"feature file {path} does not exist")
        for file in files:
            try:
                schema = pq.read_schema(file)
                wanted = columns or [n for n in schema.names if hidden or n != "hidden"]
                frames.append(read_parquet(file, columns=[c for c in wanted if c in schema.names]).to_pandas())
            except (pa.ArrowException, OSError, ValueError) as exc:
                reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
                raise InputError(f"{file} is not a readable Parquet feature file ({reason})") from None
    if not frames:
        raise InputError(f"no features found in {', '.join(map(str, paths))}")
    return pd.concat(frames, ignore_index=True)


#: the columns a probe is trained from (see the table at the top of this module)
TRAINING_COLUMNS = ("id", "dataset", "label", "has_context", "model", "loss", "srank", "rank_ratio")


def check_feature_frame(df, where: str = "the features") -> None:
    """Raise InputError unless ``df`` holds usable training rows: the :data:`TRAINING_COLUMNS`,
    labels 0/1, text in the identity columns and one finite rank ratio per layer, the same number of
    layers in every row."""
    missing = [c for c in TRAINING_COLUMNS if c not in df.columns]
    if missing:
        raise InputError(f"{where} lack the column(s) {', '.join(missing)}: not features written by `grade extract`")
    if df.empty:
        return
    for column in ("model", "loss", "srank", "dataset"):
        if not df[column].map(lambda v: isinstance(v, str) and bool(v)).all():
            raise InputError(f"{where}: column {column!r} must hold text in every row")
    labels = df["label"]
    if labels.isna().any() or not labels.isin([0, 1]).all():
        raise InputError(f"{where}: column 'label' must be 0 or 1 in every row")
    lengths = set()
    for value in df["rank_ratio"]:
        try:
            vector = np.asarray(value, dtype=np.float64)
        except (TypeError, ValueError):
            vector = np.array([np.nan])
        if vector.ndim != 1 or vector.size == 0 or not np.isfinite(vector).all():
            raise InputError(f"{where}: column 'rank_ratio' must hold a list of finite numbers in every row")
        lengths.add(vector.size)
    if len(lengths) > 1:
        raise InputError(f"{where}: 'rank_ratio' mixes layer counts {sorted(lengths)}: features of different models")


def feature_matrix(df, column: str = "rank_ratio") -> np.ndarray:
    """(n, L) float64 array from a per-layer list column; raises InputError on mixed depths."""
    values = df[column].tolist()
    lengths = {len(v) for v in values}
    if len(lengths) > 1:
        raise InputError(f"column {column} mixes layer counts {sorted(lengths)}: features of different models")
    return np.asarray([np.asarray(v, dtype=np.float64) for v in values]).reshape(len(values), -1)


def hidden_states(df, layer: int | None = None) -> np.ndarray:
    """Last-prompt-token hidden states: (n, L+1, d) float32, or (n, d) for one ``layer``
    (index into the L+1 states, 0 = embeddings; negative counts from the top)."""
    if "hidden" not in df or df["hidden"].isna().any():
        raise InputError("these features have no hidden states (extracted with keep_hidden=False?)")
    stacked = np.stack([np.stack(list(h)) for h in df["hidden"]]).astype(np.float32)
    return stacked if layer is None else stacked[:, layer]
