"""Streaming trace sources: read a trace chunk by chunk in bounded memory, validating every row.

Every reader of traces (detection, energy integration, replay, :meth:`Trace.read`) goes through
:func:`open_source`, which accepts a flopwatch Parquet trace (read one row group/batch at a time), the
Arrow IPC journal of a crashed recording, the seed study's ``timeseries.json`` (small by nature: read
whole, handed out in chunks) or anything with a ``source()`` method (an in-memory
:class:`~flopwatch.telemetry.trace.Trace` hands out its frame through :class:`FrameSource`).

Validation (issue 11): a file that is not a regular file (a directory, a FIFO, ``/dev/zero``) is refused
before it is opened, so nothing hangs or fills memory; rows are checked as they stream past, and the first
implausible one is refused with :class:`InputError` naming the file, the row (0-based, in file order) and
the field: a non-finite time or value, time going backwards on a device, two samples of a device at one
time with different values (identical duplicates are dropped and counted), negative power, a utilisation
outside 0–1 (percent instead of a ratio), negative DRAM traffic, or power far above the device's TDP — the
limits are :mod:`flopwatch.telemetry.plausibility`'s, applied to whole columns (one set of rules).
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, TypeAlias

import numpy as np

from flopwatch.devices import DeviceSpec, resolve
from flopwatch.errors import InputError
from flopwatch.io import check_input_file, open_regular
from flopwatch.telemetry.plausibility import limits_spec, violations
from flopwatch.telemetry.schema import (
    FLOAT_COLUMNS,
    JOURNAL_SUFFIX,
    extra_columns,
    metadata_from_schema,
    table_to_frame,
)
from flopwatch.telemetry.seed_format import read_seed_timeseries

if TYPE_CHECKING:
    import pandas as pd

#: Rows per chunk when a source is not already chunked (Parquet row groups are read as written).
CHUNK_ROWS = 16_384
#: Numeric columns the validator checks: every float column of the trace schema.
VALUE_COLUMNS = FLOAT_COLUMNS


@dataclass
class Chunk:
    """Consecutive rows of a trace, as numpy columns (NaN stands for null).

    ``row0`` is the file row of the first row (for messages); ``device`` holds codes into the source's
    :attr:`TraceSource.device_names` (−1: no device); ``is_gap`` marks rows that are gaps, not readings.
    ``cols`` holds the float columns asked for; ``wall_s`` (UTC epoch seconds) and ``gap_error`` and
    ``extras`` only when asked for.
    """

    row0: int
    t_s: np.ndarray
    device: np.ndarray
    is_gap: np.ndarray
    cols: dict[str, np.ndarray]
    wall_s: np.ndarray | None = None
    gap_error: list[str | None] | None = None
    extras: dict[str, np.ndarray] = field(default_factory=dict)

    def __len__(self) -> int:
        return int(self.t_s.size)

    def take(self, idx: np.ndarray) -> Chunk:
        """The rows ``idx`` (a boolean mask or index array) as a new chunk."""
        return Chunk(
            self.row0,
            self.t_s[idx],
            self.device[idx],
            self.is_gap[idx],
            {k: v[idx] for k, v in self.cols.items()},
            None if self.wall_s is None else self.wall_s[idx],
            None
            if self.gap_error is None
            else [self.gap_error[i] for i in np.flatnonzero(_as_mask(idx, len(self)))],
            {k: v[idx] for k, v in self.extras.items()},
        )


def _as_mask(idx: np.ndarray, n: int) -> np.ndarray:
    if idx.dtype == bool:
        return idx
    m = np.zeros(n, dtype=bool)
    m[idx] = True
    return m


# ---------------------------------------------------------------------- plausibility
def device_specs(metadata: Mapping[str, Any]) -> dict[str, DeviceSpec]:
    """Per device id: its :class:`~flopwatch.devices.DeviceSpec`, from the metadata's ``devices`` list
    (placeholder specs left out: their limits do not apply, :func:`~flopwatch.telemetry.plausibility.limits_spec`)."""
    out: dict[str, DeviceSpec] = {}
    devs = metadata.get("devices")
    if isinstance(devs, list):
        for d in devs:
            if not isinstance(d, dict) or not isinstance(d.get("device_id"), str):
                continue
            key = next((k for k in (d.get("spec_key"), d.get("name")) if isinstance(k, str) and k), None)
            spec = limits_spec(resolve(key))
            if spec is not None:
                out[d["device_id"]] = spec
    return out


class Validator:
    """Checks rows as they stream past (state carried across chunks per device); see the module docstring."""

    def __init__(self, file: str, metadata: Mapping[str, Any]) -> None:
        self.file = file
        self._known = device_specs(metadata)
        self._spec: dict[int, DeviceSpec | None] = {}
        self._last: dict[int, tuple[float, np.ndarray, int]] = {}  # device → (t, values, row) of last sample
        self.duplicates_dropped = 0

    def _fail(self, row: int, fld: str, msg: str) -> None:
        raise InputError(msg, file=self.file, record=f"row {row}", field=fld)

    def _device_spec(self, code: int, names: Sequence[str]) -> DeviceSpec | None:
        if code not in self._spec:
            name = names[code] if code >= 0 else ""
            # a known id from the metadata, else a simulated id ("sim:a100#0") that names its device
            known = self._known.get(name)
            self._spec[code] = known or (limits_spec(resolve(name)) if name.startswith("sim:") else None)
        return self._spec[code]

    def check(self, ch: Chunk, names: Sequence[str]) -> Chunk:
        """Validate ``ch`` (codes into ``names``); returns it without identical duplicate samples."""
        n = len(ch)
        if n == 0:
            return ch
        bad = ~np.isfinite(ch.t_s)
        if bad.any():
            i = int(np.argmax(bad))
            self._fail(ch.row0 + i, "t_s", f"time is not a finite number ({ch.t_s[i]})")
        # physical limits, per device (its spec sets the power and bandwidth ceilings): the first bad row
        first: tuple[int, str, str] | None = None
        for code in np.unique(ch.device):
            code = int(code)
            idx = np.flatnonzero(ch.device == code)
            found = violations(
                {c: v[idx] for c, v in ch.cols.items() if c in VALUE_COLUMNS},
                self._device_spec(code, names),
                nan_is_missing=True,
            )
            for v in found:
                row = int(idx[v.index])
                if first is None or row < first[0]:
                    on = f" on {names[code]}" if code >= 0 else ""
                    first = (row, v.field, v.message + on)
        if first is not None:
            self._fail(ch.row0 + first[0], first[1], first[2])
        samp = ~ch.is_gap
        keep = np.ones(n, dtype=bool)
        check_cols = [c for c in ("power_w", "energy_j", "util") if c in ch.cols]
        for code in np.unique(ch.device[samp]) if samp.any() else ():
            code = int(code)
            idx = np.flatnonzero(samp & (ch.device == code))
            t = ch.t_s[idx]
            vals = (
                np.stack([ch.cols[c][idx] for c in check_cols], axis=1)
                if check_cols
                else np.zeros((idx.size, 0))
            )
            prev = self._last.get(code)
            off = 0
            if prev is not None:
                off = 1
                t = np.concatenate([[prev[0]], t])
                vals = np.concatenate([prev[1][None, :], vals])
            dt = np.diff(t)
            back = dt < 0
            if back.any():
                j = int(np.argmax(back))
                row = ch.row0 + int(idx[j + 1 - off])
                self._fail(row, "t_s", f"time goes backwards ({t[j + 1]} s after {t[j]} s)")
            same = np.flatnonzero(dt == 0)
            if same.size:
                a, b = vals[same], vals[same + 1]
                equal = (a == b) | (np.isnan(a) & np.isnan(b))
                conflict = ~equal.all(axis=1)
                if conflict.any():
                    j = int(same[np.argmax(conflict)])
                    row = ch.row0 + int(idx[j + 1 - off])
                    self._fail(row, "t_s", f"two samples at t = {t[j + 1]} s with different values")
                keep[idx[same + 1 - off]] = False
                self.duplicates_dropped += int(same.size)
            self._last[code] = (float(t[-1]), vals[-1].copy(), ch.row0 + int(idx[-1]))
        return ch if keep.all() else ch.take(keep)


# ---------------------------------------------------------------------- sources
class TraceSource:
    """A trace that can be read chunk by chunk, any number of times (each pass re-reads the file)."""

    def __init__(self, path: Path | None, metadata: dict[str, Any]) -> None:
        self.path = path
        self.metadata = metadata
        self.device_names: list[str] = []
        self._codes: dict[str, int] = {}
        self.extra_columns: list[str] = []
        self.validate = True  # check rows as they stream past (off for traces already in memory)
        self.duplicates_dropped = 0  # identical repeated samples dropped by the last validated pass
        self.num_rows: int | None = None  # rows, when known without a pass (Parquet footer, a frame)

    @property
    def name(self) -> str:
        return str(self.path) if self.path is not None else str(self.metadata.get("source", "<trace>"))

    def _code(self, names: Sequence[Any]) -> np.ndarray:
        """Map a chunk's device names (dictionary) to stable codes of this source."""
        out = np.empty(len(names), dtype=np.int64)
        for i, nm in enumerate(names):
            if nm is None:
                out[i] = -1
                continue
            nm = str(nm)
            if nm not in self._codes:
                self._codes[nm] = len(self.device_names)
                self.device_names.append(nm)
            out[i] = self._codes[nm]
        return out

    def chunks(
        self,
        columns: Sequence[str] = ("power_w", "energy_j", "util", "dram_bytes_per_s"),
        *,
        wall: bool = False,
        gap_error: bool = False,
        extras: bool = False,
        validate: bool | None = None,
    ) -> Iterator[Chunk]:
        """Chunks in file order with the float ``columns`` (others not read), checked as they pass
        (``validate``: default :attr:`validate`)."""
        check = self.validate if validate is None else validate
        v = Validator(self.name, self.metadata) if check else None
        cols = tuple(dict.fromkeys((*columns, *(VALUE_COLUMNS if check else ()))))
        for ch in self._raw_chunks(cols, wall, gap_error, extras):
            if v is not None:
                ch = v.check(ch, self.device_names)
                self.duplicates_dropped = v.duplicates_dropped
            yield ch

    def _raw_chunks(
        self, columns: tuple[str, ...], wall: bool, gap_error: bool, extras: bool
    ) -> Iterator[Chunk]:
        raise NotImplementedError

    def frame(self) -> pd.DataFrame:
        """Every row at once, as a frame of the schema (:func:`~flopwatch.telemetry.schema.table_to_frame`), not
        validated: :meth:`Trace.read <flopwatch.telemetry.trace.Trace.read>` validates in a pass before."""
        raise NotImplementedError


def _batch_to_chunk(
    src: TraceSource,
    batch: Any,
    row0: int,
    columns: tuple[str, ...],
    wall: bool,
    gap_error: bool,
    extras: bool,
) -> Chunk:
    """An Arrow record batch → a Chunk (types checked, nulls → NaN)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    names = batch.schema.names
    n = batch.num_rows

    def num(col: str, required: bool = False) -> np.ndarray:
        if col not in names:
            if required:
                raise InputError("missing column", file=src.name, field=col)
            return np.full(n, np.nan)
        a = batch.column(col)
        if pa.types.is_null(a.type):
            return np.full(n, np.nan)
        if not (pa.types.is_integer(a.type) or pa.types.is_floating(a.type) or pa.types.is_boolean(a.type)):
            raise InputError(f"column is not numeric ({a.type})", file=src.name, field=col)
        try:
            return a.cast(pa.float64()).to_numpy(zero_copy_only=False)
        except (pa.ArrowInvalid, OverflowError) as e:
            raise InputError(f"column cannot be read as numbers ({e})", file=src.name, field=col) from None

    t = num("t_s", required=True)
    if np.isnan(t).any():
        i = int(np.argmax(np.isnan(t)))
        raise InputError("time is missing", file=src.name, record=f"row {row0 + i}", field="t_s")
    if "device" not in names:
        raise InputError("missing column", file=src.name, field="device")
    dev = batch.column("device")
    if pa.types.is_null(dev.type):
        codes = np.full(n, -1, dtype=np.int64)
    else:
        if not pa.types.is_dictionary(dev.type):
            if not (pa.types.is_string(dev.type) or pa.types.is_large_string(dev.type)):
                dev = dev.cast(pa.string())
            dev = pc.dictionary_encode(dev)
        dict_codes = src._code(dev.dictionary.to_pylist())
        idx = dev.indices.fill_null(-1).to_numpy(zero_copy_only=False).astype(np.int64)
        codes = np.where(idx >= 0, dict_codes[np.clip(idx, 0, None)] if dict_codes.size else -1, -1)
    if "gap_error" in names:
        g = batch.column("gap_error")
        is_gap = (
            g.is_valid().to_numpy(zero_copy_only=False) if not pa.types.is_null(g.type) else np.zeros(n, bool)
        )
        gaps = g.cast(pa.string()).to_pylist() if gap_error and not pa.types.is_null(g.type) else None
    else:
        is_gap = np.zeros(n, dtype=bool)
        gaps = None
    if gap_error and gaps is None:
        gaps = [None] * n
    w = None
    if wall:
        if "wall_time" in names:
            wa = batch.column("wall_time")
            if pa.types.is_timestamp(wa.type):
                w = (
                    wa.cast(pa.int64()).to_numpy(zero_copy_only=False).astype(float)
                    / {
                        "s": 1.0,
                        "ms": 1e3,
                        "us": 1e6,
                        "ns": 1e9,
                    }[wa.type.unit]
                )
                w[~wa.is_valid().to_numpy(zero_copy_only=False)] = np.nan
            else:
                w = num("wall_time")
        else:
            w = np.full(n, np.nan)
    ex: dict[str, np.ndarray] = {}
    if extras:
        for c in names:
            if c.startswith("extra_") and c != "extra_json":
                ex[c[len("extra_") :]] = num(c)
    return Chunk(row0, t, codes, is_gap, {c: num(c) for c in columns}, w, gaps, ex)


class ParquetSource(TraceSource):
    """A flopwatch Parquet trace, read one batch (at most one row group) at a time."""

    def __init__(self, path: Path, batch_rows: int = CHUNK_ROWS) -> None:
        import pyarrow as pa
        import pyarrow.parquet as pq

        self.batch_rows = batch_rows
        # One descriptor for the footer and every row group: a file replaced while it is read is never read
        # half from one trace and half from another (and a non-UTF-8 name, which pyarrow refuses, works).
        self._fh = open_regular(path, kind="trace file")
        try:
            # no pre-buffering: it reads ahead whole row groups (memory grows with them)
            pf = pq.ParquetFile(self._fh, pre_buffer=False)
            schema = pf.schema_arrow
        except (pa.ArrowInvalid, pa.ArrowIOError, OSError, ValueError) as e:
            self._fh.close()
            raise InputError(
                f"not a readable Parquet trace (truncated or corrupt?): {e}", file=str(path)
            ) from None
        self._pf = pf
        super().__init__(path, metadata_from_schema(schema, path))
        self.metadata.setdefault("source", str(path))
        self.num_rows = int(pf.metadata.num_rows)  # from the footer: counting rows reads no data
        self._names = schema.names
        self.extra_columns = extra_columns(schema.names)

    def frame(self) -> pd.DataFrame:
        import pyarrow as pa

        try:
            table = self._pf.read(use_threads=False)
        except (pa.ArrowInvalid, pa.ArrowIOError, OSError) as e:
            raise InputError(
                f"not a readable Parquet trace (truncated or corrupt?): {e}", file=self.name
            ) from None
        return table_to_frame(table, self.name)

    def t_span(self) -> tuple[float, float] | None:
        """(lowest, highest) ``t_s`` of the file from its row groups' statistics (the footer: no data read), or
        None when the writer stored none."""
        try:
            md = self._pf.metadata
            col = self._names.index("t_s")
            stats = [md.row_group(i).column(col).statistics for i in range(md.num_row_groups)]
        except (OSError, ValueError):
            return None
        if not stats or any(st is None or not st.has_min_max for st in stats):
            return None
        return float(min(st.min for st in stats)), float(max(st.max for st in stats))

    def _raw_chunks(
        self, columns: tuple[str, ...], wall: bool, gap_error: bool, extras: bool
    ) -> Iterator[Chunk]:
        import pyarrow as pa

        want = {"t_s", "device", "gap_error", *columns}
        if wall:
            want.add("wall_time")
        if extras:
            want.update(self.extra_columns)
        read = [c for c in self._names if c in want]
        row0 = 0
        try:
            # no threaded decoding: it reads ahead whole row groups (memory grows with them)
            for batch in self._pf.iter_batches(batch_size=self.batch_rows, columns=read, use_threads=False):
                yield _batch_to_chunk(self, batch, row0, columns, wall, gap_error, extras)
                row0 += batch.num_rows
        except (pa.ArrowInvalid, pa.ArrowIOError, OSError) as e:
            raise InputError(
                f"not a readable Parquet trace (truncated or corrupt?): {e}", file=self.name
            ) from None


class JournalSource(TraceSource):
    """The Arrow IPC journal of a crashed recording, up to its last complete batch."""

    def __init__(self, path: Path) -> None:
        import pyarrow as pa
        import pyarrow.ipc as ipc

        # opened through the io guard (any file name the OS accepts); every later pass checks it is still the
        # same file (device and inode), so a journal replaced meanwhile is never mixed with this one's schema
        with open_regular(path, kind="trace journal") as fh:
            st = os.fstat(fh.fileno())
            self._ident = (st.st_dev, st.st_ino)
            try:
                schema = ipc.open_stream(fh).schema
            except (pa.ArrowInvalid, OSError) as e:
                raise InputError(f"journal is unreadable: {e}", file=str(path)) from None
        super().__init__(path, metadata_from_schema(schema, path))
        self._schema = schema
        self.metadata["recovered_from_journal"] = True
        self.metadata.setdefault("source", str(path))
        self.extra_columns = extra_columns(schema.names)

    def _batches(self) -> Iterator[Any]:
        """The journal's complete record batches (a crash's torn last batch ends the stream)."""
        import pyarrow as pa
        import pyarrow.ipc as ipc

        assert self.path is not None
        with open_regular(self.path, kind="trace journal") as fh:
            st = os.fstat(fh.fileno())
            if (st.st_dev, st.st_ino) != self._ident:
                raise InputError("was replaced by another file while it was read", file=self.name)
            try:
                reader = ipc.open_stream(fh)
            except (pa.ArrowInvalid, OSError) as e:
                raise InputError(f"journal is unreadable: {e}", file=self.name) from None
            while True:
                try:
                    yield reader.read_next_batch()
                except StopIteration:
                    break
                except (pa.ArrowInvalid, OSError):  # the torn last batch of a crash
                    break

    def _raw_chunks(
        self, columns: tuple[str, ...], wall: bool, gap_error: bool, extras: bool
    ) -> Iterator[Chunk]:
        row0 = 0
        for batch in self._batches():
            yield _batch_to_chunk(self, batch, row0, columns, wall, gap_error, extras)
            row0 += batch.num_rows

    def frame(self) -> pd.DataFrame:
        import pyarrow as pa

        return table_to_frame(pa.Table.from_batches(list(self._batches()), schema=self._schema), self.name)


class FrameSource(TraceSource):
    """A trace frame in memory (the schema's columns, rows in time order) and its metadata, handed out in
    chunks: what :meth:`Trace.source() <flopwatch.telemetry.trace.Trace.source>` returns and what the seed's
    ``timeseries.json`` becomes."""

    def __init__(
        self,
        frame: pd.DataFrame,
        metadata: Mapping[str, Any],
        chunk_rows: int = CHUNK_ROWS,
        *,
        validate: bool = False,
    ) -> None:
        import pandas as pd

        super().__init__(None, dict(metadata))
        self.validate = validate
        self._frame = frame
        self.num_rows = len(frame)
        self.chunk_rows = chunk_rows
        self.extra_columns = extra_columns(frame.columns)
        df = frame

        raw, uniques = pd.factorize(df["device"])  # codes in order of first appearance, −1 for null
        dict_codes = self._code([str(c) for c in uniques])
        self._dev = np.where(raw >= 0, dict_codes[np.clip(raw, 0, None)] if dict_codes.size else -1, -1)
        self._t = df["t_s"].to_numpy(dtype=float)
        self._gap = df["gap_error"].notna().to_numpy()

    def frame(self) -> pd.DataFrame:
        return self._frame

    def _raw_chunks(
        self, columns: tuple[str, ...], wall: bool, gap_error: bool, extras: bool
    ) -> Iterator[Chunk]:
        df = self._frame
        n = len(df)
        cols = {c: df[c].to_numpy(dtype=float) for c in columns} if n else {c: np.zeros(0) for c in columns}
        w = None
        if wall:
            wt = df["wall_time"]
            w = wt.astype("int64").to_numpy() / 1e9 if n else np.zeros(0)
            w = np.where(wt.isna().to_numpy(), np.nan, w) if n else w
        ge = (
            df["gap_error"].astype(object).where(df["gap_error"].notna(), None).tolist()
            if gap_error
            else None
        )
        ex = {c[len("extra_") :]: df[c].to_numpy(dtype=float) for c in self.extra_columns} if extras else {}
        for a in range(0, n, self.chunk_rows):
            b = min(n, a + self.chunk_rows)
            yield Chunk(
                a,
                self._t[a:b],
                self._dev[a:b],
                self._gap[a:b],
                {c: v[a:b] for c, v in cols.items()},
                None if w is None else w[a:b],
                None if ge is None else ge[a:b],
                {k: v[a:b] for k, v in ex.items()},
            )


def _sniff_json(p: Path) -> bool:
    with open(p, "rb") as f:
        head = f.read(64).lstrip()
    return head[:1] in (b"{", b"[")


class HasSource(Protocol):
    """Anything that hands out its rows as a :class:`TraceSource` (an in-memory ``Trace``)."""

    def source(self, chunk_rows: int = CHUNK_ROWS) -> TraceSource: ...


#: What the readers of traces accept: a path, a source, or something with a ``source()`` method.
TraceLike: TypeAlias = str | os.PathLike[str] | TraceSource | HasSource


def open_source(trace: TraceLike, *, batch_rows: int = CHUNK_ROWS) -> TraceSource:
    """A streaming source for a path (Parquet, its crash journal, or the seed's ``timeseries.json``), a
    source (returned as is) or an in-memory trace (its ``source()``). Bad files raise :class:`InputError`."""
    if isinstance(trace, TraceSource):
        return trace
    if not isinstance(trace, str | os.PathLike):
        return trace.source(batch_rows)
    p = Path(trace)
    journal = Path(str(p) + JOURNAL_SUFFIX)
    if not os.path.lexists(p) and journal.exists():
        check_input_file(journal, kind="trace file")
        return JournalSource(journal)
    check_input_file(p, kind="trace file")  # a FIFO would block, /dev/zero never end
    if p.suffix.lower() == ".json" or _sniff_json(p):
        frame, metadata = read_seed_timeseries(p)
        return FrameSource(frame, metadata, batch_rows, validate=True)
    if p.name.endswith(JOURNAL_SUFFIX):
        return JournalSource(p)
    try:
        return ParquetSource(p, batch_rows)
    except InputError:
        if journal.exists():  # a crash left a footer-less Parquet: the journal has the data
            check_input_file(journal, kind="trace file")
            return JournalSource(journal)
        raise
