"""The assess stage of the monitor: one measured workload in, an estimate with sound bounds and a verdict out.

``assess(meas) -> Assessment`` is the single place where the daemon turns a :class:`~flopwatch.monitor.rows.
Measurement` into FLOPs; the daemon takes any callable of that shape (``Monitor(config, assess=...)``).

:class:`ProfileAssessor` is the default: :func:`flopwatch.estimate.verdict.assess_workload`, the same sound
assessment as ``flopwatch estimate`` and ``flopwatch redteam``, on the workload's *observables* only — net
energy, duration, DRAM traffic, utilisation, idle baseline, coverage, and the SM clock and enforced power limit
where the sensor reports them. Nothing the operator declares is an input:

* ``regime`` in the row is the observed regime ("calibrated" only when every observable the calibration
  recorded is measured and inside its range; else "out-of-regime", "unconfirmed" or "uncalibrated");
* ``lower_flops``/``upper_flops`` are bounds that hold in every regime the workload could be in (outside the
  calibrated one: 0 and the hardware's efficiency envelope × net energy, capped by peak rate × time);
* ``warnings`` carry every violated assumption with its reason — the estimator's (out of regime and by how
  much, low coverage, suspicious idle baseline, clock or power limit outside calibration) and the accounting's
  (implausible readings, sensor errors, idle floor, negative net energy);
* the verdict is :func:`flopwatch.estimate.verdict.threshold_verdict` over all of them: "above" only when the
  lower bound is over the threshold, "below" only when the upper bound is under it, the estimate positive and
  finite and no warning present, otherwise "uncertain".

``--dtype`` is kept only as the operator's claim (``declared_dtype`` in the row, and a note); it never changes
the estimate.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable
from typing import Any

from flopwatch.estimate.verdict import assess_workload, threshold_verdict
from flopwatch.monitor.rows import Assessment, Measurement
from flopwatch.text import literal

log = logging.getLogger("flopwatch.monitor")

#: The assess stage's signature: measured workload → estimate, bounds, verdict, regime, warnings.
AssessFn = Callable[[Measurement], Assessment]


def _num(x: Any) -> float | None:
    if isinstance(x, bool) or not isinstance(x, (int, float)) or not math.isfinite(x):
        return None
    return float(x)


class ProfileAssessor:
    """Default assess stage: the sound assessment of a calibrated profile (module docstring).

    ``profile``: a :class:`~flopwatch.estimate.profile.Profile` (None: energy only, no estimate, verdict
    "n/a"). ``declared_dtype``: the operator's precision claim, recorded, never used.
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

    def _notes(self) -> tuple[str, ...]:
        if self.declared_dtype is None:
            return ()
        return (
            f"precision {self.declared_dtype} is the operator's claim (--dtype): recorded, not used; the regime "
            "comes from the observables",
        )

    def __call__(self, meas: Measurement) -> Assessment:
        if self.profile is None or not meas.duration_s > 0:
            return Assessment(notes=self._notes())
        try:
            d = assess_workload(
                self.profile,
                net_energy_j=meas.net_energy_j,
                duration_s=meas.duration_s,
                tb_moved=meas.tb_moved,
                mean_util=meas.mean_util,
                idle_power_w=meas.idle_power_w,
                coverage=meas.coverage,
                sm_clock_mhz=meas.mean_sm_clock_mhz,
                power_limit_w=meas.power_limit_w,
                device=meas.spec_key or meas.device_name,
                threshold_flops=self.threshold_flops,
            )
        except Exception as e:  # noqa: BLE001 - an estimator failure must never stop the daemon or lose a row
            if not self._warned:
                log.warning("cannot estimate FLOPs with this profile: %s", literal(e))
                self._warned = True
            return Assessment(
                verdict="n/a" if self.threshold_flops is None else "uncertain",
                warnings=(f"no estimate: {e}",),
                notes=self._notes(),
            )
        warnings = tuple(str(w) for w in d.get("warnings") or ())
        est, lo, hi = _num(d.get("estimate_flops")), _num(d.get("lower_flops")), _num(d.get("upper_flops"))
        return Assessment(
            estimate_flops=est,
            lower_flops=lo if lo is not None else 0.0,
            upper_flops=hi,  # None: unbounded
            confidence=_num(d.get("confidence")),
            model=d.get("model"),
            # the one rule, over the estimator's and the accounting's violated assumptions together
            verdict=threshold_verdict(est, lo, hi, self.threshold_flops, (*meas.warnings, *warnings)),
            regime=d.get("regime"),
            bound=d.get("bound"),
            calibrated_lower_flops=_num(d.get("calibrated_lower_flops")),
            calibrated_upper_flops=_num(d.get("calibrated_upper_flops")),
            warnings=warnings,
            notes=self._notes(),
        )


__all__ = ["AssessFn", "ProfileAssessor"]
