"""NVML and amdsmi backends driven by recorded responses (tests/data/nvml, tests/data/amdsmi).

The fake modules below replay those JSON files: each list is the sequence of answers one device gives to
one call (the last one repeats), ``errors`` makes given calls raise the vendor exception. They are injected
as constructor parameters (``nvml=``, ``amdsmi=``), exactly as the backends are designed to be tested.
"""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path
from types import SimpleNamespace

import pytest

from flopwatch.errors import SensorError, SensorUnavailable
from flopwatch.telemetry.sampler import Sampler
from flopwatch.telemetry.sensors.amd import open_amd
from flopwatch.telemetry.sensors.base import VirtualClock
from flopwatch.telemetry.sensors.discover import open_sensors
from flopwatch.telemetry.sensors.nvml import open_nvml
from flopwatch.telemetry.trace import Trace

DATA = Path(__file__).parent / "data"


class FakeNVMLError(Exception):
    def __init__(self, value):
        super().__init__(f"NVML error {value}")
        self.value = value


class FakeNVML:
    """Just enough of the pynvml surface, answering from a recorded JSON file."""

    NVMLError = FakeNVMLError
    NVML_SUCCESS = 0
    NVML_FI_DEV_POWER_AVERAGE = 185
    NVML_FI_DEV_POWER_INSTANT = 186
    NVML_CLOCK_SM = 1
    NVML_CLOCK_MEM = 2
    NVML_TEMPERATURE_GPU = 0
    NVML_GPM_METRIC_ANY_TENSOR_UTIL = 5
    NVML_GPM_METRIC_DRAM_BW_UTIL = 10
    NVML_GPM_METRICS_GET_VERSION = 1

    def __init__(self, path, *, init_error=None):
        self.data = json.loads(Path(path).read_text())
        self.devs = self.data["devices"]
        self.calls = defaultdict(int)
        self.init_error = init_error
        self.inits = 0
        self.shutdowns = 0

    # bookkeeping -------------------------------------------------------
    def _n(self, name, h):
        i = self.calls[(name, h)]
        self.calls[(name, h)] += 1
        err = self.devs[h].get("errors", {}).get(name, {}).get(str(i))
        if err is not None:
            raise FakeNVMLError(err)
        return i

    @staticmethod
    def _at(seq, i):
        return seq[min(i, len(seq) - 1)]

    # library -----------------------------------------------------------
    def nvmlInit(self):
        if self.init_error is not None:
            raise FakeNVMLError(self.init_error)
        self.inits += 1

    def nvmlShutdown(self):
        self.shutdowns += 1

    def nvmlSystemGetDriverVersion(self):
        return self.data["driver"]

    def nvmlDeviceGetCount(self):
        return len(self.devs)

    def nvmlDeviceGetHandleByIndex(self, i):
        if i >= len(self.devs):
            raise FakeNVMLError(2)
        return i

    def nvmlDeviceGetUUID(self, h):
        return self.devs[h]["uuid"]

    def nvmlDeviceGetName(self, h):
        return self.devs[h]["name"]

    def nvmlDeviceGetVbiosVersion(self, h):
        return self.devs[h]["vbios"]

    def nvmlDeviceGetSerial(self, h):
        return self.devs[h]["serial"]

    def nvmlDeviceGetEnforcedPowerLimit(self, h):
        return self.devs[h]["power_limit_mw"]

    def nvmlDeviceGetFieldValues(self, h, ids):
        out = []
        for fid in ids:
            i = self._n(f"field{fid}", h)
            f = self.devs[h]["fields"][str(fid)]
            val = (
                SimpleNamespace(uiVal=self._at(f["uiVal"], i)) if f["ret"] == 0 else SimpleNamespace(uiVal=0)
            )
            out.append(SimpleNamespace(fieldId=fid, nvmlReturn=f["ret"], value=val))
        return out

    def nvmlDeviceGetPowerUsage(self, h):
        return self._at(self.devs[h]["power_usage_mw"], self._n("nvmlDeviceGetPowerUsage", h))

    def nvmlDeviceGetTotalEnergyConsumption(self, h):
        return self._at(self.devs[h]["total_energy_mj"], self._n("nvmlDeviceGetTotalEnergyConsumption", h))

    def nvmlDeviceGetUtilizationRates(self, h):
        g, m = self._at(self.devs[h]["utilization"], self._n("nvmlDeviceGetUtilizationRates", h))
        return SimpleNamespace(gpu=g, memory=m)

    def nvmlDeviceGetClockInfo(self, h, kind):
        key = "clock_sm_mhz" if kind == self.NVML_CLOCK_SM else "clock_mem_mhz"
        return self._at(self.devs[h][key], self._n(key, h))

    def nvmlDeviceGetTemperature(self, h, sensor):
        return self._at(self.devs[h]["temperature_c"], self._n("temp", h))

    # GPM ---------------------------------------------------------------
    def nvmlGpmQueryDeviceSupport(self, h):
        return SimpleNamespace(isSupportedDevice=int(self.devs[h]["gpm_supported"]))

    def nvmlGpmSampleAlloc(self):
        return SimpleNamespace(h=None)

    def nvmlGpmSampleGet(self, h, sample):
        sample.h = h
        sample.i = self._n("gpm_sample", h)

    def nvmlGpmSampleFree(self, sample):
        pass

    class c_nvmlGpmMetricsGet_t:  # noqa: N801 - mirrors the pynvml name
        def __init__(self):
            self.metrics = [SimpleNamespace(metricId=0, nvmlReturn=0, value=0.0) for _ in range(4)]

    def nvmlGpmMetricsGet(self, mg):
        h, i = mg.sample2.h, mg.sample2.i
        for m in mg.metrics[: mg.numMetrics]:
            m.value = self._at(self.devs[h]["gpm"][str(m.metricId)], i)
        return mg


class FakeAmdSmiException(Exception):
    pass


class FakeAmdSmi:
    AmdSmiException = FakeAmdSmiException
    AmdSmiClkType = SimpleNamespace(GFX="gfx")
    AmdSmiTemperatureType = SimpleNamespace(HOTSPOT="hotspot")
    AmdSmiTemperatureMetric = SimpleNamespace(CURRENT="current")

    def __init__(self, path):
        self.devs = json.loads(Path(path).read_text())["devices"]
        self.calls = defaultdict(int)

    def _next(self, key, h):
        i = self.calls[(key, h)]
        self.calls[(key, h)] += 1
        seq = self.devs[h][key]
        return seq[min(i, len(seq) - 1)]

    def amdsmi_init(self):
        pass

    def amdsmi_shut_down(self):
        pass

    def amdsmi_get_processor_handles(self):
        return list(range(len(self.devs)))

    def amdsmi_get_gpu_asic_info(self, h):
        return self.devs[h]["asic"]

    def amdsmi_get_gpu_device_uuid(self, h):
        return self.devs[h]["uuid"]

    def amdsmi_get_power_info(self, h):
        return self._next("power", h)

    def amdsmi_get_energy_count(self, h):
        return self._next("energy", h)

    def amdsmi_get_gpu_activity(self, h):
        return self._next("activity", h)

    def amdsmi_get_clock_info(self, h, kind):
        return self._next("clock_gfx", h)

    def amdsmi_get_temp_metric(self, h, kind, metric):
        return self._next("temp_hotspot", h)


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
    assert e[2] - e[1] == pytest.approx(0.5 * (611.84 + 603.3) * 0.5)
    # utilisation call 4 raised NVML_ERROR_GPU_IS_LOST: a gap with the error, counted
    gap = items[4]
    assert not hasattr(gap, "power_w") and "NVML error 15" in gap.error
    assert sampler.stats.n_gaps[s.uuid] == 1 and sampler.stats.n_samples[s.uuid] == 5
    tr = Trace.from_readings(items)
    assert tr.df["extra_energy_reset"].max() == 1.0 and len(tr.gaps) == 1
    assert s.counter_resets == 1


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
    a = Lib()
    _libref.acquire(a, lambda: calls.append("init a"))
    _libref.acquire(a, lambda: calls.append("init a again"))  # shared: no second init
    assert calls == ["init a"]
    n_before = len(_libref._refs)
    del a  # leaked: never released
    gc.collect()
    assert len(_libref._refs) == n_before - 1
    for _ in range(50):  # new objects (some at a reused address) always get their own init
        b = Lib()
        _libref.acquire(b, lambda: calls.append("init b"))
        _libref.release(b, lambda: calls.append("shutdown b"))
        del b
    assert calls.count("init b") == 50 and calls.count("shutdown b") == 50
