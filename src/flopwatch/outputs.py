"""One check for every file a command writes: never an input, never a ledger or a private key, never into a
folder that does not exist, never over an existing file without ``--force``.

Issue 11 item 3: ``record -o TRACE --force`` replaying TRACE, ``sim trace -o SCHEDULE`` and ``-o LEDGER.db``
destroyed what they were pointed at. ``--force`` means "replace my old output", never "destroy a ledger", so the
ledger and key checks hold with it too. Only the first bytes of an existing file are read (a FIFO is not opened).
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterable
from pathlib import Path

from flopwatch.errors import InputError

_SQLITE_MAGIC = b"SQLite format 3\x00"  # https://www.sqlite.org/fileformat.html §1.3.1


def _head(p: Path, n: int = 64) -> bytes:
    try:
        if not stat.S_ISREG(p.stat().st_mode):
            return b""
        with p.open("rb") as f:
            return f.read(n)
    except OSError:
        return b""


def _same(a: Path, b: Path) -> bool:
    if Path(os.path.abspath(a)) == Path(os.path.abspath(b)):
        return True
    try:
        return a.exists() and b.exists() and os.path.samefile(a, b)
    except OSError:
        return False


def is_precious(path: str | os.PathLike[str]) -> str | None:
    """What ``path`` is when no output may replace it (a SQLite ledger, a PEM private key, a ledger's
    companion file), else None."""
    p = Path(path)
    head = _head(p)
    if head.startswith(_SQLITE_MAGIC):
        return "an SQLite database (a ledger?)"
    if head.startswith(b"-----BEGIN") and b"PRIVATE KEY" in head:
        return "a private key"
    s = str(p)
    for suffix in (".key", ".lock", ".pub", "-wal", "-shm", "-journal"):
        if s.endswith(suffix) and _head(Path(s[: -len(suffix)])).startswith(_SQLITE_MAGIC):
            return f"a companion ({suffix}) of the ledger {s[: -len(suffix)]}"
    return None


def check_output(
    output: str | os.PathLike[str],
    *,
    inputs: Iterable[str | os.PathLike[str] | None] = (),
    overwrite: bool = False,
    what: str = "output",
    create_parents: bool = False,
) -> Path:
    """Refuse (InputError naming ``output``) to write ``what`` there; return it as a Path when it is safe.
    ``create_parents``: the writer creates missing folders itself."""
    out = Path(output)
    if out.is_dir():
        raise InputError(f"is a directory; give a file name for the {what}", file=str(out))
    parent = out.parent if str(out.parent) else Path(".")
    if not create_parents and not parent.is_dir():
        raise InputError(f"folder {parent} does not exist", file=str(out))
    for i in inputs:
        if i is not None and _same(out, Path(i)):
            raise InputError(f"is an input file; write the {what} elsewhere", file=str(out))
    if out.exists() or out.is_symlink():
        kind = is_precious(out)
        if kind is not None:
            raise InputError(f"is {kind}; refusing to overwrite it with the {what}", file=str(out))
        if not overwrite:
            raise InputError("file exists (use --force to overwrite)", file=str(out))
    return out
