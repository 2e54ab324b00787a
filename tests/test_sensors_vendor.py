"""NVML and amdsmi backends driven by recorded responses (tests/data/nvml, tests/data/amdsmi).

The fake modules below replay those JSON files: each list is the sequence of answers one device gives to
one call (the last one repeats), ``errors`` makes given calls raise the vendor exception. They are injected
as constructor parameters (``nvml=``, ``amdsmi=``), exactly as the backends are designed to be tested.
"""

from __future__ import annotations

import pytest

from flopwatch.errors import SensorError, SensorUnavailable
from flopwatch.telemetry.sampler import Sampler
from flopwatch.telemetry.sensors.amd import open_amd
from flopwatch.telemetry.sensors.base import VirtualClock
from flopwatch.telemetry.sensors.discover import open_sensors
from flopwatch.telemetry.sensors.nvml import open_nvml
from flopwatch.telemetry.trace import Trace
from vendor_fakes import DATA, FakeAmdSmi, FakeAmdSmiException, FakeNVML  # noqa: E402


# ---------------------------------------------------------------------- NVML
def test_nvml_a100_one_sensor_per_gpu_power_usage_fallback():
    nv = FakeNVML(DATA / "nvml" / "a100_driver535.json")
    clk = VirtualClock()
    sensors = open_nvml(nvml=nv, clock=clk)
    assert [s.info().device_id for s in sensors] == [d["uuid"] for d in nv.devs]
    info = sensors[0].info()
    assert (
        info.fingerprint["power_source"] == "nvmlDeviceGetPowerUsage"
    )  # fields not supported on this driver
    assert info.fingerprint["driver"] == "535.104.05" and info.spec_key == "a100-sxm4-40gb"  # its own entry
    assert "energy_j" in info.capabilities and "tensor_util" not in info.capabilities
    readings = []
    for _ in range(4):
        readings.append(sensors[0].read())
        clk.advance(1.0)
    r = readings[3]
    assert r.power_w == pytest.approx(328.901) and r.util == 1.0 and r.mem_util == 0.44
    assert r.sm_clock_mhz == 1410 and r.temp_c == 51 and r.extra["power_limit_w"] == 400.0
    # energy is J since the sensor opened, from the mJ counter
    assert [x.energy_j for x in readings] == pytest.approx([0.0, 312.7, 641.6, 972.8])
    for s in sensors:
        s.close()
    assert nv.shutdowns == 1  # reference counted: the library is shut down once, after the last sensor


def test_nvml_select_by_index_and_uuid_prefix():
    nv = FakeNVML(DATA / "nvml" / "a100_driver535.json")
    (s,) = open_nvml("1", nvml=nv)
    assert s.uuid.startswith("GPU-0f9e")
    (s2,) = open_nvml("GPU-6a1c", nvml=nv)
    assert s2.index == 0
    with pytest.raises(SensorUnavailable, match="out of range"):
        open_nvml("7", nvml=nv)
    with pytest.raises(SensorUnavailable, match="no GPU with UUID"):
        open_nvml("GPU-ffff", nvml=nv)


def test_nvml_init_failure_is_unavailable():
    nv = FakeNVML(DATA / "nvml" / "a100_driver535.json", init_error=9)  # NVML_ERROR_DRIVER_NOT_LOADED
    with pytest.raises(SensorUnavailable, match="NVML could not initialise"):
        open_sensors("nvml", nvml=nv)


def test_nvml_h100_instant_field_gpm_reset_and_error():
    nv = FakeNVML(DATA / "nvml" / "h100_driver550.json")
    clk = VirtualClock()
    (s,) = open_nvml(nvml=nv, clock=clk)
    info = s.info()
    assert info.fingerprint["power_source"] == "field POWER_INSTANT"
    assert {"tensor_util", "dram_bw_util"} <= set(info.capabilities)
    items = []
    sampler = Sampler([s], 2.0, sinks=[items.append])
    sampler.run(n_ticks=6)
    r1 = items[1]
    assert r1.power_w == pytest.approx(611.84)  # POWER_INSTANT, not the averaged GetPowerUsage (560 W)
    assert r1.extra["tensor_util"] == pytest.approx(0.715) and r1.extra["dram_bw_util"] == pytest.approx(0.38)
    assert "tensor_util" not in items[0].extra  # GPM needs two samples
    # call 3 of the energy counter went backwards (driver reload): bridged with power, flagged, never negative
    r2 = items[2]
    assert r2.extra.get("energy_reset") == 1.0
    e = [x.energy_j for x in items[:3]]
    assert e[1] == pytest.approx(299.11)
    # the bridge spans the two reads' own instants: the sampler jitters them within their periods (seed 0
    # under a virtual clock), so the interval is the readings' t_s difference, not the nominal 0.5 s
    dt = r2.t_s - r1.t_s
    assert dt == pytest.approx(sampler.deadline_s(0.0, 2) - sampler.deadline_s(0.0, 1))
    assert e[2] - e[1] == pytest.approx(0.5 * (611.84 + 603.3) * dt)
    # utilisation call 4 raised NVML_ERROR_GPU_IS_LOST: a gap with the error, counted
    gap = items[4]
    assert not hasattr(gap, "power_w") and "NVML error 15" in gap.error
    assert sampler.stats.n_gaps[s.uuid] == 1 and sampler.stats.n_samples[s.uuid] == 5
    tr = Trace.from_readings(items)
    assert tr.df["extra_energy_reset"].max() == 1.0 and len(tr.gaps) == 1
    assert s.counter_resets == 1
    s.close()  # leaves no library reference behind for later tests
    assert nv.shutdowns == 1


def test_nvml_garbage_utilisation_is_sensor_error():
    nv = FakeNVML(DATA / "nvml" / "a100_driver535.json")
    nv.devs[0]["utilization"] = [[250, 0]]
    (s, _) = open_nvml(nvml=nv)
    with pytest.raises(SensorError, match="out of range"):
        s.read()


# ---------------------------------------------------------------------- AMD
def test_amd_mi300x_current_power_energy_activity():
    m = FakeAmdSmi(DATA / "amdsmi" / "mi300x_rocm62.json")
    clk = VirtualClock()
    (s,) = open_amd(amdsmi=m, clock=clk)
    info = s.info()
    assert info.name == "AMD Instinct MI300X" and info.kind == "amd"
    rs = []
    for _ in range(3):
        rs.append(s.read())
        clk.advance(0.5)
    assert [r.power_w for r in rs] == [142, 688, 702]
    assert rs[0].extra["power_limit_w"] == 750.0  # reported in µW by this release
    assert rs[1].util == 0.99 and rs[1].mem_util == 0.37 and rs[1].sm_clock_mhz == 2100 and rs[1].temp_c == 71
    # energy = accumulator × 15.3 µJ
    assert rs[1].energy_j == pytest.approx((81234599262 - 81234567890) * 15.3e-6)
    assert rs[2].energy_j == pytest.approx((81234645151 - 81234567890) * 15.3e-6)


def test_amd_mi210_average_power_old_energy_key_and_garbage_activity():
    m = FakeAmdSmi(DATA / "amdsmi" / "mi210_rocm60.json")
    (s,) = open_amd("0", amdsmi=m, clock=VirtualClock())
    r0, r1 = s.read(), s.read()
    assert r0.power_w == 43 and r0.extra["power_limit_w"] == 300
    assert r1.energy_j == pytest.approx(3277 * 15.259e-6)
    with pytest.raises(SensorError, match="gfx_activity 255"):
        s.read()
    with pytest.raises(SensorUnavailable):
        open_amd("3", amdsmi=m)


def test_amd_unavailable_without_rocm():
    # the real amdsmi package is installed here but libamd_smi.so is not: a clear reason, not a crash
    from flopwatch.telemetry.sensors.discover import probe_all

    (amd,) = [b for b in probe_all() if b.kind == "amd"]
    assert not amd.available and amd.reason


def test_amd_library_error_becomes_sensor_error():
    m = FakeAmdSmi(DATA / "amdsmi" / "mi300x_rocm62.json")
    (s,) = open_amd(amdsmi=m, clock=VirtualClock())

    def boom(h):
        raise FakeAmdSmiException("AMDSMI_STATUS_DRIVER_NOT_LOADED")

    m.amdsmi_get_gpu_activity = boom
    with pytest.raises(SensorError, match="DRIVER_NOT_LOADED"):
        s.read()


def test_library_refcount_is_per_object_and_dies_with_it():
    """A leaked reference to one (fake) library must never skip another library object's init, even when
    Python reuses the dead object's address (the old id()-keyed count did, making init errors flaky)."""
    import gc

    from flopwatch.telemetry.sensors import _libref

    class Lib:
        pass

    calls: list[str] = []
    kw = {"errors": OSError, "unavailable": "fake library: {}"}
    a = Lib()
    _libref.acquire(a, lambda: calls.append("init a"), **kw)
    _libref.acquire(a, lambda: calls.append("init a again"), **kw)  # shared: no second init
    assert calls == ["init a"]

    def n_ours() -> int:  # this test's entries only: other tests' leaked libraries may die at the same gc
        return sum(isinstance(k, Lib) for k in list(_libref._refs.keys()))

    assert n_ours() == 1 and _libref._refs[a] == 2
    del a  # leaked: never released
    gc.collect()
    assert n_ours() == 0
    for _ in range(50):  # new objects (some at a reused address) always get their own init
        b = Lib()
        _libref.acquire(b, lambda: calls.append("init b"), **kw)
        _libref.release(b, lambda: calls.append("shutdown b"), errors=OSError)
        del b
    assert calls.count("init b") == 50 and calls.count("shutdown b") == 50


def test_library_init_error_is_unavailable_and_takes_no_reference():
    """An init failing with the library's own error is SensorUnavailable naming it, and leaves no reference
    (the next sensor tries init again); a failing shutdown is ignored."""
    from flopwatch.errors import SensorUnavailable
    from flopwatch.telemetry.sensors import _libref

    class Lib:
        pass

    def boom() -> None:
        raise OSError("driver gone")

    lib = Lib()
    with pytest.raises(SensorUnavailable, match=r"^fake could not initialise: driver gone \(no driver\?\)$"):
        _libref.acquire(lib, boom, errors=OSError, unavailable="fake could not initialise: {} (no driver?)")
    assert _libref._refs.get(lib, 0) == 0
    _libref.acquire(lib, lambda: None, errors=OSError, unavailable="{}")
    _libref.release(lib, boom, errors=OSError)  # the last reference: shutdown raises, ignored
    assert _libref._refs[lib] == 0
