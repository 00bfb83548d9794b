"""The traces to analyse: :class:`TraceItem` (one trace) and :class:`TraceSource` (what a reader found)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..common.errors import InputError
from ..tasks.registry import REGISTRY

#: The tasks whose answers are reasoning traces: the step-wise tasks of the registry (gsm8k, math).
TRACE_TASKS = tuple(name for name, spec in REGISTRY.items() if spec.stepwise)


PROMPTS = ("task", "run")


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
    cut_off: bool | None = None  # generation stopped at its token limit ("wrong" may mean unfinished); None: not known

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
    int_ids: bool = False  # every doc_id of the file was a JSON integer (trace JSONL)
    max_new_tokens: int | None = None  # the token limit the traces were generated under, where the file says

    def describe(self) -> dict[str, Any]:
        """The reading settings (stored in the store's meta.json; a resumed run must match them)."""
        described = {"file": Path(self.path).name, "format": self.format, "task": self.task, "metric": self.metric,
                     "filter": self.filter, "prompt": self.prompt}
        if self.int_ids:
            described["int_ids"] = True
        if self.max_new_tokens is not None:
            described["max_new_tokens"] = self.max_new_tokens
        return described


def _check_task(task: str | None) -> str | None:
    if task is not None and task not in TRACE_TASKS:
        raise InputError(f"unknown task {task!r}; use {' or '.join(TRACE_TASKS)}")
    return task
