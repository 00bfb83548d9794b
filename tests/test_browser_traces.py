"""End to end in headless Chromium: the Traces page opens a trace store, sorts it, opens a trace and saves an
annotation (the store is the one ``python -m grade traces`` made of the lm-eval GSM8K fixture, copied).

Uses the app server, browser and helpers of ``tests/test_browser.py``; saves ``traces.png`` next to its
screenshots (``GRADE_UPDATE_SCREENSHOTS=1``: into ``assets/screenshots/``).
"""

from __future__ import annotations

import json
import re
import shutil

import pytest

from test_browser import _css, _go, _no_exception, _save, _settled, _wait, app_url, new_browser  # noqa: F401

pytestmark = [pytest.mark.slow, pytest.mark.browser]


def _select(driver, key: str):
    """The button that opens a select box's list (Streamlit >= 1.67: a react-aria combo box)."""
    return _wait(driver, lambda d: next(iter(_css(d, f'.st-key-{key} button[aria-haspopup="listbox"]')), None), 120,
                 f"the {key} select box")


def _options(driver, key: str) -> list[str]:
    """The option texts of a select box, in order (opens it, reads them, closes it)."""
    from selenium.webdriver.common.action_chains import ActionChains
    from selenium.webdriver.common.keys import Keys

    _select(driver, key).click()
    items = _wait(driver, lambda d: [o.text.strip() for o in _css(d, '[role="option"]')] or None, 30, f"{key} options")
    ActionChains(driver).send_keys(Keys.ESCAPE).perform()
    return items


def _choose(driver, key: str, starts_with: str) -> None:
    _select(driver, key).click()
    _wait(driver, lambda d: next((o for o in _css(d, '[role="option"]') if o.text.strip().startswith(starts_with)), None),
          30, f"option {starts_with!r} of {key}").click()
    _settled(driver)


def _grades(options: list[str]) -> list[float]:
    return [float(re.search(r"GRADE_pos ([0-9.]+)", o).group(1)) for o in options]


def test_traces_page_opens_sorts_opens_a_trace_and_saves_an_annotation(app_url, new_browser, gsm8k_trace_run, tmp_path):
    from selenium.webdriver.common.keys import Keys

    from grade.traces import TraceStore

    store = TraceStore(shutil.copytree(gsm8k_trace_run[0], tmp_path / "store"))
    frame = store.traces().set_index("trace_id")
    driver = new_browser()
    driver.get(app_url)
    _wait(driver, lambda d: _css(d, ".st-key-question textarea"), 600, "the app")
    _settled(driver, what="the model to load")
    _go(driver, "Traces")
    _settled(driver)
    box = _wait(driver, lambda d: next(iter(_css(d, ".st-key-tr_store_path input")), None), 60, "the store path box")
    box.send_keys(str(store.path))
    box.send_keys(Keys.TAB)
    _settled(driver)
    _wait(driver, lambda d: next(iter(_css(d, ".st-key-tr_open_store button")), None), 30, "Open store").click()
    _wait(driver, lambda d: _css(d, ".st-key-tr_table"), 120, "the trace table")
    _settled(driver)
    _no_exception(driver)
    assert "6 traces" in driver.find_element("tag name", "body").text

    # The verifier's highest step probability sorts first where it read the traces; by GRADE_pos, highest first,
    # the toggle turns it around. The trace picker follows the table.
    from studio.traces import sort_options

    assert sort_options(frame.reset_index())[0].startswith("verifier")
    _choose(driver, "tr_sort", "GRADE_pos")
    options = _options(driver, "tr_open")
    assert len(options) == 6 and _grades(options) == sorted(_grades(options), reverse=True), options
    toggle = _wait(driver, lambda d: next(iter(_css(d, ".st-key-tr_desc label")), None), 30, "the Descending toggle")
    # clear of the app's toolbar, which covers the top of the window (the closed list can leave the page scrolled)
    driver.execute_script("arguments[0].scrollIntoView({block: 'center'})", toggle)
    toggle.click()
    _settled(driver)
    options = _options(driver, "tr_open")
    assert _grades(options) == sorted(_grades(options)), options
    assert _grades(options)[0] == pytest.approx(frame["grade_pos"].min(), abs=1e-4)

    wrong = frame[frame["correct"] == False]  # noqa: E712 (nullable boolean)
    chosen = wrong["grade_pos"].idxmax()
    _choose(driver, "tr_open", f"{chosen} ·")
    _wait(driver, lambda d: any(f"Trace {chosen}" in t.text for t in _css(d, ".st-key-tr_trace")), 120,
          f"trace {chosen} opened")
    _wait(driver, lambda d: len(_css(d, ".js-plotly-plot")) >= 2, 120, "the step charts")
    _settled(driver)
    _no_exception(driver)
    # the tokens open coloured by the verifier where it read the trace; GRADE's shock is the next choice
    shock = next((label for label in _css(driver, ".st-key-tr_colour label") if label.text.startswith("epistemic shock")),
                 None)
    if shock is not None:
        shock.click()
        _settled(driver)
    spans = _wait(driver, lambda d: _css(d, '.st-key-tr_trace span[title^="shock"]'), 60, "the shock colouring")
    assert len(spans) == frame.loc[chosen, "n_tokens"], len(spans)

    suffix = chosen.replace(":", "_")
    _choose(driver, f"tr_error_step_{suffix}", "step 2:")
    _choose(driver, f"tr_error_kind_{suffix}", "calculation slip")  # the kinds' labels (grade.steps.kinds)
    save = _wait(driver, lambda d: next((b for b in _css(d, "button") if b.text.strip() == "Save annotation"), None),
                 30, "Save annotation")
    save.click()
    message = _wait(driver, lambda d: next((a.text for a in _css(d, '[data-testid="stAlert"]')
                                            if a.text.startswith("Your mark, saved") and "step 2" in a.text), None),
                    120, "the saved mark")
    assert "calculation slip" in message and "Known error step" not in driver.find_element("tag name", "body").text
    _settled(driver)
    _no_exception(driver)
    saved = json.loads(store.annotations_path.read_text())["annotations"][chosen]
    assert (saved["error_step"], saved["kind"]) == (2, "calculation")
    _save(driver, "traces")
