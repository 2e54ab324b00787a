"""Safe file input and output: every loader reads through here, every writer writes through here.

Inputs may be hostile (a verifier's tool runs where the operator may want it to fail), so reading a file:

* refuses anything but a regular file *before* opening it: a FIFO would block ``open`` forever, a device
  such as ``/dev/zero`` never ends, a directory is a user mistake; the descriptor is opened non-blocking and
  checked again with ``fstat`` (the path may have been swapped between the two checks);
* caps the size read (:data:`MAX_INPUT_BYTES`, override with ``FLOPWATCH_MAX_INPUT_BYTES``), so a huge or
  growing file cannot exhaust memory;
* parses JSON so that nesting 100 000 deep, integers with thousands of digits and ``1e999`` end in one
  :class:`~flopwatch.errors.InputError` (or a value the field validators name), never a RecursionError,
  OverflowError or MemoryError.

Outputs are written atomically (a temporary file named after the target in the same directory, ``fsync``,
then ``os.replace``; the temporary file is removed on any failure): a crash or a full disk leaves the previous
file intact, never half a file. No writer writes through (or replaces) a symbolic link at its target, ``--force``
or not (issue 25): the link may point at someone else's file, and whoever planted it meant something by it. :func:`check_not_input` refuses an
output path that is one of the command's inputs (by resolved path and by inode, so hard links and symlinks
count), before any work starts.
"""

from __future__ import annotations

import contextlib
import dataclasses
import errno
import json
import math
import os
import shutil
import stat
import sys
import tempfile
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import IO, Any

from flopwatch.errors import InputError

# Inputs are records, profiles, configs, schedules and CSVs of at most a few MB; 256 MiB leaves a wide margin
# while keeping a bogus input (e.g. a multi-GB log passed by mistake) from exhausting a small node's memory.
MAX_INPUT_BYTES = 256 * 1024 * 1024
# Nesting deeper than this is refused before parsing: no flopwatch format nests more than ~6 levels, and the
# C JSON scanner and tomllib recurse once per level (Python's default recursion limit is 1000).
MAX_NESTING = 200

_KIND_NAMES = {
    stat.S_IFIFO: "a FIFO (named pipe)",
    stat.S_IFCHR: "a character device",
    stat.S_IFBLK: "a block device",
    stat.S_IFSOCK: "a socket",
}

__all__ = [
    "MAX_INPUT_BYTES", "MAX_NESTING", "OutOfRange", "atomic_path", "atomic_write", "atomic_writer",
    "check_disk_space", "env_int", "clean_stale_partials", "disk_error", "disk_errors", "scratch_dir",
    "check_input_file", "check_not_input", "check_output_file", "fsync_dir", "is_out_of_range", "jsonable",
    "parse_json", "parse_toml", "read_bytes", "read_json", "read_text", "read_toml", "refuse_link",
    "open_output", "open_regular",
]  # fmt: skip


def env_int(name: str, default: int, *, lo: int = 1, hi: int = 2**62) -> int:
    """An integer environment variable, parsed as strictly as a command-line option: unset or empty gives
    ``default``; anything but ASCII digits within [lo, hi] (``²³``, ``٣``, ``1e9``, ``-5``, ``10_000``) is one
    :class:`InputError` naming the variable — ``str.isdigit`` accepts superscripts that ``int`` refuses."""
    raw = os.environ.get(name)
    if raw is None or not raw.strip():
        return default
    text = raw.strip()
    if not (text.isascii() and text.isdigit() and len(text) <= 30):
        raise InputError(f"must be a whole number of ASCII digits, got {raw!r}", field=f"${name}")
    v = int(text)
    if not lo <= v <= hi:
        raise InputError(f"must be between {lo} and {hi}, got {v}", field=f"${name}")
    return v


def max_input_bytes() -> int:
    """The size cap: ``FLOPWATCH_MAX_INPUT_BYTES`` (a positive integer; anything else is refused), else the
    default."""
    return env_int("FLOPWATCH_MAX_INPUT_BYTES", MAX_INPUT_BYTES)


def _describe_mode(mode: int) -> str:
    return _KIND_NAMES.get(stat.S_IFMT(mode), "not a regular file")


def check_input_file(
    path: str | os.PathLike[str], *, kind: str = "file", error: type[InputError] = InputError
) -> os.stat_result:
    """``stat`` of ``path`` when it is a readable-looking regular file; else ``error`` naming the file.

    Nothing is opened, so a FIFO cannot block and a device cannot stream.
    """
    file = os.fspath(path)
    try:
        st = os.stat(file)
    except FileNotFoundError:
        raise error("no such file", file=file) from None
    except NotADirectoryError:
        raise error("no such file (a parent is not a directory)", file=file) from None
    except PermissionError:
        raise error("cannot read (permission denied)", file=file) from None
    except OSError as e:  # ELOOP, ENAMETOOLONG, …
        raise error(f"cannot read ({e.strerror or e})", file=file) from None
    except ValueError:  # embedded NUL byte in the path
        raise error("is not a valid path", file=file) from None
    if stat.S_ISDIR(st.st_mode):
        raise error(f"is a directory, expected a {kind}", file=file)
    if not stat.S_ISREG(st.st_mode):
        raise error(f"is {_describe_mode(st.st_mode)}, expected a regular {kind}", file=file)
    return st


def open_regular(
    path: str | os.PathLike[str],
    *,
    kind: str = "file",
    error: type[InputError] = InputError,
    follow_symlinks: bool = True,
) -> IO[bytes]:
    """A binary file object on the regular file at ``path``, checked before opening and on the descriptor
    (``O_NONBLOCK``: a FIFO swapped in meanwhile cannot block). Readers that read in pieces (Parquet, Arrow
    IPC) keep it: a file replaced meanwhile is never half read, and non-UTF-8 names work (pyarrow's do not).
    ``follow_symlinks=False`` (keys, witness logs): a link at ``path`` is refused, whoever planted it chose the
    file; one swapped in after the check too (``O_NOFOLLOW``)."""
    file = os.fspath(path)
    if not follow_symlinks and os.path.islink(file):
        raise error(f"is a symlink; refusing to read a {kind} through it", file=file)
    check_input_file(file, kind=kind, error=error)
    flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0)
    try:
        fd = os.open(file, flags if follow_symlinks else flags | os.O_NOFOLLOW)
    except OSError as e:
        reason = "permission denied" if isinstance(e, PermissionError) else (e.strerror or str(e))
        raise error(f"cannot read ({reason})", file=file) from None
    fst = os.fstat(fd)
    if not stat.S_ISREG(fst.st_mode):
        os.close(fd)
        raise error(f"is {_describe_mode(fst.st_mode)}, expected a regular {kind}", file=file)
    return os.fdopen(fd, "rb")


def read_bytes(
    path: str | os.PathLike[str],
    *,
    kind: str = "file",
    error: type[InputError] = InputError,
    max_bytes: int | None = None,
    follow_symlinks: bool = True,
) -> bytes:
    """The whole content of a regular file of at most ``max_bytes`` bytes (``follow_symlinks``: see open_regular)."""
    file = os.fspath(path)
    cap = max_input_bytes() if max_bytes is None else int(max_bytes)
    with open_regular(file, kind=kind, error=error, follow_symlinks=follow_symlinks) as fh:
        size = os.fstat(fh.fileno()).st_size
        if size > cap:
            raise error(f"is {size} bytes, larger than the {cap}-byte limit for a {kind}", file=file)
        chunks: list[bytes] = []
        total = 0
        while True:
            try:
                chunk = fh.read(min(1 << 20, cap + 1 - total))
            except OSError as e:
                raise error(f"cannot read ({e.strerror or e})", file=file) from None
            if not chunk:
                break
            chunks.append(chunk)
            total += len(chunk)
            if total > cap:  # grew while being read (or a /proc-like file reporting size 0)
                raise error(f"is larger than the {cap}-byte limit for a {kind}", file=file)
        return b"".join(chunks)


def read_text(
    path: str | os.PathLike[str],
    *,
    kind: str = "file",
    error: type[InputError] = InputError,
    max_bytes: int | None = None,
) -> str:
    """UTF-8 text of a regular file (a byte-order mark is dropped); ``error`` naming the file otherwise."""
    data = read_bytes(path, kind=kind, error=error, max_bytes=max_bytes)
    try:
        # utf-8-sig: a byte-order mark (files saved by some Windows editors) is not a syntax error
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        raise error(f"is not UTF-8 text (byte {e.start}; expected a {kind})", file=os.fspath(path)) from None


# ------------------------------------------------------------------------------------------ numbers


class OutOfRange(float):
    """A number literal too large for a float64 (``1e999``, a 400-digit integer): its value is ±inf.

    The field validators, which reject non-finite values anyway, can name the literal with
    :func:`is_out_of_range` instead of saying "is infinite" about a number the file spells out.
    """

    literal: str

    def __new__(cls, literal: str) -> OutOfRange:
        neg = literal.lstrip().startswith("-")
        obj = super().__new__(cls, -math.inf if neg else math.inf)
        obj.literal = literal if len(literal) <= 24 else f"{literal[:12]}…({len(literal)} characters)"
        return obj


def jsonable(obj: Any) -> Any:
    """``obj`` as plain JSON values (the one JSON-safe converter): non-finite floats → None (JSON has no NaN;
    a null says "undefined" honestly), numpy scalars/arrays → numbers/lists, tuples and sets → lists,
    paths → str, objects with ``to_dict()`` and dataclasses → their dict. Keys become strings.

    numpy is recognised by duck typing (``item``/``tolist``) so this module stays import-light.
    """
    if obj is None or isinstance(obj, (bool, int, str)):
        return obj
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, Mapping):
        return {str(k): jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple, set, frozenset)):
        return [jsonable(v) for v in obj]
    if isinstance(obj, os.PathLike):
        return os.fspath(obj)
    if callable(getattr(obj, "to_dict", None)):  # records, results: their own JSON form
        return jsonable(obj.to_dict())
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return jsonable(dataclasses.asdict(obj))
    if callable(getattr(obj, "tolist", None)):  # numpy arrays and scalars (a scalar's tolist is its item)
        return jsonable(obj.tolist())
    if callable(getattr(obj, "item", None)):
        return jsonable(obj.item())
    return str(obj)


def is_out_of_range(value: Any) -> str | None:
    """The literal of an :class:`OutOfRange` number, else None."""
    return value.literal if isinstance(value, OutOfRange) else None


def _parse_int(s: str) -> int | float:
    # Python refuses to parse integers of more than 4300 digits (ValueError) and float(int) of more than
    # ~309 digits overflows: anything past float64's range is out of range for every field we read.
    digits = len(s.lstrip("-"))
    if digits > 308:
        return OutOfRange(s)
    v = int(s)
    if abs(v) > sys.float_info.max:
        return OutOfRange(s)
    return v


def _parse_float(s: str) -> float:
    v = float(s)
    if math.isinf(v):
        return OutOfRange(s)
    return v


class _DuplicateKey(ValueError):
    pass


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    # RFC 8259 §4: names SHOULD be unique; with a repeated one, readers disagree on which value counts (Python
    # and jq keep the last, others the first), so a file could say one thing to us and another to a reviewer.
    d = dict(pairs)
    if len(d) != len(pairs):
        seen: set[str] = set()
        raise _DuplicateKey(next(k for k, _ in pairs if k in seen or seen.add(k)))  # type: ignore[func-returns-value]
    return d


def _too_deep(obj: Any, limit: int) -> bool:
    """Whether containers nest more than ``limit`` levels (iterative: no recursion on hostile input)."""
    stack: list[tuple[Any, int]] = [(obj, 1)]
    while stack:
        o, d = stack.pop()
        if isinstance(o, dict):
            children: Iterable[Any] = o.values()
        elif isinstance(o, list):
            children = o
        else:
            continue
        if d > limit:
            return True
        stack.extend((c, d + 1) for c in children if isinstance(c, (dict, list)))
    return False


def parse_json(
    text: str,
    *,
    file: str | None = None,
    error: type[InputError] = InputError,
    line: int | None = None,
    max_nesting: int = MAX_NESTING,
) -> Any:
    """``json.loads`` that never raises anything but ``error`` (naming ``file`` and the line).

    Out-of-float-range numbers become :class:`OutOfRange` (±inf, refused by the field validators with the
    literal); NaN/Infinity literals parse to floats and are likewise refused where a field is validated.
    """
    where = f"line {line}: " if line is not None else ""
    try:
        # the C scanner guards its recursion itself (RecursionError, caught below)
        doc = json.loads(text, parse_int=_parse_int, parse_float=_parse_float, object_pairs_hook=_unique_keys)
    except _DuplicateKey as e:
        raise error(
            f"{where}key {str(e)[:60]!r} appears twice in one object (ambiguous)", file=file
        ) from None
    except json.JSONDecodeError as e:
        if line is None:
            raise error(f"line {e.lineno}: invalid JSON ({e.msg})", file=file) from None
        at = "" if e.msg.endswith(" at") else " at"  # "Unterminated string starting at": no second "at"
        raise error(f"line {line}: invalid JSON ({e.msg}{at} column {e.colno})", file=file) from None
    except RecursionError:
        raise error(f"{where}JSON nested more than {max_nesting} levels deep", file=file) from None
    except (ValueError, OverflowError, MemoryError) as e:
        raise error(f"{where}invalid JSON ({type(e).__name__})", file=file) from None
    # Nesting the parser accepted can still break code that walks the document recursively later.
    if _too_deep(doc, max_nesting):
        raise error(f"{where}JSON nested more than {max_nesting} levels deep", file=file)
    return doc


def read_json(
    path: str | os.PathLike[str],
    *,
    kind: str = "JSON file",
    error: type[InputError] = InputError,
    max_bytes: int | None = None,
) -> Any:
    """Read and parse one JSON document from a regular file (see :func:`read_text`, :func:`parse_json`)."""
    file = os.fspath(path)
    text = read_text(path, kind=kind, error=error, max_bytes=max_bytes)
    if not text.strip():
        raise error(f"is empty (expected a {kind})", file=file)
    return parse_json(text, file=file, error=error)


def parse_toml(
    text: str,
    *,
    file: str | None = None,
    error: type[InputError] = InputError,
    max_nesting: int = MAX_NESTING,
) -> dict[str, Any]:
    """``tomllib.loads`` that raises only ``error``; ``inf``/``nan`` values are refused by the validators."""
    if sys.version_info >= (3, 11):
        import tomllib
    else:  # pragma: no cover
        import tomli as tomllib

    try:
        doc = tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise error(f"invalid TOML ({e})", file=file) from None
    except RecursionError:
        raise error(f"TOML nested more than {max_nesting} levels deep", file=file) from None
    except (ValueError, OverflowError, MemoryError) as e:
        if "digits" in str(e):  # Python's int-parsing limit (sys.get_int_max_str_digits)
            raise error("invalid TOML (an integer of more than 4300 digits)", file=file) from None
        raise error(f"invalid TOML ({type(e).__name__}: {str(e)[:80]})", file=file) from None
    if _too_deep(doc, max_nesting):
        raise error(f"TOML nested more than {max_nesting} levels deep", file=file)
    return doc


def read_toml(
    path: str | os.PathLike[str],
    *,
    kind: str = "TOML file",
    error: type[InputError] = InputError,
    max_bytes: int | None = None,
) -> dict[str, Any]:
    """Read and parse a TOML document from a regular file."""
    file = os.fspath(path)
    return parse_toml(read_text(path, kind=kind, error=error, max_bytes=max_bytes), file=file, error=error)


# ------------------------------------------------------------------------------------------ outputs


def _same_file(a: Path, b: Path) -> bool:
    try:
        if a.resolve() == b.resolve():
            return True
    except (OSError, RuntimeError):  # symlink loop
        pass
    try:
        return os.path.samefile(a, b)
    except (OSError, ValueError):
        return False


def check_not_input(
    output: str | os.PathLike[str] | None,
    inputs: Iterable[str | os.PathLike[str] | None],
    *,
    option: str = "-o",
) -> None:
    """InputError when ``output`` is one of ``inputs`` (same resolved path, or same inode via a hard link).

    Call it before any work starts, so a refused command has read and written nothing. ``inputs`` may
    hold directories: an output *inside* an input directory is fine, the directory itself is not.
    """
    if output is None:
        return
    out = Path(output)
    for inp in inputs:
        if inp is None:
            continue
        if _same_file(out, Path(inp)):
            raise InputError(
                f"is also an input of this command ({os.fspath(inp)}); refusing to overwrite it "
                "(choose another output path)",
                file=os.fspath(out),
                field=option,
            )


_SQLITE_MAGIC = b"SQLite format 3\x00"  # https://www.sqlite.org/fileformat.html §1.3.1


def _head(p: Path, n: int = 64) -> bytes:
    """The first bytes of a regular file (a FIFO or device is never opened)."""
    try:
        if not stat.S_ISREG(p.stat().st_mode):
            return b""
        with p.open("rb") as f:
            return f.read(n)
    except OSError:
        return b""


def is_precious(path: str | os.PathLike[str]) -> str | None:
    """What ``path`` is when no output may replace it, even with ``--force`` (a SQLite ledger, a PEM private
    key, a ledger's companion file), else None."""
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


def check_output_file(path: str | os.PathLike[str]) -> None:
    """InputError unless ``path`` is absent or a regular file that may be replaced: appending to a FIFO would
    block, to a device or a directory would fail after the work was done, and a ledger, its companions or a
    private key are never an output."""
    file = os.fspath(path)
    try:
        st = os.stat(file)
    except FileNotFoundError:
        return
    except OSError as e:
        raise InputError(f"cannot write ({e.strerror or e})", file=file) from None
    if stat.S_ISDIR(st.st_mode):
        raise InputError("is a directory; expected an output file name", file=file)
    if not stat.S_ISREG(st.st_mode):
        raise InputError(f"is {_describe_mode(st.st_mode)}; expected a regular output file", file=file)
    kind = is_precious(file)
    if kind is not None:
        raise InputError(f"is {kind}; refusing to overwrite it", file=file)
    busy = False
    with contextlib.suppress(OSError):  # before any work: the file a live recording writes is not an output
        fd = os.open(file, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0))
        busy = _busy(fd, lock=False)
        os.close(fd)
    if busy:
        raise InputError(_BUSY, file=file)


def check_output(
    output: str | os.PathLike[str],
    *,
    inputs: Iterable[str | os.PathLike[str] | None] = (),
    overwrite: bool = False,
    what: str = "output",
    option: str = "-o",
    create_parents: bool = False,
) -> Path:
    """The one check for a file a command writes, before any work: never an input (:func:`check_not_input`),
    never a directory, FIFO, device, ledger or key (:func:`check_output_file`), never into a missing folder
    unless the writer creates it (``create_parents``), never over an existing file unless ``overwrite``
    (``--force``: "replace my old output", never "destroy a ledger"). Returns ``output`` as a Path."""
    out = Path(output)
    check_output_file(out)
    parent = out.parent if str(out.parent) else Path(".")
    if not create_parents and not parent.is_dir():
        raise InputError(f"folder {parent} does not exist", file=str(out))
    check_not_input(out, inputs, option=option)
    # before any work: no writer writes through a link (found at the end, it wastes the work)
    refuse_link(out)
    if (out.exists() or out.is_symlink()) and not overwrite:
        raise InputError("file exists (use --force to overwrite)", file=str(out))
    return out


def refuse_link(path: str | os.PathLike[str]) -> None:
    """InputError when ``path`` is a symbolic link (dangling or not): no writer writes through one."""
    if os.path.islink(path):
        raise InputError(
            "is a symbolic link; refusing to write through it (remove the link first)", file=os.fspath(path)
        )


def open_output(path: str | os.PathLike[str]) -> IO[bytes]:
    """A new or truncated binary file at ``path`` for a streaming writer that cannot write to a temporary name
    (a recording's Parquet file and journal, read after a crash): a symlink at ``path`` is refused, also one
    planted after the check (``O_NOFOLLOW``)."""
    refuse_link(path)
    flags = os.O_WRONLY | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
    try:
        fd = os.open(path, flags, 0o644)
    except OSError as e:
        if e.errno == errno.ELOOP:
            refuse_link(path)
        raise InputError(f"cannot write ({e.strerror or e})", file=os.fspath(path)) from None
    if _busy(fd, lock=True):  # locked before truncating: a 2nd recording used to empty a live one's file
        os.close(fd)
        raise InputError(_BUSY, file=os.fspath(path))
    os.ftruncate(fd, 0)
    return os.fdopen(fd, "wb")


_BUSY = "is being written by another process (a recording still running?); refusing to touch it"


def _busy(fd: int, *, lock: bool) -> bool:
    """Whether another open file holds the write lock of ``fd``'s file (``lock``: keep it for this one)."""
    import fcntl  # POSIX, as the rest of the output guard (O_NOFOLLOW)

    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    except OSError:  # a file system without locks: nothing to learn
        return False
    if not lock:
        fcntl.flock(fd, fcntl.LOCK_UN)
    return False


def _prepare_target(p: Path) -> None:
    """The one guard of every atomic writer: the target is not a symlink or a directory, its folder exists."""
    refuse_link(p)
    if p.is_dir():
        raise InputError("is a directory; expected an output file path", file=str(p))
    try:
        p.parent.mkdir(parents=True, exist_ok=True)
    except FileExistsError:
        raise InputError("its parent is not a directory", file=str(p)) from None
    except OSError as e:
        raise InputError(f"cannot create its directory ({e.strerror or e})", file=str(p)) from None


def fsync_dir(d: Path) -> None:
    """fsync a directory (a rename or link in it) or a closed file (its data) against a crash; best effort."""
    with contextlib.suppress(OSError):
        fd = os.open(d, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


#: Temporary outputs are named ``<name>.partial-<pid>-<random>`` beside the output: visible, saying what they
#: are and which process writes them, so the next writer of the same output removes what a killed one left.
_PARTIAL = ".partial-"
#: Errors of a disk that cannot take the data (full, over quota, over RLIMIT_FSIZE, read-only, failing).
_DISK_ERRNOS = frozenset(
    e
    for e in (errno.ENOSPC, getattr(errno, "EDQUOT", None), errno.EFBIG, errno.EROFS, errno.EIO)
    if e is not None
)


def _pid_alive(pid: int) -> bool:
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OSError, OverflowError):
        return True  # another user's live process, or unknowable: keep its files
    return True


def clean_stale_partials(path: str | os.PathLike[str]) -> list[str]:
    """Remove the temporary files and folders that a killed writer of ``path`` left beside it (their writer's
    process no longer runs); returns their names. A symlink is removed, never followed."""
    p = Path(path)
    d = p.parent if str(p.parent) else Path(".")
    prefix = f"{p.name}{_PARTIAL}"
    removed: list[str] = []
    try:
        entries = list(os.scandir(d))
    except OSError:
        return removed
    for e in entries:
        if not e.name.startswith(prefix):
            continue
        pid_s = e.name[len(prefix) :].split("-", 1)[0]
        if not (pid_s.isascii() and pid_s.isdigit()) or _pid_alive(int(pid_s)):
            continue
        with contextlib.suppress(OSError):
            if e.is_dir(follow_symlinks=False):
                shutil.rmtree(e.path, ignore_errors=True)
            else:
                os.unlink(e.path)
            removed.append(e.name)
    return removed


def _partial_prefix(p: Path) -> str:
    return f"{p.name}{_PARTIAL}{os.getpid()}-"


@contextlib.contextmanager
def disk_errors(path: str | os.PathLike[str]) -> Iterator[None]:
    """Turn a full disk (or quota, file-size limit, read-only or failing disk) met while writing ``path`` into
    one :class:`InputError` naming the file (exit 2), instead of a traceback."""
    try:
        yield
    except OSError as e:
        if e.errno not in _DISK_ERRNOS:
            raise
        raise InputError(
            f"cannot write ({e.strerror or e}); nothing was written and any previous file is untouched",
            file=os.fspath(path),
        ) from None


def disk_error(exc: BaseException) -> str | None:
    """One line for an exception caused, anywhere in its chain, by a disk that cannot take the data (full,
    over quota or RLIMIT_FSIZE, read-only, failing), else None: streaming writers (Parquet through pyarrow, a
    worker thread) surface it wrapped or as a later error on the closed file."""
    seen: set[int] = set()
    e: BaseException | None = exc
    while e is not None and id(e) not in seen:
        seen.add(id(e))
        if isinstance(e, OSError) and e.errno in _DISK_ERRNOS:
            where = f" ({e.filename})" if getattr(e, "filename", None) else ""
            return f"cannot write{where}: {e.strerror or e} (disk full, over quota or a file-size limit)"
        e = e.__cause__ or e.__context__
    return None


def check_disk_space(path: str | os.PathLike[str], need_bytes: float, *, what: str = "output") -> None:
    """InputError before any work when ``need_bytes`` will not fit in the free space of ``path``'s file system."""
    p = Path(path)
    d = p.parent if str(p.parent) else Path(".")
    while not d.exists() and d != d.parent:
        d = d.parent
    try:
        free = shutil.disk_usage(d).free
    except OSError:
        return
    if need_bytes > free:
        raise InputError(
            f"the {what} needs about {need_bytes / 1e9:.3g} GB and {d} has {free / 1e9:.3g} GB free",
            file=os.fspath(p),
        )


@contextlib.contextmanager
def scratch_dir(path: str | os.PathLike[str]) -> Iterator[Path]:
    """A scratch folder beside ``path`` (``<name>.partial-<pid>-…``) for a writer that builds ``path`` from
    pieces; removed when the block ends, and by the next writer of ``path`` if this process is killed."""
    p = Path(path)
    _prepare_target(p)
    clean_stale_partials(p)
    with disk_errors(p):
        d = Path(tempfile.mkdtemp(prefix=_partial_prefix(p), dir=p.parent))
    try:
        with disk_errors(p):
            yield d
    finally:
        shutil.rmtree(d, ignore_errors=True)


def _temp_beside(p: Path, suffix: str) -> tuple[int, str]:
    """A temporary file beside ``p`` (``<name>.partial-<pid>-…``), once what a killed writer left is removed."""
    _prepare_target(p)
    clean_stale_partials(p)
    try:
        return tempfile.mkstemp(prefix=_partial_prefix(p), suffix=suffix, dir=p.parent)
    except OSError as e:
        raise InputError(f"cannot write ({e.strerror or e})", file=str(p)) from None


def _final_mode(p: Path, perms: int | None) -> int:
    """The mode of the regular file at ``p`` that the output replaces, else ``perms`` (default rw-r--r--)."""
    with contextlib.suppress(OSError):
        old = os.lstat(p)
        if stat.S_ISREG(old.st_mode):
            return stat.S_IMODE(old.st_mode)
    return 0o644 if perms is None else perms


def _install(tmp: str, p: Path, exclusive: bool) -> None:
    """Put the finished temporary file at ``p``: rename over it, or (``exclusive``) link it there only when the
    name is free — a file or link that appeared meanwhile is never replaced."""
    if not exclusive:
        os.replace(tmp, p)
        return
    try:
        os.link(tmp, p)  # atomic, and fails (EEXIST) on any existing name, a symlink included
    except FileExistsError:
        raise InputError("appeared while it was being written; refusing to replace it", file=str(p)) from None
    except OSError as e:
        raise InputError(f"cannot write ({e.strerror or e})", file=str(p)) from None
    os.unlink(tmp)


@contextlib.contextmanager
def atomic_writer(
    path: str | os.PathLike[str],
    *,
    mode: str = "w",
    perms: int | None = None,
    encoding: str = "utf-8",
    exclusive: bool = False,
) -> Iterator[IO[Any]]:
    """Context manager giving a file in ``path``'s directory that replaces ``path`` only on success.

    ``mode`` is ``"w"`` (text) or ``"wb"``. The file keeps the mode of the file it replaces, else
    ``perms`` (default rw-r--r--: outputs are shared). A symlink at ``path`` is refused (InputError), never
    written through nor replaced. On any exception the temporary file is removed and ``path`` is untouched.
    ``exclusive``: create ``path``, never replace an existing file (a signing key). The temporary file is
    created with mode 0600 and given its final mode before any data is written.
    """
    if mode not in ("w", "wb"):
        raise ValueError(f"mode must be 'w' or 'wb', got {mode!r}")
    p = Path(path)
    fd, tmp = _temp_beside(p, ".tmp")
    try:
        os.fchmod(fd, _final_mode(p, perms))
        kw: dict[str, Any] = {} if "b" in mode else {"encoding": encoding, "newline": ""}
        with disk_errors(p), os.fdopen(fd, mode, **kw) as fh:
            yield fh
            fh.flush()
            os.fsync(fh.fileno())
        _install(tmp, p, exclusive)
        fsync_dir(p.parent)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def atomic_write(
    path: str | os.PathLike[str],
    data: str | bytes,
    *,
    perms: int | None = None,
    encoding: str = "utf-8",
    exclusive: bool = False,
) -> Path:
    """Write ``data`` to ``path`` atomically (see :func:`atomic_writer`); returns the path."""
    mode = "wb" if isinstance(data, bytes) else "w"
    with atomic_writer(path, mode=mode, perms=perms, encoding=encoding, exclusive=exclusive) as fh:
        fh.write(data)
    return Path(path)


@contextlib.contextmanager
def atomic_path(path: str | os.PathLike[str], *, perms: int | None = None) -> Iterator[Path]:
    """A temporary path beside ``path`` for writers that want a file name (pandas, pyarrow, matplotlib).

    The temporary path is renamed over ``path`` when the block succeeds, removed otherwise (the same guard
    as :func:`atomic_writer`: a symlink at ``path`` is refused). ``perms`` as for :func:`atomic_writer`.
    """
    p = Path(path)
    fd, tmp = _temp_beside(p, p.suffix or ".tmp")
    os.close(fd)
    try:
        with disk_errors(p):
            yield Path(tmp)
        os.chmod(tmp, _final_mode(p, perms))
        fsync_dir(Path(tmp))  # the file the writer closed: its data on disk before the rename
        os.replace(tmp, p)
        fsync_dir(p.parent)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
