"""Jetson (INA3221, devfreq, actmon), tegrastats and RAPL backends on recorded sysfs trees (tests/data/sysfs).

Trees are copied to tmp_path when a test edits values (wrap-around, garbage, missing files). Permission errors
are simulated with an injected reader, since the tests run as root and mode 000 would not stop root.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from flopwatch.errors import InputError, SensorError, SensorPermissionError, SensorUnavailable
from flopwatch.telemetry.sampler import Sampler
from flopwatch.telemetry.schema import Gap
from flopwatch.telemetry.sensors._sysfs import default_reader
from flopwatch.telemetry.sensors.base import VirtualClock
from flopwatch.telemetry.sensors.discover import open_sensors, probe_all
from flopwatch.telemetry.sensors.jetson import JetsonSensor
from flopwatch.telemetry.sensors.rapl import RaplSensor
from flopwatch.telemetry.sensors.tegrastats import TegrastatsSensor, parse_line, read_log

SYSFS = Path(__file__).parent / "data" / "sysfs"
NANO = SYSFS / "orin-nano-jp6"
AGX = SYSFS / "agx-orin-jp5"
RAPL2S = SYSFS / "rapl-2s"
LAPTOP = SYSFS / "rapl-laptop"


@pytest.fixture
def tree(tmp_path):
    def copy(src: Path) -> Path:
        dst = tmp_path / src.name
        shutil.copytree(src, dst)
        return dst

    return copy


def _denying(substr):
    def reader(path):
        if substr in str(path):
            raise PermissionError(13, "Permission denied", str(path))
        return default_reader(path)

    return reader


# ---------------------------------------------------------------------- Jetson
def test_orin_nano_rails_load_emc():
    s = JetsonSensor(NANO, clock=VirtualClock())
    assert [r.label for r in s.rails] == ["VDD_IN", "VDD_CPU_GPU_CV", "VDD_SOC"]  # the sum channel is skipped
    assert s.primary == "VDD_CPU_GPU_CV"  # the rail the study integrated
    r = s.read()
    assert r.device == "jetson:VDD_CPU_GPU_CV"
    assert r.power_w == pytest.approx(5.064 * 0.752)
    assert r.extra["rail_VDD_IN_w"] == pytest.approx(5.072 * 1.648)
    assert r.util == pytest.approx(0.968) and r.sm_clock_mhz == pytest.approx(1020.0)
    assert r.mem_util == pytest.approx(412.35e6 / 3199e6)
    assert r.dram_bytes_per_s == pytest.approx(412.35e6 * 32)  # 32 B per EMC cycle on Orin Nano
    info = s.info()
    assert info.spec_key == "orin-nano" and info.fingerprint["l4t"].startswith("# R36")
    assert info.fingerprint["nvpmodel"].startswith("pmode:0001")
    assert {"power_w", "util", "mem_util", "dram_bytes_per_s"} <= set(info.capabilities)


def test_agx_orin_rails_differ_and_nc_skipped():
    s = JetsonSensor(AGX, clock=VirtualClock())
    assert [r.label for r in s.rails] == ["VDD_GPU_SOC", "VDD_CPU_CV", "VIN_SYS_5V0", "VDDQ_VDD2_1V8AO"]
    assert s.primary == "VDD_GPU_SOC"
    r = s.read()
    assert r.power_w == pytest.approx(19.968 * 0.260)
    assert r.util == 0.0 and r.sm_clock_mhz == pytest.approx(306.0)
    assert r.dram_bytes_per_s == pytest.approx(20.56e6 * 64)  # older actmon path, 64 B/cycle on AGX Orin
    assert s.info().spec_key is None  # not in devices.py: no peaks are invented


def test_jetson_explicit_rail_and_unknown_rail():
    s = JetsonSensor(NANO, rail="VDD_IN", clock=VirtualClock())
    assert s.read().power_w == pytest.approx(5.072 * 1.648)
    with pytest.raises(SensorUnavailable, match="VDD_GPU"):
        JetsonSensor(NANO, rail="VDD_GPU")


def test_jetson_not_a_jetson(tmp_path):
    with pytest.raises(SensorUnavailable, match="not a Jetson"):
        JetsonSensor(tmp_path)
    (st,) = [b for b in probe_all(jetson_root=str(tmp_path), rapl_root=str(tmp_path)) if b.kind == "jetson"]
    assert not st.available and "INA3221" in st.reason


def test_jetson_garbage_and_missing_become_gaps(tree):
    root = tree(NANO)
    hw = root / "sys/bus/i2c/drivers/ina3221/1-0040/hwmon/hwmon1"
    s = JetsonSensor(root, clock=VirtualClock())
    (hw / "curr2_input").write_text("lol\n")
    with pytest.raises(SensorError, match="expected a number, got 'lol'"):
        s.read()
    (hw / "curr2_input").write_text("752\n")
    load = root / "sys/class/devfreq/17000000.gpu/device/load"
    load.write_text("1500\n")
    with pytest.raises(SensorError, match="outside 0–1000"):
        s.read()
    load.unlink()
    with pytest.raises(SensorError, match="disappeared"):
        s.read()
    items = []
    Sampler([s], 10, sinks=[items.append]).run(n_ticks=3)
    assert all(isinstance(x, Gap) and "disappeared" in x.error for x in items)


def test_jetson_without_actmon_or_devfreq(tree):
    root = tree(NANO)
    shutil.rmtree(root / "sys/kernel")
    shutil.rmtree(root / "sys/class/devfreq")
    s = JetsonSensor(root, clock=VirtualClock())
    r = s.read()
    assert r.util is None and r.mem_util is None and r.dram_bytes_per_s is None and r.power_w > 0
    assert s.info().capabilities == ("power_w",)


def test_jetson_actmon_permission_error():
    s = JetsonSensor(NANO, reader=_denying("actmon"), clock=VirtualClock())
    with pytest.raises(SensorPermissionError, match="permission denied"):
        s.read()


def test_open_sensors_jetson_spec():
    (s,) = open_sensors(
        f"jetson:{NANO}", clock=VirtualClock(), speed=3.0
    )  # speed is ignored by live backends
    assert s.info().kind == "jetson"


# ---------------------------------------------------------------------- tegrastats
JP5 = (
    "RAM 2448/7620MB (lfb 1095x4MB) SWAP 0/3810MB (cached 0MB) CPU [1%@729,0%@729,0%@729,0%@729,off,off] "
    "EMC_FREQ 0%@2133 GR3D_FREQ 0%@[305] VIC_FREQ 729 APE 200 CV0@-256C CPU@45.5C SOC2@43.875C SOC0@44.75C "
    "CV1@-256C GPU@-256C tj@45.5C SOC1@43.125C CV2@-256C VDD_IN 4073mW/4073mW VDD_CPU_GPU_CV 520mW/520mW "
    "VDD_SOC 1274mW/1274mW"
)
JP6 = (
    "11-29-2026 13:00:01 RAM 3030/7620MB (lfb 2x4MB) SWAP 0/3810MB (cached 0MB) CPU [12%@1510,3%@1510,0%@1510,"
    "1%@1510,2%@729,0%@729] GR3D_FREQ 97% cpu@48.281C soc2@46.968C soc0@47.5C gpu@50.187C tj@50.281C "
    "soc1@46.406C VDD_IN 9503mW/7001mW VDD_CPU_GPU_CV 4481mW/3150mW VDD_SOC 1865mW/1701mW"
)
JP7 = (
    "11-29-2026 13:00:02 RAM 20030/125772MB (lfb 12x4MB) CPU [5%@2601,4%@2601] EMC_FREQ 31%@3199 "
    "GR3D_FREQ 88%@[1575,1575] cpu@51.2C gpu@55.0C tj@57.1C VDD_GPU 61230mW/55010mW VDD_CPU_SOC_MSS "
    "20110mW/19800mW VIN 120450mW/118000mW"
)


def test_tegrastats_jp5():
    s = parse_line(JP5)
    assert s.timestamp is None and s.gpu_util == 0.0 and s.gpu_freq_mhz == 305.0
    assert s.emc_util == 0.0 and s.emc_freq_mhz == 2133.0 and s.ram_used_mb == 2448
    assert s.rails_w == {"VDD_IN": 4.073, "VDD_CPU_GPU_CV": 0.52, "VDD_SOC": 1.274}
    assert "GPU" not in s.temps_c and s.temps_c["CPU"] == 45.5  # -256C means "no sensor"


def test_tegrastats_jp6_no_clock_no_emc():
    s = parse_line(JP6)
    assert s.timestamp.hour == 13 and s.gpu_util == 0.97 and s.gpu_freq_mhz is None and s.emc_util is None
    assert s.rails_w["VDD_CPU_GPU_CV"] == 4.481  # current, not the running average
    assert s.temps_c["gpu"] == pytest.approx(50.187)


def test_tegrastats_jp7_per_gpc_clocks():
    s = parse_line(JP7)
    assert s.gpu_util == 0.88 and s.gpu_freq_mhz == 1575.0 and s.emc_util == 0.31
    assert s.rails_w["VDD_GPU"] == pytest.approx(61.23) and s.rails_w["VIN"] == pytest.approx(120.45)


@pytest.mark.parametrize("bad", ["hello world", "GR3D_FREQ 140% VDD_IN 1mW/1mW"])
def test_tegrastats_garbage(bad):
    with pytest.raises(ValueError):
        parse_line(bad)


def test_tegrastats_log_to_trace_and_bad_line(tmp_path):
    p = tmp_path / "t.log"
    p.write_text("\n".join([JP5, JP5.replace("GR3D_FREQ 0%", "GR3D_FREQ 55%"), ""]))
    tr = read_log(p)
    assert len(tr) == 2 and list(tr.df["util"]) == [0.0, 0.55] and tr.devices() == ["jetson:VDD_CPU_GPU_CV"]
    p.write_text(JP5 + "\nGARBAGE\n")
    with pytest.raises(InputError) as ei:
        read_log(p)
    assert ei.value.record == 2 and "t.log" in str(ei.value)
    ok = tmp_path / "ok.log"
    ok.write_text(JP6)
    (rep,) = open_sensors(f"tegrastats:{ok}", clock=VirtualClock())
    assert rep.info().kind == "replay" and rep.read().util == 0.97


def test_tegrastats_live_sensor_from_injected_lines():
    import threading

    fed, done = threading.Event(), threading.Event()

    def lines():
        yield JP6
        fed.set()
        done.wait(5)  # a live tegrastats keeps running

    s = TegrastatsSensor(lines(), clock=VirtualClock())
    assert fed.wait(2)
    r = s.read()
    assert r.util == 0.97 and r.power_w == pytest.approx(4.481) and r.temp_c == pytest.approx(50.187)
    done.set()
    s._thread.join(2)
    with pytest.raises(SensorError, match="stopped"):  # the process ended: stale data is not served
        s.read()
    bad = TegrastatsSensor(iter(["not tegrastats"]), clock=VirtualClock())
    bad._thread.join(2)
    with pytest.raises(SensorError, match="not a tegrastats line"):
        bad.read()


# ---------------------------------------------------------------------- RAPL
def test_rapl_two_sockets_sum_packages(tree):
    root = tree(RAPL2S)
    clk = VirtualClock()
    s = RaplSensor(root, clock=clk)
    info = s.info()
    assert info.name.startswith("Intel(R) Xeon(R) Gold 6338") and info.spec_key == "cpu"
    assert [z.key for z in s.zones] == ["package-0", "package-0.dram", "package-1", "package-1.dram"]
    r0 = s.read()
    assert r0.energy_j == 0.0 and r0.power_w is None
    pc = root / "sys/class/powercap"
    (pc / "intel-rapl:0/energy_uj").write_text(str(123456789012 + 50_000_000))
    (pc / "intel-rapl:1/energy_uj").write_text(str(98765432109 + 30_000_000))
    clk.advance(0.5)
    r1 = s.read()
    assert r1.energy_j == pytest.approx(80.0) and r1.power_w == pytest.approx(160.0)
    assert r1.extra["rapl_package-0_j"] == pytest.approx(50.0) and r1.extra["rapl_package-0.dram_j"] == 0.0


def test_rapl_wraparound(tree):
    root = tree(RAPL2S)
    clk = VirtualClock()
    z = root / "sys/class/powercap/intel-rapl:0/energy_uj"
    mx = 262143328850
    z.write_text(str(mx - 1_000_000))  # 1 J before the wrap
    s = RaplSensor(root, clock=clk)
    s.read()
    z.write_text("2000000")  # wrapped: 1 J + 2 J
    clk.advance(1.0)
    r = s.read()
    assert r.extra["rapl_package-0_j"] == pytest.approx(3.0) and r.power_w == pytest.approx(3.0)


def test_rapl_psys_not_added_and_mmio_twin_ignored():
    s = RaplSensor(LAPTOP, clock=VirtualClock())
    assert [z.key for z in s.zones] == ["package-0", "package-0.core", "package-0.uncore", "psys"]
    assert [z.key for z in s._packages] == ["package-0"]


def test_rapl_permission_error_explains_fix():
    with pytest.raises(SensorPermissionError) as ei:
        RaplSensor(RAPL2S, reader=_denying("energy_uj"))
    msg = str(ei.value)
    assert "root" in msg and "udev" in msg and "chmod o+r" in msg
    assert isinstance(ei.value, PermissionError)


def test_rapl_garbage_and_out_of_range(tree):
    root = tree(RAPL2S)
    s = RaplSensor(root, clock=VirtualClock())
    z = root / "sys/class/powercap/intel-rapl:1/energy_uj"
    z.write_text("\n")
    with pytest.raises(SensorError, match="expected a number"):
        s.read()
    z.write_text("999999999999999")
    with pytest.raises(SensorError, match="outside"):
        s.read()


def test_rapl_missing(tmp_path):
    with pytest.raises(SensorUnavailable, match="powercap"):
        RaplSensor(tmp_path)
    (tmp_path / "sys/class/powercap").mkdir(parents=True)
    with pytest.raises(SensorUnavailable, match="no RAPL package zones"):
        RaplSensor(tmp_path)


def test_open_sensors_unknown_spec_and_sim():
    with pytest.raises(InputError, match="unknown sensor spec"):
        open_sensors("gpu:0")
    with pytest.raises(InputError, match="replay:FILE"):
        open_sensors("replay")
