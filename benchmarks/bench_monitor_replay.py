"""Does the daemon behave the same at any replay speed? The seed trace through `flopwatch monitor`.

Issue 7, "What must hold": replaying the seed's real trace (``timeseries.json``, d_model 384, batch 16, seq 128,
3 layers, 9000 steps) at ``--speed 50`` with a profile calibrated on the v2 records yields one ledger row whose
estimate is within 5 % of the run's ground truth. This script runs the replay on a virtual clock and through the
CLI at several speeds, and prints, side by side, the estimate, its error against ``count_flops`` × 9000, the
detected boundaries, coverage and wall time — the daemon's clock is the sensor's clock, so the rows should agree
up to sampling jitter.

    python benchmarks/bench_monitor_replay.py                   # virtual, 50x, 200x
    python benchmarks/bench_monitor_replay.py --speeds 50 100   # chosen speeds
    python benchmarks/bench_monitor_replay.py --baseline OLD/src --repeat 3   # cost against another tree

``--baseline SRC`` times the virtual-clock replay (the daemon's whole per-reading path, no sleeping) in fresh
processes, alternating the tree under test and ``SRC`` (e.g. ``git archive main src | tar -x -C /tmp/old``),
and prints the wall and CPU time of each and their ratio.
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
    ap.add_argument(
        "--baseline", type=Path, default=None, help="another tree's src/ to compare the cost with"
    )
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    if args.baseline is not None:
        compare(args)
        return

    from flopwatch.estimate.calibration import calibrate
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


#: One virtual-clock replay of the seed trace, timed (wall and CPU) around ``Monitor.run`` only.
_TIMED = """
import json, sys, tempfile, time
from pathlib import Path
from flopwatch.estimate.calibration import calibrate
from flopwatch.monitor.config import MonitorConfig
from flopwatch.monitor.daemon import Monitor
from flopwatch.records import load_records
from flopwatch.telemetry.sensors.base import VirtualClock
from flopwatch.telemetry.sensors.replay import open_replay
trace, records = sys.argv[1], sys.argv[2]
profile = calibrate(load_records(records), "default")
with tempfile.TemporaryDirectory() as d:
    sensors = open_replay(trace, clock=VirtualClock())
    cfg = MonitorConfig(sensors=["replay"], ledger=Path(d) / "l.db")
    w0, c0 = time.perf_counter(), time.process_time()
    res = Monitor(cfg, sensors=sensors, profile=profile).run(install_signals=False)
    w1, c1 = time.perf_counter(), time.process_time()
print(json.dumps({"wall_s": w1 - w0, "cpu_s": c1 - c0, "rows": len(res.workloads)}))
"""


def compare(args: argparse.Namespace) -> None:
    """Time the virtual-clock replay under this tree and under ``args.baseline``, alternating (module doc)."""
    import os

    here = Path(__file__).resolve().parents[1] / "src"
    trees = {"this tree": here, "baseline": args.baseline.resolve()}
    times: dict[str, list[dict]] = {k: [] for k in trees}
    for _ in range(args.repeat):
        for name, src in trees.items():
            env = {**os.environ, "PYTHONPATH": str(src)}
            out = subprocess.run(
                [sys.executable, "-c", _TIMED, str(args.trace), str(args.records)],
                capture_output=True, text=True, check=True, env=env,
            )  # fmt: skip
            times[name].append(json.loads(out.stdout.strip().splitlines()[-1]))
    for name, ts in times.items():
        walls = ", ".join(f"{t['wall_s']:.2f}" for t in ts)
        cpus = ", ".join(f"{t['cpu_s']:.2f}" for t in ts)
        print(f"{name:>10} ({trees[name]}): wall s [{walls}]  cpu s [{cpus}]  rows {ts[0]['rows']}")
    med = {k: sorted(t["cpu_s"] for t in ts)[len(ts) // 2] for k, ts in times.items()}
    medw = {k: sorted(t["wall_s"] for t in ts)[len(ts) // 2] for k, ts in times.items()}
    print(
        f"median CPU: this tree / baseline = {med['this tree']:.2f} / {med['baseline']:.2f} s = "
        f"{med['this tree'] / med['baseline']:.3f}; wall {medw['this tree'] / medw['baseline']:.3f}"
    )


if __name__ == "__main__":
    main()
