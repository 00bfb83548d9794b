"""The Streamlit app under ``streamlit.testing.v1.AppTest``, with the embedded model and the shipped probe.

Each test drives the real app script (app.py and its pages): it types, clicks, and checks what the
page shows against the engine's own numbers.
"""

from __future__ import annotations

import json
import shutil
import threading
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[1]
APP = str(ROOT / "app.py")
TIMEOUT = 600  # seconds per script run: generous for a busy 2-core CPU (an analysis takes ~1 s when idle)
QUESTION = "What is the capital of France?"

pytestmark = pytest.mark.slow


def _app():
    from streamlit.testing.v1 import AppTest

    return AppTest.from_file(APP, default_timeout=TIMEOUT)


def _no_exception(at) -> None:
    assert not at.exception, [e.value for e in at.exception]


def _metric(at, label: str) -> str:
    found = [m.value for m in at.metric if m.label == label]
    assert found, f"no metric {label!r}; metrics: {[m.label for m in at.metric]}"
    return found[0]


def _home(at):
    """Back to Home, a function page in app.py: AppTest finds it by the main script's path, except when the
    session is already on it (then there is nothing to switch)."""
    try:
        at.switch_page("app.py")
    except ValueError:
        assert at.text_area(key="question") is not None  # already on Home
    return at.run()


def _analyze(at, question: str, context: str = ""):
    at.text_area(key="question").input(question)
    at.text_area(key="context").input(context)
    at.button(key="analyze").click().run()
    _no_exception(at)
    return at


@pytest.fixture(scope="module")
def analysed():
    """One session that analysed QUESTION on Home (shared by the page tests to save CPU)."""
    at = _app().run()
    _no_exception(at)
    return _analyze(at, QUESTION)


@pytest.fixture(scope="module")
def shipped_probe(smollm):
    from studio.resources import default_probe, list_probes

    info = default_probe(smollm.name, list_probes())
    assert info is not None, "no shipped probe for the default model in grade/assets/probes (run `make probes`)"
    return info


def test_home_shows_answer_and_the_probes_verdict(analysed, smollm, shipped_probe):
    import grade
    from grade.verdict.probe import Probe

    at = analysed
    assert not at.error, [e.value for e in at.error]
    shown = float(_metric(at, "Probability that the model can answer").rstrip("%")) / 100
    # The same question through the engine and the probe directly gives the same verdict.
    probe = Probe.load(shipped_probe.path)
    result = grade.analyze(smollm, QUESTION, loss=shipped_probe.loss, srank=shipped_probe.metadata.get("srank", "paper"))
    expected = float(probe.predict_proba(result.rank_ratio[None, :])[0, 1])
    assert shown == pytest.approx(expected, abs=0.006)  # the page rounds to whole percent
    assert float(_metric(at, "GRADE")) == pytest.approx(result.grade, abs=6e-4)
    text = " ".join(m.value for m in at.markdown)
    assert shipped_probe.name in text and "AUROC" in text
    assert "Paris" in text  # the embedded model knows this one
    assert at.get("plotly_chart"), "no overview chart"
    downloads = {b.proto.label for b in at.get("download_button")}
    assert {"Features (CSV)", "Full result (JSON)"} <= downloads


def test_home_sets_what_the_probe_reads_against_the_two_classes(analysed, smollm, shipped_probe):
    """Under the overview: the probe's own inputs for this question over its classes' bands, and a sentence
    whose count of inputs on the answerable side is the engine's (computed here directly)."""
    import re

    import grade
    from grade.verdict.probe import Probe, probe_inputs
    from grade.verdict.probe_reading import bands_for

    at = analysed
    assert any(e.label == "What the probe reads" for e in at.expander)
    probe = Probe.load(shipped_probe.path)
    bands = bands_for(probe.metadata)
    result = grade.analyze(smollm, QUESTION, loss=shipped_probe.loss, srank=shipped_probe.metadata.get("srank", "paper"))
    x = probe_inputs(result, bands.inputs)[0]
    expected = int((bands.side(x)[bands.separating(5)] > 0).sum())
    captions = " ".join(c.value for c in at.caption)
    found = re.search(r"lies on the answerable side of (\d+) of these 5", captions)
    assert found, captions[-600:]
    assert int(found.group(1)) == expected
    assert "ringed" in captions and str(bands.counts["answerable"]) in captions


def test_home_shows_the_other_detectors_and_says_when_they_disagree(analysed, smollm, one_torch_thread):
    """Beside the probe: each shipped detector's probability (the engine's own, on the same question), the
    test AUROC of the kind of question asked, and one sentence because the verdicts differ here (the
    hidden-state probe says the model knows the capital of France, the entropies say it does not)."""
    import grade
    from grade.verdict.detectors import DETECTORS, detectors_for, question_statistics, verdicts
    from studio.resources import load_detectors

    at = analysed
    assert not at.error, [e.value for e in at.error]
    detectors, problem = load_detectors(smollm.name)
    assert len(detectors) == len(DETECTORS) == len(detectors_for(smollm.name)) and problem is None
    result = grade.analyze(smollm, QUESTION, task="qa", loss="pre")
    values, _ = question_statistics(smollm, result.prompt, task="qa", result=result,
                                    statistics=[d.spec.statistic for d in detectors])
    expected = verdicts(detectors, values, task="qa", has_context=False)
    text = " ".join(m.value for m in at.markdown)
    for verdict in expected:
        shown = float(_metric(at, verdict.title).rstrip("%")) / 100
        assert shown == pytest.approx(verdict.probability, abs=0.006)
        assert verdict.kind == "triviaqa"
    # the closest dataset is named once on the screen, and every card cites it
    lines = [m.value for m in at.markdown if m.value.startswith("**Questions like this:**")]
    assert text.count("**Questions like this:**") == 1 and len(lines) == 1
    assert "short answers, no document" in lines[0] and "TriviaQA" in lines[0], lines
    probe = float(_metric(at, "Probability that the model can answer").rstrip("%")) / 100
    votes = [probe >= 0.5] + [v.answerable for v in expected]
    assert any(votes) and not all(votes), votes  # this question makes them disagree
    sentences = [w.value for w in at.warning if w.value.startswith("The detectors disagree:")]
    assert len(sentences) == 1 and sentences[0].count(".") == 1, sentences
    for verdict in expected:
        name = verdict.title if verdict.title[1] == "-" else verdict.title[0].lower() + verdict.title[1:]
        side = sentences[0].split(";")[0 if verdict.answerable else 1]
        assert name in side, (name, sentences[0])


def test_home_offers_the_models_own_known_and_wrong_questions(analysed, smollm):
    from studio.resources import model_examples

    options = analysed.selectbox(key="example").options
    own = [e["label"] for e in model_examples(smollm.name)]
    assert own and set(own) <= set(options)
    assert any("it knows" in o for o in own) and any("it gets wrong" in o for o in own)


def test_homes_question_types_are_the_task_registrys(analysed):
    """Home offers every task of the registry by its display name, multiple choice with a choices box; a new type
    starts at its own answer length (the labels')."""
    from grade.tasks.registry import REGISTRY
    from grade.tasks.tasks import answer_format
    from studio.workflows import HOME_TASKS

    box = analysed.selectbox(key="task")
    assert HOME_TASKS == tuple(REGISTRY) and box.value == "qa"
    assert list(box.options) == [REGISTRY[t].display_name for t in HOME_TASKS]
    assert "Multiple choice (A to D)" in box.options
    assert analysed.number_input(key="max_new_tokens").value == answer_format("qa").max_new_tokens


def test_spectra_page(analysed):
    at = analysed.switch_page("pages/spectra.py").run()
    _no_exception(at)
    assert len(at.get("plotly_chart")) == 4
    why = next(m.value for m in at.markdown if m.value.startswith("**Why the stable rank?**"))
    assert "from 1e-4 to 1e-5" in why and "rank ratio" in why
    at.slider(key="spectra_layer").set_value(0).run()
    _no_exception(at)
    assert "layer 0" in next(m.value for m in at.markdown if m.value.startswith("**Why the stable rank?**"))


def test_projections_page_places_the_current_question(analysed):
    at = analysed.switch_page("pages/projections.py").run()
    _no_exception(at)
    charts = at.get("plotly_chart")
    assert len(charts) == 2
    for chart in charts:
        figure = json.loads(chart.proto.spec)
        names = [trace.get("name") for trace in figure["data"]]
        assert "current question" in names, names
        assert any(str(n).startswith("correct") for n in names) and any(str(n).startswith("incorrect") for n in names)
    assert at.dataframe, "no separability table"
    # The page's claim is the table's own reading (which space predicts what), not a fixed sentence.
    table = at.dataframe[0].value
    shown = next(m.value for m in at.markdown if m.value.startswith("**What this table shows here:**"))
    hidden, grade_row = (table[table["feature space"] == s].iloc[0] for s in ("hidden state", "GRADE features"))
    better = "GRADE features" if grade_row["correct / incorrect"] > hidden["correct / incorrect"] else "hidden states"
    assert f"whether the model answered correctly, {better} predict it better" in shown
    assert "the majority guess scores" in shown


def test_probes_page_lists_shipped_probes_and_trains_one(analysed, shipped_probe):
    at = analysed.switch_page("pages/probes.py").run()
    _no_exception(at)
    assert shipped_probe.name in " ".join(m.value for m in at.markdown)
    at.radio(key="train_kind").set_value("logreg")
    # the reference set holds rank ratios only: the stable-rank inputs are offered for extracted features alone
    assert at.radio(key="train_inputs").disabled
    at.button(key="train_probe").click().run()
    _no_exception(at)
    assert not at.error, [e.value for e in at.error]
    trained, _ = at.session_state["trained"]
    assert trained.inputs == "rank_ratio" and trained.n_features_in_ == trained.n_layers
    auroc = _metric(at, "Test AUROC")
    assert auroc == "n/a" or 0.0 <= float(auroc) <= 1.0
    assert 0.0 <= float(_metric(at, "Test accuracy")) <= 1.0


def test_page_values_survive_navigation(analysed):
    at = _home(analysed)
    _no_exception(at)
    assert at.text_area(key="question").value == QUESTION
    assert any(m.label == "Probability that the model can answer" for m in at.metric)


def test_reasoning_trace_page_scores_the_reference_solution():
    at = _app().run()
    at.switch_page("pages/reasoning_trace.py").run()
    _no_exception(at)
    assert at.text_area(key="rt_text_B").value.strip()  # the dataset's worked solution
    at.button(key="rt_analyze").click().run()
    _no_exception(at)
    assert not at.error, [e.value for e in at.error]
    assert float(_metric(at, "GRADE_pos")) > 0
    assert int(_metric(at, "Steps")) >= 2
    # the tokens open coloured by the step verifier where it read the trace; GRADE's shock is one choice away
    at.radio(key="rt_colour").set_value("epistemic shock (heatmap)").run()
    _no_exception(at)
    heatmaps = [m for m in at.get("html") if "shock" in m.proto.body]
    assert heatmaps, "no token heatmap"
    assert "correct" in " ".join(m.value for m in at.markdown)  # the reference solution is marked correct
    # Manual error analysis: re-running the (unedited) steps reassembles the same trace, same numbers.
    before = (_metric(at, "GRADE_pos"), at.text_area(key="rt_text_B").value)
    analysed_before = at.session_state["rt_traces"]["B"]
    at.button(key="rt_rerun_B").click().run()
    _no_exception(at)
    assert at.session_state["rt_traces"]["B"] is not analysed_before  # it was analysed again
    assert (_metric(at, "GRADE_pos"), at.text_area(key="rt_text_B").value) == before


def test_a_correct_real_trace_the_verifier_clears_says_no_step_stands_out():
    """A correct trace Qwen wrote (test half of grade/datasets/real_step_errors, no wrong step marked, a trace the
    shipped verifier clears: highest step probability 0.32 against its 0.72 threshold): the Reasoning trace page
    says no step stands out, first, with the model that read it and the verifier's measured accuracy."""
    from grade.steps.real_errors import annotated_traces

    row = next(t for t in annotated_traces(["gsm8k_qwen.a.jsonl", "gsm8k_qwen.b.jsonl"]) if t.problem == "gsm8k-train-4126")
    assert row.split == "test" and row.first_wrong is None
    at = _app().run()
    at.switch_page("pages/reasoning_trace.py").run()
    _no_exception(at)
    at.text_area(key="rt_question").input(row.question)
    at.text_area(key="rt_text_A").input(row.trace)
    at.text_area(key="rt_text_B").input("")
    at.button(key="rt_analyze").click().run()
    _no_exception(at)
    assert not at.error, [e.value for e in at.error]
    verdict = at.session_state["rt_verdicts"]["A"]
    assert verdict["result"].suspect_step is None  # the premise: the verifier clears this trace
    text = " ".join(m.value for m in at.markdown)
    assert "**Trace A.** **No step stands out**" in text
    captions = " ".join(c.value for c in at.caption)
    assert "Read by smollm2-135m-instruct" in captions
    # the F1 the shipped verifier's file cites for this protocol (no gold answer given), with interval and chance
    f1 = json.loads((ROOT / "grade" / "assets" / "step_verifier" / "smollm2-135m-instruct.json").read_text())["measured"]["f1"]
    assert f"F1 {f1['value']:.2f} [{f1['low']:.2f}, {f1['high']:.2f}] (chance {f1['chance']:.2f})" in captions
    assert "top three" in captions
    assert "Suspect step" in text  # the GRADE step analysis follows as the second view


def test_a_generation_cut_off_by_its_length_is_flagged_not_just_wrong():
    """A chain of thought stopped by the token limit says so beside its verdict (and stops saying so once edited)."""
    at = _app().run()
    at.switch_page("pages/reasoning_trace.py").run()
    _no_exception(at)
    at.number_input(key="rt_max_tokens").set_value(8).run()
    at.button(key="rt_gen_A").click().run()
    _no_exception(at)
    generated = at.text_area(key="rt_text_A").value
    assert generated.strip()
    at.button(key="rt_analyze").click().run()
    _no_exception(at)
    text = " ".join(m.value for m in at.markdown)
    assert "cut off at 8 tokens" in text
    assert any("8-token limit" in w.value for w in at.warning)
    at.text_area(key="rt_text_A").input(generated + " #### 42").run()
    at.button(key="rt_analyze").click().run()
    _no_exception(at)
    assert "cut off at" not in " ".join(m.value for m in at.markdown)


def test_bad_input_shows_a_message_and_the_session_stays_usable(analysed):
    at = _home(analysed)
    _analyze(at, "   ")
    assert any("empty" in e.value for e in at.error), [e.value for e in at.error]
    _analyze(at, "x" * 5000)
    assert any("limit" in e.value for e in at.error), [e.value for e in at.error]
    _analyze(at, QUESTION, context="y" * 20000)
    assert any("document" in e.value for e in at.error), [e.value for e in at.error]
    _analyze(at, QUESTION)
    assert not at.error and any(m.label == "Probability that the model can answer" for m in at.metric)


def test_a_model_that_fails_to_load_is_reported(tmp_path):
    at = _app().run()
    at.selectbox(key="model_choice").set_value("__other__").run()
    at.text_input(key="model_path").input(str(tmp_path / "no-such-model")).run()
    _no_exception(at)
    assert any("Model failed to load" in e.value for e in at.sidebar.error), [e.value for e in at.sidebar.error]
    assert at.button(key="analyze").disabled
    at.switch_page("pages/spectra.py").run()
    _no_exception(at)
    _home(at)
    at.selectbox(key="model_choice").set_value("smollm2-135m-instruct").run()
    _no_exception(at)
    assert not at.sidebar.error and not at.button(key="analyze").disabled
    # the sidebar says what writes the answers now (SmolLM2 always generates with torch)
    assert any(c.value.endswith("answers by torch") for c in at.sidebar.caption), [c.value for c in at.sidebar.caption]


def test_a_corrupt_probe_file_is_reported(tmp_path, shipped_probe):
    corrupt = tmp_path / "corrupt.safetensors"
    corrupt.write_bytes(b"\x00not a safetensors file" * 10)
    shutil.copy(shipped_probe.path.with_suffix(".json"), corrupt.with_suffix(".json"))
    at = _app().run()
    at.switch_page("pages/probes.py").run()
    at.text_input(key="probe_path_text").input(str(corrupt))
    at.button(key="load_probe").click().run()
    _no_exception(at)
    assert any("Probe not loaded" in e.value and "corrupt" in e.value for e in at.error), [e.value for e in at.error]
    # The active probe is still the shipped one, and Home still works with it.
    assert shipped_probe.name in " ".join(m.value for m in at.markdown)


def test_sessions_keep_their_own_results():
    first, second = _app().run(), _app().run()
    _analyze(first, QUESTION)
    _analyze(second, "Who wrote Pride and Prejudice?")
    first.run()
    answer_first = " ".join(m.value for m in first.markdown)
    answer_second = " ".join(m.value for m in second.markdown)
    assert "Paris" in answer_first and "Paris" not in answer_second
    assert _metric(first, "GRADE") != _metric(second, "GRADE")


def test_concurrent_analyses_on_the_shared_model_get_their_own_results(smollm):
    """Two sessions' analyses at the same time on one model object (what two browser tabs do)."""
    from studio import workflows

    questions = [QUESTION, "Who wrote Pride and Prejudice?"]
    alone = [workflows.analyze_question(smollm, q, max_new_tokens=8) for q in questions]
    together: dict[int, workflows.QuestionAnalysis] = {}

    def run(i):
        together[i] = workflows.analyze_question(smollm, questions[i], max_new_tokens=8)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for i in range(2):
        assert together[i].result.question == questions[i]
        np.testing.assert_allclose(together[i].result.rank_ratio, alone[i].result.rank_ratio, rtol=1e-5)
        assert together[i].answer == alone[i].answer


def test_a_probe_for_another_model_gives_no_verdict_but_the_features(tmp_path):
    from grade.verdict.probe import Probe

    rng = np.random.default_rng(0)
    X = rng.normal(size=(60, 18))
    Probe("logreg", seed=0).fit(X, (X[:, 0] > 0).astype(int),
                                info={"model": "gemma-3-270m", "loss": "pre", "srank": "paper"}).save(tmp_path / "g")
    at = _app()
    at.session_state["probe_path"] = str(tmp_path / "g.safetensors")
    at.run()
    _analyze(at, QUESTION)
    assert not at.error, [e.value for e in at.error]
    assert any("does not fit" in i.value and "gemma-3-270m" in i.value for i in at.info), [i.value for i in at.info]
    assert float(_metric(at, "GRADE")) > 0


def _comparison(at):
    """The side-by-side table: a row per quantity, a column per question (pinned, this question)."""
    found = [d.value for d in [*at.dataframe, *at.table]  # a grid, or a static table where a grid cannot show it whole
             if "" in d.value.columns and "probe verdict" in d.value[""].tolist()]
    return found[0].set_index("") if found else None


def test_a_pinned_result_is_compared_side_by_side_with_the_next_question():
    """Teaching: pin a known question, ask an unknown one, see both verdicts and both layer curves."""
    at = _analyze(_app().run(), QUESTION)
    assert _comparison(at) is None
    at.button(key="pin").click().run()
    _no_exception(at)
    assert at.session_state["pinned_analysis"].result.question == QUESTION
    assert _comparison(at) is None  # the pinned result is the one shown: nothing to compare yet
    other = "Who won the 1911 Tour de Suisse?"
    _analyze(at, other)
    table = _comparison(at)
    assert table is not None and list(table.columns) == ["pinned", "this question"]
    assert table.loc["question"].tolist() == [QUESTION, other]
    assert all(v.endswith("answer)") for v in table.loc["probe verdict"])  # both verdicts, with their reading
    trend = next(c for c in at.get("plotly_chart") if "pinned: " in c.proto.spec)
    assert "this question" in trend.proto.spec
    # Spectra: both questions' spectra at the same layer, side by side, with their stable ranks
    at.switch_page("pages/spectra.py").run()
    _no_exception(at)
    pinned = at.session_state["pinned_analysis"].result
    layer = at.slider(key="spectra_layer").value
    captions = " ".join(c.value for c in at.caption)
    assert f"Pinned question: srank(C_h) {pinned.srank_h[layer]:.2f}" in captions
    assert "This question: srank(C_h)" in captions
    at = _home(at)
    at.button(key="unpin").click().run()
    _no_exception(at)
    assert "pinned_analysis" not in at.session_state and _comparison(at) is None
