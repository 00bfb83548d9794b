"""Completion labels (grade.steps.rollouts) of the model's own GSM8K traces, for the step verifier's training.

    python scripts/studies/step_rollouts.py --device cuda --dtype bfloat16 --out OUT.jsonl [--shard 0/4] [--time-limit S]

The traces: the majority reply of every labelled GSM8K question (``data/labels/<model>/gsm8k.jsonl.xz``) whose
labelled answer is not right (label 0 or undecided: these hold the errors; label-1 replies are taken as
correct without sampling), never a problem of an annotated test row (grade.steps.real_errors.held_out_problems).
Each finished trace is one line of ``--out`` at once; a run resumes from what that file holds, and
``--shard I/N`` takes the traces whose problem hashes to I of N (one shard per GPU). Back on a CPU the shards are
joined into ``data/step_rollouts/<model>/gsm8k.jsonl.xz``, which scripts/studies/train_step_verifier.py reads.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import lzma
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

MODEL = "qwen2.5-coder-1.5b-instruct"


def candidate_traces(labels_path: Path) -> list[dict]:
    """The traces to roll out, in file order (see the module docstring)."""
    from grade.steps.real_errors import annotated_traces, held_out_problems

    banned = held_out_problems(annotated_traces())
    rows = [json.loads(line) for line in lzma.open(labels_path, "rt", encoding="utf-8") if line.strip()]
    return [{"id": str(r["id"]), "problem": str(r["id"]), "question": r["question"], "trace": r["majority"].strip(),
             "answers": r["answers"], "task": r.get("task", "gsm8k")}
            for r in rows if r.get("label") != 1 and r.get("majority", "").strip() and str(r["id"]) not in banned]


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default=MODEL)
    p.add_argument("--labels", type=Path, default=None, help="default data/labels/<model>/gsm8k.jsonl.xz")
    p.add_argument("--device", default="cuda")
    p.add_argument("--dtype", default="bfloat16", help="the labels do not need float32's bit-for-bit features")
    p.add_argument("--n", type=int, default=8, help="continuations per step")
    p.add_argument("--max-new-tokens", type=int, default=320)
    p.add_argument("--prompts-per-batch", type=int, default=64)
    p.add_argument("--shard", default="0/1")
    p.add_argument("--limit", type=int, default=None, help="at most this many traces (a trial)")
    p.add_argument("--time-limit", type=float, default=None, help="stop starting new batches after this many seconds")
    p.add_argument("--out", type=Path, required=True)
    args = p.parse_args(argv)
    index, count = (int(x) for x in args.shard.split("/"))
    labels = args.labels or ROOT / "data/labels" / args.model / "gsm8k.jsonl.xz"
    traces = [t for t in candidate_traces(labels)
              if int(hashlib.md5(t["problem"].encode()).hexdigest(), 16) % count == index]
    # every shard file of the folder counts: a rerun with another number of shards resumes too
    done = {json.loads(line)["id"] for f in args.out.parent.glob("*.jsonl") if f.is_file()
            for line in f.read_text().splitlines() if line.strip()}
    todo = [t for t in traces if t["id"] not in done][: args.limit]
    print(f"shard {args.shard}: {len(traces)} traces, {len(done)} done, {len(todo)} to go", flush=True)
    if not todo:
        return 0
    import grade
    from grade.steps.rollouts import rollout_labels

    lm = grade.load_model(args.model, device=args.device, dtype=args.dtype)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    with args.out.open("a", encoding="utf-8") as fh:
        def write(label):
            fh.write(json.dumps(label.to_dict()) + "\n")
            fh.flush()

        # in groups of traces, so that the time limit is checked between groups and each group's lines land
        group = max(1, args.prompts_per_batch // 4)
        for start in range(0, len(todo), group):
            if args.time_limit and time.perf_counter() - t0 > args.time_limit:
                print(f"time limit: stopped after {start} traces", flush=True)
                break
            rollout_labels(lm, todo[start:start + group], n=args.n, max_new_tokens=args.max_new_tokens,
                           prompts_per_batch=args.prompts_per_batch, on_label=write)
            print(f"{min(start + group, len(todo))}/{len(todo)} traces, {time.perf_counter() - t0:.0f} s", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
