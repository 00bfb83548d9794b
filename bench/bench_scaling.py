"""Scaling of ``--engine ray``: questions per second with 1, 2, 4 workers (model copies).

    python bench/bench_scaling.py [--model smollm2-135m-instruct] [--dataset triviaqa]
        [--questions 48] [--workers 1 2 4] [--work extract|label] [--threads-per-worker 1]
        [--gpus-per-worker 0] [--out bench/results/scaling.json]

For each worker count a fresh pool of Ray actors is started on a local Ray cluster (one model load
each, not timed), given a warm-up chunk, then timed on the same ``--questions`` questions, written
through the same sinks as the commands (Parquet feature store / labels JSONL, in a temporary folder).
CPU workers get ``--threads-per-worker`` torch threads each, so N workers use N x that many cores:
the figure says how well independent model copies fill a machine's cores (or share one GPU, with a
fractional ``--gpus-per-worker``). The single-process path (``--engine local``: one model in this
process, ``--threads-per-worker`` threads) is timed on the same questions before and after the Ray runs, for reference.

``--random-init CONFIG_DIR`` builds the model from a config.json + tokenizer folder with random weights
(same shapes and cost as the real model; for machines without the weights, e.g. a GPU box that cannot
reach the network). Results are printed as a Markdown table and saved as JSON.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent  # the repository: where results are written


def machine_info() -> dict:
    import platform

    import torch

    info = {"cpu_count": os.cpu_count(), "python": platform.python_version(), "torch": torch.__version__,
            "load_average_start": os.getloadavg()}
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                info["cpu"] = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    if torch.cuda.is_available():
        info["gpu"] = torch.cuda.get_device_name(0)
        info["gpu_count"] = torch.cuda.device_count()
    import ray

    info["ray"] = ray.__version__
    return info


def random_model(config_dir: Path, target: Path) -> str:
    """A model folder with the architecture of ``config_dir`` and seeded random weights."""
    import shutil

    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    torch.manual_seed(0)
    config = AutoConfig.from_pretrained(config_dir)
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    model.save_pretrained(target)
    for name in os.listdir(config_dir):
        if name.startswith(("tokenizer", "chat_template", "special_tokens", "generation_config")):
            shutil.copy(config_dir / name, target / name)
    return str(target)


def work_items(args, lm_name: str):
    """The questions (label work) or labelled rows (feature work), warm-up first."""
    from grade.tasks.tasks import load_questions

    questions = load_questions(args.dataset, limit=args.questions + args.warmup)
    if args.work == "label":
        return questions
    return [{"id": q.id, "dataset": q.dataset, "question": q.question, "label": i % 2, "task": q.task,
             "choices": q.choices} for i, q in enumerate(questions)]


def make_work_and_sink(args, model_name: str, folder: Path):
    from grade.batch.features import FeatureStoreSink, FeatureWork
    from grade.batch.labeling import LabelFileSink, LabelWork

    if args.work == "label":
        work = LabelWork(n_samples=args.samples, matcher="lenient", seed=0, max_new_tokens=args.max_new_tokens,
                         questions_per_batch=1)
        return work, LabelFileSink(folder / "labels.jsonl", {"model": model_name, "matcher": "lenient", "seed": 0},
                                   args.samples)
    return FeatureWork(loss="pre", keep_hidden=True), FeatureStoreSink(folder / "features.parquet", model_name, "pre",
                                                                      "paper")


def time_local(args, model_name: str, items) -> dict:
    """The single-process path on the same items (warm-up item first, not timed)."""
    import grade
    from grade.models.models import ModelSpec

    device = "cuda" if args.gpus_per_worker > 0 else "cpu"
    # As many torch threads as one CPU worker: on a shared machine more threads than free cores
    # make torch's thread pool stall, which would flatter the workers.
    lm = ModelSpec(model_name, device=device, threads=args.threads_per_worker).load()
    with tempfile.TemporaryDirectory() as folder:
        work, sink = make_work_and_sink(args, model_name, Path(folder))
        sink.write(work.process(lm, items[: args.warmup])["results"])
        start = time.perf_counter()
        sink.write(work.process(lm, items[args.warmup :])["results"])
        seconds = time.perf_counter() - start
    del lm, grade
    return {"workers": "local", "seconds": seconds, "questions": len(items) - args.warmup,
            "threads": args.threads_per_worker}


def time_ray(args, model_name: str, items, workers: int) -> dict:
    from grade.batch import ClusterOptions, RayRun
    from grade.models.models import ModelSpec

    cluster = ClusterOptions(workers=workers, gpus_per_worker=args.gpus_per_worker,
                             cpus_per_worker=args.threads_per_worker)
    spec = ModelSpec(model_name, threads=args.threads_per_worker if args.gpus_per_worker == 0 else None)
    with tempfile.TemporaryDirectory() as folder:
        work, sink = make_work_and_sink(args, model_name, Path(folder))
        t = time.perf_counter()
        with RayRun(work, spec, cluster) as run:
            load_s = time.perf_counter() - t
            # warm-up: one chunk per worker (first-call allocations, kernel selection), then the timed run
            run.execute(items[: args.warmup], sink, chunk_size=max(1, args.warmup // workers))
            report = run.execute(items[args.warmup :], sink, chunk_size=args.chunk_size)
    return {"workers": workers, "seconds": report.seconds, "questions": report.written, "load_s": load_s,
            "resent": report.resent, "utilisation": report.utilisation}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="smollm2-135m-instruct")
    parser.add_argument("--random-init", type=Path, default=None, help="config.json + tokenizer folder: random weights")
    parser.add_argument("--dataset", default="triviaqa")
    parser.add_argument("--questions", type=int, default=48)
    parser.add_argument("--warmup", type=int, default=4, help="questions run before timing (one chunk per worker)")
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 2, 4])
    parser.add_argument("--work", choices=("extract", "label"), default="extract")
    parser.add_argument("--samples", type=int, default=10, help="label work: samples per question")
    parser.add_argument("--max-new-tokens", type=int, default=12, help="label work: answer length")
    parser.add_argument("--threads-per-worker", type=int, default=1)
    parser.add_argument("--gpus-per-worker", type=float, default=0.0)
    parser.add_argument("--chunk-size", type=int, default=4)
    parser.add_argument("--num-cpus", type=int, default=None, help="CPUs of the local Ray cluster (default: all)")
    parser.add_argument("--no-local", action="store_true", help="skip the single-process reference")
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "scaling.json")
    args = parser.parse_args()

    import ray

    from grade.batch import connect

    with tempfile.TemporaryDirectory() as scratch:
        model_name = random_model(args.random_init, Path(scratch) / "model") if args.random_init else args.model
        items = work_items(args, model_name)
        connect(num_cpus=args.num_cpus or os.cpu_count())
        info = machine_info()
        rows = []
        if not args.no_local:
            rows.append(time_local(args, model_name, items))
            print(rows[-1], file=sys.stderr)
        for n in args.workers:
            rows.append(time_ray(args, model_name, items, n))
            print(rows[-1], file=sys.stderr)
        if not args.no_local:  # again, to see how much the machine drifted during the run
            rows.append({**time_local(args, model_name, items), "workers": "local (after)"})
            print(rows[-1], file=sys.stderr)
        ray.shutdown()
    info["load_average_end"] = os.getloadavg()
    base = next((r for r in rows if r["workers"] == 1), None)
    print(f"\n{args.work}, {args.questions} questions of {args.dataset}, model {args.model}"
          f"{' (random weights)' if args.random_init else ''}, {args.threads_per_worker} thread(s) per CPU worker, "
          f"{args.gpus_per_worker:g} GPU per worker; machine: {info.get('gpu', info.get('cpu'))}, "
          f"{info['cpu_count']} CPUs, load average {info['load_average_start'][0]:.1f} -> {info['load_average_end'][0]:.1f}\n")
    print("| workers | questions/s | speed-up vs 1 worker | workers busy | model load (s) |")
    print("|---|---|---|---|---|")
    for r in rows:
        r["questions_per_s"] = r["questions"] / r["seconds"]
        speedup = f"{r['questions_per_s'] / (base['questions'] / base['seconds']):.2f}x" if base else "-"
        load = f"{r['load_s']:.1f}" if "load_s" in r else "-"
        busy = f"{r['utilisation']:.0%}" if "utilisation" in r else "-"
        print(f"| {r['workers']} | {r['questions_per_s']:.2f} | {'-' if str(r['workers']).startswith('local') else speedup} | {busy} | {load} |")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"settings": {k: str(v) for k, v in vars(args).items()}, "machine": info,
                                    "rows": rows}, indent=2))
    print(f"\nsaved {args.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
