"""The seed study's ``timeseries.json`` (W. Fowler, UChicago XLab 2026) as trace columns and metadata.

The file holds ``power_mw``, ``gpu_pct`` and ``dram_bytes_s`` as ``[t_s, value]`` pairs at ~2 Hz on slightly
different timestamps, plus ``t_launch``/``t_start``/``t_end``. Rows are the power samples (the quantity
integrated); utilisation and DRAM rate are attached by nearest timestamp within half the median power period,
else left null (counted in ``metadata['alignment']``). The file has no wall clock: ``wall_time`` is null and
``metadata['wall_time_synthetic']`` says so. The file is read through :func:`flopwatch.io.read_json`
(size cap, nesting cap, one error line naming the file and field).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from flopwatch.errors import InputError
from flopwatch.io import read_json
from flopwatch.telemetry.schema import COLUMNS
from flopwatch.units import finite

if TYPE_CHECKING:
    import pandas as pd

#: The seed's ``timeseries.json`` files are under 1 MiB; a JSON trace is parsed whole, so cap its size.
MAX_JSON_BYTES = 256 * 2**20
#: The seed study's rail: the Jetson Orin Nano's GPU+CPU+CV input rail (INA3221 channel).
SEED_DEVICE = "jetson:VDD_CPU_GPU_CV"


def _series(data: dict[str, Any], key: str, file: str, required: bool) -> np.ndarray | None:
    if key not in data:
        if required:
            raise InputError("missing series", file=file, field=key)
        return None
    v = data[key]
    if not isinstance(v, list):
        raise InputError("expected a list of [t_s, value] pairs", file=file, field=key)
    for i, pair in enumerate(v):
        if not isinstance(pair, list | tuple) or len(pair) != 2 or any(finite(x) is None for x in pair):
            raise InputError(
                f"expected a [t_s, value] pair of finite numbers, got {pair!r}"[:200],
                file=file,
                record=i,
                field=key,
            )
    arr = np.asarray([[float(a), float(b)] for a, b in v], dtype=float).reshape(-1, 2)
    if arr.shape[0] and np.any(np.diff(arr[:, 0]) < 0):
        i = int(np.argmax(np.diff(arr[:, 0]) < 0)) + 1
        raise InputError("timestamps go backwards", file=file, record=i, field=key)
    return arr


def read_seed_timeseries(path: str | os.PathLike[str]) -> tuple[pd.DataFrame, dict[str, Any]]:
    """The trace columns (:data:`~flopwatch.telemetry.schema.COLUMNS`) and metadata of a seed file."""
    import pandas as pd

    p = Path(path)
    file = str(p)
    not_a_trace = (
        "not a trace: expected a JSON object with power_mw, gpu_pct, dram_bytes_s series (the seed study's "
        "timeseries.json) or a Parquet trace (flopwatch record)"
    )
    try:
        data = read_json(p, kind="trace file", max_bytes=MAX_JSON_BYTES)
    except InputError:
        if p.suffix.lower() in (".jsonl", ".ndjson"):  # records (JSON Lines) passed where a trace belongs
            raise InputError(not_a_trace + "; this is JSON Lines (records?)", file=file) from None
        raise
    if not isinstance(data, dict) or not {"power_mw", "gpu_pct", "dram_bytes_s"} & data.keys():
        # a profile, records or summary passed where a trace belongs: say what was expected, not a field
        raise InputError(not_a_trace, file=file)
    power = _series(data, "power_mw", file, True)
    assert power is not None
    if power.shape[0] < 2:
        raise InputError("need at least two power samples", file=file, field="power_mw")
    util = _series(data, "gpu_pct", file, False)
    dram = _series(data, "dram_bytes_s", file, False)
    marks: dict[str, float] = {}
    for k in ("t_launch", "t_start", "t_end"):
        if data.get(k) is not None:
            x = finite(data[k])
            if x is None:
                raise InputError(f"expected a number, got {data[k]!r}"[:200], file=file, field=k)
            marks[k] = x

    base = pd.DataFrame({"t_s": power[:, 0], "power_w": power[:, 1] / 1e3})
    tol = 0.5 * float(np.median(np.diff(power[:, 0])))
    alignment: dict[str, Any] = {"rows": "power_mw", "tolerance_s": tol}

    def attach(arr: np.ndarray | None, name: str, scale: float, key: str) -> None:
        if arr is None:
            base[name] = np.nan
            return
        other = pd.DataFrame({"t_s": arr[:, 0], name: arr[:, 1] * scale})
        merged = pd.merge_asof(base[["t_s"]], other, on="t_s", direction="nearest", tolerance=tol)
        base[name] = merged[name].to_numpy()
        alignment[key] = {"n": int(arr.shape[0]), "matched_rows": int(np.isfinite(base[name]).sum())}

    attach(util, "util", 1e-2, "gpu_pct")
    attach(dram, "dram_bytes_per_s", 1.0, "dram_bytes_s")
    n = len(base)
    df = pd.DataFrame(
        {
            "t_s": base["t_s"],
            # the file has no wall clock (its mtime is not one): null, so a replay stamps the time it replays at
            "wall_time": pd.Series(pd.NaT, index=base.index, dtype="datetime64[ns, UTC]"),
            "device": pd.Series([SEED_DEVICE] * n, dtype="string"),
            "power_w": base["power_w"],
            "energy_j": np.nan,
            "util": base["util"],
            "mem_util": np.nan,
            "dram_bytes_per_s": base["dram_bytes_per_s"],
            "sm_clock_mhz": np.nan,
            "temp_c": np.nan,
            "gap_error": pd.Series([None] * n, dtype="string"),
        }
    )[list(COLUMNS)]
    md = {
        "schema": "seed.timeseries",
        "kind": "seed-timeseries",
        "source": file,
        "rate_hz": 1.0 / (2 * tol),
        "simulated": False,
        "fingerprint": {"device": "Jetson Orin Nano (seed study)", "rail": "VDD_CPU_GPU_CV"},
        "t0_monotonic_s": 0.0,
        "wall_time_synthetic": True,
        "alignment": alignment,
        **marks,
    }
    return df, md
