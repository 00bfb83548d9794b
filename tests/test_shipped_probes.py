"""The shipped Qwen probes are what ``scripts/build_probes.py`` builds from the feature stores restored from the
repository's history (``scripts/restore_benchmark_caches.sh``), and they read what their metadata says."""

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from grade.batch.features import load_features
from grade.verdict.probe import SHIPPED_PROBES_DIR, Probe, probe_inputs

ROOT = Path(__file__).resolve().parents[1]
QWEN = "qwen2.5-coder-1.5b-instruct"


@pytest.fixture(scope="module")
def features_dir(benchmark_caches):
    return benchmark_caches / "data" / "probe_features"


@pytest.mark.parametrize("loss", ["pre", "pos"])
def test_the_shipped_qwen_math_probes_are_what_the_script_builds(features_dir, tmp_path, loss):
    name = f"{QWEN}-{loss}-math"
    done = subprocess.run([sys.executable, str(ROOT / "scripts" / "build_probes.py"), "--skip-extract", "--no-transfer",
                           "--features-dir", str(features_dir), "--only", name, "--out-dir", str(tmp_path),
                           "--reference", str(tmp_path / "reference.parquet")], capture_output=True, text=True, cwd=ROOT)
    assert done.returncode == 0, done.stderr
    built, shipped = Probe.load(tmp_path / name), Probe.load(SHIPPED_PROBES_DIR / name)
    assert built.inputs == shipped.inputs == "sranks_loss" and built.kind == shipped.kind == "logreg"
    def data(meta):  # the stores' paths: relative to the checkout there, under a temporary folder here
        sources = [s[s.index("data/probe_features"):] for s in meta["training_data"]["sources"]]
        return {**meta["training_data"], "sources": sources}

    assert data(built.metadata) == data(shipped.metadata)
    assert built.metadata["metrics"]["test"]["auroc"] == pytest.approx(shipped.metadata["metrics"]["test"]["auroc"])
    gsm8k = load_features(features_dir / QWEN / loss / "gsm8k.parquet", hidden=False)
    X = probe_inputs(gsm8k, "sranks_loss")
    assert np.allclose(built.predict_proba(X), shipped.predict_proba(X), atol=1e-9)


def test_every_shipped_probe_names_inputs_it_can_read():
    for meta_path in sorted(SHIPPED_PROBES_DIR.glob("*.json")):
        probe = Probe.load(meta_path)
        meta = json.loads(meta_path.read_text())
        assert probe.inputs == meta.get("inputs", "rank_ratio")
        assert probe.n_layers == meta["n_layers"]
        assert probe.n_features_in_ == (meta["n_layers"] if probe.inputs == "rank_ratio" else 2 * meta["n_layers"] + 1)
