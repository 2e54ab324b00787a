"""CPU package energy from Linux RAPL through the powercap framework (``/sys/class/powercap``).

Each zone ``intel-rapl:N`` (package) and subzone ``intel-rapl:N:M`` (core, uncore, dram) exposes
``name``, ``energy_uj`` (a wrapping µJ counter) and ``max_energy_range_uj`` (where it wraps)
(Linux Documentation/power/powercap/powercap.rst). AMD Zen CPUs appear under the same ``intel-rapl``
names. The sensor's energy is the sum of the package zones (``psys``, when present, already covers the
whole platform and is reported separately, never added); subzones are extras.

Since Linux 5.10 ``energy_uj`` is readable by root only (CVE-2020-8694, "PLATYPUS"): a permission error
raises :class:`SensorPermissionError` naming the two fixes.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from flopwatch.errors import SensorError, SensorUnavailable
from flopwatch.telemetry.schema import Reading
from flopwatch.telemetry.sensors._sysfs import Reader, default_reader, read_number, read_text, under
from flopwatch.telemetry.sensors.base import Clock, MonotonicClock, SensorInfo
from flopwatch.units import counter_delta, uj_to_j

POWERCAP = "/sys/class/powercap"
PERMISSION_FIX = (
    "energy_uj is root-only since Linux 5.10 (CVE-2020-8694). Run flopwatch as root, or add a udev rule such as "
    '/etc/udev/rules.d/90-rapl.rules: SUBSYSTEM=="powercap", ACTION=="add", RUN+="/bin/chmod o+r '
    '/sys%p/energy_uj" (then reboot or `udevadm trigger`).'
)
_ZONE = re.compile(r"^intel-rapl:(\d+)(?::(\d+))?$")


@dataclass
class _Zone:
    path: Path
    name: str
    max_range_uj: float | None
    top: bool
    parent: str = ""
    prev_uj: float | None = None
    total_uj: float = 0.0

    @property
    def key(self) -> str:
        # "package-0", "package-0.dram" …: stable, readable column names
        return self.name if self.top else f"{self.parent}.{self.name}"


class RaplSensor:
    """CPU package power/energy from RAPL zones under ``root`` (default ``/``)."""

    def __init__(
        self,
        root: str | Path = "/",
        *,
        reader: Reader | None = None,
        clock: Clock | None = None,
    ) -> None:
        self.root = Path(root)
        self._read = reader or default_reader
        self._clock = clock or MonotonicClock()
        base = under(root, POWERCAP)
        if not base.is_dir():
            raise SensorUnavailable(f"no powercap directory at {base} (not Linux, or RAPL driver not loaded)")
        zones: list[_Zone] = []
        names: dict[str, str] = {}
        for d in sorted(base.iterdir()):
            m = _ZONE.match(d.name)
            if not m or not (d / "energy_uj").exists():
                continue
            name = read_text(d / "name", self._read) if (d / "name").exists() else d.name
            names[m.group(1)] = names.get(m.group(1), name) if m.group(2) else name
            rng = d / "max_energy_range_uj"
            zones.append(
                _Zone(
                    path=d,
                    name=name,
                    max_range_uj=read_number(rng, self._read) if rng.exists() else None,
                    top=m.group(2) is None,
                    parent="" if m.group(2) is None else names.get(m.group(1), f"zone{m.group(1)}"),
                )
            )
        self.zones = zones
        self._packages = [z for z in zones if z.top and z.name.startswith("package")]
        if not self._packages:
            raise SensorUnavailable(f"no RAPL package zones under {base}")
        # identification needs one read: tells `flopwatch sensors` about the permission problem up front
        read_number(self._packages[0].path / "energy_uj", self._read, fix=PERMISSION_FIX)
        self._prev_t: float | None = None
        self._prev_e: float | None = None

    @property
    def clock(self) -> Clock:
        return self._clock

    def info(self) -> SensorInfo:
        model = ""
        cpuinfo = under(self.root, "/proc/cpuinfo")
        if cpuinfo.exists():
            try:
                for line in self._read(cpuinfo).splitlines():
                    if line.startswith("model name"):
                        model = line.split(":", 1)[1].strip()
                        break
            except OSError:
                pass
        return SensorInfo(
            kind="rapl",
            device_id="cpu:rapl",
            name=model or "CPU (RAPL)",
            fingerprint={"cpu": model, "zones": ",".join(z.key for z in self.zones)},
            capabilities=("power_w", "energy_j"),
            spec_key="cpu",
        )

    def read(self) -> Reading:
        t = self._clock.now()
        extra: dict[str, float] = {}
        for z in self.zones:
            raw = read_number(z.path / "energy_uj", self._read, fix=PERMISSION_FIX)
            if z.max_range_uj is not None and not 0 <= raw <= z.max_range_uj:
                raise SensorError(f"{z.path / 'energy_uj'}: {raw:.0f} outside [0, max_energy_range_uj]")
            if z.prev_uj is not None:
                d = counter_delta(z.prev_uj, raw, z.max_range_uj)
                if d is None:
                    raise SensorError(f"{z.path / 'energy_uj'} went backwards with no wrap range")
                z.total_uj += d
            z.prev_uj = raw
            extra[f"rapl_{z.key}_j"] = uj_to_j(z.total_uj)
        energy = sum(uj_to_j(z.total_uj) for z in self._packages)
        power = None
        if self._prev_t is not None and self._prev_e is not None and t > self._prev_t:
            power = (energy - self._prev_e) / (t - self._prev_t)
        self._prev_t, self._prev_e = t, energy
        return Reading(
            t_s=t,
            wall_time=self._clock.wall_time(),
            device="cpu:rapl",
            power_w=power,
            energy_j=energy,
            extra=extra,
        )

    def close(self) -> None:
        pass
