"""``python -m bench.app_cache``: Home asked the same question twice, computed vs answered from the analysis
cache, side by side in one run (Streamlit's ``AppTest``, the embedded SmolLM2 unless ``--model``).

Each round types a question not asked before, clicks Analyze (computed), then picks Home's example with the same
question and clicks Analyze again (answered from the cache). A warm-up question first pays the one-off loading
(model, probe, detectors, reference set), so what is compared is computing an analysis against reusing it,
each through a whole page run. Target: the second click takes under a fifth of the first.

    python -m bench.app_cache [--repeats 3] [--model smollm2-135m-instruct] [--out bench/results/app_cache]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

from .common import ROOT, machine, table, write_json

TARGET_RATIO = 0.2
FRANCE_EXAMPLE = "Capital of France (well known)"
QUESTION = "What is the capital of France?"
# Questions asked (and so cached) before each timed France pair; each round clears the cache first.
WARM_UP = ("Who wrote Pride and Prejudice?", "What is the boiling point of water at sea level?",
           "Who painted the Mona Lisa?", "What is the largest planet of the solar system?")


def _click(at, key: str) -> float:
    start = time.perf_counter()
    at.button(key=key).click().run(timeout=600)
    seconds = time.perf_counter() - start
    if at.exception or at.error:
        raise SystemExit(f"the page failed: {[e.value for e in [*at.exception, *at.error]]}")
    return seconds


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--model", default="smollm2-135m-instruct")
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "app_cache")
    args = parser.parse_args(argv)
    if not 1 <= args.repeats <= len(WARM_UP):
        parser.error(f"--repeats takes 1 to {len(WARM_UP)}")
    os.environ["GRADE_START_MODEL"] = args.model
    os.environ["GRADE_SHIPPED_RESULTS"] = "0"  # the France example's result ships: it would never be computed
    os.chdir(ROOT)  # the router's pages are relative paths
    from streamlit.testing.v1 import AppTest

    from studio import session

    load_before = os.getloadavg()
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=600).run()
    rows = []
    for round_, warm in enumerate(WARM_UP[:args.repeats], 1):
        session.analysis_cache.clear()
        at.text_area(key="question").input(warm)
        _click(at, "analyze")
        at.text_area(key="question").input(QUESTION)
        first = _click(at, "analyze")
        computed = at.session_state[session.ANALYSIS]
        at.selectbox(key="example").set_value(FRANCE_EXAMPLE).run()
        second = _click(at, "analyze")
        cached = at.session_state[session.ANALYSIS]
        if computed.from_cache or not cached.from_cache or cached.result is not computed.result:
            raise SystemExit("the second click did not reuse the first click's analysis")
        rows.append({"round": round_, "computed s": first, "from the cache s": second, "ratio": second / first})
        print(f"round {round_}: computed {first:.2f} s, from the cache {second:.2f} s, ratio {second / first:.3f}",
              flush=True)
    load_after = os.getloadavg()
    ratio = statistics.median(r["ratio"] for r in rows)
    report = {"machine": machine(), "model": args.model, "question": QUESTION, "rows": rows, "median_ratio": ratio,
              "target_ratio": TARGET_RATIO, "load_average_before": load_before, "load_average_after": load_after}
    write_json(args.out / "app_cache.json", report)
    text = (f"# Home, the same question twice: computed vs from the analysis cache ({args.model})\n\n"
            f"{machine()['cpu']}, {machine()['cpu_count']} cores; load average before {load_before[0]:.2f} / after "
            f"{load_after[0]:.2f}; whole page runs under AppTest.\n\n"
            + table(rows, ["round", "computed s", "from the cache s", "ratio"])
            + f"\n\nMedian ratio {ratio:.3f}; target < {TARGET_RATIO}: {'met' if ratio < TARGET_RATIO else 'NOT met'}.\n")
    (args.out / "app_cache.md").write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
