"""Sampling and labelling with the embedded model: seeds, resume after a real interruption, CLI."""

import json

import pytest
import torch

from grade.common.errors import InputError
from grade.batch.labeling import label_questions, labelled_examples, read_records, settings_for, summarize
from grade.models.generation import candidates
from grade.models.sampling import SamplingSettings, sample_answers, sample_generations, sample_seed
from grade.tasks.tasks import load_questions

SMALL = dict(n_samples=3, max_new_tokens=5, matcher="lenient", seed=11, questions_per_batch=2)


class Stop(Exception):
    pass


@pytest.fixture(autouse=True, scope="module")
def one_thread():
    """One torch thread: on a small shared CPU, torch's default (all cores) is many times slower."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def test_nucleus_filter_is_generates_top_p():
    """Same kept tokens and probabilities as transformers' temperature + top-p warpers."""
    from transformers.generation.logits_process import TemperatureLogitsWarper, TopPLogitsWarper

    torch.manual_seed(0)
    for scale in (0.1, 1.0, 10.0):  # flat (full-vocabulary fallback), typical, peaked
        logits = torch.randn(4, 5000) * scale
        expected = TopPLogitsWarper(0.9)(None, TemperatureLogitsWarper(0.7)(None, logits.clone())).softmax(-1)
        got = torch.zeros_like(logits)
        for row, (ids, weights) in enumerate(candidates(logits, 0.7, 0.9, shortlist=64)):
            got[row, ids] = weights / weights.sum()
        assert ((got > 0) == (expected > 0)).float().mean() > 0.999
        torch.testing.assert_close(got, expected, atol=1e-5, rtol=1e-4)


def test_top_k_then_top_p_is_generates_warpers():
    """The baselines' rule: the same kept tokens and probabilities as transformers' temperature, top-k
    and top-p warpers applied in that order."""
    from transformers.generation.logits_process import TemperatureLogitsWarper, TopKLogitsWarper, TopPLogitsWarper

    torch.manual_seed(1)
    for scale in (0.1, 1.0, 10.0):
        logits = torch.randn(4, 5000) * scale
        warped = TemperatureLogitsWarper(0.5)(None, logits.clone())
        expected = TopPLogitsWarper(0.99)(None, TopKLogitsWarper(10)(None, warped)).softmax(-1)
        got = torch.zeros_like(logits)
        for row, (ids, weights) in enumerate(candidates(logits, 0.5, 0.99, top_k=10)):
            got[row, ids] = weights / weights.sum()
        assert ((got > 0) == (expected > 0)).all()
        torch.testing.assert_close(got, expected, atol=1e-5, rtol=1e-4)


def test_sample_seed_is_stable():
    assert sample_seed(0, "q1", 0) == sample_seed(0, "q1", 0)
    assert len({sample_seed(0, "q1", 0), sample_seed(1, "q1", 0), sample_seed(0, "q2", 0), sample_seed(0, "q1", 1)}) == 4
    assert sample_seed(0, "q1", 0) == 4377746542870233369  # fixed across machines and Python versions


@pytest.fixture(scope="module")
def facts():
    return load_questions("facts_known", limit=6)


@pytest.mark.slow
def test_samples_are_reproducible_and_independent_of_batch_neighbours(smollm, facts):
    prompts, ids = [q.prompt(smollm.tokenizer) for q in facts[:3]], [q.id for q in facts[:3]]
    settings = SamplingSettings(n_samples=4, max_new_tokens=6, seed=3)
    first = sample_answers(smollm, prompts, ids, settings)
    assert first == sample_answers(smollm, prompts, ids, settings)
    # a question's samples do not depend on which questions come before it
    assert sample_answers(smollm, prompts[2:], ids[2:], settings) == first[2:]
    other_seed = sample_answers(smollm, prompts, ids, SamplingSettings(n_samples=4, max_new_tokens=6, seed=4))
    assert other_seed != first
    assert all(len(s) == 4 and all(isinstance(t, str) for t in s) for s in first)
    # one sample at a time and several questions per batch draw the same samples (up to float rounding)
    single = sample_answers(smollm, prompts[:1], ids[:1], settings, one_at_a_time=True)
    assert sum(a == b for a, b in zip(first[0], single[0])) >= 3, (first[0], single[0])  # of 4
    grouped = sample_answers(smollm, prompts, ids, settings, questions_per_batch=3)
    assert sum(a == b for x, y in zip(first, grouped) for a, b in zip(x, y)) >= 10, (first, grouped)  # of 12


@pytest.mark.slow
def test_records_say_which_samples_stopped_at_the_token_limit(smollm, facts, tmp_path):
    """``cut_off`` is the decoder's own reason for stopping: at 12 tokens some of these answers end by
    themselves and some are cut, and the record flags exactly the cut ones."""
    questions = facts[:3]
    settings = settings_for(questions[0].spec, n_samples=3, seed=11, max_new_tokens=12)
    prompts, ids = [q.prompt(smollm.tokenizer) for q in questions], [q.id for q in questions]
    generations = sample_generations(smollm, prompts, ids, settings, questions_per_batch=3)
    assert [[g.text for g in per] for per in generations] == sample_answers(smollm, prompts, ids, settings,
                                                                            questions_per_batch=3)
    finishes = [[g.finish for g in per] for per in generations]
    assert {"length", "end_of_answer"} <= {f for per in finishes for f in per}, finishes  # both kinds, or no test
    for per in generations:
        for g in per:
            assert (g.finish == "length") == (len(g.token_ids) == 12 and g.finish != "stop_string")

    out = tmp_path / "labels.jsonl"
    label_questions(smollm, questions, out, n_samples=3, max_new_tokens=12, seed=11, questions_per_batch=3)
    records = read_records(out)
    assert [r["cut_off"] for r in records] == [[f == "length" for f in per] for per in finishes]
    assert [r["samples"] for r in records] == [[g.text for g in per] for per in generations]


@pytest.mark.slow
def test_interrupted_run_resumes_without_loss_or_duplicates(smollm, facts, tmp_path):
    clean = tmp_path / "clean.jsonl"
    label_questions(smollm, facts, clean, **SMALL)
    reference = {r["id"]: r for r in read_records(clean)}
    assert list(reference) == [q.id for q in facts]

    out = tmp_path / "labels.jsonl"
    seen = []

    def stop_after_three(done, total, record):
        seen.append((done, total, record["id"]))
        if done == 3:
            raise Stop

    with pytest.raises(Stop):
        label_questions(smollm, facts, out, progress=stop_after_three, **SMALL)
    assert [r["id"] for r in read_records(out)] == [q.id for q in facts[:3]]
    assert seen[-1] == (3, 6, facts[2].id)

    summary = label_questions(smollm, facts, out, **SMALL)
    assert (summary.new, summary.skipped, summary.total) == (3, 3, 6)
    records = read_records(out)
    assert [r["id"] for r in records] == [q.id for q in facts]  # nothing lost, nothing twice
    for record in records:  # and the resumed half is what an uninterrupted run writes
        assert record == reference[record["id"]]

    again = label_questions(smollm, facts, out, **SMALL)
    assert again.new == 0 and len(read_records(out)) == 6


@pytest.mark.slow
def test_truncated_last_line_is_dropped_and_redone(smollm, facts, tmp_path):
    clean = tmp_path / "clean.jsonl"
    label_questions(smollm, facts[:4], clean, **SMALL)
    lines = clean.read_text().splitlines(keepends=True)
    out = tmp_path / "cut.jsonl"
    out.write_text(lines[0] + lines[1] + lines[2][: len(lines[2]) // 2])  # killed in the middle of a write
    assert [r["id"] for r in read_records(out)] == [facts[0].id, facts[1].id]

    summary = label_questions(smollm, facts[:4], out, **SMALL)
    assert summary.new == 2
    assert out.read_text() == clean.read_text()


@pytest.mark.slow
def test_resume_refuses_other_settings(smollm, facts, tmp_path):
    out = tmp_path / "labels.jsonl"
    label_questions(smollm, facts[:1], out, **SMALL)
    with pytest.raises(InputError, match="matcher"):
        label_questions(smollm, facts[:2], out, **{**SMALL, "matcher": "strict"})
    with pytest.raises(InputError, match="samples"):
        label_questions(smollm, facts[:2], out, **{**SMALL, "n_samples": 4})
    with pytest.raises(InputError, match="tokens"):
        label_questions(smollm, facts[:2], out, **{**SMALL, "max_new_tokens": 6})


def test_corrupt_line_in_the_middle_is_an_error(tmp_path):
    path = tmp_path / "labels.jsonl"
    path.write_text('{"id": "a", "label": 1}\nnot json\n{"id": "b", "label": 0}\n')
    with pytest.raises(InputError, match="line 2"):
        read_records(path)


def test_complete_last_line_without_newline_is_kept(tmp_path):
    path = tmp_path / "labels.jsonl"
    path.write_text('{"id": "a", "label": 1}\n{"id": "b", "label": null}')
    assert [r["id"] for r in read_records(path, repair=True)] == ["a", "b"]
    assert path.read_text().endswith("}\n")
    assert [r["id"] for r in labelled_examples(path)] == ["a"]
    assert summarize(path).unlabelled == 1


@pytest.mark.slow
def test_record_fields_and_scores(smollm, tmp_path):
    questions = load_questions("with_document", limit=2, with_context=True)
    out = tmp_path / "doc.jsonl"
    label_questions(smollm, questions, out, n_samples=2, max_new_tokens=8, matcher="lenient", sample_chars=20)
    for q, record in zip(questions, read_records(out)):
        assert record["context"] == q.context and record["task"] == "qa" and record["dataset"] == "with_document"
        assert len(record["samples"]) == len(record["scores"]) == record["n_samples"] == 2
        assert all(len(s) <= 20 for s in record["samples"])
        assert record["accuracy"] == sum(record["scores"]) / 2
        assert record["label"] in (0, 1, None) and record["model"] == "smollm2-135m-instruct"


@pytest.mark.slow
def test_label_command_writes_and_resumes(tmp_path, capsys):
    from grade.commands.cli import main

    out = tmp_path / "cli.jsonl"
    argv = ["label", "--dataset", "facts_unknown", "--limit", "2", "--samples", "2", "--max-new-tokens", "4",
            "--matcher", "lenient", "--out", str(out), "--quiet", "--threads", "1"]
    assert main(argv) == 0
    assert "2 labelled now, 0 already there" in capsys.readouterr().out
    assert main(argv) == 0
    assert "0 labelled now, 2 already there" in capsys.readouterr().out
    assert [json.loads(line)["id"] for line in out.read_text().splitlines()] == [
        q.id for q in load_questions("facts_unknown", limit=2)
    ]
    assert main(["label", "--dataset", "nope", "--out", str(out)]) == 2  # one-line error, no traceback
