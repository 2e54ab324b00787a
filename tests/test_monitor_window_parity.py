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


def _live(entries: list[Any], window: float | None, threshold: float = T) -> Any:
    w = WorkloadWindow(window_s=window or 1e12, threshold_flops=threshold)
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


def test_window_rules_block_below_for_each_reason():
    """The one rule set (evaluate.window.WindowRules) the gauge and `flopwatch verdict` both feed."""
    from flopwatch.evaluate.window import WindowRules

    def run(feed: list[tuple[str, Any]], cut: float | None = None) -> tuple[str, ...]:
        r = WindowRules(gaps_kept=256)
        for kind, x in feed:
            r.row(x) if kind == "row" else r.checkpoint(x[0], {"d": x[1]})
        return r.blockers(cut)

    assert run([("row", 10.0), *[("cp", (20.0 + 60 * i, 0.0)) for i in range(5)]]) == ()
    assert "goes backwards (10000 → 15)" in run([("row", 10.0), ("cp", (1e4, 0.0)), ("row", 15.0)])[0]
    assert run([("row", 10.0), ("cp", (20.0, -5.0))])[0].startswith("checkpoint of d has an impossible")
    assert run([("row", 10.0)]) == ("no checkpoint in the ledger: the energy outside workloads is unknown",)
    gap = [("row", 10.0), *[("cp", (20.0 + 60 * i, 0.0)) for i in range(5)], ("cp", (1e5, 0.0))]
    assert "were not observed" in run(gap)[0]
    assert run(gap, cut=2e5) == ()  # a window after the gap does not overlap it
    jump = WindowRules()
    jump.row(100.0, session="s", ref="a", t_s=0.0)
    jump.row(5000.0, session="s", ref="b", t_s=100.0)  # wall +4900 s, monotonic +100 s
    assert "a clock jump" in jump.blockers(None)[0]


def test_honest_ledgers_are_decided_live_as_by_the_command():
    # 1e25: a threshold the 250 s of NVML's blind 75 % outside the row allow (round 12, `outside-blind`)
    light = [_row("a", 0, 10), *[_cp(20.0 + 60 * i, 0.0) for i in range(5)]]
    assert _live(light, None, 1e25).verdict == "below"
    assert _live([_BIG, *[_cp(2100.0 + 60 * i, 0.0) for i in range(5)]], 86400.0).verdict == "above"


def test_a_row_without_a_regime_is_flagged_alike_live_and_offline():
    """A row no one assessed (regime missing or null) supports no "below", with one wording on both sides."""
    from flopwatch.evaluate.window import ledger_window_verdicts

    cps = [_cp(20.0 + 60 * i, 0.0) for i in range(5)]
    why = "1 workload row(s) in the window carry warnings: no regime assessment"
    for row in (_row("a", 0, 10, regime=None), _row("a", 0, 10)):
        if row.payload["regime"] is not None:
            del row.payload["regime"]  # a legacy row: no key at all
        cli = ledger_window_verdicts([row, *cps], threshold_flops=T, window_s=None, device="h100")["total"]
        live = _live([row, *cps], None)
        assert cli["verdict"] == live.verdict == "uncertain"
        assert why in cli["warnings"] and why in live.reasons
