"""The trace's row types and its columnar format: the bottom of ``telemetry/``, imported by everything above.

A trace (ARCHITECTURE.md, "File formats") has one row per sample (or gap) with columns

``t_s`` float64 (seconds since trace start on the sensor clock), ``wall_time`` (UTC timestamp),
``device`` (string id), ``power_w``, ``energy_j`` (cumulative counter, nullable), ``util`` (0–1),
``mem_util`` (0–1), ``dram_bytes_per_s``, ``sm_clock_mhz``, ``temp_c``, ``gap_error`` (nullable string:
why this tick has no reading) and vendor extras as ``extra_<name>`` columns.

The key-value metadata entry ``flopwatch`` (JSON) holds the sensor kind, device fingerprint, nominal rate,
flopwatch version, ``simulated`` and ``t0_monotonic_s`` (the sensor-clock time that ``t_s == 0`` stands for,
so workload records timed on the same clock can be joined to the trace).

Crash safety: :class:`~flopwatch.telemetry.writer.TraceWriter` appends a Parquet row group per flush *and*
the same batch to an Arrow IPC stream journal (``FILE.parquet`` + :data:`JOURNAL_SUFFIX`). Parquet needs its
footer to be readable, which is only written on close; the journal stays readable up to its last complete
batch. On a clean close the journal is deleted; after a crash the readers recover from it.

This module holds the row types (:class:`Reading`, :class:`Gap`), the column constants, the Arrow schema and
the row/frame/table conversions the writer and the readers share, and the metadata reader. It imports nothing
else of ``telemetry/``.
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from flopwatch import __version__
from flopwatch.errors import InputError
from flopwatch.io import parse_json

if TYPE_CHECKING:  # pandas/pyarrow are imported lazily at run time (fast CLI start-up)
    import pandas as pd
    import pyarrow as pa

#: Optional scalar columns of a reading/trace, in the order the trace schema lists them.
OPTIONAL_FIELDS = ("energy_j", "util", "mem_util", "dram_bytes_per_s", "sm_clock_mhz", "temp_c")
#: Float columns of the trace schema, in order.
FLOAT_COLUMNS = ("power_w", *OPTIONAL_FIELDS)
#: Every fixed column, in order.
COLUMNS = ("t_s", "wall_time", "device", *FLOAT_COLUMNS, "gap_error")
EXTRA_PREFIX = "extra_"
#: String column holding extras (JSON) first seen after the Parquet schema was fixed.
EXTRA_JSON = "extra_json"
METADATA_KEY = b"flopwatch"
JOURNAL_SUFFIX = ".journal"
SCHEMA_NAME = "flopwatch.trace/1"


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
        "flopwatch_version": __version__,
        "simulated": bool(simulated),
        "created_wall": time.time(),
    }
    md.update(extra)
    return md


def default_metadata(metadata: Mapping[str, Any] | None) -> dict[str, Any]:
    """``metadata`` with the schema name, flopwatch version and ``simulated`` filled in when absent."""
    md = dict(metadata or {})
    md.setdefault("schema", SCHEMA_NAME)
    md.setdefault("flopwatch_version", __version__)
    md.setdefault("simulated", False)
    return md


def row(item: Reading | Gap, t0: float) -> dict[str, Any]:
    """One reading or gap as a row dict (``t_s`` relative to ``t0``; extras as ``extra_<name>``)."""
    out: dict[str, Any] = {"t_s": item.t_s - t0, "wall_time": item.wall_time, "device": item.device}
    if isinstance(item, Gap):
        out["gap_error"] = item.error
        return out
    out["gap_error"] = None
    for c in FLOAT_COLUMNS:
        out[c] = getattr(item, c)
    for k, v in item.extra.items():
        out[EXTRA_PREFIX + k] = v
    return out


def extra_columns(columns: Sequence[str]) -> list[str]:
    """The ``extra_<name>`` value columns among ``columns`` (the JSON overflow column excluded), in order."""
    return [c for c in columns if c.startswith(EXTRA_PREFIX) and c != EXTRA_JSON]


def frame(rows: list[dict[str, Any]], extra_cols: Sequence[str] | None = None) -> pd.DataFrame:
    """Rows → a DataFrame with every schema column, correct dtypes, extras last."""
    import pandas as pd

    df = pd.DataFrame.from_records(rows) if rows else pd.DataFrame()
    extras = list(extra_cols) if extra_cols is not None else sorted(extra_columns(df.columns))
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


def arrow_schema(extra_cols: Sequence[str], metadata: Mapping[str, Any]) -> pa.Schema:
    """The Parquet/IPC schema of a trace with these extra columns, carrying ``metadata`` as JSON."""
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


def to_table(df: pd.DataFrame, schema: pa.Schema) -> pa.Table:
    """A frame of :func:`frame`'s shape as an Arrow table of ``schema``."""
    import pyarrow as pa

    df = df.copy()
    if EXTRA_JSON not in df:
        df[EXTRA_JSON] = None
    return pa.Table.from_pandas(df[[f.name for f in schema]], schema=schema, preserve_index=False)


def metadata_from_schema(schema: pa.Schema, file: str | Path) -> dict[str, Any]:
    """The ``flopwatch`` metadata of a Parquet/IPC schema (``{"schema": "unknown"}`` without one)."""
    names = list(schema.names)
    dup = next((n for i, n in enumerate(names) if n in names[:i]), None)
    if dup is not None:  # pyarrow refuses to select it later (KeyError); which copy is the data is ambiguous
        raise InputError("column appears more than once", file=str(file), field=dup)
    raw = (schema.metadata or {}).get(METADATA_KEY)
    if raw is None:
        return {"schema": "unknown", "source": str(file)}
    try:
        text = raw.decode("utf-8") if isinstance(raw, bytes) else str(raw)
    except UnicodeDecodeError:
        raise InputError("metadata is not UTF-8 text", file=str(file), field="flopwatch") from None
    # the one guarded JSON parser: nesting 100 000 deep or a 5 000-digit integer is one line, not a traceback
    try:
        md = parse_json(text, file=str(file))
    except InputError as e:
        raise InputError(f"metadata: {e.detail}", file=str(file), field="flopwatch") from None
    if not isinstance(md, dict):
        raise InputError("metadata is not a JSON object", file=str(file), field="flopwatch")
    check_metadata(md, str(file))
    return md


#: The metadata keys the readers use, and what each must be (a hostile file may put anything there).
_META_NUMBERS = ("rate_hz", "t0_monotonic_s", "created_wall")
_META_FLAGS = ("simulated", "wall_time_synthetic", "recovered_from_journal")
_META_STRINGS = ("schema", "kind", "source", "spec_key", "flopwatch_version")


def check_metadata(md: Mapping[str, Any], file: str) -> None:
    """InputError naming the key when a metadata value the readers use has the wrong type or is not a finite
    number: a string ``"false"`` is not false, ``"abc"`` is not a time origin, ``rate_hz`` is positive."""

    def bad(key: str, msg: str) -> InputError:
        return InputError(f"{msg}, got {str(md[key])[:60]!r}", file=file, field=f"flopwatch.{key}")

    for key in _META_NUMBERS:
        v = md.get(key)
        if v is None:
            continue
        if isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v):
            raise bad(key, "must be a finite number")
        if key == "rate_hz" and not v > 0:
            raise bad(key, "must be positive")
    for key in _META_FLAGS:
        if md.get(key) is not None and not isinstance(md[key], bool):
            raise bad(key, "must be true or false")
    for key in _META_STRINGS:
        if md.get(key) is not None and not isinstance(md[key], str):
            raise bad(key, "must be a string")
    if md.get("fingerprint") is not None and not isinstance(md["fingerprint"], dict):
        raise bad("fingerprint", "must be an object")
    devs = md.get("devices")
    if devs is not None and not (isinstance(devs, list) and all(isinstance(d, dict) for d in devs)):
        raise bad("devices", "must be a list of objects")


def table_to_frame(table: pa.Table, file: str | Path) -> pd.DataFrame:
    """A trace table read back from Parquet or a journal → a DataFrame of the schema's columns and dtypes
    (late extras stored as JSON expanded into columns); InputError naming the file and column otherwise."""
    import pandas as pd

    file = str(file)
    names = table.column_names
    for col in ("t_s", "device"):
        if col not in names:
            raise InputError("missing column", file=file, field=col)
    df = table.to_pandas()
    if "wall_time" in df and not pd.api.types.is_datetime64_any_dtype(df["wall_time"]):
        df["wall_time"] = pd.to_datetime(pd.to_numeric(df["wall_time"], errors="coerce"), unit="s", utc=True)
    for c in FLOAT_COLUMNS:
        if c not in df:
            df[c] = np.nan
        elif not pd.api.types.is_numeric_dtype(df[c]):
            raise InputError("column is not numeric", file=file, field=c)
        df[c] = df[c].astype("float64")
    if "gap_error" not in df:
        df["gap_error"] = pd.Series([None] * len(df), dtype="string")
    df["gap_error"] = df["gap_error"].astype("string")
    df["device"] = df["device"].astype("string")
    if not pd.api.types.is_numeric_dtype(df["t_s"]) or df["t_s"].isna().any():
        raise InputError("t_s must be numeric with no nulls", file=file, field="t_s")
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
    return df[[*COLUMNS, *extras]]


__all__ = [
    "COLUMNS",
    "EXTRA_JSON",
    "EXTRA_PREFIX",
    "FLOAT_COLUMNS",
    "JOURNAL_SUFFIX",
    "METADATA_KEY",
    "OPTIONAL_FIELDS",
    "SCHEMA_NAME",
    "Gap",
    "Reading",
    "arrow_schema",
    "base_metadata",
    "check_metadata",
    "default_metadata",
    "extra_columns",
    "frame",
    "metadata_from_schema",
    "row",
    "table_to_frame",
    "to_table",
]
