"""Does the sampler hold its rate? Period accuracy, drift and overhead per sample on the replay sensor.

Issue 3, "What must hold": at 100 Hz on the replay sensor the mean period is within 1 % of nominal and no
drift accumulates over a minute; the sampler's own overhead per sample is printed.

Runs the seed trace (``../shared/.../timeseries.json``, or ``--trace``) through a real-time replay
(speed 1, monotonic clock) at ``--rate`` for ``--duration`` seconds with a TraceWriter sink, and compares
with a naive ``sleep(period)`` loop (relative deadlines) to show what absolute deadlines buy.

    python benchmarks/bench_sampler.py                 # 100 Hz, 60 s (the acceptance figure)
    python benchmarks/bench_sampler.py --duration 10   # quick look
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq

from flopwatch.telemetry.sampler import Sampler
from flopwatch.telemetry.schema import Reading, base_metadata
from flopwatch.telemetry.sensors.replay import open_replay
from flopwatch.telemetry.trace import Trace
from flopwatch.telemetry.writer import TraceWriter

DEFAULT_TRACE = (
    Path(__file__).resolve().parents[1].parent / "shared/data/jetson_flop_estimator/writeup/timeseries.json"
)


def drift_slope_ms_per_min(t: np.ndarray, period: float, *, on_grid: bool) -> float:
    """Least-squares slope of (actual − scheduled) tick time, in ms of drift per minute.

    ``on_grid``: ticks are scheduled at t0 + k·period but some may have been skipped (gaps), so each tick's
    k is its nearest grid index; otherwise tick i is the i-th period (the naive loop never skips).
    """
    k = np.round((t - t[0]) / period) if on_grid else np.arange(t.size)
    err = t - (t[0] + k * period)
    return float(np.polyfit(t - t[0], err, 1)[0] * 60e3)


def run_sampler(trace: Path, rate: float, duration: float, out: Path) -> dict[str, float]:
    sensors = open_replay(trace, speed=1.0)
    items_t: list[float] = []

    def tick_times(item: object) -> None:
        if isinstance(item, Reading):
            items_t.append(item.t_s)

    with TraceWriter(out, base_metadata(kind="replay", rate_hz=rate), flush_every_s=1.0) as w:
        s = Sampler(sensors, rate, sinks=[w, tick_times], duration_s=duration)
        c0 = time.process_time()
        s.start()
        s.wait()
        s.stop()
        cpu = time.process_time() - c0
    st = s.stats
    t = np.asarray(items_t)
    period = 1.0 / rate
    # tick-to-tick intervals between consecutive *scheduled* ticks (a skipped tick would be a gap)
    intervals = np.diff(t)
    tr = Trace.read(out)
    return {
        "ticks": st.n_ticks,
        "gaps": sum(st.n_gaps.values()),
        "skipped": st.skipped_ticks,
        "mean_period_ms": st.mean_period_s * 1e3,
        "period_err_pct": (st.mean_period_s - period) / period * 100,
        "median_interval_ms": float(np.median(intervals) * 1e3),
        "p99_abs_jitter_ms": float(np.percentile(np.abs(intervals - period), 99) * 1e3),
        "final_drift_ms": st.drift_s * 1e3,
        "drift_ms_per_min": drift_slope_ms_per_min(t, period, on_grid=True),
        "mean_lateness_ms": st.mean_lateness_s * 1e3,
        "overhead_us_per_sample": st.overhead_per_tick_s * 1e6,
        "cpu_pct": cpu / duration * 100,
        "rows_in_file": len(tr),
        "row_groups": pq.ParquetFile(out).num_row_groups,
    }


def run_naive(rate: float, duration: float) -> dict[str, float]:
    """The loop we replace: read, then sleep(period). Lateness accumulates as drift."""
    period = 1.0 / rate
    t0 = time.monotonic()
    ts = []
    while time.monotonic() - t0 < duration:
        ts.append(time.monotonic())
        _ = [x * 1.0001 for x in range(200)]  # a little work, like a sensor read + sink
        time.sleep(period)
    t = np.asarray(ts)
    return {
        "ticks": len(ts),
        "mean_period_ms": float(np.mean(np.diff(t)) * 1e3),
        "period_err_pct": (float(np.mean(np.diff(t))) - period) / period * 100,
        "final_drift_ms": float((t[-1] - (t[0] + (len(t) - 1) * period)) * 1e3),
        "drift_ms_per_min": drift_slope_ms_per_min(t, period, on_grid=False),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--trace", type=Path, default=DEFAULT_TRACE)
    ap.add_argument("--rate", type=float, default=100.0)
    ap.add_argument("--duration", type=float, default=60.0)
    ap.add_argument("--naive-duration", type=float, default=10.0)
    a = ap.parse_args()
    if not a.trace.exists():
        raise SystemExit(f"trace not found: {a.trace} (pass --trace)")
    with tempfile.TemporaryDirectory() as d:
        s = run_sampler(a.trace, a.rate, a.duration, Path(d) / "bench.parquet")
    n = run_naive(a.rate, a.naive_duration)
    print(f"flopwatch Sampler vs naive sleep(period) loop, {a.rate:g} Hz (replay sensor, real-time clock)")
    print(f"{'':28s}{'Sampler':>14s}{'naive':>14s}")
    print(f"{'duration s':28s}{a.duration:14.0f}{a.naive_duration:14.0f}")
    for key in ("ticks", "mean_period_ms", "period_err_pct", "final_drift_ms", "drift_ms_per_min"):
        print(f"{key:28s}{s[key]:14.4f}{n[key]:14.4f}")
    for key in (
        "gaps",
        "skipped",
        "median_interval_ms",
        "p99_abs_jitter_ms",
        "mean_lateness_ms",
        "overhead_us_per_sample",
        "cpu_pct",
        "rows_in_file",
        "row_groups",
    ):
        print(f"{key:28s}{s[key]:14.4f}{'':>14s}")
    ok = abs(s["period_err_pct"]) <= 1.0
    print(f"\nmean period within 1 % of nominal: {'yes' if ok else 'NO'} ({s['period_err_pct']:+.4f} %)")
    print(
        f"drift over the run: {s['final_drift_ms']:.3f} ms at the end, slope {s['drift_ms_per_min']:+.4f} ms/min"
    )


if __name__ == "__main__":
    main()
