"""The shipped probes and detectors measured as shipped (grade.studies.shipped_probes): on a split held out per
dataset and class before they were trained, which they never saw, with at least 40 questions of each class in
every pool of datasets a card cites; the split redraws the same and the committed scores regenerate."""

import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

ROOT = Path(__file__).resolve().parent.parent
MODEL = "qwen2.5-coder-1.5b-instruct"
SPLIT = ROOT / "results" / MODEL / "heldout_split.csv"


def test_the_held_out_split_gives_every_cited_pool_40_questions_of_each_class():
    from grade.verdict.detectors.routing import QUESTION_KINDS

    split = pd.read_csv(SPLIT)
    labelled = {"triviaqa": (108, 725), "nq_open": (49, 847), "hotpotqa_closed": (53, 236), "hotpotqa": (186, 128),
                "gsm8k": (303, 572), "math": (194, 548), "mmlu": (82, 567)}  # data/labels: every labelled question
    for kind in QUESTION_KINDS:
        rows = split[split["dataset"].isin(kind.datasets)]
        if rows.empty:
            continue
        assert rows["label"].sum() >= 40 and (rows["label"] == 0).sum() >= 40, kind.name
    for dataset, (answerable, unanswerable) in labelled.items():  # each dataset and class 20-55 %, rounded up
        rows = split[split["dataset"] == dataset]
        assert 0.2 <= rows["label"].sum() / answerable <= 0.57 and 0.2 <= (rows["label"] == 0).sum() / unanswerable <= 0.57


def test_the_shipped_probes_and_detectors_never_trained_on_the_held_out_split():
    """Their recorded training tables hold every labelled question of their datasets but the held-out ones."""
    import json

    from grade.verdict.detectors import Detector, detectors_for
    from grade.verdict.probe import SHIPPED_PROBES_DIR

    split = pd.read_csv(SPLIT)
    held = split.groupby("dataset")["label"].agg(["size", "sum"])
    meta = json.loads((SHIPPED_PROBES_DIR / f"{MODEL}-pre-math.json").read_text())  # no cap: every GSM8K row
    gsm = meta["training_data"]["datasets"]["gsm8k"]
    assert (gsm["n"], gsm["answerable"]) == (875 - held.loc["gsm8k", "size"], 303 - held.loc["gsm8k", "sum"])
    general = json.loads((SHIPPED_PROBES_DIR / f"{MODEL}-pre.json").read_text())["training_data"]["datasets"]
    assert general["mmlu"]["answerable"] == 82 - held.loc["mmlu", "sum"]  # every answerable row not held out
    for path in detectors_for(MODEL):
        detector = Detector.load(path)
        for dataset, kind in detector.kinds.items():
            assert kind["test"]["n"] == held.loc[dataset, "size"], (detector.name, dataset)
            trained = kind["train"]["answerable"] + kind["validation"]["answerable"]
            assert trained + held.loc[dataset, "sum"] <= {"triviaqa": 108, "nq_open": 49, "hotpotqa_closed": 53,
                                                          "hotpotqa": 186, "gsm8k": 303, "math": 194,
                                                          "mmlu": 82}[dataset]


def test_the_held_out_scores_are_each_question_scored_once_per_method():
    scores = pd.read_csv(ROOT / "results" / MODEL / "heldout_scores.csv.xz", dtype={"id": str})
    split = pd.read_csv(SPLIT, dtype={"id": str})
    assert not scores.duplicated(["method", "dataset", "id"]).any()
    keys = set(zip(split["dataset"], split["id"]))
    assert set(zip(scores["dataset"], scores["id"])) <= keys
    pre = scores[scores["method"] == "GRADE_pre (shipped probe)"]
    assert len(pre) == len(split)  # every held-out question has GRADE_pre features
    # a math question is scored by the probe Home picks for its task: the GSM8K probe for GSM8K, the general one else
    assert set(pre[pre["dataset"] == "gsm8k"]["probe"]) == {f"{MODEL}-pre-math"}
    assert set(pre[pre["dataset"] == "triviaqa"]["probe"]) == {f"{MODEL}-pre"}


@pytest.mark.slow
def test_the_held_out_split_redraws_the_same(benchmark_caches, tmp_path):
    done = subprocess.run([sys.executable, str(ROOT / "scripts" / "build" / "score_shipped_probes.py"), "--draw-split",
                           "--data-root", str(benchmark_caches), "--out-dir", str(tmp_path)],
                          cwd=ROOT, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-2000:]
    pd.testing.assert_frame_equal(pd.read_csv(tmp_path / "heldout_split.csv"), pd.read_csv(SPLIT))


@pytest.mark.slow
def test_shipped_probe_numbers_regenerate(benchmark_caches, tmp_path):
    done = subprocess.run([sys.executable, str(ROOT / "scripts" / "build" / "score_shipped_probes.py"),
                           "--data-root", str(benchmark_caches), "--out-dir", str(tmp_path)],
                          cwd=ROOT, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-2000:]
    fresh = pd.read_csv(tmp_path / "heldout_scores.csv.xz")
    committed = pd.read_csv(ROOT / "results" / MODEL / "heldout_scores.csv.xz")
    pd.testing.assert_frame_equal(fresh, committed)
