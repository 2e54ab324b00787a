"""Replay a recorded trace (flopwatch Parquet or the seed's ``timeseries.json``) as a live sensor.

Like Zeus's ``ReplayZeusMonitor``: the whole pipeline (sampler, detection, monitor) runs on recorded data
with the same code as on hardware. Time runs on a :class:`ScaledClock` starting at the trace's first
sample, ``speed`` times faster than real time. A read at clock time ``t`` returns what a live sensor would
have reported then: the latest sample at or before ``t`` (sample-and-hold), with the energy counter (when
the trace has one) interpolated linearly. Past the last sample, :meth:`ReplaySensor.read` raises
:class:`TraceEnded` and :attr:`ReplaySensor.finished` becomes True.
"""

from __future__ import annotations

import bisect
import os
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from flopwatch.errors import InputError, SensorError
from flopwatch.telemetry.sensors.base import Clock, Reading, ScaledClock, SensorInfo

if TYPE_CHECKING:
    from flopwatch.telemetry.reading import Trace

_FIELDS = ("power_w", "util", "mem_util", "dram_bytes_per_s", "sm_clock_mhz", "temp_c")


class TraceEnded(SensorError):
    """A replay sensor ran past the last sample of its trace (the sampler stops cleanly on it)."""


class ReplaySensor:
    """One device of a trace played back on ``clock`` (shared by the sensors of a multi-device trace)."""

    def __init__(
        self, trace: Trace, device: str | None = None, *, clock: Clock | None = None, speed: float = 1.0
    ) -> None:
        devs = trace.devices()
        if not devs:
            raise InputError("trace has no samples to replay", file=trace.metadata.get("source"))
        self.device = device if device is not None else devs[0]
        sub = trace.for_device(self.device).samples
        if sub.empty:
            raise InputError(f"device {self.device!r} has no samples", file=trace.metadata.get("source"))
        self.trace = trace
        self._t = sub["t_s"].to_numpy(dtype=float)
        self._cols = {c: sub[c].to_numpy(dtype=float) for c in _FIELDS}
        self._energy = sub["energy_j"].to_numpy(dtype=float)
        self._has_energy = bool(np.isfinite(self._energy).sum() >= 2)
        if self._has_energy:
            ok = np.isfinite(self._energy)
            self._et, self._ev = self._t[ok], self._energy[ok]
        self._extras = {c[len("extra_") :]: sub[c].to_numpy(dtype=float) for c in trace.extra_columns()}
        wall = sub["wall_time"]
        self._wall = (wall.astype("int64").to_numpy() / 1e9) if wall.notna().all() else None
        self._clock = clock if clock is not None else ScaledClock(speed, t0=float(self._t[0]), lazy=True)
        self._t_list = self._t.tolist()
        self._wall_list = None if self._wall is None else self._wall.tolist()

        def _f(v: float) -> float | None:
            return v if v == v else None  # NaN → None

        cols = {c: v.tolist() for c, v in self._cols.items()}
        ex = {k: v.tolist() for k, v in self._extras.items()}
        self._rows = [
            ({c: _f(cols[c][i]) for c in _FIELDS}, {k: v[i] for k, v in ex.items() if v[i] == v[i]})
            for i in range(len(self._t_list))
        ]
        self.finished = False

    @property
    def clock(self) -> Clock:
        return self._clock

    @property
    def t_end(self) -> float:
        return float(self._t[-1])

    def info(self) -> SensorInfo:
        md = self.trace.metadata
        caps = tuple(c for c in ("power_w", *_FIELDS[1:]) if np.isfinite(self._cols[c]).any())
        if self._has_energy:
            caps = (*caps, "energy_j")
        return SensorInfo(
            kind="replay",
            device_id=self.device,
            name=f"replay of {Path(str(md.get('source', '?'))).name}",
            fingerprint={str(k): str(v) for k, v in dict(md.get("fingerprint") or {}).items()},
            capabilities=caps,
            simulated=bool(md.get("simulated", False)),
            spec_key=md.get("spec_key"),
        )

    def read(self) -> Reading:
        t = self._clock.now()
        if t > self._t_list[-1]:
            self.finished = True
            raise TraceEnded(f"replay of {self.device} ended at t={self._t_list[-1]:.3f} s")
        # plain-Python lookups: a read costs a few µs, so the replay sensor measures the sampler, not numpy
        i = max(0, bisect.bisect_right(self._t_list, t) - 1)
        vals, extra = self._rows[i]
        energy = float(np.interp(t, self._et, self._ev)) if self._has_energy else None
        wall = (
            self._wall_list[i] + (t - self._t_list[i])
            if self._wall_list is not None
            else self._clock.wall_time()
        )
        return Reading(t_s=t, wall_time=wall, device=self.device, energy_j=energy, extra=dict(extra), **vals)

    def close(self) -> None:
        pass


def open_replay(
    path: str | os.PathLike[str], *, speed: float = 1.0, device: str | None = None, clock: Clock | None = None
) -> list[ReplaySensor]:
    """One :class:`ReplaySensor` per device of the trace at ``path``, sharing one clock (``clock``, e.g. a
    VirtualClock started at the trace's first sample, or a ScaledClock at ``speed``)."""
    from flopwatch.telemetry.reading import Trace

    if not speed > 0:
        raise InputError(f"speed must be > 0, got {speed}", field="speed")
    trace = Trace.read(path)
    devs = trace.devices() if device is None else [device]
    if not devs:
        raise InputError("trace has no samples to replay", file=str(path))
    t0 = float(trace.samples["t_s"].min())
    if clock is None:
        clock = ScaledClock(speed, t0=t0, lazy=True)  # starts when sampling starts
    return [ReplaySensor(trace, d, clock=clock) for d in devs]
