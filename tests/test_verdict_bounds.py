"""Sound verdicts (issues 15, 21): regime from observables, hardware bounds, DRAM/idle monotonicity, warnings.

Updated for issue 21: "below" rests on the sound bound only (datasheet, η_max, the verifier's counters), so an honest
Jetson run is decided "below" just over its sound upper bound (≈ 16–28 × its truth with energy and duration alone),
no longer at 2 × truth by the calibrated interval; out-of-regime observables are assumptions of the estimate."""

from __future__ import annotations

import dataclasses
import json
import math

import numpy as np
import pytest

from flopwatch.devices import get_device
from flopwatch.estimate import calibrate
from flopwatch.estimate.bounds import (
    DVFS_FACTOR,
    ENVELOPE_MARGIN,
    check_idle_baseline,
    envelope_flops_per_j,
    idle_drift_w,
    peak_rate_bound,
)
from flopwatch.estimate.profile import Profile
from flopwatch.estimate.regime import Observables, check_regime, regime_ranges
from flopwatch.estimate.verdict import assess, assess_record, observables_from_record
from flopwatch.records import load_records


@pytest.fixture(scope="module")
def v2(v2_records_path):
    return load_records(v2_records_path)


@pytest.fixture(scope="module")
def prof(v2):
    return calibrate(v2, device="orin-nano")


def _frontier(v2):
    return [r for r in v2 if r.dtype == "fp32" and r.mean_util >= 0.8]


def test_profile_records_regime_efficiency_and_idle(prof):
    v = prof.verifier
    assert v["version"] == 1 and v["device"] == "orin-nano"
    lo, hi = v["regime"]["bytes_per_j"]
    # fp32 frontier: 0.055–0.075 GB per net joule (issue 15's physics)
    assert 0.050e9 < lo < 0.056e9 and 0.074e9 < hi < 0.080e9
    assert v["regime"]["net_power_w"] == pytest.approx([6.67, 8.29], abs=0.01)
    assert v["regime"]["mean_util"] == [0.8, 1.0]
    eff = v["efficiency"]["flops_per_j"]
    # J/TFLOP ≈ 11 fp32 (best 9.7), ≈ 5.4 tf32, ≈ 3.0 fp16/bf16: efficiency from all records, not only the gate's
    assert 1e12 / eff["fp32"] == pytest.approx(9.74, abs=0.05)
    assert 1e12 / eff["fp16"] == pytest.approx(3.00, abs=0.02)
    assert v["idle_power_w"] == pytest.approx(0.642048)
    assert v["idle_drift_w"] == pytest.approx(0.080, abs=1e-4)


def test_old_profile_without_verifier_block_still_loads(prof, tmp_path):
    d = prof.to_dict()
    del d["verifier"]
    p = tmp_path / "old.json"
    p.write_text(json.dumps(d))
    old = Profile.load(p)
    assert old.regime_ranges == {"net_power_w": d["training"]["ranges"]["avg_net_power_w"]}
    assert old.efficiency == {} and old.device_key is None
    # without measured efficiency or device the out-of-regime upper bound is unbounded: never "below"
    a = assess(old, Observables(1000.0, 300.0, mean_util=0.6), threshold_flops=1e20)
    assert a.regime == "out-of-regime" and math.isinf(a.upper_flops) and a.verdict == "uncertain"


def test_bad_verifier_block_is_a_profile_error(prof, tmp_path):
    from flopwatch.errors import ProfileError

    d = prof.to_dict()
    d["verifier"]["regime"]["net_power_w"] = [9.0, 1.0]
    p = tmp_path / "bad.json"
    p.write_text(json.dumps(d))
    with pytest.raises(ProfileError, match=r"verifier\.regime\.net_power_w"):
        Profile.load(p)


def test_regime_says_which_observable_and_how_far():
    ranges = regime_ranges(
        [Observables(700.0, 100.0, tb_moved=0.05), Observables(800.0, 100.0, tb_moved=0.05)]
    )
    devs = check_regime(Observables(300.0, 100.0, tb_moved=0.05).values(), ranges)
    names = {d.observable for d in devs}
    assert names == {"net_power_w", "bytes_per_j"}
    p = next(d for d in devs if d.observable == "net_power_w")
    assert p.excess_pct == pytest.approx((7.0 - 3.0) / 7.0 * 100)
    assert "below the calibrated range" in p.reason
    missing = check_regime({"net_power_w": None}, {"net_power_w": [1.0, 2.0]})
    assert missing[0].value is None and "not measured" in missing[0].reason


def test_label_stripped_precisions_are_out_of_regime_and_never_below(v2):
    """tf32/fp16/bf16 runs presented as fp32: out of regime on bytes/J, upper bound above the truth."""
    for r in v2:
        if r.dtype == "fp32":
            continue
        prof = calibrate(v2.subset([x for x in v2 if x.label != r.label]), device="orin-nano")
        stripped = dataclasses.replace(r, dtype="fp32")
        a = assess_record(prof, stripped, threshold_flops=0.8 * r.total_flops)
        assert a.regime == "out-of-regime"
        assert any(d.observable == "bytes_per_j" for d in a.deviations)
        assert a.verdict != "below" and a.upper_flops >= r.total_flops
        assert a.lower_flops == 0.0


def test_honest_frontier_runs_stay_decisive(v2):
    factors = []
    for r in _frontier(v2):
        prof = calibrate(v2.subset([x for x in v2 if x.label != r.label]), device="orin-nano")
        obs = observables_from_record(r)
        assert assess(prof, obs, threshold_flops=0.5 * r.total_flops).verdict == "above"
        a = assess(prof, obs, threshold_flops=r.total_flops)
        assert a.lower_flops <= r.total_flops <= a.upper_flops and a.warnings == ()
        assert a.decisive_at == pytest.approx(a.upper_flops / a.estimate_flops)
        assert assess(prof, obs, threshold_flops=1.01 * a.upper_flops).verdict == "below"
        assert any("SM clock" in h for h in a.tighten)  # the clock would tighten it
        factors.append(a.upper_flops / r.total_flops)
    # the real Jetson figure (energy and duration only, clock unobserved): fp16 peak rate × time decides
    assert 15 < float(np.median(factors)) < 30


@pytest.mark.parametrize("model", ["default", "eq1", "loglin-p-bw"])
def test_inflating_the_dram_counter_never_lowers_the_upper_bound(v2, model):
    """Issue 15 item 4: for every frontier run and every inflation factor, upper bound is non-decreasing."""
    prof = calibrate(v2, model, device="orin-nano")
    for r in _frontier(v2):
        base = observables_from_record(r)
        uppers = [
            assess(prof, dataclasses.replace(base, tb_moved=r.tb_moved * f)).upper_flops
            for f in (1.0, 1.1, 1.2, 1.3, 1.5, 2.0, 5.0, 20.0)
        ]
        assert all(b >= a * (1 - 1e-12) for a, b in zip(uppers, uppers[1:], strict=False)), (r.label, uppers)


def test_idle_baseline_under_load_is_flagged_and_restored(prof, v2):
    r = _frontier(v2)[0]
    base = observables_from_record(r)
    honest = assess(prof, base, threshold_flops=0.8 * r.total_flops)
    attacked = dataclasses.replace(base, idle_power_w=1.642, net_energy_j=r.net_energy_j - r.duration_s)
    a = assess(prof, attacked, threshold_flops=0.8 * r.total_flops)
    assert a.verdict != "below"
    assert any("idle baseline suspicious" in w and "by 1 W" in w for w in a.warnings)
    # the energy moved into the "idle" is given back to the run for the upper bound
    assert a.upper_flops >= honest.upper_flops
    # within the measured drift (80 mW) nothing is flagged
    ok = dataclasses.replace(
        base, idle_power_w=0.642 + 0.05, net_energy_j=r.net_energy_j - 0.05 * r.duration_s
    )
    assert not any("idle" in w for w in assess(prof, ok).warnings)


def test_idle_check_scales_with_the_device():
    a100 = get_device("a100")
    assert idle_drift_w(48.4) == pytest.approx(48.4 * 0.08 / 0.642048)
    assert idle_drift_w(0.1) == pytest.approx(0.05)  # the floor: sensor resolution
    # +80 mW is noise on a 48 W A100, +10 W is not
    assert check_idle_baseline(48.5, spec=a100, reference_idle_w=48.4).ok
    assert not check_idle_baseline(58.4, spec=a100, reference_idle_w=48.4).ok
    busy = check_idle_baseline(0.65, spec=get_device("orin-nano"), mean_util=0.4, sm_clock_mhz=1020)
    assert not busy.ok and len(busy.reasons) == 2


def test_low_coverage_bounds_the_uncovered_time_at_peak_rate(prof, v2):
    r = _frontier(v2)[0]
    obs = dataclasses.replace(observables_from_record(r), coverage=0.5)
    a = assess(prof, obs, threshold_flops=0.8 * r.total_flops)
    peak = peak_rate_bound(get_device("orin-nano"), r.duration_s)
    assert "unobserved at peak rate" in a.bound and a.upper.unobserved_flops == pytest.approx(0.5 * peak)
    assert 0.5 * peak <= a.upper_flops <= peak
    assert any("covers only 50%" in w for w in a.warnings) and a.verdict != "below"


@pytest.mark.parametrize("energy", [0.0, -50.0])
def test_non_positive_estimate_or_energy_is_never_below(prof, energy):
    a = assess(prof, Observables(energy, 100.0, tb_moved=0.0, mean_util=0.9), threshold_flops=1e30)
    assert a.verdict == "uncertain"


def test_envelope_uses_datasheet_ratios_and_dvfs():
    h100 = get_device("h100")
    env = envelope_flops_per_j({"bf16": 1e12}, h100, power_state_calibrated=True)
    assert env.precision == "fp8"
    assert env.flops_per_j == pytest.approx(1e12 * 1978.9 / 989.4 * ENVELOPE_MARGIN)
    env2 = envelope_flops_per_j({"bf16": 1e12}, h100, power_state_calibrated=False)
    assert env2.flops_per_j == pytest.approx(env.flops_per_j * DVFS_FACTOR)
    assert math.isinf(envelope_flops_per_j({"bf16": 1e12}, None, power_state_calibrated=True).flops_per_j)


def test_out_of_regime_upper_is_the_hardware_bound(prof):
    from flopwatch.estimate.sound import eta_max

    obs = Observables(500.0, 200.0, tb_moved=0.04, mean_util=0.6)
    a = assess(prof, obs, threshold_flops=1e13)
    orin = get_device("orin-nano")
    # the Orin has no clock observable in v2: η_max with the full DVFS allowance; the profile never lowers it
    assert a.upper_flops == pytest.approx(min(500.0 * eta_max(orin), peak_rate_bound(orin, 200.0)))
    assert eta_max(orin) == pytest.approx(eta_max(orin, orin.max_sm_clock_mhz) * DVFS_FACTOR)


def test_assessment_json_is_strict(prof):
    a = assess(prof, Observables(1000.0, 130.0, tb_moved=0.07, mean_util=0.95), threshold_flops=1e14)
    d = a.to_dict()
    json.dumps(d, allow_nan=False)
    assert set(d) >= {"estimate_flops", "lower_flops", "upper_flops", "regime", "verdict", "warnings"}
    assert np.isfinite(d["upper_flops"])


def test_caller_warnings_block_below_and_unmeasured_observables_are_assumptions(prof):
    obs = Observables(1141.0, 146.7, tb_moved=0.0763, mean_util=0.969, idle_power_w=0.642, coverage=1.0)
    a = assess(prof, obs, threshold_flops=5e13)
    assert a.regime == "calibrated" and a.verdict == "above" and a.warnings == ()
    big = 1.01 * a.upper_flops
    assert assess(prof, obs, threshold_flops=big).verdict == "below"
    b = assess(prof, obs, threshold_flops=big, extra_warnings=("sensor errors: 3",))
    assert b.verdict == "uncertain" and b.warnings == ("sensor errors: 3",) and b.decisive_at is None
    c = assess(prof, Observables(1141.0, 146.7, tb_moved=0.0763, idle_power_w=0.642), threshold_flops=big)
    assert c.regime == "unconfirmed" and "not measured" in c.assumptions and c.verdict == "below"
    # the idle baseline is not an assumption of the estimate but of the net energy: unrecorded, never "below"
    d = assess(prof, Observables(1141.0, 146.7, tb_moved=0.0763), threshold_flops=big)
    assert d.verdict == "uncertain" and any("idle baseline not recorded" in w for w in d.warnings)
