"""The queue's first estimate of a kind it has not measured (studio/queue.py, studio/wait_seconds.py): the reference
durations per route and size, scaled by this machine's measured speed on the kinds both know."""

from __future__ import annotations

import json
import threading
import time

import pytest

from studio.queue import AnalysisQueue
from studio.wait_seconds import TABLE, home_kind, reference_seconds

ROWS = ({"model": "m", "engine": "llama.cpp", "task": "qa", "tokens": 12, "seconds": 0.2},
        {"model": "m", "engine": "llama.cpp", "task": "gsm8k", "tokens": 256, "seconds": 2.0})


def _sleeper(seconds: float):
    def job(progress):
        time.sleep(seconds)
        return seconds

    return job


def test_a_word_problem_after_short_answers_is_estimated_from_the_reference_scaled_by_this_machine():
    reference = lambda kind: reference_seconds(kind, ROWS)  # noqa: E731
    queue = AnalysisQueue(workers=1, max_running=1, default_seconds=10.0, reference=reference)
    short, word = home_kind("m", "llama.cpp", "qa", 12), home_kind("m", "llama.cpp", "gsm8k", 256)
    # this machine is twice as slow as the reference on short answers (0.4 s against 0.2 s)
    done = queue.submit("m", "alice", "a", _sleeper(0.4), kind=short)
    assert done.wait(10)
    gate, started = threading.Event(), threading.Event()
    blocker = queue.submit("m", "bob", "b", lambda progress: started.set() or gate.wait(10), kind=short)
    assert started.wait(10)
    waiting = queue.submit("m", "carol", "c", _sleeper(0.0), kind=word)
    status = queue.status(waiting)
    # without the reference it would be told the short answers' 0.4 s; the reference says ten times that, twice
    assert status.position == 1 and not status.measured
    assert 0.4 + 3.5 <= status.estimate_s <= 0.4 + 4.5, status.estimate_s
    gate.set()
    assert blocker.wait(10) and waiting.wait(10)


def test_a_size_not_measured_lies_on_the_engines_line_and_an_unknown_route_has_no_reference():
    assert reference_seconds(home_kind("m", "llama.cpp", "qa", 12), ROWS) == 0.2
    # seconds = fixed + per token x tokens through (12, 0.2) and (256, 2.0)
    assert reference_seconds(home_kind("m", "llama.cpp", "math", 512), ROWS) == pytest.approx(2.0 + 256 * 1.8 / 244)
    assert reference_seconds(home_kind("m", "torch", "qa", 12), ROWS) is None
    assert reference_seconds(("trace", 3), ROWS) is None


def test_the_shipped_reference_durations_are_measured_rows_with_their_provenance():
    table = json.loads(TABLE.read_text())
    assert table["rows"] and all(r["seconds"] > 0 and r["n"] >= 1 for r in table["rows"])
    for route, made in table["measured"].items():
        assert made["date"] and made["commit"] and made["cpu"], route
