"""The verification daemon behind ``flopwatch monitor``: its lifecycle.

The daemon only sequences public stages, each in its own module:

* :mod:`~flopwatch.monitor.accounting` — one :class:`DeviceAccount` per device: plausibility check, energy
  integration, running totals, hysteresis detection, the measurement of each workload;
* :mod:`~flopwatch.monitor.assess` — measurement → estimate, bounds, verdict (swappable: ``assess=``);
* :mod:`~flopwatch.monitor.rows` — the typed workload row, signed into the ledger in one place;
* :mod:`~flopwatch.monitor.recovery` — totals restored from the ledger, crashed sessions' open workloads;
* :mod:`~flopwatch.monitor.ledger` — the signed, hash-chained, single-writer SQLite ledger;
* :mod:`~flopwatch.monitor.exporter` — Prometheus metrics, including the running window verdict.

One :class:`~flopwatch.telemetry.sampler.Sampler` per device reads it at ``sample_hz`` (the study sampled power
at 2 Hz) on its own thread, so a slow or hung read on one GPU never delays another's samples (sensors on a
virtual clock share one synchronous sampler: virtual time has a single owner). Time is the *sensor's* clock,
so a replay at 50× or a simulator on virtual time detects and integrates exactly as a live run would.

Checkpoint rows of all totals (and the open workloads' running rows) are written every ``checkpoint_s`` of
sensor time and at every workload start/end, so a crash loses at most one checkpoint interval.

Only per-workload and per-device totals leave the daemon (ledger, metrics); the short in-memory history
used to back-date detected starts is bounded and never written, unless ``keep_trace`` opts in.
"""

from __future__ import annotations

import logging
import math
import os
import signal
import socket
import threading
import time
import uuid
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from flopwatch import __version__
from flopwatch.errors import ConfigError, LedgerError
from flopwatch.estimate.context import start_row_sensors
from flopwatch.monitor.accounting import AccountPorts, AccountSettings, DeviceAccount, DeviceContext
from flopwatch.monitor.assess import AssessFn, ProfileAssessor
from flopwatch.monitor.config import MonitorConfig
from flopwatch.monitor.exporter import DeviceSample, MonitorMetrics
from flopwatch.monitor.ledger import Ledger
from flopwatch.monitor.recovery import recover
from flopwatch.monitor.rows import Assessment, Measurement, WorkloadRow
from flopwatch.monitor.totals import Totals
from flopwatch.monitor.window import (
    WindowVerdict,
    WindowVerdictFn,
    WorkloadWindow,
    default_window_verdict,
)
from flopwatch.telemetry.schema import Gap, Reading
from flopwatch.telemetry.sensors.base import Sensor, SensorInfo, VirtualClock
from flopwatch.units import finite

if TYPE_CHECKING:
    from flopwatch.devices import DeviceSpec
    from flopwatch.estimate.profile import Profile

log = logging.getLogger("flopwatch.monitor")

__all__ = ["Monitor", "MonitorResult"]


@dataclass
class MonitorResult:
    session_id: str
    end_reason: str
    workloads: list[dict[str, Any]]
    totals: dict[str, dict[str, Any]]
    ledger_head: tuple[int, str]
    metrics_port: int | None


def device_spec(info: SensorInfo) -> DeviceSpec | None:
    """The spec table entry of a sensor's device (for plausibility limits and peaks), or None when unknown:
    :func:`flopwatch.devices.resolve` over its spec key, fingerprint model and name (the one resolver)."""
    from flopwatch.devices import resolve

    model = info.fingerprint.get("model") if info.fingerprint else None
    return resolve(info.spec_key, model, info.name)


def peak_override() -> str | None:
    """The peak override in force in this process (``FLOPWATCH_PEAK_FLOPS``), recorded in every row's context:
    a verifier flags it, so it never loosens a verdict silently."""
    from flopwatch.devices import PEAK_OVERRIDE_ENV

    return os.environ.get(PEAK_OVERRIDE_ENV, "").strip() or None


class Monitor:
    """The daemon: ``Monitor(config).run()`` blocks until stopped (signal, ``--duration``, replay end).

    ``sensors`` and ``profile`` may be passed in (tests, embedding); otherwise they are opened from the config
    — sensors last, because a replay's clock starts running when it is opened. ``assess`` replaces the default
    estimate-and-verdict stage (:class:`~flopwatch.monitor.assess.ProfileAssessor`: the sound assessment of
    :func:`flopwatch.estimate.verdict.assess` over the profile, in the daemon's own context: every row is
    judged against the daemon's configuration as a verifier would judge it); ``window_verdict`` replaces the running window
    verdict behind the exporter's gauge (:func:`~flopwatch.monitor.window.default_window_verdict`:
    ``flopwatch.evaluate.window.combine_window``, as ``flopwatch verdict``).
    """

    def __init__(
        self,
        config: MonitorConfig,
        *,
        sensors: list[Sensor] | None = None,
        profile: Profile | None = None,
        metrics: MonitorMetrics | None = None,
        assess: AssessFn | None = None,
        window_verdict: WindowVerdictFn | None = None,
    ) -> None:
        self.config = config.validate()
        self._sensors = sensors
        self.profile = profile
        self.metrics = metrics or MonitorMetrics()
        self._assess = assess
        self.window = WorkloadWindow(
            window_s=self.config.verdict_window_s,
            threshold_flops=self.config.threshold_flops,
            verdict_fn=window_verdict or default_window_verdict,
        )
        self._names: dict[str, str] = {}  # device id → name (sensor info; earlier sessions' start rows)
        self.window_verdict: WindowVerdict | None = None  # the gauge's latest state
        self.session_id = uuid.uuid4().hex[:12]
        self.accounts: dict[str, DeviceAccount] = {}
        self.sensor_info: dict[str, dict[str, Any]] = {}
        self.workloads: list[dict[str, Any]] = []
        self.ledger: Ledger | None = None
        self.samplers: list[Any] = []
        self.jitter_seeds: dict[str, int | None] = {}
        self.sampling_checks: dict[str, Any] = {}  # device → sensor_timing.SamplingCheck
        # called once the port, ledger and sensors are open (the CLI's start line: never before an error)
        self.on_start: Any = None
        self.idle_power_w = 0.0
        self.profile_sha256: str | None = None
        self._stop = threading.Event()
        self._stop_reason = ""
        self._next_cp: float | None = None
        self._next_head: float | None = None
        self._peaks: dict[str, dict[str, float]] = {}  # device → the datasheet peaks in force (context)
        self._restored: dict[str, Totals] = {}
        self._lock = threading.RLock()
        self.metrics_port: int | None = None
        self._recovered_rows: dict[str, int] = {}  # interrupted rows written by crash recovery, per device
        self.metrics.collect_accounts(self._metric_samples)
        self.fatal: BaseException | None = None
        self._vctx: dict[tuple[Any, ...], dict[str, Any]] = {}
        self._sinks: list[Any] = []

    # ------------------------------------------------------------------ ports of the accounts
    def assess(self, meas: Measurement) -> Assessment:
        """The assess stage in use (the injected one, else the profile's)."""
        assert self._assess is not None
        a = self._assess(meas)
        if meas.context is not None and hasattr(a, "with_warnings"):
            # judged in the daemon's own context whatever the assess stage (ProfileAssessor already is: the
            # same named warnings, deduplicated), so a swapped-in estimator cannot skip it
            from flopwatch.estimate.verdict import context_warnings

            cw = context_warnings(meas.context, self.verifier_context(meas))
            if cw:
                a = a.with_warnings(cw)
        chk = self.sampling_checks.get(meas.device)
        if chk is not None and not chk.adequate and hasattr(a, "with_warnings"):
            # too slow a rate for this sensor, or a sensor whose timing nobody knows (flopwatch.sensor_timing):
            # the row is never "below"
            a = a.with_warnings(chk.warnings)
        return a

    def _emit_row(self, row: WorkloadRow) -> None:
        assert self.ledger is not None
        payload = row.to_payload()
        with self._lock:
            e = self.ledger.append("workload", payload)
            # the ledger's row number: the monitor's table and warnings name rows as `ledger show` and `verdict` do
            self.workloads.append({**payload, "seq": e.seq})
            self.metrics.ledger_head.set(e.seq)
            self._update_window(row)

    def _update_window(self, row: WorkloadRow | None = None) -> None:
        if row is not None:
            self.window.add(row)
        v = self.window.evaluate(self._outside_now(), now_wall=self._now_wall())
        self.window_verdict = v
        self.metrics.set_window_verdict(v)

    def _outside_now(self) -> dict[str, float]:
        """Cumulative net energy outside workload rows per device (as in the checkpoint rows)."""
        out = {d: t.outside_net_energy_j() for d, t in self._restored.items() if d not in self.accounts}
        out.update({d: a.totals.outside_net_energy_j() for d, a in self.accounts.items()})
        return out

    def _metric_samples(self) -> list[DeviceSample]:
        """Every device's exporter values, read under the daemon's lock at scrape time (a device restored from
        the ledger without a sensor this session keeps exporting its totals)."""
        with self._lock:
            out = [a.metric_sample() for a in self.accounts.values()]
            out += [
                DeviceSample(
                    device=d,
                    energy_j=t.energy_j,
                    net_energy_j=t.busy_net_energy_j,
                    outside_net_energy_j=max(0.0, t.busy_net_energy_j - t.workload_net_energy_j),
                    estimated_flops=t.estimated_flops,
                    sensor_errors=t.sensor_errors,
                    min_idle_power_w=t.min_idle_power_w,
                )
                for d, t in self._restored.items()
                if d not in self.accounts
            ]
            for s in out:
                n = self._recovered_rows.get(s.device)
                if n:
                    s.workloads["interrupted"] = s.workloads.get("interrupted", 0) + n
            return out

    def _now_wall(self) -> float:
        walls = [a.totals.wall for a in self.accounts.values() if a.totals.wall is not None]
        return max(walls) if walls else time.time()

    def checkpoint(self, reason: str = "interval") -> None:
        if self.ledger is None:
            return
        with self._lock:
            # Devices restored from the ledger without a sensor this session keep their totals in every
            # checkpoint: the newest checkpoint always holds every device's running totals.
            devs: dict[str, Any] = {
                d: dict(t.derived(), open_workload=None)
                for d, t in self._restored.items()
                if d not in self.accounts
            }
            devs.update({d: a.snapshot() for d, a in self.accounts.items()})
            ts = [a.totals.t_s for a in self.accounts.values() if a.totals.t_s is not None]
            wall = max((a.totals.wall or 0.0) for a in self.accounts.values()) if self.accounts else None
            e = self.ledger.append(
                "checkpoint",
                {
                    "session_id": self.session_id,
                    "reason": reason,
                    "t_s": max(ts) if ts else None,
                    "wall": wall,
                    "host_wall": time.time(),
                    "devices": devs,
                },
            )
            self.metrics.ledger_head.set(e.seq)
            # the window's outside-energy baseline: the values just written, as `flopwatch verdict` reads them
            self.window.mark(
                wall,
                {d: v["outside_net_energy_j"] for d, v in devs.items()},
                t_s=max(ts) if ts else None,
                session_id=self.session_id,
            )
            self._update_window()
        log.debug("checkpoint row %d (%s)", e.seq, reason)

    def context(self) -> dict[str, Any]:
        """The operator's context, signed into each start row (docs/monitor.md, "Context"): what a verifier
        compares with its own before trusting a verdict."""
        cfg = self.config
        return {
            "profile_sha256": self.profile_sha256,
            "peaks_in_force": dict(sorted(self._peaks.items())),
            "peak_override": peak_override(),
            "sensor_kind": sorted({_recorded_kind(i) for i in self.sensor_info.values()}),
            "sensor_spec": list(cfg.sensors),
            "sample_rate_hz": cfg.sample_hz,
            # the seeds in force (one sampler: its seed; several: per device); every instant can be regenerated
            "jitter_seed": _seed_in_force(self.jitter_seeds, getattr(cfg, "jitter_seed", None)),
            "flopwatch_version": __version__,
        }

    def row_context(self, device: str) -> dict[str, Any]:
        """The context one device's rows record (:meth:`context` narrowed to the device): compared by every
        verifier — and by the daemon itself, :meth:`verifier_context` — before a row may be "below"."""
        ctx = self.context()
        info = self.sensor_info.get(device, {})
        ctx["peaks_in_force"] = self._peaks.get(device)
        ctx["sensor_kind"] = _recorded_kind(info) if info else None
        ctx["jitter_seed"] = self.jitter_seeds.get(device, ctx["jitter_seed"])
        return ctx

    def verifier_context(self, meas: Measurement) -> dict[str, Any]:
        """What the daemon, judging its own rows as a verifier would, expects: its profile's hash, the device
        table's datasheet peaks (an override in its environment differs from them), no override."""
        from flopwatch.monitor.nodes import verifier_context

        key = (meas.spec_key, meas.device_name, meas.device)
        v = self._vctx.get(key)
        if v is None:
            v = self._vctx[key] = verifier_context(list(key), self.profile_sha256)
        return v

    # ------------------------------------------------------------------ lifecycle
    def _load_profile(self) -> None:
        cfg = self.config
        if self.profile is None and cfg.profile is not None:
            from flopwatch.estimate.profile import Profile

            self.profile = Profile.load(cfg.profile)
        if self.profile is not None:
            self.profile_sha256 = self.profile.sha256()
        if cfg.idle_power_w is not None:
            self.idle_power_w = float(cfg.idle_power_w)
        elif self.profile is not None and self.profile.idle_power_w is not None:
            self.idle_power_w = float(self.profile.idle_power_w)
        else:
            log.warning("no idle power given and no profile: net energy is gross energy")
            self.idle_power_w = 0.0
        if self._assess is None:
            self._assess = ProfileAssessor(
                self.profile,
                threshold_flops=cfg.threshold_flops,
                declared_dtype=cfg.dtype,
                verifier_context=self.verifier_context,
            )

    def _restore_window(self, led: Ledger) -> None:
        """Rows and checkpoint marks of earlier sessions, in ledger order (the window spans restarts)."""
        for e in led.entries_after(0):
            p = e.payload if isinstance(e.payload, dict) else {}
            if e.kind == "workload":
                self.window.add(WorkloadRow.from_payload(p))
            elif e.kind == "checkpoint" and isinstance(p.get("devices"), dict):
                vals = {
                    str(d): v.get("outside_net_energy_j")
                    for d, v in p["devices"].items()
                    if isinstance(v, dict)
                }
                self.window.mark(
                    finite(p.get("wall")), vals, t_s=finite(p.get("t_s")), session_id=p.get("session_id")
                )
            elif e.kind == "start":
                self.window.rules.restart()  # as `flopwatch verdict` reads a start row (round 12, `restart-gap`)
                self.window.started(p)  # its sensors' blind share outside rows (round 12, `outside-blind`)
                for sen in start_row_sensors(p):
                    if sen.get("name"):
                        self._names.setdefault(str(sen["device"]), str(sen["name"]))
        self.window.rules.restart()  # this session's start row, written next

    def _envelope(self, device: str) -> float:
        """Best FLOP per joule ``device`` can reach under the daemon's profile (inf: no profile, unknown device).

        Resolved as ``flopwatch verdict --profile`` resolves it (device name from the sensor), so they agree."""
        import math

        if self.profile is None or not hasattr(self.profile, "efficiency"):
            return math.inf
        from flopwatch.estimate.bounds import resolve_device
        from flopwatch.estimate.verdict import profile_envelope

        spec = resolve_device(None, self._names.get(device), device)
        return float(profile_envelope(self.profile, spec, None).flops_per_j)

    def _open_sensors(self) -> list[Sensor]:
        if self._sensors is not None:
            return list(self._sensors)
        from flopwatch.backends import open_sensors

        cfg = self.config
        out: list[Sensor] = []
        for spec in cfg.sensors:
            opts: dict[str, Any] = {}
            if spec.startswith(("replay:", "prometheus:")):  # prometheus: with start=/end= plays history back
                opts["speed"] = cfg.speed
            if spec.startswith("sim:"):
                opts["seed"] = cfg.seed
                if cfg.duration_s is not None and math.isfinite(cfg.duration_s):
                    # virtual time runs ahead of the real clock: date the simulated session so that it ends
                    # now, so no row lies in the future (a verifier's window ends at its own clock)
                    opts["wall0"] = time.time() - cfg.duration_s
                if cfg.schedule is not None:
                    opts["schedule"] = str(cfg.schedule)  # the simulator reads JSON/TOML schedules itself
            out.extend(open_sensors(spec, **opts))
        return out

    def stop(self, reason: str = "stopped") -> None:
        """Ask the daemon to finish (thread- and signal-safe)."""
        self._stop.set()
        self._stop_reason = reason
        for sampler in self.samplers:
            sampler.request_stop()

    def _fan_out(self, item: Reading | Gap) -> None:
        for sink in self._sinks:
            sink(item)

    def _sink(self, item: Reading | Gap) -> None:
        try:
            acc = self.accounts.get(item.device)
            if acc is None:
                return
            with self._lock:
                if isinstance(item, Gap):
                    acc.on_gap(item)
                else:
                    acc.on_reading(item)
                t = item.t_s
                if self._next_cp is None:
                    self._next_cp = t + self.config.checkpoint_s
                elif t >= self._next_cp:
                    self.checkpoint()
                    self._next_cp = t + self.config.checkpoint_s
                if self._next_head is None:
                    self._next_head = t + self.config.head_interval_s
                elif t >= self._next_head and self.ledger is not None:
                    self.ledger.sign_head()  # a batch: one signature covers every row since the last head
                    self._next_head = t + self.config.head_interval_s
        except LedgerError as e:
            # The ledger cannot be written: stop rather than measure without a record.
            self.fatal = e
            self.stop(f"ledger error: {e}")
        except Exception as e:  # noqa: BLE001 - surfaced after the run; sampling must stop cleanly
            self.fatal = e
            self.stop(f"internal error: {type(e).__name__}: {e}")

    def _make_samplers(self, sensors: list[Sensor], sinks: list[Any]) -> None:
        """One sampler per device (one for all on a virtual clock), with the jitter seeds in force known before
        the start row records them."""
        from flopwatch.telemetry.sampler import Sampler

        cfg = self.config
        virtual = any(isinstance(s.clock, VirtualClock) for s in sensors)
        groups = [sensors] if virtual or len(sensors) == 1 else [[s] for s in sensors]
        seed = cfg.jitter_seed
        if seed is None and virtual:
            seed = 0x71775E + cfg.seed  # a simulated run is reproducible: its jitter follows its seed
        self.samplers = [
            Sampler(
                g,
                cfg.sample_hz,
                sinks=sinks,
                duration_s=cfg.duration_s,
                jitter=None if cfg.sample_jitter == 1.0 else cfg.sample_jitter,  # None: 1, or 0 for a replay
                jitter_seed=None if seed is None else seed + i,
            )
            for i, g in enumerate(groups)
        ]
        # the seeds in force (ledger rows may carry them as ``jitter_seed``: every instant can be regenerated)
        self.jitter_seeds = {s.info().device_id: sm.jitter_seed for sm in self.samplers for s in sm.sensors}

    def _sample(self) -> str:
        """Run the samplers until every one has finished; returns the end reason."""
        if self._stop.is_set():
            for sampler in self.samplers:
                sampler.request_stop()
        if len(self.samplers) == 1:
            reasons = [self.samplers[0].run().end_reason]
        else:
            for sampler in self.samplers:
                sampler.start()
            while not all(sampler.wait(0) for sampler in self.samplers):
                crashed = [x.exception for x in self.samplers if x.exception is not None]
                if crashed and not self._stop.is_set():  # as in the single-sampler case: stop everything
                    self.stop(f"internal error: {type(crashed[0]).__name__}: {crashed[0]}")
                time.sleep(0.05)  # short sleeps: the main thread stays responsive to signals
            for sampler in self.samplers:
                if sampler.exception is not None and self.fatal is None:
                    self.fatal = sampler.exception
            reasons = [sampler.stats.end_reason for sampler in self.samplers]
        return self._stop_reason or "; ".join(dict.fromkeys(r for r in reasons if r)) or "stopped"

    def _add_device(self, s: Sensor, settings: AccountSettings, ports: AccountPorts) -> None:
        info = s.info()
        dev = info.device_id
        caps = list(info.capabilities)
        self.sensor_info[dev] = {
            "device": dev,
            "kind": info.kind,
            "name": info.name,
            "simulated": info.simulated,
            "fingerprint": dict(info.fingerprint),
            "capabilities": caps,
            # a sensor that plays recorded history back (prometheus: with start=/end=) measures no device now
            "replayed": getattr(s, "history", None) is not None,
        }
        spec = device_spec(info)
        if spec is not None:
            self._peaks[dev] = {str(k): float(v) for k, v in spec.peak_flops.items()}
        # what the sensor sees at the rate in force (flopwatch.sensor_timing): its blind share goes to every
        # row's unobserved time; an inadequate rate (or unknown timing) blocks "below" (see assess)
        chk = self.sampling_checks[dev] = _sampling_check(info, self.config.sample_hz)
        ctx = DeviceContext(
            device=dev,
            name=info.name,
            kind=info.kind,
            simulated=info.simulated,
            # DRAM traffic: bytes/s from the sensor, or GPM bandwidth utilisation × the datasheet bandwidth
            has_dram="dram_bytes_per_s" in caps or ("dram_bw_util" in caps and spec is not None),
            spec=spec,
            unobserved_fraction=chk.unobserved_fraction,
        )
        if info.name:
            self._names[dev] = str(info.name)
        t0 = self._restored.get(dev)
        # the exporter reads the account's totals at scrape: counters continue from the checkpointed totals
        self.accounts[dev] = DeviceAccount(ctx, settings, ports, t0)

    def run(self, *, install_signals: bool = True) -> MonitorResult:
        cfg = self.config
        self._stop_reason = ""
        self._load_profile()
        # The port first: a port in use is a configuration error, found before anything is written.
        if cfg.metrics_port:
            self.metrics_port = self.metrics.start(cfg.metrics_port, cfg.metrics_addr)
            log.info("metrics on http://%s:%d/metrics", cfg.metrics_addr, self.metrics_port)
        old_handlers: dict[int, Any] = {}
        trace_writer = None
        led: Ledger | None = None
        try:
            self.ledger = led = Ledger(
                cfg.ledger,
                key_path=cfg.key_path,
                public_key_path=cfg.public_key_path,
                new_chain=cfg.new_chain,
                key_explicit=cfg.key_path is not None,
            )
            rec = recover(led, session_id=self.session_id)
            self._restored = rec.totals
            for row in rec.rows:
                n = self._recovered_rows.get(row.device, 0)
                self._recovered_rows[row.device] = n + 1
            self._restore_window(led)
            if install_signals and threading.current_thread() is threading.main_thread():
                for sig in (signal.SIGTERM, signal.SIGINT):
                    old_handlers[sig] = signal.signal(sig, lambda s, f: self.stop(signal.Signals(s).name))
            sensors = self._open_sensors()  # last: a replay clock starts running here
            if self.on_start is not None:
                self.on_start()
            _log_dating(sensors)
            if cfg.duration_s is None and any(
                isinstance(s.clock, VirtualClock) and s.info().kind == "sim" for s in sensors
            ):
                # Virtual time never waits: without a bound a simulator idling forever would spin.
                # (A replay on a virtual clock stops by itself at the end of its trace.)
                raise ConfigError(
                    "sensors on a virtual clock (sim:) need --duration (seconds of simulated time)",
                    field="duration_s",
                )
            settings = AccountSettings(
                session_id=self.session_id,
                poll_s=cfg.poll_s,
                util_threshold=cfg.util_threshold,
                start_polls=cfg.start_polls,
                end_polls=cfg.end_polls,
                sample_hz=cfg.sample_hz,
                busy_power_margin_w=cfg.busy_power_margin_w,
                sensor_fault_s=cfg.sensor_fault_s,
                idle_power_w=self.idle_power_w,
                threshold_flops=cfg.threshold_flops,
                profile_sha256=self.profile_sha256,
                declared_dtype=cfg.dtype,
                window_s=cfg.checkpoint_s,
            )
            ports = AccountPorts(
                assess=self.assess,
                emit_row=self._emit_row,
                checkpoint=lambda reason: self.checkpoint(reason),
            )
            for s in sensors:
                self._add_device(s, settings, ports)
            for d in {*self._names, *self.accounts, *self._restored}:
                self.window.envelopes[d] = self._envelope(d)
            self.metrics.set_info(
                profile_sha256=self.profile_sha256 or "none",
                model=getattr(self.profile, "model_name", None) or "none",
                sensors=",".join(sorted({i["kind"] for i in self.sensor_info.values()})),
                simulated=str(any(i["simulated"] for i in self.sensor_info.values())).lower(),
                ledger_key=led.public_key_path.name,
            )
            self._update_window()
            # the samplers before the start row: the jitter seeds in force are part of the context it records
            self._sinks = [self._sink]
            self._make_samplers(sensors, [self._fan_out])
            for dev, acc in self.accounts.items():
                acc.context = self.row_context(dev)
            start_row = {
                "session_id": self.session_id,
                "wall": time.time(),
                "version": __version__,
                "host": socket.gethostname(),
                "pid": os.getpid(),
                "config": cfg.to_dict(),
                "profile_sha256": self.profile_sha256,
                "model": getattr(self.profile, "model_name", None),
                "idle_power_w": self.idle_power_w,
                "sensors": list(self.sensor_info.values()),
                "context": self.context(),
            }
            led.append("start", start_row)
            self.window.started(start_row)  # as a verifier reads it back
            # the first head, then one every head_interval_s; witnesses fetch it at GET /head
            led.sign_head()
            self.metrics.serve_ledger(
                lambda: h.to_dict() if (h := led.latest_head) is not None else None, led.consistency
            )
            if cfg.keep_trace is not None:
                from flopwatch.telemetry.writer import TraceWriter

                trace_writer = TraceWriter(
                    cfg.keep_trace,
                    {
                        "sensor": ",".join(cfg.sensors),
                        "simulated": any(i["simulated"] for i in self.sensor_info.values()),
                    },
                )
                writer = trace_writer

                def keep(item: Reading | Gap) -> None:
                    with self._lock:  # samplers of several devices write to one file
                        writer(item)

                self._sinks.append(keep)
            end_reason = self._sample()
            for s in sensors:
                try:
                    s.close()
                except Exception:  # noqa: BLE001 - closing must not lose the ledger rows below
                    pass
            with self._lock:
                for acc in self.accounts.values():
                    if acc.open is not None and acc.last is not None:
                        acc.close(acc.last.t_s, status="interrupted", cut=f"the daemon stopped: {end_reason}")
                self.checkpoint(reason=f"stop: {end_reason}")
                led.append("stop", {"session_id": self.session_id, "wall": time.time(), "reason": end_reason})
                led.sign_head()
            log.info("monitor stopped: %s", end_reason)
            if self.fatal is not None:
                raise self.fatal
            return MonitorResult(
                session_id=self.session_id,
                end_reason=end_reason,
                workloads=list(self.workloads),
                totals={d: a.totals.derived() for d, a in self.accounts.items()},
                ledger_head=led.head(),
                metrics_port=self.metrics_port,
            )
        finally:
            if trace_writer is not None:
                trace_writer.close()
            for sig, h in old_handlers.items():
                signal.signal(sig, h)
            self.metrics.stop()
            if led is not None:
                led.close()


def _sampling_check(info: SensorInfo, rate_hz: float) -> Any:
    """Is ``rate_hz`` enough for this sensor (flopwatch.sensor_timing)? An inadequate rate is logged; the
    check's ``warnings`` are what a row must carry so that it is never "below"."""
    from flopwatch.sensor_timing import check_sampling, sensor_kind_of

    chk = check_sampling(info.spec_key or info.name or info.device_id, sensor_kind_of(info.kind), rate_hz)
    if not chk.adequate:
        for w in chk.warnings:
            log.warning("%s: %s", info.device_id, w)
    return chk


def _recorded_kind(info: dict[str, Any]) -> str:
    """The sensor kind a row's context records: a playback of recorded history says so (``replay of …``), so
    that a verifier flags it as it flags ``replay:`` (issue 21 item 6)."""
    kind = str(info.get("kind"))
    return f"replay of {kind} history" if info.get("replayed") else kind


def _seed_in_force(seeds: dict[str, int | None], configured: int | None) -> Any:
    vals = set(seeds.values())
    if not seeds:
        return configured
    return next(iter(vals)) if len(vals) == 1 else dict(sorted(seeds.items()))


def _log_dating(sensors: list[Sensor]) -> None:
    """Say once how the rows of a replay or a simulation are dated (their wall times are not a live clock's)."""
    from flopwatch.telemetry.sensors.replay import ReplaySensor, dating

    seen: set[int] = set()
    for s in sensors:
        if id(s.clock) in seen:
            continue
        seen.add(id(s.clock))
        if isinstance(s, ReplaySensor):
            log.info("%s: %s", s.info().name, dating(s.clock))
        elif isinstance(s.clock, VirtualClock) and s.info().simulated:
            t0 = time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(s.clock.wall_time() - s.clock.now()))
            log.info(
                "simulated device on a virtual clock: t = 0 s is dated %s UTC (every reading simulated)", t0
            )
