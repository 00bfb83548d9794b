"""Models, probes and reference data shared by every session of the app.

Nothing here imports Streamlit: :class:`ModelRegistry` is a plain thread-safe cache that the app
turns into a process-wide singleton with ``st.cache_resource`` (see :mod:`studio.session`). Keeping
the loading logic outside ``st.cache_resource`` lets the caller stream progress lines ("Converting
...", "Loading ...") into its own page while the load runs, and lets a failed load be retried.
"""

from __future__ import annotations

import json
import os
import threading
from collections import OrderedDict
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Callable

import numpy as np

import grade
from grade.common.errors import GradeError, ModelLoadError, ProbeError
from grade.verdict.detectors import SHIPPED_DETECTORS_DIR
from grade.verdict.probe import SHIPPED_PROBES_DIR, SHIPPED_REFERENCE_FEATURES, ProbeInfo, probe_metadata_path  # noqa: F401
from grade.verdict.probe import list_probes as grade_list_probes, read_probe_info  # noqa: F401
from grade.verdict.verdict import default_probe, probe_probability  # noqa: F401

# The shipped probes, detectors and reference set (package data); the environment can point elsewhere
# (e.g. a freshly built set).
PROBES_DIR = Path(os.environ.get("GRADE_PROBES_DIR") or SHIPPED_PROBES_DIR)
DETECTORS_DIR = Path(os.environ.get("GRADE_DETECTORS_DIR") or SHIPPED_DETECTORS_DIR)
REFERENCE_FEATURES = Path(os.environ.get("GRADE_REFERENCE_FEATURES") or SHIPPED_REFERENCE_FEATURES)


def user_data_dir() -> Path:
    """Where the app writes files a user asked for (trained probes, uploaded probes):
    ``$GRADE_USER_DATA_DIR``, else the model cache folder (``$GRADE_CACHE_DIR``, ``~/.cache/grade-studio``)."""
    return Path(os.environ.get("GRADE_USER_DATA_DIR") or os.environ.get("GRADE_CACHE_DIR")
                or Path.home() / ".cache" / "grade-studio")


# ----------------------------------------------------------------------------------------- models


@dataclass(frozen=True)
class ModelSpec:
    """What the sidebar asks for: a model reference plus where and how to run it."""

    source: str = grade.DEFAULT_MODEL
    device: str = "cpu"
    dtype: str = "auto"

    @property
    def label(self) -> str:
        return f"{self.source} ({self.device}, {self.dtype})"


class ModelRegistry:
    """Loaded models keyed by :class:`ModelSpec`, shared by all sessions.

    At most ``capacity`` models stay in memory (least recently used goes first). Two sessions asking
    for the same model at once load it once: the second waits on a per-model lock. A failed load is
    not remembered, so the user can fix the cause and try again.
    """

    def __init__(self, capacity: int = 2, loader: Callable[..., grade.LoadedModel] = grade.load_model):
        self.capacity = capacity
        self._loader = loader
        self._models: "OrderedDict[ModelSpec, grade.LoadedModel]" = OrderedDict()
        self._loading: dict[ModelSpec, threading.Lock] = {}
        self._lock = threading.Lock()

    def get(self, spec: ModelSpec, progress: Callable[[str], None] | None = None) -> grade.LoadedModel:
        with self._lock:
            if spec in self._models:
                self._models.move_to_end(spec)
                return self._models[spec]
            key_lock = self._loading.setdefault(spec, threading.Lock())
        with key_lock:
            with self._lock:  # loaded by another session while we waited
                if spec in self._models:
                    return self._models[spec]
            try:
                lm = self._loader(spec.source, device=spec.device, dtype=None if spec.dtype == "auto" else spec.dtype,
                                  progress=progress)
            except GradeError:
                raise
            except Exception as exc:  # torch/transformers failures not already wrapped by the engine
                raise ModelLoadError(f"could not load {spec.source!r}: {type(exc).__name__}: {exc}") from exc
            with self._lock:
                self._models[spec] = lm
                while len(self._models) > self.capacity:
                    self._models.popitem(last=False)
                self._loading.pop(spec, None)
            return lm

    def loaded(self) -> list[ModelSpec]:
        with self._lock:
            return list(self._models)


_shared_registry: ModelRegistry | None = None
_shared_registry_lock = threading.Lock()


def shared_registry(capacity: int = 2) -> ModelRegistry:
    """The one model registry of this process, whatever the number of sessions.

    Created under a lock rather than only through ``st.cache_resource``: two sessions that call a cached
    resource for the first time at the same moment can each run its function (Streamlit's known
    concurrent-first-call race), and two registries would mean two copies of every model. Inside the one
    registry a per-model lock makes concurrent first uses of a model load it once."""
    global _shared_registry
    with _shared_registry_lock:
        if _shared_registry is None:
            _shared_registry = ModelRegistry(capacity=capacity)
        return _shared_registry


# ----------------------------------------------------------------------------------------- probes


def list_probes(folder: Path = PROBES_DIR) -> list[ProbeInfo]:
    """Probe files in ``folder`` (default: the app's probe folder), best test AUROC first
    (:func:`grade.verdict.probe.list_probes`)."""
    return grade_list_probes(folder)


def load_probe(path: str | Path):
    """Load a probe with :meth:`grade.verdict.probe.Probe.load`; every failure becomes one-line :class:`ProbeError`."""
    try:
        from grade.verdict.probe import Probe
    except ImportError as exc:
        raise ProbeError(f"probes are not available in this installation ({exc})") from None
    path = Path(path)
    if not path.exists():
        raise ProbeError(f"probe file {path} does not exist")
    try:
        return Probe.load(path)
    except GradeError:
        raise
    except Exception as exc:  # a corrupt file can fail inside safetensors/json in many ways
        raise ProbeError(f"could not read probe {path.name}: {type(exc).__name__}: {exc}") from None


def store_uploaded_probe(weights: bytes, metadata: bytes, name: str, folder: Path | None = None,
                         quota=None) -> Path:
    """Write an uploaded probe pair (content-addressed, atomically) under ``folder`` (default: the local
    user's ``uploaded-probes``) and return its weights path; see :func:`studio.served.store_upload`."""
    from .served import store_upload

    return store_upload(weights, metadata, name, folder or user_data_dir() / "uploaded-probes", quota=quota)


# -------------------------------------------------------------------------------------- detectors


def load_detectors(model_name: str, folder: Path = DETECTORS_DIR) -> tuple[list, str | None]:
    """(detectors, problem): the detectors shipped for ``model_name`` beside the probe, and a one-line
    reason where there are none or one is broken (the others are still returned)."""
    from grade.verdict.detectors import Detector, detectors_for, no_detectors_reason

    paths = detectors_for(model_name, folder)
    if not paths:
        return [], no_detectors_reason(model_name, folder)
    found, problems = [], []
    for path in paths:
        try:
            detector = Detector.load(path)
            detector.check_compatible(model_name)
        except GradeError as exc:
            problems.append(str(exc))
            continue
        found.append(detector)
    return found, ("; ".join(problems) or None)


def detectors_version(model_name: str, folder: Path = DETECTORS_DIR) -> int:
    """Changes whenever one of ``model_name``'s detector files does (for caches keyed on it)."""
    from grade.verdict.detectors import detectors_for

    files = [f for p in detectors_for(model_name, folder) for f in (p, p.with_suffix(".json")) if f.exists()]
    return sum(f.stat().st_mtime_ns + f.stat().st_size for f in files)


# ---------------------------------------------------------------------------------------- datasets


def load_questions(dataset: str, limit: int = 200) -> list[dict]:
    """The first ``limit`` rows of a benchmark subset (empty if it cannot be read)."""
    from grade.common.errors import InputError
    from grade.tasks.tasks import read_jsonl, resolve_dataset

    rows: list[dict] = []
    try:
        for _, row in read_jsonl(resolve_dataset(dataset)[1]):
            rows.append(row)
            if len(rows) >= limit:
                break
    except (OSError, InputError):
        return []
    return rows


def _examples(model_name: str, path: Path) -> list[dict]:
    """The rows of ``model_name`` in an examples file written by ``scripts/build/build_examples.py`` (model ->
    rows); empty for a model without any, or a file that cannot be read."""
    from grade.verdict.artifacts import model_key

    try:
        examples = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return []
    found = {model_key(name): rows for name, rows in examples.items()} if isinstance(examples, dict) else {}
    return [row for row in found.get(model_key(model_name), []) if isinstance(row, dict) and row.get("question")]


def model_examples(model_name: str, path: Path | None = None) -> list[dict]:
    """Home's examples for ``model_name``: questions it knows and gets wrong by its own labels, picked by
    ``scripts/build/build_examples.py`` (its rule is written there); empty for a model without any."""
    return _examples(model_name, path or Path(str(resources.files("studio") / "examples.json")))


def trace_examples(model_name: str, path: Path | None = None) -> list[dict]:
    """The Reasoning trace page's problems for ``model_name``: GSM8K problems it always solved and never
    solved when its answers were sampled (``scripts/build/build_examples.py``); empty for a model without any."""
    return _examples(model_name, path or Path(str(resources.files("studio") / "trace_examples.json")))


# ------------------------------------------------------------------------------ reference features


@dataclass
class ReferenceSet:
    """A labelled feature set for one model and loss: what the bands and projections are drawn from.

    ratios: (n, L); labels: (n,) 1 = answerable / correct; with_context: (n,) bool;
    hidden: (n, S, d) last-prompt-token hidden states of S stored layers, or None;
    hidden_layers: which of the model's L+1 hidden states (0 = embeddings) those S are; text: hover text.
    """

    ratios: np.ndarray
    labels: np.ndarray
    with_context: np.ndarray
    hidden: np.ndarray | None
    hidden_layers: list[int]
    text: list[str]
    datasets: list[str]
    model: str | None
    loss: str | None

    def __len__(self) -> int:
        return len(self.labels)


def reference_set(frame, model: str | None, loss: str | None = None) -> ReferenceSet | None:
    """The labelled rows of a feature table (see :mod:`grade.batch.features`) for ``model`` and ``loss``.

    Returns None when no row fits (e.g. the reference set was built for another model).
    """
    from grade.batch.features import feature_matrix, hidden_states

    if frame is None or len(frame) == 0:
        return None
    rows = frame
    if model is not None and "model" in rows.columns:
        rows = rows[rows["model"] == model]
    if loss is not None and "loss" in rows.columns:
        rows = rows[rows["loss"] == loss]
    if "label" in rows.columns:
        rows = rows[rows["label"].notna()]
    if len(rows) == 0 or "rank_ratio" not in rows.columns:
        return None
    try:
        ratios = feature_matrix(rows)
    except GradeError:  # mixed depths: not one model's features
        return None
    hidden, hidden_layers = None, []
    if "hidden" in rows.columns and not rows["hidden"].isna().any():
        if "hidden_layer" in rows.columns:  # a slim reference set: one layer's state per row
            layers = rows["hidden_layer"].unique()
            if len(layers) == 1:
                hidden = np.stack([np.asarray(h, dtype=np.float32) for h in rows["hidden"]])[:, None, :]
                hidden_layers = [int(layers[0])]
        else:  # a full feature store: every layer
            hidden = hidden_states(rows)
            hidden_layers = list(range(hidden.shape[1]))
    with_context = rows["has_context"].fillna(False).to_numpy().astype(bool) if "has_context" in rows.columns \
        else np.zeros(len(rows), dtype=bool)
    datasets = rows["dataset"].astype(str).tolist() if "dataset" in rows.columns else [""] * len(rows)
    questions = rows["question"].astype(str).tolist() if "question" in rows.columns else [""] * len(rows)
    labels = rows["label"].to_numpy().astype(int)
    text = [f"{d}: {q[:80]}<br>{'answerable' if y else 'unanswerable'}{' · with document' if c else ''}"
            for d, q, y, c in zip(datasets, questions, labels, with_context)]
    return ReferenceSet(ratios=ratios, labels=labels, with_context=with_context, hidden=hidden,
                        hidden_layers=hidden_layers, text=text,
                        datasets=datasets, model=model, loss=loss)
