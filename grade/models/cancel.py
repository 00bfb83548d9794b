"""Cooperative cancellation of a running computation, without passing a flag through every call.

Whoever runs work on someone's behalf (the served studio's queue worker) wraps it in :func:`cancellable`
with a :class:`threading.Event`; the engine calls :func:`check_cancelled` between its steps (a step group of
step-wise ``pos``, a step's backward pass, a layer's spectrum, a row of a batch). Once the event is set,
the next check raises :class:`Cancelled`, so a cancelled analysis stops within one step instead of running to
its end. Outside :func:`cancellable` the check costs a context-variable read and never raises.
"""

from __future__ import annotations

import contextvars
import threading
from contextlib import contextmanager
from typing import Iterator

_current: contextvars.ContextVar[threading.Event | None] = contextvars.ContextVar("grade_cancel", default=None)


class Cancelled(Exception):
    """The computation was cancelled by whoever started it.

    Not a :class:`grade.common.errors.GradeError`: a batch that skips bad rows must stop here, not skip the row.
    """


@contextmanager
def cancellable(event: threading.Event) -> Iterator[threading.Event]:
    """Within this block (this thread or task), :func:`check_cancelled` raises once ``event`` is set."""
    token = _current.set(event)
    try:
        yield event
    finally:
        _current.reset(token)


def check_cancelled() -> None:
    """Raise :class:`Cancelled` if the surrounding :func:`cancellable` block's event is set."""
    event = _current.get()
    if event is not None and event.is_set():
        raise Cancelled("the analysis was cancelled")
