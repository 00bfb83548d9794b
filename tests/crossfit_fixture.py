"""A small cross-fitted results folder written by the benchmark's own writer
(:func:`grade.studies.crossfit_report.write_crossfit`) from synthetic scores: the real schema of
``results/<model>/`` after ``python -m grade benchmark --crossfit``, without fitting anything.

TriviaQA has 300 questions (enough to cite), GSM8K 60 (too few); GRADE's shipped form separates TriviaQA's
classes far better than P-Entropy does, so the paired table has a win to report."""

from __future__ import annotations

from pathlib import Path

import numpy as np


def write_fixture(out: Path, model: str = "smollm2-135m-instruct") -> Path:
    from grade.studies.crossfit import (Column, CrossfitConfig, CrossfitData, CrossfitRun, assign_folds, main_methods,
                                        paper_variant, shipped_variant)
    from grade.studies.crossfit_report import write_crossfit

    rng = np.random.default_rng(0)
    config = CrossfitConfig(model, {}, None, None, n_boot=50)
    run = CrossfitRun(config, {}, {}, {})
    for name, n, pos in (("triviaqa", 300, 60), ("gsm8k", 60, 20)):
        y = np.r_[np.ones(pos), np.zeros(n - pos)].astype(int)
        folds = assign_folds(y, 5, 42)
        d = CrossfitData(name, np.array([f"{name}-{i}" for i in range(n)], dtype=object), y, folds, np.zeros(n, bool))
        cols = {}
        for m in main_methods():
            strength = 3.0 if m.startswith("GRADE") else 0.4
            cols[m] = Column(y * strength + rng.normal(0, 1, n), np.full(5, 0.5 * strength), m != "Judge")
        for loss in ("pre", "pos"):
            for key in (paper_variant(loss).key, shipped_variant(loss, name).key, f"GRADE_{loss}[logreg,loss,all]"):
                cols.setdefault(key, Column(y * 0.8 + rng.normal(0, 1, n), np.full(5, 0.4)))
            cols[f"GRADE_{loss} (selected)"].extra["chosen"] = [shipped_variant(loss, name).key] * 5
        run.data[name], run.columns[name] = d, cols
        run.info[name] = {"labelled": n, "answerable": pos, "unanswerable": n - pos, "eligible": True,
                          "inputs": {m: n for m in main_methods()}}
    write_crossfit(run, out)
    return out
