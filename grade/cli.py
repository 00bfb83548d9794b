"""Command line: ``python -m grade <command> ...``.

Each command lives in ``grade/commands/<name>.py`` and exposes ``register(subparsers)``, which adds
its parser and sets ``func`` to a callable taking the parsed arguments and returning an exit code.
A :class:`~grade.errors.GradeError` is printed as one line (``error: ...``), never as a traceback.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import os
import sys

from .errors import GradeError

COMMANDS = ("analyze", "label", "extract", "train", "evaluate", "benchmark", "traces")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m grade", description="GRADE knowledge-gap detection")
    parser.add_argument("-v", "--verbose", action="store_true", help="log progress to stderr")
    sub = parser.add_subparsers(dest="command", required=True)
    for name in COMMANDS:
        try:
            module = importlib.import_module(f".commands.{name}", __package__)
        except ModuleNotFoundError as exc:
            if exc.name != f"{__package__}.commands.{name}":
                raise
            continue  # command not built yet
        module.register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    parser = build_parser()
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING, format="%(message)s")
    try:
        return int(args.func(args) or 0)
    except GradeError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
