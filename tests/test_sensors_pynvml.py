"""The NVML backend through the REAL nvidia-ml-py wrappers, with a recorded C library underneath.

tests/test_sensors_vendor.py drives the backend with a Python stand-in for the ``pynvml`` module, which
cannot catch a wrong function name, a wrong ctypes structure or a wrong union member. Here the installed
``pynvml`` module itself is used: only its loaded ``libnvidia-ml.so`` (``pynvml.nvmlLib``) is replaced by
:class:`RecordedLib`, whose attributes are the C symbols pynvml looks up (``nvmlDeviceGetHandleByIndex_v2``,
``nvmlDeviceGetFieldValues``, ``nvmlGpmMetricsGet`` …). Each symbol fills pynvml's own ctypes out-parameters
from the recorded responses in tests/data/nvml and returns an ``nvmlReturn_t``, so every call of the backend
goes through pynvml's real argument packing, structures, error classes and string decoding.
"""

from __future__ import annotations

import ctypes
import json
from collections import defaultdict
from pathlib import Path

import pytest

pynvml = pytest.importorskip("pynvml")

from flopwatch.errors import SensorError  # noqa: E402
from flopwatch.telemetry.sampler import Sampler  # noqa: E402
from flopwatch.telemetry.schema import Gap  # noqa: E402
from flopwatch.telemetry.sensors.base import VirtualClock  # noqa: E402
from flopwatch.telemetry.sensors.nvml import open_nvml  # noqa: E402

DATA = Path(__file__).parent / "data" / "nvml"
SUCCESS, NOT_SUPPORTED = 0, 3
_HANDLE0 = 0x1000  # fake device handles are small non-null pointers: index = address - _HANDLE0


def _obj(arg):  # noqa: ANN001, ANN202 - a ctypes byref() argument → the object it points to
    return arg._obj


class RecordedLib:
    """Stands in for the loaded libnvidia-ml.so: one method per C symbol, answering from a recording."""

    def __init__(self, path: Path) -> None:
        doc = json.loads(path.read_text())
        self.driver = doc["driver"]
        self.devs = doc["devices"]
        self.calls: defaultdict[tuple[str, int], int] = defaultdict(int)
        self.gpm_samples: dict[int, tuple[int, int]] = {}  # address → (device, sample index)
        self.gpm_buffers: dict[int, ctypes.Array] = {}
        self.freed: list[int] = []
        self.symbols: set[str] = set()

    def __getattribute__(self, name: str):  # noqa: ANN204 - record which C symbols pynvml resolved
        if name.startswith("nvml"):
            object.__getattribute__(self, "symbols").add(name)
        return object.__getattribute__(self, name)

    # -- helpers
    def _dev(self, handle) -> int:  # noqa: ANN001
        return ctypes.cast(handle, ctypes.c_void_p).value - _HANDLE0

    def _next(self, name: str, d: int, key: str):  # noqa: ANN202
        i = self.calls[(name, d)]
        self.calls[(name, d)] += 1
        err = self.devs[d].get("errors", {}).get(name, {}).get(str(i))
        seq = self.devs[d][key]
        return err, seq[min(i, len(seq) - 1)]

    @staticmethod
    def _put_str(buf, text: str) -> int:  # noqa: ANN001
        buf.value = text.encode()
        return SUCCESS

    # -- library
    def nvmlInitWithFlags(self, flags):  # noqa: ANN001, ANN201, N802
        return SUCCESS

    def nvmlShutdown(self):  # noqa: ANN201, N802
        return SUCCESS

    def nvmlSystemGetDriverVersion(self, buf, size):  # noqa: ANN001, ANN201, N802
        return self._put_str(buf, self.driver)

    def nvmlDeviceGetCount_v2(self, count):  # noqa: ANN001, ANN201, N802
        _obj(count).value = len(self.devs)
        return SUCCESS

    def nvmlDeviceGetHandleByIndex_v2(self, index, handle):  # noqa: ANN001, ANN201, N802
        if index.value >= len(self.devs):
            return 2  # NVML_ERROR_INVALID_ARGUMENT
        ctypes.c_void_p.from_buffer(_obj(handle)).value = _HANDLE0 + index.value
        return SUCCESS

    def nvmlDeviceGetUUID(self, h, buf, size):  # noqa: ANN001, ANN201, N802
        return self._put_str(buf, self.devs[self._dev(h)]["uuid"])

    def nvmlDeviceGetName(self, h, buf, size):  # noqa: ANN001, ANN201, N802
        return self._put_str(buf, self.devs[self._dev(h)]["name"])

    def nvmlDeviceGetVbiosVersion(self, h, buf, size):  # noqa: ANN001, ANN201, N802
        return self._put_str(buf, self.devs[self._dev(h)]["vbios"])

    def nvmlDeviceGetSerial(self, h, buf, size):  # noqa: ANN001, ANN201, N802
        return self._put_str(buf, self.devs[self._dev(h)]["serial"])

    def nvmlDeviceGetEnforcedPowerLimit(self, h, out):  # noqa: ANN001, ANN201, N802
        _obj(out).value = self.devs[self._dev(h)]["power_limit_mw"]
        return SUCCESS

    # -- readings
    def nvmlDeviceGetFieldValues(self, h, count, values):  # noqa: ANN001, ANN201, N802
        d = self._dev(h)
        arr = _obj(values)
        for k in range(count.value):
            v = arr[k]
            f = self.devs[d]["fields"][str(v.fieldId)]
            v.nvmlReturn = f["ret"]
            if f["ret"] == SUCCESS:
                _, val = self._next(f"field{v.fieldId}", d, "fields_seq_" + str(v.fieldId))
                v.valueType = pynvml.NVML_VALUE_TYPE_UNSIGNED_INT
                v.value.uiVal = val
        return SUCCESS  # per-field status in nvmlReturn, as the driver does

    def nvmlDeviceGetPowerUsage(self, h, out):  # noqa: ANN001, ANN201, N802
        err, v = self._next("nvmlDeviceGetPowerUsage", self._dev(h), "power_usage_mw")
        _obj(out).value = v
        return err or SUCCESS

    def nvmlDeviceGetTotalEnergyConsumption(self, h, out):  # noqa: ANN001, ANN201, N802
        err, v = self._next("nvmlDeviceGetTotalEnergyConsumption", self._dev(h), "total_energy_mj")
        _obj(out).value = v
        return err or SUCCESS

    def nvmlDeviceGetUtilizationRates(self, h, out):  # noqa: ANN001, ANN201, N802
        err, (g, m) = self._next("nvmlDeviceGetUtilizationRates", self._dev(h), "utilization")
        u = _obj(out)
        u.gpu, u.memory = g, m
        return err or SUCCESS

    def nvmlDeviceGetClockInfo(self, h, kind, out):  # noqa: ANN001, ANN201, N802
        key = "clock_sm_mhz" if kind.value == pynvml.NVML_CLOCK_SM else "clock_mem_mhz"
        err, v = self._next(key, self._dev(h), key)
        _obj(out).value = v
        return err or SUCCESS

    def nvmlDeviceGetTemperature(self, h, sensor, out):  # noqa: ANN001, ANN201, N802
        assert sensor.value == pynvml.NVML_TEMPERATURE_GPU
        err, v = self._next("temp", self._dev(h), "temperature_c")
        _obj(out).value = v
        return err or SUCCESS

    # -- GPM
    def nvmlGpmQueryDeviceSupport(self, h, out):  # noqa: ANN001, ANN201, N802
        sup = _obj(out)
        assert sup.version == pynvml.NVML_GPM_SUPPORT_VERSION
        sup.isSupportedDevice = int(self.devs[self._dev(h)]["gpm_supported"])
        return SUCCESS

    def nvmlGpmSampleAlloc(self, out):  # noqa: ANN001, ANN201, N802
        buf = ctypes.create_string_buffer(16)  # an opaque sample needs only a unique, live address
        addr = ctypes.addressof(buf)
        self.gpm_buffers[addr] = buf
        ctypes.c_void_p.from_buffer(_obj(out)).value = addr
        return SUCCESS

    def nvmlGpmSampleGet(self, h, sample):  # noqa: ANN001, ANN201, N802
        d = self._dev(h)
        i = self.calls[("gpm_sample", d)]
        self.calls[("gpm_sample", d)] += 1
        self.gpm_samples[ctypes.cast(sample, ctypes.c_void_p).value] = (d, i)
        return SUCCESS

    def nvmlGpmSampleFree(self, sample):  # noqa: ANN001, ANN201, N802
        addr = ctypes.cast(sample, ctypes.c_void_p).value
        self.freed.append(addr)
        self.gpm_buffers.pop(addr)
        return SUCCESS

    def nvmlGpmMetricsGet(self, mg_ref):  # noqa: ANN001, ANN201, N802
        mg = _obj(mg_ref)
        assert mg.version == pynvml.NVML_GPM_METRICS_GET_VERSION
        d1, i1 = self.gpm_samples[ctypes.cast(mg.sample1, ctypes.c_void_p).value]
        d2, i2 = self.gpm_samples[ctypes.cast(mg.sample2, ctypes.c_void_p).value]
        assert d1 == d2 and i2 == i1 + 1  # consecutive samples of one GPU
        for k in range(mg.numMetrics):
            m = mg.metrics[k]
            seq = self.devs[d2]["gpm"][str(m.metricId)]
            m.value = seq[min(i2, len(seq) - 1)]
            m.nvmlReturn = SUCCESS
        return SUCCESS


@pytest.fixture
def real_pynvml(monkeypatch: pytest.MonkeyPatch):  # noqa: ANN201
    """The installed pynvml with its C library replaced by a recording (restored after the test)."""

    def load(name: str) -> RecordedLib:
        lib = RecordedLib(DATA / name)
        for d in lib.devs:  # field answers as per-call sequences
            for fid, f in d["fields"].items():
                d["fields_seq_" + fid] = f.get("uiVal", [0])
        monkeypatch.setattr(pynvml, "nvmlLib", lib)
        monkeypatch.setattr(pynvml, "_nvmlGetFunctionPointer_cache", {})
        return lib

    return load


def test_a100_through_real_pynvml(real_pynvml) -> None:  # noqa: ANN001
    lib = real_pynvml("a100_driver535.json")
    clk = VirtualClock()
    sensors = open_nvml(nvml=pynvml, clock=clk)
    assert [s.uuid for s in sensors] == [d["uuid"] for d in lib.devs]  # bytes decoded to str by pynvml
    info = sensors[0].info()
    # POWER_INSTANT/AVERAGE answer NOT_SUPPORTED per field on this driver: the fallback is GetPowerUsage.
    assert info.fingerprint["power_source"] == "nvmlDeviceGetPowerUsage"
    assert (
        info.fingerprint["driver"] == "535.104.05" and info.spec_key == "a100-sxm4-40gb"
    )  # the fixture is an SXM4-40GB
    rs = []
    for _ in range(4):
        rs.append(sensors[0].read())
        clk.advance(1.0)
    assert rs[3].power_w == pytest.approx(328.901) and rs[3].util == 1.0 and rs[3].mem_util == 0.44
    assert rs[3].sm_clock_mhz == 1410 and rs[3].temp_c == 51 and rs[3].extra["power_limit_w"] == 400.0
    assert [r.energy_j for r in rs] == pytest.approx([0.0, 312.7, 641.6, 972.8])
    for s in sensors:
        s.close()
    # Every C symbol the backend needed exists under that name in the real NVML API that pynvml binds.
    assert {
        "nvmlDeviceGetHandleByIndex_v2",
        "nvmlDeviceGetFieldValues",
        "nvmlDeviceGetTotalEnergyConsumption",
    } <= (lib.symbols)


def test_h100_instant_power_gpm_counter_reset_and_lost_gpu(real_pynvml) -> None:  # noqa: ANN001
    lib = real_pynvml("h100_driver550.json")
    clk = VirtualClock()
    (s,) = open_nvml(nvml=pynvml, clock=clk)
    info = s.info()
    assert info.fingerprint["power_source"] == "field POWER_INSTANT"
    assert {"tensor_util", "dram_bw_util"} <= set(info.capabilities)
    items = []
    Sampler([s], 2.0, sinks=[items.append]).run(n_ticks=6)
    # field 186 (NVML_FI_DEV_POWER_INSTANT) read through pynvml's c_nvmlFieldValue_t union, in mW
    assert items[1].power_w == pytest.approx(611.84)
    # GPM: c_nvmlGpmMetricsGet_t filled over two consecutive samples, percent → ratio
    assert "tensor_util" not in items[0].extra
    assert items[1].extra["tensor_util"] == pytest.approx(0.715)
    assert items[1].extra["dram_bw_util"] == pytest.approx(0.38)
    # total-energy counter went backwards (driver reload): bridged, flagged, never negative
    assert items[2].extra["energy_reset"] == 1.0 and items[2].energy_j > items[1].energy_j
    # NVML_ERROR_GPU_IS_LOST (15) raised by pynvml as its own NVMLError subclass → our SensorError → a gap
    gap = items[4]
    assert isinstance(gap, Gap) and "GPU is lost" in gap.error
    s.close()
    # Every GPM sample pynvml allocated for us was handed back (a daemon reads for months).
    assert lib.gpm_buffers == {}


def test_nvml_error_classes_are_translated(real_pynvml) -> None:  # noqa: ANN001
    lib = real_pynvml("h100_driver550.json")
    (s,) = open_nvml(nvml=pynvml, clock=VirtualClock())
    lib.devs[0]["errors"] = {"nvmlDeviceGetTotalEnergyConsumption": {"0": 999}}  # NVML_ERROR_UNKNOWN
    lib.calls.clear()
    with pytest.raises(SensorError, match=s.uuid):
        s.read()
    s.close()


def test_backend_uses_only_names_pynvml_defines() -> None:
    """Every ``nvml*``/``NVML_*``/``c_nvml*`` name the backend looks up exists in the installed pynvml."""
    import re

    src = (Path(__file__).parents[1] / "src/flopwatch/telemetry/sensors/nvml.py").read_text()
    names = set(re.findall(r"\bn\.(nvml\w+|NVML_\w+|c_nvml\w+)", src))
    names |= set(re.findall(r'"(NVML_\w+)"', src))
    names |= set(re.findall(r"self\._nvml\.(nvml\w+)", src))
    assert len(names) > 20
    missing = sorted(n for n in names if not hasattr(pynvml, n))
    assert missing == []
