"""Loading and validating the MASCOTS aggregates (vendored and user CSVs)."""

from __future__ import annotations

import hashlib
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from flopwatch.errors import InputError
from flopwatch.powermodel import datasets, mfu
from flopwatch.powermodel.datasets import load_aggregates, load_mascots, read_aggregate_csv

EXPECTED_ROWS = {"A100": 504, "L40": 504, "L4": 392, "Quadro RTX 5000": 336, "RTX 4070 Ti": 504, "MI210": 496}


@pytest.fixture(scope="module")
def mascots() -> pd.DataFrame:
    return load_mascots()


def test_vendored_files_are_the_published_ones(mascots_dir: Path) -> None:
    data = datasets.bundled_data_dir()
    assert (data / "LICENSE").read_text().startswith("MIT License")
    assert "Niklas Enskat" in (data / "LICENSE").read_text()
    for gpu in mfu.MASCOTS_GPUS:
        ours = datasets.bundled_path(gpu).read_bytes()
        theirs = (mascots_dir / datasets.bundled_path(gpu).name).read_bytes()
        assert hashlib.sha256(ours).digest() == hashlib.sha256(theirs).digest()


def test_canonical_columns_and_counts(mascots: pd.DataFrame) -> None:
    for c in datasets.CANONICAL_COLUMNS:
        assert c in mascots.columns
    assert mascots.groupby("gpu").size().to_dict() == EXPECTED_ROWS
    assert list(dict.fromkeys(mascots["gpu"])) == list(mfu.MASCOTS_GPUS)
    assert set(mascots["dtype"]) == {"fp32", "fp16", "bf16"}
    assert not (mascots["model"] == "baseline").any()
    assert mascots["mfu_pct"].notna().all()
    assert mascots["batch_size"].dtype == np.int64
    # The Quadro has no bf16 runs; the L4 has fp32 only for DialoGPT-large (SOURCE.md).
    assert "bf16" not in set(mascots.loc[mascots.gpu == "Quadro RTX 5000", "dtype"])
    assert set(mascots.loc[(mascots.gpu == "L4") & (mascots.dtype == "fp32"), "model"]) == {
        "microsoft/DialoGPT-large"
    }


def test_baseline_nan_mfu_and_l4_quirks_are_reported() -> None:
    loaded = load_aggregates()
    assert loaded.idle_power_w["A100"] == pytest.approx(48.3592)
    assert loaded.idle_power_w["MI210"] == pytest.approx(42.0)
    assert len(loaded.idle_power_w) == 6
    notes = "\n".join(loaded.notes)
    assert notes.count("'baseline' row") == 6
    assert "8 row(s) with empty MFU dropped (Qwen/Qwen2.5-3B fp32 b128)" in notes
    assert "mfu_aggregated_per_config_L4.csv: no io_latency_enabled" in notes
    assert loaded.dropped is not None and len(loaded.dropped) == 8
    kept = load_mascots("MI210", keep_nan_mfu=True)
    assert len(kept) == 504 and kept["mfu_pct"].isna().sum() == 8


def test_stored_mfu_equals_study_definition_with_implied_peaks(mascots: pd.DataFrame) -> None:
    peaks = np.array([mfu.implied_peak_flops(g, d) for g, d in zip(mascots.gpu, mascots.dtype, strict=True)])
    ours = mfu.mfu_pct(mascots["tokens_per_s"], mascots["flops_per_token"], peaks)
    np.testing.assert_allclose(ours, mascots["mfu_pct"], rtol=1e-6)


def test_peak_tables_are_kept_apart() -> None:
    assert mfu.implied_peak_flops("MI210", "fp32") == 22.6e12
    assert mfu.paper_peak_flops("MI210", "fp32") == 181e12
    assert mfu.datasheet_peak_flops("A100", "fp32") == 19.5e12  # FP32 vector, not TF32
    assert mfu.peak_flops("RTX 4070 Ti", "fp16", "implied") == 321e12
    assert mfu.canonical_gpu("GPU06") == "Quadro RTX 5000"
    with pytest.raises(InputError):
        mfu.peak_flops("A100", "fp16", "nonsense")
    with pytest.raises(InputError):
        mfu.implied_peak_flops("Quadro RTX 5000", "bf16")


def _write(tmp_path: Path, text: str, name: str = "runs.csv") -> Path:
    p = tmp_path / name
    p.write_text(text)
    return p


def _study_rows(n: int = 3) -> pd.DataFrame:
    src = pd.read_csv(datasets.bundled_path("A100"), dtype=str, keep_default_na=False)
    return src.head(n)


def test_missing_column_names_file_and_column(tmp_path: Path) -> None:
    p = tmp_path / "bad.csv"
    _study_rows().drop(columns=["power_draw_watts_mean"]).to_csv(p, index=False)
    with pytest.raises(InputError) as e:
        read_aggregate_csv(p)
    assert e.value.file == str(p) and e.value.field == "power_draw_watts_mean"


def test_wrong_type_names_line_and_column(tmp_path: Path) -> None:
    rows = _study_rows()
    rows.loc[1, "mfu_percentage_calflops_mean"] = "fast"
    p = tmp_path / "bad.csv"
    rows.to_csv(p, index=False)
    with pytest.raises(InputError) as e:
        read_aggregate_csv(p, gpu="A100")
    assert e.value.record == "line 3" and e.value.field == "mfu_percentage_calflops_mean"
    assert "'fast'" in str(e.value)


@pytest.mark.parametrize(
    ("column", "value", "needle"),
    [
        ("dtype", "int8", "unknown dtype"),
        ("batch_size", "0", "positive integer"),
        ("batch_size", "2.5", "integer"),
        ("mfu_percentage_calflops_mean", "inf", "infinite"),
        ("power_draw_watts_mean", "-inf", "infinite"),
        ("tokens_per_second_mean", "inf", "infinite"),
        ("mfu_percentage_calflops_mean", "250", "check the peak"),
        ("mfu_percentage_calflops_mean", "-1", r"\[0, 100\]"),
        ("gpu_utilization_mean", "101", r"\[0, 100\]"),
    ],
)
def test_bad_values(tmp_path: Path, column: str, value: str, needle: str) -> None:
    rows = _study_rows()
    rows.loc[0, column] = value
    p = tmp_path / "bad.csv"
    rows.to_csv(p, index=False)
    with pytest.raises(InputError, match=needle) as e:
        read_aggregate_csv(p, gpu="A100")
    assert e.value.field == column and e.value.record == "line 2"


def test_foreign_and_empty_files(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="missing required column"):
        read_aggregate_csv(_write(tmp_path, "a,b\n1,2\n"))
    with pytest.raises(InputError, match="not a readable CSV"):
        read_aggregate_csv(_write(tmp_path, ""))
    with pytest.raises(InputError, match="no such file"):
        read_aggregate_csv(tmp_path / "nope.csv")


def test_user_csv_gpu_name_from_option_or_stem(tmp_path: Path) -> None:
    p = tmp_path / "my_gpu.csv"
    _study_rows().to_csv(p, index=False)
    assert set(read_aggregate_csv(p).df["gpu"]) == {"my_gpu"}
    assert set(read_aggregate_csv(p, gpu="a100").df["gpu"]) == {"A100"}
