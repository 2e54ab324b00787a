"""The verification daemon (``flopwatch monitor``), its tamper-evident ledger and Prometheus exporter.

See docs/monitor.md. Public API: :class:`Monitor` and :class:`MonitorConfig` (the daemon),
:class:`Ledger`, :func:`verify_ledger`, :func:`summarize_ledger` (the ledger), :class:`MonitorMetrics`.
"""

from __future__ import annotations

from flopwatch.monitor.config import MonitorConfig
from flopwatch.monitor.daemon import Monitor, MonitorResult, Totals
from flopwatch.monitor.exporter import MonitorMetrics
from flopwatch.monitor.ledger import Ledger, LedgerEntry, summarize_ledger, verify_ledger

__all__ = [
    "Ledger",
    "LedgerEntry",
    "Monitor",
    "MonitorConfig",
    "MonitorMetrics",
    "MonitorResult",
    "Totals",
    "summarize_ledger",
    "verify_ledger",
]
