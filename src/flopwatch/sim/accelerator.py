"""A simulated accelerator (digital twin) that executes workload descriptions in virtual time.

**Step time** — a roofline in which the compute-bound and memory-bound parts of a training step serialise
(matmuls vs. optimizer and element-wise kernels) and overlap with the host, which launches the kernels
asynchronously::

    t_compute = FLOPs / (peak_dtype · η_c),     η_c = η_max · T / (T + T_½)     (T = tokens per step)
    t_memory  = bytes / (bandwidth · η_m) + g_layer · layers
    t_gpu     = t_compute · f_max/f + t_memory                                   (f: SM clock, see dvfs.py)
    t_host    = (h_0 + h_layer · layers) · a_dtype
    t_step    = (t_gpu^p + t_host^p)^(1/p),  p = 5                               (smooth max: launch-bound ↔ GPU-bound)
    util      = t_gpu / t_step                                                   (NVML: share of time a kernel ran)

Small batches give a low η_c (skinny matmuls) and low arithmetic intensity gives a large ``t_memory``; tiny models are
host-bound (util ≪ 1), exactly the regime the Jetson study's frontier gate (util ≥ 80 %) excludes. Constants and
where each comes from are in :data:`SIM_PARAMS`.

**Power** — :mod:`flopwatch.powermodel.device_power` (MASCOTS per-cell MFU lines, or the spec-based shape), at the MFU the
roofline produces, times two seeded offsets of the size the MASCOTS data shows: the per-cell residual SD (how far one
architecture sits from its cell's MFU line; a property of the workload, so seeded by its label) and the cross-repeat
noise floor (run to run). A power cap or locked clock then moves the operating point (:mod:`flopwatch.sim.dvfs`).
Within a step the GPU is at ``P_busy`` while kernels run and at ``P_gap`` while it waits for the host, so short
sensor windows see the step structure. After a workload the board stays in its high-performance state for a few
seconds (``tail_s``) before dropping to idle, as NVIDIA GPUs do, which a detector keyed on utilisation does not
attribute to the workload.

**Time** is virtual: a schedule of runs and idle gaps becomes a piecewise-periodic power/utilisation signal whose
integrals are closed-form, so a ten-minute run costs microseconds; :mod:`flopwatch.sim.sensor` samples it the way
NVML would. Everything here is simulated and labelled so (``simulated: true`` in every record).
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeAlias

import numpy as np

from flopwatch.devices import DeviceSpec, get_device, normalize_dtype
from flopwatch.errors import ConfigError, InputError
from flopwatch.powermodel.device_power import PowerModel, power_model_for
from flopwatch.records import WorkloadRecord
from flopwatch.sim.dvfs import DVFSModel

# z-scores of the 10th/90th percentile of a normal distribution, for the step-time summary.
_Z90 = 1.2815515655446004


@dataclass(frozen=True)
class RawWorkload:
    """A workload given by its numbers rather than a model config (scripted schedules, measured conditions,
    tests): the simulator's one workload description besides
    :class:`~flopwatch.workloads.formulas.WorkloadDescription`, whose fields it shares."""

    label: str
    flops_per_step: float
    bytes_per_step: float
    tokens_per_step: float
    batch_size: int = 1
    dtype: str = "fp32"
    arch: str | None = None
    num_layers: int | None = None
    params: float | None = None


if TYPE_CHECKING:
    from flopwatch.workloads.formulas import WorkloadDescription

    #: What the simulator runs: a workload by its numbers or one described from a model config.
    WorkloadLike: TypeAlias = RawWorkload | WorkloadDescription


@dataclass(frozen=True)
class SimParams:
    """Roofline and host constants of one simulated device (see the module docstring for the formulas)."""

    eff_tensor: float = 0.45  # η_max for fp16/bf16/tf32/fp8 tensor-core matmuls
    eff_fp32: float = 0.75  # η_max for fp32 on CUDA cores
    tokens_half: float = 64.0  # T_½: tokens per step at which η_c is half of η_max
    eff_mem: float = 0.75  # η_m: achieved share of peak DRAM bandwidth
    host_base_s: float = 1.5e-3  # h_0: per-step host work outside the layers (loss, optimizer launch, sync)
    host_layer_s: float = 2.7e-3  # h_layer: host time to launch one layer's fwd+bwd kernels
    host_mixed_factor: float = 1.0  # a_dtype for fp16/bf16 (autocast adds cast kernels to every op)
    gpu_layer_s: float = (
        0.4e-3  # g_layer: device time per layer that does not shrink with size (≈100 tiny kernels)
    )
    gap_power_frac: float = 0.35  # P_gap = idle + frac·(P − idle): clocks stay up between kernels
    tail_s: float = 3.0  # seconds the board stays in its performance state after a workload
    tail_power_frac: float = 0.15  # power in the tail, as a fraction of the workload's dynamic power
    ambient_c: float = 30.0  # inlet-side temperature at idle
    thermal_c_per_w: float = 0.11  # steady-state ΔT per W (A100 SXM: ~65 °C at ~320 W in the MASCOTS runs)
    thermal_tau_s: float = 45.0  # first-order thermal time constant
    step_jitter_cv: float = 0.015  # step-to-step coefficient of variation (for the step-time percentiles)
    run_speed_sd: float = 0.01  # run-to-run throughput variation


#: Per-device constants. The A100 values are calibrated to the MASCOTS A100 runs: GPT-2-family models (gpt2-xl,
#: DialoGPT-large) are host-bound below batch 64 with ≈ 2.7 ms of step time per layer (0.135 s / 48 layers,
#: 0.094 s / 36 layers), and Qwen2.5-3B bf16 reaches ≈ 57 % of the 312 TFLOPS peak in the compute part of a batch-64
#: step. The Orin Nano values come from the Jetson study's v2 records (Fowler 2026): its 3-layer d_model 128 run is
#: host-bound at 37.5 ms per step (4800 steps in 180 s, util 43 %) and the saturating fp32 runs reach 33–39 % of
#: the fp32 peak; its fp16/bf16 runs sit at 58–63 % utilisation, host-bound by autocast.
SIM_PARAMS: Mapping[str, SimParams] = {
    "a100": SimParams(),
    "h100": SimParams(thermal_c_per_w=0.06),
    "h200": SimParams(thermal_c_per_w=0.06),
    "l40": SimParams(thermal_c_per_w=0.14),
    "l4": SimParams(thermal_c_per_w=0.6),
    "orin-nano": SimParams(
        eff_tensor=0.35,
        eff_fp32=0.45,
        host_base_s=4.0e-3,
        host_layer_s=11.0e-3,
        host_mixed_factor=1.6,
        thermal_c_per_w=2.5,
        ambient_c=35.0,
        tail_s=1.0,
    ),
}


def sim_params(key: str) -> SimParams:
    return SIM_PARAMS.get(key, SimParams())


@dataclass(frozen=True)
class OperatingPoint:
    """Steady state of one workload on the simulated device."""

    step_time_s: float
    t_compute_s: float
    t_memory_s: float
    t_host_s: float
    t_gpu_s: float
    util: float
    mem_util: float
    sm_clock_mhz: float
    power_w: float  # mean board power
    power_busy_w: float
    power_gap_w: float
    achieved_flops_per_s: float
    mfu: float  # against devices.py's peak for the dtype (0–1)
    power_model_mfu_pct: float  # the MFU (%) the power model was evaluated at
    dram_bytes_per_s: float
    bound: str  # "compute" | "memory" | "host"
    throttled: bool  # the power cap lowered the clock
    power_limit_w: float


@dataclass(frozen=True)
class Idle:
    """An idle gap in a schedule."""

    duration_s: float


@dataclass(frozen=True)
class Run:
    """A workload in a schedule: run ``steps`` steps (or for about ``duration_s``)."""

    workload: Any  # WorkloadLike
    steps: int | None = None
    duration_s: float | None = None
    warmup_steps: int = 0
    extra: Mapping[str, Any] = field(
        default_factory=dict
    )  # merged into the record (config, FLOP breakdown …)


@dataclass(frozen=True)
class SimulatedRun:
    """One executed workload: when it ran, how, and its ground truth."""

    index: int
    label: str
    workload: Any
    start_s: float  # first timed step (after warm-up)
    end_s: float
    warmup_start_s: float
    steps: int
    point: OperatingPoint
    true_energy_j: float  # exact integral of the simulated board power over [start_s, end_s]
    power_offset: float  # multiplicative offset applied (architecture residual + repeat noise)
    device: str
    device_name: str
    wall0: float
    extra: Mapping[str, Any] = field(default_factory=dict)

    @property
    def duration_s(self) -> float:
        return self.end_s - self.start_s

    @property
    def total_flops(self) -> float:
        return float(self.workload.flops_per_step) * self.steps

    def record(self, **extra: Any) -> WorkloadRecord:
        """The ground-truth workload record, labelled simulated; ``extra`` keys override (config, arch …)."""
        w = self.workload
        p = self.point
        cv = float(self.extra.get("step_jitter_cv", 0.015))
        st = p.step_time_s
        config = getattr(w, "config", None)
        if config is not None and hasattr(config, "to_dict"):
            config = config.to_dict()
        rec: dict[str, Any] = {
            "label": self.label,
            "arch": getattr(w, "arch", None),
            "config": config if isinstance(config, dict) else None,
            "device": self.device,
            "device_name": self.device_name,
            "dtype": normalize_dtype(w.dtype),
            "start_monotonic_s": self.start_s,
            "end_monotonic_s": self.end_s,
            "start_wall": self.wall0 + self.start_s,
            "end_wall": self.wall0 + self.end_s,
            "steps": self.steps,
            "warmup_steps": int(round((self.start_s - self.warmup_start_s) / st)) if st > 0 else 0,
            "flops_per_step": float(w.flops_per_step),
            "total_flops": self.total_flops,
            "bytes_per_step": float(w.bytes_per_step),
            "achieved_flops_per_s": p.achieved_flops_per_s,
            "mfu": p.mfu,
            "peak_flops": p.achieved_flops_per_s / p.mfu if p.mfu > 0 else None,
            "step_time_s": {
                "mean": st,
                "median": st * math.exp(-0.5 * cv**2),
                "p10": st * math.exp(-_Z90 * cv),
                "p90": st * math.exp(_Z90 * cv),
                "std": st * cv,
            },
            "simulated": True,
            "sim": {
                "util": p.util,
                "power_w": p.power_w,
                "sm_clock_mhz": p.sm_clock_mhz,
                "bound": p.bound,
                "throttled": p.throttled,
                "power_limit_w": p.power_limit_w,
                "true_energy_j": self.true_energy_j,
                "power_model_mfu_pct": p.power_model_mfu_pct,
            },
        }
        rec.update({k: v for k, v in self.extra.items() if k != "step_jitter_cv"})
        rec.update(extra)
        rec["simulated"] = True
        return WorkloadRecord.from_dict(rec, file="simulator", where=self.label)


@dataclass
class _Seg:
    start: float
    end: float
    period: float
    busy_frac: float
    p_busy: float
    p_gap: float
    clock_mhz: float
    mem_util: float
    dram_bps: float
    kind: str  # "idle" | "run" | "warmup" | "tail"
    run_index: int


def _stable_unit_normal(*keys: object) -> float:
    """A standard-normal number determined by ``keys`` (stable across processes, unlike ``hash``)."""
    h = hashlib.sha256("|".join(map(str, keys)).encode()).digest()
    return float(np.random.default_rng(int.from_bytes(h[:8], "little")).standard_normal())


@dataclass(frozen=True)
class Roofline:
    """The step-time terms of a workload on a device at its maximum clock (module docstring): compute time
    ``t_c0``, memory and fixed per-layer device time ``t_m``, host time ``t_host`` (seconds per step)."""

    dtype: str
    flops: float
    nbytes: float
    tokens: float
    t_c0: float
    t_m: float
    t_host: float

    @property
    def util(self) -> float:
        """Predicted utilisation (device-busy share of the step) at the maximum clock, before any power cap."""
        t_gpu = self.t_c0 + self.t_m
        return t_gpu / (t_gpu**5 + self.t_host**5) ** 0.2


def roofline(
    spec: DeviceSpec, workload: WorkloadLike, params: SimParams | None = None, *, speed: float = 1.0
) -> Roofline:
    """The roofline/host terms of ``workload`` on ``spec`` (no power model, no DVFS: cheap enough for planning,
    :func:`flopwatch.pipeline.plan.plan_run`); refuses a dtype the device lacks and non-physical sizes."""
    sp = params or sim_params(spec.key)
    dtype = normalize_dtype(workload.dtype)
    if not spec.supports(dtype):
        raise ConfigError(f"{spec.name} does not support {dtype}", record=workload.label, field="dtype")
    flops = float(workload.flops_per_step)
    nbytes = float(workload.bytes_per_step)
    tokens = float(workload.tokens_per_step)
    if not (flops > 0 and math.isfinite(flops)):
        raise InputError(
            f"flops_per_step must be > 0, got {flops!r}", record=workload.label, field="flops_per_step"
        )
    if not (nbytes >= 0 and math.isfinite(nbytes)):
        raise InputError(
            f"bytes_per_step must be ≥ 0, got {nbytes!r}", record=workload.label, field="bytes_per_step"
        )
    if not tokens > 0:
        raise InputError(
            f"tokens_per_step must be > 0, got {tokens!r}", record=workload.label, field="tokens_per_step"
        )
    eta_max = sp.eff_fp32 if dtype == "fp32" else sp.eff_tensor
    eta_c = eta_max * tokens / (tokens + sp.tokens_half)
    t_c0 = flops / (spec.mfu_peak(dtype) * eta_c) / speed
    layers = _num_layers(workload)
    t_m = (nbytes / (spec.mem_bw_bytes_per_s * sp.eff_mem) + sp.gpu_layer_s * layers) / speed
    t_host = (sp.host_base_s + sp.host_layer_s * layers) * (
        sp.host_mixed_factor if dtype in ("fp16", "bf16") else 1.0
    )
    return Roofline(dtype, flops, nbytes, tokens, t_c0, t_m, t_host)


class SimulatedAccelerator:
    """Digital twin of one accelerator model, executing workloads in virtual time.

    ``spec_key`` is a :data:`flopwatch.devices.DEVICES` key or name (``a100``, ``h100``, ``orin-nano`` …).
    ``power_cap_w`` sets the board power limit (default: the device's limit), ``locked_clock_mhz`` locks the SM clock
    (``nvidia-smi -lgc``). ``seed`` drives every random draw, so a run is reproducible bit for bit.
    """

    def __init__(
        self,
        spec_key: str,
        *,
        seed: int = 0,
        power_cap_w: float | None = None,
        locked_clock_mhz: float | None = None,
        params: SimParams | None = None,
        device_index: int = 0,
        wall0: float = 1.7e9,
    ) -> None:
        self.spec: DeviceSpec = get_device(spec_key)
        if self.spec.vendor == "cpu":
            raise InputError(f"{spec_key!r} is not an accelerator the simulator models", field="device")
        self.power_model: PowerModel = power_model_for(self.spec.key)
        self.dvfs = DVFSModel.for_spec(self.spec)
        self.params = params or sim_params(self.spec.key)
        self.seed = int(seed)
        self.device_index = int(device_index)
        self.wall0 = float(wall0)
        default_limit = self.power_model.max_w
        if power_cap_w is not None:
            lo = self.spec.min_power_cap_w or self.power_model.idle_w * 1.5
            if not (lo <= power_cap_w <= default_limit):
                raise InputError(
                    f"power cap {power_cap_w:g} W outside the supported range {lo:g}–{default_limit:g} W "
                    f"for {self.spec.name}",
                    field="power_cap_w",
                )
        self.power_limit_w = float(power_cap_w if power_cap_w is not None else default_limit)
        self.locked_clock_mhz = None if locked_clock_mhz is None else self.dvfs.check_locked(locked_clock_mhz)
        self._rng = np.random.default_rng([self.seed, self.device_index, 0x51A])
        self._segs: list[_Seg] = []
        self._t_end = 0.0
        self._arrays: dict[str, np.ndarray] | None = None
        self.runs: list[SimulatedRun] = []

    # -- identity --------------------------------------------------------------------------------------------
    @property
    def idle_power_w(self) -> float:
        return self.power_model.idle_w

    @property
    def name(self) -> str:
        return f"{self.spec.name} (simulated)"

    @property
    def device_id(self) -> str:
        return (
            f"sim:{self.spec.key}" if self.device_index == 0 else f"sim:{self.spec.key}:{self.device_index}"
        )

    @property
    def end_s(self) -> float:
        """Virtual time at which the scheduled work ends (the device idles after it)."""
        return self._t_end

    # -- the model -------------------------------------------------------------------------------------------
    def operating_point(
        self, workload: WorkloadLike, *, power_scale: float = 1.0, speed: float = 1.0
    ) -> OperatingPoint:
        """Steady state of ``workload`` on this device: step time, utilisation, clock and power."""
        sp = self.params
        rf = roofline(self.spec, workload, sp, speed=speed)
        dtype, flops, nbytes, tokens = rf.dtype, rf.flops, rf.nbytes, rf.tokens
        t_c0, t_m, t_host = rf.t_c0, rf.t_m, rf.t_host
        peak = self.spec.mfu_peak(dtype)
        f_max = self.dvfs.f_max_mhz

        def step_at(f: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
            t_gpu = t_c0 * f_max / f + t_m
            return t_gpu, (t_gpu**5 + t_host**5) ** 0.2

        t_gpu0, step0 = (float(v) for v in step_at(np.array(f_max)))
        util0 = t_gpu0 / step0
        pm = self.power_model
        mfu_pm = pm.mfu_pct(dtype, flops / step0)
        p0 = pm.power_w(dtype, tokens, mfu_pm, util0)
        idle = pm.idle_w
        p0 = idle + max(p0 * power_scale - idle, 0.0)
        e_dyn0 = (p0 - idle) * step0

        def power_at(f: np.ndarray) -> np.ndarray:
            _, st = step_at(np.asarray(f, float))
            return idle + e_dyn0 * self.dvfs.dyn_energy_scale(f) / st

        f = f_max
        if self.locked_clock_mhz is not None or p0 > self.power_limit_w:
            f = self.dvfs.operating_clock(
                power_at, power_cap_w=self.power_limit_w, locked_clock_mhz=self.locked_clock_mhz
            )
        t_gpu, step = (float(v) for v in step_at(np.array(f)))
        p = float(power_at(np.array(f)))
        util = t_gpu / step
        p_gap = idle + sp.gap_power_frac * (p - idle)
        p_busy = (p - (1 - util) * p_gap) / util if util > 0 else p
        t_c = t_c0 * f_max / f
        bound = "host" if t_host > t_gpu else ("compute" if t_c >= t_m else "memory")
        achieved = flops / step
        return OperatingPoint(
            step_time_s=step,
            t_compute_s=t_c,
            t_memory_s=t_m,
            t_host_s=t_host,
            t_gpu_s=t_gpu,
            util=util,
            mem_util=min(1.0, t_m / step),
            sm_clock_mhz=float(f),
            power_w=p,
            power_busy_w=p_busy,
            power_gap_w=p_gap,
            achieved_flops_per_s=achieved,
            mfu=achieved / peak,
            power_model_mfu_pct=pm.mfu_pct(dtype, achieved),
            dram_bytes_per_s=nbytes / step,
            bound=bound,
            throttled=f < f_max - 1e-9 and self.locked_clock_mhz is None,
            power_limit_w=self.power_limit_w,
        )

    def power_offset(self, workload: WorkloadLike) -> tuple[float, float]:
        """(architecture residual, repeat noise) as fractions: sizes from the MASCOTS per-cell data."""
        pm = self.power_model
        sd_arch = pm.resid_sd_pct(workload.dtype, float(workload.tokens_per_step)) / 100.0
        arch = sd_arch * _stable_unit_normal(
            "arch", self.spec.key, workload.label, workload.dtype, workload.tokens_per_step
        )
        rep = pm.repeat_sd_pct / 100.0 * float(self._rng.standard_normal())
        return arch, rep

    # -- the schedule ----------------------------------------------------------------------------------------
    def idle(self, duration_s: float) -> None:
        """Append an idle gap."""
        if not duration_s >= 0:
            raise InputError(f"idle duration must be ≥ 0, got {duration_s!r}", field="duration_s")
        if duration_s > 0:
            self._append(duration_s, kind="idle")

    def run(
        self,
        workload: WorkloadLike,
        steps: int | None = None,
        *,
        duration_s: float | None = None,
        warmup_steps: int = 0,
        extra: Mapping[str, Any] | None = None,
        point: OperatingPoint | None = None,
    ) -> SimulatedRun:
        """Execute ``workload`` for ``steps`` steps (or ≈ ``duration_s``) after the current end of the schedule.

        ``point`` prescribes the steady state instead of the roofline (see :meth:`run_condition`).
        """
        arch, rep = self.power_offset(workload)
        speed = float(np.exp(self.params.run_speed_sd * self._rng.standard_normal()))
        if point is None:
            point = self.operating_point(workload, power_scale=1.0 + arch + rep, speed=speed)
        else:  # a prescribed steady state (run_condition): only the power offsets apply
            idle = self.power_model.idle_w
            scale = 1.0 + arch + rep
            p = point.power_w * scale
            point = _with_power(point, max(p, idle), idle, self.params.gap_power_frac)
        if steps is None:
            if duration_s is None or not duration_s > 0:
                raise InputError(
                    "a run needs steps or a positive duration_s", record=workload.label, field="steps"
                )
            steps = max(1, int(round(duration_s / point.step_time_s)))
        if int(steps) != steps or steps <= 0:
            raise InputError(
                f"steps must be a positive integer, got {steps!r}", record=workload.label, field="steps"
            )
        steps = int(steps)
        idx = len(self.runs)
        warm_start = self._t_end
        if warmup_steps > 0:
            self._append(warmup_steps * point.step_time_s, kind="warmup", point=point, run_index=idx)
        start = self._t_end
        self._append(steps * point.step_time_s, kind="run", point=point, run_index=idx)
        end = self._t_end
        if self.params.tail_s > 0:
            self._append(self.params.tail_s, kind="tail", point=point, run_index=idx)
        e = self.true_energy_j(np.array([start, end]))
        ex = {"step_jitter_cv": self.params.step_jitter_cv, **(extra or {})}
        r = SimulatedRun(
            index=idx,
            label=str(workload.label),
            workload=workload,
            start_s=start,
            end_s=end,
            warmup_start_s=warm_start,
            steps=steps,
            point=point,
            true_energy_j=float(e[1] - e[0]),
            power_offset=arch + rep,
            device=self.device_id,
            device_name=self.name,
            wall0=self.wall0,
            extra=ex,
        )
        self.runs.append(r)
        return r

    def condition_point(
        self, dtype: str, tokens_per_step: float, mfu_pct: float, util: float, step_time_s: float = 0.1
    ) -> OperatingPoint:
        """The steady state at a *measured* condition (power-model MFU in %, utilisation), bypassing the roofline.

        Used to replay the MASCOTS runs: each row's measured MFU and utilisation are imposed, and power follows
        from the power model exactly as it does for a simulated workload.
        """
        dtype = normalize_dtype(dtype)
        pm = self.power_model
        p = pm.power_w(dtype, tokens_per_step, mfu_pct, util)
        peak_pm = pm.mfu_peak_flops.get(dtype) or pm.mfu_peak_flops[pm.cell_dtype(dtype)]
        achieved = mfu_pct / 100.0 * peak_pm
        base = OperatingPoint(
            step_time_s=step_time_s,
            t_compute_s=util * step_time_s,
            t_memory_s=0.0,
            t_host_s=step_time_s,
            t_gpu_s=util * step_time_s,
            util=util,
            mem_util=0.0,
            sm_clock_mhz=self.dvfs.f_max_mhz,
            power_w=p,
            power_busy_w=p,
            power_gap_w=p,
            achieved_flops_per_s=achieved,
            mfu=achieved / self.spec.mfu_peak(dtype),
            power_model_mfu_pct=mfu_pct,
            dram_bytes_per_s=0.0,
            bound="condition",
            throttled=False,
            power_limit_w=self.power_limit_w,
        )
        return _with_power(base, p, pm.idle_w, self.params.gap_power_frac)

    def run_condition(
        self,
        label: str,
        *,
        dtype: str,
        tokens_per_step: float,
        mfu_pct: float,
        util: float,
        duration_s: float,
        step_time_s: float = 0.1,
    ) -> SimulatedRun:
        """Run at a measured (MFU, utilisation) condition for ``duration_s`` (with the usual power offsets)."""
        point = self.condition_point(dtype, tokens_per_step, mfu_pct, util, step_time_s)
        wl = RawWorkload(
            label=label,
            dtype=normalize_dtype(dtype),
            batch_size=1,
            tokens_per_step=float(tokens_per_step),
            flops_per_step=point.achieved_flops_per_s * step_time_s,
            bytes_per_step=0.0,
        )
        return self.run(wl, duration_s=duration_s, point=point)

    def schedule(self, items: Sequence[Idle | Run]) -> list[SimulatedRun]:
        """Append a whole schedule; returns the runs it created."""
        out = []
        for it in items:
            if isinstance(it, Idle):
                self.idle(it.duration_s)
            elif isinstance(it, Run):
                out.append(
                    self.run(
                        it.workload,
                        it.steps,
                        duration_s=it.duration_s,
                        warmup_steps=it.warmup_steps,
                        extra=it.extra,
                    )
                )
            else:
                raise InputError(
                    f"schedule items must be Idle or Run, got {type(it).__name__}", field="schedule"
                )
        return out

    def _append(
        self, duration: float, *, kind: str, point: OperatingPoint | None = None, run_index: int = -1
    ) -> None:
        idle = self.power_model.idle_w
        t0 = self._t_end
        if point is None or kind == "tail":
            p = idle if point is None else idle + self.params.tail_power_frac * (point.power_w - idle)
            clock = self.dvfs.f_idle_mhz if point is None else point.sm_clock_mhz
            seg = _Seg(t0, t0 + duration, 1.0, 0.0, p, p, clock, 0.0, 0.0, kind, run_index)
        else:
            seg = _Seg(
                t0,
                t0 + duration,
                point.step_time_s,
                point.util,
                point.power_busy_w,
                point.power_gap_w,
                point.sm_clock_mhz,
                point.mem_util,
                point.dram_bytes_per_s,
                kind,
                run_index,
            )
        self._segs.append(seg)
        self._t_end = t0 + duration
        self._arrays = None

    # -- the signal (vectorised, closed form) -------------------------------------------------------------------
    def _arr(self) -> dict[str, np.ndarray]:
        if self._arrays is not None:
            return self._arrays
        idle = self.power_model.idle_w
        segs = list(self._segs)
        tail = _Seg(self._t_end, math.inf, 1.0, 0.0, idle, idle, self.dvfs.f_idle_mhz, 0.0, 0.0, "idle", -1)
        segs.append(tail)
        a = {
            "start": np.array([s.start for s in segs]),
            "end": np.array([s.end for s in segs]),
            "period": np.array([s.period for s in segs]),
            "busy": np.array([s.busy_frac for s in segs]),
            "p_busy": np.array([s.p_busy for s in segs]),
            "p_gap": np.array([s.p_gap for s in segs]),
            "clock": np.array([s.clock_mhz for s in segs]),
            "mem_util": np.array([s.mem_util for s in segs]),
            "dram": np.array([s.dram_bps for s in segs]),
            "run": np.array([s.run_index for s in segs]),
            "is_work": np.array([s.kind in ("run", "warmup") for s in segs]),
        }
        dur = a["end"][:-1] - a["start"][:-1]
        e_seg = self._within_energy(a, np.arange(len(segs) - 1), dur)
        b_seg = self._within_busy(a, np.arange(len(segs) - 1), dur)
        a["e0"] = np.concatenate([[0.0], np.cumsum(e_seg)])
        a["b0"] = np.concatenate([[0.0], np.cumsum(b_seg)])
        # Temperature: first order towards ambient + R·P_mean of each segment.
        sp = self.params
        p_mean = a["busy"] * a["p_busy"] + (1 - a["busy"]) * a["p_gap"]
        target = sp.ambient_c + sp.thermal_c_per_w * p_mean
        temp0 = np.empty(len(segs))
        temp0[0] = sp.ambient_c + sp.thermal_c_per_w * idle
        for i in range(len(segs) - 1):
            temp0[i + 1] = target[i] + (temp0[i] - target[i]) * math.exp(-dur[i] / sp.thermal_tau_s)
        a["temp_target"], a["temp0"] = target, temp0
        self._arrays = a
        return a

    @staticmethod
    def _within_energy(a: Mapping[str, np.ndarray], seg: np.ndarray, x: np.ndarray) -> np.ndarray:
        period, busy = a["period"][seg], a["busy"][seg]
        pb, pg = a["p_busy"][seg], a["p_gap"][seg]
        n = np.floor(x / period)
        r = x - n * period
        ub = busy * period
        return n * (ub * pb + (period - ub) * pg) + np.minimum(r, ub) * pb + np.maximum(r - ub, 0.0) * pg

    @staticmethod
    def _within_busy(a: Mapping[str, np.ndarray], seg: np.ndarray, x: np.ndarray) -> np.ndarray:
        period, busy = a["period"][seg], a["busy"][seg]
        n = np.floor(x / period)
        r = x - n * period
        ub = busy * period
        return n * ub + np.minimum(r, ub)

    def _seg_index(self, t: np.ndarray) -> np.ndarray:
        a = self._arr()
        return np.clip(np.searchsorted(a["start"], t, side="right") - 1, 0, len(a["start"]) - 1)

    def true_energy_j(self, t: np.ndarray | Sequence[float]) -> np.ndarray:
        """Exact cumulative energy (J) of the simulated board from t = 0 to each ``t``."""
        t = np.maximum(np.asarray(t, float), 0.0)
        a = self._arr()
        seg = self._seg_index(t)
        return a["e0"][seg] + self._within_energy(a, seg, t - a["start"][seg])

    def busy_time_s(self, t: np.ndarray | Sequence[float]) -> np.ndarray:
        """Cumulative time (s) during which a kernel was running, from t = 0 to each ``t``."""
        t = np.maximum(np.asarray(t, float), 0.0)
        a = self._arr()
        seg = self._seg_index(t)
        return a["b0"][seg] + self._within_busy(a, seg, t - a["start"][seg])

    def state(self, t: np.ndarray | Sequence[float]) -> dict[str, np.ndarray]:
        """Slow-moving state at each ``t``: SM clock, memory utilisation, DRAM throughput, temperature, run index."""
        t = np.maximum(np.asarray(t, float), 0.0)
        a = self._arr()
        seg = self._seg_index(t)
        x = t - a["start"][seg]
        temp = a["temp_target"][seg] + (a["temp0"][seg] - a["temp_target"][seg]) * np.exp(
            -x / self.params.thermal_tau_s
        )
        return {
            "sm_clock_mhz": a["clock"][seg],
            "mem_util": a["mem_util"][seg],
            "dram_bytes_per_s": a["dram"][seg],
            "temp_c": temp,
            "run_index": a["run"][seg],
            "working": a["is_work"][seg],
        }

    def with_limits(
        self, *, power_cap_w: float | None = None, locked_clock_mhz: float | None = None
    ) -> SimulatedAccelerator:
        """A fresh accelerator of the same model and seed with other limits (empty schedule)."""
        return SimulatedAccelerator(
            self.spec.key,
            seed=self.seed,
            power_cap_w=power_cap_w,
            locked_clock_mhz=locked_clock_mhz,
            params=self.params,
            device_index=self.device_index,
            wall0=self.wall0,
        )


def _with_power(point: OperatingPoint, p: float, idle: float, gap_frac: float) -> OperatingPoint:
    """``point`` with mean power ``p`` split into the busy/gap levels of its step."""
    from dataclasses import replace

    p_gap = idle + gap_frac * (p - idle)
    u = point.util
    p_busy = (p - (1 - u) * p_gap) / u if u > 0 else p
    return replace(point, power_w=p, power_busy_w=p_busy, power_gap_w=p_gap)


def _num_layers(workload: Any) -> int:
    """Layer count for the host-time model: ``num_layers`` on the description or its config, else 6."""
    for obj in (workload, getattr(workload, "config", None)):
        n = getattr(obj, "num_layers", None) if obj is not None else None
        if n is None and isinstance(obj, Mapping):
            n = obj.get("num_layers")
        if n is not None:
            return max(1, int(n))
    params = getattr(workload, "params", None)
    if isinstance(params, Mapping) and params.get("num_layers") is not None:
        return max(1, int(params["num_layers"]))
    return 6


__all__ = [
    "Idle",
    "OperatingPoint",
    "Run",
    "SIM_PARAMS",
    "SimParams",
    "SimulatedAccelerator",
    "SimulatedRun",
    "RawWorkload",
    "Roofline",
    "roofline",
]
