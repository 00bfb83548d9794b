"""Targets 1, 3 and 5 on a GPU: Llama-3.1-8B-shaped random-weight model in bf16.

Run on a CUDA machine (no weights or network needed)::

    python -m bench.gpu --out results/          # every n in 128 512 1024 2048, then step-wise K = 8, 16

For each prompt length n it measures, side by side in one process:

* floor: forward (last-position logits) + activation-only backward to the lowest MLP output;
* ours: ``grade.analyze(..., spectra=False)`` end to end (default settings: on CUDA the low-memory
  capture); also ``low_memory=False`` for comparison;
* the reference recipe (weight gradients of every down projection, then per layer pinv + SVDs in
  float32), end to end;
* peak memory of each above what the model occupies (``max_memory_allocated``);
* accuracy: rank ratios of each route against the float64 literal formula on the same h and Δ, and
  the reference's own end-to-end ratios (its solver failures are counted, not hidden).

Timings are medians of repeated runs after warm-up, with ``torch.cuda.synchronize`` around each.
"""

from __future__ import annotations

import argparse
import gc
import json
import sys
import time
import traceback
from pathlib import Path

import numpy as np
import torch

import grade
from grade.gradients.analysis import layer_features
from grade.gradients.losses import entropy_at_last_position
from grade.gradients.reference import literal_stable_ranks, reference_recipe
from grade.gradients import stable_rank as spectra
from grade.gradients.stable_rank import cholesky_info, gram_into, top_eigenvalue, stable_ranks_fast

from . import stepwise
from .common import machine, max_relative_error, peak_extra_memory, table, time_call, write_json
from .cpu import recipe_on_same_inputs
from .pipeline import capture_tensors, floor_pass
from .synthetic import random_llama, words

KINDS = ("pre", "pre")
TINY = dict(hidden_size=256, intermediate_size=896, num_hidden_layers=4, num_attention_heads=8, num_key_value_heads=2,
            vocab_size=2000)


def probe(lm, log, device="cuda") -> dict:
    """Which code paths this torch takes: bf16 -> float32 products, batched backward."""
    info = {}
    x = torch.randn(64, 256, device=device, dtype=torch.bfloat16)
    try:
        out = torch.empty(64, 64, device=device)
        torch.mm(x, x.T, out_dtype=torch.float32, out=out)
        info["mm_out_dtype"] = bool(torch.allclose(out, x.float() @ x.float().T, rtol=1e-3, atol=1e-2))
    except (TypeError, RuntimeError) as exc:
        info["mm_out_dtype"] = f"unavailable: {exc}"[:200]
    ids = torch.randint(0, 1000, (1, 24), device=device)
    from grade.gradients.capture import capture_mlp

    with torch.enable_grad(), capture_mlp(lm.model) as cap:
        logits = lm.model(input_ids=ids, use_cache=False).logits[0]
    losses = torch.stack([logits[8 + 4 * k : 12 + 4 * k].float().logsumexp(-1).mean() for k in range(3)])
    try:
        torch.autograd.grad(losses, cap.outputs, grad_outputs=torch.eye(3, device=device), is_grads_batched=True)
        info["batched_backward"] = True
    except RuntimeError as exc:
        info["batched_backward"] = f"falls back to a loop: {exc}"[:200]
    log(f"[probe] {info}")
    return info


def bench_length(lm, n: int, *, repeats: int, reference_budget_s: float, log, device="cuda") -> dict:
    gen = torch.Generator().manual_seed(n)
    ids = torch.randint(0, lm.model.config.vocab_size - 3, (n,), generator=gen)
    prompt = words(ids.tolist())
    ids_gpu = ids.unsqueeze(0).to(device)
    row: dict = {"n": n}

    def ours():
        return grade.analyze(lm, "benchmark", prompt=prompt, spectra=False)

    def ours_standard():
        return grade.analyze(lm, "benchmark", prompt=prompt, spectra=False, low_memory=False)

    def reference():
        return reference_recipe(lm.model, ids_gpu, entropy_at_last_position)

    def floor():
        floor_pass(lm, ids_gpu)

    t = {}
    t["floor"] = time_call(floor, repeats=repeats, warmup=3, device=device)
    t["ours"] = time_call(ours, repeats=repeats, warmup=3, device=device)
    t["ours_standard"] = time_call(ours_standard, repeats=repeats, warmup=1, device=device)
    default_streams = spectra.CERTIFICATE_STREAMS
    try:  # the same pass with the certificate as one batched call on one stream (for the record)
        spectra.CERTIFICATE_STREAMS = 1
        t["ours_one_stream_certificate"] = time_call(ours, repeats=repeats, warmup=1, device=device)
    finally:
        spectra.CERTIFICATE_STREAMS = default_streams
    measure = (lambda fn: peak_extra_memory(fn, device)) if torch.device(device).type == "cuda" else (lambda fn: (float("nan"), fn()))
    start = time.perf_counter()
    ref_peak, ref_result = measure(reference)  # doubles as warm-up and memory run; a slow reference is timed once
    first_ref_s = time.perf_counter() - start
    if first_ref_s * 3 < reference_budget_s:
        t["reference"] = time_call(reference, repeats=3, warmup=0, device=device)
    else:
        from .common import Timing

        t["reference"] = Timing([first_ref_s])
    for key, value in t.items():
        row[f"{key}_s"] = value.median
        row[f"{key}_runs"] = value.runs
    log(f"[n={n}] times: " + ", ".join(f"{k} {v.median:.4f}s" for k, v in t.items()))

    mem = {"reference": ref_peak}
    mem["floor"], _ = measure(floor)
    mem["ours"], ours_result = measure(ours)
    mem["ours_standard"], std_result = measure(ours_standard)
    for key, value in mem.items():
        row[f"{key}_peak_gib"] = value
    log(f"[n={n}] peak extra GiB: " + ", ".join(f"{k} {v:.2f}" for k, v in mem.items()))

    row["ours_over_floor"] = row["ours_s"] / row["floor_s"]
    row["reference_over_ours"] = row["reference_s"] / row["ours_s"]
    row["ours_mem_over_reference"] = mem["ours"] / mem["reference"]
    row["reference_solver_failures"] = len(ref_result.failures)
    row["ours_stage_timings_one_run"] = ours_result.timings

    # Accuracy on identical inputs: the engine's h and Δ (standard capture), float64 literal formula on the GPU.
    cap = capture_tensors(lm, ids.tolist())
    t0 = time.perf_counter()
    truth = literal_stable_ranks(cap.hidden, cap.deltas, *KINDS, device=device)
    row["literal_s"] = time.perf_counter() - t0
    fast = layer_features(cap.hidden, cap.deltas, KINDS, False)[2]
    same = recipe_on_same_inputs(cap.hidden, cap.deltas, "pre")
    row["err_ours_fast_same_inputs"] = max_relative_error(fast, truth.rank_ratio)
    row["err_ours_analyze"] = max_relative_error(ours_result.rank_ratio, truth.rank_ratio)
    row["err_ours_standard_analyze"] = max_relative_error(std_result.rank_ratio, truth.rank_ratio)
    row["err_reference_same_inputs"] = max_relative_error(same.rank_ratio, truth.rank_ratio)
    row["err_reference_own_pass"] = max_relative_error(ref_result.rank_ratio, truth.rank_ratio)
    row["reference_solver_failures"] += len(same.failures)
    row["diff_lowmem_vs_standard"] = max_relative_error(ours_result.rank_ratio, std_result.rank_ratio)
    # The spectral step alone (the O(L n² d) part), on the same tensors.
    t["spectral_ours"] = time_call(
        lambda: stable_ranks_fast(cap.hidden, cap.deltas, *KINDS), repeats=repeats, warmup=1, device=device
    )
    row["spectral_ours_s"] = t["spectral_ours"].median
    row.update(spectral_parts(cap.hidden, cap.deltas, repeats, device))
    row["rank_ratio_range"] = [float(np.nanmin(truth.rank_ratio)), float(np.nanmax(truth.rank_ratio))]
    log(f"[n={n}] errors: ours {row['err_ours_analyze']:.2e}, reference {row['err_reference_own_pass']:.2e} "
        f"(same inputs {row['err_reference_same_inputs']:.2e}), failures {row['reference_solver_failures']}")
    del cap, ours_result, std_result, ref_result, same
    gc.collect()
    if torch.device(device).type == "cuda":
        torch.cuda.empty_cache()
    return row


def spectral_parts(hidden, deltas, repeats: int, device) -> dict:
    """Median seconds of the fast route's parts on the same tensors: grams, Cholesky certificate, Lanczos."""
    n_layers, n = len(hidden), hidden[0].shape[0]
    grams = torch.empty(2 * n_layers, n, n, device=device)

    def form():
        for layer in range(n_layers):
            gram_into(grams[layer], hidden[layer])
            gram_into(grams[n_layers + layer], deltas[layer])

    form()
    gram_h = grams[:n_layers]
    parts = {
        "part_grams_s": time_call(form, repeats=repeats, warmup=1, device=device).median,
        "part_cholesky_s": time_call(lambda: cholesky_info(gram_h, 8), repeats=repeats, warmup=1, device=device).median,
        "part_lanczos_s": time_call(lambda: top_eigenvalue(grams, 64), repeats=repeats, warmup=1, device=device).median,
    }
    # Certificate variants (same answers required): streams at once vs torch's batched call on one stream.
    default = spectra.CERTIFICATE_STREAMS
    reference_info = cholesky_info(gram_h, 8).cpu()
    try:
        for streams in (1, 8):
            spectra.CERTIFICATE_STREAMS = streams
            parts[f"part_cholesky_{streams}_streams_s"] = time_call(
                lambda: cholesky_info(gram_h, 8), repeats=3, warmup=1, device=device).median
            parts[f"certificate_{streams}_streams_agrees"] = bool(torch.equal(cholesky_info(gram_h, 8).cpu(), reference_info))
    finally:
        spectra.CERTIFICATE_STREAMS = default
    parts["certified_layers"] = int((reference_info == 0).sum())
    del grams, gram_h
    return parts


def bench_steps(lm, k: int, *, prompt_tokens: int = 64, step_tokens: int = 16, log, device="cuda") -> dict:
    """K steps of ``step_tokens`` words, each ending with '.', after a ``prompt_tokens`` prompt."""
    gen = torch.Generator().manual_seed(1000 + k)
    vocab = lm.model.config.vocab_size - 3
    prompt = words(torch.randint(0, vocab, (prompt_tokens,), generator=gen).tolist())
    steps = [words(torch.randint(0, vocab, (step_tokens - 1,), generator=gen).tolist()) + " ." for _ in range(k)]
    response = " ".join(steps)
    return stepwise.measure(lm, "benchmark", response, prompt=prompt, repeats=5, baseline_repeats=3,
                            literal_steps=3, device=device, log=log)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--lengths", type=int, nargs="+", default=[128, 512, 1024, 2048])
    parser.add_argument("--steps", type=int, nargs="*", default=[8, 16])
    parser.add_argument("--repeats", type=int, default=15)
    parser.add_argument("--reference-budget", type=float, default=40.0, help="seconds; slower references are timed once")
    parser.add_argument("--layers", type=int, default=None, help="fewer layers (smoke tests)")
    parser.add_argument("--tiny", action="store_true", help="a tiny Llama instead of the 8B shape (smoke tests on a CPU)")
    parser.add_argument("--device", default="cuda")
    args = parser.parse_args(argv)
    log_lines: list[str] = []

    def log(msg: str) -> None:
        print(msg, flush=True)
        log_lines.append(msg)

    overrides = dict(TINY) if args.tiny else {}
    if args.layers:
        overrides["num_hidden_layers"] = args.layers
    t0 = time.perf_counter()
    lm = random_llama(args.device, **overrides)
    cuda = torch.device(args.device).type == "cuda"
    if cuda:
        torch.cuda.synchronize()
    payload = {"machine": machine(), "model": lm.name, "config": lm.model.config.to_dict(), "lengths": [], "steps": []}
    payload["model_gib"] = torch.cuda.memory_allocated() / 2**30 if cuda else float("nan")
    log(f"[setup] {payload['machine'].get('gpu')} torch {torch.__version__}, model built in {time.perf_counter() - t0:.1f}s, "
        f"{payload['model_gib']:.2f} GiB")
    payload["probe"] = probe(lm, log, args.device)
    out = args.out
    for n in args.lengths:
        try:
            payload["lengths"].append(
                bench_length(lm, n, repeats=args.repeats, reference_budget_s=args.reference_budget, log=log, device=args.device)
            )
        except Exception as exc:  # keep going: a failure at one n must not lose the others
            log(f"[n={n}] FAILED: {exc!r}\n{traceback.format_exc()}")
            payload["lengths"].append({"n": n, "error": repr(exc)})
        write_json(out / "gpu_results.json", payload)
        gc.collect()
        if cuda:
            torch.cuda.empty_cache()
    for k in args.steps:
        try:
            payload["steps"].append(bench_steps(lm, k, log=log, device=args.device))
        except Exception as exc:
            log(f"[steps K={k}] FAILED: {exc!r}\n{traceback.format_exc()}")
            payload["steps"].append({"K": k, "error": repr(exc)})
        write_json(out / "gpu_results.json", payload)
    report = summary(payload)
    (out / "gpu_summary.md").write_text(report)
    (out / "gpu_log.txt").write_text("\n".join(log_lines))
    print(report)
    return 0


def summary(payload: dict) -> str:
    rows = [r for r in payload["lengths"] if "error" not in r]
    cols = ["n", "floor_s", "ours_s", "ours_over_floor", "ours_standard_s", "ours_one_stream_certificate_s", "reference_s", "reference_over_ours",
            "floor_peak_gib", "ours_peak_gib", "ours_standard_peak_gib", "reference_peak_gib", "ours_mem_over_reference",
            "err_ours_analyze", "err_reference_own_pass", "err_reference_same_inputs", "reference_solver_failures"]
    text = [f"GPU: {payload['machine'].get('gpu')} | torch {payload['machine'].get('torch')} | model {payload['model']} "
            f"({payload['model_gib']:.2f} GiB)", "", table(rows, cols)]
    steps = [s for s in payload["steps"] if "error" not in s]
    if steps:
        flat = [{"K": s["K"], "tokens": s["tokens"], "route": s["route"], "ours_s": s["ours"]["median_s"],
                 "other_route_s": next(v["median_s"] for key, v in s.items() if key.startswith("ours_") and key.endswith("_route")),
                 "prefix_recompute_s": s["prefix_recompute"]["median_s"], "speedup": s["speedup"],
                 "target": s["target_speedup"], "diff_vs_recompute": s["max_rel_diff_ours_vs_prefix_recompute"],
                 "err_vs_literal": s["max_rel_error_vs_literal_same_inputs"]} for s in steps]
        text += ["", table(flat, list(flat[0]))]
    return "\n".join(text) + "\n"


if __name__ == "__main__":
    sys.exit(main())
