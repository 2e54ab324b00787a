"""The verification daemon (``flopwatch monitor``), its tamper-evident ledger and Prometheus exporter.

See docs/monitor.md. Public API: :class:`Monitor` and :class:`MonitorConfig` (the daemon),
:class:`Ledger`, :func:`verify_ledger`, :func:`summarize_ledger` (the ledger), :class:`MonitorMetrics`,
:class:`WorkloadRow` (the typed ledger row). Names are imported on first use, so importing a light submodule
(``flopwatch.monitor.rows``) does not load SQLite, cryptography or prometheus-client.
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "Ledger": "flopwatch.monitor.ledger",
    "LedgerEntry": "flopwatch.monitor.ledger",
    "summarize_ledger": "flopwatch.monitor.ledger",
    "verify_ledger": "flopwatch.monitor.ledger",
    "Monitor": "flopwatch.monitor.daemon",
    "MonitorResult": "flopwatch.monitor.daemon",
    "Totals": "flopwatch.monitor.totals",
    "MonitorConfig": "flopwatch.monitor.config",
    "MonitorMetrics": "flopwatch.monitor.exporter",
    "WorkloadRow": "flopwatch.monitor.rows",
    "Assessment": "flopwatch.monitor.rows",
    "Measurement": "flopwatch.monitor.rows",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    mod = _EXPORTS.get(name)
    if mod is None:
        raise AttributeError(f"module 'flopwatch.monitor' has no attribute {name!r}")
    return getattr(importlib.import_module(mod), name)
