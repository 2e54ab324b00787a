"""NVIDIA Jetson (Orin) power, GPU load and EMC activity from sysfs.

Rails: the INA3221 monitors under ``/sys/bus/i2c/drivers/ina3221/*/hwmon/hwmon*/``, one channel per rail,
found by ``in*_label``; rail power = ``in*_input`` (mV) × ``curr*_input`` (mA) (Jetson Linux Developer
Guide, "Platform Power and Performance → Jetson Orin Nano/NX/AGX Orin → Software-Based Power Consumption
Modeling"). Orin Nano/NX rails: VDD_IN (module input), VDD_CPU_GPU_CV, VDD_SOC. AGX Orin has two INA3221s:
VDD_GPU_SOC, VDD_CPU_CV, VIN_SYS_5V0 and VDDQ_VDD2_1V8AO (unconnected channels are labelled ``NC``).
The "sum of shunt voltages" channel is skipped (it is a sum, not a rail).

``power_w`` is the rail the seed study integrated — VDD_CPU_GPU_CV on Orin Nano/NX (its idle baseline of
642 mW is that rail), VDD_GPU_SOC on AGX Orin — unless ``rail=`` names another; every rail is also an extra
``rail_<LABEL>_w``.

GPU load: devfreq ``load`` in permille (``/sys/class/devfreq/<gpu>/device/load`` and older locations), GPU
clock from devfreq ``cur_freq``. EMC: actmon's average memory-controller activity (kHz of busy EMC cycles;
``/sys/kernel/debug/bpmp/debug/actmon/mc_all_avg_activity`` needs root and debugfs,
``/sys/kernel/actmon_avg_activity/mc_all`` on older L4T) and the EMC rate
(``/sys/kernel/debug/bpmp/debug/clk/emc/rate`` in Hz). ``mem_util`` = activity / rate, and
``dram_bytes_per_s`` = activity × bytes per EMC cycle, where bytes per cycle = datasheet peak bandwidth /
max EMC rate (Orin Nano 8 GB: 102.4 GB/s at 3199 MHz → 32 B; AGX Orin: 204.8 GB/s at 3199 MHz → 64 B;
Jetson Orin series datasheets DS-11105, DS-10662). Like the study's TB-moved, this is an activity-derived
estimate, not a measured byte count.
"""

from __future__ import annotations

import glob
from dataclasses import dataclass
from pathlib import Path

from flopwatch.errors import SensorError, SensorUnavailable
from flopwatch.telemetry.schema import Reading
from flopwatch.telemetry.sensors._sysfs import Reader, default_reader, read_number, read_text, under
from flopwatch.telemetry.sensors.base import Clock, MonotonicClock, SensorInfo
from flopwatch.units import mv_ma_to_w

INA3221 = "/sys/bus/i2c/drivers/ina3221"
SKIP_LABELS = ("sum of shunt voltages", "NC")
#: Preferred primary rail, in order (see module docstring).
PRIMARY_RAILS = ("VDD_CPU_GPU_CV", "VDD_GPU_SOC", "VDD_GPU", "VDD_IN", "VIN_SYS_5V0", "VIN")
GPU_LOAD_GLOBS = (
    "/sys/class/devfreq/*/device/load",
    "/sys/class/devfreq/*/load",
    "/sys/devices/platform/bus@0/17000000.ga10b/load",
    "/sys/devices/platform/17000000.ga10b/load",
    "/sys/devices/gpu.0/load",
)
GPU_NAMES = ("ga10b", "gv11b", "gp10b", "gb10b", "gpu")
ACTMON_PATHS = (
    "/sys/kernel/debug/bpmp/debug/actmon/mc_all_avg_activity",
    "/sys/kernel/debug/bpmp/debug/actmon/mc_all",
    "/sys/kernel/actmon_avg_activity/mc_all",
)
EMC_RATE_PATHS = (
    "/sys/kernel/debug/bpmp/debug/clk/emc/rate",
    "/sys/kernel/debug/clk/emc/clk_rate",
)
#: Bytes per EMC cycle = peak DRAM bandwidth / max EMC rate (datasheets DS-11105, DS-10662).
BYTES_PER_EMC_CYCLE = {"agx orin": 64.0, "orin nano": 32.0, "orin nx": 32.0}


@dataclass(frozen=True)
class Rail:
    label: str
    voltage: Path  # in*_input, mV
    current: Path  # curr*_input, mA


def find_rails(root: str | Path, reader: Reader) -> list[Rail]:
    """Every labelled INA3221 rail under ``root`` (sum channel and unconnected channels skipped)."""
    rails: list[Rail] = []
    pattern = str(under(root, INA3221) / "*" / "hwmon" / "hwmon*" / "in*_label")
    for lab in sorted(glob.glob(pattern)):
        p = Path(lab)
        label = read_text(p, reader)
        if not label or label in SKIP_LABELS or label.lower().startswith("sum of"):
            continue
        ch = p.name[len("in") : -len("_label")]
        v, c = p.with_name(f"in{ch}_input"), p.with_name(f"curr{ch}_input")
        if v.exists() and c.exists():
            rails.append(Rail(label, v, c))
    return rails


def _first_existing(root: str | Path, patterns: tuple[str, ...], prefer: tuple[str, ...] = ()) -> Path | None:
    for pat in patterns:
        hits = sorted(glob.glob(str(under(root, pat))))
        if prefer:
            hits = [h for h in hits if any(n in h for n in prefer)]
        if hits:
            return Path(hits[0])
    return None


class JetsonSensor:
    """One Jetson module: rail power, GPU load/clock, EMC activity, from the sysfs tree under ``root``."""

    def __init__(
        self,
        root: str | Path = "/",
        *,
        rail: str | None = None,
        reader: Reader | None = None,
        clock: Clock | None = None,
        bytes_per_emc_cycle: float | None = None,
    ) -> None:
        self.root = Path(root)
        self._read = reader or default_reader
        self._clock = clock or MonotonicClock()
        self.rails = find_rails(root, self._read)
        if not self.rails:
            raise SensorUnavailable(f"no INA3221 rails under {under(root, INA3221)} (not a Jetson?)")
        labels = [r.label for r in self.rails]
        if rail is not None and rail not in labels:
            raise SensorUnavailable(f"rail {rail!r} not found (rails: {', '.join(labels)})")
        self.primary = rail or next((r for r in PRIMARY_RAILS if r in labels), labels[0])
        self.model = self._model()
        self.load_path = _first_existing(root, GPU_LOAD_GLOBS, prefer=GPU_NAMES)
        self.freq_path = None
        if self.load_path is not None:
            for cand in (self.load_path.parent / "cur_freq", self.load_path.parent.parent / "cur_freq"):
                if cand.exists():
                    self.freq_path = cand
                    break
        self.actmon_path = _first_existing(root, ACTMON_PATHS)
        self.emc_rate_path = _first_existing(root, EMC_RATE_PATHS)
        low = self.model.lower()
        self.bytes_per_emc_cycle = bytes_per_emc_cycle or next(
            (v for k, v in BYTES_PER_EMC_CYCLE.items() if k in low), None
        )

    def _model(self) -> str:
        p = under(self.root, "/proc/device-tree/model")
        if p.exists():
            try:
                return read_text(p, self._read).rstrip("\x00")
            except SensorError:
                return "Jetson"
        return "Jetson"

    def _fingerprint(self) -> dict[str, str]:
        fp = {
            "model": self.model,
            "rails": ",".join(r.label for r in self.rails),
            "primary_rail": self.primary,
        }
        for key, path in (("l4t", "/etc/nv_tegra_release"), ("nvpmodel", "/var/lib/nvpmodel/status")):
            p = under(self.root, path)
            if p.exists():
                try:
                    fp[key] = read_text(p, self._read).splitlines()[0][:120]
                except (SensorError, IndexError):
                    pass
        return fp

    @property
    def clock(self) -> Clock:
        return self._clock

    def info(self) -> SensorInfo:
        caps = ["power_w"]
        if self.load_path:
            caps.append("util")
        if self.freq_path:
            caps.append("sm_clock_mhz")
        if self.actmon_path and self.emc_rate_path:
            caps.append("mem_util")
            if self.bytes_per_emc_cycle:
                caps.append("dram_bytes_per_s")
        low = self.model.lower()
        return SensorInfo(
            kind="jetson",
            device_id=f"jetson:{self.primary}",
            name=self.model,
            fingerprint=self._fingerprint(),
            capabilities=tuple(caps),
            spec_key="orin-nano" if "orin nano" in low else None,
        )

    def read(self) -> Reading:
        t = self._clock.now()
        extra: dict[str, float] = {}
        for r in self.rails:
            mv = read_number(r.voltage, self._read)
            ma = read_number(r.current, self._read)
            if mv < 0 or ma < -50:  # small negative currents are shunt noise at idle; large ones are garbage
                raise SensorError(f"{r.label}: implausible reading {mv} mV × {ma} mA")
            extra[f"rail_{r.label}_w"] = mv_ma_to_w(mv, max(ma, 0.0))
        util = freq = mem_util = dram = None
        if self.load_path is not None:
            load = read_number(self.load_path, self._read)
            if not 0 <= load <= 1000:
                raise SensorError(f"{self.load_path}: load {load} outside 0–1000 permille")
            util = load / 1000.0
        if self.freq_path is not None:
            freq = read_number(self.freq_path, self._read) / 1e6
        if self.actmon_path is not None and self.emc_rate_path is not None:
            act_hz = read_number(self.actmon_path, self._read) * 1e3  # actmon reports kHz
            rate_hz = read_number(self.emc_rate_path, self._read)
            extra["emc_activity_hz"] = act_hz
            extra["emc_rate_mhz"] = rate_hz / 1e6
            if rate_hz > 0:
                mem_util = min(1.0, max(0.0, act_hz / rate_hz))
            if self.bytes_per_emc_cycle:
                dram = act_hz * self.bytes_per_emc_cycle
        return Reading(
            t_s=t,
            wall_time=self._clock.wall_time(),
            device=f"jetson:{self.primary}",
            power_w=extra[f"rail_{self.primary}_w"],
            util=util,
            mem_util=mem_util,
            dram_bytes_per_s=dram,
            sm_clock_mhz=freq,
            extra=extra,
        )

    def close(self) -> None:
        pass
