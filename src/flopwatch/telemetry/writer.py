"""Stream readings to a Parquet trace with a crash journal, in bounded memory (backpressure).

See :class:`TraceWriter`. The format is described in :mod:`flopwatch.telemetry.schema`, the only module of
``telemetry/`` this one imports.
"""

from __future__ import annotations

import json
import os
import time
from collections import deque
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from flopwatch.errors import InputError
from flopwatch.io import open_output, refuse_link
from flopwatch.telemetry.schema import (
    EXTRA_JSON,
    EXTRA_PREFIX,
    JOURNAL_SUFFIX,
    Gap,
    Reading,
    arrow_schema,
    default_metadata,
    extra_columns,
    frame,
    row,
    to_table,
)

if TYPE_CHECKING:
    import pandas as pd


class TraceWriter:
    """Stream readings and gaps to a Parquet trace, one row group per flush, never holding a whole recording.

    ``write`` only appends to a buffer; due flushes run on one background writer thread (in order), so the
    sampling thread never waits on Parquet encoding or fsync. ``flush()`` and ``close()`` wait for them.

    ``flush_every_s`` (wall time) bounds what a crash can lose; ``row_group_rows`` forces a flush when the
    buffer is that large.

    Backpressure: at most ``max_pending`` batches wait for the writer thread; a flush due while that many
    wait blocks the producer until the oldest is on disk (:attr:`blocked_s` says how long producers
    waited). Memory therefore stays below ``(max_pending + 1) × row_group_rows`` rows (or what arrives in
    ``flush_every_s``) whatever the rate and duration. Growing batches instead would stretch the window a
    crash can lose; blocking keeps it at one flush interval plus the queue. Every flush also appends the batch to ``PATH.journal`` (Arrow IPC stream, readable
    after a crash); :meth:`close` writes the Parquet footer and deletes the journal. Refuses to overwrite an
    existing ``path`` unless ``overwrite=True``.
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        metadata: Mapping[str, Any],
        flush_every_s: float = 5.0,
        row_group_rows: int = 10_000,
        *,
        overwrite: bool = False,
        extra_columns: Sequence[str] = (),
        fsync: bool = True,
        max_pending: int = 4,
    ) -> None:
        if max_pending < 1:
            raise ValueError("max_pending must be >= 1")
        self.path = Path(path)
        self.journal_path = Path(str(self.path) + JOURNAL_SUFFIX)
        refuse_link(self.path)
        refuse_link(self.journal_path)
        if self.path.exists() and not overwrite:
            raise InputError("file exists (use --force to overwrite)", file=str(self.path))
        if self.journal_path.exists() and not overwrite:
            raise InputError(
                "a crashed recording's journal is here; read it with Trace.read (or use --force to discard it)",
                file=str(self.journal_path),
            )
        self.metadata = default_metadata(metadata)
        self.flush_every_s = float(flush_every_s)
        self.row_group_rows = int(row_group_rows)
        self.fsync = fsync
        self._extra_cols = [EXTRA_PREFIX + c if not c.startswith(EXTRA_PREFIX) else c for c in extra_columns]
        self._rows: list[dict[str, Any]] = []
        self._t0: float | None = self.metadata.get("t0_monotonic_s")
        self._last_flush = time.monotonic()
        self._pq: Any = None
        self._pq_file: Any = None
        self._ipc: Any = None
        self._sink: Any = None
        self._schema: Any = None
        self._pool: Any = None
        self._pending: deque[Any] = deque()
        self._failed: OSError | None = None  # the first write error (a full disk), re-raised by later writes
        self.max_pending = int(max_pending)
        self.blocked_s = 0.0  # seconds producers waited on the writer thread (backpressure)
        self.max_pending_seen = 0
        self.rows_written = 0
        self.row_groups = 0
        self.closed = False

    def __call__(self, item: Reading | Gap) -> None:
        """Sampler sink interface."""
        if isinstance(item, Gap):
            self.write_gap(item.t_s, item.wall_time, item.device, item.error)
        else:
            self.write(item)

    def _origin(self, t_s: float) -> float:
        if self._t0 is None:
            self._t0 = float(t_s)
            self.metadata["t0_monotonic_s"] = self._t0
        return self._t0

    def write(self, reading: Reading) -> None:
        if self.closed:
            raise ValueError("TraceWriter is closed")
        self._rows.append(row(reading, self._origin(reading.t_s)))
        self._maybe_flush()

    def write_gap(self, t_s: float, wall_time: float, device: str, error: str) -> None:
        if self.closed:
            raise ValueError("TraceWriter is closed")
        self._rows.append(row(Gap(t_s, wall_time, device, error), self._origin(t_s)))
        self._maybe_flush()

    def _maybe_flush(self) -> None:
        if (
            len(self._rows) >= self.row_group_rows
            or time.monotonic() - self._last_flush >= self.flush_every_s
        ):
            self._submit()

    def _reap(self) -> None:
        """Drop finished batches from the queue, surfacing their errors on the caller's thread (a sampler
        records them as sink errors)."""
        while self._pending and self._pending[0].done():
            self._pending.popleft().result()

    def _submit(self) -> Any:
        """Hand the buffered rows to the writer thread (FIFO), blocking while ``max_pending`` batches wait."""
        from concurrent.futures import ThreadPoolExecutor

        self._reap()
        if len(self._pending) >= self.max_pending:
            w0 = time.monotonic()
            while len(self._pending) >= self.max_pending:
                self._pending.popleft().result()
            self.blocked_s += time.monotonic() - w0
        self._last_flush = time.monotonic()
        rows, self._rows = self._rows, []
        if self._pool is None:
            self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="flopwatch-trace-writer")
        fut = self._pool.submit(self._write_rows, rows)
        self._pending.append(fut)
        self.max_pending_seen = max(self.max_pending_seen, len(self._pending))
        return fut

    def flush(self) -> None:
        """Write buffered rows as one row group (and journal batch), fsync the journal, and wait for it."""
        self._submit().result()
        while self._pending:
            self._pending.popleft().result()

    def _open(self, df: pd.DataFrame) -> None:
        import pyarrow.ipc as ipc
        import pyarrow.parquet as pq

        if not self._extra_cols:
            self._extra_cols = extra_columns(df.columns)
        self._schema = arrow_schema(self._extra_cols, self.metadata)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        # neither file is written through a symlink (issue 25): opened with O_NOFOLLOW, closed in close()
        self._pq_file = open_output(self.path)
        self._pq = pq.ParquetWriter(self._pq_file, self._schema)
        self._sink = open_output(self.journal_path)
        self._ipc = ipc.new_stream(self._sink, self._schema)

    def _write_rows(self, rows: list[dict[str, Any]]) -> None:
        if self._failed is not None:  # a full disk stays that error, not a later "Operation on closed file"
            raise self._failed
        try:
            self._write_rows_now(rows)
        except OSError as e:
            self._failed = e
            raise

    def _write_rows_now(self, rows: list[dict[str, Any]]) -> None:
        if not rows:
            return
        known = set(self._extra_cols)
        df = frame(rows, extra_cols=None)
        if self._pq is None:
            self._open(df)
            known = set(self._extra_cols)
        late = [c for c in extra_columns(df.columns) if c not in known]
        if late:  # extras first seen after the schema was fixed go to the JSON column, not lost
            sub = df[late]
            df[EXTRA_JSON] = [
                json.dumps({k[len(EXTRA_PREFIX) :]: v for k, v in r.items() if v == v}) or None
                for r in sub.to_dict("records")
            ]
        for c in self._extra_cols:
            if c not in df:
                df[c] = np.nan
        table = to_table(df, self._schema)
        self._pq.write_table(table)
        self._ipc.write_table(table)
        self._sink.flush()
        if self.fsync:
            os.fsync(self._sink.fileno())
        self.rows_written += table.num_rows
        self.row_groups += 1

    def close(self) -> None:
        """Flush, write the Parquet footer, delete the journal. Idempotent."""
        if self.closed:
            return
        try:
            self.flush()
        finally:
            if self._pool is not None:
                self._pool.shutdown(wait=True)
        if self._pq is None:  # nothing was written: still produce a valid empty trace
            self._open(frame([]))
        self._pq.close()
        self._pq_file.close()
        self._ipc.close()
        self._sink.close()
        self.journal_path.unlink(missing_ok=True)
        self.closed = True

    def __enter__(self) -> TraceWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
