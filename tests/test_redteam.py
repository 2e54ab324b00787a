"""The attack suite's invariants on a fast subset (deterministic: fixed simulated seeds, the bundled v2 records).

* at least 25 families, each a row of the table (data), each with a defence status;
* every family of issue 21's table is present;
* a family's configurations are left out of the calibration that judges it;
* 0 wrong below at T = 0.8 × truth and at the evader's best threshold;
* honest runs of every precision, clock and power limit: 0 false above.
"""

from __future__ import annotations

import json

import pytest

from flopwatch.redteam import run_suite
from flopwatch.redteam.engine import KINDS, World, shape
from flopwatch.redteam.families import FAMILIES, FAMILY_BY_KEY
from flopwatch.redteam.real import find_v2

ISSUE_21_TABLE = {
    "mixed-fp32-bf16", "mixed-real", "fp8-full-power", "underclock", "dvfs", "power-padding", "phase-lock",
    "nvml-blind", "own-profile", "peak-env", "replay-sensor", "clock-fast", "split-labels", "unlabelled",
    "relabel-model", "power-limit-300", "fp8-at-bf16-peak",
}  # fmt: skip
BEYOND = {
    "inference-idle", "telemetry-paused", "counter-reset", "bursts", "split-time", "split-devices", "idle-inflated",
    "dram-inflated", "util-spoofed", "rate-lowered",
}  # fmt: skip
#: families whose observables are not the judged run's (another run's trace, a window the rows left)
LIES = {"replay-sensor", "replay-sensor-real", "clock-fast"}
#: a fast subset covering every generator kind (and the real records where present)
FAST = [
    "mixed-fp32-bf16", "fp8-full-power", "underclock", "power-padding", "phase-lock", "nvml-blind", "own-profile",
    "peak-env", "replay-sensor", "relabel-model", "split-labels", "telemetry-paused", "util-spoofed", "rate-lowered",
    "chunks", "mixed-real", "power-padding-real",
]  # fmt: skip


def test_families_are_a_table_of_at_least_25_with_statuses():
    assert len(FAMILIES) >= 25 and len(FAMILY_BY_KEY) == len(FAMILIES)  # unique keys
    for f in FAMILIES:
        assert f.kind in KINDS or f.kind == "real"
        assert f.defence in ("defended", "defended when X is sampled", "needs attestation") and f.needs
    assert ISSUE_21_TABLE <= set(FAMILY_BY_KEY) and BEYOND <= set(FAMILY_BY_KEY)


@pytest.fixture(scope="module")
def fast() -> dict:
    return run_suite(quick=True, families=FAST, honest=False).to_dict()


def test_no_wrong_below_in_any_family_at_either_threshold(fast):
    assert fast["error_name"] == "wrong below"
    for f in fast["by_family"]:
        if f["kind"] == "real" and find_v2() is None:
            continue
        assert f["n"] > 0, f["key"]
        assert f["wrong_below"] == 0, (f["key"], f["example_reason"])
    for a in fast["attacks"]:
        assert (
            a["best_threshold_flops"] is None
            or a["verdict_at_best_threshold"] != "below"
            or (a["truth_flops"] <= a["best_threshold_flops"])
        )
        # the upper bound holds: nothing is hidden above it — except where the observables are not the run's
        # (a replayed trace, a clock run fast: nothing bounds a run never observed), and then a warning says so
        assert a["hidden_pct"] == 0.0 or (a["n_warnings"] > 0 and a["family"] in LIES), (
            a["family"],
            a["label"],
        )
    assert fast["upper_bound_violations_unwarned"] == 0
    assert set(fast["upper_bound_violation_families"]) <= LIES
    json.dumps(fast)  # the contract is plain JSON


def test_each_family_is_left_out_of_its_calibration(fast):
    for key, c in fast["calibration_left_out"].items():
        assert c["overlap"] == [], key
        assert c["max_calibration_runs"] > 0, key
    # and the calibration really is made without it: a World profile drops the configuration in every precision
    w = World(quick=True)
    fam = w.family("h100")
    _, cal = w.profile("h100", [fam[2].label.replace("bf16", "fp8")])
    assert shape(fam[2].label) not in {shape(x) for x in cal} and len(cal) == len(fam) - 1


def test_the_evaders_best_threshold_sits_just_above_the_upper_bound(fast):
    for a in fast["attacks"]:
        if a["upper_flops"] is not None and a["best_threshold_flops"] is not None:
            assert a["best_threshold_flops"] == pytest.approx(a["upper_flops"], rel=1e-5)
            assert a["best_threshold_flops"] > a["upper_flops"]


@pytest.fixture(scope="module")
def honest() -> list[dict]:
    from flopwatch.redteam.suite import sim_honest

    return [h.to_dict() for h in sim_honest(World(quick=True))]


def test_honest_runs_report_decisive_at_per_observable_set(honest):
    assert honest
    for h in honest:
        assert set(h["decisive_at"]) >= {"energy"}
        for v in h["decisive_at"].values():
            assert (
                v is None or v >= 1.0
            )  # "below" only above the truth: an honest run is never cleared below it
        if h["verdict_at_truth"] == "below":
            raise AssertionError(h)


def test_no_false_above_on_honest_runs_of_any_precision_clock_or_power_limit(honest):
    assert {h["dtype"] for h in honest} >= {"bf16", "fp16", "tf32", "fp8", "fp32"}
    assert any("cap" in h["note"] for h in honest) and any("clock" in h["note"] for h in honest)
    assert [h for h in honest if h["false_above"]] == []


def test_cli_runs_a_family_and_refuses_an_unknown_one(capsys):
    from flopwatch.cli import main

    assert main(["redteam", "--quick", "--family", "own-profile", "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["n_families"] == 1 and d["wrong_below"] == 0 and "false_above" in d and d["honest"]
    assert main(["redteam", "--family", "nope"]) == 2
    err = capsys.readouterr().err
    assert "unknown family 'nope'" in err and len(err.strip().splitlines()) == 1
