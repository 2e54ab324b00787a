"""Descriptions of the simulated twins (``flopwatch sim specs``): peaks, bandwidth, power model, sensor."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from flopwatch.sim.accelerator import SimulatedAccelerator
from flopwatch.sim.artefacts import SensorModel


def describe_twin(key: str) -> dict[str, Any]:
    """One simulated device as a JSON-ready dict (always labelled ``simulated``)."""
    acc = SimulatedAccelerator(key)
    pm = acc.power_model
    return {
        "device": f"sim:{key}",
        "name": acc.spec.name,
        "peak_tflops": {d: v / 1e12 for d, v in acc.spec.peak_flops.items()},
        "mem_bw_gb_per_s": acc.spec.mem_bw_bytes_per_s / 1e9,
        "idle_power_w": pm.idle_w,
        "max_power_w": pm.max_w,
        "max_sm_clock_mhz": acc.dvfs.f_max_mhz,
        "power_model": pm.kind,
        "power_model_source": pm.source,
        "repeat_noise_pct": pm.repeat_sd_pct,
        "sensor": SensorModel.for_device(key).kind,
        "simulated": True,
    }


def describe_twins(keys: Iterable[str]) -> list[dict[str, Any]]:
    """:func:`describe_twin` for each key, in order."""
    return [describe_twin(k) for k in keys]
