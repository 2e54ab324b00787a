"""Open sensors from a spec string, and probe every backend for ``flopwatch sensors``.

Specs (contracts.md): ``nvml``, ``nvml:N`` or ``nvml:UUID``; ``jetson`` or ``jetson:ROOT`` (sysfs root);
``tegrastats`` (live) or ``tegrastats:FILE`` (a recorded log, played back); ``amd`` or ``amd:N``; ``rapl`` or ``rapl:ROOT``; ``replay:FILE``
(option ``speed``); ``sim:NAME`` (delegated to :func:`flopwatch.sim.sensor.from_spec`).
Vendor modules are imported lazily, inside the backend that needs them. Probing never raises: each
backend reports either its sensors or why it is unavailable (Zeus-style discovery).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any

from flopwatch.errors import FlopwatchError, InputError, SensorUnavailable
from flopwatch.telemetry.sensors.base import BackendStatus, Sensor

KINDS = ("nvml", "jetson", "tegrastats", "amd", "rapl", "replay", "sim", "prometheus")


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
    from flopwatch.telemetry.sensors.prometheus import open_prometheus

    return list(open_prometheus(arg, **opts))


def _open_sim(arg: str | None, **opts: Any) -> list[Sensor]:
    try:
        mod = importlib.import_module("flopwatch.sim.sensor")
    except ImportError as e:
        raise SensorUnavailable(
            f"the simulator backend is not available (flopwatch.sim.sensor: {e})"
        ) from None
    from_spec = getattr(mod, "from_spec", None)
    if from_spec is None:
        raise SensorUnavailable(
            "the simulator backend is not available (flopwatch.sim.sensor.from_spec missing)"
        )
    return list(from_spec(arg or "", **opts))


_OPENERS: dict[str, Callable[..., list[Sensor]]] = {
    "nvml": _open_nvml,
    "jetson": _open_jetson,
    "tegrastats": _open_tegrastats,
    "amd": _open_amd,
    "rapl": _open_rapl,
    "replay": _open_replay,
    "sim": _open_sim,
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
    "sim": None,  # everything goes to the simulator
    "prometheus": {"clock", "speed"},
}


def open_sensors(spec: str, **opts: Any) -> list[Sensor]:
    """Open the sensors named by ``spec`` (see the module docstring).

    Raises :class:`InputError` for an unknown spec and :class:`SensorUnavailable` (with the reason) when the
    backend exists but cannot be used here; never returns an empty list.
    """
    kind, arg = _split(spec)
    if kind not in _OPENERS:
        raise InputError(f"unknown sensor spec {spec!r} (known kinds: {', '.join(KINDS)})", field="sensor")
    allowed = _OPTS[kind]
    kw = {k: v for k, v in opts.items() if v is not None and (allowed is None or k in allowed)}
    sensors = _OPENERS[kind](arg, **kw)
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
    *, jetson_root: str = "/", rapl_root: str = "/", include_sim: bool = True
) -> list[BackendStatus]:
    """Probe every hardware backend (and the simulator's availability); never raises."""
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
    if include_sim:
        try:
            mod = importlib.import_module("flopwatch.sim.sensor")
            ok = hasattr(mod, "from_spec")
            reason = (
                "sim:NAME runs the simulated accelerator (virtual clock, labelled simulated)"
                if ok
                else ("flopwatch.sim.sensor.from_spec missing")
            )
        except ImportError as e:
            ok, reason = False, f"flopwatch.sim.sensor not importable: {e}"
        out.append(BackendStatus(kind="sim", available=ok, reason=reason))
    return out
