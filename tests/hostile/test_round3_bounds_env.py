"""Round 3: every option that sizes the work is bounded, and environment variables are parsed like options.

Findings reproduced (issue 25): `record --rate 1000 --duration 1e7` accepted 1e10 samples; `detect --poll
1e-300` divided by zero; `powermodel predict --duration-s 1e308` printed inf J; `FLOPWATCH_MAX_INPUT_BYTES=²³`
(digits that `str.isdigit` accepts) gave a traceback; `redteam` reported on published records whose ground truth
was changed ×10 without noticing. Found beside them, same class: `workload flops` with sizes that overflow the
meta device's int64 shapes (a torch traceback), `sim trace` with a schedule of 1e8 s at 10 Hz.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from flopwatch.cli import main


def _refused(capsys: pytest.CaptureFixture[str], args: list[str], *words: str) -> str:
    assert main(args) == 2, args
    err = capsys.readouterr().err
    lines = [x for x in err.splitlines() if x.strip()]
    assert len(lines) == 1 and lines[0].startswith("flopwatch: error:"), err
    for w in words:
        assert w in lines[0], (w, lines[0])
    return lines[0]


@pytest.mark.parametrize(
    "args, words",
    [
        (["record", "--sensor", "sim:a100", "--rate", "1000", "--duration", "1e7", "-o", "{t}/r.parquet"], ["samples"]),
        (["record", "--sensor", "sim:a100", "--rate", "10", "--duration", "1e308", "-o", "{t}/r.parquet"], ["--duration"]),
        (["record", "--sensor", "sim:a100", "--duration", "10", "--flush-every", "1e300", "-o", "{t}/r.parquet"], ["--flush-every"]),
        (["detect", "--poll", "1e-300", "{t}/x.json"], ["--poll"]),
        (["detect", "--poll", "1e300", "{t}/x.json"], ["--poll"]),
        (["monitor", "--sensor", "sim:a100", "--poll-s", "1e-300", "--duration", "10", "--ledger", "{t}/l.db"],
         ["--poll-s"]),  # fmt: skip
        (["powermodel", "predict", "--gpu", "A100", "--dtype", "bf16", "--batch", "64", "--mfu", "40",
          "--duration-s", "1e308"], ["--duration-s"]),  # fmt: skip
        (["powermodel", "inverse", "--gpu", "A100", "--power-w", "1e308", "--duration-s", "10"], ["--power-w"]),
        (["bench", "--repeats", "1000000000000", "--device", "sim:a100"], ["--repeats"]),
        (["powermodel", "reproduce", "--n-boot", "10000000"], ["--n-boot"]),
        (["sim", "openmetrics", "-o", "{t}/h.om", "--resets", "1000000000000"], ["--resets"]),
        (["bench", "--window-s", "1e300", "--device", "sim:a100"], ["--window-s"]),
        (["workload", "flops", "--arch", "gpt", "--d-model", "100000000000000000000", "--batch-size", "1",
          "--seq-len", "1"], ["largest tensor"]),  # fmt: skip
        (["workload", "flops", "--arch", "gpt", "--d-model", "64", "--batch-size", "100000", "--seq-len",
          "10000000"], ["largest tensor"]),  # fmt: skip
        (["workload", "flops", "--d-model", "64", "--batch-size", "1", "--seq-len", "1", "--num-layers",
          "1000000"], ["num_layers"]),  # fmt: skip
        (["sim", "trace", "a100", "--schedule", "{t}/long.json", "-o", "{t}/t.parquet"], ["samples"]),
        (["sim", "trace", "a100", "--schedule", "{t}/long.json", "-o", "{t}/t.parquet", "--tail-s", "1e9"], ["--tail-s"]),
    ],
)  # fmt: skip
def test_absurd_work_is_refused_with_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], args: list[str], words: list[str]
) -> None:
    (tmp_path / "x.json").write_text("{}")
    (tmp_path / "long.json").write_text(json.dumps([{"idle_s": 9e7}]))
    before = sorted(p.name for p in tmp_path.iterdir())
    _refused(capsys, [a.replace("{t}", str(tmp_path)) for a in args], *words)
    assert sorted(p.name for p in tmp_path.iterdir()) == before  # nothing written


def test_bounds_leave_ordinary_work_alone(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "r.parquet"
    assert main(["record", "--sensor", "sim:a100", "--rate", "100", "--duration", "5", "-o", str(out)]) == 0
    assert main(["detect", "--poll", "0.5", str(out), "--json"]) == 0
    capsys.readouterr()
    args = ["powermodel", "predict", "--gpu", "A100", "--dtype", "bf16", "--batch", "64", "--mfu", "20"]
    assert main([*args, "--duration-s", "3600", "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert 0 < d["energy_j"] < 1e8


@pytest.mark.parametrize(
    "value", ["²³", "٣٣", "1e9", "-5", "0", "10_000", " 12 34", "99999999999999999999999999999999"]
)
def test_max_input_bytes_is_parsed_like_an_option(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, value: str
) -> None:
    (tmp_path / "x.json").write_text("{}")
    monkeypatch.setenv("FLOPWATCH_MAX_INPUT_BYTES", value)
    _refused(
        capsys,
        ["calibrate", str(tmp_path / "x.json"), "-o", str(tmp_path / "p.json")],
        "FLOPWATCH_MAX_INPUT_BYTES",
    )


@pytest.mark.parametrize(
    "value", ["a100:fp16=١e12", "a100:fp16=1e999", "a100:fp16=infinity", "a100:fp16=1_0e12"]
)
def test_peak_override_is_parsed_like_an_option(monkeypatch: pytest.MonkeyPatch, value: str) -> None:
    from flopwatch.devices import get_device
    from flopwatch.errors import InputError

    monkeypatch.setenv("FLOPWATCH_PEAK_FLOPS", value)
    with pytest.raises(InputError, match="FLOPWATCH_PEAK_FLOPS"):
        get_device("a100")
    monkeypatch.setenv("FLOPWATCH_PEAK_FLOPS", "a100:fp16=3.5e14")
    assert get_device("a100").peak_flops["fp16"] == 3.5e14


def test_every_flopwatch_variable_read_is_a_known_one() -> None:
    """A new FLOPWATCH_* variable must come with a strict parser (and a line in this list)."""
    import re

    src = Path(__file__).resolve().parents[2] / "src" / "flopwatch"
    names = set()
    for p in src.rglob("*.py"):
        names |= set(re.findall(r"FLOPWATCH_[A-Z_]+", p.read_text(encoding="utf-8")))
    # FLOPWATCH_SHARED is a folder (any path); the two others are parsed by io.env_int and devices.
    assert names == {"FLOPWATCH_MAX_INPUT_BYTES", "FLOPWATCH_PEAK_FLOPS", "FLOPWATCH_SHARED"}, names


def test_redteam_refuses_to_claim_results_on_altered_published_data(
    tmp_path: Path, v2_records_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    src_dir = v2_records_path.parent
    alt = tmp_path / "data" / "jetson_flop_estimator"
    alt.mkdir(parents=True)
    shutil.copy(src_dir / "SOURCE.md", alt / "SOURCE.md")
    d = json.loads(v2_records_path.read_text())
    for r in d["records"]:
        r["ground_truth_tf"] *= 10  # the ground truth changed ×10
    (alt / v2_records_path.name).write_text(json.dumps(d))
    assert main(["redteam", "--quick", "--data", str(tmp_path / "data"), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert any("not the published data" in s for s in out["skipped"]), out["skipped"]
    assert out["attacks"] and not any("real" in a["device"] for a in out["attacks"])
    assert not any("real" in h.get("device", "") for h in out["honest"])
    # the unaltered copy (with or without its SOURCE.md) is accepted
    from flopwatch.published import published_data_problem

    assert published_data_problem(v2_records_path) is None
    (alt / "SOURCE.md").unlink()
    assert "not the published data" in (published_data_problem(alt / v2_records_path.name) or "")


def test_the_bundled_mascots_copies_are_the_published_data(tmp_path: Path) -> None:
    from flopwatch.published import published_data_problem

    bundled = sorted((Path(__file__).resolve().parents[2] / "src/flopwatch/powermodel/data").glob("*.csv"))
    assert len(bundled) == 6
    for p in bundled:
        assert published_data_problem(p) is None, p
    altered = tmp_path / bundled[0].name
    altered.write_bytes(bundled[0].read_bytes().replace(b"\n", b"\r\n", 1))
    assert "not the published data" in (published_data_problem(altered) or "")
