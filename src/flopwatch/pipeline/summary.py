"""``summary.json`` of ``flopwatch run``: assembled here and nowhere else.

:func:`build_summary` is the one place the summary dict is put together from the plan, the execution and the
analysis (contract keys in :data:`SUMMARY_KEYS`, extra keys freely added); :func:`failed_summary` is its
counterpart for a run whose analysis failed. A block another module computes (e.g. a report headline) is added in
:func:`build_summary`, beside the others.
"""

from __future__ import annotations

from typing import Any

from flopwatch import __version__
from flopwatch.errors import FlopwatchError
from flopwatch.evaluate.headline import yardstick
from flopwatch.pipeline.analyse import Analysis
from flopwatch.pipeline.device import DeviceChoice
from flopwatch.pipeline.execute import Execution
from flopwatch.pipeline.layout import OUTPUT_FILES, REPORT_FILE, SUMMARY_FILE
from flopwatch.pipeline.plan import Plan, RunOptions
from flopwatch.report.headline import apply_headline

#: run/2: the verdict ``headline``; run/1's ``published_models_mae_pct`` split into ``study_models_heldout_mae_pct``
#: and ``published_heldout_mae_pct`` (see flopwatch.report.headline)
SUMMARY_SCHEMA = "flopwatch.run/2"

#: Keys of summary.json that acceptance checks rely on (contract).
SUMMARY_KEYS = (
    "device",
    "simulated",
    "n_workloads",
    "n_frontier",
    "default_model",
    "heldout_mae_pct",
    "frac_splits_any_over_10pct",
    "idle_power_w",
)

_HELDOUT_KEYS = (
    "mae_pct",
    "sd_pct",
    "mean_signed_pct",
    "median_abs_pct",
    "p90_abs_pct",
    "worst_pct",
    "coverage",
    "confidence",
    "median_interval_halfwidth_pct",
)


def constant_jpf_baseline(ev: Any) -> dict[str, float]:
    """The no-model yardstick on the evaluation's own splits: every test run predicted as E_net / (median J/FLOP of
    its split's calibration runs); summary.json's ``constant_jpf_baseline`` (computed once, with the headline, by
    :func:`flopwatch.evaluate.headline.yardstick`)."""
    return yardstick(ev)


def _run_keys(choice: DeviceChoice, plan: Plan, opts: RunOptions, ex: Execution) -> dict[str, Any]:
    """What was asked for and where: the keys a completed and a failed run's summary share."""
    return {
        "device_name": ex.device_name,
        "device_reason": choice.reason,
        "spec_key": choice.spec_key,
        "sweep": plan.sweep_name,
        "sweep_note": plan.sweep_note,
        "plan_notes": plan.notes,
        "quick": opts.quick,
        "budget_s": opts.budget_s,
        "seed": opts.seed,
    }


def build_summary(
    choice: DeviceChoice, plan: Plan, opts: RunOptions, ex: Execution, a: Analysis
) -> dict[str, Any]:
    """The summary of a completed run (without ``wall_time_s``/``started_wall``, which the orchestrator adds)."""
    outdir = opts.outdir
    ev = a.evaluation
    evd = ev.to_dict()
    dm = ev.default_model
    metrics = evd["models"][dm]
    summary: dict[str, Any] = {
        "device": choice.label,
        "simulated": bool(choice.simulated),
        "n_workloads": len(ex.records),
        "n_frontier": len(a.gate.kept),
        "default_model": dm,
        "heldout_mae_pct": metrics["mae_pct"],
        "frac_splits_any_over_10pct": metrics["frac_splits_any_over_10pct"],
        "idle_power_w": a.detection.idle_power_w,
        # extra keys
        "schema": SUMMARY_SCHEMA,
        "flopwatch_version": __version__,
        **_run_keys(choice, plan, opts, ex),
        "rate_hz": opts.rate_hz,
        "idle_baseline_s": plan.idle_s,
        "idle_source": a.detection.idle_source,
        "calibration_dtype": a.calibration_dtype,
        "n_detected": len(a.detection.segments),
        "n_measured": len(a.measured),
        "gate": {**a.gate.to_dict(), "kept_labels": a.gate.kept.labels},
        "join_mismatches": [m.to_dict() for m in a.mismatches],
        "component": a.profile.component,
        "profile_sha256": a.profile.sha256(),
        "profile_params": a.profile.params,
        "heldout": {k: metrics.get(k) for k in _HELDOUT_KEYS},
        "heldout_mae_pct_by_model": {m: d["mae_pct"] for m, d in evd["models"].items()},
        "frac_splits_any_over_10pct_by_model": {
            m: d["frac_splits_any_over_10pct"] for m, d in evd["models"].items()
        },
        # estimators the data cannot support, with the reason
        "skipped_models": dict(ev.skipped_models),
        "n_splits": evd["n_splits"],
        "n_train": evd["n_train"],
        "n_test": evd["n_test"],
        "threshold": {
            "threshold_flops": a.threshold_flops,
            "verdicts": [v.to_dict() for v in a.verdicts],
            "rates": ev.thresholds(dm),
        },
        "sampler": ex.sampler_stats,
        "trace_rows": a.trace_rows,
        "figures": [str(p.relative_to(outdir)) for p in a.figures],
        "figure_errors": a.figure_errors,
        "outputs": [n for n in OUTPUT_FILES if (outdir / n).exists()] + [SUMMARY_FILE, REPORT_FILE],
    }
    if ex.simulation is not None:  # the twin's own facts, carried by the execution that ran it
        summary["simulation"] = ex.simulation.to_dict()
    # the verdict on top of summary.json and the report, with the keys derived from it (constant_jpf_baseline,
    # study_models_heldout_mae_pct, published_heldout_mae_pct): numbers from evaluate/, words from report/
    return apply_headline(summary, ev, a.heldout)


def failed_summary(
    choice: DeviceChoice, plan: Plan, opts: RunOptions, ex: Execution, err: BaseException
) -> dict[str, Any]:
    """The summary of a run whose analysis failed: contract keys present (null where unknown) plus the error."""
    return {
        "device": choice.label,
        "simulated": bool(choice.simulated),
        "n_workloads": len(ex.records),
        "n_frontier": None,
        "default_model": None,
        "heldout_mae_pct": None,
        "frac_splits_any_over_10pct": None,
        "idle_power_w": None,
        "schema": SUMMARY_SCHEMA,
        "flopwatch_version": __version__,
        "error": str(err) if isinstance(err, FlopwatchError) else f"{type(err).__name__}: {err}",
        **_run_keys(choice, plan, opts, ex),
        "join_mismatches": [
            {"label": f["label"], "kind": "failed", "detail": f["error"]} for f in ex.failures
        ],
        "outputs": [n for n in OUTPUT_FILES if (opts.outdir / n).exists()],
    }
