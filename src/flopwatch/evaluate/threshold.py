"""Threshold verification: is a workload above a compute threshold, or consistent with a declaration?

This is the Jetson study's proposed next step (Fowler 2026, §"Future work"): turn an estimate with a
prediction interval into a decision at a stated confidence. The decision is deliberately three-valued:
"above" only when the whole interval lies above the threshold, "below" only when it lies below,
"uncertain" otherwise — a verifier should not accuse (or clear) on a point estimate alone.
"""

from __future__ import annotations

import numpy as np

from flopwatch.errors import InputError
from flopwatch.estimate.intervals import Estimate
from flopwatch.estimate.verdict import threshold_verdict
from flopwatch.units import finite


def _check(value: float | None, name: str) -> None:
    if value is None:
        return
    x = finite(value)
    if x is None or x <= 0:
        raise InputError(f"must be a positive finite FLOP count, got {value!r}", field=name)


def verdict(
    est: Estimate, *, threshold_flops: float | None = None, declared_flops: float | None = None
) -> str:
    """Decision for one estimate.

    threshold: :func:`flopwatch.estimate.verdict.threshold_verdict` on the calibrated interval — "above"
    (lower bound > threshold), "below" (upper bound < threshold, a positive estimate, no warning), else
    "uncertain". This interval holds only in the calibrated regime: verifiers use
    :func:`flopwatch.estimate.verdict.assess`, whose bounds hold in every regime.
    declaration: "consistent" (declared inside [lower, upper]) or "inconsistent".
    Neither: "n/a". Both at once is an InputError (ask one question at a time).
    """
    _check(threshold_flops, "threshold_flops")
    _check(declared_flops, "declared_flops")
    if threshold_flops is not None and declared_flops is not None:
        raise InputError(
            "give either a threshold or a declared FLOP count, not both", field="threshold_flops"
        )
    if threshold_flops is not None:
        # the project's one threshold rule; the estimate's own warnings (extrapolation, low coverage, a
        # non-positive estimate) forbid a "below" as everywhere else
        return threshold_verdict(
            est.flops, est.lower_flops, est.upper_flops, threshold_flops, tuple(est.warnings)
        )
    if declared_flops is not None:
        return "consistent" if est.lower_flops <= declared_flops <= est.upper_flops else "inconsistent"
    return "n/a"


def threshold_rates(
    truth: np.ndarray, lower: np.ndarray, upper: np.ndarray, point: np.ndarray, thresholds: np.ndarray
) -> dict[str, np.ndarray]:
    """FP/FN rates of the "above threshold" decision over ``thresholds`` (vectorised).

    All inputs but ``thresholds`` have the same shape (any), flattened. For each threshold T:
    * interval decision (``verdict``): positive = lower > T. FP rate = P(positive | truth ≤ T), FN rate =
      P(not positive | truth > T); ``uncertain_rate`` = share of runs whose interval straddles T;
    * point decision: positive = estimate > T (what a verifier without intervals would do).
    Rates are NaN where the conditioning class is empty.
    """
    tr, lo, up, pt = (np.asarray(a, dtype=float).ravel()[None, :] for a in (truth, lower, upper, point))
    T = np.asarray(thresholds, dtype=float)[:, None]
    pos = tr > T
    neg = ~pos
    n_pos, n_neg = pos.sum(1), neg.sum(1)

    def rate(mask: np.ndarray, cls: np.ndarray, n: np.ndarray) -> np.ndarray:
        with np.errstate(invalid="ignore", divide="ignore"):
            return np.where(n > 0, (mask & cls).sum(1) / np.maximum(n, 1), np.nan)

    above = lo > T
    below = up < T
    return {
        "threshold_flops": T[:, 0],
        "n_truth_above": n_pos,
        "n_truth_below": n_neg,
        "fp_rate": rate(above, neg, n_neg),
        "fn_rate": rate(~above, pos, n_pos),
        "wrong_below_rate": rate(below, pos, n_pos),  # cleared although above: the costly miss
        "uncertain_rate": (~above & ~below).mean(1),
        "point_fp_rate": rate(pt > T, neg, n_neg),
        "point_fn_rate": rate(pt <= T, pos, n_pos),
    }
