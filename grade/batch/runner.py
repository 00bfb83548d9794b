"""The resumable batch run, written once: pick the items a sink does not hold yet, push them through the
work, write every finished chunk through the sink, show the progress and fill the report.

Labelling (:mod:`grade.batch.labeling`), feature extraction (:mod:`grade.batch.features`) and trace analysis
(:mod:`grade.traces`) only supply their work and their sink:

* a **work** turns items into results: locally a generator of ``(key, result or None)`` pairs, one per
  item (:func:`run_local`); on Ray a picklable object with ``process(lm, items) -> {"results": [...],
  "skipped": [...]}`` (:class:`Work`, :mod:`grade.batch.ray_backend`);
* a **sink** (:class:`Sink`) holds what is done: ``key(item)``, ``done_keys()``, and ``write(results)``,
  which writes one chunk atomically (a reader never sees half of it).

Progress convention (the whole package): ``progress`` is a bool, "draw a progress bar on stderr";
``callback(done, total, what)`` is called after every finished item (``what``: the item's key, or what the
caller documents) and may raise to stop the run, which keeps what was written; a function that reports
lines of text takes ``say: Callable[[str], None]``.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Protocol

from ..common.errors import InputError
from ..common.progress import ProgressBar  # noqa: F401 (part of this module's API)

log = logging.getLogger(__name__)

#: ``callback(done, total, what)`` after every finished item.
ProgressCallback = Callable[[int, int, Any], None]

#: Where a batch job runs: ``local``, this process; ``ray``, the workers of a Ray cluster
#: (:mod:`grade.batch.ray_backend`), each holding its own copy of the model.
BACKENDS = ("local", "ray")


def model_for_backend(model, backend: str, cluster=None):
    """The model a batch job on ``backend`` works with, from ``model`` (a loaded model or a
    :class:`grade.models.models.ModelSpec`): locally a loaded model (a spec is loaded here); on Ray the spec, which
    every worker loads. ``cluster`` (:class:`~grade.batch.ray_backend.ClusterOptions`) goes with ``ray`` only."""
    from ..models.models import ModelSpec  # torch loads with a job, not with the runner

    if backend not in BACKENDS:
        raise InputError(f"unknown backend {backend!r}; use {' or '.join(BACKENDS)}")
    if backend == "local":
        if cluster is not None:
            raise InputError("cluster options apply to the ray backend only")
        return model.load() if isinstance(model, ModelSpec) else model
    if not isinstance(model, ModelSpec):
        raise InputError("the ray backend loads the model in every worker: give a grade.models.models.ModelSpec, "
                         "not a loaded model")
    return model


class Work(Protocol):
    """Per-chunk work. ``process`` must be a pure function of (model, items, settings)."""

    def process(self, lm, items: list) -> dict:  # {"results": [...], "skipped": [(key..., reason)]}
        ...


class Sink(Protocol):
    def key(self, item) -> tuple: ...

    def done_keys(self) -> set: ...

    def write(self, results: list) -> None: ...


@dataclass
class RunReport:
    """What one batch run did."""

    out: Path
    written: int = 0  # results written by this run
    already: int = 0  # items found in the output and not sent
    skipped: list[tuple] = field(default_factory=list)  # (..., reason) per item the work refused
    resent: int = 0  # chunks sent again after their worker died
    workers: int = 0
    seconds: float = 0.0  # wall clock of the run, model loads excluded
    busy_seconds: float = 0.0  # summed over workers: time spent in the work itself

    @property
    def utilisation(self) -> float:
        """Share of the workers' time spent working (1.0: no worker ever waited for the driver)."""
        return self.busy_seconds / (self.workers * self.seconds) if self.workers and self.seconds else 0.0

    def __str__(self) -> str:
        return (f"{self.written} rows written, {self.already} already stored, {len(self.skipped)} skipped, "
                f"{self.workers} workers, {self.resent} chunks resent, {self.seconds:.1f} s -> {self.out}")


def items_to_do(items: Iterable, key: Callable[[Any], Any], done: set, report, *, warn_duplicates: bool = False) -> list:
    """The items whose ``key`` is not in ``done``, each key once (a duplicate input row is done once);
    ``report.already`` counts the ones found done."""
    todo, seen = [], set(done)
    for item in items:
        k = key(item)
        if k in done:
            report.already += 1
        elif k in seen:
            if warn_duplicates:
                log.warning("duplicate row %s in the input: kept the first", "/".join(map(str, k[:2])) if
                            isinstance(k, tuple) else k)
        else:
            seen.add(k)
            todo.append(item)
    return todo


def write_in_chunks(sink, results: Iterable[tuple[Any, Any]], *, total: int, chunk_size: int, report,
                    progress: bool = False, desc: str = "", unit: str = "q",
                    callback: ProgressCallback | None = None, initial: int = 0,
                    postfix: Callable[[Any], dict] | None = None, bar_options: dict | None = None) -> None:
    """Write ``(key, result or None)`` pairs from ``results`` through ``sink.write(list)`` every ``chunk_size``
    results, and whatever is left when the loop ends or is interrupted, so a stopped run keeps what it
    computed. ``report.written`` counts the results; ``callback(done, total, key)`` follows each pair
    (``done`` starts from ``initial``, the items done before this run when ``total`` counts them);
    ``postfix(result)``: what the bar shows beside its count."""
    buffer: list = []
    with ProgressBar(progress, total=total, desc=desc, unit=unit, initial=initial, **(bar_options or {})) as bar:
        try:
            for count, (key, result) in enumerate(results, initial + 1):
                if result is not None:
                    buffer.append(result)
                if len(buffer) >= chunk_size:
                    sink.write(buffer)
                    report.written += len(buffer)
                    buffer = []
                bar.update(1, **(postfix(result) if postfix is not None and result is not None else {}))
                if callback is not None:
                    callback(count, total, key)
        finally:
            if buffer:
                sink.write(buffer)
                report.written += len(buffer)


def run_local(items: Iterable, work: Callable[[list, Any], Iterable[tuple[Any, Any]]], sink: Sink, *,
              chunk_size: int, report=None, progress: bool = False, desc: str = "", unit: str = "q",
              callback: ProgressCallback | None = None, warn_duplicates: bool = False):
    """The local backend: the items ``sink`` does not hold yet go through ``work(todo, report)`` (a generator
    of ``(key, result or None)`` per item, in this process) and are written by :func:`write_in_chunks`.
    ``report``: a :class:`RunReport` (the default) or any object with ``written``, ``already`` and
    ``skipped``; its ``seconds`` (where it has them) are the run's wall clock. Returns the report."""
    report = report if report is not None else RunReport(out=Path(getattr(sink, "out", "")), workers=1)
    t0 = time.perf_counter()
    todo = items_to_do(items, sink.key, sink.done_keys(), report, warn_duplicates=warn_duplicates)
    try:
        write_in_chunks(sink, work(todo, report), total=len(todo), chunk_size=chunk_size, report=report,
                        progress=progress, desc=desc, unit=unit, callback=callback)
    finally:
        if hasattr(report, "seconds"):
            report.seconds = time.perf_counter() - t0
    return report
