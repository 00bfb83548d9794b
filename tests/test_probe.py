"""Probes (grade.verdict.probe): estimator mechanics, save/load, validation of files and compatibility."""

import json

import numpy as np
import pandas as pd
import pytest
import torch

from grade.common.errors import ProbeError
from grade.verdict.probe import MLPNet, Probe, binary_metrics, probe_paths, stratified_split, train_from_features

L = 30
INFO = {"model": "smollm2-135m-instruct", "loss": "pre", "srank": "paper"}


def separable(n=240, seed=0):
    """Rank-ratio-like features whose later layers shift with the label."""
    rng = np.random.default_rng(seed)
    y = rng.integers(0, 2, n)
    X = rng.lognormal(0.0, 0.3, size=(n, L)) + 0.8 * y[:, None] * np.linspace(0, 1, L)
    return X, y


@pytest.fixture(scope="module")
def fitted():
    X, y = separable()
    tr, va, te = stratified_split(y, seed=1)
    probes = {kind: Probe(kind, epochs=25).fit(X[tr], y[tr], X[va], y[va], info=INFO) for kind in ("mlp", "logreg")}
    return probes, X[te], y[te]


def test_stratified_split_is_seeded_disjoint_and_balanced():
    y = np.array([0] * 60 + [1] * 40)
    parts = stratified_split(y, seed=3)
    assert sorted(np.concatenate(parts).tolist()) == list(range(100))
    assert [len(p) for p in parts] == [70, 15, 15]
    assert [int(y[p].sum()) for p in parts] == [28, 6, 6]
    assert all((a == b).all() for a, b in zip(parts, stratified_split(y, seed=3)))
    assert not all((a == b).all() for a, b in zip(parts, stratified_split(y, seed=4)))


def test_mlp_is_the_papers_architecture():
    net = MLPNet(L)
    kinds = [type(m).__name__ for m in net.net]
    assert kinds == ["Linear", "BatchNorm1d", "LeakyReLU", "Dropout"] * 4 + ["Linear"]
    assert [m.out_features for m in net.net if isinstance(m, torch.nn.Linear)] == [256, 128, 64, 32, 1]
    assert all(m.p == 0.5 for m in net.net if isinstance(m, torch.nn.Dropout))
    assert all(m.negative_slope == 0.01 for m in net.net if isinstance(m, torch.nn.LeakyReLU))


@pytest.mark.parametrize("kind", ["mlp", "logreg"])
def test_estimator_api_learns_separable_data(fitted, kind):
    probes, X, y = fitted
    probe = probes[kind]
    proba = probe.predict_proba(X)
    assert proba.shape == (len(X), 2) and np.allclose(proba.sum(axis=1), 1)
    assert set(probe.predict(X)) <= {0, 1}
    metrics = probe.evaluate(X, y)
    assert metrics["auroc"] > 0.9 and probe.score(X, y) > 0.8
    assert metrics["roc"]["fpr"][0] == 0 and metrics["roc"]["tpr"][-1] == 1
    assert probe.metadata["train_balance"]["n"] + probe.metadata["val_balance"]["n"] + len(y) == 240
    with pytest.raises(ProbeError, match="expects 30 layers"):
        probe.predict_proba(X[:, :18])


def test_mlp_training_is_reproducible_and_reports_epochs():
    X, y = separable(120, seed=5)
    calls = []
    a = Probe("mlp", epochs=6).fit(X, y, callback=lambda e, n, info: calls.append((e, n, sorted(info))))
    b = Probe("mlp", epochs=6).fit(X, y)
    assert np.array_equal(a.predict_proba(X), b.predict_proba(X))
    assert [c[:2] for c in calls] == [(e, 6) for e in range(1, 7)]
    assert calls[0][2] == ["lr", "train_loss", "val_auroc", "val_loss"]


def test_one_class_cannot_be_trained():
    X, _ = separable(50)
    with pytest.raises(ProbeError, match="one class"):
        Probe("logreg").fit(X, np.ones(50, dtype=int), X[:10], np.ones(10, dtype=int))


@pytest.mark.parametrize("kind", ["mlp", "logreg"])
def test_save_load_round_trip_is_exact(fitted, tmp_path, kind):
    probes, X, _ = fitted
    probe = probes[kind]
    weights, meta = probe.save(tmp_path / "p")
    assert (weights.name, meta.name) == ("p.safetensors", "p.json")
    loaded = Probe.load(tmp_path / "p.json")
    assert np.array_equal(loaded.predict_proba(X), probe.predict_proba(X))
    saved = probe.tensors()
    again = loaded.tensors()
    assert saved.keys() == again.keys()
    assert all(torch.equal(saved[k], again[k]) for k in saved)
    if kind == "mlp":
        assert any(k.endswith("running_var") for k in saved) and any(k.endswith("num_batches_tracked") for k in saved)
    data = json.loads(meta.read_text())
    assert data["kind"] == kind and data["n_layers"] == L and data["model"] == INFO["model"]
    assert data["package_version"] and data["feature_definition"] and data["weights_sha256"]


def test_corrupt_or_missing_files_raise_probe_error(fitted, tmp_path):
    probe = fitted[0]["mlp"]
    weights, meta = probe.save(tmp_path / "p")
    with pytest.raises(ProbeError, match="does not exist"):
        Probe.load(tmp_path / "missing")

    raw = bytearray(weights.read_bytes())
    raw[-5] ^= 0xFF  # one flipped bit pattern in the tensor data
    weights.write_bytes(bytes(raw))
    with pytest.raises(ProbeError, match="checksum"):
        Probe.load(meta)

    weights.write_bytes(bytes(raw[: len(raw) // 2]))  # truncated, checksum dropped
    data = json.loads(meta.read_text())
    data.pop("weights_sha256")
    meta.write_text(json.dumps(data))
    with pytest.raises(ProbeError, match="unreadable"):
        Probe.load(meta)

    fitted[0]["logreg"].save(tmp_path / "lr")
    lr_weights, _ = probe_paths(tmp_path / "lr")
    weights.write_bytes(lr_weights.read_bytes())  # valid safetensors, wrong content for an MLP
    with pytest.raises(ProbeError, match="do not fit a mlp probe"):
        Probe.load(meta)

    meta.write_text("{ not json")
    with pytest.raises(ProbeError, match="not valid JSON"):
        Probe.load(meta)
    meta.write_text(json.dumps({"format": "something else"}))
    with pytest.raises(ProbeError, match="not a GRADE probe"):
        Probe.load(meta)


def test_check_compatible(fitted):
    probe = fitted[0]["logreg"]
    probe.check_compatible("smollm2-135m-instruct", 30, "pre", srank="paper")
    with pytest.raises(ProbeError, match="trained on smollm2-135m-instruct, not gemma-3-270m"):
        probe.check_compatible("gemma-3-270m")
    with pytest.raises(ProbeError, match="expects 30 layers, the model has 18"):
        probe.check_compatible(None, 18)
    with pytest.raises(ProbeError, match="GRADE_pre features, not GRADE_pos"):
        probe.check_compatible("smollm2-135m-instruct", 30, "pos")
    with pytest.raises(ProbeError, match="stable rank"):
        probe.check_compatible(None, srank="sum")


def test_train_from_features_reports_test_and_heldout_datasets():
    frames = []
    for name, seed in (("facts", 1), ("arith", 2), ("trivia", 3)):
        X, y = separable(120, seed)
        frames.append(pd.DataFrame({"id": [f"{name}{i}" for i in range(120)], "dataset": name, "label": y,
                                    "has_context": False, "model": INFO["model"], "loss": "pre", "srank": "paper",
                                    "rank_ratio": list(X)}))
    df = pd.concat(frames, ignore_index=True)
    probe, report = train_from_features(df, kind="logreg", holdout_datasets=("trivia",))
    assert set(report["test_by_dataset"]) == {"facts", "arith"} and set(report["holdout_by_dataset"]) == {"trivia"}
    assert report["holdout"]["n"] == 120 and report["holdout"]["auroc"] > 0.9
    data = probe.metadata["training_data"]
    assert set(data["datasets"]) == {"facts", "arith"} and data["holdout_datasets"] == ["trivia"]
    assert sum(data["split"][s]["n"] for s in ("train", "validation", "test")) == 240
    assert probe.metadata["metrics"] is report


def test_binary_metrics_single_class_has_no_auroc():
    m = binary_metrics([1, 1, 1], [0.9, 0.4, 0.7])
    assert m["auroc"] is None and m["accuracy"] == pytest.approx(2 / 3) and "roc" not in m


@pytest.mark.slow
def test_predict_result_on_a_real_analysis(smollm, fitted):
    import grade

    probe = fitted[0]["mlp"]
    result = grade.analyze(smollm, "What is the capital of France?", spectra=False)
    p = probe.predict_result(result)
    assert 0.0 <= p <= 1.0
    assert p == pytest.approx(probe.predict_proba(result.rank_ratio[None, :])[0, 1])
    result.loss = "pos"
    with pytest.raises(ProbeError, match="GRADE_pre"):
        probe.predict_result(result)


def test_held_out_questions_are_not_trained_on_in_another_wording():
    X, y = separable(160, seed=7)
    df = pd.DataFrame({"id": [f"q{i % 80}" + ("-b" if i >= 80 else "") for i in range(160)],
                       "dataset": ["plain"] * 80 + ["reworded"] * 80, "label": y, "has_context": False,
                       "model": INFO["model"], "loss": "pre", "srank": "paper", "rank_ratio": list(X)})
    df["group"] = df["id"].str.removesuffix("-b")
    df.loc[150:, "group"] = [f"other{i}" for i in range(10)]  # 10 reworded rows of questions not held out
    probe, report = train_from_features(df, kind="logreg", holdout_datasets=("plain",))
    split = probe.metadata["training_data"]["split"]
    assert sum(split[s]["n"] for s in ("train", "validation", "test")) == 10
    assert report["holdout"]["n"] == 80


def _stable_rank_frame(n=200, seed=11):
    """Feature rows whose label lives in srank(C_h) and the loss while the rank ratio stays the same for
    every row: only a probe that reads the two stable ranks apart (or the loss) can tell the classes."""
    rng = np.random.default_rng(seed)
    y = rng.integers(0, 2, n)
    srank_h = rng.lognormal(1.0, 0.2, size=(n, L)) * (1.0 + 0.6 * y[:, None])
    ratio = np.full((n, L), 0.8)
    return pd.DataFrame({"id": [f"q{i}" for i in range(n)], "dataset": "facts", "label": y, "has_context": False,
                         "model": INFO["model"], "loss": "pre", "srank": "paper", "rank_ratio": list(ratio),
                         "srank_h": list(srank_h), "srank_g": list(srank_h * ratio),
                         "loss_value": rng.normal(1.0, 0.1, n) - 0.3 * y})


def test_probe_inputs_of_a_table_and_of_a_result_agree():
    from types import SimpleNamespace

    from grade.common.errors import InputError
    from grade.verdict.probe import input_width, probe_inputs

    df = _stable_rank_frame(5)
    X = probe_inputs(df, "sranks_loss")
    assert X.shape == (5, input_width("sranks_loss", L)) == (5, 2 * L + 1)
    assert np.allclose(X[:, :L], np.log(np.stack(df["srank_h"])))
    assert np.allclose(X[:, L:2 * L], np.log(np.stack(df["srank_g"])))
    assert np.allclose(X[:, -1], df["loss_value"])
    row = df.iloc[2]
    result = SimpleNamespace(rank_ratio=np.asarray(row["rank_ratio"]), srank_h=np.asarray(row["srank_h"]),
                             srank_g=np.asarray(row["srank_g"]), loss_value=float(row["loss_value"]))
    assert np.allclose(probe_inputs(result, "sranks_loss"), X[2:3])
    assert np.allclose(probe_inputs(result), np.asarray(row["rank_ratio"])[None, :])
    with pytest.raises(InputError, match="srank_h, srank_g, loss_value"):
        probe_inputs(df[["rank_ratio"]], "sranks_loss")
    with pytest.raises(ProbeError, match="unknown probe inputs"):
        probe_inputs(df, "eigenvalues")


@pytest.mark.parametrize("kind", ["mlp", "logreg"])
def test_a_probe_reading_the_stable_ranks_apart_saves_its_inputs(kind, tmp_path):
    df = _stable_rank_frame()
    ratio_only, report_ratio = train_from_features(df, kind="logreg", seed=3)
    probe, report = train_from_features(df, kind=kind, seed=3, inputs="sranks_loss")
    assert report["test"]["auroc"] > 0.9 and report_ratio["test"]["auroc"] < 0.7
    assert probe.n_layers == L and probe.n_features_in_ == 2 * L + 1
    probe.save(tmp_path / "p")
    meta = json.loads((tmp_path / "p.json").read_text())
    assert meta["inputs"] == "sranks_loss" and meta["n_layers"] == L and "log srank(C_h)" in meta["feature_definition"]
    loaded = Probe.load(tmp_path / "p")
    from grade.verdict.probe import probe_inputs

    X = probe_inputs(df, "sranks_loss")
    assert loaded.inputs == "sranks_loss" and np.allclose(loaded.predict_proba(X), probe.predict_proba(X))
    loaded.check_compatible(INFO["model"], L, "pre", srank="paper")
    with pytest.raises(ProbeError, match="expects 61 numbers \\(sranks_loss of 30 layers\\), the features have 30"):
        loaded.predict_proba(np.stack(df["rank_ratio"]))
    meta["inputs"] = "eigenvalues"
    (tmp_path / "p.json").write_text(json.dumps(meta))
    with pytest.raises(ProbeError, match="unknown probe inputs 'eigenvalues'"):
        Probe.load(tmp_path / "p")


def test_shipped_probes_from_before_inputs_were_named_read_rank_ratios(fitted, tmp_path):
    probe = fitted[0]["logreg"]
    probe.save(tmp_path / "old")
    meta = json.loads((tmp_path / "old.json").read_text())
    del meta["inputs"]
    (tmp_path / "old.json").write_text(json.dumps(meta))
    old = Probe.load(tmp_path / "old")
    assert old.inputs == "rank_ratio" and old.n_layers == L
