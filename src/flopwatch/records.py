"""Workload records: one training run each, with its ground-truth FLOPs and measured energy.

Two on-disk formats are read:

* our JSON Lines (``schema="flopwatch.record/1"``, one run per line, see ARCHITECTURE.md), written with
  :func:`append_record`;
* the Jetson study's ``eval_results_*_records.json`` (Fowler 2026, williamfowler/verification-games): one JSON
  object with ``records`` (``ground_truth_tf`` TFLOP, ``avg_gpu_pct`` in %, ``idle_baseline_mw`` in mW).

Every field the estimator needs is validated when read: a missing field, a non-number, NaN/inf, negative
energy or a non-positive duration is an :class:`~flopwatch.errors.InputError` naming the file, the record
(label, or line number when there is none) and the field. Nothing is dropped silently: filtering (frontier
gate, precision) is a separate, explicit and reported step (:mod:`flopwatch.estimate.features`).
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field, fields
from typing import Any, overload

from flopwatch.devices import normalize_dtype, resolve
from flopwatch.errors import InputError
from flopwatch.io import check_output_file, is_out_of_range, jsonable, parse_json, read_text, refuse_link
from flopwatch.published import seed_context
from flopwatch.units import MW_PER_W, TERA

RECORD_SCHEMA = "flopwatch.record/1"

# Fields of our record that must be numbers when present (null = unknown is allowed unless required).
_NUMERIC_FIELDS = (
    "net_energy_j",
    "energy_j",
    "duration_s",
    "total_flops",
    "mean_util",
    "tb_moved",
    "idle_power_w",
    "steps",
    "flops_per_step",
    "coverage",
)
# Numbers that are only carried (timestamps, throughput): a wrong type is an error, no range applies.
_PLAIN_NUMERIC_FIELDS = (
    "start_monotonic_s",
    "end_monotonic_s",
    "start_wall",
    "end_wall",
    "warmup_steps",
    "achieved_flops_per_s",
    "peak_flops",
    "mfu",
)
# Sign/range rules, checked whenever the value is present: (lower, lower inclusive, upper).
_RANGES: dict[str, tuple[float, bool, float]] = {
    "net_energy_j": (0.0, True, math.inf),
    "energy_j": (0.0, True, math.inf),
    "duration_s": (0.0, False, math.inf),
    "total_flops": (0.0, False, math.inf),
    "mean_util": (0.0, True, 1.0),
    "tb_moved": (0.0, True, math.inf),
    "idle_power_w": (0.0, True, math.inf),
    "coverage": (0.0, True, 1.0),
    # the seed format's own keys, checked in its units before conversion (so messages show the file's value)
    "ground_truth_tf": (0.0, False, math.inf),
    "avg_gpu_pct": (0.0, True, 100.0),
    "idle_baseline_mw": (0.0, True, math.inf),
    "baseline_mw": (0.0, True, math.inf),
    "n_power_samples": (0.0, True, math.inf),
}

# Fields measured from telemetry, not by the training process: `workload run` leaves them null until a trace
# is joined (flopwatch.join), so a null one most often means that step was skipped.
_FROM_TRACE = frozenset({"net_energy_j", "energy_j", "mean_util", "tb_moved", "idle_power_w", "coverage"})
#: Keys only a sensor can measure, besides ``_FROM_TRACE``: the sound bound's observables and the sensor context
#: (``join.trace_context``). A runner's record that has them did not observe them: the join drops them (round 8,
#: `join-keeps-runner-counters`: a runner's ``pipe_active_s`` passed the join, bound 0.014 × the truth, "below").
SENSOR_KEYS: tuple[str, ...] = tuple(
    "unobserved_s pipe_active_s pipe_observed_s min_sm_clock_mhz max_sm_clock_mhz peak_power_w windows sensor_kind "
    "sensor_spec sample_rate_hz jitter_seed sensor_device".split()
)
_FROM_TRACE_HINT = (
    " (it is measured from a power trace: join the records with the trace recorded during the runs, "
    "`flopwatch join TRACE RECORDS -o JOINED`, or let `flopwatch run` do both)"
)

# Physical plausibility of a whole record (a unit mix-up or a corrupted number, not a real run).
# No telemetry resolves a run shorter than 1 ms: NVML's power reading is refreshed every 20–100 ms (NVML API
# reference, nvmlDeviceGetPowerUsage) and tegrastats at ≥ 1 ms intervals. A 1e-300 s duration otherwise
# reaches the fit and gives a "LOO MAE 7.6e32 %" profile.
MIN_DURATION_S = 1e-3
# 100 kW of net power is a full rack (~140 H100 at their 700 W TDP, devices.py); one record is one node.
MAX_NET_POWER_W = 1e5
# HGX/DGX nodes hold 8 accelerators, the most of any node flopwatch knows (NVIDIA DGX H100/H200 datasheets).
MAX_DEVICES_PER_NODE = 8
# 1e18 FLOP/s is ~250 H100 SXM at their dense FP8 peak (3.96e15, devices.py): far beyond one node.
MAX_FLOP_RATE = 1e18
# 1 PB/s of DRAM traffic is ~200× an H200's 4.8 TB/s (devices.py).
MAX_TB_PER_S = 1e3
#: Key (in a record's ``extra``) of the physically impossible telemetry the join found in the record's segment
#: (:mod:`flopwatch.telemetry.consistency`): a list of warnings, each of which blocks "below".
TELEMETRY_WARNINGS = "telemetry_warnings"


_LINE_BREAKS = re.compile(r"\r\n|[\n\r\v\f\x1c-\x1e]")


def unmeasured(record: WorkloadRecord) -> WorkloadRecord:
    """``record`` less everything only telemetry measures (``_FROM_TRACE``, :data:`SENSOR_KEYS`): what a runner may
    say of its own run — what ran, when, its ground truth. The join starts every record from this, so a record the
    trace did not measure gets no energy (not the runner's) and a joined one only the trace's observables."""
    kept = ("energy_j", "mean_util", "tb_moved", "coverage")  # _FROM_TRACE less energy and idle (the join's)
    if (
        math.isnan(record.net_energy_j)
        and all(getattr(record, k) is None for k in kept)
        and not any(k in record.extra for k in SENSOR_KEYS)
    ):
        return record  # the common case (a runner's record): nothing to drop
    extra = {k: v for k, v in record.extra.items() if k not in SENSOR_KEYS}
    return dataclasses.replace(record, net_energy_j=math.nan, **dict.fromkeys(kept), extra=extra)


def telemetry_warnings(record: WorkloadRecord) -> tuple[str, ...]:
    """The record's telemetry warnings (strings only: a hand-edited record cannot inject other values)."""
    v = record.extra.get(TELEMETRY_WARNINGS)
    if isinstance(v, str):
        return (v,)
    return tuple(x for x in v if isinstance(x, str)) if isinstance(v, (list, tuple)) else ()


@dataclass(frozen=True)
class WorkloadRecord:
    """One workload run, in SI units (J, s, FLOP, util as a 0–1 ratio): the one record type of flopwatch.

    Real workloads (:func:`flopwatch.workloads.run.run_workload`), the simulator
    (:meth:`flopwatch.sim.accelerator.SimulatedRun.record`) and the join (:func:`flopwatch.join.join_records`) all
    produce it; :func:`load_records` reads it back. **Adding a field means adding it here** (and, when it must be
    a checked number, to ``_NUMERIC_FIELDS``/``_RANGES``): :meth:`from_dict` and :meth:`to_dict` follow the
    dataclass fields. Keys a producer adds that are not fields (``sim``, ``host``, ``torch_version`` …) are kept
    verbatim in ``extra`` and written back.

    ``total_flops`` is the ground truth (``None`` for runs being estimated). ``net_energy_j`` and ``duration_s`` are
    NaN until the record is joined with telemetry (``duration_s`` of an unjoined record from a runner is its timed
    region). ``raw`` is the record as a JSON-ready mapping (:meth:`to_dict`), derived, never passed in.
    """

    label: str
    net_energy_j: float = math.nan
    duration_s: float = math.nan
    mean_util: float | None = None
    tb_moved: float | None = None
    total_flops: float | None = None
    dtype: str = "fp32"
    config: Mapping[str, Any] = field(default_factory=dict)
    idle_power_w: float | None = None
    simulated: bool = False
    # -- what ran, where and when (the runner's timed region, on the host's monotonic clock)
    arch: str | None = None
    device: str | None = None
    device_name: str | None = None
    device_spec: str | None = None
    start_monotonic_s: float | None = None
    end_monotonic_s: float | None = None
    start_wall: float | None = None
    end_wall: float | None = None
    steps: int | float | None = None
    warmup_steps: int | float | None = None
    # -- ground truth and throughput
    flops_per_step: float | None = None
    attention_convention: str | None = None
    achieved_flops_per_s: float | None = None
    peak_flops: float | None = None
    peak_dtype: str | None = None
    peak_source: str | None = None
    mfu: float | None = None
    step_time_s: Mapping[str, Any] | None = None
    # -- measured by the join (telemetry of the detected segment)
    energy_j: float | None = None
    coverage: float | None = None
    join: Mapping[str, Any] | None = None
    # -- every other key, verbatim
    extra: Mapping[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @property
    def raw(self) -> Mapping[str, Any]:
        """The record's JSON form (:meth:`to_dict`) as a read-only mapping, built lazily key by key."""
        return _RecordView(self)

    def __getitem__(self, key: str) -> Any:
        """Read access to the JSON form (``rec["mfu"]``), for code written against the record dicts."""
        if key in _FIELD_SET:
            v = getattr(self, key)
            if key in ("net_energy_j", "duration_s") and isinstance(v, float) and math.isnan(v):
                return None
            return v
        if key == "schema":
            return RECORD_SCHEMA
        return self.extra[key]

    def get(self, key: str, default: Any = None) -> Any:
        """A key of the JSON form, or ``default``."""
        try:
            return self[key]
        except KeyError:
            return default

    @property
    def avg_net_power_w(self) -> float:
        """Mean power above idle over the run."""
        return self.net_energy_j / self.duration_s

    @property
    def measured(self) -> bool:
        """Joined with telemetry: net energy and duration known, and ground truth present."""
        return (
            not math.isnan(self.net_energy_j) and not math.isnan(self.duration_s) and bool(self.total_flops)
        )

    def to_dict(self) -> dict[str, Any]:
        """Our JSON-Lines representation (``flopwatch.record/1``): every field (null when unknown), then ``extra``."""
        out: dict[str, Any] = {"schema": RECORD_SCHEMA}
        for name in _FIELD_NAMES:
            v = getattr(self, name)
            if name in ("net_energy_j", "duration_s") and isinstance(v, float) and math.isnan(v):
                v = None
            elif isinstance(v, Mapping):
                v = dict(v)
            out[name] = v
        for k, v in self.extra.items():
            out.setdefault(k, v)
        return out

    @classmethod
    def from_dict(
        cls,
        d: Mapping[str, Any],
        *,
        file: str = "<memory>",
        where: str | int | None = None,
        require: Sequence[str] = (),
    ) -> WorkloadRecord:
        """Validate ``d`` (our field names) into a record; :class:`InputError` names file, record and field."""
        return _build(d, file=file, where=where if where is not None else "<memory>", require=require)


class _RecordView(Mapping[str, Any]):
    """:attr:`WorkloadRecord.raw`: the JSON form, read key by key (no dict is built unless iterated)."""

    __slots__ = ("_r",)

    def __init__(self, record: WorkloadRecord) -> None:
        self._r = record

    def __getitem__(self, key: str) -> Any:
        return self._r[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._r.to_dict())

    def __len__(self) -> int:
        return len(self._r.to_dict())


#: The record's data fields, in file order.
_FIELD_NAMES = tuple(f.name for f in fields(WorkloadRecord) if f.init and f.name != "extra")
_FIELD_SET = frozenset(_FIELD_NAMES)
_STR_FIELDS = tuple(
    f.name for f in fields(WorkloadRecord) if f.init and f.type in ("str | None",) and f.name != "label"
)
_MAPPING_FIELDS = ("step_time_s", "join")


class RecordSet(Sequence[WorkloadRecord]):
    """An ordered, immutable collection of records with where they came from."""

    def __init__(
        self,
        records: Sequence[WorkloadRecord],
        *,
        source: str = "",
        idle_power_w: float | None = None,
        fingerprint: Mapping[str, Any] | None = None,
    ) -> None:
        self._records = tuple(records)
        self.source = str(source)
        self.idle_power_w = idle_power_w
        self.fingerprint: dict[str, Any] = dict(fingerprint or {})

    @overload
    def __getitem__(self, i: int) -> WorkloadRecord: ...
    @overload
    def __getitem__(self, i: slice) -> RecordSet: ...
    def __getitem__(self, i: int | slice) -> WorkloadRecord | RecordSet:
        if isinstance(i, slice):
            return self.subset(self._records[i])
        return self._records[i]

    def __len__(self) -> int:
        return len(self._records)

    def __iter__(self) -> Iterator[WorkloadRecord]:
        return iter(self._records)

    def __repr__(self) -> str:
        return f"RecordSet(n={len(self)}, source={self.source!r})"

    def subset(self, records: Sequence[WorkloadRecord]) -> RecordSet:
        """A new set with the same provenance holding ``records``."""
        return RecordSet(
            records, source=self.source, idle_power_w=self.idle_power_w, fingerprint=self.fingerprint
        )

    @property
    def labels(self) -> list[str]:
        return [r.label for r in self._records]


def as_record_set(records: RecordSet | Sequence[WorkloadRecord]) -> RecordSet:
    """Wrap a plain sequence of records (e.g. built in memory by the simulator) into a :class:`RecordSet`."""
    if isinstance(records, RecordSet):
        return records
    recs = list(records)
    for i, r in enumerate(recs):
        if not isinstance(r, WorkloadRecord):
            raise InputError(f"expected a WorkloadRecord, got {type(r).__name__}", record=i)
    idle = {r.idle_power_w for r in recs if r.idle_power_w is not None}
    return RecordSet(recs, source="<memory>", idle_power_w=idle.pop() if len(idle) == 1 else None)


# --------------------------------------------------------------------------------------------- validation


def _number(value: Any, *, file: str, record: str | int, name: str, required: bool) -> float | None:
    """A finite float in its allowed range, or None when absent/null and not required."""
    tv = type(value)
    if tv is float or tv is int:  # the common case, checked inline (exact types: a bool is not a number here)
        v = float(value)
        if math.isfinite(v):
            rng = _RANGES.get(name)
            if rng is None or ((v > rng[0] or (v == rng[0] and rng[1])) and v <= rng[2]):
                return v
        # out of range or not finite: the checks below say how
    if value is None:
        if required:
            hint = _FROM_TRACE_HINT if name in _FROM_TRACE else ""
            raise InputError("is missing (null)" + hint, file=file, record=record, field=name)
        return None
    # bool is an int subclass; a JSON true/false in a numeric field is a typing mistake.
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise InputError(
            f"must be a number, got {type(value).__name__} {value!r}", file=file, record=record, field=name
        )
    literal = is_out_of_range(value)
    if literal is not None:
        raise InputError(
            f"number {literal} is out of range (too large for a 64-bit float)",
            file=file,
            record=record,
            field=name,
        )
    v = float(value)
    if math.isnan(v):
        raise InputError("is NaN", file=file, record=record, field=name)
    if math.isinf(v):
        raise InputError("is infinite", file=file, record=record, field=name)
    if name in _RANGES:
        lo, lo_incl, hi = _RANGES[name]
        if v < lo or (v == lo and not lo_incl):
            rel = ">=" if lo_incl else ">"
            raise InputError(f"must be {rel} {lo:g}, got {v:g}", file=file, record=record, field=name)
        if v > hi:
            raise InputError(f"must be <= {hi:g}, got {v:g}", file=file, record=record, field=name)
    return v


def _build(
    d: Mapping[str, Any],
    *,
    file: str,
    where: str | int,
    require: Sequence[str],
    default_idle_w: float | None = None,
    aliases: Mapping[str, str] | None = None,
) -> WorkloadRecord:
    """Validate one record already mapped to our field names (``aliases``: the name to report per field)."""
    names = dict(aliases or {})
    label = d.get("label")
    if label is None or (isinstance(label, str) and not label.strip()):
        raise InputError("is missing", file=file, record=where, field="label")
    if not isinstance(label, (str, int)) or isinstance(label, bool):
        raise InputError(
            f"must be a string, got {type(label).__name__}", file=file, record=where, field="label"
        )
    label = str(label)
    for name in require:
        if name not in d:
            raise InputError("is missing", file=file, record=label, field=names.get(name, name))
    vals: dict[str, float | None] = {}
    for name in _NUMERIC_FIELDS:
        try:
            vals[name] = _number(d.get(name), file=file, record=label, name=name, required=name in require)
        except InputError as e:
            if name not in names:
                raise
            raise InputError(e.detail, file=file, record=label, field=names[name]) from None
    cfg = d.get("config") or {}
    if not isinstance(cfg, Mapping):
        raise InputError(
            f"must be an object, got {type(cfg).__name__}", file=file, record=label, field="config"
        )
    dt = d.get("dtype") or "fp32"
    dt_field = names.get("dtype", "dtype")
    if not isinstance(dt, str):
        raise InputError(
            f"must be a string, got {type(dt).__name__}", file=file, record=label, field=dt_field
        )
    try:
        dtype = normalize_dtype(dt)
    except InputError as e:
        raise InputError(e.detail, file=file, record=label, field=dt_field) from None
    fp = d.get("fingerprint")
    if fp is not None and not isinstance(fp, Mapping):
        raise InputError(
            f"must be an object or null, got {type(fp).__name__}",
            file=file,
            record=label,
            field="fingerprint",
        )
    simulated = d.get("simulated", False)
    if not isinstance(simulated, bool) and simulated is not None:
        raise InputError("must be true or false", file=file, record=label, field="simulated")
    net = vals["net_energy_j"]
    dur = vals["duration_s"]
    _check_plausible(
        vals, file=file, record=label, names=names, device=d.get("device_spec") or d.get("device_name")
    )
    kw: dict[str, Any] = {}
    for name in _PLAIN_NUMERIC_FIELDS:
        v = d.get(name)
        # the common cases inline (thousands of records per file): null, or a finite float
        kw[name] = (
            v
            if v is None or (type(v) is float and math.isfinite(v))
            else _number(v, file=file, record=label, name=name, required=False)
        )
    for a, b in (("start_monotonic_s", "end_monotonic_s"), ("start_wall", "end_wall")):
        if kw.get(a) is not None and kw.get(b) is not None and kw[b] < kw[a]:
            raise InputError(f"{kw[b]!r} is before {a} {kw[a]!r}", file=file, record=label, field=b)
    for name, v in (("steps", vals["steps"]), ("warmup_steps", kw["warmup_steps"])):  # counts stay integers
        if v is not None and float(v).is_integer():
            kw[name] = int(v)
    for name in _STR_FIELDS:
        v = d.get(name)
        if isinstance(v, (Mapping, list, bool)):  # str() would turn it into a name nothing resolves
            raise InputError(f"must be a string, got {type(v).__name__}", file=file, record=label, field=name)
        kw[name] = None if v is None else str(v)
    # "simulated" can be added by any field that names the simulator, never removed by the flag alone: a
    # record of a simulated device whose flag was edited to false still counts as simulated
    if not simulated and any(
        isinstance(kw.get(k), str) and (kw[k].startswith("sim:") or "(simulated)" in kw[k])
        for k in ("device", "device_name", "device_spec")
    ):
        simulated = True
    for name in _MAPPING_FIELDS:
        v = d.get(name)
        if v is not None and not isinstance(v, Mapping):
            raise InputError(
                f"must be an object or null, got {type(v).__name__}", file=file, record=label, field=name
            )
        kw[name] = None if v is None else dict(v)
    extra = {k: v for k, v in d.items() if k not in _FIELD_SET and k != "schema"}
    idle = vals["idle_power_w"] if vals["idle_power_w"] is not None else default_idle_w
    lie = _no_power_under_load(net, dur, vals["mean_util"], idle)
    if lie is not None:  # named on the record as join names it: it blocks "below" wherever the record goes
        old = extra.get(TELEMETRY_WARNINGS)
        have = tuple(x for x in (old if isinstance(old, list) else [old]) if isinstance(x, str))
        extra[TELEMETRY_WARNINGS] = [*have, lie] if lie not in have else list(have)  # a re-read adds nothing
    # Records that only describe a workload (no telemetry yet) may lack energy unless it is required.
    return WorkloadRecord(
        label=label,
        net_energy_j=math.nan if net is None else net,
        duration_s=math.nan if dur is None else dur,
        mean_util=vals["mean_util"],
        tb_moved=vals["tb_moved"],
        total_flops=vals["total_flops"],
        dtype=dtype,
        config=dict(cfg),
        idle_power_w=vals["idle_power_w"] if vals["idle_power_w"] is not None else default_idle_w,
        simulated=bool(simulated),
        flops_per_step=vals["flops_per_step"],
        energy_j=vals["energy_j"],
        coverage=vals["coverage"],
        extra=extra,
        **kw,
    )


def _device_power_bound(device: Any) -> tuple[float, str] | None:
    """The net-power bound for a record naming a known device: a node holds at most
    :data:`MAX_DEVICES_PER_NODE` of them, each drawing at most 1.5× its TDP (devices.py)."""
    if not isinstance(device, str) or not device.strip():
        return None
    spec = resolve(device)
    if spec is None:
        return None
    return (
        MAX_DEVICES_PER_NODE * 1.5 * spec.tdp_w,
        f"{MAX_DEVICES_PER_NODE} × 1.5 × the {spec.tdp_w:g} W TDP of {spec.name}",
    )


#: The record-level form of "utilisation without power" (telemetry/consistency.py, whose constants these are:
#: records may not import telemetry): at least half utilisation for 10 s or more with a net power within 5 % of
#: idle (0.02 W without an idle) is no device's run — energy written in Wh or kJ, or edited down after the join.
_LOADED_UTIL, _MIN_LOADED_S, _FLOOR_FRACTION, _FLOOR_W = 0.5, 10.0, 0.05, 0.02


def _no_power_under_load(
    net: float | None, dur: float | None, util: float | None, idle: float | None
) -> str | None:
    if net is None or dur is None or util is None or not (util >= _LOADED_UTIL and dur >= _MIN_LOADED_S):
        return None
    floor = max(_FLOOR_FRACTION * idle, _FLOOR_W) if idle is not None and idle > 0 else _FLOOR_W
    if net / dur >= floor:
        return None
    return (
        f"utilisation without power: {util:.0%} utilisation for {dur:.0f} s with {net / dur:.3g} W of net power "
        f"(within {floor:.3g} W of idle; energy in Wh or kJ?) (physically impossible telemetry)"
    )


def _check_plausible(
    vals: Mapping[str, float | None],
    *,
    file: str,
    record: str,
    names: Mapping[str, str],
    device: Any = None,
) -> None:
    """Refuse a record whose numbers together describe no physical run (see the bounds above)."""

    def bad(name: str, msg: str) -> InputError:
        return InputError(msg, file=file, record=record, field=names.get(name, name))

    dur = vals.get("duration_s")
    if dur is None:
        return
    if dur < MIN_DURATION_S:
        raise bad("duration_s", f"{dur:g} s is implausibly short (no telemetry resolves a run under 1 ms)")
    net, flops, tb = vals.get("net_energy_j"), vals.get("total_flops"), vals.get("tb_moved")
    bound = _device_power_bound(device) if net is not None and net / dur > 100.0 else None
    limit, why = bound if bound else (MAX_NET_POWER_W, "the bound for one node")
    if net is not None and net / dur > limit:
        raise bad(
            "net_energy_j",
            f"{net:g} J over {dur:g} s is {net / dur:.3g} W of net power, above the {limit:g} W plausibility "
            f"bound ({why}; units?)",
        )
    if flops is not None and flops / dur > MAX_FLOP_RATE:
        raise bad(
            "total_flops",
            f"{flops:g} FLOP over {dur:g} s is {flops / dur:.3g} FLOP/s, above the {MAX_FLOP_RATE:g} FLOP/s "
            "plausibility bound for one node (units?)",
        )
    if tb is not None and tb / dur > MAX_TB_PER_S:
        raise bad(
            "tb_moved",
            f"{tb:g} TB over {dur:g} s is {tb / dur:.3g} TB/s of DRAM traffic, above the {MAX_TB_PER_S:g} TB/s "
            "plausibility bound (units?)",
        )


# Our field → the seed's key, so errors name the key the user sees in the file.
_SEED_NAMES = {
    "total_flops": "ground_truth_tf",
    "mean_util": "avg_gpu_pct",
    "idle_power_w": "idle_baseline_mw",
    "dtype": "config.precision",
}


def _from_seed(rec: Mapping[str, Any], *, file: str, index: int) -> dict[str, Any]:
    """Map one Jetson-study record to our field names (units converted here, once)."""
    where: str | int = rec.get("label") if isinstance(rec.get("label"), str) else index
    out: dict[str, Any] = {"label": rec.get("label"), "schema": "jetson.eval_results"}
    for key, src in (
        ("net_energy_j", "net_energy_j"),
        ("duration_s", "duration_s"),
        ("tb_moved", "tb_moved"),
    ):
        if src in rec:
            out[key] = rec[src]
    # Unit conversions: TFLOP → FLOP, % → 0–1, mW → W. Type errors are reported against the seed's key.
    for ours, src, scale in (
        ("total_flops", "ground_truth_tf", TERA),
        ("mean_util", "avg_gpu_pct", 0.01),
        ("idle_power_w", "idle_baseline_mw", 1.0 / MW_PER_W),
    ):
        if src in rec and rec[src] is not None:
            v = _number(rec[src], file=file, record=where, name=src, required=True)
            out[ours] = v * scale if v is not None else None
    cfg = rec.get("config") or {}
    if not isinstance(cfg, Mapping):
        raise InputError(
            f"must be an object, got {type(cfg).__name__}", file=file, record=where, field="config"
        )
    out["config"] = dict(cfg)
    # The study marks non-fp32 runs with config.precision; absent means fp32 (README of the study).
    out["dtype"] = cfg.get("precision") or "fp32"
    _number(rec.get("n_power_samples"), file=file, record=where, name="n_power_samples", required=False)
    out.update(seed_context(rec))  # the sensor the study read, over what the file claims (published.py)
    for k, v in rec.items():  # keep every original key (raw), ours take precedence
        out.setdefault(k, v)
    return out


def load_records(
    path: str | os.PathLike[str],
    *,
    require: Sequence[str] = ("net_energy_j", "duration_s"),
) -> RecordSet:
    """Read and validate workload records (our JSON Lines or the Jetson study's ``eval_results_*.json``).

    ``require`` names fields that must be present and numeric in every record (calibration and evaluation
    add ``"total_flops"``). Raises :class:`InputError` naming file, record and field on the first problem.
    """
    file = str(path)
    text = read_text(path, kind="records file (JSON or JSON Lines)")
    if not text.strip():
        raise InputError("is empty (no records)", file=file)

    stripped = text.lstrip()
    records: list[WorkloadRecord] = []
    idle_w: float | None = None
    fingerprint: dict[str, Any] = {}
    seed_like = False
    if stripped.startswith("{"):
        # One JSON document (the seed format) or JSON Lines whose first line is an object: try the whole first.
        try:
            doc = parse_json(text, file=file)
        except InputError:
            doc = None  # JSON Lines (or broken): parsed line by line below, which names the line
        if isinstance(doc, Mapping) and str(doc.get("schema", "")).startswith("flopwatch.profile/"):
            raise InputError(
                "is a calibration profile, not workload records (pass it with --profile)", file=file
            )
        if isinstance(doc, Mapping) and "records" not in doc and "\n" in text.strip():
            # one JSON object spread over several lines: not JSON Lines (which needs one object per line)
            raise InputError(
                "is one multi-line JSON object without a 'records' list; expected JSON Lines (one record "
                "per line) or the study's eval_results_*_records.json",
                file=file,
            )
        if isinstance(doc, Mapping) and "records" in doc:
            seed_like = True
            recs = doc["records"]
            if not isinstance(recs, list):
                raise InputError("must be a list", file=file, field="records")
            if "baseline_mw" in doc and doc["baseline_mw"] is not None:
                b = _number(
                    doc["baseline_mw"], file=file, record="<header>", name="baseline_mw", required=True
                )
                idle_w = None if b is None else b / MW_PER_W
            fp = doc.get("fingerprint")
            if isinstance(fp, Mapping):
                fingerprint = dict(fp)
            elif isinstance(fp, str):
                fingerprint = {"description": fp}
            for i, rec in enumerate(recs):
                if not isinstance(rec, Mapping):
                    raise InputError(f"must be an object, got {type(rec).__name__}", file=file, record=i)
                mapped = _from_seed(rec, file=file, index=i)
                records.append(
                    _build(
                        mapped,
                        file=file,
                        where=i,
                        require=require,
                        default_idle_w=idle_w,
                        aliases=_SEED_NAMES,
                    )
                )
    elif stripped.startswith("["):
        doc = parse_json(text, file=file)
        for i, rec in enumerate(doc):
            if not isinstance(rec, Mapping):
                raise InputError(f"must be an object, got {type(rec).__name__}", file=file, record=i)
            records.append(_build(rec, file=file, where=i, require=require))
        seed_like = True
    if not seed_like:
        # JSON Lines are split at line feeds (and the other ASCII breaks, which JSON strings cannot hold raw);
        # not at U+0085, U+2028 or U+2029 as str.splitlines() does: JSON allows them raw inside a string
        for lineno, line in enumerate(_LINE_BREAKS.split(text), start=1):
            if not line.strip():
                continue
            rec = parse_json(line, file=file, line=lineno)
            if not isinstance(rec, Mapping):
                raise InputError(
                    f"line {lineno}: expected a JSON object, got {type(rec).__name__}", file=file
                )
            schema = rec.get("schema", RECORD_SCHEMA)
            if schema != RECORD_SCHEMA:
                raise InputError(
                    f"line {lineno}: unsupported schema {schema!r} (expected {RECORD_SCHEMA!r})",
                    file=file,
                    field="schema",
                )
            records.append(_build(rec, file=file, where=f"line {lineno}", require=require))
        if not records:
            raise InputError("contains no records", file=file)
        return record_set(records, source=file)
    if not records:
        raise InputError("contains no records", file=file)
    _check_unique(records, file)
    return RecordSet(records, source=file, idle_power_w=idle_w, fingerprint=fingerprint)


def record_set(records: Sequence[WorkloadRecord], *, source: str = "<memory>") -> RecordSet:
    """A :class:`RecordSet` of records built in memory, with the provenance :func:`load_records` derives from
    a JSON-Lines file: the idle power and fingerprint they all share (one device name is a fingerprint).
    Duplicate labels are an :class:`InputError`."""
    recs = list(records)
    idles = {r.idle_power_w for r in recs if r.idle_power_w is not None}
    idle_w = idles.pop() if len(idles) == 1 else None
    fingerprint: dict[str, Any] = {}
    fps = {json.dumps(r.extra.get("fingerprint"), sort_keys=True) for r in recs if r.extra.get("fingerprint")}
    if len(fps) == 1:
        fingerprint = json.loads(fps.pop())
    # Records written by `flopwatch run` / `workload run` name their device but carry no fingerprint
    # object: one device name shared by every record identifies the device (profiles store it, and
    # `estimate` refuses records from another device model).
    names = {r.device_name for r in recs}
    if len(names) == 1 and isinstance(next(iter(names)), str) and next(iter(names)):
        fingerprint.setdefault("device_name", names.pop())
    _check_unique(recs, source)
    return RecordSet(recs, source=source, idle_power_w=idle_w, fingerprint=fingerprint)


def _check_unique(records: Sequence[WorkloadRecord], file: str) -> None:
    seen: dict[str, int] = {}
    for i, r in enumerate(records):
        if r.label in seen:
            raise InputError(
                f"duplicate label (also record {seen[r.label]})", file=file, record=r.label, field="label"
            )
        seen[r.label] = i


def append_record(path: str | os.PathLike[str], record: Mapping[str, Any] | WorkloadRecord) -> None:
    """Append one record as a JSON line: one ``write`` on an ``O_APPEND`` descriptor, then ``fsync``.

    The file is never rewritten, so records already there are never lost; a crash can at worst leave a
    partial *last* line, which :func:`load_records` reports with its line number.
    """
    d = record.to_dict() if isinstance(record, WorkloadRecord) else dict(record)
    d.setdefault("schema", RECORD_SCHEMA)
    if "label" not in d or d["label"] in (None, ""):
        raise InputError("is missing", file=str(path), field="label")
    try:
        # numpy values from the workload runner become plain numbers (io.jsonable); a float NaN is refused
        line = json.dumps(d, default=jsonable, allow_nan=False, separators=(",", ":")) + "\n"
    except ValueError:
        bad = [k for k, v in d.items() if isinstance(v, float) and not math.isfinite(v)]
        raise InputError(
            "is NaN or infinite (use null for unknown)",
            file=str(path),
            record=str(d["label"]),
            field=bad[0] if bad else None,
        ) from None
    data = line.encode("utf-8")
    check_output_file(path)
    refuse_link(path)
    # O_NONBLOCK: should a FIFO appear at the path after the check, open fails instead of waiting for a reader;
    # O_NOFOLLOW: nor is a symlink planted after the check written through
    flags = (
        os.O_WRONLY | os.O_APPEND | os.O_CREAT | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOFOLLOW", 0)
    )
    try:
        fd = os.open(os.fspath(path), flags, 0o644)
    except OSError:
        refuse_link(path)  # ELOOP: a link planted between the check and the open
        raise
    try:
        # A previous crash may have left a partial line without "\n": start ours on a fresh line.
        if os.fstat(fd).st_size > 0:
            with open(os.fspath(path), "rb") as fh:
                fh.seek(-1, os.SEEK_END)
                if fh.read(1) != b"\n":
                    data = b"\n" + data
        written = 0
        while written < len(data):
            written += os.write(fd, data[written:])
        os.fsync(fd)
    finally:
        os.close(fd)
