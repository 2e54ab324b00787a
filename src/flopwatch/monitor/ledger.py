"""The tamper-evident ledger: an append-only SQLite (WAL) file of signed, hash-chained rows.

Every row — the genesis row, daemon start/stop, one row per workload, periodic checkpoints of the
running per-device totals — is stored as ``(seq, kind, prev_hash, payload, hash, signature)``:

* ``payload`` is canonical JSON (sorted keys, no NaN) of the row's fields;
* ``hash`` is SHA-256 over ``"flopwatch.ledger/1\\n{seq}\\n{kind}\\n{prev_hash}\\n{payload}"``, so any byte
  of the content, the sequence number or the link changes it;
* ``prev_hash`` is the previous row's ``hash`` (64 zeros for the genesis row): a hash chain over ALL rows;
* ``signature`` is an Ed25519 signature over the same bytes, by a key generated when the ledger is created
  and stored beside it with mode 0600 (``LEDGER.db.key``); the public key is exported as PEM
  (``LEDGER.db.pub``) and embedded in the genesis row.

:func:`verify_ledger` recomputes all of this and reports each edited, deleted, inserted or reordered row.
Limits (documented in docs/monitor.md): whoever holds the private key can rewrite history, and cutting off
the newest rows leaves a valid shorter chain — pin the public key and compare the head (``seq``, ``hash``,
also exported as a metric) with an external copy to rule those out.

Privacy: rows carry per-workload and per-device totals only, never sample-level traces.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import re
import sqlite3
import stat
import threading
import time
import uuid
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from flopwatch.errors import InputError, LedgerError

FORMAT = "flopwatch.ledger/1"
GENESIS_PREV = "0" * 64
#: Row kinds written by the daemon. Verification accepts any kind: the chain covers them all.
KINDS = ("genesis", "start", "workload", "checkpoint", "recovery", "stop")
#: How far (in sequence numbers) verification looks for the true place of a row that was moved.
_MOVE_SEARCH = 64

_SCHEMA = """
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


# --------------------------------------------------------------------------------------------- canonical form
def _clean(value: Any) -> Any:
    """JSON-safe copy: non-finite floats become None (canonical JSON forbids NaN/inf)."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, Mapping):
        return {str(k): _clean(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_clean(v) for v in value]
    if hasattr(value, "item") and callable(value.item):  # numpy scalars
        return _clean(value.item())
    return value


def canonical_payload(payload: Mapping[str, Any]) -> str:
    """Canonical JSON text of a row payload (sorted keys, compact, ASCII, no NaN)."""
    return json.dumps(
        _clean(payload), sort_keys=True, separators=(",", ":"), ensure_ascii=True, allow_nan=False
    )


def signed_bytes(seq: int, kind: str, prev_hash: str, payload_text: str) -> bytes:
    """The exact bytes a row's hash and signature cover."""
    return f"{FORMAT}\n{int(seq)}\n{kind}\n{prev_hash}\n{payload_text}".encode()


def row_hash(seq: int, kind: str, prev_hash: str, payload_text: str) -> str:
    return hashlib.sha256(signed_bytes(seq, kind, prev_hash, payload_text)).hexdigest()


# --------------------------------------------------------------------------------------------- keys
def default_key_path(ledger_path: str | os.PathLike[str]) -> Path:
    return Path(f"{ledger_path}.key")


def default_public_key_path(ledger_path: str | os.PathLike[str]) -> Path:
    return Path(f"{ledger_path}.pub")


def public_key_pem(key: Ed25519PublicKey) -> str:
    return key.public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    ).decode()


def key_fingerprint(key: Ed25519PublicKey) -> str:
    """SHA-256 of the raw 32-byte public key (hex), a short stable identifier for reports."""
    raw = key.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    return hashlib.sha256(raw).hexdigest()


def load_public_key(path: str | os.PathLike[str]) -> Ed25519PublicKey:
    """Read a PEM public key (or derive it from a PEM private key) → InputError on anything else."""
    p = Path(path)
    try:
        data = p.read_bytes()
    except OSError as e:
        raise InputError(f"cannot read public key: {e.strerror}", file=str(p)) from None
    try:
        key = serialization.load_pem_public_key(data)
    except ValueError:
        try:
            key = serialization.load_pem_private_key(data, password=None).public_key()
        except (ValueError, TypeError):
            raise InputError("not a PEM Ed25519 public key", file=str(p)) from None
    if not isinstance(key, Ed25519PublicKey):
        raise InputError("not an Ed25519 key", file=str(p))
    return key


def load_or_create_private_key(path: str | os.PathLike[str]) -> tuple[Ed25519PrivateKey, bool]:
    """Load the signing key at ``path``, creating it (mode 0600, exclusive create) if absent.

    Returns ``(key, created)``. Refuses a key file that group or others can read, like ssh does,
    because anyone who can read it can forge ledger rows.
    """
    p = Path(path)
    if p.exists():
        mode = stat.S_IMODE(p.stat().st_mode)
        if mode & 0o077:
            raise LedgerError(
                f"{p}: signing key is accessible by group/others (mode {mode:o}); run chmod 600 {p}"
            )
        try:
            key = serialization.load_pem_private_key(p.read_bytes(), password=None)
        except (ValueError, TypeError, OSError) as e:
            raise LedgerError(f"{p}: cannot load the ledger signing key: {e}") from None
        if not isinstance(key, Ed25519PrivateKey):
            raise LedgerError(f"{p}: signing key is not Ed25519")
        return key, False
    p.parent.mkdir(parents=True, exist_ok=True)
    key = Ed25519PrivateKey.generate()
    pem = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    # O_EXCL: never overwrite a key that appeared meanwhile; 0600 from the start (no chmod race).
    fd = os.open(p, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(pem)
        f.flush()
        os.fsync(f.fileno())
    return key, True


# --------------------------------------------------------------------------------------------- rows
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
        return json.loads(self.payload_text)


def _connect(path: Path, *, readonly: bool) -> sqlite3.Connection:
    if readonly:
        if not path.exists():
            raise InputError("ledger not found", file=str(path))
        con = sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=10.0, check_same_thread=False)
    else:
        con = sqlite3.connect(str(path), timeout=10.0, isolation_level=None, check_same_thread=False)
    return con


class Ledger:
    """Append-only writer of a ledger file (the daemon holds one).

    ``Ledger(path)`` opens or creates the SQLite file and the signing key (``key_path``, default
    ``LEDGER.db.key``); the public key is written to ``public_key_path`` (default ``LEDGER.db.pub``).
    Use as a context manager or call :meth:`close`. Thread-safe: appends are serialised.
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        key_path: str | os.PathLike[str] | None = None,
        public_key_path: str | os.PathLike[str] | None = None,
    ) -> None:
        self.path = Path(path)
        self.key_path = Path(key_path) if key_path else default_key_path(self.path)
        self.public_key_path = (
            Path(public_key_path) if public_key_path else default_public_key_path(self.path)
        )
        self._lock = threading.Lock()
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._con = _connect(self.path, readonly=False)
            self._con.execute("PRAGMA journal_mode=WAL")
            # FULL: a committed row survives power loss, not only a process crash.
            self._con.execute("PRAGMA synchronous=FULL")
            self._con.executescript(_SCHEMA)
        except sqlite3.DatabaseError as e:  # not a database, a directory, no permission: a bad --ledger path
            raise InputError(f"cannot open ledger: {e}", file=str(self.path), field="ledger") from None
        n = self._con.execute("SELECT COUNT(*) FROM entries").fetchone()[0]
        if n and not self.key_path.exists():
            raise LedgerError(
                f"{self.path}: ledger exists but its signing key {self.key_path} is missing; "
                "refusing to start a new key on an existing chain"
            )
        self._key, created = load_or_create_private_key(self.key_path)
        self.public_key = self._key.public_key()
        self.key_created = created
        pem = public_key_pem(self.public_key)
        if n == 0:
            self.append(
                "genesis",
                {
                    "format": FORMAT,
                    "ledger_id": str(uuid.uuid4()),
                    "created_wall": time.time(),
                    "public_key_pem": pem,
                    "key_fingerprint": key_fingerprint(self.public_key),
                },
            )
        else:
            genesis = self.entry(1)
            if genesis is None or genesis.kind != "genesis":
                raise LedgerError(f"{self.path}: ledger has no genesis row; run `flopwatch ledger verify`")
            if genesis.payload.get("public_key_pem", "").strip() != pem.strip():
                raise LedgerError(
                    f"{self.path}: signing key {self.key_path} does not match the ledger's genesis key"
                )
        # Export the public key for verifiers (rewritten only if missing or different).
        if not self.public_key_path.exists() or self.public_key_path.read_text().strip() != pem.strip():
            self.public_key_path.write_text(pem)

    # -- writing ---------------------------------------------------------------------------------
    def append(self, kind: str, payload: Mapping[str, Any]) -> LedgerEntry:
        """Sign and append one row in its own transaction; returns the stored entry."""
        text = canonical_payload(payload)
        with self._lock:
            try:
                self._con.execute("BEGIN IMMEDIATE")
                last = self._con.execute("SELECT seq, hash FROM entries ORDER BY seq DESC LIMIT 1").fetchone()
                seq, prev = (1, GENESIS_PREV) if last is None else (int(last[0]) + 1, str(last[1]))
                msg = signed_bytes(seq, kind, prev, text)
                h = hashlib.sha256(msg).hexdigest()
                sig = self._key.sign(msg).hex()
                self._con.execute(
                    "INSERT INTO entries(seq, kind, prev_hash, payload, hash, signature) VALUES (?,?,?,?,?,?)",
                    (seq, kind, prev, text, h, sig),
                )
                self._con.execute("COMMIT")
            except sqlite3.DatabaseError as e:
                try:
                    self._con.execute("ROLLBACK")
                except sqlite3.DatabaseError:
                    pass
                raise LedgerError(f"{self.path}: cannot append a {kind} row: {e}") from None
        return LedgerEntry(seq, kind, prev, text, h, sig)

    # -- reading ---------------------------------------------------------------------------------
    def entry(self, seq: int) -> LedgerEntry | None:
        with self._lock:
            row = self._con.execute(
                "SELECT seq, kind, prev_hash, payload, hash, signature FROM entries WHERE seq=?", (seq,)
            ).fetchone()
        return None if row is None else LedgerEntry(*row)

    def entries(self, kind: str | None = None) -> list[LedgerEntry]:
        with self._lock:
            return list(_iter_entries(self._con, kind))

    def last(self, kind: str | None = None) -> LedgerEntry | None:
        q = "SELECT seq, kind, prev_hash, payload, hash, signature FROM entries"
        args: tuple[Any, ...] = ()
        if kind is not None:
            q += " WHERE kind=?"
            args = (kind,)
        with self._lock:
            row = self._con.execute(q + " ORDER BY seq DESC LIMIT 1", args).fetchone()
        return None if row is None else LedgerEntry(*row)

    def head(self) -> tuple[int, str]:
        """``(seq, hash)`` of the newest row."""
        e = self.last()
        return (0, GENESIS_PREV) if e is None else (e.seq, e.hash)

    def close(self) -> None:
        with self._lock:
            if self._con is None:
                return
            try:
                # Fold the WAL back into the main file so a copy of LEDGER.db alone is complete.
                self._con.execute("PRAGMA wal_checkpoint(TRUNCATE)")
            except sqlite3.DatabaseError:
                pass
            self._con.close()
            self._con = None  # type: ignore[assignment]

    def __enter__(self) -> Ledger:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _iter_entries(con: sqlite3.Connection, kind: str | None = None) -> Iterator[LedgerEntry]:
    q = "SELECT seq, kind, prev_hash, payload, hash, signature FROM entries"
    args: tuple[Any, ...] = ()
    if kind is not None:
        q += " WHERE kind=?"
        args = (kind,)
    for row in con.execute(q + " ORDER BY seq", args):
        yield LedgerEntry(int(row[0]), str(row[1]), str(row[2]), str(row[3]), str(row[4]), str(row[5]))


def read_entries(path: str | os.PathLike[str]) -> list[LedgerEntry]:
    """All rows of a ledger file, opened read-only (InputError if it is not a readable ledger)."""
    p = Path(path)
    con = _connect(p, readonly=True)
    try:
        return list(_iter_entries(con))
    except sqlite3.DatabaseError as e:
        raise InputError(f"not a readable flopwatch ledger: {e}", file=str(p)) from None
    finally:
        con.close()


# --------------------------------------------------------------------------------------------- verify
@dataclass(frozen=True)
class Problem:
    """One finding of :func:`verify_ledger`; ``seq`` is the row it concerns (None: the whole ledger)."""

    seq: int | None
    kind: str
    message: str

    def line(self) -> str:
        where = f"row {self.seq}" if self.seq is not None else "ledger"
        return f"{where}: {self.message}"


@dataclass
class VerifyResult:
    path: str
    n_rows: int
    ok: bool
    problems: list[Problem] = field(default_factory=list)
    key_source: str = ""
    key_fingerprint: str | None = None
    warnings: list[str] = field(default_factory=list)
    head_seq: int = 0
    head_hash: str = GENESIS_PREV

    def to_dict(self) -> dict[str, Any]:
        return {
            "ledger": self.path,
            "ok": self.ok,
            "rows": self.n_rows,
            "head": {"seq": self.head_seq, "hash": self.head_hash},
            "key_source": self.key_source,
            "key_fingerprint": self.key_fingerprint,
            "problems": [{"seq": p.seq, "kind": p.kind, "message": p.message} for p in self.problems],
            "warnings": list(self.warnings),
        }


_SIG_HEX = re.compile(r"[0-9a-f]{128}")


def _sig_ok(key: Ed25519PublicKey, sig_hex: str, msg: bytes) -> bool:
    # Exactly as written (lowercase, no spaces): bytes.fromhex alone would accept "…7D…" for "…7d…", and a
    # one-byte edit of the stored signature must be reported like any other.
    if not _SIG_HEX.fullmatch(sig_hex):
        return False
    try:
        key.verify(bytes.fromhex(sig_hex), msg)
        return True
    except (InvalidSignature, ValueError):
        return False


def parse_head(text: str) -> tuple[int, str | None]:
    """``SEQ`` or ``SEQ:HASH`` (a head seen earlier, e.g. printed by verify or scraped) → ``(seq, hash)``."""
    seq_s, _, h = text.strip().partition(":")
    try:
        seq = int(seq_s)
    except ValueError:
        seq = 0
    h = h.strip().lower() or None
    if seq < 1 or (h is not None and not re.fullmatch(r"[0-9a-f]{64}", h)):
        raise InputError(f"expected SEQ or SEQ:HASH (64 hex digits), got {text!r}", field="expect_head")
    return seq, h


def verify_ledger(
    path: str | os.PathLike[str],
    public_key: str | os.PathLike[str] | Ed25519PublicKey | None = None,
    *,
    expect_head: tuple[int, str | None] | None = None,
) -> VerifyResult:
    """Check every row's hash, signature, sequence number and chain link.

    The key is, in order: ``public_key`` if given (pinned: the strongest check), else ``LEDGER.pub``
    beside the file, else the key embedded in the genesis row (self-asserted: a warning says so).
    ``expect_head`` ``(seq, hash or None)`` is a head recorded earlier off the node: the ledger must still
    hold that row, unchanged — the one check that catches the newest rows being cut off, which leaves a
    valid shorter chain. Never raises for tampering — the result lists one :class:`Problem` per affected row.
    """
    p = Path(path)
    result = VerifyResult(path=str(p), n_rows=0, ok=False)
    try:
        rows = read_entries(p)
    except InputError as e:
        result.problems.append(Problem(None, "unreadable", e.detail))
        return result
    result.n_rows = len(rows)
    if not rows:
        result.problems.append(Problem(None, "empty", "ledger has no rows"))
        return result
    result.head_seq, result.head_hash = rows[-1].seq, rows[-1].hash
    if expect_head is not None:
        seq, h = expect_head
        held = next((r for r in rows if r.seq == seq), None)
        if held is None and seq > rows[-1].seq:
            result.problems.append(
                Problem(
                    None,
                    "truncated",
                    f"row {seq} was recorded earlier but the ledger ends at row {rows[-1].seq}: "
                    f"{seq - rows[-1].seq} newest row(s) cut off",
                )
            )
        elif held is None or (h is not None and held.hash != h):
            result.problems.append(
                Problem(seq, "rewritten", f"does not match the head recorded earlier ({(h or '?')[:16]}…)")
            )

    # Which key?
    genesis_key: Ed25519PublicKey | None = None
    genesis = next((r for r in rows if r.kind == "genesis"), None)
    if genesis is not None:
        try:
            k = serialization.load_pem_public_key(genesis.payload["public_key_pem"].encode())
            genesis_key = k if isinstance(k, Ed25519PublicKey) else None
        except (ValueError, KeyError, TypeError, json.JSONDecodeError):
            genesis_key = None
    key: Ed25519PublicKey | None
    if isinstance(public_key, Ed25519PublicKey):
        key, result.key_source = public_key, "given"
    elif public_key is not None:
        key, result.key_source = load_public_key(public_key), str(public_key)
    elif default_public_key_path(p).exists():
        key, result.key_source = load_public_key(default_public_key_path(p)), str(default_public_key_path(p))
        result.warnings.append(
            f"verified against {default_public_key_path(p).name} beside the ledger; whoever can rewrite the ledger "
            "can replace it too, so pass --public-key with a copy taken off the node"
        )
    else:
        key, result.key_source = genesis_key, "genesis row (not pinned)"
        result.warnings.append(
            "verified against the key embedded in the ledger itself; pass --public-key with the key "
            "exported at installation to rule out a ledger re-signed with another key"
        )
    if key is None:
        result.problems.append(Problem(None, "no-key", "no usable public key (genesis row unreadable)"))
        return result
    result.key_fingerprint = key_fingerprint(key)
    if genesis_key is not None and key_fingerprint(genesis_key) != result.key_fingerprint:
        result.problems.append(
            Problem(
                genesis.seq if genesis else None, "foreign-key", "ledger was created with a different key"
            )
        )

    authentic = [False] * len(rows)
    for i, r in enumerate(rows):
        msg = signed_bytes(r.seq, r.kind, r.prev_hash, r.payload_text)
        h_ok = hashlib.sha256(msg).hexdigest() == r.hash
        s_ok = _sig_ok(key, r.signature, msg)
        authentic[i] = h_ok and s_ok
        if not authentic[i]:
            moved_from = None
            for cand in range(max(1, r.seq - _MOVE_SEARCH), r.seq + _MOVE_SEARCH + 1):
                if cand != r.seq and _sig_ok(
                    key, r.signature, signed_bytes(cand, r.kind, r.prev_hash, r.payload_text)
                ):
                    moved_from = cand
                    break
            if moved_from is not None:
                result.problems.append(
                    Problem(
                        r.seq,
                        "moved",
                        f"({r.kind}) holds the signed row {moved_from}: rows reordered/swapped",
                    )
                )
            elif not s_ok and h_ok:
                result.problems.append(
                    Problem(
                        r.seq,
                        "forged",
                        f"({r.kind}) signature invalid: row inserted or re-hashed after an edit",
                    )
                )
            else:
                result.problems.append(
                    Problem(
                        r.seq, "edited", f"({r.kind}) content does not match its hash/signature: row edited"
                    )
                )

    expected_seq = 1
    for i, r in enumerate(rows):
        if r.seq > expected_seq:
            gap = f"{expected_seq}" if r.seq - expected_seq == 1 else f"{expected_seq}..{r.seq - 1}"
            result.problems.append(
                Problem(r.seq, "deleted", f"row(s) {gap} missing before this row: deleted")
            )
        prev_hash = GENESIS_PREV if i == 0 else rows[i - 1].hash
        if (
            r.prev_hash != prev_hash
            and authentic[i]
            and r.seq == expected_seq
            and (i == 0 or authentic[i - 1])
        ):
            # Two authentic neighbours that do not link: something between them was replaced.
            result.problems.append(
                Problem(
                    r.seq, "chain", f"does not follow row {rows[i - 1].seq if i else 0} in the hash chain"
                )
            )
        elif r.prev_hash != prev_hash and authentic[i] and r.seq != expected_seq:
            pass  # already reported as a gap
        expected_seq = r.seq + 1
    if rows[0].kind != "genesis":
        result.problems.append(Problem(rows[0].seq, "no-genesis", "first row is not the genesis row"))
    result.problems.sort(
        key=lambda pr: -1 if pr.seq is None else pr.seq
    )  # stable: ledger-wide first, then by row
    result.ok = not result.problems
    return result


# --------------------------------------------------------------------------------------------- show
#: Keys of each workload in ``flopwatch ledger show --json`` (contract), in this order.
SHOW_KEYS = (
    "device",
    "start_wall",
    "end_wall",
    "duration_s",
    "net_energy_j",
    "estimate_flops",
    "lower_flops",
    "upper_flops",
    "verdict",
    "status",
)


def summarize_ledger(path: str | os.PathLike[str]) -> dict[str, Any]:
    """The ``ledger show --json`` document: workloads (contract keys first, then the rest of each row),
    the newest running totals per device, and the daemon sessions."""
    rows = read_entries(path)
    workloads: list[dict[str, Any]] = []
    totals: dict[str, dict[str, Any]] = {}
    sessions: list[dict[str, Any]] = []
    for r in rows:
        try:
            pl = r.payload
        except json.JSONDecodeError:
            continue  # `ledger verify` reports it; show what can be read
        if r.kind == "workload":
            w = {k: pl.get(k) for k in SHOW_KEYS}
            w.update({k: v for k, v in pl.items() if k not in w})
            w["seq"] = r.seq
            workloads.append(w)
        elif r.kind == "checkpoint":
            for dev, t in (pl.get("devices") or {}).items():
                totals[dev] = dict(t, checkpoint_seq=r.seq, checkpoint_wall=pl.get("wall"))
        elif r.kind in ("start", "stop", "recovery"):
            sessions.append(
                {"seq": r.seq, "kind": r.kind, **{k: pl.get(k) for k in ("session_id", "wall", "reason")}}
            )
    return {
        "ledger": str(path),
        "rows": len(rows),
        "head": {"seq": rows[-1].seq, "hash": rows[-1].hash} if rows else None,
        "workloads": workloads,
        "totals": totals,
        "sessions": sessions,
    }
