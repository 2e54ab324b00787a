"""Peak FLOP/s that MFU is measured against: dense, FP32 vector vs TF32, and no borrowed peaks."""

from __future__ import annotations

import pytest

from flopwatch.devices import get_device
from flopwatch.errors import InputError


def test_rtx_4070_ti_peaks_are_the_dense_fp32_accumulate_ones() -> None:
    # Ada whitepaper (RTX 4080 12GB = 4070 Ti): FP16/BF16 with FP32 accumulate 80.2 dense, 160.4 sparse.
    spec = get_device("NVIDIA GeForce RTX 4070 Ti")
    assert spec.peak("fp16") == spec.peak("bf16") == 80.2e12
    assert spec.peak("fp32") == spec.peak("tf32") == 40.1e12


@pytest.mark.parametrize(
    ("name", "key"),
    [
        ("NVIDIA A100-SXM4-80GB", "a100"),
        ("NVIDIA A100-SXM4-40GB", "a100-sxm4-40gb"),  # same peaks, 1555 GB/s
        ("NVIDIA A100-PCIE-40GB", "a100-pcie-40gb"),
        ("NVIDIA A100 80GB PCIe", "a100-pcie-80gb"),
        ("Orin", "orin-nano"),  # torch.cuda.get_device_name() on a Jetson Orin
        ("NVIDIA H100 80GB HBM3", "h100"),
        ("NVIDIA H200", "h200"),
        ("NVIDIA GeForce RTX 4070 Ti", "rtx-4070-ti"),
        ("Quadro RTX 5000", "quadro-rtx-5000"),
        ("NVIDIA L40", "l40"),
        ("AMD Instinct MI210", "mi210"),
    ],
)
def test_nvml_names_map_to_their_spec(name: str, key: str) -> None:
    assert get_device(name).key == key


@pytest.mark.parametrize(
    "name",
    [
        "NVIDIA GeForce RTX 4090",  # used to match rtx-4070-ti on the "rtx" token
        "NVIDIA GeForce RTX 4070 Ti SUPER",
        "Quadro RTX 8000",
        "NVIDIA H100 PCIe",  # 756 BF16 dense, not the SXM's 989
        "NVIDIA L40S",
    ],
)
def test_other_gpus_do_not_borrow_a_peak(name: str) -> None:
    with pytest.raises(InputError, match="unknown device"):
        get_device(name)


def test_fp32_vector_and_tf32_peaks_are_kept_apart() -> None:
    a100 = get_device("a100")
    assert a100.peak("fp32") == 19.5e12 and a100.peak("tf32") == 156e12  # dense; TF32 sparse is 312
    h200 = get_device("h200")
    assert h200.peak("bf16") == pytest.approx(989.4e12)  # dense = half the datasheet's sparse 1979


@pytest.mark.parametrize(
    ("name", "bw_gb_s", "tdp_w"),
    [
        ("NVIDIA A100-SXM4-80GB", 2039, 400),  # A100 datasheet
        ("NVIDIA A100-SXM4-40GB", 1555, 400),
        ("NVIDIA A100-PCIE-40GB", 1555, 250),  # PB-10137-001
        ("NVIDIA A100 80GB PCIe", 1935, 300),  # PB-10577-001
    ],
)
def test_a100_variants_have_their_own_bandwidth_and_power(name: str, bw_gb_s: float, tdp_w: float) -> None:
    spec = get_device(name)
    assert spec.mem_bw_bytes_per_s == pytest.approx(bw_gb_s * 1e9)
    assert spec.tdp_w == tdp_w
    assert spec.peak("bf16") == 312e12 and spec.peak("fp32") == 19.5e12


def test_orin_nano_tensor_peaks_follow_from_the_int8_tops() -> None:
    # 20 dense INT8 TOPS at 625 MHz on 8 SMs ≈ 4096 INT8 ops/clk/SM; FP16 half, TF32 a quarter, at 1020 MHz.
    int8_per_clk_sm = 4096
    assert int8_per_clk_sm * 8 * 625e6 == pytest.approx(20e12, rel=0.03)
    orin = get_device("Orin")
    assert orin.peak("fp16") == orin.peak("bf16") == pytest.approx(int8_per_clk_sm / 2 * 8 * 1.02e9, rel=0.01)
    assert orin.peak("tf32") == pytest.approx(int8_per_clk_sm / 4 * 8 * 1.02e9, rel=0.01)
    assert orin.peak("fp32") == pytest.approx(1024 * 2 * 1.02e9, rel=1e-3)


def test_peaks_can_be_overridden_by_argument_and_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    assert get_device("orin", peak_overrides={"fp16": 17e12}).peak("fp16") == 17e12
    monkeypatch.setenv("FLOPWATCH_PEAK_FLOPS", "orin-nano:fp16=15e12,tf32=7.5e12; a100:fp32=20e12")
    orin = get_device("Orin")
    assert orin.peak("fp16") == 15e12 and orin.peak("tf32") == 7.5e12 and orin.peak("bf16") == 16.7e12
    assert "FLOPWATCH_PEAK_FLOPS" in orin.sources[-1]
    assert get_device("a100").mfu_peak("fp32") == 20e12
    assert get_device("h100").sources == get_device("h100", peak_overrides={}).sources  # untouched
    monkeypatch.setenv("FLOPWATCH_PEAK_FLOPS", "orin-nano:fp16=fast")
    with pytest.raises(InputError, match="FLOPWATCH_PEAK_FLOPS"):
        get_device("Orin")


def test_mi210_fp32_mfu_is_against_the_matrix_peak() -> None:
    # MI210 datasheet: 22.6 TFLOP/s FP32 vector, 45.3 FP32 matrix; fp32 GEMMs run on the matrix cores.
    mi = get_device("AMD Instinct MI210")
    assert mi.peak("fp32") == 22.6e12 and mi.mfu_peak("fp32") == 45.3e12
    assert get_device("a100").mfu_peak("fp32") == 19.5e12  # NVIDIA: the vector peak (TF32 off)
    assert "matrix" in mi.mfu_peak_label("fp32")


def test_mascots_mi210_fp32_runs_stay_below_100_pct_mfu_against_the_matrix_peak() -> None:
    from flopwatch.powermodel.datasets import STUDY_SEQUENCE_LENGTH, load_mascots
    from flopwatch.powermodel.mfu import datasheet_peak_flops, implied_peak_flops

    df = load_mascots("MI210", keep_nan_mfu=True)
    f = df[df["dtype"] == "fp32"]
    # MFU recomputed from tokens/s (MASCOTS Sec. III): also for the 8 Qwen2.5-3B rows the study blanked
    flops_per_s = f["tokens_per_s"] * f["flops_per_step"] / (f["batch_size"] * STUDY_SEQUENCE_LENGTH)
    vector = 100 * flops_per_s / implied_peak_flops("MI210", "fp32")
    matrix = 100 * flops_per_s / datasheet_peak_flops("MI210", "fp32")
    assert vector.max() > 100.0  # impossible against the vector peak: the work ran on the matrix cores
    assert matrix.max() < 60.0
