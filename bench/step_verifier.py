"""The step verifier's answer for one 20-step trace, against the full step-wise GRADE analysis of the same trace.

    python -m bench.step_verifier [--reader smollm2-135m-instruct] [--grade-model smollm2-135m-instruct]
                                  [--steps 20] [--threads 2] [--repeats 3]

The trace is one of Qwen2.5-Coder-1.5B-Instruct's own annotated GSM8K replies
(``grade/datasets/real_step_errors``), the one closest to ``--steps`` steps and 256 response tokens. Times,
in one process after one untimed warm-up of each:

* **verifier**: :func:`grade.steps.verifier.verify_trace` with the shipped verifier of ``--reader`` (one forward
  pass, the check, the classifier): the suspect step or "none";
* **step-wise GRADE**: ``grade.analyze(..., steps=True, spectra=False, token_scores=True)`` with ``--grade-model``,
  the Reasoning trace page's route (its suspect step is the check + surprisal locator's).

Prints a Markdown table with the ratio and writes JSON to ``--out``.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

from .common import ROOT, machine, time_call, write_json


def pick_trace(steps: int, tokens: int = 256) -> dict:
    from grade.gradients.losses import split_steps
    from grade.steps.real_errors import annotated_traces

    # length in characters as a stand-in for tokens (about 3.5 characters a token in these replies)
    traces = annotated_traces()
    best = min(traces, key=lambda t: (abs(len(split_steps(t.trace)) - steps), abs(len(t.trace) / 3.5 - tokens), t.id))
    return {"id": best.id, "question": best.question, "trace": best.trace}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.step_verifier", description=__doc__.split("\n")[0])
    parser.add_argument("--reader", default="smollm2-135m-instruct")
    parser.add_argument("--grade-model", default="smollm2-135m-instruct")
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--threads", type=int, default=min(2, os.cpu_count() or 1))
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--grade-repeats", type=int, default=1)
    parser.add_argument("--out", type=Path, default=ROOT / "runs" / "bench")
    args = parser.parse_args(argv)

    import torch

    import grade
    from grade.steps.locate import DEFAULT_LOCATOR, locate, ranked_steps, signals_of_result
    from grade.steps.verifier import verify_trace

    torch.set_num_threads(args.threads)
    trace = pick_trace(args.steps)
    load_before = os.getloadavg()[0]
    t = time.perf_counter()
    reader = grade.load_model(args.reader)
    load_reader = time.perf_counter() - t
    verified = {}

    def verify():
        verified["result"] = verify_trace(reader, trace["question"], trace["trace"])

    t_verifier = time_call(verify, repeats=args.repeats, warmup=1)
    result = verified["result"]
    lm = reader if args.grade_model == args.reader else grade.load_model(args.grade_model)
    analysed = {}

    def stepwise():
        analysed["result"] = grade.analyze(lm, trace["question"], task="gsm8k", loss="pos", response=trace["trace"],
                                           steps=True, spectra=False, token_scores=True)

    grade.analyze(lm, "What is 2 + 3?", task="gsm8k", loss="pos", response="2 + 3 = 5. #### 5", steps=True,
                  spectra=False, token_scores=True)
    t_grade = time_call(stepwise, repeats=args.grade_repeats, warmup=0)
    full = analysed["result"]
    suspect_grade = ranked_steps(locate(signals_of_result(full)[0], DEFAULT_LOCATOR))[0]
    n_tokens = len(full.input_ids) - (full.response_start or 0)
    ratio = t_grade.median / t_verifier.median
    payload = {"trace": trace["id"], "steps": len(result.step_probability), "grade_steps": len(full.steps),
               "response_tokens": n_tokens, "reader": args.reader, "grade_model": args.grade_model,
               "verifier": t_verifier.to_dict(), "stepwise_grade": t_grade.to_dict(), "ratio": ratio,
               "reader_load_s": load_reader, "verifier_suspect_step": result.suspect_step,
               "grade_suspect_step": suspect_grade, "target_s": 10.0,
               "meets_target": t_verifier.median <= 10.0, "machine": machine(),
               "load_average_before_after": [load_before, os.getloadavg()[0]]}
    write_json(args.out / "step_verifier.json", payload)
    print(f"Trace {trace['id']}: {payload['steps']} steps, {n_tokens} response tokens, {args.threads} threads, "
          f"load average {load_before:.1f} before")
    print()
    print("| route | seconds (median) | runs | suspect step |")
    print("|---|---|---|---|")
    print(f"| step verifier ({args.reader} reads the trace) | {t_verifier.median:.2f} | "
          f"{', '.join(f'{r:.2f}' for r in t_verifier.runs)} | {result.suspect_step or 'none'} |")
    print(f"| step-wise GRADE ({args.grade_model}, the trace page's route) | {t_grade.median:.1f} | "
          f"{', '.join(f'{r:.1f}' for r in t_grade.runs)} | {suspect_grade} |")
    print()
    print(f"Ratio (step-wise GRADE / verifier): {ratio:.1f}x; verifier <= 10 s: {payload['meets_target']}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
