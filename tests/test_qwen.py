"""End to end on the embedded Qwen2.5-Coder-1.5B-Instruct, on the CPU: Home's analysis of one question (the
shipped probe and detectors picked as the app picks them) and the Reasoning trace page's step-wise analysis
of one of its own GSM8K traces.

Kept to one short question and one short trace: the rest of the suite uses SmolLM2 where speed matters.
Generation runs the torch loop here (``make test`` does not build llama.cpp); the features come from the
torch model either way.
"""

import json
from pathlib import Path

import numpy as np
import pytest

import grade
from grade.common.io import open_text
from studio import workflows
from studio.resources import default_probe, list_probes, load_detectors, load_probe

pytestmark = pytest.mark.slow

MODEL = "qwen2.5-coder-1.5b-instruct"
LABELS = Path(__file__).resolve().parents[1] / "data" / "labels" / MODEL


@pytest.fixture(scope="module")
def qwen(one_torch_thread):
    return grade.load_model(MODEL)


def test_home_analysis_of_an_easy_fact(qwen):
    info = default_probe(qwen.name, list_probes(), task="qa")
    assert info is not None and not info.metadata.get("tasks")  # the general probe, not the math one
    detectors, _ = load_detectors(qwen.name)
    analysis = workflows.analyze_question(qwen, "What is the capital of France?", task="qa",
                                          probe=load_probe(info.path), probe_info=info, detectors=detectors)
    assert "Paris" in analysis.answer
    result = analysis.result
    assert result.rank_ratio.shape == (28,) and np.isfinite(result.rank_ratio).all()
    assert analysis.verdict is not None and 0.0 <= analysis.verdict.probability <= 1.0
    assert analysis.detector_verdicts, "Qwen ships detectors: each gives a verdict beside the probe's"
    # The easiest fact there is: the entropy after the prompt is near zero, and the shipped probe says it knows
    # (issue 13's check: at least 50 %; the paper's rank-ratio probe said 48 % here).
    assert result.loss_value < 0.5
    assert analysis.verdict.probability >= 0.5


def test_home_verdict_on_a_trivia_question_it_always_gets_wrong(qwen):
    """A TriviaQA question Qwen answered wrongly in 10 of 10 samples when labelled: the verdict is under 50 %."""
    with open_text(LABELS / "triviaqa.jsonl.xz") as f:
        row = next(r for r in map(json.loads, f) if r["question"].startswith("What was the name of Drew Barrymore's"))
    assert row["n_correct"] == 0 and row["n_samples"] == 10
    info = default_probe(qwen.name, list_probes(), task="qa")
    analysis = workflows.analyze_question(qwen, row["question"], task="qa", probe=load_probe(info.path),
                                          probe_info=info, detectors=None)
    assert analysis.verdict.probability < 0.5


def test_reasoning_trace_of_its_own_gsm8k_answer(qwen):
    """Qwen's own greedy trace of a GSM8K problem it always solved when labelled, analysed step by step as the
    Reasoning trace page does; the math probe is the default there. Cut at 16 tokens: already two steps (its plan
    and the first item of its numbered list), and each token costs twice, once generated and once in the step-wise
    pass."""
    info = default_probe(qwen.name, list_probes(), task="gsm8k")
    assert info is not None and "gsm8k" in info.metadata.get("tasks", [])
    with open_text(LABELS / "gsm8k.jsonl.xz") as f:
        row = next(r for r in map(json.loads, f) if r["accuracy"] == 1.0)
    response = workflows.generate_cot(qwen, row["question"], max_new_tokens=16)
    assert len(response.split()) >= 10
    trace = workflows.analyze_trace(qwen, row["question"], response, title="own", gold=row["answers"])
    steps = trace.result.steps
    assert len(steps) >= 2 and all(np.isfinite(s.rank_ratio).all() for s in steps)
    assert steps[-1].end == len(trace.result.input_ids)
    assert len(trace.display_tokens) == len(trace.result.input_ids) - trace.result.response_start
