"""Energy, coverage, utilisation and DRAM traffic over many windows of a trace in one streaming pass.

:func:`integrate_windows` reads a trace chunk by chunk (see :mod:`flopwatch.telemetry.source`) and
accumulates, for every window edge, the running integrals it needs: cost linear in rows (plus
windows × chunks), memory bounded by one chunk and the number of windows, whatever the trace length.

The quantities are exactly those of :meth:`Trace.energy <flopwatch.telemetry.trace.Trace.energy>` (which delegates here), per device:

* ``counter``: when the device has ≥ 2 readings of a cumulative energy counter whose span meets the
  window, the counter's delta (a backward step is a reset, whose interval is filled from power, as
  :func:`flopwatch.units.unwrap_counter` marks it), interpolated linearly at the window edges;
* ``trapezoid`` otherwise: the integral of power, linearly interpolated between samples;
* ``coverage``: the fraction of the window inside intervals between consecutive samples at most
  ``max_gap_s`` apart (default 3 × the device's median sampling period, over the whole trace);
* ``mean_util``: the mean utilisation of the readings inside the window (edges included);
* ``bytes_moved``: the trapezoid of ``dram_bytes_per_s`` (None without that series).

Each integral is the sum of per-chunk contributions, each relative to the chunk's first sample, so a
week-long trace loses no precision to a large running total.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from flopwatch.errors import InputError
from flopwatch.telemetry.source import Chunk, TraceLike, TraceSource, open_source

#: Columns one integration pass reads.
INTEGRATE_COLUMNS = ("power_w", "energy_j", "util", "dram_bytes_per_s")


@dataclass(frozen=True)
class Window:
    """``[t0, t1]`` in trace seconds on ``device`` (None: every device of the trace, summed)."""

    t0: float
    t1: float
    device: str | None = None


@dataclass(frozen=True)
class WindowEnergy:
    """What :func:`integrate_windows` measures over one window (see the module docstring).

    ``net_energy_j`` subtracts ``idle_power_w × duration`` per device; ``coverage`` is the minimum over
    the devices summed; ``method`` is "counter", "trapezoid", "mixed" or "none".
    """

    window: Window
    energy_j: float
    net_energy_j: float
    coverage: float
    method: str
    duration_s: float
    mean_util: float | None
    bytes_moved: float | None
    n_util_samples: int


class StreamingMedian:
    """The median of values added in chunks, in bounded memory.

    Exact while at most ``cap`` values were added; past that, the values go into a histogram of
    ``resolution``-wide bins (counts only), and the median is the centre of the median bin: within
    ``resolution / 2`` of the exact value. Memory: ``cap`` floats, or one count per occupied bin.
    """

    def __init__(self, resolution: float, cap: int = 1 << 18) -> None:
        self.resolution = float(resolution)
        self.cap = int(cap)
        self.n = 0
        self._parts: list[np.ndarray] | None = []
        self._keys = np.zeros(0, dtype=np.int64)
        self._counts = np.zeros(0, dtype=np.int64)

    @property
    def exact(self) -> bool:
        return self._parts is not None

    def add(self, v: np.ndarray) -> None:
        v = np.asarray(v, dtype=float)
        v = v[np.isfinite(v)]
        if v.size == 0:
            return
        self.n += int(v.size)
        if self._parts is not None:
            self._parts.append(v.copy())
            if self.n > self.cap:
                allv = np.concatenate(self._parts)
                self._parts = None
                self._bin(allv)
            return
        self._bin(v)

    def _bin(self, v: np.ndarray) -> None:
        keys = np.round(v / self.resolution).astype(np.int64)
        # merge counts: existing bins keep theirs, new values add one each
        allk = np.concatenate([self._keys, keys])
        allc = np.concatenate([self._counts, np.ones(keys.size, dtype=np.int64)])
        k, inv = np.unique(allk, return_inverse=True)
        c = np.bincount(inv, weights=allc).astype(np.int64)
        self._keys, self._counts = k, c

    def median(self) -> float:
        if self.n == 0:
            return math.nan
        if self._parts is not None:
            return float(np.median(np.concatenate(self._parts)))
        cum = np.cumsum(self._counts)
        # the lower and upper middle values (equal for an odd count), as np.median averages them
        lo = self._keys[np.searchsorted(cum, (self.n - 1) // 2 + 1)]
        hi = self._keys[np.searchsorted(cum, self.n // 2 + 1)]
        return 0.5 * (lo + hi) * self.resolution


class _Acc:
    """Per-device running integrals, each evaluated at the sorted query points ``q``."""

    def __init__(self, q: np.ndarray, max_gap_s: float) -> None:
        nq = q.size
        self.q = q
        self.gap = max_gap_s
        self.ec = np.zeros(nq)  # counter energy up to q
        self.cc = np.zeros(nq)  # covered seconds up to q, counter rows
        self.ep = np.zeros(nq)  # trapezoid energy up to q
        self.cp = np.zeros(nq)  # covered seconds up to q, power rows
        self.bd = np.zeros(nq)  # DRAM bytes up to q
        self.n_le = np.zeros(nq, dtype=np.int64)  # util readings with t ≤ q
        self.n_lt = np.zeros(nq, dtype=np.int64)  # util readings with t < q
        self.s_le = np.zeros(nq)
        self.s_lt = np.zeros(nq)
        self.n = {"c": 0, "p": 0, "d": 0}
        self.first_c = math.nan
        self.last_c = math.nan
        self._carry: dict[str, tuple[float, float, float] | None] = {"c": None, "p": None, "d": None}

    def _nodes(
        self, key: str, t: np.ndarray, y: np.ndarray, aux: np.ndarray | None = None
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
        """Chunk rows prefixed by the previous chunk's last row of this series."""
        carry = self._carry[key]
        if t.size:
            self._carry[key] = (float(t[-1]), float(y[-1]), float(aux[-1]) if aux is not None else math.nan)
            self.n[key] += int(t.size)
        if carry is not None:
            t = np.concatenate([[carry[0]], t])
            y = np.concatenate([[carry[1]], y])
            if aux is not None:
                aux = np.concatenate([[carry[2]], aux])
        return t, y, aux

    def _add_linear(self, out: np.ndarray, t: np.ndarray, cum: np.ndarray) -> None:
        """``out += `` the piecewise-linear running total ``cum`` (0 at t[0]) at every q, clamped."""
        out += np.interp(self.q, t, cum)

    def _add_trapezoid(self, out: np.ndarray, t: np.ndarray, y: np.ndarray) -> np.ndarray:
        """``out += ∫_{t0}^{q} y`` (y linear between nodes, clamped to the nodes' span); returns node cums."""
        dt = np.diff(t)
        cum = np.concatenate([[0.0], np.cumsum(0.5 * (y[:-1] + y[1:]) * dt)])
        q = self.q
        k = np.clip(np.searchsorted(t, q, side="right") - 1, 0, t.size - 2)
        x = np.clip(q, t[0], t[-1])
        h = x - t[k]
        span = t[k + 1] - t[k]
        with np.errstate(invalid="ignore", divide="ignore"):
            yx = np.where(span > 0, y[k] + (y[k + 1] - y[k]) * h / span, y[k])
        out += cum[k] + h * 0.5 * (y[k] + yx)
        return cum

    def _coverage(self, out: np.ndarray, t: np.ndarray) -> None:
        dt = np.diff(t)
        cum = np.concatenate([[0.0], np.cumsum(np.where(dt <= self.gap, dt, 0.0))])
        self._add_linear(out, t, cum)

    def feed(self, t: np.ndarray, cols: Mapping[str, np.ndarray]) -> None:
        """Add one chunk's readings (gaps removed) of this device."""
        p, e, u, d = cols["power_w"], cols["energy_j"], cols["util"], cols["dram_bytes_per_s"]
        okc = np.isfinite(e)
        if okc.any():
            tc, ec, pc = self._nodes("c", t[okc], e[okc], p[okc])
            if math.isnan(self.first_c):
                self.first_c = float(tc[0])
            self.last_c = float(tc[-1])
            if tc.size >= 2:
                inc = np.diff(ec)
                back = inc < 0  # a reset: the delta is unknowable, fill that interval from power
                if back.any():
                    trap = 0.5 * (pc[:-1] + pc[1:]) * np.diff(tc)
                    inc = np.where(back, np.nan_to_num(trap, nan=0.0), inc)
                self._add_linear(self.ec, tc, np.concatenate([[0.0], np.cumsum(inc)]))
                self._coverage(self.cc, tc)
        okp = np.isfinite(p)
        if okp.any():
            tp, yp, _ = self._nodes("p", t[okp], p[okp])
            if tp.size >= 2:
                self._add_trapezoid(self.ep, tp, yp)
                self._coverage(self.cp, tp)
        okd = np.isfinite(d)
        if okd.any():
            td, yd, _ = self._nodes("d", t[okd], d[okd])
            if td.size >= 2:
                self._add_trapezoid(self.bd, td, yd)
        oku = np.isfinite(u)
        if oku.any():
            tu, uu = t[oku], u[oku]
            cs = np.concatenate([[0.0], np.cumsum(uu)])
            r = np.searchsorted(tu, self.q, side="right")
            lft = np.searchsorted(tu, self.q, side="left")
            self.n_le += r
            self.n_lt += lft
            self.s_le += cs[r]
            self.s_lt += cs[lft]

    def result(
        self, i0: int, i1: int, t0: float, t1: float
    ) -> tuple[float, float, str, float | None, float | None, int]:
        dur = t1 - t0
        if self.n["c"] >= 2 and self.first_c <= t1 and self.last_c >= t0:
            e = float(self.ec[i1] - self.ec[i0])
            cov = float((self.cc[i1] - self.cc[i0]) / dur) if dur > 0 else 0.0
            method = "counter"
        elif self.n["p"] >= 2:
            e = float(self.ep[i1] - self.ep[i0])
            cov = float((self.cp[i1] - self.cp[i0]) / dur) if dur > 0 else 0.0
            method = "trapezoid"
        else:
            e, cov, method = 0.0, 0.0, "none"
        nu = int(self.n_le[i1] - self.n_lt[i0])
        mu = float((self.s_le[i1] - self.s_lt[i0]) / nu) if nu > 0 else None
        moved = float(self.bd[i1] - self.bd[i0]) if self.n["d"] >= 2 else None
        return e, cov, method, mu, moved, nu


def _as_window(w: Window | Sequence[object]) -> Window:
    if isinstance(w, Window):
        win = w
    else:
        t = tuple(w)
        win = Window(float(t[0]), float(t[1]), None if len(t) < 3 or t[2] is None else str(t[2]))  # type: ignore[arg-type]
    if not (math.isfinite(win.t0) and math.isfinite(win.t1)):
        raise InputError(f"window [{win.t0}, {win.t1}] is not finite", field="t0")
    if not win.t1 >= win.t0:
        raise InputError(f"interval end {win.t1} is before its start {win.t0}", field="t1")
    return win


def device_periods(source: TraceSource) -> tuple[dict[str, float], dict[str, int]]:
    """One pass over ``t_s`` only: each device's median sampling period (readings, NaN when < 2) and
    reading count."""
    meds: dict[int, StreamingMedian] = {}
    last: dict[int, float] = {}
    counts: dict[int, int] = {}
    for ch in source.chunks(()):
        _period_step(ch, meds, last, counts)
    names = source.device_names
    return (
        {names[c]: m.median() for c, m in meds.items()},
        {names[c]: n for c, n in counts.items()},
    )


def _period_step(
    ch: Chunk, meds: dict[int, StreamingMedian], last: dict[int, float], counts: dict[int, int]
) -> None:
    samp = ~ch.is_gap
    for code, idx in _by_device(ch, samp):
        t = ch.t_s[idx]
        m = meds.setdefault(code, StreamingMedian(resolution=1e-6))  # µs bins past the cap
        if code in last:
            t = np.concatenate([[last[code]], t])
        m.add(np.diff(t))
        last[code] = float(t[-1])
        counts[code] = counts.get(code, 0) + int(idx.size)


def _by_device(ch: Chunk, mask: np.ndarray) -> Iterable[tuple[int, np.ndarray]]:
    """(device code, row indices) of the rows in ``mask`` with a device, in file order."""
    dev = ch.device
    sel = mask & (dev >= 0)
    if not sel.any():
        return []
    first = int(dev[np.argmax(sel)])
    if (dev[sel] == first).all():
        return [(first, np.flatnonzero(sel))]
    return [(int(c), np.flatnonzero(sel & (dev == c))) for c in np.unique(dev[sel])]


def integrate_windows(
    source: TraceLike,
    windows: Iterable[Window | Sequence[object]],
    *,
    idle_power_w: float | Mapping[str, float] = 0.0,
    max_gap_s: float | Mapping[str, float] | None = None,
) -> list[WindowEnergy]:
    """Energy, coverage, mean utilisation and DRAM bytes over every window, in one pass over the trace
    (plus a pass over ``t_s`` alone when ``max_gap_s`` is not given: the default tolerance needs each
    device's median period). ``idle_power_w`` is one value or one per device; results are in the order
    of ``windows``."""
    src = open_source(source)
    wins = [_as_window(w) for w in windows]
    if isinstance(max_gap_s, Mapping):
        gaps: dict[str, float] | None = {str(k): float(v) for k, v in max_gap_s.items()}
    elif max_gap_s is None:
        periods, _ = device_periods(src)
        gaps = {d: 3.0 * p for d, p in periods.items()}
    else:
        gaps = None
    accs, devices = _integrate_pass(
        src, wins, gaps, max_gap_s if isinstance(max_gap_s, float | int) else None
    )
    return _results(wins, accs, devices, idle_power_w)


def _integrate_pass(
    src: TraceSource,
    wins: Sequence[Window],
    gaps: Mapping[str, float] | None,
    gap_all: float | None,
    on_chunk: Callable[[Chunk], None] | None = None,
) -> tuple[dict[str, _Acc], list[str]]:
    """The one pass: every chunk's readings into each device's accumulators. ``on_chunk(chunk)`` (if
    given) sees every chunk too (detection uses it for the idle baseline)."""
    q = np.unique(np.array([x for w in wins for x in (w.t0, w.t1)], dtype=float))
    accs: dict[int, _Acc] = {}
    seen: set[int] = set()
    for ch in src.chunks(INTEGRATE_COLUMNS):
        if on_chunk is not None:
            on_chunk(ch)
        seen.update(int(c) for c in np.unique(ch.device) if c >= 0)
        for code, idx in _by_device(ch, ~ch.is_gap):
            acc = accs.get(code)
            if acc is None:
                name = src.device_names[code]
                g = gap_all if gap_all is not None else (gaps or {}).get(name, math.nan)
                g = math.inf if g is None or not math.isfinite(g) else float(g)
                acc = accs[code] = _Acc(q, g)
            acc.feed(ch.t_s[idx], {c: ch.cols[c][idx] for c in INTEGRATE_COLUMNS})
    names = src.device_names
    return {names[c]: a for c, a in accs.items()}, [names[c] for c in sorted(seen)]


def _results(
    wins: Sequence[Window],
    accs: Mapping[str, _Acc],
    devices: Sequence[str],
    idle_power_w: float | Mapping[str, float],
) -> list[WindowEnergy]:
    q = next(iter(accs.values())).q if accs else np.zeros(0)
    out = []
    for w in wins:
        devs = devices if w.device is None else [w.device]
        if w.device is not None and w.device not in devices:
            raise InputError(f"device {w.device!r} not in trace (devices: {list(devices)})", field="device")
        i0 = int(np.searchsorted(q, w.t0))
        i1 = int(np.searchsorted(q, w.t1))
        total = net = 0.0
        covs: list[float] = []
        methods: set[str] = set()
        nu_all = 0
        su_all = 0.0
        moved_all: float | None = None
        dur = w.t1 - w.t0
        for d in devs:
            acc = accs.get(d)
            if acc is None:
                e, cov, method, mu, moved, nu = 0.0, 0.0, "none", None, None, 0
            else:
                e, cov, method, mu, moved, nu = acc.result(i0, i1, w.t0, w.t1)
            idle = idle_power_w.get(d, 0.0) if isinstance(idle_power_w, Mapping) else float(idle_power_w)
            total += e
            net += e - idle * dur
            covs.append(cov)
            methods.add(method)
            if mu is not None:
                nu_all += nu
                su_all += mu * nu
            if moved is not None:
                moved_all = (moved_all or 0.0) + moved
        if not devs:
            net = -(idle_power_w if isinstance(idle_power_w, float | int) else 0.0) * dur
        method = methods.pop() if len(methods) == 1 else ("mixed" if methods else "none")
        out.append(
            WindowEnergy(
                window=w,
                energy_j=total,
                net_energy_j=net,
                coverage=min(covs) if covs else 0.0,
                method=method,
                duration_s=dur,
                mean_util=su_all / nu_all if nu_all else None,
                bytes_moved=moved_all,
                n_util_samples=nu_all,
            )
        )
    return out
