"""Reference-counted init/shutdown of a vendor library (NVML, amdsmi) shared by several sensors.

The count is keyed by the library object itself in a ``WeakKeyDictionary``: keying by ``id()`` let a new
library object (a test's fake, a reloaded module) inherit a dead one's count when Python reused its
address, so its init was silently skipped.
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Callable
from typing import Any

from flopwatch.errors import SensorUnavailable

Errors = type[BaseException] | tuple[type[BaseException], ...]

_lock = threading.Lock()
_refs: weakref.WeakKeyDictionary[Any, int] = weakref.WeakKeyDictionary()


def acquire(lib: Any, init: Callable[[], object], *, errors: Errors, unavailable: str) -> None:
    """Call ``init()`` if ``lib`` has no live reference yet, then take one. ``init`` raising one of ``errors``
    becomes :class:`SensorUnavailable` (``unavailable`` with the error in its ``{}``) and takes no reference."""
    with _lock:
        n = _refs.get(lib, 0)
        if n == 0:
            try:
                init()
            except errors as e:
                raise SensorUnavailable(unavailable.format(e)) from None
        _refs[lib] = n + 1


def release(lib: Any, shutdown: Callable[[], object], *, errors: Errors) -> None:
    """Drop one reference to ``lib``; the last one calls ``shutdown()`` (its ``errors`` ignored: nothing is left
    to read, and a failing shutdown must not hide the error that closed the sensor)."""
    with _lock:
        n = _refs.get(lib, 0) - 1
        _refs[lib] = max(0, n)
        if n == 0:
            try:
                shutdown()
            except errors:
                pass
