"""Threshold verification: verdicts and the FP/FN rates of the "above threshold" decision."""

from __future__ import annotations

import numpy as np
import pytest

from flopwatch.estimate import Estimate
from flopwatch.evaluate.threshold import threshold_rates, verdict


def test_verdict_edges():
    e = Estimate(flops=1e14, lower_flops=0.9e14, upper_flops=1.1e14, confidence=0.9, model="m")
    assert verdict(e, threshold_flops=0.9e14) == "uncertain"  # touching the bound is not "above"
    assert verdict(e, threshold_flops=1.1e14) == "uncertain"
    assert verdict(e, declared_flops=0.9e14) == "consistent"  # the interval is closed
    with pytest.raises(Exception, match="threshold_flops"):
        verdict(e, threshold_flops=-1.0)


def test_threshold_rates_hand_example():
    truth = np.array([1.0, 2.0, 3.0, 4.0])
    point = np.array([1.5, 1.8, 3.2, 3.9])
    lower, upper = point * 0.9, point * 1.1
    r = threshold_rates(truth, lower, upper, point, np.array([2.5]))
    # truth above 2.5: runs 3, 4 (both lower bounds 2.88, 3.51 > 2.5 → no FN); below: 1, 2 (no FP)
    assert r["n_truth_above"][0] == 2 and r["n_truth_below"][0] == 2
    assert r["fp_rate"][0] == 0 and r["fn_rate"][0] == 0
    r = threshold_rates(truth, lower, upper, point, np.array([1.7]))
    # truth above 1.7: runs 2, 3, 4. Run 2's lower bound 1.62 < 1.7 → not "above": one FN of three
    assert r["fn_rate"][0] == pytest.approx(1 / 3)
    # run 1's interval 1.35–1.65 is below, run 2's 1.62–1.98 straddles 1.7, runs 3–4 are above
    assert r["uncertain_rate"][0] == pytest.approx(1 / 4)
    # point decision: run 1 (1.5) below, run 2 (1.8) above → no point FN, no point FP
    assert r["point_fn_rate"][0] == 0 and r["point_fp_rate"][0] == 0


def test_threshold_rates_empty_class_is_nan():
    r = threshold_rates(
        np.array([1.0, 2.0]),
        np.array([0.9, 1.8]),
        np.array([1.1, 2.2]),
        np.array([1.0, 2.0]),
        np.array([10.0]),
    )
    assert np.isnan(r["fn_rate"][0]) and r["fp_rate"][0] == 0
