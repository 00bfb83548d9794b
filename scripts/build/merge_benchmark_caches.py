"""Add the baseline records that GPU lanes wrote (scripts/gpu/crossfit_gpu.sh: OUT_DIR/bench and one cache folder per
shard) to the caches the benchmark reads, by question id.

    python scripts/build/merge_benchmark_caches.py OUT_DIR/bench OUT_DIR/shards/* --into data/benchmark

Every ``<model>/baselines/<name>.jsonl`` under a source is appended to the same path under ``--into``, record by
record, skipping ids the destination already holds and id-only lines (the lanes are seeded with those to resume).
Prints what each file gained.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from grade.verdict.detectors.baselines import read_cache


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("sources", nargs="+", type=Path, help="cache roots holding <model>/baselines/*.jsonl")
    parser.add_argument("--into", type=Path, required=True, help="the benchmark's cache root (data/benchmark)")
    args = parser.parse_args()
    gained: dict[Path, int] = {}
    for source in args.sources:
        for path in sorted(source.glob("*/baselines/*.jsonl")):
            dest = args.into / path.relative_to(source)
            have = read_cache(dest)
            new = [r for i, r in read_cache(path).items() if i not in have and set(r) - {"id"}]
            if new:
                dest.parent.mkdir(parents=True, exist_ok=True)
                with dest.open("a") as fh:
                    fh.writelines(json.dumps(r) + "\n" for r in new)
            gained[dest] = gained.get(dest, 0) + len(new)
    for dest, n in sorted(gained.items()):
        print(f"{dest}: +{n} (now {len(read_cache(dest))})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
