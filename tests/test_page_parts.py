"""The pieces the pages are built from, without a browser: display names, the Benchmarks sentences built from
their chart's rows, the figures' presentation mode and readable transfer heatmap, the rank-ratio overview drawn
relative to the reference, the verifier's one outcome rule, the Traces page's mark line and sort order."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

ROOT = Path(__file__).resolve().parents[1]
QWEN = "qwen2.5-coder-1.5b-instruct"


def test_display_names_for_datasets_columns_and_paths():
    from grade.common.display import column_title, dataset_title, words

    assert [dataset_title(d) for d in ("triviaqa", "nq_open", "hotpotqa_closed", "gsm8k")] == \
        ["TriviaQA", "NQ-Open", "HotpotQA (closed book)", "GSM8K"]
    assert dataset_title("pre/gsm8k.parquet") == "GSM8K"
    assert column_title("auroc") == "AUROC" and "95% interval" in column_title("lo")
    assert column_title("n_multi_step") == "traces of several steps"
    assert "_" not in words("double_count_or_omission")


def test_the_selective_sentence_names_only_methods_its_chart_draws():
    from grade.studies import BenchmarkResult
    from grade.studies.report import risk_coverage_figure
    from studio.benchmark_text import drawn_methods, selective_sentence

    result = BenchmarkResult.load(ROOT / "results" / QWEN)
    drawn = drawn_methods(risk_coverage_figure(result))
    sentence = selective_sentence(result.selective, drawn)
    named = {r["method"] for r in result.selective if f" {r['method']} " in sentence or f" {r['method']}," in sentence}
    assert named and named <= set(drawn), named - set(drawn)
    assert "(selected)" not in sentence and "(shipped)" not in sentence  # not curves of the chart
    assert "Accuracy of the answered questions" in sentence  # the metric is named
    assert "triviaqa" not in sentence and "TriviaQA" in sentence


def test_homes_entropy_detector_has_a_row_per_dataset():
    from studio.benchmark_text import ENTROPY_AFTER_PROMPT, entropy_rows

    variants = pd.read_csv(ROOT / "results" / QWEN / "grade_variants.csv").to_dict("records")
    rows = entropy_rows(variants)
    main = pd.read_csv(ROOT / "results" / QWEN / "main_table.csv")
    assert {r["dataset"] for r in rows} == set(main["dataset"])
    assert all(r["method"] == ENTROPY_AFTER_PROMPT and 0 < r["auroc"] < 1 for r in rows)


def test_the_transfer_notes_fold_into_one_line():
    from grade.studies import BenchmarkResult
    from studio.benchmark_text import missing_transfer_line, split_notes

    result = BenchmarkResult.load(ROOT / "results" / QWEN)
    missing, other = split_notes(result.notes)
    assert len(missing) >= 30 and not any(n.startswith("Against ") for n in other)
    assert missing_transfer_line(missing).startswith(f"{len(missing)} transfer pairs")


def test_presentation_mode_enlarges_every_font_and_the_figure():
    from studio import figures

    fig = figures.step_grade_figure([("a", np.array([0.5, 0.7, 0.6]))])
    shown = figures.for_display(fig, presentation=True)
    assert shown.layout.font.size >= 13 * figures.PRESENTATION_FONT_SCALE - 0.01
    assert shown.layout.height >= figures.PRESENTATION_HEIGHT
    plain = figures.for_display(fig)
    assert plain.layout.height < figures.PRESENTATION_HEIGHT and plain.layout.font.size == 13


def test_the_transfer_heatmap_names_datasets_once_with_large_numbers():
    from grade.studies import BenchmarkResult
    from grade.studies.report import figures as report_figures
    from studio import figures

    fig = report_figures(BenchmarkResult.load(ROOT / "results" / f"{QWEN}-capped"))["transfer_heatmap"]
    fig = figures.readable_transfer(figures.titled(fig))
    heatmaps = [t for t in fig.data if t.type == "heatmap"]
    assert "TriviaQA" in heatmaps[0].y and "triviaqa" not in heatmaps[0].y
    assert all(t.textfont.size >= 14 for t in heatmaps)
    assert fig.layout.yaxis2.showticklabels is False  # the names stand left of the first panel only
    assert fig.layout.xaxis.domain[1] < fig.layout.xaxis2.domain[0]  # two panels a row, apart
    assert len(heatmaps) <= 2 or fig.layout.yaxis3.domain[1] < fig.layout.yaxis.domain[0]  # the next below


def test_the_rank_ratio_overview_separates_questions_that_are_flat_in_raw_units():
    """Two questions a few hundredths apart in the middle layers, where the reference is as narrow: relative to the
    reference they lie apart by several of its spreads."""
    from studio import figures

    rng = np.random.default_rng(0)
    layers = 28
    base = np.r_[np.linspace(2.0, 1.0, 6), np.full(layers - 6, 1.0)]
    ratios = base + rng.normal(0, 0.01, size=(200, layers))
    labels = np.arange(200) % 2
    ratios[labels == 1, 6:] += 0.01
    bands = figures.reference_bands(ratios, labels)
    one, two = base + 0.02, base - 0.02
    fig = figures.rank_ratio_trend(one, bands, extra=[("two", two)])
    y = {t.name: np.asarray(t.y) for t in fig.data}
    assert np.ptp(one[6:]) < 0.01 and np.mean(y["this question"][6:] - y["two"][6:]) > 2  # > 2 reference spreads
    np.testing.assert_allclose(fig.data[-1].customdata, one)  # the raw ratio stays in the hover
    raw = figures.rank_ratio_trend(one, bands, relative=False)
    np.testing.assert_allclose(raw.data[-1].y, one)


@pytest.mark.parametrize("correct, cut, known", [(True, False, True), (False, None, False), (None, False, None),
                                                 (False, True, None), (float("nan"), False, None)])
def test_one_outcome_rule_for_the_verifier_on_both_pages(correct, cut, known):
    from studio.localization import known_outcome

    assert known_outcome(correct, cut) == known


def test_the_verifier_uses_the_known_right_threshold_when_the_answer_is_right():
    """A verdict re-decided on a page applies the threshold of the trace's level and of what is known of its final
    answer, as grade.steps.verifier.verify_trace does."""
    from grade.steps.verifier import shipped_verifier
    from studio.localization import verifier_verdict

    verifier = shipped_verifier("smollm2-135m-instruct")
    for task in ("gsm8k", "math"):
        unknown, right = verifier.thresholds(task)
        if right <= unknown:
            pytest.skip("the shipped thresholds do not differ")
        middle = (unknown + right) / 2  # over the outcome-unknown threshold, under the known-right one
        p = [0.02, middle - 0.04, 0.02] if verifier.localizer else [0.05, middle, 0.1]
        assert verifier_verdict("smollm2-135m-instruct", p, None, task) == (2, pytest.approx(unknown))
        assert verifier_verdict("smollm2-135m-instruct", p, True, task) == (None, pytest.approx(right))
        step, threshold = verifier_verdict("smollm2-135m-instruct", p, False, task)
        assert step == 2 and threshold == 0.0


def test_the_annotation_line_shows_the_saved_mark_not_the_given_one():
    from studio.traces import mark_line

    given = {"error_step": 5, "kind": "misread"}
    assert mark_line({}, given).startswith("Known error step, given with the trace: **step 5** (misread question)")
    saved = {"error_step": 6, "kind": "arithmetic slip", "updated": "2026-11-28T20:00:00"}
    line = mark_line(saved, given)
    assert line.startswith("Your mark, saved 2026-11-28 20:00:00: **step 6**") and "step 5" not in line
    assert mark_line({}, {"error_step": None, "kind": None}) == ""


def test_the_triage_table_sorts_by_the_verifiers_probability():
    from studio import traces as tr

    frame = pd.DataFrame({
        "trace_id": ["a", "b", "c"], "correct": [True, False, None], "grade_pos": [0.3, 0.2, 0.1],
        "peak_step_ratio": [1.0, 1.0, 1.0], "n_steps": [2, 2, 2], "n_tokens": [9, 9, 9], "loss_value": [1.0] * 3,
        "doc_id": [1, 2, 3], "peak_step": [1, 1, 1], "peak_token": ["x"] * 3, "error_step": [None] * 3,
        "error_kind": [None] * 3, "question": ["q"] * 3, "verifier_reader": ["smollm2-135m-instruct"] * 3,
        "verifier_suspect_step": [None, 2, 1], "step_verifier_probability": [[0.1, 0.2], [0.3, 0.9], [0.5, 0.4]]})
    assert tr.sort_options(frame)[0].startswith("verifier")
    table = tr.triage_table(frame, sort=tr.sort_options(frame)[0])
    assert list(table["trace"]) == ["b", "c", "a"] and math.isclose(table["verifier P"].iloc[0], 0.9)
    assert not tr.sort_options(frame.drop(columns="step_verifier_probability"))[0].startswith("verifier")


def _traces_page(monkeypatch, tmp_path):
    from streamlit.testing.v1 import AppTest

    monkeypatch.chdir(ROOT)
    monkeypatch.setenv("GRADE_USER_DATA_DIR", str(tmp_path))  # the demo store's writable copy goes here
    at = AppTest.from_file(str(ROOT / "pages" / "traces.py"), default_timeout=120).run()
    assert not at.exception, [e.value for e in at.exception]
    return at


def _ticked(at) -> str | None:
    rows = at.session_state["_rows_tr_table"]
    picked = at.session_state["tr_table"]["selection"]["rows"]
    return rows[picked[0]] if picked else None


def test_the_traces_tables_tick_is_the_open_trace(monkeypatch, tmp_path):
    """The picker opens another trace: the tick moves to it; a row ticked in the table opens its trace."""
    at = _traces_page(monkeypatch, tmp_path)
    assert _ticked(at) == at.selectbox(key="tr_open").value
    options = at.selectbox(key="tr_open").options
    third = options[2].split(" · ")[0]
    at.selectbox(key="tr_open").set_value(third).run()
    assert _ticked(at) == third and at.selectbox(key="tr_open").value == third
    rows = at.session_state["_rows_tr_table"]
    at.session_state["tr_table"] = {"selection": {"rows": [rows.index(third) - 1 if rows.index(third) else 1],
                                                  "columns": []}}  # as a click on another row leaves it
    ticked = rows[rows.index(third) - 1 if rows.index(third) else 1]
    at.run()
    assert at.selectbox(key="tr_open").value == ticked and _ticked(at) == ticked
    assert f"Trace {ticked}" in " ".join(m.value for m in at.markdown)
