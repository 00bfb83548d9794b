"""A bounded, thread-safe cache of Home's analyses, shared by every session of one app process (no Streamlit).

Asking the same thing twice (same model, question, document, settings, probe and detectors) returns the
first result instead of a second forward/backward pass and generation. The cache holds at most
``max_entries`` analyses and about ``max_bytes`` of their arrays (spectra, hidden states, token scores);
the least recently used go first. An operator sets both with ``GRADE_ANALYSIS_CACHE_ENTRIES`` and
``GRADE_ANALYSIS_CACHE_MB`` (0 entries: no caching).
"""

from __future__ import annotations

import dataclasses
import threading
import time
from collections import OrderedDict
from typing import Any, Hashable

import numpy as np

from .served import env_number

ENTRIES_VARIABLE = "GRADE_ANALYSIS_CACHE_ENTRIES"
MEGABYTES_VARIABLE = "GRADE_ANALYSIS_CACHE_MB"
DEFAULT_ENTRIES = 64
DEFAULT_MEGABYTES = 256


def bounds_from_environment() -> tuple[int, int]:
    """(max entries, max bytes) from the environment, else the defaults (64 analyses, 256 MB)."""
    entries = int(env_number(ENTRIES_VARIABLE, DEFAULT_ENTRIES))
    megabytes = env_number(MEGABYTES_VARIABLE, DEFAULT_MEGABYTES)
    return entries, int(megabytes * 1024 * 1024)


def approximate_bytes(value: Any, _seen: set[int] | None = None) -> int:
    """The bytes an analysis holds, counting its numpy arrays and strings (what makes it large)."""
    seen = _seen if _seen is not None else set()
    if id(value) in seen:
        return 0
    seen.add(id(value))
    if isinstance(value, np.ndarray):
        return int(value.nbytes)
    if isinstance(value, (str, bytes)):
        return len(value)
    if isinstance(value, dict):
        return sum(approximate_bytes(k, seen) + approximate_bytes(v, seen) for k, v in value.items())
    if isinstance(value, (list, tuple, set)):
        return 8 * len(value) + sum(approximate_bytes(v, seen) for v in value
                                    if not isinstance(v, (int, float, bool, type(None))))
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return sum(approximate_bytes(getattr(value, f.name), seen) for f in dataclasses.fields(value))
    if hasattr(value, "__dict__"):
        return approximate_bytes(vars(value), seen)
    return 16


@dataclasses.dataclass(frozen=True)
class CachedEntry:
    value: Any
    computed_at: float  # time.time() when it was computed
    nbytes: int


class AnalysisCache:
    """Least-recently-used mapping key -> value, bounded by entry count and by approximate size."""

    def __init__(self, max_entries: int = DEFAULT_ENTRIES, max_bytes: int = DEFAULT_MEGABYTES * 1024 * 1024):
        self.max_entries = max(0, int(max_entries))
        self.max_bytes = max(0, int(max_bytes))
        self._entries: OrderedDict[Hashable, CachedEntry] = OrderedDict()
        self._lock = threading.Lock()
        self.hits = 0
        self.misses = 0

    @classmethod
    def from_environment(cls) -> "AnalysisCache":
        return cls(*bounds_from_environment())

    def __len__(self) -> int:
        return len(self._entries)

    @property
    def nbytes(self) -> int:
        with self._lock:
            return sum(e.nbytes for e in self._entries.values())

    def get(self, key: Hashable) -> CachedEntry | None:
        with self._lock:
            entry = self._entries.get(key)
            if entry is None:
                self.misses += 1
                return None
            self._entries.move_to_end(key)
            self.hits += 1
            return entry

    def peek(self, key: Hashable) -> CachedEntry | None:
        """The entry of ``key`` without counting a hit or a miss or refreshing its age (a check, not a use)."""
        with self._lock:
            return self._entries.get(key)

    def put(self, key: Hashable, value: Any, computed_at: float | None = None) -> CachedEntry | None:
        """Store ``value`` (replacing any entry of ``key``); None when it alone exceeds the bounds."""
        nbytes = approximate_bytes(value)
        entry = CachedEntry(value, time.time() if computed_at is None else computed_at, nbytes)
        with self._lock:
            self._entries.pop(key, None)
            if self.max_entries == 0 or nbytes > self.max_bytes:
                return None
            self._entries[key] = entry
            total = sum(e.nbytes for e in self._entries.values())
            while len(self._entries) > self.max_entries or total > self.max_bytes:
                _, dropped = self._entries.popitem(last=False)
                total -= dropped.nbytes
            return entry

    def discard(self, key: Hashable) -> None:
        with self._lock:
            self._entries.pop(key, None)

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()
