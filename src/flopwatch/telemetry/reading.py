"""Traces: columnar samples of one or more devices, their Parquet format, and energy over an interval.

A :class:`Trace` is what the sampler records and what detection, calibration and users' notebooks read.
Format (ARCHITECTURE.md, "File formats"): one row per sample (or gap) with columns

``t_s`` float64 (seconds since trace start on the sensor clock), ``wall_time`` (UTC timestamp),
``device`` (string id), ``power_w``, ``energy_j`` (cumulative counter, nullable), ``util`` (0–1),
``mem_util`` (0–1), ``dram_bytes_per_s``, ``sm_clock_mhz``, ``temp_c``, ``gap_error`` (nullable string:
why this tick has no reading) and vendor extras as ``extra_<name>`` columns.

The key-value metadata entry ``flopwatch`` (JSON) holds the sensor kind, device fingerprint, nominal rate,
flopwatch version, ``simulated`` and ``t0_monotonic_s`` (the sensor-clock time that ``t_s == 0`` stands for,
so workload records timed on the same clock can be joined to the trace).

Crash safety: :class:`TraceWriter` appends a Parquet row group per flush *and* the same batch to an Arrow
IPC stream journal (``FILE.parquet.journal``). Parquet needs its footer to be readable, which is only written
on close; the journal stays readable up to its last complete batch. On a clean close the journal is deleted;
after a crash :meth:`Trace.read` recovers from the journal, so at most one flush interval is lost.
"""

from __future__ import annotations

import json
import math
import os
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from flopwatch import __version__
from flopwatch.errors import InputError

if TYPE_CHECKING:  # pandas/pyarrow are imported lazily at run time (fast CLI start-up)
    import pandas as pd
    import pyarrow as pa

#: Optional scalar columns of a reading/trace, in the order the trace schema lists them.
OPTIONAL_FIELDS = ("energy_j", "util", "mem_util", "dram_bytes_per_s", "sm_clock_mhz", "temp_c")


@dataclass(frozen=True)
class Reading:
    """One sample of one device.

    ``t_s`` is the sensor clock's time (monotonic seconds, or virtual seconds for replay/sim);
    ``wall_time`` is UTC seconds since the epoch. ``energy_j`` is the device's cumulative energy counter
    when it has one (NVML total energy, RAPL, AMD accumulator), else ``None``; ``util`` is the
    busy ratio 0–1. ``extra`` holds vendor-specific values in SI units (``power_limit_w``,
    ``mem_clock_mhz``, ``tensor_util``, per-rail ``rail_VDD_IN_w`` …).
    """

    t_s: float
    wall_time: float
    device: str
    power_w: float | None
    energy_j: float | None = None
    util: float | None = None
    mem_util: float | None = None
    dram_bytes_per_s: float | None = None
    sm_clock_mhz: float | None = None
    temp_c: float | None = None
    extra: Mapping[str, float] = field(default_factory=dict)


@dataclass(frozen=True)
class Gap:
    """A tick at which a device produced no reading: the read failed, was too slow, or ticks were missed.

    Gaps are written to traces (``gap_error`` column) and counted by the sampler, so a hole in the data
    is always explained rather than silent.
    """

    t_s: float
    wall_time: float
    device: str
    error: str


#: Float columns of the trace schema, in order.
FLOAT_COLUMNS = ("power_w", "energy_j", "util", "mem_util", "dram_bytes_per_s", "sm_clock_mhz", "temp_c")
#: Every fixed column, in order.
COLUMNS = ("t_s", "wall_time", "device", *FLOAT_COLUMNS, "gap_error")
EXTRA_PREFIX = "extra_"
#: String column holding extras (JSON) first seen after the Parquet schema was fixed.
EXTRA_JSON = "extra_json"
METADATA_KEY = b"flopwatch"
JOURNAL_SUFFIX = ".journal"
SCHEMA_NAME = "flopwatch.trace/1"


@dataclass(frozen=True)
class IntervalEnergy:
    """Energy over ``[t0, t1]``.

    ``energy_j`` is the raw energy, ``net_energy_j`` subtracts ``idle_power_w × (t1 − t0)``; ``coverage`` is
    the fraction of the interval covered by samples no further apart than the gap tolerance; ``method`` is
    ``"counter"`` (hardware energy counter delta) or ``"trapezoid"`` (integral of power).
    """

    energy_j: float
    net_energy_j: float
    coverage: float
    method: str
    duration_s: float


def _now_version() -> str:
    return __version__


def base_metadata(
    *,
    kind: str,
    rate_hz: float | None = None,
    fingerprint: Mapping[str, Any] | None = None,
    simulated: bool = False,
    **extra: Any,
) -> dict[str, Any]:
    """A metadata dict with the keys every trace carries."""
    md: dict[str, Any] = {
        "schema": SCHEMA_NAME,
        "kind": kind,
        "rate_hz": rate_hz,
        "fingerprint": dict(fingerprint or {}),
        "flopwatch_version": _now_version(),
        "simulated": bool(simulated),
        "created_wall": time.time(),
    }
    md.update(extra)
    return md


def _row(item: Reading | Gap, t0: float) -> dict[str, Any]:
    if isinstance(item, Gap):
        return {
            "t_s": item.t_s - t0,
            "wall_time": item.wall_time,
            "device": item.device,
            "gap_error": item.error,
        }
    row: dict[str, Any] = {
        "t_s": item.t_s - t0,
        "wall_time": item.wall_time,
        "device": item.device,
        "gap_error": None,
    }
    for c in FLOAT_COLUMNS:
        row[c] = getattr(item, c)
    for k, v in item.extra.items():
        row[EXTRA_PREFIX + k] = v
    return row


def _frame(rows: list[dict[str, Any]], extra_cols: Sequence[str] | None = None) -> pd.DataFrame:
    """Rows → a DataFrame with every schema column, correct dtypes, extras last."""
    import pandas as pd

    df = pd.DataFrame.from_records(rows) if rows else pd.DataFrame()
    extras = (
        list(extra_cols)
        if extra_cols is not None
        else sorted(c for c in df.columns if c.startswith(EXTRA_PREFIX) and c != EXTRA_JSON)
    )
    out = pd.DataFrame(index=range(len(df)))
    out["t_s"] = df["t_s"].astype("float64") if "t_s" in df else pd.Series(dtype="float64")
    wall = df["wall_time"].astype("float64") if "wall_time" in df else pd.Series(dtype="float64")
    out["wall_time"] = pd.to_datetime(wall, unit="s", utc=True)
    out["device"] = df["device"].astype("string") if "device" in df else pd.Series(dtype="string")
    for c in (*FLOAT_COLUMNS, *extras):
        out[c] = pd.to_numeric(df[c], errors="coerce").astype("float64") if c in df else np.nan
    out["gap_error"] = df["gap_error"].astype("string") if "gap_error" in df else pd.Series(dtype="string")
    # keep the documented column order: fixed columns, then extras
    return out[[*COLUMNS, *extras]]


def _arrow_schema(extra_cols: Sequence[str], metadata: Mapping[str, Any]) -> pa.Schema:
    import pyarrow as pa

    fields = [
        pa.field("t_s", pa.float64(), nullable=False),
        pa.field("wall_time", pa.timestamp("ns", tz="UTC")),
        pa.field("device", pa.string()),
        *[pa.field(c, pa.float64()) for c in FLOAT_COLUMNS],
        pa.field("gap_error", pa.string()),
        *[pa.field(c, pa.float64()) for c in extra_cols],
        pa.field(EXTRA_JSON, pa.string()),
    ]
    return pa.schema(fields, metadata={METADATA_KEY: json.dumps(dict(metadata), default=str).encode()})


def _to_table(df: pd.DataFrame, schema: pa.Schema) -> pa.Table:
    import pyarrow as pa

    df = df.copy()
    if EXTRA_JSON not in df:
        df[EXTRA_JSON] = None
    return pa.Table.from_pandas(df[[f.name for f in schema]], schema=schema, preserve_index=False)


class Trace:
    """Samples of one or more devices (see the module docstring for the schema) plus metadata."""

    def __init__(self, df: pd.DataFrame, metadata: Mapping[str, Any] | None = None) -> None:
        missing = [c for c in COLUMNS if c not in df.columns]
        if missing:
            raise InputError(f"trace is missing columns {missing}", field=missing[0])
        self.df = df.sort_values(["t_s"], kind="stable").reset_index(drop=True)
        self.metadata: dict[str, Any] = dict(metadata or {})

    # ------------------------------------------------------------------ construction and I/O
    @classmethod
    def from_readings(
        cls, readings: Iterable[Reading | Gap], metadata: Mapping[str, Any] | None = None
    ) -> Trace:
        """Build a trace from readings and gaps; ``t_s`` is made relative to ``metadata['t0_monotonic_s']``
        (default: the first item's time)."""
        items = list(readings)
        md = dict(metadata or {})
        t0 = md.get("t0_monotonic_s")
        if t0 is None:
            t0 = min((it.t_s for it in items), default=0.0)
            md["t0_monotonic_s"] = t0
        md.setdefault("schema", SCHEMA_NAME)
        md.setdefault("flopwatch_version", _now_version())
        md.setdefault("simulated", False)
        return cls(_frame([_row(it, float(t0)) for it in items]), md)

    @classmethod
    def read(cls, path: str | os.PathLike[str]) -> Trace:
        """Read a flopwatch Parquet trace (recovering a crashed recording from its journal) or the seed's
        ``timeseries.json``. Bad files raise :class:`InputError` naming the file and field."""
        from flopwatch.telemetry.source import VALUE_COLUMNS, FrameSource, JournalSource, open_source

        src = open_source(path)
        # one streaming pass validates every row (time order, duplicates, physical range) before loading
        for _ in src.chunks(VALUE_COLUMNS):
            pass
        if isinstance(src, FrameSource):
            tr = src.trace
        elif isinstance(src, JournalSource):
            tr = _read_journal(Path(src.name))
        else:
            tr = _read_parquet(Path(src.name))
        dups = src.duplicates_dropped
        if dups:  # identical repeated samples (a sink called twice): keep one of each
            tr.df = tr.df.drop_duplicates(subset=[c for c in tr.df.columns if c != "wall_time"]).reset_index(
                drop=True
            )
            tr.metadata["duplicate_samples_dropped"] = dups
        return tr

    def write(self, path: str | os.PathLike[str], *, row_group_rows: int = 65536) -> Path:
        """Write as Parquet (atomically: temp file then rename)."""
        import pyarrow.parquet as pq

        p = Path(path)
        extras = self.extra_columns()
        schema = _arrow_schema(extras, self.metadata)
        tmp = p.with_name(p.name + ".tmp")
        pq.write_table(_to_table(self.df, schema), tmp, row_group_size=row_group_rows)
        os.replace(tmp, p)
        return p

    # ------------------------------------------------------------------ views
    def extra_columns(self) -> list[str]:
        return [c for c in self.df.columns if c.startswith(EXTRA_PREFIX) and c != EXTRA_JSON]

    def devices(self) -> list[str]:
        return [str(d) for d in self.df["device"].dropna().unique()]

    def for_device(self, device: str) -> Trace:
        if device not in self.devices():
            raise InputError(f"device {device!r} not in trace (devices: {self.devices()})", field="device")
        md = dict(self.metadata)
        md["device"] = device
        return Trace(self.df[self.df["device"] == device].reset_index(drop=True), md)

    @property
    def simulated(self) -> bool:
        return bool(self.metadata.get("simulated", False))

    @property
    def t0_monotonic_s(self) -> float | None:
        v = self.metadata.get("t0_monotonic_s")
        return None if v is None else float(v)

    @property
    def samples(self) -> pd.DataFrame:
        """Rows that are readings (gaps removed)."""
        return self.df[self.df["gap_error"].isna()]

    @property
    def gaps(self) -> pd.DataFrame:
        return self.df[self.df["gap_error"].notna()]

    @property
    def duration_s(self) -> float:
        if self.df.empty:
            return 0.0
        return float(self.df["t_s"].iloc[-1] - self.df["t_s"].iloc[0])

    def __len__(self) -> int:
        return len(self.df)

    def __repr__(self) -> str:
        return (
            f"Trace({len(self.df)} rows, devices={self.devices()}, duration_s={self.duration_s:.1f}, "
            f"kind={self.metadata.get('kind')!r}, simulated={self.simulated})"
        )

    # ------------------------------------------------------------------ physics
    def _device_frames(self, device: str | None) -> list[tuple[str, pd.DataFrame]]:
        s = self.samples
        devs = self.devices() if device is None else [device]
        return [(d, s[s["device"] == d]) for d in devs]

    def median_period_s(self, device: str | None = None) -> float:
        periods = []
        for _, d in self._device_frames(device):
            t = d["t_s"].to_numpy()
            if t.size >= 2:
                periods.append(float(np.median(np.diff(t))))
        if not periods:
            rate = self.metadata.get("rate_hz")
            return 1.0 / float(rate) if rate else math.nan
        return float(np.median(periods))

    def energy(
        self,
        t0: float,
        t1: float,
        *,
        idle_power_w: float = 0.0,
        device: str | None = None,
        max_gap_s: float | None = None,
    ) -> IntervalEnergy:
        """Energy over ``[t0, t1]`` (trace seconds), summed over devices unless ``device`` is given.

        Counter delta when the device has a cumulative energy counter (wrap/reset-aware: a backward step is
        a reset, whose interval is filled from power), trapezoid over power otherwise. Samples further apart
        than ``max_gap_s`` (default 3 × the median period) are bridged linearly but do not count as covered.
        Idle subtraction: ``net = energy − idle_power_w × (t1 − t0)`` per device (the study's E_net).
        """
        from flopwatch.telemetry.integrate import Window, integrate_windows
        from flopwatch.telemetry.source import FrameSource

        if not t1 >= t0:
            raise InputError(f"interval end {t1} is before its start {t0}", field="t1")
        (w,) = integrate_windows(
            FrameSource(self), [Window(t0, t1, device)], idle_power_w=idle_power_w, max_gap_s=max_gap_s
        )
        return IntervalEnergy(
            energy_j=w.energy_j,
            net_energy_j=w.net_energy_j,
            coverage=w.coverage,
            method=w.method,
            duration_s=w.duration_s,
        )

    def idle_power_w(
        self, t0: float | None = None, t1: float | None = None, device: str | None = None
    ) -> float:
        """Median power over ``[t0, t1]`` (whole trace by default), as the study's idle baseline."""
        s = self.samples
        if device is not None:
            s = s[s["device"] == device]
        if t0 is not None:
            s = s[s["t_s"] >= t0]
        if t1 is not None:
            s = s[s["t_s"] <= t1]
        p = s["power_w"].dropna()
        if p.empty:
            raise InputError(f"no power samples in [{t0}, {t1}]", field="power_w")
        return float(p.median())

    def bytes_moved(self, t0: float, t1: float, device: str | None = None) -> float | None:
        """DRAM bytes moved over ``[t0, t1]``: trapezoid of ``dram_bytes_per_s`` (None without that series)."""
        from flopwatch.telemetry.integrate import Window, integrate_windows
        from flopwatch.telemetry.source import FrameSource

        (w,) = integrate_windows(FrameSource(self), [Window(t0, t1, device)], max_gap_s=math.inf)
        return w.bytes_moved


# ---------------------------------------------------------------------- readers
def _metadata_from_schema(schema: pa.Schema, file: Path) -> dict[str, Any]:
    raw = (schema.metadata or {}).get(METADATA_KEY)
    if raw is None:
        return {"schema": "unknown", "source": str(file)}
    try:
        md = json.loads(raw)
    except ValueError as e:
        raise InputError(f"metadata is not valid JSON ({e})", file=str(file), field="flopwatch") from None
    if not isinstance(md, dict):
        raise InputError("metadata is not a JSON object", file=str(file), field="flopwatch")
    return md


def _table_to_trace(table: pa.Table, file: Path, md: dict[str, Any]) -> Trace:
    import pandas as pd

    names = table.column_names
    for col in ("t_s", "device"):
        if col not in names:
            raise InputError("missing column", file=str(file), field=col)
    df = table.to_pandas()
    if "wall_time" in df and not pd.api.types.is_datetime64_any_dtype(df["wall_time"]):
        df["wall_time"] = pd.to_datetime(pd.to_numeric(df["wall_time"], errors="coerce"), unit="s", utc=True)
    for c in FLOAT_COLUMNS:
        if c not in df:
            df[c] = np.nan
        elif not pd.api.types.is_numeric_dtype(df[c]):
            raise InputError("column is not numeric", file=str(file), field=c)
        df[c] = df[c].astype("float64")
    if "gap_error" not in df:
        df["gap_error"] = pd.Series([None] * len(df), dtype="string")
    df["gap_error"] = df["gap_error"].astype("string")
    df["device"] = df["device"].astype("string")
    if not pd.api.types.is_numeric_dtype(df["t_s"]) or df["t_s"].isna().any():
        raise InputError("t_s must be numeric with no nulls", file=str(file), field="t_s")
    # extras that arrived after the schema was fixed were stored as JSON: expand them into columns
    if EXTRA_JSON in df:
        js = df.pop(EXTRA_JSON)
        if js.notna().any():
            parsed = pd.DataFrame([json.loads(x) if isinstance(x, str) else {} for x in js], index=df.index)
            for k in parsed.columns:
                col = EXTRA_PREFIX + k
                vals = pd.to_numeric(parsed[k], errors="coerce")
                df[col] = vals if col not in df else df[col].fillna(vals)
    extras = sorted(c for c in df.columns if c.startswith(EXTRA_PREFIX))
    md.setdefault("source", str(file))
    return Trace(df[[*COLUMNS, *extras]], md)


def _read_parquet(p: Path) -> Trace:
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        pf = pq.ParquetFile(p)
        table = pf.read()
    except (pa.ArrowInvalid, pa.ArrowIOError, OSError) as e:
        raise InputError(f"not a readable Parquet trace (truncated or corrupt?): {e}", file=str(p)) from None
    return _table_to_trace(table, p, _metadata_from_schema(pf.schema_arrow, p))


def _read_journal(journal: Path) -> Trace:
    """Recover a crashed recording from its Arrow IPC journal, up to the last complete batch."""
    import pyarrow as pa
    import pyarrow.ipc as ipc

    batches = []
    schema = None
    try:
        with pa.OSFile(str(journal), "rb") as f:
            reader = ipc.open_stream(f)
            schema = reader.schema
            while True:
                try:
                    batches.append(reader.read_next_batch())
                except StopIteration:
                    break
                except (pa.ArrowInvalid, OSError):  # the torn last batch of a crash
                    break
    except (pa.ArrowInvalid, OSError) as e:
        raise InputError(f"journal is unreadable: {e}", file=str(journal)) from None
    md = _metadata_from_schema(schema, journal)
    md["recovered_from_journal"] = True
    return _table_to_trace(pa.Table.from_batches(batches, schema=schema), journal, md)


def _read_seed_timeseries(p: Path) -> Trace:
    """The seed study's ``timeseries.json``: ``power_mw``, ``gpu_pct`` and ``dram_bytes_s`` as [t_s, value]
    pairs at ~2 Hz on slightly different timestamps, plus ``t_launch``/``t_start``/``t_end``.

    Alignment: rows are the power samples (the quantity integrated); utilisation and DRAM rate are
    attached by nearest timestamp within half the median power period, else left null (counted in
    ``metadata['alignment']``).
    """
    import pandas as pd

    from flopwatch.telemetry.source import finite_float, load_json

    data = load_json(p)
    if not isinstance(data, dict):
        raise InputError("expected a JSON object with power_mw, gpu_pct, dram_bytes_s", file=str(p))

    def series(key: str, required: bool) -> np.ndarray | None:
        if key not in data:
            if required:
                raise InputError("missing series", file=str(p), field=key)
            return None
        v = data[key]
        if not isinstance(v, list):
            raise InputError("expected a list of [t_s, value] pairs", file=str(p), field=key)
        for i, pair in enumerate(v):
            if (
                not isinstance(pair, list | tuple)
                or len(pair) != 2
                or not all(finite_float(x) is not None for x in pair)
            ):
                raise InputError(
                    f"expected a [t_s, value] pair of finite numbers, got {pair!r}",
                    file=str(p),
                    record=i,
                    field=key,
                )
        arr = np.asarray([[float(a), float(b)] for a, b in v], dtype=float).reshape(-1, 2)
        if arr.shape[0] and np.any(np.diff(arr[:, 0]) < 0):
            i = int(np.argmax(np.diff(arr[:, 0]) < 0)) + 1
            raise InputError("timestamps go backwards", file=str(p), record=i, field=key)
        return arr

    power = series("power_mw", True)
    assert power is not None
    if power.shape[0] < 2:
        raise InputError("need at least two power samples", file=str(p), field="power_mw")
    util = series("gpu_pct", False)
    dram = series("dram_bytes_s", False)
    marks: dict[str, float] = {}
    for k in ("t_launch", "t_start", "t_end"):
        if k in data and data[k] is not None:
            if finite_float(data[k]) is None:
                raise InputError(f"expected a number, got {data[k]!r}", file=str(p), field=k)
            marks[k] = float(data[k])

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
    wall0 = os.path.getmtime(p) - float(power[-1, 0])  # the file has no wall clock; only relative times count
    rows = pd.DataFrame(
        {
            "t_s": base["t_s"],
            "wall_time": pd.to_datetime(wall0 + base["t_s"], unit="s", utc=True),
            "device": pd.Series(["jetson:VDD_CPU_GPU_CV"] * len(base), dtype="string"),
            "power_w": base["power_w"],
            "energy_j": np.nan,
            "util": base["util"],
            "mem_util": np.nan,
            "dram_bytes_per_s": base["dram_bytes_per_s"],
            "sm_clock_mhz": np.nan,
            "temp_c": np.nan,
            "gap_error": pd.Series([None] * len(base), dtype="string"),
        }
    )
    md = {
        "schema": "seed.timeseries",
        "kind": "seed-timeseries",
        "source": str(p),
        "rate_hz": 1.0 / (2 * tol),
        "simulated": False,
        "fingerprint": {"device": "Jetson Orin Nano (seed study)", "rail": "VDD_CPU_GPU_CV"},
        "t0_monotonic_s": 0.0,
        "wall_time_synthetic": True,
        "alignment": alignment,
        **marks,
    }
    return Trace(rows, md)


# The streaming writer lives in telemetry/writer.py; re-exported here (``from ...reading import TraceWriter``).
from flopwatch.telemetry.writer import TraceWriter  # noqa: E402

__all__ = [
    "COLUMNS",
    "FLOAT_COLUMNS",
    "Gap",
    "IntervalEnergy",
    "Reading",
    "Trace",
    "TraceWriter",
    "base_metadata",
]
