"""Baseline passes for every labelled question of a model, the GPU part of the cross-fitted benchmark.

``python -m grade benchmark`` fills its caches for the questions its capped protocol selects; the
cross-fitted benchmark (every labelled question scored out of sample) needs every baseline's inputs for
every labelled question. This script fills the same caches (:func:`grade.verdict.detectors.baselines.cache_path`: one
JSONL line per question, keyed by id, resumed where a run stopped) with many questions decoded together,
which is what makes the run affordable on one GPU.

    python scripts/studies/score_all_questions.py --model qwen2.5-coder-1.5b-instruct --cache-dir data/benchmark \\
        --device cuda --dtype float32 --batch 64 triviaqa=data/labels/qwen2.5-coder-1.5b-instruct/triviaqa.jsonl.xz ...

Each ``NAME=FILE`` is one benchmark dataset (the cache's name) and its labels file; only labelled rows
(label 0 or 1) are scored. ``--parts`` picks the passes: ``main`` (greedy answer, IC, Judge) and
``samples`` (the K fresh samples of self-consistency and EigenScore), as :mod:`grade.benchmark` splits them.
"""

from __future__ import annotations

import argparse
import sys
import time
import zlib
from pathlib import Path

import grade
from grade.verdict.detectors.baselines import BaselineConfig, cache_path, score_items
from grade.batch.features import read_labelled

PASSES = {"main": ("answer", "ic", "judge"), "samples": ("samples",)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("datasets", nargs="+", help="NAME=LABELS_FILE: the cache's dataset name and its labels")
    parser.add_argument("--model", required=True)
    parser.add_argument("--cache-dir", type=Path, default=Path("data/benchmark"))
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--dtype", default=None)
    parser.add_argument("--batch", type=int, default=16, help="questions decoded together")
    # one value per flag (repeat it): a list-valued option would swallow the NAME=FILE arguments after it
    parser.add_argument("--parts", action="append", choices=tuple(PASSES), default=None,
                        help="main or samples (repeat for both; default both)")
    parser.add_argument("--limit", type=int, default=None, help="only the first N labelled rows of each file")
    parser.add_argument("--shard", default=None, metavar="I/N",
                        help="only the rows whose crc32(id) %% N == I: N lanes share a dataset, each with its own "
                             "--cache-dir (merge them back with scripts/build/merge_benchmark_caches.py)")
    args = parser.parse_args()
    args.parts = args.parts or list(PASSES)
    shard = None
    if args.shard:
        i, sep, n = args.shard.partition("/")
        if not (sep and i.isdigit() and n.isdigit() and int(i) < int(n)):
            parser.error(f"--shard {args.shard!r}: expected I/N with 0 <= I < N")
        shard = (int(i), int(n))

    jobs = []
    for spec in args.datasets:
        name, sep, path = spec.partition("=")
        if not sep or not name or not Path(path).is_file():
            parser.error(f"{spec!r}: expected NAME=LABELS_FILE with an existing file")
        jobs.append((name, Path(path)))
    lm = grade.load_model(args.model, device=args.device, dtype=args.dtype)
    config = BaselineConfig()
    for name, path in jobs:
        rows = [dict(r, dataset=name) for r in read_labelled(path)]
        if shard:
            rows = [r for r in rows if zlib.crc32(str(r["id"]).encode()) % shard[1] == shard[0]]
        if args.limit:
            rows = rows[: args.limit]
        for part in args.parts:
            out = cache_path(args.cache_dir, lm.name, name, part=part)
            t = time.perf_counter()
            records = score_items(lm, rows, out, config=config, parts=PASSES[part], questions_per_batch=args.batch)
            print(f"{name} {part}: {sum(str(r['id']) in records for r in rows)}/{len(rows)} rows in {out} "
                  f"({time.perf_counter() - t:.0f} s)", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
