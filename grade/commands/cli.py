"""Command line: ``python -m grade <command> ...``.

Each command lives in ``grade/commands/<name>.py`` and exposes ``register(subparsers)``, which adds
its parser and sets ``func`` to a callable taking the parsed arguments and returning an exit code.

Every mistake a user can make ends the same way: one line ``error: ...`` on stderr and exit status
2, never a traceback. Arguments are checked when they are parsed (types, ranges, choices, text that
is not UTF-8), before any model is loaded; a :class:`~grade.common.errors.GradeError` raised later is
printed the same way, and so is a full disk, an exhausted quota or a read-only or forbidden output
(an ``OSError`` the user can fix). Ctrl-C at any moment, imports included, prints ``interrupted`` and
exits with status 130. Anything else is a bug: it is reported in one line with exit status 1, and
``-v`` shows the traceback.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import os
import sys

from ..common.errors import GradeError

COMMANDS = ("analyze", "label", "extract", "train", "evaluate", "benchmark", "traces", "steperrors")


class ArgumentParser(argparse.ArgumentParser):
    """argparse with its errors as one ``error:`` line (the usage is one ``--help`` away)."""

    def error(self, message: str):  # noqa: D102 - argparse's hook
        self.exit(2, f"error: {self.prog}: {message} (see {self.prog} --help)\n")


def build_parser() -> argparse.ArgumentParser:
    parser = ArgumentParser(prog="python -m grade", description="GRADE knowledge-gap detection")
    parser.add_argument("-v", "--verbose", action="store_true", help="log progress to stderr")
    sub = parser.add_subparsers(dest="command", required=True)
    for name in COMMANDS:
        try:
            module = importlib.import_module(f".{name}", __package__)
        except ModuleNotFoundError as exc:
            if exc.name != f"{__package__}.commands.{name}":
                raise
            continue  # command not built yet
        module.register(sub)
    return parser


def _check_text_arguments(args: argparse.Namespace) -> None:
    """Every text argument must be valid UTF-8: the shell hands Python bytes, and bytes that are not
    text reach the tokenizer (or a file name) as lone surrogates."""
    from ..common.io import check_text

    for name, value in vars(args).items():
        values = value if isinstance(value, (list, tuple)) else [value]
        for item in values:
            if isinstance(item, str):
                check_text(item, f"--{name.replace('_', '-')}")


def main(argv: list[str] | None = None) -> int:
    try:
        return _main(argv)
    except KeyboardInterrupt:  # also while the commands' modules are imported or the arguments parsed
        print("interrupted", file=sys.stderr)
        return 130


def _main(argv: list[str] | None) -> int:
    from ..common.io import disk_error

    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    parser = build_parser()
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING, format="%(message)s")
    try:
        _check_text_arguments(args)
        from .common import lock_outputs, release_outputs

        locked = lock_outputs(args)  # one writer per output: a second run on the same output is refused here
        try:
            return int(args.func(args) or 0)
        finally:
            release_outputs(locked)
    except GradeError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    except OSError as exc:  # a full disk, a quota, a read-only output: the user's to fix, not a bug
        problem = disk_error(exc, "an output file")
        if problem is None:
            return _internal_error(exc, args.verbose)
        print(f"error: {problem}", file=sys.stderr)
        return 2
    except Exception as exc:  # a bug: one line for the user, the traceback with -v
        return _internal_error(exc, args.verbose)


def _internal_error(exc: Exception, verbose: bool) -> int:
    if verbose:
        raise exc
    first = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    print(f"error: internal error ({type(exc).__name__}{': ' + first if first else ''}); "
          "run again with -v for the traceback and please report it", file=sys.stderr)
    return 1


if __name__ == "__main__":
    sys.exit(main())
