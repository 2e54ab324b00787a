"""The live window gauge (monitor.window.WorkloadWindow) against `flopwatch verdict --window` on the same ledger
entries: the evasive ledgers of tests/window_cases.py are never "below" live either, and honest ones are
decided the same way (the gauge is fed in ledger order, as the daemon and its restart replay feed it)."""

from __future__ import annotations

import math
from typing import Any

import pytest

from flopwatch.monitor.rows import WorkloadRow
from flopwatch.monitor.window import WorkloadWindow
from window_cases import _BIG, EVASIONS, T, _cp, _row


def _live(entries: list[Any], window: float | None) -> Any:
    w = WorkloadWindow(window_s=window or 1e12, threshold_flops=T)
    walls = []
    outside: dict[str, Any] = {}
    for e in entries:
        p = e.payload
        if e.kind == "workload":
            w.add(WorkloadRow.from_payload(p))
            x = p.get("end_wall")
        else:
            vals = {d: v.get("outside_net_energy_j") for d, v in p["devices"].items()}
            w.mark(p.get("wall"), vals)
            outside.update(vals)
            x = p.get("wall")
        if isinstance(x, (int, float)) and math.isfinite(x):
            walls.append(x)
    now = max(walls)
    cum = {d: v for d, v in outside.items() if isinstance(v, (int, float)) and math.isfinite(v)}
    return w.evaluate(cum, now_wall=now)


@pytest.mark.parametrize("name, entries, window", EVASIONS, ids=[e[0] for e in EVASIONS])
def test_no_evasive_ledger_is_below_live(name, entries, window):  # noqa: ANN001
    g = _live(entries, window)
    assert g.verdict != "below", (name, g.reasons)


def test_blockers_have_the_commands_wording():
    from flopwatch.evaluate.window import ledger_window_verdicts

    cases = [
        [_row("a", 0, 10), _cp(20, 0), _cp(1e4, 0), _row("b", 5, 15)],  # clock set back
        [_row("a", 0, 10), *[_cp(20.0 + 60 * i, 0.0) for i in range(5)], _cp(1e5, 0.0)],  # unobserved gap
        [_row("a", 0, 10), _cp(20, -5.0)],  # impossible running total
        [_row("a", 0, 10)],  # no checkpoint
    ]
    for ents in cases:
        cli = ledger_window_verdicts(ents, threshold_flops=T, window_s=None, device="h100")["total"]
        g = _live(ents, None)
        assert g.verdict == cli["verdict"] != "below"
        live = [r for r in g.reasons if "backwards" in r or "not observed" in r or "impossible" in r
                or "no checkpoint" in r]  # fmt: skip
        assert live and all(r in cli["warnings"] for r in live), (live, cli["warnings"])


def test_honest_ledgers_are_decided_live_as_by_the_command():
    assert _live([_row("a", 0, 10), *[_cp(20.0 + 60 * i, 0.0) for i in range(5)]], None).verdict == "below"
    assert _live([_BIG, *[_cp(2100.0 + 60 * i, 0.0) for i in range(5)]], 86400.0).verdict == "above"
