"""Telemetry that contradicts itself: the cross-channel checks behind "physically impossible telemetry".

Each reading can be plausible on its own (:mod:`flopwatch.telemetry.plausibility`) while the channels together
describe something no device does. A sensor that lies about itself this way moves energy out of sight, so
every stage that reads telemetry — ``detect``, ``join`` (a warning on the record), ``estimate`` (from the
record) and the monitor's rows — runs the same accumulator, :class:`ConsistencyCheck`, and each problem it
names is a warning that blocks "below":

* **utilisation without power**: the device says kernels ran at least half the time
  (:data:`LOADED_UTIL`) for :data:`MIN_LOADED_S` or more, yet its mean power stayed within
  :data:`UTIL_POWER_FLOOR_FRACTION` of the idle baseline. No accelerator computes for free: the least dynamic
  power in the data we hold is the Jetson study's smallest run (d128_b8_s64_L3, 43 % utilisation, 0.90 W
  above a 0.64 W idle: +141 %; Fowler 2026 v2 records), and the MASCOTS batch-1 memory-bound floor on the
  A100 is well above idle as well (Enskat & Wiesner 2026, Table IV). A floor of 5 % of idle is far below both;
* **power without utilisation** (only where the device reports both): power at least
  :data:`DARK_POWER_FRACTION` above idle for :data:`MIN_DARK_S` or more while utilisation reads
  :data:`DARK_UTIL` or less. After a workload the board holds its performance state for seconds (the
  simulator's tail is 3 s), and NVML averages power over ~1 s: a minute of it is work the utilisation hides;
* **a counter flat under load**: a cumulative energy counter unchanged for :data:`MIN_FLAT_S` while the
  device is loaded (by utilisation or by power). The slowest counter we know updates every 100 ms
  (:data:`flopwatch.sensor_timing.ENERGY_COUNTER_MAX_UPDATE_S`); 5 s without a step under load is a stuck
  counter, whose energy would be silently zero;
* **a counter that disagrees with power**: over :data:`MIN_AGREE_S` or more where both advance, the counter's
  energy and the integral of power differ by more than :data:`AGREE_FACTOR`. Sampled power and the counter
  differ by a window's worth (NVML's A100 power averages 25 ms of each 100 ms) but not ×3: a factor of 1000
  is a counter in millijoules (NVML's unit) or energy from another device written as this one's.

:meth:`ConsistencyCheck.feed` takes one device's samples in time order (arrays or scalars, in any number of
calls: the last sample and the open runs carry over), so a streamed trace and the live monitor use the same
code; :meth:`ConsistencyCheck.problems` names what is impossible (empty: nothing).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

#: "Loaded": utilisation at or above this at both ends of an interval (kernels ran half the time or more).
LOADED_UTIL = 0.5
#: Loaded time needed before its mean power is judged (short stretches are sensor lag, not a lie).
MIN_LOADED_S = 10.0
#: Mean power under load within this fraction of idle (or UTIL_POWER_FLOOR_W) is "no power" (module docstring).
UTIL_POWER_FLOOR_FRACTION = 0.05
UTIL_POWER_FLOOR_W = 0.02
#: "Dark": utilisation at or below this at both ends while power is DARK_POWER_FRACTION above idle.
DARK_UTIL = 0.01
DARK_POWER_FRACTION = 0.5
DARK_POWER_MIN_W = 0.05
#: How long power without utilisation must last to be flagged (module docstring).
MIN_DARK_S = 60.0
#: How long an energy counter may stay unchanged under load (module docstring).
MIN_FLAT_S = 5.0
#: An interval longer than this is a gap in the telemetry, not a stretch of it: runs end there.
MAX_INTERVAL_S = 10.0
#: Counter energy and integrated power must agree within this factor over MIN_AGREE_S (module docstring).
AGREE_FACTOR = 3.0
MIN_AGREE_S = 30.0  # a 15 s scrape counter (dcgm-exporter) steps at most ×1.5 off power over it


def _scalar(x: Any) -> float:
    if x is None or isinstance(x, bool):
        return math.nan
    try:
        return float(x)
    except (TypeError, ValueError):
        return math.nan


def _longest(mask: np.ndarray, dt: np.ndarray, carry: float) -> tuple[float, float]:
    """Longest run (in seconds) of consecutive ``mask`` intervals, the run open at the start adding ``carry``;
    returns (longest, the run still open at the end)."""
    if mask.size == 0:
        return carry, carry
    cs = np.cumsum(np.where(mask, dt, 0.0))
    run = cs - np.maximum.accumulate(np.where(mask, 0.0, cs))
    first_break = int(np.argmin(mask)) if not mask.all() else mask.size
    run[:first_break] += carry
    return float(max(carry, run.max())), float(run[-1]) if mask[-1] else 0.0


class ConsistencyCheck:
    """Cross-channel consistency of one device's telemetry (module docstring). ``idle_power_w``: the idle
    baseline the stretch is judged against; ``label``: how messages name the device (optional)."""

    def __init__(self, idle_power_w: float, *, label: str = "") -> None:
        self.idle_power_w = max(0.0, float(idle_power_w))
        self.label = label
        self.dark_above_w = self.idle_power_w + max(DARK_POWER_FRACTION * self.idle_power_w, DARK_POWER_MIN_W)
        self.loaded_s = 0.0
        self.loaded_energy_j = 0.0
        self.dark_max_s = self._dark_run = 0.0
        self.flat_max_s = self._flat_run = 0.0
        self.agree_s = self.counter_j = self.power_j = 0.0  # where both the counter and power advance
        self._last: tuple[float, float, float, float] | None = None  # t, power, util, energy

    def feed(self, t_s: Any, power_w: Any = None, util: Any = None, energy_j: Any = None) -> None:
        """Add samples (time-ordered; NaN or None where a channel has no value)."""
        if np.ndim(t_s) == 0 and all(np.ndim(x) == 0 for x in (power_w, util, energy_j)):
            self._feed_one(float(t_s), _scalar(power_w), _scalar(util), _scalar(energy_j))
            return
        t = np.atleast_1d(np.asarray(t_s, dtype=float))
        n = t.size
        if n == 0:
            return

        def col(v: Any) -> np.ndarray:
            a = np.full(n, np.nan) if v is None else np.atleast_1d(np.asarray(v, dtype=float))
            return np.broadcast_to(a, (n,)) if a.size == 1 else a

        p, u, e = col(power_w), col(util), col(energy_j)
        if self._last is not None:
            t, p, u, e = (np.concatenate([[x], y]) for x, y in zip(self._last, (t, p, u, e), strict=True))
        self._last = (float(t[-1]), float(p[-1]), float(u[-1]), float(e[-1]))
        if t.size < 2:
            return
        dt = np.diff(t)
        ok = (dt > 0) & (dt <= MAX_INTERVAL_S)
        pbar = 0.5 * (p[:-1] + p[1:])
        with np.errstate(invalid="ignore"):
            loaded = ok & (u[:-1] >= LOADED_UTIL) & (u[1:] >= LOADED_UTIL)
            dark = ok & (u[:-1] <= DARK_UTIL) & (u[1:] <= DARK_UTIL) & (pbar >= self.dark_above_w)
            busy = loaded | (ok & (pbar >= self.dark_above_w))
            flat = busy & np.isfinite(e[:-1]) & (e[1:] == e[:-1])
        powered = loaded & np.isfinite(pbar)
        with np.errstate(invalid="ignore"):
            de = e[1:] - e[:-1]
            both = ok & np.isfinite(pbar) & np.isfinite(de) & (de >= 0)  # a reset (de < 0) is skipped
        self.agree_s += float(dt[both].sum())
        self.counter_j += float(de[both].sum())
        self.power_j += float((pbar[both] * dt[both]).sum())
        self.loaded_s += float(dt[powered].sum())
        self.loaded_energy_j += float((pbar[powered] * dt[powered]).sum())
        best, self._dark_run = _longest(dark, dt, self._dark_run)
        self.dark_max_s = max(self.dark_max_s, best)
        best, self._flat_run = _longest(flat, dt, self._flat_run)
        self.flat_max_s = max(self.flat_max_s, best)

    def _feed_one(self, t: float, p: float, u: float, e: float) -> None:
        """One sample (the monitor's per-reading path): the same rules as the array path of :meth:`feed`, in
        plain floats (a comparison with NaN is False there as in numpy)."""
        last, self._last = self._last, (t, p, u, e)
        if last is None:
            return
        t0, p0, u0, e0 = last
        dt = t - t0
        ok = 0.0 < dt <= MAX_INTERVAL_S
        pbar = 0.5 * (p0 + p)
        loaded = ok and u0 >= LOADED_UTIL and u >= LOADED_UTIL
        dark = ok and u0 <= DARK_UTIL and u <= DARK_UTIL and pbar >= self.dark_above_w
        busy = loaded or (ok and pbar >= self.dark_above_w)
        flat = busy and math.isfinite(e0) and e == e0
        if ok and math.isfinite(pbar) and e - e0 >= 0:  # False with a NaN counter, as in the array path
            self.agree_s += dt
            self.counter_j += e - e0
            self.power_j += pbar * dt
        if loaded and math.isfinite(pbar):
            self.loaded_s += dt
            self.loaded_energy_j += pbar * dt
        self._dark_run = self._dark_run + dt if dark else 0.0
        self.dark_max_s = max(self.dark_max_s, self._dark_run)
        self._flat_run = self._flat_run + dt if flat else 0.0
        self.flat_max_s = max(self.flat_max_s, self._flat_run)

    def problems(self) -> tuple[str, ...]:
        """What the telemetry fed so far says that no device does (empty: nothing)."""
        who = f"{self.label}: " if self.label else ""
        out: list[str] = []
        if self.loaded_s >= MIN_LOADED_S:
            mean_w = self.loaded_energy_j / self.loaded_s
            floor = max(UTIL_POWER_FLOOR_FRACTION * self.idle_power_w, UTIL_POWER_FLOOR_W)
            if mean_w - self.idle_power_w < floor:
                out.append(
                    f"{who}utilisation without power: {self.loaded_s:.0f} s at >= {LOADED_UTIL:.0%} utilisation "
                    f"drew {mean_w:.4g} W on average, within {floor:.3g} W of the idle baseline "
                    f"{self.idle_power_w:.4g} W (physically impossible telemetry)"
                )
        if self.dark_max_s >= MIN_DARK_S:
            out.append(
                f"{who}power without utilisation: {self.dark_max_s:.0f} s above {self.dark_above_w:.4g} W with "
                f"utilisation <= {DARK_UTIL:.0%} (physically impossible telemetry)"
            )
        if self.flat_max_s >= MIN_FLAT_S:
            out.append(
                f"{who}energy counter flat under load for {self.flat_max_s:.1f} s (physically impossible "
                "telemetry: a stuck counter)"
            )
        if self.agree_s >= MIN_AGREE_S and self.counter_j > 0 and self.power_j > 0:
            r = self.counter_j / self.power_j
            if not 1 / AGREE_FACTOR <= r <= AGREE_FACTOR:
                out.append(
                    f"{who}energy counter and power disagree: the counter rose {self.counter_j:.4g} J where power "
                    f"integrates to {self.power_j:.4g} J over the same {self.agree_s:.0f} s (×{r:.3g}: a counter "
                    "in mJ? physically impossible telemetry)"
                )
        return tuple(out)


__all__ = ["ConsistencyCheck"]
