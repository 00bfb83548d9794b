"""The files of trained probes and detectors: a ``<name>.safetensors`` of weights beside a ``<name>.json`` of
metadata. Their paths, the SHA-256 that ties the two, the checks that read them (sizes, format, version,
header, finite values) and a loose model-name key. :mod:`grade.verdict.probe` and :mod:`grade.verdict.detectors` save and
load through it; any problem raises :class:`~grade.common.errors.ProbeError` with one readable line.
"""

from __future__ import annotations

import hashlib
import json
import math
from pathlib import Path
from typing import Callable

import numpy as np
import torch

from ..common.errors import ProbeError

#: A probe's JSON is a few KB (the largest shipped one, with its ROC curves, about 100 KB).
MAX_METADATA_BYTES = 4 * 1024 * 1024
#: A safetensors header of a probe lists about 20 tensors in a few KB.
MAX_HEADER_BYTES = 1024 * 1024


def artifact_paths(path: str | Path, what: str = "probe") -> tuple[Path, Path]:
    """(weights, metadata) paths of a saved ``what`` (probe, detector) for ``path`` given with or without an
    extension."""
    path = Path(path)
    if path.suffix in (".safetensors", ".json"):
        path = path.with_suffix("")
    if path.name in ("", ".", ".."):
        raise ProbeError(f"{str(path)!r} names no {what} file: give a path such as folder/name")
    return path.with_name(path.name + ".safetensors"), path.with_name(path.name + ".json")


def probe_paths(path: str | Path) -> tuple[Path, Path]:
    """(weights, metadata) paths of a probe for ``path`` given with or without an extension."""
    return artifact_paths(path, "probe")


def detector_paths(path: str | Path) -> tuple[Path, Path]:
    """(weights, metadata) paths of a detector for ``path`` given with or without an extension."""
    return artifact_paths(path, "detector")


def model_key(name: str) -> str:
    """Model names compared loosely: case, and a trailing path separator or extension, ignored."""
    return Path(str(name).strip().rstrip("/")).name.lower().removesuffix(".gguf")


def sha256_file(path: Path) -> str:
    """The SHA-256 of a file, hex."""
    h = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()




def is_count(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0




def safetensors_header(weights: Path, what: str = "probe") -> dict[str, tuple[str, tuple[int, ...]]]:
    """``{tensor name: (dtype, shape)}`` from a safetensors file's header alone (its first 8 bytes give
    the header's length, at most :data:`MAX_HEADER_BYTES`): what a file holds is known before any
    tensor, or the network it would fill, takes memory. A header that lies about the file's length is
    refused too."""
    try:
        size = weights.stat().st_size
        with open(weights, "rb") as handle:
            head = handle.read(8)
            length = int.from_bytes(head, "little") if len(head) == 8 else -1
            if not 2 <= length <= min(MAX_HEADER_BYTES, size - 8):
                raise ValueError("no safetensors header")
            header = json.loads(handle.read(length).decode("utf-8"))
    except (OSError, ValueError, UnicodeDecodeError, RecursionError) as exc:
        raise ProbeError(f"{what} weights {weights} are unreadable ({exc})") from None
    if not isinstance(header, dict):
        raise ProbeError(f"{what} weights {weights} are unreadable (the header is not an object)")
    shapes, data = {}, size - 8 - length
    for name, entry in header.items():
        if name == "__metadata__":
            continue
        try:
            shape = tuple(entry["shape"])
            start, end = entry["data_offsets"]
            if not (isinstance(entry["dtype"], str) and all(is_count(d) for d in shape)
                    and is_count(start) and is_count(end) and start <= end <= data):
                raise ValueError
        except (TypeError, KeyError, ValueError):
            raise ProbeError(f"{what} weights {weights} are unreadable (tensor {name!r:.60} is described wrongly)") from None
        shapes[name] = (entry["dtype"], shape)
    return shapes




def read_metadata(weights: Path, meta_path: Path, what: str, version: int) -> dict:
    """The JSON half of a saved ``what`` ("probe", "detector"): both files exist, the JSON parses, its
    ``format`` is ``grade-<what>`` at ``version``; any problem raises ProbeError with one clear line."""
    for file in (meta_path, weights):
        if not file.is_file():
            raise ProbeError(f"{what} file {file} does not exist")
    if meta_path.stat().st_size > MAX_METADATA_BYTES:
        raise ProbeError(f"{what} metadata {meta_path} is larger than {MAX_METADATA_BYTES // (1024 * 1024)} MB")
    try:
        meta = json.loads(meta_path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError) as exc:
        raise ProbeError(f"{what} metadata {meta_path} is not valid JSON ({exc})") from None
    if not isinstance(meta, dict) or meta.get("format") != f"grade-{what}":
        raise ProbeError(f"{meta_path} is not a GRADE {what} description")
    if meta.get("format_version") != version:
        raise ProbeError(f"{meta_path} has {what} format {meta.get('format_version')}; this version reads {version}")
    return meta


def read_weights(weights: Path, meta_path: Path, meta: dict, what: str, *, digest_required: bool) -> dict:
    """The safetensors half: its SHA-256 is the one ``meta`` records (a probe from before checksums may
    have none, unless ``digest_required``), it reads, and it holds only finite values."""
    from safetensors import SafetensorError
    from safetensors.torch import load_file

    digest = meta.get("weights_sha256")
    if (digest or digest_required) and digest != sha256_file(weights):
        raise ProbeError(f"{what} weights {weights} are corrupt or do not belong to {meta_path.name} (checksum mismatch)")
    try:
        tensors = load_file(str(weights))
    except (SafetensorError, OSError, ValueError, RuntimeError) as exc:
        raise ProbeError(f"{what} weights {weights} are unreadable ({exc})") from None
    bad = [name for name, tensor in tensors.items() if not torch.isfinite(tensor).all()]
    if bad:
        raise ProbeError(f"{what} weights {weights} hold NaN or infinite values (in {', '.join(sorted(bad))})")
    return tensors


def jsonable(value):
    """``value`` with numpy numbers and arrays as plain JSON values, non-finite floats as null."""
    if isinstance(value, dict):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [jsonable(v) for v in value]
    if isinstance(value, np.ndarray):
        return jsonable(value.tolist())
    if isinstance(value, (np.integer,)):
        return int(value)
    if isinstance(value, (np.floating, float)):
        return None if not math.isfinite(float(value)) else float(value)
    return value


def check_finite_tensors(tensors: dict, what: str = "probe") -> None:
    """Raise ProbeError (one line) unless every tensor of a trained ``what`` holds finite numbers only: a
    training that diverged (NaN or infinite weights) is an error, never a file."""
    bad = sorted(name for name, tensor in tensors.items()
                 if not torch.isfinite(torch.as_tensor(tensor)).all())
    if bad:
        shown = ", ".join(bad[:4]) + (f" and {len(bad) - 4} more" if len(bad) > 4 else "")
        raise ProbeError(f"training diverged: the {what}'s weights hold NaN or infinite values (in {shown}); "
                         "nothing was written")


def check_finite_scores(scores, what: str = "probe", split: str = "validation") -> None:
    """Raise ProbeError (one line) unless a trained ``what``'s scores on its ``split`` rows are all finite."""
    scores = np.asarray(scores, dtype=np.float64)
    if scores.size and not np.isfinite(scores).all():
        bad = int((~np.isfinite(scores)).sum())
        raise ProbeError(f"training diverged: the {what} scores {bad} of {scores.size} {split} value(s) as NaN or "
                         "infinite; nothing was written")


def save_artifact(path: str | Path, what: str, tensors: dict, header: dict[str, str],
                  metadata: Callable[[str, str], dict]) -> tuple[Path, Path, dict]:
    """Write ``what``'s weights and metadata beside each other, atomically (both or neither), after checking
    that every weight is finite (:func:`check_finite_tensors`: a diverged training is refused, never written).
    ``metadata(weights file name, its sha256)`` gives the JSON. Returns (weights, metadata path, metadata)."""
    from safetensors.torch import save_file

    from ..common.io import atomic_paths

    check_finite_tensors(tensors, what)
    weights, meta_path = artifact_paths(path, what)
    weights.parent.mkdir(parents=True, exist_ok=True)
    with atomic_paths(weights, meta_path) as (weights_tmp, meta_tmp):
        save_file(tensors, str(weights_tmp), metadata=header)
        meta = metadata(weights.name, sha256_file(weights_tmp))
        meta_tmp.write_text(json.dumps(jsonable(meta), indent=2) + "\n", encoding="utf-8")
    return weights, meta_path, meta
