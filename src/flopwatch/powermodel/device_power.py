"""One device power model: power as a function of MFU, dtype and batch regime (forward, the simulator) and FLOP
rate from mean power (inverse, fleets without a calibration profile), from the same fitted lines.

Two kinds of model, both behind :class:`PowerModel`:

* **MASCOTS-grounded** (A100, L40, L4, and the other GPUs of the study): the per-cell linear fits
  ``P = intercept + slope · MFU`` of Enskat & Wiesner (MASCOTS 2026, arXiv 2608.03880), one line per
  (GPU, dtype, batch size) cell, fitted by :func:`flopwatch.powermodel.fit.fit_power_model` (``by="cell"``) on the
  vendored aggregates. Within a cell this reproduces the published runs; the batch-1 cells carry the
  memory-bound floor (≈ 150–200 W on the A100 at MFU < 1 %, Table IV of the paper).
* **Spec-based** (H100, H200, Jetson Orin Nano): no published MFU→power data exists for them, so the A100's
  cells are used as a *shape*: ``P = idle + (P_max − idle) · f_cell(MFU)`` with
  ``f_cell(MFU) = (P_A100,cell(MFU) − idle_A100) / (TDP_A100 − idle_A100)``, MFU taken against each device's own
  peak. The assumption is that the same vendor's tensor-core GPUs spend the same fraction of their dynamic power
  range at the same fraction of peak throughput in the same batch regime; it is marked ``kind="spec"``.

The batch regime is keyed by **tokens per step**, not batch size: every MASCOTS step has 11 tokens per sample
(the padded prompt, SOURCE.md), so MASCOTS batch ``b`` is ``11·b`` tokens, and a workload with 128 tokens per
sample at batch 1 is in the regime of MASCOTS batch ≈ 12. Between cells the prediction is interpolated linearly
in log₂(tokens). Outside a cell's observed MFU range the line is clipped (at 1.5× the largest MFU seen, 0 below),
so nothing extrapolates into nonsense; the result is always clamped to [idle, P_max].

Activity: the cell lines were fitted on runs whose GPU utilisation never fell below the cell's minimum
(28 % at A100 batch 1). A workload whose GPU is busy for less of the time than anything observed in its cell (a
tiny model that is host-bound) cannot draw the fitted floor: its dynamic power is scaled by
``util / util_min(cell)``. Within the observed range the fitted line is used unchanged.

Inverse (:meth:`PowerModel.flop_rate`): Prometheus does not know a job's batch regime, so mean power is inverted
through every compute-bound cell (batch ≥ :data:`MIN_BATCH`; batch 1 is memory-bound, Table IV of the paper) and
the point is their median, the interval their envelope at ± z residual SDs. It is *not* a calibration on the
fleet's hardware, and says so.

The cell fits are served from :data:`CELLS_FILE` (what :func:`fit_cells` computes from the bundled CSVs), so
neither the simulator nor a fleet estimate imports pandas to refit; ``python -m flopwatch.powermodel.device_power``
rewrites it after the data change, and tests/test_fleet.py checks it equals a fresh fit.
"""

from __future__ import annotations

import functools
import json
import math
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from flopwatch.devices import DeviceSpec, get_device, normalize_dtype
from flopwatch.units import nanmedian

#: Tokens per sample in every MASCOTS run (the padded prompt; SOURCE.md "Experimental design").
MASCOTS_TOKENS_PER_SAMPLE = 11

#: Rail maximum used instead of TDP where the measured rail is not the whole board.
#: Orin Nano: the Jetson study integrates VDD_CPU_GPU_CV, which peaks at 8.4–8.9 W on its saturating fp32 runs
#: (Fowler 2026, v2 records, avg_raw_mw of the ≥ 95 % utilisation runs) at 33–39 % fp32 MFU; with the A100 shape
#: (f ≈ 0.80 there) that gives a 10.5 W rail maximum, far below the 25 W module power mode.
RAIL_MAX_W: Mapping[str, float] = {"orin-nano": 10.5}

#: The template of the spec-based models. Its MASCOTS fp32 MFUs imply the 156 TFLOPS TF32 peak (SOURCE.md): the
#: MASCOTS-grounded models keep the peaks their data imply; spec-based ones use DeviceSpec.mfu_peak.
_TEMPLATE_GPU = "A100"
#: Smallest MASCOTS batch counted as compute-bound by the inverse (powermodel.oos.InverseModel's default).
MIN_BATCH = 32
#: z of a two-sided 95 % normal interval: near the board limit the cell lines are flat, so one residual SD of
#: power moves the inverted MFU by several points.
Z95 = 1.959963984540054
#: Mean utilisation at or under which a GPU counts as idle (the Jetson study's detection gate: > 5 % is busy).
IDLE_UTIL = 0.05
CELLS_FILE = Path(__file__).with_name("data") / "mascots_cells.json"


@dataclass(frozen=True)
class PowerCell:
    """One (dtype, batch) cell: the fitted line and the range of conditions it was fitted on."""

    dtype: str
    batch_size: int
    tokens_per_step: float
    intercept_w: float
    slope_w_per_pct: float
    mfu_lo_pct: float
    mfu_hi_pct: float
    util_min: float  # lowest GPU utilisation (0–1) of the cell's runs
    resid_sd_pct: float  # SD of the residuals around the line, % of mean power (Table III, per cell)
    n: int

    def line(self, mfu_pct: float) -> float:
        m = min(max(mfu_pct, 0.0), 1.5 * self.mfu_hi_pct)
        return self.intercept_w + self.slope_w_per_pct * m


@dataclass(frozen=True)
class PowerModel:
    """Power (W) of one device model as a function of (dtype, tokens per step, MFU %, utilisation)."""

    device: str  # devices.DEVICES key
    kind: str  # "mascots" | "spec"
    idle_w: float
    max_w: float
    cells: Mapping[str, tuple[PowerCell, ...]]  # dtype → cells sorted by tokens
    mfu_peak_flops: Mapping[str, float]  # dtype → FLOP/s the model's MFU is relative to
    repeat_sd_pct: float  # cross-repeat noise floor (Table III), run-to-run
    source: str
    scale: tuple[float, float] | None = None  # spec models: (template idle, template TDP)
    notes: tuple[str, ...] = field(default=())

    def cell_dtype(self, dtype: str) -> str:
        """The dtype whose cells describe ``dtype`` (tf32 → fp32 cells, fp8 → bf16, fp16 ↔ bf16)."""
        d = normalize_dtype(dtype)
        for cand in (d, {"tf32": "fp32", "fp8": "bf16", "bf16": "fp16", "fp16": "bf16"}.get(d), "fp32"):
            if cand in self.cells:
                return cand
        return next(iter(self.cells))

    def mfu_pct(self, dtype: str, flops_per_s: float) -> float:
        """MFU in % as the power model defines it (MASCOTS: against the peaks its data imply)."""
        d = normalize_dtype(dtype)
        peak = self.mfu_peak_flops.get(d) or self.mfu_peak_flops[self.cell_dtype(d)]
        return 100.0 * flops_per_s / peak

    def _bracket(self, dtype: str, tokens_per_step: float) -> tuple[PowerCell, PowerCell, float]:
        cells = self.cells[self.cell_dtype(dtype)]
        x = math.log2(max(tokens_per_step, 1e-9))
        xs = [math.log2(c.tokens_per_step) for c in cells]
        if x <= xs[0]:
            return cells[0], cells[0], 0.0
        if x >= xs[-1]:
            return cells[-1], cells[-1], 0.0
        i = int(np.searchsorted(xs, x, side="right")) - 1
        w = (x - xs[i]) / (xs[i + 1] - xs[i])
        return cells[i], cells[i + 1], w

    def template_power_w(self, dtype: str, tokens_per_step: float, mfu_pct: float) -> tuple[float, float]:
        """Interpolated cell line at ``mfu_pct`` and the interpolated minimum utilisation, before scaling."""
        a, b, w = self._bracket(dtype, tokens_per_step)
        p = (1 - w) * a.line(mfu_pct) + w * b.line(mfu_pct)
        u = (1 - w) * a.util_min + w * b.util_min
        return p, u

    def power_w(self, dtype: str, tokens_per_step: float, mfu_pct: float, util: float = 1.0) -> float:
        """Mean board power (W) of a steady workload at full clock, before noise and DVFS."""
        p, umin = self.template_power_w(dtype, tokens_per_step, mfu_pct)
        if self.scale is not None:  # spec-based: reuse the template's fraction of its dynamic range
            t_idle, t_max = self.scale
            frac = min(max((p - t_idle) / (t_max - t_idle), 0.0), 1.0)
            p = self.idle_w + (self.max_w - self.idle_w) * frac
        activity = 1.0 if umin <= 0 else min(1.0, max(util, 0.0) / umin)
        p = self.idle_w + (p - self.idle_w) * activity
        return float(min(max(p, self.idle_w), self.max_w))

    def resid_sd_pct(self, dtype: str, tokens_per_step: float) -> float:
        """Per-cell residual SD (% of power): how far one architecture sits from its cell's MFU line."""
        a, b, w = self._bracket(dtype, tokens_per_step)
        return (1 - w) * a.resid_sd_pct + w * b.resid_sd_pct

    def flop_rate(
        self, dtype: str, power_w: np.ndarray, z: float = Z95, util: np.ndarray | None = None
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(FLOP/s, lower, upper) at mean board powers ``power_w``: each compute-bound cell's line inverted (in the
        template's power space for spec-based models), median and envelope at ± ``z`` residual SDs. A flat cell (power
        saturated at the board limit) or one whose clip the power reaches bounds MFU only by 100 %.

        ``util`` (0–1, mean GPU utilisation; NaN: unknown) undoes the forward model's activity scaling: a
        host-bound job busy less of the time than the cell's runs draws ``a = util / util_min`` of the line's
        dynamic power (:meth:`power_w`), so without it such a job's power sits under every compute-bound line and
        inverts to 0 (the simulated fleet's small jobs did). The power is scaled up by ``1/a`` to the line, and the
        MFU read there scaled down by ``a``: a duty cycle. (:meth:`power_w` evaluates the line at the overall MFU
        rather than ``MFU/a``; at the low MFUs of such jobs the lines are flat, so the two differ by ~1 % of power.)"""
        d = normalize_dtype(dtype)
        cd = self.cell_dtype(d)
        peak = self.mfu_peak_flops.get(d) or self.mfu_peak_flops[cd]
        p_dev = np.asarray(power_w, dtype=float)
        u = np.full_like(p_dev, np.nan) if util is None else np.asarray(util, dtype=float)
        # idle (utilisation at most the detection gate's 5 %, Fowler 2026) or unknown: no activity correction, as
        # dividing an idle GPU's power noise by a near-zero activity would invent work
        u = np.where(u > IDLE_UTIL, u, np.nan)
        cells = [c for c in self.cells[cd] if c.batch_size >= MIN_BATCH] or list(self.cells[cd])
        mids, los, his = [], [], []
        for c in cells:
            with np.errstate(invalid="ignore", divide="ignore"):
                act = np.where(
                    np.isfinite(u), np.minimum(1.0, u / c.util_min) if c.util_min > 0 else 1.0, 1.0
                )
            p = self.idle_w + (p_dev - self.idle_w) / act
            if self.scale is not None:
                t_idle, t_max = self.scale
                p = t_idle + (p - self.idle_w) / (self.max_w - self.idle_w) * (t_max - t_idle)
            top = 1.5 * c.mfu_hi_pct
            sd = c.resid_sd_pct / 100.0 * p
            if c.slope_w_per_pct <= 1e-9:
                mids.append(np.full_like(p, np.nan))
                los.append(np.zeros_like(p))
                his.append(np.full_like(p, 100.0))
                continue
            inv = lambda x, c=c, top=top: np.clip((x - c.intercept_w) / c.slope_w_per_pct, 0.0, top)  # noqa: E731
            # the work scales like the power: busy util/util_min of the cell's duty, the GPU does that share of the
            # cell's work (so a span mixing idle and busy time gives the busy part's FLOPs, whatever the mix)
            mids.append(inv(p) * act)
            los.append(inv(p - z * sd) * act)
            up = (p + z * sd - c.intercept_w) / c.slope_w_per_pct
            his.append(np.where(up >= top, 100.0, np.maximum(up, 0.0) * act))
        mid = nanmedian(np.stack(mids), axis=0)
        lo, hi = np.min(np.stack(los), axis=0), np.max(np.stack(his), axis=0)
        f = peak / 100.0
        mid = np.where(np.isfinite(mid), mid, lo)
        return mid * f, np.minimum(lo, mid) * f, np.maximum(hi, mid) * f


def fit_cells(gpu: str) -> dict[str, Any]:
    """:func:`_mascots_cells` of ``gpu`` as JSON-able data (the content of :data:`CELLS_FILE`)."""
    cells, idle, noise, p_max, src = _mascots_cells(gpu, cached=False)
    return {
        "cells": {d: [asdict(c) for c in cs] for d, cs in cells.items()},
        "idle_w": idle if math.isfinite(idle) else None,
        "noise_pct": noise,
        "p_max_seen_w": p_max,
        "source": src,
    }


def write_cells(path: Path = CELLS_FILE) -> Path:
    """Refit every MASCOTS GPU and write :data:`CELLS_FILE`."""
    from flopwatch.powermodel.mfu import GPU_DEVICE_KEYS

    gpus = sorted(set(GPU_DEVICE_KEYS) | {_TEMPLATE_GPU})
    path.write_text(json.dumps({g: fit_cells(g) for g in gpus}, indent=1, sort_keys=True) + "\n")
    return path


@functools.cache
def _cached(gpu: str) -> dict[str, Any] | None:
    try:
        return json.loads(CELLS_FILE.read_text()).get(gpu)
    except (OSError, ValueError):
        return None


def _mascots_cells(
    gpu: str, exclude_models: tuple[str, ...] = (), *, cached: bool = True
) -> tuple[dict[str, tuple[PowerCell, ...]], float, float, float, str]:
    """Per-cell fits of one MASCOTS GPU (via the powermodel package), the idle power and the noise floor.

    ``exclude_models`` leaves those architectures out of the fits (the out-of-sample check in ``validate``);
    without it the fits come from :data:`CELLS_FILE` when it has them.
    """
    hit = _cached(gpu) if cached and not exclude_models else None
    if hit is not None:
        cs = {d: tuple(PowerCell(**c) for c in v) for d, v in hit["cells"].items()}
        idle = float("nan") if hit["idle_w"] is None else float(hit["idle_w"])
        return cs, idle, float(hit["noise_pct"]), float(hit["p_max_seen_w"]), str(hit["source"])
    from flopwatch.powermodel.datasets import load_aggregates, load_mascots
    from flopwatch.powermodel.fit import fit_power_model, noise_floor_pct

    df = load_mascots(gpu)
    if exclude_models:
        df = df[~df["model"].isin(exclude_models)]
    res = fit_power_model(df, by="cell")
    util_min = df.groupby(["dtype", "batch_size"])["gpu_util_pct"].min() / 100.0
    n_models = df.groupby(["dtype", "batch_size"])["model"].nunique()
    cells: dict[str, list[PowerCell]] = {}
    for (_gpu, dtype, batch), row in res.params.iterrows():
        slope, intercept = float(row["slope"]), float(row["intercept"])
        # A negative slope is saturation at the board limit (L40 batch ≥ 64), and a cell with one
        # architecture (L4 fp32) has no across-model MFU spread to fit a slope to: use the cell mean there.
        if slope < 0 or bool(row["degenerate"]) or int(n_models.get((dtype, batch), 0)) < 2:
            slope, intercept = 0.0, float(row["mean_power_w"])
        cells.setdefault(str(dtype), []).append(
            PowerCell(
                dtype=str(dtype),
                batch_size=int(batch),
                tokens_per_step=float(batch) * MASCOTS_TOKENS_PER_SAMPLE,
                intercept_w=intercept,
                slope_w_per_pct=slope,
                mfu_lo_pct=float(row["x_min"]),
                mfu_hi_pct=float(row["x_max"]),
                util_min=float(util_min.get((dtype, batch), 0.0)),
                resid_sd_pct=float(row["resid_sd_pct"]),
                n=int(row["n"]),
            )
        )
    out = {d: tuple(sorted(cs, key=lambda c: c.tokens_per_step)) for d, cs in cells.items()}
    idle = res.idle_power_w.get(gpu)
    if idle is None:
        idle = float("nan")
    full = load_aggregates(gpu=gpu, keep_nan_mfu=True).df
    noise = noise_floor_pct(full, mean_power_w=float(df["power_w"].mean()))
    return (
        out,
        float(idle),
        float(noise),
        float(df["power_w"].max()),
        "; ".join(res.sources) or "MASCOTS aggregates",
    )


@functools.cache
def power_model_for(device: str) -> PowerModel:
    """The power model of a device (``devices.DEVICES`` key or name); cached, built from the bundled data."""
    return build_power_model(device)


def build_power_model(device: str, *, exclude_models: tuple[str, ...] = ()) -> PowerModel:
    """Build (uncached) the power model of ``device``; ``exclude_models`` drops MASCOTS architectures from the fits."""
    from flopwatch.powermodel.mfu import GPU_DEVICE_KEYS, implied_peak_flops

    spec: DeviceSpec = get_device(device)
    by_key = {k: g for g, k in GPU_DEVICE_KEYS.items()}
    if spec.key in by_key:
        gpu = by_key[spec.key]
        cells, idle, noise, p_max_seen, src = _mascots_cells(gpu, exclude_models)
        if not math.isfinite(idle):
            idle = spec.idle_w
        peaks = {d: implied_peak_flops(gpu, d) for d in cells}
        if "fp32" in peaks and spec.supports("tf32"):
            peaks["tf32"] = peaks["fp32"]
        return PowerModel(
            device=spec.key,
            kind="mascots",
            idle_w=idle,
            # NVML readings can sit above the nominal TDP (the L40 runs reach 343 W against 300 W).
            max_w=max(spec.tdp_w, p_max_seen),
            cells=cells,
            mfu_peak_flops=peaks,
            repeat_sd_pct=noise,
            source=f"Enskat & Wiesner, MASCOTS 2026, per-cell OLS of {src}",
        )
    # Spec-based: the A100's cells as the shape, scaled to this device's idle and maximum power.
    tmpl = power_model_for("a100")
    # MFU against the same peak as measured runs and ``bench`` (DeviceSpec.mfu_peak: fp32 = the vector peak, or
    # the matrix peak where fp32 GEMMs run on matrix units), so a simulated fp32 run's MFU means what a real one's
    # does. The A100 shape was fitted on TF32-normalised fp32 MFU; its fp32 cells are clipped at 1.5× their
    # largest MFU, so a vector-peak MFU saturates the fp32 line instead of extrapolating it.
    peaks = {d: spec.mfu_peak(d) for d in ("fp32", "tf32", "fp16", "bf16", "fp8") if spec.supports(d)}
    max_w = RAIL_MAX_W.get(spec.key, spec.tdp_w)
    return PowerModel(
        device=spec.key,
        kind="spec",
        idle_w=spec.idle_w,
        max_w=max_w,
        cells=tmpl.cells,
        mfu_peak_flops=peaks,
        repeat_sd_pct=tmpl.repeat_sd_pct,
        source=(
            f"assumption: idle + ({max_w:g} W − idle)·f(MFU) with f the A100 MASCOTS cell lines normalised to the "
            f"A100's dynamic range; idle: {spec.idle_source}"
        ),
        scale=(tmpl.idle_w, 400.0),
    )


if __name__ == "__main__":  # python -m flopwatch.powermodel.device_power: refresh the bundled fits
    print(write_cells())
