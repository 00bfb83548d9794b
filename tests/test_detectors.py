"""The detectors shown beside GRADE's verdict (:mod:`grade.verdict.detectors`): fitting on benchmark tables,
safetensors + JSON files checked on load, the shipped files, the kind of question a verdict is read for,
and the statistics a question gets in the app against those the benchmark stored."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import numpy as np
import pytest

from grade import studies as S
from grade.verdict.detectors import (
    DETECTORS,
    SHIPPED_DETECTORS_DIR,
    Detector,
    closest_kind,
    detector_file,
    detectors_for,
    disagreement,
    fit_detector,
)
from grade.common.errors import ProbeError

ROOT = Path(__file__).resolve().parents[1]
EMBEDDED = ("smollm2-135m-instruct", "gemma-3-270m", "qwen2.5-coder-1.5b-instruct")


def _table(name: str, task: str, with_document: bool, n: int = 100, seed: int = 0) -> S.Table:
    """A benchmark table whose three statistics carry the label, split by the benchmark's protocol."""
    rng = np.random.default_rng(seed)
    y = np.repeat([0, 1], n // 2)
    ids = np.array([f"{name}{i}" for i in range(n)], dtype=object)
    table = S.Table(name, "original", ids, y, S.assign_splits(list(ids), y, S.Protocol()))
    table.prompt_entropy = 3.0 - 2.5 * y + rng.normal(size=n)  # a model that knows is surer
    table.scores = {"P-Entropy": -20.0 + 8.0 * y + 3 * rng.normal(size=n)}
    table.saplma = (rng.normal(size=(n, 16)) + (y - 0.5)[:, None]).astype(np.float32)
    table.task = np.array([task] * n, dtype=object)
    table.has_context = np.array([with_document] * n)
    return table


@pytest.fixture(scope="module")
def tables():
    return {"trivia": _table("trivia", "qa", False), "documents": _table("documents", "qa", True, seed=1),
            "arithmetic": _table("arithmetic", "gsm8k", False, seed=2)}


@pytest.fixture(scope="module")
def saved(tables, tmp_path_factory):
    """Each detector fitted on the tables and saved: name -> (fitted detector, path)."""
    folder = tmp_path_factory.mktemp("detectors")
    out = {}
    for name in DETECTORS:
        detector = fit_detector(name, tables, model="smollm2-135m-instruct", n_boot=50,
                                training_data={"sources": ["synthetic"]})
        out[name] = (detector, detector.save(detector_file("smollm2-135m-instruct", name, folder))[0])
    return out


def test_fitting_measures_each_dataset_on_its_held_out_test_rows(saved, tables):
    for name, (detector, _) in saved.items():
        by_dataset = detector.metadata["metrics"]["test_by_dataset"]
        assert set(by_dataset) == set(tables)
        for dataset, table in tables.items():
            assert by_dataset[dataset]["n"] == len(table.rows("test"))
            assert detector.kinds[dataset]["train"]["n"] == len(table.rows("train"))
            assert by_dataset[dataset]["auroc"] > 0.75, (name, dataset, by_dataset[dataset])
        assert detector.kinds["documents"]["with_document"] and not detector.kinds["trivia"]["with_document"]
        assert detector.kinds["arithmetic"]["task"] == "gsm8k"


def test_a_detector_round_trips_through_safetensors_and_json(saved, tables):
    from safetensors.torch import load_file

    X = {"prompt-entropy": tables["trivia"].prompt_entropy[:, None], "p-entropy": tables["trivia"].scores["P-Entropy"][:, None],
         "saplma": tables["trivia"].saplma}
    for name, (detector, path) in saved.items():
        meta = json.loads(path.with_suffix(".json").read_text())  # plain JSON beside plain tensors: no pickle
        assert load_file(str(path))  # a safetensors file
        assert meta["format"] == "grade-detector" and meta["name"] == name and meta["model"] == "smollm2-135m-instruct"
        assert meta["statistic"] == DETECTORS[name].statistic and meta["training_data"]["sources"] == ["synthetic"]
        assert meta["weights_sha256"] == hashlib.sha256(path.read_bytes()).hexdigest()
        loaded = Detector.load(path)
        kinds = ["trivia"] * len(X[name])
        np.testing.assert_allclose(loaded.predict_proba(X[name], kinds), detector.predict_proba(X[name], kinds), atol=1e-6)
        assert loaded.test_metrics("trivia")["auroc"] == pytest.approx(detector.test_metrics("trivia")["auroc"])


def test_a_detector_for_another_model_is_refused(saved):
    from studio.resources import load_detectors

    detector = Detector.load(saved["saplma"][1])
    detector.check_compatible("smollm2-135m-instruct")
    with pytest.raises(ProbeError, match="trained on smollm2-135m-instruct, not gemma-3-270m"):
        detector.check_compatible("gemma-3-270m")
    folder = saved["saplma"][1].parent
    assert len(load_detectors("smollm2-135m-instruct", folder)[0]) == len(DETECTORS)
    found, reason = load_detectors("gemma-3-270m", folder)
    assert found == [] and reason.startswith("no other detector was trained for gemma-3-270m")
    assert "\n" not in reason


def _variant(path: Path, folder: Path, *, meta=None, tensors=None, digest: bool = True) -> Path:
    """A copy of a detector with its metadata and/or tensors changed (checksum kept consistent unless not)."""
    from safetensors.torch import load_file, save_file

    weights = load_file(str(path))
    metadata = json.loads(path.with_suffix(".json").read_text())
    if tensors:
        tensors(weights)
    target = folder / path.name
    save_file(weights, str(target))
    if digest:
        metadata["weights_sha256"] = hashlib.sha256(target.read_bytes()).hexdigest()
    if meta:
        meta(metadata)
    target.with_suffix(".json").write_text(json.dumps(metadata))
    return target


@pytest.mark.parametrize("name, change, pattern", [
    ("p-entropy", dict(tensors=lambda w: w["coef"].fill_(float("nan"))), "NaN"),
    ("p-entropy", dict(tensors=lambda w: w["coef"].mul_(2), digest=False), "checksum"),
    ("p-entropy", dict(meta=lambda m: m.update(name="entropy-of-everything")), "no known detector"),
    ("p-entropy", dict(meta=lambda m: m.update(statistic="saplma_hidden")), "no known detector"),
    ("p-entropy", dict(meta=lambda m: m.update(format_version=99)), "format 99"),
    ("p-entropy", dict(meta=lambda m: m.update(kinds={})), "'kinds'"),
    ("p-entropy", dict(meta=lambda m: m.update(kinds={"trivia": {}})), "do not fit"),
    ("saplma", dict(meta=lambda m: m.update(input_dim=True)), "'input_dim'"),
    ("saplma", dict(meta=lambda m: m.update(input_dim=17)), "do not fit"),
    ("saplma", dict(meta=lambda m: m.pop("model")), "'model'"),
])
def test_a_broken_detector_file_is_refused_in_one_line(saved, tmp_path, name, change, pattern):
    bad = _variant(saved[name][1], tmp_path, **change)
    with pytest.raises(ProbeError, match=pattern) as caught:
        Detector.load(bad)
    assert "\n" not in str(caught.value)


def test_every_shipped_detector_loads_with_its_test_auroc_per_dataset():
    readme = (SHIPPED_DETECTORS_DIR / "README.md").read_text(encoding="utf-8")
    for model in EMBEDDED:
        paths = detectors_for(model)
        assert len(paths) == len(DETECTORS), f"missing detectors for {model} (run `make detectors`)"
        for path in paths:
            detector = Detector.load(path)
            detector.check_compatible(model)
            by_dataset = detector.metadata["metrics"]["test_by_dataset"]
            assert set(by_dataset) == set(detector.kinds)
            for dataset, metrics in by_dataset.items():
                assert metrics["n"] == detector.kinds[dataset]["test"]["n"] > 0
                assert 0.0 <= metrics["auroc"] <= 1.0
                assert f"| {detector.spec.title} | {dataset} |" in readme
            sources = detector.metadata["training_data"]["sources"]
            assert sources and all(len(s["sha256"]) == 64 for s in sources)


@pytest.mark.slow
def test_the_shipped_detectors_are_what_the_script_builds(benchmark_caches, tmp_path, monkeypatch):
    """The build script, on the benchmark caches (restored from the repository's history into a temporary
    folder where this checkout has none: conftest's ``benchmark_caches``), writes the shipped files' numbers again."""
    import importlib.util

    where = ROOT
    if not (ROOT / "data" / "benchmark" / "smollm2-135m-instruct" / "baselines" / "triviaqa.jsonl").is_file():
        where = benchmark_caches
    spec = importlib.util.spec_from_file_location("build_detectors", ROOT / "scripts" / "build" / "build_detectors.py")
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    monkeypatch.chdir(where)  # the benchmark's runs name their files relative to the repository
    script.build("smollm2-135m-instruct", tmp_path / "built")
    for name in DETECTORS:
        built = Detector.load(detector_file("smollm2-135m-instruct", name, tmp_path / "built"))
        shipped = Detector.load(detector_file("smollm2-135m-instruct", name))
        assert built.metadata["metrics"] == shipped.metadata["metrics"]
        assert built.metadata["training_data"] == shipped.metadata["training_data"]


def test_a_question_is_read_with_the_closest_training_dataset():
    smol = Detector.load(detector_file("smollm2-135m-instruct", "p-entropy")).kinds
    qwen = Detector.load(detector_file("qwen2.5-coder-1.5b-instruct", "p-entropy")).kinds
    assert closest_kind(smol, "qa", False) == ("triviaqa", "the same task, without a document")  # the largest test set
    assert closest_kind(smol, "qa", True) == ("hotpotqa", "the same task, with a document")
    kind, reason = closest_kind(smol, "gsm8k", False)
    assert kind is None and "no gsm8k question" in reason  # nothing like a word problem: no verdict at all
    assert closest_kind(qwen, "gsm8k", False)[0] == "gsm8k"
    assert closest_kind(qwen, "math", False) == ("math", "the same task, without a document")  # trained on MATH too
    assert closest_kind(qwen, "mmlu", False)[0] == "mmlu"
    assert closest_kind(qwen, "qa", True)[0] == "hotpotqa"


def test_the_disagreement_is_one_sentence_and_only_when_verdicts_differ():
    assert disagreement([("the GRADE probe", True), ("Entropy after the prompt", True)]) is None
    assert disagreement([("the GRADE probe", True), ("P-Entropy of the answer", None)]) is None
    sentence = disagreement([("the GRADE probe", False), ("Hidden-state probe (SAPLMA)", True),
                             ("P-Entropy of the answer", False)])
    assert sentence == ("The detectors disagree: hidden-state probe (SAPLMA) says the model can answer; "
                        "the GRADE probe and P-Entropy of the answer say it cannot.")


# ------------------------------------------------------------------------------ with the model


@pytest.mark.slow
def test_the_app_reads_a_question_as_the_benchmark_stored_it(smollm, one_torch_thread):
    """Home's detector inputs (shown answer cut to the task's length, one pass) equal the benchmark's own
    pass on a labelled row: same answer, same P-Entropy, same hidden state."""
    import grade
    from grade.verdict.detectors.baselines import score_question
    from grade.verdict.detectors import question_statistics, record_statistic
    from grade.models.generation import greedy_answer, settings_for_task, shorter_answer

    row = {"id": "t", "question": "What is the capital of France?", "task": "qa", "dataset": "triviaqa"}
    result = grade.analyze(smollm, row["question"], task="qa", loss="pre")
    shown = greedy_answer(smollm, result.prompt, task="qa", max_new_tokens=48)  # Home's default length
    task_length = greedy_answer(smollm, result.prompt, task="qa")
    assert shorter_answer(smollm.tokenizer, shown, settings_for_task("qa")) == task_length
    values, missing = question_statistics(smollm, result.prompt, task="qa", result=result, shown_answer=shown,
                                          statistics=["loss_value", "p_entropy", "saplma_hidden"])
    assert not missing and values["loss_value"][0] == pytest.approx(result.loss_value)
    stored = score_question(smollm, row, parts=("answer",))
    assert stored["greedy_answer"] == task_length.text
    np.testing.assert_allclose(values["p_entropy"], record_statistic(stored, "p_entropy"), rtol=1e-5, atol=1e-5)
    # the stored hidden state is float16 and the benchmark's pass reads it with an attention mask (its batched
    # path): the two may part by one float16 step (2**-10 relative), no more
    np.testing.assert_allclose(values["saplma_hidden"], record_statistic(stored, "saplma_hidden"), rtol=2**-10, atol=1e-3)
