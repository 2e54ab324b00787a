"""Accelerator specifications: peak FLOP/s per dtype, memory bandwidth, TDP and idle power.

Every number cites where it comes from. Peaks are **dense** (no 2:4 sparsity) unless stated.
FP32 is kept in two rows on purpose: ``fp32`` is the FP32 *vector* (CUDA-core) peak, ``tf32`` the
tensor-core TF32 peak. PyTorch's default fp32 matmul on Ampere+ uses full FP32 unless TF32 is enabled
(``torch.backends.cuda.matmul.allow_tf32``), so MFU against the wrong one is off by 8× on an A100.

Idle powers are measured values where a measurement exists (the MASCOTS baseline rows, the Jetson
study's idle baseline); otherwise a documented assumption marked ``idle_source="assumption"``.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

from flopwatch.errors import InputError

DTYPES = ("fp32", "tf32", "fp16", "bf16", "fp8")

#: The one dtype alias table of the project: every spelling flopwatch accepts (CLI options, torch dtype names,
#: the MASCOTS CSVs' ``float32``/``bfloat16``) → the canonical short name.
DTYPE_ALIASES: Mapping[str, str] = MappingProxyType(
    {
        "float32": "fp32",
        "fp32": "fp32",
        "f32": "fp32",
        "tf32": "tf32",
        "float16": "fp16",
        "fp16": "fp16",
        "half": "fp16",
        "f16": "fp16",
        "bfloat16": "bf16",
        "bf16": "bf16",
        "fp8": "fp8",
        "float8": "fp8",
    }
)

#: Canonical name → the spelling of the MASCOTS aggregate CSVs (``dtype`` column), for files we write.
STUDY_DTYPE_NAMES: Mapping[str, str] = MappingProxyType(
    {"fp32": "float32", "tf32": "tf32", "fp16": "float16", "bf16": "bfloat16", "fp8": "float8"}
)


def dtype_key(dtype: object) -> str:
    """The lookup key of a dtype spelling: lower-cased, ``torch.`` prefix dropped (``torch.bfloat16``)."""
    return str(dtype).strip().lower().replace("torch.", "")


def normalize_dtype(dtype: str) -> str:
    """Canonical dtype name (``float32``→``fp32``, ``bfloat16``→``bf16`` …)."""
    try:
        return DTYPE_ALIASES[dtype_key(dtype)]
    except KeyError:
        raise InputError(
            f"unknown dtype {dtype!r}; expected one of {', '.join(DTYPES)}", field="dtype"
        ) from None


@dataclass(frozen=True)
class DeviceSpec:
    """Static description of one accelerator model."""

    key: str  # short id used in CLI specs, e.g. "a100" (``sim:a100``)
    name: str  # marketing name
    vendor: str  # "nvidia" | "amd" | "cpu"
    peak_flops: Mapping[str, float]  # dense peak FLOP/s per canonical dtype
    mem_bw_bytes_per_s: float
    tdp_w: float
    idle_w: float
    idle_source: str  # where idle_w comes from
    sources: tuple[str, ...]
    min_power_cap_w: float | None = None
    max_sm_clock_mhz: float | None = None
    aliases: tuple[str, ...] = field(default=())
    notes: str = ""

    def peak(self, dtype: str) -> float:
        """Dense peak FLOP/s for ``dtype``; raises :class:`InputError` when the device lacks it."""
        d = normalize_dtype(dtype)
        try:
            return self.peak_flops[d]
        except KeyError:
            raise InputError(
                f"{self.name} has no {d} peak (supported: {', '.join(self.peak_flops)})", field="dtype"
            ) from None

    def supports(self, dtype: str) -> bool:
        return normalize_dtype(dtype) in self.peak_flops


T = 1e12
_A100_DS = "NVIDIA A100 Tensor Core GPU datasheet (2020, rev. 2021), SXM4 80GB column"
_H100_DS = "NVIDIA H100 Tensor Core GPU datasheet (2023), H100 SXM column; dense = half the sparse figure"
_H200_DS = "NVIDIA H200 Tensor Core GPU datasheet (2024), H200 SXM column; dense = half the sparse figure"
_L40_DS = "NVIDIA L40 GPU datasheet (2022)"
_L4_DS = "NVIDIA L4 Tensor Core GPU datasheet (2023)"
_MASCOTS = (
    "Enskat & Wiesner, MASCOTS 2026 (arXiv 2608.03880), baseline row of the aggregate CSVs (idle, 50 samples)"
)

_SPECS: tuple[DeviceSpec, ...] = (
    DeviceSpec(
        key="a100",
        name="NVIDIA A100-SXM4-80GB",
        vendor="nvidia",
        peak_flops=MappingProxyType({"fp32": 19.5 * T, "tf32": 156 * T, "fp16": 312 * T, "bf16": 312 * T}),
        mem_bw_bytes_per_s=2.039e12,
        tdp_w=400.0,
        idle_w=48.4,
        idle_source=_MASCOTS + " (A100: 48.36 W)",
        sources=(_A100_DS,),
        min_power_cap_w=100.0,
        max_sm_clock_mhz=1410.0,
        aliases=("a100-80gb", "a100-sxm4-80gb", "nvidia a100"),
    ),
    DeviceSpec(
        key="h100",
        name="NVIDIA H100 80GB HBM3",
        vendor="nvidia",
        peak_flops=MappingProxyType(
            {"fp32": 67 * T, "tf32": 494.7 * T, "fp16": 989.4 * T, "bf16": 989.4 * T, "fp8": 1978.9 * T}
        ),
        mem_bw_bytes_per_s=3.35e12,
        tdp_w=700.0,
        idle_w=70.0,
        idle_source="assumption: ~10% of TDP, typical of nvidia-smi idle readings on HGX H100 nodes",
        sources=(_H100_DS,),
        min_power_cap_w=200.0,
        max_sm_clock_mhz=1980.0,
        aliases=("h100-sxm", "h100 80gb hbm3", "nvidia h100"),
    ),
    DeviceSpec(
        key="h200",
        name="NVIDIA H200",
        vendor="nvidia",
        peak_flops=MappingProxyType(
            {"fp32": 67 * T, "tf32": 494.7 * T, "fp16": 989.4 * T, "bf16": 989.4 * T, "fp8": 1978.9 * T}
        ),
        mem_bw_bytes_per_s=4.8e12,
        tdp_w=700.0,
        idle_w=75.0,
        idle_source="assumption: ~10% of TDP, as for H100 (same GH100 die, larger HBM3e stack)",
        sources=(_H200_DS,),
        min_power_cap_w=200.0,
        max_sm_clock_mhz=1980.0,
        aliases=("h200-sxm", "nvidia h200", "h200 141gb"),
    ),
    DeviceSpec(
        key="l40",
        name="NVIDIA L40",
        vendor="nvidia",
        peak_flops=MappingProxyType(
            {"fp32": 90.5 * T, "tf32": 90.5 * T, "fp16": 181.05 * T, "bf16": 181.05 * T}
        ),
        mem_bw_bytes_per_s=864e9,
        tdp_w=300.0,
        idle_w=36.9,
        idle_source=_MASCOTS + " (L40: 36.88 W)",
        sources=(_L40_DS,),
        min_power_cap_w=100.0,
        max_sm_clock_mhz=2490.0,
        aliases=("nvidia l40",),
    ),
    DeviceSpec(
        key="l4",
        name="NVIDIA L4",
        vendor="nvidia",
        peak_flops=MappingProxyType(
            {"fp32": 30.3 * T, "tf32": 60 * T, "fp16": 121 * T, "bf16": 121 * T, "fp8": 242.5 * T}
        ),
        mem_bw_bytes_per_s=300e9,
        tdp_w=72.0,
        idle_w=16.6,
        idle_source=_MASCOTS
        + " (L4: 16.60 W; the L4 file lacks the io_latency columns, so its fields sit 3 to the left)",
        sources=(_L4_DS,),
        min_power_cap_w=40.0,
        max_sm_clock_mhz=2040.0,
        aliases=("nvidia l4",),
    ),
    DeviceSpec(
        key="quadro-rtx-5000",
        name="Quadro RTX 5000",
        vendor="nvidia",
        peak_flops=MappingProxyType({"fp32": 11.2 * T, "fp16": 89.2 * T}),
        mem_bw_bytes_per_s=448e9,
        tdp_w=230.0,
        idle_w=20.1,
        idle_source=_MASCOTS + " (Quadro RTX 5000: 20.06 W)",
        sources=("NVIDIA Quadro RTX 5000 datasheet (2018): 11.2 TFLOPS FP32, 89.2 TFLOPS tensor",),
        aliases=("rtx5000", "gpu06"),
    ),
    DeviceSpec(
        key="rtx-4070-ti",
        name="NVIDIA GeForce RTX 4070 Ti",
        vendor="nvidia",
        # GeForce Ada runs FP16/BF16 tensor maths with FP32 accumulation at half the FP16-accumulate rate.
        # PyTorch's fp16/bf16 matmuls accumulate in FP32 (cuBLAS CUBLAS_COMPUTE_32F), and BF16 has no FP16
        # accumulate at all, so the dense peak a training run can reach is 80.2 TFLOP/s (160.4 is the
        # FP16-accumulate dense rate, or the FP32-accumulate *sparse* one). TF32 dense: 40.1. The MASCOTS
        # paper's Table I quotes the same 80.2 for FP16/BF16 (flopwatch.powermodel.mfu).
        peak_flops=MappingProxyType({"fp32": 40.1 * T, "tf32": 40.1 * T, "fp16": 80.2 * T, "bf16": 80.2 * T}),
        mem_bw_bytes_per_s=504e9,
        tdp_w=285.0,
        idle_w=15.7,
        idle_source=_MASCOTS + " (RTX 4070 Ti: 15.68 W)",
        sources=(
            "NVIDIA Ada Lovelace GPU architecture whitepaper v2.1 (2023), appendix table, 'RTX 4080 12GB' column "
            "(the card later sold as RTX 4070 Ti: 7680 CUDA cores, 2610 MHz boost): FP32 40.1; tensor "
            "FP16/BF16 with FP32 accumulate 80.2 dense / 160.4 sparse; TF32 40.1 dense / 80.2 sparse",
        ),
        aliases=("4070", "4070ti", "rtx 4070 ti"),
    ),
    DeviceSpec(
        key="mi210",
        name="AMD Instinct MI210",
        vendor="amd",
        peak_flops=MappingProxyType({"fp32": 22.6 * T, "fp16": 181.0 * T, "bf16": 181.0 * T}),
        mem_bw_bytes_per_s=1.6384e12,
        tdp_w=300.0,
        idle_w=42.0,
        idle_source=_MASCOTS + " (MI210: 42.0 W)",
        sources=(
            "AMD Instinct MI210 datasheet (2022): 22.6 TFLOPS FP32 vector, 45.3 FP32 matrix, 181 FP16/BF16",
        ),
        aliases=("amd instinct mi210",),
    ),
    DeviceSpec(
        key="orin-nano",
        name="NVIDIA Jetson Orin Nano 8GB (25 W, Super)",
        vendor="nvidia",
        # 8 Ampere SMs (1024 CUDA cores) at 1020 MHz: FP32 = 1024 × 2 × 1.02e9; tensor FP16 dense =
        # 8 SMs × 1024 FLOP/clk (GA10x-class tensor cores) × 1.02e9.
        peak_flops=MappingProxyType(
            {"fp32": 2.089 * T, "tf32": 4.18 * T, "fp16": 8.36 * T, "bf16": 8.36 * T}
        ),
        mem_bw_bytes_per_s=102e9,
        tdp_w=25.0,
        idle_w=0.642,
        idle_source="Fowler 2026 (verification-games), v2 records: idle VDD_CPU_GPU_CV median 642.048 mW",
        sources=(
            "NVIDIA Jetson Orin Nano Series datasheet DS-11105 v1.3 and the JetPack 6.2 'Super' release notes "
            "(1024 CUDA cores, 32 tensor cores, GPU 1020 MHz, 102 GB/s)",
        ),
        max_sm_clock_mhz=1020.0,
        aliases=("jetson", "jetson-orin-nano", "orin nano", "orin-nano-super"),
        notes="The power rail the study integrates is VDD_CPU_GPU_CV, not the whole module; TDP is the module mode.",
    ),
    DeviceSpec(
        key="cpu",
        name="Generic CPU",
        vendor="cpu",
        peak_flops=MappingProxyType({"fp32": 1.0 * T, "bf16": 1.0 * T}),
        mem_bw_bytes_per_s=50e9,
        tdp_w=125.0,
        idle_w=20.0,
        idle_source="assumption: placeholder for MFU on CPUs; CPU peaks vary by SKU and are not meaningful here",
        sources=("placeholder",),
        notes="MFU on a CPU is reported against this nominal 1 TFLOP/s and labelled as such.",
    ),
)

DEVICES: Mapping[str, DeviceSpec] = MappingProxyType({s.key: s for s in _SPECS})

# Name tokens of sibling SKUs whose peaks differ from the spec's (H100 PCIe: 51 TFLOP/s FP32, 756 BF16 dense;
# H100/H200 NVL: lower clocks and power; RTX 4070 Ti SUPER: AD103, 44.1 TFLOP/s FP32): no fuzzy match.
_OTHER_SKU_TOKENS: Mapping[str, tuple[str, ...]] = MappingProxyType(
    {"h100": ("pcie", "nvl"), "h200": ("nvl",), "rtx-4070-ti": ("super",)}
)


def get_device(name: str) -> DeviceSpec:
    """Look a device up by key, alias or (case-insensitive, substring) marketing name.

    ``get_device("NVIDIA A100-SXM4-80GB")`` and ``get_device("a100")`` both work, so NVML's
    ``nvmlDeviceGetName`` output can be passed straight in.
    """
    q = str(name).strip().lower()
    if q in DEVICES:
        return DEVICES[q]
    for s in _SPECS:
        if q == s.name.lower() or q in s.aliases:
            return s
    # NVML names like "NVIDIA H200" / "NVIDIA A100 80GB PCIe": every token of the key must appear in the
    # name ("rtx-4070-ti" needs rtx, 4070 and ti: an "RTX 4090" must not borrow its peaks), and a token
    # naming a different SKU with other peaks (H100 PCIe/NVL, 4070 Ti SUPER) rules the match out.
    tokens = set(re.split(r"[\s\-_/()]+", q))
    for s in _SPECS:
        if s.vendor == "cpu" or tokens & set(_OTHER_SKU_TOKENS.get(s.key, ())):
            continue
        if set(s.key.split("-")) <= tokens:
            return s
    raise InputError(f"unknown device {name!r}; known: {', '.join(DEVICES)}", field="device")
