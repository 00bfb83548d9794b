"""``python -m bench.analysis_memory``: the memory one cap-size analysis holds above the loaded model (issue 32, item 1).

A request at the served caps (a 2,000-character question with a 5,990-character document, as Home sends it:
``pre`` with the prompt pass kept, or ``pos`` over a given answer), each run in a fresh process: the model is
loaded, a short analysis touches every weight, then the process's resident memory is read every 10 ms while
the analysis runs. Reported: the peak above the loaded model, the seconds, and the largest difference of the
rank ratios between the routes, side by side:

* ``whole``: one forward pass holding every layer's activations and h (``grade.analyze(memory_mb=None)``);
* ``layer by layer``: the bound the served studio uses (``Limits.analysis_memory_mb``).

``--concurrent N`` then runs N cap-size ``pre`` requests at once in one process (threads sharing the model, as
the served queue's workers do) and reports that process's peak above the loaded model.

    python -m bench.analysis_memory [--model qwen2.5-coder-1.5b-instruct] [--routes pre pos] [--concurrent 2]
    python -m bench.analysis_memory --routes --concurrent 3     # only the concurrent requests
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import threading
import time
from pathlib import Path

from .common import ROOT, machine, write_json

MODEL = "qwen2.5-coder-1.5b-instruct"
PARAGRAPH = ("The river delta supports a wide range of birds, fish and plants, and its wetlands filter water for the "
             "towns downstream. Farmers along the banks grow rice and vegetables in the rich soil. ")
DOCUMENT = (PARAGRAPH * 100)[:5990]
QUESTION = ("Considering the passage, explain in detail how the wetlands help the towns and what farmers grow. " * 40)[:2000]
ANSWER = "The wetlands filter water for the towns, and the farmers grow rice and vegetables. " * 6


def _child(model: str, route: str, memory_mb: float | None, concurrent: int) -> dict:
    import psutil
    import torch

    import grade

    proc = psutil.Process()
    lm = grade.load_model(model, device="cpu")
    grade.analyze(lm, "What is 2+2?", loss="pre")  # every weight read once: the loaded model's pages are in
    base = proc.memory_info().rss
    peak, done = [base], threading.Event()

    def poll():
        while not done.is_set():
            peak[0] = max(peak[0], proc.memory_info().rss)
            time.sleep(0.01)

    def one(out: list):
        kwargs = dict(loss="pre", keep_hidden=True, keep_prompt_pass=True) if route == "pre" else \
            dict(loss="pos", response=ANSWER, keep_hidden=True)
        out.append(grade.analyze(lm, QUESTION, context=DOCUMENT, memory_mb=memory_mb, **kwargs))

    watcher = threading.Thread(target=poll, daemon=True)
    watcher.start()
    start = time.perf_counter()
    results: list = []
    workers = [threading.Thread(target=one, args=(results,)) for _ in range(concurrent)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    seconds = time.perf_counter() - start
    done.set()
    watcher.join()
    if len(results) != concurrent:
        raise SystemExit("an analysis failed")
    r = results[0]
    return {"route": route, "memory_mb": memory_mb, "concurrent": concurrent, "tokens": len(r.input_ids),
            "model_rss_mb": base / 2**20, "peak_above_model_mb": (peak[0] - base) / 2**20, "seconds": seconds,
            "rank_ratio": r.rank_ratio.tolist(), "torch_threads": torch.get_num_threads()}


def _run(model: str, route: str, memory_mb: float | None, concurrent: int = 1) -> dict:
    """One measurement in a fresh process (a process's freed memory is not always given back to the system)."""
    command = [sys.executable, "-m", "bench.analysis_memory", "--child", route, "--model", model,
               "--memory-mb", "none" if memory_mb is None else str(memory_mb), "--concurrent", str(concurrent)]
    out = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, check=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default=MODEL)
    parser.add_argument("--routes", nargs="*", default=["pre", "pos"], choices=["pre", "pos"],
                        help="whole pass vs layer by layer for each; none (a bare --routes): only --concurrent")
    parser.add_argument("--concurrent", type=int, default=0, help="then N cap-size pre requests at once (0: none)")
    parser.add_argument("--child", choices=["pre", "pos"], help=argparse.SUPPRESS)
    parser.add_argument("--memory-mb", default="none", help=argparse.SUPPRESS)
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "analysis_memory")
    args = parser.parse_args(argv)
    if args.child:
        bound = None if args.memory_mb == "none" else float(args.memory_mb)
        print(json.dumps(_child(args.model, args.child, bound, max(1, args.concurrent))))
        return 0

    import numpy as np

    from studio.served import SERVED_LIMITS

    bound = SERVED_LIMITS.analysis_memory_mb
    rows = []
    for route in args.routes:  # one Qwen process at a time: the machine is shared
        whole, pieces = _run(args.model, route, None), _run(args.model, route, bound)
        diff = float(np.max(np.abs(np.array(whole["rank_ratio"]) - np.array(pieces["rank_ratio"]))))
        rows.append({"route": route, "whole": whole, "layer_by_layer": pieces, "max_ratio_diff": diff})
        print(f"{route}: {whole['tokens']} tokens; whole pass {whole['peak_above_model_mb']:,.0f} MB above the model "
              f"in {whole['seconds']:.0f} s; layer by layer {pieces['peak_above_model_mb']:,.0f} MB in "
              f"{pieces['seconds']:.0f} s ({whole['peak_above_model_mb'] / pieces['peak_above_model_mb']:.1f}x less); "
              f"rank ratios differ by at most {diff:.1e}", flush=True)
    together = None
    if args.concurrent:
        together = _run(args.model, "pre", bound, args.concurrent)
        print(f"{args.concurrent} cap-size pre requests at once: {together['peak_above_model_mb']:,.0f} MB above the "
              f"model in {together['seconds']:.0f} s", flush=True)
    # a concurrent-only run keeps the routes' file of an earlier run
    name = "analysis_memory.json" if rows else f"analysis_memory_concurrent_{args.concurrent}.json"
    write_json(args.out / name, {"machine": machine(), "bound_mb": bound, "routes": rows, "concurrent": together})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
