"""The ledger's on-disk format: schema, canonical rows, the signed bytes, and safe opening of the file.

Shared by the writer (:mod:`~flopwatch.monitor.ledger`) and the verifier (:mod:`~flopwatch.monitor.verify`).

* ``payload`` is canonical JSON (sorted keys, no NaN) of the row's fields;
* ``hash`` is SHA-256 over ``"flopwatch.ledger/1\\n{seq}\\n{kind}\\n{prev_hash}\\n{payload}"``;
* ``prev_hash`` is the previous row's ``hash`` (64 zeros for the genesis row): a hash chain over ALL rows;
* ``signature`` is Ed25519 over the same bytes.

The schema itself is part of what is verified: the file must hold exactly the table and view below (as SQLite
stores their DDL) and nothing else — a planted trigger can silently drop or rewrite new rows, a redefined view
can show values that are not in the signed rows.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import sqlite3
import tempfile
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

from flopwatch.errors import InputError
from flopwatch.io import jsonable

FORMAT = "flopwatch.ledger/1"
GENESIS_PREV = "0" * 64
#: Row kinds written by the daemon. Verification accepts any kind: the chain covers them all.
KINDS = ("genesis", "start", "workload", "checkpoint", "recovery", "stop")

#: The 0.2 ledger: the hash chain only (still verified as a chain; it has no history tree and no witness).
LEGACY_SCHEMA = """
CREATE TABLE IF NOT EXISTS entries (
    seq INTEGER PRIMARY KEY,
    kind TEXT NOT NULL,
    prev_hash TEXT NOT NULL,
    payload TEXT NOT NULL,
    hash TEXT NOT NULL,
    signature TEXT NOT NULL
);
CREATE VIEW IF NOT EXISTS workloads AS
SELECT seq,
       json_extract(payload, '$.device') AS device,
       json_extract(payload, '$.start_wall') AS start_wall,
       json_extract(payload, '$.end_wall') AS end_wall,
       json_extract(payload, '$.duration_s') AS duration_s,
       json_extract(payload, '$.net_energy_j') AS net_energy_j,
       json_extract(payload, '$.estimate_flops') AS estimate_flops,
       json_extract(payload, '$.lower_flops') AS lower_flops,
       json_extract(payload, '$.upper_flops') AS upper_flops,
       json_extract(payload, '$.verdict') AS verdict,
       json_extract(payload, '$.status') AS status,
       json_extract(payload, '$.coverage') AS coverage
FROM entries WHERE kind = 'workload';
"""

#: The history tree (RFC 9162, :mod:`~flopwatch.monitor.merkle`) over the rows in sequence order: every perfect
#: subtree root ``(level, idx)`` (level 0: the leaf hashes), written in the row's own transaction, and the
#: signed tree heads (hex root and signature, time in ms since the epoch, key_id = sha256 of the public key).
TREE_SCHEMA = """
CREATE TABLE IF NOT EXISTS tree_nodes (
    level INTEGER NOT NULL,
    idx INTEGER NOT NULL,
    hash BLOB NOT NULL,
    PRIMARY KEY (level, idx)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS tree_heads (
    size INTEGER PRIMARY KEY,
    root TEXT NOT NULL,
    time_ms INTEGER NOT NULL,
    signature TEXT NOT NULL,
    key_id TEXT NOT NULL
);
"""

SCHEMA = LEGACY_SCHEMA + TREE_SCHEMA

_COLS = "seq, kind, prev_hash, payload, hash, signature"


@lru_cache(maxsize=2)
def expected_schema(legacy: bool = False) -> frozenset[tuple[str, str, str, str]]:
    """``(type, name, tbl_name, sql)`` of every schema object a genuine ledger holds (as SQLite stores them);
    ``legacy``: a 0.2 chain-only ledger."""
    con = sqlite3.connect(":memory:")
    try:
        con.executescript(LEGACY_SCHEMA if legacy else SCHEMA)
        return frozenset(_schema_rows(con))
    finally:
        con.close()


def has_tree(con: sqlite3.Connection) -> bool:
    """Does the file hold the history tree (False: a 0.2 chain-only ledger)?"""
    return bool(
        con.execute("SELECT 1 FROM main.sqlite_master WHERE type='table' AND name='tree_heads'").fetchone()
    )


def _schema_rows(con: sqlite3.Connection) -> list[tuple[str, str, str, str]]:
    return [
        (str(t), str(n), str(tb), str(s))
        for t, n, tb, s in con.execute("SELECT type, name, tbl_name, sql FROM main.sqlite_master")
    ]


def schema_problems(con: sqlite3.Connection) -> list[str]:
    """What differs between the file's schema and the ledger's DDL (empty: identical to the current or, when
    no tree object is present at all, to the 0.2 chain-only schema)."""
    have = _schema_rows(con)
    tree_names = {"tree_nodes", "tree_heads"} | {f"sqlite_autoindex_tree_nodes_{i}" for i in (1, 2)}
    legacy = not any(n in tree_names or tb in tree_names for _t, n, tb, _s in have)
    want = expected_schema(legacy)
    names = {(t, n) for t, n, _, _ in want}
    out: list[str] = []
    for t, n, _tb, s in have:
        if (t, n, _tb, s) in want:
            continue
        if (t, n) in names:
            out.append(f"{t} {n!r} was redefined: {' '.join(s.split())[:160]}")
        else:
            out.append(f"unexpected {t} {n!r} in the file: {' '.join(s.split())[:160]}")
    for t, n, _tb, _s in want:
        if not any(h[0] == t and h[1] == n for h in have):
            out.append(f"{t} {n!r} is missing")
    return out


# --------------------------------------------------------------------------------------------- canonical form
def canonical_payload(payload: Mapping[str, Any]) -> str:
    """Canonical JSON text of a row payload (sorted keys, compact, ASCII, no NaN).

    Values go through the one JSON-safe converter (:func:`flopwatch.io.jsonable`: non-finite → null, numpy
    scalars → numbers, tuples → lists); the options on top fix the signed bytes. Rows written before this
    used the same conversion, so old ledgers verify (``tests/test_ledger_compat.py``).
    """
    return json.dumps(
        jsonable(payload), sort_keys=True, separators=(",", ":"), ensure_ascii=True, allow_nan=False
    )


def signed_bytes(seq: int, kind: str, prev_hash: str, payload_text: str) -> bytes:
    """The exact bytes a row's hash and signature cover."""
    return f"{FORMAT}\n{int(seq)}\n{kind}\n{prev_hash}\n{payload_text}".encode()


def row_hash(seq: int, kind: str, prev_hash: str, payload_text: str) -> str:
    return hashlib.sha256(signed_bytes(seq, kind, prev_hash, payload_text)).hexdigest()


@dataclass(frozen=True)
class LedgerEntry:
    """One stored row."""

    seq: int
    kind: str
    prev_hash: str
    payload_text: str
    hash: str
    signature: str

    @property
    def payload(self) -> dict[str, Any]:
        """The row's fields; ``{}`` when the stored text is not a JSON object (``ledger verify`` reports it)."""
        try:
            d = json.loads(self.payload_text)
        except (ValueError, RecursionError):
            return {}
        return d if isinstance(d, dict) else {}


# --------------------------------------------------------------------------------------------- opening
def sqlite_uri(path: Path, *, mode: str, immutable: bool = False) -> str:
    """A ``file:`` URI for ``path`` with every special character escaped (``#``, ``?``, ``%`` in names).

    ``f"file:{path}?mode=ro"`` would cut ``a#b.db`` at the ``#`` and decode ``%41`` to ``A``.
    """
    return f"{path.absolute().as_uri()}?mode={mode}" + ("&immutable=1" if immutable else "")


class _CopyConnection(sqlite3.Connection):
    """A read-only connection to a private copy of a ledger (removed on close)."""

    tmpdir: str | None = None

    def close(self) -> None:
        super().close()
        if self.tmpdir is not None:
            shutil.rmtree(self.tmpdir, ignore_errors=True)
            self.tmpdir = None


def _readonly(path: Path) -> sqlite3.Connection:
    """Open a ledger for reading without writing anything beside it.

    A WAL database opened ``mode=ro`` still needs its ``-shm`` file, which SQLite creates: in a directory the
    reader cannot write (a verifier with read access only) that open fails, which must never read as
    tampering. Then: with no WAL content, ``immutable=1`` reads the main file exactly (nothing else holds
    rows); with WAL content (a running or killed daemon), the file and its WAL are copied to a private
    temporary directory and read there, so the committed rows in the WAL are seen too.
    """
    con = sqlite3.connect(sqlite_uri(path, mode="ro"), uri=True, timeout=10.0, check_same_thread=False)
    try:
        con.execute("SELECT COUNT(*) FROM main.sqlite_master").fetchone()
        return con
    except sqlite3.DatabaseError as e:
        why = str(e)
        if not isinstance(e, sqlite3.OperationalError) or (
            "unable to open" not in why and "readonly" not in why and "read-only" not in why
        ):
            return con  # not a matter of access (a damaged file): the caller's queries report it
        con.close()
    wal = Path(f"{path}-wal")
    try:
        wal_bytes = wal.stat().st_size
    except FileNotFoundError:
        wal_bytes = 0
    if wal_bytes == 0:
        return sqlite3.connect(
            sqlite_uri(path, mode="ro", immutable=True), uri=True, timeout=10.0, check_same_thread=False
        )
    tmp = tempfile.mkdtemp(prefix="flopwatch-ledger-ro-")
    try:
        copy = Path(tmp) / "ledger.db"
        shutil.copyfile(path, copy)
        shutil.copyfile(wal, Path(f"{copy}-wal"))
        con2 = sqlite3.connect(
            sqlite_uri(copy, mode="ro"),
            uri=True,
            timeout=10.0,
            check_same_thread=False,
            factory=_CopyConnection,
        )
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    con2.tmpdir = tmp  # type: ignore[attr-defined]
    return con2


def connect(path: Path, *, readonly: bool) -> sqlite3.Connection:
    """Open the ledger file (read-only: never created, never written, no write access needed)."""
    if readonly:
        if not path.exists():
            raise InputError("ledger not found", file=str(path))
        if not path.is_file():
            raise InputError("not a ledger file (a directory or device)", file=str(path))
        try:
            return _readonly(path)
        except OSError as e:
            raise InputError(f"cannot read the ledger: {e.strerror or e}", file=str(path)) from None
    return sqlite3.connect(
        sqlite_uri(path, mode="rwc"), uri=True, timeout=10.0, isolation_level=None, check_same_thread=False
    )


def iter_entries(
    con: sqlite3.Connection, kind: str | None = None, *, after: int = 0
) -> Iterator[LedgerEntry]:
    """Rows in sequence order, streamed from the cursor (never all in memory)."""
    q = f"SELECT {_COLS} FROM main.entries WHERE seq > ?"
    args: tuple[Any, ...] = (after,)
    if kind is not None:
        q += " AND kind = ?"
        args = (after, kind)
    for row in con.execute(q + " ORDER BY seq", args):
        yield LedgerEntry(int(row[0]), str(row[1]), str(row[2]), str(row[3]), str(row[4]), str(row[5]))
