"""Streaming trace sources: read a trace chunk by chunk in bounded memory, validating every row.

Every reader of traces (detection, energy integration, replay, :meth:`Trace.read`) goes through
:func:`open_source`, which accepts a flopwatch Parquet trace (read one row group/batch at a time), the
Arrow IPC journal of a crashed recording, the seed study's ``timeseries.json`` (small by nature: read
whole, handed out in chunks) or an in-memory :class:`~flopwatch.telemetry.reading.Trace`.

Validation (issue 11): a file that is not a regular file (a directory, a FIFO, ``/dev/zero``) is refused
before it is opened, so nothing hangs or fills memory; rows are checked as they stream past, and the first
implausible one is refused with :class:`InputError` naming the file, the row (0-based, in file order) and
the field: a non-finite time or value, time going backwards on a device, two samples of a device at one
time with different values (identical duplicates are dropped and counted), negative power, a utilisation
outside 0–1 (percent instead of a ratio), negative DRAM traffic, or power far above the device's TDP.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from flopwatch.errors import InputError
from flopwatch.io import check_input_file

if TYPE_CHECKING:
    from flopwatch.devices import DeviceSpec
    from flopwatch.telemetry.reading import Trace

#: Rows per chunk when a source is not already chunked (Parquet row groups are read as written).
CHUNK_ROWS = 16_384
#: Numeric columns the validator checks (a subset of the trace schema's float columns).
VALUE_COLUMNS = ("power_w", "energy_j", "util", "mem_util", "dram_bytes_per_s", "sm_clock_mhz", "temp_c")
# Physical limits are those of :mod:`flopwatch.telemetry.plausibility` (the monitor's per-reading check),
# applied here to whole columns: power ≤ 2 × the device's TDP (a generic ceiling without a spec), DRAM
# traffic ≤ 1.5 × its peak bandwidth, utilisation in 0–1, no negative power, counter, traffic or clock.
#: Float rounding allowed around the 0–1 utilisation range (as plausibility.py allows).
RATIO_EPS = 1e-6
#: The seed's ``timeseries.json`` files are under 1 MiB; a JSON trace is parsed whole, so cap its size.
MAX_JSON_BYTES = 256 * 2**20


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


def check_regular_file(p: Path) -> os.stat_result:
    """Refuse a missing path, a directory, a FIFO or a device *before* opening it (opening a FIFO blocks;
    reading ``/dev/zero`` never ends): :func:`flopwatch.io.check_input_file` for a trace."""
    return check_input_file(p, kind="trace file")


# ---------------------------------------------------------------------- plausibility
def device_specs(metadata: Mapping[str, Any]) -> dict[str, DeviceSpec]:
    """Per device id: its :class:`~flopwatch.devices.DeviceSpec`, from the metadata's ``devices`` list."""
    from flopwatch.devices import get_device

    out: dict[str, DeviceSpec] = {}
    devs = metadata.get("devices")
    if isinstance(devs, list):
        for d in devs:
            if not isinstance(d, dict) or not isinstance(d.get("device_id"), str):
                continue
            for key in (d.get("spec_key"), d.get("name")):
                if isinstance(key, str) and key:
                    try:
                        spec = get_device(key)
                    except InputError:
                        continue
                    if _real_spec(spec):
                        out[d["device_id"]] = spec
                    break
    return out


def _real_spec(spec: DeviceSpec) -> bool:
    """A spec whose limits apply (not a placeholder): the rule of :func:`~flopwatch.telemetry.plausibility.limits_spec`."""
    from flopwatch.telemetry.plausibility import limits_spec

    return limits_spec(spec) is not None


def _device_spec(name: str, known: Mapping[str, DeviceSpec]) -> DeviceSpec | None:
    if name in known:
        return known[name]
    if name.startswith("sim:"):  # "sim:a100#0": the simulated device's spec key
        from flopwatch.devices import get_device

        try:
            spec = get_device(name[4:].split("#", 1)[0])
        except InputError:
            return None
        return spec if _real_spec(spec) else None
    return None


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

    def _check_spec(self, ch: Chunk, idx: np.ndarray, device: str, spec: DeviceSpec | None) -> None:
        """Power above the device's plausible ceiling; DRAM traffic above its peak bandwidth."""
        from flopwatch.telemetry.plausibility import BANDWIDTH_FACTOR, POWER_TDP_FACTOR, max_power_w

        p = ch.cols.get("power_w")
        if p is not None:
            cap = max_power_w(spec)
            hi = p[idx] > cap
            if hi.any():
                i = int(idx[np.argmax(hi)])
                why = f"{POWER_TDP_FACTOR:g} × the {spec.name}'s TDP" if spec else "above any board"
                self._fail(
                    ch.row0 + i,
                    "power_w",
                    f"power {p[i]:.6g} W on {device} is implausible (> {cap:g} W, {why})",
                )
        d = ch.cols.get("dram_bytes_per_s")
        if d is not None and spec is not None:
            cap = BANDWIDTH_FACTOR * spec.mem_bw_bytes_per_s
            hi = d[idx] > cap
            if hi.any():
                i = int(idx[np.argmax(hi)])
                self._fail(
                    ch.row0 + i,
                    "dram_bytes_per_s",
                    f"DRAM traffic {d[i]:.6g} B/s on {device} is implausible "
                    f"(> {BANDWIDTH_FACTOR:g} × the {spec.name}'s peak bandwidth)",
                )

    def check(self, ch: Chunk, names: Sequence[str]) -> Chunk:
        """Validate ``ch`` (codes into ``names``); returns it without identical duplicate samples."""
        n = len(ch)
        if n == 0:
            return ch
        bad = ~np.isfinite(ch.t_s)
        if bad.any():
            i = int(np.argmax(bad))
            self._fail(ch.row0 + i, "t_s", f"time is not a finite number ({ch.t_s[i]})")
        samp = ~ch.is_gap
        for c in ("power_w", "energy_j", "util", "mem_util", "dram_bytes_per_s", "sm_clock_mhz", "temp_c"):
            v = ch.cols.get(c)
            if v is None:
                continue
            inf = np.isinf(v)
            if inf.any():
                i = int(np.argmax(inf))
                self._fail(ch.row0 + i, c, f"value is not finite ({v[i]})")
        p = ch.cols.get("power_w")
        if p is not None:
            neg = samp & (p < 0)
            if neg.any():
                i = int(np.argmax(neg))
                self._fail(ch.row0 + i, "power_w", f"negative power ({p[i]} W)")
        for c in ("util", "mem_util"):
            u = ch.cols.get(c)
            if u is None:
                continue
            out = samp & ((u < -RATIO_EPS) | (u > 1 + RATIO_EPS))
            if out.any():
                i = int(np.argmax(out))
                hint = " (a percentage? utilisation is a 0–1 ratio)" if 1 < u[i] <= 100 else ""
                self._fail(ch.row0 + i, c, f"utilisation {u[i]} outside 0–1{hint}")
        for c, what, unit in (
            ("dram_bytes_per_s", "DRAM traffic", "B/s"),
            ("energy_j", "energy counter", "J"),
            ("sm_clock_mhz", "clock", "MHz"),
        ):
            v = ch.cols.get(c)
            if v is None:
                continue
            neg = samp & (v < 0)
            if neg.any():
                i = int(np.argmax(neg))
                self._fail(ch.row0 + i, c, f"negative {what} ({v[i]} {unit})")
        keep = np.ones(n, dtype=bool)
        check_cols = [c for c in ("power_w", "energy_j", "util") if c in ch.cols]
        for code in np.unique(ch.device[samp]) if samp.any() else ():
            code = int(code)
            idx = np.flatnonzero(samp & (ch.device == code))
            if code >= 0:
                if code not in self._spec:
                    self._spec[code] = _device_spec(names[code], self._known)
                self._check_spec(ch, idx, names[code], self._spec[code])
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
        try:
            pf = pq.ParquetFile(path)
            schema = pf.schema_arrow
        except (pa.ArrowInvalid, pa.ArrowIOError, OSError, ValueError) as e:
            raise InputError(
                f"not a readable Parquet trace (truncated or corrupt?): {e}", file=str(path)
            ) from None
        from flopwatch.telemetry.reading import _metadata_from_schema

        super().__init__(path, _metadata_from_schema(schema, path))
        self.metadata.setdefault("source", str(path))
        self.num_rows = pf.metadata.num_rows
        self._names = schema.names
        self.extra_columns = [c for c in schema.names if c.startswith("extra_") and c != "extra_json"]

    def _raw_chunks(
        self, columns: tuple[str, ...], wall: bool, gap_error: bool, extras: bool
    ) -> Iterator[Chunk]:
        import pyarrow as pa
        import pyarrow.parquet as pq

        want = {"t_s", "device", "gap_error", *columns}
        if wall:
            want.add("wall_time")
        if extras:
            want.update(self.extra_columns)
        read = [c for c in self._names if c in want]
        row0 = 0
        try:
            # no pre-buffering or threaded decoding: they read ahead whole row groups (memory grows with them)
            pf = pq.ParquetFile(self.path, pre_buffer=False)
            for batch in pf.iter_batches(batch_size=self.batch_rows, columns=read, use_threads=False):
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

        try:
            with pa.OSFile(str(path), "rb") as f:
                schema = ipc.open_stream(f).schema
        except (pa.ArrowInvalid, OSError) as e:
            raise InputError(f"journal is unreadable: {e}", file=str(path)) from None
        from flopwatch.telemetry.reading import _metadata_from_schema

        super().__init__(path, _metadata_from_schema(schema, path))
        self.metadata["recovered_from_journal"] = True
        self.metadata.setdefault("source", str(path))
        self.extra_columns = [c for c in schema.names if c.startswith("extra_") and c != "extra_json"]

    def _raw_chunks(
        self, columns: tuple[str, ...], wall: bool, gap_error: bool, extras: bool
    ) -> Iterator[Chunk]:
        import pyarrow as pa
        import pyarrow.ipc as ipc

        row0 = 0
        assert self.path is not None
        with pa.OSFile(str(self.path), "rb") as f:
            try:
                reader = ipc.open_stream(f)
            except (pa.ArrowInvalid, OSError) as e:
                raise InputError(f"journal is unreadable: {e}", file=self.name) from None
            while True:
                try:
                    batch = reader.read_next_batch()
                except StopIteration:
                    break
                except (pa.ArrowInvalid, OSError):  # the torn last batch of a crash
                    break
                yield _batch_to_chunk(self, batch, row0, columns, wall, gap_error, extras)
                row0 += batch.num_rows


class FrameSource(TraceSource):
    """An in-memory :class:`Trace` handed out in chunks (rows in the trace's time order)."""

    def __init__(self, trace: Trace, chunk_rows: int = CHUNK_ROWS, *, validate: bool = False) -> None:
        super().__init__(None, dict(trace.metadata))
        self.validate = validate
        self.trace = trace
        self.chunk_rows = chunk_rows
        self.extra_columns = trace.extra_columns()
        df = trace.df
        import pandas as pd

        raw, uniques = pd.factorize(df["device"])  # codes in order of first appearance, −1 for null
        dict_codes = self._code([str(c) for c in uniques])
        self._dev = np.where(raw >= 0, dict_codes[np.clip(raw, 0, None)] if dict_codes.size else -1, -1)
        self._t = df["t_s"].to_numpy(dtype=float)
        self._gap = df["gap_error"].notna().to_numpy()

    def _raw_chunks(
        self, columns: tuple[str, ...], wall: bool, gap_error: bool, extras: bool
    ) -> Iterator[Chunk]:
        df = self.trace.df
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


def open_source(
    trace: str | os.PathLike[str] | Trace | TraceSource, *, batch_rows: int = CHUNK_ROWS
) -> TraceSource:
    """A streaming source for a path (Parquet, its crash journal, or the seed's ``timeseries.json``), an
    in-memory :class:`Trace`, or a source (returned as is). Bad files raise :class:`InputError`."""
    from flopwatch.telemetry.reading import JOURNAL_SUFFIX, Trace

    if isinstance(trace, TraceSource):
        return trace
    if isinstance(trace, Trace):
        return FrameSource(trace, batch_rows)
    p = Path(trace)
    journal = Path(str(p) + JOURNAL_SUFFIX)
    if not os.path.lexists(p) and journal.exists():
        check_regular_file(journal)
        return JournalSource(journal)
    st = check_regular_file(p)
    if p.suffix.lower() == ".json" or _sniff_json(p):
        if st.st_size > MAX_JSON_BYTES:
            raise InputError(f"JSON trace larger than {MAX_JSON_BYTES >> 20} MiB", file=str(p))
        from flopwatch.telemetry.reading import _read_seed_timeseries

        return FrameSource(_read_seed_timeseries(p), batch_rows, validate=True)
    if p.name.endswith(JOURNAL_SUFFIX):
        return JournalSource(p)
    try:
        return ParquetSource(p, batch_rows)
    except InputError:
        if journal.exists():  # a crash left a footer-less Parquet: the journal has the data
            check_regular_file(journal)
            return JournalSource(journal)
        raise


def finite_float(x: Any) -> float | None:
    """``float(x)`` when ``x`` is a real, finite number (not a bool); None otherwise (ints too large for a
    float included: no OverflowError escapes)."""
    if isinstance(x, bool) or not isinstance(x, int | float):
        return None
    try:
        f = float(x)
    except OverflowError:
        return None
    return f if math.isfinite(f) else None


def load_json(p: Path) -> Any:
    """Parse a JSON file, turning every failure (bad UTF-8, syntax, nesting too deep) into InputError."""
    check_regular_file(p)
    from flopwatch.io import read_bytes  # size-capped like every other loader (FLOPWATCH_MAX_INPUT_BYTES)

    try:
        return json.loads(read_bytes(p, kind="JSON trace").decode("utf-8"))
    except OSError as e:
        raise InputError(f"cannot read: {e.strerror or e}", file=str(p)) from None
    except RecursionError:
        raise InputError("JSON nested too deeply", file=str(p)) from None
    except (ValueError, UnicodeDecodeError) as e:
        raise InputError(f"not valid JSON ({e})", file=str(p)) from None
