"""SIMULATED observables of flopwatch.sim twins with the counters a verifier's sensor can add (issue 21 tests).

Every number here comes from the digital twin, not a measurement. Pipe activity follows sim/dcgm.py: the tensor
pipe is active for the busy time × the run's intensity against its format's peak at the running clock, plus the
issue waste of mixed-precision kernels; fp32 without TF32 runs on the CUDA-core fp32 pipe.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

from flopwatch.devices import normalize_dtype
from flopwatch.estimate.observe import PIPES, Observables
from flopwatch.redteam.observe import exact_values


def pipe_active_s(acc: Any, run: Any) -> dict[str, float]:
    """Σ activity·dt per pipe of one simulated run (SIMULATED)."""
    out = dict.fromkeys(PIPES, 0.0)
    p = run.point
    if p.util <= 0:
        return out
    d = normalize_dtype(run.workload.dtype)
    busy = acc.busy_time_s(np.array([run.start_s, run.end_s]))
    busy_s = float(busy[1] - busy[0])
    inten = (p.achieved_flops_per_s / p.util) / (acc.spec.peak(d) * p.sm_clock_mhz / acc.dvfs.f_max_mhz)
    tokens, half = float(run.workload.tokens_per_step), acc.params.tokens_half
    waste = 0.05 + 0.10 * half / (tokens + half)  # as sim/dcgm.py
    if d == "fp32":
        out["fp32"] = busy_s * inten
    else:
        out["tensor"] = busy_s * inten * (1 + waste)
    return out


def sim_obs(acc: Any, run: Any, *, pipes: bool = False, clocks: bool = False) -> Observables:
    """The observables of a simulated run: energy, duration, DRAM, utilisation, mean clock and power limit; with
    ``clocks`` the clock range and peak power, with ``pipes`` the four pipe counters (all SIMULATED)."""
    v = exact_values(acc, run.start_s, run.end_s, [run])
    keys = (
        "net_energy_j",
        "duration_s",
        "tb_moved",
        "mean_util",
        "idle_power_w",
        "sm_clock_mhz",
        "power_limit_w",
    )
    # a cumulative energy counter covers the run here (no unobserved time): the bounds' own tightness is tested
    o = Observables(**{k: v[k] for k in keys})
    kw: dict[str, Any] = {}
    if clocks:
        f = run.point.sm_clock_mhz
        kw.update(min_sm_clock_mhz=f, max_sm_clock_mhz=f, peak_power_w=run.point.power_busy_w)
    if pipes:
        kw["pipe_active_s"] = pipe_active_s(acc, run)
    return dataclasses.replace(o, **kw)


def sim_run(
    key: str, workload: Any, *, cap: float | None = None, dtype: str | None = None, s: float = 60.0
) -> Any:
    """(accelerator, run) of ``workload`` on a SIMULATED ``key`` (seed 2, 10 s idle first), optionally power-capped
    and in another precision: the red-team rounds' honest heavy run."""
    from flopwatch.sim.accelerator import SimulatedAccelerator

    acc = SimulatedAccelerator(key, seed=2, power_cap_w=cap)
    acc.idle(10.0)
    w = (
        workload
        if dtype is None
        else dataclasses.replace(workload, dtype=dtype, label=f"{workload.label}-{dtype}")
    )
    return acc, acc.run(w, duration_s=s)


def never_below(a: Any, truth: float, *words: str) -> None:
    """The hostile rounds' check: the truth is above the assessment's threshold, the verdict is not "below", and
    each of ``words`` appears in one of its warnings."""
    assert a.threshold_flops is not None and a.threshold_flops < truth  # the truth is above the threshold
    assert a.verdict != "below", (a.verdict, a.upper_flops / truth, a.warnings)
    for w in words:
        assert any(w in x for x in a.warnings), (w, a.warnings)
