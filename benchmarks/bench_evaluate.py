"""How long the study's 200-split evaluation takes, per model and for all models together.

Run:  python benchmarks/bench_evaluate.py [RECORDS] [--repeat 5]

RECORDS defaults to ../shared/data/jetson_flop_estimator/eval_results_v2_records.json. Prints the best of
``--repeat`` timings (the machine may be shared) next to a naive reference: refitting the published eq. 1
split by split and grid point by grid point with scipy.optimize.lsq_linear (timed on a few splits and
extrapolated), so the ratio shows what the vectorised batch fit buys.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np
from scipy.optimize import lsq_linear

from flopwatch.estimate.features import Features, FrontierGate, ground_truth
from flopwatch.estimate.models import P_OVERHEAD_GRID_W, get_model
from flopwatch.evaluate.splits import EVAL_MODELS, draw_splits, evaluate_models
from flopwatch.records import load_records

DEFAULT = (
    Path(__file__).resolve().parents[2] / "shared/data/jetson_flop_estimator/eval_results_v2_records.json"
)


def best_of(fn, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times)


def naive_eq1_split(X: Features, F: np.ndarray, tr: np.ndarray) -> None:
    """One split the slow way: for each grid point, n LOO fits with lsq_linear."""
    tf = F[tr] / 1e12
    E, t, TB = X.net_energy_j[tr], X.duration_s[tr], X.tb_moved[tr]
    n = len(tr)
    for p in P_OVERHEAD_GRID_W:
        for i in range(n):
            k = np.arange(n) != i
            A = np.column_stack([np.ones(n - 1), TB[k] / tf[k]])
            lsq_linear(A, (E[k] - p * t[k]) / tf[k], bounds=([-np.inf, 0], [np.inf, np.inf]))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("records", nargs="?", default=str(DEFAULT))
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--splits", type=int, default=200)
    args = ap.parse_args()
    rs = load_records(args.records, require=("net_energy_j", "duration_s", "total_flops"))
    kept = FrontierGate().apply(rs).kept
    X, F = Features.from_records(kept), ground_truth(kept)
    tr, te = draw_splits(len(kept), args.splits, 14, 0)
    print(
        f"{args.splits} splits of {len(kept)} frontier runs (14 train / {len(kept) - 14} test), best of "
        f"{args.repeat}"
    )
    print(f"{'model':<14}{'fit+predict (ms)':>18}")
    for name in EVAL_MODELS:
        m = get_model(name)

        def run(m=m) -> None:
            fit = m.fit_batch(X.take(tr), F[tr])
            m.predict_params(fit.params, X.take(te))

        print(f"{name:<14}{best_of(run, args.repeat) * 1e3:>18.1f}")
    total = best_of(lambda: evaluate_models(rs, n_splits=args.splits), args.repeat)
    full = best_of(
        lambda: evaluate_models(rs, n_splits=args.splits).to_dict(detail=True), max(1, args.repeat // 2)
    )
    print(f"{'all models':<14}{total * 1e3:>18.1f}   (evaluate_models, intervals and metrics included)")
    print(f"{'+ to_dict':<14}{full * 1e3:>18.1f}   (with per-workload, hyper-parameter, threshold tables)")
    n_naive = 2
    naive = best_of(lambda: [naive_eq1_split(X, F, tr[s]) for s in range(n_naive)], 1) / n_naive * args.splits
    vec = best_of(lambda: get_model("eq1").fit_batch(X.take(tr), F[tr]), args.repeat)
    print(
        f"eq1 naive lsq_linear loop (extrapolated from {n_naive} splits): {naive:.1f} s  vs vectorised "
        f"{vec * 1e3:.1f} ms  → {naive / vec:,.0f}× faster"
    )


if __name__ == "__main__":
    main()
