"""The simulated accelerator (digital twin): roofline step time, MASCOTS-grounded power, DVFS, NVML artefacts.

``from_spec("a100", schedule=[...])`` gives sensors (``sim:a100``) the sampler, detector and daemon consume like a
real device; :class:`SimulatedAccelerator` is the model underneath. Everything it produces is labelled simulated.
See ``docs/simulator.md``.
"""

from __future__ import annotations

from typing import Any

__all__ = ["Idle", "Run", "SimulatedAccelerator", "SimulatedRun", "from_spec"]


def __getattr__(name: str) -> Any:  # lazy: importing flopwatch.sim stays cheap
    if name in ("Idle", "Run", "SimulatedAccelerator", "SimulatedRun"):
        from flopwatch.sim import accelerator

        return getattr(accelerator, name)
    if name == "from_spec":
        from flopwatch.sim.sensor import from_spec

        return from_spec
    raise AttributeError(name)
