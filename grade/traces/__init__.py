"""Many reasoning traces: their sources and readers, step-wise analysis, the store, runs and aggregates.
Layer: batch; imports the engine folders and batch/.

Error analysis of many reasoning traces: read an evaluation run, score every trace step-wise, triage.

Inputs (:func:`read_traces` tells them apart by their fields):

* an **lm-evaluation-harness samples file** (``lm_eval ... --log_samples`` writes
  ``samples_<task>_<date>.jsonl``): one object per document and filter with ``doc_id``, ``doc`` (the
  dataset row), ``target``, ``arguments``, ``resps`` ([[text, ...]]: the generations), ``filtered_resps``,
  ``filter``, ``metrics`` and each metric's value. Correctness is the file's metric (``exact_match`` by
  default) under one filter (the file's first, e.g. ``strict-match`` for GSM8K); a document with several
  generations (``repeats``, self-consistency) has one document-level metric, so its traces are
  re-scored one by one with :func:`grade.tasks.tasks.is_correct` against the gold answer (the ``source``
  column says which). GSM8K and MATH tasks (``gsm8k*``, ``minerva_math*``, ``hendrycks_math*``, ...);
* this project's **trace JSONL**: ``question``, ``response``, ``correct`` (true / false / null), optional
  ``doc_id`` (or ``id``), ``sample``, ``task``, ``answers``, and ``error_step`` / ``error_kind`` where the
  first wrong step is known (1-based, in the steps of :func:`grade.gradients.losses.split_steps`; the step-error
  benchmark's traces carry them);
* a **labels file** of :mod:`grade.batch.labeling` with full samples: each sampled answer is a trace, scored as
  the labeller scored it. :func:`generate_traces` writes one: the model's own traces, as GRADE_pos is
  defined. Its ``cut_off`` marks the samples that stopped at ``max_new_tokens`` (their "wrong" may only mean
  unfinished); labels written before it existed leave ``cut_off`` unknown;
* an **Inspect AI eval log** (``.eval``, or ``.json`` with ``eval`` and ``samples``), read with ``inspect_ai``'s
  own reader (optional: ``pip install 'grade-studio[inspect]'``): one trace per sample and epoch, correct from
  a scorer's C / I (the first scorer; ``--metric`` names another), ``cut_off`` from the output's stop reason.
  See :mod:`grade.traces.inspect_logs`.

Each trace gets a step-wise ``pos`` analysis (:func:`grade.analyze` with ``steps=True``): a rank ratio per
step and layer, GRADE_pos (their mean), per-token epistemic shock (row sums of ``C_g``) and token surprisal,
and a ``suspect_step``: the step that :data:`grade.steps.locate.DEFAULT_LOCATOR` ranks first as where the trace
goes wrong (the arithmetic / provenance check of :mod:`grade.steps.step_checks`, then surprisal), with the
per-step signals behind it. How often each signal finds a known wrong step: ``python -m grade steperrors``.
Where a step verifier is shipped (:mod:`grade.steps.verifier`; its reader, SmolLM2, reads any model's trace in
one forward pass), each trace also gets the verifier's per-step probability and ``verifier_suspect_step``,
which is null where no step stands out: the answer ``suspect_step`` cannot give.

The **trace store** is a folder::

    meta.json                  model, loss, srank and where the traces came from
    traces/part-*.parquet      one row per trace (columns: :data:`TRACE_SCHEMA`)
    tokens/part-*.parquet      one row per response token (:data:`TOKEN_SCHEMA`)
    annotations.json           the analyst's error step and kind per trace
    generated.jsonl            (generation only) the sampled traces, as a labels file

Parts are written as :mod:`grade.batch.features` writes its store (:class:`grade.batch.PartStore`) (atomically, one per finished chunk, a
chunk's tokens before its traces), so an interrupted run keeps every finished chunk and a re-run only
analyses the traces not yet stored. Steps are numbered from 1 wherever a user sees them
(``peak_step``, ``error_step``, the ``step`` of a token); token ``position`` counts response tokens from 0.

Aggregates (:func:`aggregate`) put numbers on the paper's case study: where the shock peaks in correct
and wrong traces (step position, token class), how often the peak step is the step an analyst marked as
the error, and how well GRADE_pos ranks wrong traces (AUROC with a bootstrap interval, beside trace
length and the plain cross-entropy).

The package, by job: :mod:`~grade.traces.sources` (the traces to analyse), :mod:`~grade.traces.readers` (and
:mod:`~grade.traces.inspect_logs`), :mod:`~grade.traces.analysis` (one trace), :mod:`~grade.traces.store` (the
trace store), :mod:`~grade.traces.runs` (analysing a source into a store, generating traces) and
:mod:`~grade.traces.aggregates`. Every name is importable from ``grade.traces`` as before the split.
"""

from .sources import TRACE_TASKS, PROMPTS, TraceItem, trace_id, TraceSource  # noqa: F401
from .readers import read_lm_eval_samples, read_traces  # noqa: F401
from .inspect_logs import is_inspect_log, read_inspect_log  # noqa: F401
from .analysis import TOKEN_CLASSES, token_class, token_shock, trace_records, analyze_trace_item, TraceWork  # noqa: F401
from .store import FORMAT_VERSION, ERROR_KINDS, TRACE_SCHEMA, TOKEN_SCHEMA, TraceStore, TraceStoreSink  # noqa: F401
from .runs import ProgressCallback, analyze_traces, generate_traces  # noqa: F401
from .aggregates import json_doc_id, summary_rows, RANKING_SCORES, aggregate, aggregate_markdown, cut_off_line  # noqa: F401

__all__ = [
    "TRACE_TASKS",
    "PROMPTS",
    "TraceItem",
    "trace_id",
    "TraceSource",
    "read_lm_eval_samples",
    "read_traces",
    "is_inspect_log",
    "read_inspect_log",
    "TOKEN_CLASSES",
    "token_class",
    "token_shock",
    "trace_records",
    "analyze_trace_item",
    "TraceWork",
    "FORMAT_VERSION",
    "ERROR_KINDS",
    "TRACE_SCHEMA",
    "TOKEN_SCHEMA",
    "TraceStore",
    "TraceStoreSink",
    "ProgressCallback",
    "analyze_traces",
    "generate_traces",
    "json_doc_id",
    "summary_rows",
    "RANKING_SCORES",
    "aggregate",
    "aggregate_markdown",
    "cut_off_line",
]
