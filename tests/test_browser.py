"""End to end: the real app in headless Chromium (Debian's ``chromium`` + ``chromium-driver``, via selenium).

On the app server of the test process (``streamlit run app.py`` on a free localhost port, conftest's
``studio_url``, shared with the other browser files), types a question, clicks Analyze, checks that
the probe's verdict appears, visits every page, and saves a screenshot of each page: to a temporary folder, or with ``GRADE_UPDATE_SCREENSHOTS=1`` to
``assets/screenshots/<page>.png`` (the README shows them), so a test run leaves the checkout clean.
Install the browser with ``make browser``.
"""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
UPDATE_SCREENSHOTS = os.environ.get("GRADE_UPDATE_SCREENSHOTS") == "1"


def _screenshots_folder() -> Path:
    """assets/screenshots with GRADE_UPDATE_SCREENSHOTS=1, else a temporary folder removed when the test process
    ends, kept where a failed wait left its picture there (the failure gives its path)."""
    if UPDATE_SCREENSHOTS:
        return ROOT / "assets" / "screenshots"
    folder = Path(tempfile.mkdtemp(prefix="grade-screenshots-"))
    atexit.register(lambda: any(folder.glob("failed-*")) or shutil.rmtree(folder, ignore_errors=True))
    return folder


SCREENSHOTS = _screenshots_folder()
# The Reasoning trace page's generation: 160 tokens for the README's screenshot (Qwen's 256-token trace of the first
# problem ends in Python code, a step a line: 22 steps, over the 20 the studio analyses, so it is refused), a few
# steps' worth otherwise (what the test checks, a generated trace analysed beside another, needs no more).
TRACE_TOKENS = 160 if UPDATE_SCREENSHOTS else 48
CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
CHROMEDRIVER = shutil.which("chromedriver") or "/usr/bin/chromedriver"
QUESTION = "What is the capital of France?"
SLOW = 600  # seconds: model load + analysis + generation on a busy 2-core CPU

pytestmark = [pytest.mark.slow, pytest.mark.browser]


@pytest.fixture(scope="module")
def app_url(studio_url):
    """The app's URL: the server of the whole test process (conftest's ``studio_url``), for this file and the
    browser files that import this fixture."""
    return studio_url


def _new_driver(profile: str):
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync",
                 "--disable-dev-shm-usage", f"--user-data-dir={profile}", "--window-size=1440,1000",
                 "--hide-scrollbars"):
        options.add_argument(flag)
    return webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)


@pytest.fixture(scope="module")
def new_browser():
    """A factory of headless Chromium windows, each with its own fresh profile; all closed at the end."""
    if not (Path(CHROMIUM).exists() and Path(CHROMEDRIVER).exists()):
        pytest.fail("headless Chromium is missing: run `make browser` (apt-get install -y chromium chromium-driver)")
    drivers, profiles = [], []

    def make():
        profiles.append(tempfile.mkdtemp(prefix="grade-chromium-"))
        drivers.append(_new_driver(profiles[-1]))
        return drivers[-1]

    try:
        yield make
    finally:
        for driver in drivers:
            driver.quit()
        for profile in profiles:
            shutil.rmtree(profile, ignore_errors=True)


# ------------------------------------------------------------------------------------------ helpers


def _wait(driver, condition, timeout: float = SLOW, what: str = ""):
    """Wait until ``condition(driver)`` is truthy; Streamlit re-renders elements, so stale ones are retried."""
    from selenium.common.exceptions import StaleElementReferenceException, TimeoutException
    from selenium.webdriver.support.ui import WebDriverWait

    try:
        return WebDriverWait(driver, timeout, poll_frequency=0.5,
                             ignored_exceptions=[StaleElementReferenceException]).until(condition)
    except TimeoutException:
        picture = _save(driver, f"failed-{what or 'wait'}")
        raise AssertionError(f"timed out after {timeout} s waiting for {what} (the page: {picture}); page text:\n"
                             f"{driver.find_element('tag name', 'body').text[:3000]}") from None


def _css(driver, selector: str):
    return driver.find_elements("css selector", selector)


def _idle(driver) -> bool:
    """No script run in progress or asked for: the app's root element says so from the moment a widget asks for a
    rerun (``data-test-script-state``), the 'running' status widget only half a second into a run."""
    root = _css(driver, '[data-testid="stApp"]')
    state = root[0].get_attribute("data-test-script-state") if root else "running"
    return state not in ("running", "rerunRequested", "stopRequested") and not _css(driver, '[data-testid="stStatusWidget"]')


def _text(driver, selector: str, attribute: str | None = None) -> str:
    """Text (or an attribute) of the first element matching ``selector``, read after the page settles."""
    def read(d):
        found = _css(d, selector)
        if not found:
            return None
        value = found[0].get_attribute(attribute) if attribute else found[0].text
        return value if value is not None else ""

    return _wait(driver, lambda d: (lambda v: v if v is not None else False)(read(d)), 30, f"text of {selector}")


def _no_exception(driver) -> None:
    exceptions = _css(driver, '[data-testid="stException"]')
    assert not exceptions, exceptions[0].text


def _save(driver, name: str) -> Path:
    """Screenshot of the whole page: the window is grown to the height of the scrolling main area."""
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    height = driver.execute_script(
        "const m = document.querySelector('[data-testid=\"stMain\"]');"
        "return Math.max(m ? m.scrollHeight : 0, document.body.scrollHeight);")
    driver.set_window_size(1440, min(max(int(height) + 40, 900), 6000))
    # let Plotly re-layout to the new size: a committed picture waits for it, a test run's needs only the page
    time.sleep(1.5 if UPDATE_SCREENSHOTS else 0.3)
    path = SCREENSHOTS / f"{name}.png"
    driver.save_screenshot(str(path))
    driver.set_window_size(1440, 1000)
    if UPDATE_SCREENSHOTS:
        # 256 colours keep the committed pages readable at about 40 % of the size: the tracked tree travels to
        # the GPU machine beside the model's weights
        from PIL import Image

        with Image.open(path) as image:
            quantized = image.convert("RGB").quantize(colors=256, method=Image.Quantize.MEDIANCUT)
        quantized.save(path, optimize=True)
    return path


def _go(driver, title: str) -> None:
    """Navigate with the sidebar (a click keeps the session, a new URL would not)."""
    link = _wait(driver, lambda d: next((a for a in _css(d, '.st-key-page_links a')
                                          if a.text.strip().splitlines()[-1:] == [title]), None), 60,
                 f"nav link {title}")
    link.click()
    _wait(driver, lambda d: any(h.text.strip() == title for h in _css(d, "h1")), 60, f"page {title}")


def _settled(driver, timeout: float = SLOW, what: str = "") -> None:
    time.sleep(0.5)  # the browser's own events (a blur, a click) reach the app first
    _wait(driver, _idle, timeout, what or "the script run to finish")


# -------------------------------------------------------------------------------------------- test


def _type_question(driver, url: str, question: str) -> None:
    """Open the app and type ``question`` into the question box."""
    from selenium.webdriver.common.keys import Keys

    driver.get(url)
    _wait(driver, lambda d: _css(d, ".st-key-question textarea"), SLOW, "the question box")
    _settled(driver, what="the model to load")
    box = _wait(driver, lambda d: next(iter(_css(d, ".st-key-question textarea")), None), 60, "the question box")
    box.click()
    box.send_keys(question)
    box.send_keys(Keys.TAB)  # commit the text area before clicking
    _settled(driver)


def _set_number(driver, selector: str, value: int) -> None:
    """Type ``value`` into the number box ``selector`` and let the page take it."""
    from selenium.webdriver.common.keys import Keys

    box = _wait(driver, lambda d: next(iter(_css(d, selector)), None), 60, selector)
    box.click()
    box.send_keys(Keys.CONTROL, "a")
    box.send_keys(str(value))
    box.send_keys(Keys.TAB)
    _wait(driver, lambda d: next(iter(_css(d, selector)), None).get_attribute("value") == str(value), 30, selector)
    _settled(driver)


def _click_analyze(driver) -> None:
    _wait(driver, lambda d: next(iter(_css(d, ".st-key-analyze button")), None), 60, "the Analyze button").click()


def _verdict(driver) -> str:
    """Wait for the probe's verdict and return its text."""
    return _wait(driver, lambda d: next((v.text for v in _css(d, ".st-key-verdict")
                                         if "Probability that the model can answer" in v.text), None),
                 SLOW, "the probe verdict")


def test_app_end_to_end(app_url, new_browser):
    driver = new_browser()
    _type_question(driver, app_url, QUESTION)
    _click_analyze(driver)
    verdict = _verdict(driver)
    # the card cites what the probe measured on questions like this: an AUROC, or why there is no number (too few of
    # a class, grade.verdict.measured.too_few)
    assert "%" in verdict and "measured on questions like this" in verdict, verdict
    assert "AUROC" in verdict or ("too few" in verdict and "a number needs" in verdict), verdict
    _settled(driver)
    answer = _text(driver, ".st-key-answer")
    assert "Paris" in answer, answer
    _no_exception(driver)
    _wait(driver, lambda d: len(_css(d, ".js-plotly-plot")) >= 1, 60, "the overview chart")
    _save(driver, "home")

    _go(driver, "Spectra")
    _wait(driver, lambda d: len(_css(d, ".js-plotly-plot")) >= 4, 120, "the spectra charts")
    _settled(driver)
    _no_exception(driver)
    assert "Why the stable rank?" in driver.find_element("tag name", "body").text
    _save(driver, "spectra")

    _go(driver, "Reasoning trace")
    _settled(driver)
    if TRACE_TOKENS:
        _set_number(driver, ".st-key-rt_max_tokens input", TRACE_TOKENS)
    generate = _wait(driver, lambda d: next(iter(_css(d, ".st-key-rt_gen_A button")), None), 60, "generate button")
    generate.click()
    _wait(driver, lambda d: any(t.get_attribute("value").strip() for t in _css(d, ".st-key-rt_text_A textarea")),
          SLOW, "the generated trace")
    _settled(driver)
    _wait(driver, lambda d: next(iter(_css(d, ".st-key-rt_analyze button")), None), 60, "Analyze traces").click()
    _wait(driver, lambda d: _css(d, ".st-key-trace_A") and _css(d, ".st-key-trace_B"), SLOW, "both analysed traces")
    _settled(driver)
    _no_exception(driver)
    assert "GRADE_pos" in driver.find_element("tag name", "body").text
    _save(driver, "reasoning_trace")

    _go(driver, "Projections")
    _wait(driver, lambda d: len(_css(d, ".js-plotly-plot")) >= 2, SLOW, "the projections")
    _settled(driver)
    _no_exception(driver)
    _save(driver, "projections")

    _go(driver, "Probes")
    _settled(driver)
    _no_exception(driver)
    assert "Active probe" in driver.find_element("tag name", "body").text
    _save(driver, "probes")

    _go(driver, "Benchmarks")
    _settled(driver)
    _no_exception(driver)
    _save(driver, "benchmarks")


def test_two_sessions_at_the_same_time_get_their_own_results(app_url, new_browser):
    questions = (QUESTION, "Who wrote the novel Pride and Prejudice?")
    drivers = [new_browser(), new_browser()]
    for driver, question in zip(drivers, questions):
        _type_question(driver, app_url, question)
    for driver in drivers:  # both analyses run at once, on the one shared model
        _click_analyze(driver)
    for driver in drivers:
        _verdict(driver)
        _settled(driver)
        _no_exception(driver)
    answers = [_text(d, ".st-key-answer") for d in drivers]
    assert "Paris" in answers[0] and "Paris" not in answers[1], answers
    boxes = [_text(d, ".st-key-question textarea", "value") for d in drivers]
    assert boxes == list(questions)
    grades = [_wait(d, lambda d: next((m.text for m in _css(d, '[data-testid="stMetric"]') if m.text.startswith("GRADE")),
                                      None), 30, "the GRADE metric") for d in drivers]
    assert grades[0] != grades[1], grades


def test_png_export_renders_offline_with_the_local_chromium():
    """The PNG download buttons render with kaleido and the Debian Chromium, no network, no browser download."""
    import numpy as np

    from studio import figures
    from studio.session import png_export_available

    if not Path(CHROMIUM).exists():
        pytest.fail("headless Chromium is missing: run `make browser`")
    assert png_export_available()
    png = figures.rank_ratio_trend(np.linspace(0.5, 1.5, 30)).to_image(format="png", width=800, height=360)
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 10_000
