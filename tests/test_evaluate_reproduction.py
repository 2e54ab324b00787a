"""The study's held-out figures, reproduced with 200 random 14/7 splits, and our default against them."""

from __future__ import annotations

import json

import numpy as np
import pytest

from flopwatch.estimate.features import FrontierGate
from flopwatch.evaluate.splits import draw_splits, evaluate_models
from flopwatch.records import load_records

# Fowler 2026 (Jetson Orin Nano), 200 random 14/7 splits of the 21 fp32 frontier runs.
PUBLISHED = {"eq1": {"mae_pct": 4.48, "frac": 0.59}, "eq2": {"mae_pct": 4.55, "frac": 0.135}}


@pytest.fixture(scope="module")
def v2(v2_records_path):
    return load_records(v2_records_path, require=("net_energy_j", "duration_s", "total_flops"))


@pytest.fixture(scope="module")
def result(v2):
    return evaluate_models(v2, ["eq1", "eq2", "default"], n_splits=200, n_train=14, seed=0)


def test_published_models_reproduced_within_split_noise(result):
    """Issue 2: MAE within ±0.5 pp of 4.48 / 4.55 %, share of splits with a run >10 % off within ±12 points."""
    d = result.to_dict(detail=False)
    assert d["n_frontier"] == 21 and d["n_splits"] == 200 and d["n_train"] == 14 and d["n_test"] == 7
    for name, pub in PUBLISHED.items():
        m = d["models"][name]
        assert abs(m["mae_pct"] - pub["mae_pct"]) <= 0.5, (name, m["mae_pct"])
        assert abs(m["frac_splits_any_over_10pct"] - pub["frac"]) <= 0.12, (
            name,
            m["frac_splits_any_over_10pct"],
        )
    # the study's SD is of |error| (eq. 2: 3.22 published)
    assert d["models"]["eq2"]["sd_pct"] == pytest.approx(3.22, abs=0.3)


def test_default_beats_both_published_models_on_the_same_splits(result):
    d = result.to_dict(detail=False)
    mae = {k: v["mae_pct"] for k, v in d["models"].items()}
    assert mae["default"] < mae["eq1"] and mae["default"] < mae["eq2"]
    # Issue 2: >= 0.3 pp below both on the same splits. Seed 0 gives 0.31 pp (eq. 1) and 0.62 pp (eq. 2);
    # the eq. 1 margin is thin: over split seeds 0–9 it ranges 0.29–0.51 pp (docs/estimator.md).
    assert d["default_vs_published"]["eq1"]["mae_diff_pp"] >= 0.3
    assert d["default_vs_published"]["eq2"]["mae_diff_pp"] >= 0.3


@pytest.mark.slow
def test_default_improvement_over_1000_splits(v2):
    """Over five independent draws (1000 splits) the default is >= 0.3 pp below both published models on
    average (0.44 pp below eq. 1, 0.51 pp below eq. 2 for seeds 0–4)."""
    gaps = {"eq1": [], "eq2": []}
    for seed in range(5):
        d = evaluate_models(v2, ["eq1", "eq2", "default"], seed=seed).to_dict(detail=False)
        for base in gaps:
            gaps[base].append(d["models"][base]["mae_pct"] - d["models"]["default"]["mae_pct"])
    assert np.mean(gaps["eq1"]) >= 0.3 and np.mean(gaps["eq2"]) >= 0.3


def test_intervals_cover_about_their_confidence(result):
    for name in ("eq1", "eq2", "default"):
        cov = result.coverage(name)
        assert 0.85 <= cov <= 0.97, (name, cov)
        assert result.models[name].coverage_at(0.5) == pytest.approx(0.5, abs=0.1)


def test_splits_are_seeded_and_disjoint():
    tr, te = draw_splits(21, 200, 14, seed=0)
    tr2, _ = draw_splits(21, 200, 14, seed=0)
    assert np.array_equal(tr, tr2)
    assert tr.shape == (200, 14) and te.shape == (200, 7)
    for a, b in zip(tr, te, strict=True):
        assert not set(a) & set(b) and len(set(a) | set(b)) == 21
    assert not np.array_equal(tr, draw_splits(21, 200, 14, seed=1)[0])


def test_evaluation_outputs_are_complete_and_json(result):
    d = result.to_dict(detail=True)
    json.dumps(d, allow_nan=False)
    m = d["models"]["default"]
    assert len(m["per_workload"]) == 21 and all(r["n_tested"] > 0 for r in m["per_workload"])
    assert set(m["by_hyperparameter"]) == {"d_model", "batch_size", "seq_len", "num_layers"}
    thr = m["threshold_rates"]
    assert len(thr["threshold_flops"]) == 25
    assert min(thr["threshold_flops"]) < 1e14 < max(thr["threshold_flops"])  # scaled to the data
    assert d["filters"]["excluded_counts"] == {"below_min_util": 5, "precision": 12}
    assert set(m["idle_shift_mae_pct"]) == {"-0.08", "+0.08"}


def test_filters_are_configurable(v2):
    allp = evaluate_models(v2, ["eq2"], n_splits=10, gate=FrontierGate(min_util=0.8, precision="all"))
    assert allp.to_dict(detail=False)["n_frontier"] == 23
    nogate = evaluate_models(v2, ["eq2"], n_splits=10, n_train=20, gate=FrontierGate(min_util=0.0))
    assert nogate.to_dict(detail=False)["n_frontier"] == 26


def test_chunked_fit_equals_one_batch(v2):
    """Large --splits are fitted in blocks (bounded memory); the result is identical to one batch."""
    from flopwatch.estimate.features import Features, ground_truth
    from flopwatch.estimate.models import get_model
    from flopwatch.evaluate.splits import _fit_chunked

    kept = FrontierGate().apply(v2).kept
    X, F = Features.from_records(kept), ground_truth(kept)
    tr, _ = draw_splits(len(kept), 23, 14, seed=3)
    for name in ("eq1", "default", "select"):
        est = get_model(name)
        whole = est.fit_batch(X.take(tr), F[tr])
        parts = _fit_chunked(est, X.take(tr), F[tr], chunk=5)
        np.testing.assert_array_equal(parts.loo_flops, whole.loo_flops)
        for k in whole.params:
            np.testing.assert_array_equal(parts.params[k], whole.params[k])
        for k in whole.hyper:
            np.testing.assert_array_equal(parts.hyper[k], whole.hyper[k])


def test_threshold_summary_matches_the_sweep(result):
    """The compact summary printed by `flopwatch evaluate` is the full sweep's extremes and means; on v2 the
    interval decision never falsely says "above", the point-estimate decision does (docs/estimator.md)."""
    full = result.thresholds("default")
    s = result.to_dict(detail=False)["models"]["default"]["threshold_summary"]
    fp = [x for x in full["fp_rate"] if x is not None]
    fn = [x for x in full["fn_rate"] if x is not None]
    assert s["max_fp_rate"] == max(fp) and s["mean_fn_rate"] == pytest.approx(np.mean(fn))
    assert s["n_thresholds"] == 25 and s["min_threshold_flops"] < 1e14 < s["max_threshold_flops"]
    assert s["max_fp_rate"] == 0.0 and s["point_max_fp_rate"] > 0.2
