"""Decisiveness and cost of the sound verdict (issue 21): upper bound ÷ truth of honest runs per device and set of
observables, the later-session coverage of the calibrated interval, and the time of one ``assess`` call.

    PYTHONPATH=src FLOPWATCH_SHARED=../shared python benchmarks/bench_verdict.py

Real: the Jetson Orin Nano v2 records (Fowler 2026; energy and duration only). SIMULATED: flopwatch.sim twins
(seed 2, the quick bf16 family as bf16/fp16, judged by a bf16 profile calibrated in session 1); a cumulative
energy counter is assumed to cover each run (no unobserved time).
"""

from __future__ import annotations

import dataclasses
import os
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from flopwatch.estimate.verdict import assess, observables_from_record  # noqa: E402
from flopwatch.evaluate.splits import evaluate_models  # noqa: E402
from flopwatch.records import load_records  # noqa: E402
from flopwatch.redteam.simulated import datacenter_family, sim_profile  # noqa: E402
from flopwatch.sim.accelerator import SimulatedAccelerator  # noqa: E402
from sound_helpers import sim_obs  # noqa: E402


def main() -> None:
    shared = Path(os.environ.get("FLOPWATCH_SHARED", Path(__file__).resolve().parents[2] / "shared"))
    v2 = load_records(shared / "data/jetson_flop_estimator/eval_results_v2_records.json")
    print("upper bound ÷ truth of honest runs (median [min–max]); 'decided below' needs T above it")
    for dt in ("fp32", "tf32", "fp16", "bf16"):
        f = [
            assess(None, observables_from_record(r), device="orin-nano").upper_flops / r.total_flops
            for r in v2
            if r.dtype == dt
        ]
        print(
            f"  orin-nano (real v2) {dt:5s} energy           n={len(f):2d}  ×{np.median(f):5.2f} [{min(f):.2f}–{max(f):.2f}]"
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
                    assess(prof, sim_obs(acc, r, **kw), device=key).upper_flops / r.total_flops for r in runs
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
    obs = observables_from_record(next(iter(v2)))
    n = 2000
    t0, c0 = time.perf_counter(), time.process_time()
    for _ in range(n):
        assess(None, obs, device="orin-nano", threshold_flops=1e15)
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    print(
        f"assess (no profile): {wall / n * 1e6:.0f} µs wall, {cpu / n * 1e6:.0f} µs CPU per call ({n} calls)"
    )


if __name__ == "__main__":
    main()
