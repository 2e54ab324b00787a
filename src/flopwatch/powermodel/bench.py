"""The MASCOTS measurement protocol on our own workloads and sensors (``flopwatch bench``).

Protocol (Enskat & Wiesner, MASCOTS 2026, arXiv:2608.03880, Sec. III-B; SOURCE.md of the vendored data):

1. warm-up: ``warmup_steps`` untimed training steps (fwd + bwd + optimizer);
2. samples: each sample is one window of consecutive steps whose *device-timed* duration (CUDA events on a
   GPU, ``perf_counter`` on the CPU, the simulator's step time on ``sim:``) reaches ``window_s`` (≥ 1 s).
   Per window: MFU = steps × FLOPs/step / window time / peak; tokens/s; and, from the telemetry sampled
   jointly by :class:`~flopwatch.telemetry.sampler.Sampler` over the window, mean board power (the energy
   counter's delta / window when the sensor has one, as NVML's total-energy counter in the study; the mean of
   power readings otherwise) and mean GPU utilisation;
3. stop when at least ``min_samples`` windows are in and the 95 % CI half-width of both MFU and utilisation
   is ≤ ``rel_ci`` (5 %) of their means, or at ``max_samples`` (the study: 50 and 500);
4. cool-down: ``cooldown_s`` of idle before the next configuration.

One configuration gives one row in the study's aggregate schema (``mfu_aggregated_per_config_*.csv``), so
``flopwatch powermodel fit/evaluate`` analyse our measurements unchanged. MFU is normalised by the vendor
datasheet peak in :mod:`flopwatch.devices` (``DeviceSpec.mfu_peak``; recorded in the ``peak_flops``/``peak_table``
columns), in two conventions named by their columns (:func:`aggregate_row`).

The protocol itself (:func:`run_protocol`) is a pure function of injected callables — a step function, a
clock and a telemetry window reader — so it is tested without hardware; :func:`bench_grid` wires it to torch
and to live sensors, and the simulator's ``bench_grid_sim`` (sim/bench.py) to the simulated accelerator (virtual time, labelled simulated).
"""

from __future__ import annotations

import csv
import math
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from flopwatch.devices import STUDY_DTYPE_NAMES
from flopwatch.errors import ConfigError, InputError
from flopwatch.io import disk_errors, refuse_link

#: Column order of the study's aggregate CSVs (plus our extra columns at the end).
AGGREGATE_COLUMNS: tuple[str, ...] = (
    "model_name",
    "batch_size",
    "dtype",
    "sequence_length",
    "context_window",
    "learning_rate",
    "warmup_iterations",
    "cooldown_seconds",
    "power_meter_available",
    "tokens_per_second_mean",
    "mfu_percentage_mean",
    "mfu_percentage_hardware_flops_mean",
    "sequence_length_mean",
    "gpu_utilization_mean",
    "memory_utilization_mean",
    "memory_used_mb_mean",
    "temperature_celsius_mean",
    "power_draw_watts_mean",
    "calflops_total_mean",
    "samples_per_config",
    "cap_reached",
)
EXTRA_COLUMNS: tuple[str, ...] = (
    "gpu",
    "device",
    "sensor",
    "simulated",
    "peak_flops",
    "peak_table",
    "flops_counter",
    "mfu_convention",
    "model_flops_per_step",
    "repeat",
    "mfu_ci_rel",
    "util_ci_rel",
    "power_ci_rel",
    "stop_reason",
    "power_method",
    "window_s_mean",
    "n_readings",
    "n_gaps",
)
DATASHEET_PEAK = "datasheet (flopwatch.devices)"
CPU_PLACEHOLDER_PEAK = "nominal CPU placeholder (flopwatch.devices 'cpu'), not a datasheet value"


@dataclass(frozen=True)
class BenchSettings:
    """Protocol parameters (defaults: the study's)."""

    window_s: float = 1.0
    min_samples: int = 50
    max_samples: int = 500
    rel_ci: float = 0.05
    ci_level: float = 0.95
    warmup_steps: int = 5
    cooldown_s: float = 5.0
    rate_hz: float = 10.0

    def __post_init__(self) -> None:
        if not self.window_s > 0:
            raise ConfigError(f"window_s must be > 0, got {self.window_s!r}", field="window_s")
        if not 2 <= self.min_samples <= self.max_samples:
            raise ConfigError(
                f"need 2 <= min_samples <= max_samples, got {self.min_samples} and {self.max_samples}",
                field="min_samples",
            )
        if not 0 < self.rel_ci < 1:
            raise ConfigError(f"rel_ci must be in (0, 1), got {self.rel_ci!r}", field="rel_ci")
        if not 0 < self.ci_level < 1:
            raise ConfigError(f"ci_level must be in (0, 1), got {self.ci_level!r}", field="ci_level")
        if self.warmup_steps < 0 or self.cooldown_s < 0:
            raise ConfigError("warmup_steps and cooldown_s must be >= 0", field="warmup_steps")
        if not self.rate_hz > 0:
            raise ConfigError(f"rate_hz must be > 0, got {self.rate_hz!r}", field="rate_hz")


@dataclass(frozen=True)
class WindowTelemetry:
    """Telemetry aggregated over one sample window (NaN where the sensor lacks the quantity)."""

    power_w: float = math.nan
    util_pct: float = math.nan
    mem_util_pct: float = math.nan
    temp_c: float = math.nan
    n_readings: int = 0
    power_method: str = "none"
    n_gaps: int = 0  # ticks in the window at which the sensor gave no reading (read failed or too slow)


@dataclass(frozen=True)
class Window:
    """One sample: a ≥ window_s stretch of device-timed steps and the telemetry over it."""

    t0: float
    t1: float
    steps: int
    duration_s: float  # sum of device-timed step durations
    mfu_pct: float
    tokens_per_s: float
    telemetry: WindowTelemetry


@dataclass
class Measurement:
    """All windows of one configuration and why sampling stopped."""

    windows: list[Window] = field(default_factory=list)
    stop_reason: str = ""
    mfu_ci_rel: float = math.nan
    util_ci_rel: float = math.nan
    power_ci_rel: float = math.nan

    def mean(self, attr: str) -> float:
        vals = np.array([_get(w, attr) for w in self.windows], float)
        vals = vals[np.isfinite(vals)]
        return float(vals.mean()) if vals.size else math.nan


def _get(w: Window, attr: str) -> float:
    return getattr(w.telemetry, attr) if hasattr(w.telemetry, attr) else getattr(w, attr)


def ci_rel_halfwidth(values: Sequence[float] | np.ndarray, level: float = 0.95) -> float:
    """Student-t CI half-width of the mean, relative to the mean (inf when undefined, NaN without data)."""
    from scipy.special import stdtrit  # Student-t quantile; lighter import than scipy.stats

    a = np.asarray(values, float)
    a = a[np.isfinite(a)]
    if a.size == 0:
        return math.nan
    if a.size < 2:
        return math.inf
    m = float(a.mean())
    sd = float(a.std(ddof=1))
    if sd == 0.0:
        return 0.0
    if m == 0.0:
        return math.inf
    half = float(stdtrit(a.size - 1, 0.5 + level / 2)) * sd / math.sqrt(a.size)
    return half / abs(m)


def stop_decision(windows: Sequence[Window], s: BenchSettings) -> tuple[bool, str, float, float]:
    """(stop?, reason, MFU CI rel., util CI rel.): the study's early-stop rule.

    Utilisation that the sensor does not report (all NaN) drops out of the rule, which then uses MFU alone
    (said so in the reason).
    """
    n = len(windows)
    mfu_ci = ci_rel_halfwidth([w.mfu_pct for w in windows], s.ci_level)
    util_ci = ci_rel_halfwidth([w.telemetry.util_pct for w in windows], s.ci_level)
    if n < s.min_samples:
        return False, "", mfu_ci, util_ci
    util_ok = util_ci <= s.rel_ci or math.isnan(util_ci)
    if mfu_ci <= s.rel_ci and util_ok:
        why = "converged" if not math.isnan(util_ci) else "converged (MFU only: no utilisation reading)"
        return True, why, mfu_ci, util_ci
    if n >= s.max_samples:
        return True, "max_samples reached", mfu_ci, util_ci
    return False, "", mfu_ci, util_ci


def run_protocol(
    step: Callable[[], float],
    *,
    now: Callable[[], float],
    telemetry: Callable[[float, float], WindowTelemetry],
    flops_per_step: float,
    tokens_per_step: float,
    peak_flops: float,
    settings: BenchSettings,
) -> Measurement:
    """Warm up, then sample windows until the stop rule fires (no cool-down: the caller owns idle time).

    ``step()`` runs one training step and returns its device-timed duration in seconds; ``now()`` is the
    telemetry clock (window bounds are taken from it before and after each window); ``telemetry(t0, t1)``
    aggregates the jointly sampled readings of that interval.
    """
    for _ in range(settings.warmup_steps):
        step()
    m = Measurement()
    while True:
        t0 = now()
        dur = 0.0
        n = 0
        while dur < settings.window_s:
            d = float(step())
            if not (d > 0 and math.isfinite(d)):
                raise InputError(
                    f"step timer returned {d!r}; expected a positive duration", field="step_time_s"
                )
            dur += d
            n += 1
        t1 = now()
        tel = telemetry(t0, t1)
        m.windows.append(
            Window(
                t0=t0,
                t1=t1,
                steps=n,
                duration_s=dur,
                mfu_pct=100.0 * n * flops_per_step / dur / peak_flops,
                tokens_per_s=n * tokens_per_step / dur,
                telemetry=tel,
            )
        )
        stop, why, m.mfu_ci_rel, m.util_ci_rel = stop_decision(m.windows, settings)
        if stop:
            m.stop_reason = why
            m.power_ci_rel = ci_rel_halfwidth([w.telemetry.power_w for w in m.windows], settings.ci_level)
            return m


# -- telemetry ---------------------------------------------------------------------------------------------


class ReadingCollector:
    """A Sampler sink keeping recent readings of one device, and the window aggregator over them.

    Gaps (failed or late reads) are kept too and counted per window, so a window whose power rests on few
    readings says so in the row (``n_gaps``) instead of silently averaging what was left.
    """

    def __init__(self, device: str | None = None, max_keep: int = 200_000) -> None:
        from collections import deque

        self.device = device
        self._items: Any = deque(maxlen=max_keep)
        self._gaps: Any = deque(maxlen=max_keep)

    def __call__(self, item: Any) -> None:
        if self.device is None:
            self.device = item.device
        if item.device != self.device:
            return
        if getattr(item, "error", None) is not None:  # a Gap
            self._gaps.append(item.t_s)
        else:
            self._items.append(item)

    def window(self, t0: float, t1: float) -> WindowTelemetry:
        """Mean telemetry over readings with t0 ≤ t ≤ t1; power from the energy counter when available."""
        rs = [r for r in list(self._items) if t0 <= r.t_s <= t1]
        n_gaps = sum(1 for t in list(self._gaps) if t0 <= t <= t1)
        if not rs:
            return WindowTelemetry(n_gaps=n_gaps)

        def mean(attr: str, scale: float = 1.0) -> float:
            v = [getattr(r, attr) for r in rs if getattr(r, attr) is not None]
            return float(np.mean(v)) * scale if v else math.nan

        e = [(r.t_s, r.energy_j) for r in rs if r.energy_j is not None]
        if len(e) >= 2 and e[-1][0] > e[0][0] and e[-1][1] >= e[0][1]:
            power, method = (e[-1][1] - e[0][1]) / (e[-1][0] - e[0][0]), "energy counter delta"
        else:
            power, method = mean("power_w"), "mean of power readings"
        return WindowTelemetry(
            power_w=power,
            util_pct=mean("util", 100.0),
            mem_util_pct=mean("mem_util", 100.0),
            temp_c=mean("temp_c"),
            n_readings=len(rs),
            power_method=method if math.isfinite(power) else "none",
            n_gaps=n_gaps,
        )


# -- output ------------------------------------------------------------------------------------------------


def measure_config(
    step: Callable[[], float],
    config: Any,
    *,
    now: Callable[[], float],
    telemetry: Callable[[float, float], WindowTelemetry],
    flops_per_step: float,
    tokens_per_step: float,
    peak_flops: float,
    settings: BenchSettings,
    **row: Any,
) -> dict[str, Any]:
    """One configuration (a :class:`~flopwatch.workloads.config.WorkloadConfig`) through :func:`run_protocol`, as
    its :func:`aggregate_row` (``row``: that function's remaining keywords: gpu, device, sensor, simulated …).
    The one path of real (:func:`bench_grid`) and simulated (``bench_grid_sim`` in sim/bench.py) benches."""
    from flopwatch.workloads.formulas import model_flops_per_step

    m = run_protocol(
        step,
        now=now,
        telemetry=telemetry,
        flops_per_step=flops_per_step,
        tokens_per_step=tokens_per_step,
        peak_flops=peak_flops,
        settings=settings,
    )
    return aggregate_row(
        m,
        label=config.name,
        batch_size=config.batch_size,
        dtype=config.precision,
        seq_len=config.seq_len,
        flops_per_step=flops_per_step,
        peak_flops=peak_flops,
        settings=settings,
        model_flops_per_step=model_flops_per_step(config),
        **row,
    )


def aggregate_row(
    m: Measurement,
    *,
    label: str,
    batch_size: int,
    dtype: str,
    seq_len: int,
    flops_per_step: float,
    peak_flops: float,
    settings: BenchSettings,
    gpu: str,
    device: str,
    sensor: str,
    simulated: bool,
    repeat: int = 0,
    learning_rate: float = 1e-4,
    flops_counter: str = "FlopCounterMode (flopwatch.workloads.ground_truth.count_flops)",
    peak_table: str = DATASHEET_PEAK,
    model_flops_per_step: float | None = None,
) -> dict[str, Any]:
    """One row of the study's aggregate schema (plus our extra columns) for a measured configuration.

    MFU columns, each named by its convention (workloads.formulas.MFU_CONVENTIONS):
    ``mfu_percentage_hardware_flops_mean`` against the counted FLOPs (``flops_counter``; the study's
    ``mfu_percentage_calflops_mean`` holds calflops' count instead, so ours is not written under that name) and
    ``mfu_percentage_mean`` against PaLM-style model FLOPs (``model_flops_per_step``), the analogue of the
    study's formula MFU in that column. The readers (powermodel.datasets) accept either file.
    """
    hw_mfu = m.mean("mfu_pct")
    model_mfu = (
        hw_mfu * model_flops_per_step / flops_per_step
        if model_flops_per_step and flops_per_step and math.isfinite(hw_mfu)
        else math.nan
    )
    ws = m.windows
    methods = {w.telemetry.power_method for w in ws} - {"none"}
    return {
        "model_name": label,
        "batch_size": int(batch_size),
        "dtype": STUDY_DTYPE_NAMES.get(dtype, dtype),
        "sequence_length": int(seq_len),
        "context_window": int(seq_len),
        "learning_rate": learning_rate,
        "warmup_iterations": settings.warmup_steps,
        "cooldown_seconds": settings.cooldown_s,
        "power_meter_available": False,
        "tokens_per_second_mean": m.mean("tokens_per_s"),
        "mfu_percentage_mean": model_mfu,
        "mfu_percentage_hardware_flops_mean": hw_mfu,
        "sequence_length_mean": float(seq_len),
        "gpu_utilization_mean": m.mean("util_pct"),
        "memory_utilization_mean": m.mean("mem_util_pct"),
        "memory_used_mb_mean": math.nan,
        "temperature_celsius_mean": m.mean("temp_c"),
        "power_draw_watts_mean": m.mean("power_w"),
        "calflops_total_mean": float(flops_per_step),
        "samples_per_config": len(ws),
        "cap_reached": m.stop_reason == "max_samples reached",
        "gpu": gpu,
        "device": device,
        "sensor": sensor,
        "simulated": bool(simulated),
        "peak_flops": float(peak_flops),
        "peak_table": peak_table,
        "flops_counter": flops_counter,
        "mfu_convention": "mfu_percentage_hardware_flops_mean: hardware FLOPs (counted, attention recompute "
        "included); mfu_percentage_mean: PaLM-style model FLOPs (no recompute, causal attention halved)",
        "model_flops_per_step": float(model_flops_per_step) if model_flops_per_step else math.nan,
        "repeat": int(repeat),
        "mfu_ci_rel": m.mfu_ci_rel,
        "util_ci_rel": m.util_ci_rel,
        "power_ci_rel": m.power_ci_rel,
        "stop_reason": m.stop_reason,
        "power_method": ",".join(sorted(methods)) or "none",
        "window_s_mean": m.mean("duration_s"),
        "n_readings": int(sum(w.telemetry.n_readings for w in ws)),
        "n_gaps": int(sum(w.telemetry.n_gaps for w in ws)),
    }


def write_aggregate_csv(rows: Iterable[dict[str, Any]], path: str | Path, *, append: bool = False) -> Path:
    """Write rows in the study's schema. Never overwrites: an existing file is appended to only with
    ``append=True`` (and only when its header matches)."""
    p = Path(path)
    cols = list(AGGREGATE_COLUMNS + EXTRA_COLUMNS)
    exists = p.exists() and p.stat().st_size > 0
    if exists and not append:
        raise InputError("exists; refusing to overwrite (use --append)", file=str(p))
    if exists:
        with p.open(newline="") as f:
            header = next(csv.reader(f), [])
        if header != cols:
            raise InputError("exists with a different header; cannot append", file=str(p))
    refuse_link(p)  # never written through a link (io's one output guard)
    with disk_errors(p), p.open("a" if exists else "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=cols, extrasaction="ignore")
        if not exists:
            w.writeheader()
        for r in rows:
            w.writerow({k: ("" if isinstance(v, float) and math.isnan(v) else v) for k, v in r.items()})
            f.flush()
    return p


# -- drivers -----------------------------------------------------------------------------------------------


def make_torch_step(
    config: Any, device: str, *, seed: int = 0, attention: str | None = None
) -> Callable[[], float]:
    """A callable running one training step of ``config`` on ``device`` and returning its device time (s).

    Built from the workload model builders (``flopwatch.workloads.model``); optimizer, autocast, grad
    scaling, TF32 switching and attention-kernel pinning as in ``flopwatch.workloads.run.run_workload``
    (AdamW lr 1e-4, as the study), so the FLOPs counted under ``attention`` (default: fused on CUDA, math on
    the CPU) are the ones that run. CUDA steps are timed with CUDA events (synchronised per step so each
    window is exact), CPU steps with ``perf_counter``. Global torch settings are switched for the duration of
    each step only and restored after it.
    """
    import contextlib

    import torch
    from torch.nn.attention import sdpa_kernel

    from flopwatch.workloads.config import check_device_support
    from flopwatch.workloads.run import (
        make_train_step,
        matmul_precision,
        parse_device,
        sdpa_backends,
        step_error,
    )

    device = parse_device(device)
    check_device_support(config, device)
    conv = attention or ("fused" if device.startswith("cuda") else "math")
    backends = sdpa_backends(device, conv)
    tdev = torch.device(device)
    one = make_train_step(config, tdev, seed=seed)
    is_cuda = tdev.type == "cuda"

    @contextlib.contextmanager
    def settings() -> Any:
        # CUDA events record on the current device's stream: make it the run's device.
        with (
            torch.cuda.device(tdev) if is_cuda else contextlib.nullcontext(),
            matmul_precision(device, config.precision),
            sdpa_kernel(backends),
        ):
            try:
                yield
            except RuntimeError as e:
                err = step_error(e, config, conv)
                if err is None:
                    raise
                raise err from None

    if is_cuda:
        with torch.cuda.device(tdev):
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)

        def step() -> float:
            with settings():
                start.record()
                one()
                end.record()
            end.synchronize()
            return start.elapsed_time(end) / 1e3

    else:

        def step() -> float:
            with settings():
                t = time.perf_counter()
                one()
                return time.perf_counter() - t

    return step


def peak_for(device_name: str, spec_key: str | None, dtype: str) -> tuple[float, str, str]:
    """(peak FLOP/s, spec name, peak-table label) of the device the workload runs on (else the sensor's)."""
    from flopwatch.devices import get_device

    for q in (device_name, spec_key):
        if not q:
            continue
        try:
            spec = get_device(q)
        except InputError:
            continue
        if spec.supports(dtype):
            table = CPU_PLACEHOLDER_PEAK if spec.vendor == "cpu" else DATASHEET_PEAK
            return spec.mfu_peak(dtype), spec.name, table
    raise InputError(
        f"no datasheet peak for {device_name!r} in {dtype}; add it to flopwatch.devices", field="dtype"
    )


def bench_grid(
    configs: Sequence[Any],
    *,
    device: str = "cpu",
    sensor_spec: str | None = None,
    settings: BenchSettings | None = None,
    repeats: int = 1,
    seed: int = 0,
    on_row: Callable[[dict[str, Any]], None] | None = None,
    sleep: Callable[[float], None] = time.sleep,
    open_sensors: Callable[..., list[Any]] | None = None,
) -> list[dict[str, Any]]:
    """Run the protocol for every config × repeat on a real device (torch), power from ``sensor_spec``.

    ``open_sensors`` (spec → sensors) defaults to the hardware backends of
    :func:`flopwatch.telemetry.sensors.discover.open_sensors`; the CLI passes :func:`flopwatch.backends.open_sensors`.

    Sensors are sampled by one :class:`Sampler` for the whole grid; windows are timed on the sensor's clock
    (the monotonic clock for live sensors). ``sensor_spec=None`` measures without power (the row's power is
    empty and ``powermodel fit`` drops it, saying so). Rows go to ``on_row`` as soon as each config is done.
    """
    from flopwatch.telemetry.sampler import Sampler
    from flopwatch.telemetry.sensors.base import MonotonicClock
    from flopwatch.workloads.config import check_device_support
    from flopwatch.workloads.ground_truth import count_flops
    from flopwatch.workloads.run import parse_device

    s = settings or BenchSettings()
    if device.startswith("sim"):
        raise ConfigError(
            "simulated devices are benched by the simulator (flopwatch bench --device sim:NAME)",
            field="device",
        )
    device = parse_device(device)
    # Every configuration is checked before the first one runs: a grid must not die halfway on a dtype
    # the device cannot run or has no peak for.
    for config in configs:
        check_device_support(config, device)
        peak_for(_device_name(device), None, config.precision)
    sensors = []
    if sensor_spec:
        if open_sensors is None:
            from flopwatch.telemetry.sensors.discover import open_sensors

        sensors = open_sensors(sensor_spec)
        if len(sensors) > 1:
            # One workload, one device: averaging or picking another GPU's power would be silently wrong.
            for se in sensors:
                se.close()
            raise ConfigError(
                f"sensor {sensor_spec!r} opened {len(sensors)} devices; name the one the workload runs on "
                "(e.g. nvml:0 or nvml:GPU-<uuid>)",
                field="sensor",
            )
        from flopwatch.telemetry.sensors.base import VirtualClock

        if isinstance(sensors[0].clock, VirtualClock):
            raise ConfigError(
                f"sensor {sensor_spec!r} runs in virtual time and cannot be sampled jointly with a real workload; "
                "bench the simulated device itself with --device sim:KEY",
                field="sensor",
            )
    collector = ReadingCollector()
    sampler = Sampler(sensors, s.rate_hz, sinks=[collector]) if sensors else None
    now = sensors[0].clock.now if sensors else MonotonicClock().now
    info = sensors[0].info() if sensors else None
    gpu_name = info.name if info else _device_name(device)
    rows: list[dict[str, Any]] = []
    if sampler:
        sampler.start()
    try:
        for config in configs:
            conv = "fused" if device.startswith("cuda") else "math"  # what make_torch_step pins
            fc = count_flops(config, attention=conv)
            peak, spec_name, peak_table = peak_for(
                _device_name(device), info.spec_key if info else None, config.precision
            )
            for rep in range(repeats):
                step = make_torch_step(config, device, seed=seed + rep, attention=conv)
                row = measure_config(
                    step,
                    config,
                    now=now,
                    telemetry=collector.window if sampler else (lambda a, b: WindowTelemetry()),
                    flops_per_step=fc.flops_per_step,
                    tokens_per_step=config.tokens_per_step,
                    peak_flops=peak,
                    settings=s,
                    gpu=gpu_name or spec_name,
                    peak_table=peak_table,
                    device=device,
                    sensor=sensor_spec or "none",
                    simulated=bool(info.simulated) if info else False,
                    repeat=rep,
                )
                rows.append(row)
                if on_row:
                    on_row(row)
                del step
                sleep(s.cooldown_s)
    finally:
        if sampler:
            sampler.stop()
        for se in sensors:
            try:
                se.close()
            except Exception:  # closing must not mask the measurement's own error
                pass
    return rows


def default_sensor_spec(device: str) -> str | None:
    """The sensor ``flopwatch bench`` reads when none is given: the workload's own GPU on CUDA (by UUID, not
    every GPU NVML sees), none on the CPU. InputError when CUDA is asked for and torch sees none."""
    if not device.startswith("cuda"):
        return None
    from flopwatch.workloads.run import parse_device

    parse_device(device)
    import torch

    if not torch.cuda.is_available():
        raise InputError("device 'cuda' requested but torch sees no CUDA device", field="device")
    return nvml_spec_for(device)


def nvml_spec_for(device: str) -> str:
    """The NVML sensor spec of the GPU torch calls ``device`` (by UUID: CUDA and NVML number GPUs differently)."""
    import torch

    tdev = torch.device(device)
    idx = tdev.index if tdev.index is not None else torch.cuda.current_device()
    try:
        uuid = str(torch.cuda.get_device_properties(idx).uuid)
    except Exception:  # older torch without .uuid: the index (right unless CUDA_DEVICE_ORDER differs)
        return f"nvml:{idx}"
    return "nvml:" + (uuid if uuid.startswith("GPU-") else f"GPU-{uuid}")


def _device_name(device: str) -> str:
    if device.startswith("cuda"):
        import torch

        return torch.cuda.get_device_name(torch.device(device))
    return "cpu"
