"""In headless Chromium, what a person sees first (issue 30): the sidebar never lists raw module names, not
even in the seconds after a server start, and no table is wider than its column.

Uses the app server, browser and helpers of ``tests/test_browser.py`` (a fresh server for this module).
"""

from __future__ import annotations

import time

import pytest

from test_browser import SLOW, _css, _go, _no_exception, _save, _settled, _wait, app_url, new_browser  # noqa: F401

pytestmark = [pytest.mark.slow, pytest.mark.browser]

TITLES = ["Home", "Spectra", "Reasoning trace", "Traces", "Projections", "Probes", "Benchmarks"]
RAW = {"app", "spectra", "reasoning_trace", "reasoning trace", "traces", "projections", "probes", "benchmarks"}


def _sidebar_links(driver) -> list[str]:
    """Every link text in the sidebar (the page list, however it is drawn)."""
    texts = driver.execute_script(  # read in one go: the sidebar is redrawn while the app starts
        "return [...document.querySelectorAll('[data-testid=\"stSidebar\"] a')].map(a => a.innerText.trim());")
    return [t.splitlines()[-1].strip() for t in texts if t]


def _wider_than_their_column(driver) -> list[str]:
    """Tables (st.dataframe / st.table) whose content is wider than the box they sit in: they scroll sideways."""
    return driver.execute_script("""
        const out = [];
        for (const el of document.querySelectorAll('[data-testid="stDataFrame"], [data-testid="stTable"]')) {
          if (el.offsetParent === null) continue;  // in a closed expander or tab: not seen
          const box = el.getBoundingClientRect();
          const column = el.closest('[data-testid="stVerticalBlock"]').getBoundingClientRect();
          const scroller = el.querySelector('.dvn-scroller') || el.querySelector('table') || el;
          if (box.width > column.width + 1 || scroller.scrollWidth > scroller.clientWidth + 12)  // (a scroll bar's width is not cut-off content)
            out.push(`${Math.round(scroller.scrollWidth)} px of content in ${Math.round(scroller.clientWidth)} px ` +
                     `(${el.innerText.slice(0, 60).replace(/\\n/g, ' ')})`);
        }
        return out;""")


def test_the_sidebar_never_lists_raw_module_names_and_tables_fit(app_url, new_browser):
    driver = new_browser()
    driver.get(app_url)
    seen, start = set(), time.time()
    while time.time() - start < SLOW:  # the first seconds after a (fresh) server start, read every 0.1 s
        seen.update(_sidebar_links(driver))
        if any(h.text.strip() == "GRADE Studio" for h in _css(driver, "h1")) and set(TITLES) <= seen:
            break
        time.sleep(0.1)
    raw = {s for s in seen if s.lower() in RAW and s not in TITLES}
    assert not raw, f"the sidebar listed raw module names: {sorted(raw)} (all links seen: {sorted(seen)})"
    assert set(TITLES) <= seen, seen


@pytest.mark.xfail(strict=True, reason="issue 30, left open: the Traces triage table (14 columns) and the Benchmarks "
                   "main table still scroll sideways; remove this mark when they fit")
@pytest.mark.parametrize("title", ["Traces", "Benchmarks"])
def test_no_table_is_wider_than_its_column(app_url, new_browser, title):
    driver = new_browser()
    driver.get(app_url)
    _settled(driver, what="the model to load")
    _go(driver, title)
    _settled(driver)
    _no_exception(driver)
    wide = _wider_than_their_column(driver)
    if wide:
        _save(driver, f"wide-table-{title}")
    assert not wide, f"{title}: tables wider than their column: {wide}"
