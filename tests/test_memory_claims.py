"""Home's analyses claim memory in the queue (issue 32, item 5): :func:`studio.memory.home_memory_mb` from the
embedded SmolLM2's shape and the request's tokens, and a Home submission that an operator's budget
(``GRADE_QUEUE_MEMORY_MB``) too small for it is refused with the queue's one line; the Reasoning trace page's
generation claims its key/value cache the same way. Qwen was not measured."""

from __future__ import annotations

from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.slow  # the embedded model


def test_home_claims_grow_with_the_document_and_the_answer(smollm):
    from grade.common.errors import InputError
    from grade.gradients.memory import analysis_memory_bytes
    from studio.memory import home_memory_mb, prompt_tokens
    from studio.served import LOCAL_LIMITS

    ask = {"question": "What is the capital of France?", "context": None, "max_new_tokens": 16}
    small = home_memory_mb(smollm, ask, LOCAL_LIMITS)
    n = prompt_tokens(smollm, ask["question"], None, LOCAL_LIMITS)
    assert small == pytest.approx(analysis_memory_bytes(smollm, n + 16, 16) / 2**20)
    # (past LOCAL_LIMITS.analysis_memory_mb the document's analysis runs layer by layer and claims that route's less)
    assert home_memory_mb(smollm, {**ask, "context": "Paris is in France. " * 200}, LOCAL_LIMITS) > 1.5 * small
    assert home_memory_mb(smollm, {**ask, "max_new_tokens": 256}, LOCAL_LIMITS) > small
    huge = {**ask, "context": "x " * 10**6}  # refused by its cap before anything is tokenised
    with pytest.raises(InputError, match="over this studio's limit"):
        home_memory_mb(smollm, huge, LOCAL_LIMITS)


def test_a_home_analysis_over_the_memory_budget_is_refused_with_one_line(monkeypatch, smollm):
    from streamlit.testing.v1 import AppTest

    from studio import queue

    monkeypatch.setattr(queue, "_shared", queue.AnalysisQueue(workers=1, memory_mb=1))
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=600).run()
    # a question no other test analyses: a cached analysis of it would be shown without reaching the queue
    at.text_area(key="question").input("Which river flows through the capital of France?")
    at.button(key="analyze").click().run()
    assert not at.exception, [e.value for e in at.exception]
    errors = [e.value for e in at.error]
    assert any("this studio runs analyses of at most 1 MB" in e for e in errors), errors


def test_generation_claims_the_key_value_cache_it_grows(smollm):
    """The Reasoning trace page's "generate" job claims memory too (it claimed none): the key/value cache over prompt
    and answer, counted from the model's shape (SmolLM2: 30 layers, 3 key/value heads of 64 float32 values)."""
    from grade.gradients.memory import generation_memory_bytes

    config = smollm.model.config
    kv = config.num_key_value_heads * (config.hidden_size // config.num_attention_heads) * 4
    grown = generation_memory_bytes(smollm, 100, 1100) - generation_memory_bytes(smollm, 100, 100)
    assert grown == 2 * config.num_hidden_layers * kv * 1000
    assert generation_memory_bytes(smollm, 2000, 16) > generation_memory_bytes(smollm, 100, 16)


def test_a_generation_over_the_memory_budget_is_refused_with_one_line(monkeypatch, smollm):
    from streamlit.testing.v1 import AppTest

    from studio import queue

    monkeypatch.setattr(queue, "_shared", queue.AnalysisQueue(workers=1, memory_mb=1))
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=600).run()
    at.switch_page("pages/reasoning_trace.py").run()
    before = at.text_area(key="rt_text_A").value
    at.button(key="rt_gen_A").click().run()
    assert not at.exception, [e.value for e in at.exception]
    errors = [e.value for e in at.error]
    assert any("this studio runs analyses of at most 1 MB" in e for e in errors), errors
    assert at.text_area(key="rt_text_A").value == before  # nothing generated, nothing lost
