"""Beyond the paper: out-of-sample accuracy of the MFU→power models, and the inverse (power → FLOP rate).

The published fits (Tables II, III) are in-sample. Here every model is refitted without the rows it predicts:

* **leave-one-model-out (LOMO)**: per GPU, fit on two of the three LLMs, predict the third — the simulator's
  situation when it meets a model it was not calibrated on;
* **grouped k-fold**: folds of whole *workloads* (model, dtype, batch size), so the eight near-identical
  runs of a workload (four warm-up/cool-down repeats × two nominal context windows, which do not change the
  computation) never sit on both sides of a split. A plain row k-fold is reported too, to show that leak.

The inverse is the verifier's question: given the measured mean power (and GPU utilisation, except on the
MI210 whose utilisation counter is binary), what FLOP rate was the accelerator sustaining? It is fitted as the
*calibration* regression of achieved FLOP/s on power (and utilisation) per (GPU, dtype), restricted to the
compute-bound regime (batch ≥ ``min_batch``; batch 1 is memory-bound, Table IV), and evaluated with the same
held-out schemes. With an unknown dtype we report (a) a pooled fit over dtypes and (b) the conservative bound
max over dtypes of the dtype model × its calibrated upper quantile — and what that bound costs in accuracy.
"""

from __future__ import annotations

import zlib
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from flopwatch.errors import InputError
from flopwatch.powermodel.fit import fit_power_model, noise_floor_pct

if TYPE_CHECKING:
    import pandas as pd

# Held-out unit of the grouped k-fold: the workload. The context window is not in it on purpose: the study's
# prompt is always 11 tokens, so the 512- and 2048-token "configurations" run the same computation (SOURCE.md)
# and are repeats in all but name; splitting them would leak like splitting the four (warm-up, cool-down) runs.
CONFIG_KEYS = ("model", "dtype", "batch_size")


def _gpu_rng(seed: int, gpu: str) -> np.random.Generator:
    """Fold RNG per GPU, so a GPU's folds do not depend on which other GPUs are being evaluated."""
    return np.random.default_rng([seed, zlib.crc32(str(gpu).encode())])


SCHEMES = ("lomo", "kfold", "kfold_rows")


def _folds(sub: pd.DataFrame, scheme: str, k: int, rng: np.random.Generator) -> Iterator[np.ndarray]:
    """Boolean test masks over ``sub`` for one held-out scheme."""
    import pandas as pd

    if scheme == "lomo":
        for m in pd.unique(sub["model"]):
            yield (sub["model"] == m).to_numpy()
        return
    if scheme == "kfold":
        codes = pd.MultiIndex.from_frame(sub[list(CONFIG_KEYS)]).factorize()[0]
        fold_of_group = rng.permutation(codes.max() + 1) % k
        fold = fold_of_group[codes]
    elif scheme == "kfold_rows":
        fold = rng.permutation(len(sub)) % k
    else:
        raise InputError(f"unknown scheme {scheme!r}; expected one of {', '.join(SCHEMES)}", field="scheme")
    for f in range(k):
        yield fold == f


def power_predictions_oos(
    df: pd.DataFrame, *, by: str = "cell", scheme: str = "lomo", k: int = 5, seed: int = 0, x: str = "mfu_pct"
) -> pd.DataFrame:
    """Held-out power predictions for every row: ``df`` plus columns ``pred_w`` (NaN if the row's cell had no
    training data) and ``fold``.

    Each fold is the OLS of :func:`~flopwatch.powermodel.fit.fit_power_model` on the training rows, computed
    by :func:`~flopwatch.powermodel.fit.grouped_ols` on numpy arrays prepared once per GPU (no DataFrame per
    fold: pandas' per-operation overhead, deep copies of ``df.attrs`` included, dominated 237 small fits).
    Group sums run in row order whatever the group numbering, so the numbers are bit-identical to fitting
    ``fit_power_model(train)`` and joining its parameters to the test rows.
    """
    import pandas as pd

    from flopwatch.powermodel.fit import grouped_ols, grouping_keys

    keys = grouping_keys(df, by, x)
    plain = df.copy(deep=False)
    plain.attrs = {}  # every pandas operation deep-copies attrs; nothing here needs them
    pred_all = np.full(len(df), np.nan)
    fold_all = np.full(len(df), -1, dtype=np.int64)
    for gpu in plain["gpu"].unique():
        gmask = (plain["gpu"] == gpu).to_numpy()
        sub = plain[gmask]
        gidx = np.flatnonzero(gmask)
        if len(keys) > 1:
            codes, uniq = pd.MultiIndex.from_frame(sub[keys]).factorize()
        else:
            codes, uniq = pd.factorize(sub[keys[0]])
        codes = np.asarray(codes, dtype=np.int64)
        ng = len(uniq)
        xv = sub[x].to_numpy(float)
        yv = sub["power_w"].to_numpy(float)
        clean = ~np.isnan(xv) & ~np.isnan(yv) & (yv > 0) & (codes >= 0)  # as fit.py's _clean
        for f, test in enumerate(_folds(sub, scheme, k, _gpu_rng(seed, gpu))):
            train = ~test
            if train.sum() < 3 or not test.any():
                continue
            tr = train & clean
            if not tr.any():
                raise InputError(f"no rows with both power_w and {x}", field=x)
            fit = grouped_ols(xv[tr], yv[tr], codes[tr], ng)
            c = codes[test]
            ok = c >= 0
            pred = np.full(c.size, np.nan)
            with np.errstate(invalid="ignore"):
                pred[ok] = fit.intercept[c[ok]] + fit.slope[c[ok]] * xv[test][ok]
            pred_all[gidx[test]] = pred
            fold_all[gidx[test]] = f
    out = df.copy()
    out["pred_w"] = pred_all
    out["fold"] = fold_all
    return out


def _errors(y: np.ndarray, yhat: np.ndarray) -> dict[str, float]:
    ok = np.isfinite(yhat)
    if not ok.any():
        return {"mape_pct": np.nan, "rmse_pct": np.nan, "bias_pct": np.nan, "coverage": 0.0}
    e = yhat[ok] - y[ok]
    return {
        "mape_pct": float(np.mean(np.abs(e) / y[ok]) * 100),
        "rmse_pct": float(np.sqrt(np.mean(e**2)) / np.mean(y[ok]) * 100),
        "bias_pct": float(np.mean(e / y[ok]) * 100),
        "coverage": float(ok.mean()),
    }


def evaluate_power_oos(
    df: pd.DataFrame, df_all: pd.DataFrame | None = None, *, k: int = 5, seed: int = 0
) -> dict[str, Any]:
    """In-sample vs held-out error of the per-GPU and per-cell MFU→power models, with the noise floor.

    Returns ``{"per_gpu": {gpu: {...}}, "per_cell": [rows], "k": k, "seed": seed}``. ``df_all`` (with empty-MFU
    rows) is used for the noise floor when given.
    """
    import pandas as pd

    res: dict[str, Any] = {"per_gpu": {}, "per_cell": [], "k": k, "seed": seed}
    bys = ("gpu", "dtype", "cell")
    ins = {by: fit_power_model(df, by=by) for by in bys}
    preds = {
        (by, sch): power_predictions_oos(df, by=by, scheme=sch, k=k, seed=seed)["pred_w"].to_numpy()
        for by in bys
        for sch in SCHEMES
    }
    y = df["power_w"].to_numpy()
    fitted_in = {by: (y - ins[by].resid.reindex(df.index).to_numpy()) for by in bys}
    for gpu in df["gpu"].unique():
        m = (df["gpu"] == gpu).to_numpy()
        row: dict[str, Any] = {"n": int(m.sum())}
        for by in bys:
            row[f"{by}_in_sample"] = _errors(y[m], fitted_in[by][m])
            for sch in SCHEMES:
                row[f"{by}_{sch}"] = _errors(y[m], preds[(by, sch)][m])
        src = df_all if df_all is not None else df
        row["noise_pct"] = noise_floor_pct(src[src["gpu"] == gpu], mean_power_w=float(y[m].mean()))
        res["per_gpu"][gpu] = row
    cells = df[["gpu", "dtype", "batch_size"]].copy()
    cells["y"] = y
    cells["in"] = fitted_in["cell"]
    cells["lomo"] = preds[("cell", "lomo")]
    cells["kfold"] = preds[("cell", "kfold")]
    for (g, d, b), c in cells.groupby(["gpu", "dtype", "batch_size"], sort=False):
        yy = c["y"].to_numpy()
        res["per_cell"].append(
            {
                "gpu": g,
                "dtype": d,
                "batch_size": int(b),
                "n": len(c),
                "in_sample_mape_pct": _errors(yy, c["in"].to_numpy())["mape_pct"],
                "lomo_mape_pct": _errors(yy, c["lomo"].to_numpy())["mape_pct"],
                "kfold_mape_pct": _errors(yy, c["kfold"].to_numpy())["mape_pct"],
            }
        )
    pc = pd.DataFrame(res["per_cell"])
    for gpu, sub in pc.groupby("gpu", sort=False):
        res["per_gpu"][gpu]["cell_mape_median"] = {
            c: float(sub[c].median()) for c in ("in_sample_mape_pct", "lomo_mape_pct", "kfold_mape_pct")
        }
    return res


# -- the inverse: FLOP rate from power (and utilisation) ---------------------------------------------------


def _design(sub: pd.DataFrame, use_util: bool) -> np.ndarray:
    cols = [np.ones(len(sub)), sub["power_w"].to_numpy()]
    if use_util:
        cols.append(sub["gpu_util_pct"].to_numpy())
    return np.column_stack(cols)


def _fit_rate(train: pd.DataFrame, use_util: bool) -> np.ndarray:
    X = _design(train, use_util)
    return np.linalg.lstsq(X, train["flop_rate"].to_numpy(), rcond=None)[0]


def _predict_rate(coef: np.ndarray, test: pd.DataFrame, use_util: bool) -> np.ndarray:
    # A negative FLOP rate is impossible; clip at zero (rare: only far below the training range).
    return np.maximum(_design(test, use_util) @ coef, 0.0)


def util_meaningful(gpu: str, sub: pd.DataFrame) -> bool:
    """GPU utilisation is useless as a predictor where it barely varies (the MI210: always 98-100 %)."""
    return gpu != "MI210" and float(sub["gpu_util_pct"].std()) > 2.0


def evaluate_inverse(
    df: pd.DataFrame,
    *,
    min_batch: int = 32,
    k: int = 5,
    seed: int = 0,
    level: float = 0.95,
    schemes: Sequence[str] = ("lomo", "kfold"),
) -> dict[str, Any]:
    """Held-out accuracy of estimating the FLOP rate from power (± utilisation), per GPU and dtype.

    For every scheme and held-out fold: per-dtype models (known dtype), a pooled model (unknown dtype), and the
    conservative bound max_d(pred_d × q_d), q_d the ``level`` quantile of true/predicted on the training rows.
    Reports MAPE and bias of the point estimates, and coverage (share of runs whose true rate ≤ bound) and
    cost (median and mean bound/true − 1) of the bounds.
    """
    import pandas as pd

    d = df[df["batch_size"] >= min_batch].copy()
    d.attrs = {}  # every pandas operation deep-copies attrs; nothing here needs them
    if d.empty:
        raise InputError(f"no runs with batch_size >= {min_batch}", field="min_batch")
    d["flop_rate"] = d["tokens_per_s"] * d["flops_per_token"]
    out: dict[str, Any] = {
        "min_batch": min_batch,
        "level": level,
        "k": k,
        "seed": seed,
        "per_gpu": {},
        "per_dtype": [],
    }
    for gpu in d["gpu"].unique():
        sub = d[d["gpu"] == gpu]
        variants = [False, True] if util_meaningful(gpu, sub) else [False]
        gpu_res: dict[str, Any] = {"n": len(sub), "util_used": variants[-1]}
        for use_util in variants:
            feat = "power+util" if use_util else "power"
            for sch in schemes:
                y = sub["flop_rate"].to_numpy()
                known = np.full(len(sub), np.nan)
                pooled = np.full(len(sub), np.nan)
                bound_known = np.full(len(sub), np.nan)
                bound_unknown = np.full(len(sub), np.nan)
                for test in _folds(sub, sch, k, _gpu_rng(seed, gpu)):
                    train = sub[~test]
                    te = sub[test]
                    coef_pool = _fit_rate(train, use_util)
                    pooled[test] = _predict_rate(coef_pool, te, use_util)
                    per_dtype_bounds = []
                    for dt, tr in train.groupby("dtype"):
                        if len(tr) < 4:
                            continue
                        c = _fit_rate(tr, use_util)
                        with np.errstate(divide="ignore", invalid="ignore"):
                            ratio = tr["flop_rate"].to_numpy() / _predict_rate(c, tr, use_util)
                        q = float(np.nanquantile(ratio[np.isfinite(ratio)], level))
                        pred_all = _predict_rate(c, te, use_util)
                        per_dtype_bounds.append(pred_all * q)
                        m = (te["dtype"] == dt).to_numpy()
                        idx = np.flatnonzero(test)[m]
                        known[idx] = pred_all[m]
                        bound_known[idx] = pred_all[m] * q
                    if per_dtype_bounds:
                        bound_unknown[test] = np.max(per_dtype_bounds, axis=0)
                key = f"{feat}_{sch}"
                gpu_res[key] = {
                    "known_dtype": _errors(y, known),
                    "unknown_dtype_pooled": _errors(y, pooled),
                    "bound_known_dtype": _bound_stats(y, bound_known),
                    "bound_unknown_dtype": _bound_stats(y, bound_unknown),
                }
                for dt in sub["dtype"].unique():
                    m = (sub["dtype"] == dt).to_numpy()
                    out["per_dtype"].append(
                        {
                            "gpu": gpu,
                            "dtype": dt,
                            "features": feat,
                            "scheme": sch,
                            "n": int(m.sum()),
                            "mape_pct": _errors(y[m], known[m])["mape_pct"],
                            "bias_pct": _errors(y[m], known[m])["bias_pct"],
                            "pooled_mape_pct": _errors(y[m], pooled[m])["mape_pct"],
                        }
                    )
        out["per_gpu"][gpu] = gpu_res
    out["per_dtype"] = pd.DataFrame(out["per_dtype"]).to_dict(orient="records")
    return out


def _bound_stats(y: np.ndarray, bound: np.ndarray) -> dict[str, float]:
    ok = np.isfinite(bound)
    if not ok.any():
        return {"coverage": np.nan, "median_overestimate_pct": np.nan, "mean_overestimate_pct": np.nan}
    r = bound[ok] / y[ok]
    return {
        "coverage": float(np.mean(r >= 1.0)),
        "median_overestimate_pct": float((np.median(r) - 1) * 100),
        "mean_overestimate_pct": float((np.mean(r) - 1) * 100),
    }


class InverseModel:
    """Power (± utilisation) → FLOP rate, per (GPU, dtype) in the compute-bound regime; sklearn-style.

    ``fit(df)`` learns, per (GPU, dtype), the calibration regression flop_rate ~ 1 + power_w (+ gpu_util_pct
    where utilisation is meaningful) and the ``level`` quantile of true/predicted on the training runs; per GPU
    it also learns a pooled (dtype-unknown) regression. :meth:`estimate` returns the point estimate and the
    conservative upper bound (with an unknown dtype: the maximum of the per-dtype bounds).
    """

    def __init__(self, *, min_batch: int = 32, level: float = 0.95, use_util: bool = True) -> None:
        self.min_batch = min_batch
        self.level = level
        self.use_util = use_util

    def fit(self, df: pd.DataFrame) -> InverseModel:
        d = df[df["batch_size"] >= self.min_batch].copy()
        if d.empty:
            raise InputError(f"no runs with batch_size >= {self.min_batch}", field="min_batch")
        d["flop_rate"] = d["tokens_per_s"] * d["flops_per_token"]
        self.coef_: dict[tuple[str, str], dict[str, Any]] = {}
        self.pooled_: dict[str, dict[str, Any]] = {}
        for gpu in d["gpu"].unique():
            sub = d[d["gpu"] == gpu]
            uu = self.use_util and util_meaningful(gpu, sub)
            self.pooled_[gpu] = {"coef": _fit_rate(sub, uu).tolist(), "util": uu, "n": len(sub)}
            for dt, tr in sub.groupby("dtype"):
                c = _fit_rate(tr, uu)
                with np.errstate(divide="ignore", invalid="ignore"):
                    ratio = tr["flop_rate"].to_numpy() / _predict_rate(c, tr, uu)
                q = float(np.nanquantile(ratio[np.isfinite(ratio)], self.level))
                self.coef_[(gpu, dt)] = {
                    "coef": c.tolist(),
                    "util": uu,
                    "q": q,
                    "n": len(tr),
                    "power_range_w": [float(tr["power_w"].min()), float(tr["power_w"].max())],
                }
        return self

    def estimate(
        self, gpu: str, power_w: float, *, util_pct: float | None = None, dtype: str | None = None
    ) -> dict[str, Any]:
        """FLOP rate estimate (FLOP/s) and its conservative upper bound for one measured mean power."""
        import pandas as pd

        from flopwatch.devices import normalize_dtype
        from flopwatch.errors import NotFittedError
        from flopwatch.powermodel.mfu import canonical_gpu

        if not hasattr(self, "coef_"):
            raise NotFittedError("InverseModel.estimate() before fit()")
        try:
            g = canonical_gpu(gpu)
        except InputError:
            g = str(gpu)
        if g not in self.pooled_:
            raise InputError(
                f"no inverse model for GPU {gpu!r}; fitted: {', '.join(self.pooled_)}", field="gpu"
            )
        needs_util = self.pooled_[g]["util"]
        if needs_util and util_pct is None:
            raise InputError(f"the {g} inverse model uses GPU utilisation: pass util_pct", field="util_pct")
        row = pd.DataFrame({"power_w": [float(power_w)], "gpu_util_pct": [float(util_pct or 0.0)]})
        out: dict[str, Any] = {"gpu": g, "power_w": float(power_w), "util_pct": util_pct, "level": self.level}
        dtypes = [dt for (gg, dt) in self.coef_ if gg == g]
        for dt in [dtype and normalize_dtype(dtype)] if dtype is not None else dtypes:
            c = self.coef_.get((g, dt))
            if c is not None and (c["n"] < 3 or c["power_range_w"][0] == c["power_range_w"][1]):
                # one power level leaves the slope unknown and the "upper bound" is the estimate itself:
                # a 95 % bound from one run (or from copies of one row) is no bound
                raise InputError(
                    f"the {g} {dt} runs ({c['n']}) span no range of power: the FLOP-rate slope and its "
                    "upper bound are unknown (fit on at least 3 runs at different powers)",
                    field="data",
                )
        per = {}
        for dt in dtypes:
            c = self.coef_[(g, dt)]
            pred = float(_predict_rate(np.asarray(c["coef"]), row, c["util"])[0])
            per[dt] = {"flop_rate": pred, "upper": pred * c["q"], "power_range_w": c["power_range_w"]}
        if dtype is not None:
            dt = normalize_dtype(dtype)
            if dt not in per:
                raise InputError(f"no {dt} runs for {g}; dtypes: {', '.join(per)}", field="dtype")
            out.update(dtype=dt, flop_rate=per[dt]["flop_rate"], upper_flop_rate=per[dt]["upper"])
            lo, hi = per[dt]["power_range_w"]
            out["extrapolated"] = not (lo <= power_w <= hi)
        else:
            pooled = float(_predict_rate(np.asarray(self.pooled_[g]["coef"]), row, needs_util)[0])
            out.update(dtype=None, flop_rate=pooled, upper_flop_rate=max(v["upper"] for v in per.values()))
            lo = min(v["power_range_w"][0] for v in per.values())
            hi = max(v["power_range_w"][1] for v in per.values())
            out["extrapolated"] = not (lo <= power_w <= hi)
        out["per_dtype"] = per
        return out

    def to_dict(self) -> dict[str, Any]:
        return {
            "schema": "flopwatch.powermodel.inverse/1",
            "min_batch": self.min_batch,
            "level": self.level,
            "per_dtype": [{"gpu": g, "dtype": d, **v} for (g, d), v in self.coef_.items()],
            "pooled": self.pooled_,
        }
