"""Waiting for a queued analysis, the same on every page that analyses (Home, Reasoning trace, Spectra, Probes).

Every analysis of the studio is a job in its model's queue (:mod:`studio.queue`). A page hands its work to
:func:`submit` and shows :func:`wait`: the session's place in the queue and an estimate, updated every second,
the engine's progress lines and a Cancel button, until the result comes. The ticket is kept in the session:
a rerun, or a return from another page, finds the same analysis and waits again (the other pages say in one
line where it waits, :func:`elsewhere`; Spectra, which shows Home's analysis, waits for Home's). One analysis per
user holds over all pages: the queue refuses a second while one waits or runs, in one line.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

import streamlit as st

from . import session
from .queue import Ticket
from .session_end import note_queued

PENDING = "analysis_ticket"  # session key: this session's Pending while its analysis waits or runs
CANCELLED_NOTICE = "analysis_cancelled"  # session key: the page to tell that its analysis was cancelled

PAGE_NAMES = {"home": "Home", "trace": "Reasoning trace", "extract": "Probes (Extract)"}


@dataclass
class Pending:
    """A queued analysis of this session: its ticket, the page that asked and what that page needs to keep
    the result (the request it analyses)."""

    ticket: Ticket
    page: str
    request: Any = None


def pending(page: str | None = None) -> Pending | None:
    """This session's queued analysis (of ``page`` only, when given)."""
    held = st.session_state.get(PENDING)
    return held if held is not None and (page is None or held.page == page) else None


def submit(page: str, job_key, compute: Callable[[Callable[[str], None]], Any], *, request: Any = None,
           on_result: Callable[[Any], None] | None = None, memory_mb: float = 0.0, kind: str | None = None) -> Pending:
    """Queue ``compute(progress)`` for the loaded model under this user and keep its ticket in the session.

    ``job_key``: equal keys are one computation (identical requests are computed once; each page starts its
    keys with its own name, Home's excepted, which its precomputed examples share). ``kind``: what work it is
    (Home's analyses: None), for the estimate from the durations of the same kind. Raises
    :class:`studio.queue.QueueRefused` (one line) when the queue is full or this user already waits."""
    ticket = session.analysis_queue().submit(st.session_state["model_spec"].label, session.user_key(), job_key,
                                             compute, on_result=on_result, memory_mb=memory_mb, kind=kind)
    held = Pending(ticket, page, request)
    st.session_state[PENDING] = held
    note_queued(session.session_ends(), ticket)
    return held


def _cancel() -> None:
    held = st.session_state.pop(PENDING, None)
    if held is not None:
        session.analysis_queue().cancel(held.ticket)
        st.session_state[CANCELLED_NOTICE] = held.page


def cancelled_notice(page: str) -> None:
    """Say once, on the page that asked, that its analysis was cancelled."""
    if st.session_state.get(CANCELLED_NOTICE) == page:
        del st.session_state[CANCELLED_NOTICE]
        st.info("Analysis cancelled: it left the queue, or stopped at its next step if it was running.")


def _about(seconds: float) -> str:
    """An estimate as shown while waiting: whole seconds under 10 s, else in steps of 5 s (an estimate is not
    better than that, and a line that changes only every few seconds is not sent to every waiting page every
    second)."""
    return f"{seconds:.0f}" if seconds < 10 else f"{5 * round(seconds / 5):.0f}"


def status_line(ticket: Ticket) -> str:
    """One line: the position and the estimate while waiting, the time left while running."""
    status = session.analysis_queue().status(ticket)
    rough = "" if status.measured else " (a first guess: nothing measured yet)"
    if status.state == "waiting":
        ahead = status.position - 1
        return (f"**Waiting in the queue: position {status.position}** of {status.waiting} · {ahead} "
                f"analys{'is' if ahead == 1 else 'es'} ahead of yours · result in about {_about(status.estimate_s)} s{rough}")
    # an estimate that ran out is not "0 s left" for as long as the job still runs
    left = f"about {status.estimate_s:.0f} s left{rough}" if status.estimate_s >= 1 else "finishing…"
    return (f"**Analyzing** (your turn) · {left} · "
            f"{status.elapsed_s:.0f} s since you asked")


def wait(held: Pending, here: str) -> tuple[str, Any]:
    """Show ``held``'s place in the queue, updated every second, with Cancel, until its job ends; then forget
    the ticket and return ``("done", result)``, ``("failed", exception)`` or ``("cancelled", None)``. ``here``:
    the page drawing it (a note says so when it waits for another page's analysis)."""
    ticket, queue = held.ticket, session.analysis_queue()
    holder = st.empty()
    with holder.container(key="queue_status", border=True):
        if held.page != here:
            st.caption(f"Your analysis from {PAGE_NAMES.get(held.page, held.page)}:")
        line = st.empty()
        lines = st.empty()
        if not ticket.done:
            st.button("Cancel", key="cancel_analysis", icon=":material/cancel:", on_click=_cancel,
                      help="Leave the queue, or stop the analysis at its next step if it already runs")
        shown = (None, None)
        while not ticket.wait(1.0):  # once a second: a click (Cancel) interrupts the run at the next update
            now = (status_line(ticket), "  \n".join(session.user_text(p) for p in queue.status(ticket).progress[-3:]))
            if now != shown:  # only what changed goes to the browser: a class waits on one server
                line.markdown(now[0])
                lines.caption(now[1])
                shown = now
    holder.empty()
    if st.session_state.get(PENDING) is held:
        del st.session_state[PENDING]
    if ticket.state == "cancelled":
        return "cancelled", None
    try:
        return "done", ticket.result()
    except Exception as exc:  # the page shows it; the session stays usable
        return "failed", exc


def elsewhere(here: str) -> bool:
    """On a page other than the one whose analysis waits: say where it is, in one line that does not wait (the
    page it came from follows it and keeps its result). True when there was one."""
    held = pending()
    if held is None or held.page == here:
        return False
    st.info(f"Your analysis from **{PAGE_NAMES.get(held.page, held.page)}** is in the queue: "
            + status_line(held.ticket).replace("**", "") + ". That page shows it when it is done.",
            icon=":material/hourglass_top:")
    return True


def home_kind(lm, request: dict) -> tuple:
    """What kind of work one of Home's analyses is, for the queue's estimate (:meth:`studio.queue.AnalysisQueue.status`
    averages the measured durations per kind): its route (the model, what generates the answer: llama.cpp or
    torch) and its answer size (the task and the answer length). A short answer and a 256-token word problem
    differ tenfold; one average for both was wrong for both."""
    from pathlib import Path

    from grade.models.generation import backend_for, settings_for_task

    from .wait_seconds import home_kind as kind

    task, tokens = request.get("task", "qa"), int(request.get("max_new_tokens") or 0)
    backend = backend_for(lm, settings_for_task(task, tokens or None))
    return kind(Path(str(lm.name)).name.lower(), getattr(backend, "name", type(backend).__name__), task, tokens)


def keep_home_analysis(analysis, request: dict) -> None:
    """Home's result, kept in the session where Home and Spectra read it."""
    st.session_state[session.ANALYSIS] = analysis
    st.session_state["analysis_request"] = request
    st.session_state.pop("analysis_error", None)
