"""Reading the project's files safely, plain or compressed, and writing results atomically.

* **Compressed JSONL.** Label files and the embedded benchmark subsets are committed compressed
  (``.jsonl.xz``, a fifth to a tenth of their size) so that the repository stays small enough to
  travel to a GPU machine with model weights beside it. Every reader opens files through
  :func:`open_text` / :func:`open_binary`, so a plain ``.jsonl`` and a ``.jsonl.xz`` (or ``.jsonl.gz``)
  of the same rows are interchangeable. Files that are appended to while a run goes on (labels being
  written, caches) stay plain: appending to a compressed stream is possible but cannot be repaired
  after a crash the way a plain file's half-written last line can.
* **Atomic writes.** Every file GRADE writes for later use (results, probes, feature parts) goes
  through :func:`atomic_path`: the data is written to a temporary file in the target's folder,
  flushed to disk, and renamed over the target. A rename within one file system is atomic, so a
  reader, or a process killed mid-write, sees either the previous file whole or the new one whole,
  never a mix. Label files are append-only logs instead (:func:`append_line`): a kill leaves at
  most a cut last line, which :func:`grade.batch.labeling.read_records` repairs on resume.
* **Text from users** is decoded strictly as UTF-8: bad bytes give one clear line naming the file,
  the line and the byte, not a traceback and not silently replaced characters.
* **JSONL** is read one line at a time (:func:`iter_jsonl`), so that one bad row can be skipped and
  reported while the rest of the batch goes on. A line is read with a byte bound
  (:data:`MAX_LINE_BYTES`): a longer one (a file without newlines, a pasted book) is skipped as a bad
  row without ever being held in memory, parsed or tokenised.
* **Compressed files** decode within the caps of :mod:`grade.common.bounded` (a gzip or xz bomb is refused in
  one line after at most the capped bytes, counted as they are read, never held).
* **Paths that are not files** (a folder, a FIFO, a device) are named for what they are
  (:func:`describe_path`), never read: a FIFO blocks and ``/dev/zero`` never ends.
* **Outputs** are checked before any work: :func:`probe_writable` writes and removes a byte in the
  output folder (a read-only or full file system fails there, not after the model has loaded), and
  :func:`hold_output_lock` keeps a second process off an output one run is appending to. Files written
  atomically get the permissions the umask gives a new file (not the temporary file's 0600).
"""

from __future__ import annotations

import contextlib
import errno
import io
import json
import lzma
import os
import stat
import tempfile
from pathlib import Path
from typing import IO, Any, Iterator

from .bounded import open_decompressed
from .errors import InputError


def cache_dir() -> Path:
    """Where the studio keeps what it computes once (converted models, downloaded datasets):
    ``$GRADE_CACHE_DIR``, default ``~/.cache/grade-studio``."""
    return Path(os.environ.get("GRADE_CACHE_DIR") or Path.home() / ".cache" / "grade-studio")

#: The longest JSONL line read (bytes, newline excluded): far above any label record, trace or lm-eval
#: sample row of this project (the largest shipped ones are a few tens of KB); a longer line is skipped
#: as a bad row, unread.
MAX_LINE_BYTES = 4 * 1024 * 1024

#: Suffixes a JSONL file may carry, in the order a folder is searched for ``<stem><suffix>``.
JSONL_SUFFIXES: tuple[str, ...] = (".jsonl", ".jsonl.xz", ".jsonl.gz")


def is_compressed(path: str | os.PathLike) -> bool:
    return str(path).endswith((".xz", ".gz"))


def open_text(path: str | os.PathLike, mode: str = "r") -> IO[str]:
    """A text handle on ``path`` (UTF-8), decompressing ``.xz`` / ``.gz`` files transparently.

    Only reading is offered for compressed files: see the module docstring for why appends stay plain.
    """
    path = Path(path)
    if is_compressed(path):
        if mode != "r":
            raise ValueError(f"{path}: compressed files are read-only here; write a plain .jsonl instead")
        return io.TextIOWrapper(open_decompressed(path), encoding="utf-8")
    return path.open(mode, encoding="utf-8")


def jsonl_stem(path: str | os.PathLike) -> str:
    """``triviaqa`` for ``triviaqa.jsonl``, ``triviaqa.jsonl.xz`` and ``triviaqa.jsonl.gz``."""
    name = Path(path).name
    for suffix in JSONL_SUFFIXES:
        if name.endswith(suffix):
            return name[: -len(suffix)]
    return Path(path).stem


def find_jsonl(folder: str | os.PathLike, stem: str) -> Path | None:
    """The first of ``<folder>/<stem>.jsonl``, ``.jsonl.xz``, ``.jsonl.gz`` that exists, else None."""
    for suffix in JSONL_SUFFIXES:
        candidate = Path(folder) / f"{stem}{suffix}"
        if candidate.is_file():
            return candidate
    return None


# --------------------------------------------------------------------------------------------------
# writing


def _fsync_folder(folder: Path) -> None:
    """Make a rename durable (POSIX); folders cannot be opened on Windows, where rename is durable enough."""
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def current_umask() -> int:
    """The process's umask, read without changing it where the system tells (Linux ``/proc``); else
    set and restored at once."""
    try:
        with open("/proc/self/status", encoding="ascii") as handle:
            for line in handle:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def _temporary_next_to(path: Path) -> Path:
    fd, name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        # mkstemp creates 0600; the result must get what any new file gets (0644 under umask 022)
        os.fchmod(fd, 0o666 & ~current_umask())
    except OSError:
        pass
    finally:
        os.close(fd)
    return Path(name)


def _fsync_file(path: Path) -> None:
    with open(path, "rb+") as handle:  # the writer may have closed its own handle without syncing
        os.fsync(handle.fileno())


@contextlib.contextmanager
def atomic_paths(*paths: str | os.PathLike) -> Iterator[list[Path]]:
    """Yield one temporary path next to each of ``paths``; when the block ends without an exception,
    the files written there replace ``paths`` (each flushed to disk first, then renamed). On an
    exception the temporary files are removed and ``paths`` are left as they were.

    A rename within one file system is atomic, so a reader, or a process killed mid-write, sees each
    file either whole as it was or whole as it is now. Files that belong together (a probe's weights
    and metadata) are all written before the first rename, so the window in which a kill could
    leave a new file next to an old one is a few ``rename`` calls, not a whole write. The temporary
    names start with a dot and end with ``.tmp``: globs such as ``*.safetensors`` or
    ``part-*.parquet`` never pick up what a killed process left behind.
    """
    targets = [Path(p) for p in paths]
    temps: list[Path] = []
    try:
        for target in targets:
            temps.append(_temporary_next_to(target))
        yield list(temps)
        mode = 0o666 & ~current_umask()
        for tmp in temps:
            os.chmod(tmp, mode)  # a writer may have replaced the temporary file with one of its own (0600)
            _fsync_file(tmp)
        for tmp, target in zip(temps, targets):
            os.replace(tmp, target)
    except BaseException:
        for tmp in temps:
            tmp.unlink(missing_ok=True)
        raise
    for folder in {t.parent for t in targets}:
        _fsync_folder(folder)


@contextlib.contextmanager
def atomic_path(path: str | os.PathLike) -> Iterator[Path]:
    """:func:`atomic_paths` for one file: write to the yielded path, it replaces ``path`` at the end."""
    with atomic_paths(path) as (tmp,):
        yield tmp


def atomic_write(path: str | os.PathLike, data: str | bytes) -> Path:
    """Write ``data`` (text is encoded as UTF-8) to ``path`` atomically; see :func:`atomic_path`."""
    path = Path(path)
    payload = data.encode("utf-8") if isinstance(data, str) else data
    with atomic_path(path) as tmp:
        tmp.write_bytes(payload)
    return path


def append_line(handle: IO[str], line: str) -> None:
    """Append one whole line (without its newline) to an open text file and flush it to disk."""
    handle.write(line + "\n")
    handle.flush()
    os.fsync(handle.fileno())


def append_lines(path: str | os.PathLike, lines: list[str]) -> None:
    """Append whole lines (each without its newline) in one write, then flush them to disk.

    A process killed during the write leaves every earlier line intact and at most a cut last line.
    """
    if not lines:
        return
    text = "".join(line + "\n" for line in lines)
    with open(path, "a", encoding="utf-8") as handle:
        handle.write(text)
        handle.flush()
        os.fsync(handle.fileno())


def disk_error(exc: OSError, what: str) -> InputError | None:
    """One line for an OSError the user can fix (full disk, quota, read-only or forbidden output),
    else None (a bug, to be reported as one)."""
    reasons = {errno.ENOSPC: "the disk is full", errno.EDQUOT: "the disk quota is exhausted",
               errno.EROFS: "the file system is read-only", errno.EACCES: "permission denied",
               errno.EPERM: "permission denied", errno.EFBIG: "the file is too large for this file system"}
    reason = reasons.get(exc.errno)
    if reason is None:
        return None
    where = exc.filename if exc.filename else what
    return InputError(f"cannot write {where}: {reason}")


def probe_writable(folder: str | os.PathLike, what: str = "output folder") -> Path:
    """Write one byte into ``folder`` and remove it: a read-only, forbidden or full file system is
    refused now, in one line, rather than after the model has loaded (``os.access`` says yes to root
    and knows nothing of a full disk)."""
    folder = Path(folder).expanduser()
    try:
        fd, name = tempfile.mkstemp(prefix=".grade-write-check.", suffix=".tmp", dir=folder)
    except OSError as exc:
        raise disk_error(exc, f"{what} {folder}") or InputError(
            f"cannot write into {what} {folder}: {exc.strerror or exc}") from None
    try:
        os.write(fd, b"\0")
        os.fsync(fd)
    except OSError as exc:
        raise disk_error(exc, f"{what} {folder}") or InputError(
            f"cannot write into {what} {folder}: {exc.strerror or exc}") from None
    finally:
        os.close(fd)
        with contextlib.suppress(OSError):
            os.unlink(name)
    return folder


def check_output_file(path: str | os.PathLike, what: str = "output file") -> Path:
    """Refuse, before any work is done, an output file that could not be written afterwards."""
    path = Path(path).expanduser()
    if path.is_dir():
        raise InputError(f"{what} {path} is a folder")
    if path.exists() and not path.is_file():
        raise InputError(f"{what} {path} is {describe_path(path)}, not a file")
    parent = path.parent
    if not parent.is_dir():
        raise InputError(f"cannot write {what} {path}: the folder {parent} does not exist")
    if not os.access(parent, os.W_OK | os.X_OK) and not os.access(parent, os.W_OK | os.X_OK, effective_ids=True):
        raise disk_error(OSError(errno.EROFS if _read_only(parent) else errno.EACCES, "", str(parent)), what) \
            or InputError(f"cannot write {what} {path}: the folder {parent} is not writable")
    probe_writable(parent, f"the folder of {what} {path}")
    return path


def _read_only(folder: Path) -> bool:
    try:
        return bool(os.statvfs(folder).f_flag & os.ST_RDONLY)
    except (OSError, AttributeError):
        return False


_HELD_LOCKS: dict[str, int] = {}


def hold_output_lock(path: str | os.PathLike, what: str = "output") -> Path:
    """Take the advisory lock ``<path>.lock`` for this process (``fcntl.flock``, released by the system
    when the process ends, however it ends), so that two runs never append to one output. A second
    process is refused with one line; the same process asking again is a no-op. Returns the lock file.
    Where ``fcntl`` does not exist (Windows) nothing is locked."""
    path = Path(path).expanduser()
    lock = path.with_name(path.name + ".lock")
    key = os.path.abspath(lock)
    if key in _HELD_LOCKS:
        return lock
    try:
        import fcntl
    except ImportError:  # pragma: no cover - Windows
        return lock
    for _ in range(5):  # a lock file removed by its releasing holder between our open and flock: open it again
        try:
            fd = os.open(lock, os.O_RDWR | os.O_CREAT, 0o666)
        except OSError as exc:
            raise disk_error(exc, str(lock)) or InputError(f"cannot create the lock file {lock}: {exc.strerror or exc}") from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(fd)
            raise InputError(f"another run is writing {what} {path} (it holds {lock.name}); wait for it to end, "
                             "or write to another file") from None
        if _same_file(fd, lock):
            break
        os.close(fd)
    else:  # pragma: no cover - five releases in a row between an open and a flock
        raise InputError(f"another run is writing {what} {path}; wait for it to end, or write to another file")
    os.set_inheritable(fd, False)
    _HELD_LOCKS[key] = fd
    return lock


def _same_file(fd: int, path: Path) -> bool:
    """Whether the open ``fd`` is still the file at ``path`` (a releasing holder unlinks its lock file)."""
    try:
        here, there = os.fstat(fd), os.stat(path)
    except OSError:
        return False
    return (here.st_dev, here.st_ino) == (there.st_dev, there.st_ino)


def release_output_lock(path: str | os.PathLike) -> None:
    """Release a lock taken by :func:`hold_output_lock` and remove its file (the process's end releases it too,
    leaving the file, which the next run reuses)."""
    path = Path(path).expanduser()
    lock = path.with_name(path.name + ".lock")
    fd = _HELD_LOCKS.pop(os.path.abspath(lock), None)
    if fd is not None:
        if _same_file(fd, lock):  # removed while still held: a run that opened it meanwhile sees it gone and retries
            with contextlib.suppress(OSError):
                os.unlink(lock)
        os.close(fd)  # closing the only descriptor drops the flock


def ensure_output_folder(path: str | os.PathLike, what: str = "output folder") -> Path:
    """Create an output folder (and its parents) now, or refuse with one line; then write a byte
    into it (:func:`probe_writable`), so that a read-only or full file system is refused now."""
    path = Path(path).expanduser()
    if path.exists() and not path.is_dir():
        raise InputError(f"{what} {path} exists and is {describe_path(path)}, not a folder")
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise disk_error(exc, f"{what} {path}") or InputError(f"cannot create {what} {path}: {exc.strerror or exc}") from None
    probe_writable(path, what)  # says why: read-only, permission, full
    return path


# --------------------------------------------------------------------------------------------------
# reading


def _bad_bytes(exc: UnicodeDecodeError) -> str:
    return f"byte 0x{exc.object[exc.start]:02x} at position {exc.start}"


def decode_text(data: bytes, where: str) -> str:
    """``data`` as UTF-8 text (a byte-order mark is dropped); bad bytes raise :class:`InputError`."""
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise InputError(f"{where} is not valid UTF-8 text ({_bad_bytes(exc)}); save it as UTF-8") from None


def check_text(text: str, what: str) -> str:
    """Refuse text that came from undecodable bytes (command-line arguments, file names).

    Python turns bytes that are not valid in the locale's encoding into lone surrogates
    (``surrogateescape``); such text cannot be tokenised or written out as UTF-8.
    """
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise InputError(f"{what} is not valid UTF-8 text (a bad byte at character {exc.start})") from None
    return text


def describe_path(path: str | os.PathLike) -> str:
    """What is at ``path``, in words: "a file", "a folder", "a FIFO (named pipe)", "a device", "a
    socket", or "nothing" (missing, or a link to nothing)."""
    try:
        mode = os.stat(path).st_mode
    except OSError:
        return "nothing"
    if stat.S_ISREG(mode):
        return "a file"
    if stat.S_ISDIR(mode):
        return "a folder"
    if stat.S_ISFIFO(mode):
        return "a FIFO (named pipe)"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    if stat.S_ISSOCK(mode):
        return "a socket"
    return "not a regular file"


def check_input_file(path: str | os.PathLike, what: str = "file") -> Path:
    """``path`` if it is a regular file (links followed); else one line saying what it is instead."""
    path = Path(path).expanduser()
    kind = describe_path(path)
    if kind == "nothing":
        raise InputError(f"{what} {path} does not exist")
    if kind != "a file":
        raise InputError(f"{what} {path} is {kind}, not a file")
    return path


def open_binary(path: str | os.PathLike) -> IO[bytes]:
    """Open a file for reading bytes, decompressing ``.gz`` / ``.xz``; a missing file, or a path that is
    a folder, FIFO or device, is an InputError saying so."""
    path = Path(path)
    check_input_file(path)
    try:
        if is_compressed(path):
            return open_decompressed(path)  # within the caps of grade.common.bounded
        return open(path, "rb")
    except OSError as exc:
        raise InputError(f"cannot read {path}: {exc.strerror or exc}") from None


def read_text(path: str | os.PathLike) -> str:
    """A whole (small) text file, strictly UTF-8."""
    with open_binary(path) as handle:
        try:
            data = handle.read()
        except (OSError, EOFError, lzma.LZMAError) as exc:
            raise InputError(f"cannot read {path}: {exc}") from None
    return decode_text(data, str(path))


def _is_unicode(value: Any) -> bool:
    """JSON may escape lone surrogates (``"\\ud800"``); Python then holds text no tokenizer or UTF-8
    file takes."""
    try:
        json.dumps(value, ensure_ascii=False).encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def bounded_lines(handle: IO[bytes], max_bytes: int = MAX_LINE_BYTES) -> Iterator[tuple[int, bytes | None]]:
    """``(line number, line)`` of a binary handle, each line read with at most ``max_bytes`` bytes
    (newline excluded) held at a time; a longer line is read past in 1 MB pieces and given as None."""
    number = 0
    while True:
        raw = handle.readline(max_bytes + 1)
        if not raw:
            return
        number += 1
        if len(raw) > max_bytes and not raw.endswith(b"\n"):
            while True:  # the rest of the over-long line, never held whole
                rest = handle.readline(1 << 20)
                if not rest or rest.endswith(b"\n"):
                    break
            yield number, None
            continue
        yield number, raw


def iter_jsonl(path: str | os.PathLike, *, max_line_bytes: int = MAX_LINE_BYTES) -> Iterator[tuple[int, Any, str | None]]:
    """``(line number, value, problem)`` for every non-blank line of a JSONL file.

    ``problem`` is None for a line that decodes and parses, else a short reason (bad bytes, not
    JSON, longer than ``max_line_bytes``: such a line is never held whole, parsed or tokenised) and
    ``value`` is None: the caller decides whether one bad line stops it or is skipped.
    """
    with open_binary(path) as handle:
        try:
            for number, raw in bounded_lines(handle, max_line_bytes):
                if raw is None:
                    yield number, None, f"longer than {max_line_bytes:,} bytes (not read)"
                    continue
                if not raw.strip():
                    continue
                try:
                    line = raw.decode("utf-8-sig" if number == 1 else "utf-8")
                except UnicodeDecodeError as exc:
                    yield number, None, f"not valid UTF-8 ({_bad_bytes(exc)})"
                    continue
                try:
                    value = json.loads(line)
                except json.JSONDecodeError as exc:
                    yield number, None, f"not valid JSON ({exc.msg})"
                    continue
                except RecursionError:
                    yield number, None, "not valid JSON (nested too deeply)"
                    continue
                if "\\u" in line and not _is_unicode(value):
                    yield number, None, "holds an unpaired surrogate escape (\\ud800-\\udfff), not Unicode text"
                    continue
                yield number, value, None
        except (OSError, EOFError, lzma.LZMAError) as exc:  # a corrupt compressed file
            raise InputError(f"cannot read {path}: {exc}") from None
