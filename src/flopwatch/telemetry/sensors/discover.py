"""Open sensors from a spec string, and probe every backend for ``flopwatch sensors``.

Specs (contracts.md): ``nvml``, ``nvml:N`` or ``nvml:UUID``; ``jetson`` or ``jetson:ROOT`` (sysfs root);
``tegrastats`` (live) or ``tegrastats:FILE`` (a recorded log, played back); ``amd`` or ``amd:N``; ``rapl`` or ``rapl:ROOT``; ``replay:FILE``
(option ``speed``).
Vendor modules are imported lazily, inside the backend that needs them. Probing never raises: each
backend reports either its sensors or why it is unavailable (Zeus-style discovery).

This module knows the hardware backends and replay only: telemetry never imports the simulator. Further backends
(``sim:NAME``) are passed in by a composition root — :mod:`flopwatch.backends` — through the ``backends`` argument
of :func:`open_sensors` and the ``extra`` argument of :func:`probe_all`; there is no global registry.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from flopwatch.errors import FlopwatchError, InputError, SensorUnavailable
from flopwatch.telemetry.sensors.base import BackendStatus, Sensor

KINDS = ("nvml", "jetson", "tegrastats", "amd", "rapl", "replay", "prometheus")


def _split(spec: str) -> tuple[str, str | None]:
    kind, sep, arg = spec.strip().partition(":")
    return kind.strip().lower(), (arg if sep else None)


def _open_nvml(arg: str | None, **opts: Any) -> list[Sensor]:
    from flopwatch.telemetry.sensors.nvml import open_nvml

    return list(open_nvml(arg, **opts))


def _open_jetson(arg: str | None, **opts: Any) -> list[Sensor]:
    from flopwatch.telemetry.sensors.jetson import JetsonSensor

    return [JetsonSensor(root=arg or "/", **opts)]


def _open_tegrastats(arg: str | None, **opts: Any) -> list[Sensor]:
    from flopwatch.telemetry.sensors.replay import ReplaySensor
    from flopwatch.telemetry.sensors.tegrastats import TegrastatsSensor, read_log

    if not arg:  # live: spawn tegrastats
        return [TegrastatsSensor(clock=opts.get("clock"))]
    trace = read_log(arg)  # a recorded log plays back like any trace
    speed = opts.get("speed") or 1.0
    return [ReplaySensor(trace, clock=opts.get("clock"), speed=speed)]


def _open_amd(arg: str | None, **opts: Any) -> list[Sensor]:
    from flopwatch.telemetry.sensors.amd import open_amd

    return list(open_amd(arg, **opts))


def _open_rapl(arg: str | None, **opts: Any) -> list[Sensor]:
    from flopwatch.telemetry.sensors.rapl import RaplSensor

    return [RaplSensor(root=arg or "/", **opts)]


def _open_replay(arg: str | None, **opts: Any) -> list[Sensor]:
    from flopwatch.telemetry.sensors.replay import open_replay

    if not arg:
        raise InputError("replay needs a trace file: replay:FILE", field="sensor")
    return list(open_replay(arg, **opts))


def _open_prometheus(arg: str | None, **opts: Any) -> list[Sensor]:
    from flopwatch.telemetry.sensors.prometheus import open_prometheus  # dcgm-exporter series (issue 12)

    return list(open_prometheus(arg, **opts))


#: An opener: (the spec's argument after "kind:", or None; backend options) → the sensors.
Opener = Callable[..., list[Sensor]]

#: The backends this module knows: hardware and replay.
OPENERS: Mapping[str, Opener] = {
    "nvml": _open_nvml,
    "jetson": _open_jetson,
    "tegrastats": _open_tegrastats,
    "amd": _open_amd,
    "rapl": _open_rapl,
    "replay": _open_replay,
    "prometheus": _open_prometheus,
}

# options each backend understands (others are dropped, so one CLI can pass e.g. speed= to every backend)
_OPTS = {
    "nvml": {"nvml", "clock"},
    "jetson": {"clock", "reader"},
    "tegrastats": {"clock", "speed"},
    "amd": {"amdsmi", "clock"},
    "rapl": {"clock", "reader"},
    "replay": {"speed", "device", "clock"},
    "prometheus": {"clock", "speed"},
}


def open_sensors(spec: str, *, backends: Mapping[str, Opener] | None = None, **opts: Any) -> list[Sensor]:
    """Open the sensors named by ``spec`` (see the module docstring).

    ``backends`` (kind → opener) replaces :data:`OPENERS` (a composition root adds ``sim`` this way); a backend not
    in the options table gets every option. Raises :class:`InputError` for an unknown spec and
    :class:`SensorUnavailable` (with the reason) when the backend exists but cannot be used here; never returns an
    empty list.
    """
    table = OPENERS if backends is None else backends
    kind, arg = _split(spec)
    if kind not in table:
        raise InputError(f"unknown sensor spec {spec!r} (known kinds: {', '.join(table)})", field="sensor")
    speed = opts.get("speed")
    if speed is not None and not speed > 0:  # inf is valid (virtual time, as fast as the consumer goes)
        raise InputError(f"speed must be > 0, got {speed}", field="speed")
    allowed = _OPTS.get(kind)
    kw = {k: v for k, v in opts.items() if v is not None and (allowed is None or k in allowed)}
    sensors = table[kind](arg, **kw)
    if not sensors:
        raise SensorUnavailable(f"{spec}: no devices found")
    return sensors


def _probe(kind: str, spec: str) -> BackendStatus:
    try:
        sensors = open_sensors(spec)
    except (FlopwatchError, OSError, ImportError) as e:
        return BackendStatus(kind=kind, available=False, reason=str(e))
    infos = []
    for s in sensors:
        try:
            infos.append(s.info())
        finally:
            try:
                s.close()
            except Exception:
                pass
    return BackendStatus(kind=kind, available=True, sensors=tuple(infos))


def probe_all(
    *, jetson_root: str = "/", rapl_root: str = "/", extra: Sequence[BackendStatus] = ()
) -> list[BackendStatus]:
    """Probe every hardware backend, list replay, then ``extra`` (statuses of backends a composition root adds,
    e.g. the simulator); never raises."""
    out = [
        _probe("nvml", "nvml"),
        _probe("jetson", f"jetson:{jetson_root}"),
        _probe("amd", "amd"),
        _probe("rapl", f"rapl:{rapl_root}"),
    ]
    out.append(
        BackendStatus(
            kind="replay", available=True, reason="replay:FILE plays back a recorded trace (any machine)"
        )
    )
    out.extend(extra)
    return out
