"""The demo trace store the Traces page opens on: a few real GSM8K traces of the model, wrong and correct, analysed.

    python scripts/build/build_demo_traces.py [--model qwen2.5-coder-1.5b-instruct] [--wrong 8] [--correct 8] [--work DIR]
                                        [any argument of python -m grade traces, e.g. --device cuda --dtype float32]

Reads the model's own traces that a reader marked step by step (``grade/datasets/real_step_errors``, see its
README), takes the **test split only** (the step verifier is tuned on dev: no dev row is shown as an example), and
of those the ones read with high confidence that are plainly wrong (a first wrong step and a wrong final answer) or
plainly right (every step correct and the gold final answer). Both groups pass the same length bound and are taken
in the order of the sha1 of their problem id, so which rows come is fixed by the data alone. They are written as a
trace JSONL (the first wrong step as the project's 1-based ``error_step``, its kind as ``error_kind``) and analysed
by ``python -m grade traces`` into ``DIR/store`` (resumable: a second run analyses only what is missing), then
copied, with their token rows, to ``grade/assets/demo_traces/<model>/`` (package data).

The store's steps must be the reader's steps, or the known error step would point at another sentence: every trace
is checked (same step count, and the marked step's text is the reader's ``first_wrong_text``) before anything is
copied.

    python scripts/build/build_demo_traces.py --verifier-only

reads the shipped demo store's traces with the step verifier shipped now (``grade.traces.analysis.verify_item``,
on this machine's CPU, as ``grade traces`` would) and writes its columns back, the GRADE analysis untouched: a new
verifier does not need minutes of step-wise analysis per trace again.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from grade.steps.real_errors import trace_line  # noqa: E402  (one place: scripts/studies/annotated_traces_jsonl.py too)

READ = ROOT / "grade" / "datasets" / "real_step_errors"
#: Characters of a trace at most: the analysis cost grows with the steps and tokens (minutes per trace on a CPU),
#: and the same bound for both groups keeps length from telling them apart by construction.
MAX_CHARS = 800


def chosen_rows(model: str, n_wrong: int, n_correct: int) -> list[dict]:
    from grade.steps.real_errors import annotation_files, annotation_rows

    rows = [r for name in annotation_files(READ) if name.startswith("gsm8k_qwen.") for r in annotation_rows(name, READ)]
    rows = [r for r in rows if r["model"] == model and r["split"] == "test" and r["confidence"] == "high"
            and len(r["trace"]) <= MAX_CHARS]
    rows.sort(key=lambda r: hashlib.sha1(r["id"].encode()).hexdigest())
    wrong = [r for r in rows if r["first_wrong_step"] is not None and not r["final_correct"]][:n_wrong]
    right = [r for r in rows if r["first_wrong_step"] is None and r["final_correct"]][:n_correct]
    if len(wrong) < n_wrong or len(right) < n_correct:
        raise SystemExit(f"only {len(wrong)} wrong and {len(right)} correct test traces of {model} qualify")
    return wrong + right


def check_steps(frame, rows: list[dict]) -> None:
    """Refuse a store whose steps are not the reader's (see the module docstring)."""
    by_id = {r["id"]: r for r in rows}
    bad = []
    for _, t in frame.iterrows():
        r = by_id[t["doc_id"]]
        if int(t["n_steps"]) != r["n_steps"]:
            bad.append(f"{t['doc_id']}: {t['n_steps']} steps, the reader's {r['n_steps']}")
        elif r["first_wrong_step"] is not None and \
                str(t["step_texts"][r["first_wrong_step"]]).strip() != str(r["first_wrong_text"]).strip():
            bad.append(f"{t['doc_id']}: step {r['first_wrong_step'] + 1} reads {t['step_texts'][r['first_wrong_step']]!r}")
    if bad:
        raise SystemExit("the analysed steps are not the reader's:\n  " + "\n  ".join(bad))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="qwen2.5-coder-1.5b-instruct")
    parser.add_argument("--wrong", type=int, default=8)
    parser.add_argument("--correct", type=int, default=8)
    parser.add_argument("--work", type=Path, default=None, help="where the JSONL and the analysed store go "
                        "(default runs/demo_traces/<model>)")
    parser.add_argument("--verifier-only", action="store_true",
                        help="the shipped store's step-verifier columns again, with the verifier shipped now")
    args, passed_on = parser.parse_known_args()  # the rest goes to `grade traces` (where and how the model runs)

    import pyarrow.parquet as pq

    from grade.traces import TraceStore

    target = ROOT / "grade" / "assets" / "demo_traces" / args.model
    if args.verifier_only:
        return reverify(target, args.model)

    work = args.work or ROOT / "runs" / "demo_traces" / args.model
    work.mkdir(parents=True, exist_ok=True)
    rows = chosen_rows(args.model, args.wrong, args.correct)
    samples = work / "traces.jsonl"
    samples.write_text("".join(json.dumps(trace_line(r)) + "\n" for r in rows))
    analysed = work / "store"
    subprocess.run([sys.executable, "-m", "grade", "traces", "--samples", str(samples), "--out", str(analysed),
                    "--model", args.model, *passed_on], check=True, cwd=ROOT)

    source = TraceStore(analysed)
    frame = source.traces(annotated=False)
    check_steps(frame, rows)
    traces, tokens = store_rows(source)
    order = {r["id"]: i for i, r in enumerate(rows)}
    traces.sort(key=lambda t: order[t["doc_id"]])
    copy_store(source.meta(), traces, tokens, target)
    return 0


def store_rows(store) -> tuple[list[dict], list[dict]]:
    """A store's trace and token rows as pyarrow gives them: nullable integer columns stay None (pandas rows
    would turn them into NaN floats)."""
    import pyarrow.parquet as pq

    traces = [r for part in sorted(store.traces_dir.glob("part-*.parquet")) for r in pq.read_table(part).to_pylist()]
    tokens = [r for part in sorted(store.tokens_dir.glob("part-*.parquet")) for r in pq.read_table(part).to_pylist()]
    return traces, tokens


def copy_store(meta: dict, traces: list[dict], tokens: list[dict], target: Path) -> None:
    """Write ``traces`` (in this order) with their token rows as the demo store ``target``, replacing it."""
    from grade.traces import TraceStore

    if target.exists():
        shutil.rmtree(target)
    demo = TraceStore(target)
    demo.prepare(meta["model"], meta["srank"], {**meta["source"], "file": "grade/datasets/real_step_errors, test split (demo)"})
    demo.write([{"trace": t, "tokens": [k for k in tokens if k["trace_id"] == t["trace_id"]]} for t in traces])
    wrong = sum(t["correct"] is False for t in traces)
    print(f"{len(traces)} traces ({wrong} wrong, {len(traces) - wrong} correct) -> {target}")
    print(json.dumps({str(p.relative_to(target)): p.stat().st_size for p in target.rglob("*") if p.is_file()}))


def reverify(target: Path, model: str) -> int:
    """The step-verifier columns of the demo store ``target`` again (see the module docstring)."""
    import tempfile

    import grade
    from grade.traces import TraceStore
    from grade.traces.analysis import verify_item
    from grade.traces.sources import TraceItem

    with tempfile.TemporaryDirectory() as tmp:  # read it whole before the same folder is written again
        shutil.copytree(target, Path(tmp) / "store")
        source = TraceStore(Path(tmp) / "store")
        meta = source.meta()
        traces, tokens = store_rows(source)
    lm = grade.load_model(meta.get("model") or model, device="cpu", dtype="float32")
    for t in traces:
        item = TraceItem(t["doc_id"], t["sample"], t["question"], t["response"], t["correct"], t["task"])
        t.update(verify_item(lm, item, t["response"]))
        print(f"{t['trace_id']}: {t['verifier_reader']} -> {t['verifier_suspect_step']}", flush=True)
    copy_store(meta, traces, tokens, target)
    return 0


if __name__ == "__main__":
    sys.exit(main())
