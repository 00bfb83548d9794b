"""Uploaded files: checked as they arrive, and let go of at once when they are refused.

Streamlit keeps every file a browser uploads in the server's memory (its uploaded-file manager) until the browser
removes it from the widget or the session ends; a widget given a new key drops its files from the page, not from
that manager. An audit of the served studio saw 40 refused probe files of 7 MB each raise the server's memory by
about 270 MB per attempt, for minutes after the session had ended, and refused probes stay in the user's folder.
Here a refused upload is removed from the manager the moment it is refused (:func:`release`), and an uploaded
probe that does not load is removed from the user's folder again (:func:`keep_probe_upload`).

The pages call :func:`check_uploads` and :func:`keep_probe_upload`; only :func:`release` knows Streamlit.
"""

from __future__ import annotations

import ctypes
import logging
import shutil
import threading
from pathlib import Path
from typing import Any, Callable, Sequence

from grade.common.errors import GradeError

from . import served

log = logging.getLogger("grade.studio")


def release(files: Sequence[Any]) -> tuple[int, int]:
    """Remove ``files`` (Streamlit ``UploadedFile`` objects of this session) from the server's uploaded-file
    manager, so that their bytes go as soon as the page lets go of them; returns (files, bytes) released.
    Without a running server (a script run by ``AppTest``), nothing holds them but the page."""
    from streamlit.runtime import Runtime
    from streamlit.runtime.scriptrunner import get_script_run_ctx

    ctx = get_script_run_ctx()
    if ctx is None or not Runtime.exists():
        return 0, 0
    manager = Runtime.instance().uploaded_file_mgr
    count = size = 0
    for upload in files:
        file_id = getattr(upload, "file_id", None)
        if file_id is None:
            continue
        manager.remove_file(ctx.session_id, file_id)
        count, size = count + 1, size + int(getattr(upload, "size", 0) or 0)
        try:
            upload.close()  # the page's own view of the bytes
        except Exception:
            pass
    if count:
        log.info("released %d refused upload(s), %.1f MB", count, size / 1e6)
        return_freed_memory_soon()
    return count, size


def return_freed_memory() -> None:
    """Hand the heap's free pages back to the system (glibc's ``malloc_trim``). Why: after the first large buffers
    are freed, glibc serves buffers of that size from its heap instead of separate mappings, and keeps the heap's
    freed pages for reuse: a second refused upload of 280 MB stayed resident until the next one (measured by
    bench/upload_memory.py). Elsewhere than glibc, nothing to do."""
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):
        pass


def return_freed_memory_soon(delays: Sequence[float] = (2.0, 8.0)) -> None:
    """:func:`return_freed_memory` a few seconds from now, once the page's rerun has dropped the refused files."""
    for delay in delays:
        timer = threading.Timer(delay, return_freed_memory)
        timer.daemon = True
        timer.start()


def check_uploads(files: Sequence[Any] | None, limits: served.Limits, *, probe_pair: bool = False) -> None:
    """Refuse an upload past its caps (each file's size; with ``probe_pair`` the number of files a probe is:
    :mod:`studio.served`) and, when it is refused, release every file of it at once (:func:`release`) before the
    one-line refusal is raised."""
    if not files:
        return
    try:
        if probe_pair:
            served.check_probe_upload_count(len(files))
        for upload in files:
            served.check_upload(upload.name, upload.size, limits)
    except GradeError:
        release(files)
        raise


def check_feature_upload(upload, limits: served.Limits, columns: tuple[str, ...] = ()) -> None:
    """An uploaded Parquet feature file within its caps: its size, then its rows, decoded size and ``columns`` from
    its metadata (:func:`studio.served.check_parquet_upload`); refused, its bytes are released at once."""
    try:
        served.check_upload(upload.name, upload.size, limits)
        served.check_parquet_upload(upload.getvalue(), upload.name, limits, columns)
    except GradeError:
        release([upload])
        raise


def keep_probe_upload(weights, metadata, folder: Path, *, quota=None, check: Callable[[bytes, str], None] | None = None,
                      load: Callable[[Path], Any]) -> Path:
    """Store an uploaded probe pair (``weights`` and ``metadata``: uploaded files) in the user's ``folder`` and
    ``load`` it from there; returns the weights path. ``check`` (the metadata's bytes and name) runs before anything
    is written. A pair refused by ``check``, the quota or ``load`` leaves nothing behind: the files it wrote are
    removed and the uploaded bytes released (:func:`release`)."""
    written: list[Path] = []
    try:
        if check is not None:
            check(metadata.getvalue(), metadata.name)
        path = _stored_path(weights, metadata, folder)
        existed = path.exists()
        path = served.store_upload(weights.getvalue(), metadata.getvalue(), weights.name, folder, quota=quota)
        if not existed:
            written = [path, path.with_suffix(".json")]
        load(path)
        return path
    except GradeError:
        for file in written:
            file.unlink(missing_ok=True)
        if written and written[0].parent != folder and not any(written[0].parent.iterdir()):
            shutil.rmtree(written[0].parent, ignore_errors=True)
        release([weights, metadata])
        raise


def _stored_path(weights, metadata, folder: Path) -> Path:
    """Where :func:`studio.served.store_upload` keeps this pair (content-addressed)."""
    return served.upload_path(weights.getvalue(), metadata.getvalue(), weights.name, folder)
