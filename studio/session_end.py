"""What a browser session leaves behind when it ends: its uploaded files and its queued analysis.

Streamlit keeps a closed tab's session for ``server.disconnectedSessionTTL`` seconds (default 120), so that a
browser that lost its connection for a moment resumes it, then drops it from its storage **without shutting it
down**: the files the session uploaded stay in the runtime's file manager for as long as the server runs (the
audit of issue 32: +200 MB after a browser with 40 probe files closed), and an analysis it queued still waits
for its turn, or runs, for nobody. :class:`SessionEnds` notes every session that runs the app and, once a
session has been gone for longer than it could be resumed, removes its uploaded files and cancels the analysis
it queued (:mod:`studio.waiting`), and says so in the server's log.

The bookkeeping (:class:`SessionEnds`) knows nothing of Streamlit; :func:`watch` binds it to the running
server, one sweeper thread per process.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Callable

log = logging.getLogger("grade.studio")

#: Seconds between sweeps (the operator may set ``GRADE_SESSION_SWEEP_S``).
SWEEP_S = 30.0


class SessionEnds:
    """Sessions seen running the app, and what each leaves when it ends.

    Parameters
    ----------
    grace_s : how long a session must have been disconnected before it counts as ended (Streamlit's
        reconnect window: after it the session cannot be resumed).
    is_active : session id -> whether a browser is connected to it now.
    release_files : session id -> release that session's uploaded files; returns (count, bytes) released.
    cancel : a queue ticket -> cancel it (:meth:`studio.queue.AnalysisQueue.cancel`).
    """

    def __init__(self, grace_s: float, is_active: Callable[[str], bool],
                 release_files: Callable[[str], tuple[int, int]], cancel: Callable[[object], bool]):
        self.grace_s = float(grace_s)
        self._is_active, self._release_files, self._cancel = is_active, release_files, cancel
        self._lock = threading.Lock()
        self._gone_since: dict[str, float | None] = {}  # session id -> when it was first seen disconnected
        self._tickets: dict[str, object] = {}  # session id -> its queued analysis's ticket

    def seen(self, session_id: str) -> None:
        """A session ran the app (it is connected now)."""
        with self._lock:
            self._gone_since[session_id] = None

    def queued(self, session_id: str, ticket) -> None:
        """``session_id`` queued the analysis of ``ticket`` (the last one counts: one analysis per user)."""
        with self._lock:
            self._gone_since.setdefault(session_id, None)
            self._tickets[session_id] = ticket

    def sweep(self, now: float | None = None) -> list[dict]:
        """Release what every ended session left; returns one record per session ended in this sweep."""
        now = time.monotonic() if now is None else now
        ended = []
        with self._lock:
            for sid, since in list(self._gone_since.items()):
                if self._is_active(sid):
                    self._gone_since[sid] = None
                elif since is None:
                    self._gone_since[sid] = now
                elif now - since >= self.grace_s:
                    ended.append((sid, self._tickets.pop(sid, None)))
                    del self._gone_since[sid]
        records = []
        for sid, ticket in ended:  # outside the lock: the file manager and the queue take their own
            files, size = self._release_files(sid)
            cancelled = bool(ticket is not None and not ticket.done and self._cancel(ticket))
            records.append({"session": sid, "files": files, "bytes": size, "cancelled_analysis": cancelled})
            if files or cancelled:
                log.info("browser session %s… ended: released %d uploaded file(s), %.1f MB%s", sid[:8], files,
                         size / 1e6, "; cancelled its queued analysis" if cancelled else "")
        return records


def served_by_streamlit() -> bool:
    """Whether a Streamlit server runs this script (not ``AppTest``, whose runtime is a stand-in of the class)."""
    from streamlit.runtime import Runtime

    return Runtime.exists() and type(Runtime.instance()) is Runtime


def _runtime_hooks():
    """(is_active, release_files) of the running Streamlit server."""
    from streamlit.runtime import Runtime

    runtime = Runtime.instance()
    manager = runtime.uploaded_file_mgr

    def release_files(session_id: str) -> tuple[int, int]:
        # the memory file manager's files of one session; counted first so that the log says what was freed
        files = getattr(manager, "file_storage", {}).get(session_id, {})
        count, size = len(files), sum(len(getattr(f, "data", b"")) for f in files.values())
        manager.remove_session_files(session_id)
        if count:
            from .uploads import return_freed_memory_soon

            return_freed_memory_soon()  # freed heap pages go back to the system, not only to the allocator
        return count, size

    return runtime.is_active_session, release_files


def _current_session_id() -> str | None:
    from streamlit.runtime.scriptrunner import get_script_run_ctx

    ctx = get_script_run_ctx()
    return None if ctx is None else ctx.session_id


def watch(sweep_s: float, grace_s: float, cancel: Callable[[object], bool]) -> SessionEnds | None:
    """The process's :class:`SessionEnds`, its sweeper thread started on the first call; notes this session.
    None without a Streamlit server (a script run by ``AppTest``: no browser sessions to end)."""
    import streamlit as st

    if not served_by_streamlit():
        return None

    @st.cache_resource(show_spinner=False)
    def _shared(sweep_s: float, grace_s: float) -> SessionEnds:
        is_active, release_files = _runtime_hooks()
        ends = SessionEnds(grace_s, is_active, release_files, cancel)

        def loop():
            while True:
                time.sleep(sweep_s)
                try:
                    ends.sweep()
                except Exception:  # a sweep that fails is logged; the next one tries again
                    log.exception("releasing ended sessions failed")

        threading.Thread(target=loop, name="grade-session-ends", daemon=True).start()
        return ends

    ends = _shared(float(sweep_s), float(grace_s))
    sid = _current_session_id()
    if sid is not None:
        ends.seen(sid)
    return ends


def note_queued(ends: SessionEnds | None, ticket) -> None:
    """This session queued ``ticket``."""
    sid = _current_session_id()
    if ends is not None and sid is not None:
        ends.queued(sid, ticket)
