"""Figures of the estimator evaluation (matplotlib, Agg backend: no display needed).

* ``fig4_per_workload.png`` — the study's Figure 4: per workload, min/median/max of the held-out estimate
  over the splits where it was a test run, relative to its ground truth (one panel per model).
* ``fig5_by_hyperparameter.png`` — Figure 5: held-out |error| by d_model, batch size, sequence length, layers.
* ``fig6_ablation.png`` — Figure 6: eq. 1 vs eq. 2 (and ours): distribution of held-out signed errors and
  per-split MAE; titled as the study's ablation only when eq. 1 was evaluated.

* ``coverage.png`` — empirical coverage of the prediction intervals against the nominal confidence.
* ``threshold_rates.png`` — over a sweep of thresholds scaled to the data, the rates of the two errors: wrongly
  accused (declared above, truly below) and **wrong below** (declared below, truly above); for the interval
  decision also the "uncertain" rate, plotted on its own (it is neither error).

Layouts are ``constrained`` and every figure is drawn once (:func:`flopwatch.report.mpl.save`).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np

from flopwatch.errors import InputError
from flopwatch.estimate.intervals import conformal_rank
from flopwatch.evaluate.splits import COVERAGE_LEVELS, EvaluationResult
from flopwatch.report.fmt import sig3
from flopwatch.report.mpl import inch_margins, linear_ticks, pyplot, save

#: Axis labels with units for Figure 5's hyper-parameters.
_HP_UNITS = {
    "d_model": "model width d_model",
    "batch_size": "batch size (sequences)",
    "seq_len": "sequence length (tokens)",
    "num_layers": "layers",
}


def _order(result: EvaluationResult) -> list[str]:
    names = list(result.models)
    return [n for n in ("eq1", "eq2") if n in names] + [n for n in names if n not in ("eq1", "eq2")]


def fig4_per_workload(result: EvaluationResult, path: Path, *, watermark: str | None = None) -> Path:
    plt = pyplot()
    names = _order(result)
    longest = max((len(str(lab)) for lab in result.records.labels), default=10)
    bottom = 0.65 + longest * 7 / 72 * 0.55 * 0.94  # 7 pt labels rotated 70°: ~0.55 em per character
    fig, axes = plt.subplots(
        len(names), 1, figsize=(11, 2.6 * len(names) + bottom), sharex=True, squeeze=False
    )
    inch_margins(fig, left=0.75, top=0.75, bottom=bottom, hspace=0.35)
    labels = result.records.labels
    order = np.argsort(result.truth)
    x = np.arange(len(labels))
    for ax, name in zip(axes[:, 0], names, strict=True):
        rows = result.per_workload(name)
        gt = np.array([r["ground_truth_flops"] for r in rows])
        med = np.array([np.nan if r["median_flops"] is None else r["median_flops"] for r in rows]) / gt
        lo = np.array([np.nan if r["min_flops"] is None else r["min_flops"] for r in rows]) / gt
        hi = np.array([np.nan if r["max_flops"] is None else r["max_flops"] for r in rows]) / gt
        m, lo, hi = med[order], lo[order], hi[order]
        ax.vlines(
            x, (lo - 1) * 100, (hi - 1) * 100, color="tab:blue", lw=2, alpha=0.5, label="min–max over splits"
        )
        ax.plot(x, (m - 1) * 100, "o", color="tab:blue", ms=4, label="median")
        ax.axhline(0, color="k", lw=0.8)
        for band in (-10, 10):
            ax.axhline(band, color="tab:red", lw=0.6, ls="--")
        mae = result.models[name].abs_pct.mean()
        ax.set_ylabel("estimate vs truth (%)")
        ax.set_title(f"{name}: held-out MAE {sig3(mae)} %", fontsize=9, loc="left")
        linear_ticks(ax)
    axes[0, 0].legend(fontsize=7, loc="upper right")
    axes[-1, 0].set_xticks(x, [labels[i] for i in order], rotation=70, fontsize=7)
    axes[-1, 0].set_xlabel("workload (sorted by ground-truth compute)")
    fig.suptitle(f"Per-workload held-out estimates ({result.n_splits} splits)")
    save(fig, path, watermark)
    return path


def fig5_by_hyperparameter(result: EvaluationResult, path: Path, *, watermark: str | None = None) -> Path:
    plt = pyplot()
    names = _order(result)
    hps = list(result.by_hyperparameter(names[0]))
    if not hps:
        hps = ["(no config)"]
    fig, axes = plt.subplots(1, len(hps), figsize=(3.6 * len(hps), 3.4), squeeze=False)
    inch_margins(fig, left=0.65, top=0.7, bottom=0.6, wspace=0.3)
    width = 0.8 / len(names)
    for j, hp in enumerate(hps):
        ax = axes[0, j]
        for k, name in enumerate(names):
            rows = result.by_hyperparameter(name).get(hp, [])
            vals = [str(r["value"]) for r in rows]
            mae = [np.nan if r["mae_pct"] is None else r["mae_pct"] for r in rows]
            ax.bar(np.arange(len(vals)) + k * width - 0.4 + width / 2, mae, width, label=name)
            ax.set_xticks(np.arange(len(vals)), vals)
        ax.set_title(hp, fontsize=9)
        ax.set_xlabel(_HP_UNITS.get(hp, hp), fontsize=8)
        ax.set_ylabel("held-out MAE (%)" if j == 0 else "")
        linear_ticks(ax)
    axes[0, 0].legend(fontsize=7)
    fig.suptitle("Held-out error by hyper-parameter")
    save(fig, path, watermark)
    return path


def fig6_ablation(result: EvaluationResult, path: Path, *, watermark: str | None = None) -> Path:
    plt = pyplot()
    names = _order(result)
    fig, (a1, a2) = plt.subplots(1, 2, figsize=(11, 4))
    inch_margins(fig, left=0.75, top=0.4, bottom=0.85, wspace=0.22)
    bins = np.linspace(-25, 25, 51)
    for name in names:
        e = result.models[name].rel_err.ravel() * 100
        a1.hist(np.clip(e, bins[0], bins[-1]), bins=bins, histtype="step", lw=1.5, label=f"{name}")
    a1.axvline(0, color="k", lw=0.8)
    a1.set_xlabel("held-out signed error (%), clipped to ±25")
    a1.set_ylabel("count (test runs × splits)")
    a1.set_title("Held-out signed errors, all splits", fontsize=9)
    a1.legend(fontsize=7)
    data = [result.models[n].abs_pct.mean(axis=1) for n in names]
    a2.boxplot(data, showfliers=True)
    a2.set_xticks(np.arange(1, len(names) + 1), names, rotation=20)
    a2.set_xlabel("model")
    a2.set_ylabel("per-split MAE (%)")
    # The study's Figure 6 is the eq. 1 vs eq. 2 ablation: say so only when both were evaluated here.
    if "eq1" in result.models and "eq2" in result.models:
        title = "eq. 1 vs eq. 2 ablation (and ours), same splits"
    else:
        missing = [m for m in ("eq1", "eq2") if m not in result.models]
        title = f"Per-split MAE of each model, same splits ({' and '.join(missing)} not evaluated here)"
    a2.set_title(title, fontsize=9)
    linear_ticks(a1, a2)
    save(fig, path, watermark)
    return path


def fig_coverage(result: EvaluationResult, path: Path, *, watermark: str | None = None) -> Path:
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(5, 4.5))
    inch_margins(fig, left=0.7, top=0.4, bottom=0.6)
    for name in _order(result):
        m = result.models[name]
        n = m.loo_residuals.shape[1]
        # the levels the JSON reports (coverage_by_level); conformal needs ⌈(n+1)·c⌉ <= n
        levels = [c for c in COVERAGE_LEVELS if conformal_rank(n, c) <= n]
        ax.plot([100 * c for c in levels], [100 * m.coverage_at(c) for c in levels], "o-", ms=3, label=name)
    ax.plot([45, 100], [45, 100], "k--", lw=0.8, label="nominal")
    ax.set_xlabel("nominal confidence (%)")
    ax.set_ylabel("held-out coverage (% of test runs inside)")
    ax.set_title("Held-out coverage of the prediction intervals (LOO-conformal)", fontsize=9)
    ax.legend(fontsize=7)
    linear_ticks(ax)
    save(fig, path, watermark)
    return path


def fig_thresholds(result: EvaluationResult, path: Path, *, watermark: str | None = None) -> Path:
    plt = pyplot()
    names = _order(result)
    fig, axes = plt.subplots(1, 2, figsize=(11, 4), sharey=True)
    inch_margins(fig, left=0.75, top=0.4, bottom=0.6, wspace=0.08)

    def arr(r: dict[str, Any], key: str) -> np.ndarray:
        return np.array([np.nan if v is None else v for v in r[key]], dtype=float)

    for name in names:
        r = result.thresholds(name)
        thr = np.array(r["threshold_flops"], dtype=float)
        # interval decision: three outcomes, so "uncertain" is its own curve, never counted as a wrong "below"
        (line,) = axes[0].plot(thr, arr(r, "fp_rate"), "-", label=f"{name} wrongly accused")
        c = line.get_color()
        axes[0].plot(thr, arr(r, "wrong_below_rate"), "--", color=c, label=f"{name} wrong below")
        axes[0].plot(thr, arr(r, "uncertain_rate"), ":", color=c, label=f"{name} uncertain")
        # point decision: two outcomes; a run above T not declared above is a wrong "below"
        axes[1].plot(thr, arr(r, "point_fp_rate"), "-", color=c, label=f"{name} wrongly accused")
        axes[1].plot(thr, arr(r, "point_fn_rate"), "--", color=c, label=f"{name} wrong below")
    axes[0].set_title(f"interval decision ({result.confidence:.0%}): 'above' iff lower bound > T", fontsize=9)
    axes[1].set_title("point decision: 'above' iff estimate > T", fontsize=9)
    for ax in axes:
        ax.set_xscale("log")
        ax.set_xlabel("threshold T (FLOP)")
        linear_ticks(ax)
    axes[0].set_ylabel("rate (share of held-out runs in the class)")
    axes[0].legend(fontsize=6, ncol=3)
    save(fig, path, watermark)
    return path


def write_figures(
    result: EvaluationResult, outdir: str | os.PathLike[str], *, watermark: str | None = None
) -> list[Path]:
    """Write all evaluation figures as PNG into ``outdir`` (created if needed); returns their paths.

    ``watermark`` (e.g. ``"SIMULATED"``) is drawn faintly across every figure.
    """
    out = Path(outdir)
    if out.exists() and not out.is_dir():
        raise InputError("exists and is not a directory", file=str(out), field="--figures")
    out.mkdir(parents=True, exist_ok=True)
    return [
        fig4_per_workload(result, out / "fig4_per_workload.png", watermark=watermark),
        fig5_by_hyperparameter(result, out / "fig5_by_hyperparameter.png", watermark=watermark),
        fig6_ablation(result, out / "fig6_ablation.png", watermark=watermark),
        fig_coverage(result, out / "coverage.png", watermark=watermark),
        fig_thresholds(result, out / "threshold_rates.png", watermark=watermark),
    ]
