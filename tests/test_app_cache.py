"""Home's analysis cache under ``streamlit.testing.v1.AppTest`` with the embedded SmolLM2, and the cache itself."""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[1]
APP = str(ROOT / "app.py")
TIMEOUT = 600
QUESTION = "What is the capital of France?"
FRANCE_EXAMPLE = "Capital of France (well known)"


def _app(monkeypatch):
    from streamlit.testing.v1 import AppTest

    monkeypatch.setenv("GRADE_START_MODEL", "smollm2-135m-instruct")
    monkeypatch.chdir(ROOT)  # the router's pages are relative paths
    return AppTest.from_file(APP, default_timeout=TIMEOUT)


def _no_exception(at) -> None:
    assert not at.exception, [e.value for e in at.exception]


def _click(at, key: str) -> None:
    at.button(key=key).click().run()
    _no_exception(at)
    assert not at.error, [e.value for e in at.error]


def _hint(at) -> list[str]:
    return [c.value for c in at.caption if c.value.startswith("Cached result (computed at ")]


@pytest.mark.slow
def test_asking_the_same_question_again_is_answered_from_the_cache(monkeypatch):
    """Analysing 'What is the capital of France?' a second time (here through Home's example, the same question)
    reuses the first analysis, says so, and Recompute computes it again. How much quicker the second click is
    is measured by ``python -m bench.app_cache``, not here."""
    from studio import session

    session.analysis_cache.clear()  # another test module of this process may have analysed it already
    at = _app(monkeypatch).run()
    _no_exception(at)
    assert any(e.label == "What you are looking at" for e in at.expander)
    at.text_area(key="question").input(QUESTION)
    _click(at, "analyze")
    computed = at.session_state[session.ANALYSIS]
    assert not computed.from_cache and not _hint(at)
    # The headline number is read against the labelled reference questions, not left to a story.
    reading = [c.value for c in at.caption if c.value.startswith("This number is the mean of the per-layer rank")]
    assert len(reading) == 1 and f"{computed.result.grade:.3f} is above" in reading[0], reading

    at.selectbox(key="example").set_value(FRANCE_EXAMPLE).run()
    assert at.text_area(key="question").value == QUESTION
    _click(at, "analyze")
    cached = at.session_state[session.ANALYSIS]
    assert cached.from_cache and cached.result is computed.result
    hint = _hint(at)
    assert len(hint) == 1 and time.strftime("%H:", time.localtime(computed.computed_at)) in hint[0], hint

    # Recompute: analysed again (a new result object), same numbers, no hint, and the cache now holds it.
    _click(at, "recompute")
    again = at.session_state[session.ANALYSIS]
    assert not again.from_cache and again.result is not computed.result and not _hint(at)
    np.testing.assert_allclose(again.result.rank_ratio, computed.result.rank_ratio, rtol=1e-5)
    at.button(key="analyze").click().run()
    assert at.session_state[session.ANALYSIS].result is again.result


def test_the_cache_is_bounded_by_entries_and_bytes():
    from studio.analysis_cache import AnalysisCache

    cache = AnalysisCache(max_entries=2, max_bytes=10_000)
    cache.put("a", np.zeros(100))  # 800 bytes
    cache.put("b", np.zeros(100))
    assert cache.get("a") is not None  # "a" is now the most recently used
    cache.put("c", np.zeros(100))
    assert len(cache) == 2 and cache.get("b") is None and cache.get("a") is not None
    cache.put("d", np.zeros(1_200))  # 9,600 bytes: a third entry ("c" goes), and with "a" over 10,000 ("a" goes)
    assert cache.get("d") is not None and cache.nbytes == 9_600 and len(cache) == 1
    assert cache.put("huge", np.zeros(2_000)) is None and cache.get("huge") is None  # alone over the bound
    assert AnalysisCache(max_entries=0).put("x", 1) is None


def test_the_bounds_come_from_the_environment(monkeypatch):
    from studio.analysis_cache import AnalysisCache

    monkeypatch.setenv("GRADE_ANALYSIS_CACHE_ENTRIES", "3")
    monkeypatch.setenv("GRADE_ANALYSIS_CACHE_MB", "0.5")
    cache = AnalysisCache.from_environment()
    assert (cache.max_entries, cache.max_bytes) == (3, 512 * 1024)
    monkeypatch.setenv("GRADE_ANALYSIS_CACHE_MB", "lots")
    with pytest.raises(ValueError, match="GRADE_ANALYSIS_CACHE_MB"):
        AnalysisCache.from_environment()


def test_served_questions_are_cached_per_user_except_homes_examples(monkeypatch):
    """Served, a typed question's cache entry is its user's own (a cached hint would tell one user what another
    asked); Home's shipped examples are shared. Locally there is one user and everything is shared."""
    from streamlit.testing.v1 import AppTest

    from studio import session

    def keys():
        import streamlit as st

        from studio import session
        from studio.resources import ModelSpec

        st.session_state["model_spec"] = ModelSpec(source="smollm2-135m-instruct")
        lm = type("LM", (), {"name": "smollm2-135m-instruct"})()
        request = {"question": "Q?", "context": "", "task": "qa", "max_new_tokens": 8}
        st.session_state["keys"] = [session.analysis_key(lm, None, request, 0, shared=s) for s in (True, False)]

    def run():
        session._settings.cache_clear()  # local or served is read once per process
        at = AppTest.from_function(keys, default_timeout=60).run()
        assert not at.exception, [e.value for e in at.exception]
        return at.session_state["keys"]

    monkeypatch.chdir(ROOT)
    monkeypatch.delenv("GRADE_SERVED", raising=False)
    shared, own = run()
    assert shared == own and shared[0] is None
    monkeypatch.setenv("GRADE_SERVED", "1")
    try:
        shared, own = run()
        other_shared, other_own = run()  # another browser session: another user
    finally:
        monkeypatch.delenv("GRADE_SERVED")
        session._settings.cache_clear()
    assert shared[0] is None and shared == other_shared
    assert own[0] is not None and other_own[0] is not None and own != other_own and own[1:] == other_own[1:]
