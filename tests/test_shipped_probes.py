"""The split the shipped probes and detectors are to be measured on (grade.studies.shipped_probes): held out per
dataset and class before they are trained (scripts/build/build_probes.py and build_detectors.py leave it out), with
at least 40 questions of each class in every pool of datasets a card cites; drawn the same on every run."""

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


@pytest.mark.slow
def test_the_held_out_split_redraws_the_same(benchmark_caches, tmp_path):
    done = subprocess.run([sys.executable, str(ROOT / "scripts" / "build" / "score_shipped_probes.py"), "--draw-split",
                           "--data-root", str(benchmark_caches), "--out-dir", str(tmp_path)],
                          cwd=ROOT, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-2000:]
    pd.testing.assert_frame_equal(pd.read_csv(tmp_path / "heldout_split.csv"), pd.read_csv(SPLIT))
