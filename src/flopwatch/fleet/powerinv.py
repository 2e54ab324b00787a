"""The built-in MFU→power model of a device, inverted: mean power → FLOP rate, for fleets without a profile.

The model is the one the simulator's power comes from (``flopwatch.sim.power``; Enskat & Wiesner, MASCOTS 2026,
arXiv 2608.03880): power is linear in MFU within a (GPU, dtype, batch) cell. Inverting it needs the regime, which
Prometheus does not know, so the point estimate inverts the per-(GPU, dtype) line pooled over the compute-bound
cells (batch ≥ 32, as :class:`flopwatch.powermodel.oos.InverseModel` restricts it; batch 1 is memory-bound, Table IV
of the paper) and the bounds add the pooled fit's residual spread. This is *not* a calibrated profile: the
estimate says so, and a profile calibrated on the fleet's own hardware (``--profile``) replaces it.

Devices without MASCOTS data (H100, H200) use the A100 lines as a shape scaled to their idle and maximum power,
with MFU against their own peaks: the same assumption ``flopwatch.sim.power`` documents (kept here rather than
imported: the fleet estimator reads real data and must not depend on the simulator).
"""

from __future__ import annotations

import functools
import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from flopwatch.devices import DeviceSpec, get_device, normalize_dtype
from flopwatch.errors import InputError

#: Smallest MASCOTS batch counted as compute-bound (powermodel.oos.InverseModel's default min_batch).
MIN_BATCH = 32
#: Template of the spec-based devices and its dynamic range (A100 SXM4 TDP 400 W, A100 datasheet).
TEMPLATE = "A100"
TEMPLATE_MAX_W = 400.0
#: z of a two-sided 95 % normal interval. Wider than the profiles' 90 %: near the board limit the cell lines are
#: flat, so a power offset of one residual SD moves the inverted MFU by several points.
Z95 = 1.959963984540054


@dataclass(frozen=True)
class PowerInverse:
    """Mean board power → FLOP/s for one (device, dtype), with an interval."""

    device: str
    dtype: str
    idle_w: float
    max_w: float
    intercept_w: float  # pooled line, device space: P = intercept + slope · MFU%
    slope_w_per_pct: float
    resid_sd_w: float
    mfu_max_pct: float  # largest MFU observed in the pooled cells (× 1.5 caps the inversion)
    peak_flops: float  # FLOP/s that MFU is relative to
    source: str
    # per compute-bound cell (batch): (intercept W, slope W/%, MFU max %, residual SD W), device space
    cells: tuple[tuple[float, float, float, float], ...] = ()

    def mfu_pct(self, power_w: np.ndarray | float) -> np.ndarray:
        p = np.asarray(power_w, dtype=float)
        m = (p - self.intercept_w) / self.slope_w_per_pct
        return np.clip(m, 0.0, 1.5 * self.mfu_max_pct)

    @property
    def ceiling_flops(self) -> float:
        """The largest FLOP rate an upper bound can reach: the peak MFU is taken against."""
        return self.peak_flops

    def rate(self, power_w: float, z: float = Z95) -> tuple[float, float, float]:
        """(FLOP/s, lower, upper) at mean power ``power_w``.

        The point inverts the pooled line; the interval is the envelope over the compute-bound cells, each
        inverted at ``power ∓ z·SD_cell`` (the batch regime is unknown, so any of them may apply). A cell whose
        line is flat (power saturated at the board limit), or whose clip the power reaches, bounds MFU only by
        the peak.
        """
        f = self.peak_flops / 100.0
        # scalar arithmetic (the same values as mfu_pct): numpy's per-call overhead dominated fleet estimates
        a0, b0, top = self.intercept_w, self.slope_w_per_pct, 1.5 * self.mfu_max_pct

        def mfu(p: float) -> float:
            m = (p - a0) / b0
            return m if m != m else (top if m > top else (0.0 if m < 0.0 else m))  # NaN stays NaN

        mid = mfu(power_w) * f
        los, his = [mfu(power_w - z * self.resid_sd_w)], [mfu(power_w + z * self.resid_sd_w)]
        for a, b, hi_pct, sd in self.cells:
            cap = 1.5 * hi_pct
            if b <= 1e-9:
                los.append(0.0)
                his.append(100.0)
                continue
            los.append(min(max((power_w - z * sd - a) / b, 0.0), cap))
            up = (power_w + z * sd - a) / b
            # at or past the cell's clip the line is saturated: power no longer bounds MFU below the peak
            his.append(100.0 if up >= cap else max(up, 0.0))
        return mid, min(min(los) * f, mid), max(max(his) * f, mid)

    def rates(self, power_w: np.ndarray, z: float = Z95) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """:meth:`rate` of many mean powers at once (fleet estimates: one call per device model and dtype, not per
        GPU-job); the same values, element by element (tests/test_fleet.py)."""
        p = np.asarray(power_w, dtype=float)
        f = self.peak_flops / 100.0
        top = 1.5 * self.mfu_max_pct

        def mfu(x: np.ndarray) -> np.ndarray:
            m = (x - self.intercept_w) / self.slope_w_per_pct
            return np.where(m > top, top, np.where(m < 0.0, 0.0, m))  # NaN stays NaN, as in rate()

        mid = mfu(p) * f
        lo = mfu(p - z * self.resid_sd_w)
        hi = mfu(p + z * self.resid_sd_w)
        for a, b, hi_pct, sd in self.cells:
            cap = 1.5 * hi_pct
            if b <= 1e-9:
                lo = np.minimum(lo, 0.0)  # NaN (no power) stays NaN, as min()/max() over rate()'s lists
                hi = np.maximum(hi, 100.0)
                continue
            lo = np.minimum(lo, np.minimum(np.maximum((p - z * sd - a) / b, 0.0), cap))
            up = (p + z * sd - a) / b
            hi = np.maximum(hi, np.where(up >= cap, 100.0, np.maximum(up, 0.0)))
        return mid, np.minimum(lo * f, mid), np.maximum(hi * f, mid)


#: The MASCOTS line fits :func:`power_inverse` scales, per template GPU and cell dtype (pooled line, idle power and
#: per-batch cell lines), as :func:`fit_lines` computes them from the bundled CSVs. Kept as a file so that an
#: estimate does not import pandas and refit (≈ 0.6 CPU-s, most of a 1024-GPU-day fleet estimate's own CPU time:
#: benchmarks/bench_fleet.py); tests/test_fleet_powerinv.py checks it equals a fresh fit, and
#: ``python -m flopwatch.fleet.powerinv`` rewrites it after the data change.
LINES_FILE = Path(__file__).with_name("mascots_lines.json")


def fit_lines(gpu: str) -> dict[str, Any]:
    """The line fits of one MASCOTS GPU: ``{"idle_w", "dtypes": {dtype: {"pooled": [intercept W, slope W/%,
    residual SD W, MFU max %], "n_batch": rows, "cells": [[intercept, slope, MFU max, residual SD], ...]}}}``,
    compute-bound cells only (batch ≥ :data:`MIN_BATCH`; all batches where fewer than 3 rows are)."""
    from flopwatch.powermodel.datasets import load_mascots
    from flopwatch.powermodel.fit import fit_power_model

    df = load_mascots(gpu)
    out: dict[str, Any] = {"idle_w": None, "dtypes": {}}
    for cell_dtype in sorted(set(df["dtype"].unique())):
        sub = df[(df["dtype"] == cell_dtype) & (df["batch_size"] >= MIN_BATCH)]
        if len(sub) < 3:
            sub = df[df["dtype"] == cell_dtype]
        res = fit_power_model(sub, by="dtype")
        row = res.params.iloc[0]
        if out["idle_w"] is None:
            idle = res.idle_power_w.get(gpu)
            out["idle_w"] = None if idle is None else float(idle)
        cres = fit_power_model(sub, by="cell")
        out["dtypes"][str(cell_dtype)] = {
            "pooled": [
                float(row["intercept"]),
                float(row["slope"]),
                float(row["resid_sd_w"]),
                float(row["x_max"]),
            ],
            "cells": [
                [float(r["intercept"]), float(r["slope"]), float(r["x_max"]), float(r["resid_sd_w"])]
                for _, r in cres.params.iterrows()
                if math.isfinite(float(r["intercept"]))
            ],
        }
    return out


@functools.cache
def _lines(gpu: str) -> dict[str, Any]:
    """:func:`fit_lines` of ``gpu`` from :data:`LINES_FILE`, or fitted now when the file lacks it."""
    try:
        table = json.loads(LINES_FILE.read_text())
    except (OSError, ValueError):
        table = {}
    return table.get(gpu) or fit_lines(gpu)


def write_lines(path: Path = LINES_FILE) -> Path:
    """Refit every MASCOTS GPU (and the template) and write :data:`LINES_FILE`."""
    from flopwatch.powermodel.mfu import GPU_DEVICE_KEYS

    gpus = sorted(set(GPU_DEVICE_KEYS) | {TEMPLATE})
    path.write_text(json.dumps({g: fit_lines(g) for g in gpus}, indent=1, sort_keys=True) + "\n")
    return path


@functools.cache
def power_inverse(device: str, dtype: str) -> PowerInverse:
    """The inverted built-in model of ``device`` for ``dtype`` (cached; from the bundled MASCOTS data's fits)."""
    from flopwatch.powermodel.mfu import GPU_DEVICE_KEYS, implied_peak_flops

    spec: DeviceSpec = get_device(device)
    d = normalize_dtype(dtype)
    by_key = {k: g for g, k in GPU_DEVICE_KEYS.items()}
    gpu = by_key.get(spec.key, TEMPLATE)
    lines = _lines(gpu)
    have = lines["dtypes"]
    cell_dtype = d
    for cand in (d, {"tf32": "fp32", "fp8": "bf16", "bf16": "fp16", "fp16": "bf16"}.get(d), "bf16", "fp32"):
        if cand in have:
            cell_dtype = cand
            break
    if cell_dtype not in have:
        raise InputError(f"the built-in power model of {spec.name} has no {d} line", field="device")
    a, b, sd, x_max = have[cell_dtype]["pooled"]
    if not (b > 0 and math.isfinite(b)):
        raise InputError(
            f"the built-in power model of {spec.name} ({cell_dtype}) has no usable MFU slope", field="device"
        )
    idle_t = lines["idle_w"] if lines["idle_w"] is not None else spec.idle_w
    if spec.key in by_key:
        k, idle, max_w = 1.0, float(idle_t), float(spec.tdp_w)
        peak = implied_peak_flops(gpu, cell_dtype)
        if d == "tf32":
            peak = implied_peak_flops(gpu, "fp32")
        src = f"MASCOTS 2026 {gpu} {cell_dtype} runs with batch ≥ {MIN_BATCH}: pooled OLS of power on MFU"
    else:
        idle, max_w = float(spec.idle_w), float(spec.tdp_w)
        k = (max_w - idle) / (TEMPLATE_MAX_W - float(idle_t))
        # MFU against the peak measured runs use (DeviceSpec.mfu_peak), as flopwatch.sim.power's spec models do
        peak = spec.mfu_peak(d if spec.supports(d) else "fp32")
        src = (
            f"assumption: the A100's MASCOTS {cell_dtype} line (batch ≥ {MIN_BATCH}) scaled to {spec.name}'s "
            f"idle {idle:g} W – TDP {max_w:g} W, MFU against its own peak"
        )
    cells = tuple(
        (idle + k * (ca - float(idle_t)), k * cb, cx, k * csd)
        for ca, cb, cx, csd in have[cell_dtype]["cells"]
    )
    return PowerInverse(
        device=spec.key,
        dtype=d,
        idle_w=idle,
        max_w=max_w,
        intercept_w=idle + k * (a - float(idle_t)),
        slope_w_per_pct=k * b,
        resid_sd_w=k * sd,
        mfu_max_pct=float(x_max),
        peak_flops=float(peak),
        source=src,
        cells=cells,
    )


if __name__ == "__main__":  # python -m flopwatch.fleet.powerinv: refresh the bundled fits
    print(write_lines())
