"""The monitor against hostile input (issue 11) and evasion (issue 15): options checked before any work,
impossible sensor readings, restarts, idle baselines taken under load, verdict rules, printing."""

from __future__ import annotations

import dataclasses
import json
import math
import socket
from pathlib import Path

import pytest

from flopwatch.cli import main
from flopwatch.estimate.verdict import threshold_verdict
from flopwatch.monitor.assess import ProfileAssessor
from flopwatch.monitor.config import MonitorConfig
from flopwatch.monitor.daemon import Monitor
from flopwatch.monitor.ledger import read_entries, summarize_ledger, verify_ledger
from flopwatch.monitor.rows import Assessment, Measurement, WorkloadRow
from flopwatch.telemetry.plausibility import check_reading
from flopwatch.telemetry.schema import Reading
from flopwatch.telemetry.sensors.base import VirtualClock
from flopwatch.telemetry.sensors.replay import open_replay
from monitor_helpers import (  # noqa: F401 - private_tmp: autouse fixture
    P_BUSY_W,
    P_IDLE_W,
    AsMeasured,
    GlitchSensor,
    LinearProfile,
    busy_fn,
    private_tmp,
    write_trace,
)


def _cfg(tmp_path: Path, **kw) -> MonitorConfig:
    return MonitorConfig(sensors=["replay:(given)"], ledger=tmp_path / "ledger.db", **kw)


def _replay(path: Path):  # noqa: ANN202
    return open_replay(path, clock=VirtualClock())[0]


# ------------------------------------------------------------------------------------------ options, ports
@pytest.mark.parametrize(
    "args, field",
    [
        # the error names the option (the spelling --help shows), as every other command's does
        (["--threshold-flops", "-1"], "option '--threshold'"),
        (["--threshold-flops", "nan"], "option '--threshold'"),
        (["--idle-power-w", "nan"], "option '--idle-power-w'"),
        (["--idle-power-w", "-3"], "option '--idle-power-w'"),
        (["--speed", "inf"], "--speed"),
        (["--speed", "0"], "--speed"),
        (["--sample-hz", "1e7"], "option '--sample-hz'"),
        (["--poll-s", "nan"], "option '--poll-s'"),
        (["--checkpoint-s", "-5"], "option '--checkpoint-s'"),
        (["--duration", "inf"], "option '--duration'"),
        (["--metrics-port", "70000"], "option '--metrics-port'"),
        (["--verdict-window-s", "inf"], "option '--verdict-window-s'"),
        (["--seed", "-1"], "--seed"),
        (["--dtype", "fp7"], "--precision"),
    ],
)
def test_every_numeric_option_is_checked_before_any_work(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], args: list[str], field: str
) -> None:
    led = tmp_path / "l.db"
    rc = main(["monitor", "--sensor", "sim:a100", "--duration", "600", "--ledger", str(led), *args])
    err = capsys.readouterr().err
    assert rc == 2 and field in err and err.count("\n") == 1 and "Traceback" not in err
    assert not led.exists() and list(tmp_path.iterdir()) == []  # nothing started, nothing written


def test_a_metrics_port_in_use_is_one_line_and_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen(1)
        port = s.getsockname()[1]
        led = tmp_path / "l.db"
        rc = main(["monitor", "--sensor", "sim:a100", "--duration", "5", "--ledger", str(led),
                   "--metrics-port", str(port), "--metrics-addr", "127.0.0.1"])  # fmt: skip
    err = capsys.readouterr().err
    assert rc == 2 and f"metrics port {port}" in err and "in use" in err and err.count("\n") == 1
    assert not led.exists()  # found before the ledger was opened


# ------------------------------------------------------------------------------------------ plausibility
def test_plausibility_limits_follow_the_device_spec() -> None:
    from flopwatch.devices import get_device

    a100 = get_device("a100")  # TDP 400 W

    def r(**kw) -> Reading:
        return Reading(**{"t_s": 0.0, "wall_time": 0.0, "device": "d", "power_w": 100.0, **kw})

    assert check_reading(r(), a100) == ()
    assert check_reading(r(power_w=790.0, util=1.0), a100) == ()
    assert "TDP" in check_reading(r(power_w=801.0), a100)[0]
    assert check_reading(r(power_w=801.0)) == ()  # unknown device: generic ceiling
    assert "negative" in check_reading(r(power_w=-1.0))[0]
    assert "not finite" in check_reading(r(power_w=math.inf))[0]
    assert "not finite" in check_reading(r(energy_j=math.nan))[0]
    assert "percent" in check_reading(r(util=95.0))[0]
    assert check_reading(r(util=-0.2)) and check_reading(r(mem_util=1.5))
    assert "bandwidth" in check_reading(r(dram_bytes_per_s=1e14), a100)[0]


def test_impossible_readings_are_sensor_errors_excluded_from_energy_and_flag_the_workload(
    tmp_path: Path,
) -> None:
    """A rail reading 999999999999 W for 2 s, a NaN and a percent utilisation inside a 100 s workload."""
    trace = write_trace(tmp_path / "t.parquet", t_total=160, busy=busy_fn([(20, 120)]))

    def glitch(r: Reading) -> Reading:
        if 50 <= r.t_s < 52:
            return dataclasses.replace(r, power_w=999999999999.0)
        if r.t_s == 80:
            return dataclasses.replace(r, power_w=math.nan)
        if r.t_s == 90:
            return dataclasses.replace(r, util=95.0)
        return r

    cfg = _cfg(tmp_path, threshold_flops=1e20)
    mon = Monitor(cfg, sensors=[GlitchSensor(_replay(trace), glitch)], profile=LinearProfile())
    res = mon.run()
    (w,) = res.workloads
    true_net = 100 * (P_BUSY_W - P_IDLE_W)
    assert w["net_energy_j"] == pytest.approx(
        true_net, rel=0.02
    )  # bridged from the good readings either side
    assert w["estimate_flops"] == pytest.approx(true_net / 1e-10, rel=0.02)
    assert w["implausible_readings"] == 6 and w["sensor_errors"] == 6
    assert any("implausible" in x and "power_w 1e+12 W" in x for x in w["warnings"])
    assert w["verdict"] == "uncertain"  # its upper bound is far below 1e20, but the measurement is suspect
    tot = res.totals[w["device"]]
    assert tot["sensor_errors"] == tot["implausible_readings"] == 6
    assert tot["energy_j"] < 160 * P_BUSY_W and all(
        math.isfinite(v) for v in tot.values() if isinstance(v, float)
    )
    reg = mon.metrics.registry
    assert reg.get_sample_value("flopwatch_sensor_errors_total", {"device": w["device"]}) == 6.0
    assert verify_ledger(cfg.ledger).ok


def test_an_infinite_reading_never_reaches_the_running_totals_and_they_survive_a_restart(
    tmp_path: Path,
) -> None:
    trace = write_trace(tmp_path / "t.parquet", t_total=60, busy=busy_fn([(10, 40)]))
    inf_at = lambda r: dataclasses.replace(r, power_w=math.inf) if r.t_s == 25 else r  # noqa: E731
    cfg = _cfg(tmp_path)
    first = Monitor(cfg, sensors=[GlitchSensor(_replay(trace), inf_at)], profile=LinearProfile()).run()
    dev = next(iter(first.totals))
    t1 = first.totals[dev]
    assert t1["energy_j"] > 0 and t1["estimated_flops"] > 0
    cp = [r.payload for r in read_entries(cfg.ledger) if r.kind == "checkpoint"][-1]["devices"][dev]
    assert all(
        cp[k] is not None for k in ("energy_j", "net_energy_j", "busy_net_energy_j", "estimated_flops")
    )
    # Restart on the same ledger: totals continue, nothing reset by the bad reading.
    second = Monitor(cfg, sensors=[_replay(trace)], profile=LinearProfile()).run()
    t2 = second.totals[dev]
    assert t2["energy_j"] == pytest.approx(2 * t1["energy_j"], rel=0.01)
    assert t2["workloads"] == 2 and t2["sensor_errors"] == 1
    assert t2["estimated_flops"] == pytest.approx(2 * t1["estimated_flops"], rel=0.02)
    assert verify_ledger(cfg.ledger).ok


def test_an_energy_counter_glitch_is_not_energy(tmp_path: Path) -> None:
    trace = write_trace(tmp_path / "t.parquet", t_total=100, busy=busy_fn([(20, 80)]), counter=True)
    jump = lambda r: dataclasses.replace(r, energy_j=r.energy_j + 1e12) if r.t_s == 50 else r  # noqa: E731
    res = Monitor(_cfg(tmp_path), sensors=[GlitchSensor(_replay(trace), jump)], profile=LinearProfile()).run()
    (w,) = res.workloads
    assert w["net_energy_j"] == pytest.approx(60 * (P_BUSY_W - P_IDLE_W), rel=0.02)
    assert w["implausible_readings"] >= 1 and w["warnings"]


# ------------------------------------------------------------------------------------------ idle baseline
def test_a_baseline_above_the_settled_idle_power_is_tracked_and_flags_rows(tmp_path: Path) -> None:
    """Idle baseline 80 W (measured under load) on a device that idles at 50 W: hidden energy is flagged."""
    trace = write_trace(tmp_path / "t.parquet", t_total=200, busy=busy_fn([(60, 120)]))
    cfg = _cfg(tmp_path, idle_power_w=80.0, threshold_flops=1e20)
    mon = Monitor(cfg, sensors=[_replay(trace)], profile=LinearProfile())
    res = mon.run()
    (w,) = res.workloads
    tot = res.totals[w["device"]]
    assert tot["min_idle_power_w"] == pytest.approx(P_IDLE_W, rel=1e-6)
    assert tot["negative_net_energy_j"] < -30 * 50 * 0.9  # 60 s of idle before the job at −30 W, at least
    assert any("lowest settled idle power 50" in x for x in w["warnings"])
    assert w["verdict"] == "uncertain"
    g = mon.metrics.registry.get_sample_value("flopwatch_idle_power_min_watts", {"device": w["device"]})
    assert g == pytest.approx(P_IDLE_W)


def test_idle_energy_under_a_high_baseline_cannot_cancel_bursts(tmp_path: Path) -> None:
    """Bursts under the hysteresis plus long idle under an 80 W baseline (device idles at 50 W): the energy
    outside workloads that window verdicts bound is at least the bursts' busy net energy, not their sum with
    the (negative) idle net energy."""
    bursts = [(20 + 8 * i, 21 + 8 * i) for i in range(10)]
    trace = write_trace(tmp_path / "t.parquet", t_total=400, busy=busy_fn(bursts))
    res = Monitor(_cfg(tmp_path, idle_power_w=80.0), sensors=[_replay(trace)], profile=LinearProfile()).run()
    assert res.workloads == []
    (tot,) = res.totals.values()
    assert tot["net_energy_j"] < 0  # all of it together would cancel the bursts
    assert tot["outside_busy_net_energy_j"] > 0
    assert tot["outside_net_energy_j"] >= tot["outside_busy_net_energy_j"]


def test_the_cli_and_the_daemon_escape_user_strings_with_one_helper() -> None:
    from flopwatch.cli._output import literal as cli_literal
    from flopwatch.text import literal

    s = "gpu[/bold]\x1b[31m\nfake line\u2028\t\U0001f600"
    assert literal(s) == "gpu[/bold]\\x1b[31m\\x0afake line\\u2028\\x09\U0001f600"
    assert cli_literal(s) == "gpu[/bold]\\x1b[31m\nfake line\\u2028\t\U0001f600"  # the console keeps \n, \t
    assert literal(42) == "42" and literal("plain") == "plain"


def test_a_clean_workload_can_still_be_decided_below(tmp_path: Path) -> None:
    trace = write_trace(tmp_path / "t.parquet", t_total=200, busy=busy_fn([(60, 120)]))
    # a real (DCGM-read) H100's sensor: a replay is flagged and never "below" (tests/test_monitor_context.py)
    res = Monitor(
        _cfg(tmp_path, threshold_flops=1e20), sensors=[AsMeasured(_replay(trace))], profile=LinearProfile()
    ).run()
    (w,) = res.workloads
    assert w["warnings"] == [] and w["verdict"] == "below"
    assert w["regime"] == "calibrated" and w["row_version"] == 5
    assert w["notes"] == []  # no --dtype claim given; the profile's precision is assumed only in regime


# ------------------------------------------------------------------------------------------ verdict rules
def test_a_non_positive_or_non_finite_estimate_is_never_below() -> None:
    for est, lo, hi in (
        (0.0, 0.0, 0.0),
        (-5.0, -6.0, -4.0),
        (math.nan, 1.0, 2.0),
        (1.0, 0.5, math.inf),
        (None, None, None),
    ):
        assert threshold_verdict(est, lo, hi, 1e20) == "uncertain"
    assert threshold_verdict(1.0, 0.9, 1.1, 1e20) == "below"
    assert threshold_verdict(1.0, 0.9, 1.1, 1e20, ["coverage 50 %"]) == "uncertain"
    assert threshold_verdict(1e21, 0.9e21, 1.1e21, 1e20, ["coverage 50 %"]) == "above"
    assert threshold_verdict(1.0, 0.9, 1.1, None) == "n/a"


def test_overhead_above_net_power_gives_uncertain_not_below(tmp_path: Path) -> None:
    trace = write_trace(tmp_path / "t.parquet", t_total=100, busy=busy_fn([(20, 80)]))
    prof = LinearProfile(overhead_w=10 * (P_BUSY_W - P_IDLE_W))  # estimate clamps to 0
    res = Monitor(_cfg(tmp_path, threshold_flops=1e15), sensors=[_replay(trace)], profile=prof).run()
    (w,) = res.workloads
    assert w["estimate_flops"] == 0.0 and w["verdict"] == "uncertain"


def test_the_assess_stage_is_swappable(tmp_path: Path) -> None:
    seen: list[Measurement] = []

    def assess(m: Measurement) -> Assessment:
        seen.append(m)
        return Assessment(
            estimate_flops=1e15,
            verdict_lower_flops=5e14,
            verdict_upper_flops=4e15,
            confidence=0.9,
            model="stub",
            verdict="uncertain",
            regime="fp16-like",
            warnings=("out of regime: bytes/J",),
        )

    trace = write_trace(tmp_path / "t.parquet", t_total=100, busy=busy_fn([(20, 80)]))
    res = Monitor(_cfg(tmp_path, dtype="bf16"), sensors=[_replay(trace)], assess=assess).run()
    (w,) = res.workloads
    assert w["regime"] == "fp16-like" and w["model"] == "stub" and w["declared_dtype"] == "bf16"
    # the stub's warning, then the daemon's own: a replay's timing is unknown, so its rows are never "below"
    assert w["warnings"][0] == "out of regime: bytes/J"
    assert any("a replayed trace (sensor 'replay')" in x for x in w["warnings"][1:])
    assert seen and all(m.declared_dtype == "bf16" for m in seen)


def test_the_profile_assessor_records_a_declared_dtype_as_a_claim() -> None:
    a = ProfileAssessor(LinearProfile(), threshold_flops=1e20, declared_dtype="fp32")
    # a known device: "below" rests on its datasheet (an unknown one is never "below")
    m = Measurement("d", 0, 60, 0, 60, 60.0, 15000.0, 12000.0, 50.0, None, 0.95, 1.0, spec_key="h100")
    out = a(m)
    assert out.verdict == "below" and out.regime == "calibrated" and any("claim" in n for n in out.notes)
    # the claim changes nothing: the same assessment without it
    plain = ProfileAssessor(LinearProfile(), threshold_flops=1e20)(m)
    assert (plain.estimate_flops, plain.upper_flops, plain.verdict) == (
        out.estimate_flops,
        out.upper_flops,
        "below",
    )


def test_rows_round_trip_and_interrupted_rows_are_never_below() -> None:
    m = Measurement("d", 0, 60, 0, 60, 60.0, 15000.0, 12000.0, 50.0, None, 0.95, 1.0)
    row = WorkloadRow.build(workload_id="s/d/0", session_id="s", status="open", meas=m,
                            assessment=Assessment(estimate_flops=1.0, verdict_lower_flops=0.9, verdict_upper_flops=1.1, verdict="below"), threshold_flops=1e20,
                            profile_sha256=None)  # fmt: skip
    assert WorkloadRow.from_payload(json.loads(json.dumps(row.to_payload()))) == row
    cut = row.interrupted("crash")
    assert cut.status == "interrupted" and cut.verdict == "uncertain" and cut.warnings == ("crash",)


def test_a_built_row_carries_every_measured_and_assessed_field() -> None:
    """WorkloadRow.build takes the fields by name: each one the measurement and the assessment share with the row
    lands in it (the measurement's device, both sides' warnings), an unbounded upper bound is stored as None."""
    m = Measurement("d", 1, 61, 2, 62, 60.0, 15000.0, 12000.0, 50.0, 0.3, 0.95, 0.99, sensor_errors=1,
                    implausible_readings=2, mean_sm_clock_mhz=1500.0, power_limit_w=700.0, warnings=("m",),
                    declared_dtype="bf16", device_name="H100", spec_key="h100", min_sm_clock_mhz=900.0,
                    max_sm_clock_mhz=1980.0, peak_power_w=690.0, unobserved_s=0.5, pipe_active_s={"tensor": 1.0},
                    pipe_observed_s=59.0, context={"sensor": "nvml"})  # fmt: skip
    a = Assessment(estimate_flops=5.0, verdict_lower_flops=1.0, verdict_basis="datasheet", verdict="uncertain",
                   calibrated_lower_flops=4.0, calibrated_upper_flops=6.0, confidence=0.9, assumptions="x",
                   warnings=("m", "a"), notes=("n",), decisive_at=3.0, tighten=("t",), regime="calibrated",
                   model="eq1", device="elsewhere", threshold_flops=1.0)  # fmt: skip
    row = WorkloadRow.build(workload_id="w", session_id="s", status="complete", meas=m, assessment=a,
                            threshold_flops=1e20, profile_sha256="p", sensor_kind="nvml", simulated=True)  # fmt: skip
    names = {f.name for f in dataclasses.fields(WorkloadRow)}
    for f in dataclasses.fields(Measurement):
        if f.name in names - {"warnings", "windows"}:
            assert getattr(row, f.name) == getattr(m, f.name), f.name
    for k in ("estimate_flops", "lower_flops", "confidence", "model", "verdict", "regime", "bound", "notes",
              "calibrated_lower_flops", "calibrated_upper_flops", "assumptions", "decisive_at", "tighten"):  # fmt: skip
        assert getattr(row, k) == getattr(a, k), k
    assert (row.device, row.warnings, row.upper_flops, row.threshold_flops) == ("d", ("m", "a"), None, 1e20)
    assert (row.workload_id, row.session_id, row.profile_sha256, row.sensor_kind, row.simulated) == (
        "w", "s", "p", "nvml", True)  # fmt: skip


# ------------------------------------------------------------------------------------------ window verdict
def test_the_window_verdict_judges_a_split_run_as_a_whole(tmp_path: Path) -> None:
    """Three 30 s chunks, each decided "below" T on its own; together they are above T."""
    trace = write_trace(tmp_path / "t.parquet", t_total=200, busy=busy_fn([(10, 40), (70, 100), (130, 160)]))
    # a profile as efficient as half the H100's peak rate (so a chunk's sound bound is within ~2× of it)
    prof = LinearProfile(j_per_flop=2.0e-13)
    probe = Monitor(MonitorConfig(sensors=["replay:(given)"], ledger=tmp_path / "probe.db"),
                    sensors=[AsMeasured(_replay(trace))], profile=prof).run()  # fmt: skip
    t = 1.05 * max(w["upper_flops"] for w in probe.workloads)  # over every chunk's sound upper bound
    assert sum(w["lower_flops"] for w in probe.workloads) > t  # ... under the three chunks' lower bounds
    mon = Monitor(_cfg(tmp_path, threshold_flops=t), sensors=[AsMeasured(_replay(trace))], profile=prof)
    res = mon.run()
    assert [w["verdict"] for w in res.workloads] == ["below"] * 3
    reg = mon.metrics.registry
    assert reg.get_sample_value("flopwatch_window_verdict", {"flopwatch_window_verdict": "above"}) == 1.0
    assert reg.get_sample_value("flopwatch_window_lower_flops") > t
    assert reg.get_sample_value("flopwatch_window_seconds") == 86400.0


def test_the_window_verdict_function_is_a_hook(tmp_path: Path) -> None:
    from flopwatch.monitor.window import WindowInput, WindowVerdict

    calls: list[int] = []

    def fn(w: WindowInput) -> WindowVerdict:
        calls.append(len(w.rows))
        return WindowVerdict("uncertain", 1.0, 2.0, len(w.rows), w.window_s, w.threshold_flops, ("stub",))

    trace = write_trace(tmp_path / "t.parquet", t_total=100, busy=busy_fn([(20, 50)]))
    mon = Monitor(_cfg(tmp_path, threshold_flops=1e9), sensors=[_replay(trace)], profile=LinearProfile(),
                  window_verdict=fn)  # fmt: skip
    mon.run()
    assert calls and calls[-1] == 1
    reg = mon.metrics.registry
    assert reg.get_sample_value("flopwatch_window_verdict", {"flopwatch_window_verdict": "uncertain"}) == 1.0
    assert reg.get_sample_value("flopwatch_window_upper_flops") == 2.0


# ------------------------------------------------------------------------------------------ printing
def test_device_names_with_markup_and_escapes_print_literally(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    evil = "[/bold]gpu\x1b[2K\x1b[1A[red]FAKE[/red]"
    trace = write_trace(tmp_path / "t.parquet", t_total=60, busy=busy_fn([(5, 30)]), device=evil)
    led = tmp_path / "l.db"
    rc = main(["monitor", "--sensor", f"replay:{trace}", "--speed", "200", "--ledger", str(led),
               "--idle-power-w", "50", "-q"])  # fmt: skip
    out = capsys.readouterr()
    assert rc == 0, out.err
    assert "\x1b" not in out.out and "\x1b" not in out.err
    shown = "[/bold]gpu\\x1b[2K\\x1b[1A[red]FAKE[/red]"  # every character visible, none interpreted
    # the session's own rows, numbered as the ledger numbers them; a long name: one block of lines per row
    assert f"  device        {shown}" in out.out.splitlines()
    assert main(["ledger", "show", str(led)]) == 0
    shown_out = capsys.readouterr().out  # a long name: one block of lines per row (wider than 160 as a table)
    assert "\x1b" not in shown_out and shown in shown_out
    assert summarize_ledger(led)["workloads"][0]["device"] == evil  # stored as it was, shown escaped


def test_workload_tables_fit_160_columns_without_empty_columns() -> None:
    # the newcomer's tour: a row without warnings or ledger seq folded its device name at 160 columns
    from flopwatch.cli._output import console
    from flopwatch.cli.monitor_cmds import _workload_table

    row = {"device": "jetson:VDD_CPU_GPU_CV", "start_wall": 1.8e9, "duration_s": 525.0, "net_energy_j": 4117.1,
           "estimate_flops": 3.705e14, "lower_flops": 3.036e14, "upper_flops": 8.767e15, "verdict": "n/a",
           "regime": "calibrated", "status": "complete", "coverage": 1.0, "warnings": []}  # fmt: skip
    con = console()
    with con.capture() as cap:
        con.print(_workload_table([row], "session"), width=160)
    text = cap.get()
    assert "jetson:VDD_CPU_GPU_CV" in text and "row ┃" not in text and "warnings" not in text
    with con.capture() as cap:
        con.print(_workload_table([{**row, "seq": 23, "warnings": ["w"]}], "ledger"), width=160)
    assert "row ┃" in cap.get() and "warnings" in cap.get()


def test_recovery_reads_hand_edited_checkpoints_without_trusting_bad_values(tmp_path: Path) -> None:
    from flopwatch.monitor.ledger import Ledger

    dev = "synthetic:0"
    with Ledger(tmp_path / "ledger.db") as led:
        led.append("start", {"session_id": "old", "config": {"threshold_flops": "big"}})
        ow = {"workload_id": "old/w", "net_energy_j": "lots", "duration_s": 30.0, "verdict": "below"}
        cp = {"energy_j": "x", "net_energy_j": 100.0, "sensor_errors": 2.5e300, "open_workload": ow}
        led.append("checkpoint", {"session_id": "old", "devices": {dev: cp, "gone:1": [1, 2]}})
    trace = write_trace(tmp_path / "t.parquet", t_total=20, busy=busy_fn([]))
    res = Monitor(_cfg(tmp_path), sensors=[_replay(trace)], profile=LinearProfile()).run()
    tot = res.totals[dev]
    assert tot["net_energy_j"] < 100.0 + 1e-6 and tot["workloads"] == 1 and tot["workload_s"] == 30.0
    assert all(math.isfinite(v) for v in tot.values() if isinstance(v, float))
    (w,) = [r.payload for r in read_entries(tmp_path / "ledger.db") if r.kind == "workload"]
    assert w["status"] == "interrupted" and w["net_energy_j"] is None and w["verdict"] == "uncertain"


_NUMERIC = [
    "poll_s", "sample_hz", "checkpoint_s", "speed", "sensor_fault_s", "duration_s", "verdict_window_s",
    "util_threshold", "idle_power_w", "busy_power_margin_w", "threshold_flops", "metrics_port", "seed",
    "start_polls", "end_polls",
]  # fmt: skip


@pytest.mark.hypothesis  # the @given is inner: mark it so `pytest -m hypothesis` (the full run) selects it
def test_config_validation_accepts_only_finite_in_range_values() -> None:
    """Property: any value for any numeric setting is either refused with a ConfigError or finite and sane."""
    from hypothesis import given, settings
    from hypothesis import strategies as st

    from flopwatch.errors import ConfigError
    from hypothesis_budget import examples

    values = st.one_of(
        st.floats(allow_nan=True, allow_infinity=True),
        st.integers(min_value=-(2**70), max_value=2**70),
        st.booleans(),
        st.text(max_size=5),
    )

    @settings(max_examples=examples("monitor_config"))
    @given(name=st.sampled_from(_NUMERIC), value=values)
    def check(name: str, value: object) -> None:
        cfg = MonitorConfig(sensors=["nvml"], ledger=Path("x.db"))
        try:
            cfg.update({name: value}).validate()
        except ConfigError as e:
            assert name in str(e) and "\n" not in str(e)
            return
        v = getattr(cfg, name)
        assert isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) and v >= 0

    check()
