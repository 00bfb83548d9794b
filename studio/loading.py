"""What the app is waiting for, said in the main pane: the model loading (with how long it takes) and the
background build of llama.cpp (`make run` builds it while the app is already up; see the Makefile).

Two entry points, both Streamlit-using:

- :func:`model_loading`, a context manager around the (slow) model load: the main pane shows which model
  loads, whether it is converted first (once, under a minute for Qwen2.5-Coder-1.5B on 2 cores) or read from the
  converted copy (seconds), a running clock, and each step the loader reports; all of it goes away once
  loaded.
- :func:`llama_build_notice`, a line in the sidebar while llama-cpp-python builds (its compile step and log),
  refreshed every few seconds without rerunning the page, or when its build failed.

The estimates are pure functions (:func:`load_estimate`, :func:`build_summary`) so that tests need no
Streamlit.
"""

from __future__ import annotations

import time
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterator

import streamlit as st

import grade
from grade.models.backends import LlamaBuild, llama_build_status
from grade.models.models import cache_dir

#: Seconds the first start converts an embedded model's GGUF file into a torch model (de-quantised weights,
#: cached on disk), measured on 2 idle cores (bench/gguf_conversion.py); models not listed: under a minute.
CONVERSION_SECONDS = {"qwen2.5-coder-1.5b-instruct": 45}
#: Seconds to load the converted copy of the largest embedded model (Qwen) on 2 cores: about 25 s were seen
#: on a busy 2-core VM, a few seconds idle.
LOAD_SECONDS = 25
#: Compile steps done before the build's own pace is taken as its estimate: the first steps are few and quick
#: (configuring, small files), so an earlier guess would promise too little.
MIN_STEPS_FOR_ESTIMATE = 5


@dataclass(frozen=True)
class LoadEstimate:
    """What a model load will do and about how long it takes (``seconds``: None when not known)."""

    title: str
    detail: str
    seconds: float | None


def load_estimate(source: str, label: str | None = None) -> LoadEstimate:
    """The estimate for loading ``source`` (an embedded model's name, a folder, a .gguf file or a hub id), named
    ``label`` (default: ``source``; the app passes the path as shown to this user)."""
    label = label or source
    if source in grade.EMBEDDED_MODELS:
        converted = (cache_dir() / "models" / source / "config.json").exists()
        if converted:
            return LoadEstimate(f"Loading {label}",
                                "Reading the converted copy from disk: a few seconds "
                                f"(up to about {LOAD_SECONDS} s for Qwen on 2 busy cores).", LOAD_SECONDS)
        seconds = CONVERSION_SECONDS.get(source)
        how_long = (f"about {seconds} s on 2 cores" if seconds else "under a minute for a small model")
        return LoadEstimate(f"Preparing {label} (first start)",
                            f"Converting its GGUF file into a torch model, once: {how_long}. The converted copy is "
                            "kept on disk, so later starts take seconds.",
                            None if seconds is None else seconds + LOAD_SECONDS)
    if source.endswith(".gguf"):
        return LoadEstimate(f"Loading {label}", "A .gguf file is converted into a torch model the first time "
                            "(a minute or more for a 1-2 B model), then read from the converted copy.", None)
    return LoadEstimate(f"Loading {label}", "A local folder loads in seconds to a minute depending on its size; "
                        "a hub id is downloaded first.", None)


def _shown(path: Path) -> str:
    """The log's path relative to the app's folder (`.venv/llama-build.log`), never a server's absolute path."""
    try:
        return str(path.resolve().relative_to(Path.cwd().resolve()))
    except (OSError, ValueError):
        return path.name


def build_remaining(build: LlamaBuild, now: float | None = None) -> float | None:
    """Seconds llama-cpp-python's build still needs, measured on this machine while it runs: the time it has taken
    per ``[done/total]`` compile step of its log so far, times the steps left. None until
    :data:`MIN_STEPS_FOR_ESTIMATE` steps are done (or without a start time in the log)."""
    if not build.started or not build.steps or build.steps[0] < MIN_STEPS_FOR_ESTIMATE or not build.steps[1]:
        return None
    done, total = build.steps
    elapsed = max(0.0, (now or time.time()) - build.started)
    return elapsed / done * max(0, total - done)


def _minutes(seconds: float) -> str:
    return f"{seconds / 60:.0f} min" if seconds >= 90 else f"{seconds:.0f} s"


def build_summary(build: LlamaBuild, now: float | None = None) -> str | None:
    """One line on llama-cpp-python's background build; None when there is nothing to say (installed, or never
    built by `make run`)."""
    if build.state == "building":
        parts = ["llama.cpp (fast generation) is being built in the background"]
        if build.steps:
            parts.append(f"compile step {build.steps[0]}/{build.steps[1]}")
        if build.started:
            elapsed = max(0, (now or time.time()) - build.started)
            remaining = build_remaining(build, now)
            parts.append(f"started {_minutes(elapsed)} ago, " + (
                f"about {_minutes(remaining)} left at its pace so far on this machine" if remaining is not None
                else "time left measured once a few compile steps are done"))
        return (", ".join(parts) + f". Answers are generated with torch (slower) until it is ready; the next answer "
                f"after it uses llama.cpp, no restart needed. Log: `{_shown(build.log)}`")
    if build.state == "failed":
        return (f"llama.cpp did not build (log: `{_shown(build.log)}`): answers are generated with torch (slower). "
                "`make run` tries again; `make install-fast` builds it in the foreground.")
    return None


@contextmanager
def model_loading(source: str, label: str | None = None) -> Iterator[Callable[[str], None]]:
    """Show in the main pane what loads (``source``, named ``label``) and how long it takes, while the ``with``
    block loads it; yields
    a progress function (one line per step) to pass to the loader beside the sidebar's. Cleared at the end,
    also when the load fails (the caller shows the error)."""
    estimate = load_estimate(source, label)
    build = build_summary(llama_build_status())
    started = time.time()
    box = st.empty()
    with box.container(border=True):
        st.markdown(f"#### {estimate.title}")
        ready = ""
        if estimate.seconds:
            ready = f" Expected ready around {time.strftime('%H:%M:%S', time.localtime(started + estimate.seconds))}."
        st.markdown(estimate.detail + ready + " Every page needs the model; they open once it is loaded.")
        if build:
            st.caption(build + " The build shares the CPU with the model's preparation, so both take longer.")
        step = st.empty()

        def progress(line: str) -> None:
            step.caption(f"{time.time() - started:.0f} s: {line}")

        try:
            with st.spinner("Loading the model ...", show_time=True):
                yield progress
        finally:
            box.empty()


def _build_notice() -> None:
    build = llama_build_status()
    line = build_summary(build)
    if line is None:
        return
    if build.state == "building":
        if build.steps and build.steps[1]:
            st.progress(min(1.0, build.steps[0] / build.steps[1]), text="llama.cpp build")
        st.caption(line)
    else:
        st.warning(line)


def llama_build_notice(every: float = 10.0) -> None:
    """In the sidebar: where llama-cpp-python's background build stands, refreshed every ``every`` s while it
    runs (a fragment: the page itself is not rerun, and a running analysis is not interrupted). Nothing when
    llama.cpp is installed or was never built in the background."""
    building = llama_build_status().state == "building"
    with st.sidebar:
        st.fragment(run_every=every if building else None)(_build_notice)()
