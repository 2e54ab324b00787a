"""dcgm-exporter metric names, what each contributes, and how its labels map to GPUs and jobs.

Names and label keys are dcgm-exporter's (NVIDIA/dcgm-exporter ``etc/dcp-metrics-included.csv`` and
``pkg/dcgmexporter`` transformations): every series carries ``gpu`` (index on the node), ``UUID``,
``device`` (``nvidia0``), ``modelName`` (the NVML name) and ``Hostname``; on Kubernetes the pod-resources
transformation adds ``pod``, ``namespace``, ``container`` for a GPU allocated to a pod, and with
``--hpc-job-mapping-dir`` the HPC transformation adds ``hpc_job``. When Prometheus scrapes the exporter
through Kubernetes service discovery without ``honor_labels``, the exporter's ``pod``/``namespace`` clash with
the target's own and are renamed ``exported_pod``/``exported_namespace`` (Prometheus docs,
``scrape_config.honor_labels``): the workload is then the ``exported_`` one, so it is preferred.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType


@dataclass(frozen=True)
class Metric:
    """One dcgm-exporter field as flopwatch uses it."""

    name: str
    unit: str  # unit as exported (converted once, in the reader)
    role: str  # what it contributes to the estimate
    kind: str = "gauge"  # "gauge" | "counter"


ENERGY = "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION"
POWER = "DCGM_FI_DEV_POWER_USAGE"
GPU_UTIL = "DCGM_FI_DEV_GPU_UTIL"
GR_ACTIVE = "DCGM_FI_PROF_GR_ENGINE_ACTIVE"
SM_ACTIVE = "DCGM_FI_PROF_SM_ACTIVE"
TENSOR = "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE"
HMMA = "DCGM_FI_PROF_PIPE_TENSOR_HMMA_ACTIVE"
IMMA = "DCGM_FI_PROF_PIPE_TENSOR_IMMA_ACTIVE"
DFMA = "DCGM_FI_PROF_PIPE_TENSOR_DFMA_ACTIVE"
FP16 = "DCGM_FI_PROF_PIPE_FP16_ACTIVE"
FP32 = "DCGM_FI_PROF_PIPE_FP32_ACTIVE"
FP64 = "DCGM_FI_PROF_PIPE_FP64_ACTIVE"
DRAM = "DCGM_FI_PROF_DRAM_ACTIVE"
SM_CLOCK = "DCGM_FI_DEV_SM_CLOCK"
POWER_LIMIT = "DCGM_FI_DEV_POWER_MGMT_LIMIT"
GPU_TEMP = "DCGM_FI_DEV_GPU_TEMP"

METRICS: Mapping[str, Metric] = MappingProxyType(
    {
        m.name: m
        for m in (
            Metric(
                ENERGY,
                "mJ since boot",
                "gross energy (exact between samples; resets fall back to power)",
                "counter",
            ),
            Metric(POWER, "W", "energy where the counter is missing or reset; idle check"),
            Metric(GPU_UTIL, "%", "busy share (NVML utilisation) for the frontier gate"),
            Metric(GR_ACTIVE, "ratio", "busy share (preferred over GPU_UTIL: time-averaged by DCGM)"),
            Metric(SM_ACTIVE, "ratio", "SM occupancy in time: reported, sanity check of GR_ENGINE_ACTIVE"),
            Metric(TENSOR, "ratio", "pipe estimator: tensor-core issue cycles (any precision)"),
            Metric(
                HMMA, "ratio", "pipe estimator (Hopper): FP16/BF16/TF32 tensor cycles, preferred to TENSOR"
            ),
            Metric(
                IMMA, "ratio", "pipe estimator (Hopper): integer tensor cycles (not FLOPs: reported only)"
            ),
            Metric(
                DFMA, "ratio", "pipe estimator (Hopper): FP64 tensor cycles (no FP64 peak: reported only)"
            ),
            Metric(FP16, "ratio", "pipe estimator: FP16 vector cycles (no vector-FP16 peak: reported only)"),
            Metric(FP32, "ratio", "pipe estimator: FP32 CUDA-core cycles × the FP32 peak"),
            Metric(FP64, "ratio", "pipe estimator: FP64 cycles (no FP64 peak: reported only)"),
            Metric(
                DRAM, "ratio", "TB moved = DRAM_ACTIVE × peak bandwidth × Δt (profile models with a TB term)"
            ),
            Metric(SM_CLOCK, "MHz", "scales each pipe's peak to the observed clock"),
            Metric(POWER_LIMIT, "W", "power cap in force (reported: a cap moves the MFU→power line)"),
        )
    }
)

#: Metrics without which the pipe estimator has nothing to count.
PIPE_METRICS: tuple[str, ...] = (TENSOR, HMMA, FP32)

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

#: Labels that identify one physical GPU (UUID when present; else host + index).
GPU_ID_LABELS: tuple[str, ...] = ("UUID",)
HOST_LABELS: tuple[str, ...] = ("Hostname", "instance")


def group_labels(by: str) -> tuple[str, ...]:
    """The labels whose value is the group key for ``--by`` (a known key, or any label name)."""
    return GROUP_LABELS.get(by, (by,))


def group_key(labels: Mapping[str, str], candidates: Sequence[str]) -> str | None:
    """The first non-empty candidate label (dcgm-exporter sets ``pod=""`` on unallocated GPUs)."""
    for c in candidates:
        v = labels.get(c)
        if v:
            return v
    return None


def gpu_id(labels: Mapping[str, str]) -> str:
    """Stable id of the physical GPU behind a series."""
    u = labels.get("UUID")
    if u:
        return u
    host = next((labels[h] for h in HOST_LABELS if labels.get(h)), "?")
    return f"{host}/gpu{labels.get('gpu', '?')}"
