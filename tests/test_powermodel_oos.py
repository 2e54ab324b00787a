"""Out-of-sample evaluation and the inverse model."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from flopwatch.errors import InputError, NotFittedError
from flopwatch.powermodel.datasets import load_mascots
from flopwatch.powermodel.oos import InverseModel, evaluate_inverse, evaluate_power_oos, power_predictions_oos


@pytest.fixture(scope="module")
def a100() -> pd.DataFrame:
    return load_mascots("A100")


def test_lomo_never_trains_on_the_held_out_model(a100: pd.DataFrame) -> None:
    pred = power_predictions_oos(a100, by="gpu", scheme="lomo")
    assert pred["pred_w"].notna().all()
    # Refit by hand without one model: identical prediction.
    held = "gpt2-xl"
    train = a100[a100.model != held]
    coef = np.polyfit(train.mfu_pct, train.power_w, 1)
    test = pred[pred.model == held]
    np.testing.assert_allclose(test["pred_w"], np.polyval(coef, test.mfu_pct), rtol=1e-9)


def test_grouped_kfold_keeps_repeats_together(a100: pd.DataFrame) -> None:
    pred = power_predictions_oos(a100, by="cell", scheme="kfold", k=5, seed=3)
    folds = pred.groupby(["model", "dtype", "batch_size"])["fold"].nunique()  # both context windows too
    assert (folds == 1).all()


def test_oos_is_worse_than_in_sample_and_rows_leak(a100: pd.DataFrame) -> None:
    r = evaluate_power_oos(a100, k=5, seed=0)["per_gpu"]["A100"]
    assert r["cell_in_sample"]["mape_pct"] < r["cell_kfold_rows"]["mape_pct"] < r["cell_kfold"]["mape_pct"]
    assert r["cell_kfold"]["mape_pct"] < r["cell_lomo"]["mape_pct"]
    assert r["gpu_in_sample"]["mape_pct"] < r["gpu_lomo"]["mape_pct"]
    assert r["cell_in_sample"]["mape_pct"] == pytest.approx(1.48, abs=0.01)


def test_inverse_unknown_dtype_is_worse(a100: pd.DataFrame) -> None:
    r = evaluate_inverse(a100, min_batch=32, k=5, seed=0)["per_gpu"]["A100"]
    for key in ("power_lomo", "power_kfold"):
        assert r[key]["known_dtype"]["mape_pct"] < r[key]["unknown_dtype_pooled"]["mape_pct"]
        b_known, b_unknown = r[key]["bound_known_dtype"], r[key]["bound_unknown_dtype"]
        assert b_unknown["coverage"] >= b_known["coverage"]
        assert b_unknown["median_overestimate_pct"] > b_known["median_overestimate_pct"]


def test_inverse_model_estimate() -> None:
    df = load_mascots()
    m = InverseModel(min_batch=32).fit(df)
    big = df[(df.gpu == "L40") & (df.dtype == "fp16") & (df.batch_size == 128)]
    true_rate = float((big.tokens_per_s * big.flops_per_token).mean())
    est = m.estimate("L40", float(big.power_w.mean()), util_pct=float(big.gpu_util_pct.mean()), dtype="fp16")
    assert est["flop_rate"] == pytest.approx(true_rate, rel=0.35)
    assert est["upper_flop_rate"] > est["flop_rate"]
    unk = m.estimate("L40", float(big.power_w.mean()), util_pct=float(big.gpu_util_pct.mean()))
    assert unk["upper_flop_rate"] >= est["upper_flop_rate"]
    assert "fp32" in unk["per_dtype"]
    assert unk["extrapolated"] is False
    far = m.estimate("A100", 5000.0, util_pct=90.0)  # 12x the A100's TDP: flagged, whatever the dtype
    assert far["extrapolated"] is True
    mi = m.estimate("MI210", 150.0)  # utilisation is not used on the MI210
    assert mi["flop_rate"] > 0
    with pytest.raises(InputError, match="util_pct"):
        m.estimate("L40", 250.0)
    with pytest.raises(NotFittedError):
        InverseModel().estimate("L40", 250.0, util_pct=90)
    with pytest.raises(InputError):
        InverseModel(min_batch=1000).fit(df)
