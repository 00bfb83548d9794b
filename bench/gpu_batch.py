"""Items per second of every batched command beside the floor of its work, on one device, and the Ray scaling.

    python -m bench.gpu_batch --device cuda --model qwen2.5-coder-1.5b-instruct --out DIR      # one GPU
    python -m bench.gpu_batch --device cpu --model smollm2-135m-instruct --n 4 --tiny --out DIR  # the same table on a CPU

What it measures, in one process, on the shipped labelled questions of ``--model`` (GSM8K for the commands
that generate, TriviaQA for the GRADE pass):

* **matmul rate**: the device's measured rate of square matrix products in the model's dtype (FLOP/s);
* **decode floor**: tokens generated per second by the bare decoding loop (one token per row per step, the
  key/value cache, argmax, no stop rule, no row leaving the batch) at batch sizes up to the largest that
  :func:`grade.models.sizing.batch_size` allows, the best of them;
* per command, items per second through the library call the command makes, batched (the default batch
  size) and one item at a time (``--batch-size 1``), beside the floor of that work: ``evaluate --detector
  p-entropy`` (greedy answers, one statistics pass; floor: its generated tokens at the decode floor plus the
  forward FLOPs at the matmul rate), ``label`` (``--samples`` samples a question; floor: the sampled tokens at
  the decode floor), ``extract`` / ``evaluate --probe`` / ``evaluate --detector prompt-entropy`` (the GRADE_pre
  pass; floor: forward + activation-only backward, 4 x parameters FLOPs a token, at the matmul rate);
* **GRADE_pre and GRADE_pos at the 8B shape** (random Llama-3.1-8B-shaped weights in bf16, prompts of 512 tokens,
  under pos with a 64-token response; ``--tiny``: a tiny Llama on a CPU): one analysis, and a batch, against the
  same FLOP floor; the ``extract`` rows include ``--loss pos`` on the labelled answers;
* **scaling**: ``extract`` through ``--engine ray`` with 1, 2 and 4 workers of one GPU each, where Ray is
  importable and the machine has that many GPUs (:mod:`bench.bench_scaling`), else says why not.

Prints one Markdown table and writes ``gpu_batch.json`` (and the table as ``gpu_batch.md``) to ``--out``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import torch


def _sync(device) -> None:
    if torch.device(device).type == "cuda":
        torch.cuda.synchronize()


def matmul_rate(device, dtype, size: int) -> float:
    """FLOP/s of ``size`` x ``size`` products in ``dtype`` (best of 5 after a warm-up)."""
    a = torch.randn(size, size, device=device, dtype=dtype)
    b = torch.randn(size, size, device=device, dtype=dtype)
    a @ b
    _sync(device)
    best = float("inf")
    for _ in range(5):
        t = time.perf_counter()
        for _ in range(4):
            a @ b
        _sync(device)
        best = min(best, (time.perf_counter() - t) / 4)
    return 2 * size**3 / best


def parameters(lm) -> int:
    return sum(p.numel() for p in lm.model.parameters())


@torch.no_grad()
def decode_rate(lm, batch: int, prompt_tokens: int = 64, new_tokens: int = 64) -> float:
    """Tokens per second of the bare decoding loop at ``batch`` rows (see the module docstring)."""
    from grade.models.generation import cache_keyword, output_cache

    model, device = lm.model, lm.device
    vocab = model.config.get_text_config().vocab_size if hasattr(model.config, "get_text_config") else model.config.vocab_size
    ids = torch.randint(10, vocab - 10, (batch, prompt_tokens), generator=torch.Generator().manual_seed(0)).to(device)
    keyword = cache_keyword(model)

    def run():
        out = model(input_ids=ids, use_cache=True, logits_to_keep=1)
        cache, token = output_cache(out), out.logits[:, -1].argmax(-1, keepdim=True)
        positions = torch.full((batch, 1), prompt_tokens, device=device)
        for _ in range(new_tokens - 1):
            out = model(input_ids=token, position_ids=positions, use_cache=True, **{keyword: cache})
            cache, token = output_cache(out), out.logits[:, -1].argmax(-1, keepdim=True)
            positions = positions + 1
        _sync(device)

    run()
    t = time.perf_counter()
    run()
    return batch * new_tokens / (time.perf_counter() - t)


def decode_floor(lm, largest: int, log) -> tuple[float, int, dict]:
    """The best tokens per second over batch sizes 1, 4, 16, ... up to ``largest``."""
    rates, batch = {}, 1
    while batch <= largest:
        try:
            rates[batch] = decode_rate(lm, batch)
        except torch.OutOfMemoryError:
            break
        log(f"[decode] batch {batch}: {rates[batch]:.0f} tokens/s")
        batch *= 4
    best = max(rates, key=rates.get)
    return rates[best], best, rates


def gsm8k_rows(model: str, n: int) -> list[dict]:
    from grade.batch.features import read_labelled

    path = Path(__file__).resolve().parent.parent / "data" / "labels" / model / "gsm8k.jsonl.xz"
    return read_labelled(path)[:n]


def trivia_rows(model: str, n: int) -> list[dict]:
    from grade.batch.features import read_labelled

    path = Path(__file__).resolve().parent.parent / "data" / "labels" / model / "triviaqa.jsonl.xz"
    return read_labelled(path)[:n]


def timed(call, device) -> tuple[float, object]:
    _sync(device)
    t = time.perf_counter()
    value = call()
    _sync(device)
    return time.perf_counter() - t, value


def _rows(name: str, items: int, seconds: float, floor_s: float, note: str) -> dict:
    """A table row; ``floor_s``: the floor's seconds for the same ``items``."""
    return {"command": name, "items": items, "seconds": seconds, "items_per_s": items / seconds,
            "floor_items_per_s": items / floor_s, "over_floor": seconds / floor_s, "note": note}


def bench_p_entropy(lm, rows, n_one: int, floor_tps: float, flops_rate: float, log) -> list[dict]:
    """``evaluate --detector p-entropy``'s passes, batched and (on the first ``n_one`` rows) one at a time."""
    from grade.verdict.detectors import labelled_statistics
    from grade.verdict.detectors.baselines import score_questions

    labelled_statistics(lm, rows[:2], "p_entropy")  # warm-up
    seconds, (values, kept, _) = timed(lambda: labelled_statistics(lm, rows, "p_entropy"), lm.device)
    one_s, (one_values, one_kept, _) = timed(
        lambda: labelled_statistics(lm, rows[:n_one], "p_entropy", batch_size=1), lm.device)
    records = score_questions(lm, rows, parts=("answer",))
    tokens = [len(lm.tokenizer(r["greedy_answer"], add_special_tokens=False)["input_ids"]) + 1 for r in records]
    read = sum(len(lm.tokenizer(r["question"])["input_ids"]) + 64 for r in rows) + sum(tokens)
    floor_s = sum(tokens) / floor_tps + 2 * parameters(lm) * read / flops_rate
    floor_one = floor_s * sum(tokens[:n_one]) / sum(tokens)
    same = float(abs(values[:len(one_values)] - one_values).max()) if kept[:len(one_kept)] == one_kept else float("nan")
    log(f"[p-entropy] {len(rows)} q batched {seconds:.2f} s; {n_one} q one at a time {one_s:.2f} s; max |diff| {same:.2e}")
    return [_rows("evaluate --detector p-entropy", len(rows), seconds, floor_s,
                  f"{sum(tokens)} tokens generated; vs one at a time max abs diff {same:.1e}"),
            _rows("  the same, --batch-size 1", n_one, one_s, floor_one, "")]


def bench_label(lm, rows, n_one: int, samples: int, floor_tps: float, log) -> list[dict]:
    """``label``'s sampling (``samples`` a question), batched and one question at a time."""
    from grade.batch.labeling import settings_for
    from grade.models.sampling import sample_generations
    from grade.tasks.prompts import format_prompt
    from grade.tasks.tasks import TASKS

    settings = settings_for(TASKS["gsm8k"], n_samples=samples, seed=0)
    prompts = [format_prompt(lm.tokenizer, r["question"], task="gsm8k") for r in rows]
    ids = [str(r["id"]) for r in rows]
    from grade.models.sizing import batch_size

    size = batch_size(lm, tokens=512, kind="generate", rows_per_item=samples)
    seconds, batched = timed(lambda: sample_generations(lm, prompts, ids, settings, questions_per_batch=size), lm.device)
    one_s, one = timed(lambda: sample_generations(lm, prompts[:n_one], ids[:n_one], settings, questions_per_batch=1),
                       lm.device)
    tokens = [sum(g.steps for g in per) for per in batched]
    same = sum(a.token_ids == b.token_ids for pa, pb in zip(batched, one) for a, b in zip(pa, pb))
    log(f"[label] {len(rows)} q x {samples} batched ({size} q a batch) {seconds:.2f} s; {n_one} q one at a time "
        f"{one_s:.2f} s; {same}/{n_one * samples} samples identical")
    return [_rows(f"label (--samples {samples})", len(rows), seconds, sum(tokens) / floor_tps,
                  f"{sum(tokens)} tokens sampled; {same}/{n_one * samples} samples identical to one at a time"),
            _rows("  the same, --batch-size 1", n_one, one_s, sum(tokens[:n_one]) / floor_tps, "")]


def bench_extract(lm, rows, n_one: int, flops_rate: float, log) -> list[dict]:
    """``extract`` (GRADE_pre), batched and one row at a time."""
    import numpy as np

    from grade.batch.features import features_of_rows

    features_of_rows(lm, rows[:2], keep_hidden=True)  # warm-up
    seconds, (df, _) = timed(lambda: features_of_rows(lm, rows, keep_hidden=True), lm.device)
    one_s, (one, _) = timed(lambda: features_of_rows(lm, rows[:n_one], keep_hidden=True, batch_size=1), lm.device)
    ratios = np.stack(df.rank_ratio)[:n_one]
    diff = float(np.abs(ratios - np.stack(one.rank_ratio)).max() / np.abs(ratios).max())
    flops = 4 * parameters(lm) / flops_rate
    log(f"[extract] {len(rows)} q batched {seconds:.2f} s; {n_one} q one at a time {one_s:.2f} s; rank ratio rel "
        f"diff {diff:.1e}")
    out = [_rows("extract (GRADE_pre)", len(rows), seconds, flops * int(df.n_tokens.sum()),
                 f"{int(df.n_tokens.sum())} tokens; vs one at a time rank ratio rel diff {diff:.1e}"),
           _rows("  the same, --batch-size 1", n_one, one_s, flops * int(one.n_tokens.sum()), "")]
    # GRADE_pos of the labelled answers (each row's majority answer: no generation)
    seconds, (df, _) = timed(lambda: features_of_rows(lm, rows, loss="pos", keep_hidden=True), lm.device)
    one_s, (one, _) = timed(lambda: features_of_rows(lm, rows[:n_one], loss="pos", keep_hidden=True, batch_size=1),
                            lm.device)
    ratios = np.stack(df.rank_ratio)[:n_one]
    diff = float(np.abs(ratios - np.stack(one.rank_ratio)).max() / np.abs(ratios).max())
    log(f"[extract pos] {len(rows)} q batched {seconds:.2f} s; {n_one} q one at a time {one_s:.2f} s; rank ratio rel "
        f"diff {diff:.1e}")
    return out + [_rows("extract --loss pos (GRADE_pos)", len(rows), seconds, flops * int(df.n_tokens.sum()),
                        f"{int(df.n_tokens.sum())} tokens; vs one at a time rank ratio rel diff {diff:.1e}"),
                  _rows("  the same, --batch-size 1", n_one, one_s, flops * int(one.n_tokens.sum()), "")]


def bench_grade_shape(device: str, tiny: bool, rows: int, log, loss: str = "pre") -> list[dict]:
    """GRADE_pre at the 8B shape (random weights, bf16, n = 512; ``tiny``: a tiny Llama in float32) against the
    forward + backward FLOP floor: one analysis, and a batch of ``rows`` prompts. ``loss="pos"``: GRADE_pos of a
    64-token response after each prompt (16 with ``tiny``), the floor counting prompt and response."""
    import grade
    from grade.gradients.analysis import analyze_batch

    from .gpu import TINY
    from .synthetic import random_llama, words

    lm = random_llama(device, dtype=torch.float32 if tiny else torch.bfloat16, **(dict(TINY) if tiny else {}))
    rate = matmul_rate(device, lm.dtype, 1024 if tiny else 8192)
    n = 128 if tiny else 512
    gen = torch.Generator().manual_seed(n)
    prompts = [words(torch.randint(0, lm.model.config.vocab_size - 3, (n,), generator=gen).tolist()) for _ in range(rows)]
    m = 16 if tiny else 64
    answers = [words(torch.randint(0, lm.model.config.vocab_size - 3, (m,), generator=gen).tolist()) if loss == "pos"
               else None for _ in range(rows)]
    requests = [{"question": "benchmark", "prompt": p, "response": a} for p, a in zip(prompts, answers)]
    tokens = len(grade.analyze(lm, loss=loss, spectra=False, **requests[0]).input_ids)
    one_s = min(timed(lambda: grade.analyze(lm, loss=loss, spectra=False, **requests[0]), device)[0]
                for _ in range(3))
    analyze_batch(lm, requests, loss=loss)  # warm-up: the same shapes as the timed runs (a first host eigh, cuBLAS plans)
    runs = [timed(lambda: analyze_batch(lm, requests, loss=loss), device) for _ in range(3)]
    batch_s = min(seconds for seconds, _ in runs)
    per_pass = sorted({int(r.timings["batch_rows"]) for r in runs[-1][1]})  # the sizing rule's choice
    floor_one = 4 * parameters(lm) * tokens / rate
    # the least work that yields every Δ of the batch (no capture, no spectra), measured: how far the model's own
    # pass already is from the FLOP floor
    from .pipeline import floor_pass

    encoded = [lm.tokenizer(p if a is None else f"{p} {a}", add_special_tokens=False)["input_ids"]
               for p, a in zip(prompts, answers)]
    ids = torch.tensor([e[:min(map(len, encoded))] for e in encoded], device=lm.device)
    floor_pass(lm, ids)
    pass_s = min(timed(lambda: floor_pass(lm, ids), device)[0] for _ in range(3))
    name = "GRADE_pre" if loss == "pre" else "GRADE_pos"
    log(f"[8B shape, {name}] {lm.name}: matmul {rate / 1e12:.1f} TFLOP/s, one analysis {one_s:.3f} s ({one_s / floor_one:.2f}x "
        f"floor), batch of {rows} ({per_pass} rows a pass) {batch_s:.3f} s ({batch_s / (rows * floor_one):.2f}x floor); "
        f"the bare forward + "
        f"backward pass of the batch {pass_s:.3f} s ({pass_s / (rows * floor_one):.2f}x floor)")
    shape = "tiny Llama (float32)" if tiny else "Llama-3.1-8B shape (bf16)"
    out = [{"command": f"{name}, {shape}, n={tokens}, one analysis", "items": 1, "seconds": one_s,
            "items_per_s": 1 / one_s, "floor_items_per_s": 1 / floor_one, "over_floor": one_s / floor_one,
            "note": f"matmul {rate / 1e12:.2f} TFLOP/s"},
           {"command": f"{name}, {shape}, n={tokens}, batch of {rows}", "items": rows, "seconds": batch_s,
            "items_per_s": rows / batch_s, "floor_items_per_s": 1 / floor_one,
            "over_floor": batch_s / (rows * floor_one),
            "note": f"{'/'.join(map(str, per_pass))} rows a pass; the bare forward + backward pass of the batch: "
                    f"{pass_s / (rows * floor_one):.2f}x"}]
    del lm
    if torch.device(device).type == "cuda":
        torch.cuda.empty_cache()
    return out


def bench_scaling(model: str, workers: list[int], questions: int, log) -> list[dict]:
    """``extract --engine ray`` on 1, 2, 4 GPUs (one worker each) where Ray and the GPUs are there."""
    try:
        import ray  # noqa: F401
    except ImportError:
        log("[scaling] not run: Ray is not installed here")
        return []
    gpus = torch.cuda.device_count()
    wanted = [w for w in workers if w <= gpus]
    if not wanted:
        log(f"[scaling] not run: {gpus} GPU(s) here")
        return []
    from types import SimpleNamespace

    from grade.batch import connect

    from .bench_scaling import time_ray, work_items

    args = SimpleNamespace(dataset="triviaqa", questions=questions, warmup=max(wanted) * 2, work="extract",
                           samples=10, max_new_tokens=12, threads_per_worker=1, gpus_per_worker=1.0, chunk_size=64)
    items = work_items(args, model)
    connect(num_cpus=os.cpu_count())
    rows, base = [], None
    for w in wanted:
        r = time_ray(args, model, items, w)
        rate = r["questions"] / r["seconds"]
        base = base or rate
        log(f"[scaling] {w} GPU(s): {rate:.1f} q/s, {rate / base:.2f}x one GPU")
        rows.append({"command": f"extract --engine ray, {w} GPU(s)", "items": r["questions"], "seconds": r["seconds"],
                     "items_per_s": rate, "floor_items_per_s": float("nan"), "over_floor": float("nan"),
                     "note": f"{rate / base:.2f}x one GPU"})
    import ray

    ray.shutdown()
    return rows


def table(rows: list[dict]) -> str:
    lines = ["| command | items | seconds | items/s | floor items/s | time / floor | note |", "|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['command']} | {r['items']} | {r['seconds']:.2f} | {r['items_per_s']:.2f} | "
                     f"{r['floor_items_per_s']:.2f} | {r['over_floor']:.2f}x | {r['note']} |")
    return "\n".join(lines)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", default="smollm2-135m-instruct")
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--dtype", default=None)
    parser.add_argument("--n", type=int, default=64, help="questions per command, batched")
    parser.add_argument("--n-one", type=int, default=8, help="of them, timed one at a time too")
    parser.add_argument("--samples", type=int, default=10, help="label: samples per question")
    parser.add_argument("--shape-rows", type=int, default=16, help="GRADE_pre at the 8B shape: prompts a batch")
    parser.add_argument("--tiny", action="store_true", help="a tiny Llama instead of the 8B shape (CPU)")
    parser.add_argument("--workers", type=int, nargs="*", default=[1, 2, 4])
    parser.add_argument("--scaling-questions", type=int, default=512)
    parser.add_argument("--skip", nargs="*", default=[], choices=("p-entropy", "label", "extract", "shape", "shape-pos", "scaling"))
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args(argv)
    import grade
    from grade.models.sizing import batch_size

    args.out.mkdir(parents=True, exist_ok=True)
    lines: list[str] = []

    def log(message: str) -> None:
        print(message, file=sys.stderr, flush=True)
        lines.append(message)

    device_name = torch.cuda.get_device_name(args.device) if torch.device(args.device).type == "cuda" else "CPU"
    rows: list[dict] = []
    rate, floor_tps, best, rates = float("nan"), float("nan"), 0, {}
    if {"p-entropy", "label", "extract"} - set(args.skip):  # the shape and the scaling need no embedded model here
        lm = grade.load_model(args.model, device=args.device, dtype=args.dtype)
        rate = matmul_rate(lm.device, lm.dtype, 1024 if lm.device.type == "cpu" else 8192)
        largest = batch_size(lm, tokens=128, kind="generate")
        floor_tps, best, rates = decode_floor(lm, largest, log)
        log(f"[setup] {device_name}, {lm.name} ({parameters(lm) / 1e6:.0f}M parameters, {lm.dtype}), matmul "
            f"{rate / 1e12:.2f} TFLOP/s, decode floor {floor_tps:.0f} tokens/s at batch {best}, load "
            f"{os.getloadavg()[0]:.1f}")
        if "p-entropy" not in args.skip:
            rows += bench_p_entropy(lm, gsm8k_rows(lm.name, args.n), args.n_one, floor_tps, rate, log)
        if "label" not in args.skip:
            rows += bench_label(lm, gsm8k_rows(lm.name, args.n), args.n_one, args.samples, floor_tps, log)
        if "extract" not in args.skip:
            rows += bench_extract(lm, trivia_rows(lm.name, args.n), args.n_one, rate, log)
        del lm
    if "shape" not in args.skip:
        rows += bench_grade_shape(args.device, args.tiny, args.shape_rows, log)
    if "shape-pos" not in args.skip:
        rows += bench_grade_shape(args.device, args.tiny, args.shape_rows, log, loss="pos")
    if "scaling" not in args.skip and torch.device(args.device).type == "cuda":
        rows += bench_scaling(args.model, args.workers, args.scaling_questions, log)
    model = (f"{args.model}; matmul {rate / 1e12:.2f} TFLOP/s; decode floor {floor_tps:.0f} tokens/s at batch {best}; "
             if best else "")
    text = f"{device_name}; {model}load average {os.getloadavg()[0]:.1f}\n\n{table(rows)}\n"
    print(text)
    (args.out / "gpu_batch.md").write_text(text)
    (args.out / "gpu_batch.json").write_text(json.dumps({"device": device_name, "model": args.model,
                                                         "matmul_flops": rate, "decode_rates": rates, "rows": rows,
                                                         "log": lines}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
