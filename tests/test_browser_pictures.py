"""In headless Chromium, what a person sees first (issue 30): the sidebar never lists raw module names, not
even in the seconds after a server start, and no table is wider than its column nor cuts the text of a cell or
header (Traces, Probes, Projections, Benchmarks, with their expanders open, and Home's side-by-side table).

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


def _cut_cells(driver) -> list[str]:
    """Grid cells (st.dataframe, st.data_editor) whose text the grid cuts: each cell's text and each header measured
    with the grid's own font against the width the grid draws that column in (its wrapped cells against their row
    height). The grid draws on a canvas, so its columns and cells are read from the grid component's own props."""
    return driver.execute_script("""
        const fiberOf = el => el[Object.keys(el).find(k => k.startsWith('__reactFiber'))];
        const ctx = document.createElement('canvas').getContext('2d');
        const width = (text, font) => { ctx.font = font; return ctx.measureText(text).width; };
        const lines = (text, font, room) => {  // wrapped at spaces, as the grid wraps
          let n = 0;
          for (const para of String(text).split('\\n')) {
            let line = ''; n++;
            for (const word of para.split(' ')) {
              const next = line ? line + ' ' + word : word;
              if (line && width(next, font) > room) { n++; line = word; } else line = next;
            }
          }
          return n;
        };
        const out = [];
        for (const el of document.querySelectorAll('[data-testid="stDataFrame"]')) {
          if (el.offsetParent === null) continue;  // in a closed expander or tab: not seen
          const canvas = el.querySelector('canvas');
          if (!canvas || !canvas.getBoundingClientRect().width) continue;  // not drawn yet
          let grid = null, editor = null;
          for (let f = canvas && fiberOf(canvas); f && !editor; f = f.return) {
            const r = f.ref && f.ref.current;
            if (f.memoizedProps && f.memoizedProps.getCellContent && r && typeof r.getBounds === 'function') {
              if (!grid) grid = f; else if (typeof r.remeasureColumns === 'function') editor = f;
            }
          }
          if (!grid || !editor) { out.push(`a grid whose columns could not be read (${el.innerText.slice(0, 40)})`); continue; }
          const theme = grid.memoizedProps.theme, props = editor.memoizedProps, api = editor.ref.current;
          const pad = theme.cellHorizontalPadding, body = `${theme.baseFontStyle} ${theme.fontFamily}`;
          const head = `${theme.headerFontStyle} ${theme.fontFamily}`;
          ctx.font = body;
          const size = parseFloat(ctx.font);
          const rowHeight = typeof props.rowHeight === 'number' ? props.rowHeight : 35;
          const cut = [];
          props.columns.forEach((column, c) => {
            const box = api.getBounds(c, 0);
            if (!box) return;
            const room = box.width - 2 * pad;
            const title = column.title || '';
            if (width(title, head) > room - (column.icon ? theme.headerIconSize + pad : 0) + 0.5)
              cut.push(`header "${title}": ${Math.round(width(title, head))} px of text in ${Math.round(room)} px`);
            for (let r = 0; r < Math.min(props.rows, 2000); r++) {
              const cell = props.getCellContent([c, r]);
              const text = cell && typeof cell.displayData === 'string' ? cell.displayData : '';
              if (!text) continue;
              const wide = width(text, body);
              const cutOff = cell.allowWrapping
                ? size * (1 + theme.lineHeight * (lines(text, body, room) - 1)) + theme.cellVerticalPadding > rowHeight
                  || text.split(/\\s+/).some(w => width(w, body) > room + 0.5)
                : wide > room + 0.5 || text.includes('\\n');  // one line drawn of several
              if (cutOff) {
                cut.push(`"${title}" row ${r + 1}: "${text.slice(0, 40)}" ${Math.round(wide)} px of text in ` +
                         `${Math.round(room)} px` + (cell.allowWrapping ? ` and ${rowHeight} px rows` : ''));
                break;  // one cut cell names its column
              }
            }
          });
          if (cut.length) out.push(`${props.columns.map(c => c.title).join(' | ').slice(0, 50)}: ${cut.join('; ')}`);
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


def _open_every_expander(driver) -> int:
    """Open the page's closed expanders (their tables are seen once opened); returns how many were opened."""
    opened = driver.execute_script("""
        let n = 0;
        for (const d of document.querySelectorAll('[data-testid="stExpander"] details:not([open]) > summary')) {
          d.click(); n++;
        }
        return n;""")
    time.sleep(1.0)
    return opened


def _tables_seen(driver) -> int:
    return driver.execute_script(
        "return [...document.querySelectorAll('[data-testid=\"stDataFrame\"], [data-testid=\"stTable\"]')]"
        ".filter(el => el.offsetParent !== null).length;")


def _assert_tables_fit(driver, where: str) -> None:
    """No table scrolls sideways and no grid cell or header is cut."""
    wide, cut = _wider_than_their_column(driver), _cut_cells(driver)
    picture = _save(driver, f"failed-wide-table-{where}") if wide or cut else None
    assert not wide, f"{where}: tables wider than their column: {wide} (the page: {picture})"
    assert not cut, f"{where}: text cut in grid cells: {cut} (the page: {picture})"


@pytest.mark.parametrize("title", ["Traces", "Probes", "Projections", "Benchmarks"])
def test_no_table_is_wider_than_its_column(app_url, new_browser, title):
    driver = new_browser()
    driver.get(app_url)
    _settled(driver, what="the model to load")
    _go(driver, title)
    _settled(driver)
    _no_exception(driver)
    # waited for, not read once: in one fresh clone's run (2026-11-29) Projections' table was not drawn yet when
    # the page first looked idle after the page switch
    _wait(driver, _tables_seen, 60, f"a table on {title}")
    _assert_tables_fit(driver, title)
    assert _open_every_expander(driver) >= 1
    _settled(driver)
    if title == "Traces":  # the triage table's other columns sit in an expander, and are checked open
        more = [t for e in _css(driver, "[data-testid='stExpander']") if "More columns:" in e.text
                for t in e.find_elements("css selector", "[data-testid='stDataFrame']")]
        assert more and more[0].is_displayed(), "the triage table's further columns are not shown"
    _assert_tables_fit(driver, f"{title}, expanders open")


def test_homes_side_by_side_table_fits(app_url, new_browser):
    """Pin one question, analyse another: the side-by-side table (a row per quantity, every detector included)
    fits its column."""
    from selenium.webdriver.common.keys import Keys

    from test_browser import QUESTION, _click_analyze, _type_question, _verdict

    driver = new_browser()
    _type_question(driver, app_url, QUESTION)
    _click_analyze(driver)
    _verdict(driver)
    _settled(driver)
    _wait(driver, lambda d: next(iter(_css(d, ".st-key-pin button")), None), 60, "the Pin button").click()
    _settled(driver)
    box = _wait(driver, lambda d: next(iter(_css(d, ".st-key-question textarea")), None), 60, "the question box")
    box.send_keys(Keys.CONTROL, "a")
    box.send_keys("Who won the 1911 Tour de Suisse?")
    box.send_keys(Keys.TAB)
    _settled(driver)
    _click_analyze(driver)
    _wait(driver, lambda d: "Side by side" in d.find_element("tag name", "body").text, SLOW, "the side-by-side table")
    _settled(driver)
    _no_exception(driver)
    table = _wait(driver, lambda d: next(iter(_css(d, ".st-key-comparison [data-testid='stDataFrame'], "
                                                   ".st-key-comparison [data-testid='stTable']")), None), 60,
                  "the comparison table")
    assert table.is_displayed()
    _assert_tables_fit(driver, "Home")
    _open_every_expander(driver)  # the per-layer features, among others
    _assert_tables_fit(driver, "Home, expanders open")
