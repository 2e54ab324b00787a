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
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any, Literal

import numpy as np

from flopwatch.errors import InputError

if TYPE_CHECKING:
    from flopwatch.telemetry.reading import Trace


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

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


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

    def to_dict(self) -> dict[str, Any]:
        """The ``flopwatch detect --json`` contract (plus extra keys)."""
        return {
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


def detect_workloads(
    trace: Trace,
    params: HysteresisParams | None = None,
    idle_power_w: float | None = None,
    *,
    device: str | None = None,
) -> Detection:
    """Segment every device of ``trace`` (or just ``device``) into workloads and integrate their energy.

    ``idle_power_w`` defaults to the median power outside all detected workloads (with the end-hysteresis
    window kept clear on both sides), as the study's idle baseline; ``Detection.idle_source`` says which.
    """
    p = params or HysteresisParams()
    devices = trace.devices() if device is None else [device]
    if not devices:
        raise InputError("trace has no samples", file=trace.metadata.get("source"))
    # A device without utilisation (e.g. RAPL next to GPUs) cannot be segmented: skip it, unless it is all we have.
    has_util = {
        d: bool(trace.samples.loc[trace.samples["device"] == d, "util"].notna().any()) for d in devices
    }
    skipped = [d for d in devices if not has_util[d]]
    devices = [d for d in devices if has_util[d]]
    if not devices:
        raise InputError(
            f"no utilisation samples to detect workloads from (devices: {', '.join(skipped)})",
            file=trace.metadata.get("source"),
            field="util",
        )
    raw: list[tuple[str, float, float, bool]] = []
    for dev in devices:
        d = trace.samples[trace.samples["device"] == dev]
        polls, vals = poll_series(d["t_s"].to_numpy(float), d["util"].to_numpy(float), p.poll_s)
        det = OnlineDetector(p)
        start: float | None = None
        for tp, u in zip(polls, vals, strict=True):
            for ev in det.update(float(tp), float(u)):
                if ev.kind == "start":
                    start = ev.t_s
                elif start is not None:
                    raw.append((dev, start, ev.t_s, True))
                    start = None
        if start is not None:
            raw.append((dev, start, float(d["t_s"].iloc[-1]), False))
    raw = [r for r in raw if r[2] - r[1] >= p.min_duration_s]

    # Idle baseline per device: the median power outside its workloads (each widened by the end-hysteresis
    # window), as the study measured idle on the same rail; the whole-trace median when it never idles.
    idle_by_dev: dict[str, float] = {}
    idle_source = "given"
    for dev in devices:
        if idle_power_w is not None:
            idle_by_dev[dev] = float(idle_power_w)
            continue
        s = trace.samples
        mask = (s["device"] == dev) & s["power_w"].notna()
        margin = p.poll_s * p.end_polls
        for d_, a, b, _ in raw:
            if d_ == dev:
                mask &= ~((s["t_s"] >= a - margin) & (s["t_s"] <= b + margin))
        if mask.sum() >= 5:
            idle_by_dev[dev] = float(s.loc[mask, "power_w"].median())
            idle_source = "median outside workloads"
        else:
            idle_by_dev[dev] = float(trace.idle_power_w(device=dev))
            idle_source = "median of whole trace (no idle period found)"

    segments = []
    for dev, a, b, complete in raw:
        e = trace.energy(a, b, idle_power_w=idle_by_dev[dev], device=dev)
        d = trace.samples[
            (trace.samples["device"] == dev) & (trace.samples["t_s"] >= a) & (trace.samples["t_s"] <= b)
        ]
        u = d["util"].dropna()
        moved = trace.bytes_moved(a, b, device=dev)
        segments.append(
            Segment(
                device=dev,
                start_s=a,
                end_s=b,
                duration_s=b - a,
                energy_j=e.energy_j,
                net_energy_j=e.net_energy_j,
                mean_util=float(u.mean()) if not u.empty else None,
                coverage=e.coverage,
                tb_moved=None if moved is None else moved / 1e12,
                complete=complete,
                method=e.method,
            )
        )
    return Detection(
        idle_power_w=float(np.median(list(idle_by_dev.values()))),
        idle_power_w_by_device=idle_by_dev,
        skipped_devices=skipped,
        segments=segments,
        params=p,
        idle_source=idle_source,
        source=trace.metadata.get("source"),
        simulated=trace.simulated,
    )
