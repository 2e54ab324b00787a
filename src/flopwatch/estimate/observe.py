"""What the verifier observed about one run: :class:`Observables`, their time-resolved :class:`ObservedWindows`,
and the recorded context a row is judged in.

``None`` always means *not observed*: a bound may only be tightened by what was seen. The fields:

* ``net_energy_j``, ``duration_s`` — ∫(P − P_idle)dt over the run and its length (required);
* ``tb_moved``, ``mean_util``, ``idle_power_w``, ``coverage`` — DRAM traffic, busy share, baseline, the share
  of the run the samples cover;
* ``sm_clock_mhz`` — mean SM clock (the calibrated estimate's regime); ``min_sm_clock_mhz`` /
  ``max_sm_clock_mhz`` — the observed *range*, which the sound bounds use (a mean can hide a dip);
* ``power_limit_w`` (enforced limit), ``peak_power_w`` (largest observed power: an "A100" drawing 650 W is
  not an A100);
* ``unobserved_s`` — time inside the run that neither a cumulative counter nor a sample covered (gaps, the
  blind part of a sensor's averaging window): bounded at peak rate;
* ``pipe_active_s`` — Σ activity·dt per pipe (``tensor``, ``fp64``, ``fp32``, ``fp16``), as DCGM
  ``DCGM_FI_PROF_PIPE_*_ACTIVE`` and NVML GPM report them (ratio of cycles the pipe is active);
  ``pipe_observed_s`` — the time those counters covered, when it is more than the energy sensor's (they count
  every cycle, so they also see NVML's blind 75 ms of every 100 ms): the pipe seconds then bound that time, and
  only the rest stays at peak rate. None: the pipe counters covered what the energy sensor did, no more;
* ``windows`` — the same per window of the telemetry, for bounds summed over phases;
* ``span_s`` — the run's length as its own timestamps give it (:func:`timestamp_span_s`): a ``duration_s`` under
  it is widened to it, the difference unobserved (round 8, `duration-under-timestamps`).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, fields, replace
from typing import Any

import numpy as np

from flopwatch.sensor_timing import DETECTOR_POLL_S
from flopwatch.units import finite

#: Pipe names of ``pipe_active_s`` (DCGM PIPE_TENSOR/FP64/FP32/FP16_ACTIVE; NVML GPM the same four).
PIPES: tuple[str, ...] = ("tensor", "fp64", "fp32", "fp16")

#: Keys of the recorded context (a monitor row's, the verifier's) compared by
#: :func:`flopwatch.estimate.verdict.assess`.
CONTEXT_KEYS: tuple[str, ...] = (
    "profile_sha256",
    "peaks_in_force",
    "peak_override",
    "sensor_kind",
    "sensor_spec",
    "sample_rate_hz",
    "jitter_seed",
    "flopwatch_version",
)


def recorded_kinds(ctx: Mapping[str, Any]) -> list[str]:
    """The recorded sensor kinds: one, or the daemon's list of them (any other value is one kind, by its text: a
    record's ``sensor_kind: 5`` is a sensor nothing knows, never a crash)."""
    kinds = ctx.get("sensor_kind")
    if kinds is None or kinds == "":
        return []
    return [str(k).strip().lower() for k in (kinds if isinstance(kinds, (list, tuple)) else [kinds])]


def _arr(x: Any, n: int | None, name: str) -> np.ndarray | None:
    if x is None:
        return None
    a = np.asarray(x, dtype=np.float64).reshape(-1)
    if n is not None and a.size != n:
        raise ValueError(f"ObservedWindows.{name} has {a.size} values, dt_s has {n}")
    return a


@dataclass(frozen=True, eq=False)
class ObservedWindows:
    """Per-window observables (numpy float arrays of one length; ``None``: not observed; NaN inside an array:
    not observed in that window).

    ``sm_clock_mhz`` is the *lowest* SM clock seen in each window (the efficiency bound rises as the clock
    falls), ``max_sm_clock_mhz`` the highest (the rate bound rises with it; without it the lowest is used
    only for the efficiency bound). ``*_active`` are activity ratios 0–1 of each pipe averaged over the window.
    """

    dt_s: np.ndarray
    net_energy_j: np.ndarray
    sm_clock_mhz: np.ndarray | None = None
    max_sm_clock_mhz: np.ndarray | None = None
    power_limit_w: np.ndarray | None = None
    tensor_active: np.ndarray | None = None
    fp64_active: np.ndarray | None = None
    fp32_active: np.ndarray | None = None
    fp16_active: np.ndarray | None = None

    def __post_init__(self) -> None:
        dt = _arr(self.dt_s, None, "dt_s")
        assert dt is not None
        object.__setattr__(self, "dt_s", dt)
        for name in _WINDOW_FIELDS:
            object.__setattr__(self, name, _arr(getattr(self, name), dt.size, name))
        if not np.isfinite(dt).all() or (dt < 0).any():
            raise ValueError("ObservedWindows.dt_s must be finite and >= 0")

    def __len__(self) -> int:
        return int(self.dt_s.size)

    def pipe(self, name: str) -> np.ndarray | None:
        """Activity ratio per window of pipe ``name`` (one of :data:`PIPES`)."""
        return getattr(self, f"{name}_active")

    @property
    def has_pipes(self) -> bool:
        return all(self.pipe(p) is not None for p in PIPES)


#: The per-window arrays besides ``dt_s`` (listed once: ``__post_init__`` runs per window set, ~1,300 × a fleet).
_WINDOW_FIELDS = tuple(f.name for f in fields(ObservedWindows) if f.name != "dt_s")


@dataclass(frozen=True, eq=False)
class Observables:
    """What a verifier measures about one run (None where the sensor does not report it; module docstring)."""

    net_energy_j: float
    duration_s: float
    tb_moved: float | None = None
    mean_util: float | None = None
    sm_clock_mhz: float | None = None
    power_limit_w: float | None = None
    idle_power_w: float | None = None
    coverage: float | None = None
    max_sm_clock_mhz: float | None = None
    min_sm_clock_mhz: float | None = None
    peak_power_w: float | None = None
    unobserved_s: float | None = None
    pipe_active_s: Mapping[str, float] | None = None
    windows: ObservedWindows | None = None
    pipe_observed_s: float | None = None
    span_s: float | None = None

    def values(self) -> dict[str, float | None]:
        """The regime observables (derived ones computed; None where unknown or undefined)."""
        e, t = self.net_energy_j, self.duration_s
        bpj = None
        if self.tb_moved is not None and _pos(e):
            bpj = self.tb_moved * 1e12 / e
        return {
            "bytes_per_j": bpj,
            "net_power_w": e / t if _pos(t) and (finite(e) is not None) else None,
            "mean_util": self.mean_util,
            "sm_clock_mhz": self.sm_clock_mhz,
            "power_limit_w": self.power_limit_w,
        }

    @property
    def has_pipes(self) -> bool:
        """Every pipe's activity observed (the format-blind pipe bound needs all four)."""
        p = self.pipe_active_s
        return p is not None and all((finite(p.get(k)) is not None) and p[k] >= 0 for k in PIPES)


def _pos(x: Any) -> bool:
    return (finite(x) is not None) and x > 0


#: Pairs of (start, end) timestamps a record or a ledger row may give, on one clock each: a monitor row's sensor
#: time, a runner's monotonic clock, the join's detected segment (in ``join``), then wall time (used only when no
#: monotonic pair is given: a wall clock may be stepped during a run).
_MONOTONIC_SPANS: tuple[tuple[str, str], ...] = (
    ("start_t_s", "end_t_s"),
    ("start_monotonic_s", "end_monotonic_s"),
)


def timestamp_span_s(row: Mapping[str, Any]) -> float | None:
    """The longest span a record's or a ledger row's own timestamps give the run (None: none given; NaN: a pair
    that ends before it starts, so how long the run took is not known).

    Every pair of timestamps is a claim like ``duration_s``, and the run took at least as long as the longest one
    says: a duration edited under them may not shorten the time the bound covers (round 8)."""

    def span(d: Mapping[str, Any], a: str, b: str) -> float | None:
        x, y = finite(d.get(a)), finite(d.get(b))
        return None if x is None or y is None else y - x if y >= x else math.nan

    join = row.get("join")
    spans = [span(row, a, b) for a, b in _MONOTONIC_SPANS]
    if isinstance(join, Mapping):
        spans.append(span(join, "segment_start_s", "segment_end_s"))
    got = [x for x in spans if x is not None]
    if not got:
        w = span(row, "start_wall", "end_wall")
        got = [] if w is None else [w]
    return math.nan if any(math.isnan(x) for x in got) else max(got, default=None)


#: How far a run's own timestamps may span beyond its ``duration_s`` before that is a warning (round 8): a joined
#: record's duration is its detected segment, which may start up to the detector's two busy polls after the
#: runner's timed region (Fowler 2026: 2 × 1.5 s) — plus 5 % for a sampled segment's edges. Any excess, however
#: small, is unobserved time.
SPAN_SLACK_S = 2 * DETECTOR_POLL_S
SPAN_SLACK_FRACTION = 0.05


def widened_to_span(obs: Observables) -> tuple[Observables, str | None]:
    """``obs`` with its duration widened to ``span_s`` where its own timestamps say the run took longer, the time
    the duration leaves out unobserved (bounded at peak rate), and a warning beyond :data:`SPAN_SLACK_S` +
    :data:`SPAN_SLACK_FRACTION` × the duration (round 8, `duration-under-timestamps`: a duration edited to a tenth
    of its timestamps bounded an A100 run at 0.29 × the truth, "below"). ``obs`` unchanged without a longer span."""
    span, t = finite(obs.span_s), float(obs.duration_s)
    if span is None and obs.span_s is not None and math.isnan(obs.span_s):
        # (a far-future end is a finite span: widened; only a pair that runs backwards says nothing of the length)
        return obs, "the run's timestamps end before they start: how long it ran is not known, never 'below'"
    if span is None or not span > t * (1.0 + 1e-9):
        return obs, None
    why = None
    if span - t > SPAN_SLACK_S + SPAN_SLACK_FRACTION * t:
        why = (
            f"the run's timestamps span {span:.4g} s but its duration says {t:.4g} s: the other {span - t:.4g} s "
            "are bounded at peak rate"
        )
    u0 = finite(obs.unobserved_s)
    # a NaN unobserved time stays (the whole run); a negative one is no credit
    u = obs.unobserved_s if obs.unobserved_s is not None and u0 is None else max(u0 or 0.0, 0.0) + span - t
    return replace(obs, duration_s=span, unobserved_s=u), why


@dataclass(frozen=True)
class SampledRun:
    """Windows of one run built from point samples, the time they leave unobserved, and the run's ranges."""

    windows: ObservedWindows
    unobserved_s: float
    net_energy_j: float
    duration_s: float
    min_sm_clock_mhz: float | None
    max_sm_clock_mhz: float | None
    peak_power_w: float | None
    pipe_active_s: dict[str, float] | None


def windows_from_samples(
    t_s: Any,
    power_w: Any,
    *,
    idle_power_w: float,
    start_s: float,
    end_s: float,
    sm_clock_mhz: Any = None,
    power_limit_w: Any = None,
    pipes: Mapping[str, Any] | None = None,
    max_gap_s: float | None = None,
) -> SampledRun:
    """One window per interval between consecutive samples inside [start_s, end_s].

    An interval longer than ``max_gap_s`` (default: 3 × the median spacing) is *unobserved*: it gets no window
    and its length goes to ``unobserved_s`` (bounded at peak rate), as does the time before the first and after
    the last sample. Each window's energy is the trapezoid of P − P_idle; its clock range is the two end
    samples' (lowest for the efficiency bound, highest for the rate bound); pipe activity the trapezoid mean.
    """
    t = np.asarray(t_s, dtype=np.float64)
    p = np.asarray(power_w, dtype=np.float64)
    keep = (t >= start_s) & (t <= end_s) & np.isfinite(t) & np.isfinite(p)
    order = np.argsort(t[keep], kind="stable")
    t, p = t[keep][order], p[keep][order]

    def sel(x: Any) -> np.ndarray | None:
        if x is None:
            return None
        a = np.asarray(x, dtype=np.float64)[keep][order]
        return a if np.isfinite(a).any() else None

    clk, lim = sel(sm_clock_mhz), sel(power_limit_w)
    pipe_arrs = {k: sel(v) for k, v in (pipes or {}).items() if k in PIPES}
    dur = float(end_s - start_s)
    if t.size < 2:
        empty = ObservedWindows(np.zeros(0), np.zeros(0))
        return SampledRun(empty, max(dur, 0.0), 0.0, dur, None, None, None, None)
    dt = np.diff(t)
    gap = (
        float(max_gap_s)
        if max_gap_s is not None
        else 3.0 * float(np.median(dt[dt > 0]))
        if (dt > 0).any()
        else 0.0
    )
    ok = dt <= gap
    unobserved = float(dt[~ok].sum()) + float(t[0] - start_s) + float(end_s - t[-1])
    e = 0.5 * (p[1:] + p[:-1] - 2.0 * idle_power_w) * dt

    def pair_min(a: np.ndarray | None) -> np.ndarray | None:
        return None if a is None else np.fmin(a[1:], a[:-1])[ok]

    def pair_max(a: np.ndarray | None) -> np.ndarray | None:
        return None if a is None else np.fmax(a[1:], a[:-1])[ok]

    def pair_mean(a: np.ndarray | None) -> np.ndarray | None:
        return None if a is None else (0.5 * (a[1:] + a[:-1]))[ok]

    pm = {k: pair_mean(v) for k, v in pipe_arrs.items()}
    w = ObservedWindows(
        dt_s=dt[ok],
        net_energy_j=e[ok],
        sm_clock_mhz=pair_min(clk),
        max_sm_clock_mhz=pair_max(clk),
        power_limit_w=pair_min(lim),
        tensor_active=pm.get("tensor"),
        fp64_active=pm.get("fp64"),
        fp32_active=pm.get("fp32"),
        fp16_active=pm.get("fp16"),
    )
    pipe_s = None
    if w.has_pipes:
        pipe_s = {k: float(np.nansum(w.pipe(k) * w.dt_s)) for k in PIPES}  # type: ignore[operator]
    return SampledRun(
        windows=w,
        unobserved_s=max(0.0, unobserved),
        net_energy_j=float(e[ok].sum()),
        duration_s=dur,
        min_sm_clock_mhz=None if clk is None else float(np.nanmin(clk)),
        max_sm_clock_mhz=None if clk is None else float(np.nanmax(clk)),
        peak_power_w=float(p.max()),
        pipe_active_s=pipe_s,
    )


#: Trace extra columns (``extra_<name>``) holding pipe activity ratios, per pipe.
TRACE_PIPE_COLUMNS: Mapping[str, str] = {
    "tensor": "extra_tensor_active",
    "fp64": "extra_fp64_active",
    "fp32": "extra_fp32_active",
    "fp16": "extra_fp16_active",
}


def windows_from_trace(trace: Any, segment: Any, *, idle_power_w: float) -> SampledRun:
    """:func:`windows_from_samples` over one detected segment of a trace (a ``telemetry.trace.Trace`` and a
    ``detect.Segment``, used by attribute so that this stage needs neither module): the segment's device,
    ``[start_s, end_s]``, power, SM clock, ``extra_power_limit_w`` and the pipe columns of
    :data:`TRACE_PIPE_COLUMNS` where the trace has them."""
    df = trace.samples
    dev = getattr(segment, "device", None)
    if dev is not None and "device" in df.columns:
        df = df[df["device"] == dev]

    def col(name: str) -> Any:
        return df[name].to_numpy(dtype=np.float64, na_value=np.nan) if name in df.columns else None

    pipes = {k: col(c) for k, c in TRACE_PIPE_COLUMNS.items() if c in df.columns}
    return windows_from_samples(
        col("t_s"),
        col("power_w"),
        idle_power_w=idle_power_w,
        start_s=float(segment.start_s),
        end_s=float(segment.end_s),
        sm_clock_mhz=col("sm_clock_mhz"),
        power_limit_w=col("extra_power_limit_w"),
        pipes=pipes or None,
    )


__all__ = [
    "CONTEXT_KEYS",
    "PIPES",
    "ObservedWindows",
    "Observables",
    "SampledRun",
    "recorded_kinds",
    "timestamp_span_s",
    "widened_to_span",
    "windows_from_samples",
    "windows_from_trace",
]
