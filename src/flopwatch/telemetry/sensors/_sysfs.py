"""Small helpers for reading sysfs-style files through an injectable reader.

Backends take ``root`` (so tests point them at recorded trees under ``tests/data/sysfs``) and ``reader``
(a ``Callable[[Path], str]``; tests inject one that raises ``PermissionError`` since they run as root).
Errors are translated here: a missing file is :class:`SensorUnavailable` at discovery or
:class:`SensorError` at read time, garbage content is :class:`SensorError` naming the file and value,
and ``PermissionError`` becomes :class:`SensorPermissionError` with the fix.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from flopwatch.errors import SensorError, SensorPermissionError

Reader = Callable[[Path], str]


def default_reader(path: Path) -> str:
    with open(path, encoding="ascii", errors="replace") as f:
        return f.read()


def read_text(path: Path, reader: Reader, *, fix: str = "") -> str:
    try:
        return reader(path).strip()
    except PermissionError:
        raise SensorPermissionError(f"permission denied reading {path}. {fix}".strip()) from None
    except FileNotFoundError:
        raise SensorError(f"{path} disappeared (device removed or driver unloaded?)") from None
    except OSError as e:  # EIO, ENODEV from a busy or suspended device
        raise SensorError(f"cannot read {path}: {e.strerror or e}") from None


def read_number(path: Path, reader: Reader, *, fix: str = "") -> float:
    """Read an integer or decimal from a sysfs file; garbage raises SensorError quoting it."""
    raw = read_text(path, reader, fix=fix)
    tok = raw.split()[0] if raw.split() else ""
    try:
        v = float(tok)
    except ValueError:
        raise SensorError(f"{path}: expected a number, got {raw[:40]!r}") from None
    if v != v or v in (float("inf"), float("-inf")):
        raise SensorError(f"{path}: expected a finite number, got {raw[:40]!r}")
    return v


def under(root: str | Path, absolute: str) -> Path:
    """``absolute`` (a path such as ``/sys/class/powercap``) re-rooted under ``root``."""
    return Path(root) / absolute.lstrip("/")
