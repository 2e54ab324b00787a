"""Exception hierarchy.

Everything flopwatch raises on purpose derives from :class:`FlopwatchError`. The CLI turns an
:class:`InputError` (bad file, record, field or argument) into one line on stderr and exit status 2.
"""

from __future__ import annotations


class FlopwatchError(Exception):
    """Base class of all flopwatch errors."""

    exit_code: int = 1


class InputError(FlopwatchError, ValueError):
    """Bad user input: a file, a record in it, a field, or a command-line argument.

    The message should name all of file, record and field that apply, e.g.
    ``records.json: record 'd256_b16_s128_L3': field 'net_energy_j' is NaN``.
    """

    exit_code = 2

    def __init__(
        self,
        message: str,
        *,
        file: str | None = None,
        record: str | int | None = None,
        field: str | None = None,
    ) -> None:
        self.file = None if file is None else str(file)
        self.record = record
        self.field = field
        self.detail = message
        parts: list[str] = []
        if file is not None:
            parts.append(str(file))
        if record is not None:
            parts.append(f"record {record!r}" if isinstance(record, str) else f"record {record}")
        if field is not None:  # a command-line option is named as one: "option '--threshold'"
            parts.append(f"{'option' if str(field).startswith('-') else 'field'} {field!r}")
        prefix = ": ".join(parts)
        super().__init__(f"{prefix}: {message}" if prefix else message)


class ConfigError(InputError):
    """An invalid configuration (workload config, TOML file, CLI option combination)."""


class ProfileError(InputError):
    """A calibration profile that cannot be read or does not fit the data it is applied to."""


class NotFittedError(FlopwatchError, AttributeError):
    """An estimator or model was used before ``fit``."""


class SensorError(FlopwatchError):
    """A sensor read failed (vendor error translated at the boundary)."""


class SensorUnavailable(SensorError):
    """A backend is not present on this machine (library missing, no device, no sysfs node).

    Exit status 2: the user named a sensor this machine does not have (``record --sensor nvml`` without a GPU),
    a usage error like a bad option, not a failure of a run that had started.
    """

    exit_code = 2


class SensorPermissionError(SensorError, PermissionError):
    """A sensor exists but cannot be read with the current privileges; the message says how to fix it."""

    exit_code = 2  # fixable by the user before the run starts, like a bad option


class LedgerError(FlopwatchError):
    """A ledger cannot be opened or written."""
