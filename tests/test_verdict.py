"""The probe's verdict on one question inside ``grade`` (:mod:`grade.verdict.verdict`): which probe judges a model's
questions of a task, and the verdict's measured test metrics beside their chance rates."""

from __future__ import annotations

import numpy as np
import pytest

from grade.common.errors import ProbeError
from grade.verdict.probe import SHIPPED_PROBES_DIR, Probe, list_probes
from grade.verdict.verdict import Verdict, default_probe, probe_probability, resolve_probe


def test_auto_is_the_shipped_probe_of_the_model_task_and_loss():
    assert resolve_probe("auto", "smollm2-135m-instruct") == SHIPPED_PROBES_DIR / "smollm2-135m-instruct-pre.safetensors"
    assert resolve_probe("auto", "smollm2-135m-instruct", loss="pos").name == "smollm2-135m-instruct-pos.safetensors"
    qwen = "qwen2.5-coder-1.5b-instruct"
    assert resolve_probe("auto", qwen, task="gsm8k").name == f"{qwen}-pre-math.safetensors"
    assert resolve_probe("auto", qwen, task="qa").name == f"{qwen}-pre.safetensors"
    # Gemma ships a GRADE_pre probe only: it is the default under either loss, as on Home
    assert resolve_probe("auto", "gemma-3-270m", loss="pos").name == "gemma-3-270m-pre.safetensors"
    assert default_probe("gemma-3-270m").name == "gemma-3-270m-pre"
    with pytest.raises(ProbeError, match="no probe for llama-7b .*there are probes for gemma-3-270m"):
        resolve_probe("auto", "llama-7b")
    assert resolve_probe("some/folder/mine.json", "llama-7b").name == "mine.safetensors"


def test_default_probe_reads_the_shipped_folder_unless_given_probes():
    assert default_probe("smollm2-135m-instruct") == default_probe("smollm2-135m-instruct", list_probes())
    assert default_probe("smollm2-135m-instruct", []) is None
    # a model given by path matches as the probe's compatibility check matches it
    assert default_probe("/models/SmolLM2-135M-Instruct.gguf").name == "smollm2-135m-instruct-pre"


def test_the_verdict_states_the_measured_metrics_with_their_chance_rates():
    verdict = Verdict(probability=0.62, probe_name="p", auroc=0.79, loss="pre", accuracy=0.87, n_test=177,
                      positives=27)
    assert verdict.answerable and verdict.auroc_chance == 0.5
    assert verdict.accuracy_chance == pytest.approx(150 / 177)
    data = verdict.to_dict()
    assert data["answerable"] is True and data["accuracy_chance"] == pytest.approx(150 / 177)
    assert "test AUROC 0.790 (chance 0.50)" in verdict.describe()
    assert "always the larger class: 0.847, 177 test questions" in verdict.describe()
    unmeasured = Verdict(probability=0.3, probe_name="p", auroc=None, loss="pos", threshold=0.2)
    assert unmeasured.answerable and unmeasured.accuracy_chance is None
    assert "test AUROC not recorded" in unmeasured.describe()


def test_the_probability_is_the_probes_own():
    probe = Probe.load(SHIPPED_PROBES_DIR / "smollm2-135m-instruct-pre")
    x = np.random.default_rng(0).normal(0.6, 0.05, size=probe.n_layers)
    assert probe_probability(probe, x) == pytest.approx(probe.predict_proba(x[None, :].astype(np.float32))[0, 1])
