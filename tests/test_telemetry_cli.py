"""``flopwatch sensors``, ``record`` and ``idle`` end to end (replay and recorded sysfs trees, no hardware)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from flopwatch.cli import main
from flopwatch.telemetry.schema import Reading, base_metadata
from flopwatch.telemetry.trace import Trace

SYSFS = Path(__file__).parent / "data" / "sysfs"


@pytest.fixture
def small_trace(tmp_path):
    """4 s of a 10 Hz trace: idle 2 W, busy 12 W between 1 s and 3 s."""
    rs = [
        Reading(
            i * 0.1, 1.7e9 + i * 0.1, "d0", 12.0 if 10 <= i < 30 else 2.0, util=0.9 if 10 <= i < 30 else 0.0
        )
        for i in range(41)
    ]
    p = tmp_path / "small.parquet"
    Trace.from_readings(rs, base_metadata(kind="test", rate_hz=10)).write(p)
    return p


def test_sensors_json_is_pure_and_explains(capsys):
    assert main(["sensors", "--json", "--jetson-root", str(SYSFS / "orin-nano-jp6"),
                 "--rapl-root", str(SYSFS / "rapl-2s")]) == 0  # fmt: skip
    out = json.loads(capsys.readouterr().out)
    by = {b["kind"]: b for b in out["backends"]}
    assert {"nvml", "jetson", "amd", "rapl", "replay", "sim"} <= set(by)
    (jet,) = by["jetson"]["sensors"]
    assert jet["device_id"] == "jetson:VDD_CPU_GPU_CV" and "util" in jet["capabilities"]
    assert by["rapl"]["available"] and by["rapl"]["sensors"][0]["name"].startswith("Intel")
    if not by["nvml"]["available"]:
        assert by["nvml"]["reason"]  # says why


def test_sensors_human(capsys):
    assert main(["sensors"]) == 0
    assert "replay" in capsys.readouterr().out


def test_record_replay_fast_and_refuse_overwrite(small_trace, tmp_path, capsys):
    out = tmp_path / "rec.parquet"
    args = ["record", "--sensor", f"replay:{small_trace}", "--speed", "20", "--rate", "10", "--duration", "3.5",
            "-o", str(out), "--json"]  # fmt: skip
    assert main(args) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["rows"] == sum(summary["n_samples"].values()) + sum(summary["n_gaps"].values())
    assert summary["end_reason"] in ("duration reached", "trace ended") and not summary["simulated"]
    tr = Trace.read(out)
    assert tr.metadata["kind"] == "replay" and tr.metadata["rate_hz"] == 10
    assert tr.metadata["sensor_spec"].startswith("replay:")
    before = out.read_bytes()
    assert main(args) == 2  # exists: refused, file untouched
    assert "exists" in capsys.readouterr().err and out.read_bytes() == before
    assert main([*args, "--force"]) == 0


def test_record_jetson_tree(tmp_path, capsys):
    out = tmp_path / "jet.parquet"
    spec = f"jetson:{SYSFS / 'agx-orin-jp5'}"
    assert (
        main(["record", "--sensor", spec, "--rate", "50", "--duration", "0.2", "-o", str(out), "--json"]) == 0
    )
    s = json.loads(capsys.readouterr().out)
    assert s["n_samples"]["jetson:VDD_GPU_SOC"] >= 5
    tr = Trace.read(out)
    assert tr.df["power_w"].iloc[0] == pytest.approx(19.968 * 0.26)
    assert "extra_rail_VDDQ_VDD2_1V8AO_w" in tr.df.columns
    assert tr.metadata["fingerprint"]["model"] == "Jetson AGX Orin Developer Kit"


@pytest.mark.parametrize("bad", [["--rate", "0"], ["--duration", "-1"]])
def test_record_bad_args(small_trace, tmp_path, bad, capsys):
    args = ["record", "--sensor", f"replay:{small_trace}", "--rate", "10", "--duration", "1", "-o",
            str(tmp_path / "x.parquet")]  # fmt: skip
    assert main(args + bad) == 2
    assert not (tmp_path / "x.parquet").exists()


def test_record_unknown_sensor(tmp_path, capsys):
    assert main(["record", "--sensor", "quantum", "--duration", "1", "-o", str(tmp_path / "x.parquet")]) == 2
    assert "unknown sensor spec" in capsys.readouterr().err


def test_idle_median_and_spread(small_trace, capsys):
    assert main(["idle", "--sensor", f"replay:{small_trace}", "--speed", "40", "--duration", "0.9",
                 "--rate", "10", "--json"]) == 0  # fmt: skip
    out = json.loads(capsys.readouterr().out)
    d = out["devices"]["d0"]
    assert d["idle_power_w"] == 2.0 and d["iqr_w"] == 0.0 and d["n"] >= 5


def test_idle_jetson_human(capsys):
    assert (
        main(["idle", "--sensor", f"jetson:{SYSFS / 'orin-nano-jp6'}", "--duration", "0.5", "--rate", "10"])
        == 0
    )
    assert "3.808" in capsys.readouterr().out  # 5064 mV × 752 mA


def test_detect_parquet_trace(small_trace, capsys):
    assert main(["detect", str(small_trace), "--poll", "0.2", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    (w,) = out["workloads"]
    assert out["idle_power_w"] == 2.0
    assert w["net_energy_j"] == pytest.approx(20.0, abs=1.5)  # 10 W over idle for 2 s


def test_shared_telemetry_options_have_one_help_and_one_check(capsys, monkeypatch):
    """--sensor, --rate, --speed, --force and --idle-power read the same in every command that takes them
    (declared once in cli/options.py), and `idle --duration` has the same upper bound as `record`'s."""
    monkeypatch.setenv("COLUMNS", "200")
    helps = {}
    for cmd in (["record"], ["idle"], ["sim", "trace"], ["join"], ["detect"], ["run"]):
        assert main([*cmd, "--help"]) == 0
        helps[cmd[-1]] = " ".join(capsys.readouterr().out.split())
    for text, where in (
        ("Sensor spec: nvml, nvml:N, jetson, rapl, replay:FILE", ("record", "idle")),
        ("Telemetry sampling rate (samples per second).", ("record", "idle", "trace", "run")),
        ("Replay speed factor (replay:FILE sensors).", ("record", "idle")),
        ("Overwrite the output file if it exists.", ("record", "trace", "join")),
        ("Idle power in W (default: from the trace, as `flopwatch detect`).", ("detect", "join")),
    ):
        assert all(text in helps[w] for w in where), text
    assert main(["idle", "--sensor", "sim:a100", "--duration", "1e9"]) == 2
    assert "Invalid value for '--duration': must be <= 3.16224e+07 s" in capsys.readouterr().err
