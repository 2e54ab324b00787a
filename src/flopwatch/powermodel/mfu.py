"""MFU exactly as the MASCOTS study defines it, and the peak tables it can be normalised by.

MFU (Enskat & Wiesner, MASCOTS 2026, arXiv:2608.03880, Sec. III; after PaLM, Chowdhery et al. 2022):

    MFU = tokens_per_s × FLOPs_per_token / peak_FLOP/s

with FLOPs per token = ``calflops_total`` (training FLOPs of one fwd+bwd step, 3 × calflops' forward count)
divided by the tokens in the step (batch × 11: the padded prompt is always 11 tokens long).

Three peak tables are kept side by side, each named, because they disagree:

* :data:`IMPLIED_PEAK_TFLOPS` — the peaks the stored ``mfu_percentage_calflops_mean`` values actually imply
  (back-computed from the data, ``../shared/data/gpu_power_benchmark/SOURCE.md``). Use it to reproduce the paper.
* :data:`PAPER_TABLE_I_PEAK_TFLOPS` — the peak table printed as the paper's Table I, as quoted by a secondary
  source (see :mod:`flopwatch.powermodel.published`); it is the repository's later ``benchmark.py`` table and
  differs from the implied peaks for the Quadro, the 4070 Ti and the MI210.
* the vendor datasheet peaks in :mod:`flopwatch.devices` (:func:`datasheet_peak_flops`), which is what our own
  measurements (``flopwatch bench``) normalise by.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType

import numpy as np

from flopwatch.devices import get_device, normalize_dtype
from flopwatch.errors import InputError

TFLOPS = 1e12

#: Display names of the six GPUs, in the paper's order.
MASCOTS_GPUS: tuple[str, ...] = ("A100", "L40", "L4", "Quadro RTX 5000", "RTX 4070 Ti", "MI210")

#: Display name → the file-name tag used in the study's repository (``data.py``'s HW_CONFIGS).
GPU_FILE_TAGS: Mapping[str, str] = MappingProxyType(
    {
        "A100": "A100",
        "L40": "L40",
        "L4": "L4",
        "Quadro RTX 5000": "GPU06",
        "RTX 4070 Ti": "4070",
        "MI210": "MI210",
    }
)

#: Display name → key in :data:`flopwatch.devices.DEVICES`.
GPU_DEVICE_KEYS: Mapping[str, str] = MappingProxyType(
    {
        "A100": "a100",
        "L40": "l40",
        "L4": "l4",
        "Quadro RTX 5000": "quadro-rtx-5000",
        "RTX 4070 Ti": "rtx-4070-ti",
        "MI210": "mi210",
    }
)

_GPU_ALIASES: Mapping[str, str] = MappingProxyType(
    {
        **{g.lower(): g for g in MASCOTS_GPUS},
        **{t.lower(): g for g, t in GPU_FILE_TAGS.items()},
        **{k: g for g, k in GPU_DEVICE_KEYS.items()},
        "quadro": "Quadro RTX 5000",
        "rtx5000": "Quadro RTX 5000",
        "rtx 5000": "Quadro RTX 5000",
        "4070ti": "RTX 4070 Ti",
        "4070 ti": "RTX 4070 Ti",
        "rtx4070ti": "RTX 4070 Ti",
        "geforce rtx 4070 ti": "RTX 4070 Ti",
        "nvidia a100": "A100",
        "nvidia l40": "L40",
        "nvidia l4": "L4",
        "amd instinct mi210": "MI210",
    }
)

# Back-computed from the stored MFU (SOURCE.md, "Peak TFLOPS that the stored MFU values actually imply").
# A100 fp32 156 is the TF32 tensor peak, not the 19.5 TFLOPS FP32 vector peak; L4 fp32 30.3 is the vector peak.
IMPLIED_PEAK_TFLOPS: Mapping[str, Mapping[str, float]] = MappingProxyType(
    {
        "A100": MappingProxyType({"fp32": 156.0, "fp16": 312.0, "bf16": 312.0}),
        "L40": MappingProxyType({"fp32": 90.5, "fp16": 181.05, "bf16": 181.05}),
        "L4": MappingProxyType({"fp32": 30.3, "fp16": 121.0, "bf16": 121.0}),
        "Quadro RTX 5000": MappingProxyType({"fp32": 11.2, "fp16": 89.2}),
        "RTX 4070 Ti": MappingProxyType({"fp32": 40.1, "fp16": 321.0, "bf16": 321.0}),
        "MI210": MappingProxyType({"fp32": 22.6, "fp16": 181.0, "bf16": 181.0}),
    }
)

# The paper's Table I as quoted by the secondary source in flopwatch.powermodel.published (not the PDF itself).
PAPER_TABLE_I_PEAK_TFLOPS: Mapping[str, Mapping[str, float]] = MappingProxyType(
    {
        "A100": MappingProxyType({"fp32": 156.0, "fp16": 312.0, "bf16": 312.0}),
        "L40": MappingProxyType({"fp32": 90.5, "fp16": 181.05, "bf16": 181.05}),
        "L4": MappingProxyType({"fp32": 30.3, "fp16": 121.0, "bf16": 121.0}),
        "Quadro RTX 5000": MappingProxyType({"fp32": 89.2, "fp16": 89.2}),
        "RTX 4070 Ti": MappingProxyType({"fp32": 40.1, "fp16": 80.2, "bf16": 80.2}),
        "MI210": MappingProxyType({"fp32": 181.0, "fp16": 181.0, "bf16": 181.0}),
    }
)

PEAK_TABLES = ("implied", "paper", "datasheet")


def canonical_gpu(name: str) -> str:
    """The display name (``A100`` … ``MI210``) for a display name, file tag (``GPU06``) or device key."""
    key = str(name).strip().lower()
    try:
        return _GPU_ALIASES[key]
    except KeyError:
        raise InputError(
            f"unknown MASCOTS GPU {name!r}; expected one of {', '.join(MASCOTS_GPUS)}", field="gpu"
        ) from None


def implied_peak_flops(gpu: str, dtype: str) -> float:
    """Peak FLOP/s that the study's stored MFU values imply for (gpu, dtype)."""
    return _lookup(IMPLIED_PEAK_TFLOPS, "implied", gpu, dtype)


def paper_peak_flops(gpu: str, dtype: str) -> float:
    """Peak FLOP/s of the paper's Table I (as quoted; see the module docstring)."""
    return _lookup(PAPER_TABLE_I_PEAK_TFLOPS, "paper Table I", gpu, dtype)


def datasheet_peak_flops(gpu: str, dtype: str) -> float:
    """Dense vendor-datasheet peak FLOP/s that MFU is taken against (:meth:`flopwatch.devices.DeviceSpec.mfu_peak`:
    FP32 = vector peak, or the MI210's matrix peak where fp32 GEMMs run on matrix cores)."""
    g = canonical_gpu(gpu)
    return get_device(GPU_DEVICE_KEYS[g]).mfu_peak(dtype)


def peak_flops(gpu: str, dtype: str, table: str = "implied") -> float:
    """Peak FLOP/s from the named table: ``implied``, ``paper`` or ``datasheet``."""
    if table == "implied":
        return implied_peak_flops(gpu, dtype)
    if table == "paper":
        return paper_peak_flops(gpu, dtype)
    if table == "datasheet":
        return datasheet_peak_flops(gpu, dtype)
    raise InputError(
        f"unknown peak table {table!r}; expected one of {', '.join(PEAK_TABLES)}", field="peak_table"
    )


def _lookup(table: Mapping[str, Mapping[str, float]], what: str, gpu: str, dtype: str) -> float:
    g = canonical_gpu(gpu)
    d = normalize_dtype(dtype)
    try:
        return table[g][d] * TFLOPS
    except KeyError:
        raise InputError(f"no {what} peak for {g} {d}", field="dtype") from None


def mfu_pct(
    tokens_per_s: float | np.ndarray,
    flops_per_token: float | np.ndarray,
    peak_flops_per_s: float | np.ndarray,
) -> np.ndarray:
    """MFU in percent: 100 × tokens/s × FLOPs/token / peak FLOP/s (MASCOTS 2026, Sec. III)."""
    return (
        100.0
        * np.asarray(tokens_per_s, float)
        * np.asarray(flops_per_token, float)
        / np.asarray(peak_flops_per_s)
    )
