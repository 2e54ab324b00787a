"""GPU-jobs folded once into groups (:func:`fold`, :func:`merge`: ``np.bincount`` into a :class:`GroupTable`),
each group judged by the project's one assessment (:func:`judge`; any of its :func:`notes` blocks "below").
Each GPU-job's device, built-in energy and pipe estimates: :func:`devices_of`, :func:`estimates`; docs/fleet.md.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Generator
from dataclasses import dataclass, fields
from typing import Any

import numpy as np

from flopwatch.devices import DEVICES, DeviceSpec, normalize_dtype, resolve
from flopwatch.errors import InputError
from flopwatch.fleet.reader import GpuJobs
from flopwatch.telemetry import dcgm_metrics as M
from flopwatch.units import finite as _fin
from flopwatch.units import unique

#: Every group's note when the series come from a Prometheus the operator runs: power, energy, clocks and activity
#: scaled down together are a lighter job's consistent physics, so nothing in them can certify a "below" (the
#: ledger's rule: evidence the other side can rewrite is no certificate). Calibrated estimates and "above" stand.
OPERATOR_SERIES = "series from the operator's Prometheus (not --verifier-operated): no 'below'"
#: Useful FLOPs per issued pipe FLOP assumed by the pipe interval: a GEMM padded to 128-wide tiles wastes ≤ 30 %
#: on skinny shapes, ~0 on large ones; DCGM sampling noise ±5 %. An assumption, not a measurement.
PIPE_USEFUL_RANGE = (0.7, 1.05)
#: Readings above the claimed model's TDP (window means) or maximum clock by more than this are impossible for
#: it (NVML readings sit a few % above TDP on some boards: the L40 MASCOTS runs reach 343 W against 300 W).
POWER_SLACK, CLOCK_SLACK = 1.15, 1.05
#: Counter and power gauge must agree within this over the windows both cover (the counter is exact; the gauge
#: is a 1 s mean per scrape, so it samples the load: a few % on steady training).
COUNTER_TOLERANCE = 0.10


@functools.lru_cache(maxsize=256)
def _spec(name: str) -> DeviceSpec | None:
    """The spec of a ``modelName`` (or ``--device``), once per name: a fleet has a handful of models."""
    return resolve(name, cpu=False)


def _capability(s: DeviceSpec) -> float:
    return max(s.peak_flops.values())


def devices_of(jobs: GpuJobs, override: str | None) -> tuple[list[DeviceSpec | None], np.ndarray, np.ndarray]:
    """Each GPU-job's device, and whether its model was unknown or its readings impossible for its claim
    (docs/fleet.md, "readings impossible"), so that a bound never rests on a claim the readings contradict."""
    forced = _spec(override) if override else None
    if override and forced is None:
        raise InputError(f"unknown device {override!r}; known: {', '.join(DEVICES)}", field="device")
    out: list[DeviceSpec | None] = []
    unknown = np.zeros(len(jobs), bool)
    impossible = np.zeros(len(jobs), bool)
    claims: dict[str, tuple[DeviceSpec | None, bool, bool]] = {}  # per model name: a fleet has a handful
    # the highest window-mean power, or the mean over the GPU-job where higher (no power gauge: the counter's)
    with np.errstate(invalid="ignore", divide="ignore"):
        power = np.fmax(
            jobs.peak_power_w, np.where(jobs.duration_s > 0, jobs.energy_j / jobs.duration_s, np.nan)
        )
    rows = zip(jobs.model.tolist(), power.tolist(), jobs.clock_max_mhz.tolist(), strict=True)
    for i, (name, p, c) in enumerate(rows):
        if name not in claims:
            # one GPU reporting two models (reader: "A | B") is impossible: the most capable claim stands
            claimed = [_spec(n) for n in name.split(" | ")]
            s = None if None in claimed else max(claimed, key=_capability)  # type: ignore[arg-type]
            if s is None or (forced is not None and _capability(forced) > _capability(s)):
                s = forced
            claims[name] = (s, None in claimed, len(claimed) > 1)
        s, unknown[i], impossible[i] = claims[name]
        if s is not None and not _consistent(s, p, c):
            impossible[i] = True  # readings never ease the claim: the more capable of it and what they fit
            s = max(s, _most_capable(p, c), key=_capability)
        out.append(s)
    return out, unknown, impossible


def _consistent(s: DeviceSpec, power_w: float, clock_mhz: float) -> bool:
    if math.isfinite(power_w) and power_w > s.tdp_w * POWER_SLACK:
        return False
    mc = s.max_sm_clock_mhz
    return not (mc and math.isfinite(clock_mhz) and clock_mhz > mc * CLOCK_SLACK)


def _most_capable(power_w: float, clock_mhz: float) -> DeviceSpec:
    gpus = [s for s in DEVICES.values() if s.vendor != "cpu"]
    fits = [s for s in gpus if _consistent(s, power_w, clock_mhz)] or gpus
    return max(fits, key=_capability)


@dataclass
class Estimates:
    """Per GPU-job: built-in energy estimate (FLOPs, interval) and pipe estimate (NaN: nothing to work with)."""

    energy: np.ndarray
    energy_lo: np.ndarray
    energy_hi: np.ndarray
    pipe: np.ndarray
    pipe_no_clock: np.ndarray  # pipe FLOPs counted at the maximum clock (no clock samples)
    idle_j: np.ndarray
    dtype: np.ndarray  # object: bf16 where the tensor pipe did the work, fp32 where the FP32 pipe did


@np.errstate(invalid="ignore", divide="ignore")
def estimates(jobs: GpuJobs, specs: list[DeviceSpec | None], dtype: str | None) -> Estimates:
    """Both estimators on arrays, one pass per (device, dtype)."""
    from flopwatch.powermodel.device_power import power_model_for

    n = len(jobs)
    inferred = np.where(jobs.fp32_s > jobs.tensor_s, "fp32", "bf16").astype(object)
    e = Estimates(*(np.full(n, np.nan) for _ in range(6)), dtype=np.full(n, dtype) if dtype else inferred)  # type: ignore[arg-type]
    e.pipe_no_clock = np.zeros(n)
    keys = np.array([s.key if s is not None else "" for s in specs], dtype=object)
    for key in set(keys.tolist()) - {""}:
        for d in set(e.dtype[keys == key].tolist()):
            ix = np.flatnonzero((keys == key) & (e.dtype == d))
            spec = next(s for s in specs if s is not None and s.key == key)
            t = jobs.duration_s[ix]
            power = np.where(t > 0, jobs.energy_j[ix] / np.where(t > 0, t, 1.0), np.nan)
            idle = spec.idle_w
            try:
                pm = power_model_for(spec.key)
                util = jobs.busy_s[ix] / jobs.busy_covered_s[ix]  # mean utilisation: the model's activity
                mid, lo, hi = pm.flop_rate(d, power, util=util)
                idle = pm.idle_w
            except (InputError, KeyError, ValueError):
                mid = lo = hi = np.full(len(ix), np.nan)
            e.energy[ix], e.energy_lo[ix], e.energy_hi[ix] = mid * t, lo * t, hi * t
            e.idle_j[ix] = idle * t
            fmax = spec.max_sm_clock_mhz or math.nan
            td = normalize_dtype(d)
            tensor_peak = (
                spec.peak(td) if td != "fp32" and spec.supports(td) else spec.peak_flops.get("tf32", 0.0)
            )
            pipes, no_clock = np.zeros(len(ix)), np.zeros(len(ix))
            for a, af, peak in (
                (jobs.tensor_s[ix], jobs.tensor_mhz_s[ix], tensor_peak),
                (jobs.fp32_s[ix], jobs.fp32_mhz_s[ix], spec.peak_flops.get("fp32", 0.0)),
            ):
                clocked = (af > 0) & math.isfinite(fmax)
                pipes += np.where(clocked, peak * af / fmax, peak * a)
                no_clock += np.where(clocked, 0.0, peak * a)
            e.pipe[ix] = np.where(jobs.pipe_covered_s[ix] > 0, pipes, np.nan)
            e.pipe_no_clock[ix] = no_clock
    m = np.asarray(jobs.mig, bool)
    # MIG instances share their GPU's idle power: each its share of the GPU's instance time (not all)
    if m.any():
        gix = np.unique(jobs.gpu.astype(str), return_inverse=True)[1]
        t = np.where(m, jobs.duration_s, 0.0)
        top = np.zeros(gix.max() + 1)
        np.maximum.at(top, gix, t)
        tot = np.bincount(gix, weights=t)
        e.idle_j = np.where(m, e.idle_j * top[gix] / np.where(tot[gix] > 0, tot[gix], 1.0), e.idle_j)
    return e


@dataclass
class GroupTable:
    """Sums of GPU-job columns per group (arrays of one row per group), with what folding them needs."""

    key: np.ndarray  # object
    gpus: np.ndarray
    sums: dict[str, np.ndarray]  # GpuJobs column (and estimate) → Σ over the group's GPU-jobs
    lo: dict[str, np.ndarray]  # column → minimum
    hi: dict[str, np.ndarray]  # column → maximum
    devices: list[list[DeviceSpec]]  # the group's devices, most capable first
    dtypes: list[list[str]]
    any_unknown_model: np.ndarray
    impossible: list[list[str]]  # "claimed model: why"
    no_energy_estimate: np.ndarray  # GPU-jobs without a built-in estimate

    def row(self, g: int) -> dict[str, float]:
        """Group ``g``'s sums as Python floats (every group's row built once, in one pass over the columns)."""
        if not hasattr(self, "_rows"):
            cols = zip(*(c.tolist() for c in self.sums.values()), strict=True)
            self._rows = [dict(zip(self.sums, r, strict=True)) for r in cols]
        return self._rows[g]


_MIN = ("t_first", "clock_min_mhz", "power_limit_min_w", "min_power_w")
_MAX = ("t_last", "clock_max_mhz", "power_limit_w", "peak_power_w")
_IDS = ("gpu", "instance", "job", "model", "cohort")
#: Every other column is summed (a new GpuJobs column is folded without touching this file).
_SUMMED = tuple(f.name for f in fields(GpuJobs) if f.name not in {*_IDS, *_MIN, *_MAX})


def fold(jobs: GpuJobs, keys: np.ndarray, specs: list[DeviceSpec | None], est: Estimates,
         unknown: np.ndarray, impossible: np.ndarray) -> GroupTable:  # fmt: skip
    """Sum GPU-jobs per group key (``keys``, one per GPU-job), once."""
    uk, gi = np.unique(keys.astype(str), return_inverse=True)
    G = len(uk)
    sums = {c: np.bincount(gi, weights=np.asarray(getattr(jobs, c), float), minlength=G) for c in _SUMMED}
    for c in ("energy", "energy_lo", "energy_hi", "pipe", "pipe_no_clock", "idle_j"):
        x = getattr(est, c)
        sums[c] = np.bincount(gi, weights=np.where(np.isfinite(x), x, 0.0), minlength=G)
        sums[c + "_n"] = np.bincount(gi, weights=np.isfinite(x).astype(float), minlength=G)

    gpu = np.unique(jobs.gpu.astype(str), return_inverse=True)[1]
    n_gpu = int(gpu.max(initial=0)) + 1
    pairs = unique(gi.astype(np.int64) * n_gpu + gpu) // n_gpu  # the group of each (group, GPU) pair
    devs: list[dict[str, DeviceSpec]] = [{} for _ in range(G)]
    dts: list[set[str]] = [set() for _ in range(G)]
    imp: list[set[str]] = [set() for _ in range(G)]
    pw, clk = jobs.peak_power_w, jobs.clock_max_mhz
    for i, g in enumerate(gi.tolist()):
        s = specs[i]
        if s is not None:
            devs[g][s.key] = s
        dts[g].add(str(est.dtype[i]))
        if impossible[i]:
            imp[g].add(f"{jobs.model[i]!s} (power {pw[i]:.0f} W, clock {clk[i]:.0f} MHz)")
    no_est = (~np.isfinite(est.energy) & (jobs.duration_s > 0)).astype(float)
    unk = (unknown & ((jobs.model != "") | np.array([s is None for s in specs]))).astype(float)
    return GroupTable(
        key=uk.astype(object),
        gpus=np.bincount(pairs, minlength=G),
        sums=sums,
        lo={c: _reduce(np.asarray(getattr(jobs, c), float), gi, G, np.minimum, np.inf) for c in _MIN},
        hi={c: _reduce(np.asarray(getattr(jobs, c), float), gi, G, np.maximum, -np.inf) for c in _MAX},
        devices=[sorted(d.values(), key=_capability, reverse=True) for d in devs],
        dtypes=[sorted(x) for x in dts],
        any_unknown_model=np.bincount(gi, weights=unk, minlength=G) > 0,
        impossible=[sorted(x) for x in imp],
        no_energy_estimate=np.bincount(gi, weights=no_est, minlength=G),
    )


def _reduce(x: np.ndarray, gi: np.ndarray, G: int, uf: np.ufunc, init: float) -> np.ndarray:
    """``uf`` of ``x`` per group (``gi``) from ``init``: NaN for a group without a finite value."""
    out = np.full(G, init)
    uf.at(out, gi, np.where(np.isfinite(x), x, init))
    return np.where(np.isfinite(out), out, np.nan)


def merge(parts: list[GroupTable]) -> GroupTable:
    """Partial group tables (one per GPU chunk; chunks share no GPU, so GPU counts add) as one."""
    if len(parts) == 1:
        return parts[0]
    uk, gi = np.unique(np.concatenate([p.key for p in parts]).astype(str), return_inverse=True)
    G = len(uk)

    def add(col: Callable[[GroupTable], np.ndarray]) -> np.ndarray:
        return np.bincount(gi, weights=np.concatenate([col(p) for p in parts]).astype(float), minlength=G)

    devs: list[dict[str, DeviceSpec]] = [{} for _ in range(G)]
    dts: list[set[str]] = [set() for _ in range(G)]
    imp: list[set[str]] = [set() for _ in range(G)]
    cat = [[x for p in parts for x in getattr(p, a)] for a in ("devices", "dtypes", "impossible")]
    for g, d, dt, im in zip(gi.tolist(), *cat, strict=True):
        devs[g].update((x.key, x) for x in d)
        dts[g].update(dt)
        imp[g].update(im)
    return GroupTable(
        key=uk.astype(object),
        gpus=add(lambda p: p.gpus).astype(int),
        sums={c: add(lambda p, c=c: p.sums[c]) for c in parts[0].sums},
        lo={c: _reduce(np.concatenate([p.lo[c] for p in parts]), gi, G, np.minimum, np.inf) for c in _MIN},
        hi={c: _reduce(np.concatenate([p.hi[c] for p in parts]), gi, G, np.maximum, -np.inf) for c in _MAX},
        devices=[sorted(d.values(), key=_capability, reverse=True) for d in devs],
        dtypes=[sorted(x) for x in dts],
        any_unknown_model=add(lambda p: p.any_unknown_model) > 0,
        impossible=[sorted(x) for x in imp],
        no_energy_estimate=add(lambda p: p.no_energy_estimate),
    )


def notes(t: GroupTable, g: int, present: frozenset[str], unlabelled: str | None) -> list[str]:
    """Everything that makes group ``g``'s data suspect or incomplete; each blocks "below"."""
    s = t.row(g)
    out = [] if unlabelled is None else [f"missing labels: {unlabelled}"]
    if t.any_unknown_model[g]:
        out.append("a modelName names no device in the verifier's table: judged as --device, never 'below'"
                   if t.devices[g] else "device model unknown (no modelName, or one flopwatch does not know): use --device")  # fmt: skip
    out += [f"readings impossible for the claimed model {why}: bounded as the most capable of the claim and "
            "the devices they fit" for why in t.impossible[g]]  # fmt: skip
    if s["unseen_s"]:  # round 13, `job-unseen`
        out.append(f"held for {s['unseen_s'] / 3600:.2f} GPU-h (job map or info series) on GPUs no DCGM series reports then: unobserved")  # fmt: skip
    if not t.devices[g]:
        return out
    top, fin = t.devices[g][0], math.isfinite
    mp, plim, cmin = (float(t.lo[c][g]) for c in ("min_power_w", "power_limit_min_w", "clock_min_mhz"))
    r = s["counter_j"] / s["counter_power_j"] if s["counter_power_j"] > 0 else 1.0
    fmax, prof = top.max_sm_clock_mhz, s["prof_covered_s"] > 0
    # (whether it holds, its text), in the order printed: the text is formatted only where it holds
    table = (
        ("overridden by" in " ".join(top.sources),
         lambda: f"device peaks overridden ({top.sources[-1]}): not the datasheet"),
        (s["resets"], lambda: f"energy counter reset {max(1, round(s['resets']))} time(s) (driver reload): "
         "those windows' energy from power"),
        (abs(r - 1) > COUNTER_TOLERANCE, lambda: "energy counter and power gauge disagree: counter "
         f"{r:.0%} of the power's energy (flat or scaled counter?)"),
        (s["energy_from_power_j"] > 0.5 * max(s["energy_j"], 1e-9) and M.ENERGY in present,
         lambda: "energy counter missing for most of the time: energy from the power gauge (sampled, not "
         "exact)"),
        (M.ENERGY not in present,
         lambda: f"{M.ENERGY} missing: energy from the power gauge (sampled, not exact)"),
        (s["no_power_s"], lambda: f"{M.POWER} missing for {s['no_power_s'] / 3600:.2f} GPU-h: energy from the "
         "counter alone, unchecked; no check of load (telemetry stopping, scrapes missed, counters stuck)"),
        (s["out_of_range"],
         lambda: f"utilisation or activity outside [0, 1] in {int(s['out_of_range'])} window(s)"),
        (fin(mp) and mp < 0, lambda: f"negative power ({mp:.3g} W)"),
        (s["busy_covered_s"] < 0.99 * s["covered_s"], lambda: "utilisation unknown for "  # (round 12, util-mixed)
         f"{(s['covered_s'] - s['busy_covered_s']) / 3600:.2f} GPU-h (no GR_ENGINE_ACTIVE nor GPU_UTIL): power unchecked"),
        (not prof,
         lambda: "profiling counters (DCGM_FI_PROF_*) missing: no pipe estimate, no independent check"),
        (prof and s["prof_gap_s"] > 0.01 * max(s["duration_s"], 1.0),
         lambda: f"profiling counters paused for {s['prof_gap_s'] / 3600:.2f} GPU-h while the other fields "
         "were exported"),
        (s["prof_zero_load_s"] > 0, lambda: f"profiling counters stuck at 0 for "
         f"{s['prof_zero_load_s'] / 3600:.2f} GPU-h while power shows load"),
        (s["util_no_power_s"] > 0, lambda: f"utilisation without power for {s['util_no_power_s'] / 3600:.2f} "
         "GPU-h: kernels at least half the time at the claimed model's idle power (impossible)"),
        (s["ends_busy"], lambda: f"telemetry of {int(s['ends_busy'])} series stops under load before the "
         "range ends or starts under load after it begins (exporter lag or outage)"),
        (s["duplicate_s"], lambda: f"a GPU reported twice for {s['duplicate_s'] / 3600:.2f} GPU-h (more "
         "samples than scrapes, two series of it or two jobs holding it at once)"),
        (s["mig"], lambda: "MIG: whole-GPU energy apportioned to instances by activity share (an "
         "apportionment, not a measurement)"),
        (fin(plim) and plim < 0.95 * top.tdp_w, lambda: f"power limit {plim:.0f} W below the TDP "
         f"{top.tdp_w:.0f} W: more FLOP per joule than at nominal"),
        (fmax and fin(cmin) and cmin < 0.9 * fmax, lambda: f"SM clock down to {cmin:.0f} MHz under load "
         f"(max {fmax:.0f}): more FLOP per joule than at nominal"),
        (s["pipe_no_clock"] > 0, lambda: f"{M.SM_CLOCK} missing: pipe peaks at the maximum clock"),
        (len(t.devices[g]) > 1,
         lambda: f"mixed devices ({', '.join(d.key for d in t.devices[g])}): bounded as the most capable"),
    )  # fmt: skip
    return out + [text() for holds, text in table if holds]


def observables(t: GroupTable, g: int, present: frozenset[str]) -> dict[str, Any]:
    """The group's observables for :func:`flopwatch.estimate.verdict.assess`, as keyword arguments (durations are
    GPU-seconds: the peak-rate bound is per GPU)."""
    s = t.row(g)
    top = t.devices[g][0] if t.devices[g] else None
    dur = s["duration_s"]

    def per(x: str, over: str) -> float | None:
        return s[x] / s[over] if s[over] > 0 else None

    idle_w = s["idle_j"] / dur if dur > 0 and s["idle_j_n"] else (top.idle_w if top else None)
    has_pipes = (
        s["prof_covered_s"] > 0
        and {M.FP16, M.FP32, M.FP64} <= present
        and (M.TENSOR in present or M.HMMA in present)
    )
    out = {
        "net_energy_j": s["energy_j"] - (idle_w or 0.0) * dur,
        "duration_s": dur,
        "tb_moved": s["dram_s"] * top.mem_bw_bytes_per_s / 1e12 if top and s["dram_covered_s"] > 0 else None,
        "mean_util": per("busy_s", "busy_covered_s"),
        "sm_clock_mhz": per("clock_mhz_s", "clock_covered_s"),
        "power_limit_w": _fin(t.hi["power_limit_w"][g]),
        "idle_power_w": idle_w,
        "coverage": min(1.0, s["covered_s"] / dur) if dur > 0 else 0.0,
        "max_sm_clock_mhz": _fin(t.hi["clock_max_mhz"][g]),
        "min_sm_clock_mhz": _fin(t.lo["clock_min_mhz"][g]),
        "peak_power_w": _fin(t.hi["peak_power_w"][g]),
        # time the samples stand for beyond the scrapes that arrived (missed scrapes bridged), plus the energy
        # counter's own blind share of the covered time (DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION is NVML's counter,
        # fed by 25 ms of every 100 ms on A100/H100: sensor_timing); rounding noise of the sums (1e-9 of the
        # duration) is none, so that two engines' equal answers take the same bound
        "unobserved_s": u if (u := dur - s["covered_s"] + energy_blind_fraction(top) * s["covered_s"]) > 1e-9 * max(dur, 1.0) else 0.0,
        "pipe_active_s": {"tensor": s["tensor_s"], "fp32": s["fp32_s"], "fp16": s["fp16_s"], "fp64": s["fp64_s"]}
        if has_pipes else None,
        # the profiling counters count every cycle of the time they covered (no blind part)
        "pipe_observed_s": s["prof_covered_s"] if has_pipes else None,
    }  # fmt: skip
    # 12 significant digits: sums of the same samples in another order (another engine) give the same inputs, so
    # the assessment takes the same branch (its bounds tie-break on equal values)
    return {k: _sig(v) for k, v in out.items()}


def _eta_max(spec: DeviceSpec) -> float:
    """:func:`flopwatch.estimate.sound.eta_max` once per spec object (a fleet has a handful; ``_spec`` caches them)."""
    from flopwatch.estimate.sound import eta_max

    got = _ETA.get(id(spec))
    if got is None or got[0] is not spec:
        got = _ETA[id(spec)] = (spec, eta_max(spec))
    return got[1]


_ETA: dict[int, tuple[DeviceSpec, float]] = {}


def energy_blind_fraction(spec: Any) -> float:
    """Share of the covered time the fleet's energy counter does not see (the sensor-timing table's NVML energy
    entry for the device); a device the table does not know: all of it (bounded at peak, as the monitor does)."""
    return 1.0 if spec is None else _blind_fraction(spec.key)


@functools.lru_cache(maxsize=64)
def _blind_fraction(key: str) -> float:  # once per device key (the timing table is fixed), not per group
    from flopwatch.sensor_timing import sensor_timing

    t = sensor_timing(key, "nvml-energy")
    return 1.0 if t is None else t.blind_fraction


def _sig(v: Any) -> Any:
    if isinstance(v, dict):
        return {k: _sig(x) for k, x in v.items()}
    if isinstance(v, float) and math.isfinite(v) and v != 0.0:
        return float(f"{v:.12g}")
    return v


def judge(
    t: GroupTable,
    g: int,
    group_notes: list[str],
    *,
    present: frozenset[str],
    profile: Any | None,
    threshold: float | None,
    confidence: float | None,
) -> Generator[tuple[Any, dict[str, Any]], Any, dict[str, Any]]:
    """Group ``g`` through :func:`~flopwatch.estimate.verdict.assess` (its notes as ``extra_warnings``: each blocks
    "below"); the JSON row. A generator: it yields its assessment's (observables, keyword arguments) and is sent
    the assessment (:func:`~flopwatch.estimate.verdict.drive`: all groups' bounds in one pass). The built-in energy estimate is reported beside the verdict, labelled, never in it."""
    from flopwatch.estimate.observe import Observables

    s = t.row(g)
    obs = Observables(**observables(t, g, present))
    spec = t.devices[g][0] if t.devices[g] else None
    label = str(t.key[g])
    pipe = s["pipe"] if s["pipe_n"] else math.nan
    p_lo, p_hi = pipe * PIPE_USEFUL_RANGE[0], pipe * PIPE_USEFUL_RANGE[1]
    builtin = s["energy"] if s["energy_n"] and not t.no_energy_estimate[g] else math.nan
    e_lo, e_hi = (s["energy_lo"], s["energy_hi"]) if math.isfinite(builtin) else (math.nan, math.nan)
    notes = list(group_notes)
    # the built-in model makes no statement where the power is under its line's lowest fitted point (it gives 0):
    # there it cannot disagree; the physics check below still holds the pipes against the energy
    if (
        profile is None
        and math.isfinite(pipe)
        and math.isfinite(e_lo)
        and builtin > 0
        and (p_hi < e_lo or p_lo > e_hi)
    ):
        notes.append("built-in energy and pipe estimates disagree beyond their intervals")
    if math.isfinite(pipe) and spec is not None and p_lo > max(0.0, obs.net_energy_j) * _eta_max(spec):
        notes.append(
            "pipe counters show more FLOPs than the net energy allows at the device's best efficiency: "
            "energy or power under-reported"
        )
    if obs.duration_s <= 0:
        no = "uncertain" if threshold else None
        return {**_row(t, g, s, obs, [*notes, "no samples"], None, None, (None, None), pipe, no),
                "estimate_reason": "no samples"}  # fmt: skip
    kw = dict(device=spec, threshold_flops=threshold, confidence=confidence, label=label)
    a = yield (
        obs,
        {**kw, "extra_warnings": tuple(notes)},
    )  # assessed with the other groups (fleet/estimate.py)
    if profile is not None:
        point, interval = a.estimate_flops, (a.calibrated_lower_flops, a.calibrated_upper_flops)
        c = a.calibrated_lower_flops, a.calibrated_upper_flops
        if math.isfinite(pipe) and None not in c and (p_hi < c[0] or p_lo > c[1]):  # type: ignore[operator]
            notes.append("calibrated energy and pipe estimates disagree beyond their intervals")
            # a note like any other: it blocks "below" (the pipe counters may not bound what the energy contradicts)
            a = yield obs, {**kw, "extra_warnings": tuple(notes)}
    else:
        point, interval = (builtin if math.isfinite(builtin) else None), (_fin(e_lo), _fin(e_hi))
    row = _row(t, g, s, obs, [*notes, *a.warnings, *a.notes], point, a, interval, pipe,
               a.verdict if threshold is not None else None)  # fmt: skip
    row["estimate_reason"] = None
    if profile is None and point is not None and not point > 0:
        from flopwatch.powermodel.device_power import IDLE_UTIL

        # an idle GPU does no work: 0 is the estimate
        if obs.mean_util is not None and obs.mean_util <= IDLE_UTIL:
            row["estimate_reason"] = f"idle: mean utilisation <= {IDLE_UTIL:.0%}"
        else:  # under every compute-bound line the model makes no statement: say so, never a 0 that reads as one
            row["estimate_flops"] = None
            row["estimate_reason"] = (
                "the built-in model gives 0 at this power (under every compute-bound line)"
            )
    elif row["estimate_flops"] is None:
        row["estimate_reason"] = (
            "no energy estimate for these devices" if profile is None else "no calibrated estimate"
        )
    return row


def _row(
    t: GroupTable,
    g: int,
    s: dict[str, float],
    obs: Any,
    notes: list[str],
    point: float | None,
    a: Any,
    interval: tuple[float | None, float | None],
    pipe: float,
    verdict: str | None,
) -> dict[str, Any]:
    return {
        "key": str(t.key[g]),
        "gpus": int(t.gpus[g]),
        "start": _iso(float(t.lo["t_first"][g])),
        "end": _iso(float(t.hi["t_last"][g])),
        "gpu_hours": s["covered_s"] / 3600.0,
        "energy_j": s["energy_j"],
        "net_energy_j": obs.net_energy_j,
        "verdict": verdict,
        "lower_flops": 0.0 if a is None else _fin(a.verdict_lower_flops),
        "upper_flops": None if a is None else _fin(a.verdict_upper_flops),  # null: unbounded
        "bound": "no samples" if a is None else a.verdict_basis,
        "decisive_at": None if a is None else a.decisive_at,
        "tighten": [] if a is None else list(a.tighten),
        "regime": "n/a" if a is None else a.regime,
        "estimate_flops": None if point is None else _fin(point),
        "estimate_source": (
            "calibrated profile"
            if a is not None and a.model is not None
            else "built-in MFU→power model (MASCOTS 2026 lines; not calibrated on this fleet; never in the verdict)"
        ),
        "estimate_lower_flops": None if interval[0] is None else _fin(interval[0]),
        "estimate_upper_flops": None if interval[1] is None else _fin(interval[1]),
        "pipe_estimate_flops": _fin(pipe),
        "pipe_lower_flops": _fin(pipe * PIPE_USEFUL_RANGE[0]),
        "pipe_upper_flops": _fin(pipe * PIPE_USEFUL_RANGE[1]),
        "coverage": obs.coverage,
        "mean_util": obs.mean_util,
        "energy_from_power_j": s["energy_from_power_j"],
        "counter_resets": round(s["resets"]),
        "devices": [d.key for d in t.devices[g]],
        "dtypes": t.dtypes[g],
        "notes": list(dict.fromkeys(notes)),
    }


def _iso(x: float) -> str | None:
    from datetime import datetime, timezone

    if not math.isfinite(x):
        return None
    return datetime.fromtimestamp(x, tz=timezone.utc).isoformat().replace("+00:00", "Z")
