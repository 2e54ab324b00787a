"""flopwatch: estimate AI training compute (FLOPs) from accelerator side channels.

The core import is light (numpy only); torch, NVML and amdsmi are imported lazily where used.
"""

from __future__ import annotations

from flopwatch.errors import (
    FlopwatchError,
    InputError,
    NotFittedError,
    SensorError,
    SensorPermissionError,
    SensorUnavailable,
)

__version__ = "0.1.0"

__all__ = [
    "__version__",
    "FlopwatchError",
    "InputError",
    "NotFittedError",
    "SensorError",
    "SensorPermissionError",
    "SensorUnavailable",
]
