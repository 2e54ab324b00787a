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

_lock = threading.Lock()
_refs: weakref.WeakKeyDictionary[Any, int] = weakref.WeakKeyDictionary()


def acquire(lib: Any, init: Callable[[], None]) -> None:
    """Call ``init()`` if ``lib`` has no live reference yet, then take one. ``init`` may raise; then no
    reference is taken."""
    with _lock:
        n = _refs.get(lib, 0)
        if n == 0:
            init()
        _refs[lib] = n + 1


def release(lib: Any, shutdown: Callable[[], None]) -> None:
    """Drop one reference to ``lib``; the last one calls ``shutdown()``."""
    with _lock:
        n = _refs.get(lib, 0) - 1
        _refs[lib] = max(0, n)
        if n == 0:
            shutdown()
