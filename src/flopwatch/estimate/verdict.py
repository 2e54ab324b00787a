"""The one assessment of flopwatch: a sound verdict and, kept apart, a calibrated estimate.

:func:`assess` is the project's one entry point (``estimate``, ``redteam``, the monitor's rows, windows and the
fleet call it) and :func:`threshold_verdict` its one threshold rule. An :class:`Assessment` carries **two answers
that are never mixed**:

* the **verdict** (``verdict``, ``verdict_lower_flops``, ``verdict_upper_flops``, ``verdict_basis``). "below"
  is a certificate: the upper bound rests only on the datasheet (the fastest format's peak), physics (η_max, the
  best FLOP per net joule the device can reach at the lowest clock observed) and counters the verifier's sensor
  read (energy, clock range, pipe activity) — :mod:`flopwatch.estimate.sound`. The operator's profile, a declared
  precision, labels or ``FLOPWATCH_PEAK_FLOPS`` never lower it. "above" is an accusation: the lower bound is the
  calibrated one made valid for the least efficient format the counters do not rule out, a higher clock than the
  calibration's and a later session;
* the **calibrated estimate** (``estimate_flops``, ``calibrated_lower_flops``/``calibrated_upper_flops``,
  ``confidence``) with the ``assumptions`` it needs ("the workload resembles the calibration runs: …"). It never
  makes a "below".

Every violated assumption of the verdict is a line in ``warnings`` (coverage, idle baseline, negative energy,
a device impossible for its claimed model, a peak override, a replay/simulated sensor, a context that differs from
the verifier's, the caller's ``extra_warnings``); any of them blocks "below". ``decisive_at`` is the factor
T / estimate above which "below" becomes possible, and ``tighten`` says which observation would lower it.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Generator, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from flopwatch.devices import DeviceSpec, resolve
from flopwatch.errors import InputError
from flopwatch.estimate.bounds import (
    MIN_COVERAGE,
    Envelope,
    check_idle_baseline,
    idle_excess_w,
    resolve_device,
)
from flopwatch.estimate.context import context_warnings, rateless_point_sensors, sampling_checks
from flopwatch.estimate.intervals import log_halfwidth
from flopwatch.estimate.observe import (
    CONTEXT_KEYS,
    PIPES,
    Observables,
    ObservedWindows,
    SampledRun,
    recorded_kinds,
    timestamp_span_s,
    widened_to_span,
    windows_from_samples,
    windows_from_trace,
)
from flopwatch.estimate.regime import Deviation, check_regime
from flopwatch.estimate.session import widen
from flopwatch.estimate.sound import (
    SESSION_LOG_SD,
    DeviceBasis,
    SoundUpper,
    clock_contradiction,
    clock_ratio_factor,
    device_basis,
    device_claims,
    floor_peaks,
    reconcile_pipes,
    slowest_format_ratio,
    sound_uppers,
    unplaced_energy_j,
    verdict_peaks,
    window_deficit_s,
)
from flopwatch.estimate.tighten import tighten as _tighten
from flopwatch.sensor_timing import unrecorded_sensor_floor
from flopwatch.units import finite

if TYPE_CHECKING:
    from flopwatch.estimate.profile import Profile
    from flopwatch.records import WorkloadRecord

#: Back-compatible name of the session shift (one SD of log J/TFLOP between sessions; fitted, see
#: :mod:`flopwatch.estimate.session`).
SESSION_JPT_SD = SESSION_LOG_SD
#: Confidence of the interval whose lower end an accusation rests on (the calibration's leave-one-out error and
#: the fitted session shift, both at its z). The estimate's 90 % interval describes typical runs: 5 % of honest
#: runs fall under its lower end by construction, so it may not accuse. At 99.8 % (two-sided) an honest run in
#: regime is accused at most 0.1 % of the time under the fitted error model (Student-t in log space: the
#: conformal rank does not exist below 499 calibration runs; intervals.py).
ACCUSATION_CONFIDENCE = 0.998
#: Share of a run's net energy its windows may leave unplaced before the two disagree (round 5): an energy
#: counter integrates what the power samples' trapezoids interpolate, so honest runs differ by the sampling
#: error of a trapezoid (a few % at the monitor's rates); more is power samples that do not show the energy.
ENERGY_DISAGREEMENT = 0.10
#: Share of a run its windows and unobserved time may leave out before it is a warning (they add up to the
#: duration when built from samples, :func:`~flopwatch.estimate.observe.windows_from_samples`; rounding only).
WINDOW_DEFICIT_FRACTION = 0.01
VERDICTS = ("above", "below", "uncertain", "n/a")


@dataclass(frozen=True)
class Assessment:
    """One judgement: the verdict from sound bounds, and the calibrated estimate with its assumptions, apart.

    ``lower_flops``/``upper_flops``/``bound`` (properties, and the JSON keys of the contract) are the
    verdict's bounds; ``verdict_upper_flops`` is ``math.inf`` when nothing bounds it.
    """

    verdict: str = "n/a"
    verdict_lower_flops: float = 0.0
    verdict_upper_flops: float = math.inf
    verdict_basis: str = "not assessed"
    estimate_flops: float | None = None
    calibrated_lower_flops: float | None = None
    calibrated_upper_flops: float | None = None
    confidence: float | None = None
    assumptions: str | None = None
    warnings: tuple[str, ...] = ()
    notes: tuple[str, ...] = ()
    decisive_at: float | None = None
    tighten: tuple[str, ...] = ()
    threshold_flops: float | None = None
    regime: str | None = None
    model: str | None = None
    device: str | None = None
    deviations: tuple[Deviation, ...] = ()
    upper: SoundUpper | None = None

    @property
    def lower_flops(self) -> float:
        return self.verdict_lower_flops

    @property
    def upper_flops(self) -> float:
        return self.verdict_upper_flops

    @property
    def bound(self) -> str:
        return self.verdict_basis

    def with_warnings(self, extra: Sequence[str], threshold_flops: float | None = None) -> Assessment:
        """This assessment with more violated assumptions (and optionally another threshold), re-judged by
        :func:`threshold_verdict`."""
        w = tuple(dict.fromkeys((*self.warnings, *extra)))
        t = self.threshold_flops if threshold_flops is None else threshold_flops
        v = threshold_verdict(self.estimate_flops, self.verdict_lower_flops, self.verdict_upper_flops, t, w)
        return dataclasses.replace(
            self, warnings=w, verdict=v, threshold_flops=t, decisive_at=None if w else self.decisive_at
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "verdict": self.verdict,
            "lower_flops": finite(self.verdict_lower_flops),  # contract keys: the verdict's bounds
            "upper_flops": finite(self.verdict_upper_flops),  # null: unbounded
            "bound": self.verdict_basis,
            "verdict_lower_flops": finite(self.verdict_lower_flops),
            "verdict_upper_flops": finite(self.verdict_upper_flops),
            "verdict_basis": self.verdict_basis,
            "estimate_flops": finite(self.estimate_flops),
            "calibrated_lower_flops": finite(self.calibrated_lower_flops),
            "calibrated_upper_flops": finite(self.calibrated_upper_flops),
            "calibrated_interval": "calibrated interval (holds only under the assumptions; never makes 'below')",
            "confidence": self.confidence,
            "assumptions": self.assumptions,
            "warnings": list(self.warnings),
            "notes": list(self.notes),
            "decisive_at": finite(self.decisive_at),
            "tighten": list(self.tighten),
            "threshold_flops": self.threshold_flops,
            "regime": self.regime,
            "model": self.model,
            "device": self.device,
            "regime_deviations": [d.to_dict() for d in self.deviations],
            "sound_upper": None if self.upper is None else self.upper.to_dict(),
        }


def observables_from_record(r: WorkloadRecord) -> Observables:
    """The observables of a record (its label, config and dtype are never read)."""
    raw = r.raw
    clock = finite(raw.get("mean_sm_clock_mhz", raw.get("sm_clock_mhz")))
    pipes = raw.get("pipe_active_s")
    pa = None
    if isinstance(pipes, Mapping) and all(finite(pipes.get(k)) is not None for k in PIPES):
        pa = {k: float(pipes[k]) for k in PIPES}
    idle = r.idle_power_w
    e, t = finite(r.energy_j), finite(r.duration_s)
    if idle is None and e is not None and t is not None and t > 0 and finite(r.net_energy_j) is not None:
        # a record that keeps its energy but not its baseline: the baseline is what the join subtracted
        # (net = energy − idle × t), so the idle check still sees it (round 6, `idle-omitted`)
        idle = (e - r.net_energy_j) / t
    return Observables(
        net_energy_j=r.net_energy_j,
        duration_s=r.duration_s,
        tb_moved=r.tb_moved,
        mean_util=r.mean_util,
        sm_clock_mhz=clock,
        power_limit_w=finite(raw.get("power_limit_w")),
        idle_power_w=idle,
        coverage=finite(raw.get("coverage")),
        min_sm_clock_mhz=finite(raw.get("min_sm_clock_mhz")),
        max_sm_clock_mhz=finite(raw.get("max_sm_clock_mhz")),
        peak_power_w=finite(raw.get("peak_power_w")),
        unobserved_s=finite(raw.get("unobserved_s")),
        pipe_active_s=pa,
        pipe_observed_s=finite(raw.get("pipe_observed_s")),
        span_s=timestamp_span_s(raw),
    )


def with_samples(obs: Observables, sampled: SampledRun) -> Observables:
    """``obs`` tightened by what a trace shows over the run (:func:`~flopwatch.estimate.observe.windows_from_trace`):
    its windows, unobserved time, clock range, peak power and pipe activity (the run's energy and duration stay)."""
    # the record's own unobserved time (a sensor's blind share) stands: the trace's gaps may only add to it
    return dataclasses.replace(
        obs,
        windows=sampled.windows,
        unobserved_s=max(sampled.unobserved_s, finite(obs.unobserved_s) or 0.0),
        min_sm_clock_mhz=sampled.min_sm_clock_mhz,
        max_sm_clock_mhz=sampled.max_sm_clock_mhz,
        peak_power_w=sampled.peak_power_w,
        pipe_active_s=sampled.pipe_active_s,
    )


def threshold_verdict(
    estimate_flops: float | None,
    lower_flops: float | None,
    upper_flops: float | None,
    threshold_flops: float | None,
    warnings: Sequence[str] = (),
) -> str:
    """The one threshold rule of flopwatch (``estimate``, ``redteam``, the monitor's rows, windows, fleet groups).

    * "n/a" without a threshold;
    * "above" only when the lower bound is finite and over the threshold;
    * "below" only when the (sound) upper bound is finite and under it **and** no assumption was violated: any
      entry in ``warnings`` turns a "below" into "uncertain". The certificate rests on the bound alone, so no
      calibrated estimate is needed (``None``: a fleet without a profile is judged too); an estimate that *was*
      made must be positive and finite, since a non-positive one says the measurement or the profile is broken;
    * otherwise "uncertain" — a non-finite bound is never "below".
    """
    if threshold_flops is None:
        return "n/a"
    if finite(lower_flops) is not None and lower_flops > threshold_flops:  # type: ignore[operator]
        return "above"
    e, u = finite(estimate_flops), finite(upper_flops)
    estimate_ok = estimate_flops is None or (e is not None and e > 0)
    if estimate_ok and u is not None and 0 <= u < threshold_flops and not warnings:
        return "below"
    return "uncertain"


def declaration_verdict(
    lower_flops: float | None,
    upper_flops: float | None,
    declared_flops: float,
    warnings: Sequence[str] = (),
) -> str:
    """The one rule for a declared FLOP count, the twin of :func:`threshold_verdict`.

    * "inconsistent" when the declared count is under a finite lower bound (under-declared: the accusation side,
      which needs no clean run), or over the upper bound of a run with no violated assumption;
    * "consistent" only when it lies inside the bounds **and** no assumption was violated: a warning means the
      upper bound may be too low, so an under-declaration could hide inside it (round 5);
    * otherwise "unverified".
    """
    lo, hi = finite(lower_flops), finite(upper_flops)
    if lo is not None and declared_flops < lo:
        return "inconsistent"
    if warnings or hi is None:
        return "unverified"
    return "consistent" if declared_flops <= hi else "inconsistent"


def _spec(device: DeviceSpec | str | None, profile: Profile | None) -> tuple[DeviceSpec | None, str | None]:
    """The device judged, and a warning when it is not the one named: ``device`` (a spec, a key, an NVML or
    simulated name, ``h100:0``, ``jetson:VDD_CPU_GPU_CV``) through :func:`flopwatch.devices.resolve`; without a
    name, the profile's device (which it was calibrated on and which the monitor applies it to).

    A name given that no device of the verifier's table answers to (a look-alike letter, a zero-width space, a
    model the table lacks) is judged as the profile's device *with a warning*: the verifier does not know what
    ran, so the profile's device — maybe a weaker one — may not make a "below" (round 5)."""
    if isinstance(device, DeviceSpec):  # resolve() returns a spec as it is (no repr of it per call)
        return device, None
    if device:
        spec = resolve(device, str(device).removeprefix("sim:").split(":")[0])
        if spec is not None:
            return spec, None
        fallback = resolve_device(profile.device_key) if profile is not None and profile.device_key else None
        return fallback, (
            f"device name {str(device)!r} names no device in the verifier's table"
            + (f"; judged as the profile's device {fallback.key}" if fallback is not None else "")
            + ": what ran is not known, never 'below'"
        )
    if profile is not None and profile.device_key:
        return resolve_device(profile.device_key), None
    return None, None


def unnamed_device(profile: Profile | None, *names: object) -> str | None:
    """A warning when a record or row names no device (none of ``names``) and so is judged as the profile's:
    that device is an assumption about someone else's run, never the basis of a "below" (round 9,
    `device-unnamed`); the verifier's own ``--device`` is one of ``names`` and stands."""
    if any(names) or profile is None or not profile.device_key:
        return None
    return (
        f"the run names no device: judged as the profile's device {profile.device_key}, an assumption about "
        "what ran (give --device to state it), never 'below'"
    )


def profile_envelope(
    profile: Profile | None, spec: DeviceSpec | None, obs: Observables | None = None
) -> Envelope:
    """η_max of ``spec`` at the lowest clock ``obs`` shows (physics only: ``profile`` is accepted for the old
    signature and never lowers it); unbounded without a device."""
    del profile  # a profile's measured efficiency may never lower η_max
    if spec is None:
        return Envelope(math.inf, "device unknown: no physical efficiency bound", None, 1.0)
    dev = device_basis(spec, obs)
    clk = None if obs is None else obs.min_sm_clock_mhz
    eta = dev.eta(clk)
    return Envelope(
        eta,
        f"η_max of {dev.key}: fastest peak / (half the net TDP) × DVFS allowance (sound.py)",
        dev.fastest_format,
        eta / dev.eta_at_max_clock,
    )


def assess(
    profile: Profile | None,
    obs: Observables,
    *,
    device: DeviceSpec | str | None = None,
    threshold_flops: float | None = None,
    confidence: float | None = None,
    label: str | None = None,
    extra_warnings: Sequence[str] = (),
    context: Mapping[str, Any] | None = None,
    verifier_context: Mapping[str, Any] | None = None,
) -> Assessment:
    """The verdict and the calibrated estimate of one workload (module docstring).

    ``extra_warnings``: violated assumptions named by the caller (fleet group notes, the accounting's
    warnings); each blocks "below". ``context``/``verifier_context``: the row's recorded context and the
    verifier's (keys :data:`~flopwatch.estimate.observe.CONTEXT_KEYS`); see :func:`context_warnings`. A context
    naming no sensor (``{}``) is judged at the device's least-observed one (``unrecorded_sensor_floor``)."""
    kw = dict(device=device, threshold_flops=threshold_flops, confidence=confidence, label=label,
              extra_warnings=extra_warnings, context=context, verifier_context=verifier_context)  # fmt: skip
    return assess_many(profile, [(obs, kw)])[0]


def assess_many(
    profile: Profile | None, items: Sequence[tuple[Observables, Mapping[str, Any]]]
) -> list[Assessment]:
    """:func:`assess` of many workloads, each ``(obs, keyword arguments of assess)``, with their sound upper
    bounds computed together (:func:`~flopwatch.estimate.sound.sound_uppers`: one array pass over every
    window of every workload; a fleet judges ~1,300 groups). The same rule as :func:`assess`, which is this for
    one workload."""
    return drive([_assess(profile, obs, **kw) for obs, kw in items], sound_uppers)


def drive(
    steps: Sequence[Generator[Any, Any, Any]], serve: Callable[[list[Any]], Sequence[Any]]
) -> list[Any]:
    """Run generators that each yield requests until they return: every round, the pending requests of all of
    them are answered together by ``serve`` (a list of requests → their answers, in order) and each answer sent
    back. Returns what each generator returned. One workload's rule is written once, as one generator; only the
    batching is here."""
    out: list[Any] = [None] * len(steps)
    pending: dict[int, Any] = {}

    def step(i: int, answer: Any) -> None:
        try:
            pending[i] = steps[i].send(answer)
        except StopIteration as done:
            pending.pop(i, None)
            out[i] = done.value

    for i in range(len(steps)):
        step(i, None)
    while pending:
        idx = list(pending)
        for i, answer in zip(idx, serve([pending[i] for i in idx]), strict=True):
            step(i, answer)
    return out


def _assess(
    profile: Profile | None,
    obs: Observables,
    *,
    device: DeviceSpec | str | None = None,
    threshold_flops: float | None = None,
    confidence: float | None = None,
    label: str | None = None,
    extra_warnings: Sequence[str] = (),
    context: Mapping[str, Any] | None = None,
    verifier_context: Mapping[str, Any] | None = None,
) -> Generator[tuple[DeviceBasis, Observables, float], SoundUpper, Assessment]:
    """:func:`assess` of one workload, as a generator: it yields the sound upper bound it needs
    (``(device basis, observables, idle excess W)``, :func:`~flopwatch.estimate.sound.sound_uppers`' input),
    is sent it, and returns the assessment (:func:`drive`)."""
    spec, name_warning = _spec(device, profile)
    E, t = float(obs.net_energy_j), float(obs.duration_s)
    if not (math.isfinite(t) and t > 0):
        raise InputError(
            f"must be a finite number > 0, got {obs.duration_s!r}", record=label, field="duration_s"
        )
    if not math.isfinite(E):
        raise InputError(
            f"must be a finite number, got {obs.net_energy_j!r}", record=label, field="net_energy_j"
        )
    warnings: list[str] = [str(w) for w in extra_warnings]
    if name_warning is not None:
        warnings.append(name_warning)
    obs, span_why = widened_to_span(obs)  # a duration under the run's own timestamps (round 8)
    warnings += [span_why] if span_why else []
    t = float(obs.duration_s)
    notes: list[str] = []
    warnings += context_warnings(context, verifier_context, device=spec)
    # The row's own unobserved time may only add to what the verifier knows no reading saw (round 6,
    # `unobserved-understated`): the sensor-timing table's blind share of every recorded sensor (the most any
    # leaves unseen) and the share of the run its coverage leaves out, whatever the row says (0, negative).
    u_floor, unrecorded, fast = 0.0, None, None
    if context and recorded_kinds(context):
        checks = [c for c in sampling_checks(context, spec) if c.sensor != "dcgm-prof"]
        fr = [c.unobserved_fraction for c in checks]
        u_floor = max(fr + [1.0] * bool(rateless_point_sensors(context, spec)), default=0.0) * t  # round 8
        if any(not c.adequate for c in checks):  # the blind share were each sensor read at its need (tighten)
            fast = max(c.timing.blind_fraction if c.timing else 1.0 for c in checks) * t
    elif context is not None and spec is not None:  # a row naming no sensor: the least-observed one (round 7)
        frac, unrecorded = unrecorded_sensor_floor(spec.key)
        u_floor = frac * t
    cov = finite(obs.coverage)
    if cov is not None and cov < 1.0 - 1e-9:  # (a sum's rounding is no gap: two engines' answers stay equal)
        u_floor = max(u_floor, (1.0 - max(cov, 0.0)) * t)
        fast = None if fast is None else max(fast, (1.0 - max(cov, 0.0)) * t)
    u_rec = finite(obs.unobserved_s)
    fast = None if fast is None or u_rec is None and obs.unobserved_s is not None else max(fast, u_rec or 0.0)
    if u_rec is None and obs.unobserved_s is not None:  # NaN or inf unobserved: none of the run was seen
        obs = dataclasses.replace(obs, unobserved_s=t)
    elif (u_rec is None and u_floor > 0) or (u_rec is not None and u_rec < u_floor):
        obs = dataclasses.replace(obs, unobserved_s=u_floor)
        notes += [unrecorded] if unrecorded and u_floor > (u_rec or 0.0) + 1e-9 * t else []
    if obs.idle_power_w is None:
        warnings.append("idle baseline not recorded: the baseline the net energy was taken against cannot be "
                        "checked (one taken under load hides energy), never 'below'")  # fmt: skip
    if E < 0:
        warnings.append(
            f"negative net energy {E:.4g} J: the idle baseline is above the run's power (baseline taken under load?)"
        )
    E_pos = max(0.0, E)

    # the verifier's idle reference: its profile's, else the datasheet's; a higher run baseline gives energy back
    ref_idle = None
    if profile is not None:
        ref_idle = profile.verifier.get("idle_power_w", profile.idle_power_w)
    idle_excess = 0.0
    if obs.idle_power_w is not None and (ref_idle is not None or spec is not None):
        ref = float(ref_idle) if ref_idle is not None else None
        # given back from the lower of the profile's and the datasheet's idle (round 5, `profile-idle`); the
        # same rule judges a daemon's baseline for the energy outside workloads (evaluate/window.py, round 12)
        idle_excess, why = idle_excess_w(float(obs.idle_power_w), spec, ref)
        warnings.extend(f"idle baseline suspicious: {r}" for r in why)
        if ref is not None and spec is not None:
            pc = check_idle_baseline(ref, spec=spec)  # the profile's own reference vs the datasheet's idle
            warnings.extend(f"the profile's idle reference is implausible: {r}" for r in pc.reasons)

    unplaced = unplaced_energy_j(obs)
    if unplaced > ENERGY_DISAGREEMENT * max(E, 0.0):
        warnings.append(
            f"the run's net energy {E:.4g} J exceeds its windows' {E - unplaced:.4g} J by {unplaced / E:.0%} "
            f"(> {ENERGY_DISAGREEMENT:.0%}): the energy counter and the power samples disagree; the energy the "
            "windows do not place is bounded anyway"
        )
    missing = window_deficit_s(obs)
    if missing > WINDOW_DEFICIT_FRACTION * t:
        warnings.append(
            f"the run's windows and unobserved time cover {t - missing:.4g} s of its {t:.4g} s: the other "
            f"{missing:.4g} s are bounded at peak rate"
        )
    obs_b, pipes_why = reconcile_pipes(obs)
    if pipes_why is not None:
        warnings.append(pipes_why)
    if obs.coverage is not None and obs.coverage < MIN_COVERAGE:
        warnings.append(
            f"telemetry covers only {obs.coverage:.0%} of the run (< {MIN_COVERAGE:.0%}): the time not covered is "
            "bounded at peak rate"
        )

    # ---- the sound upper bound (physics, datasheet, the verifier's counters)
    su: SoundUpper | None = None
    dev = None
    if spec is None:
        warnings.append("device unknown: no datasheet peak or efficiency bounds this run")
        upper, basis = math.inf, "unbounded: device unknown"
    else:
        dev = device_basis(spec, obs_b)
        warnings.extend(dev.warnings)
        lie = clock_contradiction(spec, obs_b)
        if lie is not None:
            warnings.append(lie)
        su = yield (dev, obs_b, idle_excess)
        upper, basis = su.flops, su.basis

    # ---- the calibrated estimate (rests on the workload resembling the calibration)
    est_flops: float | None = None
    cal_lo = cal_hi = conf = acc_lo = None
    model = None
    deviations: list[Deviation] = []
    dtype = None
    if profile is None:
        notes.append("no calibration profile: no calibrated estimate")
    else:
        model = profile.model_name
        deviations = check_regime(obs.values(), profile.regime_ranges)
        dtype = profile.dtype if profile.dtype != "all" else "fp32"  # never the run's declared precision
        try:
            # on the run's own baseline: energy given back for a raised baseline only loosens the sound upper
            # bound; counted here it would raise the estimate and the accusation's lower bound
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
            notes.append(f"no calibrated estimate: {e.detail}")
            est = None
        if est is not None:
            est_flops, conf = est.flops, est.confidence
            notes.extend(
                w
                for w in est.warnings
                if "outside the calibration range" not in w and "below the calibration gate" not in w
            )
            if math.isfinite(est.flops) and est.flops > 0:
                # the calibrated interval as the profile gives it (it never makes a "below", so it need not be
                # made monotone in what an evader can inflate: the sound bound does not read the DRAM counter),
                # widened for a later session in quadrature (estimate/session.py)
                lo, hi = est.lower_flops, est.upper_flops
                q0 = math.log(hi / est.flops) if hi > est.flops else 0.0
                dq = float(widen(q0, est.confidence, SESSION_LOG_SD)) - q0
                cal_lo, cal_hi = lo * math.exp(-dq), hi * math.exp(dq)
                acc_lo = accusation_lower(profile, est.flops, q0, est.confidence)
    ok = est_flops is not None and math.isfinite(est_flops) and est_flops > 0
    regime = (
        "uncalibrated"
        if profile is None
        else "calibrated"
        if ok and not deviations
        else "out-of-regime"
        if any(d.value is not None for d in deviations)
        else "unconfirmed"
    )
    assumptions = None
    if profile is not None:
        assumptions = (
            f"the workload resembles the calibration runs: {profile.dtype} precision, {model} fitted on "
            f"{profile.device_key or 'its device'}, a session like the calibration's (shift SD "
            f"{SESSION_LOG_SD:.1%}), the calibration taken at the maximum clock"
            + ("; out of regime: " + "; ".join(d.reason for d in deviations) if deviations else "")
        )

    # ---- the lower bound (accusation): valid for any honest format, clock and later session
    lower, low_basis = 0.0, "0 (no calibrated statement in regime)"
    if (
        ok
        and acc_lo is not None
        and regime == "calibrated"
        and E >= 0
        and spec is not None
        and dtype is not None
    ):
        peaks = verdict_peaks(spec)
        fr, fmt = slowest_format_ratio(peaks, dtype, obs, low_peaks=floor_peaks(spec))
        cal_clk = (profile.regime_ranges.get("sm_clock_mhz") or [None, None])[1]  # type: ignore[union-attr]
        run_clk = obs.max_sm_clock_mhz if obs.max_sm_clock_mhz is not None else None
        cf = clock_ratio_factor(cal_clk, run_clk, spec.max_sm_clock_mhz)
        if obs.coverage is None or obs.coverage >= MIN_COVERAGE:
            lower = acc_lo * fr * cf
            low_basis = (
                f"estimate's {ACCUSATION_CONFIDENCE:.1%} lower end (calibration error and session shift) × "
                f"{fr:.3g} (if the run were {fmt}) × {cf:.3g} (clock)"
            )
    if ok and est_flops > upper:  # type: ignore[operator]
        warnings.append(
            f"the calibrated estimate {est_flops:.4g} exceeds the sound upper bound {upper:.4g}: the profile or "
            "the device table is wrong for this run"
        )
    if profile is not None and threshold_flops is not None and not ok and upper < threshold_flops:
        # the verifier's profile gave no positive estimate: the measurement or the profile is broken
        warnings.append("no positive calibrated estimate: never 'below'")
    warnings = list(dict.fromkeys(warnings))
    v = threshold_verdict(est_flops, lower, upper, threshold_flops, warnings)
    decisive = upper / est_flops if ok and math.isfinite(upper) and not warnings else None  # type: ignore[operator]
    tighten = _tighten(dev, obs_b, idle_excess, upper, est_flops if ok else None, dtype, spec, warnings, fast)
    return Assessment(
        verdict=v,
        verdict_lower_flops=float(lower),
        verdict_upper_flops=float(upper),
        verdict_basis=basis + f"; lower: {low_basis}",
        estimate_flops=est_flops,
        calibrated_lower_flops=cal_lo,
        calibrated_upper_flops=cal_hi,
        confidence=conf,
        assumptions=assumptions,
        warnings=tuple(warnings),
        notes=tuple(dict.fromkeys(notes)),
        decisive_at=decisive,
        tighten=tuple(tighten),
        threshold_flops=threshold_flops,
        regime=regime,
        model=model,
        device=None if spec is None else spec.key,
        deviations=tuple(deviations),
        upper=su,
    )


def assess_record(
    profile: Profile | None,
    record: WorkloadRecord,
    *,
    device: DeviceSpec | str | None = None,
    threshold_flops: float | None = None,
    confidence: float | None = None,
    extra_warnings: Sequence[str] = (),
    sampled: SampledRun | None = None,
) -> Assessment:
    """:func:`assess` on a record's observables (the device defaults to the record's device name); ``sampled``:
    the record's segment of a trace (:func:`~flopwatch.estimate.observe.windows_from_trace`), for windowed bounds.
    The physically impossible telemetry the join found on the record (``telemetry_warnings``) is a violated
    assumption like ``extra_warnings``."""
    from flopwatch.records import telemetry_warnings

    # every name the record gives is a claim, and so is the verifier's ``device`` (first: it stands unless the
    # record names another model, as a fleet's --device never eases a GPU's own modelName); an unknown name is
    # judged as the profile's device, warned (assess); so is the model the joined trace's sensor read (round 13)
    seen = record.raw.get("sensor_device")
    seen = [n for n in (seen if isinstance(seen, list) else [seen]) if isinstance(n, str)]
    dev, claim = device_claims(device, record.device_name, record.device, record.device_spec, *seen)
    claim = claim or unnamed_device(profile, device, record.device_name, record.device, record.device_spec)
    obs = observables_from_record(record)
    # the context the record says it was made in (its sensor, rate, a peak override) is evidence like a monitor
    # row's: it may only add warnings and blind time (round 6: a record naming NVML with `unobserved_s: 0`)
    raw = record.raw
    ctx = {k: raw[k] for k in CONTEXT_KEYS if raw.get(k) is not None}  # empty: a record that names no sensor
    return assess(
        profile,
        obs if sampled is None else with_samples(obs, sampled),
        device=dev,
        threshold_flops=threshold_flops,
        confidence=confidence,
        label=record.label,
        extra_warnings=(*extra_warnings, *telemetry_warnings(record), *([claim] if claim else [])),
        context=ctx,
    )


def accusation_lower(
    profile: Profile, est_flops: float, q_estimate: float = 0.0, confidence: float = 0.9
) -> float:
    """The lower end of ``est_flops``'s interval at :data:`ACCUSATION_CONFIDENCE`: the profile's leave-one-out
    residuals (Student-t in log space) — or, for a profile without them, the estimate's own log half-width
    ``q_estimate`` at ``confidence`` rescaled to that level as a normal quantile — widened for a later session in
    quadrature; never narrower than the estimate's own interval."""
    from scipy.special import ndtri

    res = getattr(profile, "residuals", None)
    res = None if res is None else np.asarray(res, dtype=float).reshape(-1)
    if res is not None and res.size >= 2 and np.isfinite(res).all():
        qa, _ = log_halfwidth(res, ACCUSATION_CONFIDENCE, "student-t")
        q = max(float(qa), q_estimate)
    else:
        z = float(ndtri(0.5 + confidence / 2.0))
        q = q_estimate * float(ndtri(0.5 + ACCUSATION_CONFIDENCE / 2.0)) / z if z > 0 else q_estimate
    q = float(widen(q, ACCUSATION_CONFIDENCE, SESSION_LOG_SD))
    return est_flops * math.exp(-q)


__all__ = [
    "MIN_COVERAGE",
    "VERDICTS",
    "Assessment",
    "Observables",
    "ObservedWindows",
    "SampledRun",
    "assess",
    "assess_many",
    "assess_record",
    "context_warnings",
    "device_claims",
    "drive",
    "observables_from_record",
    "profile_envelope",
    "threshold_verdict",
    "unnamed_device",
    "windows_from_samples",
    "windows_from_trace",
    "with_samples",
]
