"""Grouped OLS, bootstrap and the reproduction of the MASCOTS tables."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from flopwatch.errors import InputError, ProfileError
from flopwatch.powermodel import published
from flopwatch.powermodel.datasets import load_mascots
from flopwatch.powermodel.fit import (
    PowerModelResult,
    bootstrap_gpu_stats,
    fit_power_model,
    grouped_ols,
    noise_floor_pct,
)
from flopwatch.powermodel.reproduce import Reproduction, printed_equal, reproduce


@pytest.fixture(scope="module")
def mascots() -> pd.DataFrame:
    return load_mascots()


@pytest.fixture(scope="module")
def repro() -> Reproduction:
    return reproduce(n_boot=2000, seed=0)


def test_grouped_ols_matches_statsmodels(rng: np.random.Generator) -> None:
    sm = pytest.importorskip("statsmodels.api")
    codes = np.repeat(np.arange(4), 30)
    x = rng.uniform(0, 50, codes.size)
    y = 100 + (codes + 1) * x + rng.normal(0, 5, codes.size)
    fit = grouped_ols(x, y, codes, 4)
    for g in range(4):
        m = codes == g
        ref = sm.OLS(y[m], sm.add_constant(x[m])).fit()
        np.testing.assert_allclose([fit.intercept[g], fit.slope[g]], ref.params, rtol=1e-10)
        np.testing.assert_allclose(fit.ssr[g], ref.ssr, rtol=1e-10)
        np.testing.assert_allclose(1 - fit.ssr[g] / fit.sst[g], ref.rsquared, rtol=1e-10)


def test_degenerate_group_is_flagged() -> None:
    fit = grouped_ols(
        np.array([1.0, 1.0, 2.0, 3.0]), np.array([5.0, 7.0, 1.0, 2.0]), np.array([0, 0, 1, 1]), 2
    )
    assert fit.degenerate.tolist() == [True, False]
    assert fit.slope[0] == 0 and fit.intercept[0] == 6.0


def test_fit_result_api(mascots: pd.DataFrame) -> None:
    m = fit_power_model(mascots, by="cell")
    assert list(m.params.index.names) == ["gpu", "dtype", "batch_size"]
    for c in ("intercept", "slope", "n", "r2", "mape_pct", "resid_sd_pct"):
        assert c in m.params.columns
    assert m.nobs == len(mascots)
    p = m.predict("A100", "bf16", 128, [10.0, 30.0])
    r = m.params.loc[("A100", "bf16", 128)]
    np.testing.assert_allclose(p, r["intercept"] + r["slope"] * np.array([10.0, 30.0]))
    pred, lo, hi = m.predict_interval("A100", "bf16", 128, 30.0)
    assert lo < pred < hi
    ci = m.conf_int()
    assert (ci["slope_lo"] <= m.params["slope"]).all() and (m.params["slope"] <= ci["slope_hi"]).all()
    before = m.params.copy()
    assert "power_w ~ 1 + mfu_pct" in m.summary()
    pd.testing.assert_frame_equal(before, m.params)  # summary() never mutates
    with pytest.raises(InputError, match="no fitted cell"):
        m.predict("A100", "fp16", 3, 1.0)
    with pytest.raises(InputError, match="needs dtype"):
        m.predict("A100", x=1.0)


def test_round_trip_to_dict_and_file(mascots: pd.DataFrame, tmp_path: Path) -> None:
    for by in ("gpu", "cell"):
        m = fit_power_model(mascots, by=by)
        d = json.loads(json.dumps(m.to_dict()))
        back = PowerModelResult.from_dict(d)
        pd.testing.assert_frame_equal(back.params, m.params, check_dtype=False)
        np.testing.assert_allclose(back.predict("L40", "fp16", 64, 20.0), m.predict("L40", "fp16", 64, 20.0))
    path = tmp_path / "m.json"
    m.save(path)
    assert PowerModelResult.load(path).by == "cell"
    path.write_text('{"schema": "other"}')
    with pytest.raises(ProfileError, match="not a flopwatch power model"):
        PowerModelResult.load(path)
    path.write_text("{nope")
    with pytest.raises(ProfileError, match="invalid JSON"):
        PowerModelResult.load(path)


def test_fit_rejects_bad_arguments(mascots: pd.DataFrame) -> None:
    with pytest.raises(InputError):
        fit_power_model(mascots, by="model")
    with pytest.raises(InputError):
        fit_power_model(mascots, x="temp_c")
    with pytest.raises(InputError, match="lacks column"):
        fit_power_model(mascots.drop(columns=["power_w"]))


def test_bootstrap_is_seeded_and_matches_a_loop(rng: np.random.Generator) -> None:
    x = rng.uniform(0, 40, 60)
    y = 80 + 3 * x + rng.normal(0, 8, 60)
    a = bootstrap_gpu_stats(x, y, n_boot=50, rng=np.random.default_rng(1))
    b = bootstrap_gpu_stats(x, y, n_boot=50, rng=np.random.default_rng(1))
    np.testing.assert_array_equal(a.r2, b.r2)
    # Same resamples, solved one by one with numpy's lstsq, give the same statistics.
    idx = np.random.default_rng(1).integers(0, 60, size=(50, 60))
    for i in (0, 17, 49):
        xb, yb = x[idx[i]], y[idx[i]]
        coef = np.linalg.lstsq(np.c_[np.ones(60), xb], yb, rcond=None)[0]
        res = yb - coef[0] - coef[1] * xb
        assert a.slope[i] == pytest.approx(coef[1], rel=1e-9)
        assert a.r2[i] == pytest.approx(1 - res @ res / ((yb - yb.mean()) @ (yb - yb.mean())), rel=1e-9)
        assert a.mape_pct[i] == pytest.approx(np.mean(np.abs(res) / yb) * 100, rel=1e-9)


def test_table2_reproduces_published(repro: Reproduction) -> None:
    for gpu, pub in published.TABLE2.items():
        ours = repro.table2.loc[gpu]
        assert printed_equal(ours["r2"], pub["r2"], 2), (gpu, ours["r2"], pub["r2"])
        assert printed_equal(ours["mape_pct"], pub["mape_pct"], 1), (gpu, ours["mape_pct"], pub["mape_pct"])
        # The published "±" is a 95 % bootstrap half-width: ours agrees within bootstrap noise.
        assert abs(ours["r2_pm"] - pub["r2_pm"]) <= 0.011
        assert abs(ours["mape_pm"] - pub["mape_pm"]) <= 0.15
        assert ours["r2_lo"] < ours["r2"] < ours["r2_hi"]


def test_table3_reproduces_published(repro: Reproduction) -> None:
    for gpu, pub in published.TABLE3.items():
        for col in ("sd_gpu_pct", "sd_cell_pct", "noise_pct"):
            assert printed_equal(repro.table3.loc[gpu, col], pub[col], 2), (
                gpu,
                col,
                repro.table3.loc[gpu, col],
            )


def test_table4_reproduces_published(repro: Reproduction) -> None:
    for gpu, pub in published.TABLE4.items():
        for col, d in published.TABLE4_DECIMALS.items():
            assert printed_equal(repro.table4.loc[gpu, col], pub[col], d), (
                gpu,
                col,
                repro.table4.loc[gpu, col],
            )


def test_noise_floor_needs_the_empty_mfu_rows() -> None:
    full = load_mascots("MI210", keep_nan_mfu=True)
    fitted = full[full.mfu_pct.notna()]
    with_nan = noise_floor_pct(full, mean_power_w=fitted.power_w.mean())
    without = noise_floor_pct(fitted)
    assert f"{with_nan:.2f}" == "0.20"
    assert f"{without:.2f}" != "0.20"


def test_reproduction_json_contract(repro: Reproduction) -> None:
    d = json.loads(json.dumps(repro.to_dict()))
    gpus = ["A100", "L40", "L4", "Quadro RTX 5000", "RTX 4070 Ti", "MI210"]
    assert list(d["table2"]) == gpus and list(d["table3"]) == gpus
    for g in gpus:
        assert set(d["table2"][g]) >= {"r2", "mape_pct", "r2_ci", "mape_ci"}
        assert len(d["table2"][g]["r2_ci"]) == 2
        assert set(d["table3"][g]) >= {"sd_gpu_pct", "sd_cell_pct", "noise_pct"}
    assert d["all_match"] == {"II": True, "III": True, "IV": True}
    assert d["bootstrap"]["n_boot"] == 2000


def test_cell_bootstrap_matches_grouped_ols_on_the_same_resamples(mascots: pd.DataFrame) -> None:
    s = mascots[mascots.gpu == "L40"]
    cells = pd.MultiIndex.from_frame(s[["dtype", "batch_size"]]).factorize()[0]
    x, y = s.mfu_pct.to_numpy(), s.power_w.to_numpy()
    b = bootstrap_gpu_stats(x, y, n_boot=20, rng=np.random.default_rng(5), cells=cells)
    idx = np.random.default_rng(5).integers(0, len(x), size=(20, len(x)))
    for i in (0, 7, 19):
        g = grouped_ols(x[idx[i]], y[idx[i]], cells[idx[i]], cells.max() + 1)
        ref = np.sqrt(np.nansum(g.ssr) / (len(x) - 2)) / y[idx[i]].mean() * 100
        assert b.sd_cell_pct[i] == pytest.approx(ref, rel=1e-9)


def test_per_dtype_grouping(mascots: pd.DataFrame, tmp_path: Path) -> None:
    m = fit_power_model(mascots, by="dtype")
    assert list(m.params.index.names) == ["gpu", "dtype"] and len(m.params) == 17  # Quadro has no bf16
    sub = mascots[(mascots.gpu == "MI210") & (mascots.dtype == "fp16")]
    coef = np.polyfit(sub.mfu_pct, sub.power_w, 1)
    np.testing.assert_allclose(m.predict("MI210", "fp16", None, 10.0), np.polyval(coef, 10.0), rtol=1e-10)
    m.save(tmp_path / "d.json")
    assert PowerModelResult.load(tmp_path / "d.json").predict("MI210", "fp16", x=10.0) == pytest.approx(
        np.polyval(coef, 10.0)
    )
    with pytest.raises(InputError, match="no fitted model for Quadro RTX 5000 bf16"):
        m.predict("Quadro RTX 5000", "bf16", x=1.0)
