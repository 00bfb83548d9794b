"""One writer per output, for every command that writes: the one table of what each command writes
(:data:`WRITERS`) and :func:`lock_outputs`, which ``grade.commands.cli`` calls before any command runs. The lock is
:func:`grade.common.io.hold_output_lock` (``<output>.lock`` beside the output, held until the process ends): a second
run on the same output is refused in one line while the first holds it, instead of both appending (two
``grade extract`` on one ``--out`` stored every row twice).
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Callable

from ..common.errors import InputError


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
