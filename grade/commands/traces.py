"""``python -m grade traces``: step-wise GRADE_pos and token shock of many reasoning traces, into a trace store.

Traces come from an lm-evaluation-harness samples file (``--log_samples``), an Inspect AI eval log (``.eval``
or ``.json``), this project's trace JSONL (question, response, correct), or are sampled from a GSM8K / MATH
dataset by the model itself::

    python -m grade traces --samples samples_gsm8k_2025-01-01T00-00-00.jsonl --out runs/traces/gsm8k
    python -m grade traces --dataset gsm8k --limit 50 --generate 4 --out runs/traces/own --json
    python -m grade traces --out runs/traces/gsm8k          # aggregates of an existing store

The store (see :mod:`grade.traces`) is resumable: running the same command again analyses only the traces
not yet stored. The app's Traces page opens it. A generated trace that stopped at --max-new-tokens is flagged
(``cut_off`` in --json, a line in the tables): its "wrong" may only mean unfinished.
"""

from __future__ import annotations

import argparse
import json
import sys

from .engine import add_engine_arguments, check_engine_arguments, model_for_engine
from .common import add_model_arguments, add_threads_argument, int_range, non_negative_int, positive_int


def register(sub) -> None:
    p = sub.add_parser("traces", help="step-wise GRADE_pos of many reasoning traces -> trace store",
                       description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_model_arguments(p)
    src = p.add_argument_group("traces")
    src.add_argument("--samples", default=None,
                     help="lm-evaluation-harness samples_<task>_<date>.jsonl, an Inspect AI eval log (.eval or .json; "
                          "pip install 'grade-studio[inspect]'), or a JSONL of question/response/correct")
    src.add_argument("--dataset", default=None, help="with --generate: gsm8k, math, hf:gsm8k, hf:math or a JSONL of problems")
    src.add_argument("--generate", type=int_range(1, 1000), default=None, metavar="N",
                     help="sample N traces per problem of --dataset with the model itself")
    src.add_argument("--task", choices=("gsm8k", "math"), default=None,
                     help="prompt and answer check (default: from the file name or its rows)")
    src.add_argument("--metric", default=None, help="lm-eval: the per-sample 0/1 metric (default exact_match); "
                     "Inspect AI log: the scorer (default: the log's first)")
    src.add_argument("--filter", default=None, help="lm-eval: whose filter's rows to read (default: the file's first)")
    src.add_argument("--prompt", choices=("task", "run"), default="task",
                     help="task: this project's prompt for the task; run: lm-eval's own prompt (arguments.gen_args_0)")
    src.add_argument("--limit", type=positive_int, default=None, help="only the first N traces (with --generate: N problems)")
    src.add_argument("--offset", type=non_negative_int, default=0, help="with --generate: skip the first N problems")
    src.add_argument("--matcher", choices=("strict", "lenient"), default="strict", help="with --generate: answer check")
    src.add_argument("--seed", type=int, default=0, help="with --generate: sampling seed")
    src.add_argument("--max-new-tokens", type=int_range(1, 8192), default=None, help="with --generate: trace length (default: per task)")
    p.add_argument("--srank", choices=("paper", "sum", "squared"), default="paper")
    p.add_argument("--out", required=True, help="trace store folder")
    p.add_argument("--no-verifier", action="store_true",
                   help="skip the step verifier (its columns stay null): the GRADE analysis only")
    p.add_argument("--chunk-size", type=positive_int, default=8, help="traces per Parquet part (work lost at most on a kill)")
    add_threads_argument(p)
    p.add_argument("--json", action="store_true", help='print {"n": ..., "traces": [...]} instead of tables')
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    add_engine_arguments(p)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from ..common.errors import InputError
    from ..traces import (TraceStore, aggregate, aggregate_markdown, analyze_traces, generate_traces, read_traces,
                          summary_rows)

    if args.samples and args.generate:
        raise InputError("give either --samples FILE or --dataset with --generate N, not both")
    if args.generate is not None and not args.dataset:
        raise InputError("--generate needs --dataset")
    if args.dataset and args.generate is None:
        raise InputError("--dataset needs --generate N (traces per problem)")
    if args.limit is not None and args.limit < 1:
        raise InputError("--limit must be at least 1")
    check_engine_arguments(args)
    if args.threads:
        import torch

        torch.set_num_threads(args.threads)
    say = None if args.quiet or args.json else (lambda line: print(line, file=sys.stderr))
    if args.samples or args.generate:  # a read-only or full --out is refused before the model loads
        from ..common.io import ensure_output_folder

        ensure_output_folder(args.out, "trace store")
    store = TraceStore(args.out)
    report = None
    if args.samples or args.generate:
        model = cluster = None
        if args.generate:
            model, cluster = model_for_engine(args, say)
            path = generate_traces(model, args.dataset, args.out, n_per_problem=args.generate, limit=args.limit,
                                   offset=args.offset, matcher=args.matcher, seed=args.seed,
                                   max_new_tokens=args.max_new_tokens, cluster=cluster, progress=not args.quiet)
            source = read_traces(path, task=args.task)
        else:
            source = read_traces(args.samples, task=args.task, metric=args.metric, filter_name=args.filter,
                                 prompt=args.prompt, limit=args.limit)
        for note in source.notes:
            print(f"note: {note}", file=sys.stderr)
        if model is None:  # a trace file is read, and refused, before the model loads
            model, cluster = model_for_engine(args, say)
        report = analyze_traces(model, source, args.out, srank=args.srank, chunk_size=args.chunk_size,
                                progress=not args.quiet, backend=args.engine, cluster=cluster,
                                verify=not args.no_verifier)
    elif not store.exists():
        raise InputError(f"{args.out} is not a trace store yet: give --samples FILE or --dataset ... --generate N")

    frame = store.traces()
    described = store.meta().get("source") or {}
    if args.json:
        print(json.dumps({"n": len(frame), "traces": summary_rows(frame, described.get("format"),
                                                                 bool(described.get("int_ids")))}))
    else:
        if report is not None:
            rate = 60 * report.written / report.seconds if report.seconds and report.written else 0.0
            print(f"{report} ({rate:.2f} traces/min)")
        print(aggregate_markdown(aggregate(frame, store.tokens(), token_limit=described.get("max_new_tokens"))))
    if report is not None:
        for trace, reason in report.skipped[:10]:
            print(f"  skipped {trace}: {reason}", file=sys.stderr)
    return 0
