"""Accelerator specifications: peak FLOP/s per dtype, memory bandwidth, TDP and idle power.

Every number cites where it comes from. Peaks are **dense** (no 2:4 sparsity) unless stated.
FP32 is kept in two rows on purpose: ``fp32`` is the FP32 *vector* (CUDA-core) peak, ``tf32`` the
tensor-core TF32 peak. PyTorch's default fp32 matmul on Ampere+ uses full FP32 unless TF32 is enabled
(``torch.backends.cuda.matmul.allow_tf32``), so MFU against the wrong one is off by 8× on an A100.

MFU is taken against :meth:`DeviceSpec.mfu_peak`: the ``peak`` of the dtype, except that where the
framework's default fp32 GEMM runs on matrix units (AMD CDNA2: rocBLAS/hipBLASLt use the FP32 MFMA
instructions) fp32 MFU is against the fp32 *matrix* peak (``fp32_matrix_flops``). Measured runs, ``bench``
and the simulator's spec-based power model all use this one convention.

Idle powers are measured values where a measurement exists (the MASCOTS baseline rows, the Jetson
study's idle baseline); otherwise a documented assumption marked ``idle_source="assumption"``.

Overrides: a peak this table gets wrong for your part (a Jetson in another power mode, an Orin that is not
the Nano 8GB) can be replaced without editing code: ``FLOPWATCH_PEAK_FLOPS="orin-nano:fp16=16.7e12,tf32=8.36e12;
a100:fp32=19.5e12"`` (``KEY:DTYPE=FLOP/s,…`` per device, ``;`` between devices), or
``get_device(name, peak_overrides={"fp16": 16.7e12})``. An overridden spec says so in ``sources``.
"""

from __future__ import annotations

import math
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
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
    # FP32 peak of the matrix units where the framework's default fp32 GEMM runs on them (MI200 MFMA);
    # None where fp32 GEMMs run on the vector units (NVIDIA without TF32 enabled).
    fp32_matrix_flops: float | None = None

    @property
    def is_placeholder(self) -> bool:
        """A nominal entry, not a datasheet: the "Generic CPU" (RAPL) with its nominal 125 W TDP and 50 GB/s, which a
        real server package exceeds. Its figures must not be held against readings as physical limits."""
        return "placeholder" in self.sources

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

    def mfu_peak(self, dtype: str) -> float:
        """The peak MFU is taken against for ``dtype`` (the module docstring's convention): the dense
        ``peak``, or for fp32 the matrix-unit peak where default fp32 GEMMs run on matrix units."""
        d = normalize_dtype(dtype)
        if d == "fp32" and self.fp32_matrix_flops:
            return self.fp32_matrix_flops
        return self.peak(d)

    def mfu_peak_label(self, dtype: str) -> str:
        """Which peak :meth:`mfu_peak` used, in words (for reports and record fields)."""
        d = normalize_dtype(dtype)
        if d == "fp32" and self.fp32_matrix_flops:
            return "fp32 matrix-core peak (default fp32 GEMMs run on matrix units)"
        if d == "fp32":
            return "fp32 vector peak (PyTorch's default fp32 matmul, TF32 off)"
        if d == "tf32":
            return "tf32 tensor-core dense peak"
        return f"{d} tensor-core dense peak"


T = 1e12
_A100_DS = "NVIDIA A100 Tensor Core GPU datasheet (2020, rev. 2021), SXM4 80GB column"
_H100_DS = "NVIDIA H100 Tensor Core GPU datasheet (2023), H100 SXM column; dense = half the sparse figure"
_H200_DS = "NVIDIA H200 Tensor Core GPU datasheet (2024), H200 SXM column; dense = half the sparse figure"
_L40_DS = "NVIDIA L40 GPU datasheet (2022)"
_L4_DS = "NVIDIA L4 Tensor Core GPU datasheet (2023)"
# GA100 dense peaks, identical for every A100 variant (datasheet: FP32 19.5, TF32 156, FP16/BF16 312 TFLOPS).
_A100_PEAKS = MappingProxyType({"fp32": 19.5 * T, "tf32": 156 * T, "fp16": 312 * T, "bf16": 312 * T})
# GH100 dense peaks, the same on H100 SXM and H200 SXM (one die and clocks, only the HBM differs; both datasheets,
# SXM column, dense = half the sparse figure: FP32 67, TF32 494.7, FP16/BF16 989.4, FP8 1978.9 TFLOPS).
_GH100_PEAKS = MappingProxyType(
    {"fp32": 67 * T, "tf32": 494.7 * T, "fp16": 989.4 * T, "bf16": 989.4 * T, "fp8": 1978.9 * T}
)
_MASCOTS = (
    "Enskat & Wiesner, MASCOTS 2026 (arXiv 2608.03880), baseline row of the aggregate CSVs (idle, 50 samples)"
)

_SPECS: tuple[DeviceSpec, ...] = (
    # The A100 variants share GA100's peaks (108 SMs, 1410 MHz boost: identical compute in every column of the
    # datasheet) and differ in HBM bandwidth and board power. Each gets its own entry so an NVML name of a 40 GB or
    # PCIe card never borrows the SXM4-80GB's bandwidth or TDP.
    DeviceSpec(
        key="a100",
        name="NVIDIA A100-SXM4-80GB",
        vendor="nvidia",
        peak_flops=_A100_PEAKS,
        mem_bw_bytes_per_s=2.039e12,  # A100 datasheet, 80GB SXM: 2,039 GB/s
        tdp_w=400.0,  # A100 datasheet, SXM: 400 W max TDP
        idle_w=48.4,
        idle_source=_MASCOTS + " (A100: 48.36 W)",
        sources=(_A100_DS,),
        min_power_cap_w=100.0,
        max_sm_clock_mhz=1410.0,
        aliases=("a100-80gb", "a100-sxm4-80gb", "nvidia a100", "a100-sxm-80gb"),
    ),
    DeviceSpec(
        key="a100-sxm4-40gb",
        name="NVIDIA A100-SXM4-40GB",
        vendor="nvidia",
        peak_flops=_A100_PEAKS,
        mem_bw_bytes_per_s=1.555e12,  # A100 datasheet, 40GB SXM: 1,555 GB/s (HBM2, 2.43 Gb/s/pin × 5120 bit)
        tdp_w=400.0,  # A100 datasheet, SXM: 400 W max TDP
        idle_w=48.4,
        idle_source="assumption: the MASCOTS A100's measured 48.36 W (same board and GPU; 5 HBM2 stacks)",
        sources=(_A100_DS.replace("SXM4 80GB column", "A100 40GB SXM column"),),
        min_power_cap_w=100.0,
        max_sm_clock_mhz=1410.0,
        aliases=("a100-40gb-sxm", "a100-sxm-40gb"),
    ),
    DeviceSpec(
        key="a100-pcie-40gb",
        name="NVIDIA A100-PCIE-40GB",
        vendor="nvidia",
        peak_flops=_A100_PEAKS,
        mem_bw_bytes_per_s=1.555e12,  # PB-10137-001 Table 1: 1,555 GB/s
        tdp_w=250.0,  # PB-10137-001 Table 1: max power 250 W
        idle_w=35.0,
        idle_source="assumption: ~14 % of the 250 W TDP, the MASCOTS A100's idle/TDP ratio (48.36/400 W) "
        "scaled to the PCIe board",
        sources=(
            "NVIDIA A100 40GB PCIe GPU Accelerator product brief PB-10137-001 v03 (2020), Table 1; peaks from "
            + _A100_DS,
        ),
        min_power_cap_w=150.0,
        max_sm_clock_mhz=1410.0,
        aliases=("a100-pcie", "a100 pcie 40gb", "a100-pcie-40g"),
    ),
    DeviceSpec(
        key="a100-pcie-80gb",
        name="NVIDIA A100 80GB PCIe",
        vendor="nvidia",
        peak_flops=_A100_PEAKS,
        mem_bw_bytes_per_s=1.935e12,  # PB-10577-001 Table 1 and the A100 datasheet, 80GB PCIe: 1,935 GB/s
        tdp_w=300.0,  # PB-10577-001 Table 1: max power 300 W
        idle_w=42.0,
        idle_source="assumption: ~14 % of the 300 W TDP, the MASCOTS A100's idle/TDP ratio (48.36/400 W) "
        "scaled to the PCIe board",
        sources=(
            "NVIDIA A100 80GB PCIe GPU product brief PB-10577-001 v03 (2022), Table 1; peaks from "
            + _A100_DS,
        ),
        min_power_cap_w=150.0,
        max_sm_clock_mhz=1410.0,
        aliases=("a100 80gb pcie", "a100-80gb-pcie"),
    ),
    DeviceSpec(
        key="h100",
        name="NVIDIA H100 80GB HBM3",
        vendor="nvidia",
        peak_flops=_GH100_PEAKS,
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
        peak_flops=_GH100_PEAKS,
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
        # CDNA2 runs fp32 GEMMs on the matrix cores (rocBLAS/hipBLASLt pick the V_MFMA_F32 instructions for
        # SGEMM; AMD CDNA2 ISA guide §7, "Matrix Arithmetic Instructions"): MFU of a GEMM-bound fp32 run is
        # against the 45.3 TFLOP/s matrix peak. Against the 22.6 vector peak the MASCOTS MI210 fp32 runs
        # exceed 100 % MFU, which is impossible for the unit that really did the work.
        fp32_matrix_flops=45.3 * T,
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
        # NVIDIA publishes no Jetson FP16/TF32 TFLOPS, only INT8 TOPS; the tensor peaks are derived:
        # * the original Orin Nano 8GB's 40 sparse = 20 dense INT8 TOPS at 625 MHz on 8 SMs
        #   (DS-11105) is 20e12 / (625e6 × 8) = 4000 ≈ 4096 dense INT8 ops per clock per SM (4 tensor cores
        #   × 1024: the A100-class third-generation tensor core, GA100 whitepaper Table 3; 4096 × 8 × 625 MHz
        #   = 20.5 TOPS, printed rounded to 20);
        # * the Super mode's 67 sparse INT8 TOPS at 1020 MHz confirms it: 4096 × 8 × 1.02e9 × 2 = 66.8;
        # * Ampere tensor cores run FP16/BF16 at half and TF32 at a quarter of the INT8 rate (A100: 624 INT8
        #   TOPS, 312 FP16, 156 TF32), so at 1020 MHz: FP16/BF16 = 2048 × 8 × 1.02e9 = 16.7 TFLOP/s,
        #   TF32 = 1024 × 8 × 1.02e9 = 8.36 TFLOP/s.
        # FP32 (CUDA cores) = 1024 cores × 2 (FMA) × 1.02e9 = 2.089 TFLOP/s. Another module or power mode:
        # override (module docstring: FLOPWATCH_PEAK_FLOPS).
        peak_flops=MappingProxyType(
            {"fp32": 2.089 * T, "tf32": 8.36 * T, "fp16": 16.7 * T, "bf16": 16.7 * T}
        ),
        mem_bw_bytes_per_s=102e9,
        tdp_w=25.0,
        idle_w=0.642,
        idle_source="Fowler 2026 (verification-games), v2 records: idle VDD_CPU_GPU_CV median 642.048 mW",
        sources=(
            "NVIDIA Jetson Orin Nano Series datasheet DS-11105 v1.3 and the JetPack 6.2 'Super' release notes "
            "(1024 CUDA cores, 32 tensor cores, GPU 1020 MHz, 102 GB/s; 20 dense INT8 TOPS at 625 MHz, 67 sparse "
            "in Super mode)",
            "tensor FP16/BF16/TF32 peaks derived from the INT8 TOPS (comment above); NVIDIA publishes none",
        ),
        max_sm_clock_mhz=1020.0,
        # "Orin" is what torch.cuda.get_device_name() returns on a Jetson Orin (every module): it resolves to
        # the study's Orin Nano 8GB. An Orin NX/AGX has more SMs or other clocks: override its peaks.
        aliases=("jetson", "jetson-orin-nano", "orin nano", "orin-nano-super", "orin"),
        notes="The power rail the study integrates is VDD_CPU_GPU_CV, not the whole module; TDP is the module mode. "
        "'Orin' (the CUDA device name of every Jetson Orin) resolves here; other Orin modules need peak overrides.",
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
# The A100 SXM4-80GB entry excludes the 40 GB and PCIe boards, which have their own entries.
_OTHER_SKU_TOKENS: Mapping[str, tuple[str, ...]] = MappingProxyType(
    {
        "h100": ("pcie", "nvl"),
        "h200": ("nvl",),
        "rtx-4070-ti": ("super",),
        "a100": ("pcie", "40gb"),
        "a100-pcie-40gb": ("80gb",),
    }
)

_ASCII_FLOAT = re.compile(r"[+]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?")

#: Environment variable with peak overrides: ``KEY:DTYPE=FLOP/s[,DTYPE=FLOP/s…][;KEY:…]``.
PEAK_OVERRIDE_ENV = "FLOPWATCH_PEAK_FLOPS"


def parse_peak_overrides(text: str) -> dict[str, dict[str, float]]:
    """Parse :data:`PEAK_OVERRIDE_ENV`'s syntax into ``{device key: {dtype: FLOP/s}}``."""
    out: dict[str, dict[str, float]] = {}
    for part in filter(None, (p.strip() for p in text.split(";"))):
        key, sep, rest = part.partition(":")
        if not sep or not rest.strip():
            raise InputError(f"expected KEY:DTYPE=FLOP/s, got {part!r}", field=PEAK_OVERRIDE_ENV)
        spec = get_device(key.strip(), peak_overrides={})
        for item in filter(None, (x.strip() for x in rest.split(","))):
            d, eq, v = item.partition("=")
            # As strict as an option: ASCII decimal only (float() also takes "١٢", "1_0", "infinity").
            val = float(v) if _ASCII_FLOAT.fullmatch(v.strip()) else float("nan")
            if not eq or not (0 < val < float("inf")):
                raise InputError(
                    f"expected DTYPE=positive FLOP/s for {spec.key}, got {item!r}", field=PEAK_OVERRIDE_ENV
                )
            out.setdefault(spec.key, {})[normalize_dtype(d)] = val
    return out


def with_peaks(spec: DeviceSpec, peaks: Mapping[str, float], source: str) -> DeviceSpec:
    """``spec`` with some dense peaks replaced (and ``source`` added to its sources)."""
    if not peaks:
        return spec
    new = dict(spec.peak_flops)
    new.update({normalize_dtype(d): float(v) for d, v in peaks.items()})
    text = ", ".join(f"{normalize_dtype(d)} {float(v) / T:g} TFLOP/s" for d, v in peaks.items())
    return replace(
        spec, peak_flops=MappingProxyType(new), sources=(*spec.sources, f"overridden by {source}: {text}")
    )


def _lookup(q: str) -> DeviceSpec:
    if q in DEVICES:
        return DEVICES[q]
    for s in _SPECS:
        if q == s.name.lower() or q in s.aliases:
            return s
    # NVML names like "NVIDIA H200" / "NVIDIA A100 80GB PCIe": every token of the key must appear in the
    # name ("rtx-4070-ti" needs rtx, 4070 and ti: an "RTX 4090" must not borrow its peaks), and a token
    # naming a different SKU with other peaks (H100 PCIe/NVL, 4070 Ti SUPER) rules the match out. The most
    # specific key (most tokens) is tried first: "a100-pcie-80gb" before "a100".
    tokens = set(re.split(r"[\s\-_/()]+", q))
    for s in sorted(_SPECS, key=lambda s: -len(s.key.split("-"))):
        if s.vendor == "cpu" or tokens & set(_OTHER_SKU_TOKENS.get(s.key, ())):
            continue
        if set(s.key.split("-")) <= tokens:
            return s
    raise KeyError(q)


def peak_rate_bound(spec: DeviceSpec | None, duration_s: float, n_devices: int = 1) -> float:
    """F ≤ fastest dense datasheet peak × duration (× devices); inf when the device is unknown. (Here rather than in
    :mod:`flopwatch.estimate.bounds`, which re-exports it, so that fleet estimates need not import that package.)"""
    if spec is None or not (duration_s >= 0):
        return math.inf
    return max(spec.peak_flops.values()) * float(duration_s) * n_devices


def get_device(name: str, *, peak_overrides: Mapping[str, float] | None = None) -> DeviceSpec:
    """Look a device up by key, alias or (case-insensitive, token) marketing name.

    ``get_device("NVIDIA A100-SXM4-80GB")``, ``get_device("a100")`` and ``get_device("Orin")`` (a Jetson's
    CUDA device name) all work, so NVML's ``nvmlDeviceGetName`` output can be passed straight in.
    ``peak_overrides`` (dtype → FLOP/s) replaces peaks; without it, :data:`PEAK_OVERRIDE_ENV` is read.
    """
    try:
        spec = _lookup(str(name).strip().lower())
    except KeyError:
        raise InputError(f"unknown device {name!r}; known: {', '.join(DEVICES)}", field="device") from None
    if peak_overrides is not None:
        return with_peaks(spec, peak_overrides, "get_device(peak_overrides=…)")
    env = os.environ.get(PEAK_OVERRIDE_ENV, "").strip()
    if env:
        return with_peaks(spec, parse_peak_overrides(env).get(spec.key, {}), f"${PEAK_OVERRIDE_ENV}")
    return spec


def resolve(*names: object, cpu: bool = True) -> DeviceSpec | None:
    """The spec of the first of ``names`` that :func:`get_device` knows, else None: the one name → spec
    resolver (sensor names, spec keys, NVML names, profile device keys, fleet ``modelName`` labels).

    A :class:`DeviceSpec` is returned as is; empty names are skipped; a simulated name (``sim:a100#0``,
    ``sim:h100:1``, ``A100 (simulated)``) resolves to its device. ``cpu=False`` skips CPU entries (an
    accelerator bound must not come from the nominal "Generic CPU" row).
    """
    for n in names:
        if isinstance(n, DeviceSpec):
            spec = n
        elif not n:
            continue
        else:
            s = str(n).replace("(simulated)", "").strip()
            if s.startswith("sim:"):
                s = re.split(r"[#:]", s[4:], maxsplit=1)[0]
            try:
                key = _lookup(s.lower()).key
            except KeyError:
                continue  # a name no device answers to: try the next
            # the environment's peak override applies here; a malformed one is an error (one line), never
            # silently "device unknown" (which would drop the datasheet bounds)
            spec = get_device(key)
        if cpu or spec.vendor != "cpu":
            return spec
    return None
