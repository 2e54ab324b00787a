"""Round 6, fleet: hostile dcgm-exporter series nobody listed, found by principle (a claim the other side makes may
widen a bound or block "below", never ease it), against ``fleet estimate --verifier-operated``.

The harness of round 5 (``test_round5_fleet.py``): hand-written (SIMULATED) histories of one H100 for 2 h at 15 s,
backfilled with promtool into a real Prometheus on loopback, each family on its own day. The truth is one honest
job the whole time; the threshold sits between the lie's bound and the truth.
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

# an H100 under a 450 W cap, its clock reported at 1430 MHz: readings an A100 can produce (≤ 1.15 × 400 W,
# ≤ 1.02 × 1410 MHz), so only the model name says what ran
CAPPED = {**r5.BUSY, M.POWER: 450.0, M.SM_CLOCK: 1430.0}
LOOKALIKE = "NVIDIA \u041d100 80GB HBM3"  # Cyrillic Н: no device of the table answers to it


def _families():
    return {
        "honest-capped": [r5._series(0, r5._lab("L0"), lambda k: CAPPED)],
        "model-lookalike": [r5._series(0, r5._lab("L1", model=LOOKALIKE), lambda k: CAPPED)],
        "honest-busy": [r5._series(0, r5._lab("L2"), lambda k: r5.BUSY)],
        # the same readings, the activity and clock series labelled as another model (no power or energy in them)
        "activity-other-model": [
            r5._series(0, r5._lab("L3"), lambda k: {M.POWER: r5.BUSY[M.POWER]}),
            _without_energy(r5._series(0, r5._lab("L3", model=r5.L40), lambda k: _activity())),
        ],
        # the honest series, plus idle copies of its activity and clock differing only in labels flopwatch drops on
        # the server (another container; another modelName): an average over the merged series halved the pipes
        "idle-copies": [
            r5._series(0, r5._lab("L4"), lambda k: r5.BUSY),
            *(
                _without_energy(r5._series(0, r5._lab("L4", **kw), lambda k: {**_activity(), **IDLE_PIPES}))
                for kw in (
                    {"container": "shadow"},
                    {"model": r5.L40},
                    {"container": "shadow", "model": r5.L40},
                )
            ),
        ],
    }


IDLE_PIPES = {M.GR_ACTIVE: 0.0, M.TENSOR: 0.0, M.FP32: 0.0, M.FP16: 0.0, M.FP64: 0.0}


def _activity() -> dict[str, float]:
    return {m: v for m, v in r5.BUSY.items() if m != M.POWER}


def _without_energy(series):  # noqa: ANN001, ANN202
    t0, labels, rows = series
    return t0, labels, [None if r is None else {m: v for m, v in r.items() if m != M.ENERGY} for r in rows]


@pytest.fixture(scope="module")
def prom(tmp_path_factory):
    with r5.served(tmp_path_factory.mktemp("round6"), _families()) as got:
        yield got


def test_a_model_name_no_device_answers_to_is_not_judged_as_the_verifiers_device(prom, capsys):
    """`model-lookalike`: the H100 above reports its modelName with a Cyrillic Н; the verifier passes ``--device
    a100`` (its fallback for GPUs that report no model). The unknown name took the fallback silently (the note
    "device model unknown" only when no --device was given): bound 1.26e18 from the A100's pipe peaks, "below"
    2e18 with no note, though the job's tensor work at the H100's peak is 2.8e18. As in a run's record (round 5,
    `device-lookalike`): a name given that no device answers to is judged as the fallback *with a note*; a GPU
    that gives no name at all stays the verifier's choice."""
    _, rows = r5._fleet(capsys, prom, "model-lookalike", "--device", "a100", threshold="2e18")
    r5._blocked(rows, "names no device in the verifier's table")
    # the honest control: the H100's own name, the same readings, the H100's bound and no such note
    _, rows = r5._fleet(capsys, prom, "honest-capped", "--device", "a100", threshold="2e18")
    assert all(g["devices"] == ["h100"] and g["upper_flops"] > 2e18 for g in rows)
    assert not any("names no device" in n for g in rows for n in g["notes"])


def test_the_model_is_claimed_by_power_and_energy_series_and_activity_joins_their_row(prom, capsys):
    """The fleet reads the GPU's model from its power and energy series; the activity and clock queries drop
    ``modelName`` on the server (a fifth of their bytes) and join the row with the same other labels. Activity
    series labelled as another model therefore claim nothing: the GPU is judged as its power series say, with
    the same bound, pipe estimate and notes as when every series names the H100."""
    _, split = r5._fleet(capsys, prom, "activity-other-model")
    _, whole = r5._fleet(capsys, prom, "honest-busy")
    assert [g["key"] for g in split] == [g["key"] for g in whole] == ["train", "(all GPUs)"]
    for a, b in zip(split, whole, strict=True):
        assert a["devices"] == b["devices"] == ["h100"]
        assert (
            a["pipe_estimate_flops"] == pytest.approx(b["pipe_estimate_flops"]) and a["pipe_estimate_flops"]
        )
        assert a["upper_flops"] == pytest.approx(b["upper_flops"]) and a["verdict"] == b["verdict"]
        assert a["notes"] == b["notes"]


def test_idle_copies_of_the_activity_series_do_not_dilute_it(prom, capsys):
    """`idle-copies` (round 6): three copies of an H100's activity series reporting idle pipes, differing only in a
    label the fleet drops on the server (``container``; ``modelName`` on the activity queries), were averaged into
    the honest series: the pipes ÷ 4, the bound 2.0e18 under the job's 3.9e18 tensor work, "below" 2.5e18 with no
    note. The merged series take the highest activity, so the copies change nothing."""
    _, rows = r5._fleet(capsys, prom, "idle-copies", threshold="2.5e18")
    _, honest = r5._fleet(capsys, prom, "honest-busy", threshold="2.5e18")
    for a, b in zip(rows, honest, strict=True):
        assert a["verdict"] != "below" and a["upper_flops"] == pytest.approx(b["upper_flops"])
        assert a["pipe_estimate_flops"] == pytest.approx(b["pipe_estimate_flops"])
