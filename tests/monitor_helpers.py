"""Helpers shared by the monitor tests: synthetic traces, a linear test profile, a failing sensor."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import pytest

from flopwatch.errors import SensorError
from flopwatch.telemetry.schema import Reading
from flopwatch.telemetry.sensors.base import Clock, SensorInfo

P_IDLE_W = 50.0
P_BUSY_W = 250.0
RATE_HZ = 2.0


@dataclass(frozen=True)
class _Est:
    flops: float
    lower_flops: float
    upper_flops: float
    confidence: float = 0.9
    model: str = "linear-test"
    warnings: tuple[str, ...] = ()


class LinearProfile:
    """Test double of a calibrated profile: eq. 2 form, F = (E_net − p·t) / a, interval ±10 %.

    It has what :func:`flopwatch.estimate.verdict.assess` reads: no recorded regime ranges (so nothing places a
    run out of regime), no measured efficiency, and an H100 as its device: a "below" rests on a datasheet (issue
    21), so a profile without a known device could never give one."""

    model_name = "linear-test"
    dtype = "fp32"
    device_key = "h100"
    regime_ranges: dict = {}
    efficiency: dict = {}

    def __init__(
        self, j_per_flop: float = 1e-10, overhead_w: float = 0.0, idle_power_w: float = P_IDLE_W
    ) -> None:
        self.a, self.p, self.idle_power_w = j_per_flop, overhead_w, idle_power_w
        self.verifier = {"idle_power_w": idle_power_w}

    def sha256(self) -> str:
        return "0" * 64

    def estimate(
        self, net_energy_j: float, duration_s: float, *, tb_moved=None, mean_util=None, dtype="fp32",
        confidence=None, label=None,
    ) -> _Est:  # fmt: skip
        f = max(0.0, (net_energy_j - self.p * duration_s) / self.a)
        return _Est(f, 0.9 * f, 1.1 * f)


def busy_fn(intervals: Sequence[tuple[float, float]]) -> Callable[[float], bool]:
    return lambda t: any(a <= t < b for a, b in intervals)


def write_trace(
    path: Path,
    *,
    t_total: float,
    busy: Callable[[float], bool],
    counter: bool = False,
    device: str = "synthetic:0",
    rate_hz: float = RATE_HZ,
) -> Path:
    """A 2 Hz trace: idle at 50 W / util 0, busy at 250 W / util 0.95 (with a cumulative counter if asked)."""
    from flopwatch.telemetry.schema import base_metadata
    from flopwatch.telemetry.trace import Trace

    n = int(t_total * rate_hz) + 1
    readings = []
    e = 0.0
    prev_p = None
    for i in range(n):
        t = i / rate_hz
        b = busy(t)
        p = P_BUSY_W if b else P_IDLE_W
        if prev_p is not None:
            e += 0.5 * (p + prev_p) / rate_hz
        prev_p = p
        readings.append(
            Reading(
                t_s=t,
                wall_time=1.7e9 + t,
                device=device,
                power_w=p,
                energy_j=e if counter else None,
                util=0.95 if b else 0.0,
                dram_bytes_per_s=1e9 if b else 1e6,
            )
        )
    Trace.from_readings(readings, metadata=base_metadata(kind="synthetic", rate_hz=rate_hz)).write(path)
    return path


class FlakySensor:
    """Wraps a sensor; reads fail (SensorError) while ``failing(t)`` is true on the sensor's clock."""

    def __init__(self, inner, failing: Callable[[float], bool]) -> None:  # noqa: ANN001
        self.inner = inner
        self.failing = failing
        self.failures = 0

    @property
    def clock(self) -> Clock:
        return self.inner.clock

    def info(self) -> SensorInfo:
        return self.inner.info()

    def read(self) -> Reading:
        r = self.inner.read()  # lets the replay end (TraceEnded) normally
        if self.failing(r.t_s):
            self.failures += 1
            raise SensorError(f"simulated read failure at t={r.t_s:.1f}")
        return r

    def close(self) -> None:
        self.inner.close()


class GlitchSensor(FlakySensor):
    """Wraps a sensor; ``edit(reading)`` may return a changed reading (glitches, unit errors, NaN …)."""

    def __init__(self, inner, edit: Callable[[Reading], Reading]) -> None:  # noqa: ANN001
        super().__init__(inner, failing=lambda t: False)
        self.edit = edit

    def read(self) -> Reading:
        return self.edit(self.inner.read())


@pytest.fixture(autouse=True)
def private_tmp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Autouse in every monitor/ledger test module (imported there): anything that asks for a temporary
    directory — the daemon, a subprocess, a library — gets one under ``tmp_path``, so no ledger or key is
    ever left in the system temp directory."""
    import tempfile

    monkeypatch.setenv("TMPDIR", str(tmp_path))
    monkeypatch.setattr(tempfile, "tempdir", None)


class AsMeasured:
    """Test double: a replayed or simulated sensor presented as a real one of ``kind`` on ``spec_key`` (its
    readings untouched). The monitor flags a replay or simulation and never says "below" for it (issue 21 item
    6), so the tests of what a *real* sensor's rows may say use this. ``kind="dcgm"``: a cumulative counter with
    no blind share (flopwatch.sensor_timing), so the numbers are those of the trace; ``"nvml"``: NVML's 75 %."""

    def __init__(self, inner: object, *, kind: str = "dcgm", spec_key: str = "h100") -> None:
        from dataclasses import replace

        from flopwatch.devices import DEVICES

        self.inner = inner
        self.clock = inner.clock  # type: ignore[attr-defined]
        self._info = replace(
            inner.info(),  # type: ignore[attr-defined]
            kind=kind,
            simulated=False,
            spec_key=spec_key,
            name=DEVICES[spec_key].name,
        )

    def info(self) -> SensorInfo:
        return self._info

    def read(self) -> Reading:
        return self.inner.read()  # type: ignore[attr-defined]

    def close(self) -> None:
        self.inner.close()  # type: ignore[attr-defined]
