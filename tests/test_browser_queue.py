"""The served studio's queue in real browsers (headless Chromium, selenium; ``make browser``): a waiting page
shows its position and can leave the queue, while the analyses ahead of it complete."""

from __future__ import annotations

import contextlib
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from bench.load_test import (CHROMEDRIVER, CHROMIUM, HOST, Session, _css, _free_port, _until, click_analyze, follow,
                             new_driver, open_and_type, wait_healthy)

ROOT = Path(__file__).resolve().parents[1]
SLOW = 600
# Long answers (the served cap of 128 tokens), so that the page behind them waits long enough to leave.
LONG = ("Write a long, detailed essay about the history of the Roman Empire.",
        "Write a long, detailed essay about the history of the Ottoman Empire.")

pytestmark = [pytest.mark.slow, pytest.mark.browser]


@contextlib.contextmanager
def served_studio(log, env: dict | None = None, args: tuple[str, ...] = ()):
    """The served studio on SmolLM2 at a free loopback port (its output to ``log``); yields its URL."""
    port = _free_port()
    env = {**os.environ, "GRADE_SERVED": "1", "GRADE_START_MODEL": "smollm2-135m-instruct",
           "GRADE_PRECOMPUTE_EXAMPLES": "0", "TRANSFORMERS_VERBOSITY": "error", **(env or {})}
    process = subprocess.Popen(
        [sys.executable, "-m", "streamlit", "run", "app.py", "--server.headless", "true", "--server.port", str(port),
         "--server.address", HOST, "--browser.gatherUsageStats", "false", "--server.fileWatcherType", "none", *args],
        cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT)
    try:
        wait_healthy(f"http://{HOST}:{port}", process)
        yield f"http://{HOST}:{port}"
    finally:
        process.terminate()
        try:
            process.wait(20)
        except subprocess.TimeoutExpired:
            process.kill()


@pytest.fixture(scope="module")
def served_url():
    with served_studio(tempfile.TemporaryFile()) as url:
        yield url


def _set_answer_length(driver, tokens: int) -> None:
    from selenium.webdriver.common.keys import Keys

    box = _until(driver, lambda d: next(iter(_css(d, ".st-key-max_new_tokens input")), None), 60, "answer length")
    box.click()
    box.send_keys(Keys.CONTROL, "a")
    box.send_keys(str(tokens))
    box.send_keys(Keys.TAB)
    time.sleep(1.0)


def test_a_waiting_page_shows_its_position_and_can_leave_the_queue(served_url):
    if not (Path(CHROMIUM).exists() and Path(CHROMEDRIVER).exists()):
        pytest.fail("headless Chromium is missing: run `make browser`")
    profiles = [tempfile.mkdtemp(prefix="grade-queue-chromium-") for _ in range(3)]
    drivers = [new_driver(p) for p in profiles]
    try:
        questions = [*LONG, "Who painted the Mona Lisa?"]
        for driver, question in zip(drivers, questions):
            open_and_type(driver, served_url, question, SLOW)
        for driver in drivers[:2]:
            _set_answer_length(driver, 128)
        for driver in drivers:
            click_analyze(driver)
        last = drivers[2]
        text = _until(last, lambda d: next((b.text for b in _css(d, ".st-key-queue_status")
                                            if re.search(r"position [12]\b", b.text)), None), 120,
                      "the third page's queue position")
        assert "Waiting in the queue" in text and "ahead of yours" in text, text
        _until(last, lambda d: next(iter(_css(d, ".st-key-cancel_analysis button")), None), 30, "Cancel").click()
        _until(last, lambda d: "Analysis cancelled" in d.find_element("tag name", "body").text, 60, "cancelled")
        assert not _css(last, ".st-key-queue_status") and not _css(last, ".st-key-verdict")
        assert _css(last, ".st-key-analyze button")[0].is_enabled()  # free to ask again
        for driver, question in zip(drivers[:2], LONG):  # the analyses ahead of it complete
            session = Session(question)
            follow(driver, session, time.monotonic(), SLOW)
            assert session.error is None and session.question_box == question, session
    finally:
        for driver in drivers:
            driver.quit()
