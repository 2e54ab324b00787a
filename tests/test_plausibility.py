"""Plausibility limits: one rule for the monitor's per-reading check and the trace validator."""

from __future__ import annotations

import numpy as np
import pandas as pd

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
