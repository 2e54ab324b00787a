"""Round 4: power-model CSVs that pandas reads "successfully" into the wrong thing, and models fitted on data that
cannot support the interval or bound they print. Inputs are the bundled MASCOTS A100 aggregate (published data,
Enskat & Wiesner, MASCOTS 2026) edited the way a hand-kept spreadsheet could be.
"""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path

import pytest

from flopwatch.cli import main
from flopwatch.errors import InputError
from flopwatch.powermodel.datasets import bundled_data_dir, read_aggregate_csv

A100 = "mfu_aggregated_per_config_A100.csv"


@pytest.fixture(scope="module")
def rows() -> list[list[str]]:
    return list(csv.reader(io.StringIO((bundled_data_dir() / A100).read_text(encoding="utf-8"))))


def _write(path: Path, rows: list[list[str]]) -> Path:
    s = io.StringIO()
    csv.writer(s, lineterminator="\n").writerows(rows)
    path.write_text(s.getvalue(), encoding="utf-8")
    return path


def _err(capsys: pytest.CaptureFixture[str], args: list[str]) -> str:
    assert main(args) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err and err.count("flopwatch: error:") == 1, err
    return err


def test_a_row_longer_than_the_header_does_not_shift_the_columns(
    tmp_path: Path, rows: list[list[str]]
) -> None:
    """pandas made the first columns of such a file an index: every value moved one column to the left."""
    bad = _write(tmp_path / A100, [rows[0], [*rows[1], "1", "2"], *rows[2:]])
    with pytest.raises(InputError, match="more fields than the header"):
        read_aggregate_csv(bad)
    # a trailing comma on every line (empty extra field) is read as what it is
    ok = tmp_path / "trailing" / A100
    ok.parent.mkdir()
    ok.write_text("".join(",".join(r) + ",\n" for r in rows), encoding="utf-8")
    a, b = read_aggregate_csv(ok).df, read_aggregate_csv(bundled_data_dir() / A100).df
    assert a["power_w"].tolist() == b["power_w"].tolist()


def test_a_header_column_twice_is_refused(tmp_path: Path, rows: list[list[str]]) -> None:
    """pandas read the first `power_draw_watts_mean` and renamed the second `.1`: which one is the power?"""
    bad = _write(tmp_path / A100, [[*rows[0], "power_draw_watts_mean"], *[[*r, "1e9"] for r in rows[1:]]])
    with pytest.raises(InputError) as e:
        read_aggregate_csv(bad)
    assert e.value.field == "power_draw_watts_mean"


def _one_run(tmp_path: Path, rows: list[list[str]], copies: int) -> Path:
    run = next(r for r in rows[1:] if r[1] == "64")  # a compute-bound run (batch 64)
    return _write(tmp_path / A100, [rows[0], *[run] * copies])


@pytest.mark.parametrize("copies", [1, 40])
def test_predict_refuses_a_model_with_no_spread(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], rows: list[list[str]], copies: int
) -> None:
    """One run gave "power 198 W [nan, nan]"; 40 copies of it a zero-width "95 % interval" — exit 0 both."""
    data = _one_run(tmp_path, rows, copies)
    model = tmp_path / "m.json"
    assert main(["powermodel", "fit", str(data), "-o", str(model)]) == 0
    capsys.readouterr()
    args = ["powermodel", "predict", "--model", str(model), "--gpu", "A100", "--precision", "bf16"]
    err = _err(capsys, [*args, "--batch", "64", "--mfu", "40"])
    assert "m.json" in err and "cannot predict" in err


@pytest.mark.parametrize("copies", [1, 40])
def test_inverse_refuses_an_upper_bound_from_one_power_level(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], rows: list[list[str]], copies: int
) -> None:
    """The "95 % upper bound" equalled the estimate: a bound from one run (or copies of one row)."""
    data = _one_run(tmp_path, rows, copies)
    args = ["powermodel", "inverse", "--gpu", "A100", "--power-w", "300", "--data", str(data)]
    err = _err(capsys, [*args, "--util-pct", "90", "--duration-s", "100"])
    assert "no range of power" in err


def test_the_bundled_models_still_predict_and_bound(capsys: pytest.CaptureFixture[str]) -> None:
    args = ["powermodel", "predict", "--gpu", "A100", "--precision", "bf16", "--batch", "64", "--mfu", "30"]
    assert main([*args, "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    lo, hi = out["power_interval_w"]
    assert lo < out["power_w"] < hi
    args = ["powermodel", "inverse", "--gpu", "A100", "--power-w", "300", "--util-pct", "90", "--json"]
    assert main(args) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["upper_flop_rate"] > out["flop_rate"] > 0


def test_a_header_broken_by_a_bare_carriage_return_is_one_line(tmp_path, capsys):
    """Found by the full hypothesis run: a lone CR in the first line made the csv module raise (a traceback)."""
    from flopwatch.cli import main

    p = tmp_path / "bad.csv"
    p.write_bytes(b"\r0")
    assert main(["powermodel", "evaluate", str(p)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("flopwatch: error: ") and "bad.csv" in err[0]
