"""Per-device accounting: running totals, workload detection and the measurement of each workload.

A :class:`DeviceAccount` is driven by readings and gaps of one device and talks to the rest of the daemon only
through :class:`AccountPorts` (assess, emit a row, request a checkpoint): it holds no reference to
the daemon. Each reading is

* checked for physical plausibility (:func:`flopwatch.telemetry.plausibility.check_reading`): an impossible
  reading (power far above TDP, negative, non-finite, utilisation outside 0–1) is a sensor error, is left out
  of every integral (the interval is bridged from the last good reading, as across a failed read) and flags
  the workload it falls in;
* integrated into running totals that never reset (the hardware counter's delta when there is one, else the
  trapezoid over power): gross energy, net energy above idle, and the net energy, time, DRAM traffic and
  utilisation of *busy* intervals — busy meaning utilisation above the detection threshold at either end, or
  net power above a margin, or inside a workload. The estimated FLOPs total is the assess stage applied to the
  busy totals, so work split into bursts too short for the hysteresis still counts;
* fed to the study's hysteresis detector (:class:`~flopwatch.detect.OnlineDetector`).

While the device is settled idle it also tracks the lowest mean idle power over ``IDLE_WINDOW_S`` windows and
any negative net energy there: an idle baseline above what the device really draws at idle (a baseline taken
under load) hides energy, and every workload row then says so.
"""

from __future__ import annotations

import bisect
import logging
import math
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from flopwatch.estimate.bounds import IDLE_DRIFT_MIN_W, MIN_COVERAGE, idle_drift_w
from flopwatch.estimate.observe import PIPES
from flopwatch.monitor.exporter import DeviceSample
from flopwatch.monitor.observed import Interval, Observed, interval, power_limit
from flopwatch.monitor.rows import Assessment, Measurement, WorkloadRow
from flopwatch.monitor.totals import Totals
from flopwatch.sensor_timing import ENERGY_COUNTER_MAX_UPDATE_S
from flopwatch.telemetry.consistency import ConsistencyCheck
from flopwatch.telemetry.plausibility import check_counter_step, check_reading
from flopwatch.telemetry.schema import Gap, Reading
from flopwatch.text import literal
from flopwatch.units import counter_delta

if TYPE_CHECKING:
    from flopwatch.devices import DeviceSpec

log = logging.getLogger("flopwatch.monitor")

#: Fraction of the idle power above which net power alone marks an interval busy (when no margin is given).
DEFAULT_BUSY_MARGIN_FRACTION = 0.10
#: Settled idle time averaged into one idle-power observation: long enough to average 2 Hz sensor noise and
#: NVML's ~1 s power averaging window, short enough to see the idle floor between jobs.
IDLE_WINDOW_S = 10.0
# How far the configured idle baseline may sit above the lowest settled idle power before rows are flagged, and
# the coverage below which a row warns, are the project's one rule each (estimate/bounds.py: idle_drift_w,
# MIN_COVERAGE): the same run is judged alike live and offline.


#: The running sums of a :class:`_Point`, in vector order: energy, net energy, DRAM bytes, ∫util dt, covered
#: time; ∫ SM clock dt (MHz·s) and ∫ enforced power limit dt (W·s) with the time each covers (intervals busy at
#: both ends where reported); time no sample and no energy counter covered (gaps); the time the pipe counters
#: covered and Σ activity·dt per pipe (PIPES order).
_SUMS = (
    "energy_j",
    "net_energy_j",
    "bytes",
    "util_s",
    "covered_s",
    "clock_s",
    "clock_dt",
    "plim_s",
    "plim_dt",
    "unobs_s",
    "pipe_dt",
    *(f"pipe_{k}" for k in PIPES),
)


@dataclass(frozen=True)
class _Point:
    """Cumulative values at one reading (for back-dating workload boundaries by interpolation): one numpy
    vector of running sums (:data:`_SUMS`), so a reading adds one vector and a boundary interpolates one."""

    t: float
    wall: float
    errors: int
    implausible: int
    sums: np.ndarray
    iv: Interval | None = None  # the interval ending at this reading (not cumulative; for back-dating)

    def since(self, base: _Point) -> dict[str, float]:
        """Each running sum's increase from ``base`` to here, by name."""
        return dict(zip(_SUMS, (self.sums - base.sums).tolist(), strict=True))


@dataclass
class OpenWorkload:
    workload_id: str
    start_t_s: float
    start_wall: float
    base: _Point
    polls: int = 0
    first_implausible: str | None = None
    running: WorkloadRow | None = None
    consistency: ConsistencyCheck | None = None  # cross-channel checks over the workload's readings
    observed: Observed | None = None  # per-window sums and ranges of the sound bound's observables


@dataclass(frozen=True)
class DeviceContext:
    """What the account knows about its device (from the sensor's info)."""

    device: str
    name: str | None = None
    kind: str | None = None
    simulated: bool = False
    has_dram: bool = False
    spec: DeviceSpec | None = None  # for plausibility limits (TDP, bandwidth); None: generic limits
    #: share of observed time the sensor does not see at the rate in force
    #: (``sensor_timing.check_sampling(...).unobserved_fraction``): bounded at peak rate in every row
    unobserved_fraction: float = 0.0


@dataclass(frozen=True)
class AccountSettings:
    """The daemon settings an account reads (a narrow copy of the config)."""

    session_id: str
    poll_s: float = 1.5
    util_threshold: float = 0.05
    start_polls: int = 2
    end_polls: int = 3
    sample_hz: float = 2.0
    busy_power_margin_w: float | None = None
    sensor_fault_s: float = 30.0
    idle_power_w: float = 0.0
    threshold_flops: float | None = None
    profile_sha256: str | None = None
    declared_dtype: str | None = None
    window_s: float = 30.0  # one window of a row's time-resolved observables per this much observed time


@dataclass(frozen=True)
class AccountPorts:
    """Everything an account may ask of the daemon: the narrow interface instead of a back-reference."""

    assess: Callable[[Measurement], Assessment]
    emit_row: Callable[[WorkloadRow], None]  # sign the row into the ledger (and keep it for the summary)
    checkpoint: Callable[[str], None]  # request a checkpoint row, with a reason


@dataclass
class _IdleWindow:
    energy_j: float = 0.0
    net_energy_j: float = 0.0
    s: float = 0.0


class DeviceAccount:
    """Accounting, detection and workload rows of one device (driven by readings and gaps)."""

    def __init__(
        self,
        ctx: DeviceContext,
        settings: AccountSettings,
        ports: AccountPorts,
        totals: Totals | None = None,
    ) -> None:
        from flopwatch.detect import HysteresisParams, OnlineDetector

        self.ctx = ctx
        self.device = ctx.device
        self.label = literal(ctx.device)  # for logs: device names are printed literally
        self.s = settings
        self.ports = ports
        self.totals = totals or Totals()
        self.params = HysteresisParams(
            poll_s=settings.poll_s,
            util_threshold=settings.util_threshold,
            start_polls=settings.start_polls,
            end_polls=settings.end_polls,
        )
        self._new_detector = lambda: OnlineDetector(self.params)
        self.detector = self._new_detector()
        self.period_s = 1.0 / settings.sample_hz
        self.idle_power_w = settings.idle_power_w
        self.busy_margin_w = (
            settings.busy_power_margin_w
            if settings.busy_power_margin_w is not None
            else max(0.05, DEFAULT_BUSY_MARGIN_FRACTION * self.idle_power_w)
        )
        self.last: Reading | None = None
        self.last_good_t: float | None = None
        self._ctr_base_t: float | None = None  # reading time just before the energy counter last changed
        # Power without utilisation hides outside workloads: checked over the whole session.
        self._consistency = ConsistencyCheck(self.idle_power_w)
        self.next_poll: float | None = None
        self.open: OpenWorkload | None = None
        # Session-local cumulative values (independent of restored totals) for interpolation.
        self._cum = _Point(0.0, 0.0, 0, 0, np.zeros(len(_SUMS)))
        self._hist: deque[_Point] = deque()
        self._hist_s = max(60.0, 4 * settings.poll_s * (settings.start_polls + settings.end_polls))
        self.session_errors = 0
        self.session_implausible = 0
        self._idle = _IdleWindow()
        self.reported_outside_j = self.settled_outside_j()
        self.status_counts: dict[
            str, int
        ] = {}  # rows closed this session, by status (the exporter's counter)
        #: the context every row of this device records (the daemon sets it: profile hash, peaks, sensor …)
        self.context: Mapping[str, Any] | None = None

    # ------------------------------------------------------------------ readings
    def on_reading(self, r: Reading) -> None:
        problems = check_reading(r, self.ctx.spec)
        if problems:
            self._fault(r.t_s, "implausible reading: " + "; ".join(problems), implausible=True)
            return
        tot = self.totals
        prev = self.last
        if prev is None or r.t_s > prev.t_s:
            self._consistency.feed(r.t_s, r.power_w, r.util, r.energy_j)
            if self.open is not None and self.open.consistency is not None:
                self.open.consistency.feed(r.t_s, r.power_w, r.util, r.energy_j)
        if prev is not None and r.t_s > prev.t_s:
            dt = r.t_s - prev.t_s
            de = self._counter_energy(prev, r)
            by_counter = de is not None
            if de is None:
                p0 = prev.power_w if prev.power_w is not None else r.power_w
                p1 = r.power_w if r.power_w is not None else p0
                de = 0.5 * (p0 + p1) * dt if p0 is not None and p1 is not None else 0.0
            dnet = de - self.idle_power_w * dt
            u0, u1 = prev.util, r.util
            ubar = _mean(u0, u1)
            b0, b1 = self._dram_rate(prev), self._dram_rate(r)
            dbytes = (
                0.5 * ((b0 if b0 is not None else b1) + (b1 if b1 is not None else b0)) * dt  # type: ignore[operator]
                if (b0 is not None or b1 is not None)
                else 0.0
            )
            # The clock and power limit the work ran at: intervals busy at both ends only (an idle edge inside
            # a detected workload would dilute the clock with the idle clock).
            thr = self.s.util_threshold
            both_busy = u0 is not None and u1 is not None and u0 > thr and u1 > thr
            clk = _mean(prev.sm_clock_mhz, r.sm_clock_mhz) if both_busy else None
            plim = _mean(power_limit(prev), power_limit(r)) if both_busy else None
            if not all(math.isfinite(x) for x in (de, dnet, dbytes, dt)):
                # Cannot happen with plausible readings; never let a non-finite value reach the totals.
                self._fault(r.t_s, "non-finite energy increment", implausible=True)
                return
            # A gap longer than 2.5 nominal periods is only partly covered by telemetry (the sampler's jitter
            # puts two reads up to 2 periods apart: telemetry/sampler.py).
            covered = dt if dt <= 2.5 * self.period_s + 1e-9 else self.period_s
            busy = (
                self.open is not None
                or (u0 is not None and u0 > thr)
                or (u1 is not None and u1 > thr)
                or dnet / dt > self.busy_margin_w
            )
            # the sound bound's observables (estimate/observe.py): a gap no energy counter spans is unobserved;
            # clock range, peak power and power limit over both readings; pipe activity where both report it
            iv = interval(prev, r, dnet, 0.0 if by_counter else dt - covered)
            uncovered, pipe_dt = iv.uncovered, iv.pipe_dt
            if self.open is not None and self.open.observed is not None:
                self.open.observed.feed(iv)
            tot.energy_j += de
            tot.net_energy_j += dnet
            tot.observed_s += dt
            tot.covered_s += covered
            if busy:
                tot.busy_s += dt
                tot.busy_net_energy_j += dnet
                tot.busy_tb += dbytes / 1e12
                tot.busy_util_s += (ubar or 0.0) * dt
                self._idle = _IdleWindow()
                self._end_quiet_stretch()
            else:
                tot.quiet_open_net_energy_j += dnet
                if self.detector.settled:
                    self._track_idle(de, dnet, dt)
            clk_ok = clk is not None and math.isfinite(clk)
            inc = np.array(
                [
                    de,
                    dnet,
                    dbytes,
                    (ubar or 0.0) * dt,
                    covered,
                    clk * dt if clk_ok else 0.0,  # type: ignore[operator]
                    dt if clk_ok else 0.0,
                    plim * dt if plim is not None else 0.0,
                    dt if plim is not None else 0.0,
                    uncovered,
                    pipe_dt,
                    *(iv.pipes if iv.pipes is not None else (0.0,) * len(PIPES)),
                ]
            )
            sums, last_iv = self._cum.sums + inc, iv
        else:
            sums, last_iv = self._cum.sums, None
        self._cum = _Point(r.t_s, r.wall_time, self.session_errors, self.session_implausible, sums, last_iv)
        self._hist.append(self._cum)
        while self._hist and self._hist[0].t < r.t_s - self._hist_s:
            self._hist.popleft()
        tot.t_s, tot.wall = r.t_s, r.wall_time
        self.last = r
        self.last_good_t = r.t_s

        if log.isEnabledFor(logging.DEBUG):  # -vv: what the daemon knows after each reading
            log.debug(
                "reading %s t=%.3f energy_j=%.4f net_energy_j=%.4f busy_s=%.2f",
                self.label,
                r.t_s,
                tot.energy_j,
                tot.net_energy_j,
                tot.busy_s,
            )
        if self.next_poll is None:
            self.next_poll = r.t_s
        if r.t_s >= self.next_poll - 1e-6:
            self._poll(r)
            # Keep the poll grid; skip polls missed during a gap.
            self.next_poll += self.s.poll_s * max(
                1, math.floor((r.t_s - self.next_poll) / self.s.poll_s + 1e-9) + 1
            )

    def _counter_energy(self, prev: Reading, r: Reading) -> float | None:
        """The energy counter's increment from ``prev`` to ``r``, or None: integrate power over the interval.

        A counter may update more slowly than the sampler reads it (the A100's every ~100 ms): read at 100 Hz it
        shows nine zero steps and one ~30 J step. It is integrated as a counter: the zeros are no energy yet,
        not missing energy, and a step is judged against the device's power ceiling over the counter's own
        update period — from the reading before its previous change (the earliest its energy can have started
        accruing) to now — not over the sampler's interval. Until the counter is seen to change in this
        session (and again after a reset) that period is unknown, so power is integrated instead.
        """
        if r.energy_j is None or prev.energy_j is None:
            self._ctr_base_t = None
            return None
        de = counter_delta(prev.energy_j, r.energy_j)
        if de is None:  # a reset (driver reload): the counter is live again after its next change
            self._ctr_base_t = None
            return None
        if de == 0.0:
            return 0.0 if self._ctr_base_t is not None else None
        base, self._ctr_base_t = self._ctr_base_t, prev.t_s
        if base is None:  # the first change seen: the span it accrued over is unknown
            return None
        # and never shorter than the slowest known counter update (sensor_timing), for jittered reads
        span = max(r.t_s - base, ENERGY_COUNTER_MAX_UPDATE_S)
        if check_counter_step(de, span, self.ctx.spec):
            # The counter jumped by more than the device can draw over the counter's own period: a glitch.
            self._fault(
                r.t_s, f"implausible energy counter step: {de:.6g} J in {span:.3g} s", implausible=True
            )
            return None
        return de

    def _dram_rate(self, r: Reading) -> float | None:
        """DRAM bytes/s of a reading: the sensor's own, else NVML GPM's DRAM bandwidth utilisation (0–1,
        ``extra["dram_bw_util"]``) × the datasheet bandwidth (as the pipeline's ``execute`` stage does)."""
        if r.dram_bytes_per_s is not None:
            return r.dram_bytes_per_s
        u = r.extra.get("dram_bw_util") if r.extra else None
        spec = self.ctx.spec
        if spec is None or isinstance(u, bool) or not isinstance(u, (int, float)) or not 0 <= u <= 1:
            return None
        return float(u) * spec.mem_bw_bytes_per_s

    def _end_quiet_stretch(self) -> None:
        t = self.totals
        if t.quiet_open_net_energy_j != 0.0:
            t.quiet_net_energy_j += max(0.0, t.quiet_open_net_energy_j)
            t.quiet_open_net_energy_j = 0.0

    def _track_idle(self, de: float, dnet: float, dt: float) -> None:
        w = self._idle
        w.energy_j += de
        w.net_energy_j += dnet
        w.s += dt
        if w.s < IDLE_WINDOW_S:
            return
        p = w.energy_j / w.s
        tot = self.totals
        if tot.min_idle_power_w is None or p < tot.min_idle_power_w:
            tot.min_idle_power_w = p
        if w.net_energy_j < 0 and self.idle_power_w - p > self._idle_tolerance_w():
            if tot.negative_net_energy_j == 0.0:
                log.warning(
                    "%s: settled idle power %.3f W is below the idle baseline %.3f W: "
                    "net energy goes negative at idle (baseline measured under load?)",
                    self.label,
                    p,
                    self.idle_power_w,
                )
            tot.negative_net_energy_j += w.net_energy_j
        self._idle = _IdleWindow()

    def _idle_tolerance_w(self) -> float:
        d = idle_drift_w(self.idle_power_w, self.ctx.spec)
        return d if d is not None else IDLE_DRIFT_MIN_W

    def on_gap(self, g: Gap) -> None:
        if g.error.startswith("overrun"):
            # The sampler fell behind (slow host, very fast replay): samples are missing, the sensor is fine.
            # The longer interval to the next reading lowers coverage; it is not a sensor error.
            self.totals.missed_ticks += 1
            return
        self._fault(g.t_s, g.error, implausible=False)

    def _fault(self, t_s: float, error: str, *, implausible: bool) -> None:
        """A failed or impossible reading: counted, logged sparsely, kept out of the integrals."""
        self.session_errors += 1
        self.totals.sensor_errors += 1
        self._idle = _IdleWindow()
        if implausible:
            self.session_implausible += 1
            self.totals.implausible_readings += 1
            if self.open is not None and self.open.first_implausible is None:
                self.open.first_implausible = error
        if self.session_errors in (1, 10, 100) or self.session_errors % 1000 == 0:
            log.warning(
                "%s: sensor error #%d at t=%.1f: %s", self.label, self.session_errors, t_s, literal(error)
            )
        if (
            self.open is not None
            and self.last_good_t is not None
            and t_s - self.last_good_t >= self.s.sensor_fault_s
        ):
            # The sensor has been failing too long to know when the workload ended: close it at the last
            # good reading, flagged, and start detection afresh when readings return.
            self.close(self.last_good_t, status="sensor_fault", cut="the sensor failed")
            self.detector = self._new_detector()

    # ------------------------------------------------------------------ detection
    def _poll(self, r: Reading) -> None:
        for ev in self.detector.update(r.t_s, r.util):
            if ev.kind == "start":
                self._start(ev.t_s)
            elif ev.kind == "end" and self.open is not None:
                self.close(ev.t_s, status="complete")
        if self.open is not None:
            self.open.polls += 1
            row = self._row(self.open, self._cum, status="open")
            self.open.running = row
            est = row.estimate_flops
            log.debug(
                "%s: t=%.1f workload running %.1f s net %.1f J estimate %s",
                self.label,
                r.t_s,
                row.duration_s,
                row.net_energy_j,
                est,
            )
        self._update_flops_total()
        if self.open is None and self.detector.settled:
            self._update_outside_total()

    def settled_outside_j(self) -> float:
        """Busy net energy that no workload row holds (short bursts), up to the last settled idle poll."""
        return max(0.0, self.totals.busy_net_energy_j - self.totals.workload_net_energy_j)

    def _update_outside_total(self) -> None:
        # Only called while idle with no busy streak pending: outer-edge detection starts a workload at the last
        # idle poll at the earliest, so busy energy before this poll can no longer be claimed by a workload.
        f = self.settled_outside_j()
        self.reported_outside_j = max(self.reported_outside_j, f)

    def _at(self, t: float) -> _Point:
        """Cumulative values at sensor time ``t`` (linear interpolation between readings)."""
        h = self._hist
        if not h:
            return self._cum
        if t <= h[0].t:
            return h[0]
        if t >= h[-1].t:
            return h[-1]
        i = bisect.bisect_left([p.t for p in h], t)
        a, b = h[i - 1], h[i]
        w = (t - a.t) / (b.t - a.t) if b.t > a.t else 1.0

        return _Point(
            t, a.wall + w * (b.wall - a.wall), b.errors, b.implausible, a.sums + w * (b.sums - a.sums)
        )

    def _start(self, t_s: float) -> None:
        base = self._at(t_s)
        self.open = OpenWorkload(
            workload_id=f"{self.s.session_id}/{self.device}/{t_s:.3f}",
            start_t_s=t_s,
            start_wall=base.wall,
            base=base,
            consistency=ConsistencyCheck(self.idle_power_w),
            observed=self._observed_since(t_s),
        )
        log.info("%s: workload started at t=%.1f", self.label, t_s)
        self.ports.checkpoint("workload start")

    def _observed_since(self, t_s: float) -> Observed:
        """The observables of the intervals after ``t_s`` still in the history (a start is back-dated)."""
        acc = Observed(self.s.window_s)
        for p in self._hist:
            iv = p.iv
            if iv is None or p.t <= t_s:
                continue
            acc.feed(iv, 1.0 if iv.t0 >= t_s else (p.t - t_s) / iv.dt)
        return acc

    def _tail(self, t_s: float) -> tuple[float, float]:
        """Observed time and net energy of the intervals after ``t_s`` (a row ends back-dated, at the last busy
        poll, while its accumulator has seen the readings up to now)."""
        dt = net = 0.0
        for p in reversed(self._hist):
            iv = p.iv
            if p.t <= t_s:
                break
            if iv is None:
                continue
            f = 1.0 if iv.t0 >= t_s else (p.t - t_s) / iv.dt
            dt += (iv.dt - iv.uncovered) * f
            net += iv.dnet * f
        return dt, net

    def _observables(self, w: OpenWorkload, end: _Point, d: dict[str, float], dur: float) -> dict[str, Any]:
        """The sound bound's observables of a workload (Measurement fields): unobserved time (gaps no counter
        spans + the sensor's blind share of the rest), clock range, peak power, pipe activity, windows."""
        gaps = max(0.0, d["unobs_s"])
        f = min(1.0, max(0.0, self.ctx.unobserved_fraction))
        out: dict[str, Any] = {"unobserved_s": gaps + f * max(0.0, dur - gaps)}
        obs = w.observed
        pipe_dt = d["pipe_dt"]
        if pipe_dt > 0 and pipe_dt >= (dur - gaps) * (1 - 1e-6):
            # every observed interval had the four pipe counters: they bound that time on their own
            out["pipe_active_s"] = {k: max(0.0, d[f"pipe_{k}"]) for k in PIPES}
            out["pipe_observed_s"] = pipe_dt
        if obs is not None:
            out["min_sm_clock_mhz"] = obs.lo if math.isfinite(obs.lo) else None
            out["max_sm_clock_mhz"] = obs.hi if math.isfinite(obs.hi) else None
            out["peak_power_w"] = obs.p_hi if math.isfinite(obs.p_hi) else None
            out["windows"] = obs.windows(f, *self._tail(end.t))
        return out

    def _measure(self, w: OpenWorkload, end: _Point, cut: str | None = None) -> Measurement:
        b, d = w.base, end.since(w.base)
        dur = max(0.0, end.t - b.t)
        net = d["net_energy_j"]
        tb = d["bytes"] / 1e12 if self.ctx.has_dram else None
        mean_util = d["util_s"] / dur if dur > 0 else None
        coverage = min(1.0, d["covered_s"] / dur) if dur > 0 else None
        errors = end.errors - b.errors
        implausible = end.implausible - b.implausible
        clock_dt, plim_dt = d["clock_dt"], d["plim_dt"]
        mean_clock = d["clock_s"] / clock_dt if clock_dt > 0 else None
        mean_plim = d["plim_s"] / plim_dt if plim_dt > 0 else None
        warnings: list[str] = [cut_warning(cut)] if cut is not None else []
        # physically impossible telemetry: in the workload, or power without utilisation on the device
        if w.consistency is not None:
            warnings.extend(w.consistency.problems())
        warnings.extend(x for x in self._consistency.problems() if x.startswith("power without utilisation"))
        if implausible:
            warnings.append(
                f"{implausible} physically implausible sensor reading(s) excluded from the energy "
                f"(first: {w.first_implausible or 'n/a'})"
            )
        if errors - implausible > 0:
            warnings.append(f"{errors - implausible} sensor read error(s) during the workload")
        if coverage is not None and coverage < MIN_COVERAGE:
            warnings.append(f"telemetry covers {100 * coverage:.1f} % of the workload")
        if net < 0:
            warnings.append(
                f"net energy is negative ({net:.6g} J): the device drew less than the idle baseline "
                f"{self.idle_power_w:.6g} W (baseline measured under load?)"
            )
        low = self.totals.min_idle_power_w
        if low is not None and self.idle_power_w - low > self._idle_tolerance_w():
            warnings.append(
                f"idle baseline {self.idle_power_w:.6g} W is above the lowest settled idle power {low:.6g} W "
                f"seen on this device: net energy may be understated by up to {(self.idle_power_w - low) * dur:.6g} J"
            )
        return Measurement(
            device=self.device,
            start_t_s=w.start_t_s,
            end_t_s=end.t,
            start_wall=w.start_wall,
            end_wall=end.wall,
            duration_s=dur,
            energy_j=d["energy_j"],
            net_energy_j=net,
            idle_power_w=self.idle_power_w,
            tb_moved=tb,
            mean_util=mean_util,
            coverage=coverage,
            sensor_errors=errors,
            implausible_readings=implausible,
            mean_sm_clock_mhz=mean_clock,
            power_limit_w=mean_plim,
            warnings=tuple(warnings),
            declared_dtype=self.s.declared_dtype,
            device_name=self.ctx.name,
            spec_key=self.ctx.spec.key if self.ctx.spec is not None else None,
            context=self.context,
            **self._observables(w, end, d, dur),
        )

    def _row(self, w: OpenWorkload, end: _Point, *, status: str, cut: str | None = None) -> WorkloadRow:
        meas = self._measure(w, end, cut)
        return WorkloadRow.build(
            workload_id=w.workload_id,
            session_id=self.s.session_id,
            status=status,
            meas=meas,
            assessment=self.ports.assess(meas),
            threshold_flops=self.s.threshold_flops,
            profile_sha256=self.s.profile_sha256,
            sensor_kind=self.ctx.kind,
            simulated=self.ctx.simulated,
        )

    def close(self, t_s: float, *, status: str, cut: str | None = None) -> WorkloadRow | None:
        """End the open workload at sensor time ``t_s`` with ``status``; emits and returns its row.

        ``cut``: why the row ends while the workload may still be running (the daemon stopping by signal or
        ``--duration``, the sensor failing): the row then carries :func:`cut_warning`, so its verdict is at
        most "uncertain" — its FLOPs go on beyond the row.
        """
        w = self.open
        if w is None:
            return None
        row = self._row(w, self._at(min(t_s, self._cum.t)), status=status, cut=cut)
        self.open = None
        self.totals.workload_net_energy_j += row.net_energy_j or 0.0
        self.totals.workload_s += row.duration_s or 0.0
        self.totals.workloads += 1
        self.status_counts[status] = self.status_counts.get(status, 0) + 1
        self.ports.emit_row(row)
        log.info(
            "%s: workload %s: %.1f s, net %.1f J, estimate %s FLOPs [%s, %s], verdict %s, coverage %s",
            self.label,
            status,
            row.duration_s,
            row.net_energy_j,
            _g(row.estimate_flops),
            _g(row.lower_flops),
            _g(row.upper_flops),
            row.verdict,
            _g(row.coverage),
        )
        self.ports.checkpoint(f"workload {status}")
        return row

    def _update_flops_total(self) -> None:
        t = self.totals
        if t.busy_s <= 0:
            return
        a = self.ports.assess(
            Measurement(
                device=self.device,
                start_t_s=0.0,
                end_t_s=t.t_s or 0.0,
                start_wall=0.0,
                end_wall=t.wall or 0.0,
                duration_s=t.busy_s,
                energy_j=t.energy_j,
                net_energy_j=t.busy_net_energy_j,
                idle_power_w=self.idle_power_w,
                tb_moved=t.busy_tb if self.ctx.has_dram else None,
                mean_util=t.busy_util_s / t.busy_s,
                coverage=None,
                declared_dtype=self.s.declared_dtype,
                device_name=self.ctx.name,
                spec_key=self.ctx.spec.key if self.ctx.spec is not None else None,
            )
        )
        f = a.estimate_flops
        if f is None or not math.isfinite(f):
            return
        # A counter never decreases: the total holds while the busy-time estimate dips (e.g. overhead-only time).
        t.estimated_flops = max(t.estimated_flops, f)

    def metric_sample(self) -> DeviceSample:
        """The device's values for the exporter, read at scrape (the caller holds the daemon's lock)."""
        t, last, w = self.totals, self.last, self.open
        est = w.running.estimate_flops if w is not None and w.running is not None else None
        return DeviceSample(
            device=self.device,
            energy_j=t.energy_j,
            net_energy_j=t.busy_net_energy_j,
            outside_net_energy_j=self.reported_outside_j,
            estimated_flops=t.estimated_flops,
            sensor_errors=t.sensor_errors,
            power_w=last.power_w if last is not None else None,
            util=last.util if last is not None else None,
            min_idle_power_w=t.min_idle_power_w,
            active=w is not None,
            workload_flops=est if est is not None and math.isfinite(est) else 0.0,
            workloads=dict(self.status_counts),
        )

    def snapshot(self) -> dict[str, Any]:
        """Totals and the open workload's running row (status "open"), for a checkpoint."""
        d = self.totals.derived()
        if self.open is not None:
            # the running row without its windows (a checkpoint stays small; a recovered row is one window)
            d["open_workload"] = {
                **self._row(self.open, self._cum, status="open").to_payload(),
                "windows": None,
            }
        else:
            d["open_workload"] = None
        return d


#: The named warning of a row cut before its workload ended (see :meth:`DeviceAccount.close`).
CUT_WARNING_PREFIX = "workload cut before it ended"


def cut_warning(why: str) -> str:
    """The warning of a row cut before its workload ended: it blocks "below" (threshold_verdict)."""
    return f"{CUT_WARNING_PREFIX} ({why}): its FLOPs go on beyond this row, which is only a lower bound"


def _mean(a: float | None, b: float | None) -> float | None:
    if a is None:
        return b
    if b is None:
        return a
    return 0.5 * (a + b)


def _g(x: float | None) -> str:
    return "n/a" if x is None else f"{x:.4g}"


__all__ = [
    "CUT_WARNING_PREFIX",
    "AccountPorts",
    "AccountSettings",
    "DeviceAccount",
    "DeviceContext",
    "OpenWorkload",
    "cut_warning",
]
