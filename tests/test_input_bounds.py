"""Sizes checked before memory is spent, outputs checked before the model loads (issue 24, item 4).

Real files throughout: sparse files, FIFOs, devices, a tiny tmpfs for a full or read-only disk (root
only: skipped where this machine cannot mount one), real child processes for the lock and for Ctrl-C,
the embedded SmolLM2 where a model is needed (marked ``slow``).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from grade.common.errors import InputError, ProbeError
from grade.common.io import MAX_LINE_BYTES, atomic_write, check_input_file, iter_jsonl

ROOT = Path(__file__).resolve().parents[1]
ENV = {**os.environ, "PYTHONPATH": str(ROOT)}

from test_cli_inputs import assert_one_error, run_cli  # noqa: E402

# The peak resident memory of a child process (VmHWM: ru_maxrss would count the forked pytest's own)
PEAK = ("def peak_mb():\n    for line in open('/proc/self/status'):\n"
        "        if line.startswith('VmHWM:'):\n            return int(line.split()[1]) // 1024\n")


def write_jsonl(path: Path, rows: list) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


@contextlib.contextmanager
def tmpfs(path: Path, size: str, *options: str):
    """A tmpfs of ``size`` at ``path`` (root only; the test is skipped where it cannot be mounted)."""
    path.mkdir(parents=True, exist_ok=True)
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", ",".join((f"size={size}",) + options), "tmpfs", str(path)],
                             capture_output=True)
    if mounted.returncode:
        pytest.skip(f"cannot mount a tmpfs here: {mounted.stderr.decode().strip()}")
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], check=False)


# ------------------------------------------------------------------------------------------ lines


def test_an_over_long_line_is_skipped_unread_and_the_rows_after_it_are_read(tmp_path):
    path = tmp_path / "rows.jsonl"
    with open(path, "wb") as handle:
        handle.write(b'{"id": "a"}\n')
        handle.write(b'{"id": "' + b"x" * (MAX_LINE_BYTES + 10) + b'"}\n')
        handle.write(b'{"id": "b"}\n')
    rows = list(iter_jsonl(path))
    assert [(n, v) for n, v, p in rows if p is None] == [(1, {"id": "a"}), (3, {"id": "b"})]
    assert rows[1][0] == 2 and rows[1][1] is None and "longer than" in rows[1][2]
    exact = tmp_path / "exact.jsonl"  # a line of exactly the bound is read
    exact.write_bytes(b'"' + b"y" * 8 + b'"\n{"id": 1}')
    assert [v for _, v, _ in iter_jsonl(exact, max_line_bytes=10)] == ["y" * 8, {"id": 1}]
    assert [p for _, _, p in iter_jsonl(exact, max_line_bytes=9)][0].startswith("longer than")


@pytest.mark.slow
def test_a_2_gb_sparse_file_is_read_in_bounded_memory(tmp_path):
    """A 2 GB file without a newline (a sparse file) as --questions was once read as one line (4.4 GB peak)."""
    sparse = tmp_path / "sparse.jsonl"
    with open(sparse, "wb") as handle:
        handle.truncate(2 * 1024**3)
    code = (f"import sys\nfrom grade.common.io import iter_jsonl\n{PEAK}"
            "rows = list(iter_jsonl(sys.argv[1]))\n"
            "print(len(rows), rows[0][2], peak_mb())")
    done = subprocess.run([sys.executable, "-c", code, str(sparse)], capture_output=True, text=True, env=ENV,
                          timeout=300)
    assert done.returncode == 0, done.stderr
    count, *problem, peak_mb = done.stdout.split()
    assert count == "1" and "longer than" in " ".join(problem)
    assert int(peak_mb) < 200, peak_mb  # the interpreter plus one bounded line, not 2 GB
    probe, _ = _probe(tmp_path)
    status, _, err = run_cli(["evaluate", "--probe", str(probe), "--questions", str(sparse)])
    assert status == 2 and "longer than" in err


def test_label_skips_an_over_long_line_and_goes_on(tmp_path):
    path = tmp_path / "qs.jsonl"
    with open(path, "w") as handle:
        handle.write(json.dumps({"id": "big", "question": "q" * (MAX_LINE_BYTES + 1), "answers": ["x"]}) + "\n")
        handle.write(json.dumps({"id": "a", "question": "What is 2 + 2?", "answers": ["4"]}) + "\n")
    status, _, err = run_cli(["label", "--dataset", str(path), "--out", str(tmp_path / "l.jsonl")])
    assert status == "model"  # the valid row goes on to the model
    assert "qs.jsonl, line 1: longer than" in err and "skipped 1 bad row" in err


# -------------------------------------------------------------------------------- what a path is


def test_folders_fifos_and_devices_are_named_for_what_they_are(tmp_path):
    fifo = tmp_path / "pipe.jsonl"
    os.mkfifo(fifo)
    folder = tmp_path / "folder.jsonl"
    folder.mkdir()
    out = str(tmp_path / "out.jsonl")
    probe, _ = _probe(tmp_path)
    for path, kind in ((folder, "a folder"), (fifo, "a FIFO"), (Path("/dev/zero"), "a device")):
        with pytest.raises(InputError, match=kind):
            check_input_file(path)
        assert_one_error(run_cli(["label", "--dataset", str(path), "--out", out]), f"is {kind}")
        assert_one_error(run_cli(["extract", "--labels", str(path), "--out", str(tmp_path / "f")]), f"is {kind}")
        assert_one_error(run_cli(["evaluate", "--probe", str(probe), "--questions", str(path)]), f"is {kind}")
    assert_one_error(run_cli(["label", "--dataset", str(tmp_path / "none.jsonl"), "--out", out]), "unknown dataset")
    dataset = write_jsonl(tmp_path / "qs.jsonl", [{"id": "a", "question": "What is 2 + 2?", "answers": ["4"]}])
    assert_one_error(run_cli(["label", "--dataset", str(dataset), "--out", "/dev/full"]), "is a device")


# ------------------------------------------------------------------------------------------ outputs


def test_a_read_only_or_full_output_is_refused_before_the_model_loads(tmp_path):
    dataset = write_jsonl(tmp_path / "qs.jsonl", [{"id": "a", "question": "What is 2 + 2?", "answers": ["4"]}])
    samples = ROOT / "tests" / "data" / "samples_gsm8k_2025-11-26T17-00-00.000000.jsonl"
    with tmpfs(tmp_path / "ro", "1m", "ro") as ro:
        assert_one_error(run_cli(["traces", "--samples", str(samples), "--out", str(ro / "store")]), "read-only")
        assert_one_error(run_cli(["label", "--dataset", str(dataset), "--out", str(ro / "l.jsonl")]), "read-only")
    with tmpfs(tmp_path / "full", "4k") as full:
        (full / "filler").write_bytes(b"x" * 4096)  # the one page is taken
        for argv in (["label", "--dataset", str(dataset), "--out", str(full / "l.jsonl")],
                     ["traces", "--samples", str(samples), "--out", str(full / "store")],
                     ["analyze", "--question", "Hi?", "--save", str(full / "r.json")]):
            assert_one_error(run_cli(argv), "the disk is full")


@pytest.mark.slow
def test_a_disk_that_fills_during_a_run_ends_in_one_line(tmp_path, smollm):
    """One free page: the check before the model passes, the writes during the run do not."""
    rows = [{"id": f"q{i}", "question": f"What is {i} + {i}?", "answers": [str(2 * i)]} for i in range(40)]
    dataset = write_jsonl(tmp_path / "qs.jsonl", rows)
    with tmpfs(tmp_path / "full", "4k") as full:
        status, _, err = run_cli(["label", "--dataset", str(dataset), "--out", str(full / "l.jsonl"), "--samples", "2",
                                  "--quiet"], model=smollm)
        assert status == 2 and err.strip().splitlines()[-1].endswith("the disk is full"), err
        assert "internal error" not in err
    with tmpfs(tmp_path / "full2", "4k") as full:
        status, _, err = run_cli(["analyze", "--question", "What is the capital of France?", "--save",
                                  str(full / "r.json"), "--json"], model=smollm)
        assert status == 2 and "the disk is full" in err and "internal error" not in err, err
        assert not (full / "r.json").exists()


def test_one_writer_per_labels_file(tmp_path):
    dataset = write_jsonl(tmp_path / "qs.jsonl", [{"id": "a", "question": "What is 2 + 2?", "answers": ["4"]}])
    out = tmp_path / "labels.jsonl"
    holder = subprocess.Popen([sys.executable, "-c", "import sys, time\nfrom grade.common.io import hold_output_lock\n"
                               "hold_output_lock(sys.argv[1]); print('held', flush=True); time.sleep(60)", str(out)],
                              stdout=subprocess.PIPE, text=True, env=ENV)
    try:
        assert holder.stdout.readline().strip() == "held"
        assert_one_error(run_cli(["label", "--dataset", str(dataset), "--out", str(out)]), "another run is writing")
    finally:
        holder.kill()
        holder.wait()
    assert run_cli(["label", "--dataset", str(dataset), "--out", str(out)])[0] == "model"  # released on exit


def test_ids_written_twice_are_read_once(tmp_path):
    from grade.batch.features import read_labelled
    from grade.batch.labeling import read_records

    record = {"id": "a", "question": "q?", "label": 1, "dataset": "d"}
    path = write_jsonl(tmp_path / "labels.jsonl", [record, {**record, "id": "b"}, {**record, "label": 0}])
    assert [(r["id"], r["label"]) for r in read_records(path)] == [("a", 1), ("b", 1)]
    skipped: list[str] = []
    assert [r["id"] for r in read_labelled(path, skipped=skipped)] == ["a", "b"]
    assert len(skipped) == 1 and "repeats d/a" in skipped[0]


@pytest.mark.parametrize("mask", [0o022, 0o027, 0o077])
def test_atomic_writes_get_the_umasks_permissions(tmp_path, mask):
    old = os.umask(mask)
    try:
        path = atomic_write(tmp_path / "result.json", "{}")
        plain = tmp_path / "plain"
        plain.write_text("x")
    finally:
        os.umask(old)
    assert path.stat().st_mode & 0o777 == 0o666 & ~mask == plain.stat().st_mode & 0o777


def _interrupt_when(child: subprocess.Popen, mapped: str) -> None:
    """SIGINT to ``child`` once a shared library whose path holds ``mapped`` is loaded (an import under way)."""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and child.poll() is None:
        with contextlib.suppress(OSError):
            if mapped in Path(f"/proc/{child.pid}/maps").read_text():
                break
        time.sleep(0.005)
    child.send_signal(signal.SIGINT)


@pytest.mark.parametrize("mapped", ["torch/lib/libtorch", "torch/_C"])
def test_ctrl_c_while_the_commands_import_is_one_line_and_exit_130(mapped):
    """Ctrl-C while a command imports torch (about 1 s of a model command's start) once printed a traceback. (Its
    ``--help`` no longer imports torch: a command that loads a model does, when it runs.)"""
    # a terminal's Ctrl-C: a suite started in the background of a non-interactive shell inherits SIGINT ignored
    child = subprocess.Popen([sys.executable, "-m", "grade", "analyze", "--question", "What is the capital of France?"],
                             stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True, env=ENV, cwd=ROOT,
                             preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    _interrupt_when(child, mapped)
    out, err = child.communicate(timeout=60)
    assert (child.returncode, err) == (130, "interrupted\n"), (child.returncode, err)
    assert out == ""


# ------------------------------------------------------------------------------------------ probes


def _probe(tmp_path, kind="logreg"):
    from grade.verdict.probe import Probe

    rng = np.random.default_rng(0)
    X, y = rng.normal(size=(80, 4)), np.array([0, 1] * 40)
    probe = Probe(kind, epochs=2).fit(X, y)
    probe.metadata.update({"model": "smollm2-135m-instruct", "loss": "pre", "srank": "paper"})
    return probe.save(tmp_path / "p")


def _rewrite(meta_path: Path, **changes) -> None:
    meta = json.loads(meta_path.read_text())
    meta.update(changes)
    meta_path.write_text(json.dumps(meta))


@pytest.mark.slow
def test_a_claimed_layer_count_is_checked_against_the_weights_header_before_allocating(tmp_path):
    from grade.verdict.probe import Probe

    weights, meta_path = _probe(tmp_path, "mlp")
    _rewrite(meta_path, n_layers=1_000_000)
    code = (f"import sys\nfrom grade.verdict.probe import Probe\nfrom grade.common.errors import ProbeError\n{PEAK}"
            "before = peak_mb()\n"
            "try:\n    Probe.load(sys.argv[1])\nexcept ProbeError as exc:\n    print(exc)\n"
            "print(peak_mb() - before)")
    done = subprocess.run([sys.executable, "-c", code, str(weights)], capture_output=True, text=True, env=ENV,
                          timeout=300)
    message, grown_mb = done.stdout.strip().splitlines()
    assert "do not fit a mlp probe of 1000000 layers" in message and "net.0.weight" in message
    assert int(grown_mb) < 50, grown_mb  # building it first took about 1 GB
    _rewrite(meta_path, n_layers=3)  # a width off by one
    with pytest.raises(ProbeError, match="net.0.weight is \\[256, 4\\], not \\[256, 3\\]"):
        Probe.load(weights)
    _rewrite(meta_path, n_layers=4, kind="logreg")  # the other kind
    with pytest.raises(ProbeError, match="missing coef"):
        Probe.load(weights)


@pytest.mark.parametrize("changes, pattern", [
    ({"model": None}, "'model' must be"),
    ({"model": 42}, "'model' must be"),
    ({"metrics": {"test": {"auroc": "0.99"}}}, "test auroc must be a number"),
    ({"metrics": {"test": {"auroc": 7}}}, "test auroc must be a number"),
    ({"metrics": {"test": {"n": 1.5}}}, "'n' must be a whole number"),
    ({"train_balance": {"answerable": "x", "unanswerable": 1}}, "'train_balance'"),
    ({"name": ["a"]}, "'name' must be text"),
    ({"loss": "mid"}, "'loss' must be pre or pos"),
])
def test_probe_metadata_is_checked_by_type_when_loaded(tmp_path, changes, pattern):
    from grade.verdict.probe import Probe
    from studio.resources import read_probe_info

    weights, meta_path = _probe(tmp_path)
    assert read_probe_info(weights) is not None
    meta = json.loads(meta_path.read_text())
    meta.update(changes)
    meta_path.write_text(json.dumps(meta))
    with pytest.raises(ProbeError, match=pattern):
        Probe.load(weights)
    assert read_probe_info(weights) is None  # never listed with a wrong type in it


@pytest.mark.slow
def test_label_skips_a_question_too_long_for_the_model_and_labels_the_rest(tmp_path, smollm):
    rows = [{"id": "a", "question": "What is the capital of France?", "answers": ["Paris"]},
            {"id": "long", "question": "word " * 200_000, "answers": ["x"]},  # within the line bound, 1 MB
            {"id": "b", "question": "What is 2 + 2?", "answers": ["4"]}]
    dataset = write_jsonl(tmp_path / "qs.jsonl", rows)
    out = tmp_path / "labels.jsonl"
    status, stdout, err = run_cli(["label", "--dataset", str(dataset), "--out", str(out), "--samples", "2",
                                   "--quiet"], model=smollm)
    assert status == 0, err
    assert "skipped long: the prompt has" in err and "1 question(s) too long" in err
    assert [json.loads(line)["id"] for line in out.read_text().splitlines()] == ["a", "b"]


def test_a_saved_probe_gets_the_umasks_permissions(tmp_path):
    """safetensors writes the weights as a file of its own (0600): the atomic write gives it the umask's mode."""
    old = os.umask(0o022)
    try:
        weights, meta = _probe(tmp_path)
    finally:
        os.umask(old)
    assert weights.stat().st_mode & 0o777 == 0o644 == meta.stat().st_mode & 0o777


# ------------------------------------------------------------------------------------------ labels


def test_one_label_rule_for_booleans_and_numbers_and_every_skip_named(tmp_path):
    from grade.batch.features import label_value, read_labelled

    values = [True, 1, 1.0, False, 0, 0.0, None, 0.5, "1", 2, [1]]
    path = write_jsonl(tmp_path / "labels.jsonl",
                       [{"id": f"q{k}", "question": f"Question {k}?", "label": v} for k, v in enumerate(values)])
    skipped: list[str] = []
    rows = read_labelled(path, skipped=skipped)
    assert [(r["id"], r["label"]) for r in rows] == [("q0", 1), ("q1", 1), ("q2", 1), ("q3", 0), ("q4", 0), ("q5", 0)]
    assert all(type(r["label"]) is int for r in rows)
    assert [s.split(" ", 1)[0] for s in skipped] == [f"{path}:{n}" for n in (8, 9, 10, 11)]
    assert skipped[0].endswith("label 0.5; use 1, 0, true, false or null") and "label '1'" in skipped[1]
    assert [label_value(v)[0] for v in values[:7]] == [1, 1, 1, 0, 0, 0, None]


def test_a_50_mb_line_that_is_a_files_only_line_is_named(tmp_path):
    from grade.batch.features import read_labelled
    from grade.traces import read_traces

    path = tmp_path / "one-line.jsonl"
    with open(path, "wb") as handle:  # 50 MB, no newline anywhere
        handle.write(b'{"question": "' + b"x" * (50 * 2**20) + b'", "response": "4"}')
    with pytest.raises(InputError, match=rf"one-line\.jsonl holds no traces: line 1 is longer than "
                                         rf"{MAX_LINE_BYTES:,} bytes and was skipped unread"):
        read_traces(path)
    with pytest.raises(InputError, match=rf"no usable row in {path}; first: {path}:1 longer than"):
        read_labelled(path)
