"""``python -m bench.app_shutdown``: does stopping the app print a traceback once llama.cpp has generated?

A new user's first stop of ``make run`` printed ``Llama.__del__ ... TypeError: 'NoneType' object is not callable``
(issue 23): llama-cpp-python frees its model in ``__del__``, which at interpreter shutdown can run after the
functions it calls are gone. :func:`grade.models.backends.close_llama_backends`, registered with ``atexit`` when the first
llama.cpp model loads, closes them first. A plain script that loads a llama.cpp model does not always show the
traceback (it depends on the order in which the interpreter tears objects down), so the check is the app itself:

for each way of stopping (SIGINT as Ctrl-C sends it, SIGTERM as ``make run``'s parent or a service manager does)
and each variant (``with close at exit``: the code as it is; ``without``: the same code with only that one
``atexit`` registration dropped, through a ``sitecustomize`` module on ``PYTHONPATH``), it starts the app on Qwen
on the loopback address with llama-cpp-python importable, has headless Chromium analyse a typed question on Home
(so llama.cpp generates the answer: its library and the GGUF file are checked to be mapped in the server), stops
the server with the signal and reads everything it printed.

    python -m bench.app_shutdown [--llama-site DIR] [--out bench/results/app_shutdown]

Needs llama-cpp-python (installed by ``make install-fast``, or a built copy given with ``--llama-site``),
Debian's chromium and chromium-driver, and about 8 GB of memory.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench.load_test import HOST, ROOT, _free_port, _until, _verdict_shown, click_analyze, new_driver, open_and_type, wait_healthy

MODEL = "qwen2.5-coder-1.5b-instruct"
QUESTION = "What is the capital of Peru?"  # not one of Home's examples: computed, not read from a shipped result

#: Drops exactly one atexit registration, grade.models.backends.close_llama_backends: the app as it was before it.
WITHOUT_CLOSE = '''import atexit
_register = atexit.register
def register(func, *args, **kwargs):
    if getattr(func, "__name__", "") == "close_llama_backends":
        return func
    return _register(func, *args, **kwargs)
atexit.register = register
'''


def stop_once(stop: signal.Signals, without_close: bool, llama_site: str | None, work: Path, timeout: float) -> dict:
    port = _free_port()
    url = f"http://{HOST}:{port}"
    paths = [str(ROOT)] + ([llama_site] if llama_site else [])
    if without_close:
        folder = work / "without_close"
        folder.mkdir(exist_ok=True)
        (folder / "sitecustomize.py").write_text(WITHOUT_CLOSE)
        paths.insert(0, str(folder))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(paths), "GRADE_START_MODEL": MODEL,
           "GRADE_ANALYSIS_CACHE_ENTRIES": "0"}
    log_path = work / f"app_{stop.name}_{'without' if without_close else 'with'}.log"
    with open(log_path, "w") as log:
        app = subprocess.Popen([sys.executable, "-m", "streamlit", "run", "app.py", "--server.address", HOST,
                                "--server.port", str(port), "--server.headless", "true",
                                "--browser.gatherUsageStats", "false", "--server.fileWatcherType", "none"],
                               cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT)
        driver, mapped = None, {}
        try:
            wait_healthy(url, app, timeout=timeout)
            driver = new_driver(str(work / f"profile_{port}"))
            open_and_type(driver, url, QUESTION, timeout=timeout)
            click_analyze(driver)
            _until(driver, _verdict_shown, timeout, "the verdict")
            maps = Path(f"/proc/{app.pid}/maps").read_text()
            mapped = {"libllama": "libllama" in maps, "gguf": ".gguf" in maps}
        finally:
            if driver is not None:
                driver.quit()
            app.send_signal(stop)
            code = app.wait(timeout=120)
    printed = log_path.read_text(errors="replace")
    return {"signal": stop.name, "close at exit": not without_close, "llama.cpp loaded": mapped,
            "exit code": code, "traceback": "Traceback" in printed, "TypeError": "TypeError" in printed,
            "last lines": printed.strip().splitlines()[-3:]}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--llama-site", default=None, help="a folder holding a built llama_cpp package")
    parser.add_argument("--timeout", type=float, default=600)
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "app_shutdown")
    args = parser.parse_args(argv)
    runs = []
    with tempfile.TemporaryDirectory(prefix="grade-shutdown-") as tmp:
        for stop in (signal.SIGINT, signal.SIGTERM):
            for without_close in (False, True):
                start = time.perf_counter()
                run = stop_once(stop, without_close, args.llama_site, Path(tmp), args.timeout)
                run["seconds"] = round(time.perf_counter() - start, 1)
                print(json.dumps(run), flush=True)
                runs.append(run)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "app_shutdown.json").write_text(json.dumps({"model": MODEL, "question": QUESTION, "runs": runs},
                                                           indent=1) + "\n")
    ok = all(r["llama.cpp loaded"].get("libllama") for r in runs)
    quiet = all(not r["traceback"] for r in runs if r["close at exit"])
    print(f"llama.cpp loaded in every run: {ok}; no traceback at shutdown with the close at exit: {quiet}")
    return 0 if ok and quiet else 1


if __name__ == "__main__":
    sys.exit(main())
