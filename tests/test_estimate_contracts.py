"""The contracts other areas rely on: calibrate → Profile → Estimate → verdict, evaluate_models."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest

from flopwatch.errors import InputError, NotFittedError, ProfileError
from flopwatch.estimate import Estimate, FrontierGate, Profile, calibrate
from flopwatch.estimate.features import Features
from flopwatch.estimate.models import Eq2Model
from flopwatch.evaluate.splits import evaluate_models
from flopwatch.evaluate.threshold import verdict
from flopwatch.records import WorkloadRecord, load_records


def synthetic_records(n: int = 20, seed: int = 1, noise: float = 0.01) -> list[WorkloadRecord]:
    """Runs obeying eq. 2 exactly (5.7 J/TFLOP + 3 W overhead) with multiplicative noise."""
    rng = np.random.default_rng(seed)
    out = []
    for i in range(n):
        tf = rng.uniform(50, 200)
        t = rng.uniform(100, 250)
        e = (5.7 * tf + 3.0 * t) * (1 + noise * rng.standard_normal())
        out.append(
            WorkloadRecord(
                label=f"run{i}",
                net_energy_j=e,
                duration_s=t,
                mean_util=0.95,
                tb_moved=0.08,
                total_flops=tf * 1e12,
                idle_power_w=0.64,
            )
        )
    return out


def test_calibrate_in_memory_and_estimate_roundtrip(tmp_path):
    recs = synthetic_records()
    prof = calibrate(recs, "eq2", confidence=0.9)
    assert prof.model_name == "eq2" and prof.confidence == 0.9 and prof.idle_power_w == pytest.approx(0.64)
    assert prof.params["e_per_tflop_j"] == pytest.approx(5.7, rel=0.05)
    est = prof.estimate(5.7 * 100 + 3.0 * 150, 150.0)
    assert isinstance(est, Estimate)
    assert est.lower_flops < est.flops < est.upper_flops
    assert est.flops == pytest.approx(100e12, rel=0.03)
    path = prof.save(tmp_path / "p.json")
    again = Profile.load(path)
    assert again.sha256() == prof.sha256()
    assert again.estimate(1000.0, 120.0) == prof.estimate(1000.0, 120.0)
    data = json.loads(path.read_text())
    assert data["schema"] == "flopwatch.profile/1"
    for key in ("fingerprint", "idle_power_w", "model", "params", "interval", "training", "created"):
        assert key in data
    assert data["training"]["n"] == 20 and len(data["training"]["labels"]) == 20


def test_default_model_calibrates_and_estimates():
    prof = calibrate(synthetic_records(), confidence=0.8)
    est = prof.estimate(1200.0, 150.0, tb_moved=0.08, mean_util=0.95)
    assert est.model == "default" and est.confidence == 0.8 and est.flops > 0


def test_verdicts():
    e = Estimate(flops=1e14, lower_flops=0.9e14, upper_flops=1.1e14, confidence=0.9, model="eq2")
    assert verdict(e, threshold_flops=0.8e14) == "above"
    assert verdict(e, threshold_flops=1.2e14) == "below"
    assert verdict(e, threshold_flops=1.0e14) == "uncertain"
    assert verdict(e, declared_flops=1.05e14) == "consistent"
    assert verdict(e, declared_flops=1.5e14) == "inconsistent"
    assert verdict(e) == "n/a"
    with pytest.raises(InputError):
        verdict(e, threshold_flops=1e14, declared_flops=1e14)
    with pytest.raises(InputError):
        verdict(e, threshold_flops=float("nan"))


def test_predict_refuses_before_fit():
    with pytest.raises(NotFittedError):
        Eq2Model().predict(Features.single(1000.0, 100.0))


def test_estimate_rejects_other_precision_and_bad_numbers():
    prof = calibrate(synthetic_records(), "eq2")
    with pytest.raises(ProfileError, match="fp16"):
        prof.estimate(1000.0, 100.0, dtype="fp16")
    with pytest.raises(InputError, match="duration_s"):
        prof.estimate(1000.0, 0.0)
    with pytest.raises(InputError, match="net_energy_j"):
        prof.estimate(float("nan"), 10.0)


def test_calibrate_reports_what_the_gate_excluded():
    recs = synthetic_records(6)
    with pytest.raises(InputError, match="below min util"):
        calibrate(recs, "eq2", gate=FrontierGate(min_util=0.99))


def test_evaluate_models_contract(v2_records_path):
    rs = load_records(v2_records_path, require=("net_energy_j", "duration_s", "total_flops"))
    res = evaluate_models(rs, ["eq1", "eq2", "default"], n_splits=20, seed=3)
    d = res.to_dict()
    assert d["n_frontier"] == 21 and d["n_splits"] == 20 and d["default_model"] == "default"
    for name in ("eq1", "eq2", "default"):
        m = d["models"][name]
        for key in (
            "mae_pct",
            "sd_pct",
            "mean_signed_pct",
            "frac_splits_any_over_10pct",
            "worst_pct",
            "coverage",
        ):
            assert np.isfinite(m[key])
        assert 0 <= m["coverage"] <= 1
    json.dumps(d)  # serialisable as is


def test_default_falls_back_without_dram_traffic(tmp_path):
    """NVML before Hopper has no DRAM counter: records without tb_moved still calibrate and evaluate."""
    recs = [
        WorkloadRecord(
            label=r.label,
            net_energy_j=r.net_energy_j,
            duration_s=r.duration_s,
            mean_util=0.95,
            total_flops=r.total_flops,
        )
        for r in synthetic_records(20)
    ]
    prof = calibrate(recs)
    assert prof.model_name == "default-p" and prof.to_dict()["requested_model"] == "default"
    assert prof.estimate(1000.0, 120.0).flops > 0
    again = Profile.load(prof.save(tmp_path / "p.json"))
    assert again.model_name == "default-p"
    res = evaluate_models(recs, n_splits=10, n_train=14)
    d = res.to_dict(detail=False)
    assert "default" in d["models"] and "resolved to default-p" in d["models"]["default"]["description"]
    assert set(d["skipped_models"]) == {"eq1", "loglin-p-bw"}
    with pytest.raises(InputError, match="tb_moved"):
        evaluate_models(recs, ["eq1"], n_splits=10)
    with pytest.raises(InputError, match="tb_moved"):
        calibrate(recs, "eq1")


def test_unmeasured_record_is_named_by_calibrate_and_evaluate(tmp_path):
    """A record read with require=() (no telemetry joined yet) that reaches a fit names itself."""
    p = tmp_path / "runs.jsonl"
    rows = []
    for i, r in enumerate(synthetic_records(10)):
        d = {"label": r.label, "duration_s": r.duration_s, "total_flops": r.total_flops, "mean_util": 0.95}
        if i != 6:
            d["net_energy_j"] = r.net_energy_j
        rows.append(json.dumps(d))
    p.write_text("\n".join(rows) + "\n")
    rs = load_records(p, require=())
    for run in (lambda: calibrate(rs, "eq2"), lambda: evaluate_models(rs, ["eq2"], n_train=6, n_splits=5)):
        with pytest.raises(InputError) as ei:
            run()
        assert (ei.value.file, ei.value.record, ei.value.field) == (str(p), "run6", "net_energy_j")
        assert "missing" in ei.value.detail


def test_model_needing_a_column_names_the_record_lacking_it():
    recs = synthetic_records(10)
    recs[3] = dataclasses.replace(recs[3], tb_moved=None)
    with pytest.raises(InputError) as ei:
        calibrate(recs, "eq1")
    assert (ei.value.record, ei.value.field) == ("run3", "tb_moved") and "'eq1'" in ei.value.detail
    with pytest.raises(InputError) as ei:
        evaluate_models(recs, ["eq1"], n_train=6, n_splits=5)
    assert (ei.value.record, ei.value.field) == ("run3", "tb_moved")


def test_device_name_of_our_records_becomes_the_profile_fingerprint(tmp_path):
    """Records written by `flopwatch run` name their device; the profile carries it and describes its runs."""
    p = tmp_path / "runs.jsonl"
    rows = [
        {**r.to_dict(), "device_name": "NVIDIA A100-SXM4-80GB", "simulated": i < 3}
        for i, r in enumerate(synthetic_records(10))
    ]
    p.write_text("".join(json.dumps(d) + "\n" for d in rows))
    rs = load_records(p)
    assert rs.fingerprint == {"device_name": "NVIDIA A100-SXM4-80GB"}
    prof = calibrate(rs, "eq2")
    assert prof.fingerprint == {"device_name": "NVIDIA A100-SXM4-80GB"}
    assert prof.training["device_names"] == ["NVIDIA A100-SXM4-80GB"] and prof.training["n_simulated"] == 3
    with pytest.raises(ProfileError, match="fingerprint.device_name"):
        prof.check_fingerprint({"device_name": "NVIDIA H100 80GB HBM3"})
    # two devices in one file: no single fingerprint (unknown), nothing invented
    rows[0]["device_name"] = "NVIDIA H100 80GB HBM3"
    p.write_text("".join(json.dumps(d) + "\n" for d in rows))
    assert load_records(p).fingerprint == {}


def test_too_few_runs_of_the_gate_precision_suggests_the_one_present():
    """Our own sweeps are mostly bf16: the fp32 default gate leaves too few runs, and the error says so."""
    recs = [dataclasses.replace(r, dtype="bf16") for r in synthetic_records(10)]
    with pytest.raises(InputError, match=r"bf16 10 \(use --precision bf16\)"):
        calibrate(recs, "eq2")
    with pytest.raises(InputError, match=r"use --precision bf16"):
        evaluate_models(recs, ["eq2"])
    assert calibrate(recs, "eq2", gate=FrontierGate(precision="bf16")).training["n"] == 10


def test_by_hyperparameter_tolerates_free_form_configs():
    """Configs are free-form JSON: a value typed as a string, or a list, must not break Figure 5's table."""
    recs = [
        dataclasses.replace(r, config={"d_model": "256" if i % 2 else 256, "batch_size": [1, 2]})
        for i, r in enumerate(synthetic_records(10))
    ]
    res = evaluate_models(recs, ["eq2"], n_train=7, n_splits=20)
    table = res.by_hyperparameter("eq2")
    assert [row["value"] for row in table["d_model"]] == [256, "256"]
    assert "batch_size" not in table  # lists are not grouped


def test_non_positive_estimate_keeps_ordered_bounds():
    """Net power below eq. 2's overhead gives a negative estimate; the interval must still be ordered."""
    prof = calibrate(synthetic_records(), "eq2")
    e = prof.estimate(100.0, 150.0)  # 0.67 W net, below the ~3 W overhead
    assert e.flops < 0 and e.lower_flops <= e.flops <= e.upper_flops
    assert any("not positive" in w for w in e.warnings)
    # a non-positive estimate is never "below" (issue 15), and its warning leaves a declaration unverified
    assert verdict(e, threshold_flops=1e12) == "uncertain" and verdict(e, declared_flops=1e12) == "unverified"
