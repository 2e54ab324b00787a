"""Grouped OLS of power on MFU (or GPU utilisation), with vectorised bootstrap intervals.

The model of the MASCOTS study (Enskat & Wiesner 2026, arXiv:2608.03880, Sec. IV):

    power_w = intercept + slope × x,    x = MFU in % (or GPU utilisation in %)

fitted by ordinary least squares either per GPU (Table II) or per (GPU, dtype, batch size) cell (Table III,
"SD_cell"). Every fit is computed from closed-form sums with ``numpy.bincount``, so all groups — and, in
:func:`bootstrap_gpu_stats`, all bootstrap resamples — are solved at once without a Python loop per group or
per resample.

Statistics (as the study defines them; ``../shared/data/gpu_power_benchmark/SOURCE.md``):
  R² = 1 − SSR/SST;  MAPE = mean(|y − ŷ| / y) · 100;  residual SD % = sqrt(SSR / (n − 2)) / mean(y) · 100.
For per-cell models pooled per GPU, SSR sums over the GPU's cells and the divisor stays n − 2 (the study's
choice, kept so Table III reproduces).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from flopwatch.devices import normalize_dtype
from flopwatch.errors import InputError, ProfileError

if TYPE_CHECKING:
    import pandas as pd

SCHEMA = "flopwatch.powermodel/1"
X_COLUMNS = ("mfu_pct", "gpu_util_pct")
# "dtype" (per GPU and dtype, all batch sizes) is our addition: out of sample it is more robust than the
# per-cell fit, whose slope rests on only three models per cell (docs/powermodel.md).
BY_KEYS: dict[str, tuple[str, ...]] = {
    "gpu": ("gpu",),
    "dtype": ("gpu", "dtype"),
    "cell": ("gpu", "dtype", "batch_size"),
}
PARAM_COLUMNS = (
    "intercept",
    "slope",
    "n",
    "r2",
    "mape_pct",
    "resid_sd_pct",
    "resid_sd_w",
    "mean_power_w",
    "x_mean",
    "x_min",
    "x_max",
    "sxx",
    "degenerate",
)


@dataclass(frozen=True)
class GroupedOLS:
    """Raw output of :func:`grouped_ols` (arrays indexed by group code)."""

    intercept: np.ndarray
    slope: np.ndarray
    n: np.ndarray
    ssr: np.ndarray
    sst: np.ndarray
    sum_ape: np.ndarray
    y_mean: np.ndarray
    x_mean: np.ndarray
    sxx: np.ndarray
    resid: np.ndarray  # per observation
    degenerate: np.ndarray  # fewer than 2 distinct x: slope fixed at 0


def grouped_ols(x: np.ndarray, y: np.ndarray, codes: np.ndarray, n_groups: int) -> GroupedOLS:
    """OLS y ~ 1 + x separately in every group, from closed-form sums (no loop over groups).

    Centred sums (x − x̄_g) keep the arithmetic well conditioned for power in the hundreds of watts.
    A group with fewer than two distinct x values gets slope 0 and intercept mean(y) (flagged degenerate).
    """
    x = np.asarray(x, float)
    y = np.asarray(y, float)
    codes = np.asarray(codes, np.int64)
    n = np.bincount(codes, minlength=n_groups).astype(float)
    with np.errstate(invalid="ignore", divide="ignore"):
        xm = np.bincount(codes, x, n_groups) / n
        ym = np.bincount(codes, y, n_groups) / n
        dx = x - xm[codes]
        dy = y - ym[codes]
        sxx = np.bincount(codes, dx * dx, n_groups)
        sxy = np.bincount(codes, dx * dy, n_groups)
        sst = np.bincount(codes, dy * dy, n_groups)
        # Relative tolerance: x constant up to rounding counts as constant.
        degenerate = ~(sxx > 1e-12 * np.maximum(1.0, np.bincount(codes, x * x, n_groups)))
        slope = np.where(degenerate, 0.0, sxy / np.where(degenerate, 1.0, sxx))
        intercept = ym - slope * xm
        resid = y - intercept[codes] - slope[codes] * x
        ssr = np.bincount(codes, resid * resid, n_groups)
        sum_ape = np.bincount(codes, np.abs(resid) / y, n_groups)
    return GroupedOLS(intercept, slope, n, ssr, sst, sum_ape, ym, xm, sxx, resid, degenerate)


def _r2(ssr: np.ndarray, sst: np.ndarray) -> np.ndarray:
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(sst > 0, 1.0 - ssr / np.where(sst > 0, sst, 1.0), np.nan)


def _resid_sd(ssr: np.ndarray, n: np.ndarray) -> np.ndarray:
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(n > 2, np.sqrt(ssr / np.maximum(n - 2, 1)), np.nan)


def _check_frame(df: pd.DataFrame, cols: Sequence[str], what: str) -> None:
    missing = [c for c in cols if c not in df.columns]
    if missing:
        raise InputError(f"{what}: data lacks column(s) {', '.join(missing)}", field=missing[0])


def grouping_keys(df: pd.DataFrame, by: str, x: str) -> list[str]:
    """The key columns of grouping ``by`` for a fit of power on ``x``, once ``df`` is checked to hold them."""
    if by not in BY_KEYS:
        raise InputError(f"unknown grouping {by!r}; expected 'gpu', 'dtype' or 'cell'", field="by")
    if x not in X_COLUMNS:
        raise InputError(f"unknown predictor {x!r}; expected one of {', '.join(X_COLUMNS)}", field="x")
    _check_frame(df, [*BY_KEYS[by], x, "power_w"], "fit_power_model")
    return list(BY_KEYS[by])


def _clean(df: pd.DataFrame, x: str, y: str = "power_w") -> pd.DataFrame:
    ok = df[x].notna() & df[y].notna() & (df[y] > 0)
    return df[ok]


@dataclass
class PowerModelResult:
    """Fitted linear power models, one per group, in the statsmodels manner.

    ``params`` is a DataFrame indexed by group (``gpu``, or ``gpu, dtype, batch_size``) with the columns of
    :data:`PARAM_COLUMNS`. Never mutated after construction; :meth:`summary` only formats.
    """

    by: str
    x: str
    params: pd.DataFrame
    idle_power_w: dict[str, float] = field(default_factory=dict)
    resid: pd.Series | None = None  # per input row (not serialised)
    fittedvalues: pd.Series | None = None
    sources: list[str] = field(default_factory=list)
    n_dropped: int = 0

    # -- statsmodels-like accessors -------------------------------------------------------------------
    @property
    def nobs(self) -> int:
        return int(self.params["n"].sum())

    def conf_int(self, alpha: float = 0.05) -> pd.DataFrame:
        """Student-t confidence intervals of intercept and slope per group (classical OLS standard errors)."""
        import pandas as pd
        from scipy.special import stdtrit  # Student-t quantile; lighter import than scipy.stats

        p = self.params
        dof = (p["n"] - 2).clip(lower=1)
        t = stdtrit(dof, 1 - alpha / 2)
        s = p["resid_sd_w"]
        with np.errstate(invalid="ignore", divide="ignore"):
            se_slope = s / np.sqrt(p["sxx"])
            se_int = s * np.sqrt(1.0 / p["n"] + p["x_mean"] ** 2 / p["sxx"])
        return pd.DataFrame(
            {
                "intercept_lo": p["intercept"] - t * se_int,
                "intercept_hi": p["intercept"] + t * se_int,
                "slope_lo": p["slope"] - t * se_slope,
                "slope_hi": p["slope"] + t * se_slope,
            },
            index=p.index,
        )

    def _row(self, gpu: str, dtype: str | None, batch_size: int | None) -> pd.Series:
        from flopwatch.powermodel.mfu import canonical_gpu

        try:
            g = canonical_gpu(gpu)
        except InputError:
            g = str(gpu)
        if self.by == "gpu":
            if g not in self.params.index:
                raise InputError(
                    f"no fitted model for GPU {gpu!r}; fitted: {', '.join(map(str, self.params.index))}",
                    field="gpu",
                )
            return self.params.loc[g]
        if g not in self.params.index.get_level_values("gpu"):
            raise InputError(
                f"no fitted model for GPU {gpu!r}; fitted: {', '.join(dict.fromkeys(self.params.index.get_level_values('gpu')))}",
                field="gpu",
            )
        if self.by == "dtype":
            if dtype is None:
                raise InputError("a per-dtype model needs dtype", field="dtype")
            key2 = (g, normalize_dtype(dtype))
            if key2 not in self.params.index:
                have = sorted({d for gg, d in self.params.index if gg == g})
                raise InputError(
                    f"no fitted model for {g} {key2[1]}; dtypes: {', '.join(have)}", field="dtype"
                )
            return self.params.loc[key2]
        if dtype is None or batch_size is None:
            raise InputError(
                "a per-cell model needs dtype and batch_size",
                field="dtype" if dtype is None else "batch_size",
            )
        key = (g, normalize_dtype(dtype), int(batch_size))
        if key not in self.params.index:
            have = sorted({(d, b) for gg, d, b in self.params.index if gg == g})
            raise InputError(
                f"no fitted cell for {key[0]} {key[1]} batch {key[2]}; "
                + (
                    f"cells for {g}: {', '.join(f'{d}/b{b}' for d, b in have)}"
                    if have
                    else f"no cells for {g}"
                ),
                field="batch_size",
            )
        return self.params.loc[key]

    def predict(
        self,
        gpu: str,
        dtype: str | None = None,
        batch_size: int | None = None,
        x: float | Sequence[float] | np.ndarray = 0.0,
    ) -> np.ndarray:
        """Predicted power in W for predictor value(s) ``x`` (MFU % or utilisation %) on one GPU/cell."""
        r = self._row(gpu, dtype, batch_size)
        return r["intercept"] + r["slope"] * np.asarray(x, float)

    def predict_interval(
        self,
        gpu: str,
        dtype: str | None = None,
        batch_size: int | None = None,
        x: float | Sequence[float] | np.ndarray = 0.0,
        *,
        alpha: float = 0.05,
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(prediction, lower, upper) in W: the OLS prediction interval for a new run's mean power.

        se = s · sqrt(1 + 1/n + (x − x̄)² / Sxx), Student t with n − 2 degrees of freedom.
        """
        from scipy.special import stdtrit  # Student-t quantile; lighter import than scipy.stats

        r = self._row(gpu, dtype, batch_size)
        xv = np.asarray(x, float)
        pred = r["intercept"] + r["slope"] * xv
        n = float(r["n"])
        lever = 0.0 if r["degenerate"] or r["sxx"] <= 0 else (xv - r["x_mean"]) ** 2 / r["sxx"]
        se = r["resid_sd_w"] * np.sqrt(1.0 + 1.0 / n + lever)
        t = stdtrit(max(n - 2, 1), 1 - alpha / 2)
        return pred, pred - t * se, pred + t * se

    def gpu_summary(self) -> pd.DataFrame:
        """Per-GPU statistics, pooling the cells of a per-cell model (Table III's SD_cell convention)."""
        import pandas as pd

        p = self.params
        if self.by == "gpu":
            return p[["n", "r2", "mape_pct", "resid_sd_pct", "mean_power_w"]].copy()
        rows = {}
        for g, sub in p.groupby(level="gpu", sort=False):
            n = sub["n"].sum()
            ssr = (sub["resid_sd_w"] ** 2 * (sub["n"] - 2).clip(lower=0)).sum()
            ybar = (sub["mean_power_w"] * sub["n"]).sum() / n
            mape = (sub["mape_pct"] * sub["n"]).sum() / n
            rows[g] = {
                "n": n,
                "mape_pct": mape,
                "resid_sd_pct": np.sqrt(ssr / (n - 2)) / ybar * 100,
                "mean_power_w": ybar,
            }
        out = pd.DataFrame.from_dict(rows, orient="index")
        out.index.name = "gpu"
        return out

    def summary(self) -> str:
        """A plain-text table of the fits (does not modify the result)."""
        p = self.params
        head = f"Linear power model: power_w ~ 1 + {self.x}, by {self.by} ({len(p)} groups, {self.nobs} runs)"
        lines = [head, "=" * len(head)]
        idx_names = [str(n) for n in p.index.names]
        cols = ["intercept", "slope", "n", "r2", "mape_pct", "resid_sd_pct"]
        keys = [key if isinstance(key, tuple) else (key,) for key in p.index]
        # Key columns as wide as their longest value (GPU names like "RTX 4070 Ti" or a CPU model string),
        # so the header stays over its column.
        kw = [max([len(n)] + [len(str(k[i])) for k in keys]) for i, n in enumerate(idx_names)]
        lines.append(
            "  ".join(f"{c:<{w}}" for c, w in zip(idx_names, kw, strict=True))
            + "  "
            + "  ".join(f"{c:>12}" for c in cols)
        )
        for k, (_, r) in zip(keys, p.iterrows(), strict=True):
            lines.append(
                "  ".join(f"{str(v):<{w}}" for v, w in zip(k, kw, strict=True))
                + "  "
                + "  ".join(f"{r[c]:>12.4g}" if c != "n" else f"{int(r[c]):>12d}" for c in cols)
            )
        if self.n_dropped:
            lines.append(f"{self.n_dropped} row(s) without power or {self.x} were dropped before fitting.")
        return "\n".join(lines)

    # -- serialisation -------------------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict (versioned); :meth:`from_dict` reads it back."""
        groups = []
        for key, r in self.params.iterrows():
            k = key if isinstance(key, tuple) else (key,)
            g = dict(zip(BY_KEYS[self.by], [v.item() if hasattr(v, "item") else v for v in k], strict=False))
            g.update({c: (bool(r[c]) if c == "degenerate" else _num(r[c])) for c in PARAM_COLUMNS})
            groups.append(g)
        return {
            "schema": SCHEMA,
            "model": "linear",
            "by": self.by,
            "x": self.x,
            "y": "power_w",
            "idle_power_w": {k: float(v) for k, v in self.idle_power_w.items()},
            "sources": list(self.sources),
            "n_dropped": int(self.n_dropped),
            "groups": groups,
            "citation": "Enskat & Wiesner, MASCOTS 2026, arXiv:2608.03880 (linear MFU-power model)",
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any], *, source: str | None = None) -> PowerModelResult:
        import pandas as pd

        try:
            if d.get("schema") != SCHEMA:
                raise ProfileError(
                    f"not a flopwatch power model (schema {d.get('schema')!r}, expected {SCHEMA!r})",
                    file=source,
                )
            by = d["by"]
            if by not in BY_KEYS:
                raise ProfileError(f"unknown 'by' {by!r}", file=source, field="by")
            keys = BY_KEYS[by]
            rows = []
            for i, g in enumerate(d["groups"]):
                row = {k: g[k] for k in keys}
                for c in PARAM_COLUMNS:
                    v = g[c]
                    row[c] = bool(v) if c == "degenerate" else (np.nan if v is None else float(v))
                if not np.isfinite(row["intercept"]) or not np.isfinite(row["slope"]):
                    raise ProfileError(
                        "intercept/slope must be finite", file=source, record=i, field="intercept"
                    )
                rows.append(row)
            if not rows:
                raise ProfileError("must list at least one group", file=source, field="groups")
            params = pd.DataFrame(rows).set_index(list(keys))
            params["n"] = params["n"].astype(int)
            idle = {str(k): float(v) for k, v in dict(d.get("idle_power_w", {})).items()}
            if not all(np.isfinite(v) and v >= 0 for v in idle.values()):
                raise ProfileError("must map GPUs to finite powers >= 0", file=source, field="idle_power_w")
            return cls(
                by=by,
                x=d["x"],
                params=params,
                idle_power_w=idle,
                sources=list(d.get("sources", [])),
                n_dropped=int(d.get("n_dropped", 0)),
            )
        except KeyError as e:
            raise ProfileError(f"missing key {e.args[0]!r}", file=source, field=str(e.args[0])) from None
        except (TypeError, ValueError, OverflowError, AttributeError) as e:
            if isinstance(e, ProfileError):
                raise
            raise ProfileError(
                f"malformed power model ({type(e).__name__}: {str(e)[:100]})", file=source
            ) from None

    def save(self, path: str | Path) -> None:
        """Write atomically (temp file + rename): a crash never leaves half a model file."""
        from flopwatch.io import atomic_write

        atomic_write(path, json.dumps(self.to_dict(), indent=2) + "\n")

    @classmethod
    def load(cls, path: str | Path) -> PowerModelResult:
        from flopwatch.io import read_json

        p = Path(path)
        # regular file, size-capped, parsed without RecursionError/OverflowError (flopwatch.io)
        d = read_json(p, kind="power-model JSON file", error=ProfileError)
        if not isinstance(d, dict):
            raise ProfileError("not a JSON object", file=str(p))
        return cls.from_dict(d, source=str(p))


def _num(v: Any) -> float | int | None:
    v = float(v)
    if not np.isfinite(v):
        return None
    return int(v) if v.is_integer() and abs(v) < 2**53 else v


def fit_power_model(df: pd.DataFrame, by: str = "gpu", x: str = "mfu_pct") -> PowerModelResult:
    """Fit power_w ~ 1 + x by OLS per GPU (``by="gpu"``), per (GPU, dtype) (``by="dtype"``) or per
    (GPU, dtype, batch) cell (``by="cell"``).

    ``df`` uses the canonical columns of :func:`flopwatch.powermodel.datasets.load_mascots`. Rows without power
    or x are dropped (counted in ``n_dropped``). Idle powers are taken from ``df.attrs["idle_power_w"]``.
    """
    import pandas as pd

    keys = grouping_keys(df, by, x)
    d = _clean(df, x)
    if d.empty:
        raise InputError(f"no rows with both power_w and {x}", field=x)
    codes, uniq = pd.MultiIndex.from_frame(d[keys]).factorize() if len(keys) > 1 else pd.factorize(d[keys[0]])
    ng = len(uniq)
    xv = d[x].to_numpy(float)
    yv = d["power_w"].to_numpy(float)
    fit = grouped_ols(xv, yv, codes, ng)
    ymax = np.full(ng, -np.inf)
    xmin = np.full(ng, np.inf)
    xmax = np.full(ng, -np.inf)
    np.maximum.at(ymax, codes, yv)
    np.minimum.at(xmin, codes, xv)
    np.maximum.at(xmax, codes, xv)
    sd_w = _resid_sd(fit.ssr, fit.n)
    params = pd.DataFrame(
        {
            "intercept": fit.intercept,
            "slope": fit.slope,
            "n": fit.n.astype(int),
            "r2": _r2(fit.ssr, fit.sst),
            "mape_pct": fit.sum_ape / fit.n * 100.0,
            "resid_sd_pct": sd_w / fit.y_mean * 100.0,
            "resid_sd_w": sd_w,
            "mean_power_w": fit.y_mean,
            "x_mean": fit.x_mean,
            "x_min": xmin,
            "x_max": xmax,
            "sxx": fit.sxx,
            "degenerate": fit.degenerate,
        },
        index=uniq if len(keys) > 1 else pd.Index(uniq, name=keys[0]),
    )
    if len(keys) > 1:
        params.index.names = keys
    idle = dict(df.attrs.get("idle_power_w", {}))
    sources = sorted(set(map(str, d["source_file"]))) if "source_file" in d else []
    return PowerModelResult(
        by=by,
        x=x,
        params=params,
        idle_power_w=idle,
        resid=pd.Series(fit.resid, index=d.index, name="resid"),
        fittedvalues=pd.Series(yv - fit.resid, index=d.index, name="fitted_power_w"),
        sources=sources,
        n_dropped=int(len(df) - len(d)),
    )


# -- bootstrap -------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class BootstrapStats:
    """Bootstrap replicates of one GPU's statistics (arrays of length n_boot)."""

    r2: np.ndarray
    mape_pct: np.ndarray
    resid_sd_pct: np.ndarray
    slope: np.ndarray
    intercept: np.ndarray
    sd_cell_pct: np.ndarray | None = None

    def ci(self, stat: str, level: float = 0.95) -> tuple[float, float]:
        """Percentile interval of one statistic."""
        a = getattr(self, stat)
        lo, hi = np.nanpercentile(a, [50 * (1 - level), 50 * (1 + level)])
        return float(lo), float(hi)

    def se(self, stat: str) -> float:
        return float(np.nanstd(getattr(self, stat), ddof=1))


def bootstrap_gpu_stats(
    x: np.ndarray,
    y: np.ndarray,
    *,
    n_boot: int = 2000,
    rng: np.random.Generator | None = None,
    cells: np.ndarray | None = None,
) -> BootstrapStats:
    """Row bootstrap of the per-GPU OLS statistics, all resamples at once.

    Draws an (n_boot × n) index matrix and evaluates every resample's closed-form OLS with array sums along
    axis 1 — no Python loop per resample. With ``cells`` (integer cell codes per row) it also returns the
    pooled per-cell residual SD % (Table III's SD_cell) for every resample, using :func:`grouped_ols` on the
    flattened (resample, cell) codes.
    """
    rng = np.random.default_rng(0) if rng is None else rng
    x = np.asarray(x, float)
    y = np.asarray(y, float)
    n = len(x)
    idx = rng.integers(0, n, size=(n_boot, n))
    xb = x[idx]
    yb = y[idx]
    xm = xb.mean(axis=1, keepdims=True)
    ym = yb.mean(axis=1, keepdims=True)
    dx = xb - xm
    dy = yb - ym
    sxx = np.einsum("ij,ij->i", dx, dx)
    sxy = np.einsum("ij,ij->i", dx, dy)
    sst = np.einsum("ij,ij->i", dy, dy)
    with np.errstate(invalid="ignore", divide="ignore"):
        slope = sxy / sxx
    intercept = ym[:, 0] - slope * xm[:, 0]
    resid = yb - intercept[:, None] - slope[:, None] * xb
    ssr = np.einsum("ij,ij->i", resid, resid)
    r2 = 1.0 - ssr / sst
    mape = np.mean(np.abs(resid) / yb, axis=1) * 100.0
    sd = np.sqrt(ssr / (n - 2)) / ym[:, 0] * 100.0
    sd_cell = None
    if cells is not None:
        cells = np.asarray(cells, np.int64)
        nc = int(cells.max()) + 1
        flat = (np.arange(n_boot)[:, None] * nc + cells[idx]).ravel()
        ng = n_boot * nc
        # Per (resample, cell) OLS from raw sums: SSR = Syy - Sxy²/Sxx (centred by the cell means). Values are
        # O(10²) W and cells O(10) rows, so the cancellation costs ~1e-10 relative in float64 (checked against
        # grouped_ols in the tests).
        xf, yf = xb.ravel(), yb.ravel()
        cnt = np.bincount(flat, minlength=ng).astype(float)
        sx = np.bincount(flat, xf, ng)
        sy = np.bincount(flat, yf, ng)
        with np.errstate(invalid="ignore", divide="ignore"):
            sxx = np.bincount(flat, xf * xf, ng) - sx * sx / cnt
            sxy = np.bincount(flat, xf * yf, ng) - sx * sy / cnt
            syy = np.bincount(flat, yf * yf, ng) - sy * sy / cnt
            deg = ~(sxx > 1e-12 * np.maximum(1.0, sx * sx / np.maximum(cnt, 1)))
            ssr_g = np.where(deg, syy, syy - sxy * sxy / np.where(deg, 1.0, sxx))
        ssr_c = np.nan_to_num(np.maximum(ssr_g, 0.0)).reshape(n_boot, nc).sum(axis=1)
        sd_cell = np.sqrt(ssr_c / (n - 2)) / ym[:, 0] * 100.0
    return BootstrapStats(
        r2=r2, mape_pct=mape, resid_sd_pct=sd, slope=slope, intercept=intercept, sd_cell_pct=sd_cell
    )


def noise_floor_pct(
    df_all: pd.DataFrame,
    *,
    repeat_keys: Sequence[str] = ("model", "dtype", "batch_size", "context_window"),
    mean_power_w: float | None = None,
) -> float:
    """Cross-repeat noise floor (Table III): mean over repeat groups of SD(ddof=1) of power / mean power · 100.

    A repeat group is one (model, dtype, batch, context window) configuration, whose four (warm-up, cool-down)
    runs the study treats as repeats. ``df_all`` should include rows with empty MFU (power is still measured):
    the published MI210 value needs them. ``mean_power_w`` defaults to the mean over ``df_all``; the study
    divides by the mean power of the fitted rows (pass it in to reproduce Table III exactly).
    """
    _check_frame(df_all, [*repeat_keys, "power_w"], "noise_floor_pct")
    d = df_all[df_all["power_w"].notna()]
    sds = d.groupby(list(repeat_keys), sort=False)["power_w"].std(ddof=1)
    m = float(d["power_w"].mean()) if mean_power_w is None else float(mean_power_w)
    return float(sds.mean() / m * 100.0)
