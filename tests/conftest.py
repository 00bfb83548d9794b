import contextlib
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
# `make test` runs the suite in two worker processes (pytest-xdist), one per core of the 2-core machine it is
# measured on: each worker, and every process it starts (the app's server, the CLI), then computes on one thread
# rather than two workers' torch pools contending for the same two cores.
if os.environ.get("PYTEST_XDIST_WORKER"):
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    os.environ.setdefault("MKL_NUM_THREADS", "1")


def pytest_collection_modifyitems(items):
    """Files with browser tests first, then by their number of slow tests, each file's tests in their own order:
    `make test` hands whole files to its two workers in this order (pytest-xdist's --dist loadfile), so the unit
    files, seconds each, come last and fill the gaps, and neither worker is left with a long file handed out
    while the other has finished."""
    weight: dict[Path, list[int]] = {}
    for item in items:
        counts = weight.setdefault(item.path, [0, 0])
        counts[0] += item.get_closest_marker("browser") is not None
        counts[1] += item.get_closest_marker("slow") is not None
    first_seen = {path: k for k, path in enumerate(weight)}
    items.sort(key=lambda item: (-min(weight[item.path][0], 1), -weight[item.path][1], first_seen[item.path]))


def _once_per_run(tmp_path_factory, name: str, build) -> Path:
    """``build(folder)`` once per test run, whatever the number of worker processes: the first worker to get
    here builds ``name`` under the run's shared temporary folder, holding a lock, and the others wait and reuse
    it (without xdist the run has one process and this is a plain session fixture's work)."""
    from filelock import FileLock

    shared = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        shared = shared.parent  # the base folder the workers' own temporary folders share
    folder, done = shared / name, shared / f"{name}.done"
    with FileLock(str(shared / f"{name}.lock")):
        if not done.exists():
            folder.mkdir(parents=True, exist_ok=True)
            build(folder)
            done.touch()
    return folder


@contextlib.contextmanager
def studio_server(env: dict | None = None, args: tuple[str, ...] = (), log=None):
    """The app (``streamlit run app.py``) at a free loopback port, with ``env`` over this process's environment and
    ``args`` after Streamlit's own; yields its URL. Its output goes to ``log`` (an open file, which a test may read
    while the server runs), else to a temporary file printed at the end where it holds a traceback (pytest shows it
    with a failure)."""
    import sys
    import tempfile

    from bench.load_test import _free_port, wait_healthy

    port = _free_port()
    url = f"http://127.0.0.1:{port}"
    output = log if log is not None else tempfile.TemporaryFile()
    process = subprocess.Popen(
        [sys.executable, "-m", "streamlit", "run", "app.py", "--server.headless", "true", "--server.port", str(port),
         "--server.address", "127.0.0.1", "--browser.gatherUsageStats", "false", "--server.fileWatcherType", "none",
         *args],
        cwd=ROOT, env={**os.environ, "TRANSFORMERS_VERBOSITY": "error", **(env or {})}, stdout=output,
        stderr=subprocess.STDOUT,
    )
    try:
        wait_healthy(url, process, timeout=120)
        yield url
    finally:
        process.terminate()
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            process.kill()
        if log is None:
            output.seek(0)
            printed = output.read().decode(errors="replace")
            if "Traceback" in printed:
                print(printed[-5000:])


@pytest.fixture(scope="session")
def studio_url():
    """The app on the model it starts on, started once per test process and shared by the browser tests of every
    file that asks for it (each in browser sessions of its own): the server starts and loads its model once, not
    once per file."""
    with studio_server() as url:
        yield url


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
    ``scripts/build/restore_benchmark_caches.sh`` has run, else a temporary folder it restores into once per run,
    the checkout's tracked files under data/ linked beside them (a shallow clone, without the commits holding
    them, skips)."""
    if (ROOT / "data" / "probe_features" / "qwen2.5-coder-1.5b-instruct" / "pre" / "math.parquet").exists():
        return ROOT
    def restore(where: Path) -> None:
        done = subprocess.run(["bash", str(ROOT / "scripts" / "build" / "restore_benchmark_caches.sh"), str(where)],
                              capture_output=True, text=True)
        (where / "restore.rc").write_text(f"{done.returncode}\n{done.stderr.strip()}")
        # beside the caches, the checkout's own data/ (the labels the runs name, those restored from history into
        # the checkout among them, and the benchmark's tracked files), each linked at its first folder the caches
        # lack: a run started in this folder finds what it would find in the checkout
        tracked = subprocess.run(["git", "ls-files", "data"], cwd=ROOT, capture_output=True, text=True).stdout
        for name in tracked.split():
            parts = Path(name).parts
            missing = next((Path(*parts[:k]) for k in range(1, len(parts) + 1) if not (where / Path(*parts[:k])).exists()),
                           None)
            if missing is not None:
                (where / missing).symlink_to(ROOT / missing)

    where = _once_per_run(tmp_path_factory, "restored", restore)
    code, _, stderr = (where / "restore.rc").read_text().partition("\n")
    if code == "2":
        pytest.skip(stderr)
    assert code == "0", stderr
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
    run (shared by the workers), on one torch thread: (store folder, the parsed --json output). Tests that write to the store
    (annotations) work on a copy."""
    import contextlib
    import io
    import json

    import torch

    from grade.commands.cli import main

    def run(folder: Path) -> None:
        threads = torch.get_num_threads()
        stdout = io.StringIO()
        try:
            with contextlib.redirect_stdout(stdout):
                code = main(["traces", "--samples", str(GSM8K_SAMPLES), "--out", str(folder / "gsm8k"), "--json",
                             "--quiet", "--threads", "1", "--chunk-size", "4"])
        finally:
            torch.set_num_threads(threads)
        assert code == 0
        (folder / "printed.json").write_text(stdout.getvalue())

    folder = _once_per_run(tmp_path_factory, "traces", run)
    return folder / "gsm8k", json.loads((folder / "printed.json").read_text())


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

