"""Feature extraction into a resumable Parquet store (grade.batch.features)."""

import json

import numpy as np
import pytest

from grade.common.errors import InputError
from grade.batch.features import (
    extract_features,
    feature_matrix,
    hidden_states,
    load_features,
    read_labelled,
    stored_keys,
)

ROWS = [
    {"id": "f1", "dataset": "facts", "question": "What is the capital of France?", "label": 1, "samples": ["Paris", "paris", "Lyon"]},
    {"id": "f2", "dataset": "facts", "question": "Who wrote the novel Middlemarch?", "label": 0},
    {"id": "a1", "dataset": "arith", "question": "What is 7 + 5?", "label": 1},
    {"id": "a2", "dataset": "arith", "question": "What is 487 * 963?", "label": 0},
    {"id": "u1", "dataset": "facts", "question": "How many legs does a spider have?", "label": None},
    {"id": "d1", "dataset": "doc", "question": "Where was Ada born?", "context": "Ada was born in London in 1815.", "label": 1},
    {"id": "f3", "dataset": "facts", "question": "What colour is the sky on a clear day?", "label": 1},
]


def write_jsonl(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_read_labelled_skips_null_labels_and_defaults_dataset(tmp_path):
    rows = [{k: v for k, v in r.items() if k != "dataset"} for r in ROWS]
    got = read_labelled(write_jsonl(tmp_path / "mix.jsonl", rows))
    assert [r["id"] for r in got] == ["f1", "f2", "a1", "a2", "d1", "f3"]
    assert {r["dataset"] for r in got} == {"mix"}
    assert len(read_labelled(tmp_path / "mix.jsonl", keep_unlabelled=True)) == 7


@pytest.mark.parametrize("line, message", [("{not json", "not valid JSON"), ('{"id": "x"}', "no question"),
                                           ('{"question": "q", "label": 3}', "label 3")])
def test_read_labelled_rejects_bad_rows(tmp_path, line, message):
    path = tmp_path / "bad.jsonl"
    path.write_text(line + "\n")
    with pytest.raises(InputError, match=message):
        read_labelled(path)


def test_pos_rows_without_a_response_score_the_labellers_majority_answer():
    """One majority rule (grade.tasks.tasks): a row without ``majority`` scores the answer the labeller would
    have written there, compared by the task's answer key, not by its raw text."""
    from grade.batch.features import given_response
    from grade.batch.labeling import majority_answer
    from grade.tasks.tasks import Question

    samples = ["Paris.", "paris", "The answer is Lyon", "the answer is  Lyon", "Lyon"]
    row = {"id": "q", "question": "Capital of France?", "task": "qa", "samples": samples}
    question = Question("q", "Capital of France?", ["Paris"], task="qa")
    assert given_response(row) == majority_answer(question, samples) == "Paris."
    gsm = {"id": "g", "question": "2 + 2?", "task": "gsm8k", "samples": ["so 4", "#### 5", "it is 4.0", "4"]}
    assert given_response(gsm) == "so 4"  # 4, 4.0 and 4 are one answer
    assert given_response({"id": "e", "question": "?", "samples": ["", "  "]}) is None  # nothing to score
    assert given_response({"id": "n", "question": "?"}) is None


@pytest.mark.slow
def test_interrupted_extraction_resumes_without_loss_or_duplicates(smollm, tmp_path):
    rows = read_labelled(write_jsonl(tmp_path / "labels.jsonl", ROWS))
    store = tmp_path / "features.parquet"
    seen = []

    def interrupt_after_three(done, total, row_id):
        seen.append(row_id)
        if done == 3:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        extract_features(smollm, rows, store, chunk_size=2, callback=interrupt_after_three)
    # the chunk of two was written during the run, the third row on the way out
    assert stored_keys(store) == {("facts", "f1", False), ("facts", "f2", False), ("arith", "a1", False)}
    (store / ".part-99999-dead.parquet.tmp").write_bytes(b"half a file from a killed run")

    report = extract_features(smollm, rows, store, chunk_size=2)
    assert (report.written, report.already, report.skipped) == (3, 3, [])
    again = extract_features(smollm, rows, store)
    assert (again.written, again.already) == (0, 6)

    df = load_features(store)
    assert sorted(df["id"]) == sorted(r["id"] for r in rows) and not df.duplicated(["dataset", "id"]).any()
    assert set(df["label"]) == {0, 1} and df.loc[df["id"] == "d1", "has_context"].item()
    L = smollm.n_layers
    assert feature_matrix(df).shape == (6, L) and np.isfinite(feature_matrix(df)).all()
    assert feature_matrix(df, "srank_h").shape == (6, L)
    hs = hidden_states(df)
    assert hs.shape[:2] == (6, L + 1) and hidden_states(df, layer=L // 2).shape == (6, hs.shape[2])
    assert (df["model"] == smollm.name).all() and (df["loss"] == "pre").all()

    # a resumed row equals a fresh extraction of the same question, within float32 rounding: in the resumed run
    # it shared a batched pass with other rows, and float32 kernels round by the batch's shape (a prompt batched
    # with a copy of itself differs from itself alone by ~4e-6 relative)
    fresh_store = tmp_path / "fresh.parquet"
    extract_features(smollm, [r for r in rows if r["id"] == "f3"], fresh_store)
    fresh = load_features(fresh_store)
    np.testing.assert_allclose(feature_matrix(fresh)[0], feature_matrix(df[df["id"] == "f3"])[0], rtol=2e-5)

    with pytest.raises(InputError, match="holds features of model"):
        extract_features(smollm, rows, store, loss="pos")

    # a repeated labelling run changed a label: updated in place, nothing computed, nothing doubled
    relabelled = [dict(r, label=1 - r["label"], accuracy=0.5) if r["id"] == "f2" else r for r in rows]
    report = extract_features(smollm, relabelled, store)
    assert (report.written, report.relabelled, report.removed) == (0, 1, 0)
    df2 = load_features(store)
    assert len(df2) == 6 and df2.loc[df2["id"] == "f2", "label"].item() == 1
    assert df2.loc[df2["id"] == "f2", "accuracy"].item() == 0.5
    np.testing.assert_array_equal(feature_matrix(df2.sort_values("id")), feature_matrix(df.sort_values("id")))


@pytest.mark.slow
def test_pos_features_score_the_most_frequent_sample(smollm, tmp_path):
    rows = read_labelled(write_jsonl(tmp_path / "labels.jsonl", ROWS[:1]))
    report = extract_features(smollm, rows, tmp_path / "pos.parquet", loss="pos", keep_hidden=False)
    assert report.written == 1
    df = load_features(tmp_path / "pos.parquet")
    assert df["response"].item() == "Paris" and df["loss"].item() == "pos" and df["hidden"].isna().all()

    # relabelled with another majority answer: the stale row is replaced, not doubled
    rows[0]["majority"] = "The capital of France is Paris."
    report = extract_features(smollm, rows, tmp_path / "pos.parquet", loss="pos", keep_hidden=False)
    assert (report.written, report.removed) == (1, 1)
    df = load_features(tmp_path / "pos.parquet")
    assert len(df) == 1 and df["response"].item() == "The capital of France is Paris."
