"""What Home decides about one answer, without a model: the answer length per question type, a multiple-choice
question's options, the gold-answer mark by the task's own grader, which verdicts a cut answer withholds, and a
question whose probe inputs lie outside the shipped bands."""

from __future__ import annotations

import json

import numpy as np
import pytest


def test_each_question_type_starts_at_its_labels_length_within_the_cap():
    from grade.tasks.registry import REGISTRY
    from grade.tasks.tasks import answer_format
    from studio.served import LOCAL_LIMITS, SERVED_LIMITS
    from studio.workflows import HOME_TASKS, home_answer_tokens, raised_answer_tokens

    assert "mmlu" in HOME_TASKS and set(HOME_TASKS) == set(REGISTRY)
    for task in HOME_TASKS:
        assert home_answer_tokens(task) == min(answer_format(task).max_new_tokens, LOCAL_LIMITS.answer_tokens)
    assert home_answer_tokens("gsm8k") == 256 and home_answer_tokens("qa") == 12
    assert home_answer_tokens("gsm8k", SERVED_LIMITS) == SERVED_LIMITS.answer_tokens
    assert raised_answer_tokens(8) == 16 and raised_answer_tokens(LOCAL_LIMITS.answer_tokens) is None
    assert raised_answer_tokens(LOCAL_LIMITS.answer_tokens - 1) == LOCAL_LIMITS.answer_tokens


def test_choices_are_read_one_per_line_and_asked_as_mmlus():
    from grade.common.errors import InputError
    from grade.tasks.prompts import user_message
    from studio.workflows import asked_text, parse_choices

    assert parse_choices("A. Mars\nB) Jupiter\n\n(c) Venus\nd - Earth") == ["Mars", "Jupiter", "Venus", "Earth"]
    assert parse_choices("1984\n2001") == ["1984", "2001"]  # a number is an option, not a marker
    for bad in ("", "one", "a\nb\nc\nd\ne"):
        with pytest.raises(InputError):
            parse_choices(bad)
    options = ["Mars", "Jupiter"]
    # the cache key's text is the prompt's own lettering of the options
    assert asked_text("Which is largest?", options).split("\n", 1)[1] in user_message(
        "Which is largest?", task="mmlu", choices=options)


@pytest.mark.parametrize("task, answer, gold, right", [
    ("qa", "The capital of France is Paris.", "Paris", True),
    ("qa", "London", "Paris", False),
    ("qa", "Lyon", "Paris | Lyon", True),
    ("mmlu", "B. Jupiter", "b", True),
    ("mmlu", "The answer is C", "B", False),
    ("gsm8k", "48 + 24 = 72 clips.\n#### 72", "72", True),
    ("gsm8k", "48 + 24 = 72 clips.\n#### 72", "71", False),
    ("math", "so the answer is \\boxed{\\frac{1}{2}}", "1/2", True),
])
def test_the_gold_box_marks_with_the_tasks_own_grader(task, answer, gold, right):
    from grade.tasks.registry import REGISTRY
    from studio.workflows import grade_answer

    assert grade_answer(task, answer, gold, ["Mars", "Jupiter", "Venus", "Earth"]) is right
    accepted = [g.strip().upper() if task == "mmlu" else g.strip() for g in gold.split("|")]
    assert REGISTRY[task].is_correct(answer, accepted, ["Mars", "Jupiter", "Venus", "Earth"], lenient=True) is right


def test_no_gold_answer_no_mark():
    from studio.workflows import grade_answer

    assert grade_answer("qa", "Paris", "") is None and grade_answer("qa", "Paris", " | ") is None
    assert grade_answer("cot", "anything", "x") is None  # a prompt style without a grader


def test_a_cut_answer_withholds_the_verdicts_that_read_it():
    from grade.verdict.detectors.specs import DETECTORS
    from grade.verdict.verdict import detector_reads_answer, withheld

    reads = {name for name in DETECTORS if detector_reads_answer(name)}
    assert reads and reads != set(DETECTORS), "P-Entropy and SAPLMA read the answer, the prompt's entropy does not"
    assert "cut off at 8 tokens" in withheld(reads_answer=True, cut_off=True, max_new_tokens=8)
    assert withheld(reads_answer=False, cut_off=True) is None
    assert withheld(reads_answer=True, cut_off=False) is None
    assert withheld(reads_answer=False, cut_off=False, in_range=False) is not None


def test_inputs_outside_every_question_the_probe_learned_from_get_no_percentage():
    from grade.verdict.probe_reading import SHIPPED_BANDS_DIR, InputBands
    from grade.verdict.verdict import Verdict

    for path in sorted(SHIPPED_BANDS_DIR.glob("*.json")):
        bands = InputBands.load(path)
        assert bands.outside_share_max is not None and 0 <= bands.outside_share_max < 1, path.name
        middle = (bands.median("answerable") + bands.median("unanswerable")) / 2
        assert bands.beyond(middle) is None
        quartiles = np.asarray([bands.quartiles[c] for c in bands.quartiles])
        far = quartiles[:, 2].max(axis=0) + 10 * (quartiles[:, 2].max(axis=0) - quartiles[:, 0].min(axis=0)) + 1
        assert bands.beyond(far) == (len(far), len(far))
    inside = Verdict(0.9, "p", 0.8, "pre", bands_checked=True)
    outside = Verdict(1.0, "p", 0.8, "pre", inputs_outside=8, inputs_total=57, bands_checked=True)
    unknown = Verdict(0.9, "p", 0.8, "pre")
    assert inside.in_range is True and unknown.in_range is None and outside.in_range is False
    assert outside.out_of_range_text().startswith("8 of the probe's 57 inputs") and inside.out_of_range_text() is None
    assert "no verdict" in outside.describe()


def test_bands_record_the_largest_share_outside_among_their_own_questions(tmp_path):
    from grade.verdict.probe_reading import InputBands

    rng = np.random.default_rng(0)
    X, y = rng.normal(size=(200, 3)), np.repeat([0, 1], 100)
    X[0] = [50, 0, 0]  # one question with one input far out
    bands = InputBands.fit(X, y, probe="p", weights_sha256="0", inputs="sranks_loss", n_layers=1)
    assert bands.outside_share_max == pytest.approx(1 / 3, abs=1e-6)
    again = InputBands.load(bands.save(tmp_path / "b.json"))
    assert again.outside_share_max == bands.outside_share_max
    old = json.loads((tmp_path / "b.json").read_text())
    old.pop("outside_share_max")
    (tmp_path / "old.json").write_text(json.dumps(old))
    assert InputBands.load(tmp_path / "old.json").beyond([1e9, 1e9, 1e9]) is None  # bands without it: not judged
