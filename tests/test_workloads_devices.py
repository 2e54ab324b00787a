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
        ("NVIDIA A100-SXM4-40GB", "a100"),
        ("NVIDIA A100 80GB PCIe", "a100"),  # same peaks as SXM
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
