"""The ledger's keys and pins: created, read and written so that an operator cannot redirect or swap them.

* The **signing key** (``LEDGER.db.key``, PKCS#8 PEM) is created with ``O_CREAT|O_EXCL|O_NOFOLLOW`` and mode
  0600 in a temporary file, then linked into place (``link`` never replaces an existing file and never follows
  a symlink at the destination). It is read with ``O_NOFOLLOW`` and refused when it is a symlink, not a regular
  file, not owned by the daemon's user, or accessible by group or others (like ssh refuses such keys): a key
  planted by someone else could be known to them.
* The **pin** (``LEDGER.db.pub``, also ``flopwatch ledger export-key``) is the public key in PEM followed by
  the chain's genesis hash and ledger id as RFC 7468 explanatory text::

      -----BEGIN PUBLIC KEY-----
      …
      -----END PUBLIC KEY-----
      flopwatch-ledger-genesis: <sha256 of row 1>
      flopwatch-ledger-id: <uuid>

  A verifier holding it rejects another key *and* a wiped-and-restarted chain signed with the same key. It is
  written to a temporary file and renamed into place; a symlink at its path is refused, never followed.
* By default no key lands in a git working tree: creating one there needs an explicit key path.
"""

from __future__ import annotations

import hashlib
import os
import re
import stat
from dataclasses import dataclass
from pathlib import Path

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from flopwatch.errors import InputError, LedgerError
from flopwatch.io import atomic_write, open_regular, read_bytes

_PEM_RE = re.compile(
    r"-----BEGIN (PUBLIC KEY|PRIVATE KEY)-----[\r\n]+[A-Za-z0-9+/=\r\n]+-----END \1-----", re.S
)
_GENESIS_RE = re.compile(r"^flopwatch-ledger-genesis:\s*([0-9a-f]{64})\s*$", re.M)
_ID_RE = re.compile(r"^flopwatch-ledger-id:\s*(\S+)\s*$", re.M)
#: Largest key/pin file read (a PEM key is < 1 KiB; /dev/zero or a huge file must not be slurped).
_MAX_KEY_BYTES = 64 * 1024


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


# --------------------------------------------------------------------------------------------- pins
@dataclass(frozen=True)
class Pin:
    """What a verifier pins: the public key and (since flopwatch 0.3) the chain's genesis."""

    key: Ed25519PublicKey
    genesis_hash: str | None = None
    ledger_id: str | None = None

    def text(self) -> str:
        out = public_key_pem(self.key)
        if self.genesis_hash:
            out += f"flopwatch-ledger-genesis: {self.genesis_hash}\n"
        if self.ledger_id:
            out += f"flopwatch-ledger-id: {self.ledger_id}\n"
        return out


def parse_pin(text: str, source: str = "") -> Pin:
    """A pin from PEM text: a public key (or a private key, whose public half is taken) + optional genesis."""
    m = _PEM_RE.search(text)
    if m is None:
        raise InputError("not a PEM Ed25519 public key", file=source or None)
    block = m.group(0).encode()
    try:
        if m.group(1) == "PUBLIC KEY":
            key = serialization.load_pem_public_key(block)
        else:
            key = serialization.load_pem_private_key(block, password=None).public_key()
    except (ValueError, TypeError):
        raise InputError("not a PEM Ed25519 public key", file=source or None) from None
    if not isinstance(key, Ed25519PublicKey):
        raise InputError("not an Ed25519 key", file=source or None)
    g = _GENESIS_RE.search(text)
    i = _ID_RE.search(text)
    return Pin(key, g.group(1) if g else None, i.group(1) if i else None)


def load_pin(path: str | os.PathLike[str]) -> Pin:
    """Read a pin file (``LEDGER.pub`` or an export); InputError on anything else."""
    p = Path(path)
    # a link is refused: whoever planted it chose which key a verifier trusts
    data = read_bytes(p, kind="PEM key", max_bytes=_MAX_KEY_BYTES, follow_symlinks=False)
    return parse_pin(data.decode("ascii", errors="replace"), str(p))


def load_public_key(path: str | os.PathLike[str]) -> Ed25519PublicKey:
    """The public key of a pin or PEM key file."""
    return load_pin(path).key


# --------------------------------------------------------------------------------------------- writing
def write_public_file(dest: str | os.PathLike[str], text: str) -> None:
    """Atomically write a public file (pin) through :func:`flopwatch.io.atomic_write`; a symlink at ``dest``
    is refused."""
    p = Path(dest)
    if p.is_symlink():
        raise LedgerError(f"{p} is a symlink; refusing to write the public key through it (remove it)")
    if p.exists() and not p.is_file():
        raise LedgerError(f"{p} exists and is not a regular file; refusing to replace it")
    try:
        atomic_write(p, text, perms=0o644)
    except InputError as e:
        raise LedgerError(f"{p}: cannot write the public key: {e.detail}") from None


def create_private_key(path: str | os.PathLike[str]) -> Ed25519PrivateKey:
    """Generate a signing key at ``path`` (0600 from its creation); never replaces an existing file or follows a
    symlink (:func:`flopwatch.io.atomic_write` with ``exclusive=True``)."""
    p = Path(path)
    key = Ed25519PrivateKey.generate()
    pem = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    try:
        atomic_write(p, pem, perms=0o600, exclusive=True)
    except InputError as e:
        raise LedgerError(f"{p}: cannot create the signing key: {e.detail}") from None
    return key


def load_private_key(path: str | os.PathLike[str], *, expected_uid: int | None = None) -> Ed25519PrivateKey:
    """Read the signing key, refusing a symlink, a non-regular file, a foreign owner or a loose mode.

    ``expected_uid``: the owner the key must have (default: this process's effective uid).
    """
    p = Path(path)
    uid = os.geteuid() if expected_uid is None else expected_uid
    try:  # a symlink, a FIFO or a directory is refused before reading (io.open_regular, no link followed)
        f = open_regular(p, kind="signing key", follow_symlinks=False)
    except InputError as e:
        raise LedgerError(f"{p}: {e.detail} (a key must be a regular file the daemon owns)") from None
    with f:
        st = os.fstat(f.fileno())
        if st.st_uid != uid:
            raise LedgerError(
                f"{p}: signing key is owned by uid {st.st_uid}, not by this daemon's user (uid {uid}); "
                "a key someone else placed could be known to them — remove it or fix its owner"
            )
        mode = stat.S_IMODE(st.st_mode)
        if mode & 0o077:
            raise LedgerError(
                f"{p}: signing key is accessible by group/others (mode {mode:o}); run chmod 600 {p}"
            )
        data = f.read(_MAX_KEY_BYTES + 1)
    try:
        key = serialization.load_pem_private_key(data, password=None)
    except (ValueError, TypeError) as e:
        raise LedgerError(f"{p}: cannot load the ledger signing key: {e}") from None
    if not isinstance(key, Ed25519PrivateKey):
        raise LedgerError(f"{p}: signing key is not Ed25519")
    return key


def load_or_create_private_key(
    path: str | os.PathLike[str], *, expected_uid: int | None = None
) -> tuple[Ed25519PrivateKey, bool]:
    """Load the signing key at ``path``, creating it if absent. Returns ``(key, created)``."""
    p = Path(path)
    if os.path.lexists(p):
        return load_private_key(p, expected_uid=expected_uid), False
    return create_private_key(p), True


# --------------------------------------------------------------------------------------------- places
def git_worktree_of(path: str | os.PathLike[str]) -> Path | None:
    """The git working tree containing ``path`` (a parent holding ``.git``), or None."""
    p = Path(path).absolute().parent
    for d in (p, *p.parents):
        if (d / ".git").exists():
            return d
    return None


def pending_key_path(key_path: str | os.PathLike[str]) -> Path:
    """Where a first start creates its key until the genesis row is committed (then linked to ``key_path``)."""
    return Path(f"{key_path}.pending")


def ledger_companions(ledger: str | os.PathLike[str]) -> list[Path]:
    """Files that belong to a ledger and must never be overwritten by an output: the database, its WAL and
    shared-memory files, its key and lock."""
    s = str(ledger)
    return [Path(s + suffix) for suffix in ("", "-wal", "-shm", "-journal", ".key", ".key.pending", ".lock")]


def refuse_clobber(output: str | os.PathLike[str], protected: list[Path], what: str = "output") -> None:
    """InputError when ``output`` is (or links to) one of ``protected``."""
    out = Path(output)
    out_abs = Path(os.path.abspath(out))
    out_real = out.resolve()
    for p in protected:
        same = out_abs == Path(os.path.abspath(p)) or out_real == p.resolve()
        if not same and out.exists() and p.exists():
            try:
                same = os.path.samefile(out, p)
            except OSError:
                same = False
        if same:
            raise InputError(f"refusing to overwrite {p} with the {what}", file=str(out), field="output")
