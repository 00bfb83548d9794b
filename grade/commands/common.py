"""Arguments shared by several commands, and the argument types that check values when parsed.

A value outside its range fails in ``parse_args`` with one ``error:`` line, before any model is
loaded; the types below say what was expected (``--batch: must be a whole number of at least 1,
got '0'``).

One writer per output, for every command that writes: the one table of what each command writes
(:data:`WRITERS`) and :func:`lock_outputs`, which ``grade.commands.cli`` calls before any command runs. The lock is
:func:`grade.common.io.hold_output_lock` (``<output>.lock`` beside the output, held until the process ends): a second
run on the same output is refused in one line while the first holds it, instead of both appending (two
``grade extract`` on one ``--out`` stored every row twice).
"""

from __future__ import annotations

import argparse
import math
import re
from pathlib import Path
from typing import Callable

from ..common.errors import InputError
from ..models.embedded import DEFAULT_MODEL, EMBEDDED_MODELS

DTYPES = ("auto", "float32", "fp32", "bfloat16", "bf16", "float16", "fp16")
_DEVICE = re.compile(r"^(cpu|mps|cuda(:\d{1,3})?)$")


def int_range(low: int | None = None, high: int | None = None):
    """An argparse type: a whole number in ``[low, high]`` (either end open when None)."""

    def parse(text: str) -> int:
        try:
            value = int(text.strip())
        except ValueError:
            value = None
        if value is None or (low is not None and value < low) or (high is not None and value > high):
            if low is not None and high is not None:
                wanted = f"a whole number from {low} to {high}"
            elif low is not None:
                wanted = f"a whole number of at least {low}"
            else:
                wanted = f"a whole number of at most {high}"
            raise argparse.ArgumentTypeError(f"must be {wanted}, got {text!r}")
        return value

    return parse


positive_int = int_range(1)
non_negative_int = int_range(0)


def open_fraction(text: str) -> float:
    """An argparse type: a number strictly between 0 and 1."""
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not (0.0 < value < 1.0):
        raise argparse.ArgumentTypeError(f"must be a number between 0 and 1, got {text!r}")
    return value


def device(text: str) -> str:
    """An argparse type: cpu, cuda, cuda:N or mps (whether that device exists is checked at load)."""
    value = text.strip().lower()
    if not _DEVICE.match(value):
        raise argparse.ArgumentTypeError(f"unknown device {text!r}; use cpu, cuda, cuda:N or mps")
    return value


def add_model_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--model", default=DEFAULT_MODEL,
        help=f"embedded model ({', '.join(EMBEDDED_MODELS)}), a model folder, a .gguf file or a hub id",
    )
    parser.add_argument("--device", default="cpu", type=device, help="cpu (default), cuda, cuda:1, ...")
    parser.add_argument("--dtype", default=None, choices=DTYPES,
                        help="float32 (CPU default), bfloat16 (GPU default), float16")
    parser.add_argument("--trust-remote-code", action="store_true", help="let transformers run the model's own code")


#: torch refuses more threads than a C int holds; no machine has more cores than this
thread_count = int_range(1, 4096)
#: numpy and torch take seeds of at most 64 bits; 32 are plenty and portable
seed = int_range(0, 2**32 - 1)


def add_threads_argument(parser: argparse.ArgumentParser, default: int | None = None, help: str | None = None) -> None:
    parser.add_argument("--threads", type=thread_count, default=default,
                        help=help or "torch CPU threads (default: torch's choice)")


def load_model_from_args(args: argparse.Namespace, say=None):
    from ..models.models import load_model

    return load_model(args.model, device=args.device, dtype=args.dtype, trust_remote_code=args.trust_remote_code, say=say)



def _benchmark_cache(args) -> str:
    from ..verdict.detectors.baselines import safe_name

    return str(Path(args.cache_dir) / safe_name(args.model))


def _benchmark_results(args) -> str:
    from ..verdict.detectors.baselines import safe_name

    return args.out or str(Path("results") / safe_name(args.model))


def _probe(args) -> str:
    from ..verdict.artifacts import probe_paths

    return str(probe_paths(args.out)[0].with_suffix(""))


def _trace_store(args) -> str | None:
    return args.out if (getattr(args, "samples", None) or getattr(args, "generate", None)) else None  # else it reads


#: command -> (what it writes, the path from the parsed arguments or None where this run writes nothing)
WRITERS: dict[str, tuple[tuple[str, Callable[[argparse.Namespace], str | None]], ...]] = {
    "label": (("the labels file", lambda args: args.out),),
    "extract": (("the feature store", lambda args: args.out),),
    "traces": (("the trace store", _trace_store),),
    "train": (("the probe", _probe),),
    "benchmark": (("the benchmark cache", _benchmark_cache), ("the results folder", _benchmark_results)),
    "steperrors": (("the step-error folder", lambda args: args.out),),
}


def lock_outputs(args: argparse.Namespace) -> list[Path]:
    """Take the lock of every output ``args.command`` writes (creating the folder the lock lies in), or raise
    InputError in one line where another run holds one. Returns the outputs locked (for :func:`release_outputs`)."""
    from ..common.io import disk_error, hold_output_lock

    locks = []
    for what, path_of in WRITERS.get(getattr(args, "command", None), ()):
        path = path_of(args)
        if not path:
            continue
        folder = Path(path).expanduser().parent
        try:
            folder.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise disk_error(exc, f"{what} folder {folder}") or InputError(
                f"cannot create the folder {folder} of {what}: {exc.strerror or exc}") from None
        try:
            hold_output_lock(path, what)
        except InputError:
            release_outputs(locks)
            raise
        locks.append(path)
    return locks


def release_outputs(paths: list[str]) -> None:
    """Release the locks :func:`lock_outputs` took (a command run in-process, e.g. by the tests, is done)."""
    from ..common.io import release_output_lock

    for path in paths:
        release_output_lock(path)
