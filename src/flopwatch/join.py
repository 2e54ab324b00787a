"""Stage **join**: match ground-truth workload records to the workloads detected in a telemetry trace, by time.

The stage between :mod:`flopwatch.detect` and the estimators. The records come from a workload runner
(``flopwatch workload run``, the simulator) and know *what* ran and *when* (the timed region, on the host's
monotonic clock and in wall time); the detected segments know *what the device drew*. The joined record carries the
segment's measured fields (``duration_s``, ``energy_j``, ``net_energy_j``, ``mean_util``, ``tb_moved``,
``coverage``), as in Fowler (2026): the estimate sees only telemetry, the record keeps its ground truth.

Only a clean one-to-one match (``join["status"] == "ok"``) gets measured fields. A run split into several segments,
two runs merged into one segment, a segment covering < 90 % of its run, or a run nothing was detected in would hand
the calibration a wrong energy: those records keep the join details but no energy, and each is reported as a
:class:`Mismatch` (as is detected activity no record explains).

``flopwatch run`` and ``flopwatch join TRACE RECORDS`` call the same :func:`join_records`.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, Literal

import numpy as np

from flopwatch.detect import detect_workloads
from flopwatch.errors import InputError
from flopwatch.io import atomic_path
from flopwatch.records import (
    SENSOR_KEYS,
    TELEMETRY_WARNINGS,
    WorkloadRecord,
    append_record,
    load_records,
    telemetry_warnings,
    unmeasured,
)
from flopwatch.telemetry.source import TraceSource, open_source

if TYPE_CHECKING:
    from flopwatch.telemetry.trace import Trace

#: A segment must cover this share of its run's timed region for the run to get the segment's energy.
MIN_OVERLAP_FRAC = 0.9
#: A second segment overlapping more than this share of a run makes the run "split".
SPLIT_FRAC = 0.1

Clock = Literal["monotonic", "wall"]


@dataclass(frozen=True)
class Mismatch:
    """A record or segment the join could not pair one-to-one (``label`` None: a segment without a record)."""

    label: str | None
    kind: str  # "not detected" | "split" | "merged" | "partial" | "unmatched segment" | "failed"
    detail: str

    def to_dict(self) -> dict[str, Any]:
        return {"label": self.label, "kind": self.kind, "detail": self.detail}


@dataclass(frozen=True)
class JoinResult:
    """The joined records (input order; only ``join["status"] == "ok"`` ones carry energy) and the mismatches."""

    records: list[WorkloadRecord]
    mismatches: list[Mismatch]

    @property
    def n_ok(self) -> int:
        return sum(1 for r in self.records if (r.join or {}).get("status") == "ok")


#: The seed's ``timeseries.json`` (Fowler 2026) holds the Orin Nano's VDD_CPU_GPU_CV rail, an INA3221 channel.
_SEED_SENSOR = "ina3221"


def trace_context(metadata: Mapping[str, Any], device: str | None = None) -> dict[str, Any]:
    """The recorded context (:data:`~flopwatch.estimate.observe.CONTEXT_KEYS`) a record made from a trace carries:
    the sensor kind(s) that made it (of ``device`` where the trace lists its devices), its sampling rate and spec,
    and the peak override in force in this process, as a monitor row records them. ``estimate.verdict.assess``
    then applies the sensor-timing table's blind share to the record as to the row (round 7: a record that does
    not say how it was observed is judged at its device's least-observed sensor). The digital twin's read-out is
    recorded as the sensor it emulates, labelled simulated (``sensor_timing.simulated_kind``)."""
    from flopwatch.devices import PEAK_OVERRIDE_ENV
    from flopwatch.sensor_timing import simulated_kind

    devs = [d for d in metadata.get("devices") or [] if isinstance(d, Mapping)]
    mine = [d for d in devs if device is not None and d.get("device_id") == device] or devs
    sensors = [(d.get("kind"), d.get("fingerprint")) for d in mine] or [
        (metadata.get("kind"), metadata.get("fingerprint"))
    ]
    kinds: list[str] = []
    for kind, fp in sensors:
        k = str(kind or "").strip()
        if k.lower() == "sim":
            k = simulated_kind((fp or {}).get("sensor_model") if isinstance(fp, Mapping) else None)
        elif k.lower() == "seed-timeseries":
            k = _SEED_SENSOR
        if k and k not in kinds:
            kinds.append(k)
    # the model the verifier's sensor read is a claim beside the runner's own names (round 13, `join-relabel`: a
    # record naming an A100 joined with an H100's trace was judged as the A100): estimate.sound.device_claims
    models: list[str] = []
    for d in mine or [metadata]:
        fp = d.get("fingerprint") if isinstance(d.get("fingerprint"), Mapping) else {}
        for n in (d.get("spec_key"), d.get("name"), fp.get("model"), fp.get("name")):
            if isinstance(n, str) and n.strip() and n not in models:
                models.append(n)
    ctx: dict[str, Any] = {
        "sensor_device": models or None,
        "sensor_kind": (kinds[0] if len(kinds) == 1 else kinds) or None,
        "sensor_spec": metadata.get("sensor_spec") or metadata.get("source"),
        "sample_rate_hz": metadata.get("rate_hz"),
        "jitter_seed": metadata.get("jitter_seed"),
        "peak_override": os.environ.get(PEAK_OVERRIDE_ENV, "").strip() or None,
    }
    return {k: v for k, v in ctx.items() if v is not None}


def with_context(record: WorkloadRecord, context: Mapping[str, Any] | None) -> WorkloadRecord:
    """``record`` with ``context`` among its keys: the trace's context replaces what the record said of its own
    (the runner that wrote the record did not observe the device; the trace did), and what the record said of its
    own sensor and the trace does not say is dropped (:data:`~flopwatch.records.SENSOR_KEYS`)."""
    extra = {k: v for k, v in record.extra.items() if k not in SENSOR_KEYS}
    return replace(record, extra={**extra, **(context or {})}) if context or extra != record.extra else record


def _times(rec: WorkloadRecord, clock: Clock) -> tuple[float, float]:
    a, b = (
        (rec.start_monotonic_s, rec.end_monotonic_s)
        if clock == "monotonic"
        else (rec.start_wall, rec.end_wall)
    )
    if a is None or b is None:
        raise InputError(
            f"has no {'start_monotonic_s/end_monotonic_s' if clock == 'monotonic' else 'start_wall/end_wall'}: "
            "cannot be joined by time",
            record=rec.label,
            field="start_monotonic_s" if clock == "monotonic" else "start_wall",
        )
    return float(a), float(b)


def _on(seg: Any, device: str | None) -> str:
    """ "on gpu0, " for a segment of a device other than the join's, else nothing."""
    return f"on {seg.device}, " if device is not None and seg.device != device else ""


def join_records(
    records: Sequence[WorkloadRecord],
    detection: Any,
    *,
    t0_s: float,
    device: str | None = None,
    clock: Clock = "monotonic",
    context: Mapping[str, Any] | None = None,
) -> JoinResult:
    """Match each record to the detected segment it overlaps most (one-to-one); see the module docstring.

    ``detection`` is a :class:`flopwatch.detect.Detection` (segments with ``start_s``/``end_s`` relative to the trace
    start). ``t0_s`` is the trace start on ``clock``: the trace's ``t0_monotonic_s`` for records' monotonic
    timestamps, or its first wall time for ``clock="wall"``. Segments of ``device`` are used (all segments when
    none match it). Every record gets the detection's idle power; each joined one (status ``ok``) also
    ``context``, the trace's recorded context (:func:`trace_context`).
    """
    segs = [s for s in detection.segments if device is None or s.device == device]
    # Another device's activity is energy the trace observed too, and which GPU ran a workload is the runner's word
    # (records name no GPU identity the join can check): the device filter may not drop it unnamed (round 11,
    # `device-unclaimed`); it is named below with the unclaimed segments of ``device``.
    elsewhere = [s for s in detection.segments if device is not None and segs and s.device != device]
    segs = segs or list(detection.segments)
    idle_w = (getattr(detection, "idle_power_w_by_device", None) or {}).get(device, detection.idle_power_w)
    # Pass 1: each record's best segment and its own status; pass 2 needs every record to see merges.
    plans: list[tuple[WorkloadRecord, float, float, int | None, str, float, int]] = []
    claimed: dict[int, list[str]] = {}
    split_pieces: dict[int, str] = {}
    for rec in records:
        a, b = _times(rec, clock)
        a, b = a - t0_s, b - t0_s
        overlaps = sorted(
            ((max(0.0, min(b, s.end_s) - max(a, s.start_s)), i) for i, s in enumerate(segs)), reverse=True
        )
        overlaps = [(o, i) for o, i in overlaps if o > 0]
        if not overlaps:
            plans.append((rec, a, b, None, "not detected", 0.0, 0))
            continue
        o, i = overlaps[0]
        n_big = sum(1 for x, _ in overlaps if x > SPLIT_FRAC * (b - a))
        status = "split" if n_big > 1 else ("partial" if o / max(b - a, 1e-9) < MIN_OVERLAP_FRAC else "ok")
        # pieces of a split run (reported as its split): not "unmatched" activity; a segment an ok run only grazes
        # (under SPLIT_FRAC of it) is, or a record stamped to graze a heavy segment hides it (round 10)
        for _, j in overlaps[1:] if status == "split" else ():
            split_pieces.setdefault(j, rec.label)
        claimed.setdefault(i, []).append(rec.label)
        plans.append((rec, a, b, i, status, o / max(b - a, 1e-9), len(overlaps)))

    # Activity no record claims (round 10, `segment-unclaimed`): a record's own timestamps choose its segment, so a
    # heavy run's record stamped on a light segment leaves the heavy one to no record. Energy the verifier's trace
    # observed must reach a verdict: every record of this join names it, and so none of them is "below".
    lone = [(i, s) for i, s in enumerate(segs) if i not in claimed and i not in split_pieces]
    lone += [(-1, s) for s in elsewhere]
    unclaimed = (
        [
            f"the trace holds {len(lone)} segment(s) of activity no record matches "
            f"({sum(max(s.net_energy_j, 0.0) for _, s in lone):.4g} J net, "
            + ", ".join(f"{_on(s, device)}{s.start_s:.1f}–{s.end_s:.1f} s" for _, s in lone[:3])
            + (", …" if len(lone) > 3 else "")
            + "): energy the trace observed that no record's verdict counts"
        ]
        if lone
        else []
    )
    out: list[WorkloadRecord] = []
    problems: list[Mismatch] = []
    for rec0, a, b, i, status, cover, n_overlaps in plans:
        rec = unmeasured(rec0)  # the runner's own numbers of what only telemetry measures never pass the join
        if i is None:
            problems.append(Mismatch(rec.label, "not detected", "no segment overlaps its run"))
            out.append(replace(rec, idle_power_w=idle_w, join={"status": "not detected"}))
            continue
        seg = segs[i]
        others = [x for x in claimed[i] if x != rec.label]
        if others:
            status = "merged"
            problems.append(Mismatch(rec.label, "merged", f"shares a segment with {', '.join(others)}"))
        elif status == "split":
            problems.append(Mismatch(rec.label, "split", f"{n_overlaps} segments overlap its run"))
        elif status == "partial":
            problems.append(Mismatch(rec.label, "partial", f"segment covers {cover:.0%} of its run"))
        measured: dict[str, Any] = {}
        if status == "ok":
            measured = {
                "duration_s": seg.duration_s,
                "energy_j": seg.energy_j,
                "net_energy_j": seg.net_energy_j,
                "mean_util": seg.mean_util,
                "tb_moved": seg.tb_moved,
                "coverage": seg.coverage,
            }
        info = {
            "status": status,
            "segment_start_s": seg.start_s,
            "segment_end_s": seg.end_s,
            "segment_net_energy_j": seg.net_energy_j,
            "run_start_s": a,
            "run_end_s": b,
            "overlap_frac": cover,
            "energy_method": getattr(seg, "method", None),
        }
        seg_warnings = [*(getattr(seg, "warnings", ()) or ()), *unclaimed]
        if status == "ok" and seg_warnings:
            # physically impossible telemetry in the record's segment, or activity no record claims: carried on
            # the record, so every later verdict (`estimate`, `evaluate`) is at most "uncertain"
            measured["extra"] = {**rec.extra, TELEMETRY_WARNINGS: seg_warnings}
        joined = replace(rec, idle_power_w=idle_w, join=info, **measured)
        out.append(with_context(joined, context) if status == "ok" else joined)
    for _, s in lone:
        problems.append(
            Mismatch(
                None,
                "unmatched segment",
                f"activity {_on(s, device)}{s.start_s:.1f}–{s.end_s:.1f} s ({s.duration_s:.1f} s) matches no record",
            )
        )
    return JoinResult(out, problems)


def trace_origin(
    trace: Trace | TraceSource | str | os.PathLike[str],
    records: Sequence[WorkloadRecord],
    clock: str = "auto",
) -> tuple[Clock, float]:
    """The clock to join on and the trace's start on it.

    ``auto``: the host's monotonic clock when the trace has ``t0_monotonic_s`` and every record monotonic
    timestamps (``flopwatch record`` and ``workload run`` on one host), else wall time (UTC; records carry
    ``start_wall``, traces a ``wall_time`` column), which also works across hosts with synchronised clocks.

    ``trace`` is a :class:`Trace`, a trace file or a :class:`TraceSource`: the monotonic origin is metadata; the
    wall origin streams the ``t_s`` and ``wall_time`` columns once (bounded memory, any trace length).
    """
    src = open_source(trace)
    md = src.metadata
    t0m = md.get("t0_monotonic_s")
    has_mono = t0m is not None and all(r.start_monotonic_s is not None for r in records)
    if clock == "monotonic" or (clock == "auto" and has_mono):
        if t0m is None:
            raise InputError("the trace has no t0_monotonic_s: join with --clock wall", field="clock")
        return "monotonic", float(t0m)
    if clock not in ("auto", "wall"):
        raise InputError(f"must be auto, monotonic or wall, got {clock!r}", field="clock")
    first = None if md.get("wall_time_synthetic") else _first_wall(src)
    if first is None:
        raise InputError("the trace has no measured wall time to join records by", field="wall_time")
    wall0 = first[1] - first[0]
    if not math.isfinite(wall0):
        raise InputError("the trace's first wall time is not a number", field="wall_time")
    return "wall", wall0


def _first_wall(src: TraceSource) -> tuple[float, float] | None:
    """(t_s, wall seconds) of the trace's earliest row (the first of equal times in file order, as
    :class:`Trace` sorts stably); None for an empty trace. Rows were validated by detection, so not again."""
    best: tuple[float, float] | None = None
    for ch in src.chunks((), wall=True, validate=False):
        if not len(ch):
            continue
        i = int(np.argmin(ch.t_s))
        if best is None or ch.t_s[i] < best[0]:
            w = float(ch.wall_s[i]) if ch.wall_s is not None else math.nan
            # pandas' Timestamp.timestamp() rounds to the microsecond: so did the in-memory origin
            best = (float(ch.t_s[i]), round(w, 6) if math.isfinite(w) else w)
    return best


@dataclass(frozen=True)
class JoinFileResult:
    """What :func:`join_trace_file` wrote."""

    output: str
    n_records: int
    n_ok: int
    n_segments: int
    idle_power_w: float
    clock: str
    mismatches: list[Mismatch]
    simulated: bool
    # (record label, warning): physically impossible telemetry in a joined record's segment
    telemetry_warnings: list[tuple[str, str]] = field(default_factory=list)
    # the trace's recorded context each joined record carries (trace_context)
    context: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {
            "telemetry_warnings": [{"label": lab, "warning": w} for lab, w in self.telemetry_warnings],
            "output": self.output,
            "n_records": self.n_records,
            "n_joined": self.n_ok,
            "n_segments": self.n_segments,
            "idle_power_w": self.idle_power_w,
            "clock": self.clock,
            "mismatches": [m.to_dict() for m in self.mismatches],
            "simulated": self.simulated,
            "context": dict(self.context),
        }


def join_trace_file(
    trace_path: Any,
    records_path: Any,
    output: Any,
    *,
    overwrite: bool = False,
    clock: str = "auto",
    device: str | None = None,
    idle_power_w: float | None = None,
) -> JoinFileResult:
    """Detect the workloads in a trace file, join a records file with them, and write the joined records.

    The file-level form of :func:`join_records` (``flopwatch join``). Detection uses the study's hysteresis
    defaults (:class:`flopwatch.detect.HysteresisParams`). The output is written whole (temp file, then rename):
    an existing file is refused unless ``overwrite``; the inputs are never modified.
    """
    from flopwatch.detect import check_idle_power
    from flopwatch.io import check_output

    out = check_output(output, inputs=(records_path, trace_path), overwrite=overwrite, what="joined records")
    check_idle_power(idle_power_w)
    src = open_source(trace_path)  # streamed: memory bounded by a chunk whatever the trace's length
    rs = load_records(records_path, require=())
    # every device, not only ``device``: another device's activity is named on the joined records (round 11)
    det = detect_workloads(src, idle_power_w=idle_power_w)
    if device is not None and device not in det.idle_power_w_by_device:
        det = detect_workloads(
            src, idle_power_w=idle_power_w, device=device
        )  # its own error (absent, no util)
    try:
        which, t0 = trace_origin(src, list(rs), clock)
    except InputError as e:
        raise InputError(e.detail, file=str(trace_path), field=e.field) from None
    try:
        ctx = trace_context(src.metadata, device)
        res = join_records(list(rs), det, t0_s=t0, device=device, clock=which, context=ctx)
    except InputError as e:
        raise InputError(e.detail, file=str(records_path), record=e.record, field=e.field) from None
    sim = bool(src.metadata.get("simulated", False))
    with atomic_path(out) as tmp:  # a refused record leaves no half-written file behind
        for r in res.records:
            append_record(tmp, replace(r, simulated=r.simulated or sim))
    return JoinFileResult(
        output=str(out),
        n_records=len(res.records),
        n_ok=res.n_ok,
        n_segments=len(det.segments),
        idle_power_w=det.idle_power_w_by_device.get(device, det.idle_power_w),
        clock=which,
        mismatches=res.mismatches,
        simulated=sim or any(r.simulated for r in res.records),
        telemetry_warnings=[(r.label, w) for r in res.records for w in telemetry_warnings(r)],
        context=ctx,
    )
