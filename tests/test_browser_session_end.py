"""The served studio's sessions from their first request to their end, in real browsers (headless Chromium,
selenium; ``make browser``): a fresh server's first request for a page goes through app.py (the Traces page, which
the served studio does not offer, is not shown); a waiting page shows its position in the queue and can leave it;
a closed tab lets go of what it held: its uploaded files are removed from the server's memory and its queued
analysis leaves the queue, once Streamlit can no longer resume the session (``server.disconnectedSessionTTL``, 3 s
here; swept every second)."""

from __future__ import annotations

import os
import re
import tempfile
import time
from pathlib import Path

import pytest

from bench.load_test import (CHROMEDRIVER, CHROMIUM, Session, _css, _until, click_analyze, follow, new_driver,
                             open_and_type)
from tests.conftest import studio_server

ROOT = Path(__file__).resolve().parents[1]
SLOW = 600
# The served studio on SmolLM2, its examples not precomputed (nothing here asks for them).
SERVED = {"GRADE_SERVED": "1", "GRADE_START_MODEL": "smollm2-135m-instruct", "GRADE_PRECOMPUTE_EXAMPLES": "0"}
# Long answers (the served cap of 128 tokens), so that the pages behind them wait long enough to leave.
LONG = ("Write a long, detailed essay about the history of the Roman Empire.",
        "Write a long, detailed essay about the history of the Ottoman Empire.")

pytestmark = [pytest.mark.slow, pytest.mark.browser]


def _set_answer_length(driver, tokens: int) -> None:
    from selenium.webdriver.common.keys import Keys

    box = _until(driver, lambda d: next(iter(_css(d, ".st-key-max_new_tokens input")), None), 60, "answer length")
    box.click()
    box.send_keys(Keys.CONTROL, "a")
    box.send_keys(str(tokens))
    box.send_keys(Keys.TAB)
    time.sleep(1.0)


@pytest.fixture(scope="module")
def served():
    """(url, the server's log file)."""
    if not (Path(CHROMIUM).exists() and Path(CHROMEDRIVER).exists()):
        pytest.fail("headless Chromium is missing: run `make browser`")
    log = tempfile.NamedTemporaryFile(prefix="grade-session-end-", suffix=".log", delete=False)
    try:
        with studio_server(SERVED | {"GRADE_SESSION_SWEEP_S": "1"}, ("--server.disconnectedSessionTTL", "3"), log) as url:
            yield url, Path(log.name)
    finally:
        Path(log.name).unlink(missing_ok=True)


def _logged(log: Path, pattern: str, timeout: float = 60) -> str:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = re.search(pattern, log.read_text(errors="replace"))
        if found:
            return found.group(0)
        time.sleep(0.5)
    raise AssertionError(f"the server never logged {pattern!r}; its log ends:\n{log.read_text()[-2000:]}")


def test_the_first_request_of_a_fresh_server_goes_through_app_py(served, tmp_path):
    """Must run first in this module: the fixture's server has served nothing before it."""
    url, _ = served
    driver = new_driver(str(tmp_path / "chromium"))
    try:
        driver.get(f"{url}/traces")
        _until(driver, lambda d: _css(d, ".st-key-question textarea"), SLOW, "Home, where /traces is not offered")
        titles = [h.text.strip() for h in _css(driver, "h1")]
        assert "Traces" not in titles and not _css(driver, ".st-key-tr_upload"), titles
        links = [a.text.strip().splitlines()[-1] for a in _css(driver, ".st-key-page_links a") if a.text.strip()]
        assert "Traces" not in links and "Probes" in links, links
    finally:
        driver.quit()


def test_a_closed_tab_releases_its_uploaded_files(served, tmp_path):
    url, log = served
    files = []
    for name, size in (("big.safetensors", 3_000_000), ("big.json", 1_000_000)):
        files.append(tmp_path / name)
        files[-1].write_bytes(os.urandom(size))
    driver = new_driver(str(tmp_path / "chromium"))
    try:
        driver.get(f"{url}/probes")
        _until(driver, lambda d: next((t for t in _css(d, '[role="tab"]') if "Load a probe file" in t.text), None),
               SLOW, "the Load tab").click()
        box = _until(driver, lambda d: next(iter(_css(d, ".st-key-probe_upload input[type=file]")), None), 60,
                     "the probe uploader")
        box.send_keys("\n".join(str(f) for f in files))
        _until(driver, lambda d: all(f.name in " ".join(b.text for b in _css(d, ".st-key-probe_upload"))
                                     for f in files), 60, "both files uploaded")
        time.sleep(2.0)
        assert "released" not in log.read_text(errors="replace")  # an open tab keeps its files
    finally:
        driver.quit()
    line = _logged(log, r"ended: released (\d+) uploaded file\(s\), ([\d.]+) MB")
    assert re.search(r"released 2 uploaded file\(s\), 4\.0 MB", line), line


def test_a_waiting_page_can_leave_the_queue_and_a_closed_tab_leaves_it_too(served, tmp_path):
    """Two answers of the served cap's length run ahead; behind them a tab that is closed while it waits, and a page
    that waits, shows its position and leaves with Cancel. The closed tab's session ends (TTL + one sweep) while its
    analysis is still queued, on a fast machine too (one answer took 3.5 s on CI's), and takes it out of the queue;
    the two ahead complete."""
    url, log = served
    drivers = [new_driver(str(tmp_path / f"chromium-{k}")) for k in range(4)]
    try:
        *ahead, leaver, waiter = drivers
        for driver, question in zip(ahead, LONG):
            open_and_type(driver, url, question, SLOW)
            _set_answer_length(driver, 128)
        open_and_type(leaver, url, "Who painted the Mona Lisa?", SLOW)
        open_and_type(waiter, url, "Who wrote Hamlet?", SLOW)
        for driver in ahead:
            click_analyze(driver)
        _until(ahead[0], lambda d: any("Analyzing" in b.text for b in _css(d, ".st-key-queue_status")), 120,
               "running")
        click_analyze(leaver)
        _until(leaver, lambda d: any("position 2" in b.text for b in _css(d, ".st-key-queue_status")), 60,
               "the third page waiting")
        leaver.quit()
        drivers.remove(leaver)
        click_analyze(waiter)

        text = _until(waiter, lambda d: next((b.text for b in _css(d, ".st-key-queue_status")
                                              if re.search(r"position [123]\b", b.text)), None), 120,
                      "the fourth page's queue position")
        assert "Waiting in the queue" in text and "ahead of yours" in text, text
        _until(waiter, lambda d: next(iter(_css(d, ".st-key-cancel_analysis button")), None), 30, "Cancel").click()
        _until(waiter, lambda d: "Analysis cancelled" in d.find_element("tag name", "body").text, 60, "cancelled")
        assert not _css(waiter, ".st-key-queue_status") and not _css(waiter, ".st-key-verdict")
        assert _css(waiter, ".st-key-analyze button")[0].is_enabled()  # free to ask again

        _logged(log, r"ended: released 0 uploaded file\(s\), 0\.0 MB; cancelled its queued analysis")
        for driver, question in zip(ahead, LONG):
            session = Session(question)
            follow(driver, session, time.monotonic(), SLOW)
            assert session.error is None and session.finished is not None and session.question_box == question
    finally:
        for driver in drivers:
            driver.quit()


def test_a_refused_upload_is_let_go_at_once_and_nothing_stays_on_disk(served, tmp_path):
    url, log = served
    files = []
    for k in range(3):  # a probe is two files: three are refused as they arrive
        files.append(tmp_path / f"part-{k}.json")
        files[-1].write_bytes(os.urandom(1_000_000))
    driver = new_driver(str(tmp_path / "chromium"))
    try:
        driver.get(f"{url}/probes")
        _until(driver, lambda d: next((t for t in _css(d, '[role="tab"]') if "Load a probe file" in t.text), None),
               SLOW, "the Load tab").click()
        box = _until(driver, lambda d: next(iter(_css(d, ".st-key-probe_upload input[type=file]")), None), 60,
                     "the probe uploader")
        box.send_keys("\n".join(str(f) for f in files))
        _until(driver, lambda d: "3 files were uploaded" in d.execute_script("return document.body.innerText"), 120,
               "the refusal")
        # released while the tab is still open, not when its session ends
        assert re.search(r"released 3 refused upload\(s\), 3\.0 MB", _logged(log, r"released \d+ refused upload.*MB"))
    finally:
        driver.quit()
