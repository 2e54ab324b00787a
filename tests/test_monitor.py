"""The monitor daemon on replayed and synthetic traces (virtual clock: deterministic and fast)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from prometheus_client import generate_latest

from flopwatch.cli import main
from flopwatch.errors import ConfigError
from flopwatch.monitor.config import MonitorConfig
from flopwatch.monitor.daemon import Monitor
from flopwatch.monitor.ledger import read_entries, summarize_ledger, verify_ledger
from flopwatch.telemetry.sensors.base import VirtualClock
from flopwatch.telemetry.sensors.replay import open_replay
from monitor_helpers import (  # noqa: F401 - private_tmp: autouse, temporary files under tmp_path
    P_BUSY_W,
    P_IDLE_W,
    FlakySensor,
    LinearProfile,
    busy_fn,
    private_tmp,
    write_trace,
)

#: The seed trace's run: d_model 384, batch 16, seq 128, 3 layers, 9000 steps (SOURCE.md).
SEED_STEPS = 9000
#: v2 record d384_b16_s128_L3: 2500 steps, ground_truth_tf 101.1666 (cross-check of the per-step count).
V2_D384_TF, V2_D384_STEPS = 101.1666, 2500


def _virtual_replay(path: Path, t0: float = 0.0) -> list:
    return open_replay(path, clock=VirtualClock(t0=t0))


def _cfg(tmp_path: Path, **kw) -> MonitorConfig:
    return MonitorConfig(sensors=["replay:(given)"], ledger=tmp_path / "ledger.db", **kw)


@pytest.fixture(scope="module")
def v2_profile(v2_records_path: Path):
    from flopwatch.estimate.calibration import calibrate
    from flopwatch.records import load_records

    return calibrate(
        load_records(v2_records_path), device="orin-nano"
    )  # the study's device: "below" needs its datasheet


@pytest.fixture(scope="module")
def seed_ground_truth_flops() -> float:
    pytest.importorskip("torch", reason="the ground truth is counted with FlopCounterMode")
    from flopwatch.workloads.config import make_config
    from flopwatch.workloads.ground_truth import count_flops

    fc = count_flops(make_config("seed-encoder", d_model=384, batch_size=16, seq_len=128, num_layers=3))
    gt = fc.flops_per_step * SEED_STEPS
    # Cross-check against the study's own FlopCounterMode count for the same config.
    assert gt == pytest.approx(V2_D384_TF * 1e12 / V2_D384_STEPS * SEED_STEPS, rel=1e-4)
    return gt


def test_replay_of_the_seed_trace_is_within_5pct(
    tmp_path, timeseries_path, v2_profile, seed_ground_truth_flops
):
    """Must hold: one ledger row whose estimate is within 5 % of the run's ground truth."""
    cfg = _cfg(tmp_path)
    res = Monitor(cfg, sensors=_virtual_replay(timeseries_path), profile=v2_profile).run()
    assert res.end_reason == "trace ended"
    assert len(res.workloads) == 1
    w = res.workloads[0]
    err = w["estimate_flops"] / seed_ground_truth_flops - 1
    print(
        f"seed replay: estimate {w['estimate_flops']:.4e} vs ground truth {seed_ground_truth_flops:.4e} ({100 * err:+.2f} %)"
    )
    assert abs(err) < 0.05
    assert w["lower_flops"] <= seed_ground_truth_flops <= w["upper_flops"]
    assert w["status"] == "complete" and w["coverage"] == pytest.approx(1.0)
    # The study's trace: launch at 60.0 s, training 65.5–590.4 s; detection at 1.5 s polls brackets it.
    assert 60.0 <= w["start_t_s"] <= 66.0 and 589.0 <= w["end_t_s"] <= 593.0
    assert w["tb_moved"] > 0 and 0.9 < w["mean_util"] <= 1.0
    assert w["profile_sha256"] == v2_profile.sha256()

    assert verify_ledger(cfg.ledger).ok
    rows = read_entries(cfg.ledger)
    assert [r.kind for r in rows if r.kind == "workload"] == ["workload"]
    # Running estimate: checkpoints during the workload carry a growing estimate of the open workload.
    running = [
        r.payload["devices"][w["device"]]["open_workload"]["estimate_flops"]
        for r in rows
        if r.kind == "checkpoint" and r.payload["devices"][w["device"]]["open_workload"]
    ]
    assert len(running) >= 10 and running == sorted(running)
    # Continuous accounting agrees with the workload row (the run is nearly all of the busy energy).
    tot = res.totals[w["device"]]
    assert tot["busy_net_energy_j"] >= w["net_energy_j"]
    assert tot["workload_net_energy_j"] == pytest.approx(w["net_energy_j"])


def test_replay_cli_on_a_scaled_clock(tmp_path, timeseries_path, v2_profile, seed_ground_truth_flops, capsys):
    """The issue's procedure through the CLI, `flopwatch monitor --sensor replay:timeseries.json --speed X`.

    X = 100 keeps the test to a few seconds (650 s of trace) with room for a loaded machine to keep up;
    `benchmarks/bench_monitor_replay.py` runs it at
    --speed 50 and compares speeds side by side. The console entry point runs in-process (a subprocess would
    add seconds of imports and test nothing more; tests/test_monitor_crash.py runs the daemon as a process).
    """
    prof = tmp_path / "profile.json"
    v2_profile.save(prof)
    led = tmp_path / "ledger.db"
    rc = main(["monitor", "--sensor", f"replay:{timeseries_path}", "--speed", "100", "--profile", str(prof),
               "--ledger", str(led), "--json", "-q"])  # fmt: skip
    out = capsys.readouterr()
    assert rc == 0, out.err
    doc = json.loads(out.out)
    assert doc["end_reason"] == "trace ended"
    shown = summarize_ledger(led)["workloads"]
    assert len(shown) == 1 and shown[0]["status"] == "complete"
    # The scaled clock detects what the virtual clock (and the study's live daemon) did: same 1.5 s poll grid.
    assert 60.0 <= shown[0]["start_t_s"] <= 66.0 and 589.0 <= shown[0]["end_t_s"] <= 593.0
    err = shown[0]["estimate_flops"] / seed_ground_truth_flops - 1
    print(f"speed 100: estimate {shown[0]['estimate_flops']:.4e} ({100 * err:+.2f} %)")
    assert abs(err) < 0.05
    assert main(["ledger", "verify", str(led)]) == 0


def test_sensor_failures_are_counted_flagged_and_survived(tmp_path):
    """Must hold: a sensor failing mid-run → metrics count it, the workload carries coverage < 1, daemon goes on."""
    trace = write_trace(tmp_path / "t.parquet", t_total=420, busy=busy_fn([(20, 120), (200, 400)]))
    # Intermittent failures inside workload 1, then a permanent failure from t=250 inside workload 2.
    failing = busy_fn([(50, 60), (250, 1e9)])
    sensor = FlakySensor(_virtual_replay(trace)[0], failing)
    cfg = _cfg(tmp_path, sensor_fault_s=30.0)
    mon = Monitor(cfg, sensors=[sensor], profile=LinearProfile())
    res = mon.run()
    assert res.end_reason == "trace ended"  # kept running to the end of the data
    w1, w2 = res.workloads
    assert w1["status"] == "complete" and w1["sensor_errors"] == 20  # 10 s at 2 Hz
    assert 0.85 < w1["coverage"] < 0.95 and any("sensor read error" in f for f in w1["warnings"])
    # With no counter, the energy across the gap is interpolated from the readings either side.
    assert w1["duration_s"] == pytest.approx(101.5, abs=2.0)
    assert w2["status"] == "sensor_fault" and w2["end_t_s"] == pytest.approx(249.5, abs=0.6)
    assert w2["coverage"] == pytest.approx(1.0)
    metrics = generate_latest(mon.metrics.registry).decode()
    dev = w1["device"]
    assert f'flopwatch_sensor_errors_total{{device="{dev}"}} {float(sensor.failures)}' in metrics
    assert f'flopwatch_workloads_total{{device="{dev}",status="sensor_fault"}} 1.0' in metrics
    assert res.totals[dev]["sensor_errors"] == sensor.failures
    assert verify_ledger(cfg.ledger).ok


def test_bursts_below_the_hysteresis_are_still_counted(tmp_path):
    """Evasion by splitting: 1 s bursts every 5 s never start a workload but are in the running totals."""
    bursts = [(10 + 5 * k, 11 + 5 * k) for k in range(60)]
    trace = write_trace(tmp_path / "b.parquet", t_total=330, busy=busy_fn(bursts), counter=True)
    prof = LinearProfile(j_per_flop=1e-10)
    cfg = _cfg(tmp_path)
    mon = Monitor(cfg, sensors=_virtual_replay(trace), profile=prof)
    res = mon.run()
    assert res.workloads == []
    tot = next(iter(res.totals.values()))
    # Each 1 s burst at +200 W above idle, with 0.5 s ramps either side in the 2 Hz trace: 200 J net per burst.
    true_net_j = 60 * (P_BUSY_W - P_IDLE_W) * 1.0
    assert tot["busy_net_energy_j"] == pytest.approx(true_net_j, rel=0.02)
    assert tot["outside_busy_net_energy_j"] == pytest.approx(tot["busy_net_energy_j"])
    assert tot["estimated_flops"] == pytest.approx(true_net_j / 1e-10, rel=0.02)
    assert tot["net_energy_j"] == pytest.approx(true_net_j, rel=0.02)
    shown = summarize_ledger(cfg.ledger)["totals"]
    assert shown[next(iter(res.totals))]["estimated_flops"] == pytest.approx(tot["estimated_flops"])
    # The exporter reports the same energy outside workloads (the fleet alert of docs/monitor.md).
    reg = mon.metrics.registry
    labels = {"device": next(iter(res.totals))}
    outside = reg.get_sample_value("flopwatch_outside_workload_net_energy_joules_total", labels)
    assert outside == pytest.approx(tot["outside_busy_net_energy_j"], rel=1e-6)


def test_outside_energy_metric_excludes_workloads(tmp_path):
    """One real workload and a few bursts: only the bursts' net energy is reported as outside workloads."""
    trace = write_trace(
        tmp_path / "w.parquet", t_total=200, busy=busy_fn([(10, 11), (20, 21), (40, 140), (170, 171)])
    )
    mon = Monitor(_cfg(tmp_path), sensors=_virtual_replay(trace), profile=LinearProfile())
    res = mon.run()
    (w,) = res.workloads
    dev = w["device"]
    outside = mon.metrics.registry.get_sample_value(
        "flopwatch_outside_workload_net_energy_joules_total", {"device": dev}
    )
    assert outside == pytest.approx(3 * (P_BUSY_W - P_IDLE_W), rel=0.02)  # three 1 s bursts
    assert outside == pytest.approx(res.totals[dev]["outside_busy_net_energy_j"], rel=1e-6)


def test_counter_and_power_integration_agree(tmp_path):
    """A counter-backed sensor and a power-only sensor of the same run give the same workload energy."""
    busy = busy_fn([(30, 150)])
    out = {}
    for counter in (False, True):
        d = tmp_path / str(counter)
        d.mkdir()
        trace = write_trace(d / "t.parquet", t_total=200, busy=busy, counter=counter)
        res = Monitor(_cfg(d), sensors=_virtual_replay(trace), profile=LinearProfile()).run()
        (w,) = res.workloads
        out[counter] = w
    assert out[True]["net_energy_j"] == pytest.approx(out[False]["net_energy_j"], rel=1e-6)
    # 120 s at +200 W, plus the half-sample ramps the 1.5 s polls bracket.
    assert out[True]["net_energy_j"] == pytest.approx(120 * (P_BUSY_W - P_IDLE_W), rel=0.02)
    assert out[True]["tb_moved"] == pytest.approx(120 * 1e9 / 1e12, rel=0.05)


def test_duration_bounds_the_run_and_closes_open_workload(tmp_path):
    trace = write_trace(tmp_path / "t.parquet", t_total=600, busy=busy_fn([(20, 590)]))
    cfg = _cfg(tmp_path, duration_s=100.0)
    res = Monitor(cfg, sensors=_virtual_replay(trace), profile=LinearProfile()).run()
    assert res.end_reason == "duration reached"
    (w,) = res.workloads
    assert w["status"] == "interrupted" and w["end_t_s"] <= 100.5
    kinds = [r.kind for r in read_entries(cfg.ledger)]
    assert kinds[0] == "genesis" and kinds[1] == "start" and kinds[-1] == "stop"


def test_no_trace_unless_opted_in(tmp_path):
    trace = write_trace(tmp_path / "t.parquet", t_total=60, busy=busy_fn([(10, 40)]))
    cfg = _cfg(tmp_path)
    Monitor(cfg, sensors=_virtual_replay(trace), profile=LinearProfile()).run()
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "ledger.db",
        "ledger.db.key",
        "ledger.db.lock",
        "ledger.db.pub",
        "t.parquet",
    ]
    # The ledger holds totals, not samples: far fewer rows than readings.
    assert len(read_entries(cfg.ledger)) < 20

    kept = tmp_path / "kept.parquet"
    cfg2 = _cfg(tmp_path / "b", keep_trace=kept)
    Monitor(cfg2, sensors=_virtual_replay(trace), profile=LinearProfile()).run()
    from flopwatch.telemetry.trace import Trace

    assert len(Trace.read(kept).samples) == 121


def test_metric_names(tmp_path):
    trace = write_trace(tmp_path / "t.parquet", t_total=60, busy=busy_fn([(10, 40)]))
    mon = Monitor(_cfg(tmp_path), sensors=_virtual_replay(trace), profile=LinearProfile())
    mon.run()
    text = generate_latest(mon.metrics.registry).decode()
    for name in (
        "flopwatch_energy_joules_total{device=",
        "flopwatch_power_watts{device=",
        "flopwatch_utilization_ratio{device=",
        "flopwatch_estimated_flops_total{device=",
        'flopwatch_workloads_total{device="synthetic:0",status="complete"} 1.0',
        'flopwatch_workload_active{device="synthetic:0"} 0.0',
        "flopwatch_sensor_errors_total{device=",
        'flopwatch_info{ledger_key="ledger.db.pub",model="linear-test"',
    ):
        assert name in text, name


def test_config_file_and_flags(tmp_path, capsys):
    toml = tmp_path / "m.toml"
    toml.write_text('[monitor]\nsensors = ["nvml"]\nledger = "x.db"\npoll_s = 2.0\nmetrics_port = 9464\n')
    cfg = MonitorConfig.from_toml(toml).update({"poll_s": 1.5, "metrics_port": None})
    assert cfg.sensors == ["nvml"] and cfg.poll_s == 1.5 and cfg.metrics_port == 9464
    assert cfg.ledger == Path("x.db")
    bad = tmp_path / "bad.toml"
    bad.write_text("[monitor]\npoll_seconds = 2\n")
    with pytest.raises(ConfigError) as ei:
        MonitorConfig.from_toml(bad)
    assert "bad.toml" in str(ei.value) and "poll_seconds" in str(ei.value)
    bad.write_text('[monitor]\nsensors = ["nvml"]\npoll_s = "fast"\n')
    assert main(["monitor", "--config", str(bad)]) == 2
    err = capsys.readouterr().err
    assert "bad.toml" in err and "poll_s" in err and err.count("\n") == 1


def test_default_ledger_is_in_the_state_dir_never_the_working_directory(tmp_path, monkeypatch):
    """Keys never land in a working tree by default: the ledger (and its key beside it) default to the
    systemd state directory, else $XDG_STATE_HOME/flopwatch, else ~/.local/state/flopwatch."""
    from flopwatch.monitor.config import default_ledger_path

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("STATE_DIRECTORY", str(tmp_path / "sd"))
    assert MonitorConfig().ledger == tmp_path / "sd" / "ledger.db"
    monkeypatch.delenv("STATE_DIRECTORY")
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "xdg"))
    assert default_ledger_path() == tmp_path / "xdg" / "flopwatch" / "ledger.db"
    monkeypatch.delenv("XDG_STATE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert default_ledger_path() == tmp_path / "home" / ".local" / "state" / "flopwatch" / "ledger.db"


def test_cli_runs_a_replay_with_duration(tmp_path, capsys):
    trace = write_trace(tmp_path / "t.parquet", t_total=60, busy=busy_fn([(5, 20)]))
    led = tmp_path / "l.db"
    rc = main(["monitor", "--sensor", f"replay:{trace}", "--speed", "100", "--ledger", str(led),
               "--idle-power-w", "50", "--duration", "25", "--json"])  # fmt: skip
    assert rc == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["end_reason"] == "duration reached"
    (w,) = doc["workloads"]
    assert w["status"] == "complete" and w["estimate_flops"] is None  # no profile: energy only
    assert w["net_energy_j"] == pytest.approx(15 * 200, rel=0.05)


def test_simulated_accelerator_with_a_schedule(tmp_path, capsys):
    """`sim:NAME` with a scripted schedule: the workload is found and every row says it is simulated."""
    sched = tmp_path / "schedule.json"
    sched.write_text(
        json.dumps(
            {
                "schedule": [
                    {"idle_s": 30},
                    {"label": "raw", "flops_per_step": 2e12, "bytes_per_step": 2e9, "tokens_per_step": 8192,
                     "batch_size": 8, "steps": 300},
                    {"idle_s": 60},
                ]
            }
        )
    )  # fmt: skip
    led = tmp_path / "l.db"
    args = ["monitor", "--sensor", "sim:a100", "--schedule", str(sched), "--ledger", str(led), "--json"]
    assert main(args) == 2  # virtual time needs a bound
    assert "--duration" in capsys.readouterr().err
    assert main([*args, "--duration", "200", "--idle-power-w", "60"]) == 0
    doc = json.loads(capsys.readouterr().out)
    (w,) = doc["workloads"]
    assert w["status"] == "complete" and w["simulated"] is True and w["sensor_kind"] == "sim"
    assert 28 <= w["start_t_s"] <= 32 and w["duration_s"] > 10
    assert doc["totals"][w["device"]]["workloads"] == 1
    assert main(["ledger", "verify", str(led)]) == 0


class _StallOnce(FlakySensor):
    """Wraps a live-clock sensor; one read (at sensor time ``at``) blocks for ``stall_s`` real seconds."""

    def __init__(self, inner, at: float, stall_s: float) -> None:  # noqa: ANN001
        super().__init__(inner, failing=lambda t: False)
        self.at, self.stall_s, self.stalled = at, stall_s, False

    def read(self):  # noqa: ANN201
        r = self.inner.read()
        if not self.stalled and r.t_s >= self.at:
            self.stalled = True
            import time

            time.sleep(self.stall_s)
        return r


def test_one_sampler_per_device_a_hung_read_does_not_delay_the_other(tmp_path):
    """Issue: one sampler per device. A read on GPU A that hangs for 0.6 s (12 s of sensor time at 20×) leaves
    a hole in A's samples only; B keeps its 2 Hz grid, and both workloads are recorded."""
    from flopwatch.telemetry.sensors.base import ScaledClock

    clk = ScaledClock(20.0, t0=0.0, lazy=True)
    busy = busy_fn([(10, 50)])
    a = open_replay(write_trace(tmp_path / "a.parquet", t_total=60, busy=busy, device="gpu:A"), clock=clk)[0]
    b = open_replay(write_trace(tmp_path / "b.parquet", t_total=60, busy=busy, device="gpu:B"), clock=clk)[0]
    mon = Monitor(_cfg(tmp_path), sensors=[_StallOnce(a, at=25.0, stall_s=0.6), b], profile=LinearProfile())
    res = mon.run(install_signals=False)
    assert len(mon.samplers) == 2 and res.end_reason == "trace ended"
    cov_a, cov_b = res.totals["gpu:A"]["coverage"], res.totals["gpu:B"]["coverage"]
    print(f"coverage A {cov_a:.3f}, B {cov_b:.3f}; overruns A {res.totals['gpu:A']['missed_ticks']}")
    assert res.totals["gpu:A"]["missed_ticks"] >= 1  # A's overrun, recorded as a gap
    assert cov_a < 0.9  # ~12 of ~60 s without samples
    assert cov_b > 0.95  # B kept its grid (with one shared sampler it would have lost the same 12 s)
    assert sorted(w["device"] for w in res.workloads) == ["gpu:A", "gpu:B"]
