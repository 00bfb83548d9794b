"""Detectors beside GRADE's probe: other ways to tell whether a model can answer, for the same question.

Laid out as lm-polygraph lays out uncertainty methods: **statistics** (what a model pass gives: the
entropy after the prompt, P-Entropy of the greedy answer, a hidden state) are computed apart from the
**estimators** that turn one statistic into P(answerable), and the metrics are :mod:`grade.metrics`'s.

* :data:`DETECTORS`: each detector, the statistic it reads and its estimator (one table);
* statistics, in :mod:`grade.model_statistics` (re-exported here): :func:`table_statistic` (training data:
  the benchmark's tables), :func:`labelled_statistics` (labelled questions, for ``grade evaluate
  --detector``), :func:`question_statistics` (one question in the app);
* estimators, sklearn-like (``fit`` / ``predict_proba``): :class:`KindLogistic` (one scalar, a slope
  and an intercept per kind of question) and :class:`SaplmaMLP` (the benchmark's SAPLMA recipe);
* :class:`Detector`: a fitted estimator with its metadata, saved as safetensors + JSON (never pickle),
  checked on load like a probe (:mod:`grade.probe`); :func:`fit_detector` trains one on the benchmark's
  train / validation split and measures it on each dataset's held-out test questions;
* :func:`closest_kind` (which training dataset a question is most like: its calibration and test AUROC
  apply) and :func:`disagreement` (the sentence the app shows when verdicts differ).

The shipped detectors (``grade/assets/detectors/<model>-<name>.{safetensors,json}``) are built by
``scripts/build_detectors.py`` from the benchmark's caches.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np
import torch
from torch import nn

from . import __version__
from .artifacts import detector_paths, model_key, read_metadata, read_weights, save_artifact
from .errors import ProbeError
from .model_statistics import (ANSWER_STATISTICS, STATISTICS, answer_for_task, labelled_statistics,  # noqa: F401
                               question_statistics, record_statistic, table_statistic)
from .metrics import heldout_metrics

DETECTOR_FORMAT = 1
THRESHOLD = 0.5  # P(answerable) at which a detector's verdict turns to "answerable"

#: Package data (importlib.resources, like the shipped probes): ``<model>-<name>.{safetensors,json}``.
SHIPPED_DETECTORS_DIR = Path(str(resources.files("grade") / "assets" / "detectors"))


# --------------------------------------------------------------------------------------------------
# what each detector is


@dataclass(frozen=True)
class DetectorSpec:
    name: str  # file and command-line name
    title: str  # what the app calls it
    statistic: str  # a key of STATISTICS
    estimator: str  # "kind-logistic" or "saplma-mlp"
    summary: str  # one line for a reader of the app


DETECTORS: dict[str, DetectorSpec] = {spec.name: spec for spec in (
    DetectorSpec("prompt-entropy", "Entropy after the prompt", "loss_value", "kind-logistic",
                 "how unsure the model is about the first token of its answer (the GRADE_pre loss), "
                 "read through a logistic regression"),
    DetectorSpec("p-entropy", "P-Entropy of the answer", "p_entropy", "kind-logistic",
                 "how unsure the model was over all tokens of its greedy answer, read through a logistic regression"),
    DetectorSpec("saplma", "Hidden-state probe (SAPLMA)", "saplma_hidden", "saplma-mlp",
                 "an MLP on the hidden state 12 layers from the top at the answer's last token"),
)}


def spec_of(name: str) -> DetectorSpec:
    if name not in DETECTORS:
        raise ProbeError(f"unknown detector {name!r}; the detectors are {', '.join(DETECTORS)}")
    return DETECTORS[name]


# --------------------------------------------------------------------------------------------------
# estimators


class KindLogistic:
    """Logistic regression on one scalar statistic with a slope and an intercept per kind of question.

    A summed entropy grows with the answer's length and the classes' shares differ between datasets, so
    one cut for all kinds would call every long answer unknown; per kind, the statistic is read on its
    own scale. Inputs to :class:`grade.probe.Probe`'s standardised logistic regression (C picked on the
    validation AUROC): ``[x * 1{kind = k} for k] + [1{kind = k} for k]``.

    ``fit(x, kinds, y, x_val, kinds_val, y_val)``: x (n,) or (n, 1), kinds (n,) names, y (n,) 0/1.
    ``predict_proba(x, kinds)``: (n, 2) [P(unanswerable), P(answerable)].
    """

    def __init__(self, kinds: Sequence[str] = (), seed: int = 42):
        self.kinds = list(kinds)
        self.seed = seed
        self.probe = None

    def _design(self, x, kinds) -> np.ndarray:
        x = np.asarray(x, dtype=np.float64).reshape(-1)
        kinds = np.asarray(kinds, dtype=object).reshape(-1)
        if len(kinds) != len(x):
            raise ProbeError(f"{len(x)} values but {len(kinds)} kinds of question")
        unknown = sorted(set(kinds) - set(self.kinds))
        if unknown:
            raise ProbeError(f"kind(s) of question {', '.join(map(str, unknown))} not among this detector's "
                             f"({', '.join(self.kinds)})")
        onehot = (kinds[:, None] == np.array(self.kinds, dtype=object)[None, :]).astype(np.float64)
        return np.concatenate([x[:, None] * onehot, onehot], axis=1)

    def fit(self, x, kinds, y, x_val, kinds_val, y_val) -> "KindLogistic":
        from .probe import Probe

        self.kinds = sorted(set(np.asarray(kinds, dtype=object).tolist()) | set(self.kinds))
        self.probe = Probe("logreg", seed=self.seed).fit(self._design(x, kinds), y, self._design(x_val, kinds_val), y_val)
        return self

    def predict_proba(self, x, kinds) -> np.ndarray:
        if self.probe is None:
            raise ProbeError("this detector is not fitted yet")
        return self.probe.predict_proba(self._design(x, kinds))

    @property
    def training(self) -> dict[str, Any]:
        return {**self.probe.metadata.get("training", {}), "inputs": "x * one-hot(kind), one-hot(kind); standardised"}

    def tensors(self) -> dict[str, torch.Tensor]:
        return self.probe.tensors()

    @classmethod
    def from_tensors(cls, tensors: dict[str, torch.Tensor], kinds: list[str], seed: int = 42) -> "KindLogistic":
        from .probe import Probe

        width = 2 * len(kinds)
        probe = Probe("logreg", seed=seed)
        probe.coef_ = tensors["coef"].double().numpy()
        probe.intercept_ = float(tensors["intercept"][0])
        probe.mean_ = tensors["scaler_mean"].double().numpy()
        probe.scale_ = tensors["scaler_scale"].double().numpy()
        if not (probe.coef_.shape == probe.mean_.shape == probe.scale_.shape == (width,)) or not (probe.scale_ > 0).all():
            raise ValueError(f"coefficients do not fit {len(kinds)} kinds of question")
        probe.n_features_in_ = width
        model = cls(kinds, seed)
        model.probe = probe
        return model


class SaplmaNet(nn.Module):
    """d -> 256 -> 128 -> 64 -> 1 logit, ReLU (Azaria & Mitchell 2023)."""

    def __init__(self, n_inputs: int):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(n_inputs, 256), nn.ReLU(), nn.Linear(256, 128), nn.ReLU(),
                                 nn.Linear(128, 64), nn.ReLU(), nn.Linear(64, 1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x: (batch, d) -> logits (batch,)."""
        return self.net(x).squeeze(-1)


class SaplmaMLP:
    """SAPLMA: :class:`SaplmaNet`, sigmoid and BCE; Adam lr 1e-3, 5 epochs, batch 32, no early stopping.
    Inputs are standardised with the training mean and standard deviation (hidden-state scales differ by
    orders of magnitude between models; the original works on raw states of larger models). The
    benchmark's SAPLMA (:class:`grade.studies.SAPLMA`) is this estimator.

    ``fit(X, y)``: X (n, d), y (n,) 0/1. ``predict_proba(X)``: (n, 2).
    """

    def __init__(self, seed: int = 42, epochs: int = 5, batch_size: int = 32, lr: float = 1e-3):
        self.seed, self.epochs, self.batch_size, self.lr = seed, epochs, batch_size, lr
        self.net: SaplmaNet | None = None
        self.mean: np.ndarray | None = None  # (d,)
        self.std: np.ndarray | None = None  # (d,)
        self.half = False  # weights rounded to (and stored in) float16

    def fit(self, X, y) -> "SaplmaMLP":
        x = np.asarray(X, dtype=np.float64)
        self.mean, self.std = x.mean(0), x.std(0) + 1e-6
        torch.manual_seed(self.seed)
        rng = np.random.default_rng(self.seed)
        self.net = SaplmaNet(x.shape[1])
        opt = torch.optim.Adam(self.net.parameters(), lr=self.lr)
        xt = torch.tensor((x - self.mean) / self.std, dtype=torch.float32)
        yt = torch.tensor(np.asarray(y), dtype=torch.float32)
        loss_fn = nn.BCEWithLogitsLoss()
        with torch.enable_grad():
            self.net.train()
            for _ in range(self.epochs):
                order = rng.permutation(len(xt))
                for start in range(0, len(order), self.batch_size):
                    batch = order[start:start + self.batch_size]
                    opt.zero_grad()
                    loss = loss_fn(self.net(xt[batch]), yt[batch])
                    loss.backward()
                    opt.step()
        self.net.eval()
        return self

    def half_precision(self) -> "SaplmaMLP":
        """Round the network's weights to float16 (computing stays float32). A shipped detector is stored
        so: its first layer is most of the file (1536 x 256 weights for Qwen), the hidden states it reads
        are float16 already, and rounding before the test metrics are measured makes the saved detector
        exactly the measured one."""
        with torch.no_grad():
            for param in self.net.parameters():
                param.copy_(param.half().float())
        self.half = True
        return self

    def predict_proba(self, X, kinds=None) -> np.ndarray:
        if self.net is None:
            raise ProbeError("this detector is not fitted yet")
        X = np.asarray(X, dtype=np.float64)
        if X.ndim != 2 or X.shape[1] != len(self.mean):
            raise ProbeError(f"this detector reads vectors of {len(self.mean)} values, not shape {X.shape}")
        x = torch.tensor((X - self.mean) / self.std, dtype=torch.float32)
        with torch.no_grad():
            p = torch.sigmoid(self.net(x)).double().numpy()
        return np.stack([1 - p, p], axis=1)

    @property
    def training(self) -> dict[str, Any]:
        return {"epochs": self.epochs, "batch_size": self.batch_size, "lr": self.lr, "optimizer": "Adam",
                "selection": "none (fixed recipe)", "inputs": "standardised with the training mean and std"}

    def tensors(self) -> dict[str, torch.Tensor]:
        dtype = torch.float16 if self.half else torch.float32
        return {**{f"net.{k}": v.detach().to(dtype if v.is_floating_point() else v.dtype).contiguous()
                   for k, v in self.net.state_dict().items()},
                "scaler_mean": torch.tensor(self.mean, dtype=torch.float64),
                "scaler_std": torch.tensor(self.std, dtype=torch.float64)}

    @classmethod
    def from_tensors(cls, tensors: dict[str, torch.Tensor], n_inputs: int, seed: int = 42) -> "SaplmaMLP":
        model = cls(seed)
        model.mean = tensors["scaler_mean"].double().numpy()
        model.std = tensors["scaler_std"].double().numpy()
        if model.mean.shape != (n_inputs,) or model.std.shape != (n_inputs,) or not (model.std > 0).all():
            raise ValueError(f"the scaler does not fit {n_inputs} inputs")
        net = SaplmaNet(n_inputs)
        # float16 weights (a shipped detector) are read into the float32 network exactly
        net.load_state_dict({k.removeprefix("net."): v.float() if v.is_floating_point() else v
                             for k, v in tensors.items() if k.startswith("net.")}, strict=True)
        net.eval()
        model.net = net
        model.half = any(v.dtype == torch.float16 for k, v in tensors.items() if k.startswith("net."))
        return model


# --------------------------------------------------------------------------------------------------
# the detector: a fitted estimator and what is known about it


@dataclass
class Detector:
    """One fitted detector for one model.

    ``metadata`` (written to JSON beside the tensors): ``name``, ``statistic``, ``model``, ``input_dim``,
    ``kinds`` (each training dataset: ``task``, ``with_document``, class balance of train / validation /
    test), ``metrics`` (``test``: all test questions; ``test_by_dataset``: per dataset, AUROC with a
    bootstrap interval, :func:`grade.metrics.heldout_metrics`), ``training_data`` (sources, protocol).
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


# --------------------------------------------------------------------------------------------------
# shipped detectors


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


# --------------------------------------------------------------------------------------------------
# which training dataset a question is like


#: Tasks whose questions are most alike, for a question whose own task no training dataset has.
RELATED_TASKS: dict[str, tuple[str, ...]] = {
    "qa": ("mmlu",), "mmlu": ("qa",), "gsm8k": ("math", "cot"), "math": ("gsm8k", "cot"), "cot": ("gsm8k", "math"),
}


def closest_kind(kinds: dict[str, dict], task: str, has_context: bool) -> tuple[str | None, str]:
    """(training dataset, why) closest to a question of ``task``, with or without a document.

    In this order: the same task and document condition; the same task; a related task
    (:data:`RELATED_TASKS`) with the same document condition; a related task. Among several, the
    dataset with the most test questions (its AUROC is the most precise), then the name. None when no
    training dataset has the task or a related one: a calibration and an AUROC measured on other kinds
    of questions would say nothing about this one.
    """
    if not kinds:
        raise ProbeError("the detector names no training dataset")
    task = "qa" if task == "qa_doc" else task
    related = RELATED_TASKS.get(task, ())

    def tier(meta: dict) -> int:
        same_doc = bool(meta.get("with_document")) == bool(has_context)
        if meta.get("task") == task:
            return 0 if same_doc else 1
        if meta.get("task") in related:
            return 2 if same_doc else 3
        return 4

    def size(name: str) -> int:
        return int(((kinds[name].get("test") or {}).get("n")) or 0)

    best = min(kinds, key=lambda name: (tier(kinds[name]), -size(name), name))
    doc = "with a document" if has_context else "without a document"
    level = tier(kinds[best])
    if level == 4:
        return None, (f"it was trained on no {task} question nor one of a related task "
                      f"(only on {', '.join(sorted(kinds))})")
    reason = {0: f"the same task, {doc}",
              1: f"the same task; none of its training datasets is {doc}",
              2: f"the nearest task ({kinds[best].get('task')}), {doc}",
              3: f"the nearest task ({kinds[best].get('task')})"}[level]
    return best, reason


# --------------------------------------------------------------------------------------------------
# verdicts on one question


@dataclass
class DetectorVerdict:
    """One detector's answer on one question, with the test AUROC of the kind of question it was asked."""

    name: str
    title: str
    probability: float | None  # P(the model can answer); None: see ``problem``
    kind: str | None = None  # the training dataset whose calibration and test AUROC apply
    kind_reason: str = ""
    test: dict[str, Any] = field(default_factory=dict)  # heldout_metrics on that dataset's test questions
    problem: str | None = None
    summary: str = ""  # what the detector reads, in one line

    @property
    def answerable(self) -> bool | None:
        return None if self.probability is None else self.probability >= THRESHOLD

    @property
    def auroc(self) -> float | None:
        value = self.test.get("auroc")
        return None if value is None or not np.isfinite(value) else float(value)


def verdicts(detectors: Sequence[Detector], statistics: dict[str, np.ndarray], *, task: str, has_context: bool,
             missing: dict[str, str] | None = None) -> list[DetectorVerdict]:
    """Each detector's verdict from a question's statistics (:func:`question_statistics`)."""
    out = []
    for detector in detectors:
        kind, reason = detector.kind_of(task, has_context)
        verdict = DetectorVerdict(detector.name, detector.spec.title, None, kind, reason,
                                  detector.test_metrics(kind) if kind else {}, summary=detector.spec.summary)
        value = statistics.get(detector.spec.statistic)
        if kind is None:
            verdict.problem = reason
        elif value is None:
            verdict.problem = (missing or {}).get(detector.spec.statistic, f"no {detector.spec.statistic} value")
        else:
            try:
                verdict.probability = float(detector.predict_proba(np.asarray(value)[None, :], [kind])[0, 1])
            except ProbeError as exc:
                verdict.problem = str(exc)
        out.append(verdict)
    return out


def needed_statistics(detectors: Sequence[Detector], task: str, has_context: bool) -> list[str]:
    """The statistics a question must be given for the detectors that can judge it (no pass for the others)."""
    return sorted({d.spec.statistic for d in detectors if d.kind_of(task, has_context)[0] is not None})


def _in_sentence(title: str) -> str:
    """A title inside a sentence: lower-case first letter, unless the word is an acronym (P-Entropy, GRADE)."""
    return title if title[1:2].isupper() or title[1:2] == "-" else title[:1].lower() + title[1:]


def _names(names: list[str]) -> str:
    names = [_in_sentence(n) for n in names]
    return names[0] if len(names) == 1 else ", ".join(names[:-1]) + " and " + names[-1]


def disagreement(votes: Sequence[tuple[str, bool | None]]) -> str | None:
    """One sentence when some detectors say the model can answer and others say it cannot, else None.
    ``votes``: (detector title, answerable) pairs; None (no verdict) takes no side."""
    yes = [name for name, vote in votes if vote is True]
    no = [name for name, vote in votes if vote is False]
    if not yes or not no:
        return None
    say = lambda names: "says" if len(names) == 1 else "say"  # noqa: E731
    return (f"The detectors disagree: {_names(yes)} {say(yes)} the model can answer; "
            f"{_names(no)} {say(no)} it cannot.")


# --------------------------------------------------------------------------------------------------
# training on the benchmark's tables


def fit_detector(name: str, tables: dict, *, model: str, seed: int = 42, n_boot: int = 1000, ci: float = 0.95,
                 training_data: dict | None = None, say: Callable[[str], None] = lambda line: None) -> Detector:
    """Fit detector ``name`` on the train rows of every benchmark table (:func:`grade.benchmark.build_tables`;
    ``tables``: dataset -> :class:`~grade.studies.Table`), pick what it picks on their validation rows, and
    measure it on each table's test rows. A row without the statistic (a cache that lacks it) is left out.
    """
    spec = spec_of(name)
    parts: dict[str, list] = {"train": [], "val": [], "test": []}
    kinds: dict[str, dict] = {}
    for dataset, table in tables.items():
        X = table_statistic(table, spec.statistic)
        ok = np.isfinite(X).all(axis=1)
        if not ok.any():
            say(f"  {dataset}: no {spec.statistic} values; left out")
            continue
        meta = {"task": _most_common(table.task) if table.task is not None else None,
                "with_document": bool(np.mean(table.has_context) >= 0.5) if table.has_context is not None else False}
        for part in parts:
            rows = table.rows(part)
            rows = rows[ok[rows]]
            parts[part].append((dataset, X[rows], table.y[rows]))
            meta[part if part != "val" else "validation"] = {"n": int(len(rows)), "answerable": int(table.y[rows].sum())}
        kinds[dataset] = meta

    def stack(part):
        chunks = parts[part]
        return (np.concatenate([c[1] for c in chunks]), np.concatenate([c[2] for c in chunks]),
                np.concatenate([[c[0]] * len(c[2]) for c in chunks]).astype(object))

    if not kinds:
        raise ProbeError(f"no benchmark table holds {spec.statistic} values")
    (X, y, k), (Xv, yv, kv) = stack("train"), stack("val")
    if spec.estimator == "kind-logistic":
        estimator = KindLogistic(sorted(kinds), seed).fit(X, k, y, Xv, kv, yv)
    else:
        estimator = SaplmaMLP(seed).fit(X, y).half_precision()  # the fixed recipe selects nothing on validation
    detector = Detector(spec, estimator, {"name": name, "model": model, "input_dim": int(X.shape[1]), "seed": seed,
                                          "kinds": kinds, "training": estimator.training,
                                          "training_data": training_data or {}})
    by_dataset, all_y, all_p = {}, [], []
    for dataset, Xt, yt in parts["test"]:
        p = detector.predict_proba(Xt, [dataset] * len(yt))[:, 1]
        by_dataset[dataset] = heldout_metrics(yt, p, THRESHOLD, n_boot=n_boot, ci=ci)
        all_y.append(yt)
        all_p.append(p)
    detector.metadata["metrics"] = {"test": heldout_metrics(np.concatenate(all_y), np.concatenate(all_p), THRESHOLD,
                                                            n_boot=n_boot, ci=ci),
                                    "test_by_dataset": by_dataset}
    return detector


def _most_common(values) -> str:
    names, counts = np.unique(np.asarray(values, dtype=str), return_counts=True)
    return str(names[int(np.argmax(counts))])
