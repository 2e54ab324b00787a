"""The vectorised held-out power predictions are bit-identical to the per-fold pandas fits they replaced."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from flopwatch.powermodel.datasets import load_aggregates
from flopwatch.powermodel.fit import BY_KEYS, fit_power_model
from flopwatch.powermodel.oos import SCHEMES, _folds, _gpu_rng, power_predictions_oos


def _reference(df: pd.DataFrame, by: str, scheme: str, k: int, seed: int, x: str = "mfu_pct") -> pd.DataFrame:
    """flopwatch's implementation before vectorisation: fit_power_model per fold, joined on the group keys."""
    keys = list(BY_KEYS[by])
    out = df.copy()
    out["pred_w"] = np.nan
    out["fold"] = -1
    for gpu in df["gpu"].unique():
        gmask = (df["gpu"] == gpu).to_numpy()
        sub = df[gmask]
        for f, test in enumerate(_folds(sub, scheme, k, _gpu_rng(seed, gpu))):
            train = sub[~test]
            if len(train) < 3 or not test.any():
                continue
            m = fit_power_model(train, by=by, x=x)
            p = m.params[["intercept", "slope"]].reset_index()
            t = sub[test]
            j = t[keys].reset_index(drop=True).merge(p, on=keys, how="left")
            pred = (j["intercept"] + j["slope"] * t[x].to_numpy()).to_numpy()
            idx = np.flatnonzero(gmask)[test]
            out.iloc[idx, out.columns.get_loc("pred_w")] = pred
            out.iloc[idx, out.columns.get_loc("fold")] = f
    return out


@pytest.fixture(scope="module")
def runs() -> pd.DataFrame:
    full = load_aggregates(None, keep_nan_mfu=True).df
    return full[full["mfu_pct"].notna()]


@pytest.mark.parametrize("by", sorted(BY_KEYS))
@pytest.mark.parametrize("scheme", SCHEMES)
def test_predictions_identical_to_per_fold_fits(runs: pd.DataFrame, by: str, scheme: str) -> None:
    new = power_predictions_oos(runs, by=by, scheme=scheme, k=5, seed=0)
    old = _reference(runs, by, scheme, 5, 0)
    assert np.array_equal(new["pred_w"].to_numpy(), old["pred_w"].to_numpy(), equal_nan=True)
    assert np.array_equal(new["fold"].to_numpy(), old["fold"].to_numpy())
    assert new["fold"].dtype == old["fold"].dtype and list(new.columns) == list(old.columns)
    assert new.attrs == runs.attrs  # the caller's frame and its metadata are untouched


def test_a_cell_missing_from_training_predicts_nan(runs: pd.DataFrame) -> None:
    sub = runs[runs["gpu"] == runs["gpu"].unique()[0]]
    new = power_predictions_oos(sub, by="cell", scheme="lomo")
    old = _reference(sub, "cell", "lomo", 5, 0)
    assert np.array_equal(new["pred_w"].to_numpy(), old["pred_w"].to_numpy(), equal_nan=True)
