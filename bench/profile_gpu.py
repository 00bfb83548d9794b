"""Where the time of one GRADE_pre analysis (or a batch of GRADE_pre or GRADE_pos analyses) goes on a GPU at n = 512.

Prints the wall time of ``grade.analyze`` with the low-memory mode on and off (median of 10 runs, with
the engine's own stage timings) and of the floor, then a torch.profiler table of each analysis: how
much of the wall time the GPU is actually busy. ``python -m bench.profile_gpu`` (random
Llama-3.1-8B-shaped model in bf16; needs a CUDA GPU, no weights).
"""

from __future__ import annotations

import time

import torch
from torch.profiler import ProfilerActivity, profile

import grade

from .pipeline import floor_pass
from .synthetic import random_llama, words

TOKENS = 512
RUNS = 10


def _median_seconds(call, runs: int = RUNS) -> tuple[float, list]:
    """Median wall seconds of ``call()`` after 3 warm-up calls, and what each timed call returned."""
    for _ in range(3):
        call()
    torch.cuda.synchronize()
    seconds, results = [], []
    for _ in range(runs):
        start = time.perf_counter()
        results.append(call())
        torch.cuda.synchronize()
        seconds.append(time.perf_counter() - start)
    return sorted(seconds)[runs // 2], results


def profile_batch(lm, prompt_ids: list[list[int]], response_ids: list[list[int]] | None = None) -> None:
    """The batched GRADE_pre path (:func:`grade.gradients.analysis.analyze_batch`) on ``len(prompt_ids)`` prompts
    (GRADE_pos of ``response_ids`` after them where given): its wall time, its stages summed over the rows, the
    floor of one forward + backward pass of the same batch, and a profiler table sorted by GPU time and by CPU
    time."""
    from grade.gradients.analysis import analyze_batch

    loss = "pre" if response_ids is None else "pos"
    requests = [{"question": "benchmark", "prompt": words(ids)} for ids in prompt_ids]
    if response_ids is not None:
        for request, ids in zip(requests, response_ids):
            request["response"] = words(ids)
        prompt_ids = [p + r for p, r in zip(prompt_ids, response_ids)]
    median, results = _median_seconds(lambda: analyze_batch(lm, requests, loss=loss), runs=5)
    stages: dict[str, float] = {}
    for result in results[len(results) // 2]:
        for key, value in result.timings.items():
            stages[key] = stages.get(key, 0.0) + value
    print(f"batch of {len(requests)}: {median:.4f} s; stages summed over rows "
          f"{({k: round(v, 4) for k, v in stages.items()})}")
    ids_gpu = torch.tensor(prompt_ids).cuda()
    print(f"floor of the batch: {_median_seconds(lambda: floor_pass(lm, ids_gpu), runs=5)[0]:.4f} s")
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        analyze_batch(lm, requests, loss=loss)
        torch.cuda.synchronize()
    for key in ("cuda_time_total", "cpu_time_total"):
        print(f"==== batch of {len(requests)}, by {key}")
        print(prof.key_averages().table(sort_by=key, row_limit=25, max_name_column_width=60))


def main() -> None:
    import argparse

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=0, help="profile the batched path on this many prompts instead")
    parser.add_argument("--response", type=int, default=0,
                        help="with --batch: GRADE_pos of a response of this many tokens after each prompt")
    args = parser.parse_args()
    lm = random_llama("cuda")
    if args.batch:
        gen = torch.Generator().manual_seed(TOKENS)

        def random_ids(n: int) -> list[list[int]]:
            return [torch.randint(0, lm.model.config.vocab_size - 3, (n,), generator=gen).tolist()
                    for _ in range(args.batch)]

        profile_batch(lm, random_ids(TOKENS), random_ids(args.response) if args.response else None)
        return
    ids = torch.randint(0, lm.model.config.vocab_size - 3, (TOKENS,), generator=torch.Generator().manual_seed(TOKENS))
    prompt = words(ids.tolist())

    def analysis(low_memory: bool):
        return grade.analyze(lm, "benchmark", prompt=prompt, spectra=False, low_memory=low_memory)

    for low_memory in (True, False):
        median, results = _median_seconds(lambda: analysis(low_memory))
        stages = {key: sorted(r.timings[key] for r in results)[RUNS // 2] for key in results[0].timings}
        print(f"low_memory={low_memory}: {median:.4f} s; stages {({k: round(v, 4) for k, v in stages.items()})}")
    ids_gpu = ids.unsqueeze(0).cuda()
    print(f"floor: {_median_seconds(lambda: floor_pass(lm, ids_gpu))[0]:.4f} s")

    for low_memory in (True, False):
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
            analysis(low_memory)
            torch.cuda.synchronize()
        print(f"==== low_memory={low_memory}")
        print(prof.key_averages().table(sort_by="cuda_time_total", row_limit=14, max_name_column_width=50))


if __name__ == "__main__":
    main()
