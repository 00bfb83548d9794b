"""One long reasoning trace on the Reasoning trace page: today's route beside the page's new one.

    python -m bench.trace_page [--model qwen2.5-coder-1.5b-instruct] [--steps 20] [--threads 2] [--repeats 1]

The trace is one of the model's own GSM8K answers from the step-error benchmark
(``results/step_errors/<model>/benchmark.jsonl.xz``), the one whose step count is closest to ``--steps``.
Each route runs in a child process of its own (model load, one untimed warm-up on a short trace, then the
timed analysis), so that each peak RSS is that route's whole process:

* **exact** (the page until now): ``grade.analyze(..., steps=True, spectra=True)``, float64
  eigen-decompositions of every step and layer;
* **fast** (the page now, and ``grade traces``): ``spectra=False, token_scores=True``: stable ranks through
  their identities and token shock from ``C_g = ΔΔᵀ`` where ``C_h`` is certified full rank (the exact
  route's values, checked below), plus token surprisal and the step check.

Prints a Markdown table with the ratios measured in this run and writes JSON beside it.
"""

from __future__ import annotations

import argparse
import json
import lzma
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from .common import ROOT, machine, write_json

ROUTES = ("exact", "fast")


def pick_trace(model: str, steps: int) -> dict:
    from grade.losses import split_steps

    path = ROOT / "results" / "step_errors" / model / "benchmark.jsonl.xz"
    rows = [json.loads(line) for line in lzma.open(path, "rt")]
    own = [r for r in rows if r["error_kind"] == "own arithmetic slip"] or rows
    return min(own, key=lambda r: (abs(len(split_steps(r["response"])) - steps), r["doc_id"]))


def child(route: str, model: str, trace_file: Path, out: Path, threads: int) -> None:
    """One route in this process: load, warm up, analyse the trace once; writes seconds and results."""
    import numpy as np
    import torch

    import grade
    from grade.locate import DEFAULT_LOCATOR, locate, ranked_steps, signals_of_result

    torch.set_num_threads(threads)
    trace = json.loads(trace_file.read_text())
    lm = grade.load_model(model)
    options = dict(spectra=True) if route == "exact" else dict(spectra=False, token_scores=True)
    grade.analyze(lm, "What is 2 + 3?", task="gsm8k", loss="pos", response="2 + 3 = 5. #### 5", steps=True, **options)
    t = time.perf_counter()
    result = grade.analyze(lm, trace["question"], task="gsm8k", loss="pos", response=trace["response"], steps=True,
                           **options)
    seconds = time.perf_counter() - t
    signals = signals_of_result(result)[0]
    start = result.response_start or 0
    out.write_text(json.dumps({
        "seconds": seconds, "steps": len(result.steps), "tokens": len(result.input_ids) - start,
        "timings": result.timings, "rank_ratio": np.asarray(result.rank_ratio).tolist(),
        "token_scores": np.nan_to_num(result.token_scores[:, start:]).tolist(),
        "suspect_step": ranked_steps(locate(signals, DEFAULT_LOCATOR))[0]}))


def run_route(route: str, model: str, trace_file: Path, folder: Path, threads: int) -> dict:
    out = folder / f"{route}.json"
    proc = subprocess.Popen([sys.executable, "-m", "bench.trace_page", "--child", route, "--model", model,
                             "--trace-file", str(trace_file), "--result", str(out), "--threads", str(threads)],
                            cwd=ROOT)
    _, status, usage = os.wait4(proc.pid, 0)
    if status != 0:
        raise SystemExit(f"the {route} route failed (status {status})")
    data = json.loads(out.read_text())
    data["peak_rss_gb"] = usage.ru_maxrss / 1024**2  # kilobytes on Linux
    return data


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.trace_page", description=__doc__.split("\n")[0])
    parser.add_argument("--model", default="qwen2.5-coder-1.5b-instruct")
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--threads", type=int, default=min(2, os.cpu_count() or 1))
    parser.add_argument("--repeats", type=int, default=1, help="route pairs, exact then fast, each in fresh processes")
    parser.add_argument("--routes", nargs="+", choices=ROUTES, default=list(ROUTES), help="time only these routes")
    parser.add_argument("--out", type=Path, default=ROOT / "runs" / "bench")
    parser.add_argument("--child", choices=ROUTES, help=argparse.SUPPRESS)
    parser.add_argument("--trace-file", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--result", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        child(args.child, args.model, args.trace_file, args.result, args.threads)
        return 0

    import numpy as np

    trace = pick_trace(args.model, args.steps)
    pairs = []
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        trace_file = folder / "trace.json"
        trace_file.write_text(json.dumps(trace))
        for _ in range(args.repeats):
            pairs.append({route: run_route(route, args.model, trace_file, folder, args.threads) for route in args.routes})
    first = pairs[0]
    if set(args.routes) != set(ROUTES):  # one route alone: its numbers, no comparison
        for route in args.routes:
            print(f"{route}: {first[route]['seconds']:.1f} s, {first[route]['steps']} steps, {first[route]['tokens']} "
                  f"tokens, peak RSS {first[route]['peak_rss_gb']:.2f} GB, suspect step {first[route]['suspect_step']}")
        return 0
    ratio_err = float(np.max(np.abs(np.array(first["fast"]["rank_ratio"]) - np.array(first["exact"]["rank_ratio"]))))
    exact_scores, fast_scores = np.array(first["exact"]["token_scores"]), np.array(first["fast"]["token_scores"])
    score_err = float(np.max(np.abs(fast_scores - exact_scores)) / max(np.max(np.abs(exact_scores)), 1e-30))
    lines = [f"Trace {trace['doc_id']}: {first['fast']['steps']} steps, {first['fast']['tokens']} response tokens "
             f"({args.model}, {args.threads} threads)", "",
             "| route | analysis (s) | peak RSS of the process (GB) |", "|---|---|---|"]
    for route in ROUTES:
        seconds = [p[route]["seconds"] for p in pairs]
        rss = [p[route]["peak_rss_gb"] for p in pairs]
        lines.append(f"| {route} | {' / '.join(f'{s:.1f}' for s in seconds)} | {' / '.join(f'{r:.2f}' for r in rss)} |")
    ratios = [p["exact"]["seconds"] / p["fast"]["seconds"] for p in pairs]
    lines += ["", f"exact / fast time, pair by pair: {', '.join(f'{r:.1f}x' for r in ratios)}; "
              f"largest rank-ratio difference {ratio_err:.2e}, largest token-score difference {score_err:.2e} "
              f"(relative to the largest score); suspect step exact {first['exact']['suspect_step']}, "
              f"fast {first['fast']['suspect_step']}"]
    print("\n".join(lines))
    for pair in pairs:  # the arrays were for the comparison above
        for data in pair.values():
            data.pop("token_scores"), data.pop("rank_ratio")
    write_json(args.out / "trace_page.json", {"machine": machine(), "trace": trace["doc_id"], "pairs": pairs,
                                               "max_rank_ratio_difference": ratio_err,
                                               "max_token_score_difference": score_err})
    return 0


if __name__ == "__main__":
    sys.exit(main())
