"""Fleet scale: per-job FLOP estimates for a whole cluster from the dcgm-exporter history in Prometheus.

``estimate_fleet(PrometheusClient(url), ReadPlan(start, end), by="pod")``: :mod:`.plan` (chunks inside the
engine's limits) → :mod:`.reader` (one columnar table of GPU-jobs) → :mod:`.groups` (one fold, the project's
assessment per group) → :mod:`.estimate` (the orchestrator). See ``docs/fleet.md``. Imports are lazy.
"""

from __future__ import annotations

from typing import Any

__all__ = ["FleetResult", "JobMap", "PrometheusClient", "ReadPlan", "estimate_fleet"]


def __getattr__(name: str) -> Any:
    if name in __all__:  # all of them importable from the orchestrator
        from flopwatch.fleet import estimate

        return getattr(estimate, name)
    raise AttributeError(name)
