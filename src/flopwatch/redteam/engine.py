"""Generators of evader runs with exact ground truth, one per family ``kind`` (SIMULATED unless real v2).

Every case carries the verifier's profile for its device, calibrated on honest runs of a *different*
simulated session (seed ``cal``) **without** any configuration the family attacks with (its labels are in
``Case.attacked_labels``, the calibration's in ``Case.calibration_labels``; the suite's tests check they are
disjoint). Observables come from :mod:`flopwatch.redteam.observe`.
"""

from __future__ import annotations

import dataclasses
import hashlib
import itertools
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

import numpy as np

from flopwatch.detect import HysteresisParams, OnlineDetector
from flopwatch.devices import get_device
from flopwatch.estimate.profile import Profile
from flopwatch.redteam.case import Case, profile_hash, shape
from flopwatch.redteam.families import Family
from flopwatch.redteam.observe import combine, exact_values, phase_windows, sampled_values
from flopwatch.redteam.simulated import (
    RUN_S,
    datacenter_family,
    home_dtype,
    honest_run,
    locked_clock,
    make_acc,
    orin_family,
    sim_profile,
    with_dtype,
)
from flopwatch.sensor_timing import sensor_timing
from flopwatch.telemetry.sampler import sample_instants
from flopwatch.workloads.formulas import WorkloadDescription


@dataclass
class World:
    """Shared state of one suite run: seeds, workload families and cached leave-out calibrations."""

    quick: bool
    cal_seed: int = 1
    attack_seed: int = 2
    _profiles: dict[tuple[str, frozenset[str]], tuple[Profile, tuple[str, ...]]] = field(default_factory=dict)
    _fams: dict[tuple[str, str], list[WorkloadDescription]] = field(default_factory=dict)

    def family(self, key: str, dtype: str | None = None) -> list[WorkloadDescription]:
        d = dtype or home_dtype(key)
        if (key, d) not in self._fams:
            self._fams[(key, d)] = (
                orin_family(quick=self.quick, dtype=d)
                if key == "orin-nano"
                else datacenter_family(d, quick=self.quick)
            )
        return self._fams[(key, d)]

    def attack_workloads(self, key: str, fam: Family) -> list[WorkloadDescription]:
        """The configurations a family attacks with: 1 (quick) or 3, chosen by the family's name."""
        ws = self.family(key)
        n = 1 if self.quick else 3
        h = int(hashlib.sha256(fam.key.encode()).hexdigest(), 16)
        return [ws[(h + 3 * i) % len(ws)] for i in range(n)]

    def profile(self, key: str, exclude: Sequence[str]) -> tuple[Profile, tuple[str, ...]]:
        """The verifier's profile for ``key``: honest runs of its home precision at the calibration seed,
        leaving out every configuration in ``exclude`` (matched by shape, whatever the precision)."""
        ex = frozenset(shape(x) for x in exclude)
        k = (key, ex)
        if k not in self._profiles:
            ws = [w for w in self.family(key) if shape(w.label) not in ex]
            prof = sim_profile(key, ws, home_dtype(key), seed=self.cal_seed)
            self._profiles[k] = (prof, tuple(w.label for w in ws))
        return self._profiles[k]


def _case(
    world: World,
    fam: Family,
    key: str,
    label: str,
    truth: float,
    values: Mapping[str, Any],
    attacked: Sequence[str],
    note: str,
    **kw: Any,
) -> Case:
    prof, cal = world.profile(kw.pop("profile_key", key), attacked)
    return Case(
        fam.key,
        f"sim:{key}",
        kw.pop("spec", key),
        label,
        truth,
        dict(values),
        prof,
        cal,
        tuple(attacked),
        True,
        note,
        **kw,
    )


# ---------------------------------------------------------------------------------------------------- kinds
def gen_phases(world: World, fam: Family) -> Iterator[Case]:
    """One workload in phases (precision, share of the time), optionally at a cap, a locked clock or padded."""
    p = fam.params
    for key in fam.devices:
        for w in world.attack_workloads(key, fam):
            parts, truth, labels = [], 0.0, []
            fracs = p.get("clock_fracs") or [p.get("clock_frac")] * len(p["phases"])
            for i, ((dtype, share), cf) in enumerate(zip(p["phases"], fracs, strict=True)):
                clock = locked_clock(make_acc(key, world.attack_seed), cf)
                acc = make_acc(key, world.attack_seed + 17 * i, cap=p.get("cap_w"), clock=clock)
                wd = with_dtype(w, dtype)
                acc.idle(5.0)
                point = None
                if p.get("burner_frac"):
                    op = acc.operating_point(wd)
                    pad = min(
                        acc.power_limit_w, op.power_w + p["burner_frac"] * (acc.power_limit_w - op.power_w)
                    )
                    point = dataclasses.replace(op, power_w=pad)
                r = acc.run(wd, duration_s=RUN_S * share, point=point)
                parts.append(exact_values(acc, r.start_s, r.end_s, [r]))
                truth += r.total_flops
                labels.append(wd.label)
            vals = combine(parts)
            if len(parts) > 1:
                vals["windows"] = phase_windows(parts)  # the verifier sees each phase (time-resolved bounds)
            yield _case(world, fam, key, "+".join(labels), truth, vals, labels, fam.name)


def _instants(rate_hz: float, t0: float, t1: float, seed: int) -> np.ndarray:
    """The production sampler's instants (telemetry/sampler.py, full jitter) over [t0, t1]."""
    return np.array(sample_instants(t0, t1, rate_hz, seed=seed))


def gen_timing(world: World, fam: Family) -> Iterator[Case]:
    """Work placed where a sensor does not look, judged from the readings the verifier's sampler takes."""
    p = fam.params
    for key in fam.devices:
        for w in world.attack_workloads(key, fam):
            acc = make_acc(key, world.attack_seed, tail=False)
            sensor, phase = (
                "sim",
                0.0,
            )  # the twin's read-out (NVML-like or the Orin's), its timing from the table
            tm = sensor_timing(key, sensor)
            assert tm is not None
            P_sensor, win = tm.update_period_s, tm.window_s
            t_start = 10.0
            acc.idle(t_start)
            truth = 0.0
            dtype = p.get("dtype", home_dtype(key))
            if not get_device(key).supports(dtype):  # fp8 where the device has it
                dtype = home_dtype(key)
            wd = with_dtype(w, dtype) if dtype != w.dtype else w
            op = acc.operating_point(wd)
            mfu = 100.0 * op.mfu / max(op.util, 1e-9)
            if p["placement"] == "steady":
                r = acc.run(wd, duration_s=RUN_S)
                truth = r.total_flops
            else:
                if (
                    p["placement"] == "between"
                ):  # a fixed grid at the evader's rate, phase 0: work between reads
                    P = 1.0 / p["evader_rate_hz"]
                    lo, hi = win + 0.02, P - 0.02
                else:  # NVML: update k measures [kP + φ, kP + φ + w]; work in the rest of each period
                    P = P_sensor
                    # 1 ms of each burst leaks into the measured window: the counter sees a little energy, so
                    # the calibrated estimate is positive and only the bounds stand between it and a "below"
                    lo, hi = win - 0.001, P - 0.002
                n = int(RUN_S / P)
                for k in range(n):
                    acc.idle(t_start + k * P + lo - acc.end_s)
                    r = acc.run_condition(
                        wd.label, dtype=dtype, tokens_per_step=wd.tokens_per_step, mfu_pct=min(mfu, 95.0),
                        util=1.0, duration_s=hi - lo, step_time_s=(hi - lo) / 4,
                    )  # fmt: skip
                    truth += r.total_flops
                acc.idle(max(0.0, t_start + n * P - acc.end_s))
            t1 = acc.end_s
            rate = p.get("rate_hz") or 2.0  # the monitor's default rate (monitor/config.py)
            inst = _instants(rate, t_start, t1, seed=world.attack_seed)
            vals, warns = sampled_values(
                acc, t_start, t1, sensor=sensor, rate_hz=rate, instants=inst, phase_s=phase
            )
            ex = exact_values(acc, t_start, t1)
            vals["pipe_active_s"] = None if key == "orin-nano" else ex["pipe_active_s"]
            vals["pipe_observed_s"] = None if key == "orin-nano" else ex["pipe_observed_s"]
            yield _case(
                world,
                fam,
                key,
                wd.label,
                truth,
                vals,
                [w.label],
                f"{fam.name}; verifier samples at {rate:g} Hz, jittered",
                extra_warnings=tuple(warns),
            )


def gen_context(world: World, fam: Family) -> Iterator[Case]:
    """The node lies about its context (profile, peaks, sensor, clock, device model); physics is unchanged."""
    t = fam.params["tamper"]
    for key in fam.devices:
        for w in world.attack_workloads(key, fam):
            dtype = "fp8" if t in ("relabel", "fp8peak") else w.dtype
            wd = with_dtype(w, dtype) if dtype != w.dtype else w
            acc, r, vals = honest_run(key, wd, world.attack_seed)
            truth = r.total_flops
            vprof, _ = world.profile(key, [w.label])
            # the twin stands in for the hardware: the verifier's sensor is the real one it emulates
            kind = "jetson" if key == "orin-nano" else "nvml"
            vctx: dict[str, Any] = {
                "profile_sha256": profile_hash(vprof),
                "sensor_kind": kind,
                "peaks_in_force": dict(acc.spec.peak_flops),
            }
            ctx = dict(vctx)
            kw: dict[str, Any] = {}
            note = fam.name
            if t == "profile":
                ctx["profile_sha256"] = "operator:" + (profile_hash(vprof) or "")[:8] + "×0.6"
            elif t in ("peaks", "fp8peak"):
                pk = dict(acc.spec.peak_flops)
                if t == "peaks":
                    pk = {d: v / 4 for d, v in pk.items()}
                    ctx["peak_override"] = ";".join(f"{key}:{d}={v:.4g}" for d, v in pk.items())
                else:
                    pk["fp8"] = pk["bf16"]  # the node's table counts fp8 at the bf16 peak
                ctx["peaks_in_force"] = pk
            elif t == "replay":
                small = world.family(key)[0]
                _, _, vals = honest_run(key, small, world.attack_seed + 5)
                ctx["sensor_kind"] = "replay"
                note += f" (trace of {small.label})"
            elif t == "clock":
                idle = make_acc(key, world.attack_seed)
                idle.idle(RUN_S)
                vals = exact_values(idle, 0.0, RUN_S)  # the window the verifier reads holds no row
            elif t == "relabel":
                kw["spec"] = "a100"  # the verifier is told the GPU is an A100 and judges it as one
                kw["profile_key"] = "a100"
            yield _case(
                world,
                fam,
                key,
                wd.label,
                truth,
                vals,
                [w.label],
                note,
                context=ctx,
                verifier_context=vctx,
                **kw,
            )


def gen_group(world: World, fam: Family) -> Iterator[Case]:
    """One job spread over n GPUs (labels, no labels, two models); the verifier judges the cohort."""
    p = fam.params
    keys = list(fam.devices)
    n = p["n"]
    w = world.attack_workloads(keys[-1], fam)[0]
    parts, truth = [], 0.0
    for g in range(n):
        key = keys[g % len(keys)]
        _, r, v = honest_run(key, w, world.attack_seed + g)
        parts.append(v)
        truth += r.total_flops
    best = max(
        keys, key=lambda k: max(get_device(k).peak_flops.values())
    )  # bound the group as the most capable
    vals = combine(parts, parallel=True)
    yield _case(
        world,
        fam,
        best,
        f"{n} GPUs × {w.label}",
        truth,
        vals,
        [w.label],
        f"{fam.name} ({p['mode']}); cohort judged as one group",
    )


def gen_tamper(world: World, fam: Family) -> Iterator[Case]:
    """The node's observables altered (what its sensor daemon could do before signing)."""
    op = fam.params["op"]
    for key in fam.devices:
        for w in world.attack_workloads(key, fam):
            acc, r, v = honest_run(key, w, world.attack_seed)
            v = dict(v)
            t = v["duration_s"]
            if op == "pause":
                v["net_energy_j"] *= 0.5
                v["coverage"] = 0.5
                v["unobserved_s"] = (v.get("unobserved_s") or 0.0) + 0.5 * t
                if v.get("pipe_active_s"):  # the profiling counters of the paused half are lost too
                    v["pipe_active_s"] = {k: 0.5 * x for k, x in v["pipe_active_s"].items()}
                    v["pipe_observed_s"] = 0.5 * t
            elif op == "reset":
                v["net_energy_j"] -= (v["net_energy_j"] / t) * 1.5  # one 1.5 s interval bridged from power
                v["coverage"] = 1.0 - 1.5 / t
            elif op == "idle":
                extra = 0.2 * acc.idle_power_w
                v["idle_power_w"] = acc.idle_power_w + extra
                v["net_energy_j"] -= extra * t
            elif op == "dram":
                v["tb_moved"] *= 3.0
            elif op == "util":
                v["mean_util"] *= 0.3
            elif op == "duration":
                # a tenth of the run's duration and energy reported; its own timestamps span all of it
                v["span_s"], v["duration_s"], v["net_energy_j"] = t, 0.1 * t, 0.1 * v["net_energy_j"]
            yield _case(world, fam, key, w.label, r.total_flops, v, [w.label], f"{fam.name}")


def gen_window(world: World, fam: Family) -> Iterator[Case]:
    """A job spread over time so that few or none of its pieces become ledger rows; judged over the window
    (rows' bounds + the net energy measured outside any row × the envelope: evaluate/window.py)."""
    pat = fam.params["pattern"]
    params = HysteresisParams()
    for key in fam.devices:
        w = world.attack_workloads(key, fam)[0]
        acc = make_acc(key, world.attack_seed)
        acc.idle(10.0)
        truth = 0.0
        segs: list[tuple[float, float]] = []
        if pat == "chunks":
            for _ in range(10 if key != "orin-nano" else 6):
                r = acc.run(w, duration_s=30.0)
                segs.append((r.start_s, r.end_s))
                truth += r.total_flops
                acc.idle(20.0)
        else:
            dur, gap, n = {
                "bursts": (0.4, 6.0, 40),
                "short-runs": (2.0, 8.0, 30),
                "idle-inference": (0.05, 1.5, 200),
            }[pat]
            for _ in range(n if world.quick else 3 * n):
                r = acc.run(w, duration_s=dur)
                truth += r.total_flops
                acc.idle(gap)
            det = OnlineDetector(params)
            start = None
            for tt in np.arange(params.poll_s, acc.end_s, params.poll_s):
                b = acc.busy_time_s(np.array([tt - 1.0, tt]))
                for ev in det.update(float(tt), float(b[1] - b[0])):
                    if ev.kind == "start":
                        start = ev.t_s
                    elif start is not None:
                        segs.append((start, ev.t_s))
                        start = None
        rows = [exact_values(acc, a, b) for a, b in segs]
        total = exact_values(acc, 0.0, acc.end_s)
        outside = total["net_energy_j"] - sum(x["net_energy_j"] for x in rows)
        yield _case(
            world,
            fam,
            key,
            f"{len(segs)} ledger rows",
            truth,
            total,
            [w.label],
            f"{fam.name}: {len(segs)} rows detected",
            window={"rows": rows, "outside_net_energy_j": outside},
        )


KINDS = {
    "phases": gen_phases,
    "timing": gen_timing,
    "context": gen_context,
    "group": gen_group,
    "tamper": gen_tamper,
    "window": gen_window,
}


def variants(fam: Family, *, quick: bool) -> list[Family]:
    """The family with each combination of its ``sweep`` parameters (``quick``: the first value of each) —
    the evader's search over its knobs, as data."""
    sweep = dict(fam.params.get("sweep") or {})
    if not sweep:
        return [fam]
    names = sorted(sweep)
    grids = [list(sweep[n])[:1] if quick else list(sweep[n]) for n in names]
    out = []
    for combo in itertools.product(*grids):
        p = {k: v for k, v in fam.params.items() if k != "sweep"}
        p.update(zip(names, combo, strict=True))
        if "first_share" in p:  # two phases: the first takes this share of the time, the second the rest
            (d0, _), (d1, _) = p["phases"]
            p["phases"] = ((d0, p["first_share"]), (d1, 1.0 - p["first_share"]))
        out.append(dataclasses.replace(fam, params=MappingProxyType(p)))
    return out
