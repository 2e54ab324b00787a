"""Physical plausibility of one sensor reading, against the device's specification.

A glitching sensor must not become compute: one Jetson rail reading 999999999999 W for two seconds would
otherwise integrate to ~10^12 J and, through any J/FLOP profile, to ~10^26 FLOPs. :func:`check_reading`
says what is impossible about a reading (an empty tuple: nothing); the monitor counts such a reading as a
sensor error, leaves it out of every energy integral and flags the workload it fell in. Offline readers
(trace loaders, ``detect``) check whole columns with the same rules: :func:`violations` takes scalars or
arrays, and :class:`flopwatch.telemetry.source.Validator` calls it on every chunk of a trace.

Limits (each a property of the hardware, not a tuning knob):

* power must be finite and >= 0 — a power sensor cannot read negative (a negative value is a sign or
  unit error);
* power must be <= ``POWER_TDP_FACTOR`` × the device's TDP (``devices.py``, each TDP cited there). Boards do
  exceed TDP in millisecond transients (NVIDIA documents excursions above TGP for A100/H100 power
  "spikes"), but the sensors we read average over ≥ 10–100 ms windows (NVML ``nvmlDeviceGetPowerUsage``
  averages over about one second on Ampere and later, per NVML docs), so a reading at twice the TDP is
  already not a real average. Without a known spec the ceiling is ``MAX_BOARD_POWER_W``; a placeholder
  spec (the nominal "Generic CPU" entry for RAPL, :attr:`DeviceSpec.is_placeholder`) counts as no spec
  (:func:`limits_spec`): a server CPU package drawing 300 W is not a sensor error;
* utilisation (and memory utilisation) are ratios in [0, 1]: a value like 95 is percent, i.e. a unit error;
* a cumulative energy counter is finite and >= 0; DRAM throughput is finite, >= 0 and at most
  ``BANDWIDTH_FACTOR`` × the device's peak memory bandwidth; clocks and temperature are finite.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from flopwatch.telemetry.schema import FLOAT_COLUMNS, Reading

if TYPE_CHECKING:
    from flopwatch.devices import DeviceSpec

#: A sensor-averaged power above this multiple of TDP is not physical (see the module docstring).
POWER_TDP_FACTOR = 2.0
#: Ceiling for devices without a spec: above every single accelerator board shipped so far (the largest,
#: NVIDIA GB200 superchip modules, are rated about 2.7 kW for two GPUs and a CPU — NVIDIA GB200 NVL72 specs).
MAX_BOARD_POWER_W = 5000.0
#: DRAM throughput above this multiple of the datasheet peak bandwidth is a counter error.
BANDWIDTH_FACTOR = 1.5
#: Tolerance on the [0, 1] utilisation range (float rounding in vendor conversions).
RATIO_EPS = 1e-6
#: Columns that may not be negative, with how a message names them and their unit.
_NON_NEGATIVE = {
    "energy_j": ("energy counter", "J"),
    "dram_bytes_per_s": ("DRAM traffic", "B/s"),
    "sm_clock_mhz": ("clock", "MHz"),
}


def limits_spec(spec: DeviceSpec | None) -> DeviceSpec | None:
    """The spec whose TDP and bandwidth bound a device's readings: ``spec``, or None (the generic limits) when
    there is none or it is a placeholder. The one rule for the monitor's per-reading check and the trace
    validator (:mod:`flopwatch.telemetry.source`)."""
    return None if spec is None or spec.is_placeholder else spec


def max_power_w(spec: DeviceSpec | None) -> float:
    """The highest plausible averaged power reading of a device (W)."""
    spec = limits_spec(spec)
    return POWER_TDP_FACTOR * spec.tdp_w if spec is not None else MAX_BOARD_POWER_W


@dataclass(frozen=True)
class Violation:
    """The first impossible value of one field: its position (0 for a scalar), the value and why."""

    field: str
    index: int
    value: float
    message: str


def _as_array(v: Any) -> np.ndarray | None:
    """A value or a column as a 1-D float array; None when absent. A scalar that is not a number is NaN
    (reported as not finite); None and bools are absent (sensors differ in what they report)."""
    if v is None or isinstance(v, bool):
        return None
    if isinstance(v, np.ndarray):
        return v.astype(float, copy=False).reshape(-1)
    try:
        return np.array([float(v)])
    except (TypeError, ValueError, OverflowError):
        return np.array([math.nan])


def _rules(name: str, a: np.ndarray, spec: DeviceSpec | None) -> list[tuple[np.ndarray, str]]:
    """(mask of bad elements, message template with ``{x}``) for the physical limits of one column."""
    if name == "power_w":
        top = max_power_w(spec)
        where = (
            f"{POWER_TDP_FACTOR:g}× the {spec.name} TDP of {spec.tdp_w:g} W" if spec else "above any board"
        )
        return [
            (a < 0, "negative power: power_w {x} W"),
            (a > top, "power_w {x} W is implausible: above " + f"{top:.6g} W ({where})"),
        ]
    if name in ("util", "mem_util"):
        out = (a < -RATIO_EPS) | (a > 1 + RATIO_EPS)
        pct = out & (a > 1) & (a <= 100)
        return [
            (pct, name + " {x} is outside 0–1 (a percentage? utilisation is a 0–1 ratio)"),
            (out & ~pct, name + " {x} is outside 0–1"),
        ]
    if name in _NON_NEGATIVE:
        what, unit = _NON_NEGATIVE[name]
        rules = [(a < 0, f"negative {what}: {name} " + "{x} " + unit)]
        if name == "dram_bytes_per_s" and spec is not None:
            rules.append(
                (
                    a > BANDWIDTH_FACTOR * spec.mem_bw_bytes_per_s,
                    "dram_bytes_per_s {x} B/s is implausible: above "
                    + f"{BANDWIDTH_FACTOR:g}× the {spec.name} peak bandwidth",
                )
            )
        return rules
    return []


def violations(
    values: Mapping[str, Any], spec: DeviceSpec | None = None, *, nan_is_missing: bool = False
) -> list[Violation]:
    """The physical limits (module docstring) applied to scalars or equal-length columns keyed by trace
    column name: for each field, its first impossible element (by position; at one position, the order of
    the rules). ``nan_is_missing``: NaN stands for null (trace columns), else NaN is itself impossible (a
    sensor reading). A placeholder ``spec`` gives the generic limits (:func:`limits_spec`)."""
    spec = limits_spec(spec)
    out: list[Violation] = []
    for name, v in values.items():
        a = _as_array(v)
        if a is None or a.size == 0:
            continue
        present = ~np.isnan(a) if nan_is_missing else np.ones(a.shape, bool)
        nonfinite = present & ~np.isfinite(a)
        with np.errstate(invalid="ignore"):
            rules = [(nonfinite, name + " is {x} (not finite)")]
            rules += [(present & np.isfinite(a) & m, msg) for m, msg in _rules(name, a, spec)]
        first: tuple[int, str] | None = None
        for mask, msg in rules:
            if mask.any():
                i = int(np.argmax(mask))
                if first is None or i < first[0]:
                    first = (i, msg)
        if first is not None:
            i, msg = first
            x = float(a[i])
            out.append(Violation(name, i, x, msg.format(x=f"{x:.6g}" if math.isfinite(x) else repr(x))))
    return out


def check_values(values: Mapping[str, object], spec: DeviceSpec | None = None) -> tuple[str, ...]:
    """Problems with a reading given as a mapping of trace columns (``power_w``, ``util`` …); () if none.

    Absent (None) values are not problems: sensors differ in what they report; NaN is one.
    """
    return tuple(v.message for v in violations(values, spec))


def check_reading(reading: Reading, spec: DeviceSpec | None = None) -> tuple[str, ...]:
    """Problems that make ``reading`` physically impossible for ``spec`` (None: generic limits); () if none."""
    return check_values({c: getattr(reading, c) for c in FLOAT_COLUMNS}, spec)


def check_counter_step(
    delta_j: float, since_change_s: float, spec: DeviceSpec | None = None
) -> tuple[str, ...]:
    """Problems with a cumulative energy counter's step of ``delta_j`` J, ``since_change_s`` seconds after the
    counter last changed.

    A counter updates at its own period, not the reader's: dcgm-exporter's series in Prometheus move once per
    scrape (15 s by default), so read every second the counter holds, then steps by a whole scrape's energy at
    once. The step is energy accumulated since the last change, so its rate is judged over that time; judged over
    the reading interval, every honest 15 s step would look 15 × too fast (and be dropped)."""
    if not since_change_s > 0:
        return (f"energy counter stepped by {delta_j:.6g} J in no time",) if delta_j else ()
    return check_values({"power_w": delta_j / since_change_s}, spec)
