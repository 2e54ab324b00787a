"""The tamper-evident ledger: an append-only SQLite (WAL) file of signed, hash-chained rows.

Every row — the genesis row, daemon start/stop, one row per workload, periodic checkpoints of the running
per-device totals — is stored as ``(seq, kind, prev_hash, payload, hash, signature)`` (format in
:mod:`~flopwatch.monitor.ledger_format`; keys and pins in :mod:`~flopwatch.monitor.keys`; verification in
:mod:`~flopwatch.monitor.verify`, re-exported here).

The writer (:class:`Ledger`, held by the daemon):

* **one writer at a time**: an exclusive ``flock`` on ``LEDGER.db.lock`` and on the database file itself (its
  device and inode, so a symlink, a hard link or a new name of the same file meets the same lock) held while
  open; a second daemon on the same ledger refuses with one line (the kernel drops the locks when their holder
  dies, kill -9 included). Every append first checks that the path still names the file it opened: a ledger
  renamed or removed under the daemon stops it rather than letting it write where nobody reads;
* **a history tree** (RFC 9162, :mod:`~flopwatch.monitor.tree`) over the rows, extended in each row's own
  transaction, and **signed tree heads** (:meth:`Ledger.sign_head`, in batches) that witnesses keep off the
  node; every signature goes through a :class:`~flopwatch.monitor.signer.Signer`;
* **a first start that crashes** at any point recovers by itself: the new key is written as
  ``LEDGER.db.key.pending`` and moved into place only after the genesis row is committed;
* **refuses a file whose schema was altered** (a trigger, a redefined view, any unexpected object) and checks
  after each insert that the row landed as written;
* **refuses to start a new chain beside an existing signing key** unless ``new_chain=True`` (``--new-chain``):
  a wiped ledger restarted with the kept key would otherwise verify against a key-only pin;
* writes the pin ``LEDGER.db.pub`` (public key + genesis hash) atomically, never through a symlink.

Limits (documented in docs/monitor.md): whoever holds the private key can rewrite history, and cutting off
the newest rows leaves a valid shorter chain — pin the key and genesis, and compare the head with an external
copy to rule those out.

Privacy: rows carry per-workload and per-device totals only, never sample-level traces.
"""

from __future__ import annotations

import errno
import fcntl
import hashlib
import logging
import os
import sqlite3
import threading
import time
import uuid
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from flopwatch.errors import InputError, LedgerError
from flopwatch.io import fsync_dir
from flopwatch.monitor import merkle
from flopwatch.monitor import tree as tree_store
from flopwatch.monitor.keys import (
    Pin,
    create_private_key,
    default_key_path,
    default_public_key_path,
    git_worktree_of,
    key_fingerprint,
    load_or_create_private_key,
    load_private_key,
    load_public_key,
    parse_pin,
    pending_key_path,
    public_key_pem,
    write_public_file,
)
from flopwatch.monitor.ledger_format import (
    FORMAT,
    GENESIS_PREV,
    KINDS,
    SCHEMA,
    TREE_SCHEMA,
    LedgerEntry,
    canonical_payload,
    connect,
    has_tree,
    iter_entries,
    row_hash,
    schema_problems,
    signed_bytes,
)
from flopwatch.monitor.rows import migrate_payload
from flopwatch.monitor.signer import KeySigner, Signer
from flopwatch.monitor.tree import SignedHead, head_message
from flopwatch.monitor.verify import Problem, VerifyResult, parse_head, verify_ledger

log = logging.getLogger("flopwatch.monitor")

__all__ = [
    "FORMAT",
    "GENESIS_PREV",
    "KINDS",
    "SHOW_KEYS",
    "Ledger",
    "LedgerEntry",
    "LedgerLocked",
    "Problem",
    "VerifyResult",
    "canonical_payload",
    "default_key_path",
    "default_public_key_path",
    "iter_ledger",
    "key_fingerprint",
    "load_public_key",
    "parse_head",
    "read_entries",
    "row_hash",
    "signed_bytes",
    "summarize_ledger",
    "verify_ledger",
]


class LedgerLocked(LedgerError):
    """Another process holds the ledger's writer lock."""


def lock_path(ledger_path: str | os.PathLike[str]) -> Path:
    return Path(f"{ledger_path}.lock")


def _acquire_lock(path: Path) -> int:
    """Exclusive, non-blocking ``flock`` on ``path`` (created 0600, no symlink followed); returns the fd."""
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    except OSError as e:
        if e.errno == errno.ELOOP:
            raise LedgerError(f"{path} is a symlink; refusing to use it as the ledger lock") from None
        raise InputError(
            f"cannot create the ledger lock: {e.strerror}", file=str(path), field="ledger"
        ) from None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as e:
        holder = ""
        try:
            holder = os.pread(fd, 32, 0).decode(errors="replace").strip()
        except OSError:
            pass
        os.close(fd)
        if e.errno in (errno.EAGAIN, errno.EACCES, errno.EWOULDBLOCK):
            who = f" (pid {holder})" if holder.isdigit() else ""
            raise LedgerLocked(
                f"{path.name[: -len('.lock')]}: another flopwatch monitor{who} is writing this ledger; "
                "one writer at a time"
            ) from None
        raise LedgerError(f"{path}: cannot lock the ledger: {e.strerror}") from None
    os.ftruncate(fd, 0)
    os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
    return fd


def _lock_file_identity(path: Path) -> tuple[int, tuple[int, int]]:
    """Exclusive ``flock`` on the ledger file itself (created if absent); returns ``(fd, (dev, ino))``.

    The named lock file follows the name; this one follows the file, so two names of one ledger (a symlink,
    a hard link, a rename) still make one writer. ``flock`` locks are independent of SQLite's POSIX locks;
    the fd stays open until the connection is closed (closing an fd of the file would drop those).
    """
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    except OSError as e:
        raise InputError(f"cannot open ledger: {e.strerror}", file=str(path), field="ledger") from None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as e:
        os.close(fd)
        if e.errno in (errno.EAGAIN, errno.EACCES, errno.EWOULDBLOCK):
            raise LedgerLocked(
                f"{path}: another flopwatch monitor is writing this ledger file under another name "
                "(a symlink, hard link or rename of it); one writer at a time"
            ) from None
        raise LedgerError(f"{path}: cannot lock the ledger: {e.strerror}") from None
    st = os.fstat(fd)
    return fd, (st.st_dev, st.st_ino)


class Ledger:
    """Append-only writer of a ledger file (the daemon holds one).

    ``Ledger(path)`` takes the writer lock, opens or creates the SQLite file and the signing key (``key_path``,
    default ``LEDGER.db.key``) and writes the pin to ``public_key_path`` (default ``LEDGER.db.pub``).
    ``new_chain=True`` allows an empty ledger beside an existing key; ``key_explicit=True`` says the key path was
    chosen on purpose (a default key is never created inside a git working tree). Use as a context manager or
    call :meth:`close`. Thread-safe: appends are serialised.
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        key_path: str | os.PathLike[str] | None = None,
        public_key_path: str | os.PathLike[str] | None = None,
        new_chain: bool = False,
        key_explicit: bool | None = None,
        expected_key_uid: int | None = None,
        signer: Signer | None = None,
        head_every: int = 0,
    ) -> None:
        self.path = Path(path)
        self.head_every = max(0, int(head_every))  # sign a tree head every N appends (0: only when asked)
        self._since_head = 0
        self._file_fd: int | None = None
        self._ident: tuple[int, int] | None = None
        self._range = merkle.CompactRange()
        self._head: SignedHead | None = None
        self.key_path = Path(key_path) if key_path else default_key_path(self.path)
        self.public_key_path = (
            Path(public_key_path) if public_key_path else default_public_key_path(self.path)
        )
        self._lock = threading.Lock()
        self._con: sqlite3.Connection | None = None
        self._lock_fd: int | None = None
        if self.path.exists() and not self.path.is_file():
            raise InputError("cannot open ledger: not a regular file", file=str(self.path), field="ledger")
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise InputError(
                f"cannot open ledger: {e.strerror}", file=str(self.path), field="ledger"
            ) from None
        self._lock_fd = _acquire_lock(lock_path(self.path))
        try:
            self._open(
                new_chain,
                key_path is not None if key_explicit is None else key_explicit,
                expected_key_uid,
                signer,
            )
        except BaseException:
            self.close()
            raise

    def _open(
        self, new_chain: bool, key_explicit: bool, expected_key_uid: int | None, signer: Signer | None
    ) -> None:
        if signer is None and not self.path.exists() and os.path.lexists(self.key_path) and not new_chain:
            raise self._kept_key_error()
        self._file_fd, self._ident = _lock_file_identity(self.path)
        try:
            con = self._con = connect(self.path, readonly=False)
            con.execute("PRAGMA journal_mode=WAL")
            # FULL: a committed row survives power loss, not only a process crash.
            con.execute("PRAGMA synchronous=FULL")
            bad = schema_problems(con)
            empty_file = not con.execute("SELECT 1 FROM main.sqlite_master LIMIT 1").fetchone()
            if empty_file:
                con.executescript(
                    f"BEGIN IMMEDIATE;{SCHEMA}COMMIT;"
                )  # all or nothing: a kill leaves no half schema
            elif bad:
                raise LedgerError(
                    f"{self.path}: ledger schema altered ({bad[0]}); refusing to append — run `flopwatch ledger verify`"
                )
            elif not has_tree(con):
                # a 0.2 chain-only ledger: add its history tree, computed from the rows, in one transaction
                con.execute("BEGIN IMMEDIATE")
                try:
                    for stmt in TREE_SCHEMA.split(";"):
                        if stmt.strip():
                            con.execute(stmt)
                    tree_store.build_tree(con)
                    con.execute("COMMIT")
                except BaseException:
                    con.execute("ROLLBACK")
                    raise
                log.warning("%s: added the history tree to a chain-only (0.2) ledger", self.path)
            n = con.execute("SELECT COUNT(*) FROM main.entries").fetchone()[0]
            self._range = tree_store.load_range(con, tree_store.tree_size(con))
            self._head = tree_store.latest_head(con)
        except sqlite3.DatabaseError as e:  # not a database, no permission: a bad --ledger path
            raise InputError(f"cannot open ledger: {e}", file=str(self.path), field="ledger") from None
        if self._range.size != n:
            raise LedgerError(
                f"{self.path}: the history tree holds {self._range.size} leaves but the ledger {n} rows; "
                "run `flopwatch ledger verify`"
            )
        pending: Path | None = None
        if signer is None:
            signer, pending = self._key_signer(n, new_chain, key_explicit, expected_key_uid)
        self._signer = signer
        self.public_key = signer.public_key
        pem = public_key_pem(self.public_key)
        if n == 0:
            genesis = self.append(
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
            if str(genesis.payload.get("public_key_pem", "")).strip() != pem.strip():
                raise LedgerError(
                    f"{self.path}: signing key {self.key_path} does not match the ledger's genesis key"
                )
        if pending is not None:  # the genesis row is committed: only now does the key take its name
            self._install_pending(pending)
        self.genesis_hash = genesis.hash
        self.pin = Pin(self.public_key, genesis.hash, str(genesis.payload.get("ledger_id") or "") or None)
        self._write_pin()

    def _key_signer(
        self, n: int, new_chain: bool, key_explicit: bool, expected_key_uid: int | None
    ) -> tuple[Signer, Path | None]:
        """The key-file signer; on a first start the key is created as ``….pending`` (returned to install)."""
        pending = pending_key_path(self.key_path)
        key_exists = os.path.lexists(self.key_path)
        if n and not key_exists and os.path.lexists(pending):
            # a first start killed after its genesis row committed and before the key took its name
            key = load_private_key(pending, expected_uid=expected_key_uid)
            self.key_created = False
            log.warning("%s: completing a first start that was interrupted (installing its key)", self.path)
            return KeySigner(key), pending
        if n and not key_exists:
            raise LedgerError(
                f"{self.path}: ledger exists but its signing key {self.key_path} is missing; "
                "refusing to start a new key on an existing chain"
            )
        if not n and key_exists and not new_chain:
            raise self._kept_key_error()
        if not key_exists and not key_explicit:
            tree = git_worktree_of(self.key_path)
            if tree is not None:
                raise LedgerError(
                    f"{self.key_path}: refusing to create the signing key inside the git working tree {tree} "
                    "(it could be committed); put the ledger elsewhere or pass --key PATH explicitly"
                )
        if not n and not key_exists:
            if os.path.lexists(pending):
                # left by a first start killed before its genesis row committed: it never signed a kept row
                log.warning(
                    "%s: removing the key of a first start that was interrupted before its genesis row",
                    pending,
                )
                os.unlink(pending)
            self.key_created = True
            return KeySigner(create_private_key(pending)), pending
        key, created = load_or_create_private_key(self.key_path, expected_uid=expected_key_uid)
        self.key_created = created
        return KeySigner(key), None

    def _install_pending(self, pending: Path) -> None:
        try:
            os.link(pending, self.key_path)  # never replaces an existing name
        except FileExistsError:
            raise LedgerError(
                f"{self.key_path} appeared while the first start was completing; refusing to replace it"
            ) from None
        except OSError as e:
            raise LedgerError(f"{self.key_path}: cannot install the signing key: {e.strerror}") from None
        os.unlink(pending)
        fsync_dir(self.key_path.parent)

    def _kept_key_error(self) -> LedgerError:
        return LedgerError(
            f"{self.path}: the ledger is empty or new but the signing key {self.key_path} exists: a new chain "
            "beside a kept key would hide a wiped ledger; pass --new-chain to start one on purpose (or, if an "
            "older flopwatch crashed during its first start, remove the empty ledger and that key)"
        )

    def _write_pin(self) -> None:
        """Export the pin for verifiers (rewritten only when missing or different)."""
        want = self.pin.text()
        p = self.public_key_path
        current: str | None = None
        if p.is_file() and not p.is_symlink():
            try:
                current = p.read_text(errors="replace")
            except OSError:
                current = None
        if current is not None:
            try:
                have = parse_pin(current, str(p))
                if have.genesis_hash == self.pin.genesis_hash and key_fingerprint(
                    have.key
                ) == key_fingerprint(self.pin.key):
                    return
            except InputError:
                pass
        write_public_file(p, want)

    # -- writing ---------------------------------------------------------------------------------
    def _check_identity(self) -> None:
        """The path still names the file this writer opened (not renamed, removed or replaced)."""
        try:
            st = os.stat(self.path)
            same = (st.st_dev, st.st_ino) == self._ident
        except OSError:
            same = False
        if not same:
            raise LedgerError(
                f"{self.path}: the ledger file was renamed, removed or replaced while the monitor ran; "
                "stopping (restart the monitor on the ledger's current path)"
            )

    def append(self, kind: str, payload: Mapping[str, Any]) -> LedgerEntry:
        """Sign and append one row in its own transaction; returns the stored entry."""
        return self.append_many([(kind, payload)])[0]

    def append_many(self, rows: list[tuple[str, Mapping[str, Any]]]) -> list[LedgerEntry]:
        """Sign and append rows in one transaction (one fsync); each row is signed and hashed on its own."""
        texts = [(kind, canonical_payload(payload)) for kind, payload in rows]
        if not texts:
            return []
        out: list[LedgerEntry] = []
        with self._lock:
            con = self._con
            if con is None:
                raise LedgerError(f"{self.path}: ledger is closed")
            self._check_identity()
            saved = merkle.CompactRange(self._range.size, [h for _, h in self._range.nodes()])
            try:
                con.execute("BEGIN IMMEDIATE")
                last = con.execute("SELECT seq, hash FROM main.entries ORDER BY seq DESC LIMIT 1").fetchone()
                seq, prev = (1, GENESIS_PREV) if last is None else (int(last[0]) + 1, str(last[1]))
                if self._range.size != seq - 1:
                    raise LedgerError(
                        f"{self.path}: history tree out of step with the rows (another writer?); run `flopwatch ledger verify`"
                    )
                nodes: list[tuple[int, int, bytes]] = []
                for kind, text in texts:
                    msg = signed_bytes(seq, kind, prev, text)
                    h = hashlib.sha256(msg).hexdigest()
                    sig = self._signer.sign(msg).hex()
                    con.execute(
                        "INSERT INTO main.entries(seq, kind, prev_hash, payload, hash, signature) VALUES (?,?,?,?,?,?)",
                        (seq, kind, prev, text, h, sig),
                    )
                    nodes.extend(self._range.append(merkle.leaf_hash(msg)))
                    out.append(LedgerEntry(seq, kind, prev, text, h, sig))
                    seq, prev = seq + 1, h
                tree_store.insert_nodes(con, nodes)
                # A trigger (planted after this ledger was opened) could drop or rewrite the row: read it back.
                for e in out:
                    got = con.execute(
                        "SELECT kind, prev_hash, payload, hash, signature FROM main.entries WHERE seq=?",
                        (e.seq,),
                    ).fetchone()
                    if got != (e.kind, e.prev_hash, e.payload_text, e.hash, e.signature):
                        raise LedgerError(
                            f"{self.path}: row {e.seq} did not land as written (schema tampering?); "
                            "run `flopwatch ledger verify`"
                        )
                con.execute("COMMIT")
            except (sqlite3.DatabaseError, LedgerError) as e:
                self._range = saved
                try:
                    con.execute("ROLLBACK")
                except sqlite3.DatabaseError:
                    pass
                if isinstance(e, LedgerError):
                    raise
                raise LedgerError(f"{self.path}: cannot append a {texts[0][0]} row: {e}") from None
            self._since_head += len(out)
        if self.head_every and self._since_head >= self.head_every:
            self.sign_head()
        return out

    def sign_head(self, *, time_ms: int | None = None) -> SignedHead:
        """Sign and store a tree head over every row written so far (the newest head when nothing changed)."""
        with self._lock:
            con = self._con
            if con is None:
                raise LedgerError(f"{self.path}: ledger is closed")
            if self._head is not None and self._head.size == self._range.size and time_ms is None:
                return self._head
            size, root = self._range.size, self._range.root().hex()
            t = int(time.time() * 1000) if time_ms is None else int(time_ms)
            kid = self._signer.key_id
            sig = self._signer.sign(head_message(size, root, t, kid)).hex()
            head = SignedHead(size, root, t, sig, kid)
            try:
                con.execute("BEGIN IMMEDIATE")
                tree_store.insert_head(con, head)
                con.execute("COMMIT")
            except sqlite3.DatabaseError as e:
                try:
                    con.execute("ROLLBACK")
                except sqlite3.DatabaseError:
                    pass
                raise LedgerError(f"{self.path}: cannot store a tree head: {e}") from None
            self._head = head
            self._since_head = 0
            return head

    def consistency(self, first: int, second: int) -> list[str]:
        """RFC 9162 consistency proof (hex) between two sizes, read on a private read-only connection
        (the exporter's thread; never the writer's connection)."""
        con = connect(self.path, readonly=True)
        try:
            return tree_store.consistency_hex(con, first, second)
        finally:
            con.close()

    def inclusion(self, index: int, size: int) -> list[str]:
        """RFC 9162 inclusion path (hex) of leaf ``index`` (row ``index + 1``) in the tree of ``size`` rows."""
        con = connect(self.path, readonly=True)
        try:
            return tree_store.inclusion_hex(con, index, size)
        finally:
            con.close()

    @property
    def latest_head(self) -> SignedHead | None:
        return self._head

    @property
    def tree_size(self) -> int:
        return self._range.size

    # -- reading ---------------------------------------------------------------------------------
    def entry(self, seq: int) -> LedgerEntry | None:
        with self._lock:
            assert self._con is not None
            row = self._con.execute(
                "SELECT seq, kind, prev_hash, payload, hash, signature FROM main.entries WHERE seq=?", (seq,)
            ).fetchone()
        return None if row is None else LedgerEntry(*row)

    def entries(self, kind: str | None = None) -> list[LedgerEntry]:
        return list(self.entries_after(0, kind))

    def entries_after(self, seq: int, kind: str | None = None) -> Iterator[LedgerEntry]:
        """Rows after ``seq`` (of ``kind``), streamed in sequence order from a private cursor."""
        assert self._con is not None
        con = connect(self.path, readonly=True)
        try:
            yield from iter_entries(con, kind, after=seq)
        finally:
            con.close()

    def last(self, kind: str | None = None) -> LedgerEntry | None:
        q = "SELECT seq, kind, prev_hash, payload, hash, signature FROM main.entries"
        args: tuple[Any, ...] = ()
        if kind is not None:
            q += " WHERE kind=?"
            args = (kind,)
        with self._lock:
            assert self._con is not None
            row = self._con.execute(q + " ORDER BY seq DESC LIMIT 1", args).fetchone()
        return None if row is None else LedgerEntry(*row)

    def head(self) -> tuple[int, str]:
        """``(seq, hash)`` of the newest row."""
        e = self.last()
        return (0, GENESIS_PREV) if e is None else (e.seq, e.hash)

    def close(self) -> None:
        with self._lock:
            if self._con is not None:
                try:
                    # Fold the WAL back into the main file so a copy of LEDGER.db alone is complete.
                    self._con.execute("PRAGMA wal_checkpoint(TRUNCATE)")
                except sqlite3.DatabaseError:
                    pass
                self._con.close()
                self._con = None
            if self._file_fd is not None:
                os.close(self._file_fd)  # after the connection: closing it drops this process's POSIX locks
                self._file_fd = None
            if self._lock_fd is not None:
                os.close(self._lock_fd)  # releases the flock
                self._lock_fd = None

    def __enter__(self) -> Ledger:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def iter_ledger(path: str | os.PathLike[str], kind: str | None = None) -> Iterator[LedgerEntry]:
    """Rows of a ledger file, opened read-only and streamed (InputError if it is not a readable ledger)."""
    p = Path(path)
    con = connect(p, readonly=True)
    try:
        yield from iter_entries(con, kind)
    except sqlite3.DatabaseError as e:
        raise InputError(f"not a readable flopwatch ledger: {e}", file=str(p)) from None
    finally:
        con.close()


def read_entries(path: str | os.PathLike[str]) -> list[LedgerEntry]:
    """All rows of a ledger file (small ledgers and tests; use :func:`iter_ledger` to stream)."""
    return list(iter_ledger(path))


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
    """The ``ledger show --json`` document: workloads (contract keys first, then the rest of each row, read as
    the current row version), the newest running totals per device, and the daemon sessions."""
    workloads: list[dict[str, Any]] = []
    totals: dict[str, dict[str, Any]] = {}
    sessions: list[dict[str, Any]] = []
    n = 0
    head: dict[str, Any] | None = None
    for r in iter_ledger(path):
        n += 1
        head = {"seq": r.seq, "hash": r.hash}
        pl = r.payload  # {} when unreadable: `ledger verify` reports it; show what can be read
        if r.kind == "workload":
            full = migrate_payload(pl) if pl else {}
            w = {k: full.get(k) for k in SHOW_KEYS}
            w.update({k: v for k, v in full.items() if k not in w})
            w["seq"] = r.seq
            workloads.append(w)
        elif r.kind == "checkpoint":
            devs = pl.get("devices")
            for dev, t in devs.items() if isinstance(devs, dict) else ():
                if isinstance(t, dict):
                    totals[str(dev)] = dict(t, checkpoint_seq=r.seq, checkpoint_wall=pl.get("wall"))
        elif r.kind in ("start", "stop", "recovery"):
            sessions.append(
                {"seq": r.seq, "kind": r.kind, **{k: pl.get(k) for k in ("session_id", "wall", "reason")}}
            )
    return {
        "ledger": str(path),
        "rows": n,
        "head": head,
        "workloads": workloads,
        "totals": totals,
        "sessions": sessions,
    }
