"""studio/loading.py: the main pane's "what is loading and how long" and the sidebar's llama.cpp build notice."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from grade.models.backends import LLAMA_BUILD_LOCK, LlamaBuild
from studio import loading

fcntl = pytest.importorskip("fcntl")


def test_first_start_converts_then_seconds(tmp_path, monkeypatch):
    monkeypatch.setenv("GRADE_CACHE_DIR", str(tmp_path))
    first = loading.load_estimate("qwen2.5-coder-1.5b-instruct")
    assert "first start" in first.title and "about 45 s" in first.detail and first.seconds == 45 + loading.LOAD_SECONDS
    (tmp_path / "models" / "qwen2.5-coder-1.5b-instruct").mkdir(parents=True)
    (tmp_path / "models" / "qwen2.5-coder-1.5b-instruct" / "config.json").write_text("{}")
    again = loading.load_estimate("qwen2.5-coder-1.5b-instruct")
    assert "converted copy" in again.detail and again.seconds == loading.LOAD_SECONDS
    assert loading.load_estimate("smollm2-135m-instruct").seconds is None  # not measured: no number
    assert loading.load_estimate("/models/x.gguf").seconds is None


def test_build_summary(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    inside = loading.build_summary(LlamaBuild("failed", tmp_path / ".venv" / "llama-build.log"))
    assert "`.venv/llama-build.log`" in inside
    log = Path("/v/llama-build.log")
    line = loading.build_summary(LlamaBuild("building", log, started=1000.0, steps=(40, 80)), now=1000.0 + 180)
    assert "step 40/80" in line and "started 3 min ago" in line and "torch" in line
    assert "`llama-build.log`" in line  # outside the app's folder: the name only, not a server path
    assert "did not build" in loading.build_summary(LlamaBuild("failed", log))
    assert loading.build_summary(LlamaBuild("installed", log)) is None
    assert loading.build_summary(LlamaBuild("absent", log)) is None


SCRIPT = '''
import time
import streamlit as st
from studio import loading

loading.llama_build_notice()
with loading.model_loading("qwen2.5-coder-1.5b-instruct") as progress:
    progress("Converting qwen2.5-coder-1.5b-instruct-q4_k_m.gguf")
    time.sleep(0.1)
st.write("page")
'''


def test_in_an_app(tmp_path, monkeypatch):
    """The loading box goes away once loaded; the sidebar says the build runs while it holds its lock."""
    from streamlit.testing.v1 import AppTest

    from grade.models import backends

    monkeypatch.setenv("GRADE_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(backends, "build_folder", lambda: tmp_path)
    (tmp_path / "llama-build.log").write_text("started 1700000000\n[3/90] Building C object ggml.c.o\n")
    fd = os.open(tmp_path / LLAMA_BUILD_LOCK, os.O_RDWR | os.O_CREAT)
    fcntl.flock(fd, fcntl.LOCK_EX)
    try:
        at = AppTest.from_string(SCRIPT, default_timeout=30).run()
    finally:
        os.close(fd)
    assert not at.exception
    assert [m.value for m in at.markdown][-1] == "page"
    assert not any("first start" in m.value for m in at.markdown)  # cleared once loaded
    assert any("step 3/90" in c.value for c in at.sidebar.caption)
