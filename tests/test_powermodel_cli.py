"""`flopwatch powermodel …` commands end to end (in-process)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from flopwatch.cli import main
from flopwatch.powermodel import datasets


def _run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


def test_reproduce_json_and_figures(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    code, out, _ = _run(
        capsys, "powermodel", "reproduce", "--json", "--n-boot", "200", "--figures", str(tmp_path)
    )
    assert code == 0
    d = json.loads(out)
    assert d["table2"]["A100"]["r2"] == pytest.approx(0.738, abs=5e-4)
    assert d["table3"]["MI210"]["noise_pct"] == pytest.approx(0.197, abs=5e-4)
    assert d["all_match"] == {"II": True, "III": True, "IV": True}
    for name in ("figure1_power_vs_mfu.png", "figure4_measured_vs_predicted.png"):
        png = tmp_path / name
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 20_000


def test_reproduce_human_output(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = _run(capsys, "powermodel", "reproduce", "--n-boot", "50")
    assert code == 0
    assert "Table II" in out and "Table III" in out and "Table IV" in out and "17.81 / 17.81" in out


def test_fit_then_predict(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    model = tmp_path / "l40.json"
    csv = str(datasets.bundled_path("L40"))
    code, _, _ = _run(capsys, "powermodel", "fit", csv, "--by", "cell", "-o", str(model))
    assert code == 0 and json.loads(model.read_text())["by"] == "cell"
    code, out, _ = _run(
        capsys, "powermodel", "predict", "--model", str(model), "--gpu", "L40", "--dtype", "fp16",
        "--batch", "128", "--mfu", "30", "--duration-s", "100", "--json",
    )  # fmt: skip
    assert code == 0
    d = json.loads(out)
    lo, hi = d["power_interval_w"]
    assert lo < d["power_w"] < hi
    assert d["energy_j"] == pytest.approx(d["power_w"] * 100)
    assert d["net_energy_j"] == pytest.approx((d["power_w"] - d["idle_power_w"]) * 100)


def test_predict_auto_falls_back_outside_the_cell(capsys: pytest.CaptureFixture[str]) -> None:
    # The L4 fp16 batch-8 cell spans MFU 2.7-4.0 %; at 10 % its slope would predict > 100 W on a 72 W card.
    code, out, _ = _run(capsys, "powermodel", "predict", "--gpu", "L4", "--dtype", "fp16", "--batch", "8",
                        "--mfu", "10", "--json")  # fmt: skip
    d = json.loads(out)
    assert code == 0 and d["model_by"] == "dtype" and "outside the cell's range" in d["fallback_reason"]
    assert d["power_w"] < 72
    code, out, _ = _run(capsys, "powermodel", "predict", "--gpu", "L4", "--dtype", "fp16", "--batch", "8",
                        "--mfu", "3", "--json")  # fmt: skip
    d = json.loads(out)
    assert d["model_by"] == "cell" and d["fallback_reason"] is None
    code, out, _ = _run(capsys, "powermodel", "predict", "--gpu", "A100", "--dtype", "bf16", "--batch", "3",
                        "--mfu", "3", "--json")  # fmt: skip
    assert json.loads(out)["fallback_reason"] == "no bf16 batch-3 cell in the data"


def test_predict_from_tokens_uses_the_implied_peak(capsys: pytest.CaptureFixture[str]) -> None:
    # 1e4 tokens/s × 3.12e9 FLOPs/token on an A100 in bf16 (implied peak 312 TFLOP/s) is exactly 10 % MFU.
    code, out, _ = _run(
        capsys, "powermodel", "predict", "--gpu", "A100", "--dtype", "bf16", "--batch", "64",
        "--tokens-per-s", "1e4", "--flops-per-token", "3.12e9", "--json",
    )  # fmt: skip
    assert code == 0 and json.loads(out)["mfu_pct"] == pytest.approx(10.0)


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (
            ["--gpu", "A100", "--dtype", "bf16", "--batch", "3", "--mfu", "10", "--by", "cell"],
            "no fitted cell",
        ),
        (["--gpu", "H100", "--dtype", "bf16", "--batch", "8", "--mfu", "10"], "no fitted model for GPU"),
        (["--gpu", "A100", "--dtype", "bf16", "--batch", "8"], "either --mfu"),
        (["--gpu", "A100", "--dtype", "bf16", "--batch", "8", "--mfu", "140"], "must be <= 100 %"),
        (
            [
                "--model",
                "/nonexistent.json",
                "--gpu",
                "A100",
                "--dtype",
                "bf16",
                "--batch",
                "8",
                "--mfu",
                "1",
            ],
            "no such file",
        ),
    ],
)
def test_predict_errors_are_one_line_exit_2(
    capsys: pytest.CaptureFixture[str], args: list[str], needle: str
) -> None:
    code, _, err = _run(capsys, "powermodel", "predict", *args)
    assert code == 2
    assert needle in err and err.count("\n") == 1 and err.startswith("flopwatch: error:")


def test_fit_bad_csv_is_one_line(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    bad = tmp_path / "bad.csv"
    bad.write_text("model_name,batch_size\nx,1\n")
    code, _, err = _run(capsys, "powermodel", "fit", str(bad), "-o", str(tmp_path / "m.json"))
    assert code == 2 and "bad.csv" in err and "missing required column" in err
    assert not (tmp_path / "m.json").exists()


def test_inverse_and_evaluate(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = _run(
        capsys, "powermodel", "inverse", "--gpu", "A100", "--power-w", "300", "--util-pct", "95",
        "--duration-s", "10", "--json",
    )  # fmt: skip
    assert code == 0
    d = json.loads(out)
    assert 0 < d["flop_rate"] < d["upper_flop_rate"] and d["dtype"] is None
    assert d["flops"] == pytest.approx(d["flop_rate"] * 10)
    code, _, err = _run(capsys, "powermodel", "inverse", "--gpu", "A100", "--power-w", "300")
    assert code == 2 and "util_pct" in err
    code, out, _ = _run(capsys, "powermodel", "evaluate", "--gpu", "L40", "--gpu", "mi210", "--json")
    assert code == 0
    d = json.loads(out)
    assert set(d["power"]["per_gpu"]) == {"L40", "MI210"}
    assert d["inverse"]["per_gpu"]["MI210"]["util_used"] is False
    assert d["inverse"]["per_gpu"]["L40"]["util_used"] is True
    code, out, _ = _run(capsys, "powermodel", "evaluate", "--gpu", "L4")
    assert code == 0 and "Inverse" in out
    code, _, err = _run(capsys, "powermodel", "evaluate", "--gpu", "H100")
    assert code == 2 and "no runs" in err


def test_fit_on_a_baseline_only_file_names_the_file(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    import pandas as pd

    from flopwatch.powermodel.datasets import bundled_path

    df = pd.read_csv(bundled_path("L4"))
    p = tmp_path / "idle_only.csv"
    df[df.model_name == "baseline"].to_csv(p, index=False)
    assert main(["powermodel", "fit", str(p), "-o", str(tmp_path / "m.json")]) == 2
    err = capsys.readouterr().err
    assert "idle_only.csv" in err and "baseline" in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "m.json").exists()


def test_fit_table_fits_a_narrow_terminal(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`powermodel fit` prints through the narrow-terminal layout of the other commands: at 80 columns each
    group is a block of "column  value" lines, no cell cut (issue 24)."""
    monkeypatch.setenv("COLUMNS", "80")
    csv = str(datasets.bundled_path("L40"))
    code, out, _ = _run(capsys, "powermodel", "fit", csv, "--by", "cell", "-o", str(tmp_path / "m.json"))
    assert code == 0
    assert max(len(x) for x in out.splitlines()) <= 80
    assert "  residual SD %" in out and "  intercept (W)" in out and "…" not in out
