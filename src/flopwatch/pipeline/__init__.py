"""``flopwatch run``: the whole study, end to end, on a real GPU or on the simulated accelerator.

A sequence of stages (Fowler 2026's protocol, generalised), one module each:

1. :mod:`~flopwatch.pipeline.device` — **device**: a real NVIDIA GPU with working NVML telemetry, else a twin.
2. :mod:`~flopwatch.pipeline.plan` — **plan**: the sweep, durations, idle baseline and gaps (``--budget-s``).
3. :mod:`~flopwatch.pipeline.execute` — **trace**: every workload trains (really, or in virtual time) while the
   sampler records telemetry into ``trace.parquet``; one :class:`~flopwatch.records.WorkloadRecord` per run.
4. :mod:`~flopwatch.pipeline.analyse` — **detect → join → gate → calibrate → evaluate → verdict → figures**, each a
   public function of its own package (:mod:`flopwatch.detect`, :mod:`flopwatch.join`, :mod:`flopwatch.estimate`,
   :mod:`flopwatch.evaluate`, :mod:`flopwatch.report`).
5. :mod:`~flopwatch.pipeline.summary` — **summary.json** (contract keys), then ``report.html``.

:mod:`~flopwatch.pipeline.run` sequences them; :mod:`~flopwatch.pipeline.layout` names the output files and
:mod:`~flopwatch.pipeline.progress` draws the progress bar. Everything from the simulator is labelled simulated:
trace metadata, every record, the summary and the report.
"""

from __future__ import annotations

from flopwatch.join import join_records
from flopwatch.pipeline.analyse import Analysis, Stages, analyse
from flopwatch.pipeline.device import DeviceChoice, resolve_device
from flopwatch.pipeline.execute import CudaExecutor, Execution, Executor, SimExecutor, gpm_dram_bytes
from flopwatch.pipeline.layout import FIGURES_DIR, OUTPUT_FILES, prepare_outdir
from flopwatch.pipeline.plan import Plan, PlannedWorkload, RunOptions, describe_fast, frontier_sweep, plan_run
from flopwatch.pipeline.progress import Progress
from flopwatch.pipeline.run import run_pipeline
from flopwatch.pipeline.summary import SUMMARY_KEYS, build_summary, constant_jpf_baseline

__all__ = [
    "FIGURES_DIR",
    "OUTPUT_FILES",
    "SUMMARY_KEYS",
    "Analysis",
    "CudaExecutor",
    "DeviceChoice",
    "Execution",
    "Executor",
    "Plan",
    "PlannedWorkload",
    "Progress",
    "RunOptions",
    "SimExecutor",
    "Stages",
    "analyse",
    "build_summary",
    "constant_jpf_baseline",
    "describe_fast",
    "frontier_sweep",
    "gpm_dram_bytes",
    "join_records",
    "plan_run",
    "prepare_outdir",
    "resolve_device",
    "run_pipeline",
]
