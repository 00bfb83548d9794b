"""Every mistake a user can make on the command line ends with one ``error:`` line and exit status 2.

The listed cases are the bad inputs that once gave a traceback, ran without limit or gave a silently
wrong result; the property tests (hypothesis) drive every subcommand in-process with generated
arguments and JSONL rows. All argument checks happen before a model is loaded: the loader is
replaced by one that stops the command (``ModelWouldLoad``), so these tests need no model, except
the few marked ``slow`` that run the embedded one on the rows that pass validation.
"""

from __future__ import annotations

import atexit
import contextlib
import functools
import hashlib
import io
import json
import os
import shutil
import tempfile
from pathlib import Path
from unittest import mock

import numpy as np
import pandas as pd
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from grade.commands.cli import main
from grade.verdict.probe import SHIPPED_REFERENCE_FEATURES

torch.set_num_threads(1)
REFERENCE = SHIPPED_REFERENCE_FEATURES
BAD_BYTES = os.fsdecode(b"caf\xe9 \xff?")  # how Python hands undecodable argv bytes to us


class ModelWouldLoad(BaseException):
    """Raised instead of loading a model: every check before it has passed."""


def _refuse_to_load(*args, **kwargs):
    raise ModelWouldLoad


def run_cli(argv: list[str], *, model=None) -> tuple[int | str, str, str]:
    """``python -m grade ARGV`` in this process: (exit status or "model", stdout, stderr).

    ``model``: a loaded model the commands get instead of loading one; None stops them there.
    """
    out, err = io.StringIO(), io.StringIO()
    loader = (lambda *a, **k: model) if model is not None else _refuse_to_load
    with mock.patch("grade.models.models.load_model", loader), mock.patch("grade.batch.ray_backend.connect", _refuse_to_load), \
            contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            status: int | str = main(argv)
        except SystemExit as exc:
            status = exc.code if isinstance(exc.code, int) else 2
        except ModelWouldLoad:
            status = "model"
    return status, out.getvalue(), err.getvalue()


def assert_one_error(result, *patterns: str) -> str:
    """Exit status 2, exactly one ``error:`` line on stderr, no traceback; returns that line."""
    status, _, err = result
    lines = [line for line in err.splitlines() if line.startswith("error:")]
    assert status == 2, (status, err)
    assert len(lines) == 1 and "Traceback" not in err, err
    for pattern in patterns:
        assert pattern in lines[0], (pattern, lines[0])
    return lines[0]


def write_jsonl(path: Path, rows) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


# ------------------------------------------------------------------------------------------ fixtures


@pytest.fixture(scope="module")
def logreg_probe(tmp_path_factory) -> Path:
    """A logistic-regression probe for the embedded model (30 layers), trained on synthetic ratios."""
    from grade.verdict.probe import Probe

    rng = np.random.default_rng(0)
    X = rng.normal(1.0, 0.1, size=(80, 30))
    y = (X[:, 0] > 1.0).astype(int)
    probe = Probe("logreg", seed=0).fit(X, y, info={"model": "smollm2-135m-instruct", "loss": "pre", "srank": "paper"})
    path = tmp_path_factory.mktemp("probe") / "lr"
    probe.save(path)
    return path


def probe_variant(source: Path, folder: Path, name: str, *, meta=None, tensors=None) -> Path:
    """A copy of a probe with its metadata and/or tensors changed (its checksum kept consistent)."""
    from safetensors.torch import load_file, save_file

    weights = load_file(str(source.with_suffix(".safetensors")))
    metadata = json.loads(source.with_suffix(".json").read_text())
    if tensors:
        tensors(weights)
    target = folder / name
    save_file(weights, str(target.with_suffix(".safetensors")), metadata={"format": "grade-probe", "kind": "logreg"})
    metadata["weights_sha256"] = hashlib.sha256(target.with_suffix(".safetensors").read_bytes()).hexdigest()
    if meta:
        meta(metadata)
    target.with_suffix(".json").write_text(json.dumps(metadata))
    return target


# -------------------------------------------------------------------------------- analyze


@pytest.mark.parametrize("argv, pattern", [
    (["--question", BAD_BYTES], "not valid UTF-8"),
    (["--question", "Who wrote Hamlet?", "--max-new-tokens", "0"], "--max-new-tokens"),
    (["--question", "Who wrote Hamlet?", "--max-new-tokens", "-5"], "--max-new-tokens"),
    (["--question", "Who wrote Hamlet?", "--task", "nonsense"], "--task"),
    (["--question", "Who wrote Hamlet?", "--device", "tpu9"], "--device"),
    (["--question", "Who wrote Hamlet?", "--max-tokens", "-1"], "--max-tokens"),
    (["--question", "Who wrote Hamlet?", "--dtype", "int3"], "--dtype"),
    (["--question", "Who wrote Hamlet?", "--loss", "pos", "--generate", "--max-new-tokens", "1000000000"],
     "--max-new-tokens 1000000000"),
    (["--question", "Who wrote Hamlet?", "--generate"], "--loss pos"),
    (["--question", "   "], "empty"),
])
def test_analyze_refuses_bad_arguments_before_loading_a_model(argv, pattern):
    assert_one_error(run_cli(["analyze", *argv]), pattern)


def test_analyze_refuses_a_save_path_it_could_not_write_before_the_analysis(tmp_path):
    line = assert_one_error(run_cli(["analyze", "--question", "q?", "--save", str(tmp_path / "nope" / "r.json")]))
    assert "does not exist" in line


def test_an_uncached_hub_id_fails_fast_when_offline(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")  # the real loader this time; it must not wait on the network
    out = io.StringIO()
    with contextlib.redirect_stderr(out), contextlib.redirect_stdout(io.StringIO()):
        status = main(["analyze", "--question", "q?", "--model", "nonexistent-org/nonexistent-model"])
    assert_one_error((status, "", out.getvalue()), "not in the local Hugging Face cache")


@pytest.mark.slow
def test_generation_is_bounded_by_the_context_before_it_starts(smollm):
    import grade
    from grade.common.errors import InputError
    from grade.models.generation import DecodeSettings, generate

    result = grade.analyze(smollm, "Count from one to one thousand.", loss="pos", generate=True,
                           max_new_tokens=10**9, max_tokens=80, spectra=False)
    assert len(result.input_ids) <= 80  # 10**9 asked for: only what the 80-token limit leaves was generated
    with pytest.raises(InputError, match="no room"):
        generate(smollm, [[1] * smollm.max_context], DecodeSettings(4))


def test_analyze_refuses_a_probe_it_cannot_use_before_loading_a_model(logreg_probe, tmp_path):
    """--probe: a missing file, a probe of another loss or model, and 'auto' for a model without a shipped
    probe each end in one error line before the model loads."""
    question = ["analyze", "--question", "Who wrote Hamlet?"]
    assert_one_error(run_cli([*question, "--probe", str(tmp_path / "missing")]), "does not exist")
    assert_one_error(run_cli([*question, "--probe", str(logreg_probe), "--loss", "pos", "--response", "Shakespeare"]),
                     "GRADE_pre features, not GRADE_pos")
    assert_one_error(run_cli([*question, "--probe", str(logreg_probe), "--model", "gemma-3-270m"]),
                     "trained on smollm2-135m-instruct, not gemma-3-270m")
    assert_one_error(run_cli([*question, "--probe", "auto", "--model", "nonexistent-org/nonexistent-model"]),
                     "no probe for nonexistent-org/nonexistent-model", "there are probes for")


@pytest.mark.slow
def test_analyze_gives_the_shipped_probes_verdict_as_the_app_does(smollm):
    """``--probe auto`` picks the probe Home picks for the model and task, and prints the verdict Home shows
    (same probability, probe and test AUROC), with the test metrics' chance rates, in text and in --json."""
    import grade
    from grade.verdict.probe import SHIPPED_PROBES_DIR, Probe
    from studio.resources import default_probe, list_probes, read_probe_info
    from studio.workflows import probe_verdict

    question = "What is the capital of France?"
    status, out, err = run_cli(["analyze", "--question", question, "--probe", "auto", "--json"], model=smollm)
    assert status == 0, err
    verdict = json.loads(out)["verdict"]
    info = default_probe(smollm.name, list_probes(), task="qa")
    assert info.path == SHIPPED_PROBES_DIR / "smollm2-135m-instruct-pre.safetensors"
    home = probe_verdict(Probe.load(info.path), info, smollm, grade.analyze(smollm, question, task="qa", loss="pre"))
    assert verdict["probe_name"] == home.probe_name == info.name
    assert verdict["probability"] == pytest.approx(home.probability, abs=1e-6)
    assert verdict["answerable"] == home.answerable and verdict["loss"] == "pre"
    test = info.test_metrics
    assert verdict["auroc"] == home.auroc == test["auroc"] and verdict["auroc_chance"] == 0.5
    assert verdict["accuracy"] == test["accuracy"] and verdict["n_test"] == test["n"]
    larger = max(test["positives"], test["n"] - test["positives"])
    assert verdict["accuracy_chance"] == pytest.approx(larger / test["n"])

    status, out, err = run_cli(["analyze", "--question", question, "--probe", str(info.path), "--fast"], model=smollm)
    assert status == 0, err
    last = out.strip().splitlines()[-1]
    assert last.startswith(f"probe {info.name} (loss pre): P(can answer) = {home.probability:.3f}")
    assert f"test AUROC {test['auroc']:.3f} (chance 0.50)" in last and f"{test['n']} test questions" in last
    assert read_probe_info(info.path).name == info.name


@pytest.mark.slow
def test_analyze_refuses_a_probe_of_another_depth_with_one_line(smollm, tmp_path):
    """A probe whose layer count is not the model's is found when the model is there: one error line."""
    from grade.verdict.probe import Probe

    rng = np.random.default_rng(0)
    X = rng.normal(1.0, 0.1, size=(60, 12))
    probe = Probe("logreg", seed=0).fit(X, (X[:, 0] > 1.0).astype(int),
                                        info={"model": "smollm2-135m-instruct", "loss": "pre", "srank": "paper"})
    probe.save(tmp_path / "shallow")
    assert_one_error(run_cli(["analyze", "--question", "Who wrote Hamlet?", "--fast", "--probe",
                              str(tmp_path / "shallow")], model=smollm), "expects 12 layers, the model has 30")


# -------------------------------------------------------------------------------- evaluate


@pytest.mark.parametrize("name, meta, tensors, pattern", [
    ("threshold", lambda m: m.update(threshold="abc"), None, "'threshold'"),
    ("seed", lambda m: m.update(seed=[1]), None, "'seed'"),
    ("model", lambda m: m.update(model=["x"]), None, "'model'"),
    ("nan", None, lambda w: w["coef"].fill_(float("nan")), "NaN"),
    ("zero_scale", None, lambda w: w["scaler_scale"].zero_(), "scale"),
])
def test_evaluate_refuses_a_broken_probe_before_loading_a_model(logreg_probe, tmp_path, name, meta, tensors, pattern):
    bad = probe_variant(logreg_probe, tmp_path, name, meta=meta, tensors=tensors)
    questions = write_jsonl(tmp_path / "q.jsonl", [{"id": "a", "question": "What is 2 + 2?", "label": 1}])
    assert_one_error(run_cli(["evaluate", "--probe", str(bad), "--questions", str(questions)]), pattern)


def test_evaluate_reaches_the_model_with_a_sound_probe(logreg_probe, tmp_path):
    questions = write_jsonl(tmp_path / "q.jsonl", [{"id": "a", "question": "What is 2 + 2?", "label": 1}])
    assert run_cli(["evaluate", "--probe", str(logreg_probe), "--questions", str(questions)])[0] == "model"


def test_evaluate_takes_a_probe_or_a_detector_not_both(logreg_probe, tmp_path):
    questions = write_jsonl(tmp_path / "q.jsonl", [{"id": "a", "question": "What is 2 + 2?", "label": 1}])
    assert_one_error(run_cli(["evaluate", "--probe", str(logreg_probe), "--detector", "p-entropy",
                              "--questions", str(questions)]), "not allowed with")
    assert_one_error(run_cli(["evaluate", "--questions", str(questions)]), "one of the arguments --probe --detector")


@pytest.mark.parametrize("argv, pattern", [
    (["--detector", "entropy-of-everything"], "unknown detector 'entropy-of-everything'"),
    (["--detector", "saplma", "--model", "some-org/some-model"], "no saplma detector for some-org/some-model"),
    (["--detector", "does/not/exist.json"], "does not exist"),
])
def test_evaluate_refuses_a_detector_it_cannot_use_before_loading_a_model(tmp_path, argv, pattern):
    questions = write_jsonl(tmp_path / "q.jsonl", [{"id": "a", "question": "What is 2 + 2?", "label": 1}])
    assert_one_error(run_cli(["evaluate", *argv, "--questions", str(questions)]), pattern)


def test_evaluate_refuses_a_detector_of_another_model_and_a_corrupt_one(tmp_path):
    from grade.verdict.detectors import detector_file

    questions = write_jsonl(tmp_path / "q.jsonl", [{"id": "a", "question": "What is 2 + 2?", "label": 1}])
    shipped = detector_file("gemma-3-270m", "p-entropy")
    assert_one_error(run_cli(["evaluate", "--detector", str(shipped), "--model", "smollm2-135m-instruct",
                              "--questions", str(questions)]), "trained on gemma-3-270m, not smollm2-135m-instruct")
    broken = tmp_path / shipped.name
    broken.write_bytes(shipped.read_bytes()[:-8])
    broken.with_suffix(".json").write_bytes(shipped.with_suffix(".json").read_bytes())
    assert_one_error(run_cli(["evaluate", "--detector", str(broken), "--questions", str(questions)]), "checksum")


@pytest.mark.slow
def test_evaluate_scores_a_detector_on_labelled_questions(smollm, tmp_path):
    """Six labelled TriviaQA rows of the embedded model (three it answers, three it does not): the same
    output as --probe, and the AUROC of the detector's own probabilities on each row's GRADE_pre loss."""
    import grade
    from grade.verdict.detectors import Detector, detector_file
    from grade.batch.features import read_labelled
    from grade.common.metrics import auroc

    rows = read_labelled(Path(__file__).resolve().parents[1] / "data/labels/smollm2-135m-instruct/triviaqa.jsonl.xz")
    six = [r for r in rows if r["label"] == 1][:3] + [r for r in rows if r["label"] == 0][:3]
    questions = write_jsonl(tmp_path / "six.jsonl", six)
    status, out, err = run_cli(["evaluate", "--detector", "prompt-entropy", "--questions", str(questions), "--json"],
                               model=smollm)
    assert status == 0, err
    result = json.loads(out)
    assert {k: result[k] for k in ("detector", "model", "statistic", "n", "positives", "skipped", "bad_rows")} == {
        "detector": "prompt-entropy", "model": smollm.name, "statistic": "loss_value", "n": 6, "positives": 3,
        "skipped": 0, "bad_rows": 0}
    detector = Detector.load(detector_file(smollm.name, "prompt-entropy"))
    loss = np.array([[grade.analyze(smollm, r["question"], task="qa", loss="pre").loss_value] for r in six])
    p = detector.predict_proba(loss, ["triviaqa"] * 6)[:, 1]
    assert result["auroc"] == pytest.approx(auroc([r["label"] for r in six], p))
    assert result["accuracy"] == pytest.approx(np.mean((p >= 0.5) == np.array([r["label"] for r in six])))
    status, text, _ = run_cli(["evaluate", "--detector", "prompt-entropy", "--questions", str(questions), "--limit", "2"],
                              model=smollm)
    assert status == 0 and text.startswith("detector prompt-entropy (Entropy after the prompt) on smollm2-135m-instruct")


# --------------------------------------------------------------------------------- extract


BAD_ROWS = {
    "question_number": {"id": "a", "question": 42, "label": 1},
    "question_list": {"id": "a", "question": ["what", "is"], "label": 1},
    "context_number": {"id": "a", "question": "What is 2 + 2?", "context": 5, "label": 1},
    "task_unknown": {"id": "a", "question": "What is 2 + 2?", "task": "nonsense", "label": 1},
    "choices_text": {"id": "a", "question": "Pick one", "choices": "abcd", "task": "mmlu", "label": 1},
    "label_three": {"id": "a", "question": "What is 2 + 2?", "label": 3},
    "surrogate": {"id": "a", "question": "What is \ud800?", "label": 1},
}


@pytest.mark.parametrize("case", sorted(BAD_ROWS))
def test_extract_names_a_bad_row_before_loading_a_model(tmp_path, case):
    labels = write_jsonl(tmp_path / "labels.jsonl", [BAD_ROWS[case]])
    assert_one_error(run_cli(["extract", "--labels", str(labels), "--out", str(tmp_path / "f")]), "labels.jsonl:1")


def test_extract_skips_bad_rows_and_goes_on(tmp_path):
    good = [{"id": f"g{i}", "question": f"What is {i} + {i}?", "label": i % 2} for i in range(3)]
    labels = tmp_path / "labels.jsonl"
    labels.write_bytes(b"".join(json.dumps(r).encode() + b"\n" for r in good[:2])
                       + b'{"id": "b", "question": "caf\xe9?", "label": 1}\n'
                       + json.dumps(BAD_ROWS["choices_text"]).encode() + b"\n"
                       + json.dumps(good[2]).encode() + b"\n")
    status, _, err = run_cli(["extract", "--labels", str(labels), "--out", str(tmp_path / "f")])
    assert status == "model"  # the three good rows go on to the analysis
    assert "labels.jsonl:3 not valid UTF-8" in err and "labels.jsonl:4 'choices'" in err


@pytest.mark.slow
def test_extract_with_a_bad_row_writes_the_good_ones(smollm, tmp_path):
    from grade.batch.features import load_features

    rows = [{"id": "g1", "question": "What is the capital of France?", "label": 1}, BAD_ROWS["question_number"],
            {"id": "g2", "question": "Who wrote Middlemarch?", "label": 0}]
    labels = write_jsonl(tmp_path / "labels.jsonl", rows)
    status, out, err = run_cli(["extract", "--labels", str(labels), "--out", str(tmp_path / "f"), "--quiet",
                                "--no-hidden"], model=smollm)
    assert status == 0, err
    assert sorted(load_features(tmp_path / "f")["id"]) == ["g1", "g2"]
    assert "1 bad input row(s) skipped" in out and "labels.jsonl:2" in err


# ----------------------------------------------------------------------------------- label


def test_label_refuses_bad_arguments_and_files_before_loading_a_model(tmp_path):
    dataset = write_jsonl(tmp_path / "qs.jsonl", [{"id": "a", "question": "What is 2 + 2?", "answers": ["4"]}])
    out = str(tmp_path / "labels.jsonl")
    for flag, value in (("--batch", "0"), ("--sample-chars", "-3"), ("--offset", "-1"), ("--max-new-tokens", "0"),
                        ("--samples", "0"), ("--threads", "0"), ("--workers", "0"), ("--gpus-per-worker", "nan")):
        assert_one_error(run_cli(["label", "--dataset", str(dataset), "--out", out, flag, value]), flag)
    bad = tmp_path / "bad.jsonl"
    bad.write_bytes(b'{"id": "a", "question": "caf\xe9?", "answers": ["x"]}\n')
    assert_one_error(run_cli(["label", "--dataset", str(bad), "--out", out]), "not valid UTF-8")
    assert_one_error(run_cli(["label", "--dataset", str(dataset), "--out", out, "--offset", "5"]), "--offset 5")
    assert run_cli(["label", "--dataset", str(dataset), "--out", out])[0] == "model"
    assert not Path(out).exists()


# ----------------------------------------------------------------------------------- train


def test_train_refuses_files_that_are_not_feature_sets(tmp_path):
    not_parquet = tmp_path / "x.parquet"
    not_parquet.write_text("hello, I am not Parquet\n")
    assert_one_error(run_cli(["train", "--features", str(not_parquet), "--out", str(tmp_path / "p")]), "Parquet")
    other = tmp_path / "other.parquet"
    pd.DataFrame({"a": [1, 2], "b": ["x", "y"]}).to_parquet(other)
    assert_one_error(run_cli(["train", "--features", str(other), "--out", str(tmp_path / "p")]), "rank_ratio")
    assert not list(tmp_path.glob("p.*"))


def test_train_refuses_a_set_too_small_to_split_before_writing(tmp_path):
    ref = pd.read_parquet(REFERENCE)
    ref = ref[(ref["model"] == "smollm2-135m-instruct") & (ref["loss"] == "pre")]
    two = tmp_path / "two.parquet"
    pd.concat([ref[ref["label"] == 1].head(1), ref[ref["label"] == 0].head(1)]).to_parquet(two)
    assert_one_error(run_cli(["train", "--features", str(two), "--out", str(tmp_path / "p")]), "too few")
    assert not list(tmp_path.glob("p.*"))  # nothing written


def test_train_refuses_bad_fractions_and_folders(tmp_path):
    for argv in (["--val-fraction", "nan"], ["--test-fraction", "1.5"], ["--max-per-class", "0"], ["--seed", "-1"],
                 ["--kind", "forest"]):
        assert_one_error(run_cli(["train", "--features", str(REFERENCE), "--out", str(tmp_path / "p"), *argv]))
    blocker = tmp_path / "file"
    blocker.write_text("")
    assert_one_error(run_cli(["train", "--features", str(REFERENCE), "--out", str(blocker / "sub" / "p")]), "cannot")
    assert_one_error(run_cli(["train", "--features", str(REFERENCE), "--out", str(tmp_path / "..")]), "names no probe")


# ------------------------------------------------------------------------- property-based tests

# argv cannot hold NUL bytes; everything else a shell can pass may come
QUESTION = st.sampled_from(["What is the capital of France?", "What is 7 + 5?", "Who wrote Middlemarch?"])
TEXT = st.one_of(QUESTION, QUESTION, st.text(st.characters(blacklist_characters="\x00", blacklist_categories=("Cs",)),
                                             max_size=24),
                 st.sampled_from(["", " ", BAD_BYTES, "-", "--help-me"]))
# valid values about half of the time: a run of checks is only tested where the earlier ones pass
NUMBER = st.one_of(st.integers(1, 64).map(str), st.integers(1, 8).map(str), st.integers(-3, 10**12).map(str),
                   st.sampled_from(["0", "abc", "1.5", "", "nan", "-0"]))
FRACTION = st.sampled_from(["0.15", "0.2", "0.3", "0", "0.5", "1", "-0.1", "nan", "inf", "x", "0.99"])
JSON_VALUE = st.recursive(
    st.none() | st.booleans() | st.integers(-5, 5) | st.floats(allow_nan=True, allow_infinity=True)
    | st.text(max_size=12) | st.sampled_from(["qa", "mmlu", "gsm8k", "What is 2 + 2?", "\ud800"]),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=4), inner, max_size=3),
    max_leaves=6,
)
ROW_KEYS = ["id", "question", "label", "context", "task", "choices", "dataset", "accuracy", "samples", "response",
            "majority", "answers", "solution", "extra", "correct"]
SHORT_TEXT = st.text(max_size=12)
PLAUSIBLE = {  # field values of the right type (and some of the wrong one), so that whole rows pass often
    "id": st.text(min_size=1, max_size=6) | st.integers(0, 99),
    "question": st.sampled_from(["What is 2 + 2?", "Who wrote Hamlet?", "", " "]) | SHORT_TEXT,
    "label": st.sampled_from([0, 1, 0, 1, 0, 1, None, 2, "1", True]),
    "context": st.none() | st.sampled_from(["Paris is the capital of France.", ""]),
    "task": st.sampled_from(["qa", "mmlu", "gsm8k", "math", "cot", "poetry", ""]),
    "choices": st.lists(st.sampled_from(["red", "blue", "green", "grey", ""]), max_size=5) | st.just("abcd"),
    "dataset": st.sampled_from(["facts", "", "x y"]),
    "accuracy": st.floats(-0.5, 1.5),
    "samples": st.lists(SHORT_TEXT, max_size=3),
    "response": st.none() | st.sampled_from(["Four.", "4"]),
    "answers": st.lists(st.sampled_from(["4", "A"]), min_size=1, max_size=2),
    "correct": st.sampled_from([0, 1, True, "yes", None]),
}
ROW = st.one_of(
    st.dictionaries(st.sampled_from(ROW_KEYS), JSON_VALUE, max_size=7),
    st.fixed_dictionaries({k: PLAUSIBLE[k] for k in ("id", "question", "label")}),
    st.fixed_dictionaries({k: PLAUSIBLE[k] for k in ("id", "question", "label")},
                          optional={k: st.one_of(PLAUSIBLE[k], PLAUSIBLE[k], JSON_VALUE)
                                    for k in PLAUSIBLE if k not in ("id", "question", "label")}),
    st.fixed_dictionaries({k: PLAUSIBLE[k] for k in ("id", "question", "label")}),
)
LINE = ROW.map(lambda r: json.dumps(r, allow_nan=True).encode()) | st.binary(max_size=24) | st.just(b"{not json")


def _command(draw, folder: Path) -> list[str]:
    lines = draw(st.lists(LINE, min_size=1, max_size=4))
    jsonl = folder / "rows.jsonl"
    jsonl.write_bytes(b"".join(line.replace(b"\n", b" ") + b"\n" for line in lines))
    parquet = folder / "f.parquet"
    frame = pd.read_parquet(REFERENCE)
    frame = frame[(frame["model"] == "smollm2-135m-instruct") & (frame["loss"] == "pre")]
    frame = frame.sample(n=draw(st.integers(0, 60)), random_state=0)
    frame = frame.drop(columns=draw(st.sets(st.sampled_from(list(frame.columns)), max_size=2)))
    frame.to_parquet(parquet)
    file = st.sampled_from([str(jsonl), str(parquet), str(folder / "missing.jsonl"), str(folder), BAD_BYTES])
    rows_file = st.one_of(st.just(str(jsonl)), st.just(str(jsonl)), file)
    features_file = st.one_of(st.just(str(parquet)), st.just(str(parquet)), file)
    model = st.sampled_from(["smollm2-135m-instruct", "nope", "/etc", str(folder / "m.gguf"), "org/name", ""])
    options = {
        "analyze": {"--question": TEXT, "--context": TEXT, "--task": TEXT | st.sampled_from(["qa", "gsm8k"]),
                    "--loss": st.sampled_from(["pre", "pos", "mid"]), "--response": TEXT, "--generate": None,
                    "--steps": None, "--srank": st.sampled_from(["paper", "sum", "x"]), "--max-new-tokens": NUMBER,
                    "--max-tokens": NUMBER, "--save": st.sampled_from([str(folder / "r.json"), str(folder / "no" / "r.json"),
                                                                        str(folder)]),
                    "--model": model, "--device": st.sampled_from(["cpu", "cuda:1", "tpu9", "CPU", ""]),
                    "--dtype": st.sampled_from(["float32", "bf16", "int3"]), "--json": None, "--fast": None,
                    "--probe": st.sampled_from([str(folder / "probe"), "auto", str(jsonl), str(folder / "none")])},
        "extract": {"--labels": rows_file, "--out": st.sampled_from([str(folder / "store"), str(folder / "store"), str(jsonl), "/proc/x/y"]),
                    "--loss": st.sampled_from(["pre", "pos", "pre", "x"]), "--chunk-size": NUMBER, "--limit": NUMBER,
                    "--threads": NUMBER, "--engine": st.sampled_from(["local", "ray", "local", "spark"]), "--workers": NUMBER,
                    "--gpus-per-worker": FRACTION, "--model": model, "--no-hidden": None},
        "label": {"--dataset": rows_file | st.sampled_from(["triviaqa", "facts_known", "nope"]),
                  "--out": st.sampled_from([str(folder / "l.jsonl"), str(folder), str(jsonl)]), "--limit": NUMBER,
                  "--offset": NUMBER, "--samples": NUMBER, "--matcher": st.sampled_from(["strict", "loose"]),
                  "--seed": NUMBER, "--max-new-tokens": NUMBER, "--batch": NUMBER, "--sample-chars": NUMBER,
                  "--threads": NUMBER, "--engine": st.sampled_from(["local", "ray"]), "--with-context": None},
        "train": {"--features": features_file, "--out": st.sampled_from([str(folder / "p"), str(folder / ".."), str(folder / "x" / "p")]),
                  "--kind": st.sampled_from(["logreg", "forest"]), "--seed": NUMBER, "--val-fraction": FRACTION,
                  "--test-fraction": FRACTION, "--max-per-class": NUMBER, "--json": None,
                  "--datasets": st.sampled_from(["facts_known", "nope"])},
        "traces": {"--samples": rows_file, "--dataset": st.sampled_from(["gsm8k", str(jsonl), "nope"]),
                   "--generate": NUMBER, "--task": st.sampled_from(["gsm8k", "math", "poetry"]), "--limit": NUMBER,
                   "--offset": NUMBER, "--seed": NUMBER, "--max-new-tokens": NUMBER, "--chunk-size": NUMBER,
                   "--threads": NUMBER, "--out": st.sampled_from([str(folder / "traces"), str(jsonl)]),
                   "--engine": st.sampled_from(["local", "ray"]), "--json": None, "--quiet": None},
        "evaluate": {"--probe": st.sampled_from([str(folder / "probe"), str(jsonl), str(folder / "none")]),
                     "--questions": rows_file, "--limit": NUMBER, "--threads": NUMBER, "--model": model, "--json": None},
    }
    command = draw(st.sampled_from(sorted(options)))
    argv = [command]
    required = {"analyze": ["--question"], "extract": ["--labels", "--out"], "label": ["--dataset", "--out"],
                "train": ["--features", "--out"], "evaluate": ["--probe", "--questions"], "traces": ["--out"]}[command]
    chosen = set(required) | draw(st.sets(st.sampled_from(sorted(options[command])), max_size=5))
    for flag in sorted(chosen):
        value = options[command][flag]
        argv.append(flag)
        if value is not None:
            argv.append(draw(value))
    return argv


@functools.cache
def _drawn_folders() -> Path:
    """One folder per test process for the generated commands' files, removed when the process ends: hypothesis
    draws examples it never runs (and the test removes only the folders of those it runs)."""
    root = Path(tempfile.mkdtemp(prefix="grade-cli-"))
    atexit.register(shutil.rmtree, root, ignore_errors=True)
    return root


@st.composite
def commands(draw):
    folder = Path(tempfile.mkdtemp(dir=_drawn_folders()))
    return folder, _command(draw, folder)


@settings(max_examples=120, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True)
@given(case=commands())
@pytest.mark.slow
def test_every_subcommand_ends_with_exit_0_or_one_error_line(case, logreg_probe):
    """Generated arguments and JSONL rows: the command either passes every check (and reaches the
    model load, stopped here, or finishes), or exits 2 with one ``error:`` line; never a traceback."""

    folder, argv = case
    for suffix in (".safetensors", ".json"):  # a sound probe at folder/probe
        shutil.copy(logreg_probe.with_suffix(suffix), folder / f"probe{suffix}")
    try:
        status, out, err = run_cli(argv)
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    assert "Traceback" not in err, (argv, err)
    if status in ("model", 0):
        return
    assert_one_error((status, out, err))


@pytest.mark.slow
@settings(max_examples=12, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True)
@given(lines=st.lists(LINE, min_size=1, max_size=3))
def test_generated_rows_that_pass_validation_are_analysed_without_a_traceback(lines, smollm):
    """The rows ``extract`` accepts go through the real model: exit 0 (bad rows skipped and counted),
    or exit 2 with one line when no row is usable."""
    folder = Path(tempfile.mkdtemp(prefix="grade-rows-"))
    try:
        labels = folder / "labels.jsonl"
        labels.write_bytes(b"".join(line.replace(b"\n", b" ") + b"\n" for line in lines))
        status, out, err = run_cli(["extract", "--labels", str(labels), "--out", str(folder / "f"), "--quiet",
                                    "--no-hidden"], model=smollm)
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    assert "Traceback" not in err and "internal error" not in err, err
    if status != 0:
        assert_one_error((status, out, err))
