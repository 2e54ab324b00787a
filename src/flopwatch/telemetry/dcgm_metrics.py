"""The one table of dcgm-exporter metrics flopwatch reads (:data:`TABLE`, a row per metric like dcgm-exporter's
``etc/dcp-metrics-included.csv``), and how their labels map to GPUs and jobs (:data:`GROUP_LABELS`; docs/fleet.md).
The reader's queries, the simulated exporter's families and ``flopwatch fleet metrics`` derive from the table:
adding a metric is a row here and its value in the simulator.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType


@dataclass(frozen=True)
class Metric:
    """One dcgm-exporter field as flopwatch uses it."""

    key: str  # flopwatch's short name (a GpuJobs column prefix)
    name: str  # the DCGM field name dcgm-exporter exports
    kind: str  # "counter" | "gauge"
    window: tuple[str, ...]  # PromQL range functions evaluated per window ("" : not read)
    om_type: str  # OpenMetrics type written by the simulator (a counter without ``_total`` is "unknown")
    help: str
    unit: str  # unit as exported
    scale: float  # × scale → SI unit or 0–1 ratio (converted once, in the reader)
    role: str  # what it contributes to the estimate
    profiling: bool = False  # a DCGM profiling (DCP) field: can be paused or stuck independently of the rest
    fallback_of: str = ""  # read only where the metric with this key is absent


#: Each raw sample is read at most twice: two range functions per metric at most (the counter: last and min;
#: power: sum and count; clock: mean and max). Without the power gauge the counter's samples are counted too
#: (a third read of the counter: ``flopwatch.fleet.reader.FleetReader.queries``).
TABLE: tuple[Metric, ...] = (
    Metric("energy", "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", "counter", ("last", "min"), "unknown",
           "Total energy consumption since boot (in mJ).", "mJ since boot", 1e-3,
           "gross energy, exact between samples; a reset falls back to power"),
    Metric("power", "DCGM_FI_DEV_POWER_USAGE", "gauge", ("sum", "count"), "gauge",
           "Power draw (in W).", "W", 1.0,
           "energy where the counter is missing or reset; sample counts; cross-check of the counter"),
    Metric("gpu_util", "DCGM_FI_DEV_GPU_UTIL", "gauge", ("avg",), "gauge",
           "GPU utilization (in %).", "%", 0.01, "busy share where GR_ENGINE_ACTIVE is missing",
           fallback_of="gr"),
    Metric("gr", "DCGM_FI_PROF_GR_ENGINE_ACTIVE", "gauge", ("avg",), "gauge",
           "Ratio of time the graphics engine is active.", "ratio", 1.0,
           "busy share (time-averaged by DCGM); cohorts", profiling=True),
    Metric("sm", "DCGM_FI_PROF_SM_ACTIVE", "gauge", (), "gauge",
           "The ratio of cycles an SM has at least 1 warp assigned.", "ratio", 1.0,
           "not read: SM occupancy in time bounds no FLOPs", profiling=True),
    Metric("tensor", "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE", "gauge", ("avg",), "gauge",
           "Ratio of cycles the tensor (HMMA) pipe is active.", "ratio", 1.0,
           "pipe estimate: tensor-core issue cycles (any precision)", profiling=True),
    Metric("hmma", "DCGM_FI_PROF_PIPE_TENSOR_HMMA_ACTIVE", "gauge", ("avg",), "gauge",
           "Ratio of cycles the tensor HMMA pipe is active.", "ratio", 1.0,
           "pipe estimate (Hopper): FP16/BF16/TF32 tensor cycles (with TENSOR: the larger)", profiling=True),
    Metric("fp32", "DCGM_FI_PROF_PIPE_FP32_ACTIVE", "gauge", ("avg",), "gauge",
           "Ratio of cycles the fp32 pipes are active.", "ratio", 1.0,
           "pipe estimate: FP32 CUDA-core cycles × the FP32 peak", profiling=True),
    Metric("fp16", "DCGM_FI_PROF_PIPE_FP16_ACTIVE", "gauge", ("avg",), "gauge",
           "Ratio of cycles the fp16 pipes are active.", "ratio", 1.0,
           "reported: FP16 vector cycles (no vector-FP16 peak)", profiling=True),
    Metric("fp64", "DCGM_FI_PROF_PIPE_FP64_ACTIVE", "gauge", ("avg",), "gauge",
           "Ratio of cycles the fp64 pipes are active.", "ratio", 1.0,
           "reported: FP64 cycles (no FP64 peak)", profiling=True),
    Metric("dram", "DCGM_FI_PROF_DRAM_ACTIVE", "gauge", ("avg",), "gauge",
           "Ratio of cycles the device memory interface is active.", "ratio", 1.0,
           "TB moved = DRAM_ACTIVE × peak bandwidth × Δt (profile models with a TB term)", profiling=True),
    Metric("clock", "DCGM_FI_DEV_SM_CLOCK", "gauge", ("avg", "max"), "gauge",
           "SM clock frequency (in MHz).", "MHz", 1.0,
           "scales each pipe's peak to the clock; the highest clock bounds the device"),
    Metric("plimit", "DCGM_FI_DEV_POWER_MGMT_LIMIT", "gauge", ("max",), "gauge",
           "Power management limit (in W).", "W", 1.0, "power cap in force (a cap moves FLOP per joule)"),
    Metric("temp", "DCGM_FI_DEV_GPU_TEMP", "gauge", (), "gauge",
           "GPU temperature (in C).", "C", 1.0, "not read (exported by the simulator for completeness)"),
)  # fmt: skip

BY_KEY: Mapping[str, Metric] = MappingProxyType({m.key: m for m in TABLE})
METRICS: Mapping[str, Metric] = MappingProxyType({m.name: m for m in TABLE})

ENERGY = BY_KEY["energy"].name
POWER = BY_KEY["power"].name
GPU_UTIL = BY_KEY["gpu_util"].name
GR_ACTIVE = BY_KEY["gr"].name
SM_ACTIVE = BY_KEY["sm"].name
TENSOR = BY_KEY["tensor"].name
HMMA = BY_KEY["hmma"].name
FP16 = BY_KEY["fp16"].name
FP32 = BY_KEY["fp32"].name
FP64 = BY_KEY["fp64"].name
DRAM = BY_KEY["dram"].name
SM_CLOCK = BY_KEY["clock"].name
POWER_LIMIT = BY_KEY["plimit"].name
GPU_TEMP = BY_KEY["temp"].name

#: Job-level keys of ``--by`` and the labels that carry them, most specific first. ``job`` is the HPC job label:
#: Prometheus's own ``job`` label names the scrape job (``dcgm-exporter``), never a training job.
GROUP_LABELS: Mapping[str, tuple[str, ...]] = MappingProxyType(
    {
        "pod": ("exported_pod", "pod"),
        "namespace": ("exported_namespace", "namespace"),
        "job": ("hpc_job",),
        "node": ("Hostname", "exported_instance", "instance"),
        "gpu": ("UUID",),
    }
)
HOST_LABELS: tuple[str, ...] = ("Hostname", "instance")
MIG_LABEL = "GPU_I_ID"


#: Labels flopwatch never reads, dropped on the server (a fleet answer is mostly label maps; docs/fleet.md "How it
#: reads"); series that then collide are merged by :data:`MERGE`: sample counts add (a GPU reported twice shows),
#: and activities and clocks take the highest (an average would let an idle copy of a series halve them: round 6).
UNREAD_LABELS = ("DCGM_FI_DRIVER_VERSION", "device", "container", "job", "namespace", "pci_bus_id")
MERGE: Mapping[str, str] = MappingProxyType(
    {"sum": "sum", "count": "sum", "avg": "max", "max": "max", "min": "min", "last": "max"}
)


def window_query(name: str, fn: str, matchers: str, window: str, drop: Sequence[str] = UNREAD_LABELS) -> str:
    """``fn_over_time`` of metric ``name`` per window, without the labels ``drop``."""
    sel = f"{name}{{{matchers}}}" if matchers else name
    return f"{MERGE[fn]} without ({', '.join(drop)}) ({fn}_over_time({sel}[{window}]))"


def window_queries(
    present: frozenset[str],
    matchers: str,
    window: str,
    skip: frozenset[str] = frozenset(),
    drop: Sequence[str] = UNREAD_LABELS,
    both: bool = False,
) -> dict[tuple[str, str], str]:
    """(metric key, range function) → PromQL, for the metrics ``present`` (by DCGM name) and not in ``skip``
    (keys); a fallback only where its metric is absent or ``both`` (TENSOR and HMMA both: the reader takes the larger)."""
    out: dict[tuple[str, str], str] = {}
    for m in TABLE:
        if m.name not in present or m.key in skip:
            continue
        if m.fallback_of and BY_KEY[m.fallback_of].name in present and not both:
            continue
        for fn in m.window:
            out[(m.key, fn)] = window_query(m.name, fn, matchers, window, drop)
    return out


def group_key(labels: Mapping[str, str], candidates: Sequence[str]) -> str | None:
    """The first non-empty candidate label (dcgm-exporter sets ``pod=""`` on unallocated GPUs)."""
    return next((v for c in candidates if (v := labels.get(c))), None)


def gpu_id(labels: Mapping[str, str]) -> str:
    """Stable id of the physical GPU behind a series (UUID, else host and index)."""
    u = labels.get("UUID")
    if u:
        return u
    host = next((labels[h] for h in HOST_LABELS if labels.get(h)), "?")
    return f"{host}/gpu{labels.get('gpu', '?')}"
