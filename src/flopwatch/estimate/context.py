"""A row's recorded context (its sensor, sampling rate, peak override, profile hash) checked against the
sensor-timing table and the verifier's own context: the warnings it earns and the sampling checks that give
its blind share (:func:`flopwatch.estimate.verdict.assess` reads both; so do the monitor's rows)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from flopwatch.devices import DeviceSpec, resolve
from flopwatch.estimate.observe import CONTEXT_KEYS, recorded_kinds
from flopwatch.estimate.tighten import RATE_WARNING
from flopwatch.sensor_timing import (
    SamplingCheck,
    check_sampling,
    is_replay_kind,
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


__all__ = ["MIN_SAMPLE_RATE_HZ", "context_warnings", "rateless_point_sensors", "sampling_checks"]
