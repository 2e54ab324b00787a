"""CPU, wall time and peak memory against trace length: do the readers of traces stream?

Issue 14: detection, energy integration, replay and recording must cost time linear in the trace and memory
bounded by a chunk, whatever its length. For each length this script writes a **synthetic** 10 Hz trace of a
simulated A100 (labelled simulated: numpy, seeded; a workload of 3–12 min every ~15 min, idle between, an
energy counter, DRAM traffic), then runs every case in a fresh process and prints CPU seconds, wall seconds
and peak RSS, and the growth exponent b of CPU ∝ rows^b fitted over the lengths ≥ 1 h (1 = linear).

    python benchmarks/bench_scaling.py                  # 10 min, 1 h, 6 h, 24 h (a few minutes)
    python benchmarks/bench_scaling.py --full           # + 7 days at 10 Hz and a day at 100 Hz
    python benchmarks/bench_scaling.py --cases detect   # a subset: detect integrate replay record startup

Cases: ``detect`` (:func:`flopwatch.detect.detect_workloads` on the file, as ``flopwatch detect`` runs it);
``join`` (:func:`flopwatch.join.join_trace_file`, as ``flopwatch join`` runs it: detection streamed from the
file, then the records of the trace's workloads joined by time); ``integrate``
(:func:`flopwatch.telemetry.integrate.integrate_windows`, 500 windows in one pass); ``replay``
(the monitor daemon replaying the file in virtual time, ledger on disk); ``record`` (Sampler + TraceWriter on
the simulator's virtual clock for the same duration — the simulator's own cost included). ``startup`` times
``flopwatch --help`` and ``flopwatch estimate --help``.

Targets: detect on 24 h ≤ 4× the CPU of 1 h and ≤ 1.5× its memory; the replaying monitor on 24 h ≤ 1.5× the
memory of 1 h. The machine is shared: the figures are CPU time (load-independent) beside wall time.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
LENGTHS = {"10min": 600.0, "1h": 3600.0, "6h": 6 * 3600.0, "24h": 86400.0}
FULL = {"7d": 7 * 86400.0}
CASES = ("detect", "join", "integrate", "replay", "record")
RECORD_MAX_S = 6 * 3600.0  # the simulator costs ~0.1 ms per sample: longer recordings only with --full


def workload_times(duration_s: float, rng: Any) -> tuple[Any, Any]:
    """The synthetic trace's workloads: start every ~15 min (jittered), last 3–12 min (``rng`` seeded as the
    trace's: the first draws of :func:`write_trace`)."""
    import numpy as np

    starts = np.cumsum(rng.uniform(600, 1200, int(duration_s / 600) + 2))
    return starts, starts + rng.uniform(180, 720, starts.size)


def write_records(path: Path, duration_s: float, seed: int = 0) -> int:
    """Ground-truth records of :func:`write_trace`'s workloads (timed regions on its monotonic clock, labelled
    synthetic), one JSON line each, for the ``join`` case."""
    import numpy as np

    from flopwatch.records import WorkloadRecord

    starts, ends = workload_times(duration_s, np.random.default_rng(seed))
    runs: list[list[float]] = []
    for a, b in zip(starts.tolist(), ends.tolist(), strict=True):
        if runs and a <= runs[-1][1]:  # overlapping workloads are one busy period: one run
            runs[-1][1] = max(runs[-1][1], b)
        elif b < duration_s:
            runs.append([a, b])
    lines = [
        json.dumps(
            WorkloadRecord(
                label=f"synthetic-{i}",
                total_flops=1e15 * (b - a),
                dtype="bf16",
                simulated=True,
                start_monotonic_s=a,
                end_monotonic_s=b,
            ).to_dict()
        )
        for i, (a, b) in enumerate(runs)
        if b < duration_s
    ]
    path.write_text("\n".join(lines) + "\n")
    return len(lines)


def write_trace(path: Path, duration_s: float, hz: float, seed: int = 0, rows_per_group: int = 65536) -> int:
    """A synthetic (simulated-A100-like) trace, written row group by row group in bounded memory."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq

    from flopwatch.telemetry.schema import arrow_schema, base_metadata

    rng = np.random.default_rng(seed)
    md = base_metadata(
        kind="synthetic",
        rate_hz=hz,
        simulated=True,
        devices=[{"device_id": "sim:a100#0", "spec_key": "a100"}],
        note="bench_scaling.py synthetic trace (numpy, seeded), not a measurement",
        t0_monotonic_s=0.0,
    )
    schema = arrow_schema([], md)
    n = int(duration_s * hz)
    starts, ends = workload_times(duration_s, rng)
    energy0 = 0.0
    p_prev = None
    with pq.ParquetWriter(str(path), schema) as w:
        for a in range(0, n, rows_per_group):
            b = min(n, a + rows_per_group)
            t = np.arange(a, b) / hz
            k = np.searchsorted(starts, t, side="right") - 1
            busy = (k >= 0) & (t < ends[np.clip(k, 0, None)])
            util = np.where(busy, rng.uniform(0.88, 1.0, t.size), rng.uniform(0.0, 0.02, t.size))
            power = np.clip(48.4 + 300.0 * util + rng.normal(0, 2.0, t.size), 1.0, None)
            pp = np.concatenate([[power[0] if p_prev is None else p_prev], power])
            energy = energy0 + np.cumsum(0.5 * (pp[:-1] + pp[1:]) / hz)
            energy0, p_prev = float(energy[-1]), float(power[-1])
            m = t.size
            cols = {
                "t_s": t,
                "wall_time": pa.array((1.7e18 + t * 1e9).astype("int64"), pa.timestamp("ns", tz="UTC")),
                "device": pa.array(["sim:a100#0"] * m, pa.string()),
                "power_w": power,
                "energy_j": energy,
                "util": util,
                "mem_util": util * 0.6,
                "dram_bytes_per_s": util * 1.2e12,
                "sm_clock_mhz": np.where(busy, 1410.0, 210.0),
                "temp_c": np.full(m, 45.0),
                "gap_error": pa.nulls(m, pa.string()),
                "extra_json": pa.nulls(m, pa.string()),
            }
            w.write_table(pa.table(cols, schema=schema))
    return n


# ---------------------------------------------------------------------- children (one case per process)
def child(case: str, path: str, duration_s: float) -> dict[str, object]:
    t_wall = time.perf_counter()
    out: dict[str, object] = {}
    if case.startswith("baseline-"):  # the fixed cost: interpreter and the case's imports, no work
        import pyarrow.parquet  # noqa: F401

        import flopwatch.detect  # noqa: F401
        import flopwatch.join  # noqa: F401
        import flopwatch.telemetry.integrate  # noqa: F401
        import flopwatch.telemetry.sensors.replay  # noqa: F401

        if case in ("baseline-replay", "baseline-record"):
            import pandas  # noqa: F401

            import flopwatch.monitor.daemon  # noqa: F401
            import flopwatch.sim.sensor  # noqa: F401
            import flopwatch.telemetry.trace  # noqa: F401
    elif case == "detect":
        from flopwatch.detect import detect_workloads

        det = detect_workloads(path)
        out["workloads"] = len(det.segments)
    elif case == "join":
        from flopwatch.join import join_trace_file

        recs = Path(path).with_suffix(".records.jsonl")
        if write_records(recs, duration_s):  # none when the trace is shorter than its first workload
            res = join_trace_file(path, recs, Path(path).with_suffix(".joined.jsonl"), overwrite=True)
            out["records"], out["joined"] = res.n_records, res.n_ok
        else:
            out["records"] = 0
    elif case == "integrate":
        import numpy as np

        from flopwatch.telemetry.integrate import Window, integrate_windows

        rng = np.random.default_rng(1)
        a = rng.uniform(0, duration_s, 500)
        res = integrate_windows(path, [Window(float(x), float(x) + 300.0) for x in a])
        out["windows"] = len(res)
    elif case == "replay":
        from flopwatch.monitor.config import MonitorConfig
        from flopwatch.monitor.daemon import Monitor
        from flopwatch.telemetry.sensors.replay import open_replay

        with tempfile.TemporaryDirectory() as d:
            cfg = MonitorConfig(
                sensors=["replay"], ledger=Path(d) / "l.db", sample_hz=10.0, idle_power_w=48.4
            )
            res = Monitor(cfg, sensors=open_replay(path, speed=math.inf)).run(install_signals=False)
            out["workloads"] = len(res.workloads)
    elif case.startswith("record"):
        from flopwatch.sim.sensor import from_spec
        from flopwatch.telemetry.sampler import Sampler
        from flopwatch.telemetry.schema import base_metadata
        from flopwatch.telemetry.writer import TraceWriter

        hz = float(case.partition("@")[2] or 10.0)  # "record@100": the recording rate
        sensors = list(from_spec("a100", seed=0))
        with TraceWriter(path, base_metadata(kind="sim", rate_hz=hz, simulated=True), fsync=False) as w:
            st = Sampler(sensors, hz, sinks=[w], duration_s=duration_s).run()
            out["samples"] = sum(st.n_samples.values())
            out["writer_blocked_s"] = round(w.blocked_s, 3)
            out["writer_max_pending"] = w.max_pending_seen
    else:
        raise SystemExit(f"unknown case {case}")
    ru = resource.getrusage(resource.RUSAGE_SELF)
    out.update(
        cpu_s=ru.ru_utime + ru.ru_stime,
        wall_s=time.perf_counter() - t_wall,
        peak_rss_mib=ru.ru_maxrss / 1024.0,
    )
    return out


def run_child(case: str, path: Path, duration_s: float) -> dict[str, object]:
    env = dict(os.environ, PYTHONPATH=str(ROOT / "src") + os.pathsep + os.environ.get("PYTHONPATH", ""))
    cmd = [sys.executable, __file__, "--child", case, str(path), str(duration_s)]
    p = subprocess.run(cmd, capture_output=True, text=True, env=env, check=False)
    if p.returncode != 0:
        return {"error": (p.stderr.strip().splitlines() or ["?"])[-1]}
    return json.loads(p.stdout.strip().splitlines()[-1])


def startup() -> None:
    env = dict(os.environ, PYTHONPATH=str(ROOT / "src"))
    for argv in ([], ["--help"], ["estimate", "--help"]):
        cmd = [sys.executable, "-m", "flopwatch", *argv] if argv else [sys.executable, "-c", "pass"]
        best = (math.inf, math.inf)
        for _ in range(5):
            t0 = time.perf_counter()
            r0 = resource.getrusage(resource.RUSAGE_CHILDREN)
            subprocess.run(cmd, capture_output=True, env=env, check=False)
            r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
            cpu = (r1.ru_utime - r0.ru_utime) + (r1.ru_stime - r0.ru_stime)
            best = min(best, (time.perf_counter() - t0, cpu))
        label = "python -c pass" if not argv else "flopwatch " + " ".join(argv)
        print(f"  {label:<28} wall {best[0]:.3f} s  CPU {best[1]:.3f} s  (best of 5)")


def exponent(rows: list[int], vals: list[float]) -> float:
    import numpy as np

    if len(rows) < 2:
        return math.nan
    return float(np.polyfit(np.log(rows), np.log(vals), 1)[0])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--child", nargs=3, metavar=("CASE", "TRACE", "DURATION_S"), help=argparse.SUPPRESS)
    ap.add_argument("--full", action="store_true", help="also 7 days at 10 Hz and a day at 100 Hz")
    ap.add_argument("--cases", nargs="*", default=[*CASES, "startup"])
    ap.add_argument("--lengths", nargs="*", default=None, help="subset of 10min 1h 6h 24h 7d")
    ap.add_argument("--record-hz", type=float, default=10.0, help="rate of the record case (issue: 100)")
    args = ap.parse_args()
    if args.child:
        case, path, dur = args.child
        print(json.dumps(child(case, path, float(dur))))
        return
    sizes = [(k, v, 10.0) for k, v in {**LENGTHS, **(FULL if args.full else {})}.items()]
    if args.full:
        sizes.append(("24h@100Hz", 86400.0, 100.0))
    if args.lengths:
        sizes = [s for s in sizes if s[0] in args.lengths]
    print(f"bench_scaling: {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f} at start")
    if "startup" in args.cases:
        print("start-up:")
        startup()
    cases = [c for c in args.cases if c in CASES]
    if not cases:
        return
    base = {c: run_child(f"baseline-{c}", Path("-"), 0.0) for c in cases}
    print("fixed cost per process (interpreter + imports, no work):")
    for c, r in base.items():
        print(
            f"  {c:<10} CPU {r.get('cpu_s', math.nan):8.2f} s  peak RSS {r.get('peak_rss_mib', math.nan):7.1f} MiB"
        )
    with tempfile.TemporaryDirectory() as d:
        results: dict[str, list[tuple[str, int, dict[str, object]]]] = {c: [] for c in cases}
        for name, dur, hz in sizes:
            trace = Path(d) / f"{name}.parquet"
            t0 = time.perf_counter()
            n = write_trace(trace, dur, hz)
            print(
                f"{name}: {n:,} rows, {trace.stat().st_size / 2**20:.1f} MiB on disk "
                f"(written in {time.perf_counter() - t0:.1f} s), load {os.getloadavg()[0]:.1f}"
            )
            for c in cases:
                if c == "record":
                    if (dur * args.record_hz / 10.0 > RECORD_MAX_S and not args.full) or hz != 10.0:
                        continue
                    r = run_child(f"record@{args.record_hz:g}", Path(d) / f"rec_{name}.parquet", dur)
                else:
                    r = run_child(c, trace, dur)
                results[c].append((name, n, r))
                if "error" in r:
                    print(f"  {c:<10} ERROR {r['error']}")
                    continue
                extra = {k: v for k, v in r.items() if k not in ("cpu_s", "wall_s", "peak_rss_mib")}
                print(
                    f"  {c:<10} CPU {r['cpu_s']:8.2f} s  wall {r['wall_s']:8.2f} s  "
                    f"peak RSS {r['peak_rss_mib']:7.1f} MiB  {extra}"
                )
            trace.unlink()
        print(
            "\ngrowth over the 10 Hz lengths ≥ 1 h: CPU above the fixed cost ∝ rows^b_cpu (1 = linear), "
            "peak RSS ∝ rows^b_rss (0 = flat); 24 h / 1 h ratios of the totals:"
        )
        for c, rs in results.items():
            ok = [(nm, n, r) for nm, n, r in rs if "error" not in r and nm not in ("10min", "24h@100Hz")]
            c0 = float(base[c].get("cpu_s", 0.0))  # type: ignore[arg-type]
            b_cpu = exponent(
                [n for _, n, _ in ok],
                [max(1e-3, float(r["cpu_s"]) - c0) for _, _, r in ok],  # type: ignore[arg-type]
            )
            b_mem = exponent([n for _, n, _ in ok], [float(r["peak_rss_mib"]) for _, _, r in ok])  # type: ignore[arg-type]
            by = {nm: r for nm, _, r in ok}
            ratio = ""
            if "1h" in by and "24h" in by:
                ratio = (
                    f"  24h/1h: CPU ×{float(by['24h']['cpu_s']) / float(by['1h']['cpu_s']):.2f}, "  # type: ignore[arg-type]
                    f"RSS ×{float(by['24h']['peak_rss_mib']) / float(by['1h']['peak_rss_mib']):.2f}"  # type: ignore[arg-type]
                )
            print(f"  {c:<10} b_cpu {b_cpu:5.2f}  b_rss {b_mem:5.2f}{ratio}")


if __name__ == "__main__":
    main()
