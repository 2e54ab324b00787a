"""Attacks on the published Jetson Orin Nano records (Fowler 2026, v2), read in place.

Every attacked run is left out of the calibration that judges it (leave-one-out): the profile is fitted on
the other 37 records, so neither the fp32 model nor the efficiency envelope has seen the run. What the
attacker changes is applied to the run's *observables* (label, DRAM counter, idle baseline); the ground
truth is the study's FlopCounterMode count.
"""

from __future__ import annotations

import dataclasses
import math
import os
from collections.abc import Iterator
from pathlib import Path

from flopwatch.estimate.calibrate import calibrate
from flopwatch.estimate.features import FrontierGate
from flopwatch.estimate.profile import Profile
from flopwatch.estimate.regime import Observables
from flopwatch.estimate.verdict import assess, observables_from_record
from flopwatch.records import RecordSet, WorkloadRecord, load_records
from flopwatch.redteam.core import AttackResult, HonestResult, legacy_verdict

V2_RELPATH = Path("jetson_flop_estimator") / "eval_results_v2_records.json"
DEVICE = "orin-nano"


def find_v2(data_root: str | Path | None = None) -> Path | None:
    """The v2 records under ``data_root`` (default: ``$FLOPWATCH_SHARED/data``, ``../shared/data`` from
    the working directory, then the repository's ``../shared/data``), or None when absent."""
    env = os.environ.get("FLOPWATCH_SHARED")
    roots = (
        [Path(data_root)]
        if data_root is not None
        else [
            *([Path(env) / "data"] if env else []),
            Path.cwd() / ".." / "shared" / "data",
            Path(__file__).resolve().parents[3] / ".." / "shared" / "data",
        ]
    )
    for r in roots:
        p = r / V2_RELPATH
        if p.is_file():
            return p
    return None


class _LOO:
    """Leave-one-out profiles of one record set, cached per left-out label."""

    def __init__(self, rs: RecordSet) -> None:
        self.rs = rs
        self._cache: dict[str, Profile] = {}

    def without(self, label: str) -> Profile:
        if label not in self._cache:
            keep = [r for r in self.rs if r.label != label]
            self._cache[label] = calibrate(self.rs.subset(keep), device=DEVICE)
        return self._cache[label]


def _attack(
    name: str,
    prof: Profile,
    r: WorkloadRecord,
    obs: Observables,
    note: str,
    legacy_energy: float | None = None,
) -> AttackResult:
    truth = float(r.total_flops or math.nan)
    T = 0.8 * truth
    a = assess(prof, obs, device=DEVICE, threshold_flops=T, label=r.label)
    before = legacy_verdict(
        prof,
        obs.net_energy_j if legacy_energy is None else legacy_energy,
        obs.duration_s,
        obs.tb_moved,
        obs.mean_util,
        T,
    )
    return AttackResult.from_assessment(
        name, "orin-nano (real, v2)", r.label, truth, a, before, note, simulated=False
    )


def real_attacks(path: Path) -> Iterator[AttackResult]:
    rs = load_records(path)
    loo = _LOO(rs)
    gate = FrontierGate()
    frontier = [r for r in rs if gate.reason(r) is None]
    # 1-2. precision label stripped: a tf32/fp16/bf16 run presented as fp32 (the profile's precision)
    for r in rs:
        if r.dtype in ("tf32", "fp16", "bf16"):
            name = (
                "tf32 run, precision label stripped" if r.dtype == "tf32" else "fp16/bf16 run, label stripped"
            )
            stripped = dataclasses.replace(r, dtype="fp32")
            yield _attack(
                name, loo.without(r.label), stripped, observables_from_record(stripped), f"true {r.dtype}"
            )
    # 3. DRAM counter x5: a copy kernel beside the job inflates the DRAM traffic
    for r in frontier:
        obs = dataclasses.replace(observables_from_record(r), tb_moved=(r.tb_moved or 0.0) * 5.0)
        yield _attack("DRAM counter x5", loo.without(r.label), r, obs, "tb_moved x5")
    # 3b. DRAM inflated only as far as the top of the calibrated regime (stays in regime)
    for r in frontier:
        prof = loo.without(r.label)
        hi = prof.regime_ranges.get("bytes_per_j", [0, 0])[1]
        tb_top = hi * r.net_energy_j / 1e12
        if r.tb_moved is not None and tb_top > r.tb_moved:
            obs = dataclasses.replace(observables_from_record(r), tb_moved=tb_top)
            yield _attack(
                "DRAM counter inflated to the regime's top",
                prof,
                r,
                obs,
                f"tb_moved x{tb_top / r.tb_moved:.2f}",
            )
    # 4. idle baseline measured under a +1 W load: 1 W x t moves from the run to the "idle"
    for r in frontier:
        base = observables_from_record(r)
        idle = (r.idle_power_w or 0.642) + 1.0
        obs = dataclasses.replace(base, idle_power_w=idle, net_energy_j=r.net_energy_j - 1.0 * r.duration_s)
        yield _attack("idle baseline under +1 W load", loo.without(r.label), r, obs, "idle +1 W")
    # 5. low utilisation (duty cycling), fp32
    for r in rs:
        if r.dtype == "fp32" and r.mean_util is not None and r.mean_util < gate.min_util:
            yield _attack(
                "low utilisation (duty cycling), fp32",
                loo.without(r.label),
                r,
                observables_from_record(r),
                f"util {r.mean_util:.0%}",
            )


def real_honest(path: Path) -> Iterator[HonestResult]:
    """Honest fp32 frontier runs, each judged by the profile calibrated without it, at 0.5x and 2x truth."""
    rs = load_records(path)
    loo = _LOO(rs)
    gate = FrontierGate()
    for r in rs:
        if gate.reason(r) is not None:
            continue
        prof = loo.without(r.label)
        truth = float(r.total_flops or math.nan)
        obs = observables_from_record(r)
        half = assess(prof, obs, device=DEVICE, threshold_flops=0.5 * truth).verdict
        double = assess(prof, obs, device=DEVICE, threshold_flops=2.0 * truth).verdict
        yield HonestResult("orin-nano (real, v2)", r.label, truth, half, double, simulated=False)


def power_padding_attacks(path: Path) -> Iterator[AttackResult]:
    """OPEN (not defended): a tf32/fp16/bf16 job plus a kernel that burns power without DRAM traffic or
    FLOPs counted by anyone, raising net power into the fp32 frontier's range (6.2 and 7.0 W) at 97 %
    utilisation. Bytes per joule fall into the fp32 range, so the run looks like an inefficient fp32 run.
    The attacker spends 2–4× the job's own energy on the burner."""
    rs = load_records(path)
    loo = _LOO(rs)
    for r in rs:
        if r.dtype not in ("tf32", "fp16", "bf16"):
            continue
        for p_w in (6.2, 7.0):
            obs = dataclasses.replace(
                observables_from_record(r), net_energy_j=p_w * r.duration_s, mean_util=0.97
            )
            yield _attack(
                "power padding to the fp32 range (open)",
                loo.without(r.label),
                r,
                obs,
                f"true {r.dtype}, padded from {r.avg_net_power_w:.2f} to {p_w} W net",
            )
