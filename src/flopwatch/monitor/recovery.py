"""Crash recovery: restore the running totals from the ledger and record what a crashed session left open.

On start the daemon reads its own ledger back:

* the newest checkpoint's per-device totals become the starting totals (every device that ever appeared,
  also those without a sensor this session, so their totals are carried into later checkpoints);
* a workload row written after that checkpoint (a crash between the row and the next checkpoint) is added
  to the totals once;
* if the last ``start`` row has no ``stop`` row after it, the previous session crashed (or was killed -9):
  each workload open in its last checkpoint is written as ``interrupted`` — the running row stored in that
  checkpoint, re-stamped by :meth:`~flopwatch.monitor.rows.WorkloadRow.interrupted` (the one row type, no
  second schema) — and a ``recovery`` row says what happened.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from flopwatch.monitor.accounting import cut_warning
from flopwatch.monitor.ledger import Ledger
from flopwatch.monitor.rows import WorkloadRow
from flopwatch.monitor.totals import Totals
from flopwatch.text import literal

log = logging.getLogger("flopwatch.monitor")


@dataclass
class Recovered:
    """What :func:`recover` found: totals per device, and the recovery info (None after a clean stop)."""

    totals: dict[str, Totals] = field(default_factory=dict)
    info: dict[str, Any] | None = None
    rows: list[WorkloadRow] = field(default_factory=list)


def _count(t: Totals, row: WorkloadRow) -> None:
    # from_payload leaves only finite numbers (or None): a hand-edited row cannot poison the totals
    t.workload_net_energy_j += row.net_energy_j or 0.0
    t.workload_s += row.duration_s or 0.0
    t.workloads += 1


def recover(
    led: Ledger,
    *,
    session_id: str,
    on_row: Callable[[WorkloadRow], None] | None = None,
) -> Recovered:
    """Restore totals from ``led`` and write the crashed session's open workloads as interrupted rows."""
    out = Recovered()
    last_cp = led.last("checkpoint")
    if last_cp is not None:
        for dev, d in (last_cp.payload.get("devices") or {}).items():
            if isinstance(d, dict):
                out.totals[str(dev)] = Totals.from_dict(d)
    after = last_cp.seq if last_cp is not None else 0
    for e in led.entries_after(after, "workload"):
        row = WorkloadRow.from_payload(e.payload)
        _count(out.totals.setdefault(row.device, Totals()), row)
    last_start = led.last("start")
    if last_start is None:
        return out
    last_stop = led.last("stop")
    if last_stop is not None and last_stop.seq > last_start.seq:
        return out  # previous session ended cleanly
    start = last_start.payload
    crashed = start.get("session_id")
    recovered: list[str] = []
    if last_cp is not None and last_cp.seq > last_start.seq:
        recorded = {e.payload.get("workload_id") for e in led.entries_after(last_start.seq, "workload")}
        for dev, d in (last_cp.payload.get("devices") or {}).items():
            ow = d.get("open_workload") if isinstance(d, dict) else None
            if not ow or ow.get("workload_id") in recorded:
                continue
            running = WorkloadRow.from_payload(
                ow,
                device=str(dev),
                session_id=crashed,
                profile_sha256=start.get("profile_sha256"),
                threshold_flops=(start.get("config") or {}).get("threshold_flops"),
            )
            # the same named warning as a row cut by a clean stop (accounting.cut_warning): never "below"
            row = running.interrupted(
                cut_warning(
                    "the daemon stopped without a clean shutdown; values as of the last checkpoint "
                    f"(row {last_cp.seq})"
                )
            )
            led.append("workload", row.to_payload())
            out.rows.append(row)
            if on_row is not None:
                on_row(row)
            _count(out.totals.setdefault(row.device, Totals()), row)
            recovered.append(row.workload_id)
    out.info = {
        "session_id": session_id,
        "crashed_session_id": crashed,
        "wall": time.time(),
        "last_checkpoint_seq": last_cp.seq if last_cp is not None and last_cp.seq > last_start.seq else None,
        "lost_after_wall": last_cp.payload.get("wall") if last_cp is not None else None,
        "interrupted_workloads": recovered,
        "reason": "previous session ended without a stop row (crash or kill -9)",
    }
    led.append("recovery", out.info)
    log.warning(
        "recovered from an unclean stop of session %s: %d interrupted workload(s)",
        literal(crashed),
        len(recovered),
    )
    return out
