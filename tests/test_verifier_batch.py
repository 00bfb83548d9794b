"""The step verifier's reading batched over traces (grade.steps.verifier.step_features_batch, what
``grade traces --verifier-only`` runs) gives each trace the features and verdict of its own pass, with the embedded
SmolLM2 (the shipped verifier's reader) on annotated traces the repository ships."""

from __future__ import annotations

import json
import lzma
from importlib.resources import files

import numpy as np
import pytest

from grade.common.errors import GradeError
from grade.steps.verifier import step_features, step_features_batch, verify_trace

pytestmark = pytest.mark.slow


def _traces(n: int) -> list[tuple[str, str, str]]:
    path = files("grade") / "datasets" / "real_step_errors" / "gsm8k_written.jsonl.xz"
    with lzma.open(path, "rt", encoding="utf-8") as handle:
        rows = [json.loads(line) for _, line in zip(range(n), handle)]
    return [(r["question"], r["trace"].strip(), "gsm8k") for r in rows]


def test_batched_features_and_verdicts_are_each_traces_own(smollm, one_torch_thread):
    traces = _traces(6)
    traces.insert(2, (traces[0][0], "", "gsm8k"))  # no steps: refused in its own slot, the others go on
    batched = step_features_batch(smollm, traces, batch_size=4)
    assert isinstance(batched[2], GradeError) and "no steps" in str(batched[2])
    for (question, trace, task), features in zip(traces, batched):
        if not trace:
            continue
        alone = step_features(smollm, question, trace, task=task)
        assert features.findings == alone.findings and features.n_tokens == alone.n_tokens
        np.testing.assert_allclose(features.hidden, alone.hidden, rtol=1e-4, atol=1e-4)
        np.testing.assert_allclose(features.scalars, alone.scalars, rtol=1e-4, atol=1e-4)
        one = verify_trace(smollm, question, trace, task=task, features=alone)  # what it reads itself without them
        both = verify_trace(smollm, question, trace, task=task, features=features)
        assert both.suspect_step == one.suspect_step and both.ranking == one.ranking
        np.testing.assert_allclose(both.step_probability, one.step_probability, atol=1e-4)
        assert both.findings == one.findings
