"""``python -m bench.click_to_verdict``: what a user of Home waits, from the click on Analyze to the verdict on the
screen, in headless Chromium, beside the analysis call alone, in one run.

Starts ``streamlit run app.py`` on the model (Qwen2.5-Coder-1.5B-Instruct by default; local mode, shipped results
on), opens the page in headless Chromium (Debian's ``chromium`` + ``chromium-driver``; the browser's processes
held at low priority, as in ``bench/load_test.py``), and for each case types the question, picks its type, clicks
Analyze and reads the page every 0.1 s until the verdict card of the new answer is drawn (``click_to_verdict``)
and until the page has finished its script run (``click_to_settled``). Beside it, the analysis call alone: the
"Time" the page shows, the analysis' own seconds (:func:`studio.workflows.analyze_question`, measured in the
server in the same run). The ratio of the two says what the page adds around the analysis.

Cases: one of Home's examples (its precomputed result where one ships for this model, generator and settings,
else computed), short typed questions (each asked once, so none comes from the cache) and a GSM8K word problem
(its answer at the task's length, 256 tokens). The waiting box's first estimate is read too, against the real
wait. The report states the machine, its load average before and after, and what generated the answers.

    python -m bench.click_to_verdict [--model qwen2.5-coder-1.5b-instruct] [--repeats 3] [--out bench/results/click_to_verdict]
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from .common import ROOT, machine, table, write_json
from . import load_test
from .load_test import KeepLow, _css, _free_port, _idle, set_text, wait_healthy

MODEL = "qwen2.5-coder-1.5b-instruct"
TARGET_S = 5.0
EXAMPLE = "What is the capital of France?"
SHORT = ("What is the capital of Peru?", "What is the capital of Norway?", "What is the capital of Chile?",
         "What is the capital of Egypt?", "What is the capital of Canada?")
GSM8K = ("Natalia sold clips to 48 of her friends in April, and then she sold half as many clips in May. How many "
         "clips did Natalia sell altogether in April and May?")
HOST = "127.0.0.1"

#: One script run per poll: the answer card, whether a verdict card is drawn, the waiting box, the page's
#: "Time" metric, whether the page still runs its script, the first error.
_PAGE_STATE = """
const text = s => { const e = document.querySelector(s); return e ? e.innerText : null; };
const metric = [...document.querySelectorAll('[data-testid="stMetric"]')].map(m => m.innerText)
  .find(t => t.startsWith('Time')) || null;
return {answer: text('.st-key-answer'), verdict: !!document.querySelector('.st-key-verdict'),
        queue: text('.st-key-queue_status'), time: metric,
        running: !!document.querySelector('[data-testid="stStatusWidget"]'),
        cached: !!document.querySelector('.st-key-cached_hint'),
        error: text('[data-testid="stException"], [data-testid="stAlertContentError"]')};
"""


def start_server(model: str, port: int, log) -> subprocess.Popen:
    """The studio as ``make run`` starts it, its shipped example results on."""
    return load_test.start_server(model, port, log, served=False, env={"GRADE_SHIPPED_RESULTS": "1"})


def _wait_for(driver, predicate, timeout: float, what: str, every: float = 0.1):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            found = predicate(driver)
        except Exception:  # a page between two drawings: read it again
            found = None
        if found:
            return found
        time.sleep(every)
    raise TimeoutError(f"no {what} within {timeout:.0f} s")


def _pick_task(driver, display_name: str) -> None:
    """Home's question type, through the select box as a user picks it."""
    current = next((e.text for e in _css(driver, ".st-key-task")), "")
    if display_name in current:
        return
    _wait_for(driver, lambda d: next(iter(_css(d, '.st-key-task button[aria-haspopup="listbox"]')), None), 60,
              "the question type").click()
    option = _wait_for(driver, lambda d: next((o for o in _css(d, '[role="option"]') if o.text.strip() == display_name),
                                              None), 30, f"the option {display_name!r}")
    option.click()
    time.sleep(0.5)
    _wait_for(driver, _idle, 120, "the page to take the question type")


def ask(driver, question: str, task_name: str, timeout: float) -> dict:
    """Type ``question`` under ``task_name``, click Analyze, follow the page until the new verdict card shows and
    until the page settles. Returns the seconds and what the page said."""
    _pick_task(driver, task_name)
    set_text(driver, ".st-key-question textarea", question, 120, settle_s=0.5)
    before = driver.execute_script(_PAGE_STATE)
    button = _wait_for(driver, lambda d: next((b for b in _css(d, ".st-key-analyze button") if b.is_enabled()), None),
                       60, "the Analyze button")
    clicked = time.monotonic()
    button.click()
    first_estimate, saw_queue, verdict_at = None, False, None
    deadline = clicked + timeout
    while time.monotonic() < deadline:
        state = driver.execute_script(_PAGE_STATE)
        if state["error"]:
            raise RuntimeError(f"the page showed an error: {state['error'][:300]}")
        if state["queue"]:
            saw_queue = True
            found = re.search(r"about (\d+) s", state["queue"])
            if found and first_estimate is None:
                first_estimate = float(found.group(1))
        elif state["verdict"] and state["answer"] and (saw_queue or state["answer"] != before["answer"]):
            verdict_at = time.monotonic() - clicked
            break
        time.sleep(0.1)
    if verdict_at is None:
        raise TimeoutError(f"no verdict within {timeout:.0f} s for {question!r}")
    _wait_for(driver, _idle, 300, "the page to settle", every=0.1)
    settled = time.monotonic() - clicked
    tokens = next((int(b.get_attribute("value")) for b in _css(driver, ".st-key-max_new_tokens input")), None)
    state = driver.execute_script(_PAGE_STATE)
    shown = re.search(r"([\d.]+)\s*s", state["time"] or "")
    return {"question": question, "task": task_name, "click_to_verdict_s": round(verdict_at, 2),
            "click_to_settled_s": round(settled, 2), "analysis_s": float(shown.group(1)) if shown else None,
            "first_estimate_s": first_estimate, "queued": saw_queue, "answer_tokens": tokens,
            "cached": bool(state["cached"]),
            "answer": (state["answer"] or "").replace("\n", " ")[:160]}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default=MODEL)
    parser.add_argument("--repeats", type=int, default=3, help="short typed questions (each a new one)")
    parser.add_argument("--gsm8k", type=int, default=1, help="GSM8K word problems (0: none)")
    parser.add_argument("--timeout", type=float, default=600)
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "click_to_verdict")
    parser.add_argument("--prior", type=Path, default=None,
                        help="also write the measured waits per route and size as the queue's reference durations "
                             "(studio/assets/wait_seconds.json; measure the estimates in another run)")
    args = parser.parse_args(argv)

    from grade.models.backends import llama_cpp_available
    from grade.tasks.registry import REGISTRY
    from tests.test_browser import CHROMEDRIVER, CHROMIUM, _new_driver

    if not (Path(CHROMIUM).exists() and Path(CHROMEDRIVER).exists()):
        raise SystemExit("headless Chromium is missing: run `make browser`")
    load_before = os.getloadavg()
    port = _free_port()
    url = f"http://{HOST}:{port}"
    log = tempfile.TemporaryFile()
    server = start_server(args.model, port, log)
    profile = tempfile.mkdtemp(prefix="grade-bench-chromium-")
    keep_low = KeepLow(nice=19)
    driver = None
    rows = []
    try:
        wait_healthy(url, server, timeout=180)
        driver = _new_driver(profile)
        keep_low.pids.append(driver.service.process.pid)
        keep_low.start()
        started = time.monotonic()
        driver.get(url)
        _wait_for(driver, lambda d: _css(d, ".st-key-question textarea"), 300, "the question box")
        time.sleep(1.0)
        _wait_for(driver, _idle, 600, "the model to load")
        load_s = time.monotonic() - started
        cases = [("example", EXAMPLE, "qa")] + [("short typed", q, "qa") for q in SHORT[:args.repeats]]
        cases += [("GSM8K", GSM8K, "gsm8k")] * min(args.gsm8k, 1)
        for kind, question, task in cases:
            row = {"case": kind, "task_id": task, **ask(driver, question, REGISTRY[task].display_name, args.timeout)}
            rows.append(row)
            print(f"{kind:12s} click->verdict {row['click_to_verdict_s']:6.2f} s  settled {row['click_to_settled_s']:6.2f} s"
                  f"  analysis {row['analysis_s']} s  estimate {row['first_estimate_s']}  | {row['answer'][:60]}",
                  flush=True)
    finally:
        keep_low.stop()
        if driver is not None:
            driver.quit()
        server.terminate()
        try:
            server.wait(timeout=30)
        except subprocess.TimeoutExpired:
            server.kill()
        shutil.rmtree(profile, ignore_errors=True)
        log.seek(0)
        output = log.read().decode(errors="replace")
        if "Traceback" in output:
            print(output[-4000:])
    load_after = os.getloadavg()

    def median(kind, key):
        values = [r[key] for r in rows if r["case"] == kind and r[key] is not None]
        return statistics.median(values) if values else None

    summary = []
    for kind in dict.fromkeys(r["case"] for r in rows):
        verdict, analysis, settled = (median(kind, k) for k in ("click_to_verdict_s", "analysis_s", "click_to_settled_s"))
        estimate = median(kind, "first_estimate_s")
        summary.append({"case": kind, "n": sum(r["case"] == kind for r in rows), "click_to_verdict_s": verdict,
                        "click_to_settled_s": settled, "analysis_s": analysis,
                        "verdict_over_analysis": round(verdict / analysis, 2) if verdict and analysis else None,
                        "first_estimate_s": estimate,
                        "estimate_over_wait": round(estimate / verdict, 2) if estimate and verdict else None})
    generator = "llama.cpp" if llama_cpp_available() else "torch"
    report = {"model": args.model, "generator": generator, "machine": machine(), "page_load_s": round(load_s, 1),
              "loadavg_before": [round(x, 2) for x in load_before], "loadavg_after": [round(x, 2) for x in load_after],
              "target_s": TARGET_S, "summary": summary, "runs": rows}
    print()
    print(table(summary, ["case", "n", "click_to_verdict_s", "analysis_s", "verdict_over_analysis",
                          "click_to_settled_s", "first_estimate_s", "estimate_over_wait"]))
    short = next((s for s in summary if s["case"] == "short typed"), None)
    if short:
        met = "met" if short["click_to_verdict_s"] <= TARGET_S else "NOT met"
        print(f"\nshort typed question: {short['click_to_verdict_s']:.2f} s click to verdict (target {TARGET_S} s: {met});"
              f" {generator}; load average before {load_before[0]:.2f}, after {load_after[0]:.2f}")
    args.out.mkdir(parents=True, exist_ok=True)
    write_json(args.out / "click_to_verdict.json", report)
    if args.prior:
        write_prior(args.prior, args.model, generator, rows, report["machine"])
    return 0


def _commit() -> str:
    done = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True)
    return done.stdout.strip() or "unknown"


def write_prior(path: Path, model: str, engine: str, rows: list[dict], machine_info: dict) -> None:
    """The waits of the computed (not cached) runs, median per task and answer length, as the queue's reference
    durations (:mod:`studio.wait_seconds`); other models' and engines' rows already in the file are kept."""
    import json

    measured: dict[tuple, list[float]] = {}
    for row in rows:
        if not row["cached"] and row["answer_tokens"]:
            measured.setdefault((row["task_id"], row["answer_tokens"]), []).append(row["click_to_verdict_s"])
    old = json.loads(path.read_text()) if path.is_file() else {}
    kept = [r for r in old.get("rows", []) if (r["model"], r["engine"]) != (model, engine)]
    new = [{"model": model, "engine": engine, "task": task, "tokens": tokens, "seconds": statistics.median(waits),
            "n": len(waits)} for (task, tokens), waits in sorted(measured.items())]
    write_json(path, {"what": "seconds from the click on Analyze to the verdict, median per route and size "
                              "(python -m bench.click_to_verdict --prior)",
                      "measured": {f"{model} / {engine}": {"date": time.strftime("%Y-%m-%d"), "commit": _commit(),
                                                          "cpu": machine_info.get("cpu"),
                                                          "cores": machine_info.get("cpu_count"),
                                                          "load_average": machine_info.get("load_average")},
                                   **{k: v for k, v in old.get("measured", {}).items() if k != f"{model} / {engine}"}},
                      "rows": kept + new})


if __name__ == "__main__":
    sys.exit(main())
