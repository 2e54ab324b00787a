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
    head_interval_s = 60.0       # a signed tree head of the ledger this often, served at /head for witnesses
    threshold_flops = 1e25       # optional: verdict against a reporting threshold
"""

from __future__ import annotations

import dataclasses
import math
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from flopwatch.errors import ConfigError, InputError


@dataclass
class MonitorConfig:
    """Every setting of ``flopwatch monitor``; defaults follow the Jetson study's daemon."""

    sensors: list[str] = field(default_factory=list)
    profile: Path | None = None
    ledger: Path = field(default_factory=lambda: default_ledger_path())
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
    head_interval_s: float = 60.0  # sign a tree head of the ledger this often (sensor time); served at /head
    duration_s: float | None = None
    speed: float = 1.0  # replay speed
    idle_power_w: float | None = None  # None: the profile's idle power (else 0 with a warning)
    busy_power_margin_w: float | None = (
        None  # net power that counts as busy without utilisation; None: 10 % of idle
    )
    sensor_fault_s: float = 30.0  # a workload whose sensor fails this long is closed as sensor_fault
    threshold_flops: float | None = None
    dtype: str | None = None  # the operator's precision claim: recorded in each row, never used to estimate
    verdict_window_s: float = 86400.0  # window of the running window verdict (exporter)
    new_chain: bool = False  # allow a new chain beside an existing signing key (see docs/monitor.md)
    keep_trace: Path | None = None  # opt-in raw trace (privacy: off by default)
    seed: int = 0
    # sample instants: random in each period (telemetry/sampler.py; 0 = fixed grid, phase-lockable)
    sample_jitter: float = 1.0
    jitter_seed: int | None = None  # None: fresh entropy on real clocks, derived from ``seed`` when simulated
    schedule: Path | None = None  # simulator schedule (TOML/JSON) for sim: sensors

    _PATHS = ("profile", "ledger", "key_path", "public_key_path", "keep_trace", "schedule")
    #: Positive finite settings and their upper limits (a rate of 1e7 Hz would run away; a week-long poll is a typo).
    _LIMITS = {
        "poll_s": 3600.0,
        "sample_hz": 1000.0,
        "checkpoint_s": 86400.0,
        "head_interval_s": 86400.0,
        "speed": 1e6,
        "sensor_fault_s": 86400.0,
        "duration_s": 1e9,
        "verdict_window_s": 3.2e7,  # about a year
    }
    _OPTIONAL = ("duration_s", "idle_power_w", "busy_power_margin_w", "threshold_flops")

    def validate(self, source: str | None = None) -> MonitorConfig:
        """Check every setting before any work starts (one line naming the setting; exit status 2)."""

        def bad(fld: str, msg: str) -> ConfigError:
            return ConfigError(msg, file=source, field=fld)

        def number(name: str, *, lo: float, hi: float = math.inf, lo_open: bool = True) -> None:
            v = getattr(self, name)
            if v is None and name in self._OPTIONAL:
                return
            ok = isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)
            ok = ok and (v > lo if lo_open else v >= lo) and v <= hi
            if not ok:
                rng = f"{'>' if lo_open else '>='} {lo:g}" + (f" and <= {hi:g}" if math.isfinite(hi) else "")
                raise bad(name, f"must be a finite number {rng}, got {v!r}")

        if not self.sensors:
            raise bad("sensors", "at least one sensor spec is required (e.g. --sensor nvml)")
        for name, hi in self._LIMITS.items():
            number(name, lo=0.0, hi=hi)
        # a poll shorter than one sample at the 1 kHz rate cap sees no new reading (and 1e-300 overflows the
        # poll grid's arithmetic): the same floor as `detect --poll`
        number("poll_s", lo=1e-3, hi=self._LIMITS["poll_s"], lo_open=False)
        number("util_threshold", lo=0.0, hi=0.999999, lo_open=False)
        number("idle_power_w", lo=0.0, hi=1e5, lo_open=False)
        number("busy_power_margin_w", lo=0.0, hi=1e5, lo_open=False)
        number("threshold_flops", lo=0.0, hi=1e40)
        number("sample_jitter", lo=0.0, hi=1.0, lo_open=False)
        js = self.jitter_seed
        if js is not None and (isinstance(js, bool) or not isinstance(js, int) or not 0 <= js < 2**63):
            raise bad("jitter_seed", f"must be an integer in 0..2**63-1, got {js!r}")
        for name in ("start_polls", "end_polls"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or not 1 <= v <= 1000:
                raise bad(name, f"must be an integer in 1..1000, got {v!r}")
        p = self.metrics_port
        if isinstance(p, bool) or not isinstance(p, int) or not 0 <= p <= 65535:
            raise bad("metrics_port", f"must be an integer in 0..65535, got {p!r}")
        if isinstance(self.seed, bool) or not isinstance(self.seed, int) or self.seed < 0:
            raise bad("seed", f"must be an integer >= 0, got {self.seed!r}")
        if self.dtype is not None:
            from flopwatch.devices import normalize_dtype

            try:
                self.dtype = normalize_dtype(self.dtype)
            except InputError as e:
                raise bad("dtype", e.detail) from None
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
            elif key == "new_chain":
                if not isinstance(v, bool):
                    raise ConfigError(f"must be true or false, got {v!r}", file=source, field=k)
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
        """Settings as JSON-safe values (paths as strings)."""
        out: dict[str, Any] = {}
        for f in dataclasses.fields(self):
            v = getattr(self, f.name)
            out[f.name] = str(v) if isinstance(v, Path) else v
        return out


def default_ledger_path() -> Path:
    """Where the ledger (and beside it the signing key) lives when no path is given.

    Never the current directory, which is often a git working tree where a key could be committed: systemd's
    ``$STATE_DIRECTORY`` (the unit's ``StateDirectory=flopwatch``), else ``$XDG_STATE_HOME/flopwatch``, else
    ``~/.local/state/flopwatch`` (XDG Base Directory Specification, "state" data).
    """
    state = os.environ.get("STATE_DIRECTORY")
    if (
        state and Path(state.split(":")[0]).is_absolute()
    ):  # systemd sets an absolute path; a relative one would
        return Path(state.split(":")[0]) / "ledger.db"  # land in the current directory

    xdg = os.environ.get("XDG_STATE_HOME")
    base = Path(xdg) if xdg and Path(xdg).is_absolute() else Path.home() / ".local" / "state"
    return base / "flopwatch" / "ledger.db"
