"""analyze(): losses, step-wise sharing, threads, save/load, and clear errors for bad input."""

import subprocess
import sys
import threading
from pathlib import Path

import numpy as np
import pytest
import torch

import grade
import grade.models.architectures
from grade.gradients.analysis import _forward, activation_grads, layer_features, prefix_passes_are_cheaper, srank_kinds
from grade.common.errors import InputError, ModelLoadError, NumericalError
from grade.gradients.losses import response_cross_entropy, split_steps

ROOT = Path(__file__).resolve().parents[1]
TRACE = "Tom has 3 boxes of 4 pens. That makes 3 * 4 = 12 pens. He gives away 5 pens. So he keeps 12 - 5 = 7 pens."


def test_split_steps_keeps_decimals_and_covers_text():
    text = "The price is 3.5 dollars. Two cost 7.0 dollars!\nSo the answer is 7."
    spans = split_steps(text)
    assert [text[a:b].strip() for a, b in spans] == ["The price is 3.5 dollars.", "Two cost 7.0 dollars!", "So the answer is 7."]
    assert spans[0][0] == 0 and spans[-1][1] == len(text)


def test_prefix_passes_are_chosen_only_where_they_cost_fewer_operations():
    # The bench's GSM8K trace (K = 8, 183 tokens) and MATH trace (K = 16, 707 tokens) on a CPU.
    short = [97, 110, 119, 131, 146, 158, 172, 183]
    long = [188, 208, 241, 268, 281, 317, 346, 359, 402, 427, 558, 592, 651, 660, 682, 707]
    assert not prefix_passes_are_cheaper("cpu", short, 183)
    assert prefix_passes_are_cheaper("cpu", long, 707)
    assert not prefix_passes_are_cheaper("cuda", long, 707)  # batched backward: sharing wins on a GPU


@pytest.mark.slow
@pytest.mark.parametrize("step_passes", ["shared", "prefix"])
def test_stepwise_shared_forward_equals_per_prefix_recompute(smollm, step_passes):
    result = grade.analyze(smollm, "Tom has 3 boxes of 4 pens and gives away 5. How many are left?", task="gsm8k",
                           loss="pos", response=TRACE, steps=True, step_passes=step_passes)
    assert len(result.steps) == 4
    assert result.steps[0].start == result.response_start and result.steps[-1].end == len(result.input_ids)
    kinds = srank_kinds("pos", "paper")
    for k in (0, 2):
        step = result.steps[k]
        prefix = result.input_ids[: step.end]
        with torch.enable_grad():
            capture, logits, _ = _forward(smollm, prefix, keep_hidden=False)
            loss = response_cross_entropy(logits, torch.tensor(prefix), step.start, step.end)
            deltas = activation_grads(loss, capture.outputs)
        _, _, ratio, _, _, rows = layer_features([h[0] for h in capture.hidden], [d[0] for d in deltas], kinds, True)
        np.testing.assert_allclose(step.rank_ratio, ratio, rtol=1e-4)
        np.testing.assert_allclose(step.token_scores, rows[:, step.start:], rtol=1e-3, atol=1e-9)
        assert step.loss_value == pytest.approx(float(loss.detach()), rel=1e-5)
    np.testing.assert_allclose(result.rank_ratio, np.mean([s.rank_ratio for s in result.steps], axis=0))
    assert np.isnan(result.token_scores[:, : result.response_start]).all()
    assert np.isfinite(result.token_scores[:, result.response_start:]).all()


@pytest.mark.slow
def test_both_step_routes_give_the_same_fast_features(smollm):
    question = "Tom has 3 boxes of 4 pens and gives away 5. How many are left?"
    shared, prefix = (grade.analyze(smollm, question, task="gsm8k", loss="pos", response=TRACE, steps=True,
                                    spectra=False, step_passes=route) for route in ("shared", "prefix"))
    assert [(s.start, s.end) for s in shared.steps] == [(s.start, s.end) for s in prefix.steps]
    np.testing.assert_allclose([s.rank_ratio for s in prefix.steps], [s.rank_ratio for s in shared.steps], rtol=1e-4)
    np.testing.assert_allclose([s.loss_value for s in prefix.steps], [s.loss_value for s in shared.steps], rtol=1e-5)
    assert shared.loss_value == pytest.approx(prefix.loss_value, rel=1e-5)
    with pytest.raises(InputError, match="step_passes"):
        grade.analyze(smollm, question, loss="pos", response=TRACE, steps=True, step_passes="fastest")


@pytest.mark.slow
def test_pos_generate_and_save_load_round_trip(smollm, tmp_path):
    result = grade.analyze(smollm, "What is the capital of Japan?", loss="pos", generate=True, max_new_tokens=12)
    assert result.response and result.response_start < len(result.input_ids)
    path = tmp_path / "result.json"
    result.save(path)
    loaded = grade.GradeResult.load(path)
    np.testing.assert_array_equal(loaded.rank_ratio, result.rank_ratio)
    np.testing.assert_array_equal(loaded.eig_g, result.eig_g)
    np.testing.assert_array_equal(np.isnan(loaded.token_scores), np.isnan(result.token_scores))
    assert loaded.input_ids == result.input_ids and loaded.response == result.response


@pytest.mark.slow
def test_two_threads_get_their_own_results(smollm):
    questions = ["Who painted the Mona Lisa?", "What is the largest planet in the solar system?"]
    expected = [grade.analyze(smollm, q).rank_ratio for q in questions]
    got: dict[int, np.ndarray] = {}

    def work(i):
        for _ in range(2):
            got[i] = grade.analyze(smollm, questions[i]).rank_ratio

    threads = [threading.Thread(target=work, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for i in range(2):
        np.testing.assert_allclose(got[i], expected[i], rtol=1e-6)


@pytest.mark.slow
def test_bad_inputs_raise_clear_errors(smollm, tmp_path):
    with pytest.raises(InputError, match="empty"):
        grade.analyze(smollm, "   ")
    with pytest.raises(InputError, match="characters"):
        grade.analyze(smollm, "word " * 5000)
    with pytest.raises(InputError, match="at most 64"):
        grade.analyze(smollm, "word " * 100, max_tokens=64)
    with pytest.raises(InputError, match="response"):
        grade.analyze(smollm, "What is 2 + 2?", loss="pos")
    with pytest.raises(ModelLoadError, match="unknown model"):
        grade.load_model("no-such-model")
    with pytest.raises(ModelLoadError, match="no config.json"):
        grade.load_model(str(tmp_path))


@pytest.mark.slow
def test_nan_weights_give_numerical_error(smollm):
    layer = grade.models.architectures.down_projections(smollm.model)[3]
    saved = layer.weight.data.clone()
    try:
        layer.weight.data[0, 0] = float("nan")
        with pytest.raises(NumericalError):
            grade.analyze(smollm, "Who wrote Hamlet?")
    finally:
        layer.weight.data.copy_(saved)


def run_cli(*args):
    return subprocess.run([sys.executable, "-m", "grade", *args], cwd=ROOT, capture_output=True, text=True, timeout=600)


@pytest.mark.slow
@pytest.mark.parametrize(
    "args, message",
    [
        (["--question", ""], "empty"),
        (["--question", "Who?", "--model", "no-such-model"], "unknown model"),
        (["--question", "Who?", "--model", "/nonexistent/folder/"], "neither a model folder"),
    ],
)
def test_cli_errors_are_one_line(args, message):
    proc = run_cli("analyze", *args)
    assert proc.returncode == 2
    lines = [line for line in proc.stderr.splitlines() if line.startswith("error:")]
    assert len(lines) == 1 and message in lines[0], proc.stderr
    assert "Traceback" not in proc.stderr


@pytest.mark.slow
def test_a_question_over_the_token_limit_is_one_error_line(smollm, capsys):
    """Found once the tokenizer has read it, in this process on the loaded model (the errors above are found before
    a model is loaded, through ``python -m grade``)."""
    from unittest import mock

    from grade.commands.cli import main

    with mock.patch("grade.models.models.load_model", lambda *a, **k: smollm):
        assert main(["analyze", "--question", "word " * 100, "--max-tokens", "64"]) == 2
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.startswith("error:")]
    assert len(lines) == 1 and "tokens" in lines[0] and "Traceback" not in err, err


@pytest.mark.parametrize("args", [["--question", " \u200b "], ["--question", "Who?", "--model", "no-such-model"],
                                  ["--question", "Who?", "--model", "/nonexistent/folder/"]])
def test_a_bad_question_or_model_is_refused_before_torchs_import(args):
    """A mistyped model or an empty question fails at once: the checks run before the command imports torch."""
    code = ("import sys; from grade.commands.cli import main; status = main(sys.argv[1:]); "
            "print(status, 'torch' in sys.modules)")
    proc = subprocess.run([sys.executable, "-c", code, "analyze", *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=120)
    assert proc.stdout.split() == ["2", "False"], (proc.stdout, proc.stderr)
    assert proc.stderr.startswith("error: ") and len(proc.stderr.strip().splitlines()) == 1, proc.stderr


@pytest.mark.slow
def test_cli_json_output(smollm, capsys):
    """``grade analyze --json``, run in this process on the loaded model (the errors above run ``python -m grade``)."""
    import json
    from unittest import mock

    from grade.commands.cli import main

    def analyze_json(*args):
        with mock.patch("grade.models.models.load_model", lambda *a, **k: smollm):
            assert main(["analyze", *args, "--json"]) == 0
        return json.loads(capsys.readouterr().out)

    data = analyze_json("--question", "What colour is the sky on a clear day?")
    assert data["model"] == "smollm2-135m-instruct" and data["loss"] == "pre"
    assert len(data["layers"]) == 30 and {"layer", "srank_h", "srank_g", "rank_ratio"} <= set(data["layers"][0])
    assert data["response_start"] is None and all(isinstance(i, int) for i in data["input_ids"])
    data = analyze_json("--question", "What is 3 + 4?", "--loss", "pos", "--response", "3 + 4 = 7.")
    assert 0 < data["response_start"] < len(data["input_ids"])


def test_batched_backward_failing_midway_falls_back_to_per_loss_passes(monkeypatch):
    """Regression: a batched VJP that raised after consuming the graph (an op without a batching rule,
    seen with Qwen2.5 on an H200) left the per-loss fallback with a freed graph."""
    x = torch.randn(5, 3, requires_grad=True)
    outputs = [torch.tanh(x * 2.0), torch.sin(x)]
    losses = torch.stack([(outputs[0] ** 2).sum() + outputs[1].sum(), (outputs[0] * outputs[1]).sum()])
    real_grad = torch.autograd.grad

    def grad_that_fails_when_batched(*args, **kwargs):
        result = real_grad(*args, **kwargs)  # the backward pass runs (and frees what it may) ...
        if kwargs.get("is_grads_batched"):
            raise RuntimeError("no batching rule")  # ... then the batching fails
        return result

    monkeypatch.setattr(torch.autograd, "grad", grad_that_fails_when_batched)
    deltas = activation_grads(losses, outputs, batched=True)
    monkeypatch.setattr(torch.autograd, "grad", real_grad)
    expected = activation_grads(losses, outputs, batched=False)
    for got, want in zip(deltas, expected):
        assert got.shape == (2, 5, 3)
        torch.testing.assert_close(got, want)
