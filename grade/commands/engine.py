"""The Ray options of ``label``, ``extract`` and ``traces`` (``--engine ray``) and the model each of those
commands hands its batch job (:func:`model_for_engine`): a loaded model in this process, or a model spec and the
cluster options for Ray (:mod:`grade.batch.ray_backend`); the batch commands' ``--batch-size`` and the line they
print before a batched run in reduced precision (:func:`precision_note`)."""

from __future__ import annotations

import argparse
import math
import sys
from typing import TYPE_CHECKING

from ..batch.runner import BACKENDS
from ..common.errors import InputError
from .common import int_range, load_model_from_args

if TYPE_CHECKING:  # imported where used: torch and Ray load only for a Ray run
    from ..batch.ray_backend import ClusterOptions
    from ..models.models import ModelSpec

ENGINES = BACKENDS  # --engine names the batch runner's backend


def add_batch_argument(parser: argparse.ArgumentParser) -> None:
    """``--batch-size``: items a batched model pass takes at once, over the rule of
    :func:`grade.models.sizing.batch_size` (from the device's free memory and the model's shape)."""
    parser.add_argument("--batch-size", type=int_range(1, 4096), default=None,
                        help="items a batched model pass takes at once (default: as many as the device's free "
                             "memory holds, at most 8 on a CPU); 1: one at a time, the same numbers in float32")


def precision_note(device: str, dtype: str | None, batch_size: int | None) -> str | None:
    """The line a batched command prints before it runs in reduced precision (bfloat16, a GPU's default, or
    float16): there a batched product rounds a row differently from the row alone, enough to flip a greedy token, so
    answers and scores depend on the batch (and were seen to change between two identical runs); None in float32 or
    one item at a time."""
    import torch

    from ..models.models import parse_dtype

    chosen = parse_dtype(dtype, torch.device(device))
    if batch_size == 1 or chosen == torch.float32:
        return None
    name = str(chosen).removeprefix("torch.")
    return (f"note: {name} batches: answers and scores can differ from one item at a time (--batch-size 1) and "
            f"between runs; --dtype float32 gives the same numbers batched")


def say_precision_note(args: argparse.Namespace, batch_size: int | None, quiet: bool) -> None:
    """:func:`precision_note` for the command's ``--device`` and ``--dtype``, on stderr unless ``quiet``."""
    note = None if quiet else precision_note(args.device, args.dtype, batch_size)
    if note:
        print(note, file=sys.stderr)


def add_engine_arguments(parser: argparse.ArgumentParser) -> None:
    """``--engine``, ``--address``, ``--workers``, ``--gpus-per-worker``."""
    group = parser.add_argument_group("distributed run (--engine ray)")
    group.add_argument("--engine", choices=ENGINES, default="local",
                       help="local: this process (default); ray: workers of a Ray cluster")
    group.add_argument("--address", default=None,
                       help="Ray cluster to join: 'auto' (a `ray start` cluster on this machine), host:6379, "
                            "or ray://host:10001; default: $RAY_ADDRESS, else a local cluster on this machine")
    group.add_argument("--workers", type=int_range(1, 4096), default=None,
                       help="model copies (Ray actors); default: cluster GPUs / --gpus-per-worker, or CPUs")
    group.add_argument("--gpus-per-worker", type=_gpu_count, default=None,
                       help="GPUs per model copy (default 1 with --device cuda, else 0); above 1 the model "
                            "is split across them with device_map='auto'")


def _gpu_count(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not (math.isfinite(value) and 0 <= value <= 1024):
        raise argparse.ArgumentTypeError(f"must be a number of GPUs (0, a fraction such as 0.5, or more), got {text!r}")
    return value


def check_engine_arguments(args: argparse.Namespace) -> None:
    """Reject Ray options given without ``--engine ray`` (they would be silently ignored)."""
    if getattr(args, "engine", "local") == "ray":
        return
    given = [f"--{name.replace('_', '-')}" for name in ("address", "workers", "gpus_per_worker")
             if getattr(args, name, None) is not None]
    if given:
        raise InputError(f"{', '.join(given)} only apply with --engine ray")


def model_spec_from_args(args: argparse.Namespace, gpus: float) -> ModelSpec:
    from ..models.models import ModelSpec

    return ModelSpec(name=args.model, device=args.device, dtype=args.dtype,
                     trust_remote_code=getattr(args, "trust_remote_code", False), gpus=gpus)


def _gpus_for(args: argparse.Namespace) -> float:
    gpus = args.gpus_per_worker
    if gpus is None:
        return 1.0 if str(args.device).startswith("cuda") else 0.0
    if gpus < 0:
        raise InputError("--gpus-per-worker cannot be negative")
    if gpus > 1 and gpus != int(gpus):
        raise InputError("--gpus-per-worker above 1 must be a whole number")
    return float(gpus)


def _cluster_from_args(args: argparse.Namespace) -> ClusterOptions:
    from ..batch.ray_backend import ClusterOptions

    if args.workers is not None and args.workers < 1:
        raise InputError("--workers must be at least 1")
    return ClusterOptions(address=args.address, workers=args.workers, gpus_per_worker=_gpus_for(args))


def model_for_engine(args: argparse.Namespace, say=None):
    """(model, cluster) for a batch job on ``--engine``: locally the loaded model (``say``: its loading lines) and
    no cluster; on Ray a :class:`~grade.models.models.ModelSpec` that every worker loads, and where the workers run."""
    if args.engine != "ray":
        return load_model_from_args(args, say), None
    cluster = _cluster_from_args(args)
    return model_spec_from_args(args, cluster.gpus_per_worker), cluster
