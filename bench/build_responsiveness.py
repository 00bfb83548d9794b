"""``python -m bench.build_responsiveness``: how fast Home answers while llama-cpp-python builds beside it, per build
setting, side by side in one run (issue 30, item 6: the first minutes of ``make run``).

``make run`` starts the build in the background (Makefile, ``install-fast-background``) and the app generates with
torch meanwhile. The settings compared are how that build is run: its priority (``nice``) and its compile jobs
(``CMAKE_BUILD_PARALLEL_LEVEL``; unset, ninja runs one job per core plus two). For each setting a real build starts
(``pip install`` of the pinned llama-cpp-python from its source archive, into a throw-away folder, with the
Makefile's CMake flags for this CPU); once its compiler runs, Home's analysis of a short question is timed
``--repeats`` times (what the Analyze button runs: :func:`studio.workflows.analyze_question` with the torch
generator, the shipped probe and detectors), and the build's compile steps done meanwhile are counted (its pace).
Then the build is stopped. The same analysis with no build beside it is the reference; every row's ratio is to it.

    python -m bench.build_responsiveness [--repeats 2] [--settings "nice 10" "nice 19, 1 job" ...]

Writes ``bench/results/build_responsiveness/build_responsiveness.{json,md}``.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from .common import ROOT, machine, table, write_json

MODEL = "qwen2.5-coder-1.5b-instruct"
QUESTION = "What is the capital of Italy?"
#: name -> (nice increment, compile jobs (None = ninja's default), the build's autogroup nice (None = left at 0)).
#: "nice 10" is what the Makefile did. The build runs in a session of its own (the Makefile's ``setsid``), and
#: where the kernel groups each session for scheduling (``/proc/sys/kernel/sched_autogroup_enabled``) a process's
#: nice only ranks it within its session: the session's group competes with the app's as an equal unless the
#: group's own nice (``/proc/self/autogroup``) is raised.
SETTINGS = {
    "no nice": (0, None, None),
    "nice 10": (10, None, None),
    "nice 19": (19, None, None),
    "nice 19, 1 job": (19, 1, None),
    "autogroup nice 19": (19, None, 19),
    "autogroup nice 19, 1 job": (19, 1, 19),
}
STEP = re.compile(r"\[(\d+)/(\d+)\]")


def cmake_args() -> str:
    """The Makefile's llama.cpp CMake flags for this CPU (``LLAMA_CMAKE_ARGS``)."""
    done = subprocess.run(["make", "-s", "--no-print-directory", "--eval", "print-llama-args: ; @echo $(LLAMA_CMAKE_ARGS)",
                           "print-llama-args"], cwd=ROOT, capture_output=True, text=True, check=True)
    return done.stdout.strip()


def last_step(log: Path) -> int:
    found = STEP.findall(log.read_text(errors="replace")) if log.exists() else []
    return int(found[-1][0]) if found else 0


class Build:
    """One real llama-cpp-python build in its own process group, logging verbosely to ``log``."""

    def __init__(self, nice: int, jobs: int | None, group_nice: int | None, flags: str, work: Path):
        self.log = work / "build.log"
        env = {**os.environ, "CMAKE_ARGS": flags}
        env.pop("CMAKE_BUILD_PARALLEL_LEVEL", None)
        if jobs:
            env["CMAKE_BUILD_PARALLEL_LEVEL"] = str(jobs)
        command = [sys.executable, "-m", "pip", "install", "-v", "--no-deps", "--no-cache-dir", "--disable-pip-version-check",
                   "--target", str(work / "site"), "-r", str(ROOT / "requirements-fast.txt")]
        if nice:
            command = ["nice", "-n", str(nice)] + command
        if group_nice is not None:  # as the Makefile does: the new session's scheduling group, then the build
            command = ["sh", "-c", f"echo {group_nice} > /proc/self/autogroup 2>/dev/null; exec \"$@\"", "sh"] + command
        self.started = time.perf_counter()
        with self.log.open("w") as fh:
            self.process = subprocess.Popen(command, stdout=fh, stderr=subprocess.STDOUT, env=env,
                                            start_new_session=True)

    def wait_for_compiler(self, timeout: float) -> float:
        """Seconds until the first compile step is logged (the configure stage before it is short and light)."""
        while time.perf_counter() - self.started < timeout:
            if last_step(self.log) > 0 or self.process.poll() is not None:
                break
            time.sleep(0.5)
        if self.process.poll() is not None:
            raise SystemExit(f"the build ended before compiling (exit {self.process.returncode}): see {self.log}")
        return time.perf_counter() - self.started

    def stop(self) -> None:
        try:
            os.killpg(self.process.pid, signal.SIGTERM)
            self.process.wait(timeout=30)
        except (ProcessLookupError, subprocess.TimeoutExpired):
            os.killpg(self.process.pid, signal.SIGKILL)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--settings", nargs="+", default=list(SETTINGS), choices=list(SETTINGS))
    parser.add_argument("--question", default=QUESTION)
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "build_responsiveness")
    args = parser.parse_args(argv)
    os.environ["GRADE_SHIPPED_RESULTS"] = "0"  # every analysis is computed

    import grade
    from grade.models.generation import TorchBackend
    from studio.resources import DETECTORS_DIR, default_probe, list_probes, load_detectors, load_probe
    from studio.workflows import analyze_question, home_answer_tokens

    flags = cmake_args()
    lm = grade.load_model(MODEL, device="cpu")
    info = default_probe(lm.name, list_probes(), task="qa")
    probe, (detectors, _) = load_probe(info.path), load_detectors(lm.name, DETECTORS_DIR)
    lm.generation_backend = TorchBackend(lm)  # the app's generator until llama.cpp is built

    def analyse() -> float:
        start = time.perf_counter()
        analyze_question(lm, args.question, task="qa", probe=probe, probe_info=info, max_new_tokens=home_answer_tokens("qa"),
                         detectors=detectors)
        return time.perf_counter() - start

    analyse()  # warm-up: first calls allocate
    rows, runs = [], {}
    for name in ["no build", *args.settings]:
        load_before = os.getloadavg()[0]
        record: dict = {"setting": name}
        build = None
        work = Path(tempfile.mkdtemp(prefix="grade-build-"))
        try:
            if name != "no build":
                build = Build(*SETTINGS[name], flags, work)
                record["to_compiler_s"] = build.wait_for_compiler(300)
                steps_before, clock = last_step(build.log), time.perf_counter()
            seconds = [analyse() for _ in range(args.repeats)]
            if build is not None:
                minutes = (time.perf_counter() - clock) / 60
                record["compile_steps_per_min"] = (last_step(build.log) - steps_before) / minutes
                found = STEP.findall(build.log.read_text(errors="replace"))
                record["compile_steps_total"] = int(found[-1][1]) if found else None
        finally:
            if build is not None:
                build.stop()
            shutil.rmtree(work, ignore_errors=True)
        runs[name] = seconds
        record.update(analysis_s=statistics.median(seconds), load_before=load_before)
        rows.append(record)
        print(f"{name}: Home's analysis {record['analysis_s']:.1f} s (runs {', '.join(f'{s:.1f}' for s in seconds)})"
              + (f"; build {record['compile_steps_per_min']:.1f} compile steps/min" if build else ""), flush=True)
    base = rows[0]["analysis_s"]
    for record in rows:
        record["ratio to no build"] = record["analysis_s"] / base
        if record.get("compile_steps_per_min") and record.get("compile_steps_total"):
            record["build minutes at this pace"] = record["compile_steps_total"] / record["compile_steps_per_min"]
    autogroup = Path("/proc/sys/kernel/sched_autogroup_enabled")
    report = {"machine": machine(), "model": MODEL,
              "sched_autogroup_enabled": autogroup.read_text().strip() if autogroup.exists() else None,
              "question": args.question, "repeats": args.repeats,
              "cmake_args": flags, "runs": runs, "rows": rows}
    args.out.mkdir(parents=True, exist_ok=True)
    write_json(args.out / "build_responsiveness.json", report)
    columns = ["setting", "analysis_s", "ratio to no build", "compile_steps_per_min", "build minutes at this pace",
               "to_compiler_s", "load_before"]
    text = (f"# Home's analysis of {args.question!r} ({MODEL}, torch generation) while llama-cpp-python builds\n\n"
            f"{machine()['cpu']}, {machine()['cpu_count']} cores; medians of {args.repeats} analyses per setting, "
            "all in one run.\n\n" + table(rows, columns) + "\n")
    (args.out / "build_responsiveness.md").write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
