"""Operating regime from observables only: is a run like the runs a profile was calibrated on?

A verifier must not trust what the operator declares (precision, configuration, labels). What it can
observe is physics: DRAM bytes moved per net joule, net power, utilisation, and — where the sensor reports
them — the SM clock and the enforced power limit. On the Jetson Orin Nano (Fowler 2026, v2 records) these
separate the precisions cleanly: fp32 frontier runs move 0.055–0.075 GB per net joule at 6.7–8.3 W net,
tf32/fp16/bf16 runs 0.124–0.205 GB/J at 1.7–6.1 W (docs/redteam.md). A calibration records the range of
every observable it saw (:func:`regime_ranges`); :func:`check_regime` says which observables of a run fall
outside, and by how much. Only a run inside every recorded range may use the calibrated interval.

Tolerances (:data:`TOLERANCES`) widen each range so that a held-out honest run at the edge of the
calibration, or one measured in another session, stays inside: on v2 the extreme fp32 frontier runs sit
up to 5.8 % (net power) and 3.5 % (bytes/J) beyond the range of the other 20, on the simulated twins
(8–12 calibration configurations) up to 9.4 % and 17.8 %; an idle-baseline shift of 80 mW between
sessions moves net power and bytes/J by about 1 %. The widening costs no soundness where it matters:
bytes/J can only be inflated (the upper bound is evaluated at the widened floor, so inflation never lowers
it), and on the Orin Nano the widened fp32 range (≤ 0.091 GB/J) stays below every tf32/fp16/bf16 run
(≥ 0.124 GB/J). Settings (power limit, clock) get
tolerances of one clock step or 1 %, because a lower cap or clock is exactly what makes a run more
efficient (the simulator's DVFS model, sim/dvfs.py: dynamic energy per operation scales with V²).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from flopwatch.estimate.observe import Observables
from flopwatch.units import finite

#: Observables a regime is described by, with their units (all computable without trusting a label).
OBSERVABLES: Mapping[str, str] = {
    "bytes_per_j": "B/J",  # DRAM bytes per net joule (tb_moved / E_net)
    "net_power_w": "W",  # E_net / duration
    "mean_util": "",  # busy share, 0–1
    "sm_clock_mhz": "MHz",  # mean SM clock while busy
    "power_limit_w": "W",  # enforced board power limit
}

#: How far outside the calibrated range an observable may lie and still count as in regime:
#: ("rel", f) widens [lo, hi] to [lo·(1−f), hi·(1+f)]; ("abs", d) to [lo−d, hi+d].
TOLERANCES: Mapping[str, tuple[str, float]] = {
    "bytes_per_j": ("rel", 0.20),
    "net_power_w": ("rel", 0.10),
    "mean_util": ("abs", 0.02),
    "sm_clock_mhz": ("abs", 15.0),  # one step of NVIDIA's supported-clocks table
    "power_limit_w": ("rel", 0.01),
}


@dataclass(frozen=True)
class Deviation:
    """One observable outside (or missing from) the calibrated regime."""

    observable: str
    value: float | None
    low: float
    high: float
    excess_pct: float | None  # how far beyond the widened range, relative to the nearest edge; None: missing

    @property
    def reason(self) -> str:
        unit = OBSERVABLES.get(self.observable, "")
        u = f" {unit}" if unit else ""
        if self.value is None:
            return (
                f"{self.observable} not measured (the calibration saw {self.low:.4g}–{self.high:.4g}{u}): "
                "the regime cannot be confirmed"
            )
        side = "above" if self.value > self.high else "below"
        return (
            f"out of regime: {self.observable} {self.value:.4g}{u} is {self.excess_pct:.1f} % {side} the "
            f"calibrated range {self.low:.4g}–{self.high:.4g}{u}"
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "observable": self.observable,
            "value": self.value,
            "low": self.low,
            "high": self.high,
            "excess_pct": self.excess_pct,
            "reason": self.reason,
        }


def _pos(x: Any) -> bool:
    return (finite(x) is not None) and x > 0


def regime_ranges(
    observations: Iterable[Observables], *, min_util: float | None = None
) -> dict[str, list[float]]:
    """[min, max] of every observable seen in *all* calibration runs (an observable missing from any run
    is left out: the calibration cannot vouch for it). ``min_util``: the calibration's utilisation gate,
    which extends the utilisation range down to it (the gate defines the frontier regime); utilisation's
    upper end is 1."""
    obs = list(observations)
    out: dict[str, list[float]] = {}
    if not obs:
        return out
    for name in OBSERVABLES:
        vals = [o.values()[name] for o in obs]
        if any(v is None or finite(v) is None for v in vals):
            continue
        lo, hi = float(min(vals)), float(max(vals))  # type: ignore[type-var]
        if name == "mean_util":
            if min_util is not None and min_util > 0:
                lo = min(lo, float(min_util))
            hi = 1.0
        out[name] = [lo, hi]
    return out


def widened(name: str, low: float, high: float) -> tuple[float, float]:
    kind, f = TOLERANCES.get(name, ("rel", 0.0))
    if kind == "rel":
        return low * (1.0 - f), high * (1.0 + f)
    return low - f, high + f


def check_regime(
    values: Mapping[str, float | None], ranges: Mapping[str, Iterable[float]]
) -> list[Deviation]:
    """Deviations of a run's observables from the calibrated ``ranges`` (empty: in regime).

    An observable the calibration recorded but the run lacks is a deviation too (``value`` None): a
    verifier cannot confirm the regime from what it did not see.
    """
    out: list[Deviation] = []
    for name, rng in ranges.items():
        lo, hi = (float(x) for x in rng)
        v = values.get(name)
        if v is None or finite(v) is None:
            out.append(Deviation(name, None, lo, hi, None))
            continue
        wlo, whi = widened(name, lo, hi)
        if v < wlo:
            ref = abs(lo) if lo != 0 else 1.0
            out.append(Deviation(name, float(v), lo, hi, (lo - v) / ref * 100.0))
        elif v > whi:
            ref = abs(hi) if hi != 0 else 1.0
            out.append(Deviation(name, float(v), lo, hi, (v - hi) / ref * 100.0))
    return out
