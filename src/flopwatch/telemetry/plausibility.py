"""Physical plausibility of one sensor reading, against the device's specification.

A glitching sensor must not become compute: one Jetson rail reading 999999999999 W for two seconds would
otherwise integrate to ~10^12 J and, through any J/FLOP profile, to ~10^26 FLOPs. :func:`check_reading`
says what is impossible about a reading (an empty tuple: nothing); the monitor counts such a reading as a
sensor error, leaves it out of every energy integral and flags the workload it fell in. Offline readers
(trace loaders, ``detect``) can call the same function.

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
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from flopwatch.devices import DeviceSpec
    from flopwatch.telemetry.sensors.base import Reading

#: A sensor-averaged power above this multiple of TDP is not physical (see the module docstring).
POWER_TDP_FACTOR = 2.0
#: Ceiling for devices without a spec: above every single accelerator board shipped so far (the largest,
#: NVIDIA GB200 superchip modules, are rated about 2.7 kW for two GPUs and a CPU — NVIDIA GB200 NVL72 specs).
MAX_BOARD_POWER_W = 5000.0
#: DRAM throughput above this multiple of the datasheet peak bandwidth is a counter error.
BANDWIDTH_FACTOR = 1.5
#: Tolerance on the [0, 1] utilisation range (float rounding in vendor conversions).
_RATIO_EPS = 1e-6


def limits_spec(spec: DeviceSpec | None) -> DeviceSpec | None:
    """The spec whose TDP and bandwidth bound a device's readings: ``spec``, or None (the generic limits) when
    there is none or it is a placeholder. The one rule for the monitor's per-reading check and the trace
    validator (:mod:`flopwatch.telemetry.source`)."""
    return None if spec is None or spec.is_placeholder else spec


def max_power_w(spec: DeviceSpec | None) -> float:
    """The highest plausible averaged power reading of a device (W)."""
    spec = limits_spec(spec)
    return POWER_TDP_FACTOR * spec.tdp_w if spec is not None else MAX_BOARD_POWER_W


def _num(x: object) -> float | None:
    if x is None or isinstance(x, bool):
        return None
    try:
        return float(x)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return math.nan


def check_values(values: Mapping[str, object], spec: DeviceSpec | None = None) -> tuple[str, ...]:
    """Problems with a reading given as a mapping of trace columns (``power_w``, ``util`` …); () if none.

    Absent (None) values are not problems: sensors differ in what they report. A placeholder ``spec`` gives the
    generic limits (:func:`limits_spec`).
    """
    spec = limits_spec(spec)
    out: list[str] = []
    for name, v in values.items():
        x = _num(v)
        if x is None:
            continue
        if not math.isfinite(x):
            out.append(f"{name} is {x!r} (not finite)")
            continue
        if name == "power_w":
            top = max_power_w(spec)
            if x < 0:
                out.append(f"power_w {x:.6g} W is negative")
            elif x > top:
                where = (
                    f"{POWER_TDP_FACTOR:g}× the {spec.name} TDP of {spec.tdp_w:g} W" if spec else "any board"
                )
                out.append(f"power_w {x:.6g} W is above {top:.6g} W ({where})")
        elif name in ("util", "mem_util"):
            if not -_RATIO_EPS <= x <= 1 + _RATIO_EPS:
                hint = " (percent instead of a 0–1 ratio?)" if 1 < x <= 100 else ""
                out.append(f"{name} {x:.6g} is outside 0–1{hint}")
        elif name in ("energy_j", "dram_bytes_per_s", "sm_clock_mhz"):
            if x < 0:
                out.append(f"{name} {x:.6g} is negative")
            elif (
                name == "dram_bytes_per_s"
                and spec is not None
                and x > BANDWIDTH_FACTOR * spec.mem_bw_bytes_per_s
            ):
                out.append(
                    f"dram_bytes_per_s {x:.6g} is above {BANDWIDTH_FACTOR:g}× the {spec.name} peak bandwidth"
                )
    return tuple(out)


def check_reading(reading: Reading, spec: DeviceSpec | None = None) -> tuple[str, ...]:
    """Problems that make ``reading`` physically impossible for ``spec`` (None: generic limits); () if none."""
    return check_values(
        {
            "power_w": reading.power_w,
            "energy_j": reading.energy_j,
            "util": reading.util,
            "mem_util": reading.mem_util,
            "dram_bytes_per_s": reading.dram_bytes_per_s,
            "sm_clock_mhz": reading.sm_clock_mhz,
            "temp_c": reading.temp_c,
        },
        spec,
    )


def check_power_rate(power_w: float, spec: DeviceSpec | None = None) -> tuple[str, ...]:
    """Problems with an average power derived from a counter delta (``ΔE/Δt``)."""
    return check_values({"power_w": power_w}, spec)


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
