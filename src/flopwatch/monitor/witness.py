"""Witnessing: a verifier keeps the node's signed tree heads off the node, and checks each new one.

``flopwatch ledger witness SOURCE --log HEADS.jsonl`` fetches the newest signed head from SOURCE (the
monitor's HTTP port: ``GET /head`` and ``GET /consistency?first=N&second=M``; or a ledger file, read-only),
verifies its signature against the pinned key, checks with RFC 9162 consistency proofs that every head
already in the log is a prefix of it, and appends it with the witness's own clock (``witnessed_at``). The log
is only ever appended to (``O_APPEND``, fsync), never rewritten or truncated.

What this buys (Crosby & Wallach, USENIX Security 2009; RFC 9162 §8): once a head is in a verifier's log, the
node cannot delete, edit, reorder or re-sign any row under it — not even with its own key — without
``ledger verify --witness`` naming that head. Rows after the newest witnessed head are only as good as the
node's word.
"""

from __future__ import annotations

import errno
import json
import math
import os
import sqlite3
import stat
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from flopwatch.errors import InputError
from flopwatch.io import open_regular
from flopwatch.monitor import merkle
from flopwatch.monitor import tree as tree_store
from flopwatch.monitor.keys import key_fingerprint
from flopwatch.monitor.ledger_format import connect, has_tree
from flopwatch.monitor.tree import SignedHead, head_from_dict, proof_from_list

#: A witness log line or an HTTP answer beyond this is not one of ours.
MAX_LINE_BYTES = 64 * 1024
MAX_LOG_BYTES = 1 << 30
HTTP_TIMEOUT_S = 10.0


@dataclass(frozen=True)
class WitnessedHead:
    """A head as a witness logged it: the node's head plus the witness's own clock."""

    head: SignedHead
    witnessed_at: float  # the witness's clock (Unix seconds) when it checked and logged the head
    source: str = ""
    line: int = 0  # 1-based line in the log

    def to_dict(self) -> dict[str, Any]:
        return {**self.head.to_dict(), "witnessed_at": self.witnessed_at, "source": self.source}

    def label(self) -> str:
        when = datetime.fromtimestamp(self.witnessed_at, timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
        where = f" (log line {self.line})" if self.line else ""
        return f"the head of size {self.head.size} root {self.head.root[:16]}… witnessed at {when}{where}"


def read_log(path: str | os.PathLike[str]) -> list[WitnessedHead]:
    """The heads of a witness log (JSON Lines); InputError naming the file, line and field on a bad line."""
    p = Path(path)
    out: list[WitnessedHead] = []
    # a link is refused (whoever planted it chose the heads); not a regular file, or missing: one line
    with open_regular(p, kind="witness log", follow_symlinks=False) as f:
        st = os.fstat(f.fileno())
        if st.st_size > MAX_LOG_BYTES:
            raise InputError(f"the witness log is larger than {MAX_LOG_BYTES} bytes", file=str(p))
        for i, raw in enumerate(f, start=1):
            if not raw.strip():
                continue
            if len(raw) > MAX_LINE_BYTES:
                raise InputError(f"line longer than {MAX_LINE_BYTES} bytes", file=str(p), record=i)
            try:
                d = json.loads(raw)
            except (ValueError, RecursionError):
                raise InputError("not a JSON object", file=str(p), record=i) from None
            out.append(_witnessed_from_dict(d, file=str(p), line=i))
    return out


def _witnessed_from_dict(d: Any, *, file: str, line: int) -> WitnessedHead:
    head = head_from_dict(d, file=file, record=line)
    w = d.get("witnessed_at")
    if isinstance(w, bool) or not isinstance(w, (int, float)) or not math.isfinite(w) or not 0 <= w < 1e11:
        raise InputError(
            f"must be Unix seconds, got {w!r}"[:120], file=file, record=line, field="witnessed_at"
        )
    src = d.get("source", "")
    return WitnessedHead(head, float(w), str(src)[:500] if src is not None else "", line)


def append_log(path: str | os.PathLike[str], entry: WitnessedHead) -> None:
    """Append one head to the log: ``O_APPEND``, no symlink followed, fsynced; never truncates or rewrites."""
    p = Path(path)
    data = (json.dumps(entry.to_dict(), sort_keys=True, separators=(",", ":")) + "\n").encode()
    try:
        fd = os.open(p, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
    except OSError as e:
        if e.errno == errno.ELOOP:
            raise InputError(
                "the witness log is a symlink; refusing to write through it", file=str(p)
            ) from None
        raise InputError(f"cannot open the witness log: {e.strerror}", file=str(p)) from None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise InputError("the witness log is not a regular file", file=str(p))
        # a log whose last line lacks its newline (a crash mid-write) gets one first, so lines never merge
        size = os.fstat(fd).st_size
        if size:
            with open(p, "rb") as r:
                r.seek(size - 1)
                if r.read(1) != b"\n":
                    data = b"\n" + data
        n = os.write(fd, data)
        if n != len(data):
            raise InputError("short write to the witness log (disk full?)", file=str(p))
        os.fsync(fd)
    except OSError as e:
        raise InputError(f"cannot append to the witness log: {e.strerror}", file=str(p)) from None
    finally:
        os.close(fd)


# --------------------------------------------------------------------------------------------- sources
class HeadSource:
    """Where heads and consistency proofs come from: the monitor's HTTP port, or a ledger file."""

    name: str

    def head(self) -> SignedHead:  # pragma: no cover - interface
        raise NotImplementedError

    def consistency(self, first: int, second: int) -> list[bytes]:  # pragma: no cover - interface
        raise NotImplementedError

    def close(self) -> None:
        pass


class HttpSource(HeadSource):
    def __init__(self, url: str, *, opener: Callable[..., Any] | None = None) -> None:
        u = url.rstrip("/")
        if u.endswith("/head"):
            u = u[: -len("/head")]
        self.base = u
        self.name = url
        self._open = opener or urllib.request.urlopen

    def _get(self, path: str, field: str) -> Any:
        url = self.base + path
        try:
            with self._open(url, timeout=HTTP_TIMEOUT_S) as r:
                body = r.read(MAX_LINE_BYTES + 1)
        except urllib.error.HTTPError as e:
            detail = ""
            try:
                detail = e.read(300).decode(errors="replace").strip()
            except OSError:
                pass
            raise InputError(f"HTTP {e.code} {detail}".strip()[:200], file=url, field=field) from None
        except (urllib.error.URLError, OSError, ValueError) as e:
            reason = getattr(e, "reason", None) or e
            raise InputError(f"cannot fetch: {reason}", file=url, field=field) from None
        if len(body) > MAX_LINE_BYTES:
            raise InputError(f"answer longer than {MAX_LINE_BYTES} bytes", file=url, field=field)
        try:
            return json.loads(body)
        except (ValueError, RecursionError):
            raise InputError("not JSON", file=url, field=field) from None

    def head(self) -> SignedHead:
        return head_from_dict(self._get("/head", "head"), file=self.base + "/head")

    def consistency(self, first: int, second: int) -> list[bytes]:
        q = urllib.parse.urlencode({"first": first, "second": second})
        d = self._get(f"/consistency?{q}", "proof")
        url = f"{self.base}/consistency?{q}"
        if not isinstance(d, dict):
            raise InputError("not a JSON object", file=url, field="proof")
        return proof_from_list(d.get("proof"), file=url, field="proof")


class FileSource(HeadSource):
    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        self.name = str(path)
        self._con = connect(self.path, readonly=True)
        try:
            if not has_tree(self._con):
                raise InputError(
                    "a chain-only (flopwatch 0.2) ledger has no history tree and no signed head to witness",
                    file=self.name,
                )
        except sqlite3.DatabaseError as e:
            self._con.close()
            raise InputError(f"not a readable flopwatch ledger: {e}", file=self.name) from None
        except InputError:
            self._con.close()
            raise

    def head(self) -> SignedHead:
        try:
            h = tree_store.latest_head(self._con)
        except sqlite3.DatabaseError as e:
            raise InputError(
                f"not a readable flopwatch ledger: {e}", file=self.name, field="tree_heads"
            ) from None
        if h is None:
            raise InputError("the ledger holds no signed tree head yet", file=self.name, field="tree_heads")
        return h

    def consistency(self, first: int, second: int) -> list[bytes]:
        try:
            return [bytes.fromhex(x) for x in tree_store.consistency_hex(self._con, first, second)]
        except sqlite3.DatabaseError as e:
            raise InputError(
                f"not a readable flopwatch ledger: {e}", file=self.name, field="tree_nodes"
            ) from None

    def close(self) -> None:
        self._con.close()


def open_source(source: str) -> HeadSource:
    if source.startswith(("http://", "https://")):
        return HttpSource(source)
    return FileSource(source)


# --------------------------------------------------------------------------------------------- witnessing
@dataclass(frozen=True)
class WitnessOutcome:
    ok: bool
    message: str
    entry: WitnessedHead | None = None


def check_new_head(
    new: SignedHead,
    earlier: list[WitnessedHead],
    key: Ed25519PublicKey,
    consistency: Callable[[int, int], list[bytes]],
) -> str | None:
    """Why ``new`` may not join a log holding ``earlier`` (None: it may): signature, key, and a consistency
    proof from every distinct earlier head."""
    kid = key_fingerprint(key)
    if new.key_id != kid:
        return f"the head is signed by key {new.key_id[:16]}…, not the pinned key {kid[:16]}…"
    if not new.verify(key):
        return f"{new.label()}: signature does not verify with the pinned key"
    seen: set[tuple[int, str]] = set()
    for e in earlier:
        old = e.head
        if (old.size, old.root) in seen:
            continue
        seen.add((old.size, old.root))
        if old.size > new.size:
            return f"the new head has {new.size} rows, fewer than {e.label()}: the ledger was cut back or rewritten"
        if old.size == new.size:
            if old.root != new.root:
                return f"the new head forks from {e.label()}: same size, another root"
            continue
        if old.size == 0:
            continue
        proof = consistency(old.size, new.size)
        if not merkle.verify_consistency(
            old.size, new.size, bytes.fromhex(old.root), bytes.fromhex(new.root), proof
        ):
            return f"the new head (size {new.size}) is not consistent with {e.label()}: history was rewritten"
    return None


def witness(
    source: str | HeadSource,
    log_path: str | os.PathLike[str],
    key: Ed25519PublicKey,
    *,
    clock: Callable[[], float] = time.time,
) -> WitnessOutcome:
    """Fetch, check and log one head (InputError on unreadable inputs; ``ok=False`` on an inconsistent head)."""
    earlier = read_log(log_path) if os.path.lexists(log_path) else []
    src = open_source(source) if isinstance(source, str) else source
    try:
        new = src.head()
        why = check_new_head(new, earlier, key, src.consistency)
    finally:
        src.close()
    if why is not None:
        return WitnessOutcome(False, why)
    entry = WitnessedHead(new, float(clock()), src.name, len(earlier) + 1)
    append_log(log_path, entry)
    return WitnessOutcome(
        True, f"witnessed head size {new.size} root {new.root[:16]}… ({len(earlier)} earlier)", entry
    )
