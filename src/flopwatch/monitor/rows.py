"""The typed workload row: what the daemon signs into the ledger for each workload.

One dataclass, built in one place (:meth:`WorkloadRow.build`) for the normal path, the running snapshot kept
in checkpoints, and crash recovery (which re-stamps the last snapshot as ``interrupted``). Adding a field means
editing this file only.

Versions (``row_version`` in the payload):

* 1 (flopwatch ≤ 0.2): no ``row_version`` key; free-text ``flags``; no ``regime``/``notes``.
* 2: ``warnings`` (violated assumptions with their reason; any of them turns a "below" into "uncertain"),
  ``notes`` (informational), ``regime`` (operating regime from observables, or None when not classified),
  ``declared_dtype`` (the operator's precision claim), ``implausible_readings``.
* 3: ``regime`` is the observed regime of :func:`flopwatch.estimate.verdict.assess` ("calibrated",
  "out-of-regime", "unconfirmed", "uncalibrated"); ``lower_flops``/``upper_flops`` are the sound verdict bounds
  (``upper_flops`` None: unbounded) and ``bound`` says where the upper one comes from;
  ``calibrated_lower_flops``/``calibrated_upper_flops`` keep the profile's interval; ``mean_sm_clock_mhz`` and
  ``power_limit_w`` (time-weighted means over the workload, where the sensor reports them).
* 4 (issue 21): ``lower_flops``/``upper_flops`` are the *sound* verdict bounds of
  :func:`flopwatch.estimate.verdict.assess` (physics, datasheet, the verifier's counters) and ``bound`` their
  basis; ``assumptions`` (what the calibrated estimate and its interval rest on), ``decisive_at`` (the factor
  T / estimate above which "below" becomes possible) and ``tighten`` (which observation would lower it).
  Out-of-regime observables are assumptions of the estimate, no longer warnings: they never ease a "below".
* 5 (issue 21 items 2–3 and 6): every observable the sound bound uses — ``min_sm_clock_mhz``/``max_sm_clock_mhz``
  (the clock range over the workload), ``peak_power_w``, ``unobserved_s`` (gaps no energy counter spans + the
  sensor's blind share, :mod:`flopwatch.sensor_timing`), ``pipe_active_s``/``pipe_observed_s`` (only where
  the sensor reports all four pipe counters), ``windows`` (per-window sums, lists per field; null: not
  observed) — and ``context``, the context the row was made in (profile hash, peaks in force, peak
  override, sensor kind and spec, sampling rate, jitter seed, flopwatch version), which a verifier compares
  with its own.

:meth:`WorkloadRow.from_payload` reads both; version 1 ``flags`` become ``warnings``.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from flopwatch.estimate.observe import ObservedWindows
from flopwatch.estimate.verdict import Assessment  # the one assessment type (re-exported)
from flopwatch.units import finite

ROW_VERSION = 5
#: Workload statuses: detected start and end / daemon stopped (or crashed) while open / sensor failed too long.
STATUSES = ("complete", "interrupted", "sensor_fault", "open")


@dataclass(frozen=True)
class Measurement:
    """What the accounting measured over one workload (the inputs of :func:`~flopwatch.monitor.assess.assess`)."""

    device: str
    start_t_s: float
    end_t_s: float
    start_wall: float
    end_wall: float
    duration_s: float
    energy_j: float
    net_energy_j: float
    idle_power_w: float
    tb_moved: float | None
    mean_util: float | None
    coverage: float | None
    sensor_errors: int = 0
    implausible_readings: int = 0
    mean_sm_clock_mhz: float | None = None  # time-weighted over busy intervals, where the sensor reports it
    power_limit_w: float | None = None  # enforced power limit (time-weighted), where the sensor reports it
    #: Violated measurement assumptions found by the accounting (coverage, sensor errors, implausible readings,
    #: idle baseline above the lowest settled idle power, negative net energy), with their reasons.
    warnings: tuple[str, ...] = ()
    declared_dtype: str | None = None  # the operator's claim (``--dtype``), never an observation
    device_name: str | None = None
    spec_key: str | None = None  # devices.DEVICES key when known
    # observed ranges and counters the sound bound uses (None: not observed; estimate/observe.py)
    min_sm_clock_mhz: float | None = None
    max_sm_clock_mhz: float | None = None
    peak_power_w: float | None = None
    unobserved_s: float | None = None  # time no cumulative counter and no sample covered
    pipe_active_s: Mapping[str, float] | None = None  # Σ activity·dt per pipe (tensor, fp64, fp32, fp16)
    pipe_observed_s: float | None = None  # time the pipe counters covered (None: what the energy sensor did)
    windows: ObservedWindows | None = None
    context: Mapping[str, Any] | None = None  # what the row is made in (daemon.Monitor.row_context)


#: ``ObservedWindows`` fields stored in a row's ``windows`` (lists; null where not observed): all of them.
WINDOW_FIELDS = tuple(f.name for f in dataclasses.fields(ObservedWindows))


def windows_payload(w: ObservedWindows | None) -> dict[str, list[float | None] | None] | None:
    """``w`` as JSON-safe lists (NaN, a window not observed, as null; a field not observed at all as null)."""
    if w is None:
        return None
    out: dict[str, list[float | None] | None] = {}
    for k in WINDOW_FIELDS:
        a = getattr(w, k)
        out[k] = None if a is None else [float(x) if math.isfinite(x) else None for x in a.tolist()]
    return out


@dataclass(frozen=True)
class WorkloadRow:
    """One workload row of the ledger (payload of a ``workload`` entry)."""

    workload_id: str
    session_id: str | None
    device: str
    status: str
    start_wall: float | None = None
    end_wall: float | None = None
    start_t_s: float | None = None
    end_t_s: float | None = None
    duration_s: float | None = None
    energy_j: float | None = None
    net_energy_j: float | None = None
    idle_power_w: float | None = None
    tb_moved: float | None = None
    mean_util: float | None = None
    coverage: float | None = None
    sensor_errors: int | None = None
    implausible_readings: int | None = None
    mean_sm_clock_mhz: float | None = None
    power_limit_w: float | None = None
    estimate_flops: float | None = None
    lower_flops: float | None = None
    upper_flops: float | None = None  # None: unbounded
    confidence: float | None = None
    model: str | None = None
    verdict: str = "n/a"
    threshold_flops: float | None = None
    regime: str | None = None
    bound: str | None = None
    calibrated_lower_flops: float | None = None
    calibrated_upper_flops: float | None = None
    declared_dtype: str | None = None
    profile_sha256: str | None = None
    device_name: str | None = None
    sensor_kind: str | None = None
    simulated: bool = False
    warnings: tuple[str, ...] = ()
    notes: tuple[str, ...] = ()
    assumptions: str | None = None
    decisive_at: float | None = None
    tighten: tuple[str, ...] = ()
    # the sound bound's observables (version 5; None: not observed)
    min_sm_clock_mhz: float | None = None
    max_sm_clock_mhz: float | None = None
    peak_power_w: float | None = None
    unobserved_s: float | None = None
    pipe_active_s: Mapping[str, float] | None = None
    pipe_observed_s: float | None = None
    windows: Mapping[str, Any] | None = None
    context: Mapping[str, Any] | None = None
    row_version: int = ROW_VERSION

    # -------------------------------------------------------------------------------------------- build
    @classmethod
    def build(
        cls,
        *,
        workload_id: str,
        session_id: str | None,
        status: str,
        meas: Measurement,
        assessment: Assessment,
        threshold_flops: float | None,
        profile_sha256: str | None,
        sensor_kind: str | None = None,
        simulated: bool = False,
    ) -> WorkloadRow:
        """The row for a measured, assessed workload (the one constructor of the normal path): every row field
        the assessment or the measurement has (the measurement's ``device`` wins), then what neither holds as
        the row stores it."""
        names = {f.name for f in dataclasses.fields(cls)}
        vals = {k: getattr(assessment, k) for k in names if hasattr(assessment, k)}
        vals |= {f.name: getattr(meas, f.name) for f in dataclasses.fields(meas) if f.name in names}
        return cls(
            **vals
            | {
                "workload_id": workload_id,
                "session_id": session_id,
                "status": status,
                "threshold_flops": threshold_flops,
                "profile_sha256": profile_sha256,
                "sensor_kind": sensor_kind,
                "simulated": simulated,
                "upper_flops": assessment.upper_flops if math.isfinite(assessment.upper_flops) else None,
                "warnings": tuple(dict.fromkeys((*meas.warnings, *assessment.warnings))),
                "pipe_active_s": None if meas.pipe_active_s is None else dict(meas.pipe_active_s),
                "windows": windows_payload(meas.windows),
                "context": None if meas.context is None else dict(meas.context),
            }
        )

    def interrupted(self, reason: str, *, session_id: str | None = None) -> WorkloadRow:
        """This (running) row closed by crash recovery: status ``interrupted``, the reason added to warnings.

        A decisive "below" becomes "uncertain": the workload ran at least this long, maybe longer.
        """
        verdict = "uncertain" if self.verdict == "below" else self.verdict
        return dataclasses.replace(
            self,
            status="interrupted",
            session_id=session_id if session_id is not None else self.session_id,
            warnings=(*self.warnings, reason),
            verdict=verdict,
        )

    # -------------------------------------------------------------------------------------------- I/O
    def to_payload(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        d["warnings"] = list(self.warnings)
        d["notes"] = list(self.notes)
        d["tighten"] = list(self.tighten)
        return d

    @classmethod
    def from_payload(cls, d: Mapping[str, Any], **defaults: Any) -> WorkloadRow:
        """Read a stored row of any version, as typed values (the daemon relies on them: recovery, windows).

        Unknown keys are ignored and ``defaults`` fill missing ones. A value of the wrong type — a hand-edited
        ledger — is dropped (None) rather than trusted: a number must be a finite int/float, a string a string.
        """
        vals: dict[str, Any] = {}
        for f in dataclasses.fields(cls):
            if f.name in ("warnings", "notes", "tighten", "row_version"):
                continue
            for src in (d, defaults):
                v = _typed(src.get(f.name), str(f.type))
                if v is not None:
                    vals[f.name] = v
                    break
        version = d.get("row_version", 1)
        vals["row_version"] = version if isinstance(version, int) and not isinstance(version, bool) else 1
        vals["warnings"] = tuple(_strings(d.get("flags")) + _strings(d.get("warnings")))
        vals["notes"] = tuple(_strings(d.get("notes")))
        vals["tighten"] = tuple(_strings(d.get("tighten")))
        for k in ("workload_id", "device", "status"):
            vals.setdefault(k, "?")
        vals.setdefault("session_id", None)
        return cls(**vals)


def _typed(v: Any, annotation: str) -> Any:
    """``v`` if it has the type ``annotation`` names (numbers finite), else None."""
    if v is None:
        return None
    if annotation.startswith("bool"):
        return v if isinstance(v, bool) else None
    if annotation.startswith(("float", "int")):
        x = finite(v)
        if x is None:
            return None
        return int(v) if annotation.startswith("int") and x.is_integer() else v
    if annotation.startswith("str"):
        return v if isinstance(v, str) else None
    if annotation.startswith("Mapping"):
        return v if isinstance(v, Mapping) else None
    return v


def _strings(v: Any) -> list[str]:
    if v is None:
        return []
    if isinstance(v, (list, tuple)):
        return [x if isinstance(x, str) else str(x) for x in v]
    return [str(v)]


def migrate_payload(d: Mapping[str, Any]) -> dict[str, Any]:
    """A stored workload payload of any version in the version-2 layout, values as stored (``ledger show``).

    Version-1 ``flags`` become ``warnings``; fields a version-1 row lacks are added as None/empty; every stored
    key and value is kept as it is, so nothing stored is hidden or altered.
    """
    out = dict(d)
    if "row_version" not in out:
        out["row_version"] = 1
    if "flags" in out:
        out["warnings"] = _strings(out.pop("flags")) + _strings(d.get("warnings"))
    for f in dataclasses.fields(WorkloadRow):
        if f.name not in out:
            out[f.name] = (
                []
                if f.name in ("warnings", "notes", "tighten")
                else (False if f.name == "simulated" else None)
            )
    return out


__all__ = [
    "ROW_VERSION",
    "STATUSES",
    "WINDOW_FIELDS",
    "Assessment",
    "Measurement",
    "WorkloadRow",
    "migrate_payload",
    "windows_payload",
]
