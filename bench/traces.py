"""Traces per minute of ``python -m grade traces``: step-wise GRADE_pos and token shock of each trace, stored.

    python -m bench.traces [--set fixture|own] [--samples FILE] [--limit N] [--device cuda] [--threads 2]
    python -m bench.traces --triage --set own --limit 200 --full 4     # --verifier-only beside the full analysis

Two routes over the same traces, side by side:

* **store**: what ``grade traces`` runs (:func:`grade.traces.analyze_traces` into a fresh store): fast-route
  stable ranks, token shock from ``C_g = ΔΔᵀ`` on layers whose ``C_h`` is certified full rank;
* **exact**: what the Reasoning trace page runs (``grade.analyze(..., steps=True, spectra=True)``): float64
  eigen-decompositions of every step and layer, which give the same token shock.

Trace sets: ``fixture`` (default) is ``tests/data/samples_gsm8k_*.jsonl``, the lm-evaluation-harness file of
3 SmolLM2 greedy traces cut at 96 tokens and 3 GSM8K worked solutions; ``own`` is the model's own majority
answers to the first GSM8K problems of ``data/labels/smollm2-135m-instruct/gsm8k.jsonl`` (up to 256
tokens, what a GSM8K evaluation of a small model produces); ``--samples`` takes any file ``grade traces``
reads. The model is loaded and one trace analysed before timing. Prints a Markdown table and writes JSON.

``--triage``: traces per minute of ``grade traces --verifier-only`` (the step verifier's reader and the check, no
GRADE: :func:`grade.traces.runs.triage_traces`) over all --limit traces, beside the full analysis
(:func:`grade.traces.analyze_traces`, GRADE and the verifier) over the first ``--full`` of the same traces, and the
minutes a 1,000-trace run would take by each.
"""

from __future__ import annotations

import argparse
import json
import lzma
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

from .common import ROOT, fmt, machine, table, write_json

FIXTURE = ROOT / "tests" / "data" / "samples_gsm8k_2025-11-26T17-00-00.000000.jsonl"
OWN_LABELS = ROOT / "data" / "labels" / "smollm2-135m-instruct" / "gsm8k.jsonl"


def _labels_text(path: Path) -> str:
    for candidate in (path, path.with_suffix(".jsonl.xz")):
        if candidate.exists():
            return lzma.open(candidate, "rt").read() if candidate.suffix == ".xz" else candidate.read_text()
    raise FileNotFoundError(f"{path} (or .xz) not found")


def own_traces(folder: Path, limit: int) -> Path:
    """A trace JSONL of the model's own majority answers (correct = the labeller's score of that answer)."""
    from grade.tasks.tasks import answer_key

    rows = []
    for line in _labels_text(OWN_LABELS).splitlines()[:limit]:
        r = json.loads(line)
        key = answer_key("gsm8k", r["majority"])
        rows.append({"doc_id": r["id"], "question": r["question"], "response": r["majority"], "answers": r["answers"],
                     "correct": key is not None and any(answer_key("gsm8k", a) == key for a in r["answers"])})
    path = folder / "own_traces.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def _sync(device) -> None:
    if torch.device(device).type == "cuda":
        torch.cuda.synchronize()


def run(lm, samples: Path, *, limit: int | None = None, exact: bool = True, log=print) -> dict:
    """Time both routes over the traces of ``samples``; returns the numbers (see the module docstring)."""
    import grade
    from grade.traces import TraceStore, analyze_traces, read_traces

    source = read_traces(samples, limit=limit)
    items = source.items
    log(f"[traces] {len(items)} traces from {samples.name} on {lm.device}")
    first = items[0]
    grade.analyze(lm, first.question, task=first.task, loss="pos", response=first.response.strip(), steps=True,
                  spectra=False, token_scores=True)  # warm-up: kernels, allocator
    with tempfile.TemporaryDirectory(prefix="bench-traces-") as folder:
        _sync(lm.device)
        t, c = time.perf_counter(), time.process_time()
        report = analyze_traces(lm, source, Path(folder) / "store", chunk_size=8)
        _sync(lm.device)
        store_s, store_cpu = time.perf_counter() - t, time.process_time() - c
        store = TraceStore(Path(folder) / "store")
        frame = store.traces()
        tokens = store.tokens()
    assert report.written == len(items), report
    out = {
        "samples": str(samples.relative_to(ROOT) if samples.is_relative_to(ROOT) else samples),
        "traces": len(items),
        "device": str(lm.device), "dtype": str(lm.dtype).replace("torch.", ""), "threads": torch.get_num_threads(),
        "response_tokens_mean": float(frame["n_tokens"].mean()), "steps_mean": float(frame["n_steps"].mean()),
        "store_s": store_s, "store_traces_per_min": 60 * len(items) / store_s,
        # Process CPU seconds (all threads): on a machine shared with other jobs, wall time also counts waiting.
        "store_cpu_s": store_cpu,
        "load_average": list(os.getloadavg()) if hasattr(os, "getloadavg") else None,
        "store_trace_s": frame["seconds"].tolist(),
    }
    if exact:
        times, errors = [], []
        c = time.process_time()
        for item, row in zip(items, frame.itertuples(index=False)):
            _sync(lm.device)
            t = time.perf_counter()
            result = grade.analyze(lm, item.question, task=item.task, loss="pos", response=item.response.strip(),
                                   steps=True, spectra=True)
            _sync(lm.device)
            times.append(time.perf_counter() - t)
            scores = result.token_scores[:, result.response_start:]
            stored = np.stack(tokens.loc[tokens["trace_id"] == row.trace_id, "scores"].map(np.asarray).tolist(), axis=1)
            scale = np.abs(scores).max(axis=1, keepdims=True)
            scale[scale == 0] = 1.0
            errors.append(float(np.max(np.abs(stored - scores) / scale)))
        exact_s = sum(times)
        out.update(exact_s=exact_s, exact_cpu_s=time.process_time() - c, exact_traces_per_min=60 * len(items) / exact_s, exact_trace_s=times,
                   store_over_exact_speed=exact_s / store_s,
                   max_token_shock_diff=max(errors))  # relative to each layer's largest score; float32 storage
    return out


def run_triage(lm, samples: Path, *, limit: int | None, n_full: int, log=print) -> dict:
    """Time ``--verifier-only`` over the traces of ``samples`` and the full analysis over the first ``n_full``."""
    import grade
    from grade.steps.verifier import load_reader
    from grade.traces import analyze_traces, read_traces
    from grade.traces.runs import triage_traces

    source = read_traces(samples, limit=limit)
    reader = load_reader(lm)
    first = source.items[0]
    grade.analyze(lm, first.question, task=first.task, loss="pos", response=first.response.strip(), steps=True,
                  spectra=False, token_scores=True)  # warm-up of both models
    from grade.steps.verifier import verify_trace

    verify_trace(reader, first.question, first.response.strip())
    log(f"[triage] {len(source.items)} traces from {samples.name}; the full analysis on the first {n_full}")
    out = {"samples": str(samples.relative_to(ROOT) if samples.is_relative_to(ROOT) else samples),
           "traces": len(source.items), "full_traces": n_full, "model": lm.name, "reader": reader.name,
           "device": str(lm.device), "threads": torch.get_num_threads()}
    with tempfile.TemporaryDirectory(prefix="bench-triage-") as folder:
        t, c = time.perf_counter(), time.process_time()
        report = triage_traces(reader, source, Path(folder) / "triage", model=lm.name)
        out.update(triage_s=time.perf_counter() - t, triage_cpu_s=time.process_time() - c)
        assert report.written == len(source.items), report
        full = read_traces(samples, limit=n_full)
        t, c = time.perf_counter(), time.process_time()
        report = analyze_traces(lm, full, Path(folder) / "full", chunk_size=8)
        out.update(full_s=time.perf_counter() - t, full_cpu_s=time.process_time() - c)
        assert report.written == len(full.items), report
    out.update(triage_traces_per_min=60 * out["traces"] / out["triage_s"],
               full_traces_per_min=60 * n_full / out["full_s"],
               load_average=list(os.getloadavg()) if hasattr(os, "getloadavg") else None)
    out["triage_over_full_speed"] = out["triage_traces_per_min"] / out["full_traces_per_min"]
    return out


def triage_summary(result: dict) -> str:
    rows = [{"route": "--verifier-only (verifier + check)", "traces": result["traces"],
             "traces/min": result["triage_traces_per_min"],
             "CPU s/trace": result["triage_cpu_s"] / result["traces"],
             "1,000 traces (min)": 1000 / result["triage_traces_per_min"]},
            {"route": "full (GRADE + verifier)", "traces": result["full_traces"],
             "traces/min": result["full_traces_per_min"],
             "CPU s/trace": result["full_cpu_s"] / result["full_traces"],
             "1,000 traces (min)": 1000 / result["full_traces_per_min"]}]
    head = (f"{result['samples']}: model {result['model']}, reader {result['reader']}, {result['device']}, "
            f"{result['threads']} threads; load average {result['load_average']}")
    return (head + "\n\n" + table(rows, ["route", "traces", "traces/min", "CPU s/trace", "1,000 traces (min)"])
            + f"\n--verifier-only / full speed: {fmt(result['triage_over_full_speed'])}x")


def summary(result: dict) -> str:
    rows = [{"route": "store (grade traces)", "traces/min": result["store_traces_per_min"],
             "median s/trace": statistics.median(result["store_trace_s"]),
             "CPU s/trace": result["store_cpu_s"] / result["traces"]}]
    if "exact_s" in result:
        rows.append({"route": "exact (spectra=True)", "traces/min": result["exact_traces_per_min"],
                     "median s/trace": statistics.median(result["exact_trace_s"]),
                     "CPU s/trace": result["exact_cpu_s"] / result["traces"]})
    head = (f"{result['traces']} traces of {result['samples']}: {fmt(result['response_tokens_mean'])} response tokens, "
            f"{fmt(result['steps_mean'])} steps on average; {result['device']}, {result['dtype']}, "
            f"{result['threads']} threads; load average {result['load_average']}")
    tail = ""
    if "exact_s" in result:
        tail = (f"\nstore / exact speed: {fmt(result['store_over_exact_speed'])}x; largest token-shock difference "
                f"(relative to the layer's largest score): {result['max_token_shock_diff']:.1e}")
    return head + "\n\n" + table(rows, ["route", "traces/min", "median s/trace", "CPU s/trace"]) + tail


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.traces", description=__doc__.split("\n")[0])
    parser.add_argument("--set", choices=("fixture", "own"), default="fixture")
    parser.add_argument("--samples", type=Path, default=None, help="any file grade traces reads (overrides --set)")
    parser.add_argument("--limit", type=int, default=None, help="first N traces (--set own: default 6)")
    parser.add_argument("--model", default="smollm2-135m-instruct")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--dtype", default=None)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--no-exact", action="store_true", help="time the store route only")
    parser.add_argument("--triage", action="store_true", help="--verifier-only beside the full analysis")
    parser.add_argument("--full", type=int, default=4, help="with --triage: traces given the full analysis")
    parser.add_argument("--out", type=Path, default=ROOT / "runs" / "bench")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)

    import grade

    lm = grade.load_model(args.model, device=args.device, dtype=args.dtype)
    with tempfile.TemporaryDirectory() as folder:
        samples = args.samples or (FIXTURE if args.set == "fixture" else own_traces(Path(folder), args.limit or 6))
        if args.triage:
            result = run_triage(lm, samples, limit=args.limit, n_full=args.full,
                                log=lambda line: print(line, file=sys.stderr))
            result["set"] = "samples" if args.samples else args.set
            payload = {"machine": machine(), "finished": time.strftime("%Y-%m-%d %H:%M:%S"), **result}
            name = f"traces_triage_{result['set']}_{torch.device(args.device).type}.json"
            write_json(args.out / name, payload)
            print(triage_summary(result))
            print(f"\n-> {args.out / name}")
            return 0
        result = run(lm, samples, limit=args.limit if args.set == "fixture" or args.samples else None,
                     exact=not args.no_exact, log=lambda line: print(line, file=sys.stderr))
    result["set"] = "samples" if args.samples else args.set
    payload = {"machine": machine(), "model": args.model, "finished": time.strftime("%Y-%m-%d %H:%M:%S"), **result}
    name = f"traces_{result['set']}_{torch.device(args.device).type}.json"
    write_json(args.out / name, payload)
    print(summary(result))
    print(f"\n-> {args.out / name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
