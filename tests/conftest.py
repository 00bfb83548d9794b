import os
import subprocess
import threading
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
# The app's shipped example results off (studio.analysis_cache): the suite's app tests time and check what the
# app computes; tests/test_shipped_examples.py turns them on.
os.environ.setdefault("GRADE_SHIPPED_RESULTS", "0")


@pytest.fixture(scope="module")
def one_torch_thread():
    """One torch thread for a module: on a small shared CPU, torch's default (all cores) is many times slower."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="session")
def benchmark_caches(tmp_path_factory) -> Path:
    """The folder whose ``data/`` holds the benchmark caches kept in history: this checkout's where
    ``scripts/build/restore_benchmark_caches.sh`` has run, else a temporary folder it restores into once per session
    (a shallow clone, without the commits holding them, skips)."""
    if (ROOT / "data" / "probe_features" / "qwen2.5-coder-1.5b-instruct" / "pre" / "math.parquet").exists():
        return ROOT
    where = tmp_path_factory.mktemp("restored")
    done = subprocess.run(["bash", str(ROOT / "scripts" / "build" / "restore_benchmark_caches.sh"), str(where)],
                          capture_output=True, text=True)
    if done.returncode == 2:
        pytest.skip(done.stderr.strip())
    assert done.returncode == 0, done.stderr
    return where


@pytest.fixture(scope="session")
def smollm():
    """The embedded default model, loaded once per test session (converted on first use, then cached)."""
    import grade

    return grade.load_model("smollm2-135m-instruct")


@pytest.fixture(scope="session")
def datasets_dir() -> Path:
    from grade.tasks.tasks import datasets_dir

    return datasets_dir()


GSM8K_SAMPLES = ROOT / "tests" / "data" / "samples_gsm8k_2025-11-26T17-00-00.000000.jsonl"


@pytest.fixture(scope="session")
def gsm8k_trace_run(tmp_path_factory):
    """``python -m grade traces --json`` on the lm-evaluation-harness GSM8K fixture (6 real traces), once per
    session, on one torch thread: (store folder, the parsed --json output). Tests that write to the store
    (annotations) work on a copy."""
    import contextlib
    import io
    import json

    import torch

    from grade.commands.cli import main

    out = tmp_path_factory.mktemp("traces") / "gsm8k"
    threads = torch.get_num_threads()
    stdout = io.StringIO()
    try:
        with contextlib.redirect_stdout(stdout):
            code = main(["traces", "--samples", str(GSM8K_SAMPLES), "--out", str(out), "--json", "--quiet",
                         "--threads", "1", "--chunk-size", "4"])
    finally:
        torch.set_num_threads(threads)
    assert code == 0
    return out, json.loads(stdout.getvalue())


class GatedJobs:
    """Queue jobs that each run until their gate opens, counting how many run at once (``peak``)."""

    def __init__(self):
        self.gates: list[threading.Event] = []
        self.peak = 0
        self._running = 0
        self._lock = threading.Lock()

    def new(self):
        gate = threading.Event()
        self.gates.append(gate)

        def job(progress):
            with self._lock:
                self._running += 1
                self.peak = max(self.peak, self._running)
            gate.wait(30)
            with self._lock:
                self._running -= 1
            return True

        return job

    def open_all(self) -> None:
        for gate in self.gates:
            gate.set()


@pytest.fixture
def gated_jobs() -> GatedJobs:
    return GatedJobs()

