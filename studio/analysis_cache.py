"""A bounded, thread-safe cache of Home's analyses, shared by every session of one app process (no Streamlit).

Asking the same thing twice (same model, question, document, settings, probe and detectors) returns the
first result instead of a second forward/backward pass and generation. The cache holds at most
``max_entries`` analyses and about ``max_bytes`` of their arrays (spectra, hidden states, token scores);
the least recently used go first. An operator sets both with ``GRADE_ANALYSIS_CACHE_ENTRIES`` and
``GRADE_ANALYSIS_CACHE_MB`` (0 entries: no caching).

Shipped results: Home's and the Reasoning trace page's examples come precomputed for the embedded models
(``scripts/build/build_example_results.py``), one file pair per request, named by a hash of everything the result
depends on (:func:`home_request`, :func:`trace_request`: files by SHA-256) and used only for that exact request.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
import os
import threading
import time
from collections import OrderedDict
from importlib import resources
from pathlib import Path
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


# ------------------------------------------------------------------------------- shipped results

#: ``0`` turns the shipped results off (the test suite does, so that its timings measure computations).
SHIPPED_VARIABLE = "GRADE_SHIPPED_RESULTS"


def shipped_folder() -> Path:
    """Where the precomputed results ship: ``studio/assets/examples/<model>/`` (package data)."""
    return Path(str(resources.files("studio") / "assets" / "examples"))


def shipped_enabled() -> bool:
    return os.environ.get(SHIPPED_VARIABLE, "1").strip().lower() not in ("0", "false", "no", "off")


@functools.lru_cache(maxsize=256)
def _digest(path: str, mtime_ns: int, size: int) -> str:
    from grade.verdict.artifacts import sha256_file

    return sha256_file(Path(path))


def file_digest(path: str | Path) -> str | None:
    """SHA-256 of a file (computed once per version of it), None when it does not exist."""
    try:
        stat = Path(path).stat()
    except OSError:
        return None
    return _digest(str(path), stat.st_mtime_ns, stat.st_size)


@functools.lru_cache(maxsize=16)
def _package_versions(model: str) -> tuple[tuple[str, str | None], ...]:
    import importlib.metadata

    import grade

    embedded = grade.EMBEDDED_MODELS.get(model)
    versions = []
    for package in embedded.packages if embedded is not None else ():
        try:
            versions.append((package, importlib.metadata.version(package)))
        except importlib.metadata.PackageNotFoundError:
            versions.append((package, None))
    return tuple(versions)


def model_identity(lm) -> dict:
    """The model as a shipped result names it: its name, the versions of the packages its weights come
    from (embedded models), and the dtype and device type it computed in."""
    return {"model": lm.name, "packages": dict(_package_versions(lm.name)),
            "dtype": str(lm.dtype).replace("torch.", ""), "device": lm.device.type}


def home_request(lm, question: str, context: str | None, task: str, max_new_tokens: int, answer_tokens: int,
                 probe_path: str | Path | None, detector_paths: list[Path]) -> dict:
    """Everything Home's analysis depends on, files by content: the model, what generates its answer, the
    question and document as the analysis reads them (stripped), the task, the answer length and the app's
    cap on it, the probe's two files and every detector file (SHA-256). Equal requests give the same analysis."""
    from .resources import probe_metadata_path

    probe = None
    if probe_path is not None:
        probe = {"weights": file_digest(probe_path), "metadata": file_digest(probe_metadata_path(Path(probe_path)))}
    detectors = {Path(p).name: [file_digest(p), file_digest(Path(p).with_suffix(".json"))] for p in detector_paths}
    from grade.models.generation import backend_for, settings_for_task

    # The answer's generator (llama.cpp or torch: their greedy answers can part after some tokens).
    generator = type(backend_for(lm, settings_for_task(task, max_new_tokens))).__name__
    return {"kind": "home", **model_identity(lm), "generator": generator, "question": (question or "").strip(),
            "context": (context or "").strip() or None, "task": task, "max_new_tokens": int(max_new_tokens),
            "answer_tokens_cap": int(answer_tokens), "probe": probe, "detectors": detectors}


def trace_request(lm, question: str, response: str, task: str = "gsm8k") -> dict:
    """Everything a Reasoning trace analysis depends on: the model, the problem, the trace (stripped, as
    analysed) and the task. (The gold answer is not: whether the trace is right is checked when it is shown.)"""
    return {"kind": "trace", **model_identity(lm), "question": (question or "").strip(),
            "response": (response or "").strip(), "task": task}


def shipped_name(request: dict) -> str:
    """The file name (without extension) of the shipped result of ``request``: its kind and a hash of it."""
    canonical = json.dumps(request, sort_keys=True, ensure_ascii=False, separators=(",", ":"))
    return f"{request['kind']}-{hashlib.sha256(canonical.encode('utf-8')).hexdigest()[:20]}"


def shipped_path(request: dict, folder: Path | None = None) -> Path:
    from grade.verdict.artifacts import model_key

    return (folder or shipped_folder()) / model_key(request["model"]) / shipped_name(request)


def _shipped_file(request: dict, folder: Path | None):
    """The path (without suffix) of the file shipped for ``request``'s hash, if shipped results are on and it exists."""
    if not shipped_enabled():
        return None
    path = shipped_path(request, folder)
    return path if path.with_name(path.name + ".json").is_file() else None


def find_shipped(request: dict, folder: Path | None = None):
    """The shipped result computed for exactly ``request`` (a :class:`studio.workflows.QuestionAnalysis` or
    :class:`~studio.workflows.Trace`), else None. The file is found by the request's hash and used only
    when the request it records is equal, field by field; a file that cannot be read counts as absent."""
    from grade.common.errors import GradeError

    from .workflows import QuestionAnalysis, Trace

    path = _shipped_file(request, folder)
    if path is None:
        return None
    try:
        found = (QuestionAnalysis if request["kind"] == "home" else Trace).load(path)
    except (GradeError, KeyError, TypeError, ValueError):
        return None
    if (found.origin or {}).get("request") != json.loads(json.dumps(request)):
        return None
    return found


def embedding_request(model: str, X, method: str, seed: int = 0) -> dict:
    """What a Projections embedding depends on: the model whose reference rows it draws, the method, the
    seed and the embedded matrix itself (its shape and the SHA-256 of its float64 values)."""
    import numpy as np

    X = np.ascontiguousarray(X, dtype=np.float64)
    return {"kind": "projections", "model": model, "method": method, "seed": seed, "shape": list(X.shape),
            "input": hashlib.sha256(X.tobytes()).hexdigest()}


def save_embedding(request: dict, coords, origin: dict, folder: Path | None = None) -> Path:
    """Write an embedding's (n, 2) coordinates for ``request`` (:func:`embedding_request`); returns the path."""
    import numpy as np

    from .workflows import save_parts

    path = shipped_path(request, folder)
    save_parts(path, "embedding", {"coords": np.asarray(coords, dtype=np.float32)}, {"origin": origin})
    return path


def find_embedding(request: dict, folder: Path | None = None):
    """The shipped (n, 2) coordinates computed for exactly ``request``, else None."""
    from grade.common.errors import GradeError

    from .workflows import load_parts

    path = _shipped_file(request, folder)
    if path is None:
        return None
    try:
        arrays, fields = load_parts(path, "embedding")
    except GradeError:
        return None
    if (fields.get("origin") or {}).get("request") != json.loads(json.dumps(request)):
        return None
    return arrays["coords"].astype(float)


def shipped_trace(lm, question: str, response: str, *, title: str, gold: list[str] | None = None):
    """The Reasoning trace page's shipped analysis of exactly this trace (:class:`studio.workflows.Trace`,
    titled ``title`` and checked against ``gold`` now), else None."""
    from .workflows import check_numeric_answer

    found = find_shipped(trace_request(lm, question, response))
    if found is None:
        return None
    return dataclasses.replace(found, title=title,
                               correct=check_numeric_answer(found.response, gold) if gold else None)
