"""Figures of the MASCOTS reproduction (matplotlib, Agg backend; PNG).

* Figure 1: board power vs MFU per GPU, runs coloured by dtype, with the per-GPU OLS line (Table II).
* Figure 4: measured vs predicted power per GPU, for the per-GPU model and the per-(dtype, batch) cell model
  (Table III), with the identity line.

Enskat & Wiesner, MASCOTS 2026, arXiv:2608.03880 (their Figures 1 and 4 show the same quantities).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from flopwatch.report.mpl import inch_margins, linear_ticks, pyplot, save

if TYPE_CHECKING:
    import pandas as pd

    from flopwatch.powermodel.fit import PowerModelResult

DTYPE_COLORS = {"fp32": "#1f77b4", "fp16": "#ff7f0e", "bf16": "#2ca02c"}


def _per_gpu(
    df: pd.DataFrame,
    path: str | Path,
    title: str,
    axis_labels: tuple[str, str],
    draw: Callable[[Any, str, pd.DataFrame], None],
    *,
    legend: tuple[int, str],
) -> Path:
    """One panel per GPU (three to a row), ``draw(ax, gpu, rows)`` filling each; the panels left over blank."""
    gpus = list(dict.fromkeys(df["gpu"]))
    n = len(gpus)
    cols = 3 if n > 2 else n
    rows = int(np.ceil(n / cols))
    fig, axes = pyplot().subplots(rows, cols, figsize=(4.2 * cols, 3.5 * rows), squeeze=False)
    inch_margins(fig, left=0.65, top=0.6, bottom=0.55, wspace=0.35, hspace=0.55)
    axes = axes.ravel()
    for ax, gpu in zip(axes, gpus, strict=False):
        draw(ax, gpu, df[df["gpu"] == gpu])
        ax.set_title(gpu)
        ax.set_xlabel(axis_labels[0])
        ax.set_ylabel(axis_labels[1])
        linear_ticks(ax)
        ax.legend(fontsize=legend[0], loc=legend[1])
    for ax in axes[n:]:
        ax.axis("off")
    fig.suptitle(title)
    return save(fig, Path(path), dpi=120)


def figure1_power_vs_mfu(df: pd.DataFrame, gpu_fit: PowerModelResult, path: str | Path) -> Path:
    """Scatter of power vs MFU per GPU, coloured by dtype, with the per-GPU fit line."""

    def draw(ax: Any, gpu: str, sub: pd.DataFrame) -> None:
        for dt, s in sub.groupby("dtype"):
            ax.scatter(s["mfu_pct"], s["power_w"], s=8, alpha=0.6, color=DTYPE_COLORS.get(dt), label=dt)
        p = gpu_fit.params.loc[gpu]
        xs = np.linspace(0, sub["mfu_pct"].max(), 50)
        ax.plot(xs, p["intercept"] + p["slope"] * xs, color="k", lw=1.2, label=f"OLS R²={p['r2']:.2f}")

    return _per_gpu(
        df, path, "Power vs MFU per GPU (per-run means; MASCOTS 2026 data)",
        ("MFU (%, MASCOTS: calflops FLOPs, implied peaks)", "GPU power (W)"), draw, legend=(7, "lower right"),
    )  # fmt: skip


def figure4_measured_vs_predicted(
    df: pd.DataFrame, gpu_fit: PowerModelResult, cell_fit: PowerModelResult, path: str | Path
) -> Path:
    """Measured vs predicted power per GPU: per-GPU model (grey) and per-cell model (coloured by dtype)."""
    y_gpu = gpu_fit.fittedvalues
    y_cell = cell_fit.fittedvalues

    def draw(ax: Any, gpu: str, sub: pd.DataFrame) -> None:
        ax.scatter(sub["power_w"], y_gpu.reindex(sub.index), s=6, color="0.7", label="per-GPU model")
        for dt, s in sub.groupby("dtype"):
            ax.scatter(
                s["power_w"],
                y_cell.reindex(s.index),
                s=6,
                color=DTYPE_COLORS.get(dt),
                label=f"per-cell, {dt}",
            )
        lo, hi = sub["power_w"].min() * 0.9, sub["power_w"].max() * 1.05
        ax.plot([lo, hi], [lo, hi], "k--", lw=0.8)  # the identity line
        ax.set_xlim(lo, hi)
        ax.set_ylim(lo, hi)

    return _per_gpu(
        df, path, "Measured vs predicted power (in-sample)", ("measured power (W)", "predicted power (W)"),
        draw, legend=(6, "upper left"),
    )  # fmt: skip


def write_figures(
    df: pd.DataFrame, gpu_fit: PowerModelResult, cell_fit: PowerModelResult, outdir: str | Path
) -> list[Path]:
    """Write Figure 1 and Figure 4 as PNGs into ``outdir`` (created if needed)."""
    d = Path(outdir)
    d.mkdir(parents=True, exist_ok=True)
    return [
        figure1_power_vs_mfu(df, gpu_fit, d / "figure1_power_vs_mfu.png"),
        figure4_measured_vs_predicted(df, gpu_fit, cell_fit, d / "figure4_measured_vs_predicted.png"),
    ]
