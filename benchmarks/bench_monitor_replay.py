"""Does the daemon behave the same at any replay speed? The seed trace through `flopwatch monitor`.

Issue 7, "What must hold": replaying the seed's real trace (``timeseries.json``, d_model 384, batch 16, seq 128,
3 layers, 9000 steps) at ``--speed 50`` with a profile calibrated on the v2 records yields one ledger row whose
estimate is within 5 % of the run's ground truth. This script runs the replay on a virtual clock and through the
CLI at several speeds, and prints, side by side, the estimate, its error against ``count_flops`` × 9000, the
detected boundaries, coverage and wall time — the daemon's clock is the sensor's clock, so the rows should agree
up to sampling jitter.

    python benchmarks/bench_monitor_replay.py                   # virtual, 50x, 200x
    python benchmarks/bench_monitor_replay.py --speeds 50 100   # chosen speeds
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

SHARED = Path(__file__).resolve().parents[1].parent / "shared/data/jetson_flop_estimator"
CLI = "import sys; from flopwatch.cli import main; sys.exit(main())"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trace", type=Path, default=SHARED / "writeup/timeseries.json")
    ap.add_argument("--records", type=Path, default=SHARED / "eval_results_v2_records.json")
    ap.add_argument("--speeds", type=float, nargs="*", default=[50.0, 200.0])
    ap.add_argument("--model", default="default")
    args = ap.parse_args()

    from flopwatch.estimate.calibrate import calibrate
    from flopwatch.monitor.config import MonitorConfig
    from flopwatch.monitor.daemon import Monitor
    from flopwatch.records import load_records
    from flopwatch.telemetry.sensors.base import VirtualClock
    from flopwatch.telemetry.sensors.replay import open_replay
    from flopwatch.workloads.config import make_config
    from flopwatch.workloads.ground_truth import count_flops

    profile = calibrate(load_records(args.records), args.model)
    gt = count_flops(
        make_config("seed-encoder", d_model=384, batch_size=16, seq_len=128, num_layers=3)
    ).flops_per_step
    gt *= 9000
    rows: list[tuple[str, dict, float]] = []
    with tempfile.TemporaryDirectory() as d:
        t0 = time.perf_counter()
        cfg = MonitorConfig(sensors=["replay"], ledger=Path(d) / "virtual.db")
        res = Monitor(cfg, sensors=open_replay(args.trace, clock=VirtualClock()), profile=profile).run()
        rows.append(("virtual clock", res.workloads[0] if res.workloads else {}, time.perf_counter() - t0))
        prof = Path(d) / "profile.json"
        profile.save(prof)
        for speed in args.speeds:
            led = Path(d) / f"speed{speed:g}.db"
            t0 = time.perf_counter()
            out = subprocess.run(
                [sys.executable, "-c", CLI, "monitor", "--sensor", f"replay:{args.trace}", "--speed", f"{speed:g}",
                 "--profile", str(prof), "--ledger", str(led), "--json"],
                capture_output=True, text=True, check=True,
            )  # fmt: skip
            wl = json.loads(out.stdout)["workloads"]
            rows.append(
                (f"--speed {speed:g}", wl[0] if len(wl) == 1 else {"n": len(wl)}, time.perf_counter() - t0)
            )

    print(
        f"ground truth (count_flops x 9000): {gt:.4e} FLOPs; profile {profile.model_name} on {args.records.name}"
    )
    print(
        f"{'run':>14} {'estimate':>11} {'error':>8} {'start s':>8} {'end s':>8} {'net J':>8} {'cover':>6} {'wall s':>7}"
    )
    for name, w, wall in rows:
        if "estimate_flops" not in w:
            print(f"{name:>14} expected one workload row, got {w}")
            continue
        err = 100 * (w["estimate_flops"] / gt - 1)
        print(
            f"{name:>14} {w['estimate_flops']:11.4e} {err:+7.2f}% {w['start_t_s']:8.1f} {w['end_t_s']:8.1f} "
            f"{w['net_energy_j']:8.1f} {w['coverage']:6.3f} {wall:7.1f}"
        )


if __name__ == "__main__":
    main()
