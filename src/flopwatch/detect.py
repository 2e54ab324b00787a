"""Workload segmentation by utilisation hysteresis (the seed study's detection daemon).

Fowler (2026, ``detect_flops.py``; ARCHITECTURE.md): poll utilisation every 1.5 s; a workload starts after
2 consecutive polls with utilisation > 5 %, and ends after 3 consecutive polls at or below it. Every
parameter is configurable through :class:`HysteresisParams`.

Segment edges: the workload began somewhere between the last idle poll and the first busy poll, and ended
between the last busy poll and the first idle one. We report the *outer* edges (last idle poll before the
streak, first idle poll after it), so a segment never cuts off workload energy; the idle-power subtraction
makes the extra idle seconds contribute ~0 J of net energy. ``edges="inner"`` reports first/last busy polls.

:class:`OnlineDetector` is the state machine shared by offline detection (:func:`detect_workloads`, which
polls a trace on the 1.5 s grid with sample-and-hold, as the daemon saw tegrastats) and the monitor daemon.
"""

from __future__ import annotations

import math
import os
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any, Literal

import numpy as np

from flopwatch.errors import InputError

if TYPE_CHECKING:
    from flopwatch.telemetry.source import Chunk, TraceSource
    from flopwatch.telemetry.trace import Trace


@dataclass(frozen=True)
class HysteresisParams:
    """Detection parameters; defaults are the study's (1.5 s polls, > 5 %, 2 polls to start, 3 to end)."""

    poll_s: float = 1.5
    util_threshold: float = 0.05
    start_polls: int = 2
    end_polls: int = 3
    edges: Literal["outer", "inner"] = "outer"
    min_duration_s: float = 0.0

    def __post_init__(self) -> None:
        if not self.poll_s > 0:
            raise InputError(f"poll_s must be > 0, got {self.poll_s}", field="poll_s")
        if not 0 <= self.util_threshold < 1:
            raise InputError(
                f"util_threshold must be in [0, 1), got {self.util_threshold}", field="util_threshold"
            )
        if self.start_polls < 1 or self.end_polls < 1:
            raise InputError("start_polls and end_polls must be >= 1", field="start_polls")
        if self.edges not in ("outer", "inner"):
            raise InputError(f"edges must be 'outer' or 'inner', got {self.edges!r}", field="edges")


@dataclass(frozen=True)
class Event:
    """``kind`` "start" or "end"; ``t_s`` is the segment's start/end time; ``decided_s`` the poll that decided."""

    kind: Literal["start", "end"]
    t_s: float
    decided_s: float


class OnlineDetector:
    """Hysteresis state machine fed one poll at a time with :meth:`update` (utilisation as a 0–1 ratio).

    A poll with unknown utilisation (None/NaN) neither extends nor breaks a streak.
    """

    def __init__(self, params: HysteresisParams | None = None) -> None:
        self.params = params or HysteresisParams()
        self.active = False
        self.start_s: float | None = None
        self._streak: list[float] = []  # poll times of the current above (idle) or below (active) streak
        self._last_below: float | None = None  # last idle poll while idle
        self._last_above: float | None = None  # last busy poll while active

    def update(self, t_s: float, util: float | None) -> list[Event]:
        if util is None or (isinstance(util, float) and math.isnan(util)):
            return []
        p = self.params
        busy = util > p.util_threshold
        events: list[Event] = []
        if not self.active:
            if busy:
                self._streak.append(t_s)
                if len(self._streak) >= p.start_polls:
                    first = self._streak[0]
                    start = (
                        self._last_below if (p.edges == "outer" and self._last_below is not None) else first
                    )
                    self.active, self.start_s = True, start
                    self._last_above = t_s
                    self._streak = []
                    events.append(Event("start", start, t_s))
            else:
                self._streak = []
                self._last_below = t_s
        else:
            if busy:
                self._streak = []
                self._last_above = t_s
            else:
                self._streak.append(t_s)
                if len(self._streak) >= p.end_polls:
                    end = self._streak[0] if p.edges == "outer" else (self._last_above or self._streak[0])
                    self.active, self.start_s = False, None
                    self._last_below = t_s
                    self._streak = []
                    events.append(Event("end", end, t_s))
        return events

    @property
    def settled(self) -> bool:
        """True when idle with no busy streak pending: no later segment can start before the last poll."""
        return not self.active and not self._streak

    def close(self, t_s: float) -> list[Event]:
        """End an open segment at ``t_s`` (end of data); returns the "end" event if one was open."""
        if not self.active:
            return []
        self.active = False
        self._streak = []
        return [Event("end", t_s, t_s)]


@dataclass(frozen=True)
class Segment:
    """One detected workload on one device, with its energy (J), idle-subtracted energy and mean util."""

    device: str
    start_s: float
    end_s: float
    duration_s: float
    energy_j: float
    net_energy_j: float
    mean_util: float | None
    coverage: float
    tb_moved: float | None = None
    complete: bool = True  # False when the trace ended while the workload was still running
    method: str = ""
    # physically impossible telemetry in the segment or on its device (telemetry/consistency.py): blocks "below"
    warnings: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["warnings"] = list(self.warnings)
        return d


def check_idle_power(idle_power_w: float | None, field: str = "idle_power_w") -> None:
    """InputError unless ``idle_power_w`` is None or a finite power >= 0 W (a NaN or negative baseline turns
    every workload's net energy into nonsense)."""
    if idle_power_w is not None and not (math.isfinite(idle_power_w) and idle_power_w >= 0):
        raise InputError(f"must be a finite power >= 0 W, got {idle_power_w}", field=field)


@dataclass(frozen=True)
class Detection:
    """Detected workloads. ``idle_power_w`` is the device's idle baseline (the median over devices for a
    multi-device trace; each segment uses its own device's value from ``idle_power_w_by_device``)."""

    idle_power_w: float
    segments: list[Segment]
    idle_power_w_by_device: dict[str, float] = field(default_factory=dict)
    skipped_devices: list[str] = field(default_factory=list)  # no utilisation series: not segmented
    params: HysteresisParams = field(default_factory=HysteresisParams)
    idle_source: str = ""
    source: str | None = None
    simulated: bool = False
    warnings: list[str] = field(default_factory=list)  # device-wide impossible telemetry (consistency.py)

    def to_dict(self) -> dict[str, Any]:
        """The ``flopwatch detect --json`` contract (plus extra keys)."""
        return {
            "warnings": list(self.warnings),
            "idle_power_w": self.idle_power_w,
            "idle_source": self.idle_source,
            "idle_power_w_by_device": dict(self.idle_power_w_by_device),
            "skipped_devices": list(self.skipped_devices),
            "workloads": [s.to_dict() for s in self.segments],
            "params": asdict(self.params),
            "source": self.source,
            "simulated": self.simulated,
        }


def poll_series(t: np.ndarray, util: np.ndarray, poll_s: float) -> tuple[np.ndarray, np.ndarray]:
    """What a daemon polling every ``poll_s`` would have seen: sample-and-hold of the latest known value."""
    ok = np.isfinite(util)
    t, util = t[ok], util[ok]
    if t.size == 0:
        return t, util
    polls = np.arange(t[0], t[-1] + 1e-9, poll_s)
    idx = np.searchsorted(t, polls, side="right") - 1
    return polls, util[idx]


class _PollStream:
    """:func:`poll_series` fed chunk by chunk: the polls ``t_first + k·Δ`` (Δ as ``np.arange`` steps, so the
    grid is bit-identical to the whole-trace one) with the latest known utilisation at each."""

    def __init__(self, poll_s: float) -> None:
        self.poll_s = poll_s
        self.origin: float | None = None
        self.delta = poll_s
        self.k = 0
        self.last: tuple[float, float] | None = None  # latest utilisation reading (t, util)

    def _emit(self, t: np.ndarray, u: np.ndarray, upto_k: int) -> tuple[np.ndarray, np.ndarray]:
        assert self.origin is not None
        ks = np.arange(self.k, upto_k)
        polls = self.origin + ks * self.delta
        if self.last is not None:
            t = np.concatenate([[self.last[0]], t])
            u = np.concatenate([[self.last[1]], u])
        idx = np.searchsorted(t, polls, side="right") - 1
        self.k = max(self.k, upto_k)
        return polls, u[np.clip(idx, 0, None)]

    def feed(self, t: np.ndarray, u: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Utilisation readings (finite, in time order) → the polls that are now decided."""
        if t.size == 0:
            return np.zeros(0), np.zeros(0)
        if self.origin is None:
            self.origin = float(t[0])
            self.delta = (self.origin + self.poll_s) - self.origin
        # polls up to the newest reading are decided: a later reading can only be newer than them
        upto = int(np.floor((float(t[-1]) - self.origin) / self.delta)) + 1
        while upto > self.k and self.origin + (upto - 1) * self.delta > t[-1]:
            upto -= 1  # floor rounded up: that poll is after the newest reading
        while self.origin + upto * self.delta <= t[-1]:
            upto += 1  # floor rounded down: that poll is already decided
        out = self._emit(t, u, max(upto, self.k))
        self.last = (float(t[-1]), float(u[-1]))
        return out

    def finish(self) -> tuple[np.ndarray, np.ndarray]:
        """The polls after the last reading that ``np.arange(t_first, t_last + 1e-9, poll_s)`` still has."""
        if self.origin is None or self.last is None:
            return np.zeros(0), np.zeros(0)
        n = int(math.ceil((self.last[0] + 1e-9 - self.origin) / self.poll_s))
        return self._emit(np.zeros(0), np.zeros(0), max(n, self.k))


def _merge(intervals: list[tuple[float, float]]) -> tuple[np.ndarray, np.ndarray]:
    """Sorted, merged union of closed intervals as (starts, ends)."""
    if not intervals:
        return np.zeros(0), np.zeros(0)
    iv = sorted(intervals)
    out = [list(iv[0])]
    for a, b in iv[1:]:
        if a <= out[-1][1]:
            out[-1][1] = max(out[-1][1], b)
        else:
            out.append([a, b])
    arr = np.asarray(out, dtype=float)
    return arr[:, 0], arr[:, 1]


def detect_workloads(
    trace: Trace | str | os.PathLike[str] | TraceSource,
    params: HysteresisParams | None = None,
    idle_power_w: float | None = None,
    *,
    device: str | None = None,
) -> Detection:
    """Segment every device of ``trace`` (or just ``device``) into workloads and integrate their energy.

    ``trace`` is a :class:`Trace`, a trace file (Parquet, journal or seed ``timeseries.json``) or a
    :class:`~flopwatch.telemetry.source.TraceSource`. A file is streamed: two passes over its row groups
    (hysteresis on the polled utilisation; then energy of every segment and the idle baseline, see
    :func:`~flopwatch.telemetry.integrate.integrate_windows`), cost linear in rows and memory bounded by a
    chunk, whatever its length.

    ``idle_power_w`` defaults to the median power outside all detected workloads (with the end-hysteresis
    window kept clear on both sides), as the study's idle baseline; ``Detection.idle_source`` says which.
    """
    from flopwatch.devices import resolve
    from flopwatch.telemetry.integrate import (
        StreamingMedian,
        Window,
        _by_device,
        _integrate_pass,
        _period_step,
        _results,
    )
    from flopwatch.telemetry.source import device_specs, open_source

    check_idle_power(idle_power_w)

    p = params or HysteresisParams()
    src = open_source(trace)
    md = src.metadata
    source_name = md.get("source")

    # Pass 1: utilisation → polls → hysteresis, per device; and each device's median sampling period.
    meds: dict[int, StreamingMedian] = {}
    last_t: dict[int, float] = {}
    counts: dict[int, int] = {}
    polls: dict[int, _PollStream] = {}
    dets: dict[int, OnlineDetector] = {}
    starts: dict[int, float | None] = {}
    raw_c: list[tuple[int, float, float, bool]] = []
    all_devs: set[int] = set()

    def run(code: int, pt: np.ndarray, pu: np.ndarray) -> None:
        det = dets[code]
        for tp, u in zip(pt.tolist(), pu.tolist(), strict=True):
            for ev in det.update(tp, u):
                if ev.kind == "start":
                    starts[code] = ev.t_s
                elif starts.get(code) is not None:
                    raw_c.append((code, starts[code], ev.t_s, True))  # type: ignore[arg-type]
                    starts[code] = None

    for ch in src.chunks(("util",)):
        all_devs.update(int(c) for c in np.unique(ch.device) if c >= 0)
        _period_step(ch, meds, last_t, counts)
        u_all = ch.cols["util"]
        for code, idx in _by_device(ch, ~ch.is_gap & np.isfinite(u_all)):
            if code not in polls:
                polls[code] = _PollStream(p.poll_s)
                dets[code] = OnlineDetector(p)
            run(code, *polls[code].feed(ch.t_s[idx], u_all[idx]))
    names = src.device_names
    _check_period(src, meds, md.get("rate_hz"))
    for code, ps in polls.items():
        run(code, *ps.finish())
        if starts.get(code) is not None:
            raw_c.append((code, starts[code], last_t[code], False))  # type: ignore[arg-type]

    devices = [names[c] for c in sorted(all_devs)] if device is None else [device]
    if device is not None and device not in names:
        raise InputError(f"device {device!r} not in trace (devices: {sorted(names)})", field="device")
    if not devices:
        raise InputError("trace has no samples", file=src.name)
    has_util = {names[c] for c in polls}
    skipped = [d for d in devices if d not in has_util]
    devices = [d for d in devices if d in has_util]
    if not devices:
        raise InputError(
            f"no utilisation samples to detect workloads from (devices: {', '.join(skipped)})",
            file=src.name,
            field="util",
        )
    raw = [
        (names[c], a, b, complete)
        for c, a, b, complete in raw_c
        if names[c] in devices and b - a >= p.min_duration_s
    ]
    raw.sort(key=lambda r: (devices.index(r[0]), r[1]))

    # Pass 2: every segment's energy, coverage, mean util and DRAM bytes, and the idle baseline: the median
    # power outside the device's workloads (each widened by the end-hysteresis window), as the study
    # measured idle on the same rail.
    margin = p.poll_s * p.end_polls
    busy = {d: _merge([(a - margin, b + margin) for d_, a, b, _ in raw if d_ == d]) for d in devices}
    outside = {d: StreamingMedian(resolution=1e-4) for d in devices}  # 0.1 mW bins past the cap
    want = set(devices) if idle_power_w is None else set()

    def idle_rows(ch: Chunk) -> None:
        pw = ch.cols["power_w"]
        for code, idx in _by_device(ch, ~ch.is_gap & np.isfinite(pw)):
            d = names[code]
            if d not in want:
                continue
            t = ch.t_s[idx]
            lo, hi = busy[d]
            k = np.searchsorted(lo, t, side="right") - 1
            inside = (k >= 0) & (t <= hi[np.clip(k, 0, None)]) if lo.size else np.zeros(t.size, bool)
            outside[d].add(pw[idx][~inside])

    gaps = {names[c]: 3.0 * m.median() for c, m in meds.items()}
    wins = [Window(a, b, d) for d, a, b, _ in raw]
    accs, seen = _integrate_pass(src, wins, gaps, None, on_chunk=idle_rows)

    idle_by_dev: dict[str, float] = {}
    idle_source = "given"
    need_all: list[str] = []
    known = device_specs(md)
    for d in devices:
        if idle_power_w is not None:
            spec = known.get(d) or resolve(d, cpu=False)
            if spec is not None and idle_power_w > spec.tdp_w:
                # a baseline above the board's maximum power is a unit slip (mW, a node's total) or a lie:
                # every workload's net energy would come out negative
                raise InputError(
                    f"{idle_power_w:g} W is above the maximum power of {d} ({spec.name}: {spec.tdp_w:g} W); "
                    "an idle baseline cannot be (units? watts, per device)",
                    file=src.name,
                    field="--idle-power",
                )
            idle_by_dev[d] = float(idle_power_w)
        elif outside[d].n >= 5:
            idle_by_dev[d] = outside[d].median()
            idle_source = "median outside workloads"
        else:
            need_all.append(d)
    if need_all:  # never idle: the whole trace's median power (a third pass, power only)
        whole = {d: StreamingMedian(resolution=1e-4) for d in need_all}
        for ch in src.chunks(("power_w",)):
            pw = ch.cols["power_w"]
            for code, idx in _by_device(ch, ~ch.is_gap & np.isfinite(pw)):
                if names[code] in whole:
                    whole[names[code]].add(pw[idx])
        for d in need_all:
            if whole[d].n == 0:
                raise InputError(f"no power samples in [None, None] on {d}", file=src.name, field="power_w")
            idle_by_dev[d] = whole[d].median()
            idle_source = "median of whole trace (no idle period found)"

    res = _results(wins, accs, seen, idle_by_dev)
    seg_warn, dev_warn = _consistency(src, raw, idle_by_dev)
    segments = [
        Segment(
            device=d,
            start_s=a,
            end_s=b,
            duration_s=b - a,
            energy_j=w.energy_j,
            net_energy_j=w.net_energy_j,
            mean_util=w.mean_util,
            coverage=w.coverage,
            tb_moved=None if w.bytes_moved is None else w.bytes_moved / 1e12,
            complete=complete,
            method=w.method,
            warnings=(*sw, *dev_warn.get(d, ())),
        )
        for (d, a, b, complete), w, sw in zip(raw, res, seg_warn, strict=True)
    ]
    return Detection(
        idle_power_w=float(np.median(list(idle_by_dev.values()))),
        idle_power_w_by_device=idle_by_dev,
        skipped_devices=skipped,
        segments=segments,
        params=p,
        idle_source=idle_source,
        source=source_name,
        simulated=bool(md.get("simulated", False)),
        warnings=[w for d in devices for w in dev_warn.get(d, ())],
    )


#: Rows spaced more than this factor away from the rate the trace says it was sampled at mean its time column
#: is in other units (milliseconds: every duration ×1000, every net energy hugely negative, exit 0).
PERIOD_FACTOR = 20.0


def _check_period(src: Any, meds: dict[int, Any], rate_hz: Any) -> None:
    if not (isinstance(rate_hz, int | float) and not isinstance(rate_hz, bool) and rate_hz > 0):
        return
    for code, m in meds.items():
        if m.n < 10:
            continue
        per = m.median()
        if per > 0 and not 1 / (PERIOD_FACTOR * rate_hz) <= per <= PERIOD_FACTOR / rate_hz:
            raise InputError(
                f"rows of {src.device_names[code]} are a median {per:.6g} s apart, but the trace says it was "
                f"sampled at {rate_hz:g} Hz ({1 / rate_hz:.6g} s): is t_s in seconds?",
                file=src.name,
                field="t_s",
            )


def _consistency(
    src: Any, raw: list[tuple[str, float, float, bool]], idle_by_dev: dict[str, float]
) -> tuple[list[tuple[str, ...]], dict[str, tuple[str, ...]]]:
    """Pass 3: physically impossible telemetry (:mod:`flopwatch.telemetry.consistency`), per segment (its own
    samples) and per device (the whole trace: power without utilisation hides outside segments)."""
    from flopwatch.telemetry.consistency import ConsistencyCheck
    from flopwatch.telemetry.integrate import _by_device

    whole = {d: ConsistencyCheck(idle, label=d) for d, idle in idle_by_dev.items()}
    per_seg = [ConsistencyCheck(idle_by_dev[d]) for d, _, _, _ in raw]
    by_dev: dict[str, list[int]] = {}
    for i, (d, _, _, _) in enumerate(raw):
        by_dev.setdefault(d, []).append(i)
    names = src.device_names
    for ch in src.chunks(("power_w", "util", "energy_j")):
        p, u, e = ch.cols["power_w"], ch.cols["util"], ch.cols["energy_j"]
        for code, idx in _by_device(ch, ~ch.is_gap):
            d = names[code]
            if d not in whole:
                continue
            t = ch.t_s[idx]
            whole[d].feed(t, p[idx], u[idx], e[idx])
            for i in by_dev.get(d, ()):
                _, a, b, _ = raw[i]
                if b < t[0] or a > t[-1]:
                    continue
                k = (t >= a) & (t <= b)
                if k.any():
                    per_seg[i].feed(t[k], p[idx][k], u[idx][k], e[idx][k])
    seg = [c.problems() for c in per_seg]
    # the whole trace names what hides outside segments: dark power, and a counter in other units than power
    dev = {
        d: tuple(w for w in c.problems() if "without util" in w or "disagree" in w) for d, c in whole.items()
    }
    return seg, dev
