"""The shipped probes scored as shipped (grade.studies.shipped_probes): the split each trained on is found again
from the stores and label files it was built from, and the committed numbers the verdict card cites regenerate."""

import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

ROOT = Path(__file__).resolve().parent.parent
MODEL = "qwen2.5-coder-1.5b-instruct"
LABELS_AT = "a27493d^"  # the label files Qwen's probes were built from (MMLU was labelled again after)


@pytest.mark.slow
def test_shipped_probe_numbers_regenerate(benchmark_caches, tmp_path):
    out = tmp_path / "shipped_probes.csv"
    done = subprocess.run([sys.executable, str(ROOT / "scripts" / "build" / "score_shipped_probes.py"), "--labels-at", LABELS_AT,
                           "--data-root", str(benchmark_caches), "--out", str(out)],
                          cwd=ROOT, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "-pre: split found again" in done.stdout
    assert "instruct-pos: split found again" in done.stdout  # the general GRADE_pos probe, on the stores from history
    fresh = pd.read_csv(out).sort_values(["method", "dataset"]).reset_index(drop=True)
    committed = pd.read_csv(ROOT / "results" / MODEL / "shipped_probes.csv").sort_values(["method", "dataset"])
    pd.testing.assert_frame_equal(fresh, committed.reset_index(drop=True))
    for name in ("shipped_detectors.csv",):  # the detectors, on the questions outside their capped train/validation rows
        pd.testing.assert_frame_equal(pd.read_csv(tmp_path / name), pd.read_csv(ROOT / "results" / MODEL / name))
    assert "saplma: training rows found again" in done.stdout
    # what the probe trained on is never scored: MMLU's unseen questions are its labelled ones minus the 161 rows the
    # general probe's table held, of which the train and validation parts (85%) are left out
    mmlu = fresh[(fresh["dataset"] == "mmlu") & (fresh["probe"] == f"{MODEL}-pre")].iloc[0]
    assert 649 - 161 < mmlu["n"] < 649


def test_detector_cards_cite_the_shipped_detector_itself_where_enough_questions_were_unseen():
    from types import SimpleNamespace

    from grade.verdict.measured import detector_evidence

    saplma = SimpleNamespace(name="saplma", kind="gsm8k", test={})
    assert detector_evidence(MODEL, saplma, task="gsm8k", has_context=False).startswith("On questions it never saw:")
    # its statistic (the GRADE_pre loss) is stored for the capped rows only: too few unseen, its form is cited
    entropy = SimpleNamespace(name="prompt-entropy", kind="triviaqa", test={})
    assert detector_evidence(MODEL, entropy, task="qa", has_context=False).startswith("Cross-fitted AUROC")


def test_measured_cites_the_shipped_probe_where_enough_questions_were_unseen():
    from grade.verdict.measured import MIN_QUESTIONS, probe_evidence, probe_measured

    found = probe_measured(MODEL, "pre", task="mmlu", has_context=False)
    assert found.method == "GRADE_pre (shipped probe)" and found.protocol == "unseen" and found.n >= MIN_QUESTIONS
    assert probe_evidence(MODEL, "pre", task="mmlu", has_context=False).startswith("On questions it never saw: AUROC")
    # HotpotQA with its paragraphs: too few unseen questions, so the probe's form refitted on the dataset is cited
    found = probe_measured(MODEL, "pre", task="qa", has_context=True)
    assert found.method == "GRADE_pre (shipped)" and found.enough
    assert "refitted on this dataset's folds" in probe_evidence(MODEL, "pre", task="qa", has_context=True)
