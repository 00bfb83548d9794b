"""The annotated real traces (``grade/datasets/real_step_errors``) as trace JSONL for ``python -m grade traces``.

    python scripts/studies/annotated_traces_jsonl.py --out DIR [--files gsm8k_qwen.a gsm8k_qwen.b] [--split test] [--shards 3]

Writes ``DIR/<shard>.jsonl`` (one line per trace, :func:`grade.steps.real_errors.trace_line`: the first wrong step
as the 1-based ``error_step``), spread over ``--shards`` files by a hash of the trace's id, so that several
``grade traces`` runs (one per GPU) share the work and each resumes on its own store. Rows of one annotation
file keep their order within a shard; ids are made unique per file (``<file>:<id>``).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--files", nargs="+", default=None, help="annotation file names without .jsonl (default all)")
    p.add_argument("--split", choices=("dev", "test"), default=None, help="default both")
    p.add_argument("--shards", type=int, default=1)
    args = p.parse_args(argv)
    from grade.steps.real_errors import annotation_files, annotation_rows, trace_line

    names = [n for n in annotation_files() if args.files is None or n.split(".jsonl")[0] in args.files]
    args.out.mkdir(parents=True, exist_ok=True)
    shards = [[] for _ in range(args.shards)]
    for name in names:
        for row in annotation_rows(name):
            if args.split and row["split"] != args.split:
                continue
            line = trace_line(row)
            line["doc_id"] = f"{name.split('.jsonl')[0]}:{row['id']}"
            shards[int(hashlib.sha1(line["doc_id"].encode()).hexdigest(), 16) % args.shards].append(line)
    for i, lines in enumerate(shards):
        (args.out / f"{i}.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
        print(f"{args.out / f'{i}.jsonl'}: {len(lines)} traces")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
