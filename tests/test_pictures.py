"""Pictures that read right at first glance (issue 30): what a person sees on the pages, checked as they would.

- every token colour of a heatmap is a colour its legend has;
- a selector and the text it controls agree;
- the demo trace store's aggregates have numbers, and a trace's known error step is shown;
- no raw module name in the navigation, no table wider than its column (tests/test_browser_pictures.py).

No model is loaded here: the pages are opened on the shipped demo store and the sidebar's model name.
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[1]


def _page(path: str, monkeypatch, tmp_path, **state):
    from streamlit.testing.v1 import AppTest

    monkeypatch.chdir(ROOT)
    monkeypatch.setenv("GRADE_USER_DATA_DIR", str(tmp_path))  # the demo store's writable copy goes here
    at = AppTest.from_file(str(ROOT / path), default_timeout=120)
    for key, value in state.items():
        at.session_state[key] = value
    return at.run()


def _no_exception(at) -> None:
    assert not at.exception, [e.value for e in at.exception]


def _rgb(text: str) -> np.ndarray:
    text = text.strip()
    if text.startswith("#"):
        return np.array([int(text[i:i + 2], 16) for i in (1, 3, 5)], dtype=float)
    return np.array([float(v) for v in re.findall(r"[\d.]+", text)[:3]])


def _legend_stops(body: str) -> list[np.ndarray]:
    """The colours of a legend's gradient, in order, as the page draws it."""
    gradient = re.search(r"linear-gradient\(to right, (.*?)\);", body).group(1)
    return [_rgb(c) for c in re.findall(r"rgb\([^)]*\)|#[0-9a-fA-F]{6}", gradient)]


def _distance_to_scale(colour: np.ndarray, stops: list[np.ndarray]) -> float:
    """How far (RGB units) ``colour`` is from the legend's scale, a polyline through its stops."""
    best = np.inf
    for a, b in zip(stops, stops[1:]):
        d = b - a
        t = 0.0 if not d.any() else float(np.clip(np.dot(colour - a, d) / np.dot(d, d), 0, 1))
        best = min(best, float(np.linalg.norm(colour - (a + t * d))))
    return best


def _token_colours(body: str) -> list[tuple[str, np.ndarray]]:
    return [(html_text, _rgb(colour)) for colour, html_text in
            re.findall(r'<span title="[^"]*" style="background:([^;]+);[^"]*">(.*?)</span>', body)]


def _heatmaps(at) -> tuple[list[np.ndarray], list[list[tuple[str, np.ndarray]]]]:
    bodies = [h.proto.body for h in at.get("html")]
    legends = [b for b in bodies if "linear-gradient(to right" in b]
    heatmaps = [b for b in bodies if "<sup title=\"step" in b]
    assert legends and heatmaps, "no legend or no token heatmap on the page"
    return _legend_stops(legends[0]), [_token_colours(b) for b in heatmaps]


@pytest.mark.parametrize("colour_by", ["epistemic shock (heatmap)", "token surprisal (heatmap)"])
def test_every_token_colour_is_on_the_legends_scale(monkeypatch, tmp_path, colour_by):
    """The heatmap of an opened trace (the demo store's first): each token's colour is one the legend shows,
    the first token of every step included (it was painted a solid purple the legend does not have)."""
    at = _page("pages/traces.py", monkeypatch, tmp_path, tr_colour=colour_by)
    _no_exception(at)
    traces = [o.split(" · ")[0] for o in at.selectbox(key="tr_open").options]
    for trace in traces[:4]:
        at.session_state["tr_open"] = trace
        at.run()
        _no_exception(at)
        stops, heatmaps = _heatmaps(at)
        colours = heatmaps[0]
        assert len(colours) > 20
        off = [(text, tuple(c.astype(int))) for text, c in colours if _distance_to_scale(c, stops) > 3]
        assert not off, f"trace {trace}: token colours not on the legend's scale: {off[:5]}"


def test_a_step_start_is_marked_without_replacing_the_tokens_colour():
    from studio import tokens

    trace = tokens.TokenScores(["So", " 3", " +", " 4"], np.ones((1, 4)), [0, 0, 1, 1])
    body = tokens.token_html(trace, np.array([1.0, 0.0, 0.5, 0.2]))
    stops = _legend_stops(tokens.colorbar_html())
    colours = _token_colours(body)
    assert [t for t, _ in colours] == ["So", " 3", " +", " 4"]
    assert all(_distance_to_scale(c, stops) < 1 for _, c in colours)
    assert body.count("[1]") == 1 and body.count("[2]") == 1  # the steps are still marked
    assert body.count("text-decoration: underline") == 2  # and their first tokens underlined


# ------------------------------------------------------------------------------ selectors and their text


@pytest.fixture(scope="module")
def app():
    """The app on the small embedded model (loaded once for the module; nothing is analysed)."""
    from streamlit.testing.v1 import AppTest

    mp = pytest.MonkeyPatch()
    mp.chdir(ROOT)
    mp.delenv("GRADE_START_MODEL", raising=False)  # the default: smollm2-135m-instruct
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=300).run()
    _no_exception(at)
    yield at
    mp.undo()


def _shown(selectbox) -> str:
    """What a select box shows: its current option's label."""
    return selectbox.options[selectbox.index]


def test_homes_example_list_says_own_question_once_the_question_is_edited_and_restores_a_chosen_example(app):
    at = app
    example = at.selectbox(key="example")
    label = example.options[1]  # the first example (the first option is the empty choice)
    example.set_value(label).run()
    _no_exception(at)
    text = at.text_area(key="question").value
    assert text.strip() and _shown(at.selectbox(key="example")) == label
    at.text_area(key="question").input("Who wrote Pride and Prejudice?").run()
    _no_exception(at)
    assert _shown(at.selectbox(key="example")) == "(your own question)"  # not the example any more
    at.selectbox(key="example").set_value(label).run()  # the same entry again: its text comes back
    assert at.text_area(key="question").value == text and _shown(at.selectbox(key="example")) == label


def test_the_problem_list_follows_the_problem_box_and_restores_a_chosen_problem(app):
    at = app
    at.switch_page("pages/reasoning_trace.py").run()
    _no_exception(at)
    choice = at.selectbox(key="rt_choice")
    first = _shown(choice)
    assert first != "(type your own problem)"  # it opens on a problem
    problem = at.text_area(key="rt_question").value
    assert problem.strip() and problem.strip()[:90] == first  # the list names the problem the box holds
    at.text_area(key="rt_question").input("A farmer has 3 cows and buys 4 more. How many cows?").run()
    _no_exception(at)
    assert _shown(at.selectbox(key="rt_choice")) == "(type your own problem)"
    at.selectbox(key="rt_choice").set_value(first).run()
    _no_exception(at)
    assert at.text_area(key="rt_question").value == problem and _shown(at.selectbox(key="rt_choice")) == first


# ------------------------------------------------------------------------------------------ rough edges


def test_the_traces_pages_sentences_do_not_repeat_themselves(monkeypatch, tmp_path):
    """'... the peak step (step rank ratio) (step rank ratio, mean over layers ...)': two brackets in a row,
    the second repeating the first."""
    at = _page("pages/traces.py", monkeypatch, tmp_path)
    _no_exception(at)
    captions = [c.value for c in at.caption if "Measured top-1" in c.value]
    assert captions
    for text in captions:
        assert ") (" not in text, text


def test_the_load_estimate_says_how_many_seconds(monkeypatch, tmp_path):
    from studio import loading

    monkeypatch.setattr(loading, "cache_dir", lambda: tmp_path)
    (tmp_path / "models" / "smollm2-135m-instruct").mkdir(parents=True)
    (tmp_path / "models" / "smollm2-135m-instruct" / "config.json").write_text("{}")
    detail = loading.load_estimate("smollm2-135m-instruct").detail
    assert not re.search(r":\s*seconds", detail), detail  # "from disk: seconds" lacked its number


@pytest.mark.parametrize("left, shown", [(12.4, "about 12 s left"), (0.3, "finishing…"), (0.0, "finishing…")])
def test_a_running_analysis_never_says_0_s_left(monkeypatch, left, shown):
    from types import SimpleNamespace

    from studio import session, waiting

    status = SimpleNamespace(state="running", measured=True, estimate_s=left, elapsed_s=20.0, position=0, waiting=0)
    monkeypatch.setattr(session, "analysis_queue", lambda: SimpleNamespace(status=lambda ticket: status))
    line = waiting.status_line(None)
    assert shown in line and "0 s left" not in line.replace("about 12 s", ""), line


@pytest.mark.parametrize("estimate, shown", [(7.4, "about 7 s"), (12.4, "about 10 s"), (13.0, "about 15 s"),
                                             (61.0, "about 60 s")])
def test_a_waiting_analysis_estimate_moves_in_steps_of_5_s_past_10_s(monkeypatch, estimate, shown):
    """The waiting box is sent to the browser only when its line changes: a countdown by the second would be
    sent to every waiting page every second."""
    from types import SimpleNamespace

    from studio import session, waiting

    status = SimpleNamespace(state="waiting", measured=True, estimate_s=estimate, elapsed_s=3.0, position=3, waiting=5)
    monkeypatch.setattr(session, "analysis_queue", lambda: SimpleNamespace(status=lambda ticket: status))
    line = waiting.status_line(None)
    assert f"result in {shown}" in line and "position 3" in line, line


def test_a_traces_known_error_step_is_shown_where_it_is_marked(monkeypatch, tmp_path):
    """The annotation box of a demo trace starts on the error step its table row shows, not 'no error step'."""
    at = _page("pages/traces.py", monkeypatch, tmp_path)
    _no_exception(at)
    table = at.dataframe[0].value if "error step" in at.dataframe[0].value else \
        next(d.value for d in at.dataframe if "error step" in d.value)
    row = table.dropna(subset=["error step"]).iloc[0]
    at.session_state["tr_open"] = row["trace"]
    at.run()
    _no_exception(at)
    box = next(s for s in at.selectbox if s.label == "Error step")
    assert box.value == int(row["error step"]), (box.value, row["error step"])
    assert any(f"step {int(row['error step'])}" in c.value for c in at.caption)


@pytest.mark.slow
def test_the_step_rank_ratio_chart_says_what_it_cannot_show_with_its_measured_accuracy(app):
    """Analyses the reference solution with the small model (seconds to a minute on 2 cores)."""
    from studio import localization

    at = app
    at.switch_page("pages/reasoning_trace.py").run()
    at.button(key="rt_analyze").click().run()
    _no_exception(at)
    text = " ".join(c.value for c in at.caption)
    assert "What it cannot show:** which step is wrong" in text
    assert localization.accuracy_line("smollm2-135m-instruct", "peak step (step rank ratio)") in text
    # Qwen's line is read from the shipped benchmark results, with the chance rate beside each number
    qwen = localization.accuracy_line("qwen2.5-coder-1.5b-instruct", "peak step (step rank ratio)")
    assert "model's own arithmetic slips (chance" in qwen


# ------------------------------------------------------------------------------------ the demo store's aggregates


def _demo_ranking(monkeypatch, tmp_path):
    """The Traces page on the demo store: its GRADE_pos ranking row and the page's warnings."""
    at = _page("pages/traces.py", monkeypatch, tmp_path)
    _no_exception(at)
    shown = {"AUROC": "auroc", "95% interval: low": "lo", "95% interval: high": "hi", "traces": "n",
             "wrong traces": "wrong"}  # the page's headers (grade.common.display) -> the aggregate's keys
    ranking = next(d.value for d in at.dataframe if "AUROC" in d.value.columns).rename(columns=shown).set_index("score")
    return ranking.loc["GRADE_pos"], [w.value for w in at.warning]


def test_the_demo_stores_aggregates_say_why_an_auroc_is_missing_or_how_few_traces_it_rests_on(monkeypatch, tmp_path):
    from grade.verdict.measured import MIN_QUESTIONS

    row, warnings = _demo_ranking(monkeypatch, tmp_path)
    n, wrong = int(row["n"]), int(row["wrong"])
    if wrong in (0, n):
        assert np.isnan(row["auroc"])
        assert any(w.startswith("No AUROC:") and f"all {n} traces" in w for w in warnings), warnings
    else:
        assert 0.0 <= row["auroc"] <= 1.0 and row["lo"] <= row["auroc"] <= row["hi"]
        small = [w for w in warnings if w.startswith(f"Only n = {n} traces ({wrong} wrong, {n - wrong} correct)")]
        assert bool(small) == (n < MIN_QUESTIONS), warnings


def test_the_demo_store_holds_wrong_and_correct_traces_so_its_auroc_is_a_number(monkeypatch, tmp_path):
    row, _ = _demo_ranking(monkeypatch, tmp_path)
    assert 0 < int(row["wrong"]) < int(row["n"]) and 0.0 <= row["auroc"] <= 1.0


@pytest.mark.parametrize("wrong, n, starts", [(12, 12, "No AUROC: all 12 traces of known correctness are wrong"),
                                             (0, 5, "No AUROC: all 5 traces of known correctness are correct"),
                                             (0, 0, "No AUROC: no trace of known correctness"),
                                             (8, 16, "Only n = 16 traces (8 wrong, 8 correct): far too few"),
                                             (60, 400, None)])
def test_the_ranking_note_says_what_an_auroc_rests_on(wrong, n, starts):
    from studio.traces import ranking_note

    note = ranking_note([{"score": "GRADE_pos", "auroc": float("nan"), "n": n, "wrong": wrong}])
    assert (note is None) if starts is None else note.startswith(starts), note


def test_the_triage_tables_first_and_further_columns_hold_every_column_once(monkeypatch, tmp_path):
    from grade.traces import TraceStore
    from studio import traces as tr

    at = _page("pages/traces.py", monkeypatch, tmp_path)
    _no_exception(at)
    frame = TraceStore(at.session_state["tr_store"]).traces()
    table = tr.triage_table(frame)
    first = [c for c in tr.FIRST_COLUMNS if c in table.columns]
    more = tr.more_columns(table)
    assert sorted(first + more[1:]) == sorted(table.columns) and more[0] == "trace"
    assert len(first) <= 7 and len(more) <= 9  # what fits the page's column (tests/test_browser_pictures.py)
    assert set(tr.COLUMN_HELP) >= set(table.columns)  # every header has its help


def test_no_example_shows_a_typo_of_the_published_data():
    """TriviaQA writes 'grou0p' (its first row here): the data stays as published, the example list skips it."""
    from studio.resources import load_questions
    from studio.workflows import home_examples

    assert "grou0p" in load_questions("triviaqa", 1)[0]["question"]  # the premise
    for model in ("smollm2-135m-instruct", "qwen2.5-coder-1.5b-instruct", "gemma-3-270m", None):
        examples = home_examples(model)
        assert sum(label.startswith("TriviaQA: ") for label in examples) == 3
        for question, _, _ in examples.values():
            assert not re.search(r"[a-z]\d+[a-z]", question), question
