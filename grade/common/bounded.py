"""Reading compressed and container files within stated caps: one place for the numbers and the readers.

A few megabytes of zip, gzip, xz or Parquet can stand for gigabytes once decoded (an Inspect AI ``.eval`` log of
972 KB held 1 GB of zeros and took 2.2 GB of memory to be read; 50 million Parquet rows fit in 168 KB). Every
reader of such a file in the package goes through this module, which bounds what one file may decode to:

* **from the metadata first**: the zip central directory (member count, each member's declared size, their sum),
  a gzip file's trailer (its size modulo 4 GiB) and a Parquet file's footer (rows, each row group's decoded bytes)
  are checked before anything is decompressed;
* **counted while streaming**: the metadata may lie, so the bytes actually decompressed are counted as they come
  (1 MiB at a time, never held whole) and the read stops as soon as they pass a cap;
* **the caps**: :class:`Caps` (decoded size of one file, ratio of decoded to stored size, archive members, Parquet
  rows); the operator changes each with ``GRADE_MAX_<NAME>`` (:func:`caps`). A file past a cap is refused with one
  line (:class:`TooLarge`, an :class:`~grade.common.errors.InputError`: exit 2 on the command line).

Nested archives are never opened: a zip inside a zip is one member's bytes, counted like any other.
"""

from __future__ import annotations

import gzip
import io
import lzma
import os
import struct
import zipfile
import zlib
from dataclasses import dataclass, fields, replace
from pathlib import Path
from typing import IO, Iterable

from .errors import InputError

MB = 1 << 20
#: Bytes read from a decompressing stream at a time while counting.
CHUNK = MB


@dataclass(frozen=True)
class Caps:
    """What one compressed or container file may decode to (``GRADE_MAX_<NAME>`` changes each)."""

    decompressed_mb: int = 512  # all of one file's decoded bytes (every member of an archive together)
    # A decoded size past ``ratio_floor_mb`` may be at most this many times the stored size: text and JSON
    # compress 5-20x, a run of one byte 1000x (zip) to 7000x (xz), so a bomb stops within ratio x its own size.
    ratio: int = 100
    ratio_floor_mb: int = 32
    archive_members: int = 10_000  # entries in one zip's central directory
    parquet_rows: int = 50_000_000  # rows of one Parquet file, from its footer


DEFAULT_CAPS = Caps()


def caps() -> Caps:
    """:data:`DEFAULT_CAPS` with the operator's ``GRADE_MAX_<NAME>`` (a whole number of at least 1) applied."""
    changes = {}
    for f in fields(Caps):
        name = f"GRADE_MAX_{f.name.upper()}"
        raw = os.environ.get(name, "").strip()
        if not raw:
            continue
        try:
            value = int(raw)
        except ValueError:
            raise InputError(f"{name}={raw!r} is not a whole number") from None
        if value < 1:
            raise InputError(f"{name}={raw!r} must be at least 1")
        changes[f.name] = value
    return replace(DEFAULT_CAPS, **changes)


class TooLarge(InputError):
    """A file that decodes to more than the caps allow: one line naming the file, what it holds and the cap."""


def _limit_bytes(stored: int, limits: Caps) -> int:
    """The most decoded bytes a file of ``stored`` bytes may give: the size cap, and past the ratio floor the ratio."""
    by_ratio = max(limits.ratio_floor_mb * MB, limits.ratio * max(stored, 1))
    return min(limits.decompressed_mb * MB, by_ratio)


def _refuse(where: str, decoded: int, stored: int, limits: Caps, *, declared: bool = False) -> TooLarge:
    said, how = ("declares", "refused unread past") if declared else ("decompresses to more than", "refused past")
    if limits.decompressed_mb * MB <= max(limits.ratio_floor_mb * MB, limits.ratio * max(stored, 1)):
        cap = f"{limits.decompressed_mb:,} MB decoded (GRADE_MAX_DECOMPRESSED_MB)"
    else:
        cap = f"{limits.ratio}x its {stored / MB:,.1f} MB on disk (GRADE_MAX_RATIO)"
    return TooLarge(f"{where} {said} {decoded / MB:,.0f} MB; {how} {cap}")


def check_declared(where: str, decoded: int, stored: int, limits: Caps | None = None) -> None:
    """Refuse a file whose metadata declares more decoded bytes than its caps allow."""
    limits = limits or caps()
    if decoded > _limit_bytes(stored, limits):
        raise _refuse(where, decoded, stored, limits, declared=True)


class BoundedStream(io.RawIOBase):
    """A read-only byte stream over a decompressing one that counts what it gives and raises :class:`TooLarge`
    once the count passes ``limit`` (never more than ``limit`` + one read's bytes come out of it)."""

    def __init__(self, inner: IO[bytes], limit: int, where: str, stored: int, limits: Caps):
        super().__init__()
        self._inner, self.limit, self.where, self.stored, self._caps = inner, limit, where, stored, limits
        self.count = 0

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:
        view = memoryview(buffer).cast("B")
        want = min(len(view), self.limit + 1 - self.count, CHUNK)
        if want <= 0:
            raise _refuse(self.where, self.count, self.stored, self._caps)
        try:
            data = self._inner.read(want)
        except (OSError, EOFError, lzma.LZMAError, zlib.error, zipfile.BadZipFile) as exc:
            raise InputError(f"cannot read {self.where}: {exc}") from None
        n = len(data)
        view[:n] = data
        self.count += n
        if self.count > self.limit:
            raise _refuse(self.where, self.count, self.stored, self._caps)
        return n

    def close(self) -> None:
        try:
            self._inner.close()
        finally:
            super().close()


def _gzip_declared(path: Path) -> int | None:
    """The decoded size a gzip file's trailer states (modulo 4 GiB: a hint, never trusted alone)."""
    try:
        with open(path, "rb") as handle:
            handle.seek(-4, os.SEEK_END)
            return struct.unpack("<I", handle.read(4))[0]
    except (OSError, struct.error):
        return None


def open_decompressed(path: str | os.PathLike, limits: Caps | None = None) -> IO[bytes]:
    """A buffered byte stream of a ``.gz`` or ``.xz`` file's decoded bytes, refused past the caps (the gzip
    trailer's size first, then the bytes counted as they are read)."""
    path = Path(path)
    limits = limits or caps()
    stored = path.stat().st_size
    if path.suffix == ".gz":
        declared = _gzip_declared(path)
        if declared is not None:
            check_declared(str(path), declared, stored, limits)
        inner = gzip.open(path, "rb")
    else:
        inner = lzma.open(path, "rb")
    return io.BufferedReader(BoundedStream(inner, _limit_bytes(stored, limits), str(path), stored, limits), CHUNK)


# ---------------------------------------------------------------------------------------------------- zip


def check_zip(path: str | os.PathLike, limits: Caps | None = None, *, what: str = "archive") -> list[zipfile.ZipInfo]:
    """Check a zip archive before anything else reads it: its central directory (member count, declared sizes
    and their sum against the caps), then every member decompressed once, counted 1 MiB at a time, so that a
    member whose data is larger than its entry says is refused too. Nothing decoded is kept. Returns the
    members."""
    path = Path(path)
    limits = limits or caps()
    stored = path.stat().st_size
    where = f"{what} {path}"
    try:
        archive = zipfile.ZipFile(path)
    except (zipfile.BadZipFile, OSError, ValueError) as exc:
        raise InputError(f"{where} is not a readable zip archive ({exc})") from None
    with archive:
        members = archive.infolist()
        if len(members) > limits.archive_members:
            raise TooLarge(f"{where} holds {len(members):,} members; refused unread past {limits.archive_members:,} "
                           "(GRADE_MAX_ARCHIVE_MEMBERS)")
        check_declared(where, sum(m.file_size for m in members), stored, limits)
        budget = _limit_bytes(stored, limits)
        total = 0
        for member in members:
            if member.is_dir():
                continue
            counted = 0
            # zipfile gives a deflated member's output in bounded pieces; other methods (xz, bzip2, inspect_ai's
            # zstd) decode whatever compressed bytes one read takes in, so they are fed 4 KiB (zipfile's least)
            piece = CHUNK if member.compress_type in (zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED) else 4096
            try:
                with archive.open(member) as stream:
                    while chunk := stream.read(piece):
                        counted += len(chunk)
                        total += len(chunk)
                        if total > budget:
                            raise _refuse(where, total, stored, limits)
            except TooLarge:
                raise
            except (zipfile.BadZipFile, zlib.error, lzma.LZMAError, EOFError, OSError, NotImplementedError,
                    RuntimeError) as exc:
                # a CRC that does not match is what a member longer than its entry declares gives here
                raise InputError(f"{where}: member {member.filename[:80]!r} is not readable ({exc})") from None
            if counted != member.file_size:
                raise InputError(f"{where}: member {member.filename[:80]!r} decodes to {counted:,} bytes, "
                                 f"its entry says {member.file_size:,}")
        return members


# ------------------------------------------------------------------------------------------------ Parquet


#: Bytes a value of each fixed-width Parquet physical type decodes to.
_WIDTHS = {"BOOLEAN": 1, "INT32": 4, "FLOAT": 4, "INT64": 8, "DOUBLE": 8, "INT96": 12}


def _parquet_decoded(meta) -> int:
    """The decoded bytes a Parquet footer declares: each row group's stated size, or, where more, its values
    counted at their type's width (a run-length- or dictionary-encoded column states its encoded size only)."""
    total = 0
    for i in range(meta.num_row_groups):
        group = meta.row_group(i)
        by_width = sum(group.column(j).num_values * _WIDTHS.get(group.column(j).physical_type, 0)
                       for j in range(group.num_columns))
        total += max(group.total_byte_size, by_width)
    return total


def check_parquet(source, where: str, limits: Caps | None = None, *, stored: int | None = None,
                  max_rows: int | None = None, max_decoded_mb: int | None = None):
    """A Parquet file's footer checked against the caps before a row is decoded: its rows and the decoded bytes
    its row groups declare. ``source``: a path, or a file-like object of ``stored`` bytes. ``max_rows`` /
    ``max_decoded_mb`` tighten the caps (the served studio's upload limits). Returns the ``pyarrow.parquet.ParquetFile``."""
    import pyarrow.parquet as pq

    limits = limits or caps()
    if stored is None:
        stored = Path(source).stat().st_size
    try:
        parquet = pq.ParquetFile(source)
        meta = parquet.metadata
        decoded = _parquet_decoded(meta)
    except Exception as exc:  # a corrupt or foreign file: pyarrow raises many types
        first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise InputError(f"could not read {where} as Parquet: {first}") from None
    rows_cap = min(limits.parquet_rows, max_rows or limits.parquet_rows)
    if meta.num_rows > rows_cap:
        raise TooLarge(f"{where} holds {meta.num_rows:,} rows; refused unread past {rows_cap:,} rows")
    if max_decoded_mb is not None and decoded > max_decoded_mb * MB:
        raise TooLarge(f"{where} decodes to {decoded / MB:,.0f} MB; refused unread past {max_decoded_mb:,} MB decoded")
    check_declared(where, decoded, stored, limits)
    return parquet


def read_parquet(source, where: str | None = None, *, columns: Iterable[str] | None = None,
                 limits: Caps | None = None, stored: int | None = None, max_rows: int | None = None,
                 max_decoded_mb: int | None = None):
    """A Parquet file as one ``pyarrow.Table``, read within the caps: the footer first (:func:`check_parquet`),
    then batch by batch, the decoded bytes and rows counted as they come (a footer that understates them does
    not get the file read past the caps)."""
    import pyarrow as pa

    where = where or str(source)
    limits = limits or caps()
    parquet = check_parquet(source, where, limits, stored=stored, max_rows=max_rows, max_decoded_mb=max_decoded_mb)
    stored = stored if stored is not None else Path(source).stat().st_size
    budget = _limit_bytes(stored, limits)
    if max_decoded_mb is not None:
        budget = min(budget, max_decoded_mb * MB)
    rows_cap = min(limits.parquet_rows, max_rows or limits.parquet_rows)
    columns = list(columns) if columns is not None else None
    batches, decoded, rows = [], 0, 0
    try:
        for batch in parquet.iter_batches(batch_size=65_536, columns=columns):
            decoded += batch.nbytes
            rows += batch.num_rows
            if rows > rows_cap:
                raise TooLarge(f"{where} holds more than {rows_cap:,} rows; refused past that")
            if decoded > budget:
                raise _refuse(where, decoded, stored, limits)
            batches.append(batch)
        schema = parquet.schema_arrow if columns is None else pa.schema([parquet.schema_arrow.field(c) for c in columns],
                                                                      metadata=parquet.schema_arrow.metadata)
        return pa.Table.from_batches(batches, schema=schema)
    except TooLarge:
        raise
    except (pa.ArrowException, OSError, ValueError, KeyError) as exc:
        reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise InputError(f"{where} is not a readable Parquet file ({reason})") from None
