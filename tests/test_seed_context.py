"""The Jetson study's records are judged with the sensor they were recorded with, wherever they are read.

The seed-format loader (``records.load_records``) attaches the context the data had (``published.seed_context``:
the INA3221 rail VDD_CPU_GPU_CV read at the record's own ``n_power_samples`` ÷ ``duration_s`` ≈ 2 Hz,
data/jetson_flop_estimator/SOURCE.md), so ``estimate`` gives the answer the red team and the benches give
(``redteam.real.v2_context`` is the same function): never "below", because of the sensor's rate — not
"no sensor recorded" and a "below" from ×23.9.
"""

from __future__ import annotations

import json

import pytest

from flopwatch.cli import main
from flopwatch.errors import InputError
from flopwatch.estimate.calibration import calibrate
from flopwatch.estimate.tighten import RATE_WARNING
from flopwatch.estimate.verdict import assess_record
from flopwatch.published import SEED_RATE_HZ, SEED_SENSOR_KIND, SEED_SENSOR_SPEC, seed_context
from flopwatch.records import load_records
from flopwatch.redteam import real
from flopwatch.redteam.judge import judge


def test_a_v2_record_loaded_from_the_shared_data_carries_its_sensor_and_rate(v2_records_path):
    rs = load_records(v2_records_path)
    assert len(rs) == 38
    for r in rs:
        assert r.extra["sensor_kind"] == "ina3221" == SEED_SENSOR_KIND
        assert r.extra["sensor_spec"] == "jetson:VDD_CPU_GPU_CV" == SEED_SENSOR_SPEC
        # the record's own sample count over its duration (SOURCE.md: "n_power_samples (2 Hz)")
        assert r.extra["sample_rate_hz"] == pytest.approx(
            r.extra["n_power_samples"] / r.duration_s, rel=1e-12
        )
        assert 1.99 <= r.extra["sample_rate_hz"] <= 2.01
        assert real.v2_context(r) == seed_context(r) == {k: r.extra[k] for k in seed_context(r)}
    # written back as our JSON Lines and read again, the context stays
    d = rs[0].to_dict()
    assert (d["sensor_kind"], d["sensor_spec"]) == (SEED_SENSOR_KIND, SEED_SENSOR_SPEC)


def test_estimate_and_the_red_team_give_one_answer_on_the_same_record(v2_records_path):
    rs = load_records(v2_records_path)
    r = next(x for x in rs if x.label == "d384_b16_s128_L3")
    prof = calibrate(rs.subset([x for x in rs if x.label != r.label]), device="orin-nano")
    T = 50.0 * float(r.total_flops)  # far above the run: only the sensor's blind time keeps it from "below"
    # what `estimate --device orin-nano` does with the loaded record (the red team names its device; without it
    # the record, which names none, is also warned as judged on the profile's device: round 9)
    seen = assess_record(prof, r, device="orin-nano", threshold_flops=T)
    assert any("names no device" in w for w in assess_record(prof, r, threshold_flops=T).warnings)
    suite = judge(prof, real._values(r), device="orin-nano", threshold_flops=T, context=real.v2_context(r))
    assert seen.verdict == suite.verdict == "uncertain" and seen.decisive_at is None
    assert seen.verdict_upper_flops == pytest.approx(suite.upper_flops, rel=1e-12)
    (w,) = seen.warnings
    assert w.startswith(RATE_WARNING) and "ina3221" in w and "99.8% of the time is unobserved" in w
    assert not any("no sensor recorded" in n for n in seen.notes)
    # what would make it decidable: a faster sampler (the sensor's own 83 % blind share at peak rate remains)
    # or a cumulative counter; each hint says "never" now
    fast, counter = seen.tighten
    assert fast.startswith("with the power sensor read as fast as it updates (a faster sampler): ×never → ×")
    assert counter.startswith("with the unobserved time covered by a cumulative counter, at best: ×never → ×")
    assert float(counter.rsplit("×", 1)[1]) <= float(fast.rsplit("×", 1)[1]) < T / seen.estimate_flops


def test_estimate_on_the_v2_records_names_the_rate_reason(v2_records_path, tmp_path, monkeypatch, capsys):
    prof = tmp_path / "p.json"
    assert main(["calibrate", str(v2_records_path), "-o", str(prof), "--device", "orin-nano"]) == 0
    capsys.readouterr()
    assert (
        main(
            [
                "estimate",
                "--profile",
                str(prof),
                str(v2_records_path),
                "--threshold",
                "1e17",
                "--json",
                "--device",
                "orin-nano",
            ]
        )
        == 0  # fmt: skip  (the records name no device: the verifier states it)
    )
    out = json.loads(capsys.readouterr().out)
    assert len(out["records"]) == 26  # the fp32 runs (12 of another precision skipped)
    for x in out["records"]:
        # at 1e17, ~1000 × every run: with the sensor's rate the only thing in the way, still never "below"
        assert x["threshold_verdict"] == "uncertain" and x["decisive_at"] is None
        assert [w.split(":")[0] for w in x["warnings"]] == [RATE_WARNING]
        assert not x["notes"]
    monkeypatch.setenv("COLUMNS", "400")
    assert main(["estimate", "--profile", str(prof), str(v2_records_path), "--threshold", "1e17",
                 "--device", "orin-nano"]) == 0  # fmt: skip
    lines = capsys.readouterr().out.splitlines()
    (why,) = [x for x in lines if x.startswith("warning")]  # one line for the sweep, not one per record
    assert why.startswith(
        f"warning (26 of 26 records): {RATE_WARNING}: sampling ina3221 on orin-nano at 1.99"
    )
    hints = [x for x in lines if x.startswith("tighten")]
    assert any("(a faster sampler): 'decisive at' never → T ≥" in x for x in hints), hints
    assert any("cumulative counter, at best: 'decisive at' never → T ≥" in x for x in hints), hints


def _seed_file(tmp_path, **extra):
    rec = {
        "label": "run",
        "duration_s": 100.0,
        "net_energy_j": 600.0,
        "ground_truth_tf": 100.0,
        "avg_gpu_pct": 95.0,
        "idle_baseline_mw": 642.0,
        "config": {"d_model": 256},
        **extra,
    }
    p = tmp_path / "eval_results_x_records.json"
    p.write_text(json.dumps({"baseline_mw": 642.0, "records": [rec]}))
    return p


def test_the_rate_is_the_records_own_else_the_documented_2_hz(tmp_path):
    (r,) = load_records(_seed_file(tmp_path, n_power_samples=50))
    assert r.extra["sample_rate_hz"] == pytest.approx(0.5)
    for n in ({}, {"n_power_samples": None}, {"n_power_samples": 0}):
        (r,) = load_records(_seed_file(tmp_path, **n))
        assert r.extra["sample_rate_hz"] == SEED_RATE_HZ


def test_a_seed_record_cannot_claim_another_sensor_or_rate_than_its_samples_show(tmp_path):
    claim = {"sensor_kind": "nvml", "sensor_spec": "nvml:0", "sample_rate_hz": 1000.0, "n_power_samples": 200}
    (r,) = load_records(_seed_file(tmp_path, **claim))
    assert (r.extra["sensor_kind"], r.extra["sensor_spec"]) == (SEED_SENSOR_KIND, SEED_SENSOR_SPEC)
    assert r.extra["sample_rate_hz"] == pytest.approx(2.0)


@pytest.mark.parametrize("bad", ["many", -3, True, float("inf")])
def test_a_bad_sample_count_is_one_error_naming_file_record_and_field(tmp_path, capsys, bad):
    p = _seed_file(tmp_path, n_power_samples=bad)
    with pytest.raises(InputError) as e:
        load_records(p)
    assert (e.value.file, e.value.record, e.value.field) == (str(p), "run", "n_power_samples")
    out = tmp_path / "p.json"
    assert main(["calibrate", str(p), "-o", str(out)]) == 2 and not out.exists()
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "n_power_samples" in err[0] and str(p.name) in err[0]
