"""The sensor protocol, the reading it returns, and the clocks sensors run on.

Every backend (NVML, Jetson sysfs, amdsmi, RAPL, replay, simulated) implements :class:`Sensor`.
Units are converted at this boundary: a :class:`Reading` is always in W, J, 0–1 ratios, B/s, MHz, °C.

Each sensor carries the :class:`Clock` its readings are timed on. Live sensors use the monotonic clock;
a replay at ``--speed 50`` runs a clock 50× faster than real time; the simulator runs a virtual clock
that jumps instantly. The sampler and the daemon take their time from the sensor's clock, so a replay
detects and integrates exactly as the live run did (ARCHITECTURE.md, "replay and simulation are
first-class sensors").
"""

from __future__ import annotations

import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

from flopwatch.telemetry.schema import Reading

__all__ = [
    "BackendStatus",
    "Clock",
    "MonotonicClock",
    "ScaledClock",
    "Sensor",
    "SensorInfo",
    "VirtualClock",
]


@dataclass(frozen=True)
class SensorInfo:
    """What a sensor is and what it can measure (shown by ``flopwatch sensors``)."""

    kind: str  # "nvml" | "jetson" | "amd" | "rapl" | "replay" | "sim" | "tegrastats"
    device_id: str  # stable id: NVML UUID, sysfs path, "sim:a100#0" …
    name: str  # human-readable device name
    fingerprint: Mapping[str, str] = field(default_factory=dict)  # model, driver, firmware, power mode …
    capabilities: tuple[
        str, ...
    ] = ()  # reading fields this sensor fills, e.g. ("power_w", "energy_j", "util")
    simulated: bool = False  # True for the simulated accelerator: everything downstream labels it
    spec_key: str | None = None  # devices.DEVICES key when known (for peaks, idle, TDP)


class Clock(Protocol):
    """Time source of a sensor: ``now()`` in seconds and a way to wait until a deadline."""

    def now(self) -> float: ...

    def sleep_until(self, t: float, stop: threading.Event | None = None) -> bool:
        """Wait until ``now() >= t``; return False if ``stop`` was set first."""
        ...

    def wall_time(self) -> float:
        """UTC epoch seconds that correspond to ``now()``."""
        ...


def _wait(delay: float, stop: threading.Event | None) -> bool:
    """Sleep ``delay`` real seconds (none when ≤ 0), or until ``stop`` is set: False when it was."""
    if delay <= 0:
        return not (stop is not None and stop.is_set())
    if stop is not None:
        return not stop.wait(delay)
    time.sleep(delay)
    return True


class MonotonicClock:
    """Real time: ``time.monotonic`` and real sleeps."""

    def now(self) -> float:
        return time.monotonic()

    def wall_time(self) -> float:
        return time.time()

    def sleep_until(self, t: float, stop: threading.Event | None = None) -> bool:
        return _wait(t - time.monotonic(), stop)


class ScaledClock:
    """Time that runs ``speed`` times faster than real time, starting at ``t0`` (replay at ``--speed``).

    With ``lazy=True`` the clock starts on its first use rather than at construction, so a replay opened
    some time before sampling begins still starts at the first sample of its trace.
    """

    def __init__(
        self, speed: float = 1.0, t0: float = 0.0, wall0: float | None = None, *, lazy: bool = False
    ) -> None:
        if not speed > 0:
            raise ValueError("speed must be > 0")
        self.speed = float(speed)
        self.t0 = float(t0)
        self._wall0_arg = wall0
        self._m0: float | None = None
        self._wall0 = 0.0
        self._lock = threading.Lock()
        if not lazy:
            self._anchor()

    def _anchor(self) -> float:
        if self._m0 is None:
            with self._lock:
                if self._m0 is None:
                    self._wall0 = time.time() if self._wall0_arg is None else float(self._wall0_arg)
                    self._m0 = time.monotonic()
        return self._m0

    def now(self) -> float:
        return self.t0 + (time.monotonic() - self._anchor()) * self.speed

    def wall_time(self) -> float:
        return self._wall0 + (self.now() - self.t0)

    def sleep_until(self, t: float, stop: threading.Event | None = None) -> bool:
        return _wait((t - self.now()) / self.speed, stop)


class VirtualClock:
    """Simulated time: ``sleep_until`` jumps there at once, so ten simulated minutes take milliseconds."""

    def __init__(self, t0: float = 0.0, wall0: float = 1.7e9) -> None:
        self._t = float(t0)
        self._t0 = float(t0)
        self._wall0 = float(wall0)
        self._lock = threading.Lock()

    def now(self) -> float:
        return self._t

    def wall_time(self) -> float:
        return self._wall0 + (self._t - self._t0)

    def advance(self, dt: float) -> None:
        with self._lock:
            self._t += max(0.0, float(dt))

    def sleep_until(self, t: float, stop: threading.Event | None = None) -> bool:
        if stop is not None and stop.is_set():
            return False
        with self._lock:
            if t > self._t:
                self._t = float(t)
        return True


@runtime_checkable
class Sensor(Protocol):
    """A source of :class:`Reading` s for one device.

    Constructors are cheap and touch no hardware beyond what identification needs; ``read`` raises
    :class:`~flopwatch.errors.SensorError` (never a vendor exception) when a read fails.
    """

    @property
    def clock(self) -> Clock: ...

    def info(self) -> SensorInfo: ...

    def read(self) -> Reading: ...

    def close(self) -> None: ...


@dataclass(frozen=True)
class BackendStatus:
    """Result of probing one backend for ``flopwatch sensors``: found sensors, or why there are none."""

    kind: str
    available: bool
    reason: str = ""  # why unavailable ("nvidia-ml-py not installed", "no /sys/class/powercap") …
    sensors: tuple[SensorInfo, ...] = ()
