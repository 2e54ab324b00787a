"""Sampling of one or more sensors at a fixed mean rate, at random instants, on a background thread.

Deadlines are absolute on the sensors' clock, ``t_k = t0 + (k + j·u_k) / rate_hz`` with ``u_k`` uniform on
[0, 1) from a seeded :class:`numpy.random.Generator` and ``j`` the jitter (default 1: each sample falls anywhere
in its own period — stratified random sampling). Lateness in one tick never shifts later ticks (no accumulated
drift, unlike ``sleep(period)`` loops) and the mean rate is exactly ``rate_hz``. Why random: on a fixed grid an
evader who learns the phase can run work only between samples and leave no trace (issue 21 item 4, the 2 Hz
Orin phase-lock); with full jitter every instant of every period is equally likely to be sampled, so no
schedule hides from it in expectation. The seed is recorded (:attr:`Sampler.jitter_seed`, ``stats.to_dict()``)
so every sample instant can be regenerated; ``jitter=0`` restores the fixed grid (tests, replays of old runs). Time comes from
``sensors[0].clock``: real time for live sensors, a scaled clock for replays, a virtual clock for the
simulator (then the loop runs as fast as the CPU allows, and :meth:`Sampler.run` is the synchronous
entry point tests use).

Every tick yields, per sensor, either a :class:`Reading` or a :class:`Gap` (read failed, or the tick was
skipped because an earlier read or sink was too slow). Both go to the sinks and to a bounded ring buffer,
and gaps are counted per device with their errors — holes are never silent. A replay sensor that raises
:class:`~flopwatch.telemetry.sensors.replay.TraceEnded` stops the sampler cleanly.
"""

from __future__ import annotations

import threading
import time
from collections import Counter, deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np

from flopwatch.errors import SensorError
from flopwatch.telemetry.schema import Gap, Reading
from flopwatch.telemetry.sensors.base import Sensor, VirtualClock

Sink = Callable[[Reading | Gap], None]

#: Distinct error messages counted one by one; later new ones are counted together (bounded memory on a
#: sensor whose messages carry a timestamp or value, over a run of months).
MAX_ERROR_KINDS = 200
OTHER_ERRORS = "other errors (more than 200 distinct messages)"


class _BoundedCounter(Counter[str]):
    """A Counter that stops adding new keys past :data:`MAX_ERROR_KINDS` (they go to one catch-all key)."""

    def __missing__(self, key: str) -> int:
        return 0

    def __setitem__(self, key: str, value: int) -> None:
        if key not in self and len(self) >= MAX_ERROR_KINDS and key != OTHER_ERRORS:
            key = OTHER_ERRORS
            value = self.get(OTHER_ERRORS, 0) + 1
        super().__setitem__(key, value)


@dataclass
class SamplerStats:
    """Counters of a sampler run (read them any time; updated by the sampling thread)."""

    rate_hz: float
    jitter: float = 0.0
    jitter_seed: int | None = None
    n_ticks: int = 0
    n_samples: Counter[str] = field(default_factory=Counter)
    n_gaps: Counter[str] = field(default_factory=Counter)
    errors: Counter[str] = field(default_factory=_BoundedCounter)  # message → count (reads and sinks)
    skipped_ticks: int = 0
    first_tick_s: float | None = None
    last_tick_s: float | None = None
    last_deadline_s: float | None = None
    max_lateness_s: float = 0.0
    sum_lateness_s: float = 0.0
    busy_s: float = 0.0  # wall seconds spent reading sensors and running sinks (overhead)
    end_reason: str = ""

    @property
    def mean_period_s(self) -> float | None:
        """Mean interval between actual tick starts (clock seconds)."""
        if self.first_tick_s is None or self.last_tick_s is None or self.n_ticks < 2:
            return None
        return (self.last_tick_s - self.first_tick_s) / (self.n_ticks - 1 + self.skipped_ticks)

    @property
    def drift_s(self) -> float | None:
        """Actual minus scheduled time of the last tick: stays ~constant when deadlines are absolute."""
        if self.last_tick_s is None or self.last_deadline_s is None:
            return None
        return self.last_tick_s - self.last_deadline_s

    @property
    def mean_lateness_s(self) -> float:
        return self.sum_lateness_s / self.n_ticks if self.n_ticks else 0.0

    @property
    def overhead_per_tick_s(self) -> float:
        return self.busy_s / self.n_ticks if self.n_ticks else 0.0

    def to_dict(self) -> dict[str, object]:
        return {
            "rate_hz": self.rate_hz,
            "jitter": self.jitter,
            "jitter_seed": self.jitter_seed,
            "n_ticks": self.n_ticks,
            "n_samples": dict(self.n_samples),
            "n_gaps": dict(self.n_gaps),
            "errors": dict(self.errors),
            "skipped_ticks": self.skipped_ticks,
            "mean_period_s": self.mean_period_s,
            "drift_s": self.drift_s,
            "mean_lateness_s": self.mean_lateness_s,
            "max_lateness_s": self.max_lateness_s,
            "overhead_per_tick_s": self.overhead_per_tick_s,
            "end_reason": self.end_reason,
        }


def sample_instants(t0: float, t1: float, rate_hz: float, *, seed: int, jitter: float = 1.0) -> list[float]:
    """The instants a :class:`Sampler` with ``jitter_seed=seed`` started at ``t0`` reads at, up to ``t1``
    (no read is late): the schedule alone, to regenerate a recorded run's instants or plan an experiment."""
    rng = np.random.default_rng(int(seed))
    period = 1.0 / rate_hz
    n = int((t1 - t0) * rate_hz + 1e-9)
    u = rng.random(((n // 1024) + 1) * 1024)
    return [
        min(t1, t0 + k * period + (jitter * u[k] * period if k and jitter else 0.0)) for k in range(n + 1)
    ]


def _kind(sensor: Sensor) -> str:
    try:
        return str(sensor.info().kind)
    except Exception:  # noqa: BLE001 - a sensor whose info fails is sampled like any other
        return ""


class Sampler:
    """Sample ``sensors`` at ``rate_hz`` until stopped, ``duration_s`` elapses or a replay ends.

    ``sinks`` are called in the sampling thread with every Reading/Gap, in order (a :class:`TraceWriter`
    is a sink); a sink that raises is recorded in ``stats.errors`` and keeps being called. The last
    ``max_buffer`` items stay in :attr:`buffer` (bounded memory) for live displays.
    A read that takes longer than ``slow_read_s`` (default: one period) keeps its reading, and the ticks
    it overran are recorded as gaps.

    ``jitter`` (0–1; default 1, or 0 when a sensor is a replay, which yields its recorded rows) is the share
    of each period over which the sample instant is drawn. ``rng`` injects the generator, else one is seeded
    from ``jitter_seed``, else from fresh OS entropy (an evader cannot predict it) — or 0 under a
    :class:`VirtualClock` (simulations stay reproducible). The seed in use is :attr:`jitter_seed` (None when
    ``rng`` was injected: its owner knows it).
    """

    def __init__(
        self,
        sensors: Sequence[Sensor],
        rate_hz: float,
        *,
        sinks: Sequence[Sink] = (),
        max_buffer: int = 10_000,
        duration_s: float | None = None,
        slow_read_s: float | None = None,
        jitter: float | None = None,
        rng: np.random.Generator | None = None,
        jitter_seed: int | None = None,
    ) -> None:
        if not sensors:
            raise ValueError("Sampler needs at least one sensor")
        if not rate_hz > 0:
            raise ValueError("rate_hz must be > 0")
        if jitter is None:
            # a replay yields its recorded rows in order: jittering it only reorders the recording
            jitter = 0.0 if any(_kind(s) == "replay" for s in sensors) else 1.0
        if not (isinstance(jitter, (int, float)) and 0.0 <= jitter <= 1.0):
            raise ValueError(f"jitter must be in [0, 1], got {jitter!r}")
        self.jitter = float(jitter)
        if rng is None:
            if jitter_seed is None and isinstance(sensors[0].clock, VirtualClock):
                jitter_seed = 0  # simulated time: a reproducible run (no evader lives in a virtual clock)
            elif jitter_seed is None:
                jitter_seed = int(np.random.SeedSequence().entropy) % 2**63  # unpredictable, recorded
            rng = np.random.default_rng(int(jitter_seed))
        self.jitter_seed = None if jitter_seed is None else int(jitter_seed)
        self._rng = rng
        self._u: list[
            float
        ] = []  # u_k drawn in order of k (skipped ticks too), so k → instant is reproducible
        self.sensors = list(sensors)
        self.rate_hz = float(rate_hz)
        self.period_s = 1.0 / self.rate_hz
        self.sinks = list(sinks)
        self.buffer: deque[Reading | Gap] = deque(maxlen=max_buffer)
        self.duration_s = duration_s
        self.slow_read_s = self.period_s if slow_read_s is None else float(slow_read_s)
        self.clock = self.sensors[0].clock
        self.stats = SamplerStats(rate_hz=self.rate_hz, jitter=self.jitter, jitter_seed=self.jitter_seed)
        self._stop = threading.Event()
        self._done = threading.Event()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()
        self.t0: float | None = None
        self.exception: BaseException | None = None

    # ------------------------------------------------------------------ lifecycle
    def start(self) -> Sampler:
        if self._thread is not None:
            raise RuntimeError("sampler already started")
        self._thread = threading.Thread(target=self._run_safe, name="flopwatch-sampler", daemon=True)
        self._thread.start()
        return self

    def request_stop(self) -> None:
        """Ask the loop to finish after the current tick, without waiting (safe in signal handlers)."""
        self._stop.set()

    def stop(self, timeout: float | None = 5.0) -> SamplerStats:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout)
        return self.stats

    def wait(self, timeout: float | None = None) -> bool:
        """Block until the sampler finished (duration reached, trace ended, or stopped)."""
        return self._done.wait(timeout)

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def __enter__(self) -> Sampler:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def run(self, n_ticks: int | None = None) -> SamplerStats:
        """Sample synchronously in the calling thread (virtual clocks, tests) until done or ``n_ticks``."""
        self._loop(n_ticks)
        return self.stats

    def latest(self, n: int | None = None) -> list[Reading | Gap]:
        """A copy of the newest ``n`` buffered items (all when None)."""
        with self._lock:
            items = list(self.buffer)
        return items if n is None else items[-n:]

    # ------------------------------------------------------------------ loop
    def offset_s(self, k: int) -> float:
        """The jitter of tick ``k``: seconds after the start of its period (0 ≤ offset < period)."""
        if self.jitter == 0.0 or k == 0:
            return 0.0  # the first read anchors the counters at the start (the start is no secret)
        while len(self._u) <= k:
            self._u.extend(self._rng.random(1024).tolist())
        return self.jitter * self._u[k] * self.period_s

    def deadline_s(self, t0: float, k: int) -> float:
        """Scheduled instant of tick ``k`` for a sampler that started at ``t0``."""
        return t0 + k * self.period_s + self.offset_s(k)

    def _run_safe(self) -> None:
        try:
            self._loop(None)
        except BaseException as e:  # surfaced to the owner via .exception; the thread must not die silently
            self.exception = e
            self.stats.end_reason = f"crashed: {type(e).__name__}: {e}"
            self._done.set()

    def _emit(self, item: Reading | Gap) -> None:
        with self._lock:
            self.buffer.append(item)
        if isinstance(item, Gap):
            self.stats.n_gaps[item.device] += 1
        else:
            self.stats.n_samples[item.device] += 1
        for sink in self.sinks:
            try:
                sink(item)
            except Exception as e:  # a failing sink is reported, never crashes sampling
                self.stats.errors[f"sink {type(sink).__name__}: {type(e).__name__}: {e}"] += 1

    def _device_id(self, i: int) -> str:
        try:
            return self.sensors[i].info().device_id
        except Exception:
            return f"sensor{i}"

    def _loop(self, n_ticks: int | None) -> None:
        from flopwatch.telemetry.sensors.replay import TraceEnded

        clock = self.clock
        st = self.stats
        devices = [self._device_id(i) for i in range(len(self.sensors))]
        t0 = clock.now()
        self.t0 = t0
        k = 0
        end_t = None if self.duration_s is None else t0 + self.duration_s
        try:
            while not self._stop.is_set():
                if n_ticks is not None and st.n_ticks >= n_ticks:
                    st.end_reason = "n_ticks reached"
                    break
                slot = t0 + k * self.period_s
                if end_t is not None and slot > end_t + 1e-9:
                    st.end_reason = "duration reached"
                    break
                deadline = self.deadline_s(t0, k)
                if end_t is not None:
                    deadline = min(deadline, end_t)  # the last read closes the run: as many reads as the grid
                if not clock.sleep_until(deadline, self._stop):
                    break
                w0 = time.perf_counter()
                t_tick = clock.now()
                st.n_ticks += 1
                st.last_deadline_s = deadline
                if st.first_tick_s is None:
                    st.first_tick_s = t_tick
                st.last_tick_s = t_tick
                late = max(0.0, t_tick - deadline)
                st.sum_lateness_s += late
                st.max_lateness_s = max(st.max_lateness_s, late)
                ended = False
                for i, sensor in enumerate(self.sensors):
                    r0 = clock.now()
                    try:
                        item: Reading | Gap = sensor.read()
                    except TraceEnded:
                        ended = True
                        break
                    except SensorError as e:
                        item = Gap(r0, clock.wall_time(), devices[i], f"{type(e).__name__}: {e}")
                        st.errors[item.error] += 1
                    except Exception as e:  # a vendor bug must not kill the recording: record it
                        item = Gap(r0, clock.wall_time(), devices[i], f"unexpected {type(e).__name__}: {e}")
                        st.errors[item.error] += 1
                    self._emit(item)
                    took = clock.now() - r0
                    if took > self.slow_read_s:
                        st.errors[f"slow read on {devices[i]}"] += 1
                if ended:
                    st.end_reason = "trace ended"
                    break
                k += 1
                # Overran one or more deadlines: skip them (keeping the grid), and record them as gaps.
                now = clock.now()
                next_slot = t0 + k * self.period_s
                next_deadline = self.deadline_s(t0, k)
                # A tick is skipped once its slot is over (with jitter: the whole period it may fall in; on the
                # fixed grid: half a period after its deadline); a less late one still runs (late).
                allow = (1.0 if self.jitter > 0 else 0.5) * self.period_s
                behind = now - next_slot - allow
                if behind > 0:
                    missed = int(behind // self.period_s) + 1
                    if missed > 0:
                        st.skipped_ticks += missed
                        for i in range(len(self.sensors)):
                            self._emit(
                                Gap(
                                    max(next_deadline, t_tick),  # never before the read that overran
                                    clock.wall_time(),
                                    devices[i],
                                    f"overrun: {missed} tick(s) missed "
                                    f"({now - t_tick:.4f} s spent on a {self.period_s:.4f} s period)",
                                )
                            )
                        k += missed
                st.busy_s += time.perf_counter() - w0
            else:
                st.end_reason = st.end_reason or "stopped"
        finally:
            if not st.end_reason:
                st.end_reason = "stopped"
            self._done.set()
