"""Ledger entries for the window-verdict tests: the evasive ledgers (none may yield "below") and the row and
checkpoint builders. Shared by tests/test_hostile_cli_new.py (`flopwatch verdict --window`) and
tests/test_monitor_window_parity.py (the live window gauge), so neither test module imports the other."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

T = 1e15


def light_observables(s: float | None, e: float | None, tensor_s: float = 0.04) -> dict[str, Any]:
    """Observables of a light run (10 J over its span, NVML at 10 Hz, pipe counters over all of it: the tensor pipe
    busy ``tensor_s``) whose sound bound, recomputed by `flopwatch verdict` from them (round 9), lies between the
    rows' estimates and their signed bounds (1.04e14 over 10 s, 2.46e15 over 1000 s on the H100)."""
    dur = e - s if isinstance(s, (int, float)) and isinstance(e, (int, float)) and e - s > 0 else 10.0
    return {
        "net_energy_j": 10.0,
        "duration_s": dur,
        "idle_power_w": 70.0,
        "sensor_kind": "nvml",
        "sample_rate_hz": 10.0,
        "pipe_active_s": {"tensor": tensor_s, "fp64": 0.0, "fp32": 0.01, "fp16": 0.0},
        "pipe_observed_s": dur,
    }


def _row(wid: str, s: float | None, e: float | None, est: Any = 1e14, **kw: Any) -> SimpleNamespace:
    p = (
        light_observables(s, e)
        | {
            "workload_id": wid,
            "device": "sim:h100",
            "start_wall": s,
            "end_wall": e,
            "estimate_flops": est,
            "lower_flops": 0.9e14,
            "upper_flops": 1.1e14,
            "regime": "calibrated",
            "warnings": [],
        }
        | kw
    )
    return SimpleNamespace(kind="workload", payload=p)


def _cp(wall: float, outside: Any, dev: str = "sim:h100") -> SimpleNamespace:
    return SimpleNamespace(
        kind="checkpoint", payload={"wall": wall, "devices": {dev: {"outside_net_energy_j": outside}}}
    )


_BIG = _row("big", 1000.0, 2000.0, est=2e15, lower_flops=1.8e15, upper_flops=2.5e15)
_LEGACY = SimpleNamespace(
    kind="workload",
    payload={"workload_id": "a", "device": "sim:h100", "start_wall": 0.0, "end_wall": 10.0,
             "estimate_flops": 1e14, "lower_flops": 0.9e14, "upper_flops": 1.1e14, **light_observables(0.0, 10.0)},
)  # fmt: skip

EVASIONS: list[tuple[str, list[SimpleNamespace], float | None]] = [
    ("NaN estimate with zero bounds", [_row("a", 0, 10), _row("b", 20, 30, est=float("nan"), upper_flops=0.0), _cp(40, 0)], None),
    ("negative estimate", [_row("a", 0, 10), _row("b", 20, 30, est=-1e14, upper_flops=0.0), _cp(40, 0)], None),
    ("zero estimate and bounds", [_row("a", 0, 10), _row("b", 20, 30, est=0.0, lower_flops=0.0, upper_flops=0.0), _cp(40, 0)], None),
    ("estimate missing", [_row("a", 0, 10, est=None), _cp(20, 0)], None),
    ("row lacking regime/warnings (legacy)", [_LEGACY, _cp(20, 0)], None),
    ("clock jumped forward: future checkpoint", [_BIG, _cp(2100, 0), _cp(1e10, 0)], 86400.0),
    ("clock set back: a row in the future", [_BIG, _row("f", 1e10 - 10, 1e10), _cp(2100, 0)], 86400.0),
    ("clock set back: running total read at the wrong checkpoint", [_cp(100, 0), _cp(1e10, 0), _cp(200, 1e9)], None),
    ("negative outside energy", [_row("a", 0, 10), _cp(20, -1e9)], None),
    ("NaN outside energy", [_row("a", 0, 10), _cp(20, float("nan"))], None),
    ("job without end time", [_row("a", 0, None, est=2e15, upper_flops=2.2e15), _row("b", 1e5, 1e5 + 10), _cp(1e5 + 20, 0)], 3600.0),
    ("job with NaN end time", [_row("a", 0, float("nan"), est=2e15, upper_flops=2.2e15), _row("b", 1e5, 1e5 + 10), _cp(1e5 + 20, 0)], 3600.0),
    ("no checkpoint at all", [_row("a", 0, 10)], None),
    ("upper bound as a string", [_row("a", 0, 10, upper_flops="1"), _cp(20, 0)], None),
    ("warnings as a string", [_row("a", 0, 10, warnings="out of regime"), _cp(20, 0)], None),
]  # fmt: skip
