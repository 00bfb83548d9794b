"""The model the app starts on: ``$GRADE_START_MODEL`` (``make run`` sets Qwen2.5-Coder-1.5B), else SmolLM2."""

import pytest

pytestmark = pytest.mark.slow


def _picker_app():
    import streamlit as st

    from studio.session import model_picker

    spec = model_picker()
    st.write(f"picked {spec.source}")


def _picked(monkeypatch, value):
    from streamlit.testing.v1 import AppTest

    if value is None:
        monkeypatch.delenv("GRADE_START_MODEL", raising=False)
    else:
        monkeypatch.setenv("GRADE_START_MODEL", value)
    at = AppTest.from_function(_picker_app, default_timeout=60).run()
    assert not at.exception
    return at


@pytest.mark.parametrize("value, expected", [(None, "smollm2-135m-instruct"),
                                             ("qwen2.5-coder-1.5b-instruct", "qwen2.5-coder-1.5b-instruct")])
def test_the_picker_starts_on_the_chosen_embedded_model(monkeypatch, value, expected):
    at = _picked(monkeypatch, value)
    assert at.selectbox(key="model_choice").value == expected
    assert at.markdown[-1].value == f"picked {expected}"
    assert not at.warning


def test_an_unknown_start_model_says_so_and_starts_on_the_default(monkeypatch):
    at = _picked(monkeypatch, "/etc/passwd")
    assert at.selectbox(key="model_choice").value == "smollm2-135m-instruct"
    assert "is not an embedded model" in at.warning[0].value
