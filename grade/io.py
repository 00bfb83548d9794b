"""Reading the project's JSONL files, plain or compressed.

Label files and the embedded benchmark subsets are committed compressed (``.jsonl.xz``, a fifth to a
tenth of their size) so that the repository stays small enough to travel to a GPU machine with model
weights beside it. Every reader opens files through :func:`open_text`, so a plain ``.jsonl`` and a
``.jsonl.xz`` (or ``.jsonl.gz``) of the same rows are interchangeable. Files that are appended to while
a run goes on (labels being written, caches) stay plain: appending to a compressed stream is possible
but cannot be repaired after a crash the way a plain file's half-written last line can.
"""

from __future__ import annotations

import gzip
import lzma
import os
from pathlib import Path
from typing import IO

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
        opener = lzma.open if path.suffix == ".xz" else gzip.open
        return opener(path, "rt", encoding="utf-8")
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
