"""Energy → FLOP estimators.

All models follow scikit-learn conventions (``__init__`` stores hyper-parameters, ``fit`` returns self,
learned attributes end in ``_``, ``predict`` raises :class:`NotFittedError` before ``fit``) and, for the
200-split evaluation, a *batched* form: ``fit_batch`` fits B independent training sets at once (arrays of
shape (B, n)) with closed-form leave-one-out (LOO) inside, and ``predict_params`` applies fitted parameters.
This is what makes the full evaluation of every model run in well under a second.

Published models (Fowler 2026, "Estimating LLM Training FLOPs on the Nvidia Jetson Orin Nano",
williamfowler/verification-games, ``detect_flops.py``)::

    eq. 1:  TFLOP = (E_net − E_per_TB·TB − P_overhead·t) / E_per_TFLOP
    eq. 2:  TFLOP = (E_net − P_overhead·t) / E_per_TFLOP

fitted by *relative* least squares, min Σ((E − a·F − c·TB − p·t)/F)² with c ≥ 0, where P_overhead p is
chosen by LOO over ``np.linspace(0, 4, 321)`` W minimising the mean squared LOO relative FLOP error
(this criterion reproduces the published constants; see tests/test_estimate_models.py).

Our own models (:class:`LogLinearModel`) regress log FLOP-per-joule (or log throughput) on log net power
and, optionally, log DRAM bandwidth and utilisation, with ridge shrinkage whose strength is chosen — or
averaged over — by exact LOO inside the training set. ``default`` is the power + bandwidth one, averaged
over the ridge grid; docs/estimator.md explains the choice and its held-out numbers. Everything
data-driven happens inside the training set: the evaluation's test split is never seen by a fit.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from flopwatch.errors import InputError, NotFittedError
from flopwatch.estimate.features import Features

TFLOP = 1e12
P_OVERHEAD_GRID_W = np.linspace(0.0, 4.0, 321)  # the study's LOO grid: 0–4 W in 12.5 mW steps


@dataclass
class BatchFit:
    """Result of fitting B training sets at once.

    ``params``: name → array (B,); ``loo_flops``: (B, n) LOO predictions of each training point with the
    selected hyper-parameters held fixed (the residuals behind prediction intervals); ``hyper``: name →
    array (B,) of the hyper-parameters chosen inside each training set.
    """

    params: dict[str, np.ndarray]
    loo_flops: np.ndarray
    hyper: dict[str, np.ndarray]


def _batched(X: Features, flops: np.ndarray | None = None) -> tuple[Features, np.ndarray | None, bool]:
    single = X.net_energy_j.ndim == 1
    if single:
        X = Features(X.net_energy_j[None], X.duration_s[None], X.tb_moved[None], X.mean_util[None])
        if flops is not None:
            flops = np.asarray(flops, dtype=float)[None]
    return X, flops, single


class FlopModel(ABC):
    """Base class: an estimator of total FLOPs from energy-side features."""

    name: str = ""
    description: str = ""
    min_train: int = 3  # fewest training records a fit accepts

    @property
    def needs(self) -> tuple[str, ...]:
        """Optional :class:`Features` columns (``tb_moved``, ``mean_util``) this model requires."""
        return ()

    # ----------------------------------------------------------------- batched core (implemented by models)
    @abstractmethod
    def fit_batch(self, X: Features, flops: np.ndarray) -> BatchFit:
        """Fit B training sets: X arrays and ``flops`` of shape (B, n)."""

    @abstractmethod
    def predict_params(self, params: Mapping[str, np.ndarray], X: Features) -> np.ndarray:
        """Predict FLOPs for X (B, m) with params (B,) — or scalars with 1-D X."""

    # ----------------------------------------------------------------- scikit-learn style single fit
    def get_params(self) -> dict[str, Any]:
        """Hyper-parameters (constructor arguments)."""
        return {}

    def check_features(self, X: Features) -> None:
        """InputError when a needed column is unknown or energy/duration are out of range."""
        for col in self.needs:
            arr = getattr(X, col)
            if np.isnan(arr).any():
                raise InputError(
                    f"model {self.name!r} needs {col} for every record; it is unknown", field=col
                )
        if np.any(X.duration_s <= 0) or np.any(~np.isfinite(X.duration_s)):
            raise InputError("must be a positive number of seconds", field="duration_s")
        if np.any(X.net_energy_j < 0) or np.any(~np.isfinite(X.net_energy_j)):
            raise InputError("must be a non-negative number of joules", field="net_energy_j")

    def fit(self, X: Features, flops: np.ndarray) -> FlopModel:
        """Fit on n records; sets ``params_``, ``hyper_``, ``loo_flops_``, ``n_train_``. Returns self."""
        flops = np.asarray(flops, dtype=float)
        if flops.ndim != 1 or len(flops) != len(X):
            raise InputError(f"need one ground truth per record ({len(X)}), got shape {flops.shape}")
        if len(flops) < self.min_train:
            raise InputError(
                f"model {self.name!r} needs at least {self.min_train} training records, got {len(flops)}"
            )
        if np.any(flops <= 0):
            raise InputError("ground truth must be > 0 to fit relative errors", field="total_flops")
        self.check_features(X)
        Xb, fb, _ = _batched(X, flops)
        assert fb is not None
        res = self.fit_batch(Xb, fb)
        self.params_ = {k: float(v[0]) for k, v in res.params.items()}
        self.hyper_ = {k: float(v[0]) for k, v in res.hyper.items()}
        self.loo_flops_ = res.loo_flops[0]
        self.n_train_ = len(flops)
        return self

    def _check_fitted(self) -> None:
        if not hasattr(self, "params_"):
            raise NotFittedError(f"{type(self).__name__} is not fitted; call fit() first")

    def predict(self, X: Features) -> np.ndarray:
        """Estimated FLOPs per record (1-D)."""
        self._check_fitted()
        self.check_features(X)
        Xb, _, _ = _batched(X)
        return self.predict_params({k: np.array([v]) for k, v in self.params_.items()}, Xb)[0]

    def component(self, params: Mapping[str, float]) -> FlopModel:
        """The concrete model that ``params`` belong to (itself, except for selectors)."""
        return self

    def check_params(self, params: Mapping[str, float]) -> None:
        """InputError (field = the parameter) when stored parameters cannot come from a fit of this model.

        Used when a profile is loaded, so a hand-edited or corrupted profile fails with a clear message
        instead of producing negative estimates or a traceback later. The base class accepts any.
        """
        return None


# ==================================================================================== published models


def _ls2_nonneg(
    Sgg: np.ndarray, Sgh: np.ndarray, Shh: np.ndarray, Sgz: np.ndarray, Shz: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Least squares of z ≈ α·g + β·h with β ≥ 0, from the sufficient sums (any broadcastable shape).

    With one constrained coefficient the KKT solution is: the unconstrained one if β ≥ 0, else β = 0
    and α = Σgz/Σgg (the same as scipy.optimize.lsq_linear with bounds, at a fraction of the cost).
    """
    det = Sgg * Shh - Sgh * Sgh
    with np.errstate(divide="ignore", invalid="ignore"):
        beta = (Sgg * Shz - Sgh * Sgz) / det
        alpha = (Sgz - beta * Sgh) / Sgg
        alpha0 = Sgz / Sgg
    bad = ~(beta >= 0)  # also catches NaN from a singular system
    return np.where(bad, alpha0, alpha), np.where(bad, 0.0, beta)


class PublishedModel(FlopModel):
    """The Jetson study's estimator (eq. 1 with ``use_tb=True``, eq. 2 without).

    ``objective="energy"`` (default, as published): min Σ((E − a·F − c·TB − p·t)/F)², c ≥ 0.
    ``objective="flops"``: min Σ((F̂ − F)/F)² in FLOP space (b = 1/a), which reproduces the study's 2-param
    E_per_TFLOP = 5.72 J to three digits; the energy objective gives 5.71 J (see docs/estimator.md).
    Learned params: ``e_per_tflop_j`` (a, J/TFLOP), ``e_per_tb_j`` (c, J/TB), ``p_overhead_w`` (p, W).
    """

    def __init__(
        self, use_tb: bool = True, p_grid_w: Sequence[float] | None = None, objective: str = "energy"
    ) -> None:
        self.use_tb = use_tb
        self.p_grid_w = P_OVERHEAD_GRID_W if p_grid_w is None else np.asarray(p_grid_w, dtype=float)
        if objective not in ("energy", "flops"):
            raise InputError(f"objective must be 'energy' or 'flops', got {objective!r}", field="objective")
        self.objective = objective

    @property
    def needs(self) -> tuple[str, ...]:
        return ("tb_moved",) if self.use_tb else ()

    def get_params(self) -> dict[str, Any]:
        return {
            "use_tb": self.use_tb,
            "objective": self.objective,
            "p_grid_w": [float(self.p_grid_w[0]), float(self.p_grid_w[-1]), len(self.p_grid_w)],
        }

    def _terms(
        self, E: np.ndarray, t: np.ndarray, TB: np.ndarray, F: np.ndarray, p: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(z, g, h) per point for the LS z ≈ α·g + β·h at overhead p (all broadcast)."""
        u = (E - p * t) / F  # energy per TFLOP left after the overhead
        # Terms that do not depend on p keep their (B, 1, n) shape: the grid dimension is only paid for
        # where it matters (this halves the evaluation time).
        x = TB / F if self.use_tb else np.zeros_like(E / F)
        if self.objective == "energy":  # u ≈ a + c·x
            return u, np.ones_like(x), x
        return np.ones_like(x), u, -x  # 1 ≈ b·u − d·x, a = 1/b, c = d/b

    def _coef(self, alpha: np.ndarray, beta: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        if self.objective == "energy":
            return alpha, beta
        with np.errstate(divide="ignore", invalid="ignore"):
            return 1.0 / alpha, beta / alpha

    def _loo_err_energy(self, E: np.ndarray, t: np.ndarray, TB: np.ndarray, F: np.ndarray) -> np.ndarray:
        """LOO relative FLOP errors (B, G, n) of the energy objective, for every grid point at once.

        For fixed p the LOO normal equations are linear in p, so the LOO coefficients are
        α(p) = α₀ − p·α₁ and c(p) = β₀ − p·β₁ with (B, n) coefficient arrays computed once; only the
        final few element-wise operations run over the (B, G, n) grid (about 3× faster than forming the
        sums per grid point, with identical results).
        """
        A, T = E / F, t / F  # energy and time per TFLOP
        n = A.shape[1]
        Sgg = n - 1.0
        a0 = A.sum(1, keepdims=True) - A  # LOO Σz = a0 − p·a1
        a1 = T.sum(1, keepdims=True) - T
        P = self.p_grid_w[None, :, None]
        with np.errstate(divide="ignore", invalid="ignore"):
            c0, c1 = a0 / Sgg, a1 / Sgg  # the c = 0 solution: α = Σz / (n − 1)
            if not self.use_tb:
                return (A[:, None, :] - P * T[:, None, :]) / (c0[:, None, :] - P * c1[:, None, :]) - 1.0
            x = TB / F
            Sgh = x.sum(1, keepdims=True) - x
            Shh = (x * x).sum(1, keepdims=True) - x * x
            b0 = (x * A).sum(1, keepdims=True) - x * A  # LOO Σxz = b0 − p·b1
            b1 = (x * T).sum(1, keepdims=True) - x * T
            det = Sgg * Shh - Sgh * Sgh
            beta0, beta1 = (Sgg * b0 - Sgh * a0) / det, (Sgg * b1 - Sgh * a1) / det
            alpha0, alpha1 = (a0 - beta0 * Sgh) / Sgg, (a1 - beta1 * Sgh) / Sgg
            n0, n1 = A - beta0 * x, T - beta1 * x
            ok = (beta0[:, None, :] - P * beta1[:, None, :]) >= 0  # NaN (singular) → constrained branch
            num = np.where(ok, n0[:, None, :] - P * n1[:, None, :], A[:, None, :] - P * T[:, None, :])
            den = np.where(
                ok, alpha0[:, None, :] - P * alpha1[:, None, :], c0[:, None, :] - P * c1[:, None, :]
            )
            return num / den - 1.0

    def fit_batch(self, X: Features, flops: np.ndarray) -> BatchFit:
        F = flops / TFLOP
        E, t = X.net_energy_j, X.duration_s
        TB = np.nan_to_num(X.tb_moved) if self.use_tb else np.zeros_like(E)
        grid = self.p_grid_w
        if self.objective == "energy":
            err = self._loo_err_energy(E, t, TB, F)
            sq = np.square(err)
            crit = sq.mean(axis=-1)
            crit[~np.isfinite(crit)] = np.inf
            gi = np.argmin(crit, axis=1)
            rows = np.arange(E.shape[0])
            p = grid[gi]
            z, g, h = self._terms(E, t, TB, F, p[:, None])
            sums = [q.sum(-1) for q in (g * g, g * h, h * h, g * z, h * z)]
            a_f, c_f = self._coef(*_ls2_nonneg(*sums))
            params = {"e_per_tflop_j": a_f, "e_per_tb_j": c_f, "p_overhead_w": p}
            return BatchFit(params, (err[rows, gi] + 1.0) * F * TFLOP, {"p_overhead_w": p})
        # shapes: records (B, 1, n) against the grid (1, G, 1)
        E3, t3, TB3, F3 = (a[:, None, :] for a in (E, t, TB, F))
        z, g, h = self._terms(E3, t3, TB3, F3, grid[None, :, None])
        prods = (g * g, g * h, h * h, g * z, h * z)
        tot = [q.sum(-1, keepdims=True) for q in prods]
        # LOO sums: total minus the held-out point's own contribution
        loo = [T - q for T, q in zip(tot, prods, strict=True)]
        if self.use_tb:
            alpha, beta = _ls2_nonneg(*loo)
        else:  # no TB column: the LS has one coefficient, α = Σgz/Σgg (3× faster than the general path)
            alpha, beta = loo[3] / loo[0], np.zeros((1, 1, 1))
        a, c = self._coef(alpha, beta)
        with np.errstate(divide="ignore", invalid="ignore"):
            num = E3 - grid[None, :, None] * t3
            if self.use_tb:
                num = num - c * TB3
            loo_pred = num / a
            sq = loo_pred / F3
            sq -= 1.0
            np.square(sq, out=sq)
        crit = sq.mean(axis=-1)  # (B, G): mean squared LOO relative FLOP error
        crit[~np.isfinite(crit)] = np.inf
        gi = np.argmin(crit, axis=1)
        rows = np.arange(E.shape[0])
        p = grid[gi]
        G = len(grid)
        alpha_f, beta_f = _ls2_nonneg(*(np.broadcast_to(T, (T.shape[0], G, 1))[rows, gi, 0] for T in tot))
        a_f, c_f = self._coef(alpha_f, beta_f)
        params = {"e_per_tflop_j": a_f, "e_per_tb_j": c_f, "p_overhead_w": p}
        return BatchFit(params, loo_pred[rows, gi] * TFLOP, {"p_overhead_w": p})

    def check_params(self, params: Mapping[str, float]) -> None:
        # Energy per TFLOP must be positive and the TB coefficient is constrained to c >= 0 by the fit.
        a = params.get("e_per_tflop_j")
        if a is not None and not a > 0:
            raise InputError(f"must be > 0 (J per TFLOP), got {a!r}", field="e_per_tflop_j")
        c = params.get("e_per_tb_j")
        if c is not None and not c >= 0:
            raise InputError(f"must be >= 0 (the fit constrains c >= 0), got {c!r}", field="e_per_tb_j")

    def predict_params(self, params: Mapping[str, np.ndarray], X: Features) -> np.ndarray:
        a = np.asarray(params["e_per_tflop_j"], dtype=float)[..., None]
        c = np.asarray(params.get("e_per_tb_j", 0.0), dtype=float)[..., None]
        p = np.asarray(params["p_overhead_w"], dtype=float)[..., None]
        TB = np.nan_to_num(X.tb_moved) if self.use_tb else 0.0
        # an extreme (accepted) profile can overflow to inf: a non-finite estimate is never "below"
        # (estimate.verdict), so it is reported, not warned about on stderr
        with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
            return (X.net_energy_j - c * TB - p * X.duration_s) / a * TFLOP


class Eq1Model(PublishedModel):
    name = "eq1"
    description = "published 3-parameter model: (E − E_per_TB·TB − P_overhead·t)/E_per_TFLOP"

    def __init__(self, p_grid_w: Sequence[float] | None = None, objective: str = "energy") -> None:
        super().__init__(use_tb=True, p_grid_w=p_grid_w, objective=objective)


class Eq2Model(PublishedModel):
    name = "eq2"
    description = "published 2-parameter ablation: (E − P_overhead·t)/E_per_TFLOP"

    def __init__(self, p_grid_w: Sequence[float] | None = None, objective: str = "energy") -> None:
        super().__init__(use_tb=False, p_grid_w=p_grid_w, objective=objective)


# ==================================================================================== log-linear ridge

# Features of the log-throughput regression, each a function of (E, t, TB, util) — never of the truth.
_FEATURES: dict[str, tuple[Callable[[Features], np.ndarray], tuple[str, ...]]] = {
    "log_power": (lambda X: np.log(X.net_energy_j / X.duration_s), ()),
    "log_power_sq": (lambda X: np.log(X.net_energy_j / X.duration_s) ** 2, ()),
    "log_bw": (lambda X: np.log(X.tb_moved / X.duration_s), ("tb_moved",)),
    "log_tb_per_j": (lambda X: np.log(X.tb_moved / X.net_energy_j), ("tb_moved",)),
    # seconds per joule of net energy (= 1 / net power): eq. 1's overhead share P_overhead·t/E in log form
    "log_s_per_j": (lambda X: np.log(X.duration_s / X.net_energy_j), ()),
    "util": (lambda X: X.mean_util, ("mean_util",)),
}

# Ridge strengths on raw elasticities (log-log slopes). The features spread by ~0.05 in log units on a
# frontier set, so α = 0.01 on 14 runs corresponds to a shrinkage of order one standardised unit.
RIDGE_ALPHAS = (0.0, 0.001, 0.003, 0.01, 0.03, 0.1, 0.3)


class LogLinearModel(FlopModel):
    """log(F/t) = β₀ + Σ βⱼ·featureⱼ, ridge on standardised features, α chosen by LOO in the training set.

    Why log throughput: the Jetson data show FLOP throughput rising *sub-linearly* with net power
    (J/TFLOP falls from 12.5 to 9.7 as power rises from 6.7 to 8.3 W), i.e. a power law X ∝ P^β rather
    than eq. 2's straight line P = a·X + p; and relative errors are what we care about, which least squares
    in log space minimises. DRAM bandwidth (``log_bw``) captures memory-bound phases that burn energy
    without counted FLOPs (the study's E_per_TB term, in a multiplicative form).
    """

    min_train = 4

    def __init__(
        self,
        features: Sequence[str] = ("log_power",),
        alphas: Sequence[float] = RIDGE_ALPHAS,
        name: str | None = None,
        offset: str = "duration",
        rule: str = "min",
        penalty: Sequence[Sequence[float]] | None = None,
    ) -> None:
        if rule not in ("min", "1se", "average"):
            raise InputError(f"rule must be 'min', '1se' or 'average', got {rule!r}", field="rule")
        self.rule = rule
        if offset not in ("duration", "energy"):
            raise InputError(f"offset must be 'duration' or 'energy', got {offset!r}", field="offset")
        self.offset = offset
        unknown = [f for f in features if f not in _FEATURES]
        if unknown:
            raise InputError(f"unknown feature(s) {unknown}; known: {sorted(_FEATURES)}", field="features")
        self.features = tuple(features)
        self.alphas = tuple(float(a) for a in alphas)
        k = len(self.features)
        # Ridge penalty matrix Q on the raw slopes (penalty α·βᵀQβ); None is the identity. A non-identity Q
        # shrinks the slopes measured in other coordinates of the same feature span (see PENALTY_EQ1_COORDS).
        Q = np.eye(k) if penalty is None else np.asarray(penalty, dtype=float)
        if (
            Q.shape != (k, k)
            or not np.all(np.isfinite(Q))
            or not np.allclose(Q, Q.T)
            or np.linalg.eigvalsh(Q).min() < -1e-12
        ):
            raise InputError(
                f"penalty must be a symmetric positive semi-definite {k}×{k} matrix, got {penalty!r}",
                field="penalty",
            )
        self.penalty = None if penalty is None else tuple(tuple(float(x) for x in row) for row in Q)
        self.name = name or "loglin[" + ",".join(self.features) + "]"
        self.description = "log-throughput ridge regression on " + ", ".join(self.features)

    @property
    def needs(self) -> tuple[str, ...]:
        return tuple(sorted({c for f in self.features for c in _FEATURES[f][1]}))

    @property
    def positive_needs(self) -> tuple[str, ...]:
        """Needed columns that enter a logarithm, so must be > 0."""
        return tuple(sorted({c for f in self.features if f.startswith("log") for c in _FEATURES[f][1]}))

    def check_features(self, X: Features) -> None:
        super().check_features(X)
        for col in ("net_energy_j", *self.positive_needs):
            arr = np.asarray(getattr(X, col))
            if np.any(arr <= 0):
                i = int(np.argmax(np.ravel(arr) <= 0))
                raise InputError(
                    f"model {self.name!r} takes its logarithm, so it must be > 0 for every record "
                    f"(record #{i} has {float(np.ravel(arr)[i]):g})",
                    field=col,
                )

    def get_params(self) -> dict[str, Any]:
        return {
            "features": list(self.features),
            "alphas": list(self.alphas),
            "offset": self.offset,
            "rule": self.rule,
            "penalty": None if self.penalty is None else [list(r) for r in self.penalty],
        }

    def _base(self, X: Features) -> np.ndarray:
        # offset "duration": y = log(F/t) (throughput), ridge shrinks towards constant throughput;
        # offset "energy": y = log(F/E) (FLOP per joule), ridge shrinks towards constant J/FLOP — the
        # physically sensible prior (the study's E_per_TFLOP), so strong shrinkage degrades gracefully.
        return X.duration_s if self.offset == "duration" else X.net_energy_j

    def _design(self, X: Features) -> np.ndarray:
        with np.errstate(divide="ignore", invalid="ignore"):
            cols = [_FEATURES[f][0](X) for f in self.features]
        return np.stack(cols, axis=-1) if cols else np.zeros(X.net_energy_j.shape + (0,))

    def fit_batch(self, X: Features, flops: np.ndarray) -> BatchFit:
        base = self._base(X)
        y = np.log(flops / base)  # (B, n)
        Z = self._design(X)  # (B, n, k)
        B, n, k = Z.shape
        mu = Z.mean(axis=1, keepdims=True)
        # Centre only (the unpenalised intercept makes that exact); no data-derived scaling, so the
        # penalty is fixed in raw units (elasticities) and the hat-matrix LOO equals true refits.
        sd = np.ones_like(mu)
        A = np.concatenate([np.ones((B, n, 1)), (Z - mu) / sd], axis=-1)  # (B, n, k+1)
        AtA = np.einsum("bni,bnj->bij", A, A)
        Aty = np.einsum("bni,bn->bi", A, y)
        coefs, loos, crits, ses = [], [], [], []
        Q = np.zeros((k + 1, k + 1))  # the intercept is not shrunk
        Q[1:, 1:] = np.eye(k) if self.penalty is None else np.asarray(self.penalty)
        for alpha in self.alphas:
            pen = alpha * Q
            M = np.linalg.pinv(AtA + pen)  # (B, k+1, k+1); pinv: collinear features stay finite
            coef = np.einsum("bij,bj->bi", M, Aty)
            resid = y - np.einsum("bni,bi->bn", A, coef)
            h = np.einsum("bni,bij,bnj->bn", A, M, A)  # hat-matrix diagonal: exact LOO for ridge
            loo = resid / np.clip(1.0 - h, 1e-9, None)
            sq = np.expm1(-loo) ** 2  # squared relative FLOP error, the criterion of eq1/eq2 too
            coefs.append(coef)
            loos.append(loo)
            crits.append(sq.mean(axis=1))
            ses.append(sq.std(axis=1, ddof=1) / np.sqrt(n))
        crit = np.stack(crits)  # (n_alphas, B)
        imin = np.argmin(crit, axis=0)
        cols = np.arange(B)
        if self.rule == "1se":
            # one-standard-error rule (Hastie, Tibshirani & Friedman, ESL §7.10): the strongest shrinkage
            # whose LOO error is within one SE of the best — with 14 runs the minimum itself is noisy.
            limit = crit[imin, cols] + np.stack(ses)[imin, cols]
            order = np.argsort(self.alphas)
            ok = crit[order] <= limit[None, :]
            pick = order[len(order) - 1 - np.argmax(ok[::-1], axis=0)]
        else:
            pick = imin
        best = {
            "coef": np.stack(coefs)[pick, cols],
            "loo": np.stack(loos)[pick, cols],
            "alpha": np.asarray(self.alphas)[pick],
        }
        if self.rule == "average":
            # pseudo-Bayesian model averaging over the ridge grid: weights ∝ (LOO MSE)^(−n/2), the Gaussian
            # likelihood of the LOO residuals — smooths the noisy arg-min of 14 LOO errors
            logw = -0.5 * n * np.log(crit)
            w = np.exp(logw - logw.max(axis=0, keepdims=True))
            w /= w.sum(axis=0, keepdims=True)  # (n_alphas, B)
            best["coef"] = np.einsum("ab,abk->bk", w, np.stack(coefs))
            best["loo"] = np.einsum("ab,abn->bn", w, np.stack(loos))
            best["alpha"] = np.einsum("ab,a->b", w, np.asarray(self.alphas))
        coef = best["coef"]
        beta = coef[:, 1:] / sd[:, 0, :]  # back to raw feature units
        intercept = coef[:, 0] - np.sum(beta * mu[:, 0, :], axis=1)
        params = {"intercept": intercept, **{f"coef_{f}": beta[:, j] for j, f in enumerate(self.features)}}
        loo_flops = np.exp(y - best["loo"]) * base
        return BatchFit(params, loo_flops, {"ridge_alpha": best["alpha"]})

    def predict_params(self, params: Mapping[str, np.ndarray], X: Features) -> np.ndarray:
        Z = self._design(X)  # (…, m, k)
        logx = np.asarray(params["intercept"], dtype=float)[..., None] + np.zeros(X.duration_s.shape)
        # Degenerate inputs (zero energy or traffic) give ±inf logs: let them through as inf/NaN and let
        # the caller (Profile.estimate) turn them into a clear message.
        with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
            for j, f in enumerate(self.features):
                logx = logx + np.asarray(params[f"coef_{f}"], dtype=float)[..., None] * Z[..., j]
            return np.exp(logx) * self._base(X)


# ==================================================================================== nested selection


class SelectModel(FlopModel):
    """Chooses, inside each training set, the candidate with the smallest LOO squared relative error.

    The choice is made from the training records only (nested model selection), so held-out errors stay
    honest. Ties are broken towards the earlier (simpler) candidate by a 1 % margin, which avoids trading
    a simple model for a flexible one on noise.
    """

    margin = 0.01

    def __init__(self, candidates: Sequence[FlopModel], name: str = "select") -> None:
        if not candidates:
            raise InputError("needs at least one candidate model")
        self.candidates = list(candidates)
        self.min_train = max(c.min_train for c in self.candidates)
        self.name = name
        self.description = "nested LOO choice among " + ", ".join(c.name for c in self.candidates)

    @property
    def needs(self) -> tuple[str, ...]:
        return tuple(sorted({n for c in self.candidates for n in c.needs}))

    def get_params(self) -> dict[str, Any]:
        return {"candidates": [c.name for c in self.candidates]}

    def fit_batch(self, X: Features, flops: np.ndarray) -> BatchFit:
        fits = [c.fit_batch(X, flops) for c in self.candidates]
        crit = np.stack([np.mean((f.loo_flops / flops - 1.0) ** 2, axis=1) for f in fits])  # (C, B)
        crit = np.where(np.isfinite(crit), crit, np.inf)
        crit = crit * (1.0 + self.margin * np.arange(len(fits)))[:, None]
        choice = np.argmin(crit, axis=0)
        B = flops.shape[0]
        params: dict[str, np.ndarray] = {"choice": choice.astype(float)}
        for i, (_c, f) in enumerate(zip(self.candidates, fits, strict=True)):
            for k, v in f.params.items():
                params[f"{i}:{k}"] = np.where(choice == i, v, np.nan)
        loo = np.stack([f.loo_flops for f in fits])[choice, np.arange(B)]
        return BatchFit(params, loo, {"choice": choice.astype(float)})

    def _sub_params(self, params: Mapping[str, Any], i: int) -> dict[str, Any]:
        pre = f"{i}:"
        return {k[len(pre) :]: v for k, v in params.items() if k.startswith(pre)}

    def predict_params(self, params: Mapping[str, np.ndarray], X: Features) -> np.ndarray:
        choice = np.asarray(params["choice"]).astype(int)
        out = np.full(X.net_energy_j.shape, np.nan)
        for i, c in enumerate(self.candidates):
            sel = choice == i
            if not np.any(sel):
                continue
            pred = c.predict_params(
                {
                    k: np.nan_to_num(np.asarray(v, dtype=float))
                    for k, v in self._sub_params(params, i).items()
                },
                X,
            )
            out = np.where(sel[..., None] if np.ndim(sel) else sel, pred, out)
        return out

    def component(self, params: Mapping[str, float]) -> FlopModel:
        return self.candidates[int(params["choice"])]

    def check_params(self, params: Mapping[str, float]) -> None:
        choice = params.get("choice")
        if choice is None or choice != int(choice) or not 0 <= choice < len(self.candidates):
            raise InputError(
                f"must be a candidate index 0–{len(self.candidates) - 1}, got {choice!r}", field="choice"
            )
        i = int(choice)
        try:
            self.candidates[i].check_params(self._sub_params(params, i))
        except InputError as e:
            raise InputError(e.detail, field=f"{i}:{e.field}") from None

    def chosen(self) -> str:
        """Name of the candidate chosen by the last ``fit``."""
        self._check_fitted()
        return self.candidates[int(self.params_["choice"])].name

    def compact_params(self, params: Mapping[str, float]) -> dict[str, float]:
        """Only the chosen candidate's parameters (NaN placeholders of the others dropped)."""
        i = int(params["choice"])
        return {"choice": float(i), **{f"{i}:{k}": float(v) for k, v in self._sub_params(params, i).items()}}


# ==================================================================================== registry


RIDGE_ALPHAS_DEFAULT = RIDGE_ALPHAS

# Ridge penalty for slopes (β_P, β_BW) on (log P_net, log BW) that equals the identity penalty on the slopes
# in eq. 1's coordinates, log(TB/E) and log(t/E). Eq. 1 (Fowler 2026), E = a·F + c·TB + p·t, gives
# F/E = (1 − c·TB/E − p·t/E)/a: energy per FLOP is set by the DRAM bytes per joule and the seconds per
# joule (overhead share), so those are the natural axes along which to shrink towards constant J/FLOP.
# With z' = (log TB/E, log t/E) = (log BW − log P, −log P) = z·M, M = [[−1, −1], [1, 0]], β = M·β' and
# |β'|² = βᵀ(M·Mᵀ)⁻¹β = βᵀQβ with Q below. Same feature span and prediction formula as the identity-
# penalty fit; only the direction of shrinkage differs (tests/test_estimate_models.py checks the identity).
PENALTY_EQ1_COORDS = ((1.0, 1.0), (1.0, 2.0))


def _default() -> FlopModel:
    # Chosen by held-out error over the study's split protocol (docs/estimator.md has the comparison):
    # FLOP per joule as a power law in net power and DRAM bandwidth; ridge fits shrinking towards a
    # constant J/FLOP along eq. 1's coordinates (bytes per joule, seconds per joule — PENALTY_EQ1_COORDS:
    # −0.12 pp against the identity penalty, mean over split seeds 1–9), averaged over the ridge grid with
    # weights from their LOO errors inside each training set (picking the single LOO-best strength was
    # 0.05 pp worse: the arg-min of 14 LOO errors is noisy). A nested LOO *choice* between candidate models
    # ("select") was tried and lost: with 14 runs the LOO ranking of models is mostly noise.
    return LogLinearModel(
        ("log_power", "log_bw"),
        RIDGE_ALPHAS_DEFAULT,
        name="default",
        offset="energy",
        rule="average",
        penalty=PENALTY_EQ1_COORDS,
    )


def _select() -> FlopModel:
    return SelectModel(
        [
            Eq2Model(),
            LogLinearModel(
                ("log_power", "log_bw"), RIDGE_ALPHAS_DEFAULT, name="loglin-e-p-bw", offset="energy"
            ),
        ],
        name="select",
    )


MODELS: dict[str, Callable[[], FlopModel]] = {
    "eq1": Eq1Model,
    "eq2": Eq2Model,
    # log throughput on log net power only: the non-linear power–throughput curve without bandwidth
    "loglin-p": lambda: LogLinearModel(("log_power",), RIDGE_ALPHAS_DEFAULT, name="loglin-p"),
    # same features as the default, but shrinking towards constant throughput (offset = duration)
    "loglin-p-bw": lambda: LogLinearModel(("log_power", "log_bw"), RIDGE_ALPHAS_DEFAULT, name="loglin-p-bw"),
    # adds mean utilisation: lost on held-out error (over-fits with 14 runs), kept for the record
    "loglin-p-bw-util": lambda: LogLinearModel(
        ("log_power", "log_bw", "util"), RIDGE_ALPHAS_DEFAULT, name="loglin-p-bw-util", offset="energy"
    ),
    "select": _select,
    "default": _default,
    # the previous default: same features and averaging, identity ridge penalty on (β_P, β_BW)
    "default-v1": lambda: LogLinearModel(
        ("log_power", "log_bw"), RIDGE_ALPHAS_DEFAULT, name="default-v1", offset="energy", rule="average"
    ),
    # what "default" becomes when the records have no DRAM traffic (e.g. NVML before Hopper has no counter)
    "default-p": lambda: LogLinearModel(
        ("log_power",), RIDGE_ALPHAS_DEFAULT, name="default-p", offset="energy", rule="average"
    ),
}
DEFAULT_MODEL = "default"


def get_model(name: str) -> FlopModel:
    """A fresh, unfitted model by registry name (``eq1``, ``eq2``, ``default`` …)."""
    try:
        return MODELS[name]()
    except KeyError:
        raise InputError(
            f"unknown model {name!r}; choose one of {', '.join(MODELS)}", field="model"
        ) from None


def missing_features(model: FlopModel, X: Features) -> list[str]:
    """Feature columns ``model`` needs that are unknown (NaN) for at least one record of X.

    A column that enters a log feature must also be > 0: a DRAM counter that reads zero (no traffic
    reported) carries no information for log bandwidth, so it counts as missing rather than as −inf.
    """
    positive = getattr(model, "positive_needs", ())
    return [
        c
        for c in model.needs
        if np.isnan(getattr(X, c)).any() or (c in positive and (getattr(X, c) <= 0).any())
    ]


def resolve_model(name: str, X: Features) -> FlopModel:
    """``get_model(name)``, except that ``default`` falls back to ``default-p`` (power only) when the
    records lack DRAM traffic: the best model the available telemetry supports."""
    model = get_model(name)
    if name == DEFAULT_MODEL and missing_features(model, X):
        return get_model("default-p")
    return model


def model_names() -> list[str]:
    return list(MODELS)
