"""``python -m bench``: the CPU benchmarks (targets 2, 3, 4 and 5 of the performance issue).

    python -m bench [--out runs/bench] [--threads 2] [--quick] [--skip labelling ...]

1. single-question GRADE_pre on the embedded SmolLM2 (64-token prompt) beside the reference recipe,
   with every route's rank-ratio error against the float64 literal formula;
2. step-wise GRADE_pos of K = 8 and 16 step chains of thought vs recomputing each prefix;
3. labelling throughput, batched vs one sample at a time (``bench/bench_labelling.py``);
4. traces per minute of ``grade traces`` beside the exact route (``bench/traces.py``, the test fixture's traces).

Prints Markdown tables and writes everything, with the machine's description and load, to
``<out>/cpu_results.json``.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

import torch

from .common import ROOT, fmt, machine, table, write_json

PARTS = ("pre", "steps", "labelling", "traces")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=Path, default=ROOT / "runs" / "bench")
    parser.add_argument("--threads", type=int, default=min(2, os.cpu_count() or 1))
    parser.add_argument("--quick", action="store_true", help="fewer repeats, K = 8 only")
    parser.add_argument("--skip", nargs="*", default=[], choices=PARTS)
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)

    import grade

    from . import cpu, stepwise

    payload: dict = {"machine": machine(), "started": time.strftime("%Y-%m-%d %H:%M:%S")}
    lm = grade.load_model("smollm2-135m-instruct")
    report: list[str] = [f"CPU: {payload['machine']['cpu']}, {args.threads} threads, load average "
                         f"{payload['machine']['load_average']}, torch {torch.__version__}", ""]

    if "pre" not in args.skip:
        pre = cpu.run(lm, repeats=3 if args.quick else 7, accuracy_questions=3 if args.quick else 6)
        payload["pre"] = pre
        t = pre["timings"]
        rows = [{"route": k, "median_s": v["median_s"], "spread": v["spread"], "process_cpu_s": v["median_process_cpu_s"]}
                for k, v in t.items()]
        report += [f"GRADE_pre, {pre['prompt_tokens']}-token prompt (target < {pre['target_s']} s: "
                   f"{'met' if pre['meets_target'] else 'NOT met'}; ours / floor {fmt(pre['ours_over_floor'])}, "
                   f"reference / ours {fmt(pre['reference_over_ours'])})", "", table(rows, ["route", "median_s", "spread", "process_cpu_s"]), ""]
        acc = pre["accuracy"]["max_rel_error"]
        report += [f"Largest relative error of rank ratios vs the float64 literal formula ({pre['accuracy']['questions']} questions; "
                   f"reference solver failures: {pre['accuracy']['reference_solver_failures']})", "",
                   table([{"route": k, "max_rel_error": v} for k, v in acc.items()], ["route", "max_rel_error"]), ""]
        write_json(args.out / "cpu_results.json", payload)

    if "steps" not in args.skip:
        steps = stepwise.run(lm, ks=(8,) if args.quick else (8, 16), repeats=2 if args.quick else 3, baseline_repeats=1 if args.quick else 2)
        payload["steps"] = steps
        rows = [{"K": s["K"], "tokens": s["tokens"], "route": s["route"], "ours_s": s["ours"]["median_s"],
                 "other_route_s": next(v["median_s"] for key, v in s.items() if key.startswith("ours_") and key.endswith("_route")),
                 "prefix_recompute_s": s["prefix_recompute"]["median_s"],
                 "speedup": s["speedup"], "target": s["target_speedup"], "diff_vs_recompute": s["max_rel_diff_ours_vs_prefix_recompute"],
                 "err_vs_literal": s["max_rel_error_vs_literal_same_inputs"]} for s in steps]
        report += ["Step-wise GRADE_pos vs recomputing each prefix", "", table(rows, list(rows[0])), ""]
        write_json(args.out / "cpu_results.json", payload)

    script = Path(__file__).resolve().parent / "bench_labelling.py"
    if "labelling" not in args.skip and script.exists():
        cmd = [sys.executable, str(script), "--threads", str(args.threads)] + (["--questions", "4"] if args.quick else [])
        done = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT)
        payload["labelling"] = {"command": cmd[1:], "returncode": done.returncode, "stdout": done.stdout, "stderr_tail": done.stderr[-2000:]}
        report += ["Labelling throughput (bench/bench_labelling.py)", "", done.stdout.strip() or done.stderr[-2000:], ""]
        write_json(args.out / "cpu_results.json", payload)

    if "traces" not in args.skip:
        from . import traces

        result = traces.run(lm, traces.FIXTURE, limit=3 if args.quick else None)
        payload["traces"] = result
        report += ["Traces per minute (bench/traces.py)", "", traces.summary(result), ""]
        write_json(args.out / "cpu_results.json", payload)

    payload["finished"] = time.strftime("%Y-%m-%d %H:%M:%S")
    payload["load_average_at_end"] = os.getloadavg() if hasattr(os, "getloadavg") else None
    write_json(args.out / "cpu_results.json", payload)
    text = "\n".join(report)
    (args.out / "cpu_summary.md").write_text(text + "\n")
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
