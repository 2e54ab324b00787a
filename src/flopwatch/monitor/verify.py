"""``flopwatch ledger verify``: schema, pin, every row's hash, signature, sequence number and chain link.

Streaming and linear: rows are read from the cursor in sequence order and never held all at once; each row
costs one SHA-256 and at most one Ed25519 check. A row that fails is first reported where it stands (edited,
or forged when only the signature fails). If any row's hash fails, a second pass locates moved rows without
trying neighbours: moving a row keeps its ``hash`` and ``prev_hash``, so its position in the signed chain is
its depth along the ``prev_hash → hash`` links from the genesis, which SQLite computes with an index in its
temporary store; one SHA-256 and one signature check at that depth confirm the move, wherever the row went
(single swaps, whole blocks, a shuffled ledger). Python memory is bounded by the number of failing rows.

The same pass recomputes the RFC 9162 history tree from the rows (O(log n) memory, :mod:`~flopwatch.monitor.merkle`)
and compares its root, at each size where one was signed, with the node's stored heads and with the heads a
witness logged off the node (``witness=``): a witnessed head that is not a prefix of the rows (truncation, a
deleted, edited or moved row, a fork, a wipe re-signed with the same key) is a problem naming that head.
"""

from __future__ import annotations

import hashlib
import os
import re
import sqlite3
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from flopwatch.errors import InputError, LedgerError
from flopwatch.monitor import merkle
from flopwatch.monitor.keys import Pin, default_public_key_path, key_fingerprint, load_pin
from flopwatch.monitor.ledger_format import (
    GENESIS_PREV,
    LedgerEntry,
    connect,
    has_tree,
    iter_entries,
    schema_problems,
    signed_bytes,
)
from flopwatch.monitor.tree import SignedHead, iter_heads, load_range, tree_size
from flopwatch.monitor.witness import WitnessedHead

_SIG_HEX = re.compile(r"[0-9a-f]{128}")


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
    genesis_hash: str | None = None
    has_tree: bool = False  # False: a chain-only (0.2) ledger
    tree_root: str | None = None  # recomputed from the rows
    witness_heads: int = 0  # heads in the witness log given
    witnessed_size: int = 0  # rows covered by the newest consistent witnessed head

    def to_dict(self) -> dict[str, Any]:
        return {
            "ledger": self.path,
            "ok": self.ok,
            "rows": self.n_rows,
            "head": {"seq": self.head_seq, "hash": self.head_hash},
            "genesis_hash": self.genesis_hash,
            "key_source": self.key_source,
            "key_fingerprint": self.key_fingerprint,
            "problems": [{"seq": p.seq, "kind": p.kind, "message": p.message} for p in self.problems],
            "warnings": list(self.warnings),
            "tree": {"size": self.n_rows, "root": self.tree_root, "stored": self.has_tree},
            "witness": {"heads": self.witness_heads, "witnessed_rows": self.witnessed_size},
        }


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
    if not 1 <= seq < 2**63 or (h is not None and not re.fullmatch(r"[0-9a-f]{64}", h)):
        raise InputError(f"expected SEQ or SEQ:HASH (64 hex digits), got {text!r}", field="expect_head")
    return seq, h


def _genesis(con: sqlite3.Connection) -> LedgerEntry | None:
    first = next(iter_entries(con), None)
    if first is not None and first.kind == "genesis":
        return first
    return next(iter_entries(con, "genesis"), None)


def _key_of(genesis: LedgerEntry | None) -> Ed25519PublicKey | None:
    if genesis is None:
        return None
    try:
        k = serialization.load_pem_public_key(str(genesis.payload.get("public_key_pem", "")).encode())
    except (ValueError, TypeError):
        return None
    return k if isinstance(k, Ed25519PublicKey) else None


def _choose_key(
    p: Path, public_key: str | os.PathLike[str] | Ed25519PublicKey | Pin | None, result: VerifyResult
) -> Pin | None:
    if isinstance(public_key, Pin):
        result.key_source = "given"
        return public_key
    if isinstance(public_key, Ed25519PublicKey):
        result.key_source = "given"
        return Pin(public_key)
    if public_key is not None:
        result.key_source = str(public_key)
        return load_pin(public_key)
    beside = default_public_key_path(p)
    if beside.exists() or beside.is_symlink():
        result.key_source = str(beside)
        result.warnings.append(
            f"verified against {beside.name} beside the ledger; whoever can rewrite the ledger can replace it "
            "too, so pass --public-key with a copy taken off the node"
        )
        return load_pin(beside)
    result.key_source = "genesis row (not pinned)"
    result.warnings.append(
        "verified against the key embedded in the ledger itself; pass --public-key with the key "
        "exported at installation to rule out a ledger re-signed with another key"
    )
    return None


def verify_ledger(
    path: str | os.PathLike[str],
    public_key: str | os.PathLike[str] | Ed25519PublicKey | Pin | None = None,
    *,
    expect_head: tuple[int, str | None] | None = None,
    witness: Sequence[WitnessedHead] | None = None,
) -> VerifyResult:
    """Check the schema, the pin and every row; never raises for tampering (one :class:`Problem` per finding).

    The key is, in order: ``public_key`` if given (a pin file from ``export-key``/``LEDGER.pub``: the
    strongest check — it binds the genesis too), else ``LEDGER.pub`` beside the file, else the key embedded
    in the genesis row (self-asserted: a warning says so). ``expect_head`` ``(seq, hash or None)`` is a head
    recorded earlier off the node: the ledger must still hold that row unchanged (catches cut-off rows).
    ``witness``: the heads of a witness log (:func:`flopwatch.monitor.witness.read_log`); each must be a
    prefix of the rows, signed by the pinned key.
    """
    p = Path(path)
    result = VerifyResult(path=str(p), n_rows=0, ok=False)
    try:
        con = connect(p, readonly=True)
    except InputError as e:  # a directory, a device, no read access: not a ledger this can read
        result.problems.append(Problem(None, "not-a-ledger", e.detail))
        return result
    try:
        _verify(con, p, public_key, expect_head, result, witness)
    except sqlite3.DatabaseError as e:
        kind = "not-a-ledger" if "not a database" in str(e) else "unreadable"
        result.problems.append(Problem(None, kind, f"not a readable flopwatch ledger: {e}"))
    finally:
        con.close()
    result.problems.sort(key=lambda pr: -1 if pr.seq is None else pr.seq)  # stable: ledger-wide first
    result.ok = not result.problems
    return result


def _verify(
    con: sqlite3.Connection,
    p: Path,
    public_key: str | os.PathLike[str] | Ed25519PublicKey | Pin | None,
    expect_head: tuple[int, str | None] | None,
    result: VerifyResult,
    witness: Sequence[WitnessedHead] | None = None,
) -> None:
    problems = result.problems
    names = {str(r[0]) for r in con.execute("SELECT name FROM main.sqlite_master")}
    if "entries" not in names and "workloads" not in names:
        problems.append(Problem(None, "not-a-ledger", "not a flopwatch ledger (no entries table)"))
        return
    for s in schema_problems(con):
        problems.append(Problem(None, "schema", f"schema altered: {s}"))
    if any(pr.kind == "schema" and "'entries'" in pr.message for pr in problems):
        return  # the rows cannot be trusted to be what SELECT returns
    last = con.execute("SELECT seq, hash FROM main.entries ORDER BY seq DESC LIMIT 1").fetchone()
    if last is None:
        problems.append(Problem(None, "empty", "ledger has no rows"))
        return
    result.head_seq, result.head_hash = int(last[0]), str(last[1])
    if expect_head is not None:
        seq, h = expect_head
        held = con.execute("SELECT hash FROM main.entries WHERE seq = ?", (seq,)).fetchone()
        if held is None and seq > result.head_seq:
            problems.append(
                Problem(
                    None,
                    "truncated",
                    f"row {seq} was recorded earlier but the ledger ends at row {result.head_seq}: "
                    f"{seq - result.head_seq} newest row(s) cut off",
                )
            )
        elif held is None or (h is not None and str(held[0]) != h):
            problems.append(
                Problem(seq, "rewritten", f"does not match the head recorded earlier ({(h or '?')[:16]}…)")
            )

    genesis = _genesis(con)
    genesis_key = _key_of(genesis)
    result.genesis_hash = genesis.hash if genesis is not None else None
    pin = _choose_key(p, public_key, result)
    key = pin.key if pin is not None else genesis_key
    if key is None:
        problems.append(Problem(None, "no-key", "no usable public key (genesis row unreadable)"))
        return
    result.key_fingerprint = key_fingerprint(key)
    if genesis_key is not None and key_fingerprint(genesis_key) != result.key_fingerprint:
        problems.append(
            Problem(
                genesis.seq if genesis else None, "foreign-key", "ledger was created with a different key"
            )
        )
    if pin is not None and pin.genesis_hash is not None:
        if genesis is None or genesis.hash != pin.genesis_hash:
            problems.append(
                Problem(
                    None,
                    "foreign-genesis",
                    f"the chain's genesis {(genesis.hash[:16] + '…') if genesis else '(none)'} is not the "
                    f"pinned genesis {pin.genesis_hash[:16]}…: the ledger was wiped and restarted, or replaced",
                )
            )
    elif pin is not None and result.key_source not in ("genesis row (not pinned)",):
        result.warnings.append(
            "the pin holds no genesis hash (exported by an older flopwatch): a wiped-and-restarted chain signed "
            "with the same key would pass; re-export it with `flopwatch ledger export-key`"
        )

    result.has_tree = has_tree(con)
    kid = result.key_fingerprint
    # witnessed heads by size (the verifier's log: its own file, read whole); stored heads are streamed
    wit: dict[int, list[WitnessedHead]] = {}
    for w in witness or ():
        if w.head.key_id != kid or not w.head.verify(key):
            problems.append(
                Problem(
                    None,
                    "witness-key",
                    f"{w.label()} is not signed by the pinned key (another key or a forged head)",
                )
            )
            continue
        wit.setdefault(w.head.size, []).append(w)
    result.witness_heads = len(witness or ())
    stored: Iterator[SignedHead] = iter(iter_heads(con)) if result.has_tree else iter(())
    next_stored = next(stored, None)
    tree = merkle.CompactRange()

    # Pass 1: stream every row once; failures are classified in place, moved rows are found in pass 2.
    failing: dict[int, tuple[int, bool]] = {}  # seq → (index of its problem, hash ok at its position)
    expected_seq = 1
    prev_hash_stored = GENESIS_PREV
    prev_auth = True
    first = True
    n = 0
    for r in iter_entries(con):
        n += 1
        msg = signed_bytes(r.seq, r.kind, r.prev_hash, r.payload_text)
        h_ok = hashlib.sha256(msg).hexdigest() == r.hash
        # One signature check per row; a row whose hash is wrong at this position cannot be authentic here.
        auth = h_ok and _sig_ok(key, r.signature, msg)
        link_ok = r.prev_hash == prev_hash_stored
        in_place = r.seq == expected_seq
        if first and r.kind != "genesis":
            problems.append(Problem(r.seq, "no-genesis", "first row is not the genesis row"))
        if r.seq > expected_seq:
            gap = f"{expected_seq}" if r.seq - expected_seq == 1 else f"{expected_seq}..{r.seq - 1}"
            problems.append(Problem(r.seq, "deleted", f"row(s) {gap} missing before this row: deleted"))
        if not auth:
            failing[r.seq] = (len(problems), h_ok)
            problems.append(_in_place_problem(r, h_ok))
        elif not link_ok and in_place and prev_auth:
            # Two authentic neighbours that do not link: something between them was replaced.
            problems.append(Problem(r.seq, "chain", f"does not follow row {r.seq - 1} in the hash chain"))
        prev_hash_stored, prev_auth, expected_seq, first = r.hash, auth, r.seq + 1, False
        tree.append(merkle.leaf_hash(msg))
        if wit or next_stored is not None:
            next_stored = _check_heads(tree, wit, next_stored, stored, key, problems, result)
    result.n_rows = n
    result.tree_root = tree.root().hex()
    while next_stored is not None:  # heads beyond the rows: rows were cut off after the node signed them
        problems.append(
            Problem(
                None,
                "truncated",
                f"the node signed a head of {next_stored.size} rows but the ledger holds {n}",
            )
        )
        next_stored = next(stored, None)
    if result.has_tree and not problems:  # (rows that fail already explain a tree that differs)
        _check_stored_tree(con, tree, problems)
    for size, ws in sorted(wit.items()):
        if size > n:
            problems.append(
                Problem(
                    None,
                    "witness-truncated",
                    f"{ws[0].label()} covers {size} rows but the ledger holds {n}: rows were cut off",
                )
            )
    if not result.has_tree:
        result.warnings.append(
            "a chain-only ledger (flopwatch 0.2): no history tree and no witness; it shows the rows agree with "
            "each other and the key, not that they are the rows a verifier saw"
        )
    elif witness is None:
        result.warnings.append(
            "no witness log given (--witness HEADS.jsonl): whoever holds the node's key could have rewritten "
            "every row; only heads kept off the node rule that out"
        )
    elif result.witnessed_size < n:
        result.warnings.append(
            f"rows {result.witnessed_size + 1}..{n} come after the newest witnessed head: not yet witnessed"
        )
    if any(not h_ok for _, h_ok in failing.values()):
        _locate_moved(con, key, failing, problems)


def _check_stored_tree(con: sqlite3.Connection, tree: merkle.CompactRange, problems: list[Problem]) -> None:
    """The stored tree's right edge (O(log n) nodes) against the tree recomputed from the rows: proofs are
    served from the stored nodes, so a damaged one would make an honest ledger fail its witnesses."""
    try:
        stored = tree_size(con)
        ok = stored == tree.size and load_range(con, stored).nodes() == tree.nodes()
    except (LedgerError, ValueError):
        stored, ok = -1, False
    if not ok:
        problems.append(
            Problem(
                None,
                "tree",
                f"the stored history tree ({stored} leaves) does not match the {tree.size} rows: proofs served "
                "from it would fail",
            )
        )


def _check_heads(
    tree: merkle.CompactRange,
    wit: dict[int, list[WitnessedHead]],
    next_stored: SignedHead | None,
    stored: Iterator[SignedHead],
    key: Ed25519PublicKey,
    problems: list[Problem],
    result: VerifyResult,
) -> SignedHead | None:
    """Compare the recomputed root at this size with the witnessed and the stored heads of this size."""
    size = tree.size
    root_hex: str | None = None
    for w in wit.get(size, ()):
        root_hex = root_hex or tree.root().hex()
        if w.head.root != root_hex:
            problems.append(
                Problem(
                    None,
                    "witness",
                    f"{w.label()} is not a prefix of this ledger (its first {size} rows now hash to "
                    f"{root_hex[:16]}…): rows were deleted, edited, moved or re-signed after it was witnessed",
                )
            )
        else:
            result.witnessed_size = max(result.witnessed_size, size)
    while next_stored is not None and next_stored.size <= size:
        h = next_stored
        if h.size == size:
            root_hex = root_hex or tree.root().hex()
            if h.root != root_hex or not h.verify(key):
                problems.append(
                    Problem(size, "head", f"the node's signed head of {size} rows does not match the rows")
                )
        next_stored = next(stored, None)
    return next_stored


def _in_place_problem(r: LedgerEntry, h_ok: bool) -> Problem:
    if h_ok:
        return Problem(
            r.seq, "forged", f"({r.kind}) signature invalid: row inserted or re-hashed after an edit"
        )
    return Problem(r.seq, "edited", f"({r.kind}) content does not match its hash/signature: row edited")


def _locate_moved(
    con: sqlite3.Connection,
    key: Ed25519PublicKey,
    failing: dict[int, tuple[int, bool]],
    problems: list[Problem],
) -> None:
    """Pass 2: which failing rows are authentic rows signed at another position?

    A row's position in the *signed* chain is its depth along the ``prev_hash → hash`` links from the genesis
    (moves keep both columns). SQLite walks the links with an index built in its temporary store (on disk,
    not in Python memory); each row found at a depth other than its sequence number costs one SHA-256 and one
    signature check at that depth.
    """
    n_max = int(con.execute("SELECT COALESCE(MAX(seq), 0) FROM main.entries").fetchone()[0])
    con.execute("CREATE TEMP TABLE IF NOT EXISTS _links AS SELECT seq, hash, prev_hash FROM main.entries")
    con.execute("CREATE INDEX IF NOT EXISTS temp._links_prev ON _links(prev_hash)")
    walk = con.execute(
        "WITH RECURSIVE w(seq, hash, depth) AS ("
        " SELECT seq, hash, 1 FROM _links WHERE prev_hash = ?"
        " UNION ALL SELECT l.seq, l.hash, w.depth + 1 FROM _links l JOIN w ON l.prev_hash = w.hash"
        " WHERE w.depth < ?)"  # bounds a cycle planted in the links
        " SELECT seq, depth FROM w WHERE seq != depth",
        (GENESIS_PREV, n_max + 1),
    )
    for seq, depth in walk:
        seq, depth = int(seq), int(depth)
        hit = failing.get(seq)
        if hit is None or hit[1] or problems[hit[0]].kind == "moved":
            continue
        row = con.execute(
            "SELECT seq, kind, prev_hash, payload, hash, signature FROM main.entries WHERE seq = ?", (seq,)
        ).fetchone()
        r = LedgerEntry(int(row[0]), str(row[1]), str(row[2]), str(row[3]), str(row[4]), str(row[5]))
        msg = signed_bytes(depth, r.kind, r.prev_hash, r.payload_text)
        if hashlib.sha256(msg).hexdigest() == r.hash and _sig_ok(key, r.signature, msg):
            problems[hit[0]] = Problem(
                seq, "moved", f"({r.kind}) holds the signed row {depth}: rows reordered/swapped"
            )
    con.execute("DROP TABLE IF EXISTS temp._links")
