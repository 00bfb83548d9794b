"""What the cards cite (grade.verdict.measured, from the shipped JSON the benchmark writer regenerates), the
Benchmarks page opening on the cross-fitted tables, and the Probes page showing the same number as the cards.

One evidence rule: a number is cited only on at least 40 questions of each class; one closest-dataset rule for
every card of a question; an accuracy at or below always guessing the larger class says so."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
QWEN = "qwen2.5-coder-1.5b-instruct"
SMOL = "smollm2-135m-instruct"
sys.path.insert(0, str(Path(__file__).resolve().parent))


@pytest.fixture(scope="module")
def crossfit_folder(tmp_path_factory):
    from crossfit_fixture import write_fixture

    return write_fixture(tmp_path_factory.mktemp("results") / SMOL)


# ------------------------------------------------------------------------------------------- grade side


@pytest.mark.slow
def test_every_shipped_measured_file_equals_what_its_results_folder_regenerates():
    """Never hand-edited: each grade/assets/measured/<model>.json is build_measured of results/<model>/."""
    from grade.verdict.measured import MEASURED_DIR, build_measured

    shipped = sorted(MEASURED_DIR.glob("*.json"))
    assert {p.stem for p in shipped} >= {SMOL, QWEN, "gemma-3-270m"}
    for path in shipped:
        assert json.loads(path.read_text()) == json.loads(json.dumps(build_measured(ROOT / "results" / path.stem, ROOT))), path


MODELS = (QWEN, SMOL, "gemma-3-270m")
#: Every kind of question Home asks: (task, with a document).
QUESTIONS = (("qa", False), ("qa", True), ("mmlu", False), ("gsm8k", False), ("math", False), ("cot", False))


def _every_card():
    """(model, loss, task, with document, evidence) of every card of every question kind of every shipped model."""
    from grade.verdict.detectors import DETECTORS
    from grade.verdict.measured import question_evidence

    for model in MODELS:
        for loss in ("pre", "pos"):
            for task, doc in QUESTIONS:
                yield model, loss, task, doc, question_evidence(model, loss, task=task, has_context=doc,
                                                                detectors=DETECTORS)


def test_no_card_cites_a_number_on_fewer_than_40_questions_of_either_class():
    from grade.verdict.measured import MIN_PER_CLASS

    cited = 0
    for model, loss, task, doc, evidence in _every_card():
        for m in [evidence.probe, *evidence.detectors.values()]:
            if m is None:
                continue
            text = m.sentence()
            if m.enough:
                cited += 1
                assert m.answerable >= MIN_PER_CLASS and m.unanswerable >= MIN_PER_CLASS, (model, task, m)
                assert f"({m.answerable} answerable, {m.unanswerable} unanswerable)" in text, text
                counts = [(int(a), int(u)) for a, u in re.findall(r"\((\d+) answerable, (\d+) unanswerable\)", text)]
                assert counts and all(a >= MIN_PER_CLASS and u >= MIN_PER_CLASS for a, u in counts), text
            else:
                assert text.startswith("too few ") and "AUROC" not in text, text
                assert f"{m.answerable} answerable, {m.unanswerable} unanswerable" in text, text
    assert cited >= 30  # Qwen's cards cite numbers for every kind of question


def test_the_small_models_capped_runs_are_too_thin_to_cite():
    from grade.verdict.measured import probe_measured

    m = probe_measured(SMOL, "pre", task="qa", has_context=False)
    assert m.datasets == ("triviaqa", "facts") and not m.enough  # pooled from the capped run's test scores
    assert m.sentence().startswith("too few answerable questions to judge (14 answerable, 71 unanswerable")


def test_every_card_of_one_question_cites_the_same_datasets_stated_once():
    from grade.verdict.detectors import Detector, detectors_for

    for model, loss, task, doc, evidence in _every_card():
        for m in [evidence.probe, *evidence.detectors.values()]:
            assert m is None or m.datasets == evidence.datasets, (model, task, doc, m)
        # a detector's calibration is one of those datasets where it was trained on one of them
        for path in detectors_for(model):
            detector = Detector.load(path)
            kind, _ = detector.kind_of(task, doc)
            if set(detector.kinds) & set(evidence.datasets):
                assert kind in evidence.datasets, (model, task, kind)
    from grade.verdict.measured import question_evidence

    line = lambda task, doc=False: question_evidence(QWEN, "pre", task=task, has_context=doc).line  # noqa: E731
    assert line("qa") == "short answers, no document → TriviaQA + NQ-Open + HotpotQA (closed book), pooled"
    assert line("qa", True) == "short answers with a document → HotpotQA (with its paragraphs)"
    assert line("mmlu") == "multiple choice (A to D) → MMLU"
    assert line("gsm8k") == "grade-school word problems → GSM8K"
    assert line("math") == "competition math → MATH"


def test_qwens_cards_cite_the_shipped_artifacts_on_the_split_held_out_before_training():
    from grade.verdict.detectors import DETECTORS
    from grade.verdict.measured import question_evidence

    for task, doc in QUESTIONS:
        for loss in ("pre", "pos"):
            evidence = question_evidence(QWEN, loss, task=task, has_context=doc, detectors=DETECTORS)
            assert evidence.probe.method == f"GRADE_{loss} (shipped probe)" and evidence.probe.protocol == "heldout"
            assert evidence.probe.enough and evidence.probe.sentence().startswith("Held out before training: AUROC")
            for name, m in evidence.detectors.items():
                assert m.method.endswith("(shipped detector)") and m.protocol == "heldout" and m.enough, (task, name)


def test_pooled_numbers_are_the_one_auroc_function_on_the_held_out_scores():
    import numpy as np
    import pandas as pd

    from grade.common.metrics import auroc, majority_accuracy
    from grade.verdict.measured import probe_measured

    scores = pd.read_csv(ROOT / "results" / QWEN / "heldout_scores.csv.xz")
    m = probe_measured(QWEN, "pre", task="qa", has_context=False)
    rows = scores[(scores["method"] == m.method) & scores["dataset"].isin(m.datasets)]
    assert len(rows) == m.n and rows["label"].sum() == m.answerable
    assert round(auroc(rows["label"], rows["score"]), 4) == m.auroc
    assert m.auroc_lo < m.auroc < m.auroc_hi
    threshold = rows["threshold"].iloc[0]
    assert round(float(((rows["score"] >= threshold) == rows["label"]).mean()), 4) == m.acc
    assert m.accuracy_chance == majority_accuracy(len(rows), int(rows["label"].sum()))
    assert np.isclose(m.as_dict()["accuracy_chance"], m.accuracy_chance)


def test_a_verdict_no_better_than_guessing_the_larger_class_says_so():
    from grade.verdict.measured import Measured

    # the numbers of the report: entropy's accuracy 87 % where always "cannot answer" scores 87 %
    flat = Measured(QWEN, "P-Entropy", "triviaqa", "heldout", 100, 13, 0.8, 0.7, 0.9, acc=0.87)
    assert flat.accuracy_chance == 0.87 and flat.accuracy_adds_nothing and not flat.auroc_adds_nothing
    assert "no better than guessing the larger class" in flat.adds_nothing
    assert flat.larger_class == "cannot answer"
    below = Measured(QWEN, "P-Entropy", "triviaqa", "heldout", 400, 100, 0.48, 0.4, 0.55, acc=0.8)
    assert below.auroc_adds_nothing and "No better than chance" in below.sentence()
    fine = Measured(QWEN, "P-Entropy", "triviaqa", "heldout", 400, 100, 0.8, 0.75, 0.85, acc=0.85)
    assert fine.adds_nothing is None and fine.as_dict()["accuracy_adds_nothing"] is False
    # every shipped row's flag is its numbers' comparison
    from grade.verdict.measured import read_measured

    for model in MODELS:
        data = read_measured(model)
        for method, rows in data["measured"].items():
            for dataset, row in rows.items():
                from grade.verdict.measured import measured

                m = measured(model, method, dataset)
                if m.acc is not None:
                    assert m.accuracy_adds_nothing == (m.acc <= m.accuracy_chance)
                    assert (m.adds_nothing is not None) == bool(m.auroc_adds_nothing or m.accuracy_adds_nothing)


def test_the_shipped_probe_quality_is_the_cited_rows():
    from grade.verdict.measured import probe_measured, shipped_probe_quality

    rows = shipped_probe_quality(QWEN, "pre")
    assert [r.dataset for r in rows] == ["hotpotqa", "triviaqa+nq_open+hotpotqa_closed", "mmlu", "gsm8k", "math"]
    assert rows[1] == probe_measured(QWEN, "pre", task="qa", has_context=False)
    assert rows[3] == probe_measured(QWEN, "pre", task="gsm8k", has_context=False)
    assert shipped_probe_quality("no-such-model", "pre") == []


def test_a_cross_fitted_folder_gives_cited_numbers_with_both_counts_interval_and_chance(crossfit_folder, tmp_path):
    from grade.verdict.measured import measured, probe_evidence, write_measured

    write_measured(crossfit_folder, tmp_path)
    data = json.loads((tmp_path / f"{SMOL}.json").read_text())
    assert data["protocol"] == "crossfit" and data["source"].endswith("all_questions.csv")
    assert {"GRADE_pre (shipped)", "P-Entropy", "SAPLMA", "GRADE_pre[logreg,loss,all]"} <= set(data["measured"])
    text = probe_evidence(SMOL, "pre", task="qa", has_context=False, folder=tmp_path)
    row = data["measured"]["GRADE_pre (shipped)"]["triviaqa"]
    assert text.startswith(f"Cross-fitted: AUROC {row['auroc']:.2f} [{row['auroc_lo']:.2f}, {row['auroc_hi']:.2f}] "
                           f"on 300 TriviaQA questions (60 answerable, 240 unanswerable); chance 0.50")
    gsm = measured(SMOL, "SAPLMA", "gsm8k", folder=tmp_path)
    assert gsm.sentence() == ("too few answerable questions to judge (20 answerable, 40 unanswerable; a number needs "
                              "40 of each) (GSM8K questions)")


# ------------------------------------------------------------------------------------------- app side


def _cited(text: str) -> list[tuple[int, int]]:
    """(answerable, unanswerable) of every AUROC the text cites as a result."""
    return [(int(a), int(u)) for a, u in
            re.findall(r"AUROC \d\.\d+ \[\d\.\d+, \d\.\d+\] on \d+ [^;]*?\((\d+) answerable, (\d+) unanswerable\)", text)]


@pytest.mark.slow
def test_home_cards_cite_both_counts_or_too_few_and_never_a_thin_auroc(one_torch_thread):
    from streamlit.testing.v1 import AppTest

    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=600).run()
    assert not at.exception, [e.value for e in at.exception]
    at.text_area(key="question").input("What is the capital of France?")
    at.button(key="analyze").click().run()
    assert not at.exception, [e.value for e in at.exception]
    texts = " ".join(m.value for m in at.markdown) + " ".join(c.value for c in at.caption)
    assert "AUROC" in texts or "too few" in texts
    assert all(a >= 40 and u >= 40 for a, u in _cited(texts)), texts
    # SmolLM2's benchmark tested a few dozen questions a dataset: nothing to cite, with both counts said
    assert "too few answerable questions to judge (14 answerable, 71 unanswerable" in texts


def _open_benchmarks(monkeypatch, results: Path, model: str):
    from streamlit.testing.v1 import AppTest

    from studio.resources import ModelSpec

    monkeypatch.setenv("GRADE_RESULTS_DIR", str(results))
    at = AppTest.from_file(str(ROOT / "pages" / "benchmarks.py"), default_timeout=120)
    at.session_state["model_spec"] = ModelSpec(source=model)
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    return at


def _check_crossfit_page(at, folder: Path) -> None:
    import pandas as pd

    from grade.common.display import dataset_title
    from studio.benchmark_text import titled_rows
    from studio.summaries import paired_summary

    assert at.subheader[0].value == "Main table"  # the page opens on it, the protocol said once above it
    assert sum("Protocol: cross-fitted" in m.value for m in at.markdown) == 1
    main = pd.read_csv(folder / "main_table.csv")
    first = main["dataset"].iloc[0]
    tab = next(t for t in at.tabs if t.label.startswith(f"{dataset_title(first)} (n="))
    table = tab.dataframe[0].value
    assert {"method", "questions", "answerable", "AUROC [95% interval]", "accuracy [95% interval]"} <= set(table.columns)
    row = main[(main["dataset"] == first) & (main["method"] == "GRADE_pre (shipped)")].iloc[0]
    shown = table[table["method"] == "GRADE_pre (shipped)"].iloc[0]
    assert shown["questions"] == row["n"] and \
        shown["AUROC [95% interval]"].startswith(f"{row['auroc']:.3f} [{row['auroc_lo']:.2f}, ")
    paragraph = paired_summary(titled_rows(pd.read_csv(folder / "paired.csv").to_dict("records")))
    assert any(paragraph in m.value for m in at.markdown)
    assert "Paired differences" in [s.value for s in at.subheader]
    if (folder / "grade_variants.csv").is_file():  # GRADE's variants: the cross-fitted run's ablation
        at.session_state["benchmark_section"] = "Ablations"  # the page builds the open tab only
        at.run()
        assert not at.exception, [e.value for e in at.exception]
        ablations = next(t for t in at.tabs if t.label == "Ablations")
        assert any("variants" in m.value for m in ablations.markdown)


def test_benchmarks_opens_on_the_cross_fitted_tables(crossfit_folder, monkeypatch):
    at = _open_benchmarks(monkeypatch, crossfit_folder.parent, SMOL)
    _check_crossfit_page(at, crossfit_folder)


@pytest.mark.slow
def test_benchmarks_opens_on_qwens_cross_fitted_tables_when_they_are_here(monkeypatch):
    folder = ROOT / "results" / QWEN
    if not (folder / "all_questions.csv").is_file():
        pytest.skip("Qwen's cross-fitted results are not in results/ yet")
    at = _open_benchmarks(monkeypatch, ROOT / "results", QWEN)
    _check_crossfit_page(at, folder)
    if (ROOT / "results" / f"{QWEN}-capped" / "main_table.csv").is_file():
        at.session_state["benchmark_section"] = "Ablations"  # the page builds the open tab only
        at.run()
        ablations = next(t for t in at.tabs if t.label == "Ablations")
        assert any("The earlier protocol" in m.value for m in ablations.markdown)


def test_the_probes_page_shows_the_shipped_probes_cited_numbers_from_the_measured_file(monkeypatch):
    """Qwen's -pre probe active: the page shows, per kind of question, the numbers Home's card cites (the same
    file), not the probe's own training-run test split."""
    from streamlit.testing.v1 import AppTest

    from grade.verdict.measured import dataset_title, shipped_probe_quality
    from studio.resources import PROBES_DIR

    monkeypatch.chdir(ROOT)
    at = AppTest.from_file(str(ROOT / "pages" / "probes.py"), default_timeout=120)
    at.session_state["probe_path"] = str(PROBES_DIR / f"{QWEN}-pre.safetensors")
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    tables = [*at.dataframe, *at.table]  # grids, and static tables where a grid cannot show every cell whole
    shown = next(d.value for d in tables if "questions like" in d.value.columns)  # the active probe's, first
    rows = shipped_probe_quality(QWEN, "pre")
    assert list(shown["datasets"]) == [dataset_title(r.dataset) for r in rows]
    for (_, line), m in zip(shown.iterrows(), rows):
        assert line["AUROC [95% interval]"] == f"{m.auroc:.2f} [{m.auroc_lo:.2f}, {m.auroc_hi:.2f}]"
        assert line["answerable / unanswerable"] == f"{m.answerable} / {m.unanswerable}"
        assert line["accuracy (always the larger class)"] == ("–" if m.acc is None else
                                                              f"{m.acc:.0%} ({m.accuracy_chance:.0%})")
    table = next(d.value for d in tables if "name" in d.value.columns)
    shipped = table[table["name"] == f"{QWEN}-pre"].iloc[0]
    assert shipped["numbers"] == "held out before training (below)" and pd_isna(shipped.get("test AUROC"))  # an empty column is not drawn
    assert "test AUROC **" not in " ".join(m.value for m in at.markdown)  # no training-run number for a shipped probe


def pd_isna(value) -> bool:
    import pandas as pd

    return bool(pd.isna(value))
