"""``python -m grade steperrors``: the step-error benchmark. How often does each locator point at the step
where a reasoning trace first goes wrong?

    python -m grade steperrors --model qwen2.5-coder-1.5b-instruct --out runs/steperrors \\
        --labels data/labels/qwen2.5-coder-1.5b-instruct/gsm8k.jsonl.xz --device cuda

Builds ``OUT/benchmark.jsonl`` (GSM8K dev solutions with one injected error each, and the model's own wrong
traces with a verified arithmetic slip, see :mod:`grade.steps.step_errors`), analyses it step-wise into the trace
store ``OUT/store`` (resumable, as ``python -m grade traces``), and writes every locator's top-1, top-3 and
step-AUROC per source and error kind to ``OUT/results.json`` and ``OUT/results.md``. With ``--store`` only,
it scores an existing trace store whose traces carry known or annotated error steps.
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
from pathlib import Path

from .common import add_model_arguments, add_threads_argument, load_model_from_args, positive_int


def register(sub) -> None:
    p = sub.add_parser("steperrors", help="step-error localization benchmark -> results per locator",
                       description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_model_arguments(p)
    p.add_argument("--out", required=True, help="folder for the benchmark, its trace store and the results")
    p.add_argument("--dataset", default="gsm8k", help="problems with reference solutions (default: GSM8K dev)")
    p.add_argument("--injected", type=positive_int, default=400, help="solutions with an injected error")
    p.add_argument("--labels", default=None, help="the model's labels file: own wrong majority answers")
    p.add_argument("--generated", default=None,
                   help="a labels file with whole samples (python -m grade traces --generate writes one): every wrong sample")
    p.add_argument("--max-own", type=positive_int, default=None, help="at most this many own traces")
    p.add_argument("--store", default=None, help="score this existing trace store (its known / annotated error steps) instead")
    p.add_argument("--machine", default=None, help="where it runs, for the results' note (default: this machine's CPU)")
    add_threads_argument(p)
    p.add_argument("--quiet", action="store_true")
    p.set_defaults(func=run)


def _rows(path) -> list[dict]:
    from ..common.io import iter_jsonl

    return [row for _, row, problem in iter_jsonl(Path(path)) if not problem]


def run(args: argparse.Namespace) -> int:
    from ..common.errors import InputError
    from ..common.io import atomic_write
    from ..steps.step_errors import build_benchmark, results_markdown, score_store
    from ..tasks.tasks import load_questions
    from ..traces import TraceStore, analyze_traces, read_traces

    if args.threads:
        import torch

        torch.set_num_threads(args.threads)
    out = Path(args.out)
    if args.store:
        store = TraceStore(args.store)
        if not store.exists():
            raise InputError(f"{args.store} is not a trace store")
    else:
        rows = [{"id": q.id, "question": q.question, "solution": q.solution, "answers": q.answers}
                for q in load_questions(args.dataset)]
        bench = out / "benchmark.jsonl"
        counts = build_benchmark(rows, bench, label_rows=_rows(args.labels) if args.labels else (),
                                 generated_rows=_rows(args.generated) if args.generated else (),
                                 n_injected=args.injected, max_own=args.max_own)
        print("benchmark: " + ", ".join(f"{k} {v}" for k, v in sorted(counts.items())), file=sys.stderr)
        say = None if args.quiet else (lambda line: print(line, file=sys.stderr))
        lm = load_model_from_args(args, say)
        store = TraceStore(out / "store")
        report = analyze_traces(lm, read_traces(bench), store.path, progress=not args.quiet)
        print(str(report), file=sys.stderr)
    results = score_store(store.traces(), store.tokens())
    machine = args.machine or f"{platform.processor() or platform.machine()} ({platform.node()})"
    results["machine"] = machine
    results["model"] = store.meta().get("model")
    out.mkdir(parents=True, exist_ok=True)
    atomic_write(out / "results.json", json.dumps(results, indent=1))
    text = results_markdown(results, machine=machine)
    atomic_write(out / "results.md", text + "\n")
    print(text)
    return 0
