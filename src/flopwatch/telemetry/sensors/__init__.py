"""Sensor backends. Vendor libraries are imported lazily inside each backend."""

from flopwatch.telemetry.sensors.base import (
    BackendStatus,
    Clock,
    Gap,
    MonotonicClock,
    Reading,
    ScaledClock,
    Sensor,
    SensorInfo,
    VirtualClock,
)

__all__ = [
    "BackendStatus",
    "Clock",
    "Gap",
    "MonotonicClock",
    "Reading",
    "ScaledClock",
    "Sensor",
    "SensorInfo",
    "VirtualClock",
]
