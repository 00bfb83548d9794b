"""In headless Chromium, the pages agree with themselves (issue 42), one test per class of defect:

* change an input and nothing shows the old one (Reasoning trace: another problem; Traces: the ticked row is the
  open trace);
* each sentence's named method is in its chart (Benchmarks, selective answering);
* no tab renders empty (Benchmarks);
* no raw identifier in visible text (Benchmarks, Traces);
* no cell cut: no table wider than its column and no grid cell or header cut, every Benchmarks tab opened and
  Reasoning trace's expanders (the checks of ``tests/test_browser_pictures.py``);
* GSM8K's reference solution with its gold answer gets "no step stands out" on Reasoning trace (the verifier told
  that the final answer is right).

Uses the app server (SmolLM2, the suite's default), browser and helpers of ``tests/test_browser.py``.
"""

from __future__ import annotations

import re

import pytest

from test_browser import SLOW, _css, _go, _no_exception, _save, _settled, _wait, app_url, new_browser  # noqa: F401
from test_browser_pictures import _assert_tables_fit, _open_every_expander
from test_browser_traces import _choose, _options

pytestmark = [pytest.mark.slow, pytest.mark.browser]

QWEN = "qwen2.5-coder-1.5b-instruct"
#: Identifiers a person should never read: dataset keys, result columns, feature files.
RAW = re.compile(r"\b(triviaqa|nq_open|hotpotqa_closed|hotpotqa|auroc_lo|auroc_hi|n_multi_step|acc_at_coverage)\b"
                 r"|\b\w+/\w+\.parquet\b")


def _main_text(driver) -> str:
    return driver.execute_script("const m = document.querySelector('[data-testid=\"stMain\"]'); return m ? m.innerText : '';")


def _visible_raw(driver) -> list[str]:
    """Raw identifiers in the main pane's visible text, code spans (commands to type) left out."""
    text = driver.execute_script("""
        const m = document.querySelector('[data-testid="stMain"]');
        if (!m) return '';
        const copy = m.cloneNode(true);
        copy.querySelectorAll('code, pre').forEach(c => c.remove());
        return copy.innerText;""")
    return sorted({m.group(0) for m in RAW.finditer(text)})


def _tab_buttons(driver, labels: list[str]):
    return [b for b in _css(driver, '[data-baseweb="tab"], [role="tab"]') if b.text.strip() in labels]


def _active_panel(driver):
    panels = [p for p in _css(driver, '[role="tabpanel"]') if p.is_displayed()]
    return panels[-1] if panels else None


def _open_benchmarks_on_qwen(driver, app_url) -> None:
    driver.get(app_url)
    _settled(driver, what="the model to load")
    _go(driver, "Benchmarks")
    _settled(driver)
    if _css(driver, ".st-key-benchmark_model") and QWEN not in _css(driver, ".st-key-benchmark_model")[0].text:
        _choose(driver, "benchmark_model", QWEN)
    _settled(driver)
    _no_exception(driver)


METHODS = ("GRADE_pre", "GRADE_pos", "P-Entropy", "Judge", "IC", "Align-P", "SAPLMA", "CoE-R", "CoE-C",
           "Self-consistency", "EigenScore", "Length_pre", "Length_pos")
SECTIONS = ["AUROC", "Selective answering", "Transfer", "Robustness", "Ablations", "Confidently wrong", "Conditions"]


def test_benchmarks_no_tab_empty_no_raw_name_no_table_wider_than_its_column(app_url, new_browser):
    driver = new_browser()
    _open_benchmarks_on_qwen(driver, app_url)
    assert "Protocol: cross-fitted" in _main_text(driver)
    assert _main_text(driver).count("held-out test split") == 0
    raw = _visible_raw(driver)
    assert not raw, f"raw identifiers on Benchmarks: {raw}"
    for label in SECTIONS:
        button = next(iter(_tab_buttons(driver, [label])), None)
        assert button is not None, f"no tab {label}"
        button.click()
        _settled(driver)
        panel = _active_panel(driver)
        assert panel is not None, label
        content = panel.text.strip()
        shown = panel.find_elements("css selector", ".js-plotly-plot, [data-testid='stDataFrame'], [data-testid='stAlert']")
        assert len(content) > 80 and shown, f"tab {label} renders (almost) nothing: {content[:200]!r}"
        _assert_tables_fit(driver, f"Benchmarks, {label}")
        raw = _visible_raw(driver)
        assert not raw, f"raw identifiers in the {label} tab: {raw}"
    _no_exception(driver)


def test_benchmarks_selective_sentence_names_only_methods_its_chart_draws(app_url, new_browser):
    driver = new_browser()
    _open_benchmarks_on_qwen(driver, app_url)
    next(iter(_tab_buttons(driver, ["Selective answering"]))).click()
    _settled(driver)
    panel = _active_panel(driver)
    _wait(driver, lambda d: panel.find_elements("css selector", ".js-plotly-plot .legendtext"), 60, "the chart's legend")
    legend = {t.text.strip() for t in panel.find_elements("css selector", ".js-plotly-plot .legendtext")}
    sentence = next(p.text for p in panel.find_elements("css selector", "[data-testid='stMarkdownContainer']")
                    if p.text.startswith("Accuracy of the answered questions"))
    named = {m for m in METHODS if re.search(rf"(?<![\w-]){re.escape(m)}(?![\w-])", sentence)}
    assert named, sentence
    assert named <= legend, named - legend
    assert "(selected)" not in sentence and "(shipped)" not in sentence


def test_reasoning_trace_reference_solution_with_gold_then_another_problem(app_url, new_browser):
    """The page opens on a GSM8K problem with its reference solution as trace B and its gold answer: the verifier,
    told that the final answer is right, says no step stands out. Then another problem: no panel shows the old
    problem's verdict or analysis."""
    driver = new_browser()
    driver.get(app_url)
    _settled(driver, what="the model to load")
    _go(driver, "Reasoning trace")
    _settled(driver)
    gold = _css(driver, ".st-key-rt_gold input")[0].get_attribute("value")
    reference = _css(driver, ".st-key-rt_text_B textarea")[0].get_attribute("value")
    assert gold.strip() and reference.strip()
    _wait(driver, lambda d: next(iter(_css(d, ".st-key-rt_analyze button")), None), 60, "Analyze traces").click()
    verdict = _wait(driver, lambda d: next((v.text for v in _css(d, ".st-key-rt_verdict_B")), None), SLOW,
                    "the verifier's verdict on trace B")
    assert "No step stands out" in verdict, verdict
    assert "matches the gold answer" in verdict and "correctness given" in verdict, verdict
    _wait(driver, lambda d: _css(d, ".st-key-trace_B"), SLOW, "trace B's analysis")
    _settled(driver)
    _no_exception(driver)
    _open_every_expander(driver)  # the verifier's per-step table and the step editor: every step's text whole
    _assert_tables_fit(driver, "Reasoning trace")
    first_problem = _css(driver, ".st-key-rt_question textarea")[0].get_attribute("value")
    options = _options(driver, "rt_choice")
    other = next(o for o in options[2:] if o and not first_problem.startswith(o[:40]))
    _choose(driver, "rt_choice", other[:40])
    _settled(driver)
    _no_exception(driver)
    assert not _css(driver, ".st-key-rt_verdict_B") and not _css(driver, ".st-key-trace_B"), \
        "a verdict or analysis of the previous problem is still shown"
    assert first_problem[:40] not in _main_text(driver).replace(
        _css(driver, ".st-key-rt_question textarea")[0].get_attribute("value"), "")


def test_traces_names_no_raw_identifier_and_opens_the_picked_trace(app_url, new_browser):
    """The demo store: no raw identifier in the visible text; the picker opens another trace (its tick in the table
    is checked by tests/test_page_parts.py, the grid being drawn on a canvas)."""
    driver = new_browser()
    driver.get(app_url)
    _settled(driver, what="the model to load")
    _go(driver, "Traces")
    _settled(driver)
    _no_exception(driver)
    raw = _visible_raw(driver)
    assert not raw, f"raw identifiers on Traces: {raw}"
    options = _options(driver, "tr_open")
    assert len(options) >= 3
    target = options[2].split(" · ")[0]
    _choose(driver, "tr_open", target)
    _settled(driver)
    _no_exception(driver)
    assert f"Trace {target}" in _main_text(driver)
    _assert_tables_fit(driver, "Traces")
