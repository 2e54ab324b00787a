"""Threshold verification: is a workload above a compute threshold, or consistent with a declaration?

This is the Jetson study's proposed next step (Fowler 2026, §"Future work"): turn an estimate with a
prediction interval into a decision at a stated confidence. The decision is deliberately three-valued:
"above" only when the whole interval lies above the threshold, "below" only when it lies below,
"uncertain" otherwise — a verifier should not accuse (or clear) on a point estimate alone.

Two answers, never mixed (issue 21): :func:`verdict` and :func:`threshold_rates` measure the **calibrated
interval** (the estimate's own accuracy; it never makes a verifier's "below"), while :func:`heldout_assessments`
judges held-out runs as the verifier does, with :func:`flopwatch.estimate.verdict.assess` (sound bounds).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from flopwatch.errors import InputError
from flopwatch.estimate.intervals import Estimate
from flopwatch.estimate.verdict import declaration_verdict, threshold_verdict
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
    declaration: :func:`flopwatch.estimate.verdict.declaration_verdict` on the same interval ("consistent",
    "inconsistent", or "unverified" when a warning forbids trusting the upper bound).
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
        return declaration_verdict(est.lower_flops, est.upper_flops, declared_flops, tuple(est.warnings))
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


#: Splits whose held-out runs are judged by :func:`heldout_assessments` (the first ones of the evaluation's draw):
#: one calibration and ``n_test`` assessments per split, ~1 ms each, so 50 splits keep ``run --quick`` fast while
#: judging every frontier run many times over (each is held out in about a third of the splits).
VERDICT_SPLITS = 50
#: What a verdict needs when the profile gave no positive estimate (the rule of ``estimate.verdict.assess``).
NO_ESTIMATE_WARNING = "no positive calibrated estimate: never 'below'"


@dataclass(frozen=True)
class HeldoutAssessments:
    """:func:`flopwatch.estimate.verdict.assess` of each held-out run of the first splits of an evaluation,
    judged by a profile calibrated on that split's training runs only (the verifier's view of an unseen run).

    Arrays are (splits used, n_test); ``warnings`` holds, per case (row-major), the violated assumptions that
    block "below". :meth:`verdicts` applies the one threshold rule
    (:func:`~flopwatch.estimate.verdict.threshold_verdict`) at any threshold; the assessments themselves are made
    without one, so a threshold costs no new assessment."""

    splits: np.ndarray  # (k,) indices of the evaluation's splits used
    test_idx: np.ndarray  # (k, n_test) indices into the evaluation's records
    truth: np.ndarray
    estimate_flops: np.ndarray  # NaN: no calibrated estimate
    verdict_lower_flops: np.ndarray
    verdict_upper_flops: np.ndarray  # inf: unbounded
    decisive_at: np.ndarray  # T ÷ estimate above which "below" is possible; NaN: never (a warning)
    warnings: tuple[tuple[str, ...], ...]
    # every run's bounds were summed over the trace's windows (clock, power limit, pipe counters if recorded)
    windowed: bool
    failed_splits: tuple[str, ...] = ()  # splits left out: their calibration failed (the reason)

    @property
    def n(self) -> int:
        return int(self.truth.size)

    def verdicts(self, threshold_flops: np.ndarray | float) -> np.ndarray:
        """The verdict of every case at ``threshold_flops`` (a scalar, or one threshold per case)."""
        thr = np.broadcast_to(np.asarray(threshold_flops, dtype=float), self.truth.shape).ravel()
        est, lo, up = (
            a.ravel() for a in (self.estimate_flops, self.verdict_lower_flops, self.verdict_upper_flops)
        )
        out = [
            threshold_verdict(
                None if not math.isfinite(est[i]) else float(est[i]),
                float(lo[i]),
                float(up[i]),
                float(thr[i]),
                self.warnings[i],
            )
            for i in range(thr.size)
        ]
        return np.array(out, dtype=object).reshape(self.truth.shape)

    def decisiveness(self, factors: Sequence[float]) -> dict[str, Any]:
        """How decisive the verdict is on honest held-out runs: the median ``decisive_at`` (T ÷ estimate, what a
        verifier reads), the same as T ÷ truth (the smallest threshold, relative to the run's true FLOPs, that
        gives "below"), the median accusation lower bound ÷ truth (T under it gives "above"), the share of cases a warning keeps from ever being "below", and at each factor f the
        shares "below" and "above" at T = f × truth."""
        free = np.array([not w for w in self.warnings]).reshape(self.truth.shape)
        d = self.decisive_at[free & np.isfinite(self.decisive_at)]
        dt = (self.verdict_upper_flops / self.truth)[free & np.isfinite(self.verdict_upper_flops)]
        acc = (self.verdict_lower_flops / self.truth).ravel()
        rows = []
        for f in factors:
            v = self.verdicts(self.truth * f)
            rows.append(
                {
                    "factor": float(f),
                    "below_rate": float(np.mean(v == "below")),
                    "above_rate": float(np.mean(v == "above")),
                    "uncertain_rate": float(np.mean(v == "uncertain")),
                }
            )
        return {
            "median_decisive_at": float(np.median(d)) if d.size else None,
            "median_decisive_at_truth": float(np.median(dt)) if dt.size else None,
            "decisive_at_truth_range": [float(dt.min()), float(dt.max())] if dt.size else None,
            # "above" is possible for T under the accusation's lower bound: its median relative to the truth
            "median_above_at_truth": float(np.median(acc)) if acc.size else None,
            "blocked_rate": float(1.0 - free.mean()) if self.n else None,
            "by_truth_factor": rows,
        }

    def warning_counts(self) -> dict[str, int]:
        """How many cases each violated assumption blocked (most frequent first)."""
        c: dict[str, int] = {}
        for ws in self.warnings:
            for w in ws:
                c[w] = c.get(w, 0) + 1
        return dict(sorted(c.items(), key=lambda kv: -kv[1]))


def heldout_assessments(
    ev: Any,
    calibrate_split: Callable[[Sequence[Any]], Any],
    *,
    sampled: Mapping[str, Any] | None = None,
    max_splits: int = VERDICT_SPLITS,
    device: Any = None,
) -> HeldoutAssessments:
    """Assess every held-out run of the first ``max_splits`` splits of ``ev`` (an
    :class:`~flopwatch.evaluate.splits.EvaluationResult`) as the verifier would: ``calibrate_split(train_records)``
    gives the profile of a split (fitted on its training runs only), and
    :func:`~flopwatch.estimate.verdict.assess_record` judges each test run with it, on the run's device
    (``device`` overrides) and, where ``sampled`` has the run's label, over the trace's windows."""
    from flopwatch.estimate.verdict import assess_record

    recs = list(ev.records)
    k = max(0, min(int(max_splits), int(ev.n_splits)))
    used: list[int] = []
    rows: list[tuple[float, float, float, float]] = []
    warns: list[tuple[str, ...]] = []
    failed: list[str] = []
    for s in range(k):
        try:
            prof = calibrate_split([recs[i] for i in ev.train_idx[s]])
        except InputError as e:  # a split the calibration cannot fit is left out, and said so
            failed.append(f"split {s}: {e}")
            continue
        used.append(s)
        for i in ev.test_idx[s]:
            r = recs[i]
            a = assess_record(prof, r, device=device, sampled=(sampled or {}).get(r.label))
            e = finite(a.estimate_flops)
            d = math.nan if a.decisive_at is None else a.decisive_at
            rows.append((math.nan if e is None else e, a.verdict_lower_flops, a.verdict_upper_flops, d))
            w = tuple(a.warnings)
            if e is None or e <= 0:  # assess adds this at a threshold: the profile gave no usable estimate
                w = (*w, NO_ESTIMATE_WARNING)
            warns.append(w)
    test = np.asarray(ev.test_idx)[used].reshape(len(used), -1)
    cols = np.array(rows, dtype=float).reshape(test.shape + (4,))
    judged = {recs[i].label for i in test.ravel()}
    return HeldoutAssessments(
        splits=np.asarray(used, dtype=int),
        test_idx=test,
        truth=np.asarray(ev.truth, dtype=float)[test],
        estimate_flops=cols[..., 0],
        verdict_lower_flops=cols[..., 1],
        verdict_upper_flops=cols[..., 2],
        decisive_at=cols[..., 3],
        warnings=tuple(warns),
        windowed=bool(judged) and judged <= set(sampled or {}),
        failed_splits=tuple(failed),
    )
