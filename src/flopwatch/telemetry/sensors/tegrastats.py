"""Parse ``tegrastats`` output (JetPack 5, 6 and 7), the seed study's utilisation source.

Formats handled (one line per interval; fields are optional and order-independent):

* JetPack 5 (L4T r35): ``RAM 2448/7620MB (lfb 1095x4MB) SWAP 0/3810MB (cached 0MB) CPU [1%@729,off]
  EMC_FREQ 0%@2133 GR3D_FREQ 0%@[305] … CPU@45.5C … VDD_IN 4073mW/4073mW VDD_CPU_GPU_CV 520mW/520mW …``
* JetPack 6 (L4T r36): a ``MM-DD-YYYY HH:MM:SS`` prefix, ``GR3D_FREQ 0%`` without the clock when not root,
  lower-case temperature names (``cpu@46.2C``).
* JetPack 7 (L4T r38, Thor): ``GR3D_FREQ 0%@[1575,1575]`` per GPC, ``EMC_FREQ 0%@3199``, new rail names
  (``VDD_GPU``, ``VDD_CPU_SOC_MSS``, ``VIN``).

Rails are ``NAME <current>mW/<average>mW``; we use the current value. GR3D_FREQ is the GPU busy percentage
(the study's ``avg_gpu_pct``); with one value per GPC we average them.
"""

from __future__ import annotations

import datetime as dt
import os
import re
import subprocess
import threading
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from flopwatch.errors import InputError, SensorError, SensorUnavailable
from flopwatch.telemetry.schema import Reading
from flopwatch.telemetry.sensors.base import Clock, MonotonicClock, SensorInfo

if TYPE_CHECKING:
    from flopwatch.telemetry.trace import Trace

_TS = re.compile(r"^(\d\d-\d\d-\d{4} \d\d:\d\d:\d\d)\s+")
_RAM = re.compile(r"\bRAM (\d+)/(\d+)MB")
_EMC = re.compile(r"\bEMC_FREQ (\d+)%(?:@(\d+))?")
_GR3D = re.compile(r"\bGR3D_FREQ (\d+)%(?:@\[?([\d,]+)\]?)?")
_GPC = re.compile(r"\bGR3D_FREQ \[?((?:\d+%,?)+)\]?")
_RAIL = re.compile(r"\b([A-Z][A-Z0-9_]+) (\d+)mW/(\d+)mW")
_TEMP = re.compile(r"\b([A-Za-z][\w]*)@(-?\d+(?:\.\d+)?)C\b")


@dataclass(frozen=True)
class TegrastatsSample:
    """One parsed tegrastats line, in SI units (W, MHz, 0–1)."""

    timestamp: dt.datetime | None
    gpu_util: float | None
    gpu_freq_mhz: float | None
    emc_util: float | None
    emc_freq_mhz: float | None
    ram_used_mb: float | None
    rails_w: dict[str, float] = field(default_factory=dict)
    temps_c: dict[str, float] = field(default_factory=dict)


def parse_line(line: str) -> TegrastatsSample:
    """Parse one tegrastats line; raises ValueError when it has neither GPU load nor any rail."""
    s = line.strip()
    ts = None
    m = _TS.match(s)
    if m:
        ts = dt.datetime.strptime(m.group(1), "%m-%d-%Y %H:%M:%S")
    gpu = gfreq = None
    m = _GR3D.search(s)
    if m:
        gpu = int(m.group(1)) / 100.0
        if m.group(2):
            freqs = [float(x) for x in m.group(2).split(",") if x]
            gfreq = sum(freqs) / len(freqs) if freqs else None
    else:
        m2 = _GPC.search(s)
        if m2:
            vals = [int(x.rstrip("%")) for x in m2.group(1).split(",") if x]
            gpu = sum(vals) / len(vals) / 100.0
    emc = efreq = None
    m = _EMC.search(s)
    if m:
        emc = int(m.group(1)) / 100.0
        efreq = float(m.group(2)) if m.group(2) else None
    rails = {name: int(cur) / 1e3 for name, cur, _avg in _RAIL.findall(s)}
    temps = {k: float(v) for k, v in _TEMP.findall(s) if float(v) > -200}  # -256C marks an absent sensor
    ram = None
    m = _RAM.search(s)
    if m:
        ram = float(m.group(1))
    if gpu is None and not rails:
        raise ValueError(f"not a tegrastats line: {s[:60]!r}")
    if gpu is not None and not 0 <= gpu <= 1:
        raise ValueError(f"GR3D_FREQ {gpu * 100:.0f}% outside 0–100")
    return TegrastatsSample(ts, gpu, gfreq, emc, efreq, ram, rails, temps)


def parse_lines(
    lines: Iterable[str], *, source: str = "<tegrastats>"
) -> Iterator[tuple[int, TegrastatsSample]]:
    """Parse a log; blank lines are skipped, malformed ones raise InputError naming the line number."""
    for i, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            yield i, parse_line(line)
        except ValueError as e:
            raise InputError(str(e), file=source, record=i, field="line") from None


def _to_reading(s: TegrastatsSample, t: float, wall: float, rail: str | None) -> Reading:
    r = (
        rail
        if rail in s.rails_w
        else next(
            (x for x in ("VDD_CPU_GPU_CV", "VDD_GPU_SOC", "VDD_GPU", "VDD_IN", "VIN") if x in s.rails_w), None
        )
    )
    extra = {f"rail_{k}_w": v for k, v in s.rails_w.items()}
    if s.emc_freq_mhz is not None:
        extra["emc_rate_mhz"] = s.emc_freq_mhz
    if s.ram_used_mb is not None:
        extra["ram_used_mb"] = s.ram_used_mb
    temp = s.temps_c.get("GPU", s.temps_c.get("gpu"))
    return Reading(
        t_s=t,
        wall_time=wall,
        device=f"jetson:{r or 'tegrastats'}",
        power_w=s.rails_w.get(r) if r else None,
        util=s.gpu_util,
        mem_util=s.emc_util,
        sm_clock_mhz=s.gpu_freq_mhz,
        temp_c=temp,
        extra=extra,
    )


#: A log is read whole; a week at one line per second is ~200 MiB.
MAX_LOG_BYTES = 512 * 2**20


def read_log(path: str | os.PathLike[str], *, interval_s: float = 0.5, rail: str | None = None) -> Trace:
    """A tegrastats log file (``tegrastats --interval MS --logfile FILE``) as a :class:`Trace`.

    Lines with a timestamp (JetPack 6+) are placed at their wall time (1 s resolution, so consecutive lines
    within a second are spread by ``interval_s``); older lines at ``interval_s`` spacing.
    """
    from flopwatch.io import check_input_file
    from flopwatch.telemetry.schema import base_metadata
    from flopwatch.telemetry.source import VALUE_COLUMNS, FrameSource
    from flopwatch.telemetry.trace import Trace

    p = Path(path)
    st = check_input_file(p, kind="tegrastats log")  # a FIFO would block, /dev/zero never end
    if st.st_size > MAX_LOG_BYTES:
        raise InputError(f"log larger than {MAX_LOG_BYTES >> 20} MiB (read whole)", file=str(p))
    try:
        text = p.read_text(encoding="utf-8", errors="replace")
    except OSError as e:
        raise InputError(f"cannot read: {e.strerror or e}", file=str(p)) from None
    readings = []
    k = 0
    first_ts: dt.datetime | None = None
    for _, s in parse_lines(text.splitlines(), source=str(p)):
        t = k * interval_s
        wall = t
        if s.timestamp is not None:
            first_ts = first_ts or s.timestamp
            wall = s.timestamp.replace(tzinfo=dt.timezone.utc).timestamp()
        readings.append(_to_reading(s, t, wall, rail))
        k += 1
    if not readings:
        raise InputError("no tegrastats lines", file=str(p))
    md = base_metadata(kind="tegrastats", rate_hz=1.0 / interval_s, source=str(p))
    tr = Trace.from_readings(readings, md)
    for _ in FrameSource(tr.df, tr.metadata, validate=True).chunks(VALUE_COLUMNS):
        pass  # implausible values: refused, with the row
    return tr


class TegrastatsSensor:
    """Live tegrastats: a reader thread keeps the latest line of ``lines`` (default: spawn ``tegrastats``)."""

    def __init__(
        self,
        lines: Iterable[str] | None = None,
        *,
        interval_ms: int = 500,
        rail: str | None = None,
        clock: Clock | None = None,
    ) -> None:
        self._clock = clock or MonotonicClock()
        self._rail = rail
        self._proc: subprocess.Popen[str] | None = None
        if lines is None:
            try:
                self._proc = subprocess.Popen(
                    ["tegrastats", "--interval", str(int(interval_ms))],
                    stdout=subprocess.PIPE,
                    stderr=subprocess.DEVNULL,
                    text=True,
                )
            except FileNotFoundError:
                raise SensorUnavailable("tegrastats not found on PATH (not a Jetson?)") from None
            assert self._proc.stdout is not None
            lines = self._proc.stdout
        self._latest: TegrastatsSample | None = None
        self._error: str | None = None
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._pump, args=(lines,), daemon=True, name="tegrastats")
        self._thread.start()

    def _pump(self, lines: Iterable[str]) -> None:
        for line in lines:
            if not line.strip():
                continue
            try:
                self._latest = parse_line(line)
                self._error = None
            except ValueError as e:
                self._error = str(e)
            self._ready.set()
        self._error = f"tegrastats stopped ({self._error})" if self._error else "tegrastats stopped"

    @property
    def clock(self) -> Clock:
        return self._clock

    def info(self) -> SensorInfo:
        self._ready.wait(2.0)
        s = self._latest
        caps = ("power_w", "util", "mem_util", "sm_clock_mhz") if s else ()
        return SensorInfo(
            kind="tegrastats",
            device_id="jetson:tegrastats",
            name="Jetson (tegrastats)",
            fingerprint={"rails": ",".join(s.rails_w) if s else ""},
            capabilities=caps,
        )

    def read(self) -> Reading:
        s = self._latest
        if s is None or self._error is not None:
            raise SensorError(self._error or "no tegrastats line yet")
        return _to_reading(s, self._clock.now(), self._clock.wall_time(), self._rail)

    def close(self) -> None:
        if self._proc is not None:
            self._proc.terminate()
            self._proc.wait(timeout=5)
