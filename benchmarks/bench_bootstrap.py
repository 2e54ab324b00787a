"""Speed of the MASCOTS reproduction and of the vectorised bootstrap vs a per-resample statsmodels loop.

Prints, side by side:
  * the whole reproduction (load, fits, 2000-resample bootstraps incl. per-cell SD, six GPUs) — target < 3 s;
  * the per-GPU bootstrap (R², MAPE, residual SD) vectorised vs. a straightforward loop that fits
    ``statsmodels.OLS`` once per resample, on the same resample indices, and the speed-up ratio;
  * that both give the same numbers (max abs difference).

Run:  python benchmarks/bench_bootstrap.py [--n-boot 2000] [--loop-boot N]
``--loop-boot`` < n-boot times the loop on fewer resamples and scales its time linearly (said so in the output).
"""

from __future__ import annotations

import argparse
import time

import numpy as np


def loop_bootstrap(x: np.ndarray, y: np.ndarray, idx: np.ndarray) -> np.ndarray:
    import statsmodels.api as sm

    out = np.empty((len(idx), 3))
    for b, ii in enumerate(idx):
        xb, yb = x[ii], y[ii]
        res = sm.OLS(yb, sm.add_constant(xb, has_constant="add")).fit()
        resid = res.resid
        out[b] = (
            res.rsquared,
            np.mean(np.abs(resid) / yb) * 100,
            np.sqrt(res.ssr / (len(yb) - 2)) / yb.mean() * 100,
        )
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n-boot", type=int, default=2000)
    ap.add_argument(
        "--loop-boot", type=int, default=None, help="resamples for the statsmodels loop (default n-boot)"
    )
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    n_boot = args.n_boot
    loop_boot = args.loop_boot or n_boot

    t0 = time.perf_counter()
    import pandas  # noqa: F401  (import cost is part of the reproduction, as in the CLI)

    from flopwatch.powermodel.datasets import load_mascots
    from flopwatch.powermodel.fit import bootstrap_gpu_stats
    from flopwatch.powermodel.reproduce import reproduce

    t_imp = time.perf_counter() - t0
    t = time.perf_counter()
    r = reproduce(n_boot=n_boot, seed=args.seed)
    t_repro = time.perf_counter() - t
    print(
        f"whole reproduction (Tables II-IV, {n_boot} resamples x 6 GPUs, incl. per-cell SD): {t_repro:.2f} s "
        f"(+ {t_imp:.2f} s imports) — target < 3 s; breakdown { ({k: round(v, 3) for k, v in r.seconds.items()}) }"
    )

    df = load_mascots()
    t_vec = t_loop = 0.0
    max_diff = 0.0
    for gpu, sub in df.groupby("gpu", sort=False):
        x, y = sub["mfu_pct"].to_numpy(), sub["power_w"].to_numpy()
        n = len(x)
        t = time.perf_counter()
        bs = bootstrap_gpu_stats(x, y, n_boot=n_boot, rng=np.random.default_rng(args.seed))
        t_vec += time.perf_counter() - t
        idx = np.random.default_rng(args.seed).integers(0, n, size=(n_boot, n))[:loop_boot]
        t = time.perf_counter()
        ref = loop_bootstrap(x, y, idx)
        t_loop += (time.perf_counter() - t) * (n_boot / loop_boot)
        ours = np.column_stack([bs.r2, bs.mape_pct, bs.resid_sd_pct])[:loop_boot]
        max_diff = max(max_diff, float(np.max(np.abs(ours - ref))))
        print(f"  {gpu:<16} n={n}")
    scaled = (
        "" if loop_boot == n_boot else f" (timed on {loop_boot} resamples, scaled x{n_boot / loop_boot:g})"
    )
    print(
        f"per-GPU bootstrap, {n_boot} resamples x 6 GPUs: vectorised {t_vec:.3f} s | statsmodels loop "
        f"{t_loop:.2f} s{scaled} | speed-up x{t_loop / t_vec:.0f}"
    )
    print(f"same resamples give the same statistics: max |difference| = {max_diff:.2e}")


if __name__ == "__main__":
    main()
