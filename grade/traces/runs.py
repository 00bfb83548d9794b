"""Trace runs: analyse a source into a store, in this process or on Ray (:mod:`grade.batch`), and sample
the model's own traces (:func:`generate_traces`)."""

from __future__ import annotations

from pathlib import Path
from typing import Callable

from ..batch.runner import model_for_backend, run_local
from ..common.errors import InputError
from .analysis import TraceWork, _analysed, _triaged, grade_pending
from .sources import TRACE_TASKS, TraceSource
from .store import TraceStore, TraceStoreSink

ProgressCallback = Callable[[int, int, str], None]  # (traces done, traces to do, id of the last trace)


class _GradeFillSink(TraceStoreSink):
    """A store whose verifier-only rows count as not done: their traces get the GRADE analysis, and the full row
    replaces the triage row (the store keeps a trace's last row)."""

    def done_keys(self) -> set:
        if not self.store.traces_dir.is_dir():
            return set()
        frame = self.store.traces(annotated=False)
        return set(frame.loc[~grade_pending(frame), "trace_id"])


def triage_traces(reader, source: TraceSource, out: str | Path, *, model: str, srank: str = "paper",
                  chunk_size: int = 64, progress: bool = False, callback: ProgressCallback | None = None):
    """Triage every trace of ``source`` not yet in the store ``out``: the step verifier (one forward pass of
    ``reader``, :func:`grade.steps.verifier.load_reader`'s model) and the model-free check, no GRADE analysis (its
    columns stay null, no token rows). ``model``: the model whose run the traces are from (the store's model; it
    is not loaded). ``analyze_traces(..., fill_grade=True)`` adds the GRADE analysis later. Returns a
    :class:`grade.batch.RunReport`."""
    if chunk_size < 1:
        raise InputError("--chunk-size must be at least 1")
    store = TraceStore(out)
    store.prepare(model, srank, source.describe())

    def work(todo, report):
        for item, result in _triaged(reader, todo, model, srank, report.skipped):
            if result is not None:
                report.busy_seconds += result["trace"]["seconds"]
            yield item.trace_id, result

    return run_local(source.items, work, TraceStoreSink(store), chunk_size=chunk_size, progress=progress,
                     desc="triage", unit="trace", callback=callback)


def analyze_traces(lm, source: TraceSource, out: str | Path, *, srank: str = "paper", chunk_size: int = 8,
                   progress: bool = False, callback: ProgressCallback | None = None, backend: str = "local",
                   cluster=None, verify: bool = True, fill_grade: bool = False):
    """Analyse the traces of ``source`` not yet in the store ``out``, in this process
    (:func:`grade.batch.run_local`, ``backend="local"``) or on the workers of a Ray cluster
    (:func:`grade.batch.run_on_ray`, ``backend="ray"``, ``cluster``: :class:`grade.batch.ClusterOptions`):
    same store, same rows. ``lm``: a loaded model or a :class:`grade.models.models.ModelSpec` (loaded here, or by every
    Ray worker).

    ``verify=False`` leaves the step verifier's columns null (its reader is not loaded or run).
    ``fill_grade=True``: traces stored by a verifier-only triage (:func:`triage_traces`) are analysed too, each full
    row replacing its triage row.

    Every ``chunk_size`` traces a part is written; an exception (Ctrl-C, or one raised by ``callback``
    to stop the run) still writes the traces finished before it. ``callback(done, total, trace id)`` follows
    every trace (on Ray ``callback(done, total, run)`` every written chunk). Returns a
    :class:`grade.batch.RunReport`.
    """
    if chunk_size < 1:
        raise InputError("--chunk-size must be at least 1")
    lm = model_for_backend(lm, backend, cluster)
    store = TraceStore(out)
    store.prepare(lm.name, srank, source.describe())
    sink = _GradeFillSink(store) if fill_grade else TraceStoreSink(store)
    if backend == "ray":
        from ..batch.ray_backend import ClusterOptions, run_on_ray

        return run_on_ray(source.items, TraceWork(srank, verify), sink, lm, cluster or ClusterOptions(),
                          chunk_size=chunk_size, progress=progress, callback=callback)

    def work(todo, report):
        for item, result in _analysed(lm, todo, srank, report.skipped, verify):
            if result is not None:
                report.busy_seconds += result["trace"]["seconds"]
            yield item.trace_id, result

    return run_local(source.items, work, sink, chunk_size=chunk_size, progress=progress,
                     desc="traces", unit="trace", callback=callback)


def generate_traces(lm_or_spec, dataset: str, out: str | Path, *, n_per_problem: int, limit: int | None = None,
                    offset: int = 0, matcher: str = "strict", seed: int = 0, max_new_tokens: int | None = None,
                    questions_per_batch: int = 4, cluster=None, progress: bool = False) -> Path:
    """Sample ``n_per_problem`` traces per problem of a GSM8K / MATH dataset with the model itself, into
    ``<out>/generated.jsonl`` (a labels file, :func:`grade.batch.labeling.label_questions`: seeded per problem
    and sample, resumable, each trace scored). ``lm_or_spec``: a loaded model, or a
    :class:`grade.models.models.ModelSpec` to sample on Ray workers. Returns the file's path."""
    from ..tasks.tasks import load_questions

    if n_per_problem < 1:
        raise InputError("--generate must be at least 1")
    questions = load_questions(dataset, limit=limit, offset=offset)
    wrong = sorted({q.task for q in questions} - set(TRACE_TASKS))
    if wrong:
        raise InputError(f"dataset {dataset!r} is a {', '.join(wrong)} set; traces come from gsm8k or math problems")
    path = Path(out) / "generated.jsonl"
    path.parent.mkdir(parents=True, exist_ok=True)
    from ..batch.labeling import label_questions

    label_questions(lm_or_spec, questions, path, n_samples=n_per_problem, matcher=matcher, seed=seed,
                    max_new_tokens=max_new_tokens, questions_per_batch=questions_per_batch, progress=progress,
                    backend="local" if cluster is None else "ray", cluster=cluster)
    return path
