"""The assess stage of the monitor: one measured workload in, an estimate with sound bounds and a verdict out.

``assess(meas) -> Assessment`` is the single place where the daemon turns a :class:`~flopwatch.monitor.rows.
Measurement` into FLOPs; the daemon takes any callable of that shape (``Monitor(config, assess=...)``).

:class:`ProfileAssessor` is the default: :func:`flopwatch.estimate.verdict.assess`, called once, the same sound
assessment as ``flopwatch estimate`` and ``flopwatch redteam``, on the workload's *observables* only — net
energy, duration, DRAM traffic, utilisation, idle baseline, coverage, and the SM clock and enforced power limit
where the sensor reports them. Nothing the operator declares is an input:

* ``regime`` in the row is the observed regime ("calibrated" only when every observable the calibration
  recorded is measured and inside its range; else "out-of-regime", "unconfirmed" or "uncalibrated");
* ``lower_flops``/``upper_flops`` are the verdict's sound bounds (physics, datasheet and the verifier's counters:
  :mod:`flopwatch.estimate.sound`); ``calibrated_*`` the profile's interval, which never makes a "below";
* ``warnings`` carry every violated assumption of the verdict with its reason — the assessment's (low coverage,
  suspicious idle baseline, impossible device, context) and the accounting's (implausible readings, sensor
  errors, idle floor, negative net energy), passed in as ``extra_warnings``;
* the verdict is :func:`flopwatch.estimate.verdict.threshold_verdict` over all of them: "above" only when the
  lower bound is over the threshold, "below" only when the upper bound is under it, the estimate positive and
  finite and no warning present, otherwise "uncertain".

``--dtype`` is kept only as the operator's claim (``declared_dtype`` in the row, and a note); it never changes
the estimate.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable, Mapping
from typing import Any

from flopwatch.estimate.observe import PIPES, Observables
from flopwatch.estimate.verdict import Assessment, assess
from flopwatch.monitor.rows import Measurement
from flopwatch.text import literal
from flopwatch.units import finite

log = logging.getLogger("flopwatch.monitor")

#: The assess stage's signature: measured workload → estimate, bounds, verdict, regime, warnings.
AssessFn = Callable[[Measurement], Assessment]


def observables(meas: Measurement) -> Observables:
    """The observables of a measured workload (never its declared precision)."""
    pipes = meas.pipe_active_s
    if pipes is not None:
        vals = {k: finite(pipes.get(k)) for k in PIPES}
        pipes = (
            {k: v for k, v in vals.items() if v is not None}
            if all(v is not None and v >= 0 for v in vals.values())
            else None
        )
    return Observables(
        net_energy_j=float(meas.net_energy_j),
        duration_s=float(meas.duration_s),
        tb_moved=finite(meas.tb_moved),
        mean_util=finite(meas.mean_util),
        sm_clock_mhz=finite(meas.mean_sm_clock_mhz),
        power_limit_w=finite(meas.power_limit_w),
        idle_power_w=finite(meas.idle_power_w),
        coverage=finite(meas.coverage),
        min_sm_clock_mhz=finite(meas.min_sm_clock_mhz),
        max_sm_clock_mhz=finite(meas.max_sm_clock_mhz),
        peak_power_w=finite(meas.peak_power_w),
        unobserved_s=finite(meas.unobserved_s),
        pipe_active_s=pipes,
        windows=meas.windows,
        pipe_observed_s=finite(meas.pipe_observed_s),
    )


#: The verifier's context for a measurement: a fixed mapping, or a function of the measurement (per device).
VerifierContext = Mapping[str, Any] | Callable[[Measurement], Mapping[str, Any] | None]


class ProfileAssessor:
    """Default assess stage: :func:`flopwatch.estimate.verdict.assess`, called once per workload with the
    accounting's warnings as ``extra_warnings`` (module docstring).

    ``profile``: a :class:`~flopwatch.estimate.profile.Profile` (None: energy only, no estimate, verdict
    "n/a"). ``declared_dtype``: the operator's precision claim, recorded, never used. ``context`` /
    ``verifier_context``: the recorded context of the rows and the verifier's, compared by ``assess``
    (a measurement's own ``context`` takes precedence over ``context``; ``verifier_context`` may be a function
    of the measurement, for per-device peaks).
    """

    def __init__(
        self,
        profile: Any | None,
        *,
        threshold_flops: float | None = None,
        declared_dtype: str | None = None,
        context: Mapping[str, Any] | None = None,
        verifier_context: VerifierContext | None = None,
    ) -> None:
        self.profile = profile
        self.threshold_flops = threshold_flops
        self.declared_dtype = declared_dtype
        self.context = context
        self.verifier_context = verifier_context
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
        if finite(meas.duration_s) is None or finite(meas.net_energy_j) is None:
            return Assessment(
                verdict="n/a" if self.threshold_flops is None else "uncertain",
                warnings=(
                    f"no assessment: duration {meas.duration_s!r} s, net energy {meas.net_energy_j!r} J",
                ),
                notes=self._notes(),
            )
        vctx = self.verifier_context
        try:
            a = assess(
                self.profile,
                observables(meas),
                device=meas.spec_key or meas.device_name,
                threshold_flops=self.threshold_flops,
                extra_warnings=meas.warnings,
                context=meas.context if meas.context is not None else self.context,
                verifier_context=vctx(meas) if callable(vctx) else vctx,
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
        return dataclasses.replace(a, notes=(*a.notes, *self._notes()))


__all__ = ["AssessFn", "ProfileAssessor", "VerifierContext", "observables"]
