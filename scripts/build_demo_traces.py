"""The demo trace store the Traces page opens on: a few of the step-error benchmark's analysed traces.

    python scripts/build_demo_traces.py STORE [--model qwen2.5-coder-1.5b-instruct] [--own 8] [--injected 4]

STORE is the trace store that ``python -m grade steperrors`` wrote (``OUT/store``; for Qwen it was analysed on
one H100, see results/step_errors/README.md). Takes the model's own traces with a verified arithmetic slip and
injected-error traces of the test split, in store order, and writes them, with their token rows, to
``grade/assets/demo_traces/<model>/`` (package data). Their known error steps come along, so the page's
aggregates show how often the suspect step is the wrong step from the first visit.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("store", type=Path)
    parser.add_argument("--model", default="qwen2.5-coder-1.5b-instruct")
    parser.add_argument("--own", type=int, default=8)
    parser.add_argument("--injected", type=int, default=4)
    args = parser.parse_args()

    from grade.steps.step_errors import INJECTIONS, OWN_KIND, split_of
    from grade.traces import TraceStore

    source = TraceStore(args.store)
    frame = source.traces(annotated=False)
    own = frame[frame["known_error_kind"] == OWN_KIND].head(args.own)
    injected = frame[[k in INJECTIONS and split_of(str(d).split(":")[0]) == "test"
                      for k, d in zip(frame["known_error_kind"], frame["doc_id"])]]
    injected = injected.groupby("known_error_kind", group_keys=False).head(max(1, args.injected // len(INJECTIONS)))
    chosen = list(own["trace_id"]) + list(injected["trace_id"])
    target = ROOT / "grade" / "assets" / "demo_traces" / args.model
    shutil.rmtree(target, ignore_errors=True)
    demo = TraceStore(target)
    meta = source.meta()
    demo.prepare(meta["model"], meta["srank"], {**meta["source"], "file": "step-error benchmark (demo)"})
    tokens = source.tokens()
    rows = [r for _, r in frame[frame["trace_id"].isin(chosen)].iterrows()]
    results = [{"trace": {k: (v.tolist() if hasattr(v, "tolist") else v) for k, v in r.items()},
                "tokens": tokens[tokens["trace_id"] == r["trace_id"]].to_dict("records")} for r in rows]
    demo.write(results)
    print(f"{len(results)} traces ({len(own)} own, {len(injected)} injected) -> {target}")
    print(json.dumps({p.name: p.stat().st_size for p in target.rglob("*") if p.is_file()}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
