"""GRADE's step features of every trace the step verifier learns from or is scored on (a GPU job).

    python scripts/studies/step_grade_features.py --reader qwen2.5-coder-1.5b-instruct --device cuda --shard 0/6 \
        --out OUT/0.jsonl [--time-limit 420]

The step-wise ``pos`` analysis (``grade.analyze(..., loss="pos", steps=True)``, fast path with token scores) of
each trace of ``scripts/studies/step_verifier_features.py``'s list (``--own`` included), mapped onto the verifier's
steps (:func:`grade.steps.verifier.step_token_ranges`: the annotators' step k stays step k; a step too short to
own a token gets nulls). One JSON line per trace, appended as soon as it is computed, so that a run stops any
time and resumes (keys already in any ``*.jsonl`` beside ``--out`` are skipped):

    {"key": ..., "steps": K, "ratios": [[L floats] or null, ...], "loss": [...], "shock_max": [...],
     "shock_mean": [...], "seconds": s}

``ratios``: each step's rank ratio per layer; ``loss``: the step's cross-entropy; ``shock_*``: the per-token
epistemic shock (:func:`grade.steps.locate.token_shock`, within the trace) over the step's tokens.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts" / "studies"))


def _r(x) -> float | None:
    return None if x is None or not np.isfinite(x) else round(float(x), 5)


def trace_grade_features(lm, question: str, trace: str, task: str) -> dict:
    """GRADE's per-step features of one trace on the verifier's steps (see the module's docstring)."""
    import grade
    from grade.gradients.losses import split_steps
    from grade.steps.locate import token_shock
    from grade.steps.verifier import step_token_ranges

    result = grade.analyze(lm, question, task=task, loss="pos", response=trace, steps=True, spectra=False,
                           token_scores=True)
    start = result.response_start
    ranges = step_token_ranges(lm.tokenizer, list(result.input_ids[start:]), split_steps(trace))
    by_start = {s.start - start: s for s in result.steps}
    shock = token_shock(result.token_scores[:, start:])
    out = {"steps": len(ranges), "ratios": [], "loss": [], "shock_max": [], "shock_mean": []}
    for first, end in ranges:
        step = by_start.get(first) if end > first else None
        out["ratios"].append(None if step is None else [_r(v) for v in np.asarray(step.rank_ratio)])
        out["loss"].append(None if step is None else _r(step.loss_value))
        part = shock[first:end]
        out["shock_max"].append(_r(part.max()) if part.size else None)
        out["shock_mean"].append(_r(part.mean()) if part.size else None)
    return out


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--reader", default="qwen2.5-coder-1.5b-instruct")
    p.add_argument("--device", default="cpu")
    p.add_argument("--dtype", default="float32")
    p.add_argument("--shard", default="0/1", help="i/n: every n-th trace from the i-th")
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--time-limit", type=float, default=None, help="stop starting traces after this many seconds")
    p.add_argument("--limit", type=int, default=None)
    args = p.parse_args(argv)
    import grade
    from grade.steps.verifier import trace_key
    from step_verifier_features import all_traces

    annotated, train = all_traces(own=True)
    i, n = map(int, args.shard.split("/"))
    order = (annotated + train)[i::n][: args.limit]
    done = set()  # every lane's file: a run with another lane count resumes the same work
    for path in args.out.parent.glob("*.jsonl"):
        done |= {json.loads(line)["key"] for line in path.read_text().splitlines() if line.strip()}
    todo = [t for t in order if trace_key(args.reader, t.question, t.trace, t.task) not in done]
    print(f"shard {args.shard}: {len(order)} traces, {len(order) - len(todo)} done before", flush=True)
    lm = grade.load_model(args.reader, device=args.device, dtype=args.dtype)
    t0 = time.perf_counter()
    args.out.parent.mkdir(parents=True, exist_ok=True)
    with args.out.open("a") as fh:
        for j, t in enumerate(todo):
            if args.time_limit and time.perf_counter() - t0 > args.time_limit:
                print(f"time limit: {j} of {len(todo)} traces this run", flush=True)
                return 0
            t1 = time.perf_counter()
            try:
                row = trace_grade_features(lm, t.question, t.trace, t.task)
            except Exception as exc:  # a trace the analysis refuses (too long) is named and skipped
                print(f"skipped {t.id}: {type(exc).__name__}: {exc}", flush=True)
                continue
            row = {"key": trace_key(args.reader, t.question, t.trace, t.task), **row,
                   "seconds": round(time.perf_counter() - t1, 3)}
            fh.write(json.dumps(row) + "\n")
            fh.flush()
            if j % 50 == 0:
                print(f"{j + 1}/{len(todo)} {time.perf_counter() - t0:.0f} s", flush=True)
    print(f"done: {len(todo)} traces in {time.perf_counter() - t0:.0f} s", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
