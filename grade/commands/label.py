"""``python -m grade label``: sample answers, score them, write answerable / unanswerable labels (JSONL).

Example::

    python -m grade label --model smollm2-135m-instruct --dataset triviaqa --limit 100 \\
        --matcher lenient --out labels/triviaqa.jsonl

Running the same command again resumes: questions already in ``--out`` are skipped.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from .common import add_model_arguments, int_range, non_negative_int, positive_int, thread_count
from .engine import add_engine_arguments, check_engine_arguments, model_for_engine, say_precision_note

#: a longer answer than any task needs, and more than a small model's context; refused when parsed
MAX_NEW_TOKENS = 8192


def default_threads() -> int:
    """Half the cores: torch's default (all cores) slows to a crawl when other processes share them."""
    return max(1, (os.cpu_count() or 2) // 2)


def register(sub) -> None:
    p = sub.add_parser("label", help="label questions answerable / unanswerable by sampling", description=__doc__,
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    add_model_arguments(p)
    p.add_argument("--dataset", required=True,
                   help="triviaqa, nq_open, hotpotqa, mmlu, gsm8k, math, a sample_data set (facts_known, ...), "
                        "hf:<name>[:<split>] (the full split from the Hugging Face Hub: needs the hf extra and "
                        "network once) or a JSONL path")
    p.add_argument("--out", required=True, help="labels file (JSONL); an existing file is resumed")
    p.add_argument("--limit", type=positive_int, default=None, help="only the first N questions (after --offset)")
    p.add_argument("--offset", type=non_negative_int, default=0, help="skip the first N questions of the dataset")
    p.add_argument("--samples", type=int_range(1, 1000), default=None, help="samples per question (default 10)")
    p.add_argument("--matcher", choices=("strict", "lenient"), default="strict",
                   help="strict: reference exact match; lenient: the gold answer appears in the reply (small models)")
    p.add_argument("--with-context", action="store_true", help="put the row's context (e.g. HotpotQA paragraphs) in the prompt")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--max-new-tokens", type=int_range(1, MAX_NEW_TOKENS), default=None,
                   help="answer length (default: per task, 12 for short QA)")
    p.add_argument("--batch-size", "--batch", dest="batch", type=int_range(1, 4096), default=None,
                   help="questions sampled together (default: as many as the device's free memory holds with "
                        "their samples, at most 8 on a CPU); batching changes no sample")
    p.add_argument("--sample-chars", type=positive_int, default=None, help="store samples cut to this many characters")
    p.add_argument("--threads", type=thread_count, default=default_threads(), help="torch CPU threads (default: half the cores)")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    add_engine_arguments(p)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    import torch

    from ..common.errors import InputError
    from ..common.io import check_output_file, ensure_output_folder, hold_output_lock
    from ..batch.labeling import label_questions
    from ..tasks.tasks import load_questions

    torch.set_num_threads(args.threads)
    check_engine_arguments(args)
    bad_rows: list[str] = []
    questions = load_questions(args.dataset, limit=args.limit, offset=args.offset, with_context=args.with_context,
                               skipped=bad_rows)
    for where in bad_rows[:10]:
        print(f"  skipped {where}", file=sys.stderr)
    if bad_rows:
        print(f"skipped {len(bad_rows)} bad row(s) of {args.dataset}", file=sys.stderr)
    if not questions:
        raise InputError(f"--offset {args.offset} is past the last question of {args.dataset}")
    ensure_output_folder(Path(args.out).expanduser().parent, "labels folder")
    check_output_file(args.out, "labels file")
    hold_output_lock(args.out, "the labels file")  # one writer per labels file, until this process ends
    model, cluster = model_for_engine(args, (lambda line: print(line, file=sys.stderr)) if not args.quiet else None)
    say_precision_note(args, args.batch, args.quiet)
    if cluster is None and args.max_new_tokens is not None and args.max_new_tokens >= model.max_context:
        raise InputError(f"--max-new-tokens {args.max_new_tokens} does not fit in {model.name}'s context of "
                         f"{model.max_context} tokens")
    summary = label_questions(
        model,
        questions,
        args.out,
        n_samples=args.samples,
        matcher=args.matcher,
        seed=args.seed,
        max_new_tokens=args.max_new_tokens,
        questions_per_batch=args.batch,
        sample_chars=args.sample_chars,
        progress=not args.quiet,
        backend=args.engine,
        cluster=cluster,
    )
    if summary.run is not None:  # a Ray run reports its workers and the chunks it sent again
        print(summary.run)
        print(summary.balance_line())
        return 0
    for where in summary.too_long[:10]:
        print(f"  skipped {where}", file=sys.stderr)
    if summary.too_long:
        print(f"skipped {len(summary.too_long)} question(s) too long for {model.name}", file=sys.stderr)
    print(f"{summary.path}: {summary.new} labelled now, {summary.skipped} already there ({summary.seconds:.1f} s)")
    print(summary.balance_line())
    return 0
