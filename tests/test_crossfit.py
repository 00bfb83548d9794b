"""The cross-fitted benchmark (grade.studies.crossfit): folds, no question scored by a model that saw it,
stored scores read back, the paired bootstrap. On a slice of Qwen's real labelled HotpotQA (closed book)
questions and feature stores (restored from history by scripts/build/restore_benchmark_caches.sh)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[1]
QWEN = "qwen2.5-coder-1.5b-instruct"

pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.fixture(scope="module")
def features_dir(benchmark_caches):
    return benchmark_caches / "data" / "probe_features" / QWEN


@pytest.fixture(scope="module")
def labels(tmp_path_factory):
    """The first 150 labelled closed-book HotpotQA questions, in a file named like the feature stores."""
    import json

    from grade.studies import read_labels

    rows = read_labels(ROOT / "data" / "labels" / QWEN / "hotpotqa.jsonl.xz")[:150]
    path = tmp_path_factory.mktemp("labels") / "hotpotqa.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def data(labels, features_dir):
    from grade.studies.crossfit import load_dataset

    return load_dataset("hotpotqa_closed", [labels], features_dir=features_dir, cache_dir=None, model=QWEN)


def test_folds_are_stratified_seeded_and_cover_every_question(data):
    from grade.studies.crossfit import assign_folds

    assert sorted(set(data.folds)) == [0, 1, 2, 3, 4]
    for cls in (0, 1):
        counts = np.bincount(data.folds[data.y == cls], minlength=5)
        assert counts.max() - counts.min() <= 1, counts
    assert (assign_folds(data.y, 5, 42) == data.folds).all()
    assert not (assign_folds(data.y, 5, 7) == data.folds).all()


def test_no_question_is_scored_by_a_model_that_saw_it(data):
    """A spy around the real fit records every training set: the rows each fold model scores are never in it,
    and every question with features is scored exactly once, by the model of its own fold."""
    from grade.studies.crossfit import Variant, crossfit_column, grade_fit

    variant = Variant("pre", "sranks_loss", "all", "logreg")
    fit = grade_fit(data, variant, seed=0, epochs=1)
    seen: list[np.ndarray] = []
    scored_by: dict[int, int] = {}

    def spy(train):
        seen.append(train)
        fitted = fit(train)
        model = len(seen) - 1
        inner = fitted.score

        def score(rows):
            for r in rows:
                assert r not in set(seen[model]), f"question {r} scored by a model trained on it"
                scored_by[int(r)] = scored_by.get(int(r), 0) + 1
                assert data.folds[r] == model
            return inner(rows)

        fitted.score = score
        return fitted

    ok = data.has_inputs("GRADE_pre")
    column = crossfit_column(data, ok, spy)
    assert len(seen) == 5
    for f, train in enumerate(seen):
        assert (data.folds[train] != f).all() and ok[train].all()
    assert sorted(scored_by) == sorted(np.flatnonzero(ok).tolist()) and set(scored_by.values()) == {1}
    assert np.isfinite(column.scores[ok]).all()


def test_a_detector_fitted_on_noise_scores_at_chance_out_of_sample(data):
    """Leakage would show here: logistic regression on 200 columns of noise fits its training rows perfectly,
    but its cross-fitted scores must not rank the questions (it would, if a question's own row trained it)."""
    from grade.common.metrics import auroc
    from grade.studies.crossfit import crossfit_column, fit_estimator

    noise = np.random.default_rng(0).normal(size=(len(data.y), 200))
    in_sample = fit_estimator("logreg", noise, data.y, seed=0)
    assert auroc(data.y, in_sample.score(noise)) > 0.9

    def fit(train):
        m = fit_estimator("logreg", noise[train], data.y[train], seed=0)
        return type(m)(lambda rows: m.score(noise[rows]), m.threshold)

    column = crossfit_column(data, np.ones(len(data.y), bool), fit)
    assert 0.3 < auroc(data.y, column.scores) < 0.7


@pytest.mark.slow
def test_the_selected_variant_is_chosen_on_inner_splits_and_the_store_is_read_back(labels, features_dir, tmp_path):
    """A whole (small) run: per fold, GRADE (selected) takes one variant's own out-of-fold scores; written and
    run again, every column is read back (nothing refitted) with the same scores, and the tables are the same."""
    from grade.studies.crossfit import CrossfitConfig, run_crossfit
    from grade.studies.crossfit_report import write_crossfit

    config = CrossfitConfig(QWEN, {"hotpotqa_closed": [labels]}, features_dir, None, n_boot=50, epochs=2, store=tmp_path)
    said: list[str] = []
    run = run_crossfit(config, said.append)
    d, cols = run.data["hotpotqa_closed"], run.columns["hotpotqa_closed"]
    sel = cols["GRADE_pre (selected)"]
    assert len(sel.extra["chosen"]) == 5
    for f, key in enumerate(sel.extra["chosen"]):
        rows = d.folds == f
        assert np.array_equal(sel.scores[rows], cols[key].scores[rows], equal_nan=True)
    assert cols["GRADE_pre"] is cols["GRADE_pre[mlp,rank_ratio,all]"]
    write_crossfit(run, tmp_path)
    main = (tmp_path / "main_table.md").read_text()
    said.clear()
    again = run_crossfit(config, said.append)
    assert not [line for line in said if "fitted" in line or "selecting" in line], said
    for key, column in cols.items():
        assert np.array_equal(again.columns["hotpotqa_closed"][key].scores, column.scores, equal_nan=True), key
    write_crossfit(again, tmp_path)
    assert (tmp_path / "main_table.md").read_text() == main
    from grade.studies import BenchmarkResult

    result = BenchmarkResult.load(tmp_path)  # the app's Benchmarks page reads the folder so
    assert {r["method"] for r in result.main} >= {"GRADE_pre", "GRADE_pos (selected)", "Length_pre"}


def test_the_paired_bootstrap_separates_a_better_detector_and_not_a_copy():
    from grade.common.metrics import auroc, paired_bootstrap_diff

    rng = np.random.default_rng(1)
    y = np.r_[np.ones(60), np.zeros(140)].astype(int)
    good = y + rng.normal(0, 0.6, len(y))
    weak = y + rng.normal(0, 3.0, len(y))
    out = paired_bootstrap_diff(y, good, weak, n_boot=300, seed=0)
    assert out["diff"] == pytest.approx(auroc(y, good) - auroc(y, weak))
    assert out["lo"] > 0 and out["p"] < 0.05
    same = paired_bootstrap_diff(y, weak, weak, n_boot=100, seed=0)
    assert same["diff"] == same["lo"] == same["hi"] == 0.0 and same["p"] == 1.0


def test_a_store_of_the_other_document_condition_is_refused(labels, features_dir, tmp_path):
    """HotpotQA with and without its paragraphs share question ids; a feature store of the wrong condition is
    an error, not silently other numbers."""
    from grade.studies.crossfit import load_dataset

    wrong = tmp_path / "pre"
    wrong.mkdir()
    (wrong / "hotpotqa.parquet").symlink_to(features_dir / "pre" / "hotpotqa_context.parquet")
    with pytest.raises(ValueError, match="document"):
        load_dataset("hotpotqa_closed", [labels], features_dir=tmp_path, cache_dir=None, model=QWEN)
