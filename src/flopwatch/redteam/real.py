"""Attacks on the published Jetson Orin Nano records (Fowler 2026, v2), read in place.

Every attacked run is left out of the calibration that judges it (leave-one-out): the profile is fitted on
the other 37 records, so the fp32 model has not seen the run (the sound bound never reads a profile). What the
attacker changes is applied to the run's *observables* (label, DRAM counter, idle baseline); the ground
truth is the study's FlopCounterMode count.
"""

from __future__ import annotations

import dataclasses
import math
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from flopwatch.estimate.calibration import calibrate
from flopwatch.estimate.features import FrontierGate
from flopwatch.estimate.profile import Profile
from flopwatch.estimate.verdict import observables_from_record
from flopwatch.records import RecordSet, WorkloadRecord, load_records
from flopwatch.redteam.case import Case, profile_hash, shape
from flopwatch.redteam.families import Family
from flopwatch.units import finite

V2_RELPATH = Path("jetson_flop_estimator") / "eval_results_v2_records.json"
DEVICE = "orin-nano"
#: How the v2 records were observed (data/jetson_flop_estimator/SOURCE.md; Fowler 2026): the VDD_CPU_GPU_CV rail,
#: an INA3221 channel (telemetry/sensors/jetson.py), read at 2 Hz — ``n_power_samples`` ÷ ``duration_s`` is
#: 1.993–2.001 Hz over the 38 records. Judged as that sensor by the sensor-timing table (a 1.1 ms point reading,
#: no energy counter), as a monitor row naming it would be: never as if fully observed.
V2_SENSOR_KIND = "ina3221"
V2_SENSOR_SPEC = "jetson:VDD_CPU_GPU_CV"
V2_RATE_HZ = 2.0


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
    """Leave-out profiles of one record set, cached: leaving a run out leaves out its configuration in every
    precision (``d384_b16_s128_L3`` and ``d384_b16_s128_L3_fp16`` go together)."""

    def __init__(self, rs: RecordSet) -> None:
        self.rs = rs
        self._cache: dict[frozenset[str], Profile] = {}

    def kept(self, *labels: str) -> list[WorkloadRecord]:
        out = {shape(x) for x in labels}
        return [r for r in self.rs if shape(r.label) not in out]

    def without(self, *labels: str) -> Profile:
        k = frozenset(shape(x) for x in labels)
        if k not in self._cache:
            self._cache[k] = calibrate(self.rs.subset(self.kept(*labels)), device=DEVICE)
        return self._cache[k]


def v2_context(r: WorkloadRecord) -> dict[str, Any]:
    """The recorded context (:data:`~flopwatch.estimate.observe.CONTEXT_KEYS`) of one v2 record: its sensor and
    the rate it was read at (the record's own sample count over its duration; 2 Hz where it has none)."""
    n, t = finite(r.extra.get("n_power_samples")), finite(r.duration_s)
    rate = n / t if n is not None and n > 0 and t is not None and t > 0 else V2_RATE_HZ
    return {"sensor_kind": V2_SENSOR_KIND, "sensor_spec": V2_SENSOR_SPEC, "sample_rate_hz": rate}


def _values(r: WorkloadRecord) -> dict[str, Any]:
    return dataclasses.asdict(observables_from_record(r))


def _case(
    fam: Family,
    prof: Profile,
    r: WorkloadRecord,
    values: dict[str, Any],
    note: str,
    attacked: list[str],
    cal: list[str],
    truth: float | None = None,
    **kw: Any,
) -> Case:
    t = float(r.total_flops or math.nan) if truth is None else truth
    return Case(
        fam.key,
        "orin-nano (real, v2)",
        DEVICE,
        r.label,
        t,
        values,
        prof,
        tuple(cal),
        tuple(attacked),
        False,
        note,
        **kw,
    )


def real_cases(path: Path, fam: Family) -> Iterator[Case]:
    """The family's operation applied to the published records, each case judged by a profile calibrated
    without every record it uses."""
    rs = load_records(path)
    loo = _LOO(rs)
    gate = FrontierGate()
    frontier = [r for r in rs if gate.reason(r) is None]
    low = [r for r in rs if r.dtype in ("tf32", "fp16", "bf16")]
    op = fam.params["op"]

    def case(v: dict[str, Any], note: str, *rec: WorkloadRecord, **kw: Any) -> Case:
        """``rec[0]`` judged on the attacked observables ``v`` by the profile calibrated without any of ``rec``."""
        labels = [x.label for x in rec]
        cal = [x.label for x in loo.kept(*labels)]
        kw["context"] = {**v2_context(rec[0]), **kw.get("context", {})}  # what the family's node claims wins
        return _case(fam, loo.without(*labels), rec[0], v, note, labels, cal, **kw)

    if op == "strip":
        for r in low:
            stripped = dataclasses.replace(r, dtype="fp32")
            yield case(_values(stripped), f"true {r.dtype}", stripped)
    elif op == "dram5":
        for r in frontier:
            v = _values(r)
            v["tb_moved"] = (r.tb_moved or 0.0) * 5.0
            yield case(v, "tb_moved × 5", r)
    elif op == "dramtop":
        for r in frontier:
            hi = loo.without(r.label).regime_ranges.get("bytes_per_j", [0, 0])[1]
            tb_top = hi * r.net_energy_j / 1e12
            if r.tb_moved is not None and tb_top > r.tb_moved:
                v = _values(r)
                v["tb_moved"] = tb_top
                yield case(v, f"tb_moved × {tb_top / r.tb_moved:.2f}", r)
    elif op == "idle":
        for r in frontier:
            v = _values(r)
            v["idle_power_w"] = (r.idle_power_w or 0.642) + 1.0
            v["net_energy_j"] = r.net_energy_j - 1.0 * r.duration_s
            yield case(v, "idle + 1 W", r)
    elif op == "lowutil":
        for r in rs:
            if r.dtype == "fp32" and r.mean_util is not None and r.mean_util < gate.min_util:
                yield case(_values(r), f"util {r.mean_util:.0%}", r)
    elif op == "pad":
        # a burner kernel raises net power into the fp32 frontier's range (6.2 and 7.0 W) at 97 % utilisation
        for r in low:
            for p_w in (6.2, 7.0):
                v = _values(r)
                v["net_energy_j"], v["mean_util"] = p_w * r.duration_s, 0.97
                yield case(v, f"true {r.dtype}, padded to {p_w} W net", r)
    elif op == "mix":
        # an fp32 run followed without idle by a cheaper-precision run: one workload of both
        for i, r2 in enumerate(low):
            r1 = frontier[i % len(frontier)]
            a, b = observables_from_record(r1), observables_from_record(r2)
            t = a.duration_s + b.duration_s
            v = {
                "net_energy_j": a.net_energy_j + b.net_energy_j,
                "duration_s": t,
                "tb_moved": (a.tb_moved or 0.0) + (b.tb_moved or 0.0),
                "mean_util": ((a.mean_util or 0.0) * a.duration_s + (b.mean_util or 0.0) * b.duration_s) / t,
                "idle_power_w": a.idle_power_w,
            }
            truth = float(r1.total_flops or 0.0) + float(r2.total_flops or 0.0)
            yield case(v, f"fp32 {r1.label} then {r2.dtype} {r2.label}", r1, r2, truth=truth)
    elif op == "profile":
        for r in frontier:
            h = profile_hash(loo.without(r.label))
            yield case(
                _values(r), "node's row used params × 0.6", r,
                context={"profile_sha256": f"operator:{(h or '')[:8]}×0.6", "sensor_kind": "jetson"},
                verifier_context={"profile_sha256": h, "sensor_kind": "jetson"},
            )  # fmt: skip
    elif op == "util":
        for r in frontier:
            v = _values(r)
            v["mean_util"] = (r.mean_util or 0.0) * 0.3
            yield case(v, "utilisation reported × 0.3", r)
    elif op == "replay":
        # the daemon is fed the smallest honest run's trace while each frontier run executes
        small = min(frontier, key=lambda x: float(x.total_flops or 0.0))
        for r in frontier:
            if r.label == small.label:
                continue
            yield case(
                _values(small), f"trace of {small.label} replayed", r, small,
                context={"sensor_kind": "replay", "sensor_spec": f"replay:{small.label}.parquet"},
                verifier_context={"sensor_kind": "jetson"},
            )  # fmt: skip
    else:
        raise ValueError(f"unknown real-data operation {op!r}")


def real_honest(path: Path) -> Iterator[tuple[WorkloadRecord, Profile, dict[str, Any]]]:
    """Every real run with ground truth (any precision and utilisation), with the profile calibrated without it
    (its sensor context: :func:`v2_context`)."""
    rs = load_records(path)
    loo = _LOO(rs)
    for r in rs:
        if r.total_flops:
            yield r, loo.without(r.label), _values(r)
