"""Round 10 red team on the fleet wing (the threat model's "Round 11 (fleet)"): what the other side controls may
widen a bound, block "below" or be refused with one line, never tighten a bound.

The harness of round 5 (``test_round5_fleet.py``): hand-written (SIMULATED) histories of H100s for 2 h at 15 s,
backfilled with promtool into a real Prometheus on loopback, each family on its own day, judged with
``--verifier-operated``. The honest job draws 650 W throughout (4.68 MJ over the range) and runs its tensor pipe
55 % of the cycles: 7.8e18 issued fp8 FLOPs, so a threshold of 6.5e18 is under the truth and every "below" is wrong.
"""

from __future__ import annotations

import pytest
import test_round5_fleet as r5  # the round-5 harness (a module attribute: its tests are not collected twice)

from flopwatch.telemetry import dcgm_metrics as M
from prom_helpers import find_tool

pytestmark = pytest.mark.skipif(
    find_tool("promtool") is None or find_tool("prometheus") is None,
    reason="needs promtool and prometheus (Debian package 'prometheus')",
)

UNDER_TRUTH = "6.5e18"
K, STEP, BUSY = r5.K, r5.STEP, r5.BUSY
TRUE_J = 650.0 * K * STEP  # the GPU's energy over the range (the counter counts 650 W at every scrape)


def _reset_at(uuid: str, r: int, e1: float = 0.0):
    """The honest busy GPU whose energy counter restarts at ``e1`` mJ at scrape ``r`` (a driver reload)."""
    t0, lab, rows = r5._series(0, r5._lab(uuid), lambda k: BUSY)
    off = rows[r][M.ENERGY] - e1
    return [(t0, lab, [d if k < r else {**d, M.ENERGY: d[M.ENERGY] - off} for k, d in enumerate(rows)])]


def _families():
    return {
        "honest": [r5._series(0, r5._lab("U0"), lambda k: BUSY)],
        # scrape 240 is at 1 h: the last sample of the first 1 h window (ranges are left-open); the counter restarts
        # at 1 kJ there
        "reset-edge": _reset_at("U1", 240, 1e6),
        # scrape 120: the last sample of the first 30 min window, the middle of the first 1 h window
        "reset-half": _reset_at("U2", 120),
    }


@pytest.fixture(scope="module")
def prom(tmp_path_factory):
    with r5.served(tmp_path_factory.mktemp("round10"), _families()) as got:
        yield got


def _energy(doc) -> float:
    return doc["fleet"]["energy_j"]


def test_honest_control_keeps_its_energy_with_no_note(prom, capsys):
    for window in ("30m", "1h"):
        doc, rows = r5._fleet(capsys, prom, "honest", "--window", window, threshold=UNDER_TRUTH)
        assert [n for g in rows for n in g["notes"] if not n.startswith("no calibration")] == []
        assert _energy(doc) == pytest.approx(TRUE_J, rel=0.01)
        assert all(g["verdict"] != "below" for g in rows)


@pytest.mark.parametrize(
    ("family", "window"),
    [("reset-edge", "1h"), ("reset-edge", "30m"), ("reset-half", "30m"), ("reset-half", "1h")],
)
def test_a_reload_at_the_edge_of_or_inside_the_first_window_is_a_reset(prom, capsys, family, window):
    """A first window has no previous counter value, so a reset there was seen only when its counter range was over
    twice the power gauge's energy (round 5). A reload at the window's last scrape, or inside it, makes the range
    *under* the gauge's: before, the pre-reload part of the window was dropped (``reset-edge`` at ``1h``: the whole
    first hour, 2.34 of 4.68 MJ, lost with no note at all; ``reset-half``: 1.17 MJ lost, named only by "estimates
    disagree", a note that needs the pipe counters). ``reset-edge`` at ``30m`` is a control (a later window: its
    minimum under the previous last, already a reset). Now a first window whose counter range, with its edges, is
    under 90 % of the gauge's energy is a reset: named, its energy from power."""
    doc, rows = r5._fleet(capsys, prom, family, "--window", window, threshold=UNDER_TRUTH)
    r5._blocked(rows, "energy counter reset")
    assert _energy(doc) == pytest.approx(TRUE_J, rel=0.01)
