"""AMD Instinct/Radeon GPUs through amdsmi (ROCm's ``amdsmi`` Python package), one sensor per GPU.

(AMD SMI Python API reference, ROCm 6.x.) Power: ``amdsmi_get_power_info`` returns ``current_socket_power``
on MI300-class parts and ``average_socket_power`` on older ones (W; ``"N/A"`` when unsupported) — we use
the current value when the GPU reports one, else the average. Energy: ``amdsmi_get_energy_count`` returns
an accumulator and its ``counter_resolution`` in µJ per count (key ``energy_accumulator``; ``power`` in
ROCm < 6.1); energy = accumulator × resolution. The 64-bit accumulator does not wrap in practice, but a
backward step (driver reload) is handled like NVML's: bridged with power and flagged ``energy_reset``.
Activity: ``amdsmi_get_gpu_activity`` ``gfx_activity`` (→ util) and ``umc_activity`` (memory controller →
mem_util), in %. The module is a constructor parameter (``amdsmi=``) so tests run on recorded responses.
"""

from __future__ import annotations

from typing import Any

from flopwatch.errors import SensorError, SensorUnavailable
from flopwatch.telemetry.schema import Reading
from flopwatch.telemetry.sensors import _libref
from flopwatch.telemetry.sensors._counter import ResetAwareEnergy
from flopwatch.telemetry.sensors.base import Clock, MonotonicClock, SensorInfo
from flopwatch.units import uj_to_j


def _load(amdsmi: Any | None) -> Any:
    if amdsmi is not None:
        return amdsmi
    import contextlib
    import io

    chatter = io.StringIO()  # amdsmi prints to stdout when libamd_smi is missing: keep `--json` output pure
    try:
        with contextlib.redirect_stdout(chatter), contextlib.redirect_stderr(chatter):
            import amdsmi as mod  # type: ignore[import-not-found]
    except ImportError as e:
        raise SensorUnavailable(f"amdsmi is not installed (pip install 'flopwatch[amd]'): {e}") from None
    except (KeyError, OSError) as e:  # the package is there but libamd_smi.so is not (no ROCm)
        raise SensorUnavailable(f"amdsmi cannot load libamd_smi (ROCm not installed?): {e!r}") from None
    return mod


def _exc(m: Any) -> tuple[type[BaseException], ...]:
    """The amdsmi exception classes (the package exports the subclasses, not always their base)."""
    names = (
        "AmdSmiException",
        "AmdSmiLibraryException",
        "AmdSmiRetryException",
        "AmdSmiParameterException",
        "AmdSmiKeyException",
        "AmdSmiTimeoutException",
    )
    found = tuple(
        c for n in names if isinstance(c := getattr(m, n, None), type) and issubclass(c, BaseException)
    )
    return found or (OSError,)


def _init(m: Any) -> None:
    _libref.acquire(
        m, m.amdsmi_init, errors=_exc(m), unavailable="amdsmi could not initialise: {} (no amdgpu driver?)"
    )


def _shutdown(m: Any) -> None:
    _libref.release(m, m.amdsmi_shut_down, errors=_exc(m))


#: All-ones "not supported" markers of the amdsmi C structs (uint16/32/64). The Python layer turns only
#: 0xFFFF into "N/A"; a wider field left at its maximum must not become a 4.3 GW power reading.
_UNSUPPORTED = (0xFFFF, 0xFFFFFFFF, 0xFFFFFFFFFFFFFFFF)


def _num(v: Any, *, gauge: bool = False) -> float | None:
    """amdsmi reports unsupported values as the string "N/A" (or, for gauges, an all-ones integer)."""
    if isinstance(v, bool) or v is None:
        return None
    if gauge and isinstance(v, int) and v in _UNSUPPORTED:
        return None
    try:
        return float(v)
    except (TypeError, ValueError):
        return None


class AmdSensor:
    """One AMD GPU: socket power, energy accumulator, gfx/umc activity, clock, temperature."""

    def __init__(self, handle: Any, index: int, *, amdsmi: Any, clock: Clock | None = None) -> None:
        self._m = amdsmi
        self.handle = handle
        self.index = index
        self._clock = clock or MonotonicClock()
        _init(self._m)
        self._closed = False
        try:
            asic = self._m.amdsmi_get_gpu_asic_info(handle)
            self.name = str(asic.get("market_name") or "AMD GPU")
            self.uuid = str(self._m.amdsmi_get_gpu_device_uuid(handle))
        except _exc(self._m) as e:
            self.close()
            raise SensorUnavailable(f"amdsmi GPU {index}: {e}") from None
        self._asic = {
            k: str(v) for k, v in asic.items() if k in ("market_name", "device_id", "rev_id", "asic_serial")
        }
        self._counter = ResetAwareEnergy()

    @property
    def clock(self) -> Clock:
        return self._clock

    def info(self) -> SensorInfo:
        from flopwatch.devices import resolve

        spec = resolve(self.name)
        key = spec.key if spec is not None else None
        return SensorInfo(
            kind="amd",
            device_id=self.uuid,
            name=self.name,
            fingerprint={**self._asic, "uuid": self.uuid},
            capabilities=("power_w", "energy_j", "util", "mem_util", "sm_clock_mhz", "temp_c"),
            spec_key=key,
        )

    def _counter_j(self) -> float | None:
        e = self._m.amdsmi_get_energy_count(self.handle)
        acc = _num(e.get("energy_accumulator", e.get("power")))
        res = _num(e.get("counter_resolution"))
        if acc is None or res is None:
            return None
        return uj_to_j(acc * res)

    def read(self) -> Reading:
        if self._closed:
            raise SensorError(f"amdsmi sensor {self.uuid} is closed")
        m = self._m
        t = self._clock.now()
        extra: dict[str, float] = {}
        try:
            p = m.amdsmi_get_power_info(self.handle)
            # current (MI300+) > generic socket_power (ROCm >= 6.2 names) > average (older parts)
            power = next(
                (
                    v
                    for k in ("current_socket_power", "socket_power", "average_socket_power")
                    if (v := _num(p.get(k), gauge=True)) is not None
                ),
                None,
            )
            if power is None:
                raise SensorError(f"amdsmi GPU {self.index}: no socket power reported ({p})")
            lim = _num(p.get("power_limit"), gauge=True)
            if lim is not None:
                extra["power_limit_w"] = lim / 1e6 if lim > 1e5 else lim  # µW on some releases
            cj = self._counter_j()
            act = m.amdsmi_get_gpu_activity(self.handle)
            gfx, umc = _num(act.get("gfx_activity"), gauge=True), _num(act.get("umc_activity"), gauge=True)
            clk = m.amdsmi_get_clock_info(self.handle, m.AmdSmiClkType.GFX)
            temp = _num(
                m.amdsmi_get_temp_metric(
                    self.handle, m.AmdSmiTemperatureType.HOTSPOT, m.AmdSmiTemperatureMetric.CURRENT
                )
            )
        except _exc(m) as e:
            raise SensorError(f"amdsmi GPU {self.index} ({self.uuid}): {e}") from None
        energy = None
        if cj is not None:  # a backward step (driver reload) is bridged with power and flagged
            energy = self._counter.update(cj, t, power, extra)
        for name, v in (("gfx_activity", gfx), ("umc_activity", umc)):
            if v is not None and not 0 <= v <= 100:
                raise SensorError(f"amdsmi GPU {self.index}: {name} {v} outside 0–100 %")
        return Reading(
            t_s=t,
            wall_time=self._clock.wall_time(),
            device=self.uuid,
            power_w=power,
            energy_j=energy,
            util=None if gfx is None else gfx / 100.0,
            mem_util=None if umc is None else umc / 100.0,
            sm_clock_mhz=_num(clk.get("clk"), gauge=True),
            temp_c=temp,
            extra=extra,
        )

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            _shutdown(self._m)


def open_amd(
    arg: str | None = None, *, amdsmi: Any | None = None, clock: Clock | None = None
) -> list[AmdSensor]:
    """Sensors for all AMD GPUs, or GPU index ``arg``."""
    m = _load(amdsmi)
    _init(m)
    try:
        try:
            handles = list(m.amdsmi_get_processor_handles())
        except _exc(m) as e:
            raise SensorUnavailable(f"amdsmi: cannot list GPUs: {e}") from None
        if not handles:
            raise SensorUnavailable("amdsmi: no AMD GPUs found")
        if arg:
            if not arg.isdigit() or int(arg) >= len(handles):
                raise SensorUnavailable(f"amdsmi: no GPU {arg!r} (found {len(handles)})")
            return [AmdSensor(handles[int(arg)], int(arg), amdsmi=m, clock=clock)]
        return [AmdSensor(h, i, amdsmi=m, clock=clock) for i, h in enumerate(handles)]
    finally:
        _shutdown(m)
