"""dcgm-exporter series in Prometheus as a sensor: ``prometheus:URL`` (live) or with ``start``/``end`` (history).

Spec: ``prometheus:http://prom:9090?match={Hostname="node-1"}&gpu=GPU-…`` — the URL of the Prometheus HTTP API,
then optional query parameters (removed before any request is sent):

* ``match``: label matchers that pick GPUs (default: all); ``gpu``: one ``UUID`` (or an index in UUID order);
* ``operated=verifier``: the verifier runs this Prometheus and its scrapes (sensor kind ``prometheus-verifier``);
  without it the rows are the operator's series and never "below" (:mod:`flopwatch.sensor_timing`);
* ``start``, ``end`` (RFC 3339 or Unix seconds): play that stretch of history back like ``replay:``
  (sample-and-hold; at ``--speed`` on a paced virtual clock that never skips a tick, without one in real time,
  or on the clock passed in) from its raw samples, every series of the GPU merged in time (dcgm-exporter starts
  a new series whenever a pod label changes; ``step`` is accepted for older specs, no longer needed), so
  ``record`` → trace → ``detect`` and ``monitor`` work on a fleet's past. Without them every read is an instant
  query: the value of the latest scrape, so reading faster than the scrape interval repeats values. Either way
  the energy counter holds between scrapes and then steps by a whole scrape's energy: the monitor judges such a
  step over the time since the counter last changed
  (:func:`flopwatch.telemetry.plausibility.check_counter_step`), not over the reading interval.

One sensor per GPU (``UUID``). Units are converted here, once: mJ → J, % → ratio, DRAM_ACTIVE × the device's
peak bandwidth → B/s. The HTTP client and the metric names are :mod:`flopwatch.telemetry.prom_client` and
:mod:`flopwatch.telemetry.dcgm_metrics` (standard library and numpy only), imported lazily; the fleet estimator
(:mod:`flopwatch.fleet`) reads through the same client.
"""

from __future__ import annotations

import bisect
import json
import math
import time
import urllib.parse
from collections.abc import Mapping, Sequence
from typing import Any

from flopwatch.errors import InputError, SensorError, SensorUnavailable
from flopwatch.sensor_timing import VERIFIER_PROMETHEUS
from flopwatch.telemetry.schema import Reading
from flopwatch.telemetry.sensors.base import Clock, MonotonicClock, ScaledClock, SensorInfo

_LOOKBACK_S = 300.0  # Prometheus's default lookback: a live GPU has a sample at most this old


def parse_spec(arg: str) -> tuple[str, dict[str, str]]:
    """(base URL, options) of a ``prometheus:`` spec argument."""
    if not arg:
        raise InputError(
            "prometheus needs a URL: prometheus:http://HOST:9090[?match={...}&gpu=UUID]", field="sensor"
        )
    u = arg if "://" in arg else "http://" + arg
    try:
        p = urllib.parse.urlsplit(u)
        p.port  # noqa: B018 - raises ValueError on a port that is not a number in 0–65535
    except ValueError as e:
        raise InputError(f"malformed prometheus URL {arg[:80]!r} ({e})", field="sensor") from None
    opts = {k: v[-1] for k, v in urllib.parse.parse_qs(p.query, keep_blank_values=False).items()}
    unknown = set(opts) - {"match", "gpu", "start", "end", "step", "operated"}
    if unknown:
        raise InputError(f"unknown prometheus sensor option(s): {', '.join(sorted(unknown))}", field="sensor")
    if opts.get("operated", "verifier") != "verifier":
        raise InputError(f"operated= takes 'verifier', got {opts['operated'][:40]!r}", field="sensor")
    return urllib.parse.urlunsplit((p.scheme, p.netloc, p.path, "", "")), opts


class PrometheusSensor:
    """One GPU's dcgm-exporter series, read live (instant queries) or played back from a range."""

    def __init__(
        self,
        client: Any,
        uuid: str,
        matchers: str = "",
        *,
        clock: Clock | None = None,
        history: Mapping[str, tuple[list[float], list[float]]] | None = None,
        labels: Mapping[str, str] | None = None,
        speed: float | None = None,
        end: float | None = None,
    ) -> None:
        from flopwatch.devices import resolve

        self.client = client
        self.uuid = uuid
        self.matchers = ",".join(x for x in (matchers, f"UUID={json.dumps(uuid)}") if x)
        self.labels = dict(labels or {})
        self.history = dict(history) if history is not None else None
        self.spec = resolve(self.labels.get("modelName"))
        if self.history is not None:
            t0 = min((v[0][0] for v in self.history.values() if v[0]), default=0.0)
            last = max((v[0][-1] for v in self.history.values() if v[0]), default=0.0)
            self._t_end = last if end is None else max(last, end)  # the range asked: its last scrape is held
            self._clock: Clock = clock or _history_clock(speed, t0)
        else:
            self._clock = clock or MonotonicClock()
        self.finished = False
        self.simulated = False  # set by open_prometheus when the history carries flopwatch's simulated marker
        self.verifier_operated = False  # set by open_prometheus from the spec's operated=verifier

    @property
    def clock(self) -> Clock:
        return self._clock

    def info(self) -> SensorInfo:

        caps = ["power_w", "energy_j", "util", "sm_clock_mhz", "temp_c"]
        if self.spec is not None:
            caps.append("dram_bytes_per_s")
        return SensorInfo(
            # who runs the Prometheus decides whether its series can certify a "below" (flopwatch.sensor_timing)
            kind=VERIFIER_PROMETHEUS if self.verifier_operated else "prometheus",
            device_id=self.uuid,
            name=f"{self.labels.get('modelName', 'GPU')} on {self.labels.get('Hostname', '?')} via {self.client.display_url}",
            fingerprint={
                k: v
                for k, v in {
                    "model": self.labels.get("modelName"),
                    "hostname": self.labels.get("Hostname"),
                    "uuid": self.uuid,
                    "prometheus": self.client.display_url,
                }.items()
                if v
            },
            capabilities=tuple(caps),
            spec_key=None if self.spec is None else self.spec.key,
            simulated=self.simulated,
        )

    def _values_now(self) -> tuple[dict[str, float], float]:
        from flopwatch.telemetry import dcgm_metrics as M

        if self.history is not None:
            t = self._clock.now()
            if t > self._t_end:
                from flopwatch.telemetry.sensors.replay import TraceEnded

                self.finished = True
                raise TraceEnded(f"prometheus history of {self.uuid} ended at {self._t_end:.0f}")
            out = {}
            for name, (ts, vs) in self.history.items():
                i = bisect.bisect_right(ts, t) - 1
                if i >= 0 and t - ts[i] <= _LOOKBACK_S:
                    out[name] = vs[i]
            return out, t
        names, now = "|".join(M.METRICS), time.time()
        # the raw samples of the lookback, merged as history is (round 10, `sensor-twins` live): one instant value
        # per series let the last series answered stand for the GPU (a second exporter's power and counter, an idle
        # MIG instance's activity); the newest merged sample is the reading, two exporters a gap (their time blind)
        try:
            res = self.client.query_matrix(
                f'{{__name__=~"{names}",{self.matchers}}}[{int(_LOOKBACK_S)}s]', now
            )
            by: dict[str, list[Any]] = {}
            for x in res:
                by.setdefault(x.labels.get("__name__", ""), []).append(x)
            merged = {n: _merge(ss, n if n in (M.POWER, M.ENERGY) else "") for n, ss in by.items()}
        except InputError as e:
            raise SensorError(str(e)) from None
        # a series that stopped (its exporter gone) has no staleness marker among raw samples: its newest sample
        # counts only while no older than twice its mean scrape spacing (an instant query dropped it at once)
        out = {
            n: m[1][-1]
            for n, m in merged.items()
            if m
            and m[1]
            and now - m[0][-1]
            <= (2 * (m[0][-1] - m[0][0]) / (len(m[0]) - 1) if len(m[0]) > 1 else _LOOKBACK_S)
        }
        if not out:
            raise SensorError(f"no current dcgm-exporter sample for {self.uuid}")
        return out, now

    def read(self) -> Reading:
        from flopwatch.telemetry import dcgm_metrics as M

        v, wall = self._values_now()

        def g(name: str) -> float | None:
            x = v.get(name)
            return None if x is None or not math.isfinite(x) else x

        util = g(M.GR_ACTIVE)
        if util is None and g(M.GPU_UTIL) is not None:
            util = g(M.GPU_UTIL) / 100.0  # type: ignore[operator]
        dram = g(M.DRAM)
        extra = {
            k: x
            for k, x in (
                # two views of one tensor pipe (HMMA: one precision class of it): the larger (round 9)
                ("tensor_util", max((x for x in (g(M.HMMA), g(M.TENSOR)) if x is not None), default=None)),
                ("fp32_util", g(M.FP32)),
                ("sm_active", g(M.SM_ACTIVE)),
                ("dram_active", dram),
                ("power_limit_w", g(M.POWER_LIMIT)),
            )
            if x is not None
        }
        energy = g(M.ENERGY)
        return Reading(
            t_s=self._clock.now(),
            wall_time=wall,
            device=self.uuid,
            power_w=g(M.POWER),
            energy_j=None if energy is None else energy / 1000.0,  # mJ → J
            util=util,
            dram_bytes_per_s=None
            if dram is None or self.spec is None
            else dram * self.spec.mem_bw_bytes_per_s,
            sm_clock_mhz=g(M.SM_CLOCK),
            temp_c=g(M.GPU_TEMP),
            extra=extra,
        )

    def close(self) -> None:
        pass


def open_prometheus(
    arg: str | None, *, clock: Clock | None = None, speed: float | None = None
) -> list[PrometheusSensor]:
    """Sensors for the GPUs a ``prometheus:`` spec names (see the module docstring)."""
    from flopwatch.telemetry import dcgm_metrics as M
    from flopwatch.telemetry.prom_client import PrometheusClient
    from flopwatch.telemetry.timespec import parse_duration, parse_time, selector_matchers

    url, opts = parse_spec(arg or "")
    client = PrometheusClient(url, timeout_s=10.0, retries=1)
    m = selector_matchers(opts["match"]) if "match" in opts else ""
    hist = "start" in opts or "end" in opts
    if hist:
        if not ("start" in opts and "end" in opts):
            raise InputError("history needs both start= and end=", field="sensor")
        t0, t1 = parse_time(opts["start"], field="start"), parse_time(opts["end"], field="end")
        parse_duration(opts.get("step", "15s"), field="step")  # checked, no longer needed (raw samples)
    else:
        t1 = time.time()
        t0 = t1 - _LOOKBACK_S
    # GPUs from the power gauge or the energy counter: a GPU without a gauge was left out, silently (round 10)
    ref = f'{{__name__=~"{M.POWER}|{M.ENERGY}"{"," + m if m else ""}}}'
    try:
        uuids = client.label_values("UUID", ref, t0, t1)
    except InputError as e:
        raise SensorUnavailable(str(e)) from None
    if "gpu" in opts:
        want = opts["gpu"]
        if want.isdigit() and int(want) < len(uuids):
            uuids = [uuids[int(want)]]
        elif want in uuids:
            uuids = [want]
        else:
            raise InputError(f"no GPU {want!r} among {len(uuids)} found", field="sensor")
    if not uuids:
        raise SensorUnavailable(
            f"{client.display_url}: no {M.POWER} or {M.ENERGY} series with a UUID for {{{m}}}"
        )
    # a GPU whose series carry no UUID cannot be named here: it was left out, silently (round 10, `sensor-no-uuid`)
    if "gpu" not in opts and client.label_values("__name__", ref[:-1] + ',UUID=""}', t0, t1):
        raise InputError(f"{client.display_url}: {M.POWER} or {M.ENERGY} series without a UUID label for {{{m}}}: "
                         "this sensor reads GPUs by UUID (narrow match=, or use fleet estimate)", field="sensor")  # fmt: skip
    simulated = bool(client.label_values("__name__", '{__name__="flopwatch_simulated"}', t0 - 600, t1))
    out = []
    shared = clock
    for u in uuids:
        sel = ",".join(x for x in (m, f"UUID={json.dumps(u)}") if x)
        last = [
            x
            for n in (M.POWER, M.ENERGY)
            for x in client.query(f"last_over_time({n}{{{sel}}}[{int(max(t1 - t0, 1))}s])", at=t1)
        ]
        labels = dict(last[0].labels) if last else {}
        # a GPU has one model: two claims (the first series answered, sorted, was kept: a less capable one) refused
        if len(models := sorted({x.labels.get("modelName", "") for x in last})) > 1:
            raise InputError(f"GPU {u} reports {len(models)} models ({' | '.join(models)}): its device cannot be "
                             "told", field="sensor")  # fmt: skip
        history = None
        if hist:
            history = {}
            # raw samples (a range selector) rather than a range query: no lookback echo of a series that ended,
            # no point limit on a long history; closed at t0 (+1 ms: Prometheus 3 ranges are left-open)
            rng = f"[{int(round((t1 - t0) * 1000)) + 1}ms]"
            for name in M.METRICS:
                merged = _merge(
                    client.query_matrix(f"{name}{{{sel}}}{rng}", t1),
                    name if name in (M.POWER, M.ENERGY) else "",
                )
                if merged is not None:
                    history[name] = merged
            if shared is None:  # like replay: paced virtual time at --speed (exact), else real time from t0
                shared = _history_clock(speed, t0)
        sensor = PrometheusSensor(
            client, u, m, clock=shared, history=history, labels=labels, speed=speed, end=t1 if hist else None
        )
        sensor.simulated = simulated
        sensor.verifier_operated = opts.get("operated") == "verifier"
        out.append(sensor)
    return out


def _history_clock(speed: float | None, t0: float) -> Clock:
    """Paced virtual time at ``speed`` (a sampler never skips a tick; ``inf``: as fast as it goes), as
    :mod:`~flopwatch.telemetry.sensors.replay` plays a trace; without a speed, real time starting at ``t0``."""
    from flopwatch.telemetry.sensors.replay import PacedClock

    if speed is None:
        return ScaledClock(1.0, t0=t0, wall0=t0, lazy=True)
    return PacedClock(speed, t0=t0, wall0=t0)


def _merge(series: Sequence[Any], whole_gpu: str = "") -> tuple[list[float], list[float]] | None:
    """One GPU's samples of one metric from all its series, in time order (a repeated time: the first kept).

    ``whole_gpu``: the metric's name where it is the whole GPU's (power, the energy counter). Its series may follow
    each other (a job change) or repeat each other (MIG instances: the same scrapes, the same values), never
    interleave or disagree: two exporters of one GPU, one under-reporting, are refused (round 9, `sensor-twins`:
    the merged counter and power alternated between them, 8 % of an honest GPU's energy, no implausible reading)."""
    import numpy as np

    if not series:
        return None
    t = np.concatenate([x.t for x in series])
    v = np.concatenate([x.v for x in series])
    order = np.argsort(t, kind="stable")
    t, v = t[order], v[order]
    keep = np.ones(len(t), dtype=bool)
    keep[1:] = np.diff(t) > 0
    if whole_gpu and len(series) > 1:
        clash = bool(np.any(~keep[1:] & (np.diff(v) != 0)))  # one scrape, two values
        u = t[keep]
        for x in series:  # another series' sample inside a series' regular scrape interval: interleaved
            dt = np.diff(x.t)
            inside = np.searchsorted(u, x.t[1:], "left") - np.searchsorted(u, x.t[:-1], "right")
            clash |= len(dt) > 0 and bool(np.any((dt <= 2 * np.median(dt)) & (inside > 0)))
        if clash:
            raise InputError(
                f"{len(series)} series of {whole_gpu} for one GPU interleave or disagree at one scrape "
                "(two exporters of one GPU?): its energy cannot be told",
                field="sensor",
            )
    # activities of series at one scrape (MIG instances: each its own share of the GPU) were the first series'
    # (sorted by labels: an idle instance read for a busy GPU, round 10 `sensor-mig`); the largest bounds them all
    return t[keep].tolist(), (v[keep] if whole_gpu else np.fmax.reduceat(v, np.flatnonzero(keep))).tolist()
