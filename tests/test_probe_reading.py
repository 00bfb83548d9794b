"""Input bands of the shipped probes (grade.verdict.probe_reading): what the Home page sets a question's probe inputs
against."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from grade.verdict.probe import SHIPPED_PROBES_DIR, SHIPPED_REFERENCE_FEATURES, probe_inputs
from grade.verdict.probe_reading import SHIPPED_BANDS_DIR, InputBands, bands_for, input_names


def _shipped_metadata():
    for path in sorted(SHIPPED_PROBES_DIR.glob("*.json")):
        meta = json.loads(path.read_text(encoding="utf-8"))
        if meta.get("format") == "grade-probe":
            yield path.stem, meta


def test_every_shipped_probe_has_bands_of_its_own_weights():
    for name, meta in _shipped_metadata():
        bands = bands_for(meta)
        assert bands is not None, f"no input bands for {name}: run scripts/build/build_probe_input_bands.py"
        assert bands.probe == name and bands.n_layers == meta["n_layers"]
        assert len(bands.names) == len(bands.auroc) == len(bands.quartiles["answerable"][0])
        assert bands.counts["answerable"] > 0 and bands.counts["unanswerable"] > 0
    # other weights (a retrained probe) find none
    assert bands_for({**meta, "weights_sha256": "0" * 64}) is None


def test_rank_ratio_bands_reproduce_from_the_reference_set():
    """The bands of a rank-ratio probe are the reference set's quartiles per class, and each input's AUROC."""
    name, meta = next((n, m) for n, m in _shipped_metadata() if n == "smollm2-135m-instruct-pre")
    ref = pd.read_parquet(SHIPPED_REFERENCE_FEATURES)
    ref = ref[(ref["model"] == meta["model"]) & (ref["loss"] == meta["loss"])]
    X, y = probe_inputs(ref, "rank_ratio"), ref["label"].to_numpy()
    refit = InputBands.fit(X, y, probe=name, weights_sha256=meta["weights_sha256"], inputs="rank_ratio",
                           n_layers=meta["n_layers"])
    shipped = bands_for(meta)
    assert np.allclose(refit.quartiles["answerable"], shipped.quartiles["answerable"], atol=1e-6)
    assert np.allclose(refit.quartiles["unanswerable"], shipped.quartiles["unanswerable"], atol=1e-6)
    assert np.allclose(refit.auroc, shipped.auroc, atol=1e-4)
    # the sides: the median answerable question lies on the answerable side of every input that separates
    median_yes = np.median(X[y == 1], axis=0)
    sides = shipped.side(median_yes)
    assert (sides[np.asarray(shipped.separating(5))] > 0).all()
    assert (shipped.side(np.median(X[y == 0], axis=0))[np.asarray(shipped.separating(5))] < 0).all()


def test_separating_inputs_are_the_strongest_alone():
    name, meta = next((n, m) for n, m in _shipped_metadata() if m.get("inputs") == "sranks_loss")
    bands = bands_for(meta)
    strength = np.abs(np.asarray(bands.auroc) - 0.5)
    best = bands.separating(5)
    assert len(best) == 5 and min(strength[best]) >= np.sort(strength)[-5] - 1e-12
    assert input_names("sranks_loss", 2) == ["log srank(C_h), layer 0", "log srank(C_h), layer 1",
                                             "log srank(C_g), layer 0", "log srank(C_g), layer 1", "loss"]


def test_fit_refuses_one_class_and_load_refuses_a_mismatched_file(tmp_path):
    X = np.random.default_rng(0).normal(size=(10, 3))
    with pytest.raises(ValueError, match="both classes"):
        InputBands.fit(X, np.ones(10), probe="p", weights_sha256="x", inputs="rank_ratio", n_layers=3)
    bands = InputBands.fit(X, np.arange(10) % 2, probe="p", weights_sha256="x", inputs="rank_ratio", n_layers=3)
    path = bands.save(tmp_path / "p.json")
    assert InputBands.load(path) == bands
    data = json.loads(path.read_text())
    data["n_layers"] = 4
    path.write_text(json.dumps(data))
    with pytest.raises(ValueError, match="do not match"):
        InputBands.load(path)
    (tmp_path / "q.json").write_text("[]")
    with pytest.raises(ValueError, match="not a"):
        InputBands.load(tmp_path / "q.json")
    assert SHIPPED_BANDS_DIR.is_dir()
