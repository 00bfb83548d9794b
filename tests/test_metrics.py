"""grade.common.metrics: selective answering (the accuracy-coverage curve, accuracy at a coverage, the area) checked
against hand counts and against brute force over every order of tied scores."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from grade.common.metrics import (accuracy_at_coverage, accuracy_coverage, area_under_accuracy_coverage, auroc,
                           selective_metrics)


def test_the_curve_counts_right_answers_among_the_highest_scores():
    y = np.array([1, 0, 1, 0])
    s = np.array([0.9, 0.8, 0.7, 0.1])
    coverage, accuracy = accuracy_coverage(y, s)
    assert coverage.tolist() == [0.25, 0.5, 0.75, 1.0]
    assert accuracy == pytest.approx([1, 1 / 2, 2 / 3, 1 / 2])
    assert accuracy_at_coverage(y, s, 0.5) == pytest.approx(0.5)
    assert area_under_accuracy_coverage(y, s) == pytest.approx((1 + 1 / 2 + 2 / 3 + 1 / 2) / 4)
    # the input order does not matter, only the scores
    order = np.array([3, 1, 0, 2])
    assert accuracy_coverage(y[order], s[order])[1] == pytest.approx(accuracy)


def test_chance_oracle_and_a_reversed_detector():
    rng = np.random.default_rng(0)
    y = (rng.random(200) < 0.3).astype(int)
    base = y.mean()
    assert accuracy_coverage(y, np.zeros(200))[1] == pytest.approx(np.full(200, base))  # one tie: chance
    oracle = accuracy_coverage(y, y.astype(float))[1]
    assert (oracle[: y.sum()] == 1).all() and oracle[-1] == pytest.approx(base)
    assert accuracy_at_coverage(y, -y.astype(float), 0.5) == 0.0  # the unanswerable first, 100 of 140
    assert area_under_accuracy_coverage(y, y) > area_under_accuracy_coverage(y, rng.random(200)) > \
        area_under_accuracy_coverage(y, -y.astype(float))


def test_ties_count_the_expectation_over_every_order():
    """A yes/no detector (Judge) or equal lengths: the k-th answer inside a group of ties is a random member."""
    y = np.array([1, 1, 0, 0, 1, 0, 1])
    s = np.array([1, 1, 1, 0, 0, 0, 0.5])
    groups = {}
    for i, v in enumerate(s):
        groups.setdefault(-v, []).append(i)
    curves = []
    for orders in itertools.product(*(itertools.permutations(g) for _, g in sorted(groups.items()))):
        ranked = [i for group in orders for i in group]
        curves.append(np.cumsum(y[ranked]) / np.arange(1, len(y) + 1))
    assert accuracy_coverage(y, s)[1] == pytest.approx(np.mean(curves, axis=0))


def test_a_fractional_coverage_answers_the_next_question_with_that_probability():
    y, s = np.array([1, 0, 1]), np.array([3.0, 2.0, 1.0])
    # 1.5 questions: the first (right) and half of the second (wrong): 1 right of 1.5 answered
    assert accuracy_at_coverage(y, s, 0.5) == pytest.approx(1 / 1.5)
    assert accuracy_at_coverage(y, s, 1.0) == pytest.approx(2 / 3)
    assert np.isnan(accuracy_at_coverage(y, np.array([3.0, np.nan, 1.0]), 0.5))
    assert np.isnan(area_under_accuracy_coverage([], []))


def test_selective_metrics_sit_beside_the_base_rate_and_the_oracle_with_intervals():
    rng = np.random.default_rng(1)
    y = np.r_[np.ones(30, int), np.zeros(50, int)]
    s = y + rng.normal(0, 0.8, len(y))
    m = selective_metrics(y, s, coverage=0.5, n_boot=200, seed=3)
    assert m["n"] == 80 and m["positives"] == 30 and m["base_rate"] == pytest.approx(30 / 80)
    assert m["oracle_acc_at_coverage"] == pytest.approx(30 / 40)
    assert m["base_rate"] < m["acc_at_coverage"] < m["oracle_acc_at_coverage"]
    assert m["acc_at_coverage_lo"] <= m["acc_at_coverage"] <= m["acc_at_coverage_hi"]
    assert m["auacc_lo"] <= m["auacc"] <= m["auacc_hi"] <= m["oracle_auacc"]
    assert auroc(y, s) > 0.7  # the detector ranks well; its curve says how much that buys
    again = selective_metrics(y, s, coverage=0.5, n_boot=200, seed=3)
    assert again == m  # seeded
    missing = selective_metrics(y, np.where(np.arange(80) == 5, np.nan, s), n_boot=50)
    assert np.isnan(missing["acc_at_coverage"]) and np.isnan(missing["auacc_lo"])
