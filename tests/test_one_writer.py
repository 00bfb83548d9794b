"""One writer per output for every command that writes (issue 32, item 2): ``grade.commands.common``.

A real child process holds the lock of an output (the same ``grade.common.io.hold_output_lock`` every command takes);
each writing command on that output is then refused in one line, before any model loads; once the holder
ends, the command goes on. The slow test runs two real ``grade extract`` processes with SmolLM2 on one
``--out``: the second is refused while the first runs, and the store holds each id once.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from test_cli_inputs import assert_one_error, run_cli  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
ENV = {**os.environ, "PYTHONPATH": str(ROOT)}
GSM8K = ROOT / "tests" / "data" / "samples_gsm8k_2025-11-26T17-00-00.000000.jsonl"
HOLD = ("import sys, time\nfrom grade.common.io import hold_output_lock\n"
        "hold_output_lock(sys.argv[1]); print('held', flush=True); time.sleep(120)")


def hold(path: Path) -> subprocess.Popen:
    path.parent.mkdir(parents=True, exist_ok=True)
    holder = subprocess.Popen([sys.executable, "-c", HOLD, str(path)], stdout=subprocess.PIPE, text=True, env=ENV)
    assert holder.stdout.readline().strip() == "held"
    return holder


def commands(tmp: Path) -> dict[str, tuple[Path, list[str]]]:
    """command -> (the output its lock guards, its argv)."""
    labels = tmp / "labels.jsonl"
    labels.write_text(json.dumps({"id": "a", "question": "What is 2 + 2?", "label": 1, "dataset": "d"}) + "\n")
    return {
        "extract": (tmp / "features", ["extract", "--labels", str(labels), "--out", str(tmp / "features")]),
        "traces": (tmp / "store", ["traces", "--samples", str(GSM8K), "--out", str(tmp / "store")]),
        "train": (tmp / "probes" / "p", ["train", "--features", str(tmp / "features"), "--out",
                                         str(tmp / "probes" / "p.safetensors")]),
        "benchmark": (tmp / "results", ["benchmark", "--out", str(tmp / "results"), "--cache-dir",
                                        str(tmp / "cache"), "--offline"]),
        "steperrors": (tmp / "steps", ["steperrors", "--out", str(tmp / "steps")]),
        "label": (tmp / "labels-out.jsonl", ["label", "--dataset", str(labels), "--out", str(tmp / "labels-out.jsonl")]),
    }


@pytest.mark.parametrize("command", ["extract", "traces", "train", "benchmark", "steperrors", "label"])
def test_a_second_writer_is_refused_in_one_line_while_the_first_holds_the_output(tmp_path, command):
    output, argv = commands(tmp_path)[command]
    holder = hold(output)
    try:
        line = assert_one_error(run_cli(argv), "another run is writing", str(output))
        assert "internal error" not in line
    finally:
        holder.kill()
        holder.wait()
    status, _, err = run_cli(argv)  # the holder is gone: the command gets past the lock
    assert "another run is writing" not in err, err


def test_reading_a_trace_store_takes_no_lock(tmp_path):
    holder = hold(tmp_path / "store")
    try:
        status, _, err = run_cli(["traces", "--out", str(tmp_path / "store")])
    finally:
        holder.kill()
        holder.wait()
    assert status == 2 and "is not a trace store yet" in err and "another run" not in err, err


def test_the_lock_is_released_when_an_in_process_command_ends(tmp_path):
    output, argv = commands(tmp_path)["train"]
    run_cli(argv)  # fails (no features), but took and must give back the lock
    holder = hold(output)  # would block forever (and the readline with it) if this process still held it
    holder.kill()
    holder.wait()


@pytest.mark.slow
def test_two_real_extract_runs_on_one_store_write_each_id_once(tmp_path):
    rows = [{"id": f"q{i}", "question": f"What is {i} + {i}?", "label": i % 2, "dataset": "arith"} for i in range(12)]
    labels = tmp_path / "labels.jsonl"
    labels.write_text("".join(json.dumps(r) + "\n" for r in rows))
    out = tmp_path / "features"
    argv = [sys.executable, "-m", "grade", "extract", "--model", "smollm2-135m-instruct", "--labels", str(labels),
            "--out", str(out), "--quiet", "--threads", "1", "--no-hidden"]
    first = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=ENV, cwd=tmp_path)
    try:
        lock = tmp_path / "features.lock"
        deadline = time.monotonic() + 60
        while not lock.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        second = subprocess.run(argv, capture_output=True, text=True, env=ENV, cwd=tmp_path, timeout=300)
        assert second.returncode == 2, second.stderr
        errors = [line for line in second.stderr.splitlines() if line.startswith("error:")]
        assert len(errors) == 1 and "another run is writing the feature store" in errors[0], second.stderr
        _, err = first.communicate(timeout=600)
        assert first.returncode == 0, err
    finally:
        if first.poll() is None:
            first.kill()
            first.wait()
    import pandas as pd

    stored = pd.read_parquet(out)
    assert len(stored) == 12 and stored["id"].nunique() == 12
