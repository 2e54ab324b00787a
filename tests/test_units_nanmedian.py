"""``flopwatch.units.nanmedian``: numpy's ``nanmedian`` along an axis, by one sort (the fleet reader's median scrape
rate per GPU, the built-in power model's median over cells)."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

from flopwatch.units import nanmedian, unique


@pytest.mark.parametrize("shape", [(256, 25), (3, 1270), (1, 1), (7, 2), (2, 7)])
@pytest.mark.parametrize("axis", [0, 1])
def test_equals_numpy_nanmedian(shape, axis):
    rng = np.random.default_rng(sum(shape) + axis)
    a = rng.normal(size=shape)
    a[rng.random(shape) < 0.4] = np.nan
    a[0] = np.nan  # a line (axis 1) or every line's first entry (axis 0) without a number
    a[-1, -1] = np.inf
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # numpy warns on all-NaN lines
        ref = np.nanmedian(a, axis=axis)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # ours does not
        got = nanmedian(a, axis=axis)
    assert got.shape == ref.shape
    assert np.array_equal(got, ref, equal_nan=True)


def test_even_and_odd_counts_and_infinities():
    a = np.array(
        [[1.0, 3.0, np.nan, 2.0], [4.0, np.nan, 1.0, np.nan], [np.nan] * 4, [-np.inf, np.inf, np.nan, np.nan]]
    )
    got = nanmedian(a, axis=1)
    assert got[:2].tolist() == [2.0, 2.5] and np.isnan(got[2]) and np.isnan(got[3])


def test_unique_is_numpy_unique_without_importing_numpy_ma():
    import subprocess
    import sys

    rng = np.random.default_rng(5)
    a = rng.integers(0, 50, 400)
    assert np.array_equal(unique(a), np.unique(a))
    code = "import sys, numpy as np; from flopwatch.units import unique, nanmedian; "
    code += "unique(np.arange(9) % 4); nanmedian(np.arange(9.0), 0); print('numpy.ma' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"  # the fleet path's first median or unique no longer costs ≈ 50 ms
