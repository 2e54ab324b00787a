"""Decisiveness and cost of the sound verdict (issue 21): upper bound ÷ truth of honest runs per device and set of
observables, the later-session coverage of the calibrated interval, and the time of one ``assess`` call.

    PYTHONPATH=src FLOPWATCH_SHARED=../shared python benchmarks/bench_verdict.py

Every run is judged with the sensor context it was observed in (the one rule: ``assess(..., context=…)``).
Real: the Jetson Orin Nano v2 records (Fowler 2026; energy and duration only), read from the INA3221 rail
VDD_CPU_GPU_CV at 2 Hz (``redteam.real.v2_context``): the timing table's 1.1 ms reading leaves 99.8 % of the run
unobserved and the rate is below the sensor's need, so none can be "below" ("below possible" counts them).
SIMULATED: flopwatch.sim twins (seed 2, the quick bf16 family as bf16/fp16, judged by a bf16 profile calibrated in
session 1), read as the sensor the twin emulates (``redteam.simulated.twin_context``: NVML's counter, blind 75 %
of the time); the pipe counters (``+pipes``) cover the whole run (DCGM profiling counts every cycle).
"""

from __future__ import annotations

import dataclasses
import os
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from flopwatch.estimate.observe import Observables  # noqa: E402
from flopwatch.estimate.verdict import assess, observables_from_record  # noqa: E402
from flopwatch.evaluate.splits import evaluate_models  # noqa: E402
from flopwatch.records import load_records  # noqa: E402
from flopwatch.redteam.real import v2_context  # noqa: E402
from flopwatch.redteam.simulated import datacenter_family, sim_profile, twin_context  # noqa: E402
from flopwatch.sim.accelerator import SimulatedAccelerator  # noqa: E402
from sound_helpers import sim_obs  # noqa: E402


def _obs(acc: SimulatedAccelerator, run: object, kw: dict[str, bool]) -> Observables:
    """The twin run's observables (SIMULATED); with the pipe counters, the time they cover: the whole run."""
    o = sim_obs(acc, run, **kw)
    return dataclasses.replace(o, pipe_observed_s=o.duration_s) if kw.get("pipes") else o


def main() -> None:
    shared = Path(os.environ.get("FLOPWATCH_SHARED", Path(__file__).resolve().parents[2] / "shared"))
    v2 = load_records(shared / "data/jetson_flop_estimator/eval_results_v2_records.json")
    print("upper bound ÷ truth of honest runs (median [min–max]); 'decided below' needs T above it")
    for dt in ("fp32", "tf32", "fp16", "bf16"):
        a = [
            (assess(None, observables_from_record(r), device="orin-nano", context=v2_context(r)), r)
            for r in v2
            if r.dtype == dt
        ]
        f = [x.upper_flops / r.total_flops for x, r in a]
        ok = sum(not x.warnings for x, _ in a)
        print(
            f"  orin-nano (real v2) {dt:5s} energy           n={len(f):2d}  ×{np.median(f):5.2f} [{min(f):.2f}–{max(f):.2f}]"
            f"  below possible: {ok}/{len(a)}"
        )
    fam = datacenter_family("bf16", quick=True)
    for key in ("a100", "h100", "h200"):
        prof = sim_profile(key, fam, "bf16")
        for dt in ("bf16", "fp16"):
            acc = SimulatedAccelerator(key, seed=2)
            acc.idle(10.0)
            runs = [
                acc.run(dataclasses.replace(w, dtype=dt, label=f"{w.label}-{dt}"), duration_s=60.0)
                for w in fam
            ]
            for name, kw in (
                ("energy", {}),
                ("+clock+pl", {"clocks": True}),
                ("+pipes", {"clocks": True, "pipes": True}),
            ):
                f = [
                    assess(prof, _obs(acc, r, kw), device=key, context=twin_context(acc)).upper_flops
                    / r.total_flops
                    for r in runs
                ]
                share = np.mean(np.array(f) <= 2.5) * 100
                print(
                    f"  {key} (SIMULATED) {dt:5s} {name:10s} n={len(f):2d}  ×{np.median(f):5.2f} [{min(f):.2f}–{max(f):.2f}]  ≤2.5×: {share:.0f} %"
                )
    ss = evaluate_models(v2, ["default"], n_splits=200, n_train=14, seed=0).to_dict()["models"]["default"][
        "session_shift"
    ]
    print(
        f"later-session coverage of the 90 % calibrated interval (default, 200 splits, seed 0): "
        f"{ss['coverage_widened']:.1%} widened (unwidened {ss['coverage']:.1%}), median ±{ss['median_halfwidth_widened_pct']:.1f} %"
    )
    r0 = next(iter(v2))
    obs, ctx = observables_from_record(r0), v2_context(r0)
    n = 2000
    t0, c0 = time.perf_counter(), time.process_time()
    for _ in range(n):
        assess(None, obs, device="orin-nano", threshold_flops=1e15, context=ctx)
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    print(
        f"assess (no profile, with its sensor context): {wall / n * 1e6:.0f} µs wall, {cpu / n * 1e6:.0f} µs CPU per call ({n} calls)"
    )


if __name__ == "__main__":
    main()
