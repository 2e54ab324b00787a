"""Attacks on the simulated devices (flopwatch.sim digital twins) — every number here is SIMULATED.

Calibration and attack happen in different simulated sessions (seeds 1 and 2: other repeat noise), like a
verifier who calibrated once and judges later runs. Observables are what the sensors would report, taken
from the twin's exact integrals: net energy = ∫P dt − P_idle·t, DRAM bytes, utilisation, the SM clock, and
the enforced power limit (NVML reports it; the Jetson's sysfs does not, so the Orin has no power limit).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np

from flopwatch.detect import HysteresisParams, OnlineDetector
from flopwatch.estimate.calibrate import calibrate
from flopwatch.estimate.features import FrontierGate
from flopwatch.estimate.profile import Profile
from flopwatch.estimate.regime import Observables
from flopwatch.estimate.verdict import assess, profile_envelope
from flopwatch.evaluate.window import combine_window
from flopwatch.records import RecordSet, WorkloadRecord
from flopwatch.redteam.core import AttackResult, HonestResult, expected_verdict, legacy_verdict
from flopwatch.sim.accelerator import SimulatedAccelerator, SimulatedRun
from flopwatch.workloads.config import GPTConfig
from flopwatch.workloads.formulas import WorkloadDescription, describe
from flopwatch.workloads.sweeps import get_sweep

CAL_SEED, ATTACK_SEED = 1, 2
RUN_S = 60.0  # seconds per simulated run


def datacenter_family(dtype: str, *, quick: bool) -> list[WorkloadDescription]:
    """GPT training configurations sized for A100/H100 (varying width, depth, batch and sequence)."""
    shapes = [
        (768, 12, 16, 1024),
        (1024, 24, 16, 1024),
        (1536, 16, 8, 2048),
        (2048, 16, 8, 2048),
        (1024, 12, 32, 512),
        (1280, 20, 8, 1024),
        (1536, 24, 16, 1024),
        (2048, 24, 4, 2048),
        (768, 6, 32, 1024),
        (2560, 16, 4, 2048),
        (1024, 16, 8, 2048),
        (1792, 12, 16, 1024),
    ]
    if quick:
        shapes = shapes[:8]
    out = []
    for d, L, b, s in shapes:
        c = GPTConfig(
            d_model=d, num_layers=L, batch_size=b, seq_len=s, vocab_size=32768, steps=100, precision=dtype
        )
        out.append(describe(c, counter="closed_form"))
    return out


def orin_family(*, quick: bool) -> list[WorkloadDescription]:
    """The Jetson study's fp32 configurations (simulated on the Orin Nano twin)."""
    cfgs = get_sweep("jetson-fp32")
    return [describe(c, counter="closed_form") for c in (cfgs[:14] if quick else cfgs)]


def _power_limit(acc: SimulatedAccelerator) -> float | None:
    return None if acc.spec.key == "orin-nano" else acc.power_limit_w


def observe(acc: SimulatedAccelerator, t0: float, t1: float, *, busy_only_util: bool = False) -> Observables:
    """What the sensors report over [t0, t1] of the twin's schedule."""
    e = acc.true_energy_j(np.array([t0, t1]))
    dur = t1 - t0
    net = float(e[1] - e[0]) - acc.idle_power_w * dur
    busy = acc.busy_time_s(np.array([t0, t1]))
    util = float(busy[1] - busy[0]) / dur if dur > 0 else None
    ts = np.linspace(t0, t1, 64, endpoint=False) + dur / 128
    st = acc.state(ts)
    tb = float(np.mean(st["dram_bytes_per_s"])) * dur / 1e12
    clock = float(np.mean(st["sm_clock_mhz"]))
    return Observables(
        net_energy_j=net,
        duration_s=dur,
        tb_moved=tb,
        mean_util=util,
        sm_clock_mhz=clock,
        power_limit_w=_power_limit(acc),
        idle_power_w=acc.idle_power_w,
    )


def _record(acc: SimulatedAccelerator, run: SimulatedRun) -> WorkloadRecord:
    o = observe(acc, run.start_s, run.end_s)
    extra: dict[str, Any] = {"mean_sm_clock_mhz": o.sm_clock_mhz}
    if o.power_limit_w is not None:
        extra["power_limit_w"] = o.power_limit_w
    return WorkloadRecord(
        label=run.label,
        net_energy_j=o.net_energy_j,
        duration_s=o.duration_s,
        mean_util=o.mean_util,
        tb_moved=o.tb_moved,
        total_flops=run.total_flops,
        dtype=run.workload.dtype,
        idle_power_w=acc.idle_power_w,
        device_name=acc.spec.key,
        simulated=True,
        extra=extra,
    )


def _runs(
    key: str, workloads: Sequence[WorkloadDescription], seed: int, cap: float | None = None
) -> tuple[SimulatedAccelerator, list[SimulatedRun]]:
    acc = SimulatedAccelerator(key, seed=seed, power_cap_w=cap)
    acc.idle(10.0)
    runs = []
    for w in workloads:
        runs.append(acc.run(w, duration_s=RUN_S))
        acc.idle(10.0)
    return acc, runs


def sim_profile(
    key: str, workloads: Sequence[WorkloadDescription], dtype: str, *, exclude: str | None = None
) -> Profile:
    """A profile calibrated on simulated honest runs at the default power limit (session CAL_SEED)."""
    acc, runs = _runs(key, workloads, CAL_SEED)
    recs = [_record(acc, r) for r in runs if r.label != exclude]
    return calibrate(RecordSet(recs, source=f"<simulated {key}>"), gate=FrontierGate(0.8, dtype), device=key)


def _one(name: str, prof: Profile, acc: SimulatedAccelerator, run: SimulatedRun, note: str) -> AttackResult:
    o = observe(acc, run.start_s, run.end_s)
    T = 0.8 * run.total_flops
    a = assess(prof, o, device=acc.spec.key, threshold_flops=T, label=run.label)
    before = legacy_verdict(prof, o.net_energy_j, o.duration_s, o.tb_moved, o.mean_util, T)
    return AttackResult.from_assessment(
        name, f"sim:{acc.spec.key}", run.label, run.total_flops, a, before, note, simulated=True
    )


def power_cap_attacks(*, quick: bool) -> Iterator[AttackResult]:
    fam = datacenter_family("bf16", quick=quick)
    prof = sim_profile("h100", fam, "bf16")
    tests = fam[:3] if quick else fam
    acc500, cap500 = _runs("h100", tests, ATTACK_SEED, cap=500.0)
    for r in cap500:
        yield _one("H100, power cap 500 W", prof, acc500, r, "bf16 at a 500 W cap")
    fp8 = [dataclasses.replace(w, dtype="fp8", label=w.label.replace("bf16", "fp8")) for w in tests]
    acc8, runs8 = _runs("h100", fp8, ATTACK_SEED, cap=500.0)
    for r in runs8:
        yield _one("fp8 job under a bf16 profile, 500 W cap", prof, acc8, r, "fp8 at a 500 W cap")
    acc200, runs200 = _runs("h100", tests, ATTACK_SEED, cap=200.0)
    for r in runs200:
        yield _one("bf16, 200 W cap", prof, acc200, r, "bf16 at a 200 W cap")


def _window_attack(
    name: str,
    prof: Profile,
    acc: SimulatedAccelerator,
    segments: list[tuple[float, float]],
    truth: float,
    t_end: float,
    note: str,
) -> AttackResult:
    """Judge a job whose pieces were detected as ``segments`` (possibly none) within [0, t_end]."""
    T = 0.8 * truth
    rows, befores = [], []
    attributed = 0.0
    for a0, a1 in segments:
        o = observe(acc, a0, a1)
        attributed += o.net_energy_j
        a = assess(prof, o, device=acc.spec.key, threshold_flops=T)
        rows.append(
            {"lower_flops": a.lower_flops, "upper_flops": a.upper_flops, "estimate_flops": a.estimate_flops}
        )
        befores.append(legacy_verdict(prof, o.net_energy_j, o.duration_s, o.tb_moved, o.mean_util, T))
    total = observe(acc, 0.0, t_end).net_energy_j
    env = profile_envelope(prof, acc.spec, None).flops_per_j
    w = combine_window(
        rows, threshold_flops=T, unattributed_net_energy_j=total - attributed, envelope_flops_per_j=env
    )
    if not befores:
        before = "none"
    elif all(b == "below" for b in befores):
        before = "below"
    else:
        before = "above" if any(b == "above" for b in befores) else "uncertain"
    return AttackResult(
        attack=name,
        device=f"sim:{acc.spec.key}",
        label=f"{len(segments)} ledger rows",
        truth_flops=truth,
        estimate_flops=w.estimate_flops,
        lower_flops=w.lower_flops,
        upper_flops=w.upper_flops,
        verdict=w.verdict,
        expected=expected_verdict(truth, T),
        before_verdict=before,
        regime="window",
        note=note,
        simulated=True,
        first_warning=w.warnings[0] if w.warnings else "",
    )


def split_attacks(*, quick: bool) -> Iterator[AttackResult]:
    """A job split into chunks that are each detected (one ledger row each) — judged over the window."""
    # (device, family, precision, index of the chunked configuration, chunks, seconds per chunk); the chunked
    # configuration is left out of the calibration
    cases = [
        ("a100", datacenter_family("bf16", quick=quick), "bf16", 1, 10, 30.0),
        ("orin-nano", orin_family(quick=quick), "fp32", 2, 10, 60.0),
    ]
    for key, fam, dtype, i, n, chunk_s in cases:
        prof = sim_profile(key, fam, dtype, exclude=fam[i].label)
        acc = SimulatedAccelerator(key, seed=ATTACK_SEED)
        acc.idle(10.0)
        segs, truth = [], 0.0
        for _ in range(n):
            r = acc.run(fam[i], duration_s=chunk_s)
            segs.append((r.start_s, r.end_s))
            truth += r.total_flops
            acc.idle(20.0)
        yield _window_attack(
            "split into chunks that each get detected",
            prof,
            acc,
            segs,
            truth,
            acc.end_s,
            f"{n} chunks of {chunk_s:g} s",
        )


def burst_attacks(*, quick: bool) -> Iterator[AttackResult]:
    """Bursts shorter than the detector's hysteresis (2 polls of 1.5 s above 5 % to start): no ledger row."""
    params = HysteresisParams()
    for key, fam, dtype in (
        ("h100", datacenter_family("bf16", quick=quick), "bf16"),
        ("orin-nano", orin_family(quick=quick), "fp32"),
    ):
        prof = sim_profile(key, fam, dtype, exclude=fam[2].label)
        acc = SimulatedAccelerator(key, seed=ATTACK_SEED)
        acc.idle(10.0)
        truth = 0.0
        n = 40 if quick else 120
        for _ in range(n):
            r = acc.run(fam[2], duration_s=0.4)
            truth += r.total_flops
            acc.idle(6.0)
        # the monitor's detector, polled every 1.5 s on utilisation averaged over the preceding second
        det = OnlineDetector(params)
        segs: list[tuple[float, float]] = []
        start = None
        for t in np.arange(params.poll_s, acc.end_s, params.poll_s):
            b = acc.busy_time_s(np.array([t - 1.0, t]))
            for ev in det.update(float(t), float(b[1] - b[0])):
                if ev.kind == "start":
                    start = ev.t_s
                elif start is not None:
                    segs.append((start, ev.t_s))
                    start = None
        yield _window_attack(
            "bursts under the detection hysteresis",
            prof,
            acc,
            segs,
            truth,
            acc.end_s,
            f"{n} bursts of 0.4 s, 6 s apart",
        )


def sim_honest(*, quick: bool) -> Iterator[HonestResult]:
    """Honest frontier runs on the twins, each judged by a profile calibrated without its configuration."""
    cases = [
        ("h100", datacenter_family("bf16", quick=quick), "bf16"),
        ("a100", datacenter_family("bf16", quick=quick), "bf16"),
        ("orin-nano", orin_family(quick=quick), "fp32"),
    ]
    gate = FrontierGate(0.8, "all")
    for key, fam, dtype in cases:
        acc, runs = _runs(key, fam, ATTACK_SEED)
        for r in runs:
            rec = _record(acc, r)
            if gate.reason(rec) is not None:
                continue  # not a frontier run
            prof = sim_profile(key, fam, dtype, exclude=r.label)
            o = observe(acc, r.start_s, r.end_s)
            half = assess(prof, o, device=key, threshold_flops=0.5 * r.total_flops).verdict
            double = assess(prof, o, device=key, threshold_flops=2.0 * r.total_flops).verdict
            yield HonestResult(f"sim:{key}", r.label, r.total_flops, half, double, simulated=True)
