"""``python -m grade extract``: GRADE features of labelled questions into a Parquet feature store.

The output is a folder of Parquet parts (``pandas.read_parquet(out)`` reads it); a re-run with the
same ``--out`` skips the rows already stored, so an interrupted extraction can simply be repeated.
"""

from __future__ import annotations

import argparse
import sys

from .common import add_model_arguments, add_threads_argument, positive_int
from .engine import (add_batch_argument, add_engine_arguments, check_engine_arguments, model_for_engine,
                     say_precision_note)


def register(sub) -> None:
    p = sub.add_parser("extract", help="features of labelled questions -> Parquet", description=__doc__)
    add_model_arguments(p)
    p.add_argument("--labels", nargs="+", required=True, help="labelled JSONL file(s): id, question, label, ...")
    p.add_argument("--loss", choices=("pre", "pos"), default="pre")
    p.add_argument("--srank", choices=("paper", "sum", "squared"), default="paper")
    p.add_argument("--out", required=True, help="feature store folder, e.g. features.parquet")
    p.add_argument("--chunk-size", type=positive_int, default=32, help="rows per Parquet part (work lost at most on a kill)")
    p.add_argument("--limit", type=positive_int, default=None, help="only the first N labelled rows of each file")
    p.add_argument("--no-hidden", action="store_true", help="do not store hidden states (smaller files)")
    add_threads_argument(p)
    add_batch_argument(p)
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    add_engine_arguments(p)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from ..common.errors import InputError
    from ..batch.features import extract_features, read_labelled
    from ..common.io import ensure_output_folder

    check_engine_arguments(args)
    if args.threads:
        import torch

        torch.set_num_threads(args.threads)
    rows, bad_rows = [], []
    for path in args.labels:
        file_rows = read_labelled(path, skipped=bad_rows)
        rows.extend(file_rows[: args.limit] if args.limit else file_rows)
    for where in bad_rows[:10]:
        print(f"  skipped {where}", file=sys.stderr)
    if not rows:
        raise InputError("the labelled file(s) hold no row with a label")
    ensure_output_folder(args.out, "feature store")
    model, cluster = model_for_engine(args, None if args.quiet else (lambda line: print(line, file=sys.stderr)))
    say_precision_note(args, args.batch_size, args.quiet)
    report = extract_features(model, rows, args.out, loss=args.loss, srank=args.srank, keep_hidden=not args.no_hidden,
                              chunk_size=args.chunk_size, progress=not args.quiet, backend=args.engine,
                              cluster=cluster, batch_size=args.batch_size)
    print(report if not bad_rows else f"{report} ({len(bad_rows)} bad input row(s) skipped)")
    for dataset, row_id, reason in report.skipped[:10]:
        print(f"  skipped {dataset}/{row_id}: {reason}", file=sys.stderr)
    return 0
