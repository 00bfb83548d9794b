"""A probe's files: ``name.safetensors`` (every tensor) beside ``name.json`` (metadata), read and checked here
before any tensor or network takes memory (:mod:`grade.verdict.artifacts` holds what probes and detectors share); the
shipped probes and reference feature set (package data), and the listing of a folder of probes with their
metadata (:class:`ProbeInfo`, :func:`list_probes`) read without loading the weights."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

from ..artifacts import (MAX_METADATA_BYTES, is_count, probe_paths, read_metadata, read_weights,
                         safetensors_header)
from ...common.errors import ProbeError
from .inputs import INPUTS, input_width
from .network import KINDS, expected_shapes

PROBE_FORMAT = 1
LOSSES = ("pre", "pos")
SRANKS = ("paper", "sum", "squared")

#: Package data (importlib.resources, so an installed package finds them too): the shipped probes
#: (``<model>-<loss>.{safetensors,json}``, built by ``make probes``) and the labelled reference feature
#: set the app draws its bands and projections from.
SHIPPED_PROBES_DIR = Path(str(resources.files("grade") / "assets" / "probes"))
SHIPPED_REFERENCE_FEATURES = Path(str(resources.files("grade") / "assets" / "reference_features.parquet"))


def _is_number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def probe_metadata_problem(meta) -> str | None:
    """What is wrong with a probe's metadata, in one line, or None: every field the studio and
    :meth:`Probe.load` read is checked for its type (numbers are numbers, ``model`` is present and
    text, ...), so that a file from elsewhere cannot pass text where a number is shown or skip the
    model check by leaving ``model`` out."""
    if not isinstance(meta, dict):
        return "the metadata is not a JSON object"
    model = meta.get("model")
    if not isinstance(model, str) or not model.strip():
        return "'model' must be the name of the model the probe was trained on (text)"
    if len(model) > 500:
        return "'model' is longer than 500 characters"
    if meta.get("loss") not in LOSSES:
        return f"'loss' must be {' or '.join(LOSSES)}, not {meta.get('loss')!r:.60}"
    if meta.get("srank", "paper") not in SRANKS:
        return f"'srank' must be {', '.join(SRANKS)}, not {meta.get('srank')!r:.60}"
    if meta.get("kind") not in KINDS:
        return f"'kind' must be {' or '.join(KINDS)}, not {meta.get('kind')!r:.60}"
    n_layers = meta.get("n_layers")
    if not is_count(n_layers) or n_layers < 1:  # its weights are checked against it (check_weights_header)
        return f"'n_layers' must be a whole number of at least 1, not {n_layers!r:.60}"
    if meta.get("inputs", "rank_ratio") not in INPUTS:
        return f"unknown probe inputs {meta.get('inputs')!r:.60}; this version reads {', '.join(INPUTS)}"
    name = meta.get("name")
    if name is not None and (not isinstance(name, str) or len(name) > 200):
        return "'name' must be text of at most 200 characters"
    tasks = meta.get("tasks")
    if tasks is not None and (not isinstance(tasks, list) or not all(isinstance(t, str) for t in tasks)):
        return "'tasks' must be a list of task names"
    metrics = meta.get("metrics", {})
    if not isinstance(metrics, dict):
        return "'metrics' must be an object"
    test = metrics.get("test", metrics)
    if not isinstance(test, dict):
        return "'metrics.test' must be an object"
    for key in ("auroc", "accuracy"):
        value = test.get(key)
        if value is not None and (not _is_number(value) or not 0.0 <= value <= 1.0):
            return f"the test {key} must be a number from 0 to 1, not {value!r:.60}"
    for key in ("n", "positives"):
        if test.get(key) is not None and not is_count(test[key]):
            return f"the test '{key}' must be a whole number, not {test[key]!r:.60}"
    roc = test.get("roc")
    if roc is not None:
        if not isinstance(roc, dict) or not all(
                isinstance(roc.get(k), list) and all(_is_number(x) for x in roc[k]) for k in ("fpr", "tpr")) \
                or len(roc["fpr"]) != len(roc["tpr"]):
            return "'metrics.test.roc' must hold two lists of numbers of one length, 'fpr' and 'tpr'"
    balance = meta.get("train_balance")
    if balance is not None and (not isinstance(balance, dict) or not all(
            is_count(balance.get(k)) for k in ("answerable", "unanswerable"))):
        return "'train_balance' must give whole numbers 'answerable' and 'unanswerable'"
    training = meta.get("training_data")
    if training is not None:
        datasets = training.get("datasets") if isinstance(training, dict) else None
        if not isinstance(training, dict) or (datasets is not None and not (isinstance(datasets, dict) and all(
                isinstance(d, dict) for d in datasets.values()))):
            return "'training_data' must be an object whose 'datasets' are objects"
    return None


def check_probe_metadata(meta, where) -> dict:
    """``meta`` when :func:`probe_metadata_problem` finds nothing, else one-line :class:`ProbeError`."""
    problem = probe_metadata_problem(meta)
    if problem:
        raise ProbeError(f"{where}: {problem}")
    return meta


def check_weights_header(weights: Path, kind: str, width: int, n_layers: int) -> None:
    """Refuse, from the header alone, weights whose tensors are not those of a ``kind`` probe of
    ``width`` inputs: the layer count claimed in the JSON is checked before a network is built."""
    found = {name: shape for name, (_, shape) in safetensors_header(weights).items()}
    wanted = expected_shapes(kind, width)
    if found != wanted:
        missing = sorted(set(wanted) - set(found))
        wrong = sorted(k for k in set(wanted) & set(found) if wanted[k] != found[k])
        detail = (f"{wrong[0]} is {list(found[wrong[0]])}, not {list(wanted[wrong[0]])}" if wrong
                  else f"missing {missing[0]}" if missing else f"unexpected {sorted(set(found) - set(wanted))[0]}")
        raise ProbeError(f"probe weights {weights} do not fit a {kind} probe of {n_layers} layers ({detail:.200})")


def read_probe_files(path: str | Path) -> tuple[Path, dict, dict]:
    """(weights path, metadata, tensors) of the probe saved at ``path``, after every check: both files, format
    and version, kind and layer count, each metadata field's type (:func:`check_probe_metadata`), inputs,
    threshold and seed, the tensors' names and shapes from the header alone (:func:`check_weights_header`),
    the checksum and finite values. Any problem raises ProbeError with one clear line."""
    weights, meta_path = probe_paths(path)
    meta = read_metadata(weights, meta_path, "probe", PROBE_FORMAT)
    kind, n_layers = meta.get("kind"), meta.get("n_layers")
    if kind not in KINDS or not isinstance(n_layers, int) or isinstance(n_layers, bool) or n_layers < 1:
        raise ProbeError(f"{meta_path} names no valid probe kind and layer count")
    check_probe_metadata(meta, meta_path)
    inputs = meta.get("inputs", "rank_ratio")  # probes from before inputs were named read rank ratios
    if inputs not in INPUTS:
        raise ProbeError(f"{meta_path}: unknown probe inputs {inputs!r}; this version reads {', '.join(INPUTS)}")
    width = input_width(inputs, n_layers)
    threshold, seed = meta.get("threshold", 0.5), meta.get("seed", 42)
    if isinstance(threshold, bool) or not isinstance(threshold, (int, float)) or not 0.0 <= threshold <= 1.0:
        raise ProbeError(f"{meta_path}: 'threshold' must be a number from 0 to 1, not {threshold!r}")
    if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
        raise ProbeError(f"{meta_path}: 'seed' must be a whole number of at least 0, not {seed!r}")
    for key in ("model", "loss", "srank"):
        if meta.get(key) is not None and not isinstance(meta[key], str):
            raise ProbeError(f"{meta_path}: {key!r} must be text, not {meta[key]!r}")
    check_weights_header(weights, kind, width, n_layers)  # before a tensor or a network takes memory
    return weights, meta, read_weights(weights, meta_path, meta, "probe", digest_required=False)


# --------------------------------------------------------------------------------------------------
# a folder of probes, read without loading the weights


def probe_test_metrics(metadata: dict) -> dict:
    """A probe's metrics on its held-out test split (``metrics.test``; older files: ``metrics``)."""
    metrics = metadata.get("metrics") or {}
    found = metrics.get("test") if isinstance(metrics.get("test"), dict) else metrics
    return found if isinstance(found, dict) else {}


@dataclass(frozen=True)
class ProbeInfo:
    """A probe file on disk and its metadata, read without loading the weights."""

    path: Path  # the .safetensors file
    metadata: dict

    @property
    def name(self) -> str:
        return str(self.metadata.get("name") or self.path.stem)

    @property
    def model(self) -> str | None:
        return self.metadata.get("model")

    @property
    def loss(self) -> str | None:
        return self.metadata.get("loss")

    @property
    def test_metrics(self) -> dict:
        """Metrics on the probe's held-out test split (``metrics.test``; older files: ``metrics``)."""
        return probe_test_metrics(self.metadata)

    @property
    def auroc(self) -> float | None:
        value = self.test_metrics.get("auroc")
        return None if value is None else float(value)

    @property
    def accuracy(self) -> float | None:
        value = self.test_metrics.get("accuracy")
        return None if value is None else float(value)

    @property
    def kind(self) -> str:
        return str(self.metadata.get("kind") or "?")


def probe_metadata_path(weights: Path) -> Path:
    return weights.with_suffix(".json")


def read_probe_info(weights: str | Path) -> ProbeInfo | None:
    """Metadata of a probe file pair, or None if its JSON is missing, unreadable, too large or holds a
    field of the wrong type (:func:`probe_metadata_problem`): a :class:`ProbeInfo` always holds numbers
    where numbers are shown and a model name. Loading such a probe gives the reason."""
    weights = Path(weights).with_suffix(".safetensors")
    try:
        path = probe_metadata_path(weights)
        if path.stat().st_size > MAX_METADATA_BYTES:
            return None
        metadata = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError, RecursionError):
        return None
    return ProbeInfo(weights, metadata) if probe_metadata_problem(metadata) is None else None


def list_probes(folder: str | Path = SHIPPED_PROBES_DIR) -> list[ProbeInfo]:
    """Probe files in ``folder`` (``name.safetensors`` + ``name.json``), best test AUROC first.

    A pair whose JSON cannot be read is skipped here; loading it explicitly gives the error.
    """
    found = []
    for weights in sorted(Path(folder).glob("*.safetensors")):
        info = read_probe_info(weights)
        if info is not None:
            found.append(info)
    return sorted(found, key=lambda p: -(p.auroc if p.auroc is not None else -1.0))
