"""Simulated workload families, runs and calibrations (every number SIMULATED): what the attack generators of
:mod:`flopwatch.redteam.engine` build their worlds from, and what the monitor's tests and benchmarks use.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

import numpy as np

from flopwatch.estimate.calibration import calibrate
from flopwatch.estimate.features import FrontierGate
from flopwatch.estimate.profile import Profile
from flopwatch.records import RecordSet, WorkloadRecord
from flopwatch.redteam.case import shape
from flopwatch.redteam.observe import exact_values, verifier_sensor
from flopwatch.sensor_timing import simulated_kind
from flopwatch.sim.accelerator import SimulatedAccelerator, SimulatedRun, sim_params
from flopwatch.sim.artefacts import SensorModel
from flopwatch.workloads.config import GPTConfig
from flopwatch.workloads.formulas import WorkloadDescription, describe
from flopwatch.workloads.sweeps import get_sweep

RUN_S = 60.0  # seconds per simulated run
CAL_SEED = 1  # the calibration session (the attacks run at 2: engine.World)


def home_dtype(key: str) -> str:
    return "fp32" if key == "orin-nano" else "bf16"


def datacenter_family(dtype: str, *, quick: bool) -> list[WorkloadDescription]:
    """GPT training configurations sized for A100/H100/H200 (width, depth, batch and sequence vary)."""
    shapes = [
        (768, 12, 16, 1024), (1024, 24, 16, 1024), (1536, 16, 8, 2048), (2048, 16, 8, 2048),
        (1024, 12, 32, 512), (1280, 20, 8, 1024), (1536, 24, 16, 1024), (2048, 24, 4, 2048),
        (768, 6, 32, 1024), (2560, 16, 4, 2048), (1024, 16, 8, 2048), (1792, 12, 16, 1024),
    ]  # fmt: skip
    out = []
    for d, L, b, s in shapes[:8] if quick else shapes:
        c = GPTConfig(
            d_model=d, num_layers=L, batch_size=b, seq_len=s, vocab_size=32768, steps=100, precision=dtype
        )
        out.append(describe(c, counter="closed_form"))
    return out


def orin_family(*, quick: bool, dtype: str = "fp32") -> list[WorkloadDescription]:
    """The Jetson study's fp32 configurations (simulated on the Orin Nano twin), in ``dtype``."""
    cfgs = get_sweep("jetson-fp32")
    ws = [describe(c, counter="closed_form") for c in (cfgs[:14] if quick else cfgs)]
    return ws if dtype == "fp32" else [with_dtype(w, dtype) for w in ws]


def with_dtype(w: WorkloadDescription, dtype: str) -> WorkloadDescription:
    return dataclasses.replace(w, dtype=dtype, label=shape(w.label) + f"_{dtype}")


def make_acc(
    key: str, seed: int, *, cap: float | None = None, clock: float | None = None, tail: bool = True
) -> SimulatedAccelerator:
    params = None if tail else dataclasses.replace(sim_params(key), tail_s=0.0)
    return SimulatedAccelerator(key, seed=seed, power_cap_w=cap, locked_clock_mhz=clock, params=params)


def locked_clock(acc: SimulatedAccelerator, frac: float | None) -> float | None:
    """The lowest SM clock ``acc`` supports at or above ``frac`` × its top clock (None, or 1.0: not locked)."""
    if frac is None or frac == 1.0:
        return None
    clocks = acc.dvfs.clocks()
    return float(clocks[np.searchsorted(clocks, frac * acc.dvfs.f_max_mhz)])


def run_all(
    key: str, ws: Sequence[WorkloadDescription], seed: int, cap: float | None = None
) -> tuple[SimulatedAccelerator, list[SimulatedRun]]:
    acc = make_acc(key, seed, cap=cap)
    acc.idle(10.0)
    runs = []
    for w in ws:
        runs.append(acc.run(w, duration_s=RUN_S))
        acc.idle(10.0)
    return acc, runs


def honest_run(
    key: str, w: WorkloadDescription, seed: int, *, cap: float | None = None, clock: float | None = None
) -> tuple[SimulatedAccelerator, SimulatedRun, dict[str, Any]]:
    """One run of ``w`` after 10 s idle on a fresh twin (``cap``: power cap W, ``clock``: locked SM clock MHz),
    and its exact observables (:func:`flopwatch.redteam.observe.exact_values`)."""
    acc = make_acc(key, seed, cap=cap, clock=clock)
    acc.idle(10.0)
    r = acc.run(w, duration_s=RUN_S)
    return acc, r, exact_values(acc, r.start_s, r.end_s, [r])


def twin_context(acc: SimulatedAccelerator) -> dict[str, Any]:
    """The recorded context of a run on the twin ``acc``, as ``flopwatch run`` records it (``join.trace_context``):
    the sensor its read-out emulates, labelled simulated (``nvml (simulated)``, ``ina3221 (simulated)``), so the
    sensor-timing table judges it as that sensor, at the rate the verifier samples the twin
    (:func:`~flopwatch.redteam.observe.verifier_sensor`: the read-out's smallest adequate rate)."""
    kind = simulated_kind(SensorModel.for_device(acc.spec.key).kind)
    return {"sensor_kind": kind, "sample_rate_hz": verifier_sensor(acc)[1]}


def to_record(acc: SimulatedAccelerator, run: SimulatedRun) -> WorkloadRecord:
    """The record of one twin run (SIMULATED): its exact observables and the sensor context it was observed in
    (:func:`twin_context`)."""
    v = exact_values(acc, run.start_s, run.end_s, [run])
    extra: dict[str, Any] = {"mean_sm_clock_mhz": v["sm_clock_mhz"], **twin_context(acc)}
    if v["power_limit_w"] is not None:
        extra["power_limit_w"] = v["power_limit_w"]
    return WorkloadRecord(
        label=run.label, net_energy_j=v["net_energy_j"], duration_s=v["duration_s"], mean_util=v["mean_util"],
        tb_moved=v["tb_moved"], total_flops=run.total_flops, dtype=run.workload.dtype, idle_power_w=acc.idle_power_w,
        device_name=acc.spec.key, simulated=True, extra=extra,
    )  # fmt: skip


def sim_profile(
    key: str,
    workloads: Sequence[WorkloadDescription],
    dtype: str,
    *,
    exclude: str | None = None,
    seed: int = CAL_SEED,
) -> Profile:
    """A profile calibrated on simulated honest runs of ``workloads`` at the default power limit (session
    ``seed``), gated to ``dtype`` at 80 % utilisation; ``exclude``: a label left out."""
    acc, runs = run_all(key, workloads, seed)
    recs = [to_record(acc, r) for r in runs if r.label != exclude]
    return calibrate(RecordSet(recs, source=f"<simulated {key}>"), gate=FrontierGate(0.8, dtype), device=key)
