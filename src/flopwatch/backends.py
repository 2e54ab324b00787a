"""Composition root of the sensor backends: telemetry's hardware backends and replay, plus the simulator.

:mod:`flopwatch.telemetry.sensors.discover` knows only real hardware and replay (telemetry never imports the
simulator). Everything that opens sensors from a user's spec — the CLI, ``flopwatch run``, the monitor — opens them
here, where ``sim:NAME`` (:func:`flopwatch.sim.sensor.from_spec`) is added to the table. To add a backend, add its
opener to :data:`BACKENDS` (and a status line to :func:`probe_all`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from flopwatch.telemetry.sensors import discover
from flopwatch.telemetry.sensors.base import BackendStatus, Sensor


def _open_sim(arg: str | None, **opts: Any) -> list[Sensor]:
    from flopwatch.sim.sensor import from_spec  # the simulator pulls in the power models: only when asked for

    return list(from_spec(arg or "", **opts))


#: Every backend a spec may name: ``discover.OPENERS`` and ``sim``.
BACKENDS: Mapping[str, discover.Opener] = {**discover.OPENERS, "sim": _open_sim}

KINDS = tuple(BACKENDS)

SIM_STATUS = BackendStatus(
    kind="sim",
    available=True,
    reason="sim:NAME runs the simulated accelerator (virtual clock, labelled simulated)",
)


def open_sensors(spec: str, **opts: Any) -> list[Sensor]:
    """:func:`discover.open_sensors` over :data:`BACKENDS` (``sim:`` specs get every option)."""
    return discover.open_sensors(spec, backends=BACKENDS, **opts)


def probe_all(
    *, jetson_root: str = "/", rapl_root: str = "/", include_sim: bool = True
) -> list[BackendStatus]:
    """:func:`discover.probe_all` plus the simulator's line; never raises."""
    return discover.probe_all(
        jetson_root=jetson_root, rapl_root=rapl_root, extra=[SIM_STATUS] if include_sim else []
    )
