"""One long reasoning trace on the Reasoning trace page: two routes side by side, each in a fresh process.

    python -m bench.trace_page [--model qwen2.5-coder-1.5b-instruct] [--steps 20] [--threads 2] [--repeats 1]
                               [--routes unbounded bounded]

The trace is one of the model's own GSM8K answers from the step-error benchmark
(``results/step_errors/<model>/benchmark.jsonl.xz``), the one whose step count is closest to ``--steps``.
Each route runs in a child process of its own (model load, one untimed warm-up on a short trace, then the
timed analysis), so that each peak RSS is that route's whole process:

* **exact** (the page until now): ``grade.analyze(..., steps=True, spectra=True)``, float64
  eigen-decompositions of every step and layer;
* **fast** (the page now, and ``grade traces``): ``spectra=False, token_scores=True``: stable ranks through
  their identities and token shock from ``C_g = ΔΔᵀ`` where ``C_h`` is certified full rank (the exact
  route's values, checked below), plus token surprisal and the step check;
* **unbounded**: the fast route with every step sharing one forward pass (``step_passes="shared"``, the route
  a GPU takes) and no memory bound (``step_memory_mb=None``): Δ of all K steps held at once;
* **bounded**: the same with the default bound (:data:`grade.gradients.analysis.DEFAULT_STEP_MEMORY_MB`): the steps
  in groups whose Δ fit it, each group one forward pass over its prefix.

The first route given is the baseline of the comparison. Prints a Markdown table with the ratios measured in
this run and writes JSON beside it.
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

ROUTES = {
    "exact": dict(spectra=True),
    "fast": dict(spectra=False, token_scores=True),
    "unbounded": dict(spectra=False, token_scores=True, step_passes="shared", step_memory_mb=None),
    "bounded": dict(spectra=False, token_scores=True, step_passes="shared"),
}


def pick_trace(model: str, steps: int) -> dict:
    from grade.gradients.losses import split_steps

    path = ROOT / "results" / "step_errors" / model / "benchmark.jsonl.xz"
    rows = [json.loads(line) for line in lzma.open(path, "rt")]
    own = [r for r in rows if r["error_kind"] == "own arithmetic slip"] or rows
    return min(own, key=lambda r: (abs(len(split_steps(r["response"])) - steps), r["doc_id"]))


def child(route: str, model: str, trace_file: Path, out: Path, threads: int) -> None:
    """One route in this process: load, warm up, analyse the trace once; writes seconds and results."""
    import numpy as np
    import torch

    import grade
    from grade.steps.locate import DEFAULT_LOCATOR, locate, ranked_steps, signals_of_result

    torch.set_num_threads(threads)
    trace = json.loads(trace_file.read_text())
    lm = grade.load_model(model)
    options = ROUTES[route]
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
    load_before = os.getloadavg()
    proc = subprocess.Popen([sys.executable, "-m", "bench.trace_page", "--child", route, "--model", model,
                             "--trace-file", str(trace_file), "--result", str(out), "--threads", str(threads)],
                            cwd=ROOT)
    _, status, usage = os.wait4(proc.pid, 0)
    if status != 0:
        raise SystemExit(f"the {route} route failed (status {status})")
    data = json.loads(out.read_text())
    data["peak_rss_gb"] = usage.ru_maxrss / 1024**2  # kilobytes on Linux
    data["load_average_before_after"] = [load_before[0], os.getloadavg()[0]]
    return data


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.trace_page", description=__doc__.split("\n")[0])
    parser.add_argument("--model", default="qwen2.5-coder-1.5b-instruct")
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--threads", type=int, default=min(2, os.cpu_count() or 1))
    parser.add_argument("--repeats", type=int, default=1, help="rounds of the routes, each route in a fresh process")
    parser.add_argument("--routes", nargs="+", choices=list(ROUTES), default=["unbounded", "bounded"],
                        help="the routes, the baseline first (one route alone: its numbers, no comparison)")
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
    if len(args.routes) == 1:  # one route alone: its numbers, no comparison
        route = args.routes[0]
        print(f"{route}: {first[route]['seconds']:.1f} s, {first[route]['steps']} steps, {first[route]['tokens']} "
              f"tokens, peak RSS {first[route]['peak_rss_gb']:.2f} GB, suspect step {first[route]['suspect_step']}")
        return 0
    base, other = args.routes[0], args.routes[1]
    ratio_err = float(np.max(np.abs(np.array(first[other]["rank_ratio"]) - np.array(first[base]["rank_ratio"]))))
    base_scores, other_scores = np.array(first[base]["token_scores"]), np.array(first[other]["token_scores"])
    score_err = float(np.max(np.abs(other_scores - base_scores)) / max(np.max(np.abs(base_scores)), 1e-30))
    lines = [f"Trace {trace['doc_id']}: {first[base]['steps']} steps, {first[base]['tokens']} response tokens "
             f"({args.model}, {args.threads} threads)", "",
             "| route | analysis (s) | peak RSS of the process (GB) | passes (step pieces) |", "|---|---|---|---|"]
    for route in args.routes:
        seconds = [p[route]["seconds"] for p in pairs]
        rss = [p[route]["peak_rss_gb"] for p in pairs]
        pieces = first[route]["timings"].get("step_pieces")
        lines.append(f"| {route} | {' / '.join(f'{s:.1f}' for s in seconds)} | {' / '.join(f'{r:.2f}' for r in rss)} "
                     f"| {'-' if pieces is None else int(pieces)} |")
    time_ratios = [p[other]["seconds"] / p[base]["seconds"] for p in pairs]
    rss_ratios = [p[other]["peak_rss_gb"] / p[base]["peak_rss_gb"] for p in pairs]
    lines += ["", f"{other} / {base}, round by round: time {', '.join(f'{r:.2f}x' for r in time_ratios)}, "
              f"peak RSS {', '.join(f'{r:.2f}x' for r in rss_ratios)}; "
              f"largest rank-ratio difference {ratio_err:.2e}, largest token-score difference {score_err:.2e} "
              f"(relative to the largest score); suspect step {base} {first[base]['suspect_step']}, "
              f"{other} {first[other]['suspect_step']}"]
    print("\n".join(lines))
    for pair in pairs:  # the arrays were for the comparison above
        for data in pair.values():
            data.pop("token_scores"), data.pop("rank_ratio")
    write_json(args.out / f"trace_page_{'_'.join(args.routes)}.json", {"machine": machine(), "trace": trace["doc_id"],
                                                                    "routes": args.routes, "pairs": pairs,
                                               "max_rank_ratio_difference": ratio_err,
                                               "max_token_score_difference": score_err})
    return 0


if __name__ == "__main__":
    sys.exit(main())
