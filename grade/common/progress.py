"""Progress of a long computation, reported without passing a callback through every call (as
:mod:`grade.models.cancel` does for cancellation): whoever runs the work wraps it in :func:`reporting`, and the engine
calls :func:`report` where it finishes a unit of work (a step group of step-wise ``pos``). Outside
:func:`reporting` a report costs a context-variable read. A callback may raise (a time bound): the computation
stops there, with that exception.
"""

from __future__ import annotations

import contextvars
from contextlib import contextmanager
from typing import Callable, Iterator

#: (done, total, unit) -> None
ProgressCallback = Callable[[int, int, str], None]

_current: contextvars.ContextVar[ProgressCallback | None] = contextvars.ContextVar("grade_progress", default=None)


@contextmanager
def reporting(callback: ProgressCallback | None) -> Iterator[None]:
    """Within this block (this thread or task), :func:`report` calls ``callback``."""
    token = _current.set(callback)
    try:
        yield
    finally:
        _current.reset(token)


def report(done: int, total: int, unit: str) -> None:
    """``done`` of ``total`` ``unit`` finished (e.g. 12 of 40 steps)."""
    callback = _current.get()
    if callback is not None:
        callback(done, total, unit)
