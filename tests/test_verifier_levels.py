"""The step verifier's thresholds per level (GSM8K, MATH): chosen on each level's dev traces, saved and read back
with the verifier, and applied to a trace by its task; a verifier without them keeps its pooled thresholds."""

from __future__ import annotations

import numpy as np
import pytest

from grade.steps.verifier import StepVerifier, shipped_verifier, trace_level

READER = "smollm2-135m-instruct"


def test_a_traces_task_picks_its_levels_thresholds_and_they_survive_a_save(tmp_path):
    verifier = shipped_verifier(READER)
    assert verifier is not None
    verifier.localizer = False  # the first step over a threshold: which threshold applied shows in the step named
    verifier.threshold, verifier.threshold_right = 0.5, 0.9
    verifier.level_thresholds = {"math": {"threshold": 0.8, "threshold_right": 0.95}}
    p = np.array([0.1, 0.6, 0.85, 0.92])
    assert trace_level("math") == "math" and trace_level("gsm8k") == trace_level("qa") == trace_level(None) == "gsm8k"
    assert verifier.suspect(p, level="math") == 2  # its own 0.8
    assert verifier.suspect(p, level="gsm8k") == 1  # no thresholds of its own: the pooled 0.5
    assert verifier.suspect(p) == 1
    assert verifier.suspect(p, final_correct=True, level="math") is None and verifier.suspect(p, final_correct=True) == 3
    assert verifier.suspect(p, final_correct=False, level="math") == verifier.suspect(p, final_correct=False)
    assert verifier.suspect(p, threshold=0.05, level="math") == 0  # a threshold given wins
    meta, _ = verifier.save(tmp_path / "v")
    again = StepVerifier.load(meta)
    assert again.level_thresholds == verifier.level_thresholds and again.thresholds("math") == (0.8, 0.95)
    assert again.thresholds("gsm8k") == (0.5, 0.9)


def test_a_verifier_without_level_thresholds_reads_as_before(tmp_path):
    verifier = shipped_verifier(READER)
    verifier.level_thresholds = {}
    meta, _ = verifier.save(tmp_path / "v")
    assert "level_thresholds" not in meta.read_text()
    again = StepVerifier.load(meta)
    assert again.level_thresholds == {} and again.thresholds("math") == (verifier.threshold, verifier.threshold_right)


@pytest.mark.parametrize("level", ["gsm8k", "math"])
def test_the_shipped_verifiers_thresholds_are_the_ones_its_file_names(level):
    import json
    from pathlib import Path

    meta = json.loads((Path(__file__).resolve().parents[1] / "grade/assets/step_verifier" / f"{READER}.json").read_text())
    own = meta.get("level_thresholds", {}).get(level)
    expected = (own["threshold"], own["threshold_right"]) if own else (meta["threshold"], meta["threshold_right"])
    assert shipped_verifier(READER).thresholds(level) == pytest.approx(expected)
