"""A fitted detector and its files: :class:`Detector` (an estimator with its metadata, saved as safetensors +
JSON through :mod:`grade.verdict.artifacts`, never pickle, checked on load like a probe) and where the shipped ones
lie (``grade/assets/detectors/<model>-<name>.{safetensors,json}``, built by ``scripts/build/build_detectors.py``)."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

import numpy as np

from ... import __version__
from ..artifacts import detector_paths, model_key, read_metadata, read_weights, save_artifact
from ...common.errors import ProbeError
from .model_statistics import STATISTICS
from .estimators import KindLogistic, SaplmaMLP
from .routing import closest_kind
from .specs import DETECTORS, THRESHOLD, DetectorSpec

DETECTOR_FORMAT = 1

#: Package data (importlib.resources, like the shipped probes): ``<model>-<name>.{safetensors,json}``.
SHIPPED_DETECTORS_DIR = Path(str(resources.files("grade") / "assets" / "detectors"))


@dataclass
class Detector:
    """One fitted detector for one model.

    ``metadata`` (written to JSON beside the tensors): ``name``, ``statistic``, ``model``, ``input_dim``,
    ``kinds`` (each training dataset: ``task``, ``with_document``, class balance of train / validation /
    test), ``metrics`` (``test``: all test questions; ``test_by_dataset``: per dataset, AUROC with a
    bootstrap interval, :func:`grade.common.metrics.heldout_metrics`), ``training_data`` (sources, protocol).
    """

    spec: DetectorSpec
    estimator: KindLogistic | SaplmaMLP
    metadata: dict[str, Any] = field(default_factory=dict)

    @property
    def name(self) -> str:
        return self.spec.name

    @property
    def model(self) -> str | None:
        return self.metadata.get("model")

    @property
    def kinds(self) -> dict[str, dict]:
        return self.metadata.get("kinds") or {}

    def predict_proba(self, X, kinds=None) -> np.ndarray:
        """(n, 2) [P(unanswerable), P(answerable)] for X (n, d) statistics; ``kinds`` (n,): each row's kind
        of question (a training dataset, see :meth:`kind_of`), needed by per-kind estimators."""
        X = np.asarray(X, dtype=np.float64)
        if X.ndim == 1:
            X = X[None, :]
        if not np.isfinite(X).all():
            raise ProbeError(f"the {self.spec.statistic} values hold NaN or inf")
        if isinstance(self.estimator, KindLogistic):
            if kinds is None:
                raise ProbeError(f"detector {self.name} needs each row's kind of question")
            return self.estimator.predict_proba(X, kinds)
        return self.estimator.predict_proba(X)

    def kind_of(self, task: str, has_context: bool, dataset: str | None = None) -> tuple[str | None, str]:
        """(training dataset, why) for a question: its own dataset where the detector was trained on it,
        else :func:`closest_kind` (None: no training dataset is like it)."""
        if dataset is not None and dataset in self.kinds:
            return dataset, "its own dataset"
        return closest_kind(self.kinds, task, has_context)

    def test_metrics(self, kind: str | None = None) -> dict[str, Any]:
        """Held-out test metrics on ``kind``'s test questions (None: all of them); empty if unknown."""
        metrics = self.metadata.get("metrics") or {}
        found = metrics.get("test") if kind is None else (metrics.get("test_by_dataset") or {}).get(kind)
        return found if isinstance(found, dict) else {}

    def check_compatible(self, model_name: str | None) -> None:
        """Raise ProbeError unless this detector was trained on ``model_name``'s statistics."""
        trained = self.model
        if model_name is not None and trained and model_key(model_name) != model_key(trained):
            raise ProbeError(f"detector {self.name} was trained on {trained}, not {model_name}")

    # ---- saving and loading ---------------------------------------------------------------------

    def save(self, path: str | Path) -> tuple[Path, Path]:
        """Write ``path.safetensors`` and ``path.json`` (atomically, a given extension dropped first)."""
        def metadata(weights_name: str, digest: str) -> dict:
            return {**self.metadata, "format": "grade-detector", "format_version": DETECTOR_FORMAT,
                    "name": self.name, "title": self.spec.title, "statistic": self.spec.statistic,
                    "statistic_definition": STATISTICS[self.spec.statistic], "estimator": self.spec.estimator,
                    "threshold": THRESHOLD, "package_version": __version__, "weights_file": weights_name,
                    "weights_sha256": digest}

        weights, meta_path, self.metadata = save_artifact(path, "detector", self.estimator.tensors(),
                                                          {"format": "grade-detector"}, metadata)
        return weights, meta_path

    @classmethod
    def load(cls, path: str | Path) -> "Detector":
        """Load a detector saved by :meth:`save`; any problem raises ProbeError with one clear line."""
        weights, meta_path = detector_paths(path)
        meta = read_metadata(weights, meta_path, "detector", DETECTOR_FORMAT)
        spec = DETECTORS.get(meta.get("name"))
        if spec is None or meta.get("statistic") != spec.statistic or meta.get("estimator") != spec.estimator:
            raise ProbeError(f"{meta_path} names no known detector (name {meta.get('name')!r}, statistic "
                             f"{meta.get('statistic')!r})")
        dim, kinds, model = meta.get("input_dim"), meta.get("kinds"), meta.get("model")
        if isinstance(dim, bool) or not isinstance(dim, int) or dim < 1:
            raise ProbeError(f"{meta_path}: 'input_dim' must be a whole number of at least 1, not {dim!r}")
        if not isinstance(kinds, dict) or not kinds or not all(isinstance(k, str) and isinstance(v, dict)
                                                              for k, v in kinds.items()):
            raise ProbeError(f"{meta_path}: 'kinds' must describe the datasets the detector was trained on")
        if not isinstance(model, str) or not model:
            raise ProbeError(f"{meta_path}: 'model' must name the model the detector was trained on")
        tensors = read_weights(weights, meta_path, meta, "detector", digest_required=True)
        try:
            if spec.estimator == "kind-logistic":
                if dim != 1:
                    raise ValueError("a per-kind logistic regression reads one value")
                estimator = KindLogistic.from_tensors(tensors, sorted(kinds))
            else:
                estimator = SaplmaMLP.from_tensors(tensors, dim)
        except (KeyError, RuntimeError, ValueError) as exc:
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            raise ProbeError(f"detector weights {weights} do not fit a {spec.estimator} detector ({first})") from None
        return cls(spec, estimator, meta)

    def __repr__(self) -> str:
        return f"Detector(name={self.name!r}, model={self.model!r}, kinds={sorted(self.kinds)})"


def detector_file(model: str, name: str, folder: str | Path = SHIPPED_DETECTORS_DIR) -> Path:
    """Where the shipped detector ``name`` for ``model`` lies: ``<folder>/<model>-<name>.safetensors``."""
    from .baselines import safe_name

    return Path(folder) / f"{safe_name(model_key(model))}-{name}.safetensors"


def detectors_for(model: str, folder: str | Path = SHIPPED_DETECTORS_DIR) -> list[Path]:
    """The detector files for ``model`` in ``folder``, in :data:`DETECTORS` order."""
    return [path for name in DETECTORS if (path := detector_file(model, name, folder)).is_file()]


def no_detectors_reason(model: str, folder: str | Path = SHIPPED_DETECTORS_DIR) -> str:
    """One line: why ``model`` has no detector beside the probe."""
    known = set()
    for path in Path(folder).glob("*.json") if Path(folder).is_dir() else []:
        try:
            known.add(str(json.loads(path.read_text(encoding="utf-8")).get("model")))
        except (OSError, ValueError, AttributeError):  # a broken file names no model
            continue
    known = sorted(known - {"None"})
    where = f" (there are detectors for {', '.join(known)})" if known else ""
    return f"no other detector was trained for {model}{where}."


def resolve_detector(name_or_path: str, model: str, folder: str | Path = SHIPPED_DETECTORS_DIR) -> Path:
    """A detector's weights path from a name the app shows (``p-entropy``: the one shipped for ``model``)
    or a path to a detector file."""
    candidate = Path(name_or_path)
    if candidate.suffix in (".safetensors", ".json") or detector_paths(candidate)[1].is_file():
        return detector_paths(candidate)[0]
    if name_or_path not in DETECTORS:
        raise ProbeError(f"unknown detector {name_or_path!r}: give one of {', '.join(DETECTORS)} or a detector file")
    path = detector_file(model, name_or_path, folder)
    if not path.is_file():
        shipped = [p.stem.removesuffix(f"-{name_or_path}") for p in Path(folder).glob(f"*-{name_or_path}.safetensors")]
        raise ProbeError(f"no {name_or_path} detector for {model}"
                         + (f"; there is one for {', '.join(sorted(shipped))}" if shipped else ""))
    return path
