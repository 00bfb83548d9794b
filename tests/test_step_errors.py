"""Step-error localization: the arithmetic / provenance check, the locators' metrics, the benchmark's
injected errors, and ``grade traces`` / ``grade steperrors`` on real traces with the embedded model."""

from __future__ import annotations

import json
import lzma
import random
from importlib import resources
from pathlib import Path

import numpy as np
import pytest

from grade.steps.locate import (DEFAULT_LOCATOR, LOCATORS, StepProbe, check_scores, localization_metrics, locate,
                          measured_accuracy, ranked_steps, step_signals)
from grade.gradients.losses import split_steps
from grade.steps.step_checks import check_step, check_steps, known_numbers, normalise
from grade.steps.step_errors import INJECTIONS, OWN_KIND, inject, injected_traces, own_slips, split_of

ROOT = Path(__file__).resolve().parents[1]
QUESTION = ("Natalia sold clips to 48 of her friends in April, and then she sold half as many clips in May. "
            "How many clips did Natalia sell altogether in April and May?")
SOLUTION = "Natalia sold 48/2 = 24 clips in May.\nNatalia sold 48+24 = 72 clips altogether in April and May.\n#### 72"


def _gsm8k_rows(n: int | None = None) -> list[dict]:
    path = resources.files("grade") / "datasets" / "gsm8k" / "dev.jsonl.xz"
    with lzma.open(str(path), "rt") as handle:
        rows = [json.loads(line) for line in handle]
    return rows[:n]


def _cli(*args: str) -> tuple[int, str, str]:
    """``python -m grade ARGS`` in this process: (exit code, stdout, stderr)."""
    import contextlib
    import io

    from grade.commands.cli import main

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(list(args))
    return code, out.getvalue(), err.getvalue()


def _kinds(findings):
    return [[f.kind for f in step] for step in findings]


# ------------------------------------------------------------------------------------------- the check


def test_a_correct_solution_has_no_finding_and_a_slip_is_found_in_its_step():
    steps = [SOLUTION[a:b] for a, b in split_steps(SOLUTION)]
    assert _kinds(check_steps(QUESTION, steps)) == [[], [], []]
    wrong = [s.replace("48+24 = 72", "48+24 = 73") for s in steps]
    found = check_steps(QUESTION, wrong)
    assert _kinds(found)[:2] == [[], ["arithmetic"]]
    assert found[1][0].detail == "48 + 24 = 72, not 73"


@pytest.mark.parametrize("text", [
    r"\( \frac{3}{4} \times 40,000 = 30,000 \) feet",  # LaTeX fraction, times, thousands separators
    "He pays $1,200 * 0.15 = $180 in tax.",  # currency
    "5 hours * 60 minutes/hour = 300 minutes",  # unit words and a rate between the numbers
    "10/3 = 3.33 per person",  # stated to two decimals
    "100 - 53 = 47% voted for Marty.",  # a percentage stating the count of a hundred
    "   - 95 ÷ 5 = 19",  # a list bullet is not a minus sign
    "The class average is 4 dozen = 4 x 12 = 48.",  # a definition on the left is not checked
    "5x + 2 = 22",  # an equation with a variable is not arithmetic
    "It leaves at 7:50 + 30 minutes = 8:20 a.m.",  # clock times
    "20% of 50 = 10",
])
def test_correct_arithmetic_in_its_many_spellings_is_not_flagged(text):
    known = known_numbers("40,000 1,200 0.15 5 60 10 3 100 53 95 5 4 12 7:50 30 20% 50 dozen")
    assert [f for f in check_step(text, known) if f.kind == "arithmetic"] == []


@pytest.mark.parametrize("text, shown", [
    (r"\[ 14 + 7 = 22 \]", "14 + 7 = 21, not 22"),
    ("So she has 3 x 12 = 38 eggs.", "3 * 12 = 36, not 38"),
    (r"\( \frac{1}{2} \times 30 = 16 \)", "( ( 1 ) / ( 2 ) ) * 30 = 15, not 16"),
    ("The total is 12 + 18 = 30 = 31", "12 + 18 = 30, not 31"),
])
def test_arithmetic_slips_are_found_with_the_right_value(text, shown):
    details = [f.detail for f in check_step(text, known_numbers("14 7 3 12 30 18 half"))]
    assert shown.split(", not")[1] in " ".join(details) and any(d.startswith(shown.split(" =")[0]) for d in details)


def test_provenance_finds_a_number_that_comes_from_nowhere_and_accepts_words_and_earlier_steps():
    question = "Tom buys three dozen eggs at $2 each and eats twice as many as Ann, who eats 5."
    ok = ["Three dozen is 3 * 12 = 36 eggs.", "They cost 36 * 2 = 72 dollars.", "Tom eats 2 * 5 = 10 eggs."]
    assert _kinds(check_steps(question, ok)) == [[], [], []]
    misread = ["Three dozen is 3 * 12 = 36 eggs.", "They cost 36 * 7 = 252 dollars."]
    assert _kinds(check_steps(question, misread)) == [[], ["provenance"]]


def test_normalise_turns_latex_into_plain_arithmetic():
    assert normalise(r"\( \frac{3}{4} \times 40,000 \)").split() == ["((3)/(4))", "*", "40000"]
    assert normalise("$.10 each").split()[0] == "0.10"


def test_the_reference_solutions_of_the_dev_set_rarely_trip_the_arithmetic_check():
    """A false arithmetic finding in a correct solution would outrank a real slip later on."""
    rows = _gsm8k_rows(300)
    flagged = sum(any(f.kind == "arithmetic" for step in check_steps(r["question"], [r["solution"][a:b]
                  for a, b in split_steps(r["solution"])]) for f in step) for r in rows)
    assert flagged <= 6, flagged  # a handful of GSM8K solutions do hold real slips ("14*20=140")


# ------------------------------------------------------------------------------------------ locators


def _signals(n=4, check=None, surprisal=None):
    texts = [f"step {k}" for k in range(n)]
    ratios = np.ones((n, 3))
    signals = step_signals("q", texts, ratios, np.zeros(n), np.repeat(np.arange(1, n + 1), 2), np.zeros(2 * n),
                           np.repeat(surprisal if surprisal is not None else np.zeros(n), 2))
    if check is not None:
        signals.values["check"] = np.asarray(check, dtype=float)
    return signals


def test_the_default_locator_puts_the_first_arithmetic_finding_first_then_surprisal():
    findings = [[], [{"kind": "provenance"}], [], [{"kind": "arithmetic"}]]
    check = check_scores(findings)
    assert check[3] > check[1] > 0 and check[0] == check[2] == 0  # arithmetic above provenance
    early = check_scores([[{"kind": "arithmetic"}], [], [{"kind": "arithmetic"}]])
    assert early[0] > early[2]  # the first wrong step, not a later one
    signals = _signals(4, check=check, surprisal=np.array([0.1, 0.2, 9.0, 0.3]))
    assert ranked_steps(locate(signals, DEFAULT_LOCATOR)) == [4, 2, 3, 1]
    assert ranked_steps(locate(signals, "surprisal_max"))[0] == 3


def test_localization_metrics_count_ties_as_chance_and_give_the_chance_rate():
    flat = localization_metrics([(np.zeros(4), 2)] * 10, n_boot=50)
    assert flat["top1"]["value"] == pytest.approx(0.25) and flat["top1"]["chance"] == pytest.approx(0.25)
    assert flat["step_auroc"]["value"] == pytest.approx(0.5) and flat["top3"]["value"] == pytest.approx(0.75)
    perfect = localization_metrics([(np.array([0, 0, 1.0]), 3), (np.array([1.0, 0]), 1)], n_boot=50)
    assert perfect["top1"]["value"] == 1 and perfect["step_auroc"]["value"] == 1
    assert perfect["top1"]["low"] <= 1 <= perfect["top1"]["high"] + 1e-12
    wrong = localization_metrics([(np.array([1.0, 0, 0]), 3)], n_boot=10)
    assert wrong["top1"]["value"] == 0 and wrong["step_auroc"]["value"] == pytest.approx(0.25)  # ranked last, one tie


def test_the_step_probe_learns_a_planted_signal_and_round_trips_through_json():
    rng = np.random.default_rng(0)
    traces = []
    for _ in range(60):
        n = int(rng.integers(3, 8))
        error = int(rng.integers(1, n + 1))
        surprisal = rng.normal(size=n)
        surprisal[error - 1] += 3.0
        traces.append((_signals(n, surprisal=surprisal), rng.normal(size=(n, 3)), error))
    probe = StepProbe(grade=True).fit(traces[:40])
    scores = [(probe.score(s, r), e) for s, r, e in traces[40:]]
    assert localization_metrics(scores, n_boot=10)["top1"]["value"] > 0.8
    again = StepProbe.from_json(probe.to_json())
    np.testing.assert_allclose(again.score(*traces[41][:2]), probe.score(*traces[41][:2]))


def test_every_locator_scores_every_step():
    signals = _signals(5, surprisal=np.arange(5.0))
    for name in LOCATORS:
        assert locate(signals, name).shape == (5,)
    with pytest.raises(KeyError):
        locate(signals, "no such locator")


# ------------------------------------------------------------------------------------------ benchmark


@pytest.mark.parametrize("kind", INJECTIONS)
def test_each_injection_changes_the_solution_at_the_step_it_names(kind):
    rng = random.Random(0)
    made = 0
    for row in _gsm8k_rows(60):
        result = inject(row["question"], row["solution"], kind, rng)
        if result is None:
            continue
        text, step = result
        made += 1
        before = [row["solution"][a:b] for a, b in split_steps(row["solution"])]
        after = [text[a:b] for a, b in split_steps(text)]
        assert text != row["solution"] and 1 <= step <= len(after)
        assert after[: step - 1] == before[: step - 1]  # everything before the error step is untouched
        if kind == "dropped step":
            assert len(after) == len(before) - 1 and after[step - 1] == before[step]
        else:
            assert after[step - 1] != before[step - 1] and after[step:] == before[step:]
    assert made >= 10


def test_the_benchmark_splits_problems_not_traces_and_finds_the_checks_numbers():
    rows = _gsm8k_rows(200)
    traces = injected_traces(rows, limit=120)
    assert {t.error_kind for t in traces} == set(INJECTIONS)
    for trace in traces:
        assert trace.split == split_of(trace.doc_id.split(":")[0])
    assert 0.3 < np.mean([t.split == "train" for t in traces]) < 0.7
    by_kind = {}
    for t in traces:
        steps = [t.response[a:b] for a, b in split_steps(t.response)]
        top = ranked_steps(check_scores([[f.to_dict() for f in s] for s in check_steps(t.question, steps)]))[0]
        by_kind.setdefault(t.error_kind, []).append(top == t.error_step)
    # the check's own numbers on these problems (results/step_errors has them on the analysed set)
    assert np.mean(by_kind["result changed"]) > 0.9
    assert np.mean(by_kind["question number copied wrong"]) > 0.6
    assert np.mean(by_kind["wrong operation"]) < 0.5  # it flags the step that uses the wrong result instead


def test_own_slips_keep_only_traces_whose_steps_before_the_slip_stay_on_the_reference_path():
    row = {"id": "p1", "question": QUESTION, "label": 0, "answers": ["72"],
           "majority": "In May she sold 48 / 2 = 24 clips.\nIn total 48 + 24 = 73 clips.\n#### 73"}
    off_path = dict(row, id="p2", majority="In May she sold 48 / 3 = 16 clips.\nIn total 48 + 16 = 65 clips.\n#### 65")
    slips = own_slips([row, off_path], {"p1": SOLUTION, "p2": SOLUTION})
    assert [(s.doc_id, s.error_step, s.error_kind) for s in slips] == [("p1", 2, OWN_KIND)]


def test_the_shipped_qwen_results_state_chance_beside_every_number():
    results = measured_accuracy("qwen2.5-coder-1.5b-instruct")
    assert results is not None and "H100" in results["machine"]
    for group in ("injected: all", "own: all"):
        table = results["groups"][group]
        assert set(LOCATORS) <= set(table)
        for metrics in table.values():
            assert 0 < metrics["top1"]["chance"] < 1 and metrics["top1"]["low"] <= metrics["top1"]["value"] <= metrics["top1"]["high"]
    assert measured_accuracy("no-such-model") is None


# ------------------------------------------------------------------------------------- with the model


@pytest.mark.slow
def test_traces_command_puts_the_suspect_step_on_the_injected_slip(tmp_path):
    """The issue's check on a small scale: injected result slips and a misread number, read as a trace JSONL."""
    rows = _gsm8k_rows(40)
    rng = random.Random(1)
    traces = []
    for row in rows:
        for kind in ("result changed", "question number copied wrong"):
            made = inject(row["question"], row["solution"], kind, rng)
            if made and len(traces) < 4:
                traces.append({"doc_id": f"{row['id']}-{kind[:6]}", "question": row["question"], "response": made[0],
                               "correct": False, "error_step": made[1]})
    samples = tmp_path / "traces.jsonl"
    samples.write_text("".join(json.dumps(t) + "\n" for t in traces))
    code, out, err = _cli("traces", "--model", "smollm2-135m-instruct", "--samples", str(samples),
                             "--out", str(tmp_path / "store"), "--json", "--quiet")
    assert code == 0, err
    printed = {t["doc_id"]: t for t in json.loads(out)["traces"]}
    hits = [printed[t["doc_id"]]["suspect_step"] == t["error_step"] for t in traces]
    assert len(hits) == 4 and sum(hits) >= 3, (hits, printed)
    for t in traces:
        row = printed[t["doc_id"]]
        assert row["suspect_step_text"] == row["step_texts"][row["suspect_step"] - 1]


@pytest.mark.slow
def test_steperrors_command_builds_analyses_and_scores_a_small_benchmark(tmp_path):
    code, out, err = _cli("steperrors", "--model", "smollm2-135m-instruct", "--out", str(tmp_path),
                             "--injected", "4", "--quiet")
    assert code == 0, err
    results = json.loads((tmp_path / "results.json").read_text())
    assert results["model"] == "smollm2-135m-instruct"
    assert "injected: all" in results["groups"] and "Chance: top-1" in out
    table = results["groups"]["injected: all"]
    assert table[DEFAULT_LOCATOR]["n"] >= 2 and set(LOCATORS) <= set(table)
    # scoring the store alone gives the same numbers
    code, out2, err = _cli("steperrors", "--store", str(tmp_path / "store"), "--out", str(tmp_path / "again"))
    assert code == 0, err
    assert json.loads((tmp_path / "again" / "results.json").read_text())["groups"] == results["groups"]


def test_integer_doc_ids_of_a_trace_jsonl_come_back_as_integers(tmp_path):
    """A caller that wrote doc_id 7 looks up 7 in `grade traces --json`, not "7"."""
    from grade.traces import json_doc_id, read_traces

    numbered = tmp_path / "numbered.jsonl"
    numbered.write_text("".join(json.dumps({"doc_id": i, "question": QUESTION, "response": SOLUTION, "correct": True})
                                + "\n" for i in (7, 12)))
    source = read_traces(numbered)
    assert source.int_ids and source.describe()["int_ids"] is True
    assert [json_doc_id(item.doc_id, source.format, source.int_ids) for item in source.items] == [7, 12]
    named = tmp_path / "named.jsonl"
    named.write_text("".join(json.dumps({"doc_id": d, "question": QUESTION, "response": SOLUTION, "correct": True})
                             + "\n" for d in ("7", "gsm8k-test-3")))
    source = read_traces(named)
    assert not source.int_ids and "int_ids" not in source.describe()
    assert [json_doc_id(item.doc_id, source.format, source.int_ids) for item in source.items] == ["7", "gsm8k-test-3"]


# ------------------------------------------------------------------------------ one vocabulary of error kinds


def test_every_name_of_a_kind_reads_as_one_id_and_unknown_names_are_refused():
    from grade.steps.kinds import ERROR_KINDS, KIND_LABELS, canonical_kind, kind_label

    assert ERROR_KINDS[-1] == "other" and set(ERROR_KINDS) == set(KIND_LABELS)
    for kind in ERROR_KINDS:
        assert canonical_kind(kind) == kind and canonical_kind(KIND_LABELS[kind]) == kind
    # the store's first list and the injected errors' names
    assert [canonical_kind(k) for k in ("arithmetic slip", "misread question", "wrong operation", "unit error")] == [
        "calculation", "misread", "plan", "units"]
    assert {canonical_kind(k) for k in INJECTIONS} <= set(ERROR_KINDS) and canonical_kind(OWN_KIND) == "calculation"
    assert canonical_kind("  Misread   Question ") == "misread" and canonical_kind(None) is None
    assert kind_label("result changed") == "calculation slip"
    with pytest.raises(ValueError, match="unknown error kind"):
        canonical_kind("bad luck")


def test_every_annotation_file_names_its_kinds_in_the_vocabulary():
    from grade.steps.kinds import ERROR_KINDS
    from grade.steps.real_errors import annotated_traces

    kinds = {t.kind for t in annotated_traces() if t.first_wrong is not None}
    assert kinds and kinds <= set(ERROR_KINDS)


def test_a_written_reason_gets_a_kind_by_the_keyword_rules():
    from grade.steps.kinds import kind_from_reason

    assert kind_from_reason("The model misunderstood the question: the 5 apples are per day.") == "misread"
    assert kind_from_reason("Calculation error: 12 * 7 is 84, not 74.") == "calculation"
    assert kind_from_reason("It forgot to add the cost of the tickets.") == "double_count_or_omission"
    assert kind_from_reason("Minutes were not converted to hours.") == "units"
    assert kind_from_reason("Expanding (x+1)^2 drops the middle term 2x.", math=True) == "algebra"
    assert kind_from_reason("The approach is wrong: it should use the relative speed.") == "plan"
    assert kind_from_reason("") == "other"


# ------------------------------------------------------------------------------ external annotated traces


def _converter():
    import sys

    sys.path.insert(0, str(ROOT / "scripts" / "studies"))
    import external_step_errors

    return external_step_errors


def _check_rows(rows):
    from grade.gradients.losses import split_steps
    from grade.steps.scoring import step_paragraphs

    for r in rows:
        para = step_paragraphs(r["trace"])
        assert r["n_steps"] == len(split_steps(r["trace"])) == len(para)
        assert sorted(set(para.tolist())) == list(range(r["n_paragraphs"]))
        assert r["split"] in ("dev", "test") and r["split"] == _converter().split_of(r["problem"])
        if r["first_wrong_step"] is None:
            assert r["first_wrong_paragraph"] is None and r["kind"] is None
        else:  # the first of our steps that starts in the annotated paragraph
            k, p = r["first_wrong_step"], r["first_wrong_paragraph"]
            assert para[k] == p and (k == 0 or para[k - 1] < p)
            assert r["trace"].split("\n\n")[p].startswith(r["first_wrong_text"].strip()[:20])


def test_the_converter_on_records_in_both_sources_formats(tmp_path):
    """Two records of this test's own making, one per source format: steps become paragraphs without their
    "Step N:" label, the annotated step its first step, the reference solution a correct trace."""
    conv = _converter()
    (tmp_path / "mr" / "eval_results").mkdir(parents=True)
    record = {"uuid": "u-1", "question": "A pen costs 3 dollars. Tom buys 4 pens and pays with a 20 dollar bill. "
                                         "How much change does he get?",
              "ground_truth_solution": "4 pens cost 4*3 = <<4*3=12>>12 dollars.\nHis change is 20-12 = <<20-12=8>>8.\n#### 8",
              "ground_truth_answer": 8,
              "model_output_steps": ["Step 1: 4 pens cost 4 * 3 = 12 dollars.", "Step 2: His change is 20 - 12 = 9 dollars.",
                                     "Step 3: #### 9"],
              "model_output_answer_correctness": "wrong", "model_output_solution_correctness": "wrong",
              "model_output_solution_first_error_step": 2,
              "model_output_solution_first_error_reason": "Calculation error: 20 - 12 is 8.", "question_type": "original"}
    (tmp_path / "mr" / "eval_results" / "a.json").write_text(json.dumps([record, record]))
    rows, refs, counts = conv.mr_gsm8k_rows(tmp_path / "mr")
    assert counts["records"] == 1 and len(rows) == 1 and len(refs) == 1  # the same solution in two files: once
    row = rows[0]
    assert row["trace"] == "4 pens cost 4 * 3 = 12 dollars.\n\nHis change is 20 - 12 = 9 dollars.\n\n#### 9"
    assert (row["first_wrong_paragraph"], row["first_wrong_step"], row["kind"], row["final_correct"]) == (
        1, 1, "calculation", False)
    assert refs[0]["first_wrong_step"] is None and refs[0]["final_correct"] is True
    assert refs[0]["problem"] == row["problem"]  # one problem, one split
    _check_rows(rows + refs)

    (tmp_path / "ben" / "data").mkdir(parents=True)
    solution = {"Question_UUID": "q-1", "Subject": "high_school_math", "Question": "What is 2 + 2 * 3?",
                "Options": "A: 12\nB: 8\nC: 10\nD: 6", "Ground_Truth_Answer": "B", "Sampled_Model": "M",
                "Model_Solution_Steps": ["Step 1: First add: 2 + 2 = 4.", "Step 2: Then 4 * 3 = 12.",
                                         "Solution: Choice\\_A"],
                "Model_Solution_Correctness": "incorrect", "Model_Solution_First_Error_Step": "1",
                "Model_Solution_Error_Reason": ["Multiplication comes before addition; the approach is wrong."]}
    right = {**solution, "Sampled_Model": "N", "Model_Solution_Steps": ["Step 1: 2 * 3 = 6.", "Step 2: 2 + 6 = 8.",
                                                                        "Solution: Choice_B"],
             "Model_Solution_Correctness": "correct", "Model_Solution_First_Error_Step": "N/A",
             "Model_Solution_Error_Reason": []}
    (tmp_path / "ben" / "data" / "math.json").write_text(json.dumps({"q-1": [solution, right]}))
    rows, counts = conv.mr_ben_rows(tmp_path / "ben")
    assert counts["rows"] == 2 and [r["final_correct"] for r in rows] == [False, True]
    assert rows[0]["first_wrong_step"] == 0 and rows[0]["kind"] == "plan" and rows[1]["first_wrong_step"] is None
    assert rows[0]["question"].endswith("D: 6") and rows[0]["answers"] == ["B"]
    _check_rows(rows)
    # another subject is read only when asked for (--mr-ben-extra), into rows of its own source
    (tmp_path / "ben" / "data" / "physics.json").write_text(json.dumps({"q-2": [{**right, "Question_UUID": "q-2"}]}))
    assert len(conv.mr_ben_rows(tmp_path / "ben")[0]) == 2
    rows, _ = conv.mr_ben_rows(tmp_path / "ben", ("physics",))
    assert [(r["source"], r["problem"]) for r in rows] == [("Mr-Ben physics (human-annotated)", "mr-ben:q-2")]


def test_the_transfer_study_scores_its_levels_and_learns_from_other_subjects_only_when_asked():
    import sys

    sys.path.insert(0, str(ROOT / "scripts" / "studies"))
    import transfer_step_verifier as T

    assert not set(T.SCIENCE + T.BIOLOGY) & set(T.LEVELS)  # never a scored source
    others = [{"file": f} for f in ("gsm8k_qwen", "gsm8k_written", "mr_ben_physics", "mr_ben_chemistry", "mr_ben_biology")]
    pool = lambda sources: [r["file"] for r in T.training_pool(sources, [{"file": "mr_gsm8k"}], others)]  # noqa: E731
    assert pool(("own",)) == ["mr_gsm8k", "gsm8k_qwen"]
    assert pool(("own", "science")) == ["mr_gsm8k", "gsm8k_qwen", "mr_ben_physics", "mr_ben_chemistry"]
    assert pool(("own", "science", "biology"))[-1] == "mr_ben_biology"


def _external_source(name: str):
    import os
    from pathlib import Path

    where = os.environ.get("GRADE_STEP_ERRORS_SOURCES")
    base = Path(where) if where else ROOT.parent / "shared" / "datasets" / "step_errors"
    return base / name


def test_the_converter_on_the_fetched_mr_gsm8k():
    conv = _converter()
    source = _external_source("MR-GSM8K")
    if not source.exists():
        pytest.skip(f"MR-GSM8K is not at {source} (set GRADE_STEP_ERRORS_SOURCES to a folder holding a clone)")
    rows, refs, counts = conv.mr_gsm8k_rows(source)
    assert len(rows) >= 590 and counts["skipped"] == 0
    assert all(r["first_wrong_step"] is not None for r in rows if r["final_correct"] is False)
    _check_rows(rows[:80] + refs[:40])
    by_problem = {}
    for r in rows + refs:
        by_problem.setdefault(r["problem"], set()).add(r["split"])
    assert all(len(s) == 1 for s in by_problem.values())


def test_the_converter_on_the_fetched_mr_ben():
    conv = _converter()
    source = _external_source("Mr-Ben")
    if not source.exists():
        pytest.skip(f"Mr-Ben is not at {source} (set GRADE_STEP_ERRORS_SOURCES to a folder holding a clone)")
    rows, counts = conv.mr_ben_rows(source)
    assert counts["records"] == 918 and len(rows) >= 900
    assert 140 <= sum(r["first_wrong_step"] is None for r in rows) <= 149
    _check_rows(rows[:120])
