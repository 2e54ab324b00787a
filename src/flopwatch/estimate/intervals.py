"""Prediction intervals from calibration residuals, and the :class:`Estimate` they produce.

Residuals are leave-one-out log ratios ``r_i = log(F_i / F̂_{−i})`` of the calibration records (each
record predicted by the model fitted without it). The interval is multiplicative and symmetric in log
space, ``[F̂·e^{−q}, F̂·e^{+q}]``:

* ``conformal`` (split-conformal / jackknife on |r|; Vovk et al. 2005, Barber et al. 2021 "jackknife+"):
  q = the ⌈(n+1)·c⌉-th smallest |r_i|. Distribution-free, but needs n ≥ ⌈c/(1−c)⌉ records (9 for 90 %,
  19 for 95 %) — otherwise that order statistic does not exist.
* ``student-t`` fallback for smaller n (or on request): q = t_{n−1, (1+c)/2} · s · √(1 + 1/n), with s the
  RMS of r (the classic normal prediction interval in log space).

Coverage is measured, not assumed: ``flopwatch evaluate`` reports it per model.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from flopwatch.errors import InputError

INTERVAL_METHODS = ("auto", "conformal", "student-t")


@dataclass(frozen=True)
class Estimate:
    """A FLOP estimate with its prediction interval at ``confidence`` (e.g. 0.9)."""

    flops: float
    lower_flops: float
    upper_flops: float
    confidence: float
    model: str
    interval_method: str = ""
    warnings: tuple[str, ...] = field(default=())

    @property
    def rel_halfwidth(self) -> float:
        """Half the interval width relative to the estimate (a quick "± x %")."""
        if self.flops == 0 or not math.isfinite(self.flops):
            return math.inf
        return (self.upper_flops - self.lower_flops) / 2.0 / abs(self.flops)

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["warnings"] = list(self.warnings)
        return d


def check_confidence(confidence: float) -> float:
    if isinstance(confidence, bool) or not isinstance(confidence, (int, float)) or not 0.0 < confidence < 1.0:
        raise InputError(
            f"must be strictly between 0 and 1 (e.g. 0.9), got {confidence!r}", field="confidence"
        )
    return float(confidence)


def conformal_rank(n: int, confidence: float) -> int:
    """1-based rank of the order statistic used by split-conformal, ⌈(n+1)·c⌉ (may exceed n)."""
    # tiny epsilon: (n+1)·c is often an exact integer in decimal but not in binary
    return int(math.ceil((n + 1) * confidence - 1e-9))


def log_halfwidth(
    residuals: np.ndarray, confidence: float, method: str = "auto"
) -> tuple[np.ndarray, np.ndarray]:
    """Half-width q of the log interval per row of ``residuals`` (shape (n,) or (B, n)); and the method used.

    Returns (q, used) where ``used`` is an array of method names (for 1-D input, 0-d arrays).
    """
    if method not in INTERVAL_METHODS:
        raise InputError(
            f"unknown interval method {method!r}; choose one of {', '.join(INTERVAL_METHODS)}",
            field="interval",
        )
    r = np.asarray(residuals, dtype=float)
    n = r.shape[-1]
    if n < 2:
        raise InputError(f"need at least 2 calibration residuals for an interval, got {n}")
    k = conformal_rank(n, confidence)
    use_conformal = method == "conformal" or (method == "auto" and k <= n)
    if method == "conformal" and k > n:
        raise InputError(
            f"split-conformal at {confidence:.0%} needs at least {math.ceil(confidence / (1 - confidence))} "
            f"calibration records, have {n}; use a lower confidence or --interval student-t",
            field="confidence",
        )
    if use_conformal:
        q = np.sort(np.abs(r), axis=-1)[..., k - 1]
        return q, np.full(q.shape, "conformal")
    s = np.sqrt(np.mean(r**2, axis=-1))
    # Student-t quantile: scipy.special.stdtrit is what scipy.stats.t.ppf evaluates (scipy.stats costs ~1.5 s)
    from scipy.special import stdtrit

    q = stdtrit(n - 1, 0.5 + confidence / 2.0) * s * math.sqrt(1.0 + 1.0 / n)
    return q, np.full(np.shape(q), "student-t")
