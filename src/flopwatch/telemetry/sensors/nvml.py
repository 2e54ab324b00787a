"""NVIDIA GPUs through NVML (the ``pynvml`` module of nvidia-ml-py), one sensor per GPU, keyed by UUID.

What is read, and why (NVML API reference, "Device Queries" and "Field Value Queries"):

* Power: ``NVML_FI_DEV_POWER_INSTANT`` (mW) where the driver supports it, else ``NVML_FI_DEV_POWER_AVERAGE``,
  else ``nvmlDeviceGetPowerUsage`` (mW; on Ampere and later a ~1 s average, which smooths short workloads).
  Support is probed once per GPU, at construction.
* Energy: ``nvmlDeviceGetTotalEnergyConsumption`` (mJ since the driver was loaded; Volta and later). A counter
  that goes backwards means the driver was reloaded: the sensor keeps its own cumulative energy (J since the sensor
  opened), bridges that one interval with the trapezoid of power, and marks it ``extra_energy_reset=1``.
* Utilisation (gpu, memory, %), SM and memory clocks (MHz), enforced power limit (mW), temperature (°C).
* GPM (Hopper and later, ``nvmlGpmQueryDeviceSupport``): tensor-core and DRAM-bandwidth utilisation over the
  interval between two GPM samples, as ``extra_tensor_util`` and ``extra_dram_bw_util`` (0–1).

Every ``NVMLError`` becomes :class:`SensorError` at this boundary. The NVML module is a constructor parameter
(``nvml=``), so tests drive this backend with recorded responses and no GPU.
"""

from __future__ import annotations

from types import ModuleType
from typing import Any

from flopwatch.errors import SensorError, SensorUnavailable
from flopwatch.telemetry.schema import Reading
from flopwatch.telemetry.sensors import _libref
from flopwatch.telemetry.sensors._counter import ResetAwareEnergy
from flopwatch.telemetry.sensors.base import Clock, MonotonicClock, SensorInfo
from flopwatch.units import mj_to_j, mw_to_w


def _load_nvml(nvml: Any | None) -> Any:
    if nvml is not None:
        return nvml
    try:
        import pynvml  # type: ignore[import-not-found]
    except ImportError:
        raise SensorUnavailable("nvidia-ml-py is not installed (pip install 'flopwatch[nvidia]')") from None
    return pynvml


def _init(nvml: Any) -> None:
    """nvmlInit with reference counting, so several sensors can share (and shut down) the library."""
    _libref.acquire(
        nvml, nvml.nvmlInit, errors=nvml.NVMLError,
        unavailable="NVML could not initialise: {} (no NVIDIA driver or GPU?)",
    )  # fmt: skip


def _shutdown(nvml: Any) -> None:
    _libref.release(nvml, nvml.nvmlShutdown, errors=nvml.NVMLError)


def _str(v: Any) -> str:
    return v.decode() if isinstance(v, bytes) else str(v)


#: ``nvmlValueType_t`` → member of the ``nvmlValue_t`` union that holds the value (nvml.h).
_VALUE_MEMBER = {0: "dVal", 1: "uiVal", 2: "ulVal", 3: "ullVal", 4: "sllVal", 5: "siVal", 6: "usVal"}


def _field_value(v: Any) -> float:
    """The number in an ``nvmlFieldValue_t``, read through the union member its ``valueType`` names."""
    return float(getattr(v.value, _VALUE_MEMBER.get(int(getattr(v, "valueType", 1)), "uiVal")))


class NvmlSensor:
    """One NVIDIA GPU (``index``) through NVML."""

    def __init__(
        self, index: int = 0, *, nvml: ModuleType | Any | None = None, clock: Clock | None = None
    ) -> None:
        self._nvml = _load_nvml(nvml)
        self._clock = clock or MonotonicClock()
        _init(self._nvml)
        self._closed = False
        n = self._nvml
        try:
            self.handle = n.nvmlDeviceGetHandleByIndex(index)
            self.index = index
            self.uuid = _str(n.nvmlDeviceGetUUID(self.handle))
            self.name = _str(n.nvmlDeviceGetName(self.handle))
        except n.NVMLError as e:
            self.close()
            raise SensorUnavailable(f"NVML GPU {index}: {e}") from None
        self._fp = self._fingerprint()
        self._power_field = self._probe_power_field()
        self._has_energy = self._try(n.nvmlDeviceGetTotalEnergyConsumption, self.handle) is not None
        self._gpm = self._probe_gpm()
        self._gpm_prev: Any = None
        self._counter = ResetAwareEnergy()

    # ------------------------------------------------------------------ probing
    def _try(self, fn: Any, *args: Any) -> Any:
        try:
            return fn(*args)
        except self._nvml.NVMLError:
            return None

    def _fingerprint(self) -> dict[str, str]:
        n = self._nvml
        fp = {"name": self.name, "uuid": self.uuid}
        for key, fn, args in (
            ("driver", getattr(n, "nvmlSystemGetDriverVersion", None), ()),
            ("vbios", getattr(n, "nvmlDeviceGetVbiosVersion", None), (self.handle,)),
            ("serial", getattr(n, "nvmlDeviceGetSerial", None), (self.handle,)),
        ):
            if fn is not None:
                v = self._try(fn, *args)
                if v is not None:
                    fp[key] = _str(v)
        lim = self._try(n.nvmlDeviceGetEnforcedPowerLimit, self.handle)
        if lim is not None:
            fp["power_limit_w"] = f"{mw_to_w(lim):g}"
        return fp

    def _probe_power_field(self) -> int | None:
        """The first of POWER_INSTANT / POWER_AVERAGE this driver answers, else None (use GetPowerUsage)."""
        n = self._nvml
        for name in ("NVML_FI_DEV_POWER_INSTANT", "NVML_FI_DEV_POWER_AVERAGE"):
            fid = getattr(n, name, None)
            if fid is None or not hasattr(n, "nvmlDeviceGetFieldValues"):
                continue
            vals = self._try(n.nvmlDeviceGetFieldValues, self.handle, [fid])
            if vals and getattr(vals[0], "nvmlReturn", 1) == getattr(n, "NVML_SUCCESS", 0):
                return fid
        return None

    def _probe_gpm(self) -> bool:
        n = self._nvml
        if not hasattr(n, "nvmlGpmQueryDeviceSupport"):
            return False
        sup = self._try(n.nvmlGpmQueryDeviceSupport, self.handle)
        return bool(sup is not None and getattr(sup, "isSupportedDevice", 0))

    @property
    def clock(self) -> Clock:
        return self._clock

    def info(self) -> SensorInfo:
        caps = ["power_w", "util", "mem_util", "sm_clock_mhz", "temp_c"]
        if self._has_energy:
            caps.insert(1, "energy_j")
        if self._gpm:
            caps += ["tensor_util", "dram_bw_util"]
        fp = dict(self._fp)
        fp["power_source"] = {
            getattr(self._nvml, "NVML_FI_DEV_POWER_INSTANT", -1): "field POWER_INSTANT",
            getattr(self._nvml, "NVML_FI_DEV_POWER_AVERAGE", -2): "field POWER_AVERAGE",
        }.get(self._power_field, "nvmlDeviceGetPowerUsage")
        from flopwatch.devices import resolve

        spec = resolve(self.name)
        spec_key = spec.key if spec is not None else None
        return SensorInfo(
            kind="nvml",
            device_id=self.uuid,
            name=self.name,
            fingerprint=fp,
            capabilities=tuple(caps),
            spec_key=spec_key,
        )

    # ------------------------------------------------------------------ reading
    def _power_mw(self) -> float:
        n = self._nvml
        if self._power_field is not None:
            v = n.nvmlDeviceGetFieldValues(self.handle, [self._power_field])[0]
            if getattr(v, "nvmlReturn", 0) == getattr(n, "NVML_SUCCESS", 0):
                return _field_value(v)
        return float(n.nvmlDeviceGetPowerUsage(self.handle))

    def _energy(self, t: float, power_w: float, extra: dict[str, float]) -> float | None:
        if not self._has_energy:
            return None
        mj = float(self._nvml.nvmlDeviceGetTotalEnergyConsumption(self.handle))
        # A driver reload restarts the counter from 0: bridged with power and flagged, never a negative delta.
        return self._counter.update(mj_to_j(mj), t, power_w, extra)

    def _gpm_free(self, sample: Any) -> None:
        if sample is not None and hasattr(self._nvml, "nvmlGpmSampleFree"):
            self._try(self._nvml.nvmlGpmSampleFree, sample)

    def _gpm_metrics(self, extra: dict[str, float]) -> None:
        n = self._nvml
        cur = n.nvmlGpmSampleAlloc()
        try:
            n.nvmlGpmSampleGet(self.handle, cur)
        except n.NVMLError:
            self._gpm_free(cur)  # a daemon reads for months: never leak a sample per failed read
            raise
        prev, self._gpm_prev = self._gpm_prev, cur
        if prev is None:
            return
        try:
            self._gpm_compute(prev, cur, extra)
        finally:
            self._gpm_free(prev)

    def _gpm_compute(self, prev: Any, cur: Any, extra: dict[str, float]) -> None:
        n = self._nvml
        mg = n.c_nvmlGpmMetricsGet_t()
        mg.version = n.NVML_GPM_METRICS_GET_VERSION
        mg.numMetrics = 2
        mg.sample1, mg.sample2 = prev, cur
        mg.metrics[0].metricId = n.NVML_GPM_METRIC_ANY_TENSOR_UTIL
        mg.metrics[1].metricId = n.NVML_GPM_METRIC_DRAM_BW_UTIL
        n.nvmlGpmMetricsGet(mg)
        for i, key in ((0, "tensor_util"), (1, "dram_bw_util")):
            m = mg.metrics[i]
            if getattr(m, "nvmlReturn", 0) == getattr(n, "NVML_SUCCESS", 0):
                extra[key] = float(m.value) / 100.0  # GPM reports percent

    def read(self) -> Reading:
        if self._closed:
            raise SensorError(f"NVML sensor {self.uuid} is closed")
        n = self._nvml
        t = self._clock.now()
        extra: dict[str, float] = {}
        try:
            power = mw_to_w(self._power_mw())
            energy = self._energy(t, power, extra)
            u = n.nvmlDeviceGetUtilizationRates(self.handle)
            sm = float(n.nvmlDeviceGetClockInfo(self.handle, n.NVML_CLOCK_SM))
            extra["mem_clock_mhz"] = float(n.nvmlDeviceGetClockInfo(self.handle, n.NVML_CLOCK_MEM))
            extra["power_limit_w"] = mw_to_w(n.nvmlDeviceGetEnforcedPowerLimit(self.handle))
            temp = float(n.nvmlDeviceGetTemperature(self.handle, n.NVML_TEMPERATURE_GPU))
            if self._gpm:
                self._gpm_metrics(extra)
        except n.NVMLError as e:
            raise SensorError(f"NVML GPU {self.index} ({self.uuid}): {e}") from None
        if not 0 <= u.gpu <= 100 or not 0 <= u.memory <= 100:
            raise SensorError(f"NVML GPU {self.index}: utilisation out of range ({u.gpu}%, {u.memory}%)")
        return Reading(
            t_s=t,
            wall_time=self._clock.wall_time(),
            device=self.uuid,
            power_w=power,
            energy_j=energy,
            util=u.gpu / 100.0,
            mem_util=u.memory / 100.0,
            sm_clock_mhz=sm,
            temp_c=temp,
            extra=extra,
        )

    @property
    def counter_resets(self) -> int:
        return self._counter.resets

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            self._gpm_free(getattr(self, "_gpm_prev", None))  # close() also runs from a failed __init__
            self._gpm_prev = None
            _shutdown(self._nvml)


def open_nvml(
    arg: str | None = None, *, nvml: Any | None = None, clock: Clock | None = None
) -> list[NvmlSensor]:
    """Sensors for all GPUs (``arg`` None), GPU index ``N``, or the GPU whose UUID is ``arg``."""
    n = _load_nvml(nvml)
    _init(n)
    try:
        try:
            count = int(n.nvmlDeviceGetCount())
        except n.NVMLError as e:
            raise SensorUnavailable(f"NVML: cannot count GPUs: {e}") from None
        if count == 0:
            raise SensorUnavailable("NVML: no NVIDIA GPUs found")
        if arg is None or arg == "":
            return [NvmlSensor(i, nvml=n, clock=clock) for i in range(count)]
        if arg.isdigit():
            i = int(arg)
            if i >= count:
                raise SensorUnavailable(f"NVML: GPU index {i} out of range (found {count})")
            return [NvmlSensor(i, nvml=n, clock=clock)]
        for i in range(count):
            s = NvmlSensor(i, nvml=n, clock=clock)
            if s.uuid == arg or s.uuid.startswith(arg):
                return [s]
            s.close()
        raise SensorUnavailable(f"NVML: no GPU with UUID {arg}")
    finally:
        _shutdown(n)  # sensors hold their own reference
