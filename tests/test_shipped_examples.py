"""The results shipped for the app's examples (``studio/assets/examples``, scripts/build/build_example_results.py), with
the embedded SmolLM2: saving and loading the analysis objects, the exact-match rule, and the app answering an
example without running the model, equal to a recomputation."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[1]
APP = str(ROOT / "app.py")
TIMEOUT = 600
MODEL = "smollm2-135m-instruct"
FRANCE = "Capital of France (well known)"

pytestmark = pytest.mark.slow


@pytest.fixture
def shipped_on(monkeypatch):
    """Shipped results used (tests/conftest.py turns them off for the rest of the suite)."""
    monkeypatch.setenv("GRADE_SHIPPED_RESULTS", "1")


def _home_request(lm, question, context, task, *, tokens=None, probe_path=None, detectors=None):
    from grade.verdict.detectors import detectors_for
    from studio.analysis_cache import home_request
    from studio.resources import DETECTORS_DIR, default_probe, list_probes
    from studio.served import LOCAL_LIMITS
    from studio.workflows import home_answer_tokens

    probe_path = probe_path or default_probe(lm.name, list_probes(), task=task).path
    return home_request(lm, question, context, task, tokens or home_answer_tokens(task), LOCAL_LIMITS.answer_tokens,
                        probe_path, detectors if detectors is not None else detectors_for(lm.name, DETECTORS_DIR))


def _assert_same_analysis(a, b, rtol=1e-4):
    """Two Home analyses agree: answer, verdict, detectors' verdicts, features and spectra."""
    assert a.answer == b.answer
    assert a.result.input_ids == b.result.input_ids
    assert (a.verdict is None) == (b.verdict is None)
    if a.verdict is not None:
        assert a.verdict.probe_name == b.verdict.probe_name
        assert a.verdict.probability == pytest.approx(b.verdict.probability, abs=1e-4)
    assert [v.name for v in a.detector_verdicts] == [v.name for v in b.detector_verdicts]
    for u, v in zip(a.detector_verdicts, b.detector_verdicts):
        assert (u.probability is None) == (v.probability is None) and u.problem == v.problem
        if u.probability is not None:
            assert u.probability == pytest.approx(v.probability, abs=1e-4), u.name
    for name in ("rank_ratio", "srank_h", "srank_g"):
        np.testing.assert_allclose(getattr(a.result, name), getattr(b.result, name), rtol=rtol, err_msg=name)
    assert a.result.loss_value == pytest.approx(b.result.loss_value, rel=rtol)
    for name in ("eig_h", "eig_g"):
        x, y = getattr(a.result, name), getattr(b.result, name)
        np.testing.assert_allclose(x, y, rtol=1e-3, atol=1e-6 * np.abs(y).max(), err_msg=name)


# ------------------------------------------------------------------------------- files and matching


def test_a_question_analysis_and_a_trace_save_and_load_themselves(smollm, tmp_path):
    from studio.resources import default_probe, list_probes, load_detectors, load_probe
    from studio.workflows import QuestionAnalysis, Trace, analyze_question, analyze_trace

    info = default_probe(smollm.name, list_probes(), task="qa")
    detectors, _ = load_detectors(smollm.name)
    analysis = analyze_question(smollm, "What is the capital of France?", probe=load_probe(info.path),
                                probe_info=info, max_new_tokens=48, detectors=detectors)
    weights, meta = analysis.save(tmp_path / "france", half=("last_hidden",), hidden_layers=[15])
    assert weights.name == "france.safetensors" and meta.name == "france.json"
    assert b"__reduce__" not in meta.read_bytes() and not list(tmp_path.glob("*.pkl"))
    loaded = QuestionAnalysis.load(tmp_path / "france")
    _assert_same_analysis(loaded, analysis, rtol=1e-6)
    assert loaded.verdict == analysis.verdict and loaded.detector_verdicts == analysis.detector_verdicts
    assert loaded.computed_at == analysis.computed_at and loaded.seconds == analysis.seconds
    # Hidden states: the kept layer as float16, the others NaN.
    np.testing.assert_allclose(loaded.result.last_hidden[15], analysis.result.last_hidden[15], rtol=2e-3, atol=2e-3)
    assert np.isnan(loaded.result.last_hidden[0]).all()

    trace = analyze_trace(smollm, "Tom has 3 apples and buys 2 more. How many apples does he have?",
                          "He has 3 + 2 = 5 apples.\n#### 5", title="Trace A", gold=["5"])
    trace.save(tmp_path / "trace")
    again = Trace.load(tmp_path / "trace")
    assert again.step_texts == trace.step_texts and again.correct is True and again.display_tokens == trace.display_tokens
    np.testing.assert_allclose(again.step_ratios, trace.step_ratios, rtol=1e-6)
    np.testing.assert_allclose(again.scored_tokens()[0], trace.scored_tokens()[0], rtol=1e-6)

    with pytest.raises(Exception, match="not a saved trace analysis"):
        Trace.load(tmp_path / "france")


def test_every_home_and_trace_example_of_smollm2_has_its_shipped_result(smollm, shipped_on):
    """Fails when a probe, detector or example changed and the shipped results were not rebuilt."""
    from studio.analysis_cache import find_shipped, trace_request
    from studio.workflows import home_examples, trace_example_problems

    for label, (question, context, task) in home_examples(MODEL).items():
        found = find_shipped(_home_request(smollm, question, context, task))
        assert found is not None, f"no shipped result for {label!r}: run scripts/build/build_example_results.py"
        assert found.result.question == question and found.verdict is not None
        assert found.origin["by"] == "scripts/build/build_example_results.py" and found.origin["computed_on"]
    for row in trace_example_problems(MODEL):
        found = find_shipped(trace_request(smollm, row["question"], row["solution"]))
        assert found is not None and found.response == row["solution"].strip(), row["question"]


def test_a_changed_probe_detector_or_setting_misses(smollm, shipped_on, tmp_path):
    from grade.verdict.detectors import detectors_for
    from studio.analysis_cache import find_shipped, shipped_path
    from studio.resources import DETECTORS_DIR, default_probe, list_probes

    question = "What is the capital of France?"
    assert find_shipped(_home_request(smollm, question, None, "qa")) is not None
    assert find_shipped(_home_request(smollm, "  " + question + "\n", None, "qa")) is not None  # as analysed
    # Settings: the answer length, the task, a document.
    assert find_shipped(_home_request(smollm, question, None, "qa", tokens=47)) is None
    assert find_shipped(_home_request(smollm, question, None, "cot")) is None
    assert find_shipped(_home_request(smollm, question, "Paris is in France.", "qa")) is None
    # The same probe under another name is the same probe; one changed byte makes another.
    shipped_probe = default_probe(smollm.name, list_probes(), task="qa").path
    for suffix in (".safetensors", ".json"):
        shutil.copy(shipped_probe.with_suffix(suffix), (tmp_path / "copy").with_suffix(suffix))
    assert find_shipped(_home_request(smollm, question, None, "qa", probe_path=tmp_path / "copy.safetensors")) is not None
    with (tmp_path / "copy.json").open("a") as f:
        f.write(" ")
    assert find_shipped(_home_request(smollm, question, None, "qa", probe_path=tmp_path / "copy.safetensors")) is None
    # A detector file changed, or one missing.
    folder = tmp_path / "detectors"
    shutil.copytree(DETECTORS_DIR, folder)
    assert find_shipped(_home_request(smollm, question, None, "qa", detectors=detectors_for(smollm.name, folder)))
    with detectors_for(smollm.name, folder)[0].with_suffix(".json").open("a") as f:
        f.write(" ")
    assert find_shipped(_home_request(smollm, question, None, "qa", detectors=detectors_for(smollm.name, folder))) is None
    assert find_shipped(_home_request(smollm, question, None, "qa",
                                      detectors=detectors_for(smollm.name, DETECTORS_DIR)[1:])) is None
    # A file found by name is used only when the request it records is this one.
    right = _home_request(smollm, question, None, "qa")
    wrong = _home_request(smollm, question, None, "qa", tokens=40)
    out = tmp_path / "shipped"
    for suffix in (".safetensors", ".json"):
        target = shipped_path(wrong, out)
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(shipped_path(right).with_name(shipped_path(right).name + suffix),
                    target.with_name(target.name + suffix))
    assert find_shipped(wrong, out) is None


def test_projections_ship_their_opening_embeddings_and_place_a_question_as_computed(shipped_on):
    from grade.batch.features import load_features
    from studio.analysis_cache import embedding_request, find_embedding
    from studio.projections import embed
    from studio.resources import REFERENCE_FEATURES, reference_set

    reference = reference_set(load_features(REFERENCE_FEATURES), MODEL, "pre")
    X = reference.hidden[:, len(reference.hidden_layers) // 2]
    coords = find_embedding(embedding_request(MODEL, X, "t-SNE"))
    assert coords is not None and coords.shape == (len(X), 2)
    assert find_embedding(embedding_request(MODEL, reference.ratios, "UMAP")) is not None
    assert find_embedding(embedding_request(MODEL, X[1:], "t-SNE")) is None  # other rows (a dataset left out)
    assert find_embedding(embedding_request(MODEL, X, "t-SNE", seed=1)) is None
    fresh = embed(X, "t-SNE", X[3])
    # The same map up to t-SNE's run-to-run noise: every point's nearest neighbours mostly the same.
    near = lambda c: np.argsort(np.linalg.norm(c[:, None] - c[None], axis=2), axis=1)[:, 1:6]
    overlap = np.mean([len(set(a) & set(b)) / 5 for a, b in zip(near(coords), near(fresh.coords))])
    assert overlap > 0.8, overlap
    # Placed on given coordinates, a question lands where the full computation puts it on the same map.
    placed = embed(X, "t-SNE", X[3], coords=fresh.coords)
    np.testing.assert_allclose(placed.current, fresh.current)


# -------------------------------------------------------------------------------------- the app


def _app(monkeypatch):
    from streamlit.testing.v1 import AppTest

    monkeypatch.setenv("GRADE_START_MODEL", MODEL)
    monkeypatch.chdir(ROOT)  # the router's pages are relative paths
    return AppTest.from_file(APP, default_timeout=TIMEOUT)


def _no_exception(at) -> None:
    assert not at.exception, [e.value for e in at.exception]
    assert not at.error, [e.value for e in at.error]


class _Passes:
    """Counts the loaded model's forward passes (every analysis and generation runs at least one)."""

    def __init__(self, lm):
        self.n = 0
        self._handle = lm.model.register_forward_pre_hook(self._count)

    def _count(self, module, args):
        self.n += 1

    def remove(self):
        self._handle.remove()


def _loaded_model():
    from studio import session

    [spec] = [s for s in session.model_registry().loaded() if s.source == MODEL]
    return session.model_registry().get(spec)


def test_home_answers_an_example_without_the_model_and_recompute_agrees(monkeypatch, shipped_on):
    import streamlit as st
    from studio import session

    session.analysis_cache.clear()
    at = _app(monkeypatch).run()
    _no_exception(at)
    passes = _Passes(_loaded_model())
    try:
        at.selectbox(key="example").set_value(FRANCE).run()
        at.button(key="analyze").click().run()
        _no_exception(at)
        shipped = at.session_state[session.ANALYSIS]
        assert passes.n == 0, "the model ran for a shipped example"
        assert shipped.from_cache and shipped.origin is not None and "Paris" in shipped.answer
        hint = [c.value for c in at.caption if c.value.startswith("Precomputed result, shipped with the app")]
        assert len(hint) == 1 and shipped.origin["computed_on"] in hint[0], [c.value for c in at.caption]

        at.button(key="recompute").click().run()
        _no_exception(at)
        again = at.session_state[session.ANALYSIS]
        assert passes.n > 0 and again.origin is None and not again.from_cache
        _assert_same_analysis(again, shipped)

        # A changed setting is not the shipped request: computed (here, a shorter answer).
        session.analysis_cache.clear()
        before = passes.n
        at.number_input(key="max_new_tokens").set_value(40)
        at.button(key="analyze").click().run()
        _no_exception(at)
        assert passes.n > before and at.session_state[session.ANALYSIS].origin is None
    finally:
        passes.remove()
        session.analysis_cache.clear()
        st.cache_data.clear()


def test_trace_and_projections_pages_open_on_shipped_results(monkeypatch, shipped_on, smollm):
    import streamlit as st

    from studio import projections, workflows

    st.cache_data.clear()  # an embedding computed by an earlier test of this process
    at = _app(monkeypatch).run()
    _no_exception(at)
    passes = _Passes(_loaded_model())
    try:
        at.switch_page("pages/reasoning_trace.py").run()
        _no_exception(at)
        assert not at.text_area(key="rt_text_A").value and at.text_area(key="rt_text_B").value  # the reference
        at.button(key="rt_analyze").click().run()
        _no_exception(at)
        trace = at.session_state["rt_traces"]["B"]
        # the GRADE analysis is the shipped one; the one pass is the step verifier reading the trace (SmolLM2 is its
        # reader, so the loaded model itself runs it, forward only)
        assert passes.n == 1 and trace.origin is not None and trace.title == "Trace B"
        assert any(c.value.startswith("Precomputed, shipped with the app") for c in at.caption)
        fresh = workflows.analyze_trace(smollm, trace.question, trace.response, title="Trace B")
        assert fresh.step_texts == trace.step_texts
        np.testing.assert_allclose(trace.step_ratios, fresh.step_ratios, rtol=1e-4)
        # computed on another CPU: float32 log-softmax over the vocabulary differs by about 1e-5 nats in absolute terms
        np.testing.assert_allclose(trace.result.token_surprisal, fresh.result.token_surprisal, rtol=1e-4, atol=5e-5)

        def no_fit(*args, **kwargs):
            raise AssertionError("t-SNE was fitted although the opening view ships")

        monkeypatch.setattr(projections.TSNE, "fit_transform", no_fit)
        at.switch_page("pages/projections.py").run()
        _no_exception(at)
        assert len(at.get("plotly_chart")) >= 2
    finally:
        passes.remove()
        st.cache_data.clear()
