"""Step-error localization: the arithmetic / provenance check, the locators' metrics, the benchmark's
injected errors, and ``grade traces`` / ``grade steperrors`` on real traces with the embedded model."""

from __future__ import annotations

import json
import lzma
import random
from importlib import resources

import numpy as np
import pytest

from grade.steps.locate import (DEFAULT_LOCATOR, LOCATORS, StepProbe, check_scores, localization_metrics, locate,
                          measured_accuracy, ranked_steps, step_signals)
from grade.gradients.losses import split_steps
from grade.steps.step_checks import check_step, check_steps, known_numbers, normalise
from grade.steps.step_errors import INJECTIONS, OWN_KIND, inject, injected_traces, own_slips, split_of

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
                             "--injected", "6", "--quiet")
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
