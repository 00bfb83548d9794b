"""Per-step features of every trace the step verifier learns from or is scored on, cached per trace.

    python scripts/studies/step_verifier_features.py --reader smollm2-135m-instruct [--threads 1] [--only annotated]
    python scripts/studies/step_verifier_features.py --reader qwen2.5-coder-1.5b-instruct --device cuda   # on a GPU
    python scripts/studies/step_verifier_features.py --external data/real_step_errors_external --only annotated

``--external DIR``: the annotated traces of other models (scripts/studies/external_step_errors.py) first, dev and
test of each file in turn, then the project's own annotation files (the written ones last).

Order: round robin over annotated dev, annotated test and injected errors in the model's own traces (a run cut
short leaves comparable parts of each), then injected errors in reference solutions, then (``--own``) the model's
own replies as written; each trace's
features land in ``data/step_verifier/<reader>/<key>.npz`` (git-ignored) as soon as they are computed, so a
run can stop any time and resume. ``traces.jsonl`` beside them lists every trace (with its split and label).
"""

from __future__ import annotations

import argparse
import json
import lzma
import sys
import time
from dataclasses import asdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

LABELS = ROOT / "data/labels/qwen2.5-coder-1.5b-instruct/gsm8k.jsonl.xz"


def all_traces(n_reference: int = 150, own: bool = False):
    from grade.steps.real_errors import annotated_traces, own_traces, training_traces
    from grade.tasks.tasks import load_questions

    annotated = annotated_traces()
    labels = [json.loads(line) for line in lzma.open(LABELS, "rt")]
    refs = [{"id": q.id, "question": q.question, "solution": q.solution} for q in load_questions("gsm8k")]
    train = training_traces(annotated, labels, refs, n_reference=n_reference)
    if own:  # the model's own replies as written, labelled later by completions (scripts/studies/step_rollouts.py)
        train += own_traces(annotated, labels)
    return annotated, train


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--reader", default="smollm2-135m-instruct")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--device", default="cpu")
    p.add_argument("--dtype", default="float32", help="float32: the precision the verifier is measured and used at")
    p.add_argument("--n-reference", type=int, default=150)
    p.add_argument("--test-first", action="store_true", help="every annotated test trace first")
    p.add_argument("--only", choices=("annotated", "train"), default=None)
    p.add_argument("--limit", type=int, default=None, help="the first this many traces of the order (a trial)")
    p.add_argument("--own", action="store_true",
                   help="also the model's own GSM8K replies as written (their labels come from scripts/studies/step_rollouts.py)")
    p.add_argument("--external", type=Path, default=None, metavar="DIR",
                   help="also the external annotation files in DIR, read first (scripts/studies/external_step_errors.py)")
    p.add_argument("--files", nargs="+", default=None, metavar="NAME",
                   help="annotated traces of these annotation files only (e.g. gsm8k_qwen.a gsm8k_qwen.b)")
    args = p.parse_args(argv)
    import torch

    torch.set_num_threads(args.threads)
    import grade
    from grade.steps.verifier import cached_features, trace_key

    annotated, train = all_traces(args.n_reference, args.own)
    folder = ROOT / "data/step_verifier" / args.reader
    folder.mkdir(parents=True, exist_ok=True)
    queues = [[t for t in annotated if t.split == "dev"], [t for t in annotated if t.split == "test"],
              [t for t in train if t.source == "injected own"]]
    order = [q[i] for i in range(max(map(len, queues))) for q in queues if i < len(q)]
    order += [t for t in train if t.source == "injected reference"]
    order += [t for t in train if t.source == "own"]
    if args.external:
        from grade.steps.real_errors import annotated_traces

        external = annotated_traces(folder=args.external)
        files = sorted({t.file for t in external})
        queues = [[t for t in external if t.file == f] for f in files]
        first = [q[i] for i in range(max(map(len, queues))) for q in queues if i < len(q)]
        # the project's own annotated traces next, the written ones last
        order = first + sorted(order, key=lambda t: (t.source != "annotated", "written" in t.file))
    if args.test_first:  # the scored half before more training traces, when time is short
        order = [t for t in order if t.split == "test"] + [t for t in order if t.split != "test"]
    if args.files:
        order = [t for t in order if t.source != "annotated" or t.file.split(".jsonl")[0] in args.files]
    if args.only == "annotated":
        order = [t for t in order if t.source == "annotated"]
    elif args.only == "train":
        order = [t for t in order if t.source != "annotated"]
    order = order[: args.limit]
    # every trace of this run listed with its split, the external ones too: the compaction fits its projection on
    # every trace but the annotated test halves (scripts/studies/compact_verifier_features.py)
    listed = annotated + train + (external if args.external else [])
    rows = [dict(asdict(t), key=trace_key(args.reader, t.question, t.trace, t.task)) for t in listed]
    (folder / "traces.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    lm = grade.load_model(args.reader, device=args.device, dtype=args.dtype)
    t0 = time.perf_counter()
    for i, t in enumerate(order):
        cached_features(lm, t.question, t.trace, folder, task=t.task)
        if i % 20 == 0:
            print(f"{i + 1}/{len(order)} {t.source} {t.split} {time.perf_counter() - t0:.0f} s", flush=True)
    print(f"done: {len(order)} traces in {time.perf_counter() - t0:.0f} s", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
