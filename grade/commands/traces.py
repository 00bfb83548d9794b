"""``python -m grade traces``: step-wise GRADE_pos and token shock of many reasoning traces, into a trace store.

Traces come from an lm-evaluation-harness samples file (``--log_samples``), an Inspect AI eval log (``.eval``
or ``.json``), this project's trace JSONL (question, response, correct), or are sampled from a GSM8K / MATH
dataset by the model itself::

    python -m grade traces --samples samples_gsm8k_2025-01-01T00-00-00.jsonl --out runs/traces/gsm8k
    python -m grade traces --dataset gsm8k --limit 50 --generate 4 --out runs/traces/own --json
    python -m grade traces --out runs/traces/gsm8k          # aggregates of an existing store

Triage of a whole run (``--verifier-only``): the step verifier (one forward pass of its reader, SmolLM2 on a CPU)
and the model-free check of every trace, no step-wise GRADE; the traced model is not loaded. The store lists the
traces by the verifier's probability; ``--fill-grade`` (same --samples and --out) adds the GRADE analysis later,
to the first --limit traces or to all, each full row replacing its triage row::

    python -m grade traces --samples samples_gsm8k.jsonl --out runs/traces/gsm8k --verifier-only
    python -m grade traces --samples samples_gsm8k.jsonl --out runs/traces/gsm8k --fill-grade --limit 50

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
    p.add_argument("--verifier-only", action="store_true",
                   help="triage with --samples: the step verifier and the check only, no step-wise GRADE (the model "
                        "is not loaded, the verifier's reader is); --fill-grade adds the GRADE analysis later")
    p.add_argument("--fill-grade", action="store_true",
                   help="with --samples: the GRADE analysis of the traces a --verifier-only run stored")
    p.add_argument("--chunk-size", type=positive_int, default=None, help="traces per Parquet part (work lost at most on a kill; default 8, 64 with --verifier-only)")
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
    if args.verifier_only or args.fill_grade:
        if not args.samples:
            raise InputError("--verifier-only and --fill-grade read a run's traces: give --samples FILE")
        if args.verifier_only and (args.fill_grade or args.no_verifier):
            raise InputError("--verifier-only runs the verifier alone: not with --fill-grade or --no-verifier")
        if args.verifier_only and args.engine == "ray":
            raise InputError("--verifier-only runs in this process (one forward pass of a small reader a trace)")
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
    if args.verifier_only:
        return _triage(args, say)
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
        report = analyze_traces(model, source, args.out, srank=args.srank, chunk_size=args.chunk_size or 8,
                                progress=not args.quiet, backend=args.engine, cluster=cluster,
                                verify=not args.no_verifier, fill_grade=args.fill_grade)
    elif not store.exists():
        raise InputError(f"{args.out} is not a trace store yet: give --samples FILE or --dataset ... --generate N")

    frame = store.traces()
    from ..traces.analysis import grade_pending

    pending = grade_pending(frame)
    if pending.any():  # triaged by --verifier-only: in the tables once --fill-grade has analysed them
        print(f"note: {int(pending.sum())} of {len(frame)} traces are triaged only (no GRADE analysis yet: "
              "--fill-grade)", file=sys.stderr)
        frame = frame[~pending].reset_index(drop=True)
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


def _triage(args: argparse.Namespace, say) -> int:
    """``--verifier-only``: every trace of --samples read by the step verifier and the check; a table (or --json) of
    the traces by the verifier's highest step probability, most suspect first."""
    from ..common.errors import InputError
    from ..models.models import load_model
    from ..steps.verifier import verifier_reader
    from ..traces import TraceStore, read_traces
    from ..traces.runs import triage_traces

    source = read_traces(args.samples, task=args.task, metric=args.metric, filter_name=args.filter,
                         prompt=args.prompt, limit=args.limit)
    for note in source.notes:
        print(f"note: {note}", file=sys.stderr)
    name = verifier_reader(args.model, args.device)
    if name is None:
        raise InputError("no step verifier is shipped: --verifier-only has nothing to run")
    reader = load_model(name, device=args.device, dtype="float32", say=say)
    report = triage_traces(reader, source, args.out, model=args.model, srank=args.srank,
                           chunk_size=args.chunk_size or 64, progress=not args.quiet)
    rows = triage_rows(TraceStore(args.out).traces())
    if args.json:
        print(json.dumps({"n": len(rows), "traces": rows}))
    else:
        rate = 60 * report.written / report.seconds if report.seconds and report.written else 0.0
        print(f"{report} ({rate:.1f} traces/min)")
        print("| trace | correct | verifier's highest P | suspect step | check's flagged steps | GRADE |")
        print("|---|---|---|---|---|---|")
        for r in rows[:50]:
            print(f"| {r['doc_id']}:{r['sample']} | {r['correct']} | {r['max_probability']:.2f} | "
                  f"{r['verifier']['suspect_step'] or 'none'} | {r['flagged_steps'] or '-'} | "
                  f"{'pending' if r['grade_pending'] else 'done'} |")
        if len(rows) > 50:
            print(f"... {len(rows) - 50} more (--json lists every trace)")
    for trace, reason in report.skipped[:10]:
        print(f"  skipped {trace}: {reason}", file=sys.stderr)
    return 0


def triage_rows(frame) -> list[dict]:
    """The store's traces that the verifier read, most suspect first (its highest step probability), each with
    its verdict, the check's flagged steps (1-based) and whether its GRADE analysis is still to come."""
    from ..traces.aggregates import json_doc_id
    from ..traces.analysis import grade_pending
    from ..traces.store import _missing

    pending = grade_pending(frame)
    rows = []
    for r, wait in zip(frame.itertuples(index=False), pending):
        if _missing(r.verifier_reader):
            continue
        p = [float(x) for x in r.step_verifier_probability]
        step = r.verifier_suspect_step
        rows.append({"doc_id": json_doc_id(r.doc_id, None, False), "sample": int(r.sample),
                     "correct": None if _missing(r.correct) else bool(r.correct), "n_steps": int(r.n_steps),
                     "max_probability": max(p) if p else 0.0,
                     "flagged_steps": [k + 1 for k, v in enumerate(r.step_check) if v > 0],
                     "grade_pending": bool(wait),
                     "verifier": {"reader": r.verifier_reader, "suspect_step": None if _missing(step) else int(step),
                                  "threshold": float(r.verifier_threshold), "step_probability": p}})
    return sorted(rows, key=lambda r: -r["max_probability"])
