"""Daemon configuration: a TOML file (``[monitor]`` table or top level), overridden by command-line flags.

Example (``/etc/flopwatch/monitor.toml``)::

    [monitor]
    sensors = ["nvml"]
    profile = "/var/lib/flopwatch/profile.json"
    ledger = "/var/lib/flopwatch/ledger.db"
    metrics_port = 9464          # 0 disables the exporter
    metrics_addr = "127.0.0.1"   # loopback unless the node's Prometheus scrapes from elsewhere
    poll_s = 1.5                 # the study's detection poll
    checkpoint_s = 30.0          # a crash loses at most this much of the running totals
    threshold_flops = 1e25       # optional: verdict against a reporting threshold
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from flopwatch.errors import ConfigError


@dataclass
class MonitorConfig:
    """Every setting of ``flopwatch monitor``; defaults follow the Jetson study's daemon."""

    sensors: list[str] = field(default_factory=list)
    profile: Path | None = None
    ledger: Path = Path("flopwatch-ledger.db")
    key_path: Path | None = None  # default LEDGER.key, mode 0600
    public_key_path: Path | None = None  # default LEDGER.pub
    metrics_port: int = 0  # 0: no exporter
    metrics_addr: str = "127.0.0.1"
    poll_s: float = 1.5  # study: utilisation polled every 1.5 s
    sample_hz: float = 2.0  # study: power sampled at 2 Hz
    util_threshold: float = 0.05  # study: > 5 % utilisation is busy
    start_polls: int = 2  # study: 2 consecutive busy polls start a workload
    end_polls: int = 3  # study: 3 consecutive idle polls end it
    checkpoint_s: float = 30.0
    duration_s: float | None = None
    speed: float = 1.0  # replay speed
    idle_power_w: float | None = None  # None: the profile's idle power (else 0 with a warning)
    busy_power_margin_w: float | None = (
        None  # net power that counts as busy without utilisation; None: 10 % of idle
    )
    sensor_fault_s: float = 30.0  # a workload whose sensor fails this long is closed as sensor_fault
    threshold_flops: float | None = None
    dtype: str = "fp32"
    keep_trace: Path | None = None  # opt-in raw trace (privacy: off by default)
    seed: int = 0
    schedule: Path | None = None  # simulator schedule (TOML/JSON) for sim: sensors

    _PATHS = ("profile", "ledger", "key_path", "public_key_path", "keep_trace", "schedule")

    def validate(self, source: str | None = None) -> MonitorConfig:
        def bad(fld: str, msg: str) -> ConfigError:
            return ConfigError(msg, file=source, field=fld)

        if not self.sensors:
            raise bad("sensors", "at least one sensor spec is required (e.g. --sensor nvml)")
        for name in ("poll_s", "sample_hz", "checkpoint_s", "speed", "sensor_fault_s"):
            v = getattr(self, name)
            if not (isinstance(v, (int, float)) and v > 0):
                raise bad(name, f"must be > 0, got {v!r}")
        if self.duration_s is not None and not self.duration_s > 0:
            raise bad("duration_s", f"must be > 0, got {self.duration_s!r}")
        if not 0 <= self.util_threshold < 1:
            raise bad("util_threshold", f"must be in [0, 1), got {self.util_threshold!r}")
        if self.start_polls < 1 or self.end_polls < 1:
            raise bad("start_polls", "start_polls and end_polls must be >= 1")
        if not 0 <= int(self.metrics_port) <= 65535:
            raise bad("metrics_port", f"must be 0..65535, got {self.metrics_port!r}")
        if self.idle_power_w is not None and self.idle_power_w < 0:
            raise bad("idle_power_w", "must be >= 0")
        return self

    @classmethod
    def from_toml(cls, path: str | Path) -> MonitorConfig:
        from flopwatch.io import read_toml

        p = Path(path)
        # regular file, size-capped, no RecursionError/ValueError escapes (flopwatch.io)
        doc = read_toml(p, kind="monitor config (TOML)", error=ConfigError)
        table = doc.get("monitor", doc)
        if not isinstance(table, dict):
            raise ConfigError("must be a table", file=str(p), field="monitor")
        return cls().update(table, source=str(p))

    def update(self, values: dict[str, Any], *, source: str | None = None) -> MonitorConfig:
        """Apply ``values`` (None values are ignored, so unset flags do not override the file)."""
        names = {f.name: f for f in dataclasses.fields(self)}
        for k, v in values.items():
            if v is None:
                continue
            key = k.replace("-", "_")
            if key not in names or key.startswith("_"):
                raise ConfigError(f"unknown setting {k!r}", file=source, field=k)
            if key == "sensors":
                v = [v] if isinstance(v, str) else v
                if not isinstance(v, list) or not all(isinstance(s, str) for s in v):
                    raise ConfigError("sensors must be strings", file=source, field=k)
            elif key in self._PATHS:
                if not isinstance(v, (str, Path)):
                    raise ConfigError(f"must be a path string, got {type(v).__name__}", file=source, field=k)
                v = Path(v).expanduser()
            elif key in ("metrics_port", "start_polls", "end_polls", "seed"):
                if isinstance(v, bool) or not isinstance(v, int):
                    raise ConfigError(f"must be an integer, got {v!r}", file=source, field=k)
            elif key in ("metrics_addr", "dtype"):
                if not isinstance(v, str):
                    raise ConfigError(f"must be a string, got {v!r}", file=source, field=k)
            else:
                if isinstance(v, bool) or not isinstance(v, (int, float)):
                    raise ConfigError(f"must be a number, got {v!r}", file=source, field=k)
                if isinstance(v, int) and abs(v) > 2**1023:  # a TOML integer beyond float range
                    raise ConfigError("is out of range (too large for a 64-bit float)", file=source, field=k)
                v = float(v)
            setattr(self, key, v)
        return self

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for f in dataclasses.fields(self):
            v = getattr(self, f.name)
            out[f.name] = str(v) if isinstance(v, Path) else v
        return out
