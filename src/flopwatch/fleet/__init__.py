"""Fleet scale: per-job FLOP estimates for a whole cluster from the dcgm-exporter history in Prometheus.

``estimate_fleet(PrometheusClient(url), ReadPlan(start, end), by="pod")`` reads the history chunk by chunk
(:mod:`.reader`), folds it per GPU and job (:mod:`.aggregate`), and applies the energy and pipe-activity
estimators (:mod:`.estimators`). See ``docs/fleet.md``. Imports are lazy: ``import flopwatch.fleet`` is cheap.
"""

from __future__ import annotations

from typing import Any

__all__ = ["FleetResult", "PrometheusClient", "ReadPlan", "estimate_fleet"]


def __getattr__(name: str) -> Any:
    if name == "PrometheusClient":
        from flopwatch.telemetry.prom_client import PrometheusClient

        return PrometheusClient
    if name == "ReadPlan":
        from flopwatch.fleet.reader import ReadPlan

        return ReadPlan
    if name in ("FleetResult", "estimate_fleet"):
        from flopwatch.fleet import estimate

        return getattr(estimate, name)
    raise AttributeError(name)
