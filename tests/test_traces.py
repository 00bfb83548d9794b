"""Error analysis of many reasoning traces (grade.traces, ``python -m grade traces``, the Traces page).

Fixtures are files: ``tests/data/samples_gsm8k_*.jsonl`` and ``samples_hendrycks_math_algebra_*.jsonl`` are
lm-evaluation-harness samples files of real GSM8K / MATH rows, with the embedded SmolLM2's greedy traces and
the datasets' worked solutions (``scripts/build/make_trace_fixture.py`` made them).
"""

from __future__ import annotations

import io
import json
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from grade.commands.cli import main
from grade.common.errors import InputError
from grade.traces import (
    ERROR_KINDS,
    TraceStore,
    aggregate,
    aggregate_markdown,
    cut_off_line,
    read_traces,
    summary_rows,
    token_class,
    token_shock,
)

DATA = Path(__file__).resolve().parent / "data"
GSM8K = DATA / "samples_gsm8k_2025-11-26T17-00-00.000000.jsonl"
MATH = DATA / "samples_hendrycks_math_algebra_2025-11-26T17-00-00.000000.jsonl"
ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(autouse=True)
def one_thread():
    """One torch thread, as the other model tests: 2 shared cores are slower with more."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def lines(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def write_jsonl(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def file_correctness(path: Path, filter_name: str) -> dict[str, bool]:
    return {str(r["doc_id"]): r["exact_match"] == 1 for r in lines(path) if r["filter"] == filter_name}


# ----------------------------------------------------------------------------------------- reading


def test_lm_eval_gsm8k_samples_give_one_trace_per_document_with_the_files_correctness():
    source = read_traces(GSM8K)
    assert source.format == "lm-eval" and source.task == "gsm8k"
    assert (source.metric, source.filter) == ("exact_match", "strict-match")  # the file's first filter
    assert source.filters == ["strict-match", "flexible-extract"] and source.metrics == ["exact_match"]
    assert [i.doc_id for i in source.items] == [str(d) for d in range(6)]
    assert {i.doc_id: i.correct for i in source.items} == file_correctness(GSM8K, "strict-match")
    by_doc = {str(r["doc_id"]): r for r in lines(GSM8K)}
    for item in source.items:
        row = by_doc[item.doc_id]
        assert item.question == row["doc"]["question"] and item.response == row["resps"][0][0]
        assert item.answers == (row["doc"]["answer"].split("####")[1].strip(),)
        assert item.prompt is None and item.sample == 0 and item.trace_id == f"{item.doc_id}:0"
    assert any("flexible-extract" in note for note in source.notes)

    flexible = read_traces(GSM8K, filter_name="flexible-extract", prompt="run", limit=2)
    assert {i.doc_id: i.correct for i in flexible.items} == dict(list(file_correctness(GSM8K, "flexible-extract").items())[:2])
    assert flexible.items[0].prompt == by_doc["0"]["arguments"]["gen_args_0"]["arg_0"]  # lm-eval's own prompt


def test_lm_eval_math_samples():
    source = read_traces(MATH)
    assert source.task == "math" and source.filter == "none"
    assert {i.doc_id: i.correct for i in source.items} == file_correctness(MATH, "none")
    assert [i.answers for i in source.items] == [(r["doc"]["answer"],) for r in lines(MATH)]
    assert all(i.question.startswith(r["doc"]["problem"][:20]) for i, r in zip(source.items, lines(MATH)))


def test_several_generations_per_document_are_rescored_one_by_one(tmp_path):
    """With ``repeats`` (self-consistency) the file's metric is per document; each trace is checked itself."""
    rows = [r for r in lines(GSM8K) if r["filter"] == "strict-match"]
    wrong, gold = rows[0], rows[3]
    merged = dict(gold, resps=[[gold["resps"][0][0], wrong["resps"][0][0]]], exact_match=1.0)
    source = read_traces(write_jsonl(tmp_path / "samples_gsm8k_cot_self_consistency_2025-01-01T00-00-00.jsonl", [merged]))
    assert [(i.trace_id, i.correct) for i in source.items] == [("3:0", True), ("3:1", False)]
    assert all(i.source.startswith("re-scored") for i in source.items)
    assert any("re-scored" in note for note in source.notes)


def test_project_jsonl_and_labels_files(tmp_path):
    rows = [r for r in lines(GSM8K) if r["filter"] == "strict-match"]
    traces = [{"doc_id": f"q{r['doc_id']}", "question": r["doc"]["question"], "response": r["resps"][0][0],
               "correct": bool(r["exact_match"])} for r in rows]
    traces[0]["correct"] = None
    del traces[1]["correct"]
    traces[1]["answers"] = [r["doc"]["answer"].split("####")[1].strip() for r in rows[1:2]]
    source = read_traces(write_jsonl(tmp_path / "traces.jsonl", traces))
    assert source.format == "jsonl" and [i.trace_id for i in source.items][:2] == ["q0:0", "q1:0"]
    assert source.items[0].correct is None
    assert source.items[1].correct is False and source.items[1].source.startswith("re-scored")
    assert [i.correct for i in source.items[2:]] == [bool(r["exact_match"]) for r in rows[2:]]
    with pytest.raises(InputError, match="appears twice"):
        read_traces(write_jsonl(tmp_path / "dup.jsonl", traces + traces[:1]))

    label = {"id": "gsm8k-1", "question": rows[3]["doc"]["question"], "answers": ["1800"], "task": "gsm8k",
             "samples": [rows[3]["resps"][0][0], rows[0]["resps"][0][0]], "scores": [1, 0], "matcher": "strict"}
    source = read_traces(write_jsonl(tmp_path / "labels.jsonl", [label]))
    assert source.format == "labels" and [(i.trace_id, i.correct) for i in source.items] == [("gsm8k-1:0", True),
                                                                                             ("gsm8k-1:1", False)]
    # labels written before cut_off existed: not known, never "not cut off"
    assert [i.cut_off for i in source.items] == [None, None] and "max_new_tokens" not in source.describe()


def test_labels_cut_off_reads_per_sample_with_the_token_limit(tmp_path):
    row = [r for r in lines(GSM8K) if r["filter"] == "strict-match"][3]
    label = {"id": "gsm8k-1", "question": row["doc"]["question"], "answers": ["1800"], "task": "gsm8k",
             "samples": [row["resps"][0][0], "Step 1: She buys"], "scores": [1, 0], "cut_off": [False, True],
             "max_new_tokens": 24, "matcher": "strict"}
    source = read_traces(write_jsonl(tmp_path / "labels.jsonl", [label]))
    assert [(i.trace_id, i.correct, i.cut_off) for i in source.items] == [("gsm8k-1:0", True, False),
                                                                         ("gsm8k-1:1", False, True)]
    assert source.describe()["max_new_tokens"] == 24  # meta.json keeps it for the reports' wording
    with pytest.raises(InputError, match="'cut_off' needs one true / false per sample"):
        read_traces(write_jsonl(tmp_path / "bad.jsonl", [dict(label, cut_off=[True])]))


@pytest.mark.parametrize("change, message", [  # a row missing a field or its question is named and skipped instead
    (lambda r: r.update(exact_match=0.5), "not a per-trace 0/1 score"),    # (tests/test_robust_inputs.py)
    (lambda r: r.update(resps=[[[-1.5, False]], [[-0.3, True]]]), "multiple-choice"),
])
def test_bad_samples_files_say_what_is_wrong(tmp_path, change, message):
    rows = lines(GSM8K)
    change(rows[0])
    with pytest.raises(InputError, match=message):
        read_traces(write_jsonl(tmp_path / "samples_gsm8k_x.jsonl", rows))


def test_bad_options_and_files_give_one_error_line(tmp_path, capsys):
    with pytest.raises(InputError, match="no metric 'acc'.*exact_match"):
        read_traces(GSM8K, metric="acc")
    with pytest.raises(InputError, match="no filter 'maj@8'.*strict-match, flexible-extract"):
        read_traces(GSM8K, filter_name="maj@8")
    (tmp_path / "broken.jsonl").write_text('{"doc_id": 0, "doc": {\n')
    for argv in (["--samples", str(tmp_path / "broken.jsonl")], ["--samples", str(tmp_path / "missing.jsonl")],
                 ["--samples", str(GSM8K), "--dataset", "gsm8k", "--generate", "2"], []):
        assert main(["traces", "--out", str(tmp_path / "store"), *argv]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and err[0].startswith("error: "), err


# ------------------------------------------------------------------------------------- pure parts


def test_token_classes():
    assert [token_class(t) for t in [" 18", "1", ",000", " =", " +", "*", " \\times", " apples", "Step", ".", "\n", " ",
                                     "####", " $"]] == \
        ["number", "number", "number", "operator", "operator", "operator", "operator", "word", "word", "other", "other",
         "other", "other", "other"]


def test_token_shock_is_scaled_per_layer_then_to_one():
    scores = np.array([[1.0, -2.0, 4.0], [100.0, 300.0, 0.0]])  # (L=2, n=3): layer scales differ by 100x
    shock = token_shock(scores)
    expected = np.array([(0.25 + 1 / 3) / 2, (0.5 + 1.0) / 2, (1.0 + 0.0) / 2])
    np.testing.assert_allclose(shock, expected / expected.max())
    np.testing.assert_allclose(token_shock(scores * np.array([[1e-6], [1e3]])), shock)  # per-layer scale invariant


def test_aggregates_count_what_they_say():
    frame = pd.DataFrame({
        "trace_id": ["a", "b", "c", "d", "e"],
        "correct": pd.array([True, True, False, False, None], dtype="boolean"),
        "grade_pos": [0.5, 0.9, 0.8, 1.2, 3.0], "peak_step_ratio": [1, 2, 3, 4, 5], "loss_value": [1, 1, 1, 1, 1],
        "n_tokens": [10, 40, 20, 30, 5], "n_steps": [2, 5, 3, 4, 1], "peak_step": [1, 5, 2, 4, 1],
        "peak_token_step": [1, 4, 3, 4, 1], "peak_token_class": ["number", "word", "number", "operator", "other"],
        "error_step": pd.array([None, None, 2, 3, None], dtype="Int64"),
        "error_kind": [None, None, "calculation", "units", None],
    })
    agg = aggregate(frame, n_boot=200)
    assert agg["counts"] == {"traces": 5, "correct": 2, "wrong": 2, "unknown": 1}
    ranking = {r["score"]: r for r in agg["ranking"]}
    assert ranking["GRADE_pos"]["auroc"] == pytest.approx(0.75)  # wrong {0.8, 1.2} vs correct {0.5, 0.9}
    assert ranking["length (tokens)"]["auroc"] == pytest.approx(0.5)
    assert ranking["mean CE loss"]["auroc"] == pytest.approx(0.5)  # all ties
    assert 0 <= ranking["GRADE_pos"]["lo"] <= 0.75 <= ranking["GRADE_pos"]["hi"] <= 1
    position = {r["group"]: r for r in agg["peak_position"]}
    assert position["correct"]["mean_relative"] == pytest.approx((0 + 1) / 2)
    assert position["wrong"]["mean_relative"] == pytest.approx((0.5 + 1) / 2)
    assert position["wrong"]["last_step"] == pytest.approx(0.5)
    classes = {r["group"]: r for r in agg["peak_token_class"]}
    assert classes["wrong: peak token"]["number"] == 0.5 and classes["wrong: peak token"]["operator"] == 0.5
    notes = agg["annotations"]
    assert notes["with_step"] == 2 and notes["peak_step_is_error_step"] == 0.5  # d: step 3 marked, peak 4
    assert notes["peak_token_step_is_error_step"] == 0.0 and notes["peak_step_within_one"] == 1.0
    assert notes["chance"] == pytest.approx((1 / 3 + 1 / 4) / 2)
    assert notes["kinds"] == {"calculation": 1, "units": 1}
    assert agg["cut_off"] == {"known": 0, "traces": 0, "wrong": 0, "token_limit": None}  # no column: nothing known
    assert "stopped at" not in aggregate_markdown(agg)

    frame["cut_off"] = pd.array([False, True, True, False, None], dtype="boolean")
    agg = aggregate(frame, n_boot=50, token_limit=512)
    assert agg["cut_off"] == {"known": 4, "traces": 2, "wrong": 1, "token_limit": 512}
    assert ("1 of the 2 wrong traces stopped at the 512-token limit before an answer: their 'wrong' may only mean "
            "unfinished (2 of all 5 traces stopped there; not known for 1 trace)") in aggregate_markdown(agg).splitlines()
    frame["cut_off"] = pd.array([False, False, True, True, False], dtype="boolean")
    assert cut_off_line(aggregate(frame, n_boot=50)) == ("2 of the 2 wrong traces stopped at the token limit before "
                                                        "an answer: their 'wrong' may only mean unfinished")


def _demo_store(tmp_path) -> TraceStore:
    """A copy of a shipped demo store (real rows)."""
    from importlib import resources

    shipped = Path(str(resources.files("grade") / "assets" / "demo_traces"))
    return TraceStore(shutil.copytree(sorted(p for p in shipped.iterdir() if (p / "meta.json").is_file())[0],
                                      tmp_path / "store"))


def test_an_old_store_without_cut_off_reads_as_not_known_and_takes_new_parts(tmp_path):
    import pyarrow.parquet as pq

    from studio import traces as tr

    store = _demo_store(tmp_path)
    parts = sorted(store.traces_dir.glob("part-*.parquet"))
    for part in parts:  # an old part, as the demo store was written before the column existed (a rebuilt one has it)
        table = pq.read_table(part)
        if "cut_off" in table.column_names:
            pq.write_table(table.drop(["cut_off"]), part)
    assert "cut_off" not in pq.read_schema(parts[0]).names  # the premise: an old part
    old = store.traces()
    assert old["cut_off"].isna().all() and str(old["cut_off"].dtype) == "boolean"
    assert all("cut_off" not in row for row in summary_rows(old))
    assert cut_off_line(aggregate(old, n_boot=20)) is None
    assert "cut off" not in tr.triage_table(old)

    meta = store.meta()
    store.prepare(meta["model"], meta["srank"], meta["source"])  # resuming an old store is allowed
    row = dict(pq.read_table(parts[0]).to_pylist()[0], trace_id="new:0", doc_id="new", correct=False, cut_off=True)
    store.write([{"trace": row, "tokens": []}])
    assert "cut_off" in pq.read_schema(sorted(store.traces_dir.glob("part-*.parquet"))[-1]).names
    frame = store.traces()
    assert len(frame) == len(old) + 1 and frame["cut_off"].isna().sum() == len(old)
    assert frame.set_index("trace_id").loc["new:0", "cut_off"] == True  # noqa: E712
    summary = summary_rows(frame)
    assert summary[-1]["cut_off"] is True and all("cut_off" not in r for r in summary[:-1])
    wrong = int((frame["correct"] == False).sum())  # noqa: E712
    assert cut_off_line(aggregate(frame, n_boot=20)) == (
        f"1 of the {wrong} wrong traces stopped at the token limit before an answer: their 'wrong' may only mean "
        f"unfinished (not known for {len(old)} traces)")

    table = tr.triage_table(frame)
    assert list(table.columns[:3]) == ["trace", "correctness", "cut off"]
    shown = table.set_index("trace")["cut off"]
    assert shown["new:0"] == True and shown.drop("new:0").isna().all()  # noqa: E712
    labels = tr.trace_labels(table, frame)
    assert labels["new:0"].startswith("new:0 · wrong (cut off) · GRADE_pos")
    assert sum("(cut off)" in label for label in labels.values()) == 1
    assert tr.cut_off_badge(True, 256) == ":orange-badge[cut off at 256 tokens]"
    assert tr.cut_off_badge(pd.NA, 256) == tr.cut_off_badge(False) == ""


def test_the_verifier_columns_round_trip_and_a_store_without_them_still_loads(tmp_path):
    """Format 3 adds the step verifier's columns. The demo store's parts predate them: read as null (not run, never
    "no step stands out"), and the store still takes new parts; a new row keeps "no step stands out" (a null
    suspect step with a reader) apart from "not run" (no reader), in the store, --json and the Traces table."""
    import pyarrow.parquet as pq

    from grade.traces.analysis import verifier_columns
    from grade.steps.verifier import VerifierResult
    from studio import traces as tr

    from grade.traces.store import ADDED_COLUMNS

    store = _demo_store(tmp_path)
    parts = sorted(store.traces_dir.glob("part-*.parquet"))
    verifier = [c for c in ADDED_COLUMNS if "verifier" in c]
    for part in parts:  # parts of format 2, written before the verifier's columns existed (a rebuilt store has them)
        table = pq.read_table(part)
        pq.write_table(table.drop([c for c in verifier if c in table.column_names]), part)
    store.meta_path.write_text(json.dumps({**store.meta(), "format_version": 2}))
    assert "verifier_reader" not in pq.read_schema(parts[0]).names  # the premise: parts of format 2
    old = store.traces()
    assert old["verifier_reader"].isna().all() and old["verifier_suspect_step"].isna().all()
    assert str(old["verifier_suspect_step"].dtype) == "Int64"
    assert all("verifier" not in row for row in summary_rows(old))
    assert "verifier" not in tr.triage_table(old)

    meta = store.meta()
    store.prepare(meta["model"], meta["srank"], meta["source"])  # a format-2 store takes format-3 parts
    base = pq.read_table(parts[0]).to_pylist()[0]
    k = len(base["step_texts"])
    none = VerifierResult([0.1] * k, None, list(range(1, k + 1)), 0.87, list(base["step_texts"]), 1.0, {})
    found = VerifierResult([0.1, 0.95] + [0.2] * (k - 2), 2, list(range(1, k + 1)), 0.87, list(base["step_texts"]), 1.0, {})
    rows = [dict(base, trace_id="none:0", doc_id="none", **verifier_columns(none, "smollm2-135m-instruct")),
            dict(base, trace_id="found:0", doc_id="found", **verifier_columns(found, "smollm2-135m-instruct"))]
    store.write([{"trace": r, "tokens": []} for r in rows])
    frame = store.traces().set_index("trace_id")
    assert frame.loc["none:0", "verifier_reader"] == "smollm2-135m-instruct"
    assert pd.isna(frame.loc["none:0", "verifier_suspect_step"]) and pd.isna(frame.loc["none:0", "verifier_suspect_step_text"])
    assert frame.loc["found:0", "verifier_suspect_step"] == 2
    assert frame.loc["found:0", "verifier_suspect_step_text"] == base["step_texts"][1]
    assert list(frame.loc["found:0", "step_verifier_probability"]) == pytest.approx(found.step_probability)
    assert frame.loc["found:0", "verifier_threshold"] == pytest.approx(0.87)
    assert frame.drop(["none:0", "found:0"])["verifier_reader"].isna().all()

    summary = {r["doc_id"]: r for r in summary_rows(store.traces())}
    assert summary["none"]["verifier"]["suspect_step"] is None and summary["found"]["verifier"]["suspect_step"] == 2
    assert summary["none"]["verifier"]["reader"] == "smollm2-135m-instruct"
    assert len(summary["found"]["verifier"]["step_probability"]) == k
    assert sum("verifier" in r for r in summary.values()) == 2
    json.dumps(list(summary.values()))  # --json prints them

    shown = tr.triage_table(store.traces()).set_index("trace")["verifier"]
    assert shown["none:0"] == "no step stands out" and shown["found:0"] == "step 2"
    assert shown.drop(["none:0", "found:0"]).isna().all()  # not run: blank


# ------------------------------------------------------------------------------ with the model


@pytest.mark.slow
def test_command_on_an_lm_eval_gsm8k_file(gsm8k_trace_run):
    """The issue's check: one row per trace, correctness as in the file, finite GRADE_pos, >= 1 step each."""
    out, printed = gsm8k_trace_run
    expected = {int(k): v for k, v in file_correctness(GSM8K, "strict-match").items()}
    assert printed["n"] == 6 and len(printed["traces"]) == 6
    assert {t["doc_id"]: t["correct"] for t in printed["traces"]} == expected  # doc ids stay integers
    for t in printed["traces"]:
        assert set(t) == {"doc_id", "sample", "correct", "grade_pos", "n_steps", "peak_step", "suspect_step",
                          "suspect_step_text", "locator", "step_ranking", "step_texts", "flagged_steps", "verifier"}
        verdict = t["verifier"]  # SmolLM2 is the shipped verifier's reader: it ran on every trace
        assert verdict["reader"] == "smollm2-135m-instruct" and len(verdict["step_probability"]) >= t["n_steps"]
        assert verdict["suspect_step"] is None or (
            verdict["step_probability"][verdict["suspect_step"] - 1] > verdict["threshold"])
        assert 1 <= t["suspect_step"] <= t["n_steps"] and sorted(t["step_ranking"]) == list(range(1, t["n_steps"] + 1))
        assert t["suspect_step"] == t["step_ranking"][0] and t["suspect_step_text"] == t["step_texts"][t["suspect_step"] - 1]
        assert np.isfinite(t["grade_pos"]) and t["grade_pos"] > 0
        assert t["n_steps"] >= 1 and 1 <= t["peak_step"] <= t["n_steps"]

    store = TraceStore(out)
    frame = store.traces()
    assert frame["trace_id"].is_unique and len(frame) == 6
    tokens = store.tokens()
    for row in frame.itertuples(index=False):
        ratios = np.stack(row.step_ratios)
        assert ratios.shape == (row.n_steps, row.n_layers) and np.isfinite(ratios).all()
        assert row.grade_pos == pytest.approx(ratios.mean())
        assert row.peak_step == int(np.argmax(ratios.mean(axis=1))) + 1
        assert row.peak_step_text == row.step_texts[row.peak_step - 1]
        mine = tokens[tokens["trace_id"] == row.trace_id]
        assert mine["position"].tolist() == list(range(row.n_tokens))  # every response token once
        assert sorted(set(mine["step"])) == list(range(1, row.n_steps + 1))
        assert mine["shock"].max() == pytest.approx(1.0)
        peak = mine.iloc[row.peak_token_position]
        assert (peak["token"], peak["step"], peak["token_class"]) == (row.peak_token, row.peak_token_step,
                                                                       row.peak_token_class)
        assert "".join(mine["token"]).strip() == row.response.strip()


@pytest.mark.slow
def test_no_verifier_leaves_its_columns_null_and_the_grade_analysis_the_same(gsm8k_trace_run, tmp_path, capsys):
    """``--no-verifier``: the GRADE analysis only (the reader is not run); the rows match the verified run's."""
    import torch

    from tests.conftest import GSM8K_SAMPLES

    threads = torch.get_num_threads()
    try:
        code = main(["traces", "--samples", str(GSM8K_SAMPLES), "--out", str(tmp_path / "plain"), "--json", "--quiet",
                     "--threads", "1", "--limit", "2", "--no-verifier"])
    finally:
        torch.set_num_threads(threads)
    assert code == 0
    printed = json.loads(capsys.readouterr().out)
    assert len(printed["traces"]) == 2 and all("verifier" not in t for t in printed["traces"])
    plain = TraceStore(tmp_path / "plain").traces().set_index("trace_id")
    assert plain["verifier_reader"].isna().all() and plain["step_verifier_probability"].isna().all()
    verified = TraceStore(gsm8k_trace_run[0]).traces().set_index("trace_id").loc[plain.index]
    assert verified["verifier_reader"].notna().all()
    np.testing.assert_allclose(plain["grade_pos"], verified["grade_pos"], rtol=1e-6)
    assert list(plain["suspect_step"]) == list(verified["suspect_step"])


@pytest.mark.slow
def test_stored_token_shock_equals_the_exact_route(gsm8k_trace_run, smollm):
    """Token scores come from C_g = ΔΔᵀ on certified full-rank layers; the exact route (SVD, projector) gives
    the same row sums, so the Reasoning trace page and the store agree."""
    import grade

    store = TraceStore(gsm8k_trace_run[0])
    row = store.traces().set_index("trace_id").loc["4:0"]
    exact = grade.analyze(smollm, row["question"], task="gsm8k", loss="pos", response=row["response"], steps=True,
                          spectra=True)
    scores = exact.token_scores[:, exact.response_start:]
    stored = np.stack(store.tokens("4:0")["scores"].map(np.asarray).tolist(), axis=1)
    scale = np.abs(scores).max(axis=1, keepdims=True)
    np.testing.assert_allclose(stored / scale, scores / scale, atol=1e-5)
    np.testing.assert_allclose(np.mean([s.rank_ratio for s in exact.steps]), row["grade_pos"], rtol=1e-5)


@pytest.mark.slow
def test_an_interrupted_run_resumes_and_ray_writes_the_same_rows(smollm, tmp_path):
    from grade.batch import ClusterOptions, connect
    from grade.models.models import ModelSpec
    from grade.traces import analyze_traces

    from grade.batch.features import FeatureStore
    from grade.traces import TOKEN_SCHEMA

    pytest.importorskip("ray")
    source = read_traces(GSM8K)
    source.items = [i for i in source.items if i.doc_id in ("4", "5")]  # the two shortest traces

    def stop_after_first(done, total, trace):
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        analyze_traces(smollm, source, tmp_path / "local", chunk_size=1, callback=stop_after_first)
    store = TraceStore(tmp_path / "local")
    assert store.done_keys() == {"4:0"}
    # A kill between a chunk's two writes leaves tokens without their trace: not read, redone.
    orphan = store.tokens("4:0").assign(trace_id="5:0")
    FeatureStore(store.tokens_dir).write(orphan.to_dict("records"), TOKEN_SCHEMA)
    assert set(store.tokens()["trace_id"]) == {"4:0"}
    report = analyze_traces(smollm, source, tmp_path / "local", chunk_size=1)
    assert (report.already, report.written) == (1, 1)  # the same single thread as each Ray worker (1 CPU)
    local = store.traces()
    assert set(local["trace_id"]) == {"4:0", "5:0"}
    assert len(store.tokens("5:0")) == local.set_index("trace_id").loc["5:0", "n_tokens"]  # the orphans replaced

    # One worker on a one-CPU cluster: what Ray adds (the actor, its model load, the driver writing its chunks,
    # the resumable store) is the same with more; several workers and a killed one: tests/test_distributed.py.
    started = connect(num_cpus=1)
    try:
        ray_report = analyze_traces(ModelSpec("smollm2-135m-instruct"), source, tmp_path / "ray", chunk_size=1,
                                    backend="ray", cluster=ClusterOptions(workers=1))
    finally:
        if started:
            import ray

            ray.shutdown()
    assert ray_report.written == 2
    ray_frame = TraceStore(tmp_path / "ray").traces().set_index("trace_id").loc[["4:0", "5:0"]]
    local = local.set_index("trace_id").loc[["4:0", "5:0"]]
    np.testing.assert_allclose(ray_frame["grade_pos"], local["grade_pos"], rtol=1e-6)
    np.testing.assert_allclose(np.stack(ray_frame["rank_ratio"]), np.stack(local["rank_ratio"]), rtol=1e-6, atol=1e-6)
    assert (ray_frame["peak_step"] == local["peak_step"]).all() and (ray_frame["correct"] == local["correct"]).all()


@pytest.mark.slow
def test_the_models_own_traces(tmp_path, capsys):
    """``--dataset ... --generate N``: N sampled traces per problem, scored, then analysed."""
    problem = {"id": "gsm8k-soup", "question": lines(GSM8K)[3]["doc"]["question"], "answers": ["1800"], "task": "gsm8k"}
    problems = write_jsonl(tmp_path / "problems.jsonl", [problem])
    argv = ["traces", "--dataset", str(problems), "--generate", "2", "--max-new-tokens", "24", "--out",
            str(tmp_path / "own"), "--json", "--quiet", "--threads", "1"]
    assert main(argv) == 0
    printed = json.loads(capsys.readouterr().out)
    generated = lines(tmp_path / "own" / "generated.jsonl")
    assert len(generated) == 1 and len(generated[0]["samples"]) == 2
    assert [(t["doc_id"], t["sample"], t["correct"]) for t in printed["traces"]] == \
        [("gsm8k-soup", k, bool(generated[0]["scores"][k])) for k in range(2)]
    assert TraceStore(tmp_path / "own").traces()["response"].tolist() == [s.strip() for s in generated[0]["samples"]]
    assert main(argv) == 0  # resumed: nothing sampled or analysed again
    assert json.loads(capsys.readouterr().out) == printed


@pytest.mark.slow
def test_generated_traces_cut_off_by_the_token_limit_are_flagged(tmp_path, capsys, monkeypatch):
    """At 16 tokens no GSM8K trace of the model reaches its answer: the labels record, the store, --json, the
    aggregates' line and the Traces page all say that the traces were cut off, and by which limit."""
    problem = {"id": "gsm8k-soup", "question": lines(GSM8K)[3]["doc"]["question"], "answers": ["1800"], "task": "gsm8k"}
    problems = write_jsonl(tmp_path / "problems.jsonl", [problem])
    out = tmp_path / "own"
    argv = ["traces", "--dataset", str(problems), "--generate", "2", "--max-new-tokens", "16", "--out", str(out),
            "--quiet", "--threads", "1"]
    assert main([*argv, "--json"]) == 0
    printed = json.loads(capsys.readouterr().out)
    [record] = lines(out / "generated.jsonl")
    assert record["cut_off"] == [True, True] and record["max_new_tokens"] == 16
    assert [t["cut_off"] for t in printed["traces"]] == [True, True]
    store = TraceStore(out)
    assert store.traces()["cut_off"].tolist() == [True, True]
    assert store.meta()["source"]["max_new_tokens"] == 16
    wrong = record["scores"].count(0)
    assert main(argv) == 0  # the tables of the stored traces
    text = capsys.readouterr().out
    assert (f"{wrong} of the {wrong} wrong traces stopped at the 16-token limit before an answer: their 'wrong' may "
            "only mean unfinished") in text

    import studio.traces

    monkeypatch.setattr(studio.traces, "stores_dir", lambda: tmp_path / "stores")  # the demo store's copy
    at = _app().run()
    at.switch_page("pages/traces.py").run()
    at.text_input(key="tr_store_path").input(str(out))
    at.button(key="tr_open_store").click().run()
    _no_exception(at)
    assert at.dataframe(key="tr_table").value["cut off"].tolist() == [True, True]
    assert all("(cut off)" in label for label in at.selectbox(key="tr_open").options)
    assert any(":orange-badge[cut off at 16 tokens]" in m.value for m in at.markdown)
    assert any("16-token limit" in w.value for w in at.warning)


@pytest.mark.slow
def test_annotations_are_saved_atomically_validated_and_exported(gsm8k_trace_run, tmp_path):
    store = TraceStore(shutil.copytree(gsm8k_trace_run[0], tmp_path / "store"))
    frame = store.traces()
    wrong = frame[frame["correct"] == False].iloc[0]  # noqa: E712 (nullable boolean)
    with pytest.raises(InputError, match="outside"):
        store.annotate(wrong["trace_id"], error_step=int(wrong["n_steps"]) + 1, kind="other")
    with pytest.raises(InputError, match="unknown error kind"):
        store.annotate(wrong["trace_id"], error_step=1, kind="typo")
    with pytest.raises(InputError, match="no trace"):
        store.annotate("99:0", error_step=1, kind="other")
    store.annotate(wrong["trace_id"], error_step=int(wrong["peak_step"]), kind=ERROR_KINDS[0], note="x")
    store.annotate("3:0", error_step=None, kind="other", note="")
    assert [p.name for p in store.path.iterdir() if p.name.endswith(".tmp")] == []
    reread = TraceStore(store.path).traces()
    marked = reread[reread["error_kind"].notna()].set_index("trace_id")
    assert marked.loc[wrong["trace_id"], "error_step"] == wrong["peak_step"] and marked.loc["3:0", "error_kind"] == "other"

    csv = pd.read_csv(io.StringIO(store.export_annotations("csv")))
    assert len(csv) == 2 and set(csv["error_kind"]) == {ERROR_KINDS[0], "other"}
    jsonl = [json.loads(line) for line in store.export_annotations("jsonl").splitlines()]
    first = next(r for r in jsonl if r["trace_id"] == wrong["trace_id"])
    assert first["error_step_text"] == list(wrong["step_texts"])[int(wrong["peak_step"]) - 1] and first["note"] == "x"
    notes = aggregate(reread)["annotations"]
    assert notes["with_step"] == 1 and notes["peak_step_is_error_step"] == 1.0

    store.annotate("3:0", error_step=None, kind=None, note="")  # nothing left: the mark is removed
    assert "3:0" not in store.annotations()


# ------------------------------------------------------------------------------------------- page


def _app():
    from streamlit.testing.v1 import AppTest

    return AppTest.from_file(str(ROOT / "app.py"), default_timeout=600)


def _no_exception(at) -> None:
    assert not at.exception, [e.value for e in at.exception]


@pytest.mark.slow
def test_page_opens_a_store_sorts_filters_opens_a_trace_and_saves_an_annotation(gsm8k_trace_run, tmp_path):
    store = TraceStore(shutil.copytree(gsm8k_trace_run[0], tmp_path / "store"))
    frame = store.traces()
    at = _app().run()
    at.switch_page("pages/traces.py").run()
    _no_exception(at)
    at.text_input(key="tr_store_path").input(str(store.path))
    at.button(key="tr_open_store").click().run()
    _no_exception(at)
    table = at.dataframe(key="tr_table").value
    assert len(table) == 6
    # default: the step verifier's highest step probability where it ran, else GRADE_pos; descending
    from studio.traces import verifier_peak

    peaks = verifier_peak(frame)
    expected = sorted(peaks, reverse=True) if peaks.notna().any() else sorted(frame["grade_pos"], reverse=True)
    assert (table["verifier P"] if peaks.notna().any() else table["GRADE_pos"]).tolist() == expected

    at.selectbox(key="tr_sort").set_value("steps").run()
    at.toggle(key="tr_desc").set_value(False).run()
    table = at.dataframe(key="tr_table").value
    assert table["steps"].tolist() == sorted(frame["n_steps"])
    at.multiselect(key="tr_correct").set_value(["wrong"]).run()
    table = at.dataframe(key="tr_table").value
    assert set(table["correctness"]) == {"wrong"} and len(table) == int((frame["correct"] == False).sum())  # noqa: E712
    assert at.selectbox(key="tr_open").options == [f"{t} · wrong · GRADE_pos {g:.4f}"
                                                   for t, g in zip(table["trace"], table["GRADE_pos"])]

    chosen = table["trace"].iloc[-1]
    row = frame.set_index("trace_id").loc[chosen]
    at.selectbox(key="tr_open").set_value(chosen).run()
    _no_exception(at)
    at.radio(key="tr_colour").set_value("epistemic shock (heatmap)").run()  # (the verifier's colouring comes first)
    metrics = {m.label: m.value for m in at.metric}
    assert metrics["GRADE_pos"] == f"{row['grade_pos']:.4f}" and int(metrics["Steps"]) == row["n_steps"]
    heatmaps = [h.proto.body for h in at.get("html") if 'title="shock' in h.proto.body]
    assert len(heatmaps) == 1 and heatmaps[0].count('title="shock') == row["n_tokens"]  # one span per token
    assert len(at.get("plotly_chart")) == 2  # per-step ratio and the step x layer heatmap

    suffix = chosen.replace(":", "_")
    at.selectbox(key=f"tr_error_step_{suffix}").set_value(2)
    at.selectbox(key=f"tr_error_kind_{suffix}").set_value("wrong operation")
    at.text_input(key=f"tr_note_{suffix}").input("multiplies the wrong numbers")
    next(b for b in at.button if b.label == "Save annotation").click().run()
    _no_exception(at)
    assert any(s.value.startswith("Your mark, saved") and "**step 2**" in s.value for s in at.success)
    assert store.annotations()[chosen]["error_step"] == 2
    assert store.annotations()[chosen]["note"] == "multiplies the wrong numbers"
    from grade.common.display import kind_title

    assert at.dataframe(key="tr_table").value.set_index("trace").loc[chosen, "error kind"] == kind_title("wrong operation")
    assert {b.proto.label for b in at.get("download_button")} >= {"Annotations (CSV)", "Annotations (JSONL)"}


@pytest.mark.slow
def test_page_analyses_a_samples_file_in_the_background(tmp_path, monkeypatch):
    import studio.traces

    monkeypatch.setattr(studio.traces, "stores_dir", lambda: tmp_path / "stores")
    gold = [r for r in lines(GSM8K) if r["filter"] == "strict-match"][4:6]  # two short worked solutions
    samples = write_jsonl(tmp_path / "samples_gsm8k_2025-01-01T00-00-00.jsonl", gold)
    at = _app().run()
    at.switch_page("pages/traces.py").run()
    at.text_input(key="tr_samples_path").input(str(samples)).run()
    _no_exception(at)
    assert any("2 traces (lm-eval, task gsm8k)" in c.value for c in at.caption), [c.value for c in at.caption]
    at.button(key="tr_analyse").click().run()
    _no_exception(at)
    job = at.session_state["tr_job"]
    assert not job.finished  # the script run returned at once: the analysis goes on in its thread
    at.switch_page("pages/spectra.py").run()
    _no_exception(at)
    assert job.wait(timeout=600) and job.error is None, job.status_line()
    at.switch_page("pages/traces.py").run()
    _no_exception(at)
    assert len(at.dataframe(key="tr_table").value) == 2
    assert any(s.value.startswith("Finished: 2 traces analysed") for s in at.success), [s.value for s in at.success]
    assert list((tmp_path / "stores").glob("*/*/meta.json"))


@pytest.mark.slow
def test_page_opens_on_the_demo_store_with_the_suspect_step_and_its_measured_accuracy(tmp_path, monkeypatch):
    """A first visit shows something: the shipped demo store (Qwen's traces, analysed ahead of time; no model needed to
    read it), the suspect step beside the peak step, and how often each view finds the wrong step."""
    import studio.traces

    monkeypatch.setattr(studio.traces, "stores_dir", lambda: tmp_path / "stores")
    at = _app().run()
    at.switch_page("pages/traces.py").run()
    _no_exception(at)
    table = at.dataframe(key="tr_table").value
    demo = TraceStore(tmp_path / "stores" / "demo" / "qwen2.5-coder-1.5b-instruct").traces()
    assert len(table) == len(demo) >= 10 and "suspect step" in table and "check flags" in table
    shown = table.set_index("trace")["suspect step"]
    assert all(int(shown[t]) == int(s) for t, s in zip(demo["trace_id"], demo["suspect_step"]))
    captions = " ".join(c.value for c in at.caption)
    assert "demo store" in captions and "chance" in captions and "Measured top-1" in captions
    suspect = {m.label: m.value for m in at.metric}["Suspect step"]
    opened = demo.set_index("trace_id").loc[at.selectbox(key="tr_open").value]
    assert int(suspect) == int(opened["suspect_step"])
    assert any("Suspect step." in m.value for m in at.markdown), "the aggregates' suspect-step line is missing"
    at.radio(key="tr_colour").set_value("token surprisal (heatmap)").run()
    _no_exception(at)
    assert any('title="surprisal' in h.proto.body for h in at.get("html"))
    # annotations go into the writable copy, never into the package
    import re

    chosen = at.selectbox(key="tr_open").value
    suffix = re.sub(r"[^A-Za-z0-9_]", "_", chosen)  # the page's per-trace key suffix
    at.selectbox(key=f"tr_error_step_{suffix}").set_value(1)
    next(b for b in at.button if b.label == "Save annotation").click().run()
    _no_exception(at)
    assert TraceStore(tmp_path / "stores" / "demo" / "qwen2.5-coder-1.5b-instruct").annotations()[chosen]["error_step"] == 1


def test_the_demo_stores_traces_are_test_split_rows_wrong_and_correct_with_the_readers_step_one_based():
    """scripts/build/build_demo_traces.py's choice from grade/datasets/real_step_errors, and its refusal of steps that are
    not the reader's (the analysis itself needs the model: run the script)."""
    import importlib.util

    import pandas as pd

    from grade.gradients.losses import split_steps

    spec = importlib.util.spec_from_file_location("build_demo_traces", ROOT / "scripts" / "build" / "build_demo_traces.py")
    build = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(build)
    rows = build.chosen_rows("qwen2.5-coder-1.5b-instruct", 8, 8)
    assert len(rows) == 16 and {r["split"] for r in rows} == {"test"}
    lines = [build.trace_line(r) for r in rows]
    assert [line["correct"] for line in lines] == [False] * 8 + [True] * 8
    for r, line in zip(rows, lines):
        assert len(split_steps(r["trace"])) == r["n_steps"]
        if r["first_wrong_step"] is None:
            assert line["error_step"] is None
        else:
            start, end = split_steps(r["trace"])[line["error_step"] - 1]
            assert r["trace"][start:end].strip() == r["first_wrong_text"].strip()
    texts = [[r["trace"][a:b] for a, b in split_steps(r["trace"])] for r in rows]
    frame = pd.DataFrame({"doc_id": [r["id"] for r in rows], "n_steps": [r["n_steps"] for r in rows], "step_texts": texts})
    build.check_steps(frame, rows)  # the reader's own steps pass
    frame.at[0, "step_texts"] = ["x"] * rows[0]["n_steps"]
    with pytest.raises(SystemExit, match=rows[0]["id"]):
        build.check_steps(frame, rows)


def test_a_demo_copy_made_from_an_older_shipped_store_is_made_again_keeping_annotations(tmp_path, monkeypatch):
    """A copy of the demo store made before the package shipped a new one (a new verifier's columns, say) would show
    the old rows forever: it is replaced by the shipped rows, and the analyst's annotations in it stay."""
    import studio.traces

    monkeypatch.setattr(studio.traces, "stores_dir", lambda: tmp_path / "stores")
    copy = studio.traces.demo_store("qwen2.5-coder-1.5b-instruct")
    store = TraceStore(copy)
    shipped = store.traces()
    first = shipped["trace_id"].iloc[0]
    store.annotate(first, error_step=2, kind="other", note="mine")
    # an older copy: another build time, and a stale part beside the current ones
    meta = json.loads((copy / "meta.json").read_text())
    (copy / "meta.json").write_text(json.dumps({**meta, "created": "2000-01-01T00:00:00"}))
    import pyarrow as pa
    import pyarrow.parquet as pq

    part = next((copy / "traces").glob("part-*.parquet"))
    table = pq.read_table(part)
    column = table.schema.get_field_index("verifier_threshold")
    pq.write_table(table.set_column(column, table.schema.field(column), pa.array([0.87] * len(table))), part)
    assert (TraceStore(copy).traces()["verifier_threshold"] == 0.87).all()  # the premise: the old copy's rows
    again = studio.traces.demo_store("qwen2.5-coder-1.5b-instruct")
    assert again == copy
    fresh = TraceStore(copy).traces()
    assert len(fresh) == len(shipped)
    assert list(fresh["verifier_threshold"]) == list(shipped["verifier_threshold"])
    assert TraceStore(copy).annotations()[first]["note"] == "mine"


@pytest.mark.slow
def test_verifier_only_triages_a_run_and_fill_grade_adds_the_analysis_later(tmp_path, capsys):
    """``--verifier-only`` on the lm-eval fixture: every trace read by the verifier and the check, no GRADE columns
    and no token rows, listed most suspect first; ``--fill-grade --limit 2`` analyses two of them, their verdicts
    unchanged, the others still pending; the aggregates count only the analysed ones."""
    import torch

    from grade.commands.traces import triage_rows
    from grade.traces.analysis import GRADE_COLUMNS, grade_pending

    threads = torch.get_num_threads()
    out = tmp_path / "triage"
    try:
        code = main(["traces", "--samples", str(GSM8K), "--out", str(out), "--verifier-only", "--json", "--quiet",
                     "--threads", "1", "--model", "smollm2-135m-instruct"])
        assert code == 0
        printed = json.loads(capsys.readouterr().out)
        store = TraceStore(out)
        frame = store.traces().set_index("trace_id")
        expected = file_correctness(GSM8K, "strict-match")
        assert printed["n"] == len(frame) == len(expected) and len(store.tokens()) == 0
        assert grade_pending(frame).all() and frame[list(GRADE_COLUMNS)].isna().all().all()
        assert frame["verifier_reader"].eq("smollm2-135m-instruct").all()
        assert {str(t["doc_id"]): t["correct"] for t in printed["traces"]} == expected
        highest = [t["max_probability"] for t in printed["traces"]]
        assert highest == sorted(highest, reverse=True)
        for t in printed["traces"]:
            row = frame.loc[f"{t['doc_id']}:{t['sample']}"]
            assert len(t["verifier"]["step_probability"]) == row["n_steps"] == len(row["step_texts"])
            assert len(row["step_check"]) == len(row["step_findings"]) == row["n_steps"]
            if t["correct"] is False:  # the run graded it wrong: some step is wrong, the most suspect one named
                assert t["verifier"]["suspect_step"] is not None

        code = main(["traces", "--samples", str(GSM8K), "--out", str(out), "--fill-grade", "--limit", "2", "--json",
                     "--quiet", "--threads", "1", "--model", "smollm2-135m-instruct"])
        assert code == 0
        printed = json.loads(capsys.readouterr().out)
    finally:
        torch.set_num_threads(threads)
    filled = store.traces().set_index("trace_id")
    assert len(filled) == len(frame) and (~grade_pending(filled)).sum() == 2 == printed["n"]
    done = filled[~grade_pending(filled)]
    assert np.isfinite(done["grade_pos"]).all() and set(store.tokens()["trace_id"]) == set(done.index)
    for trace_id, row in done.iterrows():  # the same verdict as the triage's
        np.testing.assert_allclose(row["step_verifier_probability"], frame.loc[trace_id, "step_verifier_probability"],
                                   rtol=1e-5)
    assert len(triage_rows(store.traces())) == len(frame)
