"""Plausibility limits: one rule for the monitor's per-reading check and the trace validator."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from flopwatch.detect import detect_workloads
from flopwatch.devices import DEVICES, get_device
from flopwatch.monitor.daemon import device_spec
from flopwatch.telemetry.plausibility import MAX_BOARD_POWER_W, check_reading, limits_spec, max_power_w
from flopwatch.telemetry.schema import COLUMNS, Reading
from flopwatch.telemetry.sensors.base import SensorInfo
from flopwatch.telemetry.trace import Trace


def _reading(power_w: float) -> Reading:
    return Reading(t_s=0.0, wall_time=0.0, device="rapl0", power_w=power_w, util=0.5)


def test_a_placeholder_spec_is_no_spec_for_the_limits() -> None:
    cpu = DEVICES["cpu"]  # "Generic CPU": nominal 125 W TDP, sources ("placeholder",)
    assert cpu.is_placeholder and not get_device("a100").is_placeholder
    assert limits_spec(cpu) is None and limits_spec(None) is None
    assert limits_spec(get_device("a100")) is get_device("a100")
    assert max_power_w(cpu) == MAX_BOARD_POWER_W
    assert max_power_w(get_device("a100")) == 800.0  # 2 × the A100's 400 W TDP
    # A RAPL sensor: the monitor looks its spec up as the placeholder; a 320 W server package is no sensor error
    info = SensorInfo(kind="rapl", device_id="rapl0", name="package-0", spec_key="cpu")
    spec = device_spec(info)
    assert spec is cpu
    assert check_reading(_reading(320.0), spec) == ()
    assert check_reading(_reading(1e12), spec)  # the generic ceiling still holds
    # nor is DRAM traffic above the placeholder's nominal 50 GB/s
    assert (
        check_reading(
            Reading(t_s=0.0, wall_time=0.0, device="rapl0", power_w=90.0, dram_bytes_per_s=2e11), spec
        )
        == ()
    )
    # a real spec keeps its TDP ceiling
    assert "TDP" in check_reading(_reading(900.0), get_device("a100"))[0]


def test_trace_validator_and_monitor_agree_on_a_placeholder(tmp_path) -> None:
    """The same 320 W RAPL reading passes the monitor's check and the streaming trace validator."""
    t = np.arange(0, 120, 0.5)
    busy = (t > 30) & (t < 90)
    df = pd.DataFrame(
        {
            "t_s": t,
            "wall_time": pd.to_datetime(1.7e9 + t, unit="s", utc=True),
            "device": "rapl0",
            "power_w": np.where(busy, 320.0, 40.0),
            "energy_j": np.nan,
            "util": np.where(busy, 0.9, 0.01),
            "mem_util": np.nan,
            "dram_bytes_per_s": np.nan,
            "sm_clock_mhz": np.nan,
            "temp_c": np.nan,
            "gap_error": None,
        }
    )[list(COLUMNS)]
    md = {"devices": [{"device_id": "rapl0", "spec_key": "cpu"}], "t0_monotonic_s": 0.0}
    path = Trace(df, md).write(tmp_path / "rapl.parquet")
    det = detect_workloads(path)
    assert len(det.segments) == 1 and det.segments[0].energy_j > 320.0 * 55


def test_one_rule_set_for_a_reading_and_a_column() -> None:
    """``violations`` takes scalars (a reading: NaN is impossible) or columns (a trace: NaN is null) and says the
    same thing about the same value; the trace validator reports it with its row."""
    from flopwatch.telemetry.plausibility import check_values, violations

    a100 = get_device("a100")
    cases = {
        "power_w": (-1.0, 801.0),
        "util": (-0.5, 87.0),
        "mem_util": (1.5,),
        "energy_j": (-3.0,),
        "dram_bytes_per_s": (-1.0, 1e14),
        "sm_clock_mhz": (-5.0,),
    }
    for field, bad in cases.items():
        for x in bad:
            (scalar,) = check_values({field: x}, a100)
            col = np.array([np.nan, 0.5, x, x])  # NaN: a null cell, not a problem
            (v,) = violations({field: col}, a100, nan_is_missing=True)
            assert (v.field, v.index, v.message) == (field, 2, scalar)
    assert check_values({"power_w": np.nan})  # a sensor reading NaN is impossible
    assert violations({"power_w": np.array([np.nan, np.inf])}, nan_is_missing=True)[0].index == 1
    assert check_values({"power_w": 300.0, "util": 1.0, "temp_c": 60.0}, a100) == ()


def test_the_trace_validator_uses_the_same_rules(tmp_path) -> None:
    from flopwatch.errors import InputError
    from flopwatch.telemetry.plausibility import check_values

    readings = [Reading(float(t), 1.7e9 + t, "sim:a100#0", 300.0, util=0.9) for t in range(10)]
    readings[6] = Reading(6.0, 1.7e9 + 6, "sim:a100#0", 801.0, util=0.9)
    path = Trace.from_readings(readings).write(tmp_path / "t.parquet")
    with pytest.raises(InputError) as ei:
        Trace.read(path)
    (msg,) = check_values({"power_w": 801.0}, get_device("a100"))
    assert ei.value.record == "row 6" and ei.value.field == "power_w" and msg in str(ei.value)
