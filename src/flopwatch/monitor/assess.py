"""The assess stage of the monitor: one measured workload in, an estimate with bounds and a verdict out.

``assess(meas) -> Assessment`` is the single place where the daemon turns a :class:`~flopwatch.monitor.rows.
Measurement` into FLOPs; the daemon takes any callable of that shape (``Monitor(config, assess=...)``), so a
regime-aware estimator with sound bounds (issue 15) plugs in here without touching the accounting.

:class:`ProfileAssessor` is the default: today's calibrated-profile estimate, with the verdict rules that hold
whatever estimator is plugged in (:func:`decide`):

* "above" only when the lower bound is over the threshold;
* "below" only when the upper bound is under it, the estimate is positive and finite, **and** no assumption
  was violated (every entry in ``warnings`` — low coverage, sensor errors, implausible readings, idle baseline
  above the settled idle power, negative net energy, extrapolation — turns a "below" into "uncertain");
* a non-positive or non-finite estimate or bound is never "below": it is "uncertain".

The precision is not observed here: ``--dtype`` is the operator's *claim*. The estimate uses the profile's
calibrated precision (or the claim when one is given), the row says so in ``notes`` and leaves ``regime`` None
until a classifier from observables is plugged in.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Sequence
from typing import Any

from flopwatch.monitor.literal import literal
from flopwatch.monitor.rows import Assessment, Measurement

log = logging.getLogger("flopwatch.monitor")

#: The assess stage's signature: measured workload → estimate, bounds, verdict, regime, warnings.
AssessFn = Callable[[Measurement], Assessment]


def _finite(x: float | None) -> bool:
    return x is not None and isinstance(x, (int, float)) and math.isfinite(x)


def decide(
    estimate_flops: float | None,
    lower_flops: float | None,
    upper_flops: float | None,
    threshold_flops: float | None,
    warnings: Sequence[str] = (),
) -> str:
    """Three-valued threshold verdict with the soundness rules of the module docstring."""
    if threshold_flops is None:
        return "n/a"
    if not (_finite(estimate_flops) and _finite(lower_flops) and _finite(upper_flops)):
        return "uncertain"
    assert estimate_flops is not None and lower_flops is not None and upper_flops is not None
    if lower_flops > threshold_flops:
        return "above"
    if upper_flops < threshold_flops and estimate_flops > 0 and upper_flops > 0 and not warnings:
        return "below"
    return "uncertain"


class ProfileAssessor:
    """Default assess stage: a calibrated profile's estimate and interval, verdict by :func:`decide`.

    ``profile`` is anything with ``estimate(net_energy_j, duration_s, *, tb_moved, mean_util, dtype)``
    returning an object with ``flops, lower_flops, upper_flops, confidence, model, warnings`` (None: energy
    only, verdict "n/a"). ``declared_dtype`` is the operator's precision claim (None: the profile's own).
    """

    def __init__(
        self,
        profile: Any | None,
        *,
        threshold_flops: float | None = None,
        declared_dtype: str | None = None,
    ) -> None:
        self.profile = profile
        self.threshold_flops = threshold_flops
        self.declared_dtype = declared_dtype
        self._warned = False

    def _dtype(self) -> tuple[str, str]:
        calibrated = getattr(self.profile, "dtype", None)
        if self.declared_dtype is not None:
            return self.declared_dtype, (
                f"precision {self.declared_dtype} is the operator's claim (--dtype), not observed; "
                "a lower precision does more FLOPs per joule"
            )
        d = calibrated if isinstance(calibrated, str) and calibrated != "all" else "fp32"
        return d, (
            f"precision not observed: the estimate assumes the profile's calibrated precision ({d}); "
            "a lower precision does more FLOPs per joule"
        )

    def __call__(self, meas: Measurement) -> Assessment:
        if self.profile is None or not meas.duration_s > 0:
            return Assessment()
        dtype, note = self._dtype()
        try:
            # Net energy can dip below zero early in a workload or when the idle baseline drifts: estimate 0 J
            # (the accounting has already put a warning on a negative net energy).
            est = self.profile.estimate(
                max(0.0, meas.net_energy_j) if _finite(meas.net_energy_j) else math.nan,
                meas.duration_s,
                tb_moved=meas.tb_moved,
                mean_util=meas.mean_util,
                dtype=dtype,
            )
        except Exception as e:  # noqa: BLE001 - an estimator failure must never stop the daemon or lose a row
            if not self._warned:
                log.warning("cannot estimate FLOPs with this profile: %s", literal(e))
                self._warned = True
            warning = f"no estimate: {e}"
            return Assessment(
                verdict="n/a" if self.threshold_flops is None else "uncertain",
                warnings=(warning,),
                notes=(note,),
            )
        warnings = tuple(str(w) for w in getattr(est, "warnings", ()) or ())
        flops, lo, hi = float(est.flops), float(est.lower_flops), float(est.upper_flops)
        return Assessment(
            estimate_flops=flops,
            lower_flops=lo,
            upper_flops=hi,
            confidence=float(est.confidence),
            model=str(est.model),
            verdict=decide(flops, lo, hi, self.threshold_flops, (*meas.warnings, *warnings)),
            regime=None,
            warnings=warnings,
            notes=(note,),
        )
