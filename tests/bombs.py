"""Real decompression bombs, made at test time, and a child process that measures what reading one costs.

Each bomb decodes to about 1 GiB of zeros from about 1 MB on disk (gzip and xz as many concatenated members,
which both formats allow, so that making one takes no gigabyte of compression work; zip as one deflated member).
"""

from __future__ import annotations

import gzip
import json
import lzma
import os
import subprocess
import sys
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MIB = 1 << 20
#: The zip method number of zstandard, which inspect_ai writes its .eval logs with.
ZSTD_METHOD = 93


def gzip_bomb(path: Path, mib: int = 1024) -> Path:
    """``mib`` MiB of zeros as ``mib`` gzip members of 1 MiB each: the trailer states only the last one's size."""
    member = gzip.compress(b"\0" * MIB, compresslevel=9)
    with open(path, "wb") as handle:
        for _ in range(mib):
            handle.write(member)
    return path


def xz_bomb(path: Path, mib: int = 1024) -> Path:
    member = lzma.compress(b"\0" * MIB)
    with open(path, "wb") as handle:
        for _ in range(mib):
            handle.write(member)
    return path


def zip_bomb(path: Path, mib: int = 1024, member: str = "zeros.json", extra: dict[str, bytes] | None = None,
             base: Path | None = None, compression: int = zipfile.ZIP_DEFLATED) -> Path:
    """A zip with one member of ``mib`` MiB of zeros (deflated: about 1 MB per GiB), the members of the zip
    ``base`` before it and ``extra`` members (name -> bytes). ``compression``: ZSTD_METHOD is what inspect_ai
    writes (its import teaches zipfile to read and write it)."""
    zeros = b"\0" * MIB
    with zipfile.ZipFile(path, "w", compression=compression) as out:
        if base is not None:
            with zipfile.ZipFile(base) as source:
                for info in source.infolist():
                    out.writestr(info, source.read(info))
        for name, data in (extra or {}).items():
            out.writestr(name, data)
        with out.open(member, "w", force_zip64=mib >= 2048) as handle:
            for _ in range(mib):
                handle.write(zeros)
    return path


def lying_zip(path: Path, source: Path) -> Path:
    """``source`` (from :func:`zip_bomb`: its zero run is the last member) with that member's size set to 1 KiB
    in both its headers: its metadata declares 1 KiB while its data decodes to all of it."""
    with zipfile.ZipFile(source) as archive:
        info = archive.infolist()[-1]
    data = bytearray(source.read_bytes())
    # Where the zip format puts the two fields (not a search for their bytes: the other members' compressed data
    # held the same four bytes once in a few hundred runs): the local header's uncompressed size at offset 22, and
    # the central directory's at offset 24 of the last entry, the last "PK\1\2" of the file (only the end record
    # follows it).
    central = data.rfind(b"PK\x01\x02")
    name_length = int.from_bytes(data[central + 28:central + 30], "little")
    assert data[central + 46:central + 46 + name_length].decode() == info.filename, "not the last member's entry"
    fields = (info.header_offset + 22, central + 24)
    assert all(data[f:f + 4] == info.file_size.to_bytes(4, "little") for f in fields), "the size fields moved"
    for field in fields:
        data[field:field + 4] = (1024).to_bytes(4, "little")
    path.write_bytes(bytes(data))
    return path


CHILD = r'''
import json, resource, sys
sys.path.insert(0, sys.argv[1])
from grade.common.errors import InputError
setup, call = sys.argv[2], sys.argv[3]
exec(setup)
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
try:
    exec(call)
    outcome, message = "read", None
except InputError as exc:
    outcome, message = "refused", str(exc)
after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
print(json.dumps({"outcome": outcome, "message": message, "peak_increase_mb": (after - before) / 1024}))
'''


def read_in_child(setup: str, call: str, timeout: float = 300) -> dict:
    """Run ``setup`` (imports) then ``call`` in a fresh Python; the peak RSS it reached during ``call`` above its
    peak after ``setup`` (``resource.getrusage``: kilobytes on Linux), and whether ``call`` was refused."""
    done = subprocess.run([sys.executable, "-c", CHILD, str(ROOT), setup, call], capture_output=True, text=True,
                          timeout=timeout, env={**os.environ, "PYTHONWARNINGS": "ignore"})
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])
