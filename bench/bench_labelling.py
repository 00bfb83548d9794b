"""Throughput of answer sampling for labels: one sample at a time vs batched, side by side.

    python bench/bench_labelling.py [--model smollm2-135m-instruct] [--dataset triviaqa]
        [--questions 8] [--samples 10] [--threads 1] [--batches 1,4,8]

Modes, each on the same questions with the same per-sample seeds (so they draw the same samples):

* ``one-at-a-time``: every sample is its own decoding run (prompt pass + answer, batch of one),
  what a plain ``for i in range(n): generate(...)`` loop does.
* ``hf-generate``: ``model.generate(num_return_sequences=n)`` per question (the transformers
  default way: the prompt is run n times).
* ``batched qN``: :func:`grade.models.sampling.sample_answers` with N questions per batch (one prompt pass
  per question, cache shared by its samples, finished rows dropped).

The modes are interleaved question group by question group, so that load from other processes on a
shared machine hits them alike. Prints samples/second per mode and the speed-up over one-at-a-time.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

import torch

import grade
from grade.models.generation import encode_prompt
from grade.models.sampling import SamplingSettings, sample_answers
from grade.tasks.tasks import TASKS, load_questions


def hf_generate(lm, prompts, settings):
    """Baseline: transformers' generate, n return sequences per question."""
    for prompt in prompts:
        ids = torch.tensor([encode_prompt(lm.tokenizer, prompt)], device=lm.device)
        with torch.no_grad():
            lm.model.generate(
                ids, attention_mask=torch.ones_like(ids), do_sample=True, temperature=settings.temperature,
                top_p=settings.top_p, top_k=0, max_new_tokens=settings.max_new_tokens,
                num_return_sequences=settings.n_samples, pad_token_id=lm.tokenizer.pad_token_id,
            )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="smollm2-135m-instruct")
    parser.add_argument("--dataset", default="triviaqa")
    parser.add_argument("--questions", type=int, default=8)
    parser.add_argument("--samples", type=int, default=10)
    parser.add_argument("--max-new-tokens", type=int, default=None, help="default: the task's (12 for short QA)")
    parser.add_argument("--threads", type=int, default=max(1, (os.cpu_count() or 2) // 2))
    parser.add_argument("--batches", default="1,4,8", help="questions per batch to try, comma-separated")
    parser.add_argument("--no-hf", action="store_true", help="skip the transformers generate baseline")
    args = parser.parse_args()

    torch.set_num_threads(args.threads)
    lm = grade.load_model(args.model)
    questions = load_questions(args.dataset, limit=args.questions)
    spec = TASKS[questions[0].task]
    settings = SamplingSettings(
        n_samples=args.samples, max_new_tokens=args.max_new_tokens or spec.max_new_tokens,
        stop_strings=spec.stop_strings,
    )
    batches = [int(b) for b in args.batches.split(",") if b.strip()]
    group = max(batches)
    prompts = [q.prompt(lm.tokenizer) for q in questions]
    ids = [q.id for q in questions]

    modes = {"one-at-a-time": lambda p, i: sample_answers(lm, p, i, settings, one_at_a_time=True)}
    if not args.no_hf:
        modes["hf-generate"] = lambda p, i: hf_generate(lm, p, settings)
    for b in batches:
        modes[f"batched q{b}"] = lambda p, i, b=b: sample_answers(lm, p, i, settings, questions_per_batch=b)

    sample_answers(lm, prompts[:1], ids[:1], SamplingSettings(n_samples=2, max_new_tokens=2))  # warm-up
    seconds = {m: 0.0 for m in modes}
    outputs = {m: [] for m in modes}
    for start in range(0, len(prompts), group):
        p, i = prompts[start : start + group], ids[start : start + group]
        for name, fn in modes.items():
            t0 = time.perf_counter()
            out = fn(p, i)
            seconds[name] += time.perf_counter() - t0
            if out is not None:
                outputs[name] += out

    n = len(prompts) * args.samples
    print(f"model {args.model}   dataset {args.dataset} ({spec.name}, {settings.max_new_tokens} new tokens)   "
          f"{len(prompts)} questions x {args.samples} samples   torch threads {args.threads}   "
          f"cpu cores {os.cpu_count()}   load average {os.getloadavg()[0]:.1f}")
    base = n / seconds["one-at-a-time"]
    print(f"{'mode':<16} {'seconds':>9} {'samples/s':>10} {'s/question':>11} {'speed-up':>9}")
    for name, s in seconds.items():
        print(f"{name:<16} {s:>9.1f} {n / s:>10.2f} {s / len(prompts):>11.2f} {n / s / base:>8.1f}x")
    reference = outputs["one-at-a-time"]
    for name, out in outputs.items():
        if out and name != "one-at-a-time":
            same = sum(a == b for qa, qb in zip(reference, out) for a, b in zip(qa, qb))
            print(f"{name}: {same}/{n} samples identical to one-at-a-time (same seeds; rest: float rounding)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
