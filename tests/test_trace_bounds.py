"""Step and time bounds for reasoning traces (issue 32, item 4), on the embedded SmolLM2: a trace over the step cap
is refused before any backward pass with a message naming the cap; a trace that runs reports its steps as it goes;
a trace past the time bound stops with one message saying how far it got."""

from __future__ import annotations

import dataclasses

import pytest

from grade.common.errors import InputError

pytestmark = pytest.mark.slow  # the embedded model

QUESTION = "Tom has 3 apples and buys 2 more. How many apples does he have?"


def trace(n_steps: int) -> str:
    return " ".join(f"Step {i + 1}: {i} + 1 = {i + 1}." for i in range(n_steps))


def test_a_trace_over_the_step_cap_is_refused_at_once_naming_the_cap(smollm, one_torch_thread, monkeypatch):
    from studio.served import LOCAL_LIMITS, SERVED_LIMITS
    from studio.workflows import analyze_trace

    def never(*args, **kwargs):
        raise AssertionError("the model ran: the trace was refused after running, not from its length")

    monkeypatch.setattr(smollm.model, "forward", never)
    for limits in (LOCAL_LIMITS, SERVED_LIMITS):
        with pytest.raises(InputError, match=f"this studio analyses at most {limits.trace_steps}"):
            analyze_trace(smollm, QUESTION, trace(limits.trace_steps + 1), title="Trace A", limits=limits)


def test_a_long_trace_reports_its_steps_as_it_goes(smollm, one_torch_thread):
    from studio.served import LOCAL_LIMITS
    from studio.workflows import analyze_trace

    lines: list[str] = []
    result = analyze_trace(smollm, QUESTION, trace(6), title="Trace A", progress=lines.append,
                           limits=dataclasses.replace(LOCAL_LIMITS, step_memory_mb=1))  # small groups: several reports
    assert len(result.result.steps) == 6
    assert lines[0].startswith("Analyzing Trace A: 0/6 steps done") and lines[-1].startswith("Analyzing Trace A: 6/6")
    assert len(lines) >= 3, lines


def test_one_step_group_holding_every_step_still_reports_each_step(smollm, one_torch_thread):
    """With a budget large enough for one group, progress went 0 -> done; it now counts the steps of the group."""
    from studio.served import LOCAL_LIMITS
    from studio.workflows import analyze_trace

    lines: list[str] = []
    result = analyze_trace(smollm, QUESTION, trace(6), title="Trace A", progress=lines.append,
                           limits=dataclasses.replace(LOCAL_LIMITS, step_memory_mb=10_000))
    assert result.result.timings["step_pieces"] == 1  # the premise: one group
    done = [int(line.split(": ")[1].split("/")[0]) for line in lines if "/6 steps" in line]
    assert done == sorted(done) and set(done) >= {0, 1, 2, 3, 4, 5, 6}, lines


def test_a_trace_past_the_time_bound_stops_with_one_message(smollm, one_torch_thread):
    from studio.served import LOCAL_LIMITS
    from studio.workflows import analyze_trace

    limits = dataclasses.replace(LOCAL_LIMITS, trace_seconds=1e-9, step_memory_mb=1)
    with pytest.raises(InputError, match=r"Trace A: stopped after \d+ of 6 steps .*at most 1e-09 s"):
        analyze_trace(smollm, QUESTION, trace(6), title="Trace A", limits=limits)
