"""Workload detection (the study's hysteresis) on synthetic polls and on the seed's real trace."""

from __future__ import annotations

import json

import numpy as np
import pytest

from flopwatch.cli import main
from flopwatch.detect import HysteresisParams, OnlineDetector, detect_workloads
from flopwatch.errors import InputError
from flopwatch.telemetry.schema import Reading
from flopwatch.telemetry.trace import Trace


def _feed(det, utils, poll=1.5):
    events = []
    for i, u in enumerate(utils):
        events += det.update(i * poll, u)
    return events


def test_start_needs_two_polls_end_needs_three():
    det = OnlineDetector()
    # one busy blip is not a workload; two are
    ev = _feed(det, [0, 0.9, 0, 0.9, 0.9, 0.9, 0, 0, 0.9, 0, 0, 0, 0])
    kinds = [(e.kind, e.t_s, e.decided_s) for e in ev]
    # outer edges: start at the last idle poll (t=2*1.5), end at the first idle poll of the 3-poll streak
    assert kinds == [("start", 3.0, 6.0), ("end", 13.5, 16.5)]


def test_inner_edges_and_nan_polls_are_ignored():
    det = OnlineDetector(HysteresisParams(edges="inner"))
    ev = _feed(det, [0, 0.9, float("nan"), 0.9, 0, None, 0, 0])
    assert [(e.kind, e.t_s) for e in ev] == [("start", 1.5), ("end", 4.5)]


def test_threshold_is_strict_and_configurable():
    assert _feed(OnlineDetector(), [0.05] * 10) == []
    det = OnlineDetector(HysteresisParams(util_threshold=0.5, start_polls=1, end_polls=1, edges="inner"))
    assert [e.kind for e in _feed(det, [0.6, 0.4, 0.6, 0.4])] == ["start", "end", "start", "end"]


@pytest.mark.parametrize("bad", [{"poll_s": 0}, {"util_threshold": 1.5}, {"start_polls": 0}, {"edges": "x"}])
def test_bad_params(bad):
    with pytest.raises(InputError):
        HysteresisParams(**bad)


def _synthetic(idle_w=1.0, busy_w=11.0):
    rs = []
    for i in range(200):  # 100 s at 2 Hz, busy between 30 s and 70 s
        t = i * 0.5
        busy = 30 <= t < 70
        rs.append(Reading(t, 1.7e9 + t, "d0", busy_w if busy else idle_w, util=0.95 if busy else 0.0))
    return Trace.from_readings(rs)


def test_synthetic_segment_energy():
    det = detect_workloads(_synthetic())
    assert det.idle_power_w == 1.0 and len(det.segments) == 1
    s = det.segments[0]
    assert 28.5 <= s.start_s <= 30 and 70 <= s.end_s <= 71.5
    # net energy: 10 W above idle for 40 s (the step edges are linear ramps over one 0.5 s sample)
    assert s.net_energy_j == pytest.approx(400.0, abs=6.0)
    assert s.coverage == 1.0 and s.complete
    assert s.tb_moved is None


def test_open_segment_at_end_of_trace_is_incomplete():
    tr = _synthetic()
    cut = Trace(tr.df[tr.df["t_s"] < 60].reset_index(drop=True), tr.metadata)
    det = detect_workloads(cut, idle_power_w=1.0)
    assert len(det.segments) == 1 and not det.segments[0].complete
    assert det.idle_source == "given"


def test_trace_without_util_is_input_error():
    tr = Trace.from_readings([Reading(float(i), 0.0, "d0", 1.0) for i in range(5)])
    with pytest.raises(InputError, match="util"):
        detect_workloads(tr)


def test_seed_trace_one_workload(timeseries_path):
    """What must hold: exactly one workload, start within 2 s of t_start and end within 3 s of t_end."""
    tr = Trace.read(timeseries_path)
    det = detect_workloads(tr)
    assert len(det.segments) == 1
    s = det.segments[0]
    assert abs(s.start_s - tr.metadata["t_start"]) <= 2.0
    assert abs(s.end_s - tr.metadata["t_end"]) <= 3.0
    # the study's v2 idle baseline was 642.048 mW (VDD_CPU_GPU_CV median); the trace's idle periods agree
    assert det.idle_power_w == pytest.approx(0.642, abs=0.01)
    assert s.mean_util > 0.9 and s.coverage > 0.99
    # 9000 steps of d384_b16_s128: v2 measured 1141.66 J for 2500 steps, so ~4110 J is expected
    assert s.net_energy_j == pytest.approx(1141.66 * 9000 / 2500, rel=0.02)
    assert s.tb_moved == pytest.approx(0.0763 * 9000 / 2500, rel=0.05)


def test_detect_cli_json(timeseries_path, capsys):
    assert main(["detect", str(timeseries_path), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert set(out) >= {"idle_power_w", "workloads"}
    (w,) = out["workloads"]
    assert set(w) >= {"start_s", "end_s", "duration_s", "energy_j", "net_energy_j", "mean_util", "coverage"}
    assert np.isclose(w["duration_s"], w["end_s"] - w["start_s"])


def test_detect_cli_options_and_human_output(timeseries_path, capsys):
    assert main(["detect", str(timeseries_path), "--util-threshold", "0.99", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["workloads"] == []
    assert main(["detect", str(timeseries_path)]) == 0
    assert "workload" in capsys.readouterr().out.lower()


def test_detect_cli_bad_file(tmp_path, capsys):
    p = tmp_path / "bad.json"
    p.write_text("[]")
    assert main(["detect", str(p)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("flopwatch: error:") and "bad.json" in err and len(err.strip().splitlines()) == 1


def test_replayed_and_rerecorded_seed_trace_detects_the_same(timeseries_path, tmp_path):
    """Replay → sampler → Parquet → detect gives the same workload as detecting the original file."""
    from flopwatch.telemetry.sampler import Sampler
    from flopwatch.telemetry.schema import base_metadata
    from flopwatch.telemetry.sensors.base import VirtualClock
    from flopwatch.telemetry.sensors.replay import open_replay
    from flopwatch.telemetry.writer import TraceWriter

    out = tmp_path / "re.parquet"
    sensors = open_replay(timeseries_path, clock=VirtualClock(t0=0.0))
    with TraceWriter(out, base_metadata(kind="replay", rate_hz=4.0)) as w:
        Sampler(sensors, 4.0, sinks=[w]).run()
    a = detect_workloads(Trace.read(timeseries_path)).segments[0]
    (b,) = detect_workloads(Trace.read(out)).segments
    assert abs(a.start_s - b.start_s) <= 0.5 and abs(a.end_s - b.end_s) <= 0.5
    assert b.net_energy_j == pytest.approx(a.net_energy_j, rel=0.01)


def test_two_devices_get_their_own_idle_baseline():
    rs = []
    for i in range(200):
        t = i * 0.5
        busy = 30 <= t < 70
        rs.append(Reading(t, 1.7e9 + t, "a", 51.0 if busy else 1.0, util=0.9 if busy else 0.0))
        rs.append(Reading(t + 0.01, 1.7e9 + t, "b", 60.0 if busy else 50.0, util=0.9 if busy else 0.0))
    det = detect_workloads(Trace.from_readings(rs))
    assert det.idle_power_w_by_device == {"a": 1.0, "b": 50.0}
    a, b = sorted(det.segments, key=lambda s: s.device)
    assert a.net_energy_j == pytest.approx(2000.0, rel=0.02) and b.net_energy_j == pytest.approx(
        400.0, rel=0.02
    )


from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from hypothesis_budget import examples  # noqa: E402


@settings(max_examples=examples("detect_hysteresis"))
@given(
    utils=st.lists(st.sampled_from([0.0, 0.03, 0.05, 0.06, 0.5, 1.0, float("nan")]), max_size=60),
    start=st.integers(1, 4),
    end=st.integers(1, 4),
    edges=st.sampled_from(["outer", "inner"]),
)
def test_detector_invariants(utils, start, end, edges):
    """Events alternate start/end; a start needs `start` busy polls, an end `end` idle ones; edges are ordered."""
    p = HysteresisParams(start_polls=start, end_polls=end, edges=edges)
    det = OnlineDetector(p)
    events = []
    for i, u in enumerate(utils):
        for e in det.update(i * 1.5, u):
            events.append((e, i))
    kinds = [e.kind for e, _ in events]
    assert kinds == ["start", "end"] * (len(kinds) // 2) + (["start"] if len(kinds) % 2 else [])
    known = [(i, u) for i, u in enumerate(utils) if u == u]
    for e, i in events:
        assert e.t_s <= e.decided_s == i * 1.5
        busy_tail = [u > 0.05 for j, u in known if j <= i][-(start if e.kind == "start" else end) :]
        assert all(busy_tail) if e.kind == "start" else not any(busy_tail)
    for (a, _), (b, _) in zip(events[::2], events[1::2], strict=False):
        # outer edges always enclose a busy poll; inner ones may be one busy poll (zero length)
        assert a.t_s < b.t_s if edges == "outer" else a.t_s <= b.t_s


def test_devices_without_util_are_skipped_not_fatal():
    tr = _synthetic()
    cpu = [Reading(i * 0.5 + 0.2, 1.7e9, "cpu:rapl", 30.0, energy_j=15.0 * i) for i in range(200)]
    both = Trace.from_readings(
        [Reading(r.t_s, 1.7e9, r.device, r.power_w, util=r.util) for r in tr.df.itertuples()] + cpu
    )
    det = detect_workloads(both)
    assert det.skipped_devices == ["cpu:rapl"] and [s.device for s in det.segments] == ["d0"]
