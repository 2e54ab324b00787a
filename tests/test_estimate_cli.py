"""CLI contracts: calibrate, estimate --json, evaluate --json/--figures (run through flopwatch.cli.main)."""

from __future__ import annotations

import json

import pytest

from flopwatch.cli import main


def _json(capsys) -> dict:
    out = capsys.readouterr().out
    return json.loads(out)  # pure JSON on stdout, nothing else


def test_calibrate_then_estimate_json(capsys, tmp_path, v2_records_path):
    prof = tmp_path / "profile.json"
    assert main(["calibrate", str(v2_records_path), "-o", str(prof), "--json"]) == 0
    summary = _json(capsys)
    assert summary["model"] == "default" and summary["n_train"] == 21 and len(summary["sha256"]) == 64
    assert summary["filters"]["excluded_counts"] == {"below_min_util": 5, "precision": 12}
    assert prof.exists()

    assert (
        main(["estimate", "--profile", str(prof), str(v2_records_path), "--json", "--threshold", "1e14"]) == 0
    )
    d = _json(capsys)
    assert set(d) >= {"records", "summary"}
    assert len(d["records"]) == 26 and len(d["skipped"]) == 12  # fp32 runs; other precisions listed
    for r in d["records"]:
        assert set(r) >= {
            "label",
            "estimate_flops",
            "lower_flops",
            "upper_flops",
            "ground_truth_flops",
            "rel_error_pct",
        }
        # no device in the v2 file or the profile: no datasheet bounds the run (upper null), never "below"
        assert r["lower_flops"] <= r["estimate_flops"] and r["upper_flops"] is None
        assert r["calibrated_lower_flops"] <= r["estimate_flops"] <= r["calibrated_upper_flops"]
        assert r["threshold_verdict"] in ("above", "uncertain")
    s = d["summary"]
    assert set(s) >= {"mae_pct", "max_abs_pct", "mean_signed_pct"}
    assert s["n_with_ground_truth"] == 26
    assert d["profile_sha256"] == summary["sha256"]


def test_estimate_without_ground_truth(capsys, tmp_path, v2_records_path):
    prof = tmp_path / "p.json"
    assert main(["calibrate", str(v2_records_path), "-o", str(prof), "--model", "eq2"]) == 0
    capsys.readouterr()
    runs = tmp_path / "new.jsonl"
    runs.write_text(json.dumps({"label": "unknown-run", "net_energy_j": 1300.0, "duration_s": 170.0}) + "\n")
    assert main(["estimate", "-p", str(prof), str(runs), "--json"]) == 0
    d = _json(capsys)
    r = d["records"][0]
    assert r["ground_truth_flops"] is None and r["rel_error_pct"] is None
    assert d["summary"]["mae_pct"] is None
    assert 1.0e14 < r["estimate_flops"] < 2.0e14


def test_calibrate_human_output_and_flags(capsys, tmp_path, v2_records_path):
    prof = tmp_path / "p.json"
    assert (
        main(
            [
                "calibrate",
                str(v2_records_path),
                "-o",
                str(prof),
                "--model",
                "eq1",
                "--precision",
                "all",
                "--min-util",
                "0.8",
                "--confidence",
                "0.8",
            ]
        )
        == 0
    )
    out = capsys.readouterr().out
    assert "kept 23 of 38" in out and "p_overhead_w" in out
    d = json.loads(prof.read_text())
    assert d["training"]["filters"]["precision"] == "all" and d["confidence"] == 0.8


def test_evaluate_json_contract(capsys, v2_records_path):
    assert (
        main(["evaluate", str(v2_records_path), "--splits", "200", "--train", "14", "--seed", "0", "--json"])
        == 0
    )
    d = _json(capsys)
    for key in ("n_frontier", "n_splits", "default_model", "models"):
        assert key in d
    assert d["n_frontier"] == 21 and d["n_splits"] == 200 and d["default_model"] == "default"
    assert {"eq1", "eq2", "default"} <= set(d["models"])
    for m in d["models"].values():
        assert set(m) >= {
            "mae_pct",
            "sd_pct",
            "mean_signed_pct",
            "frac_splits_any_over_10pct",
            "worst_pct",
            "coverage",
        }
    assert d["timing_s"] < 5.0  # generous: the benchmark prints the real figure


@pytest.mark.slow
def test_evaluate_figures(capsys, tmp_path, v2_records_path):
    out = tmp_path / "figs"
    assert (
        main(
            [
                "evaluate",
                str(v2_records_path),
                "--splits",
                "30",
                "--models",
                "eq1,eq2,default",
                "--figures",
                str(out),
                "--json",
            ]
        )
        == 0
    )
    d = _json(capsys)
    names = sorted(p.name for p in out.iterdir())
    assert names == [
        "coverage.png",
        "fig4_per_workload.png",
        "fig5_by_hyperparameter.png",
        "fig6_ablation.png",
        "threshold_rates.png",
    ]
    assert len(d["figures"]) == 5
    for p in out.iterdir():
        assert p.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and p.stat().st_size > 10_000


def test_estimate_declared_and_threshold_verdicts(capsys, tmp_path, v2_records_path):
    """--declared checks a declared FLOP count against the sound bounds; --threshold says above/below; the
    calibrated interval is reported apart (issue 21: it never makes a "below")."""
    prof = tmp_path / "p.json"
    args = ["calibrate", str(v2_records_path), "-o", str(prof), "--model", "eq2", "--device", "orin-nano"]
    assert main(args) == 0
    capsys.readouterr()
    runs = tmp_path / "one.jsonl"
    # the observables that place the run in the calibrated fp32 regime (7.6 W net, 65 MB/J, 95 % busy)
    # (and the idle baseline the net energy was taken against, the profile's own: without it, never "below")
    idle = json.loads(prof.read_text())["idle_power_w"]
    obs = {
        "net_energy_j": 1300.0,
        "duration_s": 170.0,
        "mean_util": 0.95,
        "tb_moved": 0.0845,
        "idle_power_w": idle,
    }
    runs.write_text(json.dumps({"label": "r", **obs}) + "\n")
    assert main(["estimate", "-p", str(prof), str(runs), "--json"]) == 0
    r = _json(capsys)["records"][0]
    lo, hi = r["lower_flops"], r["upper_flops"]
    assert r["verdict_lower_flops"] == lo and r["verdict_upper_flops"] == hi
    clo, chi = r["calibrated_lower_flops"], r["calibrated_upper_flops"]
    assert lo <= clo < r["estimate_flops"] < chi < hi  # the sound bounds enclose the calibrated interval
    assert "calibrated interval" not in r["bound"] and r["bound"].startswith("sound")
    assert r["assumptions"].startswith("the workload resembles the calibration runs")
    expect = [
        (["--declared", f"{(lo + hi) / 2:.6e}"], "declaration_verdict", "consistent"),
        (["--declared", f"{hi * 1.5:.6e}"], "declaration_verdict", "inconsistent"),
        (["--threshold", f"{lo * 0.5:.6e}"], "threshold_verdict", "above"),
        (["--threshold", f"{hi * 1.01:.6e}"], "threshold_verdict", "below"),
        (
            ["--threshold", f"{chi * 1.5:.6e}"],
            "threshold_verdict",
            "uncertain",
        ),  # over the calibrated interval
        (["--threshold", f"{(lo + hi) / 2:.6e}"], "threshold_verdict", "uncertain"),
    ]
    for flags, key, want in expect:  # the record names no device: the verifier's --device states it
        assert main(["estimate", "-p", str(prof), str(runs), "--json", "--device", "orin-nano", *flags]) == 0
        d = _json(capsys)
        assert d["records"][0][key] == want, (flags, d["records"][0])
    assert d["threshold_flops"] == pytest.approx((lo + hi) / 2, rel=1e-6)
    # without --device the profile's device is an assumption about a run that names none (round 9): never "below"
    assert main(["estimate", "-p", str(prof), str(runs), "--json", "--threshold", f"{hi * 1.01:.6e}"]) == 0
    r = _json(capsys)["records"][0]
    assert r["threshold_verdict"] == "uncertain" and r["upper_flops"] == hi
    assert any("names no device: judged as the profile's device orin-nano" in w for w in r["warnings"])
    # the same run without its idle baseline (round 6, `idle-omitted`): the baseline cannot be checked
    runs.write_text(
        json.dumps({"label": "r", **{k: v for k, v in obs.items() if k != "idle_power_w"}}) + "\n"
    )
    assert main(["estimate", "-p", str(prof), str(runs), "--json", "--threshold", f"{hi * 1.01:.6e}",
                 "--declared", f"{(lo + hi) / 2:.6e}", "--device", "orin-nano"]) == 0  # fmt: skip
    r = _json(capsys)["records"][0]
    assert r["threshold_verdict"] == "uncertain" and r["declaration_verdict"] == "unverified"
    assert any("idle baseline not recorded" in w for w in r["warnings"])
    # without utilisation and DRAM traffic the calibrated regime cannot be confirmed (an assumption of the
    # estimate, said); eq. 2 needs neither, so the sound verdict stands
    runs.write_text(
        json.dumps({"label": "r", "net_energy_j": 1300.0, "duration_s": 170.0, "idle_power_w": idle}) + "\n"
    )
    assert main(["estimate", "-p", str(prof), str(runs), "--json", "--threshold", f"{hi * 1.01:.6e}",
                 "--device", "orin-nano"]) == 0  # fmt: skip
    r = _json(capsys)["records"][0]
    assert r["threshold_verdict"] == "below" and r["regime"] == "unconfirmed"
    assert "mean_util not measured" in r["assumptions"] and r["warnings"] == []
    runs.write_text(json.dumps({"label": "r", **obs}) + "\n")
    # human table shows both answers, labelled
    assert main(["estimate", "-p", str(prof), str(runs), "--threshold", "1e20", "--declared", "1e20",
                 "--device", "orin-nano"]) == 0  # fmt: skip
    out = capsys.readouterr().out
    assert "below" in out and "inconsistent" in out
    assert "verdict bounds (sound)" in out and "calibrated interval" in out
    # an upper bound under T with "uncertain" always shows why, next to it
    runs.write_text(json.dumps({"label": "r", **obs, "coverage": 0.5}) + "\n")
    assert main(["estimate", "-p", str(prof), str(runs), "--threshold", "1e20", "--device", "orin-nano"]) == 0
    out = capsys.readouterr().out
    assert "uncertain (1 warning: telemetry covers only 50%" in out.replace("\n", "")


def test_estimate_refuses_records_of_another_device(capsys, tmp_path):
    """Profiles calibrated on our own records carry the device name; other devices' records are refused."""
    base = {"schema": "flopwatch.record/1", "dtype": "fp32", "mean_util": 0.95, "tb_moved": 0.08}
    cal = tmp_path / "a100.jsonl"
    lines = []
    for i in range(8):
        tf, t = 60 + 12 * i, 120 + 9 * i
        lines.append(
            {
                **base,
                "label": f"g{i}",
                "device_name": "NVIDIA A100-SXM4-80GB",
                "net_energy_j": 5.7 * tf + 3.0 * t + (-1) ** i * 4,
                "duration_s": t,
                "total_flops": tf * 1e12,
            }
        )
    cal.write_text("".join(json.dumps(x) + "\n" for x in lines))
    prof = tmp_path / "p.json"
    assert main(["calibrate", str(cal), "-o", str(prof), "--model", "eq2"]) == 0
    assert json.loads(prof.read_text())["fingerprint"] == {"device_name": "NVIDIA A100-SXM4-80GB"}
    other = tmp_path / "h100.jsonl"
    other.write_text(cal.read_text().replace("A100-SXM4-80GB", "H100 80GB HBM3"))
    capsys.readouterr()
    assert main(["estimate", "-p", str(prof), str(other)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "field 'fingerprint.device_name'" in err[0] and str(other) in err[0]


def test_simulated_runs_are_labelled(capsys, tmp_path):
    """Numbers from simulator records are never shown as measurements: JSON flags, a SIMULATED line."""
    p = tmp_path / "sim.jsonl"
    rows = []
    for i in range(10):
        tf, t = 60 + 12 * i, 120 + 9 * i
        rows.append(
            {
                "label": f"s{i}",
                "net_energy_j": 5.7 * tf + 3.0 * t + (-1) ** i * 4,
                "duration_s": t,
                "total_flops": tf * 1e12,
                "mean_util": 0.95,
                "simulated": True,
            }
        )
    p.write_text("".join(json.dumps(r) + "\n" for r in rows))
    assert main(["evaluate", str(p), "--models", "eq2", "--train", "7", "--splits", "20", "--json"]) == 0
    assert _json(capsys)["n_simulated"] == 10
    assert main(["evaluate", str(p), "--models", "eq2", "--train", "7", "--splits", "20"]) == 0
    assert "SIMULATED: 10 of 10 runs come from the simulator" in capsys.readouterr().out
    prof = tmp_path / "p.json"
    assert main(["calibrate", str(p), "-o", str(prof), "--model", "eq2"]) == 0
    assert "SIMULATED: 10 of 10" in capsys.readouterr().out
    assert main(["estimate", "-p", str(prof), str(p), "--json"]) == 0
    assert all(r["simulated"] for r in _json(capsys)["records"])
    assert main(["estimate", "-p", str(prof), str(p)]) == 0
    assert "SIMULATED: 10 of 10" in capsys.readouterr().out


def test_evaluate_says_when_the_default_was_not_evaluated(capsys, v2_records_path):
    """With 3 training runs the default (needs 4) is skipped: the stand-in is named, not called 'default'."""
    args = ["evaluate", str(v2_records_path), "--train", "3", "--splits", "20"]
    assert main([*args, "--json"]) == 0
    d = _json(capsys)
    assert (
        d["default_evaluated"] is False and d["default_model"] == "eq2" and "default" in d["skipped_models"]
    )
    assert main(args) == 0
    out = capsys.readouterr().out
    assert "the default model was not evaluated; comparisons below use eq2" in out
    assert "eq2 vs eq1:" in out and "default vs" not in out


def test_estimate_text_prints_each_tighten_hint_once(capsys, tmp_path, v2_records_path):
    """The same 'tighten' hint on every record of a sweep is one line with its range, not one per record."""
    prof = tmp_path / "p.json"
    assert main(["calibrate", str(v2_records_path), "-o", str(prof), "--device", "orin-nano"]) == 0
    capsys.readouterr()
    assert main(["estimate", "-p", str(prof), str(v2_records_path), "--threshold", "1.2e14", "--json"]) == 0
    recs = _json(capsys)["records"]
    hints = {h.split(": ×")[0] for r in recs for h in r["tighten"]}
    assert hints and sum(len(r["tighten"]) for r in recs) > len(hints)  # the case this test is about
    assert main(["estimate", "-p", str(prof), str(v2_records_path), "--threshold", "1.2e14"]) == 0
    out = capsys.readouterr().out.replace("\n", "")
    assert out.count("tighten (") == len(hints)
    assert f"tighten ({len(recs)} of {len(recs)} record(s))" in out or len(hints) > 1
    assert "decisive at: the smallest threshold" in out
