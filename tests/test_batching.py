"""The batched model passes give the one-at-a-time numbers (SmolLM2-135M on the CPU, float32), and the batch-size
rule (grade.models.sizing) sizes batches from the free memory and the model's shape."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from grade.batch.features import read_labelled
from grade.models.sizing import CPU_MAX_BATCH, MEMORY_SHARE, ModelShape, batch_size, bytes_per_token
from grade.common.errors import InputError

ROOT = Path(__file__).resolve().parents[1]
LABELS = ROOT / "data" / "labels" / "smollm2-135m-instruct"

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def _fact_rows(n: int) -> list[dict]:
    """``n`` labelled fact questions of each class (short answers: the tests stay fast)."""
    known = [r for r in read_labelled(LABELS / "facts_known.jsonl.xz") if r["label"] == 1][:n]
    unknown = [r for r in read_labelled(LABELS / "facts_unknown.jsonl.xz") if r["label"] == 0][:n]
    return [row for pair in zip(known, unknown) for row in pair]


@pytest.mark.slow
def test_the_rule_reads_the_models_shape_and_the_free_memory(smollm):
    shape = ModelShape.of(smollm)
    config = smollm.model.config
    assert (shape.layers, shape.d_model, shape.d_ff, shape.kv_heads, shape.vocab) == (
        config.num_hidden_layers, config.hidden_size, config.intermediate_size, config.num_key_value_heads,
        config.vocab_size)
    kv = 2 * shape.layers * shape.kv_heads * shape.head_dim * 4  # float32 on the CPU
    assert bytes_per_token(shape, "generate") == kv
    assert bytes_per_token(shape, "forward") > kv and bytes_per_token(shape, "grade") > bytes_per_token(shape, "forward")
    # what fits in the free memory, capped on a CPU; one row at least; the user's size over all of it
    per_row = 100 * kv + shape.vocab * 4 * 2
    assert batch_size(smollm, tokens=100, kind="generate", free_bytes=int(3.5 * per_row / MEMORY_SHARE)) == 3
    assert batch_size(smollm, tokens=100, kind="generate", free_bytes=10) == 1
    assert batch_size(smollm, tokens=100, kind="generate", free_bytes=1 << 40) == CPU_MAX_BATCH
    assert batch_size(smollm, tokens=100, kind="generate", rows_per_item=2,
                      free_bytes=int(7 * per_row / MEMORY_SHARE)) == 3  # two samples a question
    assert batch_size(smollm, tokens=100, kind="generate", rows_per_item=10, free_bytes=1 << 40) == 1  # CPU: rows
    assert batch_size(smollm, tokens=100, kind="grade", free_bytes=1 << 40, override=300) == 300
    with pytest.raises(InputError):
        batch_size(smollm, tokens=100, kind="grade", override=0)
    with pytest.raises(InputError):
        batch_size(smollm, tokens=100, kind="backward")


@pytest.mark.slow
def test_sampled_answers_do_not_depend_on_the_batch(smollm):
    """Each sample draws from its own seeded generator: batched sampling gives the samples of one at a time."""
    from grade.models.sampling import SamplingSettings, sample_generations
    from grade.tasks.prompts import format_prompt

    rows = _fact_rows(2)
    prompts = [format_prompt(smollm.tokenizer, r["question"]) for r in rows]
    ids = [r["id"] for r in rows]
    settings = SamplingSettings(n_samples=3, max_new_tokens=8)
    batched = sample_generations(smollm, prompts, ids, settings, questions_per_batch=len(rows))
    alone = sample_generations(smollm, prompts, ids, settings, one_at_a_time=True)
    assert [[g.token_ids for g in per] for per in batched] == [[g.token_ids for g in per] for per in alone]


@pytest.mark.slow
def test_p_entropy_batched_gives_the_one_at_a_time_scores_and_auroc(smollm):
    """``grade evaluate --detector p-entropy``'s statistics, batched and with --batch-size 1: the same values
    (float rounding), hence the same detector probabilities and AUROC."""
    from grade.common.metrics import binary_metrics
    from grade.verdict.detectors import Detector, labelled_statistics, resolve_detector

    rows = _fact_rows(3)
    batched, kept, skipped = labelled_statistics(smollm, rows, "p_entropy", batch_size=len(rows))
    alone, kept_alone, _ = labelled_statistics(smollm, rows, "p_entropy", batch_size=1)
    assert kept == kept_alone == list(range(len(rows))) and not skipped
    np.testing.assert_allclose(batched, alone, rtol=1e-4, atol=1e-4)
    detector = Detector.load(resolve_detector("p-entropy", smollm.name))
    kinds = [detector.kind_of(r.get("task") or "qa", bool(r.get("context")), str(r["dataset"]))[0] for r in rows]
    y = np.array([r["label"] for r in rows])
    p_batched = detector.predict_proba(batched, kinds)[:, 1]
    p_alone = detector.predict_proba(alone, kinds)[:, 1]
    np.testing.assert_allclose(p_batched, p_alone, atol=1e-5)
    assert binary_metrics(y, p_batched, roc=False)["auroc"] == binary_metrics(y, p_alone, roc=False)["auroc"]


@pytest.mark.slow
def test_answer_statistics_of_a_batch_are_those_of_the_cached_pass(smollm):
    """One pass over prompt + answer per row, left-padded, against the prompt pass then the answer pass from its
    cache (the app's path): the same P-Entropy, CoE and stored vectors."""
    from grade.models.generation import encode_prompt, generate, settings_for_task
    from grade.verdict.detectors.baselines import answer_statistics, answer_statistics_batch, decode_vector, task_prompt

    rows = _fact_rows(2)
    prompts = [encode_prompt(smollm.tokenizer, task_prompt(smollm, r)) for r in rows]
    answers = [g for (g,) in generate(smollm, prompts, settings_for_task("qa"))]
    batched = answer_statistics_batch(smollm, prompts, answers)
    for prompt, answer, record in zip(prompts, answers, batched):
        alone = answer_statistics(smollm, prompt, answer)
        assert record["greedy_answer"] == alone["greedy_answer"]
        for key in ("p_entropy", "coe_r", "coe_c"):
            assert record[key] == pytest.approx(alone[key], rel=1e-4, abs=1e-5), key
        np.testing.assert_allclose(decode_vector(record["saplma_hidden"]), decode_vector(alone["saplma_hidden"]),
                                   rtol=2e-3, atol=2e-3)
        assert record["align_hidden"].keys() == alone["align_hidden"].keys()


@pytest.mark.slow
def test_extract_batched_gives_the_one_at_a_time_features(smollm):
    """The GRADE_pre pass of many prompts at once (left-padded, one backward pass of the summed losses) gives each
    row's own features: rank ratios, loss and hidden states as one row at a time."""
    from grade.batch.features import features_of_rows

    rows = _fact_rows(2) + read_labelled(LABELS / "mmlu.jsonl.xz")[:1]  # prompts of different lengths
    rows.append({**rows[1], "id": "the same prompt again"})  # two rows of one length: one run of their spectra
    batched, skipped = features_of_rows(smollm, rows, keep_hidden=True, batch_size=len(rows))
    alone, _ = features_of_rows(smollm, rows, keep_hidden=True, batch_size=1)
    assert not skipped and list(batched.id) == list(alone.id) == [r["id"] for r in rows]
    assert list(batched.n_tokens) == list(alone.n_tokens) and 1 < len(set(batched.n_tokens)) < len(rows)
    np.testing.assert_allclose(np.stack(batched.rank_ratio), np.stack(alone.rank_ratio), rtol=1e-4)
    np.testing.assert_allclose(batched.loss_value, alone.loss_value, rtol=1e-5)
    np.testing.assert_allclose(np.stack([np.stack(h) for h in batched.hidden]),
                               np.stack([np.stack(h) for h in alone.hidden]), rtol=1e-3, atol=1e-3)


def test_a_bad_row_in_a_batch_is_skipped_alone(smollm):
    from grade.batch.features import features_of_rows

    rows = _fact_rows(1)
    rows.insert(1, {**rows[0], "id": "too-long", "question": "word " * 9000})
    frame, skipped = features_of_rows(smollm, rows, batch_size=3)
    assert list(frame.id) == [rows[0]["id"], rows[2]["id"]]
    assert [s[1] for s in skipped] == ["too-long"]


def test_the_benchmark_hands_its_batch_size_to_every_model_pass(smollm, tmp_path, monkeypatch):
    """``grade benchmark --batch-size N`` reaches the baselines' and the features' batched passes."""
    import grade.studies.benchmark as study
    from grade.commands.benchmark import config_from_args
    from grade.commands.cli import build_parser
    from grade.verdict.detectors.baselines import BaselineConfig

    args = build_parser().parse_args(["benchmark", "--model", "smollm2-135m-instruct", "--batch-size", "3",
                                      "--cache-dir", str(tmp_path)])
    config = config_from_args(args)
    assert config.batch_size == 3
    seen = []
    monkeypatch.setattr(study, "score_items", lambda *a, **k: seen.append(("baselines", k["batch_size"])))
    monkeypatch.setattr(study, "extract_features", lambda *a, **k: seen.append(("features", k["batch_size"])))
    model = study.LazyModel(lambda: smollm, offline=False)
    rows = [{"id": "q1", "question": "What is the capital of France?", "task": "qa", "answers": ["Paris"],
             "label": 1, "dataset": "triviaqa"}]
    study.ensure_baselines(model, tmp_path, config.model, "triviaqa", rows, [], "original", BaselineConfig(),
                           lambda line: None, config.batch_size)
    study.ensure_features(model, study.feature_store(tmp_path, config.model, "triviaqa", "original", "pre"), rows,
                          "original", "pre", None, lambda line: None, config.batch_size)
    assert seen == [("baselines", 3), ("features", 3)]


@pytest.mark.slow
def test_extract_pos_batched_gives_each_rows_own_analysis(smollm):
    """GRADE_pos of many rows at once: the given responses' cross-entropies in one left-padded pass and one backward
    pass, the responses to generate decoded together first, a step-wise row (GSM8K) alone. Every row's features
    and surprisal are those of ``analyze_row``, one row at a time, and a generated response is the one it gives."""
    from grade.batch.features import analyze_row, feature_rows, given_response

    rows = _fact_rows(2) + read_labelled(LABELS / "mmlu.jsonl.xz")[:1]
    for key in ("majority", "samples", "response"):  # no response of its own: the model's greedy answer is scored
        rows[1] = {k: v for k, v in rows[1].items() if k != key}
    rows[1] = {**rows[1], "id": "generated", "max_new_tokens": 12}
    # a short reasoning answer: step-wise, so analysed alone (one backward pass a step)
    rows.append(min(read_labelled(LABELS / "gsm8k.jsonl.xz")[:20], key=lambda r: len(given_response(r) or "x" * 9999)))
    rows.append({**rows[0], "id": "the same row again"})  # two rows of one length: one run of their spectra
    skipped: list = []
    batched = [record for _, record in feature_rows(smollm, rows, loss="pos", keep_hidden=True, skipped=skipped,
                                                    batch_size=len(rows))]
    assert not skipped and all(r is not None for r in batched)
    for row, record in zip(rows, batched):
        alone = analyze_row(smollm, row, loss="pos", keep_hidden=True)
        assert record["response"] == alone.response and record["n_tokens"] == len(alone.input_ids), row["id"]
        np.testing.assert_allclose(record["rank_ratio"], alone.rank_ratio, rtol=1e-4, err_msg=row["id"])
        assert record["loss_value"] == pytest.approx(alone.loss_value, rel=1e-5), row["id"]
        np.testing.assert_allclose(record["hidden"], alone.last_hidden, rtol=1e-3, atol=1e-3)
    assert rows[-2]["task"] == "gsm8k"


@pytest.mark.slow
def test_batched_pos_surprisal_is_each_rows_own(smollm):
    """The batched ``pos`` pass reads each response's token surprisal from its own positions (left padding moves
    them), with NaN over the prompt, as :func:`grade.analyze` does."""
    from grade import analyze
    from grade.gradients.analysis import analyze_batch

    requests = [{"question": "What is the capital of France?", "response": "Paris."},
                {"question": "Name a large planet of the solar system, please, in one word.",
                 "response": "Jupiter is the largest planet of the solar system."}]
    batched = analyze_batch(smollm, requests, loss="pos")
    for request, result in zip(requests, batched):
        alone = analyze(smollm, loss="pos", spectra=False, **request)
        assert result.response_start == alone.response_start
        np.testing.assert_allclose(result.token_surprisal, alone.token_surprisal, rtol=1e-4, atol=1e-5)
        assert np.isnan(result.token_surprisal[:result.response_start]).all()


def test_a_batched_command_says_when_its_precision_makes_the_batch_matter(capsys):
    """bfloat16 (a GPU's default) and float16 batches round rows differently from one at a time (measured on an
    H200: bench/results/gpu_batch/h200_evaluate_bf16_2026-11-29.md): the batched commands say so before they run."""
    from argparse import Namespace

    from grade.commands.engine import precision_note, say_precision_note

    assert precision_note("cpu", None, None) is None  # float32 on a CPU
    assert precision_note("cpu", "bfloat16", 1) is None  # one at a time
    assert precision_note("cuda", "float32", None) is None
    assert precision_note("cuda", None, None).startswith("note: bfloat16 batches")  # a GPU's default dtype
    for dtype in ("bfloat16", "float16"):
        note = precision_note("cpu", dtype, None)
        assert note.startswith(f"note: {dtype} batches") and "--dtype float32" in note and "--batch-size 1" in note
    say_precision_note(Namespace(device="cpu", dtype="bf16"), 16, quiet=False)
    say_precision_note(Namespace(device="cpu", dtype="bf16"), 16, quiet=True)
    err = capsys.readouterr().err
    assert err.count("note: bfloat16 batches") == 1 and len(err.splitlines()) == 1
