"""The numbers of a run's headline, computed from the evaluation: held-out accuracy, the no-model yardstick and
the model's paired gain over it, the study's equations as evaluated here, and — two answers, never mixed — the
verifier's three-valued verdicts of held-out runs (``estimate.verdict.assess``: sound bounds) and the calibrated
interval's own decision rates, at the sweep's quantiles and at fixed margins. Every number is held-out: a run is judged only
by a profile calibrated without it.

The wording (what the numbers support, in sentences) is :mod:`flopwatch.report.headline`'s; this module has no
words a reader sees, so that ``evaluate/`` never imports ``report/``.
"""

from __future__ import annotations

from typing import Any

import numpy as np

#: Held-out results Fowler (2026) published for the Jetson Orin Nano (21 real fp32 runs, 200 random 14/7 splits).
PUBLISHED: dict[str, dict[str, Any]] = {
    "eq1": {"mae_pct": 4.48, "sd_pct": 3.78, "frac_splits_any_over_10pct": 0.59},
    "eq2": {"mae_pct": 4.55, "sd_pct": 3.22, "frac_splits_any_over_10pct": 0.135},
}
PUBLISHED_SOURCE = (
    "Fowler 2026, 'Estimating LLM Training FLOPs on the Nvidia Jetson Orin Nano' (verification-games): "
    "21 real fp32 runs on a Jetson Orin Nano, 200 random 14/7 splits"
)
#: Thresholds at these quantiles of the frontier runs' ground truth: inside the calibrated range, with runs on
#: both sides, so every verdict can be checked against the truth.
THRESHOLD_QUANTILES = (0.25, 0.5, 0.75)
#: Margins of the resolution table: a run this far above (below) a threshold.
MARGINS_PCT = (10.0, 25.0, 50.0)
#: Thresholds T = f × truth at which the verdict's decisiveness is reported: the red team's 0.5, 0.8 and 2, and
#: further out, since with energy alone a run is "below" only under a threshold several times its FLOPs (about
#: 3 × on the A100 twin with its clock observed, about 14 × on the Orin twin).
DECISIVE_FACTORS = (0.5, 0.8, 2.0, 3.0, 5.0, 10.0, 20.0)


def yardstick_abs_pct(ev: Any) -> tuple[np.ndarray, np.ndarray]:
    """The no-model yardstick on the evaluation's splits: each test run's FLOPs = E_net / (median J/FLOP of its
    split's calibration runs). Returns (|error| %, (splits, n_test); J/FLOP of every frontier run)."""
    e = np.array([float(r.net_energy_j) for r in ev.records])
    jpf = e / ev.truth
    k = np.median(jpf[ev.train_idx], axis=1, keepdims=True)
    return 100.0 * np.abs(e[ev.test_idx] / k / ev.truth[ev.test_idx] - 1.0), jpf


def _yardstick_stats(y: np.ndarray, jpf: np.ndarray) -> dict[str, float]:
    """The yardstick's numbers: MAE, share of splits with a test run off by > 10 %, and the spread of J/FLOP
    (``jpf_cv_pct``: how far from proportional energy and FLOPs are on this device)."""
    return {
        "mae_pct": float(y.mean()),
        "frac_splits_any_over_10pct": float(np.mean(y.max(axis=1) > 10.0)),
        "jpf_cv_pct": float(100 * jpf.std(ddof=1) / jpf.mean()),
    }


def yardstick(ev: Any) -> dict[str, float]:
    """The no-model yardstick's numbers on the evaluation's own splits (see :func:`yardstick_abs_pct`): an
    estimator is worth its features only by how far it beats this. The headline's ``yardstick`` block and
    summary.json's ``constant_jpf_baseline`` carry these."""
    return _yardstick_stats(*yardstick_abs_pct(ev))


def count_verdicts(
    truth: np.ndarray, thr: np.ndarray, above: np.ndarray, below: np.ndarray
) -> dict[str, Any]:
    """Counts of a three-valued decision (``above``/``below`` masks, the rest uncertain) of held-out runs against
    the truth at thresholds ``thr`` (same shape as ``truth``, or a scalar). One name per error: "wrong below"
    (``wrong_below``: declared below, truly above — the costly miss) and "wrongly accused" (``wrong_accuse``)."""
    t_above = truth > thr
    n = int(truth.size)
    correct = int(np.sum((above & t_above) | (below & ~t_above)))
    wrong_accuse = int(np.sum(above & ~t_above))
    wrong_below = int(np.sum(below & t_above))
    uncertain = n - correct - wrong_accuse - wrong_below
    return {
        "n": n,
        "n_truth_above": int(t_above.sum()),
        "n_truth_below": int(n - t_above.sum()),
        "correct": correct,
        "uncertain": int(uncertain),
        "wrong_accuse": wrong_accuse,
        "wrong_below": wrong_below,
        "correct_rate": correct / n if n else None,
        "uncertain_rate": uncertain / n if n else None,
        "wrong_rate": (wrong_accuse + wrong_below) / n if n else None,
    }


def decisions(truth: np.ndarray, lower: np.ndarray, upper: np.ndarray, thr: np.ndarray) -> dict[str, Any]:
    """The calibrated interval taken as a decision (above iff lower > T, below iff upper < T) at thresholds
    ``thr``: the estimate's accuracy, not a verdict (a verifier's "below" needs the sound bound)."""
    return count_verdicts(truth, thr, lower > thr, upper < thr)


def verdict_decisions(ha: Any, thr: np.ndarray | float) -> dict[str, Any]:
    """The verifier's verdicts (:meth:`~flopwatch.evaluate.threshold.HeldoutAssessments.verdicts`, i.e.
    ``estimate.verdict.assess`` and its one threshold rule) of held-out runs at thresholds ``thr``."""
    v = ha.verdicts(thr)
    return count_verdicts(ha.truth, np.asarray(thr, dtype=float), v == "above", v == "below")


def _threshold_rows(
    truth: np.ndarray, decide: Any, quantile_thresholds: list[tuple[float, float]]
) -> dict[str, Any]:
    """The rows of a threshold table: at the sweep's quantiles and at each margin, by ``decide(thr)``."""
    at_q = [{"threshold_flops": t, "quantile": q, **decide(np.float64(t))} for q, t in quantile_thresholds]
    by_margin = []
    for mg in MARGINS_PCT:
        f = 1.0 + mg / 100.0
        for side, thr in (("above", truth / f), ("below", truth * f)):
            by_margin.append({"margin_pct": mg, "run_is": side, **decide(thr)})
    return {"at_sweep_quantiles": at_q, "by_margin": by_margin}


def headline_numbers(ev: Any, sound: Any = None) -> dict[str, Any]:
    """The headline's numbers for ``ev`` (an :class:`~flopwatch.evaluate.splits.EvaluationResult` of a run's
    frontier runs): ``heldout`` (the default model), ``yardstick``, ``gain_over_yardstick_pp`` (paired per split:
    yardstick MAE − model MAE), ``study_models_here`` (eq. 1/eq. 2 evaluated here), ``thresholds``
    (``at_sweep_quantiles``, ``by_margin``), ``idle_drift`` and ``truth_range_flops``. Every rate is over held-out
    runs pooled across the splits; every count is an int."""
    dm = ev.default_model
    m = ev.models[dm]
    a = m.abs_pct
    y, jpf = yardstick_abs_pct(ev)
    d = y.mean(axis=1) - a.mean(axis=1)
    gain = {
        "mean_pp": float(d.mean()),
        "p025": float(np.quantile(d, 0.025)),
        "p975": float(np.quantile(d, 0.975)),
        "frac_splits_better": float(np.mean(d > 0)),
    }
    study_here = {
        name: {
            "mae_pct": float(ev.models[name].abs_pct.mean()),
            "frac_splits_any_over_10pct": float(np.mean(ev.models[name].abs_pct.max(axis=1) > 10.0)),
        }
        for name in ("eq1", "eq2")
        if name in ev.models
    }
    truth = ev.truth[ev.test_idx]
    qt = [(q, float(np.exp(np.quantile(np.log(ev.truth), q)))) for q in THRESHOLD_QUANTILES]
    calibrated = {
        "answer": "calibrated estimate",
        "confidence": float(ev.confidence),
        "coverage": float(ev.coverage(dm)),
        "n_splits": int(ev.n_splits),
        **_threshold_rows(truth, lambda thr: decisions(truth, m.lower_flops, m.upper_flops, thr), qt),
    }
    verdicts = None
    if sound is not None:
        verdicts = {
            "answer": "verdict",
            "n": int(sound.n),
            "n_splits": int(len(sound.splits)),
            "n_test": int(sound.truth.shape[1]) if sound.truth.ndim == 2 else 0,
            "trace_windows": bool(sound.windowed),
            "failed_splits": list(sound.failed_splits),
            **_threshold_rows(sound.truth, lambda thr: verdict_decisions(sound, thr), qt),
            "decisiveness": sound.decisiveness(DECISIVE_FACTORS),
            "warnings": sound.warning_counts(),
        }
    return {
        "heldout": {
            "model": dm,
            "mae_pct": float(a.mean()),
            "frac_splits_any_over_10pct": float(np.mean(a.max(axis=1) > 10.0)),
            "p90_abs_pct": float(np.quantile(a, 0.9)),
            "n_splits": int(ev.n_splits),
            "n_train": int(ev.train_idx.shape[1]),
            "n_test": int(ev.test_idx.shape[1]),
            "n_frontier": int(len(ev.truth)),
        },
        "yardstick": _yardstick_stats(y, jpf),
        "gain_over_yardstick_pp": gain,
        "study_models_here": study_here,
        "verdicts": verdicts,
        "calibrated_interval": calibrated,
        "idle_drift": {
            "shifts_w": sorted(m.idle_shift_mae),
            "mae_pct": {f"{k:+g}": v for k, v in sorted(m.idle_shift_mae.items())},
        },
        "truth_range_flops": (float(ev.truth.min()), float(ev.truth.max())),
    }


def margin_row(
    numbers: dict[str, Any], margin_pct: float, run_is: str = "above", table: str = "verdicts"
) -> dict[str, Any]:
    """The ``by_margin`` row of :func:`headline_numbers`' ``table`` (``verdicts`` or ``calibrated_interval``) for a
    run ``margin_pct`` above (below) a threshold."""
    return next(
        r for r in numbers[table]["by_margin"] if r["margin_pct"] == margin_pct and r["run_is"] == run_is
    )
