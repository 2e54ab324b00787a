"""Helpers for other tests and tools: simulated workload families and profiles (every number SIMULATED).

The attack generators live in :mod:`flopwatch.redteam.engine` (families are data:
:mod:`flopwatch.redteam.families`); this module keeps the small public helpers the monitor's tests use.
"""

from __future__ import annotations

from collections.abc import Sequence

from flopwatch.estimate.calibrate import calibrate
from flopwatch.estimate.features import FrontierGate
from flopwatch.estimate.profile import Profile
from flopwatch.records import RecordSet
from flopwatch.redteam.engine import RUN_S, dc_family, run_all, to_record
from flopwatch.redteam.engine import orin_family as _orin_family
from flopwatch.workloads.formulas import WorkloadDescription

CAL_SEED, ATTACK_SEED = 1, 2
__all__ = ["RUN_S", "datacenter_family", "orin_family", "sim_profile"]


def datacenter_family(dtype: str, *, quick: bool) -> list[WorkloadDescription]:
    """GPT training configurations sized for A100/H100/H200 (varying width, depth, batch and sequence)."""
    return dc_family(quick, dtype)


def orin_family(*, quick: bool) -> list[WorkloadDescription]:
    """The Jetson study's fp32 configurations (simulated on the Orin Nano twin)."""
    return _orin_family(quick, "fp32")


def sim_profile(
    key: str, workloads: Sequence[WorkloadDescription], dtype: str, *, exclude: str | None = None
) -> Profile:
    """A profile calibrated on simulated honest runs at the default power limit (session CAL_SEED)."""
    acc, runs = run_all(key, workloads, CAL_SEED)
    recs = [to_record(acc, r) for r in runs if r.label != exclude]
    return calibrate(RecordSet(recs, source=f"<simulated {key}>"), gate=FrontierGate(0.8, dtype), device=key)
