"""A paced replay keeps pace with the real clock (injected here) and never dates a reading in the future:
a 60 s trace at speed 50 takes 1.2 s of real time, its readings carry the trace's own times, and a trace
without a wall clock is dated so that it ends when the replay began (issue 24, newcomer retrial)."""

from __future__ import annotations

import json
import time

import numpy as np
import pytest

from flopwatch.telemetry.sampler import Sampler
from flopwatch.telemetry.schema import Reading, base_metadata
from flopwatch.telemetry.sensors.replay import PacedClock, dating, open_replay
from flopwatch.telemetry.trace import Trace
from streaming_helpers import synth_frame


class FakeReal:
    """A real clock that moves only when slept on: the test decides what time it is."""

    def __init__(self, wall0: float = 1.9e9) -> None:
        self.m = 100.0
        self.w0 = wall0

    def monotonic(self) -> float:
        return self.m

    def time(self) -> float:
        return self.w0 + self.m

    def sleep(self, seconds: float) -> None:
        self.m += max(0.0, seconds)


def _seed_json(tmp_path, n_s: float = 60.0, hz: float = 2.0):
    """A trace in the seed's timeseries.json format (no wall clock): busy from 10 s to 50 s."""
    t = np.arange(0.0, n_s + 1e-9, 1.0 / hz)
    busy = (t >= 10) & (t < 50)
    p = tmp_path / "timeseries.json"
    p.write_text(
        json.dumps(
            {
                "power_mw": [[float(x), 9000.0 if b else 700.0] for x, b in zip(t, busy, strict=True)],
                "gpu_pct": [[float(x) + 0.01, 99.0 if b else 0.0] for x, b in zip(t, busy, strict=True)],
                "t_launch": 9.0,
                "t_start": 10.0,
                "t_end": 50.0,
            }
        )
    )
    return p, float(t[-1])


def _replay(path, speed: float, real: FakeReal):
    sensors = open_replay(path, speed=speed, real=real)
    seen: list[tuple[Reading, float]] = []  # each reading with the real wall time it was returned at

    def sink(item):
        if isinstance(item, Reading):
            seen.append((item, real.time()))

    m0 = real.monotonic()
    st = Sampler(sensors, 2.0, sinks=[sink]).run()
    return sensors, seen, real.monotonic() - m0, st


def test_replay_at_speed_50_paces_against_the_real_clock_and_never_dates_the_future(tmp_path):
    path, t_last = _seed_json(tmp_path)
    real = FakeReal()
    start_wall = real.time()
    sensors, seen, took_s, st = _replay(path, 50.0, real)
    assert st.end_reason == "trace ended" and st.skipped_ticks == 0
    # a 60 s trace at speed 50 takes 60 / 50 = 1.2 s of real time (+ the one tick that finds its end)
    assert t_last / 50.0 - 1e-9 <= took_s <= (t_last + 0.5) / 50.0 + 1e-9
    assert len(seen) == int(t_last * 2) + 1
    # the trace's own times, one for one
    assert [r.t_s for r, _ in seen] == pytest.approx([i * 0.5 for i in range(len(seen))])
    # no reading dated after the real moment it was returned (nor after the replay began: it ends there)
    assert all(r.wall_time <= now + 1e-6 for r, now in seen)
    assert seen[-1][0].wall_time == pytest.approx(start_wall, abs=1e-6)
    # wall time advances with the trace's own time (a ledger sees no clock jump)
    offsets = np.array([r.wall_time - r.t_s for r, _ in seen])
    assert np.ptp(offsets) < 1e-6
    clk = sensors[0].clock
    assert isinstance(clk, PacedClock) and clk.dated_at_start
    assert "ends at" in dating(clk) and "never in the future" in dating(clk)


def test_a_recorded_trace_replays_with_its_own_wall_times_at_any_speed(tmp_path):
    df = synth_frame(n_s=60, hz=2, seed=4, holes=False)  # wall time 1.7e9 + t_s (recorded in the past)
    p = Trace(df, base_metadata(kind="synthetic", rate_hz=2.0, simulated=True)).write(tmp_path / "r.parquet")
    real = FakeReal()
    sensors, seen, took_s, _ = _replay(p, 50.0, real)
    assert (
        float(df["t_s"].iloc[-1]) / 50.0 - 1e-9 <= took_s <= (float(df["t_s"].iloc[-1]) + 0.5) / 50.0 + 1e-9
    )
    walls = df["wall_time"].astype("int64").to_numpy() / 1e9
    assert np.allclose([r.wall_time for r, _ in seen], walls, atol=1e-6)
    assert all(r.wall_time <= now for r, now in seen)
    assert dating(sensors[0].clock) == "rows carry the trace's own recorded wall times"
    # the clock itself (which dates the sampler's gaps) runs on the recording's wall time too
    assert sensors[0].clock.wall_time() == pytest.approx(1.7e9 + sensors[0].clock.now(), abs=1e-3)


def test_paced_clock_without_a_wall_time_is_dated_when_the_pace_starts():
    real = FakeReal()
    clk = PacedClock(10.0, t0=5.0, lead_s=30.0, real=real)
    real.sleep(7.0)  # opened early: the dating follows the first sleep, not the construction
    assert clk.sleep_until(5.0)
    start = real.time()
    assert clk.wall_time() == pytest.approx(start - 30.0)
    assert clk.sleep_until(35.0)  # 30 s of trace at 10×: 3 s of real time
    assert real.time() - start == pytest.approx(3.0)
    assert clk.wall_time() == pytest.approx(start)  # the end of the trace: the start of the replay
    with pytest.raises(ValueError):
        PacedClock(2.0, lead_s=float("nan"))


def test_the_simulator_is_dated_now_not_in_2023():
    from flopwatch.sim.sensor import from_spec

    now = time.time()
    (s,) = from_spec("a100")
    assert abs(s.clock.wall_time() - now) < 60.0
    (s,) = from_spec("a100", wall0=1.7e9)  # still injectable, for reproducible files
    assert s.clock.wall_time() == 1.7e9
