"""How long the red-team suite and one sound assessment take (issue 21: ``--quick`` under ~10 s of CPU).

Run:  python benchmarks/bench_redteam.py [--repeat 3]

Prints wall and CPU time of ``run_suite(quick=True)`` and ``run_suite()`` (best of ``--repeat``; the machine
may be shared), and the per-call cost of ``assess`` on one record (what the monitor pays per workload).
"""

from __future__ import annotations

import argparse
import time

from flopwatch.estimate import Observables, assess, calibrate
from flopwatch.records import load_records
from flopwatch.redteam import run_suite
from flopwatch.redteam.real import find_v2


def timed(fn, repeat: int) -> tuple[float, float]:
    best = (float("inf"), float("inf"))
    for _ in range(repeat):
        w0, c0 = time.perf_counter(), time.process_time()
        fn()
        best = min(best, (time.perf_counter() - w0, time.process_time() - c0))
    return best


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    for quick in (True, False):
        w, c = timed(lambda q=quick: run_suite(quick=q), args.repeat)
        d = run_suite(quick=quick).to_dict()
        print(
            f"run_suite(quick={quick}): wall {w:.2f} s, CPU {c:.2f} s — {d['n_families']} families, "
            f"{len(d['attacks'])} attacked runs, wrong below {d['wrong_below']}, {len(d['honest'])} honest runs, "
            f"false above {d['false_above']}"
        )
    v2 = find_v2()
    if v2 is not None:
        prof = calibrate(load_records(v2), device="orin-nano")
        obs = Observables(1141.0, 146.7, tb_moved=0.0763, mean_util=0.969, idle_power_w=0.642)
        n = 2000
        w, _ = timed(lambda: [assess(prof, obs, threshold_flops=1e14) for _ in range(n)], 1)
        print(f"assess (in regime): {w / n * 1e6:.0f} µs per workload")
        obs = Observables(300.0, 146.7, tb_moved=0.0763, mean_util=0.5, idle_power_w=0.642)
        w, _ = timed(lambda: [assess(prof, obs, threshold_flops=1e14) for _ in range(n)], 1)
        print(f"assess (out of regime): {w / n * 1e6:.0f} µs per workload")


if __name__ == "__main__":
    main()
