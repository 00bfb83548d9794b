"""Every analysis of a served studio goes through the model's queue (studio/waiting.py), and Cancel stops a running
one: AppTests of the Reasoning trace page and Probes -> Extract with the embedded SmolLM2 behind another user's
real running analysis, read live while they wait; the queue's cancellation and memory budget."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path

import pytest

import grade
from grade.models.cancel import check_cancelled
from studio.queue import CANCELLED, DONE, AnalysisQueue, QueueRefused

ROOT = Path(__file__).resolve().parents[1]
APP = str(ROOT / "app.py")
TRACE = "Tom has 3 boxes of 4 pens. That makes 3 * 4 = 12 pens. He gives away 5 pens. So he keeps 12 - 5 = 7 pens."


# ------------------------------------------------------------------------------------------ the queue alone


def _until_cancelled(started: threading.Event):
    """A job that works in small steps until cancelled, as the engine does (grade.models.cancel.check_cancelled)."""

    def job(progress):
        started.set()
        while True:
            check_cancelled()
            time.sleep(0.01)

    return job


def test_cancelling_a_running_job_stops_it_and_the_worker_takes_the_next():
    queue = AnalysisQueue(workers=1, max_running=1)
    started = threading.Event()
    running = queue.submit("m", "alice", "long", _until_cancelled(started))
    assert started.wait(10)
    bob = queue.submit("m", "bob", "short", lambda p: "bob's result")
    assert queue.status(bob).position == 1
    assert queue.cancel(running)
    assert running.job.done_event.wait(10) and running.job.state == CANCELLED  # it stopped, not finished
    assert bob.wait(10) and bob.result() == "bob's result" and bob.state == DONE
    with pytest.raises(QueueRefused, match="cancelled"):
        running.result()


def test_a_running_job_that_another_user_shares_is_not_stopped_by_one_cancel():
    queue = AnalysisQueue(workers=1, max_running=1)
    gate, started = threading.Event(), threading.Event()

    def job(progress):
        started.set()
        while not gate.is_set():
            check_cancelled()
            time.sleep(0.01)
        return 42

    alice = queue.submit("m", "alice", "same", job)
    assert started.wait(10)
    bob = queue.submit("m", "bob", "same", job)  # joins the running job
    queue.cancel(alice)
    time.sleep(0.2)
    assert not alice.job.cancel_event.is_set()  # bob still waits for it
    gate.set()
    assert bob.wait(10) and bob.result() == 42


def test_the_memory_budget_admits_jobs_only_while_their_claims_fit(gated_jobs):
    queue = AnalysisQueue(workers=2, max_running=4, memory_mb=100)
    with pytest.raises(QueueRefused, match="needs about 150 MB; this studio runs analyses of at most 100 MB"):
        queue.submit("m", "dave", "huge", lambda p: None, memory_mb=150)
    tickets = []
    for i, claim in enumerate((60, 60, 30, 30)):  # 60 + 60 > 100: the second waits for the first
        tickets.append(queue.submit(f"model-{i % 2}", f"user-{i}", i, gated_jobs.new(), memory_mb=claim))
        if i == 0:  # the first runs before the others ask (workers of two models would race for it)
            deadline = time.monotonic() + 10
            while queue.running() == 0 and time.monotonic() < deadline:
                time.sleep(0.01)
    time.sleep(0.5)
    # 60 runs; the other 60 would pass 100 and waits at its model's head; a 30 fits beside the 60
    assert queue.status(tickets[0]).state == "running" and queue.status(tickets[1]).state == "waiting"
    with queue._cond:
        assert queue.running_memory() == 90
    gated_jobs.open_all()
    assert all(t.wait(30) and t.result() for t in tickets)
    assert queue.peak_memory_mb <= 100


@pytest.mark.slow
def test_cancel_stops_a_running_smollm2_trace_analysis_and_the_next_job_runs(smollm):
    """A real step-wise analysis (one pass per step) is cancelled once its first pass has run: it ends CANCELLED
    after that pass, and the worker then computes the next user's analysis."""
    from grade.models.architectures import down_projections

    queue = AnalysisQueue(workers=1, max_running=1)
    passes, first_pass = [], threading.Event()

    def count(module, inputs, output):
        passes.append(1)
        first_pass.set()

    hook = down_projections(smollm.model)[0].register_forward_hook(count)
    try:
        long = queue.submit("smollm", "alice", "trace", lambda progress: grade.analyze(
            smollm, "Tom has 3 boxes of 4 pens and gives away 5. How many are left?", task="gsm8k", loss="pos",
            response=TRACE, steps=True, spectra=False, step_passes="prefix"))
        assert first_pass.wait(120)
        short = queue.submit("smollm", "bob", "france", lambda progress: grade.analyze(
            smollm, "What is the capital of France?"))
        queue.cancel(long)
        assert long.job.done_event.wait(120) and long.job.state == CANCELLED
        stopped_after = len(passes)
        assert short.wait(120) and short.state == DONE
    finally:
        hook.remove()
    assert stopped_after < 4  # 4 steps: one pass each had it run to its end
    assert short.result().rank_ratio.shape == (smollm.n_layers,)


# ------------------------------------------------------------------------------------------- the pages


class LivePages:
    """Reads what an AppTest page shows while its script still runs (the messages Streamlit has sent so far)."""

    def __init__(self, monkeypatch):
        from streamlit.testing.v1.local_script_runner import LocalScriptRunner

        self.runners: list = []
        original = LocalScriptRunner.__init__
        runners = self.runners

        def recording(runner, *args, **kwargs):
            original(runner, *args, **kwargs)
            runners.append(runner)

        monkeypatch.setattr(LocalScriptRunner, "__init__", recording)

    def texts(self) -> list[str]:
        from streamlit.testing.v1.element_tree import parse_tree_from_messages

        shown = []
        for runner in list(self.runners):
            try:
                tree = parse_tree_from_messages(list(runner.forward_msgs()))
                shown += [m.value for m in tree.markdown]
            except Exception:  # a message list caught mid-write: read again next time
                pass
        return shown


@pytest.fixture
def served_queue(monkeypatch, tmp_path, smollm):
    from streamlit import config

    from studio import session

    monkeypatch.setenv("GRADE_SERVED", "1")
    monkeypatch.setenv("GRADE_USER_DATA_DIR", str(tmp_path / "users"))
    monkeypatch.setenv("GRADE_START_MODEL", "smollm2-135m-instruct")
    monkeypatch.setenv("GRADE_PRECOMPUTE_EXAMPLES", "0")
    monkeypatch.chdir(ROOT)
    session._settings.cache_clear()
    session.analysis_cache().clear()
    details = config.get_option("client.showErrorDetails")
    yield session
    session._settings.cache_clear()
    config.set_option("client.showErrorDetails", details)


def _another_users_analysis(session, label: str, smollm):
    """Another student's real analysis, running in the model's queue until cancelled (a long trace, again and
    again): the worker is busy while the test's page asks."""
    started = threading.Event()

    def compute(progress):
        started.set()
        while True:
            grade.analyze(smollm, "Tom has 3 boxes of 4 pens and gives away 5. How many are left?", task="gsm8k",
                          loss="pos", response=TRACE, steps=True, spectra=False, step_passes="prefix")

    ticket = session.analysis_queue().submit(label, "session:another-student", ("busy", time.time()), compute)
    assert started.wait(120)
    return ticket


def _click_in_thread(at, key: str) -> threading.Thread:
    thread = threading.Thread(target=lambda: at.button(key=key).click().run(), daemon=True)
    thread.start()
    return thread


def _wait_for(condition, seconds: float = 120) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.2)
    return False


@pytest.mark.slow
def test_a_trace_analysis_waits_in_the_queue_shows_its_position_and_one_per_user(served_queue, monkeypatch, smollm):
    from streamlit.testing.v1 import AppTest

    session = served_queue
    live = LivePages(monkeypatch)
    at = AppTest.from_file(APP, default_timeout=600)
    user = at.session_state["_grade_user_id"] = "trace-test-user"  # the id studio.session.user_key() keeps
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    label = at.session_state["model_spec"].label
    at.switch_page("pages/reasoning_trace.py").run()
    at.text_area(key="rt_question").input("Tom has 3 boxes of 4 pens and gives away 5. How many are left?")
    at.text_area(key="rt_text_A").input(TRACE)
    at.text_area(key="rt_text_B").input("")
    at.run()

    busy = _another_users_analysis(session, label, smollm)
    clicked = _click_in_thread(at, "rt_analyze")
    assert _wait_for(lambda: any("Waiting in the queue: position 1" in t for t in live.texts())), live.texts()

    # The same user on Home (another tab of the same login): refused in one line while the trace waits.
    home = AppTest.from_file(APP, default_timeout=600)
    home.session_state["_grade_user_id"] = user
    home.run()
    home.text_area(key="question").input("What is the capital of France?")
    home.button(key="analyze").click().run()
    assert not home.exception
    errors = [e.value for e in home.error]
    assert len(errors) == 1 and "already have an analysis waiting in the queue (position 1)" in errors[0], errors

    session.analysis_queue().cancel(busy)  # the other student cancels: their analysis stops, the trace runs
    clicked.join(600)
    assert busy.job.state == CANCELLED
    assert not at.exception and not at.error, ([e.value for e in at.exception], [e.value for e in at.error])
    traces = at.session_state["rt_traces"]
    assert list(traces) == ["A"] and len(traces["A"].result.steps) == 4
    assert any(m.label == "GRADE_pos" for m in at.metric)


@pytest.mark.slow
def test_extract_is_one_queued_job_per_click(served_queue, monkeypatch, smollm):
    from streamlit.testing.v1 import AppTest

    session = served_queue
    live = LivePages(monkeypatch)
    rows = [{"id": f"q{i}", "question": q, "label": 1, "dataset": "d"}
            for i, q in enumerate(["What is the capital of France?", "Who wrote Hamlet?"])]
    data = "".join(json.dumps(r) + "\n" for r in rows).encode()
    at = AppTest.from_file(APP, default_timeout=600).run()
    label = at.session_state["model_spec"].label
    at.switch_page("pages/probes.py").run()
    at.radio(key="train_source").set_value("Extract from labelled questions (.jsonl)").run()
    at.file_uploader(key="train_jsonl").set_value(("rows.jsonl", data, "application/octet-stream"))
    at.run()

    busy = _another_users_analysis(session, label, smollm)
    clicked = _click_in_thread(at, "extract")
    assert _wait_for(lambda: any("Waiting in the queue: position 1" in t for t in live.texts())), live.texts()
    session.analysis_queue().cancel(busy)
    clicked.join(600)
    assert not at.exception, [e.value for e in at.exception]
    assert any("Extracted 2 rows" in s.value for s in at.success), [s.value for s in at.success]
    assert len(at.session_state["extracted"]) == 2


def test_estimates_come_from_the_durations_of_the_same_kind_of_job():
    queue = AnalysisQueue(workers=1, max_running=1, default_seconds=4.0)
    for kind, seconds in (("trace", 0.6), (None, 0.05)):
        done = queue.submit("m", "alice", ("measure", kind), lambda p, s=seconds: time.sleep(s), kind=kind)
        assert done.wait(10)
    assert queue.average_seconds("m", "trace") > 0.5 > 0.2 > queue.average_seconds("m")
    assert queue.average_seconds("m", "extract") == queue.average_seconds("m", "trace")  # unmeasured: the longest
    gate, started = threading.Event(), threading.Event()

    def long_trace(progress):
        started.set()
        gate.wait(30)

    queue.submit("m", "bob", "a long trace", long_trace, kind="trace")
    assert started.wait(10)
    home = queue.submit("m", "carol", "a question", lambda p: "answer")
    status = queue.status(home)
    # behind a running trace: about the trace's remaining time plus one Home analysis, not two Home analyses
    assert status.position == 1 and status.measured and 0.3 < status.estimate_s < 1.0
    gate.set()
    assert home.wait(10) and home.result() == "answer"


@pytest.mark.slow
def test_spectra_follows_homes_queued_analysis_and_shows_it(served_queue, smollm):
    """A Home analysis still in the queue when its user opens Spectra (e.g. a rerun interrupted Home's wait):
    Spectra waits for that one and then shows its spectra, instead of 'No analysis yet'."""
    from streamlit.testing.v1 import AppTest

    from studio import waiting, workflows

    session = served_queue
    at = AppTest.from_file(APP, default_timeout=600)
    user = at.session_state["_grade_user_id"] = "spectra-test-user"
    at.run()
    label = at.session_state["model_spec"].label
    request = {"question": "What is the capital of France?", "context": None, "task": "qa", "max_new_tokens": 8}
    ticket = session.analysis_queue().submit(label, f"session:{user}", ("spectra-test", time.time()), lambda progress: (
        workflows.analyze_question(smollm, request["question"], max_new_tokens=8, progress=progress)))
    at.session_state[waiting.PENDING] = waiting.Pending(ticket, "home", request)
    at.switch_page("pages/spectra.py").run()
    assert not at.exception and not at.error, ([e.value for e in at.exception], [e.value for e in at.error])
    assert ticket.state == DONE and waiting.PENDING not in at.session_state
    assert at.session_state[session.ANALYSIS].result.question == request["question"]
    assert not any("No analysis yet" in i.value for i in at.info)
    assert at.slider(key="spectra_layer") is not None
