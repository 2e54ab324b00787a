"""Round 12, `outside-blind` (docs/threat-model.md): the energy a window measures outside its workload rows is what
the daemon's sensor saw, so the sensor's blind share of that time (NVML on the H100: 75 %) is bounded at the
fastest format's peak, in `flopwatch verdict` (evaluate.window.ledger_window_verdicts) and in the live gauge
(monitor.window.WorkloadWindow) alike."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from flopwatch.devices import resolve
from flopwatch.estimate.sound import device_basis
from flopwatch.evaluate.window import ledger_window_verdicts
from flopwatch.monitor.rows import WorkloadRow
from flopwatch.monitor.window import WorkloadWindow
from window_cases import light_observables

PEAK = device_basis(resolve("h100")).peak_fastest  # fp8 dense, 1.979e15 FLOP/s (H100 SXM datasheet)
DEV = "gpu0"


def _start(wall: float, kind: str = "nvml", rate: float | None = 10.0) -> SimpleNamespace:
    sensor = {"device": DEV, "name": "NVIDIA H100 80GB HBM3", "kind": kind}
    return SimpleNamespace(
        kind="start",
        payload={"wall": wall, "idle_power_w": 70.0, "sensors": [sensor],
                 "context": {"sensor_kind": [kind], "sample_rate_hz": rate}},
    )  # fmt: skip


def _cp(wall: float, outside_j: float = 0.0, dev: str = DEV) -> SimpleNamespace:
    return SimpleNamespace(kind="checkpoint", payload={"wall": wall, "devices": {dev: {"outside_net_energy_j": outside_j}}})  # fmt: skip


def _row(wid: str, s: float, e: float, **kw: Any) -> SimpleNamespace:
    p = light_observables(s, e, kw.pop("tensor_s", 0.04)) | {
        "workload_id": wid, "device": DEV, "device_name": "NVIDIA H100 80GB HBM3", "start_wall": s,
        "end_wall": e, "estimate_flops": 1e14, "lower_flops": 0.9e14, "upper_flops": 1.1e14,
        "regime": "calibrated", "warnings": [],
    } | kw  # fmt: skip
    return SimpleNamespace(kind="workload", payload=p)


def _hour(kind: str = "nvml", rate: float | None = 10.0) -> list[SimpleNamespace]:
    """The threat model's ledger: 1 h on an H100, a checkpoint every minute, 0 J outside workloads, no rows."""
    return [_start(0.0, kind, rate), *[_cp(60.0 * i) for i in range(61)]]


def _verdict(entries: list[Any], threshold: float, window_s: float | None = None) -> dict[str, Any]:
    return ledger_window_verdicts(entries, threshold_flops=threshold, window_s=window_s)["total"]


def _live(entries: list[Any], threshold: float, window_s: float | None = None) -> Any:
    """The gauge fed the same entries in ledger order, as the daemon's restart replay feeds it."""
    w = WorkloadWindow(window_s=window_s or 1e12, threshold_flops=threshold)
    walls, outside = [], {}
    for e in entries:
        p = e.payload
        if e.kind == "start":
            w.rules.restart()
            w.started(p)
        elif e.kind == "workload":
            w.add(WorkloadRow.from_payload(p))
            walls.append(p["end_wall"])
        else:
            vals = {d: v["outside_net_energy_j"] for d, v in p["devices"].items()}
            w.mark(p["wall"], vals)
            outside.update(vals)
            walls.append(p["wall"])
    return w.evaluate(outside, now_wall=max(walls))


def test_threat_model_hour_of_nvml_is_no_longer_below():
    """Before: "below" 1e15 with upper 0. After: 0.75 × 3,600 s × the fp8 peak = 5.3e18, "uncertain", named."""
    v = _verdict(_hour(), 1e15)
    assert v["verdict"] == "uncertain"
    assert v["upper_flops"] == pytest.approx(0.75 * 3600 * PEAK, rel=1e-9)
    assert 5.3e18 < v["upper_flops"] < 5.4e18
    assert v["warnings"] == []  # nothing is wrong with the ledger: the bound itself is above the threshold
    (note,) = v["notes"]
    assert note == (
        "device gpu0: 3600 s outside workloads unseen by nvml (blind share 75%): 2700 s bounded at peak "
        "(fp8, 1979 TFLOP/s), 5.34e+18 FLOPs"
    )
    g = _live(_hour(), 1e15)
    assert g.verdict == "uncertain" and g.upper_flops == pytest.approx(v["upper_flops"], rel=1e-9)
    assert g.notes == (note,)


def test_a_realistic_threshold_is_still_below():
    """An hour at 1e25 (and a day at 1e25) stays "below": the blind time bounds at most 5.3e18 per hour."""
    assert _verdict(_hour(), 1e25)["verdict"] == "below"
    day = [_start(0.0), *[_cp(600.0 * i) for i in range(145)]]
    v = _verdict(day, 1e25)
    assert v["verdict"] == "below" and v["upper_flops"] == pytest.approx(0.75 * 86400 * PEAK, rel=1e-9)


def test_rows_time_is_taken_out_once_and_heavy_light_windows_keep_their_verdict():
    """Rows bound their own time (their blind share is in their sound bound): only the rest of the window is
    added; a heavy job and a light one in a 1 h window stay "below" 1e25, the same live and offline."""
    light, heavy = _row("light", 100.0, 110.0), _row(
        "heavy", 1000.0, 2800.0, net_energy_j=478.0 * 1800, tensor_s=1700.0,
        estimate_flops=1.5e18, lower_flops=1e18, upper_flops=1e19,
    )  # fmt: skip
    entries = [_start(0.0), light, *[_cp(60.0 * i) for i in range(1, 61)], heavy]
    entries.sort(key=lambda e: e.payload.get("end_wall", e.payload.get("wall")))
    v = _verdict(entries, 1e25, 3600.0)
    rows = sum(r["upper_flops"] for r in ledger_window_verdicts(entries, threshold_flops=1e25, window_s=3600.0,
                                                                  by="job")["groups"][:-1])  # fmt: skip
    out_s = 3600.0 - 10.0 - 1800.0
    assert v["upper_flops"] == pytest.approx(rows + 0.75 * out_s * PEAK, rel=1e-6)
    assert [f"{out_s:.4g} s outside workloads unseen by nvml" in n for n in v["notes"]] == [True]
    assert v["verdict"] == "below" and v["warnings"] == []
    g = _live(entries, 1e25, 3600.0)
    assert g.verdict == "below" and g.upper_flops == pytest.approx(v["upper_flops"], rel=1e-9)


@pytest.mark.parametrize("kind, rate", [("acme-meter", 10.0), ("replay", 10.0), ("acme-meter", None)])
def test_a_sensor_the_table_does_not_know_leaves_all_of_it_blind(kind: str, rate: float | None):
    v = _verdict(_hour(kind, rate), 1e25)
    assert v["upper_flops"] == pytest.approx(3600 * PEAK, rel=1e-9)
    assert "blind share 100%" in v["notes"][0] and v["verdict"] == "below"
    assert _live(_hour(kind, rate), 1e25).upper_flops == pytest.approx(v["upper_flops"], rel=1e-9)


def test_no_start_row_is_judged_as_the_least_observed_sensor():
    """A ledger naming no sensor for the device (legacy): as a row naming none, the device's least-observed
    sensor (NVML on the H100, 75 %); a device the verifier's table does not know: unbounded, as its rows are."""
    entries = [_cp(60.0 * i, dev="sim:h100") for i in range(61)]
    v = _verdict(entries, 1e25)
    assert v["upper_flops"] == pytest.approx(0.75 * 3600 * PEAK, rel=1e-9)
    assert "unseen by an unrecorded sensor (judged as nvml-power, the least-observed)" in v["notes"][0]
    assert _live(entries, 1e25).upper_flops == pytest.approx(v["upper_flops"], rel=1e-9)
    unknown = _hour()[1:]  # "gpu0", named by nothing
    v = _verdict(unknown, 1e25)
    assert v["verdict"] == "uncertain" and v["upper_flops"] is None
    assert "a device the verifier's table does not know" in v["notes"][0]
    assert _live(unknown, 1e25).verdict == "uncertain"


def test_a_restart_gap_is_not_counted_twice():
    """Time no sensor ran (a daemon restart) is the restart rule's ("uncertain", named), not blind time too."""
    entries = [_start(0.0), *[_cp(60.0 * i) for i in range(31)],
               _start(2000.0), *[_cp(2400.0 + 60.0 * i) for i in range(21)]]  # fmt: skip
    v = _verdict(entries, 1e25)
    assert v["verdict"] == "uncertain" and any("the monitor restarted" in w for w in v["warnings"])
    unseen_s = 3600.0 - (2400.0 - 1800.0)
    assert v["upper_flops"] == pytest.approx(0.75 * unseen_s * PEAK, rel=1e-9)
    assert _live(entries, 1e25).upper_flops == pytest.approx(v["upper_flops"], rel=1e-9)


def test_a_rolling_window_counts_only_its_own_time():
    """`--window 10m` over the hour: 600 s blind at 75 %, live and offline."""
    v = _verdict(_hour(), 1e25, 600.0)
    assert v["upper_flops"] == pytest.approx(0.75 * 600 * PEAK, rel=1e-9)
    assert _live(_hour(), 1e25, 600.0).upper_flops == pytest.approx(v["upper_flops"], rel=1e-9)


def test_the_command_prints_the_note(tmp_path, capsys, monkeypatch):  # noqa: ANN001
    """`flopwatch verdict` on a signed ledger: the note in `--json` (the window's and the top-level `notes`) and as
    a `note:` line in the text output."""
    import json

    from flopwatch.cli import main
    from flopwatch.monitor.ledger import Ledger

    monkeypatch.setenv("COLUMNS", "400")
    led = tmp_path / "node.db"
    with Ledger(led) as lg:
        for e in _hour():
            lg.append(e.kind, e.payload)
    argv = ["verdict", str(led), "--threshold", "1e15"]
    assert main([*argv, "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    (note,) = d["total"]["notes"]
    assert note in d["notes"] and "3600 s outside workloads unseen by nvml (blind share 75%)" in note
    assert d["total"]["verdict"] == "uncertain" and d["total"]["upper_flops"] == pytest.approx(
        0.75 * 3600 * PEAK
    )
    assert main(argv) == 0
    assert f"note: {note}" in capsys.readouterr().out.splitlines()


@pytest.mark.parametrize("sensors", [5, "nvml", {"device": "gpu0"}, None, [5, {"kind": "nvml"}]])
def test_a_start_row_with_a_malformed_sensor_list_lists_none(sensors):
    """A start row whose ``sensors`` is not a list of maps naming a device lists none: the command and the live gauge
    judge the device as one whose sensor was not recorded (its least-observed sensor), never a traceback."""
    from flopwatch.estimate.context import start_row_contexts

    assert start_row_contexts({"sensors": sensors, "context": {"sample_rate_hz": 10.0}}) == {}
    bad, none = _hour(), _hour()
    bad[0].payload["sensors"], none[0].payload["sensors"] = sensors, []
    judge = lambda e: ledger_window_verdicts(e, threshold_flops=1e25, window_s=None, device="h100")["total"]  # noqa: E731
    v, ref = judge(bad), judge(none)
    assert (
        v["upper_flops"] == ref["upper_flops"] > 0 and v["notes"] == ref["notes"]
    )  # the H100's least-observed
    g, g_ref = _live(bad, 1e25), _live(none, 1e25)  # the gauge names no device model here: unbounded alike
    assert (g.upper_flops, g.verdict, g.notes) == (g_ref.upper_flops, g_ref.verdict, g_ref.notes)
