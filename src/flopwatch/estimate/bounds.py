"""The project's shared limits — THE coverage threshold (:data:`MIN_COVERAGE`) and THE idle-drift rule
(:func:`idle_drift_w`) — the idle-baseline check, the device resolver, and the DVFS constants.

The verdict's sound bounds are in :mod:`flopwatch.estimate.sound` (datasheet peak, η_max, pipe counters; issue 21).
What remains here of the issue-15 design is the **profile-measured efficiency envelope**
(:func:`envelope_flops_per_j`: the best FLOP/J of the calibration runs × :data:`ENVELOPE_MARGIN`, other precisions
by datasheet peak ratio, × :data:`DVFS_FACTOR` unless the power state was calibrated). It describes what the
calibration saw; since issue 21 no verdict rests on it (a profile's measured efficiency may never lower η_max).

The DVFS allowance: lowering the clock (power cap, nvpmodel mode, locked clocks) lowers the voltage and dynamic
energy per operation scales with V² (Mei, Wang & Chu 2017, "A Survey and Measurement Study of GPU DVFS on Energy
Conservation", DCN 3(2); the V–f curve is flat below a knee). With V_min/V_max ≥ 0.6 (the simulator assumes 0.65,
sim/dvfs.py) the gain is at most 1/0.6² ≈ 2.78.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from flopwatch.devices import DeviceSpec, resolve
from flopwatch.devices import peak_rate_bound as peak_rate_bound  # re-exported: defined with the devices

#: Safety factor on the best measured FLOP/J of a precision (see module docstring).
ENVELOPE_MARGIN = 1.25
#: Upper bound on the efficiency gain of an uncalibrated clock/power state: (V_max / V_min)² with
#: V_min/V_max ≥ 0.6 (Mei, Wang & Chu 2017; the simulator's sim/dvfs.py uses 0.65).
V_MIN_RATIO = 0.6
DVFS_FACTOR = 1.0 / V_MIN_RATIO**2
#: THE coverage threshold of the project (runs, monitor rows, windows): below it a run's energy is partly
#: interpolated over gaps and the time not covered is bounded at peak rate only. 0.95: one missed 2 Hz sample
#: in a 10 s workload is 5 %; the monitor's rows and ``estimate`` use this same value.
MIN_COVERAGE = 0.95
#: Idle-baseline drift between sessions measured on the Orin Nano (Fowler 2026: repeat sessions idled at
#: ~563 mW against v2's 642.048 mW, i.e. up to 80 mW = 12.5 % of idle). Scaled with the idle power for other
#: devices (idle power varies with temperature and fan/board state roughly in proportion), with a floor of
#: :data:`IDLE_DRIFT_MIN_W` (sensor resolution: the INA3221 reads in 40 µV steps over a mΩ shunt, and NVML
#: reports whole watts on many boards, so smaller shifts are not distinguishable from noise).
IDLE_DRIFT_W_ORIN = 0.080
IDLE_DRIFT_FRACTION = IDLE_DRIFT_W_ORIN / 0.642048
IDLE_DRIFT_MIN_W = 0.05


def idle_drift_w(idle_power_w: float | None, spec: DeviceSpec | None = None) -> float | None:
    """THE idle-drift rule: the largest idle-baseline shift between sessions that is not suspicious, for a device
    idling at ``idle_power_w`` (or the spec's idle): 12.5 % of idle (80 mW on the Orin Nano), at least 0.05 W."""
    base = idle_power_w if idle_power_w is not None and idle_power_w > 0 else (spec.idle_w if spec else None)
    if base is None:
        return None
    return max(IDLE_DRIFT_MIN_W, IDLE_DRIFT_FRACTION * float(base))


def resolve_device(*names: Any) -> DeviceSpec | None:
    """The first accelerator among ``names`` (simulated names included), else None: :func:`flopwatch.devices.resolve`."""
    return resolve(*names, cpu=False)


@dataclass(frozen=True)
class Envelope:
    """Best FLOP per net joule a device can reach, and how that number was obtained."""

    flops_per_j: float  # math.inf when nothing bounds it
    basis: str
    precision: str | None
    dvfs_factor: float

    def to_dict(self) -> dict[str, Any]:
        return {
            "flops_per_j": self.flops_per_j if math.isfinite(self.flops_per_j) else None,
            "basis": self.basis,
            "precision": self.precision,
            "dvfs_factor": self.dvfs_factor,
        }


def measured_efficiency(pairs: Iterable[tuple[str, float, float]]) -> dict[str, float]:
    """Best FLOP/J per precision from (dtype, total_flops, net_energy_j) of calibration runs."""
    best: dict[str, float] = {}
    for dtype, flops, e in pairs:
        if flops is None or e is None or not (e > 0 and flops > 0) or not math.isfinite(flops / e):
            continue
        best[dtype] = max(best.get(dtype, 0.0), flops / e)
    return best


def envelope_flops_per_j(
    measured: Mapping[str, float], spec: DeviceSpec | None, *, power_state_calibrated: bool
) -> Envelope:
    """The efficiency envelope (module docstring). Unbounded (inf) when nothing was measured, or when the
    device is unknown so precisions beyond the measured ones cannot be bounded from a datasheet."""
    dvfs = 1.0 if power_state_calibrated else DVFS_FACTOR
    if not measured:
        return Envelope(math.inf, "no calibrated efficiency: unbounded", None, dvfs)
    cand: dict[str, tuple[float, str]] = {p: (v, "measured") for p, v in measured.items()}
    if spec is None:
        return Envelope(
            math.inf,
            "device unknown: precisions other than the calibrated "
            f"({', '.join(sorted(measured))}) cannot be bounded from a datasheet",
            None,
            dvfs,
        )
    for p, peak in spec.peak_flops.items():
        if p in cand:
            continue
        ratios = [
            (v * peak / spec.peak_flops[q], q) for q, v in measured.items() if spec.peak_flops.get(q, 0) > 0
        ]
        if ratios:
            v, q = max(ratios)
            cand[p] = (v, f"{q} measured × datasheet peak ratio {p}/{q} ({peak / spec.peak_flops[q]:.3g})")
    if not cand:
        return Envelope(math.inf, "no precision of the device was calibrated", None, dvfs)
    p, (v, how) = max(cand.items(), key=lambda kv: kv[1][0])
    basis = f"{p}: {how} × margin {ENVELOPE_MARGIN:g}"
    if dvfs != 1.0:
        basis += f" × DVFS {dvfs:.3g} (clock/power state not calibrated)"
    return Envelope(v * ENVELOPE_MARGIN * dvfs, basis, p, dvfs)


@dataclass(frozen=True)
class IdleCheck:
    """Verdict on an idle baseline: is it plausible as a device at rest?"""

    ok: bool
    reasons: tuple[str, ...]

    def to_dict(self) -> dict[str, Any]:
        return {"ok": self.ok, "reasons": list(self.reasons)}


def check_idle_baseline(
    idle_power_w: float,
    *,
    spec: DeviceSpec | None = None,
    reference_idle_w: float | None = None,
    mean_util: float | None = None,
    sm_clock_mhz: float | None = None,
    max_util: float = 0.05,
) -> IdleCheck:
    """Flag a baseline taken under load: utilisation above the detector's threshold (5 %, Fowler 2026),
    an SM clock above half the maximum (an idle GPU drops to its lowest clocks), or power above the
    reference idle (a calibration's, else the spec's) by more than the session drift (:func:`idle_drift_w`).
    A baseline *below* the reference is never suspicious for soundness: it only makes net energy larger."""
    reasons: list[str] = []
    if mean_util is not None and mean_util > max_util:
        reasons.append(
            f"utilisation {mean_util:.0%} during the baseline (> {max_util:.0%}): the device was busy"
        )
    if spec is not None and spec.max_sm_clock_mhz and sm_clock_mhz is not None:
        if sm_clock_mhz > 0.5 * spec.max_sm_clock_mhz:
            reasons.append(
                f"SM clock {sm_clock_mhz:.0f} MHz during the baseline (> half of {spec.max_sm_clock_mhz:.0f} MHz): "
                "the device was not idle"
            )
    ref = reference_idle_w if reference_idle_w is not None else (spec.idle_w if spec is not None else None)
    if ref is not None:
        drift = idle_drift_w(ref, spec) or 0.0
        # against a datasheet/spec idle (not a measurement of this board), allow 3× the drift
        allow = drift if reference_idle_w is not None else 3.0 * drift
        if idle_power_w > ref + allow:
            what = (
                "the calibration idle"
                if reference_idle_w is not None
                else f"{spec.name}'s idle"
                if spec
                else "idle"
            )
            reasons.append(
                f"idle baseline {idle_power_w:.4g} W exceeds {what} {ref:.4g} W by "
                f"{_watts(idle_power_w - ref)} (more than the {_watts(allow)} an idle board drifts): taken under load?"
            )
    return IdleCheck(not reasons, tuple(reasons))


def idle_excess_w(
    idle_power_w: float, spec: DeviceSpec | None, reference_idle_w: float | None = None
) -> tuple[float, tuple[str, ...]]:
    """THE rule for a recorded idle baseline (a run's, a daemon's): how many watts it sits above the floor net
    energy is counted from — the lower of the verifier's reference (its profile's idle) and the datasheet's, so a
    raised profile idle may not lift it (round 5, `profile-idle`) — given back as that many watts over the time it
    was subtracted; and :func:`check_idle_baseline`'s reasons (a baseline taken under load), each a blocker."""
    floor = reference_idle_w if reference_idle_w is not None else (spec.idle_w if spec is not None else None)
    floor = floor if spec is None or floor is None else min(floor, spec.idle_w)
    excess = 0.0 if floor is None else max(0.0, float(idle_power_w) - floor)
    return excess, check_idle_baseline(idle_power_w, spec=spec, reference_idle_w=reference_idle_w).reasons


def _watts(x: float) -> str:
    """A power difference in watts to three significant figures (47.7 W, 0.242 W), never in mW."""
    return f"{x:.3g} W"


def idle_integrity(
    readings: Sequence[Any], idle_power_w: float, device_name: str | None, reference_idle_w: float | None
) -> dict[str, Any]:
    """:func:`check_idle_baseline` on the readings of one baseline measurement (objects with ``util`` and
    ``sm_clock_mhz``; the means over the samples that report them) → a JSON-ready dict."""
    utils = [r.util for r in readings if getattr(r, "util", None) is not None]
    clocks = [r.sm_clock_mhz for r in readings if getattr(r, "sm_clock_mhz", None) is not None]
    spec = resolve_device(device_name)
    chk = check_idle_baseline(
        idle_power_w,
        spec=spec,
        reference_idle_w=reference_idle_w,
        mean_util=sum(utils) / len(utils) if utils else None,
        sm_clock_mhz=sum(clocks) / len(clocks) if clocks else None,
    )
    return {
        **chk.to_dict(),
        "device": None if spec is None else spec.key,
        "reference_idle_w": reference_idle_w
        if reference_idle_w is not None
        else (spec.idle_w if spec else None),
        "drift_w": idle_drift_w(reference_idle_w, spec),
    }
