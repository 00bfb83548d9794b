"""A process killed while it writes leaves the previous file whole (grade.common.io).

Each test runs a real writer in a subprocess that saves two versions of an artefact over and over
(results, probes, feature parts through ``grade.common.io.atomic_paths``; label lines through
``grade.common.io.append_line``), SIGKILLs it in the middle of a write, and loads what is left with the
package's own readers. "In the middle" is observed, not hoped for: the kill is sent while the
writer's temporary file exists (atomic writes) or while the label file ends in a cut line (appends).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
KILLS = 2  # kills per artefact, each at a different point of a write

WRITERS = {
    "result": '''
import sys, numpy as np
from grade.gradients.result import GradeResult
target = sys.argv[1]
def version(k):
    n = 8000  # (30, 8000) spectra: a JSON file of about 5 MB
    return GradeResult(model="m", loss="pre", srank="paper", task="qa", question=f"version {k}", context=None,
                       prompt="p", response=None, input_ids=[1, 2], tokens=["a", "b"], response_start=None,
                       loss_value=float(k), srank_h=np.full(30, k, float), srank_g=np.full(30, k, float),
                       rank_ratio=np.full(30, k, float), eig_h=np.full((30, n), k, float), eig_g=np.full((30, n), k, float))
versions = [version(1), version(2)]
versions[0].save(target); print("ready", flush=True)
i = 0
while True:
    i += 1
    versions[i % 2].save(target)
''',
    "probe": '''
import sys, numpy as np
from grade.verdict.probe import Probe
target = sys.argv[1]
def version(k):
    n = 500_000  # four float64 vectors: 16 MB of weights
    p = Probe("logreg")
    p.n_features_in_, p.coef_, p.intercept_ = n, np.full(n, float(k)), float(k)
    p.mean_, p.scale_ = np.zeros(n), np.ones(n)
    p.metadata = {"model": "m", "loss": "pre", "version": k}
    return p
versions = [version(1), version(2)]
versions[0].save(target); print("ready", flush=True)
i = 0
while True:
    i += 1
    versions[i % 2].save(target)
''',
    "parts": '''
import sys, math
from pathlib import Path
from grade.batch.features import FeatureStore
store = FeatureStore(Path(sys.argv[1])).create()
def record(i):
    return {"id": str(i), "dataset": "d", "label": i % 2, "accuracy": math.nan, "task": "qa", "has_context": False,
            "question": "q" * 200, "response": None, "model": "m", "loss": "pre", "srank": "paper", "n_layers": 30,
            "n_tokens": 9, "loss_value": 1.0, "rank_ratio": [float(i)] * 30, "srank_h": [1.0] * 30,
            "srank_g": [1.0] * 30, "hidden": [[float(i)] * 576] * 8, "feature_version": 1, "package_version": "x"}
chunk = [record(i) for i in range(200)]  # one part: 200 rows of hidden states, some MB
store.write(chunk); print("ready", flush=True)
while True:
    store.write(chunk)
''',
    "labels": '''
import sys, json
from grade.common.io import append_line
target = sys.argv[1]
line = json.dumps({"id": "{id}", "samples": ["x" * 200_000]})
print("ready", flush=True)
with open(target, "a", encoding="utf-8") as f:  # as grade.batch.labeling.label_questions writes
    i = 0
    while True:
        append_line(f, line.replace("{id}", f"{i:08d}"))
        i += 1
''',
}


def _start(kind: str, target: Path) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    process = subprocess.Popen([sys.executable, "-c", WRITERS[kind], str(target)], cwd=ROOT, env=env,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    line = process.stdout.readline()
    assert line.strip() == "ready", process.stderr.read()
    return process


def _kill_when(process: subprocess.Popen, condition, timeout: float = 120.0) -> None:
    """SIGKILL ``process`` as soon as ``condition()`` holds (checked every millisecond)."""
    deadline = time.monotonic() + timeout
    try:
        while not condition():
            assert process.poll() is None, process.stderr.read()
            assert time.monotonic() < deadline, "the writer never reached the point to kill it at"
            time.sleep(0.001)
    finally:
        os.kill(process.pid, signal.SIGKILL)
        process.wait()


def _temporary_files(folder: Path, prefix: str) -> list[Path]:
    return [folder / name for name in os.listdir(folder) if name.startswith(prefix) and name.endswith(".tmp")]


def _kill_mid_write(kind: str, target: Path, folder: Path, prefix: str, skip: int) -> None:
    """Kill the writer while its ``skip``-th temporary file (counting from 0) is being written."""
    process = _start(kind, target)
    seen: set[str] = set()

    def writing() -> bool:
        names = {p.name for p in _temporary_files(folder, prefix)}
        seen.update(names)
        return bool(names) and len(seen) > skip

    _kill_when(process, writing)


@pytest.mark.parametrize("kill", range(KILLS))
def test_a_killed_result_save_leaves_a_whole_result(tmp_path, kill):
    from grade.gradients.result import GradeResult

    target = tmp_path / "result.json"
    _kill_mid_write("result", target, tmp_path, ".result.json.", skip=kill)
    result = GradeResult.load(target)  # whole JSON, one version throughout
    k = {"version 1": 1.0, "version 2": 2.0}[result.question]
    assert result.loss_value == k and (result.eig_h == k).all() and result.eig_h.shape == (30, 8000)
    assert _temporary_files(tmp_path, ".result.json.")  # the kill did land in the middle of a write


@pytest.mark.parametrize("kill", range(KILLS))
def test_a_killed_probe_save_leaves_a_whole_probe(tmp_path, kill):
    from grade.verdict.probe import Probe

    target = tmp_path / "probe"
    _kill_mid_write("probe", target, tmp_path, ".probe.", skip=kill)
    probe = Probe.load(target)  # weights and metadata of one version: the checksum matches
    k = probe.metadata["version"]
    assert probe.intercept_ == k and (probe.coef_ == k).all()
    assert sorted(p.name for p in tmp_path.glob("*.safetensors")) == ["probe.safetensors"]
    assert _temporary_files(tmp_path, ".probe.")  # the kill did land in the middle of a write


@pytest.mark.parametrize("kill", range(KILLS))
def test_a_killed_feature_extraction_leaves_whole_parts(tmp_path, kill):
    from grade.batch.features import load_features

    store = tmp_path / "store.parquet"
    store.mkdir()
    _kill_mid_write("parts", store, store, ".part-", skip=kill)
    frame = load_features(store)  # every part file readable
    parts = list(store.glob("part-*.parquet"))
    assert len(frame) == 200 * len(parts) >= 200 * (kill + 1)
    assert _temporary_files(store, ".part-")  # left behind by the kill, and ignored by the readers


@pytest.mark.parametrize("kill", range(KILLS))
def test_a_killed_labelling_keeps_every_finished_line(tmp_path, kill):
    from grade.batch.labeling import read_records

    target = tmp_path / "labels.jsonl"
    process = _start("labels", target)
    one = len('{"id": "00000000", "samples": ["' + "x" * 200_000 + '"]}\n')  # every line has this length

    def cut_after_some_lines() -> bool:  # the file ends in the middle of a line, after kill + 1 whole ones
        size = target.stat().st_size if target.exists() else 0
        return size > one * (kill + 1) and size % one != 0

    _kill_when(process, cut_after_some_lines)
    # The kill was sent while the file ended in a cut line; the kernel may still finish that one
    # write() before the process dies, so the file ends either in a cut line or a whole one.
    data = target.read_bytes()
    records = read_records(target, repair=True)  # a cut line is dropped, every earlier one is whole
    assert [r["id"] for r in records] == [f"{i:08d}" for i in range(len(records))] and len(records) >= kill + 1
    assert target.read_bytes() == data[: data.rfind(b"\n") + 1]
