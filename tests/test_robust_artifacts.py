"""A broken artefact is never written with success (issue 32, item 1).

Real components: the shipped reference features (SmolLM2's 239 ``pre`` rows), the real probe estimator, the
CLI in this process, and the served app under AppTest for the Probes page's train path.
"""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np
import pytest

from grade.common.errors import GradeError, ProbeError

from test_cli_inputs import assert_one_error, run_cli  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]


def smollm_rows():
    import pandas as pd

    from grade.verdict.probe import SHIPPED_REFERENCE_FEATURES

    df = pd.read_parquet(SHIPPED_REFERENCE_FEATURES)
    df = df[(df["model"] == "smollm2-135m-instruct") & (df["loss"] == "pre")].reset_index(drop=True)
    return df.drop(columns=[c for c in ("hidden", "hidden_layer") if c in df.columns])


def with_huge_values(df, rows: int = 40, value: float = 1e308):
    """``df`` with one rank ratio of ``rows`` rows (every fifth) set to ``value``: large but finite."""
    ratios = [np.asarray(v, dtype=np.float64).copy() for v in df["rank_ratio"]]
    for i in range(rows):
        ratios[5 * i][3] = value
    out = df.copy()
    out["rank_ratio"] = ratios
    return out


@pytest.fixture(scope="module")
def huge_features(tmp_path_factory) -> Path:
    df = with_huge_values(smollm_rows())
    assert len(df) == 239
    path = tmp_path_factory.mktemp("features") / "huge.parquet"
    df.to_parquet(path)
    return path


@pytest.mark.parametrize("kind", ["mlp", "logreg"])
def test_train_refuses_absurd_feature_values_in_one_line_and_writes_nothing(tmp_path, huge_features, kind):
    out = tmp_path / "probes" / kind
    line = assert_one_error(run_cli(["train", "--features", str(huge_features), "--out", str(out), "--kind", kind]),
                            "'rank_ratio'", "40 of 239 rows")
    assert "internal error" not in line
    assert not list((tmp_path / "probes").glob("*")), "a probe file (or a lock file) was left"


def test_probe_fit_refuses_values_that_would_overflow_training():
    from grade.verdict.probe import Probe, probe_inputs

    df = with_huge_values(smollm_rows())
    X, y = probe_inputs(df), df["label"].to_numpy()
    for kind in ("mlp", "logreg"):
        with pytest.raises(ProbeError, match="beyond"):
            Probe(kind, epochs=2).fit(X, y)


def test_a_probe_with_non_finite_weights_is_never_saved(tmp_path):
    from grade.verdict.probe import Probe, probe_inputs

    df = smollm_rows()
    X, y = probe_inputs(df), df["label"].to_numpy()
    probe = Probe("mlp", epochs=3).fit(X, y)
    assert probe.save(tmp_path / "good")[0].exists()  # the healthy probe is saved
    with np.errstate(all="ignore"):
        next(iter(probe.net.parameters())).data[0, 0] = float("nan")
    with pytest.raises(ProbeError, match="training diverged"):
        probe.save(tmp_path / "bad")
    assert not list(tmp_path.glob("bad*"))
    lr = Probe("logreg").fit(X, y)
    lr.coef_[2] = np.inf
    with pytest.raises(ProbeError, match="training diverged"):
        lr.save(tmp_path / "bad-lr")
    assert not list(tmp_path.glob("bad*"))


def test_a_diverged_fit_is_an_error_not_a_probe(monkeypatch):
    """The backstop behind the input bound: a fit whose weights end non-finite raises, whatever caused it."""
    from grade.verdict.probe import Probe, probe_inputs
    from grade.verdict.probe import estimator

    df = smollm_rows()
    X, y = probe_inputs(df), df["label"].to_numpy()
    original = estimator.Probe._fit_logreg

    def poisoned(self, *args):
        original(self, *args)
        self.intercept_ = float("nan")

    monkeypatch.setattr(estimator.Probe, "_fit_logreg", poisoned)
    with pytest.raises(ProbeError, match="training diverged"):
        Probe("logreg").fit(X, y)


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["logreg", "mlp"])
def test_the_probes_page_refuses_absurd_features_with_one_message(monkeypatch, tmp_path, smollm, kind):
    """Served app: the upload reads, Train shows one error naming the column, no exception box, no probe."""
    from streamlit.testing.v1 import AppTest

    from studio import session

    monkeypatch.setenv("GRADE_SERVED", "1")
    monkeypatch.setenv("GRADE_USER_DATA_DIR", str(tmp_path / "users"))
    session._settings.cache_clear()
    try:
        buffer = io.BytesIO()
        with_huge_values(smollm_rows()).to_parquet(buffer)
        at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=600).run()
        at.switch_page("pages/probes.py").run()
        at.radio(key="train_source").set_value("Upload a feature file (.parquet)").run()
        at.file_uploader(key="train_upload").set_value(("huge.parquet", buffer.getvalue(), "application/octet-stream"))
        at.run()
        at.radio(key="train_kind").set_value(kind).run()
        at.button(key="train_probe").click().run()
        assert not at.exception, [e.value for e in at.exception]
        errors = [e.value for e in at.error]
        assert len(errors) == 1 and "rank" in errors[0] and "40 of 239" in errors[0], errors
        assert "trained" not in at.session_state
    finally:
        session._settings.cache_clear()


def test_grade_error_is_what_the_checks_raise():
    from grade.verdict.artifacts import check_finite_scores, check_finite_tensors

    with pytest.raises(GradeError):
        check_finite_scores([0.1, float("nan")])
    import torch

    with pytest.raises(GradeError):
        check_finite_tensors({"w": torch.tensor([1.0, float("inf")])})
    check_finite_tensors({"w": torch.tensor([1.0, 2.0])})  # finite: no error
