"""The monitor's rows under the sound-verdict rule (issue 21 items 2, 3 and 6; issue 23 items 3 and 5).

* every row carries the observables the sound bound uses (clock range, peak power, unobserved time with the
  sensor's blind share, pipe activity where the sensor reports it, per-window sums) and the context it was made in;
* the daemon judges its own rows in its own context: a replayed sensor or a peak override in its environment is a
  named warning, never "below";
* ``flopwatch verdict --profile`` compares each row's context with the verifier's: another profile is flagged;
* the live window gauge blocks "below" on a clock jump, by the same rule as ``flopwatch verdict``.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from flopwatch.cli import main
from flopwatch.devices import PEAK_OVERRIDE_ENV
from flopwatch.estimate.observe import CONTEXT_KEYS, PIPES
from flopwatch.monitor.config import MonitorConfig
from flopwatch.monitor.daemon import Monitor
from flopwatch.monitor.ledger import read_entries
from flopwatch.monitor.nodes import clock_jumps
from flopwatch.monitor.rows import WorkloadRow
from flopwatch.monitor.window import WorkloadWindow
from flopwatch.telemetry.schema import Reading
from flopwatch.telemetry.sensors.base import VirtualClock
from flopwatch.telemetry.sensors.replay import open_replay
from monitor_helpers import (  # noqa: F401 - private_tmp: autouse fixture
    P_BUSY_W,
    AsMeasured,
    FlakySensor,
    GlitchSensor,
    LinearProfile,
    busy_fn,
    private_tmp,
    write_trace,
)

BUSY = (60.0, 120.0)
THRESHOLD = 1e20  # far above any bound of a 60 s H100 workload: only a warning keeps a row from "below"


def _replay(path: Path):  # noqa: ANN202
    return open_replay(path, clock=VirtualClock())[0]


def _trace(tmp_path: Path, *, counter: bool = True) -> Path:
    return write_trace(tmp_path / "t.parquet", t_total=200, busy=busy_fn([BUSY]), counter=counter)


def _run(tmp_path: Path, sensor, *, name: str = "ledger.db", profile=None, **cfg):  # noqa: ANN001, ANN003, ANN202
    conf = MonitorConfig(sensors=["replay:(given)"], ledger=tmp_path / name, threshold_flops=THRESHOLD, **cfg)
    mon = Monitor(conf, sensors=[sensor], profile=profile or LinearProfile())
    return mon, mon.run()


# ---------------------------------------------------------------------------------------- the daemon's context
def test_a_replayed_sensors_rows_are_never_below(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    trace = _trace(tmp_path)
    # control: the same readings from a real (DCGM-read) H100 are decided "below" the far threshold
    _, real = _run(tmp_path, AsMeasured(_replay(trace)), name="real.db")
    (row,) = real.workloads
    assert row["verdict"] == "below" and row["warnings"] == []
    # replayed: a named warning on the row, and the verdict is never "below" (live, and by `flopwatch verdict`)
    mon, res = _run(tmp_path, _replay(trace), name="replay.db")
    (row,) = res.workloads
    assert row["verdict"] == "uncertain" and row["context"]["sensor_kind"] == "replay"
    assert any("is a replay or simulation" in w for w in row["warnings"]), row["warnings"]
    assert mon.window_verdict is not None and mon.window_verdict.verdict != "below"
    capsys.readouterr()
    assert main(["verdict", str(tmp_path / "replay.db"), "--threshold", "1e20", "--json"]) == 0
    tot = json.loads(capsys.readouterr().out)["total"]
    assert tot["verdict"] == "uncertain" and any("replay" in w for w in tot["warnings"])


def test_a_peak_override_in_the_daemons_environment_is_flagged(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    trace = _trace(tmp_path)
    # a lower fp8 peak would tighten the rate bound: exactly what must never ease a "below" silently
    monkeypatch.setenv(PEAK_OVERRIDE_ENV, "h100:fp8=1e12")
    mon, res = _run(tmp_path, AsMeasured(_replay(trace)))
    (row,) = res.workloads
    ctx = row["context"]
    assert ctx["peak_override"] == "h100:fp8=1e12" and ctx["peaks_in_force"]["fp8"] == 1e12
    assert row["verdict"] == "uncertain"
    assert any(w.startswith("peak override in force") for w in row["warnings"]), row["warnings"]
    assert any("context peaks_in_force" in w for w in row["warnings"])  # the daemon's own table differs
    assert mon.window_verdict is not None and mon.window_verdict.verdict != "below"
    # the start row records it too, and the verifier (whose environment has no override) flags every row
    (start,) = [e.payload for e in read_entries(tmp_path / "ledger.db") if e.kind == "start"]
    assert start["context"]["peak_override"] == "h100:fp8=1e12"
    monkeypatch.delenv(PEAK_OVERRIDE_ENV)
    capsys.readouterr()
    assert main(["verdict", str(tmp_path / "ledger.db"), "--threshold", "1e20", "--json"]) == 0
    tot = json.loads(capsys.readouterr().out)["total"]
    assert tot["verdict"] == "uncertain" and any("peak override" in w for w in tot["warnings"])


def test_verdict_with_another_profile_flags_the_rows(
    tmp_path: Path, v2_records_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    trace = _trace(tmp_path)
    _run(tmp_path, AsMeasured(_replay(trace)))  # rows made under LinearProfile (sha256 "0" × 64)
    led = tmp_path / "ledger.db"
    (w,) = [e.payload for e in read_entries(led) if e.kind == "workload"]
    assert w["context"]["profile_sha256"] == "0" * 64 and w["verdict"] == "below"
    prof = tmp_path / "p.json"
    assert main(["calibrate", str(v2_records_path), "-o", str(prof), "--device", "h100"]) == 0
    capsys.readouterr()
    # without a profile the verifier has none to compare: the row's context (a real sensor, the datasheet
    # peaks, no override) matches its own
    assert main(["verdict", str(led), "--threshold", "1e20", "--json"]) == 0
    plain = json.loads(capsys.readouterr().out)["total"]
    assert not any("profile_sha256" in x for x in plain["warnings"])
    assert main(["verdict", str(led), "--threshold", "1e20", "--profile", str(prof), "--json"]) == 0
    tot = json.loads(capsys.readouterr().out)["total"]
    assert tot["verdict"] == "uncertain"
    assert any("context profile_sha256" in x and "0" * 64 in x for x in tot["warnings"]), tot["warnings"]


# ----------------------------------------------------------------------------------------- the observables
def _with_observables(r: Reading) -> Reading:
    """Clock, power limit and the four pipe counters on every reading (busy: 1410–1980 MHz; tensor 60 %)."""
    busy = (r.util or 0.0) > 0.5
    clk = (1410.0 if int(r.t_s * 2) % 2 else 1980.0) if busy else 345.0
    pipes = {"tensor_active": 0.6, "fp64_active": 0.0, "fp32_active": 0.05, "fp16_active": 0.0}
    extra = {**r.extra, "power_limit_w": 700.0, **(pipes if busy else dict.fromkeys(pipes, 0.0))}
    return dataclasses.replace(r, sm_clock_mhz=clk, extra=extra)


def test_rows_carry_every_observable_of_the_sound_bound(tmp_path: Path) -> None:
    trace = _trace(tmp_path)
    sensor = AsMeasured(GlitchSensor(_replay(trace), _with_observables), kind="dcgm")
    mon, res = _run(tmp_path, sensor, checkpoint_s=10.0)
    (row,) = res.workloads
    dur = row["duration_s"]
    assert dur == pytest.approx(BUSY[1] - BUSY[0], abs=4.0)
    # the clock range over the workload (both ends of every interval in it: an idle edge widens it, soundly)
    assert row["max_sm_clock_mhz"] == 1980.0 and row["min_sm_clock_mhz"] in (345.0, 1410.0)
    assert row["peak_power_w"] == P_BUSY_W
    # a counter and no gap, but dcgm-exporter's energy counter is NVML's: 75 % blind on the H100
    # (sensor_timing); the pipe counters cover that time (pipe_observed_s below)
    assert row["unobserved_s"] == pytest.approx(0.75 * dur, rel=1e-2)
    pa = row["pipe_active_s"]
    assert set(pa) == set(PIPES) and pa["tensor"] == pytest.approx(0.6 * dur, rel=0.05)
    assert row["pipe_observed_s"] == pytest.approx(dur, rel=1e-6)
    win = row["windows"]
    assert len(win["dt_s"]) >= 5  # one window per 10 s of observed time
    assert sum(win["dt_s"]) == pytest.approx(
        0.25 * dur, rel=1e-6
    )  # the seen quarter; the rest is unobserved_s
    assert sum(win["net_energy_j"]) == pytest.approx(row["net_energy_j"], rel=1e-6)
    assert win["tensor_active"] is not None and max(win["max_sm_clock_mhz"]) == 1980.0
    assert set(CONTEXT_KEYS) <= set(row["context"]) and row["context"]["sensor_kind"] == "dcgm"
    # the assessment used them: a bound summed over the windows, with the pipes
    # (with 75 % of the time blind to the energy counter, the pipes over their whole coverage are the tighter sum)
    assert ("windows" in row["bound"] or "pipe activity over" in row["bound"]) and row["row_version"] == 5
    # the running row in a checkpoint stays small: no windows there
    cps = [e.payload for e in read_entries(tmp_path / "ledger.db") if e.kind == "checkpoint"]
    opens = [d["open_workload"] for c in cps for d in c["devices"].values() if d.get("open_workload")]
    assert opens and all(o["windows"] is None for o in opens)


def test_unobserved_time_is_the_gaps_and_the_sensors_blind_share(tmp_path: Path) -> None:
    """NVML on an H100 sees 25 ms of every 100 ms (sensor_timing): 75 % of the observed time is unobserved, and
    a gap without an energy counter adds its length; a sensor without all four pipe counters gets none."""
    trace = _trace(tmp_path, counter=False)
    gap = (80.0, 90.0)
    inner = FlakySensor(_replay(trace), failing=lambda t: gap[0] <= t < gap[1])
    _, res = _run(tmp_path, AsMeasured(inner, kind="nvml"))
    (row,) = res.workloads
    dur = row["duration_s"]
    gaps = (gap[1] - gap[0]) - 0.5  # one sampling period of the gap counts as covered (the accounting's rule)
    assert row["unobserved_s"] == pytest.approx(gaps + 0.75 * (dur - gaps), abs=0.6)
    assert row["pipe_active_s"] is None and row["pipe_observed_s"] is None  # nothing faked
    assert "unobserved at peak rate" in row["bound"]


# --------------------------------------------------------------------------------------- the clock-jump rule
def _row(i: int, *, jump_s: float = 0.0) -> WorkloadRow:
    t = 100.0 * (i + 1)
    return WorkloadRow(
        workload_id=f"w{i}",
        session_id="s1",
        device="gpu0",
        status="complete",
        start_t_s=t - 10,
        end_t_s=t,
        start_wall=1.7e9 + t - 10 + jump_s,
        end_wall=1.7e9 + t + jump_s,
        duration_s=10.0,
        estimate_flops=1e14,
        lower_flops=0.9e14,
        upper_flops=1.1e14,
        regime="calibrated",
        verdict="below",
    )


def _gauge(rows: list[WorkloadRow]) -> tuple[str, tuple[str, ...]]:
    # an H100 read by NVML, at a threshold its blind time outside rows allows (round 12, `outside-blind`)
    win = WorkloadWindow(window_s=86400.0, threshold_flops=1e25)
    win.names["gpu0"] = "NVIDIA H100 80GB HBM3"
    for r in rows:
        win.add(r)
    last = rows[-1].end_wall
    assert last is not None
    win.mark(last + 1, {"gpu0": 0.0}, t_s=(rows[-1].end_t_s or 0) + 1, session_id="s1")
    v = win.evaluate({"gpu0": 0.0}, now_wall=last + 2)
    return v.verdict, v.reasons


def test_the_live_gauge_blocks_below_on_a_clock_jump() -> None:
    honest = [_row(i) for i in range(3)]
    verdict, reasons = _gauge(honest)
    assert verdict == "below", reasons
    # the wall clock runs an hour fast between rows 1 and 2 while the monotonic clock moves 100 s
    jumped = [_row(0), _row(1), _row(2, jump_s=3600.0)]
    verdict, reasons = _gauge(jumped)
    assert verdict == "uncertain"
    (msg,) = [r for r in reasons if "clock jump" in r]
    # one rule: `flopwatch verdict` finds the same jump in the same rows of a ledger
    from flopwatch.monitor.ledger_format import LedgerEntry, canonical_payload

    entries = [
        LedgerEntry(i + 1, "workload", "", canonical_payload(r.to_payload()), "", "")
        for i, r in enumerate(jumped)
    ]
    (cli_msg,) = clock_jumps(entries)
    assert cli_msg.split("(rows")[0] == msg.split("(rows")[0]


def test_the_daemons_gauge_blocks_on_a_clock_jump_in_its_readings(tmp_path: Path) -> None:
    """End to end: the sensor's wall clock jumps an hour forward mid-run (monotonic time runs on)."""
    trace = write_trace(
        tmp_path / "t.parquet", t_total=300, busy=busy_fn([(20, 50), (200, 230)]), counter=True
    )

    def jump(r: Reading) -> Reading:
        return dataclasses.replace(r, wall_time=r.wall_time + 3600.0) if r.t_s >= 150 else r

    mon, res = _run(tmp_path, AsMeasured(GlitchSensor(_replay(trace), jump)), checkpoint_s=30.0)
    assert len(res.workloads) == 2 and all(w["verdict"] == "below" for w in res.workloads)
    v = mon.window_verdict
    assert v is not None and v.verdict == "uncertain" and any("clock jump" in r for r in v.reasons)


def test_rows_without_a_context_cannot_be_checked(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A ledger row that records no context (a hand-made or pre-0.3 row): the verifier cannot tell a replay from
    a real sensor, so it is never "below"."""
    from flopwatch.monitor.ledger import Ledger

    p = _row(0).to_payload()
    p.pop("context")
    with Ledger(tmp_path / "l.db") as led:
        led.append("checkpoint", {"session_id": "s1", "wall": 1.7e9, "t_s": 0.0, "devices": {"gpu0": {}}})
        led.append("workload", p)
        led.append(
            "checkpoint", {"session_id": "s1", "wall": 1.7e9 + 101, "t_s": 101.0, "devices": {"gpu0": {}}}
        )
    assert main(["verdict", str(tmp_path / "l.db"), "--threshold", "1e16", "--json"]) == 0
    tot = json.loads(capsys.readouterr().out)["total"]
    assert tot["verdict"] == "uncertain" and any("records no context" in w for w in tot["warnings"])


def test_a_long_workloads_windows_stay_bounded_and_keep_their_sums() -> None:
    """Beyond MAX_WINDOWS, neighbouring windows merge: sums kept, clock ranges widened (a looser, still sound
    bound), so a week-long workload's row stays a few KB."""
    from flopwatch.monitor.observed import MAX_WINDOWS, Interval, Observed

    acc = Observed(1.0)
    n = 1000
    for i in range(n):
        clk = 1000.0 + (i % 7) * 100.0
        acc.feed(Interval(float(i), 1.0, 2.0, 0.0, clk, clk + 50.0, 300.0, 700.0, None))
    w = acc.windows(0.75, 0.0, 0.0)
    assert w is not None and len(w) <= MAX_WINDOWS + 1
    assert float(w.dt_s.sum()) == pytest.approx(0.25 * n)  # the blind 75 % goes to unobserved_s, not here
    assert float(w.net_energy_j.sum()) == pytest.approx(2.0 * n)
    assert float(w.sm_clock_mhz.min()) == 1000.0 and float(w.max_sm_clock_mhz.max()) == 1650.0
    assert acc.lo == 1000.0 and acc.hi == 1650.0 and acc.p_hi == 300.0


def test_a_playback_of_prometheus_history_counts_as_a_replay(tmp_path: Path) -> None:
    """``prometheus:`` with start=/end= plays a recorded history back: its rows record a replay, never "below"."""
    sensor = AsMeasured(_replay(_trace(tmp_path)), kind="prometheus")
    sensor.history = {}  # what PrometheusSensor holds when it plays history back (None when live)
    _, res = _run(tmp_path, sensor)
    (row,) = res.workloads
    assert row["context"]["sensor_kind"] == "replay of prometheus history" and row["verdict"] == "uncertain"
    assert any("is a replay or simulation" in w for w in row["warnings"])


def test_verdict_bounds_the_sensors_blind_time_by_its_own_table(
    tmp_path: Path, v2_records_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A row that records an NVML sensor but no unobserved time (what a node could write): with `--profile` the
    verifier re-bounds it with the blind 75 % its own sensor-timing table gives NVML on an H100 at 2 Hz."""
    from flopwatch.estimate.profile import Profile
    from flopwatch.monitor.ledger import Ledger

    prof = tmp_path / "p.json"
    assert main(["calibrate", str(v2_records_path), "-o", str(prof), "--device", "h100"]) == 0
    sha = Profile.load(prof).sha256()
    uppers = {}
    for kind in ("dcgm", "nvml"):
        row = {
            **_row(0).to_payload(),
            "device_name": "NVIDIA H100 80GB HBM3",
            "net_energy_j": 1000.0,  # energy-bound: the blind time at peak rate is what differs
            "duration_s": 60.0,
            "unobserved_s": 0.0,
            "sensor_kind": kind,
            "context": {"profile_sha256": sha, "sensor_kind": kind, "sample_rate_hz": 2.0},
        }
        d = tmp_path / kind
        d.mkdir()
        with Ledger(d / "l.db") as led:
            led.append("checkpoint", {"session_id": "s1", "wall": 1.7e9, "t_s": 0.0, "devices": {}})
            led.append("workload", row)
            led.append("checkpoint", {"session_id": "s1", "wall": 1.7e9 + 101, "t_s": 101.0, "devices": {}})
        capsys.readouterr()
        assert (
            main(["verdict", str(d / "l.db"), "--threshold", "1e20", "--profile", str(prof), "--json"]) == 0
        )
        uppers[kind] = json.loads(capsys.readouterr().out)["total"]["upper_flops"]
    fp8 = 1978.9e12  # the H100's fastest dense peak (datasheet), at which blind time is bounded
    # dcgm-exporter's energy counter is NVML's: both rows get the blind 75 % at peak, whatever the row said
    assert uppers["nvml"] == pytest.approx(uppers["dcgm"], rel=1e-9)
    assert uppers["nvml"] >= 0.75 * 60.0 * fp8
