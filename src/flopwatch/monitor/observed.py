"""The sound bound's observables of one workload, as the accounting sees them reading by reading.

Each interval between two readings becomes an :class:`Interval` (:func:`interval`): its length, net energy, the
part no sample and no energy counter covered, the clock range and highest power of its two readings, the lowest
enforced power limit, and pipe activity where both readings report all four pipe counters (nothing is faked
where a sensor reports none). An :class:`Observed` accumulates them per window of observed time — the
time-resolved :class:`~flopwatch.estimate.observe.ObservedWindows` of a row (issue 21 item 3) — and the
workload's ranges, in bounded memory (:data:`MAX_WINDOWS`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from flopwatch.estimate.observe import PIPES, ObservedWindows
from flopwatch.telemetry.schema import Reading
from flopwatch.units import finite


@dataclass(slots=True)
class Interval:
    """What one interval between two readings showed (the observables of the sound bound, estimate/observe.py)."""

    t0: float
    dt: float
    dnet: float
    uncovered: float  # part of dt that neither a sample nor the energy counter covered
    clk_lo: float | None  # lowest / highest SM clock of its two readings
    clk_hi: float | None
    p_hi: float | None  # highest power of its two readings
    plim: float | None  # lowest enforced power limit of its two readings
    pipes: tuple[float, ...] | None  # Σ activity·dt per pipe, when both readings report all four
    pipe_dt: float = 0.0


#: Most windows a row keeps: beyond this, neighbours merge (sums, ranges widened), so a row stays a few KB.
MAX_WINDOWS = 64


class Observed:
    """Per-window sums of one workload (one window per ``window_s`` of observed time) and its ranges: the
    time-resolved observables of the sound bound (:class:`~flopwatch.estimate.observe.ObservedWindows`)."""

    def __init__(self, window_s: float) -> None:
        self.window_s = window_s
        self.closed: list[tuple[float, float, float, float, float, tuple[float, ...] | None]] = []
        self.lo = math.inf
        self.hi = -math.inf
        self.p_hi = -math.inf
        self._reset()

    def _reset(self) -> None:
        self.dt = self.net = self.pipe_dt = 0.0
        self.w_lo = self.w_plim = math.inf
        self.w_hi = -math.inf
        self.pipe = [0.0, 0.0, 0.0, 0.0]

    def feed(self, iv: Interval, frac: float = 1.0) -> None:
        self.dt += (iv.dt - iv.uncovered) * frac
        self.net += iv.dnet * frac
        if iv.clk_lo is not None:
            self.w_lo = min(self.w_lo, iv.clk_lo)
            self.lo = min(self.lo, iv.clk_lo)
        if iv.clk_hi is not None:
            self.w_hi = max(self.w_hi, iv.clk_hi)
            self.hi = max(self.hi, iv.clk_hi)
        if iv.p_hi is not None:
            self.p_hi = max(self.p_hi, iv.p_hi)
        if iv.plim is not None:
            self.w_plim = min(self.w_plim, iv.plim)
        if iv.pipes is not None:
            for k in range(4):
                self.pipe[k] += iv.pipes[k] * frac
            self.pipe_dt += iv.pipe_dt * frac
        if self.dt >= self.window_s:
            self.closed.append(self._current())
            self._reset()
            if len(self.closed) > MAX_WINDOWS:
                self.closed = [_merge(*self.closed[i : i + 2]) for i in range(0, len(self.closed), 2)]
                self.window_s *= 2

    def _current(self) -> tuple[float, float, float, float, float, tuple[float, ...] | None]:
        # pipe ratios only where the counters covered the whole window (else NaN: that window unobserved)
        full = self.dt > 0 and self.pipe_dt >= self.dt * (1 - 1e-6)
        pipes = tuple(x / self.pipe_dt for x in self.pipe) if full else None
        return (self.dt, self.net, self.w_lo, self.w_hi, self.w_plim, pipes)

    def windows(self, blind: float, tail_dt: float, tail_net: float) -> ObservedWindows | None:
        """The windows up to the row's end (``tail_*``: what was fed after it, taken off the last window when
        it fits there; otherwise left in, which only loosens the bound); ``blind``: the share of observed time
        the sensor does not see (it goes to ``unobserved_s``, bounded at peak rate)."""
        rows = [*self.closed, self._current()] if self.dt > 0 else list(self.closed)
        if rows and 0 < tail_dt <= rows[-1][0]:
            dt, net, *rest = rows[-1]
            rows[-1] = (dt - tail_dt, net - tail_net, *rest)  # type: ignore[assignment]
        rows = [r for r in rows if r[0] > 0]
        if not rows:
            return None
        cols = list(zip(*rows, strict=True))

        def arr(i: int) -> np.ndarray | None:
            a = np.array([x if math.isfinite(x) else np.nan for x in cols[i]], dtype=np.float64)
            return a if np.isfinite(a).any() else None

        pipes = cols[5]
        pa = None
        if any(p is not None for p in pipes):
            pa = np.array([p if p is not None else (np.nan,) * 4 for p in pipes], dtype=np.float64)
        return ObservedWindows(
            dt_s=np.array(cols[0], dtype=np.float64) * (1.0 - blind),
            net_energy_j=np.array(cols[1], dtype=np.float64),
            sm_clock_mhz=arr(2),
            max_sm_clock_mhz=arr(3),
            power_limit_w=arr(4),
            tensor_active=None if pa is None else pa[:, 0],
            fp64_active=None if pa is None else pa[:, 1],
            fp32_active=None if pa is None else pa[:, 2],
            fp16_active=None if pa is None else pa[:, 3],
        )


def _merge(
    a: tuple[float, float, float, float, float, tuple[float, ...] | None],
    b: tuple[float, float, float, float, float, tuple[float, ...] | None] | None = None,
) -> tuple[float, float, float, float, float, tuple[float, ...] | None]:
    """Two neighbouring windows as one: sums added, the clock range and power limit widened."""
    if b is None:
        return a
    dt = a[0] + b[0]
    pipes = None
    if a[5] is not None and b[5] is not None and dt > 0:
        pipes = tuple((x * a[0] + y * b[0]) / dt for x, y in zip(a[5], b[5], strict=True))
    return (dt, a[1] + b[1], min(a[2], b[2]), max(a[3], b[3]), min(a[4], b[4]), pipes)


def _lo(a: float | None, b: float | None) -> float | None:
    xs = [x for x in (finite(a), finite(b)) if x is not None]
    return min(xs) if xs else None


def _hi(a: float | None, b: float | None) -> float | None:
    xs = [x for x in (finite(a), finite(b)) if x is not None]
    return max(xs) if xs else None


#: Reading extras holding pipe activity ratios 0–1 (DCGM ``DCGM_FI_PROF_PIPE_*_ACTIVE``, the trace columns
#: ``extra_<pipe>_active`` of estimate/observe.py), in :data:`~flopwatch.estimate.observe.PIPES` order.
PIPE_EXTRAS = tuple(f"{p}_active" for p in PIPES)


def pipe_pairs(a: Reading, b: Reading) -> tuple[tuple[float, ...], tuple[float, ...]] | None:
    """Both readings' four pipe activity ratios, or None unless both report all four (none is faked)."""
    out = []
    for r in (a, b):
        if not r.extra:
            return None
        vals = tuple(finite(r.extra.get(k)) for k in PIPE_EXTRAS)
        if any(v is None or not 0.0 <= v <= 1.0 for v in vals):
            return None
        out.append(vals)
    return out[0], out[1]  # type: ignore[return-value]


def power_limit(r: Reading) -> float | None:
    """The enforced power limit a reading carries (NVML and the simulator report it; sysfs does not)."""
    return finite(r.extra.get("power_limit_w")) if r.extra else None


def interval(prev: Reading, r: Reading, dnet: float, uncovered: float) -> Interval:
    """The interval from ``prev`` to ``r`` (``dnet``: its net energy; ``uncovered``: the part of it that neither
    a sample nor the energy counter covered)."""
    dt = r.t_s - prev.t_s
    p2 = pipe_pairs(prev, r)
    pipe_dt = dt - uncovered if p2 is not None else 0.0
    return Interval(
        prev.t_s,
        dt,
        dnet,
        uncovered,
        _lo(prev.sm_clock_mhz, r.sm_clock_mhz),
        _hi(prev.sm_clock_mhz, r.sm_clock_mhz),
        _hi(prev.power_w, r.power_w),
        _lo(power_limit(prev), power_limit(r)),
        None if p2 is None else tuple(0.5 * (a + b) * pipe_dt for a, b in zip(*p2, strict=True)),
        pipe_dt,
    )


__all__ = ["MAX_WINDOWS", "PIPE_EXTRAS", "Interval", "Observed", "interval", "pipe_pairs", "power_limit"]
