"""Progress of a long computation: the one progress bar every long command draws (:class:`ProgressBar`: count,
rate and time left on stderr), and progress reported without passing a callback through every call (as
:mod:`grade.models.cancel` does for cancellation): whoever runs the work wraps it in :func:`reporting`, and the engine
calls :func:`report` where it finishes a unit of work (a step group of step-wise ``pos``). Outside
:func:`reporting` a report costs a context-variable read. A callback may raise (a time bound): the computation
stops there, with that exception.
"""

from __future__ import annotations

import contextvars
import sys
from contextlib import contextmanager
from typing import Callable, Iterator

#: what every bar shows: count of total, share, items per second and the time left at that rate
BAR_FORMAT = "{desc}: {percentage:3.0f}%|{bar}| {n_fmt}/{total_fmt} [{elapsed}<{remaining}, {rate_fmt}{postfix}]"


class ProgressBar:
    """A tqdm bar on stderr when ``show`` (count of ``total``, items per second, time left), else nothing;
    ``update(n, **postfix)``; a context manager. Every long command draws its progress through this class."""

    def __init__(self, show: bool, *, total: int, desc: str = "", unit: str = "q", initial: int = 0, **options):
        self.bar = None
        if show:
            from tqdm import tqdm

            options.setdefault("bar_format", BAR_FORMAT)
            options.setdefault("dynamic_ncols", True)
            self.bar = tqdm(total=total, initial=initial, desc=desc, unit=unit, file=sys.stderr, **options)

    def update(self, n: int = 1, **postfix) -> None:
        if self.bar is not None:
            self.bar.update(n)
            if postfix:
                self.bar.set_postfix(**postfix)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()

    def __enter__(self) -> "ProgressBar":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

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
