"""Page texts computed from the pages' own numbers: Benchmarks (opens on the loaded model, says where GRADE
wins and loses, warns on small test sets), the small-sample rule, and the Projections / Home sentences."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[1]
QWEN = "qwen2.5-coder-1.5b-instruct"


def _page(path: str, monkeypatch, **state):
    from streamlit.testing.v1 import AppTest

    monkeypatch.chdir(ROOT)
    at = AppTest.from_file(str(ROOT / path), default_timeout=120)
    for key, value in state.items():
        at.session_state[key] = value
    return at.run()


# models whose results are the capped protocol's; Qwen's cross-fitted page: tests/test_evidence.py
@pytest.mark.parametrize("model", ["gemma-3-270m", "smollm2-135m-instruct"])
def test_benchmarks_opens_on_the_loaded_models_tables_and_says_where_grade_wins_and_loses(monkeypatch, model):
    """The session the router leaves after loading ``model`` (its spec); the page needs the name only, so
    nothing is loaded here (Qwen's weights stay on disk)."""
    from grade.studies import BenchmarkResult
    from studio import session
    from studio.resources import ModelSpec
    from grade.common.display import dataset_title
    from studio.benchmark_text import titled_rows
    from studio.summaries import benchmark_summary

    spec = ModelSpec(source=model)
    at = _page("pages/benchmarks.py", monkeypatch, model_spec=spec)
    assert not at.exception, [e.value for e in at.exception]
    assert at.selectbox(key="benchmark_model").value == model  # no selection made
    expected = BenchmarkResult.load(ROOT / "results" / model)
    sentence = next(m.value for m in at.markdown if m.value.startswith("**Where GRADE wins and loses"))
    assert model in sentence and benchmark_summary(titled_rows(expected.main)) in sentence
    assert sum("Protocol: one held-out split" in m.value for m in at.markdown) == 1
    # the main table: a tab per dataset, each with GRADE_pre's AUROC of that dataset
    datasets = list(dict.fromkeys(r["dataset"] for r in expected.main))
    for d in datasets:
        tab = next(t for t in at.tabs if t.label.startswith(f"{dataset_title(d)} (n="))
        shown = tab.dataframe[0].value.set_index("method")
        wanted = next(r["auroc"] for r in expected.main if r["method"] == "GRADE_pre" and r["dataset"] == d)
        assert str(shown.loc["GRADE_pre", "AUROC [95% interval]"]).split()[0] == f"{wanted:.3f}", d
    if model == QWEN:  # (SmolLM2 may be loaded by other tests of this process)
        assert spec not in session.model_registry().loaded()
    # Small test sets are flagged under the main table and the AUROC chart (and under the other studies' tables).
    from studio.summaries import small_sample_warning

    first = {}
    for r in expected.main:
        first.setdefault(r["dataset"], (r["n"], r["positives"]))
    wanted = small_sample_warning((dataset_title(d), n, pos) for d, (n, pos) in first.items())
    shown = [w.value for w in at.warning]
    auroc_tab = next(t for t in at.tabs if t.label == "AUROC")
    if wanted:
        assert shown.count(wanted) >= 2 and wanted in [w.value for w in auroc_tab.warning]
    else:
        assert not auroc_tab.warning


def test_benchmark_summary_names_wins_and_losses_from_the_table():
    from studio.summaries import benchmark_summary

    rows = [
        {"dataset": "a", "method": "GRADE_pre", "n": 40, "auroc": 0.80},
        {"dataset": "a", "method": "GRADE_pos", "n": 40, "auroc": 0.70},
        {"dataset": "a", "method": "SAPLMA", "n": 40, "auroc": 0.75},
        {"dataset": "a", "method": "Length_pre", "n": 40, "auroc": 0.95},  # not a detector
        {"dataset": "b", "method": "GRADE_pre", "n": 30, "auroc": 0.60},
        {"dataset": "b", "method": "SAPLMA", "n": 30, "auroc": 0.90},
        {"dataset": "b", "method": "P-Entropy", "n": 30, "auroc": 0.65},
        {"dataset": "b", "method": "Judge", "n": 30, "auroc": float("nan")},
    ]
    text = benchmark_summary(rows)
    assert text.endswith(".") and ". " not in text.replace("vs. ", "")  # one sentence
    assert "highest test AUROC on 1 of 2 datasets" in text and "30–40 test questions" in text
    assert "wins on a (GRADE_pre 0.800 vs. SAPLMA 0.750)" in text
    assert "loses on b (GRADE_pre 0.600, rank 3 of 3; best SAPLMA 0.900)" in text


@pytest.mark.parametrize("n, positives, warned", [(2, 1, True), (19, 9, True), (99, 40, False), (100, 40, False),
                                                   (150, 39, True), (150, 111, True), (79, None, True),
                                                   (150, 0, True), (150, 150, True), (150, 60, False),
                                                   (None, None, False)])
def test_small_test_sets_are_flagged(n, positives, warned):
    from studio.summaries import small_sample_problem, small_sample_warning

    assert (small_sample_problem(n, positives) is not None) == warned
    assert (small_sample_warning([("x", n, positives)]) is not None) == warned


def test_the_projections_sentence_follows_its_table():
    from studio.summaries import separability_summary

    table = [{"feature space": "hidden state", "correct / incorrect": 0.631, "with / without document": 0.95},
             {"feature space": "GRADE features", "correct / incorrect": 0.567, "with / without document": 0.70}]
    text = separability_summary(table, majority=0.513, majority_document=0.5)
    assert "hidden states predict it better (0.631 vs. 0.567" in text
    assert "whether a document was in the prompt, hidden states predict it better (0.950 vs. 0.700" in text
    assert "majority guess scores 0.513, so hidden states and GRADE features beat it" in text
    table[1]["correct / incorrect"] = 0.52
    assert "so hidden states beats it" in separability_summary(table, majority=0.513)
    table[0]["correct / incorrect"] = 0.50
    assert "neither space beats it" in separability_summary(table, majority=0.513)


def test_the_headline_reading_places_the_number_among_the_reference_questions():
    from studio.summaries import headline_reading

    ratios = np.array([[0.5, 0.7], [0.6, 0.8], [0.4, 0.4], [0.3, 0.5]])  # means 0.6, 0.7 | 0.4, 0.4
    labels = np.array([1, 1, 0, 0])
    text = headline_reading(0.65, ratios, labels)
    assert "median is 0.650 for answerable and 0.400 for unanswerable" in text
    assert "higher for answerable ones" in text and "above 50% of the answerable and 100% of the unanswerable" in text
    assert headline_reading(0.5, ratios, np.ones(4)) is None


def test_probes_page_starts_on_the_active_probe(monkeypatch):
    """Qwen's ``-pre`` probe active: the table and the list start on it, not on ``-pos``; a shipped probe shows
    the numbers its cards cite (tests/test_evidence.py), not a ROC of its own training run's test split."""
    from studio.resources import PROBES_DIR

    active = PROBES_DIR / f"{QWEN}-pre.safetensors"
    at = _page("pages/probes.py", monkeypatch, probe_path=str(active))
    assert not at.exception, [e.value for e in at.exception]
    assert at.selectbox(key="probe_pick").value == str(active)
    tables = [*at.dataframe, *at.table]  # grids, and static tables where a grid cannot show every cell whole
    assert next(d.value for d in tables if "name" in d.value.columns)["name"].iloc[0] == f"{QWEN}-pre"
    assert not at.get("plotly_chart")
    assert not [w.value for w in at.warning if w.value.startswith("Small test sets")]


def test_an_auroc_from_two_test_questions_carries_a_warning(monkeypatch, tmp_path):
    import json

    from grade.verdict.probe import Probe

    rng = np.random.default_rng(0)
    X = rng.normal(size=(60, 18))
    Probe("logreg", seed=0).fit(X, (X[:, 0] > 0).astype(int),
                                info={"model": "gemma-3-270m", "loss": "pre", "srank": "paper"}).save(tmp_path / "tiny")
    meta = json.loads((tmp_path / "tiny.json").read_text())
    meta["metrics"] = {"test": {"n": 2, "positives": 1, "accuracy": 0.0, "auroc": 0.0,
                                "roc": {"fpr": [0.0, 1.0, 1.0], "tpr": [0.0, 0.0, 1.0]}}}
    (tmp_path / "tiny.json").write_text(json.dumps(meta))
    at = _page("pages/probes.py", monkeypatch, probe_path=str(tmp_path / "tiny.safetensors"))
    assert not at.exception, [e.value for e in at.exception]
    assert "test AUROC **0.000**" in " ".join(m.value for m in at.markdown)
    warnings = [w.value for w in at.warning if w.value.startswith("Small test sets")]
    assert len(warnings) == 2 and all("tiny: too few answerable questions to judge (1 answerable, 1 unanswerable" in w for w in warnings), warnings


@pytest.mark.parametrize("page", ["pages/spectra.py", "pages/projections.py", "pages/probes.py",
                                  "pages/benchmarks.py"])
def test_each_page_says_what_you_are_looking_at(monkeypatch, page):
    """Even before any model or analysis, each page opens with a short explanation (Home's: test_app_cache)."""
    at = _page(page, monkeypatch)
    assert not at.exception, [e.value for e in at.exception]
    explanations = [e for e in at.expander if e.label == "What you are looking at"]
    assert len(explanations) == 1
    assert len(" ".join(m.value for m in explanations[0].markdown)) > 300
