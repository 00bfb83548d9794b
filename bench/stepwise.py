"""Target 3 (and 5): step-wise GRADE_pos of a K-step chain of thought, against recomputing each prefix.

``grade.analyze(..., loss="pos", steps=True, spectra=False)`` does one forward pass over prompt +
response and gets every step's Δ from one batched backward (on a CPU, where that costs more than
recomputing, it runs one pass per prefix itself; the route it did not take is timed too); the baseline runs the engine's own pass
once per prefix (forward on the prefix ending with step k, loss on step k, backward, fast spectra).
Both give the same per-step rank ratios up to rounding (checked here), and the fast route's step ratios
are checked against the float64 literal formula on the step-wise pass's own h and Δ_k.
"""

from __future__ import annotations


import numpy as np

import grade
from grade.gradients.analysis import layer_features, prefix_passes_are_cheaper, srank_kinds
from grade.gradients.losses import split_steps
from grade.gradients.reference import literal_stable_ranks

from .common import max_relative_error, time_call
from .cpu import dataset_rows
from .pipeline import capture_steps, prefix_recompute


def chain_of_thought(steps: int) -> tuple[str, str, str]:
    """(question, task, response made of the first ``steps`` steps of a worked solution): GSM8K when a
    solution is long enough, else MATH; steps must read as prose (three words or more, no drawings)."""
    for name, task in (("gsm8k", "gsm8k"), ("math", "math")):
        for row in dataset_rows(name):
            solution = row.get("solution") or ""
            spans = split_steps(solution)[:steps]
            if len(spans) == steps and "[asy]" not in solution and all(len(solution[a:b].split()) >= 3 for a, b in spans):
                return row["question"], task, solution[: spans[-1][1]].rstrip()
    raise RuntimeError(f"no worked solution with {steps} steps")


def measure(lm, question: str, response: str, *, task: str = "gsm8k", prompt: str | None = None,
            repeats: int = 3, baseline_repeats: int = 2, literal_steps: int | None = None, device=None, log=print) -> dict:
    """Time ours vs. per-prefix recomputation for one response; check their agreement and accuracy."""
    def ours(step_passes="auto"):
        return grade.analyze(lm, question, task=task, prompt=prompt, loss="pos", response=response, steps=True,
                             spectra=False, step_passes=step_passes)

    result = ours()
    ids = result.input_ids
    spans = [(s.start, s.end) for s in result.steps]
    k = len(spans)
    route = "prefix" if prefix_passes_are_cheaper(lm.device, [e for _, e in spans], len(ids)) else "shared"
    log(f"[steps] K={k}, {len(ids)} tokens ({result.response_start} prompt); the engine's route: {route}")
    t_ours = time_call(ours, repeats=repeats, warmup=1, device=device)
    # The route the engine did not take, timed too: the evidence for its choice.
    other = "shared" if route == "prefix" else "prefix"
    t_other = time_call(lambda: ours(other), repeats=baseline_repeats, warmup=0, device=device)
    t_base = time_call(lambda: prefix_recompute(lm, ids, spans), repeats=baseline_repeats, warmup=1, device=device)
    ours_ratios = np.array([s.rank_ratio for s in result.steps])
    base_ratios = prefix_recompute(lm, ids, spans)
    # Spectral accuracy on identical inputs: the step-wise pass's own h and Δ_k, fast route vs literal formula.
    kinds = srank_kinds("pos", "paper")
    hidden, deltas = capture_steps(lm, ids, spans)
    literal_errors = []
    chosen = range(k) if literal_steps is None else np.unique(np.linspace(0, k - 1, literal_steps).round().astype(int))
    for i in chosen:
        end = spans[i][1]
        h_k, d_k = [h[:end] for h in hidden], [d[i, :end] for d in deltas]
        truth = literal_stable_ranks(h_k, d_k, *kinds, device=device).rank_ratio
        literal_errors.append(max_relative_error(layer_features(h_k, d_k, kinds, False)[2], truth))
    del hidden, deltas
    speedup = t_base.median / t_ours.median
    return {
        "K": k,
        "tokens": len(ids),
        "prompt_tokens": result.response_start,
        "route": route,
        "ours": t_ours.to_dict(),
        f"ours_{other}_route": t_other.to_dict(),
        "prefix_recompute": t_base.to_dict(),
        "speedup": speedup,
        "target_speedup": k / 2,
        "meets_target": speedup >= k / 2,
        "ours_stage_timings_one_run": result.timings,
        # Includes rounding differences between one full-sequence pass and per-prefix passes (bf16: ~1e-3).
        "max_rel_diff_ours_vs_prefix_recompute": max_relative_error(ours_ratios, base_ratios),
        "max_rel_error_vs_literal_same_inputs": max(literal_errors),
        "literal_checked_steps": len(literal_errors),
    }


def run(lm=None, *, ks=(8, 16), log=print, **kwargs) -> list[dict]:
    lm = lm or grade.load_model("smollm2-135m-instruct")
    out = []
    for k in ks:
        question, task, response = chain_of_thought(k)
        out.append({"source_task": task, **measure(lm, question, response, task=task, log=log, **kwargs)})
    return out
