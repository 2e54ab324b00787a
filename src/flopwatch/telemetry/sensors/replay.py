"""Replay a recorded trace (flopwatch Parquet, its journal, or the seed's ``timeseries.json``) as a sensor.

Like Zeus's ``ReplayZeusMonitor``: the whole pipeline (sampler, detection, monitor) runs on recorded data
with the same code as on hardware.

Exact at any speed. Given a ``speed``, time runs on a :class:`PacedClock`: virtual time that a sampler
advances tick by tick, paced to at most ``speed`` × real time (``speed=inf``: as fast as the CPU goes). A
slow consumer therefore slows the replay down instead of skipping ticks, so a replay at ``--speed 200``
sees the same samples as one at ``--speed 1``. Without a speed (``speed=None``) the replay runs in real
time on a :class:`ScaledClock`, like a live sensor, for sampling jointly with a real workload (``bench``).
A read at clock time ``t`` returns

* the first row not yet returned within ``tol`` of ``t`` (half the recording's period, and half the
  interval between reads), *as recorded*: its own ``t_s``, wall time, values and energy counter (a
  recorded gap is raised as :class:`SensorError`, so it stays a gap). Played at the recording's rate, a
  replay yields the recording's samples one for one; sampled slower, it subsamples them;
* otherwise the latest reading held at time ``t`` (sample-and-hold; the energy counter interpolated
  linearly) while the next recorded row is not due yet, or while the replay is sampled faster than the
  recording (for at most ``3 ×`` the recording's period); past that it is a hole in the recording: a gap.

Wall times: a recording's own. A trace without a wall clock (the seed's ``timeseries.json``) is dated so that
its last row falls when the replay begins: wall time advances with the trace's time (so no clock seems to
jump) and no reading is ever dated in the future, at any speed (:func:`dating` says which, in words).

Past the last row, :meth:`ReplaySensor.read` raises :class:`TraceEnded` and :attr:`ReplaySensor.finished`
becomes True. Rows are streamed from the file a chunk at a time and stored as numpy columns, so memory
is bounded by a chunk whatever the length of the recording.
"""

from __future__ import annotations

import bisect
import math
import os
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

import numpy as np

from flopwatch.errors import InputError, SensorError
from flopwatch.telemetry.schema import Reading
from flopwatch.telemetry.sensors.base import Clock, ScaledClock, SensorInfo, VirtualClock

if TYPE_CHECKING:
    from flopwatch.telemetry.source import Chunk, TraceSource
    from flopwatch.telemetry.trace import Trace

_FIELDS = ("power_w", "util", "mem_util", "dram_bytes_per_s", "sm_clock_mhz", "temp_c")
_COLUMNS = (*_FIELDS, "energy_j")
#: A held reading is reported for at most this many recorded periods (the gap tolerance detection uses).
HOLD_PERIODS = 3.0


class TraceEnded(SensorError):
    """A replay sensor ran past the last sample of its trace (the sampler stops cleanly on it)."""


class RealTime(Protocol):
    """The real clock a :class:`PacedClock` paces against (the :mod:`time` module; a fake one in tests)."""

    def monotonic(self) -> float: ...

    def time(self) -> float: ...

    def sleep(self, seconds: float) -> None: ...


class PacedClock(VirtualClock):
    """Virtual time advanced only by ``sleep_until``, which also waits until real time has caught up with
    ``(t − t0) / speed`` (never for ``speed = inf``). Time never moves while a tick is processed, so a
    sampler on this clock never skips a tick: a consumer slower than ``speed`` slows the replay instead.
    The pace is anchored at the first ``sleep_until`` (a replay opened early still starts at its first row).

    Wall time: ``wall0`` is the wall time of ``t0`` (a recorded trace's own). Without one, the clock is
    dated from the real clock when the pace starts, pushed back by ``lead_s``: a replay passes its trace's
    length, so the replayed trace ends when the replay began and, at any speed, no reading is dated in the
    future. ``real`` is the real clock (default the :mod:`time` module; tests inject a fake one).
    """

    def __init__(
        self,
        speed: float = 1.0,
        t0: float = 0.0,
        wall0: float | None = None,
        *,
        lead_s: float = 0.0,
        real: RealTime | None = None,
    ) -> None:
        if not speed > 0 or math.isnan(speed):
            raise ValueError("speed must be > 0")
        if not (math.isfinite(lead_s) and lead_s >= 0):
            raise ValueError("lead_s must be a finite number >= 0")
        self._real: RealTime = time if real is None else real
        self._lead_s = float(lead_s)
        self._dated_at_start = wall0 is None
        super().__init__(t0=t0, wall0=self._real.time() - self._lead_s if wall0 is None else float(wall0))
        self.speed = float(speed)
        self._m0: float | None = None
        self._anchor_lock = threading.Lock()
        self.waited_s = 0.0  # real seconds spent pacing

    @property
    def wall0(self) -> float:
        """The wall time of ``t0`` in force (fixed once the pace starts)."""
        return self._wall0

    @property
    def dated_at_start(self) -> bool:
        """True when the trace had no wall clock and is dated from the real clock at the start."""
        return self._dated_at_start

    @property
    def ends_wall(self) -> float:
        """For a clock dated at the start: the wall time the replayed trace ends at (the replay's start)."""
        return self._wall0 + self._lead_s

    def _anchor(self) -> None:
        with self._anchor_lock:
            if self._m0 is None:
                self._m0 = self._real.monotonic() - (self.now() - self._t0) / self.speed
                if self._dated_at_start:  # dated when the replay really starts, not when it was opened
                    self._wall0 = self._real.time() - self._lead_s - (self.now() - self._t0)

    def _wait(self, delay: float, stop: threading.Event | None) -> bool:
        """Sleep ``delay`` real seconds; False when ``stop`` was set meanwhile."""
        self.waited_s += delay
        if stop is not None and self._real is time:
            return not stop.wait(delay)
        self._real.sleep(delay)
        return not (stop is not None and stop.is_set())

    def sleep_until(self, t: float, stop: threading.Event | None = None) -> bool:
        if stop is not None and stop.is_set():
            return False
        self._anchor()
        if math.isfinite(self.speed):
            assert self._m0 is not None
            delay = self._m0 + (t - self._t0) / self.speed - self._real.monotonic()
            if delay > 0 and not self._wait(delay, stop):
                return False
        return super().sleep_until(t, stop)


class _Rows:
    """The rows of one device, streamed from a source and kept as numpy columns, a chunk or two at a time."""

    def __init__(self, src: TraceSource, device: str) -> None:
        self.src = src
        self.device = device
        self._it: Iterator[Chunk] | None = src.chunks(
            _COLUMNS, wall=True, gap_error=True, extras=True, validate=False
        )
        self.t: list[float] = []  # times as a list: bisect on it is faster than numpy for one lookup
        self.cols: dict[str, np.ndarray] = {c: np.zeros(0) for c in _COLUMNS}
        self.wall = np.zeros(0)
        self.gap: list[str | None] = []
        self.extras: dict[str, np.ndarray] = {}
        self.exhausted = False

    def _next_chunk(self) -> bool:
        """Append the next chunk's rows of this device (dropping rows already consumed); False at the end."""
        while self._it is not None:
            try:
                ch = next(self._it)
            except StopIteration:
                self._it = None
                self.exhausted = True
                return False
            code = self.src._codes.get(self.device)
            if code is None:
                continue
            sel = ch.device == code
            if not sel.any():
                continue
            sub = ch.take(sel)
            self._append(sub)
            return True
        self.exhausted = True
        return False

    def _append(self, ch: Chunk) -> None:
        self.t.extend(ch.t_s.tolist())
        for c in _COLUMNS:
            self.cols[c] = np.concatenate([self.cols[c], ch.cols[c]])
        w = ch.wall_s if ch.wall_s is not None else np.full(len(ch), np.nan)
        self.wall = np.concatenate([self.wall, w])
        self.gap.extend(ch.gap_error or [None] * len(ch))
        n_old = len(self.t) - len(ch)
        for k, v in ch.extras.items():
            old = self.extras.get(k, np.full(n_old, np.nan))
            self.extras[k] = np.concatenate([old, v])
        for k in self.extras:
            if k not in ch.extras:
                self.extras[k] = np.concatenate([self.extras[k], np.full(len(ch), np.nan)])

    def drop_before(self, i: int) -> int:
        """Forget rows before index ``i`` once there are many; returns how many were dropped."""
        if i < 4096 or i < len(self.t) // 2:
            return 0
        del self.t[:i]
        for c in _COLUMNS:
            self.cols[c] = self.cols[c][i:]
        self.wall = self.wall[i:]
        del self.gap[:i]
        for k in self.extras:
            self.extras[k] = self.extras[k][i:]
        return i

    def ensure_after(self, t: float) -> None:
        """Load chunks until a row later than ``t`` is buffered (or the trace ends)."""
        while (not self.t or self.t[-1] <= t) and not self.exhausted:
            self._next_chunk()


class ReplaySensor:
    """One device of a trace played back on ``clock`` (shared by the sensors of a multi-device trace).

    ``trace`` is a :class:`Trace`, a trace file, or a :class:`~flopwatch.telemetry.source.TraceSource`.
    """

    def __init__(
        self,
        trace: Trace | str | os.PathLike[str] | TraceSource,
        device: str | None = None,
        *,
        clock: Clock | None = None,
        speed: float | None = None,
        real: RealTime | None = None,
    ) -> None:
        from flopwatch.telemetry.source import VALUE_COLUMNS, open_source
        from flopwatch.telemetry.trace import Trace

        self.trace = trace if isinstance(trace, Trace) else None
        src = open_source(trace)
        if src.validate:  # refuse a bad recording before the replay starts, not halfway (one streaming pass)
            for _ in src.chunks(VALUE_COLUMNS):
                pass
        self.metadata = src.metadata
        # a trace without a wall clock (the seed's timeseries.json) gets synthetic wall times from its file's
        # mtime: never replay those as if recorded, use the replay's own clock instead
        self._wall_synthetic = bool(self.metadata.get("wall_time_synthetic"))
        if device is None:
            device = _first_device(src)
        self.device = device
        self._rows = _Rows(src, device)
        self._rows.ensure_after(-math.inf)
        if not self._rows.t:
            raise InputError(f"device {device!r} has no rows to replay", file=src.name)
        first = _first_sample(self._rows)
        if first is None:
            raise InputError(f"device {device!r} has no samples", file=src.name)
        self._t0 = first
        rate = self.metadata.get("rate_hz")
        t = np.asarray(self._rows.t)
        dts = np.diff(t[~np.asarray([g is not None for g in self._rows.gap])])
        dts = dts[dts > 0]
        if dts.size:
            period = float(np.median(dts))
        elif isinstance(rate, int | float) and rate > 0:
            period = 1.0 / float(rate)
        else:
            period = math.inf
        self.period_s = period
        self._caps = tuple(c for c in _COLUMNS if np.isfinite(self._rows.cols[c]).any())
        # Wall time: the recording's own (its first sample's), else none: the paced clock then dates the
        # trace so that it ends when the replay begins (never in the future, whatever the speed).
        w_first = float(self._rows.wall[self._rows.t.index(first)])
        self.wall_t0: float | None = None if self._wall_synthetic or w_first != w_first else w_first
        self.t_last = _last_t(src) if self.wall_t0 is None else None
        self._clock = (
            clock if clock is not None else _default_clock(speed, first, self.wall_t0, self.t_last, real)
        )
        self._i = -1  # newest row returned (index into the buffer)
        self._prev_t: float | None = None  # clock time of the previous read
        self.finished = False
        self.n_rows_replayed = 0
        self.n_held = 0

    @property
    def clock(self) -> Clock:
        return self._clock

    @property
    def t_start(self) -> float:
        return self._t0

    def info(self) -> SensorInfo:
        md = self.metadata
        caps = tuple(c for c in ("power_w", *_FIELDS[1:], "energy_j") if c in self._caps)
        spec_key = md.get("spec_key")
        for d in md.get("devices") or []:
            if isinstance(d, dict) and d.get("device_id") == self.device and d.get("spec_key"):
                spec_key = d["spec_key"]
        return SensorInfo(
            kind="replay",
            device_id=self.device,
            name=f"replay of {Path(str(md.get('source', '?'))).name}",
            fingerprint={str(k): str(v) for k, v in dict(md.get("fingerprint") or {}).items()},
            capabilities=caps,
            simulated=bool(md.get("simulated", False)),
            spec_key=spec_key,
        )

    def _reading(self, i: int, t: float | None) -> Reading:
        """Row ``i`` as recorded (``t`` None) or held at time ``t``."""
        r = self._rows
        vals = {c: _f(r.cols[c][i]) for c in _FIELDS}
        extra = {k: float(v[i]) for k, v in r.extras.items() if v[i] == v[i]}
        t_row = r.t[i]
        wall = float(r.wall[i])
        if t is None:
            energy = _f(r.cols["energy_j"][i])
            ts = t_row
        else:
            energy = self._energy_at(i, t)
            ts = t
            wall = wall + (t - t_row)
        if wall != wall or self._wall_synthetic:
            # no recorded wall time: the clock's, at this reading's own time (not the clock's, a tick later)
            wall = self._clock.wall_time() - (self._clock.now() - ts)
        return Reading(t_s=ts, wall_time=wall, device=self.device, energy_j=energy, extra=extra, **vals)

    def _energy_at(self, i: int, t: float) -> float | None:
        e = self._rows.cols["energy_j"]
        if not e[i] == e[i]:
            return None
        j = i + 1  # the next counter reading, linearly interpolated towards
        while j < len(self._rows.t) and not e[j] == e[j]:
            j += 1
        if j >= len(self._rows.t) or e[j] < e[i]:
            return float(e[i])
        t0, t1 = self._rows.t[i], self._rows.t[j]
        return float(e[i] + (e[j] - e[i]) * (t - t0) / (t1 - t0)) if t1 > t0 else float(e[i])

    def read(self) -> Reading:
        t = self._clock.now()
        r = self._rows
        # A recorded row answers the read nearest to it: within half the recording's period and half the
        # interval between reads (so returned times stay in order whatever the two rates).
        tick = max(0.0, t - self._prev_t) if self._prev_t is not None else math.inf
        self._prev_t = t
        tol = 0.5 * min(self.period_s, tick)
        tol = 0.0 if not math.isfinite(tol) else tol
        r.ensure_after(t + tol)
        k = bisect.bisect_left(r.t, t - tol, lo=self._i + 1)
        if k < len(r.t) and r.t[k] <= t + tol:  # a recorded row not returned yet: return it as recorded
            self.n_rows_replayed += 1
            dropped = r.drop_before(k - 1)
            k -= dropped
            self._i = k
            if r.gap[k] is not None:
                raise SensorError(f"recorded gap: {r.gap[k]}")
            return self._reading(k, None)
        if r.exhausted and t - tol > r.t[-1]:
            self.finished = True
            raise TraceEnded(f"replay of {self.device} ended at t={r.t[-1]:.3f} s")
        # No row near t: hold the latest sample (as a live sensor between updates) when the next recorded row
        # is not due yet, or when the replay is sampled faster than the recording; else it is a hole in the
        # recording (its rows missing at the rate it was recorded at): a gap.
        h = bisect.bisect_right(r.t, t) - 1
        if h < 0:
            raise SensorError("replay: the recording has no sample here")
        if r.gap[h] is not None:
            raise SensorError(f"recorded gap: {r.gap[h]}")
        age = t - r.t[h]
        # "due": the recording itself has no row where its rate says one should be. A jittered recording (the
        # sampler's random deadlines) spaces its rows up to 2 periods apart with nothing missing, so a row is
        # only missing when the recorded spacing exceeds that: holding until then is holding between rows.
        span = (r.t[h + 1] if h + 1 < len(r.t) else math.inf) - r.t[h]
        due = age >= 0.75 * self.period_s and span > 2.0 * self.period_s
        if (due and not tick < 0.75 * self.period_s) or age > HOLD_PERIODS * self.period_s:
            raise SensorError("replay: the recording has no sample here (a hole in the recording)")
        self.n_held += 1
        return self._reading(h, t)

    def close(self) -> None:
        pass


def _default_clock(
    speed: float | None,
    t0: float,
    wall_t0: float | None = None,
    t_last: float | None = None,
    real: RealTime | None = None,
) -> Clock:
    """Paced virtual time at ``speed`` (exact), or real time like a live sensor when no speed is given.

    A paced clock carries the recording's wall time (``wall_t0``: its wall time at ``t0``); a recording
    without one is dated so that its last row (``t_last``) falls when the replay begins."""
    if speed is None:
        return ScaledClock(1.0, t0=t0, lazy=True)  # starts when sampling starts
    if wall_t0 is not None:
        return PacedClock(speed, t0=t0, wall0=wall_t0, real=real)
    lead = max(0.0, (t_last if t_last is not None else t0) - t0)
    return PacedClock(speed, t0=t0, lead_s=lead if math.isfinite(lead) else 0.0, real=real)


def dating(clock: Clock) -> str:
    """How a replay's readings are dated, in words (the monitor logs it)."""
    if isinstance(clock, PacedClock):
        if not clock.dated_at_start:
            return "rows carry the trace's own recorded wall times"
        when = time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(clock.ends_wall))
        return (
            f"the trace has no wall clock: its rows are dated so that it ends at {when} UTC, when the replay "
            "began (never in the future)"
        )
    if isinstance(clock, ScaledClock):
        return "rows carry the trace's own wall times, else the real time each row is replayed at"
    return "rows carry the trace's own wall times, else the injected clock's"


def _last_t(src: TraceSource) -> float:
    """The trace's last time (one streaming pass over its time column)."""
    last = -math.inf
    for ch in src.chunks((), validate=False):
        if len(ch):
            last = max(last, float(np.nanmax(ch.t_s)))
    return last


def _f(v: float) -> float | None:
    v = float(v)
    return v if v == v else None  # NaN → None


def _first_device(src: TraceSource) -> str:
    for ch in src.chunks((), validate=False):
        samp = ~ch.is_gap & (ch.device >= 0)
        if samp.any():
            return src.device_names[int(ch.device[np.argmax(samp)])]
    raise InputError("trace has no samples to replay", file=src.name)


def _first_sample(r: _Rows) -> float | None:
    while True:
        for k, g in enumerate(r.gap):
            if g is None:
                return r.t[k]
        if not r._next_chunk():
            return None


def open_replay(
    path: str | os.PathLike[str],
    *,
    speed: float | None = None,
    device: str | None = None,
    clock: Clock | None = None,
    real: RealTime | None = None,
) -> list[ReplaySensor]:
    """One :class:`ReplaySensor` per device of the trace at ``path``, sharing one clock: ``clock`` (e.g. a
    VirtualClock started at the trace's first sample), else a :class:`PacedClock` at ``speed`` (exact;
    ``speed=inf`` replays in virtual time, as fast as the consumer goes), else real time. ``real``: the real
    clock a paced replay keeps pace with and dates a trace without wall times by (default :mod:`time`)."""
    from flopwatch.telemetry.source import open_source

    if speed is not None and (not speed > 0 or math.isnan(speed)):
        raise InputError(f"speed must be > 0, got {speed}", field="speed")
    src = open_source(path)
    devs = _devices_with_samples(src) if device is None else [device]
    if not devs:
        raise InputError("trace has no samples to replay", file=str(path))
    sensors = [ReplaySensor(path, d, clock=clock, speed=speed, real=real) for d in devs]
    if clock is None:  # one clock for all, starting at the earliest first sample
        first = min(sensors, key=lambda s: s.t_start)
        lasts = [s.t_last for s in sensors if s.t_last is not None]
        shared = _default_clock(speed, first.t_start, first.wall_t0, max(lasts) if lasts else None, real)
        for s in sensors:
            s._clock = shared
    return sensors


def _devices_with_samples(src: TraceSource) -> list[str]:
    """Devices with at least one reading, in order of appearance (one pass over the device column)."""
    seen: dict[int, None] = {}
    for ch in src.chunks((), validate=False):
        codes = ch.device[~ch.is_gap & (ch.device >= 0)]
        u, first = np.unique(codes, return_index=True)
        for c in u[np.argsort(first)]:
            seen.setdefault(int(c), None)
    return [src.device_names[c] for c in seen]
