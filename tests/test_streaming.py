"""Streaming readers: detection and energy integration in one pass per chunk, identical to the whole-trace
implementation they replaced, whatever the chunking; replay exact at any speed; the writer's backpressure."""

from __future__ import annotations

import math
import threading
import time

import numpy as np
import pytest

from flopwatch.detect import detect_workloads
from flopwatch.telemetry.integrate import StreamingMedian, Window, integrate_windows
from flopwatch.telemetry.sampler import Sampler
from flopwatch.telemetry.schema import base_metadata
from flopwatch.telemetry.sensors.base import VirtualClock
from flopwatch.telemetry.sensors.replay import PacedClock, ReplaySensor, open_replay
from flopwatch.telemetry.source import ParquetSource, open_source
from flopwatch.telemetry.trace import Trace
from flopwatch.telemetry.writer import TraceWriter
from streaming_helpers import synth_frame, synth_trace

# Numbers of the whole-trace implementation (flopwatch before streaming, commit 1ff4bc0) on these seeded
# traces: (device, start, end, energy, net energy, mean util, coverage, TB moved, complete, method).
LEGACY = {
    "counter": (
        dict(seed=1, n_s=1800),
        {"gpu0": 53.01412766532818},
        [
            ("gpu0", 319.5, 600.0, 91792.6016752763, 76922.13886515173, 0.9238288260537004, 0.9985739750445634, 259.2254830627309, True, "counter"),
            ("gpu0", 919.5, 1200.0, 91654.60899105133, 76784.14618092676, 0.9223454532731836, 1.0, 258.80870702196296, True, "counter"),
            ("gpu0", 1519.5, 1799.9, 91626.67512231553, 76761.5137249575, 0.9224713876609827, 1.0, 258.7076222757923, False, "counter"),
        ],
    ),
    "trapezoid_jitter": (
        dict(seed=2, n_s=1800, counter=False, jitter=0.03),
        {"gpu0": 52.991507707142276},
        [
            ("gpu0", 319.5078483640275, 601.5078483640275, 91798.59816169139, 76854.99298827727, 0.9186280212862918, 0.9986399690398143, 259.03691705012454, True, "trapezoid"),
            ("gpu0", 919.5078483640275, 1201.5078483640275, 91765.33451592541, 76821.72934251129, 0.9180574609520029, 1.0, 258.92118342491966, True, "trapezoid"),
            ("gpu0", 1519.5078483640275, 1799.902620654086, 91773.97150992656, 76915.42977307552, 0.9247200464174521, 1.0, 259.20420518297334, False, "trapezoid"),
        ],
    ),
    "two_devices": (
        dict(seed=3, n_s=1200, devices=("a", "b")),
        {"a": 53.01617625397043, "b": 53.02382851531215},
        [
            ("a", 319.5, 600.0, 91730.25617407824, 76859.21873483954, 0.9229776642019712, 0.9985739750445634, 258.99726931810386, True, "counter"),
            ("a", 919.5, 1199.9, 91658.8541465553, 76793.11832494198, 0.9228977927436437, 1.0, 258.82277945783846, False, "counter"),
            ("b", 321.0, 600.0, 91361.2165240159, 76567.56836824381, 0.9245611644459624, 0.9985663082437277, 258.0493560738375, True, "counter"),
            ("b", 921.0, 1199.9, 91122.1436208051, 76333.79784788453, 0.9224356752730798, 1.0, 257.3101805339807, False, "counter"),
        ],
    ),
}  # fmt: skip


def _check(det, idle, segs):
    assert det.idle_power_w_by_device == pytest.approx(idle, rel=1e-12)
    got = [
        (s.device, s.start_s, s.end_s, s.energy_j, s.net_energy_j, s.mean_util, s.coverage, s.tb_moved, s.complete, s.method)
        for s in det.segments
    ]  # fmt: skip
    assert len(got) == len(segs)
    for g, e in zip(got, segs, strict=True):
        assert g[0] == e[0] and g[8:] == e[8:]
        assert g[1:8] == pytest.approx(e[1:8], rel=1e-11)


@pytest.mark.parametrize("case", sorted(LEGACY))
def test_detect_matches_the_whole_trace_implementation_at_any_chunking(case, tmp_path):
    kw, idle, segs = LEGACY[case]
    tr = synth_trace(**kw)
    _check(detect_workloads(tr), idle, segs)  # in memory
    p = tr.write(tmp_path / "t.parquet", row_group_rows=777)
    for rows in (97, 1000, 65536):  # chunk edges inside segments, polls and hysteresis streaks
        _check(detect_workloads(ParquetSource(p, batch_rows=rows)), idle, segs)
    _check(detect_workloads(str(p)), idle, segs)  # a path streams the file


def test_integrate_windows_one_pass_equals_per_window_energy(tmp_path):
    tr = synth_trace(seed=4, n_s=1500, devices=("a", "b"))
    p = tr.write(tmp_path / "t.parquet", row_group_rows=500)
    rng = np.random.default_rng(0)
    wins = []
    for _ in range(40):
        a = float(rng.uniform(-50, 1500))
        b = a + float(rng.uniform(0, 400))
        wins.append(Window(a, b, [None, "a", "b"][int(rng.integers(3))]))
    out = integrate_windows(ParquetSource(p, batch_rows=333), wins, idle_power_w=20.0)
    for w, r in zip(wins, out, strict=True):
        e = tr.energy(w.t0, w.t1, idle_power_w=20.0, device=w.device)
        assert r.window == w and r.method == e.method
        assert r.energy_j == pytest.approx(e.energy_j, rel=1e-12, abs=1e-9)
        assert r.net_energy_j == pytest.approx(e.net_energy_j, rel=1e-12, abs=1e-6)
        assert r.coverage == pytest.approx(e.coverage, abs=1e-12)
        # independent references: mean of the utilisation readings inside, trapezoid of DRAM traffic
        s = tr.samples
        if w.device is not None:
            s = s[s["device"] == w.device]
        inside = s[(s["t_s"] >= w.t0) & (s["t_s"] <= w.t1)]["util"]
        assert (r.mean_util is None) == inside.empty
        if not inside.empty:
            assert r.mean_util == pytest.approx(inside.mean(), rel=1e-12)
        assert r.bytes_moved == pytest.approx(tr.bytes_moved(w.t0, w.t1, w.device), rel=1e-9, abs=1.0)


def test_trapezoid_energy_against_numpy():
    df = synth_frame(seed=5, n_s=600, counter=False, holes=False)
    tr = Trace(df)
    t, p = df["t_s"].to_numpy(), df["power_w"].to_numpy()
    e = tr.energy(float(t[10]), float(t[4000]))
    assert e.method == "trapezoid" and e.coverage == pytest.approx(1.0)
    assert e.energy_j == pytest.approx(np.trapezoid(p[10:4001], t[10:4001]), rel=1e-12)


def test_streaming_median_exact_then_binned():
    rng = np.random.default_rng(1)
    v = rng.normal(50, 3, 10_001)
    m = StreamingMedian(resolution=1e-4)
    for part in np.array_split(v, 7):
        m.add(part)
    assert m.exact and m.median() == np.median(v)
    small = StreamingMedian(resolution=1e-4, cap=1000)  # past the cap: counts in 0.1 mW bins
    for part in np.array_split(v, 7):
        small.add(part)
    assert not small.exact and abs(small.median() - np.median(v)) <= 1e-4
    assert math.isnan(StreamingMedian(1.0).median())


def test_sources_read_in_bounded_chunks(tmp_path):
    tr = synth_trace(seed=6, n_s=600)
    p = tr.write(tmp_path / "t.parquet", row_group_rows=1000)
    src = ParquetSource(p, batch_rows=256)
    sizes = [len(ch) for ch in src.chunks(("power_w",))]
    assert max(sizes) <= 256 and sum(sizes) == len(tr)


# ---------------------------------------------------------------------- replay
def _record(tmp_path, hz=10.0, n_s=120.0, jitter=0.004):
    df = synth_frame(seed=7, n_s=n_s, hz=hz, jitter=jitter, holes=True)
    tr = Trace(df, base_metadata(kind="synthetic", rate_hz=hz, simulated=True))
    return tr.write(tmp_path / "rec.parquet", row_group_rows=300), tr


@pytest.mark.parametrize("speed", [math.inf, 2000.0])
def test_replay_at_any_speed_yields_the_recording(tmp_path, speed):
    """Played at the recording's rate, a replay returns every recorded sample as recorded (times, values,
    counter), with the recording's holes as gaps: the same energy and coverage, however fast."""
    p, tr = _record(tmp_path)
    sensors = open_replay(p, speed=speed)
    assert isinstance(sensors[0].clock, PacedClock)
    items: list = []
    st = Sampler(sensors, 10.0, sinks=[items.append]).run()
    assert st.end_reason == "trace ended" and st.skipped_ticks == 0
    readings = [x for x in items if hasattr(x, "power_w")]
    rec = tr.samples
    assert len(readings) == len(rec)
    assert np.array_equal([r.t_s for r in readings], rec["t_s"].to_numpy())
    assert np.array_equal([r.power_w for r in readings], rec["power_w"].to_numpy())
    assert np.array_equal([r.energy_j for r in readings], rec["energy_j"].to_numpy())
    gaps = [x for x in items if not hasattr(x, "power_w")]
    assert gaps and all("no sample" in g.error for g in gaps)  # the 5 s hole of the recording
    replayed = Trace.from_readings(readings, {"t0_monotonic_s": 0.0})
    a, b = 50.0, 110.0
    assert replayed.energy(a, b).energy_j == pytest.approx(tr.energy(a, b).energy_j, rel=1e-12)
    assert replayed.energy(a, b).coverage == pytest.approx(tr.energy(a, b).coverage, rel=1e-12)


def test_replay_streams_the_file_in_chunks(tmp_path):
    p, tr = _record(tmp_path, n_s=300)
    rep = ReplaySensor(ParquetSource(p, batch_rows=200), clock=VirtualClock(t0=0.0))
    buffered = []
    n = 0
    clk = rep.clock
    while True:
        try:
            rep.read()
        except Exception as e:  # noqa: BLE001 - gaps of the recording and the end
            if type(e).__name__ == "TraceEnded":
                break
        n += 1
        buffered.append(len(rep._rows.t))
        clk.sleep_until(clk.now() + 0.1)
    assert n >= len(tr.samples) and max(buffered) <= 4096 + 2 * 200  # never the whole recording


def test_paced_clock_waits_for_real_time_but_never_skips():
    clk = PacedClock(speed=1e4, t0=5.0)
    s = Sampler([_Const(clk)], 100.0, duration_s=2.0)
    t0 = time.monotonic()
    st = s.run()
    assert st.n_ticks == 201 and st.skipped_ticks == 0
    assert time.monotonic() - t0 >= 2.0 / 1e4  # paced (a lower bound only: never a timing assertion)
    with pytest.raises(ValueError):
        PacedClock(speed=0)


class _Const:
    def __init__(self, clock):
        self.clock = clock

    def info(self):
        from flopwatch.telemetry.sensors.base import SensorInfo

        return SensorInfo(kind="test", device_id="c", name="c")

    def read(self):
        from flopwatch.telemetry.schema import Reading

        return Reading(self.clock.now(), 0.0, "c", 1.0)

    def close(self):
        pass


# ---------------------------------------------------------------------- writer backpressure
def test_writer_queue_is_bounded_when_the_disk_is_slow(tmp_path):
    """A writer thread slower than the producer blocks the producer: never more than max_pending batches."""
    from flopwatch.telemetry.schema import Reading

    w = TraceWriter(tmp_path / "w.parquet", base_metadata(kind="test"), row_group_rows=50, max_pending=2)
    real = w._write_rows
    gate = threading.Semaphore(0)

    def slow(rows):
        gate.acquire(timeout=5)
        real(rows)

    w._write_rows = slow  # type: ignore[method-assign]
    releaser = threading.Thread(target=lambda: [gate.release() or time.sleep(0.002) for _ in range(40)])
    releaser.start()
    for i in range(1000):
        w.write(Reading(float(i), 1.7e9 + i, "d", 1.0))
        assert len(w._pending) <= 2
    releaser.join()
    for _ in range(40):
        gate.release()
    w.close()
    assert w.max_pending_seen <= 2 and w.blocked_s > 0
    assert len(Trace.read(tmp_path / "w.parquet")) == 1000


def test_open_source_refuses_unknown_device_window(tmp_path):
    tr = synth_trace(seed=8, n_s=60)
    with pytest.raises(Exception, match="not in trace"):
        integrate_windows(tr, [Window(0, 10, "nope")])
    assert open_source(tr).validate is False


def test_poll_stream_equals_poll_series_at_any_chunking():
    """The streamed 1.5 s poll grid and its sample-and-hold values are bit-identical to poll_series."""
    from flopwatch.detect import _PollStream, poll_series

    rng = np.random.default_rng(9)
    for _ in range(20):
        n = int(rng.integers(2, 3000))
        t = np.sort(rng.uniform(0, 1e4, n)) + float(rng.uniform(0, 1e6))
        u = rng.uniform(0, 1, n)
        ref_t, ref_u = poll_series(t, u, 1.5)
        ps = _PollStream(1.5)
        got_t, got_u = [], []
        cuts = np.sort(rng.choice(np.arange(1, n), size=min(n - 1, int(rng.integers(0, 12))), replace=False))
        for a, b in zip([0, *cuts], [*cuts, n], strict=True):
            pt, pu = ps.feed(t[a:b], u[a:b])
            got_t.append(pt)
            got_u.append(pu)
        pt, pu = ps.finish()
        got_t.append(pt)
        got_u.append(pu)
        assert np.array_equal(np.concatenate(got_t), ref_t)
        assert np.array_equal(np.concatenate(got_u), ref_u)


def test_run_timeline_of_a_long_trace_is_a_bounded_envelope(tmp_path) -> None:
    """``run``'s timeline figure loads a short trace whole; a long one is drawn from a min/max envelope per time bin
    (streamed): every bin's extremes are the trace's, and the figure draws from it."""
    from flopwatch.pipeline.analyse import timeline_samples
    from flopwatch.report.run_figures import fig_timeline

    df = synth_frame(n_s=1800, hz=10, seed=3)
    path = Trace(df, {"t0_monotonic_s": 0.0}).write(tmp_path / "t.parquet")
    whole = timeline_samples(path, max_rows=len(df))  # every reading, in one pass
    s = Trace.read(path).samples
    assert list(whole.columns) == ["t_s", "power_w", "util"] and len(whole) == len(s)
    for c in whole.columns:
        assert np.array_equal(whole[c].to_numpy(), s[c].to_numpy(), equal_nan=True)
    env = timeline_samples(path, max_rows=1000, bins=120)
    assert len(env) <= 2 * 120 and list(env.columns) == ["t_s", "power_w", "util"]
    assert env["power_w"].max() == s["power_w"].max() and env["power_w"].min() == s["power_w"].min()
    assert env["util"].max() == s["util"].max() and env["util"].min() == s["util"].min()
    # each bin's (min, max) pair brackets every reading in that bin
    width = (s["t_s"].max() - s["t_s"].min()) / 120
    k = np.clip(((s["t_s"] - s["t_s"].min()) / width).astype(int), 0, 119)
    assert len(env) == 2 * k.nunique()
    by_bin = s.groupby(k)["power_w"].agg(["min", "max"]).to_numpy()
    assert np.array_equal(env["power_w"].to_numpy().reshape(-1, 2), by_bin)
    det = detect_workloads(path)
    out = fig_timeline(env, det, [], tmp_path / "tl.png", simulated=True)
    assert out.stat().st_size > 10_000
