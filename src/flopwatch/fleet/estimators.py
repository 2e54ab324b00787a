"""The two fleet estimators, per GPU-job, and the per-group verdict.

**Energy.** With a calibrated profile (``--profile``): the profile's model on each GPU's features (net energy
above the profile's idle, covered time, TB moved from DRAM activity, mean utilisation), with its prediction
interval — the same :meth:`flopwatch.estimate.Profile.estimate` as for single runs. Without one: the device's
built-in MFU→power model inverted at the GPU's mean power (:mod:`flopwatch.fleet.powerinv`), labelled as such.
The interval comes from :func:`energy_bounds`, the one place to swap in regime-aware bounds.

**Pipe activity.** FLOPs ≈ Σ_samples activity × peak(pipe, dtype) × f_SM / f_max × Δt: the DCGM profiling
counters give the share of cycles a pipe issued instructions (DCGM field reference, ``DCGM_FI_PROF_PIPE_*``:
"ratio of cycles the … pipe is active"), and a pipe's peak scales with the SM clock. Known errors, documented in
``docs/fleet.md``: issue cycles are not useful FLOPs (padding to tile sizes, wave quantisation and pipeline
bubbles all count as active, so the pipe estimate is biased *up* against model FLOPs); 2:4 structured sparsity
doubles the FLOPs per active cycle and is invisible here (the peaks are dense, ``devices.py``); TENSOR_ACTIVE
mixes precisions, so the dtype chooses the peak (HMMA on Hopper excludes INT8 and FP64); FP16/FP64 vector pipes
have no peak in ``devices.py`` and are reported, not counted.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from flopwatch.devices import DeviceSpec, get_device, normalize_dtype, peak_rate_bound
from flopwatch.errors import InputError
from flopwatch.fleet.aggregate import GpuJob

#: Useful FLOPs per issued pipe FLOP assumed by the pipe estimator's interval: a GEMM padded to 128-wide tiles
#: wastes ≤ 30 % on the skinny shapes of small models and ~0 on large ones; sampling noise of the DCGM
#: counters ±5 %. An assumption, not a measurement (scripts/gpu_check.sh records the error on a real H200).
PIPE_USEFUL_RANGE = (0.7, 1.05)
TENSOR_DTYPES = ("tf32", "fp16", "bf16", "fp8")


@dataclass(frozen=True)
class GpuEstimate:
    """Both estimates for one GPU-job (FLOPs; NaN where an estimator had nothing to work with)."""

    energy_flops: float
    energy_lower: float
    energy_upper: float
    pipe_flops: float
    pipe_lower: float
    pipe_upper: float
    net_energy_j: float
    idle_w: float
    notes: tuple[str, ...] = field(default=())


def device_for(job: GpuJob, override: str | None) -> DeviceSpec | None:
    name = override or job.labels.get("modelName")
    if not name:
        return None
    return _device(name)


@functools.lru_cache(maxsize=256)
def _device(name: str) -> DeviceSpec | None:
    """The spec of a ``modelName`` (or ``--device``), once per name: a fleet has a handful of models."""
    try:
        return get_device(name)
    except InputError:
        return None


#: Mean utilisation below which a GPU-job is outside the calibrated regime (the Jetson study's frontier gate,
#: Fowler 2026: mean GPU utilisation >= 80 %): host- or memory-bound work draws less power per FLOP.
MIN_UTIL = 0.8
#: The per-GPU-job note of a GPU-job below :data:`MIN_UTIL`; the group replaces it by one counted note.
LOW_UTIL_NOTE = (
    f"mean utilisation < {MIN_UTIL:.0%}: outside the energy model's regime, bounds widened to [0, ceiling]"
)
#: The note of a GPU-job without samples in the range (no energy estimate).
NO_SAMPLES_NOTE = "no samples"
#: The note of a GPU-job whose utilisation is unknown (no GR_ENGINE_ACTIVE nor GPU_UTIL).
UNKNOWN_UTIL_NOTE = "utilisation unknown: outside the energy model's regime, bounds widened to [0, ceiling]"


def energy_bounds(
    flops: float, lower: float, upper: float, job: GpuJob, spec: DeviceSpec, *, ceiling_flops_per_s: float
) -> tuple[float, float, list[str]]:
    """Interval of the energy estimate of one GPU-job, and why it was widened.

    Today: the model's own interval, made to contain the point, widened to the model's ceiling over the busy
    time when the job ran below the frontier gate's utilisation (where power says little about FLOPs), and
    capped by the peak-rate bound of :mod:`flopwatch.estimate.bounds`. The regime-aware assessment there
    (``flopwatch.estimate.verdict.assess``: efficiency envelope, regime checks) is the next step for this
    function; its inputs (the GPU-job's features and the device) are what it needs.
    """

    lo, hi = min(lower, flops), max(upper, flops)
    notes = []
    util = job.busy_s / job.busy_covered_s if job.busy_covered_s > 0 else None
    if util is None or util < MIN_UTIL:
        busy = job.busy_s if util is not None else job.covered_s
        hi = max(hi, ceiling_flops_per_s * busy)
        lo = 0.0
        # no per-GPU number in LOW_UTIL_NOTE: the group collects one note for all its GPU-jobs (estimate._close)
        notes.append(LOW_UTIL_NOTE if util is not None else UNKNOWN_UTIL_NOTE)
    # no device computes faster than its dense peak at its fastest precision (flopwatch.estimate.bounds)
    cap = peak_rate_bound(spec, job.duration_s)
    if math.isfinite(cap) and cap > 0:
        hi = min(hi, cap)
        lo = min(lo, hi)
    return lo, hi, notes


def energy_estimate(
    job: GpuJob, spec: DeviceSpec, dtype: str, profile: Any | None
) -> tuple[float, float, float, float, float, list[str]]:
    """(flops, lower, upper, net_energy_j, idle_w, notes) of the energy estimator for one GPU-job."""
    notes: list[str] = []
    t = job.duration_s
    if t <= 0:
        return (math.nan,) * 5 + ([NO_SAMPLES_NOTE],)  # type: ignore[return-value]
    if profile is not None:
        idle = profile.idle_power_w if profile.idle_power_w is not None else spec.idle_w
        net = max(job.energy_j - idle * t, 0.0)
        tb = job.dram_active_s * spec.mem_bw_bytes_per_s / 1e12 if job.dram_covered_s > 0 else None
        util = job.busy_s / job.busy_covered_s if job.busy_covered_s > 0 else None
        try:
            est = profile.estimate(net, t, tb_moved=tb, mean_util=util, dtype=profile.dtype, label=job.group)
        except InputError as e:
            return math.nan, math.nan, math.nan, net, idle, [f"profile: {e.detail}"]
        ceiling = max(spec.peak_flops.values())
        lo, hi, more = energy_bounds(
            est.flops, est.lower_flops, est.upper_flops, job, spec, ceiling_flops_per_s=ceiling
        )
        return est.flops, lo, hi, net, idle, list(est.warnings) + more
    from flopwatch.fleet.powerinv import power_inverse

    inv = power_inverse(spec.key, dtype)
    net = max(job.energy_j - inv.idle_w * t, 0.0)
    mid, lo, hi = inv.rate(job.energy_j / t)
    f, flo, fhi = mid * t, lo * t, hi * t
    flo, fhi, more = energy_bounds(f, flo, fhi, job, spec, ceiling_flops_per_s=inv.ceiling_flops)
    return f, flo, fhi, net, inv.idle_w, notes + more


_PIPE_PEAKS: dict[tuple[str, str], tuple[tuple[str, float | None, str], ...]] = {}


def _pipe_peaks(spec: DeviceSpec, dtype: str) -> tuple[tuple[str, float | None, str], ...]:
    """(pipe, peak FLOP/s or None, note when None) of the tensor and FP32 pipes for ``dtype``: once per device and
    dtype, not per GPU-job."""
    hit = _PIPE_PEAKS.get((spec.key, dtype))
    if hit is None:
        hit = _PIPE_PEAKS[(spec.key, dtype)] = _pipe_peaks_of(spec, dtype)
    return hit


def _pipe_peaks_of(spec: DeviceSpec, dtype: str) -> tuple[tuple[str, float | None, str], ...]:
    d = normalize_dtype(dtype)
    tensor_dtype = d if d in TENSOR_DTYPES else "tf32"
    out = []
    for pipe, pdt in (("tensor", tensor_dtype), ("fp32", "fp32")):
        if spec.supports(pdt):
            out.append((pipe, spec.peak(pdt), ""))
        else:
            out.append((pipe, None, f"{spec.name} has no {pdt} peak: {pipe} pipe not counted"))
    return tuple(out)


def pipe_estimate(job: GpuJob, spec: DeviceSpec, dtype: str) -> tuple[float, list[str]]:
    """Pipe-activity FLOPs of one GPU-job, and what limited it."""
    notes: list[str] = []
    fmax = spec.max_sm_clock_mhz
    total, any_pipe = 0.0, False
    for pipe, peak, why in _pipe_peaks(spec, dtype):
        if getattr(job, f"{pipe}_covered_s") <= 0:
            continue
        any_pipe = True
        if peak is None:
            notes.append(why)
            continue
        af, a = getattr(job, f"{pipe}_af"), getattr(job, f"{pipe}_a")
        if fmax and af > 0:
            total += peak * af / fmax
        else:
            total += peak * a  # at the maximum clock: an upper bound when the clock was lower
            if a > 0:
                notes.append(
                    f"{pipe} pipe at the maximum SM clock (clock {'missing' if not fmax else 'not sampled'})"
                )
    # pipes without a peak (job.other_pipes_s) are reported once per group, not per GPU-job (estimate._close)
    return (total if any_pipe else math.nan), notes


def estimate_gpu_job(
    job: GpuJob, spec: DeviceSpec, dtype: str, profile: Any | None, *, pipes: bool = True
) -> GpuEstimate:
    """Both estimates of one GPU-job; ``pipes=False``: the energy estimate only (the pipe one NaN: the job-level
    rules give it per group)."""
    f, lo, hi, net, idle, notes = energy_estimate(job, spec, dtype, profile)
    p, pnotes = pipe_estimate(job, spec, dtype) if pipes else (math.nan, [])
    a, b = PIPE_USEFUL_RANGE
    return GpuEstimate(
        energy_flops=f,
        energy_lower=lo,
        energy_upper=hi,
        pipe_flops=p,
        pipe_lower=p * a,
        pipe_upper=p * b,
        net_energy_j=net,
        idle_w=idle,
        notes=tuple(notes + pnotes),
    )


@dataclass(frozen=True)
class BuiltinEnergy:
    """The built-in model's energy estimates of many GPU-jobs of one device model and dtype, as arrays
    (:func:`builtin_energy`); ``ok``: the GPU-job has samples (else NaN and the note "no samples")."""

    flops: np.ndarray
    lower: np.ndarray
    upper: np.ndarray
    net_energy_j: np.ndarray
    ok: np.ndarray
    wide: np.ndarray  # bounds widened to [0, ceiling]: utilisation below MIN_UTIL, or unknown
    known: np.ndarray  # utilisation known
    util: np.ndarray  # mean utilisation (NaN where unknown)
    idle_w: float


def builtin_energy(
    energy_j: np.ndarray,
    duration_s: np.ndarray,
    busy_s: np.ndarray,
    busy_covered_s: np.ndarray,
    covered_s: np.ndarray,
    spec: DeviceSpec,
    dtype: str,
) -> BuiltinEnergy:
    """:func:`energy_estimate` and :func:`energy_bounds` of the built-in model on arrays of GPU-jobs (one numpy pass:
    a fleet has ~10 GPU-jobs per GPU-day); the same values element by element (tests/test_fleet.py)."""
    from flopwatch.fleet.powerinv import power_inverse

    inv = power_inverse(spec.key, dtype)
    e, t, busy, busy_cov, cov = energy_j, duration_s, busy_s, busy_covered_s, covered_s
    ok = t > 0
    safe_t = np.where(ok, t, 1.0)
    with np.errstate(invalid="ignore", divide="ignore"):
        mid, lo, hi = inv.rates(e / safe_t)
        f, flo, fhi = mid * t, lo * t, hi * t
        net = np.maximum(e - inv.idle_w * t, 0.0)
        # energy_bounds, on arrays
        blo, bhi = np.minimum(flo, f), np.maximum(fhi, f)
        known = busy_cov > 0
        util = np.where(known, busy / np.where(known, busy_cov, 1.0), np.nan)
        wide = ~known | (util < MIN_UTIL)
    bhi = np.where(wide, np.maximum(bhi, inv.ceiling_flops * np.where(known, busy, cov)), bhi)
    blo = np.where(wide, 0.0, blo)
    cap = peak_rate_bound(spec, 1.0)  # × duration: max peak × t
    if math.isfinite(cap) and cap > 0:
        capped = cap * t
        bhi = np.where(capped >= 0, np.minimum(bhi, capped), bhi)
        blo = np.where(capped >= 0, np.minimum(blo, bhi), blo)
    nan = np.full(len(t), np.nan)
    return BuiltinEnergy(
        flops=np.where(ok, f, nan),
        lower=np.where(ok, blo, nan),
        upper=np.where(ok, bhi, nan),
        net_energy_j=np.where(ok, net, nan),
        ok=ok,
        wide=wide & ok,
        known=known,
        util=util,
        idle_w=inv.idle_w,
    )


def estimate_gpu_jobs(
    jobs: Sequence[GpuJob], spec: DeviceSpec, dtype: str, profile: Any | None, *, pipes: bool = True
) -> list[GpuEstimate]:
    """:func:`estimate_gpu_job` of many GPU-jobs of one device model and dtype: the built-in model's energy
    estimates and bounds in one numpy pass (:func:`builtin_energy`), the same values element by element
    (tests/test_fleet.py); a profile's model, one GPU-job at a time."""
    if profile is not None or not jobs:
        return [estimate_gpu_job(j, spec, dtype, profile, pipes=pipes) for j in jobs]
    col = lambda name: np.fromiter((getattr(j, name) for j in jobs), float, len(jobs))  # noqa: E731
    b = builtin_energy(
        *(col(k) for k in ("energy_j", "duration_s", "busy_s", "busy_covered_s", "covered_s")), spec, dtype
    )
    out = []
    for i, j in enumerate(jobs):
        if not b.ok[i]:
            out.append(estimate_gpu_job(j, spec, dtype, None, pipes=pipes))
            continue
        notes = [] if not b.wide[i] else [LOW_UTIL_NOTE if b.known[i] else UNKNOWN_UTIL_NOTE]
        p, pnotes = pipe_estimate(j, spec, dtype) if pipes else (math.nan, [])
        a, c = PIPE_USEFUL_RANGE
        out.append(
            GpuEstimate(
                energy_flops=float(b.flops[i]),
                energy_lower=float(b.lower[i]),
                energy_upper=float(b.upper[i]),
                pipe_flops=p,
                pipe_lower=p * a,
                pipe_upper=p * c,
                net_energy_j=float(b.net_energy_j[i]),
                idle_w=b.idle_w,
                notes=tuple(notes + pnotes),
            )
        )
    return out


def verdict(lower: float, upper: float, threshold: float | None) -> str | None:
    """``above`` (lower bound over the threshold), ``below`` (upper bound under it), else ``uncertain``."""
    if threshold is None:
        return None
    if not (math.isfinite(lower) and math.isfinite(upper)):
        return "unknown"
    if lower > threshold:
        return "above"
    if upper < threshold:
        return "below"
    return "uncertain"


def disagree(e_lo: float, e_hi: float, p_lo: float, p_hi: float) -> bool:
    """The two intervals do not overlap: one estimator is wrong, or the workload evades one of them."""
    vals = (e_lo, e_hi, p_lo, p_hi)
    if not all(math.isfinite(v) for v in vals):
        return False
    return p_hi < e_lo or p_lo > e_hi
