"""Seeded synthetic traces for the streaming tests and benchmarks/bench_scaling.py (labelled synthetic)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd

from flopwatch.telemetry.schema import COLUMNS
from flopwatch.telemetry.trace import Trace


def synth_frame(
    n_s: float = 3600,
    hz: float = 10,
    seed: int = 0,
    *,
    counter: bool = True,
    dram: bool = True,
    jitter: float = 0.0,
    devices: Sequence[str] = ("gpu0",),
    holes: bool = True,
) -> pd.DataFrame:
    """Alternating 300 s idle/busy periods (util ≈ 0.9, 350 W) with noise, an energy counter that resets
    halfway, and two holes in the sampling; rows of all devices interleaved in time order."""
    rng = np.random.default_rng(seed)
    t = np.arange(0, n_s, 1 / hz)
    if jitter:
        t = t + rng.uniform(0, jitter, t.size)
    frames = []
    for di, d in enumerate(devices):
        busy = ((t // 300) % 2 == 1) & ((t % 300) > 20 + di)
        util = np.where(busy, rng.uniform(0.85, 1.0, t.size), rng.uniform(0, 0.02, t.size))
        p = np.clip(50 + 300 * util + rng.normal(0, 2, t.size), 1, None)
        if counter:
            e = np.concatenate([[0], np.cumsum(0.5 * (p[1:] + p[:-1]) * np.diff(t))]) + 1e6
            e[t.size // 2 :] -= 5e5  # a counter reset
        else:
            e = np.full(t.size, np.nan)
        df = pd.DataFrame(
            {
                "t_s": t,
                "device": d,
                "power_w": p,
                "energy_j": e,
                "util": util,
                "mem_util": np.nan,
                "dram_bytes_per_s": util * 1e12 if dram else np.nan,
                "sm_clock_mhz": np.nan,
                "temp_c": np.nan,
            }
        )
        if holes:
            keep = np.ones(t.size, bool)
            keep[1000:1050] = False
            keep[5000:5003] = False
            df = df[keep]
        frames.append(df)
    df = pd.concat(frames).sort_values("t_s", kind="stable").reset_index(drop=True)
    df["wall_time"] = pd.to_datetime(1.7e9 + df["t_s"], unit="s", utc=True)
    df["device"] = df["device"].astype("string")
    df["gap_error"] = pd.Series([None] * len(df), dtype="string")
    return df[list(COLUMNS)]


def synth_trace(**kw: object) -> Trace:
    return Trace(synth_frame(**kw), {"simulated": True, "kind": "synthetic", "rate_hz": kw.get("hz", 10)})  # type: ignore[arg-type]
