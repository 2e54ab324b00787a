"""Figures of one ``flopwatch run``: the telemetry timeline, energy against ground truth, power against MFU.

The estimator's own figures (per-workload estimates, ablation, coverage, thresholds) come from
:mod:`flopwatch.report.estimate_figures`; these show what the run measured. Every figure of a simulated run
carries a "SIMULATED" watermark.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np

from flopwatch.report.fmt import sig3
from flopwatch.report.mpl import inch_margins, linear_ticks, pyplot, save

#: The MFU convention of the records' ``mfu`` (hardware FLOPs: FlopCounterMode, fused attention 3.5× forward).
MFU_AXIS = "MFU (%, hardware FLOPs)"


def fig_timeline(
    s: Any, detection: Any, records: list[dict[str, Any]], path: Path, *, simulated: bool
) -> Path:
    """Power and utilisation over the whole run (``s``: a DataFrame of ``t_s``, ``power_w``, ``util``, as
    :func:`flopwatch.pipeline.analyse.timeline_samples` returns), detected workloads shaded, frontier ones labelled."""
    plt = pyplot()
    fig, (ax1, ax2) = plt.subplots(
        2, 1, figsize=(12, 5.5), sharex=True, gridspec_kw={"height_ratios": [3, 1.3]}
    )
    inch_margins(fig, left=0.8, top=0.5, bottom=0.55, hspace=0.12)
    t = s["t_s"].to_numpy(float)
    ax1.plot(t, s["power_w"].to_numpy(float), lw=0.6, color="#1f4e79", label="power (sensor)")
    ax1.axhline(
        detection.idle_power_w, color="grey", ls="--", lw=0.8, label=f"idle {sig3(detection.idle_power_w)} W"
    )
    util = s["util"].to_numpy(float)
    ax2.plot(t, util * 100, lw=0.6, color="#7f3f00")
    ax2.axhline(80, color="green", ls=":", lw=0.8)
    ax2.text(
        t.min() if t.size else 0,
        82,
        "frontier gate 80 %",
        fontsize=7,
        color="green",
        bbox={"facecolor": "white", "alpha": 0.8, "lw": 0},
    )
    for seg in detection.segments:
        for ax in (ax1, ax2):
            ax.axvspan(seg.start_s, seg.end_s, color="#9ecae1", alpha=0.35, lw=0)
    ax1.set_ylabel("power (W)")
    ax2.set_ylabel("util (%)")
    ax2.set_xlabel("time since trace start (s)")
    ax2.set_ylim(-5, 105)
    linear_ticks(ax1, ax2)
    # Legend above the axes, beside a left-aligned title: inside, it hid the power of the last workloads.
    ax1.legend(loc="lower right", bbox_to_anchor=(1.0, 1.0), ncol=2, fontsize=8, frameon=False)
    ax1.set_title(
        f"Telemetry: {len(detection.segments)} workloads detected (shaded); {len(records)} were run",
        loc="left",
        fontsize=10,
    )
    return save(fig, path, "SIMULATED" if simulated else None, dpi=100)


def fig_energy_vs_flops(records: list[dict[str, Any]], gate: Any, path: Path, *, simulated: bool) -> Path:
    """Net energy against ground-truth FLOPs (frontier runs filled, gated-out hollow), and energy per FLOP
    against MFU for the frontier runs on linear axes: a log axis spanning the gated-out runs' 0.1–70 % MFU
    squeezed the frontier into one blob, so those are listed in the panel's note instead."""
    plt = pyplot()
    kept = {r.label for r in gate.kept}
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11.5, 4.5))
    inch_margins(fig, left=0.75, top=0.4, bottom=0.6, wspace=0.25)
    rows = [r for r in records if r.get("net_energy_j") is not None and r.get("total_flops")]
    f = np.array([float(r["total_flops"]) for r in rows])
    e = np.array([float(r["net_energy_j"]) for r in rows])
    mfu = np.array([np.nan if r.get("mfu") is None else 100 * float(r["mfu"]) for r in rows])
    k = np.array([r["label"] in kept for r in rows], dtype=bool)
    jpt = np.where(f > 0, e / np.where(f > 0, f, 1.0) * 1e12, np.nan)
    for sel, style, lab in (
        (k, {"color": "#1f4e79"}, "frontier"),
        (~k, {"facecolors": "none", "edgecolors": "#d62728"}, "gated out"),
    ):
        if sel.any():
            ax1.scatter(f[sel], e[sel], s=28, label=f"{lab} ({int(sel.sum())})", **style)
    ok = k & np.isfinite(mfu) & (e > 0)
    if ok.any():
        ax2.scatter(mfu[ok], jpt[ok], s=28, color="#1f4e79")
        pad_x = max(0.5, 0.08 * float(np.ptp(mfu[ok])))
        pad_y = max(0.02 * float(np.median(jpt[ok])), 0.08 * float(np.ptp(jpt[ok])))
        ax2.set_xlim(float(mfu[ok].min()) - pad_x, float(mfu[ok].max()) + pad_x)
        ax2.set_ylim(float(jpt[ok].min()) - pad_y, float(jpt[ok].max()) + pad_y)
    out = ~k & np.isfinite(mfu) & (e > 0)
    if out.any():
        ax2.text(
            0.01,
            0.01,
            f"not shown: {int(out.sum())} gated-out runs, MFU {sig3(np.nanmin(mfu[out]))}–{sig3(np.nanmax(mfu[out]))} %, "
            f"{sig3(np.nanmin(jpt[out]))}–{sig3(np.nanmax(jpt[out]))} J/TFLOP",
            transform=ax2.transAxes,
            fontsize=7,
            color="#d62728",
            va="bottom",
        )
    ax1.set_xscale("log")
    ax1.set_yscale("log")
    ax1.set_xlabel("ground-truth compute (FLOP)")
    ax1.set_ylabel("net energy E_net (J)")
    ax1.set_title("Energy vs compute, every run", fontsize=10)
    ax1.legend(fontsize=8, loc="upper left")
    ax2.set_xlabel(MFU_AXIS)
    ax2.set_ylabel("net energy per FLOP (J/TFLOP)")
    ax2.set_title("Energy per FLOP against MFU, frontier runs", fontsize=10)
    linear_ticks(ax2)
    return save(fig, path, "SIMULATED" if simulated else None, dpi=100)


def fig_loo_fit(evaluation: Any, path: Path, *, simulated: bool) -> Path:
    """Held-out estimate vs ground truth of the default model, every split pooled."""
    plt = pyplot()
    m = evaluation.models[evaluation.default_model]
    truth = evaluation.truth[evaluation.test_idx]
    fig, ax = plt.subplots(figsize=(5.5, 5))
    inch_margins(fig, left=1.05, top=0.4, bottom=0.6)
    ax.scatter(truth.ravel(), m.pred_flops.ravel(), s=6, alpha=0.25, color="#1f4e79")
    lo, hi = float(truth.min()) * 0.7, float(truth.max()) * 1.4
    ax.plot([lo, hi], [lo, hi], color="black", lw=0.8)
    ax.fill_between(
        [lo, hi], [lo * 0.9, hi * 0.9], [lo * 1.1, hi * 1.1], color="grey", alpha=0.15, label="±10 %"
    )
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("ground-truth compute (FLOP)")
    ax.set_ylabel("held-out estimate (FLOP)")
    ax.legend(loc="upper left", fontsize=8)
    ax.set_title(
        f"{evaluation.default_model}: held-out estimates over {evaluation.n_splits} splits", fontsize=9
    )
    return save(fig, path, "SIMULATED" if simulated else None, dpi=100)


def write_run_figures(
    samples: Any,
    detection: Any,
    records: list[dict[str, Any]],
    gate: Any,
    evaluation: Any,
    outdir: str | os.PathLike[str],
    *,
    simulated: bool,
) -> list[Path]:
    """Write the run's figures as PNGs into ``outdir``; returns their paths."""
    out = Path(outdir)
    out.mkdir(parents=True, exist_ok=True)
    paths = [
        fig_timeline(samples, detection, records, out / "run_timeline.png", simulated=simulated),
        fig_energy_vs_flops(records, gate, out / "run_energy_vs_flops.png", simulated=simulated),
        fig_loo_fit(evaluation, out / "run_heldout_vs_truth.png", simulated=simulated),
    ]
    return [p for p in paths if p.exists() and np.isfinite(p.stat().st_size)]
