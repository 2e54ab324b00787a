"""A row's recorded context (its sensor, sampling rate, peak override, profile hash) checked against the
sensor-timing table and the verifier's own context: the warnings it earns and the sampling checks that give
its blind share (:func:`flopwatch.estimate.verdict.assess` reads both; so do the monitor's rows); and the same
blind share of a window's time outside its rows, per device from the daemon's ``start`` rows
(:func:`unseen_outside`: ``flopwatch verdict`` and the live gauge)."""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from flopwatch.devices import DeviceSpec, resolve
from flopwatch.estimate.observe import CONTEXT_KEYS, recorded_kinds
from flopwatch.estimate.tighten import RATE_WARNING
from flopwatch.sensor_timing import (
    SamplingCheck,
    check_sampling,
    is_replay_kind,
    least_observed,
    operator_series_warning,
    sensor_kind_of,
    sensor_timing,
)
from flopwatch.units import finite

#: Slowest sampling a row may rest on: the Jetson study sampled at 2 Hz and its detector polls every 1.5 s
#: (Fowler 2026); under 1 Hz a workload shorter than the detector's two-poll start leaves no sample.
MIN_SAMPLE_RATE_HZ = 1.0


def sampling_checks(
    context: Mapping[str, Any] | None, device: DeviceSpec | str | None
) -> list[SamplingCheck]:
    """:func:`flopwatch.sensor_timing.check_sampling` of each sensor kind the row records, at its recorded
    ``sample_rate_hz``, on ``device`` (empty without a device). A sensor the timing table does not know on a
    device model it knows is kept: its check is not adequate and leaves the whole run unobserved (round 5: a kind
    spelled so that the table misses it, or a model the table has no entry for, must not read as "fully
    observed"); on a device id that names no model (``gpu0``) it is left out (the flat rule applies). Without a
    recorded rate only cumulative counters are checked (their blind share does not depend on the rate: read at
    their own need); :func:`context_warnings` names the others."""
    ctx = dict(context or {})
    rate = _rate(ctx)
    key = device.key if isinstance(device, DeviceSpec) else device
    if not key:
        return []
    known_device = isinstance(device, DeviceSpec) or resolve(str(key)) is not None
    out = []
    for kind in recorded_kinds(ctx):
        sensor = sensor_kind_of(kind)
        if rate is None:
            timing = sensor_timing(str(key), sensor)
            if timing is not None and timing.cumulative:
                out.append(check_sampling(str(key), sensor, timing.min_rate_hz))
            continue
        chk = check_sampling(str(key), sensor, rate)
        if chk.timing is not None or known_device:  # a device id that names no model ("gpu0"): the flat rule
            out.append(chk)
    return out


def _rate(ctx: Mapping[str, Any]) -> float | None:
    """The recorded sampling rate, None when absent or ≤ 0 (a rate of 0 dropped the blind share, round 8)."""
    return r if (r := finite(ctx.get("sample_rate_hz"))) is not None and r > 0 else None


def rateless_point_sensors(ctx: Mapping[str, Any], device: DeviceSpec | str | None) -> list[str]:
    """Sensor kinds a row records without a sampling rate whose coverage depends on it (a point sensor, or one
    the timing table does not know), on a device model the verifier knows."""
    if _rate(ctx) is not None or device is None:
        return []
    spec = device if isinstance(device, DeviceSpec) else resolve(str(device))
    if spec is None:
        return []
    kinds = ((k, sensor_timing(spec.key, sensor_kind_of(k))) for k in recorded_kinds(ctx))
    return [k for k, t in kinds if t is None or not t.cumulative]


def context_warnings(
    context: Mapping[str, Any] | None,
    verifier_context: Mapping[str, Any] | None,
    *,
    min_rate_hz: float = MIN_SAMPLE_RATE_HZ,
    device: DeviceSpec | str | None = None,
) -> list[str]:
    """Named warnings for a row's recorded context: a peak override, a replay/simulated sensor, too slow a rate,
    and every key of :data:`~flopwatch.estimate.observe.CONTEXT_KEYS` the verifier set that the row records
    differently (a key the verifier leaves None is not compared).

    "Too slow" is per device and sensor where the sensor-timing table knows the pair (``device`` given and
    ``sensor_kind`` recorded: below the rate that reads every update of a point sensor, or the detector's
    poll of a counter); a recorded sensor the table does not know for the device, or a sensor kind recorded
    without its sampling rate, is a warning (its blind time is unknown); without a sensor kind, the flat
    ``min_rate_hz``."""
    out: list[str] = []
    ctx = dict(context or {})
    if ctx.get("peak_override"):
        out.append(f"peak override in force when the row was made ({ctx['peak_override']!s}): never 'below'")
    for kind in recorded_kinds(ctx):  # one kind, or the daemon's list of them
        if (w := operator_series_warning(kind)) is not None:
            out.append(w)
        if is_replay_kind(kind):
            out.append(
                f"sensor kind {kind!r} is a replay or simulation, not a measurement of the device judged"
            )
            break
    rate = finite(ctx.get("sample_rate_hz"))
    checks = sampling_checks(ctx, device)
    if checks:
        out.extend(
            (
                f"{RATE_WARNING}: {w}"
                if c.timing is not None
                else w
                if is_replay_kind(c.sensor)
                else f"sensor timing unknown: {w}; its blind time cannot be bounded, never 'below'"
            )
            for c in checks
            if not c.adequate
            for w in c.warnings[:1]
        )
    if rate is not None and (rate <= 0 or (not checks and rate < min_rate_hz)):
        out.append(f"sampling rate {rate:.3g} Hz is below the {min_rate_hz:g} Hz this verdict needs")
    rateless = rateless_point_sensors(ctx, device)
    if rateless:
        out.append(
            f"sensor kind {', '.join(rateless)} recorded without a sampling rate: the share of the run a point "
            "sensor (or one the timing table does not know) saw is unknown, never 'below'"
        )
    if verifier_context is not None:
        if context is None:
            out.append("the row records no context (profile hash, peaks, sensor): it cannot be checked")
        else:
            for k in CONTEXT_KEYS:
                want = verifier_context.get(k)
                if want is None:
                    continue
                got = ctx.get(k)
                if got != want:
                    out.append(f"context {k}: the row's {got!r} differs from the verifier's {want!r}")
    return out


def start_row_sensors(payload: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    """The sensors a daemon's ``start`` row lists, each naming its device; anything else (a ``sensors`` that is not a
    list, an entry that is not a map or names no device) lists none: its device is then judged as one whose sensor
    was not recorded, never a traceback."""
    sensors = payload.get("sensors")
    return (
        [s for s in sensors if isinstance(s, Mapping) and s.get("device")]
        if isinstance(sensors, list)
        else []
    )


def start_row_contexts(payload: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """Per device a daemon's ``start`` row lists, the context its sensor was read in (its kind — a playback of
    recorded history as ``replay of … history``, as the rows record it — and the session's sampling rate)."""
    ctx = payload.get("context") if isinstance(payload.get("context"), Mapping) else {}
    out = {}
    for s in start_row_sensors(payload):
        kind = f"replay of {s.get('kind')} history" if s.get("replayed") else s.get("kind")
        out[str(s["device"])] = {"sensor_kind": kind, "sample_rate_hz": ctx.get("sample_rate_hz")}
    return out


def blind_fraction(context: Mapping[str, Any] | None, spec: DeviceSpec) -> tuple[float, str]:
    """The share of time the sensor ``context`` records leaves unseen on ``spec``, and the sensor's name: the
    row's rule (:func:`flopwatch.estimate.verdict.assess`): the most any recorded sensor leaves blind at its rate
    (a sensor the timing table does not know, or a point sensor recorded without a rate: all of it); no sensor
    recorded: the device's least-observed sensor (all of it where the table has none)."""
    ctx = dict(context or {})
    kinds = recorded_kinds(ctx)
    if not kinds:  # as a row naming none: the device's least-observed sensor (round 7)
        if (t := least_observed(spec.key)) is None:
            return 1.0, "an unrecorded sensor (the timing table has none for the device)"
        return t.blind_fraction, f"an unrecorded sensor (judged as {t.sensor}, the least-observed)"
    fr = [c.unobserved_fraction for c in sampling_checks(ctx, spec) if c.sensor != "dcgm-prof"]
    return max(fr + [1.0] * bool(rateless_point_sensors(ctx, spec)), default=1.0), ", ".join(kinds)


def unseen_outside(
    specs: Mapping[str, DeviceSpec | None],
    starts: Sequence[Mapping[str, Any]],
    span: tuple[float, float],
    rows: Iterable[Any],
    no_sensor: Iterable[tuple[float, float]] = (),
) -> dict[str, tuple[float, str | None]]:
    """Per device of ``specs`` (its datasheet, None: unknown), the FLOPs a window's time outside its workload rows
    may hold unseen by its sensor, and the window's note (round 12, `outside-blind`): the energy outside workloads
    is what that sensor measured, so its blind share of that time (:func:`blind_fraction` of the sensor each
    daemon ``start`` row in ``starts`` lists for the device, the most of any session; none listed: as a row naming
    no sensor) is bounded at the fastest format's peak, as a row's unobserved time is
    (:mod:`flopwatch.estimate.sound`). ``span``: the window's (start, end) wall times; ``rows``: its workload rows
    (typed or payloads: each device's bound their own time) and ``no_sensor``: (start, end) of time no sensor ran
    (the restart rule blocks it), both taken out once. A device the verifier's table does not know: inf; no time
    left: 0 and no note. One pass over the rows (the live gauge calls it at every row and checkpoint)."""
    from flopwatch.estimate.sound import device_basis

    def get(r: Any, k: str) -> Any:
        return r.get(k) if isinstance(r, Mapping) else getattr(r, k, None)

    a, b = span
    busy: dict[str, list[tuple[float, float]]] = {d: list(no_sensor) for d in specs}
    for r in rows:
        s, e = finite(get(r, "start_wall")), finite(get(r, "end_wall"))
        if s is not None and e is not None and (d := str(get(r, "device") or "")) in busy:
            busy[d].append((s, e))
    ctxs: dict[str, list[dict[str, Any]]] = {}
    for start in starts:
        for d, c in start_row_contexts(start).items():
            ctxs.setdefault(d, []).append(c)
    out: dict[str, tuple[float, str | None]] = {}
    for device, spec in specs.items():
        seen, reach = 0.0, a
        for s, e in sorted((max(a, s), min(b, e)) for s, e in busy[device] if e > a and s < b):
            seen += max(0.0, e - max(s, reach))  # the union of the busy intervals within the span
            reach = max(reach, e)
        out_s = max(0.0, b - a - seen)
        if out_s <= 0:
            out[device] = (0.0, None)
        elif spec is None:
            out[device] = (math.inf, f"device {device}: {out_s:.4g} s outside workloads on a device the verifier's "
                           "table does not know: no peak bounds what its sensor did not see, the window is unbounded")  # fmt: skip
        else:
            frac, sensor = max(
                (blind_fraction(c, spec) for c in ctxs.get(device) or [{}]), key=lambda x: x[0]
            )
            dev = device_basis(spec)
            flops = frac * out_s * dev.peak_fastest
            out[device] = (flops, (
                f"device {device}: {out_s:.4g} s outside workloads unseen by {sensor} (blind share {frac:.0%}): "
                f"{frac * out_s:.4g} s bounded at peak ({dev.fastest_format}, {dev.peak_fastest / 1e12:.4g} "
                f"TFLOP/s), {flops:.3g} FLOPs"
            ))  # fmt: skip
    return out


__all__ = [
    "MIN_SAMPLE_RATE_HZ",
    "blind_fraction",
    "context_warnings",
    "rateless_point_sensors",
    "sampling_checks",
    "start_row_contexts",
    "start_row_sensors",
    "unseen_outside",
]
