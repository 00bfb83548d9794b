"""A newcomer's first minutes: from a fresh clone to the default model's first answer, on this machine.

    python -m bench.first_minutes [--repo .] [--out bench/results/first_minutes]

Clones the repository's HEAD into an empty temporary folder and runs ``make run`` there with an empty model cache
(``GRADE_CACHE_DIR``), so the virtual environment, every install and the default model's one-time GGUF conversion
are all inside the numbers; then opens the app in headless Chromium and asks Home the first example. Reports the
seconds from the clone's start to: the clone, the health endpoint answering, the page ready with the model loaded,
and the first verdict (generated with torch while llama-cpp-python still builds in the background; the build is
stopped when the measurement ends, so its time is not measured here). Loopback only; the load average is
reported with every number because a shared machine slows all of them.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench.load_test import _free_port, _until, new_driver, open_and_type, click_analyze, _verdict_shown, wait_healthy

QUESTION = "What is the capital of France?"


def _stop_background_build(repo: Path) -> None:
    """The llama-cpp-python build that ``make run`` started in a session of its own: every process group with a
    process working in the clone."""
    groups = set()
    for proc in Path("/proc").iterdir():
        try:
            if proc.name.isdigit() and os.readlink(proc / "cwd").startswith(str(repo)):
                groups.add(os.getpgid(int(proc.name)))
        except OSError:
            continue
    for group in groups:
        try:
            os.killpg(group, signal.SIGTERM)
        except OSError:
            pass


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repo", type=Path, default=Path("."))
    parser.add_argument("--out", type=Path, default=Path("bench/results/first_minutes"))
    parser.add_argument("--timeout", type=float, default=1200, help="seconds for the whole run")
    args = parser.parse_args(argv)
    work = Path(tempfile.mkdtemp(prefix="grade-first-minutes-"))
    repo, cache, log_path = work / "repo", work / "cache", work / "make_run.log"
    port = _free_port()
    url = f"http://127.0.0.1:{port}"
    marks: dict[str, float] = {}
    loads: dict[str, float] = {"start": os.getloadavg()[0]}
    start = time.perf_counter()
    subprocess.run(["git", "clone", "-q", str(args.repo.resolve()), str(repo)], check=True)
    marks["clone"] = time.perf_counter() - start
    env = {**os.environ, "GRADE_CACHE_DIR": str(cache)}
    env.pop("VIRTUAL_ENV", None)
    with open(log_path, "w") as log:
        make = subprocess.Popen(["make", "run", f"PORT={port}"], cwd=repo, env=env, stdout=log, stderr=subprocess.STDOUT,
                                start_new_session=True)
        driver = None
        try:
            wait_healthy(url, make, timeout=args.timeout)
            marks["health"] = time.perf_counter() - start
            loads["health"] = os.getloadavg()[0]
            driver = new_driver(str(work / "profile"))
            open_and_type(driver, url, QUESTION, timeout=args.timeout)
            marks["model_ready"] = time.perf_counter() - start
            loads["model_ready"] = os.getloadavg()[0]
            click_analyze(driver)
            _until(driver, _verdict_shown, args.timeout, "the verdict")
            marks["first_verdict"] = time.perf_counter() - start
            loads["first_verdict"] = os.getloadavg()[0]
        finally:
            if driver is not None:
                driver.quit()
            os.killpg(make.pid, signal.SIGTERM)  # the app
            make.wait(timeout=60)
            _stop_background_build(repo)
    report = {"seconds_from_clone_start": {k: round(v, 1) for k, v in marks.items()}, "load_average_1min": loads,
              "machine": f"{os.cpu_count()} cores", "cache": "empty GRADE_CACHE_DIR (conversion included)",
              "log_tail": log_path.read_text(errors="replace").splitlines()[-15:]}
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "first_minutes.json").write_text(json.dumps(report, indent=1) + "\n")
    print(json.dumps(report, indent=1))
    # the clone, its venv and the converted model (over 10 GB); a failed run keeps them, its log among them
    shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
