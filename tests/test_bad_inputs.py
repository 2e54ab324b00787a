"""A corpus of bad inputs: each gives exit status 2 and one clear line naming file, record and field.

Files live in tests/data/bad_inputs/ (synthetic, written for these tests). Every case goes through the
real CLI (``flopwatch.cli.main``), as a user would hit it.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from flopwatch.cli import main
from flopwatch.estimate import calibrate
from flopwatch.records import WorkloadRecord

BAD = Path(__file__).parent / "data" / "bad_inputs"


def _good_records(tmp_path: Path) -> Path:
    p = tmp_path / "good.jsonl"
    lines = []
    for i in range(8):
        tf = 60 + 12 * i
        t = 120 + 9 * i
        lines.append(
            json.dumps(
                {
                    "schema": "flopwatch.record/1",
                    "label": f"g{i}",
                    "dtype": "fp32",
                    "net_energy_j": 5.7 * tf + 3.0 * t + (-1) ** i * 4,
                    "duration_s": t,
                    "total_flops": tf * 1e12,
                    "mean_util": 0.95,
                    "tb_moved": 0.05 + 0.004 * i,
                }
            )
        )
    p.write_text("\n".join(lines) + "\n")
    return p


def _run(capsys, argv: list[str]) -> tuple[int, list[str]]:
    code = main(argv)
    err = capsys.readouterr().err.strip().splitlines()
    return code, err


def _one_line(err: list[str]) -> str:
    assert len(err) == 1, err
    assert err[0].startswith("flopwatch: error: ")
    assert "Traceback" not in err[0]
    return err[0]


RECORD_CASES = [
    ("missing_field.jsonl", ["record 'run_b'", "field 'net_energy_j'", "missing"]),
    ("nan_energy.jsonl", ["record 'run_nan'", "field 'net_energy_j'", "NaN"]),
    ("negative_energy.jsonl", ["record 'run_neg'", "field 'net_energy_j'", ">= 0"]),
    ("zero_duration.jsonl", ["record 'run_zero'", "field 'duration_s'", "> 0"]),
    ("wrong_type.jsonl", ["record 'run_str'", "field 'duration_s'", "must be a number"]),
    ("util_percent.jsonl", ["record 'run_pct'", "field 'mean_util'", "<= 1"]),
    ("bool_energy.jsonl", ["record 'run_bool'", "field 'net_energy_j'", "must be a number"]),
    ("empty.jsonl", ["empty"]),
    ("bad_json_line.jsonl", ["line 3", "invalid JSON"]),
    ("foreign_schema.jsonl", ["line 2", "unsupported schema", "field 'schema'"]),
    ("duplicate_label.jsonl", ["record 'ok1'", "field 'label'", "duplicate"]),
    ("not_records.json", ["record 0", "must be an object"]),
    ("seed_missing_ground_truth.json", ["record 'd256'", "field 'ground_truth_tf'", "missing"]),
    ("seed_wrong_type.json", ["record 'd256'", "field 'avg_gpu_pct'", "must be a number"]),
    # range errors in the seed's own units (%, TFLOP), not in the converted ones
    ("seed_util_over_100.json", ["record 'd256'", "field 'avg_gpu_pct'", "<= 100, got 192.8"]),
    ("seed_bad_precision.json", ["record 'd256'", "field 'config.precision'", "unknown dtype 'fp64'"]),
    # the wrong kind of file: a profile given as records, a pretty-printed record (not JSON Lines)
    ("records_is_profile.json", ["is a calibration profile", "--profile"]),
    ("pretty_printed_record.json", ["multi-line JSON object", "JSON Lines"]),
]


@pytest.mark.parametrize(("name", "expect"), RECORD_CASES, ids=[c[0] for c in RECORD_CASES])
@pytest.mark.parametrize("command", ["calibrate", "evaluate"])
def test_bad_record_files(capsys, tmp_path, name, expect, command):
    path = BAD / name
    argv = [command, str(path)] + (["-o", str(tmp_path / "p.json")] if command == "calibrate" else [])
    code, err = _run(capsys, argv)
    assert code == 2
    line = _one_line(err)
    assert str(path) in line  # names the file
    for part in expect:
        assert part in line, (part, line)
    assert not (tmp_path / "p.json").exists()  # nothing half-written


def test_bad_record_file_in_estimate(capsys, tmp_path):
    prof = tmp_path / "p.json"
    assert main(["calibrate", str(_good_records(tmp_path)), "-o", str(prof), "--model", "eq2"]) == 0
    code, err = _run(capsys, ["estimate", "--profile", str(prof), str(BAD / "nan_energy.jsonl")])
    assert code == 2 and "field 'net_energy_j'" in _one_line(err)


def _valid_profile(tmp_path: Path) -> dict:
    recs = [
        WorkloadRecord(
            label=f"r{i}",
            net_energy_j=5.7 * (60 + 9 * i) + 3 * (100 + 7 * i) * (1 + 0.01 * (-1) ** i),
            duration_s=100 + 7 * i,
            total_flops=(60 + 9 * i) * 1e12,
            mean_util=0.95,
            tb_moved=0.08,
        )
        for i in range(12)
    ]
    return calibrate(recs, "eq2").to_dict()


def _mutations(d: dict) -> list[tuple[str, dict | str, list[str]]]:
    out: list[tuple[str, dict | str, list[str]]] = []
    m = json.loads(json.dumps(d))
    del m["params"]
    out.append(("missing_params", m, ["field 'params'", "missing"]))
    m = json.loads(json.dumps(d))
    m["params"]["e_per_tflop_j"] = "5.7"
    out.append(("string_param", m, ["field 'params.e_per_tflop_j'", "finite number"]))
    m = json.loads(json.dumps(d))
    del m["params"]["p_overhead_w"]
    out.append(("incomplete_params", m, ["field 'params'", "p_overhead_w"]))
    m = json.loads(json.dumps(d))
    m["model"] = "eq9"
    out.append(("unknown_model", m, ["field 'model'", "unknown model"]))
    m = json.loads(json.dumps(d))
    m["confidence"] = 90
    out.append(("percent_confidence", m, ["field 'confidence'"]))
    m = json.loads(json.dumps(d))
    m["interval"]["residuals_log_ratio"] = [0.1]
    out.append(("short_residuals", m, ["field 'interval.residuals_log_ratio'"]))
    m = json.loads(json.dumps(d))
    m["idle_power_w"] = -1.0
    out.append(("negative_idle", m, ["field 'idle_power_w'"]))
    # parts of the training description that estimation reads, and parameters no fit can produce
    m = json.loads(json.dumps(d))
    m["training"]["ranges"] = 5
    out.append(("ranges_not_object", m, ["field 'training.ranges'", "must be an object"]))
    m = json.loads(json.dumps(d))
    m["training"]["ranges"]["avg_net_power_w"] = ["low", "high"]
    out.append(("ranges_strings", m, ["field 'training.ranges.avg_net_power_w'", "[low, high]"]))
    m = json.loads(json.dumps(d))
    m["training"]["filters"] = [1]
    out.append(("filters_not_object", m, ["field 'training.filters'"]))
    m = json.loads(json.dumps(d))
    m["training"]["filters"]["min_util"] = "high"
    out.append(("min_util_string", m, ["field 'training.filters.min_util'"]))
    m = json.loads(json.dumps(d))
    m["params"]["e_per_tflop_j"] = -5.7
    out.append(("negative_j_per_tflop", m, ["field 'params.e_per_tflop_j'", "> 0"]))
    m = json.loads(json.dumps(d))
    m["model"], m["params"] = "select", {"choice": 7.0}
    out.append(("select_bad_choice", m, ["field 'params.choice'", "candidate index"]))
    return out


def test_malformed_profiles(capsys, tmp_path):
    recs = _good_records(tmp_path)
    cases: list[tuple[Path, list[str]]] = [
        (BAD / "profile_not_json.json", ["invalid JSON"]),
        (BAD / "profile_foreign.json", ["field 'schema'", "not a flopwatch profile"]),
        (BAD / "profile_future_version.json", ["field 'schema'", "unsupported profile version"]),
        (BAD / "profile_array.json", ["must be a JSON object"]),
        (BAD / "empty.jsonl", ["empty"]),
        (tmp_path / "does_not_exist.json", ["no such file"]),
        (tmp_path, ["is a directory"]),
    ]
    for name, content, expect in _mutations(_valid_profile(tmp_path)):
        p = tmp_path / f"{name}.json"
        p.write_text(json.dumps(content))
        cases.append((p, expect))
    for path, expect in cases:
        code, err = _run(capsys, ["estimate", "--profile", str(path), str(recs)])
        assert code == 2, path
        line = _one_line(err)
        assert str(path) in line
        for part in expect:
            assert part in line, (part, line)


def test_profile_of_other_precision_is_refused_in_strict_mode(capsys, tmp_path):
    recs = _good_records(tmp_path)
    prof = tmp_path / "p.json"
    assert main(["calibrate", str(recs), "-o", str(prof), "--model", "eq2"]) == 0
    fp16 = tmp_path / "fp16.jsonl"
    fp16.write_text(recs.read_text().replace('"fp32"', '"fp16"'))
    code, err = _run(capsys, ["estimate", "--profile", str(prof), str(fp16), "--strict"])
    assert code == 2
    line = _one_line(err)
    assert "record 'g0'" in line and "field 'dtype'" in line and "fp16" in line


ARG_CASES = [
    (["evaluate", "{rec}", "--min-util", "80"], ["--min-util", "did you mean 0.8"]),
    (["evaluate", "{rec}", "--precision", "fp64"], ["--precision", "unknown dtype"]),
    (["evaluate", "{rec}", "--confidence", "1.5"], ["--confidence"]),
    (["evaluate", "{rec}", "--train", "30"], ["--train", "leaves no test runs"]),
    (["evaluate", "{rec}", "--models", "eq1,eq9"], ["unknown model 'eq9'"]),
    (["evaluate", "{rec}", "--models", ","], ["--models"]),
    (["evaluate", "{rec}", "--splits", "0"], ["--splits"]),
    (["calibrate", "{rec}", "-o", "{tmp}/p.json", "--model", "nope"], ["unknown model 'nope'"]),
    (["calibrate", "{rec}", "-o", "{tmp}/p.json", "--interval", "magic"], ["unknown interval method"]),
    (
        ["calibrate", "{rec}", "-o", "{tmp}/p.json", "--confidence", "0.99", "--interval", "conformal"],
        ["needs at least"],
    ),
    (
        ["calibrate", "{rec}", "-o", "{tmp}/p.json", "--min-util", "0.99"],
        ["pass the filters", "below min util"],
    ),
    (["calibrate", "{tmp}/missing.jsonl", "-o", "{tmp}/p.json"], ["no such file"]),
    (["calibrate", "{tmp}", "-o", "{tmp}/p.json"], ["is a directory"]),
    (["estimate", "--profile", "{tmp}/good_profile.json", "{rec}", "--threshold", "lots"], ["--threshold"]),
    (["estimate", "--profile", "{tmp}/good_profile.json", "{rec}", "--threshold", "-1e14"], ["--threshold"]),
    (["estimate", "--profile", "{tmp}/good_profile.json", "{rec}", "--declared", "nan"], ["--declared"]),
]


@pytest.mark.parametrize(
    ("argv", "expect"), ARG_CASES, ids=[" ".join(a for a in c[0] if "{" not in a) for c in ARG_CASES]
)
def test_bad_arguments(capsys, tmp_path, argv, expect):
    rec = _good_records(tmp_path)
    assert main(["calibrate", str(rec), "-o", str(tmp_path / "good_profile.json"), "--model", "eq2"]) == 0
    capsys.readouterr()
    args = [a.replace("{rec}", str(rec)).replace("{tmp}", str(tmp_path)) for a in argv]
    code, err = _run(capsys, args)
    assert code == 2
    line = _one_line(err)
    for part in expect:
        assert part in line, (part, line)


def test_usage_errors_exit_2(capsys, tmp_path):
    """Type errors caught by the argument parser itself (click prints its usage block, then the error)."""
    code, err = _run(capsys, ["evaluate", str(_good_records(tmp_path)), "--splits", "many"])
    assert code == 2 and "--splits" in err[-1]
    code, err = _run(capsys, ["calibrate", str(_good_records(tmp_path))])
    assert code == 2 and "--output" in err[-1]
