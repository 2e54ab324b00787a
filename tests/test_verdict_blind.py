"""The energy sensor's blind time vs the pipe counters' coverage, the accusation's lower bound, and sampling
adequacy from the sensor-timing table (issue 21 gaps). Every accelerator here is a SIMULATED twin."""

from __future__ import annotations

import dataclasses

import pytest

from flopwatch.devices import get_device
from flopwatch.estimate.observe import Observables
from flopwatch.estimate.sound import blind_split, device_basis, pipe_coverage, sound_upper
from flopwatch.estimate.verdict import ACCUSATION_CONFIDENCE, assess, context_warnings
from flopwatch.redteam import run_suite
from flopwatch.redteam.engine import World
from flopwatch.redteam.observe import exact_values, keep_set
from flopwatch.redteam.simulated import make_acc
from flopwatch.redteam.suite import sim_honest
from flopwatch.sensor_timing import check_sampling

H100_FP8 = 1978.9e12  # dense fp8 peak of the H100 SXM (devices.py)


def _obs(**kw) -> Observables:  # noqa: ANN003
    base = {
        "net_energy_j": 6.0e4,
        "duration_s": 100.0,
        "max_sm_clock_mhz": 1980.0,
        "min_sm_clock_mhz": 1980.0,
    }
    base.update(kw)
    return Observables(**base)


def test_blind_time_splits_into_what_the_pipe_counters_covered_and_what_nothing_saw():
    o = _obs(unobserved_s=75.0)
    assert blind_split(o, None) == blind_split(o, 25.0)  # the counters saw only what the energy sensor did
    assert blind_split(o, None).uncovered_s == 75.0 and blind_split(o, None).covered_s == 0.0
    assert blind_split(o, 100.0).covered_s == 75.0 and blind_split(o, 100.0).uncovered_s == 0.0
    paused = blind_split(
        o, 50.0
    )  # the counters paused for half the run: 25 s of the blind time stays at peak
    assert (paused.covered_s, paused.uncovered_s) == (25.0, 50.0)
    pipes = {"tensor": 10.0, "fp64": 0.0, "fp32": 0.0, "fp16": 0.0}
    assert pipe_coverage(dataclasses.replace(o, pipe_active_s=pipes)) == 25.0
    assert pipe_coverage(dataclasses.replace(o, pipe_active_s=pipes, pipe_observed_s=400.0)) == 100.0
    assert pipe_coverage(o) is None  # no pipes, no coverage


def test_fp8_work_in_the_blind_window_is_bounded_by_the_pipe_counters():
    """The nvml-blind evasion in numbers: 40 s of fp8 at the dense peak inside NVML's blind 75 ms of every 100 ms,
    the energy counter sees ~0 J. The tensor pipe counts those cycles: the pipe bound covers the work; without
    the counters' coverage the blind time stays at peak; and the bound is never below the truth either way."""
    dev = device_basis(get_device("h100"))
    truth = 40.0 * H100_FP8
    pipes = {"tensor": 40.0, "fp64": 0.0, "fp32": 0.0, "fp16": 0.0}
    o = _obs(net_energy_j=50.0, unobserved_s=75.0, pipe_active_s=pipes)
    not_covered = sound_upper(dev, o)
    covered = sound_upper(dev, dataclasses.replace(o, pipe_observed_s=100.0))
    assert not_covered.flops >= 75.0 * H100_FP8
    assert truth <= covered.flops <= 1.01 * truth < not_covered.flops
    assert "counters covered" in covered.basis
    # an honest bf16 run at half the fp8 rate all the time: the energy part and the blind part add up, and the
    # pipe bound over everything (2× its truth: tensor activity is format-blind) is the smaller one
    honest_truth = 100.0 * 0.5 * H100_FP8 * 0.5  # bf16 peak is half fp8's, 50 % tensor-active
    hp = {"tensor": 50.0, "fp64": 0.0, "fp32": 0.0, "fp16": 0.0}
    h = _obs(net_energy_j=3.0e4, unobserved_s=75.0, pipe_active_s=hp, pipe_observed_s=100.0)
    b = sound_upper(dev, h)
    assert honest_truth <= b.flops <= 2.5 * honest_truth


def test_the_nvml_blind_family_stays_zero_wrong_below_with_pipe_coverage():
    res = run_suite(quick=True, families=["nvml-blind", "telemetry-paused"], honest=False)
    assert res.attacks
    for a in res.attacks:
        assert a.verdict != "below" and a.verdict_best != "below", a
        assert a.hidden_flops == 0.0, a  # the sound upper bound covers the truth


def test_the_red_team_sets_the_pipe_counters_coverage():
    acc = make_acc("h100", 2)
    acc.idle(5.0)
    w = World(quick=True).family("h100")[0]
    r = acc.run(w, duration_s=20.0)
    v = exact_values(acc, r.start_s, r.end_s, [r])
    assert v["pipe_observed_s"] == pytest.approx(r.end_s - r.start_s) and v["unobserved_s"] > 0
    assert "pipe_observed_s" in keep_set(v, "+pipes") and "pipe_observed_s" not in keep_set(v, "+clock+pl")


@pytest.fixture(scope="module")
def full_honest() -> list:
    """The full suite's honest runs (not --quick): simulated A100/H100/H200 of five precisions, capped and
    underclocked, and ten Orin fp32 configurations, each judged by a profile calibrated without it."""
    return list(sim_honest(World(quick=False)))


def test_no_false_above_on_the_full_honest_set(full_honest):
    assert len(full_honest) >= 90
    assert [h for h in full_honest if h.false_above] == []
    pipes = [
        h.decisive_at["+pipes"]
        for h in full_honest
        if h.device in ("sim:h100", "sim:h200") and h.dtype in ("bf16", "fp16") and "," not in h.note
    ]
    assert pipes and sum(v is not None and v <= 2.5 for v in pipes) >= 0.9 * len(pipes)


def test_the_orin_fp32_run_whose_90pct_lower_end_sat_above_its_truth_is_not_accused(full_honest):
    """d640_b8_s64_L3 (SIMULATED Orin, fp32, a fp32 profile without it): its calibrated 90 % lower end is 1.01 ×
    the truth — one honest run in twenty sits there by construction. The accusation rests on the 99.8 % end."""
    w = World(quick=False)
    wd = next(x for x in w.family("orin-nano") if x.label.endswith("d640_b8_s64_L3"))
    acc = make_acc("orin-nano", w.attack_seed)
    acc.idle(10.0)
    r = acc.run(wd, duration_s=60.0)
    prof, _ = w.profile("orin-nano", [wd.label])
    v = keep_set(exact_values(acc, r.start_s, r.end_s, [r]), "+clock+pl")
    a = assess(prof, Observables(**v), device="orin-nano", threshold_flops=0.99 * r.total_flops)
    assert a.regime == "calibrated" and a.verdict != "above"
    assert a.calibrated_lower_flops > r.total_flops > a.verdict_lower_flops > 0  # the case the fix is for
    assert f"{ACCUSATION_CONFIDENCE:.1%}" in a.verdict_basis
    orin = [h for h in full_honest if h.device == "sim:orin-nano"]
    assert len(orin) == 10 and not any(h.false_above for h in orin)


def test_sampling_adequacy_is_per_device_and_sensor():
    # the Orin's INA3221 is a point sensor (1.1 ms every 6.6 ms): 2 Hz misses almost all of it
    w = context_warnings({"sample_rate_hz": 2.0, "sensor_kind": ["jetson"]}, None, device="orin-nano")
    assert any("below the device's need" in x and "ina3221" in x for x in w)
    # NVML's energy counter is cumulative: 2 Hz reads it often enough (its blind 75 % is unobserved time, not
    # a rate problem)
    assert context_warnings({"sample_rate_hz": 2.0, "sensor_kind": "nvml"}, None, device="h100") == []
    # a sensor the table does not know: its blind time is unknown at any rate (round 5; it was the flat 1 Hz
    # rule, which let an unknown spelling of "nvml" read as fully observed)
    for rate in (0.5, 1.5, 100.0):
        w = context_warnings({"sample_rate_hz": rate, "sensor_kind": "mystery"}, None, device="h100")
        assert any(x.startswith("sensor timing unknown") for x in w)
    # no sensor kind recorded: the flat 1 Hz rule
    assert any("below the 1 Hz" in x for x in context_warnings({"sample_rate_hz": 0.5}, None, device="h100"))
    assert context_warnings({"sample_rate_hz": 1.5}, None, device="h100") == []


def test_a_rate_without_an_explicit_unobserved_time_feeds_it_from_the_table():
    o = _obs()
    ctx = {"sample_rate_hz": 2.0, "sensor_kind": "nvml"}
    frac = check_sampling("h100", "nvml-energy", 2.0).unobserved_fraction
    a = assess(None, o, device="h100", context=ctx)
    assert a.upper.unobserved_flops == pytest.approx(frac * o.duration_s * H100_FP8)
    explicit = assess(None, dataclasses.replace(o, unobserved_s=1.0), device="h100", context=ctx)
    # the row's own value only adds to the table's blind share (round 6, `unobserved-understated`): 1 s under it
    # is the table's share, the whole run over it is the row's
    assert explicit.upper.unobserved_flops == pytest.approx(frac * o.duration_s * H100_FP8)
    whole = assess(None, dataclasses.replace(o, unobserved_s=o.duration_s), device="h100", context=ctx)
    assert whole.upper.unobserved_flops == pytest.approx(o.duration_s * H100_FP8)
    assert assess(None, o, device="h100").upper.unobserved_flops == 0.0  # no rate recorded: nothing assumed
