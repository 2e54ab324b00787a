"""Sound threshold verdicts for one workload: estimate, regime, bounds that hold in every regime, warnings.

:func:`assess` is the one public entry point (the CLI's ``estimate``/``redteam`` and the monitor's ledger
rows call it). It never reads a declared precision, configuration or label: the profile's own precision is
assumed only after the run's observables place it in the calibrated regime.

* **In regime** (every observable the calibration recorded is measured and inside its range, coverage,
  idle baseline and estimate fine): the calibrated interval, made monotone in the two inputs an evader can
  inflate — the DRAM counter (the upper bound is the larger of the model at the observed traffic and at the
  regime's lowest bytes per joule; every shipped model's FLOPs fall as DRAM traffic rises, so inflating it
  never lowers the upper bound) and the idle baseline (net energy is recomputed with the calibration's idle
  when the run's baseline is higher).
* **Any violated assumption** (out of regime, an observable not measured, low coverage, suspicious idle,
  non-positive estimate, negative net energy): the calibrated interval is not used. The lower bound is 0
  (energy can be spent without FLOPs) and the upper bound is the hardware's
  (:mod:`flopwatch.estimate.bounds`): net energy × the efficiency envelope, capped by peak rate × time;
  with low coverage only peak rate × time (the energy itself is interpolated).

The verdict (:func:`threshold_verdict`, the project's one threshold rule): "above" only when the lower
bound is over the threshold; "below" only when the sound upper bound is under it, the estimate is positive
and finite, and no assumption was violated — every violated assumption is a line in ``warnings`` saying what
and by how much, and any of them turns a "below" into "uncertain"; otherwise "uncertain".
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from flopwatch.devices import DeviceSpec, get_device
from flopwatch.errors import InputError
from flopwatch.estimate.bounds import (
    Envelope,
    check_idle_baseline,
    envelope_flops_per_j,
    idle_drift_w,
    peak_rate_bound,
    resolve_device,
)
from flopwatch.estimate.regime import Deviation, Observables, check_regime, widened

if TYPE_CHECKING:
    from flopwatch.estimate.profile import Profile
    from flopwatch.records import WorkloadRecord

MIN_COVERAGE = 0.95  # as flopwatch.estimate.profile.MIN_COVERAGE: below it energy is bridged over gaps
#: Relative session-to-session J/TFLOP shift (SD) measured on the Orin Nano (Fowler 2026: three sessions
#: of identical configurations, SD 0.76 %). The interval is widened by z_c · this in quadrature.
SESSION_JPT_SD = 0.0076


@dataclass(frozen=True)
class Assessment:
    """Everything a verifier says about one workload."""

    estimate_flops: float | None
    lower_flops: float
    upper_flops: float
    regime: str  # "calibrated" | "out-of-regime" | "unconfirmed" | "uncalibrated"
    bound: str  # where upper_flops comes from
    verdict: str  # "above" | "below" | "uncertain" | "n/a"
    threshold_flops: float | None = None
    confidence: float | None = None
    calibrated_lower_flops: float | None = None
    calibrated_upper_flops: float | None = None
    model: str | None = None
    device: str | None = None
    deviations: tuple[Deviation, ...] = ()
    warnings: tuple[str, ...] = field(default=())
    envelope: Envelope | None = None

    def to_dict(self) -> dict[str, Any]:
        def fin(x: float | None) -> float | None:
            return x if x is None or math.isfinite(x) else None

        return {
            "estimate_flops": fin(self.estimate_flops),
            "lower_flops": fin(self.lower_flops),
            "upper_flops": fin(self.upper_flops),  # null: unbounded
            "regime": self.regime,
            "bound": self.bound,
            "verdict": self.verdict,
            "threshold_flops": self.threshold_flops,
            "confidence": self.confidence,
            "calibrated_lower_flops": fin(self.calibrated_lower_flops),
            "calibrated_upper_flops": fin(self.calibrated_upper_flops),
            "model": self.model,
            "device": self.device,
            "regime_deviations": [d.to_dict() for d in self.deviations],
            "warnings": list(self.warnings),
            "envelope": None if self.envelope is None else self.envelope.to_dict(),
        }


def _num(x: Any) -> float | None:
    if isinstance(x, bool) or not isinstance(x, (int, float)) or not math.isfinite(x):
        return None
    return float(x)


def observables_from_record(r: WorkloadRecord) -> Observables:
    """The observables of a record (its label, config and dtype are never read)."""
    raw = r.raw
    clock = _num(raw.get("mean_sm_clock_mhz", raw.get("sm_clock_mhz")))
    return Observables(
        net_energy_j=r.net_energy_j,
        duration_s=r.duration_s,
        tb_moved=r.tb_moved,
        mean_util=r.mean_util,
        sm_clock_mhz=clock,
        power_limit_w=_num(raw.get("power_limit_w")),
        idle_power_w=r.idle_power_w,
        coverage=_num(raw.get("coverage")),
    )


def threshold_verdict(
    estimate_flops: float | None,
    lower_flops: float | None,
    upper_flops: float | None,
    threshold_flops: float | None,
    warnings: Sequence[str] = (),
) -> str:
    """The one threshold rule of flopwatch (``estimate``, ``redteam``, the monitor's rows, window verdicts).

    * "n/a" without a threshold;
    * "above" only when the lower bound is finite and over the threshold;
    * "below" only when the (sound) upper bound is finite and under it, the estimate is positive and finite,
      **and** no assumption was violated: any entry in ``warnings`` (out of regime, low coverage, low
      utilisation, suspicious idle baseline, clock or power limit outside calibration, implausible readings,
      sensor errors, negative net energy) turns a "below" into "uncertain";
    * otherwise "uncertain" — a non-positive or non-finite estimate or bound is never "below".
    """
    if threshold_flops is None:
        return "n/a"
    if _num(lower_flops) is not None and lower_flops > threshold_flops:  # type: ignore[operator]
        return "above"
    e, u = _num(estimate_flops), _num(upper_flops)
    if e is not None and e > 0 and u is not None and 0 <= u < threshold_flops and not warnings:
        return "below"
    return "uncertain"


def _spec(device: DeviceSpec | str | None, profile: Profile | None) -> DeviceSpec | None:
    if isinstance(device, DeviceSpec):
        return device
    if device:
        try:
            return get_device(str(device).removeprefix("sim:").split(":")[0])
        except InputError:
            spec = resolve_device(device)
            if spec is not None:
                return spec
        # a sensor name that names no model (``jetson:VDD_CPU_GPU_CV``): the profile's device, which it was
        # calibrated on and which the monitor applies it to
    if profile is not None and profile.device_key:
        return resolve_device(profile.device_key)
    return None


def profile_envelope(
    profile: Profile | None, spec: DeviceSpec | None, obs: Observables | None = None
) -> Envelope:
    """The efficiency envelope of ``profile``'s device; the DVFS factor is dropped only when the run's clock
    and power limit are observed and inside the calibrated ranges."""
    measured = profile.efficiency if profile is not None else {}
    calibrated_state = False
    if profile is not None and obs is not None:
        ranges = profile.regime_ranges
        vals = obs.values()
        keys = ("sm_clock_mhz", "power_limit_w")
        if all(k in ranges for k in keys):
            calibrated_state = not check_regime({k: vals[k] for k in keys}, {k: ranges[k] for k in keys})
    return envelope_flops_per_j(measured, spec, power_state_calibrated=calibrated_state)


def assess(
    profile: Profile | None,
    obs: Observables,
    *,
    device: DeviceSpec | str | None = None,
    threshold_flops: float | None = None,
    confidence: float | None = None,
    label: str | None = None,
    session_shift: bool = True,
) -> Assessment:
    """Estimate, sound bounds, regime, verdict and warnings for one workload (see the module docstring)."""
    spec = _spec(device, profile)
    warnings: list[str] = []
    E, t = float(obs.net_energy_j), float(obs.duration_s)
    if not (math.isfinite(t) and t > 0):
        raise InputError(
            f"must be a finite number > 0, got {obs.duration_s!r}", record=label, field="duration_s"
        )
    if not math.isfinite(E):
        raise InputError(
            f"must be a finite number, got {obs.net_energy_j!r}", record=label, field="net_energy_j"
        )
    violated: list[str] = []
    if E < 0:
        violated.append(
            f"negative net energy {E:.4g} J: the idle baseline is above the run's power (baseline taken under load?)"
        )
    E_pos = max(0.0, E)

    # idle baseline: a higher baseline than the calibration's takes energy away from the run
    cal_idle = None
    if profile is not None:
        cal_idle = profile.verifier.get("idle_power_w", profile.idle_power_w)
    E_hi = E_pos
    if obs.idle_power_w is not None and cal_idle is not None:
        E_hi = E_pos + max(0.0, float(obs.idle_power_w) - float(cal_idle)) * t
        ic = check_idle_baseline(float(obs.idle_power_w), spec=spec, reference_idle_w=float(cal_idle))
        violated.extend(f"idle baseline suspicious: {r}" for r in ic.reasons)

    cov_low = obs.coverage is not None and obs.coverage < MIN_COVERAGE
    if cov_low:
        violated.append(
            f"telemetry covers only {obs.coverage:.0%} of the run: its energy is partly interpolated over gaps, "
            "so only the peak-rate bound holds"
        )

    est_flops: float | None = None
    cal_lo = cal_hi = None
    conf = None
    model = None
    deviations: list[Deviation] = []
    if profile is None:
        violated.append("no calibration profile: nothing places the run in a calibrated regime")
    else:
        model = profile.model_name
        deviations = check_regime(obs.values(), profile.regime_ranges)
        violated.extend(d.reason for d in deviations)
        dtype = profile.dtype if profile.dtype != "all" else "fp32"  # never the run's declared precision
        try:
            est = profile.estimate(
                E_pos,
                t,
                tb_moved=obs.tb_moved,
                mean_util=obs.mean_util,
                dtype=dtype,
                confidence=confidence,
                label=label,
            )
        except InputError as e:
            violated.append(f"no calibrated estimate: {e.detail}")
            est = None
        if est is not None:
            est_flops, conf = est.flops, est.confidence
            cal_lo, cal_hi = est.lower_flops, est.upper_flops
            # the profile's own extrapolation notes duplicate the regime check; keep the others
            warnings.extend(
                w
                for w in est.warnings
                if "outside the calibration range" not in w and "below the calibration gate" not in w
            )
            if not (math.isfinite(est.flops) and est.flops > 0):
                violated.append("estimate is not positive: no calibrated statement is possible")
            else:
                cal_lo, cal_hi = _monotone_upper(profile, est, obs, E_pos, E_hi, t, dtype, confidence)
                if session_shift:
                    q = _session_widening(est.confidence)
                    cal_lo, cal_hi = cal_lo * math.exp(-q), cal_hi * math.exp(q)

    env = profile_envelope(profile, spec, obs)
    if not violated and cal_lo is not None and cal_hi is not None:
        lower, upper, regime, bound = cal_lo, cal_hi, "calibrated", "calibrated interval"
    else:
        lower = 0.0
        peak = peak_rate_bound(spec, t)
        if cov_low:
            upper, bound = peak, "peak rate × duration (datasheet)"
        else:
            e_bound = E_hi * env.flops_per_j if math.isfinite(env.flops_per_j) else math.inf
            if e_bound <= peak:
                upper, bound = e_bound, f"net energy × efficiency envelope ({env.basis})"
            else:
                upper, bound = peak, "peak rate × duration (datasheet)"
        if cal_hi is not None and math.isfinite(cal_hi) and upper < cal_hi:
            upper = cal_hi  # never tighter than the calibrated answer
        if not math.isfinite(upper):
            bound = f"unbounded ({env.basis}; device {'unknown' if spec is None else spec.key})"
        regime = (
            "out-of-regime"
            if any(d.value is not None for d in deviations)
            else ("uncalibrated" if profile is None else "unconfirmed")
        )
    ok = est_flops is not None and math.isfinite(est_flops) and est_flops > 0
    if threshold_flops is not None and not ok and upper < threshold_flops:
        warnings.append("no positive estimate: never 'below'")
    v = threshold_verdict(est_flops, lower, upper, threshold_flops, (*violated, *warnings))
    return Assessment(
        estimate_flops=est_flops,
        lower_flops=float(lower),
        upper_flops=float(upper),
        regime=regime,
        bound=bound,
        verdict=v,
        threshold_flops=threshold_flops,
        confidence=conf,
        calibrated_lower_flops=cal_lo,
        calibrated_upper_flops=cal_hi,
        model=model,
        device=None if spec is None else spec.key,
        deviations=tuple(deviations),
        warnings=tuple(violated + warnings),
        envelope=env,
    )


def _session_widening(confidence: float) -> float:
    from scipy import stats

    return float(stats.norm.ppf(0.5 + confidence / 2.0)) * SESSION_JPT_SD


def _monotone_upper(
    profile: Profile,
    est: Any,
    obs: Observables,
    E: float,
    E_hi: float,
    t: float,
    dtype: str,
    confidence: float | None,
) -> tuple[float, float]:
    """Calibrated (lower, upper) with the upper made monotone in the DRAM counter and the idle baseline."""
    lo, hi = est.lower_flops, est.upper_flops
    cands = [(E_hi, obs.tb_moved)]
    rng = profile.regime_ranges.get("bytes_per_j")
    if obs.tb_moved is not None and rng is not None and E_hi > 0:
        floor_bpj = widened("bytes_per_j", rng[0], rng[1])[0]
        tb_lo = min(obs.tb_moved, floor_bpj * E_hi / 1e12)
        cands.append((E_hi, tb_lo))
    for e, tb in cands:
        if e == E and tb == obs.tb_moved:
            continue
        try:
            alt = profile.estimate(
                e, t, tb_moved=tb, mean_util=obs.mean_util, dtype=dtype, confidence=confidence
            )
        except InputError:
            continue
        if math.isfinite(alt.upper_flops):
            hi = max(hi, alt.upper_flops)
    return lo, hi


def assess_record(
    profile: Profile | None,
    record: WorkloadRecord,
    *,
    device: DeviceSpec | str | None = None,
    threshold_flops: float | None = None,
    confidence: float | None = None,
) -> Assessment:
    """:func:`assess` on a record's observables (the device defaults to the record's device name)."""
    dev = (
        device if device is not None else (record.raw.get("device_name") or record.raw.get("device") or None)
    )
    if dev is not None and resolve_device(dev) is None and not isinstance(dev, DeviceSpec):
        dev = None  # an unknown name: fall back to the profile's device
    return assess(
        profile,
        observables_from_record(record),
        device=dev,
        threshold_flops=threshold_flops,
        confidence=confidence,
        label=record.label,
    )


def session_drift_w(profile: Profile | None, spec: DeviceSpec | None) -> float | None:
    """The idle drift a profile tolerates (its own record, else scaled from its idle)."""
    if profile is None:
        return None
    d = profile.verifier.get("idle_drift_w")
    return float(d) if d is not None else idle_drift_w(profile.idle_power_w, spec)


def assess_workload(
    profile: Profile | None,
    *,
    net_energy_j: float,
    duration_s: float,
    tb_moved: float | None = None,
    mean_util: float | None = None,
    idle_power_w: float | None = None,
    coverage: float | None = None,
    sm_clock_mhz: float | None = None,
    power_limit_w: float | None = None,
    device: DeviceSpec | str | None = None,
    threshold_flops: float | None = None,
) -> dict[str, Any]:
    """The monitor's hook: one workload's observables → ledger-ready fields (``estimate_flops``,
    ``lower_flops``, ``upper_flops`` — the sound verdict bounds —, ``regime``, ``verdict``, ``warnings``,
    plus ``calibrated_lower_flops``/``calibrated_upper_flops``, ``bound``, ``confidence``, ``model``).

    Never raises on odd numbers from a live sensor: a non-finite or non-positive duration gives
    ``verdict "n/a"`` with the reason in ``warnings``.
    """
    if not (isinstance(duration_s, (int, float)) and math.isfinite(duration_s) and duration_s > 0) or not (
        isinstance(net_energy_j, (int, float)) and math.isfinite(net_energy_j)
    ):
        return {
            "estimate_flops": None,
            "lower_flops": None,
            "upper_flops": None,
            "regime": "unconfirmed",
            "verdict": "n/a",
            "warnings": [f"no assessment: duration {duration_s!r} s, net energy {net_energy_j!r} J"],
        }
    obs = Observables(
        net_energy_j=float(net_energy_j),
        duration_s=float(duration_s),
        tb_moved=_num(tb_moved),
        mean_util=_num(mean_util),
        sm_clock_mhz=_num(sm_clock_mhz),
        power_limit_w=_num(power_limit_w),
        idle_power_w=_num(idle_power_w),
        coverage=_num(coverage),
    )
    d = assess(profile, obs, device=device, threshold_flops=threshold_flops).to_dict()
    return d
