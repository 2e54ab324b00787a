"""MFU ⇄ power models after Enskat & Wiesner (MASCOTS 2026, arXiv:2608.03880).

* :func:`load_mascots` — the study's per-run aggregates (vendored, MIT) with canonical columns.
* :func:`fit_power_model` — grouped OLS of power on MFU (or GPU utilisation), per GPU or per
  (GPU, dtype, batch) cell, returning a statsmodels-style :class:`PowerModelResult`.
* :mod:`flopwatch.powermodel.reproduce` — the paper's Tables II–IV with bootstrap intervals.
* :mod:`flopwatch.powermodel.oos` — out-of-sample evaluation and the inverse (power → FLOP rate).
* :mod:`flopwatch.powermodel.bench` — the study's measurement protocol on our own workloads and sensors.

Heavy imports (pandas, scipy) happen inside the functions.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

# Lazy (PEP 562): ``flopwatch.powermodel.mfu`` (peak tables) must not pull in the data loaders and fits.
_EXPORTS: dict[str, str] = {
    "load_aggregates": "datasets",
    "load_mascots": "datasets",
    "read_aggregate_csv": "datasets",
    "PowerModelResult": "fit",
    "bootstrap_gpu_stats": "fit",
    "fit_power_model": "fit",
    "noise_floor_pct": "fit",
    "MASCOTS_GPUS": "mfu",
    "canonical_gpu": "mfu",
    "mfu_pct": "mfu",
    "peak_flops": "mfu",
}

if TYPE_CHECKING:
    from flopwatch.powermodel.datasets import load_aggregates, load_mascots, read_aggregate_csv
    from flopwatch.powermodel.fit import (
        PowerModelResult,
        bootstrap_gpu_stats,
        fit_power_model,
        noise_floor_pct,
    )
    from flopwatch.powermodel.mfu import MASCOTS_GPUS, canonical_gpu, mfu_pct, peak_flops


def __getattr__(name: str) -> Any:
    sub = _EXPORTS.get(name)
    if sub is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{sub}"), name)
    globals()[name] = value  # once: later lookups are plain attributes
    return value


__all__ = [
    "MASCOTS_GPUS",
    "PowerModelResult",
    "bootstrap_gpu_stats",
    "canonical_gpu",
    "fit_power_model",
    "load_aggregates",
    "load_mascots",
    "mfu_pct",
    "noise_floor_pct",
    "peak_flops",
    "read_aggregate_csv",
]
