"""Stand-ins for the ``pynvml`` and ``amdsmi`` modules that replay recorded responses (tests/data/nvml,
tests/data/amdsmi). Each list in a file is the sequence of answers one device gives to one call (the last one
repeats); ``errors`` makes given calls raise the vendor exception. They are injected as constructor parameters
(``nvml=``, ``amdsmi=``), as the backends are designed to be tested. Shared by tests/test_sensors_vendor.py and
tests/test_sensors_amdsmi_api.py.
"""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path
from types import SimpleNamespace

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
