"""What the verifier's sensors report about a stretch of a simulated device's schedule (SIMULATED).

Two views:

* :func:`exact_values` — the twin's exact integrals (net energy, busy time, DRAM bytes, clock, power limit)
  plus what per-pipe activity counters (DCGM profiling, cumulative over every cycle) would count: while a
  kernel of precision p runs at rate R and SM clock f, its pipe (tensor for tf32/fp16/bf16/fp8, FP32 for
  fp32) is active for R / (peak_p · f / f_max) of the time (sim/dcgm.py's model, without its padding waste);
* :func:`sampled_values` — what the energy figures become when they are built from a real sensor's readings
  taken at the sampler's instants (:mod:`flopwatch.sensor_timing`: NVML's part-time 25 ms of 100 ms with a
  counter, the Orin's 100 ms point average without one), for the attacks on *when* the sensor looks.

Observable sets (what a verifier may have configured): ``energy`` (net energy, duration, utilisation, DRAM
bytes, idle), ``+clock+pl`` (SM clock and power limit too), ``+pipes`` (per-pipe active seconds too).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np

from flopwatch.estimate.observe import PIPES, ObservedWindows
from flopwatch.sensor_timing import SensorTiming, check_sampling
from flopwatch.sim.accelerator import SimulatedAccelerator, SimulatedRun

#: Observables each set adds (cumulative). ``energy`` is the base every sensor gives.
OBSERVABLE_SETS: Mapping[str, tuple[str, ...]] = {
    "energy": ("net_energy_j", "duration_s", "tb_moved", "mean_util", "idle_power_w", "coverage"),
    "+clock+pl": ("sm_clock_mhz", "power_limit_w", "max_sm_clock_mhz", "min_sm_clock_mhz", "peak_power_w"),
    "+pipes": ("pipe_active_s", "pipe_observed_s"),
}
SET_ORDER = ("energy", "+clock+pl", "+pipes")
_PIPE_FIELDS = tuple(f"{p}_active" for p in PIPES)
TENSOR_DTYPES = ("tf32", "fp16", "bf16", "fp8")


def keep_set(values: Mapping[str, Any], upto: str) -> dict[str, Any]:
    """``values`` restricted to the observables of ``upto`` and the sets before it (plus ``unobserved_s``)."""
    keys: set[str] = {"unobserved_s", "windows", "span_s"}  # (span_s: the run's own timestamps, always kept)
    for name in SET_ORDER[: SET_ORDER.index(upto) + 1]:
        keys.update(OBSERVABLE_SETS[name])
    out = {k: v for k, v in values.items() if k in keys}
    w = out.get("windows")
    if w is not None:  # the windows carry only what this set observes
        drop = {
            "energy": ("sm_clock_mhz", "max_sm_clock_mhz", "power_limit_w", *_PIPE_FIELDS),
            "+clock+pl": _PIPE_FIELDS,
        }
        out["windows"] = dataclasses.replace(w, **{f: None for f in drop.get(upto, ())})
    # ``unobserved_s`` stays the energy sensor's blind time even with pipe counters: an energy bound over
    # the observed time only is not a bound over the run (nvml-blind: the counter sees ~0 J). The pipe
    # counters' own coverage (``pipe_observed_s``, +pipes only) says how much of it they saw; the verifier
    # bounds that part by the pipe bound (estimate/sound.py).
    return out


def pipe_of(dtype: str) -> str:
    return "tensor" if dtype in TENSOR_DTYPES else "fp32"


def _pipe_seconds(
    acc: SimulatedAccelerator, runs: Iterable[SimulatedRun], t0: float, t1: float
) -> dict[str, float]:
    out = {"tensor": 0.0, "fp32": 0.0, "fp16": 0.0, "fp64": 0.0}
    fmax = acc.dvfs.f_max_mhz
    for r in runs:
        a, b = max(t0, r.start_s), min(t1, r.end_s)
        if b <= a or r.duration_s <= 0:
            continue
        flops = r.total_flops * (b - a) / r.duration_s
        d = str(r.workload.dtype)
        peak = acc.spec.peak_flops.get(d) or acc.spec.peak_flops.get("fp32", 0.0)
        f = r.point.sm_clock_mhz or fmax
        if peak > 0:
            out[pipe_of(d)] += flops / (peak * f / fmax)
    return out


def verifier_sensor(acc: SimulatedAccelerator) -> tuple[str, float]:
    """The sensor the verifier configures on the twin and the rate it samples at: the twin's own read-out
    model (``sim``: NVML-like or the Orin's INA3221-like), read at the smallest adequate rate."""
    chk = check_sampling(acc.spec.key, "sim", 1000.0)
    rate = chk.timing.min_rate_hz if chk.timing is not None else 10.0
    return "sim", rate


def exact_values(
    acc: SimulatedAccelerator, t0: float, t1: float, runs: Sequence[SimulatedRun] | None = None
) -> dict[str, Any]:
    """Every observable over [t0, t1] from the twin's exact integrals (see the module docstring), with the
    time the verifier's sensor cannot see (``unobserved_s``: NVML's blind 75 % on the data-centre twins)."""
    sensor, rate = verifier_sensor(acc)
    unobserved = check_sampling(acc.spec.key, sensor, rate).unobserved_fraction
    e = acc.true_energy_j(np.array([t0, t1]))
    dur = t1 - t0
    net = float(e[1] - e[0]) - acc.idle_power_w * dur
    busy = acc.busy_time_s(np.array([t0, t1]))
    ts = np.linspace(t0, t1, 64, endpoint=False) + dur / 128
    st = acc.state(ts)
    clocks = st["sm_clock_mhz"]
    # peak power: the mean over 0.1 s windows (what a power reading can see), the largest one
    edges = np.linspace(t0, t1, max(2, int(dur / 0.1) + 1))
    p_win = np.diff(acc.true_energy_j(edges)) / np.diff(edges)
    orin = acc.spec.key == "orin-nano"
    return {
        "net_energy_j": net,
        "duration_s": dur,
        "tb_moved": float(np.mean(st["dram_bytes_per_s"])) * dur / 1e12,
        "mean_util": float(busy[1] - busy[0]) / dur if dur > 0 else None,
        "idle_power_w": acc.idle_power_w,
        # the Jetson's sysfs reports neither an enforced power limit nor (in the v2 records) the clock
        "sm_clock_mhz": float(np.mean(clocks)),
        "max_sm_clock_mhz": float(np.max(clocks)),
        "min_sm_clock_mhz": float(np.min(clocks)),
        "power_limit_w": None if orin else acc.power_limit_w,
        "peak_power_w": float(np.max(p_win)),
        "pipe_active_s": None if orin else _pipe_seconds(acc, runs if runs is not None else acc.runs, t0, t1),
        # DCGM profiling / NVML GPM counters are cumulative over every cycle: they cover the whole stretch,
        # the energy sensor's blind part included
        "pipe_observed_s": None if orin else dur,
        "unobserved_s": unobserved * dur,
    }


def phase_windows(parts: Sequence[Mapping[str, Any]]) -> ObservedWindows:
    """One observed window per phase (time-resolved bounds: each phase bounded on its own, then summed)."""

    def arr(k: str) -> np.ndarray | None:
        vals = [p.get(k) for p in parts]
        return None if any(v is None for v in vals) else np.array(vals, float)

    dt = np.array([p["duration_s"] for p in parts], float)
    pipes = [p.get("pipe_active_s") for p in parts]
    act = {}
    for name in PIPES:
        act[f"{name}_active"] = (
            None if any(x is None for x in pipes) else np.array([x.get(name, 0.0) for x in pipes]) / dt  # type: ignore[union-attr]
        )
    return ObservedWindows(
        dt_s=dt,
        net_energy_j=np.array([p["net_energy_j"] for p in parts], float),
        sm_clock_mhz=arr("min_sm_clock_mhz"),
        max_sm_clock_mhz=arr("max_sm_clock_mhz"),
        power_limit_w=arr("power_limit_w"),
        **act,
    )


def combine(parts: Sequence[Mapping[str, Any]], *, parallel: bool = False) -> dict[str, Any]:
    """One set of observables for several stretches: phases one after another, or (``parallel``) devices side
    by side judged as one group — then ``duration_s`` is device-seconds, so peak-rate bounds scale with the count."""
    dur = sum(p["duration_s"] for p in parts)
    out: dict[str, Any] = {"duration_s": dur}
    for k in ("net_energy_j", "tb_moved"):
        vals = [p.get(k) for p in parts]
        out[k] = None if any(v is None for v in vals) else float(sum(vals))
    for k in ("mean_util", "sm_clock_mhz", "power_limit_w"):
        vals = [(p.get(k), p["duration_s"]) for p in parts]
        out[k] = None if any(v is None for v, _ in vals) else sum(v * w for v, w in vals) / dur
    for k, f in (("max_sm_clock_mhz", max), ("min_sm_clock_mhz", min), ("peak_power_w", max)):
        vals = [p.get(k) for p in parts]
        out[k] = None if any(v is None for v in vals) else f(vals)
    out["unobserved_s"] = float(sum(p.get("unobserved_s") or 0.0 for p in parts))
    idle = [p.get("idle_power_w") for p in parts]
    out["idle_power_w"] = None if any(v is None for v in idle) else float(np.mean(idle))
    pipes = [p.get("pipe_active_s") for p in parts]
    if all(isinstance(p, Mapping) for p in pipes):
        out["pipe_active_s"] = {k: float(sum(p.get(k, 0.0) for p in pipes)) for k in pipes[0]}  # type: ignore[union-attr]
        cov = [p.get("pipe_observed_s") for p in parts]
        out["pipe_observed_s"] = None if any(c is None for c in cov) else float(sum(cov))  # type: ignore[arg-type]
    else:
        out["pipe_active_s"] = None
        out["pipe_observed_s"] = None
    if parallel:
        out["peak_power_w"] = None  # per-device peaks do not add up to one board's
    return out


def sensor_readings(
    acc: SimulatedAccelerator, timing: SensorTiming, t: np.ndarray, phase_s: float
) -> np.ndarray:
    """The power each read at instants ``t`` returns: the mean over the window of the latest completed update
    (update k measures [k·P + φ, k·P + φ + w] and is visible from its end)."""
    P, w = timing.update_period_s, max(timing.window_s, 1e-6)
    k = np.floor((t - phase_s - w) / P)
    a = k * P + phase_s
    e = acc.true_energy_j(np.concatenate([a, a + w]))
    n = len(t)
    return (e[n:] - e[:n]) / w


def sampled_values(
    acc: SimulatedAccelerator,
    t0: float,
    t1: float,
    *,
    sensor: str,
    rate_hz: float,
    instants: np.ndarray,
    phase_s: float = 0.0,
) -> tuple[dict[str, Any], tuple[str, ...]]:
    """Observables over [t0, t1] as built from ``sensor``'s readings at ``instants`` (sampler times), and the
    sampling warnings (:func:`flopwatch.sensor_timing.check_sampling`). Net energy: the counter's increase
    (a counter adds window-mean × period per update) or, without one, the trapezoid of the point readings."""
    chk = check_sampling(acc.spec.key, sensor, rate_hz)
    timing = chk.timing
    vals = exact_values(acc, t0, t1)
    if timing is None:
        return vals, chk.warnings
    ts = np.asarray(instants, float)
    ts = ts[(ts >= t0) & (ts <= t1)]
    if len(ts) < 2:
        ts = np.array([t0, t1])
    dur = t1 - t0
    idle = acc.idle_power_w
    if timing.cumulative:
        # counter(t) = Σ over completed updates of window-mean × period
        P, w = timing.update_period_s, max(timing.window_s, 1e-6)
        ks = np.arange(math.floor((ts[0] - phase_s - w) / P) + 1, math.floor((ts[-1] - phase_s - w) / P) + 1)
        a = ks * P + phase_s
        e = acc.true_energy_j(np.concatenate([a, a + w]))
        energy = float(np.sum((e[len(a) :] - e[: len(a)]) / w * P))
        span = ts[-1] - ts[0]
        energy *= dur / span if span > 0 else 1.0
    else:
        p = sensor_readings(acc, timing, ts, phase_s)
        energy = float(np.trapezoid(p, ts))
        energy += p[0] * (ts[0] - t0) + p[-1] * (t1 - ts[-1])
    vals["net_energy_j"] = energy - idle * dur
    # utilisation as a point reading of the busy share over each sensor window
    b = acc.busy_time_s(np.concatenate([ts - timing.update_period_s, ts]))
    vals["mean_util"] = float(np.mean((b[len(ts) :] - b[: len(ts)]) / timing.update_period_s))
    vals["unobserved_s"] = chk.unobserved_fraction * dur
    return vals, chk.warnings if not chk.adequate else ()
