"""What a refused upload costs the served studio's memory, beside an accepted one (issue 43, item 2).

    python -m bench.upload_memory [--files 40] [--mb 7] [--attempts 3] [--app-root DIR] [--out bench/results/uploads]

Starts the served studio (``GRADE_SERVED=1``, SmolLM2, loopback only, ``server.disconnectedSessionTTL`` 5 s and the
session sweep every 2 s), opens Probes -> Load a probe file in one headless Chromium and reads the server's resident
and anonymous memory (``/proc/<pid>/status``: VmRSS, RssAnon):

1. **refused**: ``--attempts`` times, ``--files`` files of ``--mb`` MB each (random bytes; a probe is two files, so the
   upload is refused), each attempt's memory read when the refusal shows and 10 s later;
2. **accepted**: one real probe pair (a trained probe's weights and metadata) loaded, read the same way;
3. **session end**: the tab closed, memory read once the server has logged the session's end, and 10 s later.

``--app-root`` runs the server from another checkout of the repository (e.g. an earlier commit exported with
``git archive``), so that the same harness measures before and after. Needs ``make browser`` and selenium.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench.load_test import (CHROMEDRIVER, CHROMIUM, HOST, ROOT, _css, _free_port, _until, new_driver, stop_server,
                             wait_healthy)

SETTLE_S = 10.0


def memory_mb(pid: int) -> dict[str, float]:
    """The server's resident and anonymous memory (MB)."""
    values = {}
    with open(f"/proc/{pid}/status") as handle:
        for line in handle:
            key, _, rest = line.partition(":")
            if key in ("VmRSS", "RssAnon"):
                values[key] = int(rest.split()[0]) / 1024
    return values


def _probe_pair(folder: Path) -> list[Path]:
    import numpy as np

    from grade.verdict.probe import Probe

    rng = np.random.default_rng(0)
    probe = Probe("logreg").fit(rng.normal(size=(60, 30)), np.array([0, 1] * 30))
    probe.metadata.update({"model": "smollm2-135m-instruct", "loss": "pre", "srank": "paper"})
    weights, meta = probe.save(folder / "accepted")
    return [Path(weights), Path(meta)]


def _load_tab(driver, url: str | None = None) -> None:
    """Probes -> Load a probe file (the page opened first when ``url`` is given; else the tab clicked again)."""
    if url is not None:
        driver.get(f"{url}/probes")
    _until(driver, lambda d: next((t for t in _css(d, '[role="tab"]') if "Load a probe file" in t.text), None),
           600, "the Load tab").click()


def _upload(driver, paths: list[Path]) -> None:
    box = _until(driver, lambda d: next(iter(_css(d, "[class*='st-key-probe_upload'] input[type=file]")), None), 120,
                 "the probe uploader")
    box.send_keys("\n".join(str(p) for p in paths))


def _page_text(driver) -> str:
    # textContent: a rerun may show another tab, and innerText leaves out what a hidden tab holds
    return driver.execute_script("return document.body.textContent")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.upload_memory", description=__doc__.split("\n")[0])
    parser.add_argument("--files", type=int, default=40)
    parser.add_argument("--mb", type=float, default=7.0)
    parser.add_argument("--attempts", type=int, default=3)
    parser.add_argument("--app-root", type=Path, default=ROOT)
    parser.add_argument("--tag", default="")
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "uploads")
    args = parser.parse_args(argv)
    if not (Path(CHROMIUM).exists() and Path(CHROMEDRIVER).exists()):
        parser.error("headless Chromium is missing: run `make browser`")

    work = Path(tempfile.mkdtemp(prefix="grade-upload-bench-"))
    files = []
    for k in range(args.files):
        files.append(work / f"big-{k:02d}.json")
        files[-1].write_bytes(os.urandom(int(args.mb * 2**20)))
    accepted = _probe_pair(work)

    port = _free_port()
    url = f"http://{HOST}:{port}"
    log = tempfile.NamedTemporaryFile(prefix="grade-upload-bench-", suffix=".log", delete=False)
    env = {**os.environ, "GRADE_SERVED": "1", "GRADE_START_MODEL": "smollm2-135m-instruct",
           "GRADE_PRECOMPUTE_EXAMPLES": "0", "GRADE_SESSION_SWEEP_S": "2", "GRADE_USER_DATA_DIR": str(work / "users"),
           "TRANSFORMERS_VERBOSITY": "error", "PYTHONPATH": str(args.app_root)}
    server = subprocess.Popen(
        [sys.executable, "-m", "streamlit", "run", "app.py", "--server.headless", "true", "--server.port", str(port),
         "--server.address", HOST, "--browser.gatherUsageStats", "false", "--server.fileWatcherType", "none",
         "--server.maxUploadSize", "8", "--server.disconnectedSessionTTL", "5"],
        cwd=args.app_root, env=env, stdout=log, stderr=subprocess.STDOUT)
    report: dict = {"files": args.files, "mb_each": args.mb, "app_root": str(args.app_root),
                    "load_before": os.getloadavg(), "refused": [], "accepted": None, "session_end": None}
    driver = None
    try:
        wait_healthy(url, server)
        driver = new_driver(tempfile.mkdtemp(prefix="grade-upload-bench-chromium-"))
        _load_tab(driver, url)
        time.sleep(SETTLE_S)  # the model loaded and the page drawn: the baseline
        report["baseline"] = memory_mb(server.pid)
        for attempt in range(args.attempts):
            batch = files[: len(files) - attempt]  # one file fewer each time: each refusal's line is new
            if attempt:
                _load_tab(driver)
            _upload(driver, batch)
            _until(driver, lambda d: f"{len(batch)} files were uploaded" in _page_text(d), 600, "the refusal")
            at_refusal = memory_mb(server.pid)
            time.sleep(SETTLE_S)
            report["refused"].append({"at_refusal": at_refusal, "after_10s": memory_mb(server.pid)})
            print("refused attempt", attempt + 1, report["refused"][-1], flush=True)
        _load_tab(driver)
        _upload(driver, accepted)
        _until(driver, lambda d: next((b for b in _css(d, "button") if b.text.strip() == "Load probe"), None), 120,
               "the Load button").click()
        _until(driver, lambda d: "Active probe" in _page_text(d) or "accepted" in _page_text(d), 120, "the probe loaded")
        at_accept = memory_mb(server.pid)
        time.sleep(SETTLE_S)
        report["accepted"] = {"at_load": at_accept, "after_10s": memory_mb(server.pid)}
        print("accepted", report["accepted"], flush=True)
        driver.quit()
        driver = None
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and not re.search(r"ended: released", Path(log.name).read_text(errors="replace")):
            time.sleep(0.5)
        ended = memory_mb(server.pid)
        time.sleep(SETTLE_S)
        report["session_end"] = {"logged": bool(re.search(r"ended: released", Path(log.name).read_text(errors="replace"))),
                                 "at_end": ended, "after_10s": memory_mb(server.pid)}
        report["released_lines"] = re.findall(r"released \d+ refused upload\(s\), [\d.]+ MB", Path(log.name).read_text(errors="replace"))
    finally:
        if driver is not None:
            driver.quit()
        stop_server(server)
    report["load_after"] = os.getloadavg()
    base = report["baseline"]["RssAnon"]
    rows = [("refused %d: at refusal" % (k + 1), r["at_refusal"]) for k, r in enumerate(report["refused"])]
    rows += [("refused %d: after 10 s" % (k + 1), r["after_10s"]) for k, r in enumerate(report["refused"])]
    rows += [("accepted probe: loaded", report["accepted"]["at_load"]),
             ("accepted probe: after 10 s", report["accepted"]["after_10s"]),
             ("session ended", report["session_end"]["at_end"]), ("session ended: after 10 s", report["session_end"]["after_10s"])]
    print(f"\nserver memory above its baseline (RssAnon {base:.0f} MB, VmRSS {report['baseline']['VmRSS']:.0f} MB); "
          f"{args.files} files of {args.mb} MB per refused attempt")
    print("| moment | RssAnon above baseline (MB) | VmRSS above baseline (MB) |")
    print("|---|---:|---:|")
    for name, m in rows:
        print(f"| {name} | {m['RssAnon'] - base:+.0f} | {m['VmRSS'] - report['baseline']['VmRSS']:+.0f} |")
    args.out.mkdir(parents=True, exist_ok=True)
    out = args.out / f"upload_memory{'_' + args.tag if args.tag else ''}.json"
    out.write_text(json.dumps(report, indent=2))
    print(f"written to {out}; server log {log.name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
