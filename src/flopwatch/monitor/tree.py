"""The history tree stored in the ledger's SQLite file, and the signed tree head.

* The leaves are the ledger rows in sequence order; a row's leaf data is exactly the bytes its hash and
  signature cover (:func:`~flopwatch.monitor.ledger_format.signed_bytes`), so a verifier recomputes the tree
  from the rows alone.
* ``tree_nodes`` keeps every perfect subtree root, written in the row's own transaction (so the tree never
  disagrees with the rows after a crash): an append writes 2 nodes amortised, a root or a proof reads
  O(log n) of them (:mod:`~flopwatch.monitor.merkle`). The stored nodes are a cache for serving proofs: a
  proof built from a wrong node fails at its recipient; ``ledger verify`` recomputes the tree from the rows and
  compares the stored right edge with it.
* A **signed tree head** is ``(size, root, time, signature, key_id)``; the signature is Ed25519 over
  ``"flopwatch.tree-head/1\\n{size}\\n{root hex}\\n{time_ms}\\n{key_id}"``. ``time`` is the node's clock in
  milliseconds since the Unix epoch (RFC 9162's timestamp unit); a witness records its own clock beside it.
"""

from __future__ import annotations

import re
import sqlite3
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from flopwatch.errors import InputError, LedgerError
from flopwatch.monitor import merkle
from flopwatch.monitor.ledger_format import iter_entries, signed_bytes

HEAD_FORMAT = "flopwatch.tree-head/1"
_HEX64 = re.compile(r"[0-9a-f]{64}")
_HEX128 = re.compile(r"[0-9a-f]{128}")
#: Heads, logs and proofs are small; a field beyond these is not one of ours.
MAX_SIZE = 2**62
MAX_PROOF_HASHES = 130  # 2 × 64 levels + slack: any tree below 2^64 leaves


def leaf_of(seq: int, kind: str, prev_hash: str, payload_text: str) -> bytes:
    """The leaf hash of a row: SHA-256(0x00 ‖ the row's signed bytes)."""
    return merkle.leaf_hash(signed_bytes(seq, kind, prev_hash, payload_text))


@dataclass(frozen=True)
class SignedHead:
    """A signed tree head: the node's commitment to its first ``size`` rows."""

    size: int
    root: str  # hex
    time_ms: int
    signature: str  # hex
    key_id: str  # sha256 of the raw public key, hex

    def message(self) -> bytes:
        return head_message(self.size, self.root, self.time_ms, self.key_id)

    def verify(self, key: Ed25519PublicKey) -> bool:
        try:
            key.verify(bytes.fromhex(self.signature), self.message())
            return True
        except (InvalidSignature, ValueError):
            return False

    def to_dict(self) -> dict[str, Any]:
        """The contract form ``{"size", "root", "time", "signature", "key_id"}`` (hex for binary)."""
        return {
            "size": self.size,
            "root": self.root,
            "time": self.time_ms,
            "signature": self.signature,
            "key_id": self.key_id,
        }

    def label(self) -> str:
        return f"head size {self.size} root {self.root[:16]}…"


def head_message(size: int, root_hex: str, time_ms: int, key_id: str) -> bytes:
    return f"{HEAD_FORMAT}\n{int(size)}\n{root_hex}\n{int(time_ms)}\n{key_id}".encode()


def head_from_dict(d: Any, *, file: str | None = None, record: int | str | None = None) -> SignedHead:
    """Parse a head (JSON object); InputError naming the file, record and field on anything malformed."""
    if not isinstance(d, Mapping):
        raise InputError("a tree head must be a JSON object", file=file, record=record)

    def integer(name: str) -> int:
        v = d.get(name)
        if isinstance(v, bool) or not isinstance(v, int) or not 0 <= v < MAX_SIZE:
            raise InputError(
                f"must be an integer in 0..2^62, got {v!r}"[:160], file=file, record=record, field=name
            )
        return v

    def hexfield(name: str, rx: re.Pattern[str], what: str) -> str:
        v = d.get(name)
        if not isinstance(v, str) or not rx.fullmatch(v):
            raise InputError(
                f"must be {what} (lowercase hex), got {v!r}"[:160], file=file, record=record, field=name
            )
        return v

    return SignedHead(
        size=integer("size"),
        root=hexfield("root", _HEX64, "a 32-byte hash"),
        time_ms=integer("time"),
        signature=hexfield("signature", _HEX128, "a 64-byte Ed25519 signature"),
        key_id=hexfield("key_id", _HEX64, "a 32-byte key id"),
    )


def proof_from_list(v: Any, *, file: str | None = None, field: str = "proof") -> list[bytes]:
    """Parse a proof (a JSON list of hex hashes); InputError naming the file and field otherwise."""
    if not isinstance(v, list) or len(v) > MAX_PROOF_HASHES:
        raise InputError(f"must be a list of at most {MAX_PROOF_HASHES} hex hashes", file=file, field=field)
    out: list[bytes] = []
    for i, h in enumerate(v):
        if not isinstance(h, str) or not _HEX64.fullmatch(h):
            raise InputError(f"item {i} is not a 32-byte hash in lowercase hex", file=file, field=field)
        out.append(bytes.fromhex(h))
    return out


# --------------------------------------------------------------------------------------------- the store
def node_getter(con: sqlite3.Connection) -> Callable[[int, int], bytes]:
    def get(level: int, idx: int) -> bytes:
        row = con.execute("SELECT hash FROM main.tree_nodes WHERE level=? AND idx=?", (level, idx)).fetchone()
        if row is None or not isinstance(row[0], bytes) or len(row[0]) != 32:
            raise LedgerError(
                f"history tree node ({level}, {idx}) is missing or damaged; run `flopwatch ledger verify`"
            )
        return row[0]

    return get


def tree_size(con: sqlite3.Connection) -> int:
    row = con.execute("SELECT MAX(idx) FROM main.tree_nodes WHERE level = 0").fetchone()
    return 0 if row is None or row[0] is None else int(row[0]) + 1


def load_range(con: sqlite3.Connection, size: int) -> merkle.CompactRange:
    get = node_getter(con)
    return merkle.CompactRange(size, [get(lv, i) for lv, i in merkle.perfect_ranges(0, size)])


def insert_nodes(con: sqlite3.Connection, nodes: Iterable[tuple[int, int, bytes]]) -> None:
    con.executemany("INSERT INTO main.tree_nodes(level, idx, hash) VALUES (?,?,?)", nodes)


def build_tree(con: sqlite3.Connection) -> merkle.CompactRange:
    """Write the tree of an existing chain (a 0.2 ledger opened by this writer), in one streaming pass."""
    cr = merkle.CompactRange()
    batch: list[tuple[int, int, bytes]] = []
    for r in iter_entries(con):
        batch.extend(cr.append(leaf_of(r.seq, r.kind, r.prev_hash, r.payload_text)))
        if len(batch) >= 10_000:
            insert_nodes(con, batch)
            batch.clear()
    insert_nodes(con, batch)
    return cr


def latest_head(con: sqlite3.Connection) -> SignedHead | None:
    row = con.execute(
        "SELECT size, root, time_ms, signature, key_id FROM main.tree_heads ORDER BY size DESC LIMIT 1"
    ).fetchone()
    return (
        None if row is None else SignedHead(int(row[0]), str(row[1]), int(row[2]), str(row[3]), str(row[4]))
    )


def iter_heads(con: sqlite3.Connection) -> Iterable[SignedHead]:
    for row in con.execute(
        "SELECT size, root, time_ms, signature, key_id FROM main.tree_heads ORDER BY size"
    ):
        yield SignedHead(int(row[0]), str(row[1]), int(row[2]), str(row[3]), str(row[4]))


def insert_head(con: sqlite3.Connection, h: SignedHead) -> None:
    con.execute(
        "INSERT OR REPLACE INTO main.tree_heads(size, root, time_ms, signature, key_id) VALUES (?,?,?,?,?)",
        (h.size, h.root, h.time_ms, h.signature, h.key_id),
    )


def consistency_hex(con: sqlite3.Connection, first: int, second: int) -> list[str]:
    """The RFC 9162 consistency proof between two sizes of the stored tree, as hex strings."""
    n = tree_size(con)
    if not 0 < first <= second <= n:
        raise InputError(
            f"need 0 < first <= second <= {n} (the tree's size), got {first}, {second}", field="first"
        )
    return [h.hex() for h in merkle.consistency_proof(node_getter(con), first, second)]


def inclusion_hex(con: sqlite3.Connection, index: int, size: int) -> list[str]:
    n = tree_size(con)
    if not 0 <= index < size <= n:
        raise InputError(f"need 0 <= index < size <= {n}, got {index}, {size}", field="index")
    return [h.hex() for h in merkle.inclusion_path(node_getter(con), index, size)]
