"""When each power/energy sensor actually looks: averaging window and update period, per device and sensor.

A reading is not a measurement of the instant it is taken. It is the sensor's last result, which averaged the
signal over some *window* and is refreshed every *update period*. Whatever happens outside the windows — or
between two point samples of a sensor that keeps no cumulative counter — is invisible to the verifier, and an
evader who knows the timing can put work there (issue 21, "the sensor sees all the time"). This table is the
verifier's knowledge of that timing; :func:`check_sampling` turns it into two things:

* ``unobserved_fraction`` of wall time no reading reflects at a given sampling rate (the estimator bounds that
  time at the device's peak: it feeds ``Observables.unobserved_s``);
* ``warnings`` when the sampling rate is below what the sensor needs (the verdict never says "below" then).

Every entry cites its source. Where a value is not published for a device, the entry says so
(``assumption``) and takes the conservative side (a shorter window, a longer blind part).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

from flopwatch.devices import resolve
from flopwatch.errors import InputError

#: The monitor's detector polls every 1.5 s (Fowler 2026, detection daemon): a counter read more slowly than
#: this cannot place a workload's start and end, whatever the sensor.
DETECTOR_POLL_S = 1.5
#: Sensor kinds that are not a measurement of the device being judged (a trace replayed from a file, the
#: simulator): estimate.verdict flags them.
REPLAY_SENSOR_KINDS = ("replay", "sim", "simulated")

_YANG = (
    "Yang, Adamek & Armour, 'Accurate and Convenient Energy Measurements for GPUs: A Detailed Study of NVIDIA "
    "GPU's Built-In Power Sensor', SC 2024 (arXiv:2312.02741): on A100 and H100 the power reading averages "
    "25 ms of every 100 ms — 75 % of the runtime is not sampled"
)
_INA3221 = (
    "TI INA3221 datasheet (SBOS576D), §8.4.1/Table 'Configuration Register': power-on default CONFIG = 7127h: "
    "averaging 1 sample, bus and shunt conversion 1.1 ms each, 3 channels in continuous mode → one reading per "
    "channel every 3 × (1.1 + 1.1) = 6.6 ms, integrating its shunt over 1.1 ms of it; no energy accumulator"
)
_NVML_API = (
    "NVML API reference, nvmlDeviceGetTotalEnergyConsumption (mJ since driver load, Volta and newer) and "
    "nvmlDeviceGetPowerUsage"
)


@dataclass(frozen=True)
class SensorTiming:
    """How one sensor of one device samples the physical signal.

    ``window_s``: the span of signal one reading averages; ``update_period_s``: how often the reading changes;
    ``cumulative``: the sensor keeps an energy counter that integrates the signal over every window (so time
    between *our* reads is still counted), ``blind_fraction``: share of wall time that no window covers even if
    every update is read (1 − window/period for part-time sensors; 0 for a sensor that integrates all the time).
    """

    device: str  # devices.py key, or "*" for every device of a vendor/sensor
    sensor: str  # "nvml-power" | "nvml-energy" | "ina3221" | "dcgm-prof" | "rapl" | "sim"
    window_s: float
    update_period_s: float
    cumulative: bool
    blind_fraction: float
    source: str
    assumption: bool = False

    @property
    def min_rate_hz(self) -> float:
        """The slowest sampling that loses nothing the sensor measured: every update for a point sensor, the
        detector's poll for a cumulative counter (its integral spans our reads)."""
        if self.cumulative:
            return 1.0 / DETECTOR_POLL_S
        return 1.0 / self.update_period_s

    def to_dict(self) -> dict[str, Any]:
        return {
            "device": self.device,
            "sensor": self.sensor,
            "window_s": self.window_s,
            "update_period_s": self.update_period_s,
            "cumulative": self.cumulative,
            "blind_fraction": self.blind_fraction,
            "min_rate_hz": self.min_rate_hz,
            "source": self.source,
            "assumption": self.assumption,
        }


def _part_time(
    device: str, sensor: str, cumulative: bool, source: str, assumption: bool = False
) -> SensorTiming:
    return SensorTiming(device, sensor, 0.025, 0.100, cumulative, 0.75, source, assumption)


_TABLE: tuple[SensorTiming, ...] = (
    # NVML on Ampere GA100 and Hopper: 25 ms of every 100 ms (Yang et al. measured A100 and H100).
    _part_time("a100", "nvml-power", False, _YANG),
    _part_time("h100", "nvml-power", False, _YANG),
    _part_time(
        "h200",
        "nvml-power",
        False,
        _YANG + "; H200 not measured there — assumption: the same Hopper board-power sensor as the H100",
        True,
    ),
    # The energy counter is fed by the same part-time power samples (Yang et al. §5 compare it with the power
    # readings; no separate integrator is documented), so it counts every update but is blind to the same 75 %.
    _part_time(
        "a100",
        "nvml-energy",
        True,
        _NVML_API + "; " + _YANG + " — assumption: the counter integrates the same part-time samples",
        True,
    ),
    _part_time(
        "h100",
        "nvml-energy",
        True,
        _NVML_API + "; " + _YANG + " — assumption: the counter integrates the same part-time samples",
        True,
    ),
    _part_time(
        "h200",
        "nvml-energy",
        True,
        _NVML_API
        + "; "
        + _YANG
        + " — assumption: as the H100 (same sensor), counter fed by the same samples",
        True,
    ),
    # Jetson Orin Nano: the INA3221 on the carrier board, read through hwmon sysfs (point readings, no counter).
    SensorTiming("orin-nano", "ina3221", 0.0011, 0.0066, False, 1.0 - 0.0011 / 0.0066, _INA3221),
    # DCGM profiling counters (pipe activity, DRAM active) count every cycle between two reads of the
    # hardware performance monitor: cumulative over the whole interval, no blind part.
    SensorTiming(
        "*",
        "dcgm-prof",
        0.0,
        1.0,
        True,
        0.0,
        "NVIDIA DCGM user guide, 'Profiling Metrics' (DCGM_FI_PROF_*: ratios over the sample interval, from "
        "hardware performance counters that count every cycle); default update 1 s",
    ),
    # Intel RAPL: a 32-bit energy counter updated about every 1 ms, integrating all the time. It measures the CPU
    # package only: a row claiming RAPL for a GPU names a sensor that does not see it (round 7: it was "*", so such
    # a row was fully observed; now "sensor timing unknown" on a GPU model, the whole run unobserved).
    SensorTiming(
        "cpu",
        "rapl",
        0.000976,
        0.000976,
        True,
        0.0,
        "Intel SDM Vol. 3B §15.10.3 (MSR_PKG_ENERGY_STATUS, updated ~every 1 ms); Khan et al., 'RAPL in Action', "
        "ACM TOMPECS 3(2), 2018",
    ),
    # The digital twin's read-out emulates the real sensor (sim/artefacts.py SensorModel, SIMULATED): NVML's
    # part-time updates with a counter on the data-centre GPUs, and on the Orin a full-duty 100 ms average
    # refreshed every 100 ms with no counter.
    SensorTiming(
        "*", "sim", 0.025, 0.100, True, 0.75, "flopwatch.sim SensorModel 'nvml' (SIMULATED), after " + _YANG
    ),
    SensorTiming(
        "orin-nano",
        "sim",
        0.100,
        0.100,
        False,
        0.0,
        "flopwatch.sim SensorModel 'ina3221' (SIMULATED): 100 ms sysfs",
    ),
)

#: The longest update period of any energy counter in the table (NVML: 100 ms). Two reads closer together than
#: this may see one whole update's energy appear at once, so a counter step is judged against at least this span.
ENERGY_COUNTER_MAX_UPDATE_S = 0.100

TABLE: Mapping[tuple[str, str], SensorTiming] = MappingProxyType({(s.device, s.sensor): s for s in _TABLE})


def _device_key(device: str) -> str:
    name = str(device).removeprefix("sim:").split(":")[0].strip()
    spec = resolve(name)
    return spec.key if spec is not None else name.lower()


def sensor_timing(device: str, sensor: str) -> SensorTiming | None:
    """The timing of ``sensor`` on ``device`` (a device key, alias or ``sim:KEY``), or None when unknown."""
    key = _device_key(device)
    return TABLE.get((key, sensor)) or TABLE.get(("*", sensor))


#: Table entries that are not a power/energy sensor of a real device: the twin's read-out, the profiling counters.
_NOT_ENERGY_SENSORS = ("sim", "dcgm-prof")


def least_observed(device: str) -> SensorTiming | None:
    """The device's power/energy sensor in the table that leaves the most time blind (the simulator's read-out and
    the profiling counters excluded), or None when the table has none for the device's model."""
    key = _device_key(device)
    cands = [s for s in _TABLE if s.device == key and s.sensor not in _NOT_ENERGY_SENSORS]
    return max(cands, key=lambda s: s.blind_fraction, default=None)


def unrecorded_sensor_floor(device: str) -> tuple[float, str]:
    """The share of a run taken as unobserved when its row records no sensor kind on ``device`` (round 7), and the
    note that says so: the device's :func:`least_observed` sensor's blind share — a row that does not say how it
    was observed is judged as if by the sensor that sees least, as the monitor judges a sensor it does not know
    (the bound stays sound, only looser); a model the table has no sensor for: the whole run (at peak rate, or
    the pipe counters' bound where the row has them), since nothing says what any of its time was seen by."""
    t = least_observed(device)
    if t is None:
        return 1.0, (
            f"no sensor recorded, and the sensor-timing table has no power/energy sensor for {device!r}: the whole "
            "run is taken as unobserved (bounded at peak rate, or by pipe counters); record the sensor kind and rate"
        )
    return t.blind_fraction, (
        f"no sensor recorded: judged as the device's least-observed sensor in the timing table ({t.sensor}: "
        f"{t.blind_fraction:.1%} of the time blind, bounded at peak rate or by pipe counters); record the sensor "
        "kind and rate"
    )


def simulated_kind(model: str | None) -> str:
    """The sensor kind a record of the digital twin carries: the real sensor its read-out emulates, labelled
    simulated (``nvml (simulated)``), so that the timing table judges it as that sensor (the twin stands in for
    the hardware, as in ``redteam``) and no reader takes it for a measurement; ``sim`` when the model is unknown."""
    m = str(model or "").strip().lower()
    return f"{m} (simulated)" if m and not is_replay_kind(m) else "sim"


@dataclass(frozen=True)
class SamplingCheck:
    """Is ``rate_hz`` adequate for this sensor, and how much time goes unobserved at it."""

    device: str
    sensor: str
    rate_hz: float
    adequate: bool
    min_rate_hz: float | None
    unobserved_fraction: float  # share of wall time no reading reflects (bounded at peak by the estimator)
    warnings: tuple[str, ...]
    timing: SensorTiming | None

    def to_dict(self) -> dict[str, Any]:
        return {
            "device": self.device,
            "sensor": self.sensor,
            "rate_hz": self.rate_hz,
            "adequate": self.adequate,
            "min_rate_hz": self.min_rate_hz,
            "unobserved_fraction": self.unobserved_fraction,
            "warnings": list(self.warnings),
            "timing": None if self.timing is None else self.timing.to_dict(),
        }


#: The ``prometheus:`` sensor's kind when its spec says ``operated=verifier``: the verifier runs that Prometheus
#: and its scrapes of the node's exporter. Any other Prometheus is the operator's to rewrite (docs/threat-model.md,
#: "Fleet: whose series"): the one rule for runs, monitor rows and fleet groups blocks "below" on it.
VERIFIER_PROMETHEUS = "prometheus-verifier"


def operator_series_warning(kind: str) -> str | None:
    """The warning for a sensor kind that reads series the operator can rewrite (a Prometheus the verifier does
    not run), else None."""
    k = str(kind).strip().lower()
    if k.startswith("prometheus") and k != VERIFIER_PROMETHEUS:
        return (
            f"sensor {kind!r} reads the operator's Prometheus: series it can rewrite consistently, so no "
            "'below' (add operated=verifier to the spec when the verifier runs that Prometheus and its scrapes)"
        )
    return None


def is_replay_kind(kind: str) -> bool:
    """Whether a sensor kind names a replay or simulation rather than a read of the device."""
    kind = str(kind).strip().lower()
    return kind in REPLAY_SENSOR_KINDS or kind.startswith(REPLAY_SENSOR_KINDS)


def _no_timing_warning(device: str, sensor: str) -> str:
    if is_replay_kind(sensor):  # the same fact, worded for someone replaying a trace (newcomer, issue 24)
        what = "a simulated trace" if str(sensor).strip().lower().startswith("sim") else "a replayed trace"
        return (
            f"{what} (sensor {sensor!r}) says nothing of what the device did between its samples: its blind "
            "time cannot be bounded, so no 'below'"
        )
    return f"no timing known for sensor {sensor!r} on {device!r}: what it measures between reads is unknown"


def check_sampling(device: str, sensor: str, rate_hz: float) -> SamplingCheck:
    """Whether sampling ``sensor`` on ``device`` at ``rate_hz`` loses nothing the sensor measured.

    * a sensor the table does not know: not adequate (nothing says what it sees), unobserved fraction 1;
    * a cumulative counter: adequate at ≥ the detector's poll rate; unobserved = its own blind part;
    * a point sensor: each read reflects one window; unobserved = 1 − min(1, rate × window) of the time
      (no counter spans the gaps); adequate only at ≥ one read per update.

    A part-time sensor (``blind_fraction`` > 0) is adequate as to rate but still reports the blind share, and
    a warning names it: only a cumulative counter of another kind (DCGM profiling) covers that time.
    """
    if not (isinstance(rate_hz, (int, float)) and math.isfinite(rate_hz) and rate_hz > 0):
        raise InputError(f"must be a finite number > 0, got {rate_hz!r}", field="rate_hz")
    t = sensor_timing(device, sensor)
    if t is None:
        return SamplingCheck(
            device,
            sensor,
            float(rate_hz),
            False,
            None,
            1.0,
            (_no_timing_warning(device, sensor),),
            None,
        )
    warns: list[str] = []
    if t.cumulative:
        unobserved = t.blind_fraction
    else:
        unobserved = max(t.blind_fraction, 1.0 - min(1.0, rate_hz * t.window_s))
    need = t.min_rate_hz
    adequate = rate_hz >= need * (1 - 1e-9)
    if not adequate:
        what = "its counter" if t.cumulative else "every update"
        warns.append(
            f"sampling {sensor} on {device} at {rate_hz:g} Hz is below the {need:.3g} Hz needed to read {what} "
            f"(window {t.window_s * 1e3:g} ms, update every {t.update_period_s * 1e3:g} ms): "
            f"{unobserved:.1%} of the time is unobserved"
        )
    if t.blind_fraction > 0:
        warns.append(
            f"{sensor} on {device} averages {t.window_s * 1e3:g} ms of every {t.update_period_s * 1e3:g} ms: "
            f"{t.blind_fraction:.0%} of the time is blind at any rate (bounded at peak unless a cumulative "
            "profiling counter covers it)"
        )
    return SamplingCheck(device, sensor, float(rate_hz), adequate, need, unobserved, tuple(warns), t)


def sensor_kind_of(spec: str) -> str:
    """The timing-table sensor name for a sensor spec or kind (``nvml:0`` → ``nvml-energy``, ``jetson`` …)."""
    s = str(spec).lower()
    if s.startswith("sim"):
        return "sim"
    if s.startswith("nvml"):
        return "nvml-energy"
    if s.startswith(("jetson", "ina3221", "tegra")):
        return "ina3221"
    if s.startswith(("dcgm", "prom")):
        # the energy a dcgm-exporter/Prometheus sensor reads is DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION, i.e. NVML's
        # counter with NVML's blind share; only its profiling fields (pipe activity) are "dcgm-prof"
        return "nvml-energy"
    if s.startswith("rapl"):
        return "rapl"
    return s
