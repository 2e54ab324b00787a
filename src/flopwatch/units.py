"""SI unit conversions and counter helpers. Vendor units are converted once, at the sensor boundary."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import numpy.typing as npt

MW_PER_W = 1e3
MJ_PER_J = 1e3
UJ_PER_J = 1e6
TERA = 1e12


def mw_to_w(mw: float) -> float:
    """Milliwatts to watts."""
    return mw / MW_PER_W


def mj_to_j(mj: float) -> float:
    """Millijoules to joules (NVML's total-energy counter is in mJ)."""
    return mj / MJ_PER_J


def uj_to_j(uj: float) -> float:
    """Microjoules to joules (Linux powercap/RAPL ``energy_uj``)."""
    return uj / UJ_PER_J


def mv_ma_to_w(mv: float, ma: float) -> float:
    """Millivolts × milliamps to watts (INA3221 ``in*_input`` × ``curr*_input``)."""
    return mv * ma / 1e6


def finite(x: Any) -> float | None:
    """``float(x)`` when ``x`` is a real, finite number (not a bool; numpy scalars count), else None.

    The one finite-number helper: a value read from a file, a payload or a sensor is either a usable number or
    "missing", never NaN, inf, True or an int too large for a float (no OverflowError escapes).
    """
    # the common case first, without the isinstance chain (the fleet calls this ~40 × per group)
    if type(x) is float:
        return x if math.isfinite(x) else None
    if isinstance(x, bool) or not isinstance(x, (int, float, np.integer, np.floating)):
        return None
    try:
        f = float(x)
    except OverflowError:
        return None
    return f if math.isfinite(f) else None


def counter_delta(prev: float, cur: float, max_range: float | None = None) -> float | None:
    """Increment of a monotonically increasing hardware counter between two reads.

    ``max_range`` is the value at which the counter wraps to zero (RAPL's ``max_energy_range_uj``).
    Returns ``None`` when the counter went backwards and no wrap range is known: that is a reset
    (e.g. an NVML driver reload), and the delta is unknowable, so callers must fall back to power.
    """
    if cur >= prev:
        return cur - prev
    if max_range is not None and max_range > 0:
        return (max_range - prev) + cur
    return None


def unwrap_counter(values: npt.ArrayLike, max_range: float | None = None) -> np.ndarray:
    """Cumulative increments of a counter series, handling wrap-around (with ``max_range``).

    Resets (backward steps without a known range) contribute NaN for that interval, so they show up
    as missing energy instead of a huge negative or positive jump.
    """
    v = np.asarray(values, dtype=float)
    if v.size == 0:
        return v.copy()
    d = np.diff(v)
    back = d < 0
    if max_range is not None and max_range > 0:
        d = np.where(back, (max_range - v[:-1]) + v[1:], d)
    else:
        d = np.where(back, np.nan, d)
    return np.concatenate([[0.0], d])


def nanmedian(a: npt.ArrayLike, axis: int) -> np.ndarray:
    """``np.nanmedian(a, axis)`` (or ``np.median`` of numbers) by one sort (NaN where a line has no number, and no
    warning): numpy's own takes a masked-array path on lines under 600 long, ≈ 10 × slower on the fleet's (GPUs ×
    windows) arrays, and its median imports ``numpy.ma`` on first use (≈ 50 ms, 4 % of a fleet estimate)."""
    x = np.asarray(a, dtype=float)
    s = np.sort(x, axis=axis)  # NaN last
    n = np.expand_dims(np.count_nonzero(~np.isnan(x), axis=axis), axis)
    lo, hi = np.take_along_axis(s, np.maximum(n - 1, 0) // 2, axis), np.take_along_axis(s, n // 2, axis)
    with np.errstate(invalid="ignore"):  # −inf and inf in the middle: NaN, as numpy's
        return np.squeeze((lo + hi) / 2, axis=axis)


def unique(a: npt.ArrayLike) -> np.ndarray:
    """``np.unique(a)``: the sorted distinct values, without the masked-array check that imports ``numpy.ma`` (an
    index asked for skips it; see :func:`nanmedian`)."""
    return np.unique(a, return_index=True)[0]
