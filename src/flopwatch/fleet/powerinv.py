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
import math
from dataclasses import dataclass

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


@functools.cache
def power_inverse(device: str, dtype: str) -> PowerInverse:
    """The inverted built-in model of ``device`` for ``dtype`` (cached; built from the bundled MASCOTS data)."""
    from flopwatch.powermodel.datasets import load_mascots
    from flopwatch.powermodel.fit import fit_power_model
    from flopwatch.powermodel.mfu import GPU_DEVICE_KEYS, implied_peak_flops

    spec: DeviceSpec = get_device(device)
    d = normalize_dtype(dtype)
    by_key = {k: g for g, k in GPU_DEVICE_KEYS.items()}
    gpu = by_key.get(spec.key, TEMPLATE)
    df = load_mascots(gpu)
    cell_dtype = d
    have = set(df["dtype"].unique())
    for cand in (d, {"tf32": "fp32", "fp8": "bf16", "bf16": "fp16", "fp16": "bf16"}.get(d), "bf16", "fp32"):
        if cand in have:
            cell_dtype = cand
            break
    sub = df[(df["dtype"] == cell_dtype) & (df["batch_size"] >= MIN_BATCH)]
    if len(sub) < 3:
        sub = df[df["dtype"] == cell_dtype]
    res = fit_power_model(sub, by="dtype")
    row = res.params.iloc[0]
    a, b = float(row["intercept"]), float(row["slope"])
    sd = float(row["resid_sd_w"])
    if not (b > 0 and math.isfinite(b)):
        raise InputError(
            f"the built-in power model of {spec.name} ({cell_dtype}) has no usable MFU slope", field="device"
        )
    idle_t = res.idle_power_w.get(gpu, spec.idle_w)
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
    cres = fit_power_model(sub, by="cell")
    cells = tuple(
        (
            idle + k * (float(r["intercept"]) - float(idle_t)),
            k * float(r["slope"]),
            float(r["x_max"]),
            k * float(r["resid_sd_w"]),
        )
        for _, r in cres.params.iterrows()
        if math.isfinite(float(r["intercept"]))
    )
    return PowerInverse(
        device=spec.key,
        dtype=d,
        idle_w=idle,
        max_w=max_w,
        intercept_w=idle + k * (a - float(idle_t)),
        slope_w_per_pct=k * b,
        resid_sd_w=k * sd,
        mfu_max_pct=float(row["x_max"]),
        peak_flops=float(peak),
        source=src,
        cells=cells,
    )
