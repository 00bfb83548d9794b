"""The llama.cpp build's time left, measured from its own log on the machine it runs on (no constant)."""

from pathlib import Path

from grade.models.backends import LlamaBuild, llama_build_status
from studio import loading


def test_the_time_left_is_the_pace_so_far_times_the_steps_left():
    log = Path("/v/llama-build.log")
    build = LlamaBuild("building", log, started=1000.0, steps=(40, 120))
    assert loading.build_remaining(build, now=1000.0 + 400) == 800  # 10 s a step, 80 steps left
    line = loading.build_summary(build, now=1000.0 + 400)
    assert "about 13 min left" in line and "this machine" in line
    slower = LlamaBuild("building", log, started=1000.0, steps=(40, 120))
    assert loading.build_remaining(slower, now=1000.0 + 920) == 1840  # a busy machine: twice the estimate
    early = LlamaBuild("building", log, started=1000.0, steps=(2, 120))
    assert loading.build_remaining(early, now=1010.0) is None
    assert "measured once a few compile steps are done" in loading.build_summary(early, now=1010.0)


def test_the_estimate_reads_a_real_log(tmp_path):
    """The log as the Makefile writes it (a 'started <unix time>' line, then ninja's [done/total] lines)."""
    (tmp_path / "llama-build.log").write_text("started 1000.0\n-- Configuring done\n[1/90] Building C object a.o\n"
                                              "[30/90] Building CXX object b.o\n")
    build = llama_build_status(tmp_path)
    assert build.steps == (30, 90) and build.started == 1000.0
    assert loading.build_remaining(LlamaBuild("building", build.log, build.started, build.steps), now=1300.0) == 600
