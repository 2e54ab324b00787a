"""The in-memory trace: samples of one or more devices as a DataFrame, read once, with energy over an interval.

A :class:`Trace` is what detection's tests, calibration and users' notebooks hold in memory. The format (the
columns, the metadata, the crash journal) is :mod:`flopwatch.telemetry.schema`'s; the streaming readers every
pass goes through are :mod:`flopwatch.telemetry.source`'s; energy comes from
:func:`flopwatch.telemetry.integrate.integrate_windows`, so a trace in memory and one streamed from disk give
the same numbers.
"""

from __future__ import annotations

import math
import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from flopwatch.errors import InputError
from flopwatch.io import atomic_path
from flopwatch.telemetry.integrate import Window, integrate_windows
from flopwatch.telemetry.schema import (
    COLUMNS,
    Gap,
    Reading,
    arrow_schema,
    default_metadata,
    extra_columns,
    frame,
    row,
    to_table,
)
from flopwatch.telemetry.source import (
    CHUNK_ROWS,
    VALUE_COLUMNS,
    FrameSource,
    open_source,
)

if TYPE_CHECKING:  # pandas/pyarrow are imported lazily at run time (fast CLI start-up)
    import pandas as pd


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
        md = default_metadata(metadata)
        t0 = md.get("t0_monotonic_s")
        if t0 is None:
            t0 = min((it.t_s for it in items), default=0.0)
            md["t0_monotonic_s"] = t0
        return cls(frame([row(it, float(t0)) for it in items]), md)

    @classmethod
    def read(cls, path: str | os.PathLike[str]) -> Trace:
        """Read a flopwatch Parquet trace (recovering a crashed recording from its journal) or the seed's
        ``timeseries.json``. Bad files raise :class:`InputError` naming the file and field."""
        src = open_source(path)
        # one streaming pass validates every row (time order, duplicates, physical range) before loading
        for _ in src.chunks(VALUE_COLUMNS):
            pass
        tr = Trace(src.frame(), src.metadata)
        dups = src.duplicates_dropped
        if dups:  # identical repeated samples (a sink called twice): keep one of each
            tr.df = tr.df.drop_duplicates(subset=[c for c in tr.df.columns if c != "wall_time"]).reset_index(
                drop=True
            )
            tr.metadata["duplicate_samples_dropped"] = dups
        return tr

    def write(self, path: str | os.PathLike[str], *, row_group_rows: int = 65536) -> Path:
        """Write as Parquet, atomically (:func:`flopwatch.io.atomic_path`: never through a symlink)."""
        import pyarrow.parquet as pq

        p = Path(path)
        schema = arrow_schema(self.extra_columns(), self.metadata)
        with atomic_path(p) as tmp:
            pq.write_table(to_table(self.df, schema), tmp, row_group_size=row_group_rows)
        return p

    def source(self, chunk_rows: int = CHUNK_ROWS) -> FrameSource:
        """The trace's rows as a streaming source (not validated again: a loaded trace was checked)."""
        return FrameSource(self.df, self.metadata, chunk_rows)

    # ------------------------------------------------------------------ views
    def extra_columns(self) -> list[str]:
        return extra_columns(self.df.columns)

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
        if not t1 >= t0:
            raise InputError(f"interval end {t1} is before its start {t0}", field="t1")
        (w,) = integrate_windows(
            self.source(), [Window(t0, t1, device)], idle_power_w=idle_power_w, max_gap_s=max_gap_s
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
        (w,) = integrate_windows(self.source(), [Window(t0, t1, device)], max_gap_s=math.inf)
        return w.bytes_moved


__all__ = ["IntervalEnergy", "Trace"]
