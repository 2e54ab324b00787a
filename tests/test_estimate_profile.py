"""Calibration profiles: contents, versioning, hashing, intervals, compatibility checks."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from flopwatch.errors import InputError, ProfileError
from flopwatch.estimate import FrontierGate, Profile, calibrate
from flopwatch.estimate.intervals import conformal_rank, log_halfwidth
from flopwatch.records import load_records


@pytest.fixture(scope="module")
def v2(v2_records_path):
    return load_records(v2_records_path, require=("net_energy_j", "duration_s", "total_flops"))


@pytest.fixture(scope="module")
def profile(v2):
    return calibrate(v2)


def test_profile_contents(profile, v2):
    d = profile.to_dict()
    assert d["schema"] == "flopwatch.profile/1"
    assert d["model"] == "default" and profile.model_name == "default"
    assert d["idle_power_w"] == pytest.approx(0.642048)
    assert d["training"]["n"] == 21 and len(d["training"]["labels"]) == 21
    assert d["training"]["source"] == v2.source and d["training"]["dtype"] == "fp32"
    f = d["training"]["filters"]
    assert f["min_util"] == 0.8 and f["precision"] == "fp32"
    assert f["excluded_counts"] == {"below_min_util": 5, "precision": 12}
    assert len(f["excluded"]) == 17 and all(x["reason"] for x in f["excluded"])
    assert len(d["interval"]["residuals_log_ratio"]) == 21
    assert d["interval"]["method"] == "conformal"
    assert "T" in d["created"] and d["created"].endswith("+00:00")
    assert set(d["params"]) >= {"intercept", "coef_log_power", "coef_log_bw"}
    assert 2.0 < d["diagnostics"]["loo_mae_pct"] < 6.0


def test_profile_estimate_on_training_run(profile, v2):
    r = next(x for x in v2 if x.label == "d384_b16_s128_L3")
    e = profile.estimate(r.net_energy_j, r.duration_s, tb_moved=r.tb_moved, mean_util=r.mean_util)
    assert e.lower_flops < r.total_flops < e.upper_flops
    assert abs(e.flops / r.total_flops - 1) < 0.05
    assert e.confidence == 0.9 and e.model == "default" and e.warnings == ()


def test_confidence_override_recomputes_interval(profile):
    a = profile.estimate(1200.0, 150.0, tb_moved=0.08)
    b = profile.estimate(1200.0, 150.0, tb_moved=0.08, confidence=0.5)
    assert a.flops == b.flops and b.confidence == 0.5
    assert (b.upper_flops - b.lower_flops) < (a.upper_flops - a.lower_flops)
    c = profile.estimate(1200.0, 150.0, tb_moved=0.08, confidence=0.97)  # n=21 too small: student-t
    assert c.interval_method == "student-t" and c.upper_flops > a.upper_flops


def test_missing_feature_and_extrapolation_warning(profile):
    with pytest.raises(InputError, match="tb_moved"):
        profile.estimate(1200.0, 150.0)
    e = profile.estimate(200.0, 150.0, tb_moved=0.08, mean_util=0.5)
    assert any("outside the calibration range" in w for w in e.warnings)
    assert any("below the calibration gate" in w for w in e.warnings)


def test_save_load_roundtrip_and_hash(profile, tmp_path):
    p = profile.save(tmp_path / "sub" / "profile.json")
    q = Profile.load(p)
    assert q.sha256() == profile.sha256() and len(q.sha256()) == 64
    assert q.params == profile.params and q.fingerprint == profile.fingerprint
    assert q.estimate(1200.0, 150.0, tb_moved=0.08) == profile.estimate(1200.0, 150.0, tb_moved=0.08)
    d = json.loads(p.read_text())
    d["params"]["intercept"] += 1e-9
    p.write_text(json.dumps(d))
    assert Profile.load(p).sha256() != profile.sha256()  # any change of a number changes the hash


def test_fingerprint_mismatch(profile):
    data = profile.to_dict()
    data["fingerprint"] = {"device": "Jetson Orin Nano"}
    prof = Profile(data)
    prof.check_fingerprint({"device": "Jetson Orin Nano"})
    prof.check_fingerprint(None)
    with pytest.raises(ProfileError, match="fingerprint.device"):
        prof.check_fingerprint({"device": "NVIDIA A100"}, file="other.jsonl")


def test_published_models_as_profiles(v2):
    p1 = calibrate(v2, "eq1")
    assert p1.params["p_overhead_w"] == pytest.approx(1.4625)
    assert p1.component == "eq1"
    p_all = calibrate(v2, "eq2", gate=FrontierGate(min_util=0.8, precision="all"))
    assert p_all.training["n"] == 23 and p_all.dtype == "all"
    p_all.estimate(600.0, 100.0, dtype="tf32")  # mixed-precision profile accepts any dtype


def test_conformal_rank_and_student_fallback():
    assert conformal_rank(14, 0.9) == 14  # ⌈15·0.9⌉ = 14 (not 14.000000000000002 → 15)
    assert conformal_rank(14, 0.95) == 15
    r = np.linspace(-0.1, 0.1, 14)
    q, used = log_halfwidth(r, 0.9)
    assert str(used) == "conformal" and q == pytest.approx(0.1)
    q2, used2 = log_halfwidth(r, 0.95)
    assert str(used2) == "student-t" and q2 > 0.1
    with pytest.raises(InputError, match="needs at least 19"):
        log_halfwidth(r, 0.95, "conformal")
    qb, _ = log_halfwidth(np.stack([r, 2 * r]), 0.9)
    assert qb.shape == (2,) and qb[1] == pytest.approx(2 * qb[0])
    assert math.isfinite(float(q2))


def test_degenerate_inputs(profile, v2):
    e = profile.estimate(0.0, 10.0, tb_moved=0.01)
    assert e.flops == e.lower_flops == e.upper_flops == 0.0 and "no net energy" in e.warnings[-1]
    with pytest.raises(InputError, match="tb_moved must be > 0"):
        profile.estimate(100.0, 10.0, tb_moved=0.0)
    eq2 = calibrate(v2, "eq2")
    low = eq2.estimate(10.0, 10.0)  # 1 W net, below the 3.75 W overhead
    assert low.flops < 0 and "not positive" in low.warnings[-1]


def test_saved_profile_is_world_readable_and_keeps_an_existing_mode(profile, tmp_path):
    """mkstemp creates 0600 files; a profile shared with a monitor or another user must stay readable."""
    p = profile.save(tmp_path / "profile.json")
    assert p.stat().st_mode & 0o777 == 0o644
    p.chmod(0o640)
    profile.save(p)  # replacing a profile keeps the mode its owner chose
    assert p.stat().st_mode & 0o777 == 0o640


def test_low_telemetry_coverage_is_flagged(profile):
    from flopwatch.records import WorkloadRecord

    base = {"label": "r", "net_energy_j": 1200.0, "duration_s": 150.0, "tb_moved": 0.08, "mean_util": 0.93}
    full = profile.estimate_record(WorkloadRecord(**base, coverage=1.0))
    gappy = profile.estimate_record(WorkloadRecord(**base, coverage=0.7))
    assert gappy.flops == full.flops and not full.warnings
    assert any("covers only 70%" in w for w in gappy.warnings)


def test_confidence_override_keeps_a_student_t_profile_student_t(v2):
    prof = calibrate(v2, "eq2", interval="student-t")
    e = prof.estimate(1200.0, 150.0, confidence=0.8)
    assert e.interval_method == "student-t"
    q, _ = log_halfwidth(prof.residuals, 0.8, "student-t")
    assert e.upper_flops == pytest.approx(e.flops * math.exp(float(q)))
