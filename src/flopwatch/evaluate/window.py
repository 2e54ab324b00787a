"""Verdicts over a time window and across workloads: a job split into pieces is judged as a whole.

A per-workload verdict can be gamed by splitting a job into chunks that each stay under the threshold, or
into bursts too short for the detector's hysteresis (no ledger row at all). Over a window the verifier
therefore adds up, soundly:

* **lower** = Σ lower bounds of the workloads that lie entirely inside the window;
* **upper** = Σ upper bounds of the workloads that end inside it + the net energy measured *outside* them × η_max
  (:mod:`flopwatch.estimate.sound`: physics and the datasheet) + the sensor's blind share of the time outside them
  at peak (``estimate.context.unseen_outside``). A workload without a finite upper bound makes the sum unbounded.

One :class:`WindowVerdict` type for the command and the monitor's gauge; rows may be typed
(``monitor.rows.WorkloadRow``) or stored payloads. With ``--profile`` every row is re-assessed from its
observables in the verifier's context (its profile hash): a row recorded under another profile is flagged.

"above" when lower > T, "below" when upper < T and no row in the window carries a warning, else
"uncertain" (:func:`combine_window`, a pure function; the monitor's ``flopwatch_window_verdict`` gauge calls it
on the same rows and the same outside energy, so the live gauge and ``flopwatch verdict`` agree).
:func:`ledger_window_verdicts` judges a ledger's entries, read by the caller through
:mod:`flopwatch.monitor.ledger` (read-only), grouped by device, job or everything.
"""

from __future__ import annotations

import math
import re
from collections import deque
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, fields, replace
from typing import TYPE_CHECKING, Any, Protocol

from flopwatch.errors import InputError
from flopwatch.estimate.verdict import threshold_verdict
from flopwatch.units import finite

if TYPE_CHECKING:
    from flopwatch.estimate.profile import Profile

#: Wall-clock steps back smaller than this are rounding or NTP slew, not a clock set back.
_CLOCK_SLACK_S = 5.0
#: A checkpoint gap longer than this many times the median spacing (and than _GAP_MIN_S) was not observed.
_GAP_FACTOR = 10.0
_GAP_MIN_S = 900.0
#: A wall clock may drift from the monotonic one by this much between two rows before it counts as a jump
#: (NTP slews at most 0.5 ms/s, so 1 % plus 30 s is far beyond any honest clock).
JUMP_SLACK_S = 30.0
JUMP_RATIO = 0.01

#: The kinds of ledger row (``monitor.ledger_format.KINDS``; evaluate may not import the monitor): a row of any
#: other kind holds something the window does not judge.
LEDGER_KINDS = ("genesis", "start", "workload", "checkpoint", "recovery", "stop")

WINDOW_UNITS = {"s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0, "w": 7 * 86400.0}


def parse_window(text: str) -> float | None:
    """Seconds in ``"24h"``, ``"7d"``, ``"90m"``, ``"3600s"``; None for ``"all"``."""
    t = str(text).strip().lower()
    if t == "all":
        return None
    m = re.fullmatch(r"(\d+(?:\.\d+)?)\s*([smhdw])", t)
    if not m or float(m.group(1)) <= 0:
        raise InputError(f"must be like 24h, 7d, 90m or 'all', got {text!r}", field="--window")
    return float(m.group(1)) * WINDOW_UNITS[m.group(2)]


def _strings(v: Any) -> list[str]:
    if v is None or v == "":
        return []
    return [str(x) for x in v] if isinstance(v, (list, tuple)) else [str(v)]


@dataclass(frozen=True)
class WindowVerdict:
    """THE window verdict of flopwatch (``flopwatch verdict`` groups and the monitor's window gauge): combined
    bounds of a group of workloads plus the energy outside them, and the decision of
    :func:`~flopwatch.estimate.verdict.threshold_verdict` against the threshold."""

    verdict: str  # above | below | uncertain | n/a
    lower_flops: float
    upper_flops: float  # may be inf: unbounded
    n_workloads: int
    window_s: float | None
    threshold_flops: float | None
    warnings: tuple[str, ...] = field(default=())
    unattributed_net_energy_j: float = 0.0
    estimate_flops: float | None = None
    key: str = "all"
    unattributed_upper_flops: float = 0.0
    #: T / Σ estimates above which "below" becomes possible (None: blocked by a warning, or no estimate)
    decisive_at: float | None = None
    notes: tuple[str, ...] = ()  # how the bound was taken (blocking nothing): blind time outside rows

    @property
    def workloads(self) -> int:  # the monitor's name
        return self.n_workloads

    @property
    def reasons(self) -> tuple[str, ...]:  # the monitor's name
        return self.warnings

    @property
    def outside_net_energy_j(self) -> float:  # the monitor's name
        return self.unattributed_net_energy_j

    def to_dict(self) -> dict[str, Any]:
        return {
            "key": self.key,
            "n_workloads": self.n_workloads,
            "estimate_flops": finite(self.estimate_flops),
            "lower_flops": finite(self.lower_flops),
            "upper_flops": finite(self.upper_flops),
            "unattributed_net_energy_j": self.unattributed_net_energy_j,
            "unattributed_upper_flops": finite(self.unattributed_upper_flops),
            "verdict": self.verdict,
            "threshold_flops": self.threshold_flops,
            "warnings": list(self.warnings),
            "decisive_at": finite(self.decisive_at),
            "notes": list(self.notes),
        }


class RowBounds(Protocol):
    """What the window reads of a workload row: a typed row (``monitor.rows.WorkloadRow``) has these attributes;
    a stored payload (``flopwatch verdict`` reading a ledger) has them as keys."""

    lower_flops: float | None
    upper_flops: float | None
    estimate_flops: float | None
    warnings: Sequence[str]


def _field(r: Any, k: str, default: Any = None) -> Any:
    return r.get(k, default) if isinstance(r, Mapping) else getattr(r, k, default)


def combine_window(
    rows: Iterable[RowBounds | Mapping[str, Any]],
    *,
    threshold_flops: float | None = None,
    unattributed_net_energy_j: float = 0.0,
    envelope_flops_per_j: float = math.inf,
    key: str = "all",
    lower_rows: Iterable[RowBounds | Mapping[str, Any]] | None = None,
    blockers: Sequence[str] = (),
    window_s: float | None = None,
    unseen: tuple[float, Sequence[str]] = (0.0, ()),
) -> WindowVerdict:
    """Sound combination (module docstring). ``rows``: typed rows or mappings with ``lower_flops``/``upper_flops``/
    ``estimate_flops`` (missing or non-finite: lower 0, upper unbounded). ``lower_rows``: the rows whose
    lower bounds count (default: all of ``rows``; a window passes only those entirely inside it). ``blockers``:
    reasons of the window itself (a clock that went backwards, an unobserved gap) that forbid a "below". ``unseen``:
    the FLOPs the time outside rows may hold unseen by the sensors (``estimate.context.unseen_outside``), notes."""
    rows = list(rows)
    warnings: list[str] = []
    upper, est, have_est = 0.0, 0.0, False
    for r in rows:
        u = finite(_field(r, "upper_flops"))
        if u is None or u < 0:
            upper = math.inf
            warnings.append(
                f"workload {_field(r, 'workload_id', '?')} has no upper bound: the window is unbounded"
            )
        else:
            upper += u
        e = finite(_field(r, "estimate_flops"))
        if e is not None:
            est += max(0.0, e)
            have_est = True
    lower = 0.0
    for r in rows if lower_rows is None else lower_rows:
        lo = finite(_field(r, "lower_flops"))
        if lo is not None and lo > 0:
            lower += lo
    ua, ua_up = max(0.0, float(unattributed_net_energy_j)), max(0.0, unseen[0])
    if ua > 0:
        ua_up += ua * envelope_flops_per_j if math.isfinite(envelope_flops_per_j) else math.inf
        if not math.isfinite(envelope_flops_per_j):
            warnings.append(
                f"{ua:.4g} J of net energy outside detected workloads and no efficiency envelope to bound it"
            )
    upper += ua_up
    # a workload row with a violated assumption cannot be the basis of a "below" (one rule everywhere:
    # estimate.verdict.threshold_verdict); the window's own reasons do not block it, they are notes on bounds
    warned = [r for r in rows if _strings(_field(r, "warnings"))]
    blockers = tuple(blockers)
    warnings.extend(blockers)
    if warned:
        why = list(dict.fromkeys(w for r in warned for w in _strings(_field(r, "warnings"))))
        more = f" (+{len(why) - 3} more)" if len(why) > 3 else ""
        blockers += (
            f"{len(warned)} workload row(s) in the window carry warnings: {'; '.join(why[:3])}{more}",
        )
        warnings.append(blockers[-1])
    # a row whose estimate is missing, non-finite or non-positive is never evidence of "below" (issue 15 item 2),
    # whatever its (possibly forged or legacy) bounds say
    bad = [r for r in rows if (finite(_field(r, "estimate_flops")) or 0.0) <= 0]
    if bad:
        blockers += (f"{len(bad)} workload row(s) without a positive finite estimate",)
        warnings.append(blockers[-1])
    # The window's bounds are sums of sound per-row bounds (each row's non-positive or missing estimate is
    # already a warning there), so the upper bound stands in for the estimate; a window with no workload and
    # no energy outside one holds exactly zero FLOPs.
    point = upper if upper > 0 else (math.ulp(0.0) if not rows and ua == 0 else None)
    v = threshold_verdict(point, lower, upper, threshold_flops, blockers)
    return WindowVerdict(
        key=key,
        window_s=window_s,
        n_workloads=len(rows),
        estimate_flops=est if have_est else None,
        lower_flops=lower,
        upper_flops=upper,
        unattributed_net_energy_j=ua,
        unattributed_upper_flops=ua_up,
        verdict=v,
        threshold_flops=threshold_flops,
        warnings=tuple(warnings),
        notes=tuple(unseen[1]),
        decisive_at=upper / est if have_est and est > 0 and math.isfinite(upper) and not blockers else None,
    )


# --------------------------------------------------------------------------------------------- the rules
def flag_unassessed(r: Any) -> Any:
    """``r`` (a typed row or a payload), with the warning "no regime assessment" when it has no ``regime``: a row
    nobody assessed from its observables (legacy, or stripped of its assessment) supports no "below", live or
    offline (``assess`` always names a regime)."""
    if _field(r, "regime") is not None:
        return r
    ws = [*_strings(_field(r, "warnings")), "no regime assessment"]
    return {**r, "warnings": ws} if isinstance(r, Mapping) else replace(r, warnings=tuple(ws))


class ClockJumpCheck:
    """The one clock-jump rule of the live gauge and ``flopwatch verdict`` (issue 23 item 3).

    Rows keep the sensor's monotonic time beside wall time; within one daemon session both advance together. A
    wall clock that moves more than :data:`JUMP_SLACK_S` + :data:`JUMP_RATIO` × the monotonic step away from it
    between two rows of a session (a clock run fast to empty a rolling window, a step back) is a blocker: the
    rows' wall times cannot place a window. :meth:`feed` returns the blocker's text the first time, else None.
    """

    def __init__(self) -> None:
        self._last: dict[str, tuple[object, float, float]] = {}  # session → (row ref, t_s, wall)
        self.blocker: str | None = None

    def feed(self, session: object, ref: object, t_s: object, wall: object) -> str | None:
        t, w, sid = finite(t_s), finite(wall), str(session or "")
        if t is None or w is None or not sid or self.blocker is not None:
            return None
        prev = self._last.get(sid)
        self._last[sid] = (ref, t, w)
        if prev is None:
            return None
        ref0, t0, w0 = prev
        dt, dw = t - t0, w - w0
        if dt >= 0 and abs(dw - dt) > JUMP_SLACK_S + JUMP_RATIO * dt:
            self.blocker = (
                f"the node's wall clock moved {dw:+.0f} s while its monotonic clock moved {dt:+.0f} s "
                f"(rows {ref0} → {ref}): a clock jump; its rows' times cannot place a window"
            )
            return self.blocker
        return None


class WindowRules:
    """THE rules that forbid a window's "below", fed the ledger's rows in ledger order: by the live gauge
    (:class:`flopwatch.monitor.window.WorkloadWindow`, as rows arrive) and by :func:`ledger_window_verdicts`
    (``flopwatch verdict``, reading the ledger back), so a run is judged alike live and offline.

    A wall clock that goes back and an impossible running total block every window for good; no checkpoint
    after a row leaves the outside energy unknown; a checkpoint gap far longer than the usual spacing, or any
    gap across a daemon restart (:meth:`restart`), blocks the windows that overlap it; a clock jump within a
    daemon session (:class:`ClockJumpCheck`, fed only where rows carry their session) blocks for good. ``gaps_kept`` bounds the gaps remembered for the median spacing (the
    daemon's memory; None: all, as the command reads a whole ledger).
    """

    def __init__(self, *, gaps_kept: int | None = None) -> None:
        self.standing: list[str] = []
        self._any_row = False
        self._last_wall = -math.inf
        self._cp_wall: float | None = None
        self._gaps: deque[tuple[float, float]] = deque(maxlen=gaps_kept)
        self._node_cp: dict[str, float] = {}  # each node's last checkpoint (several ledgers: `node`)
        self.restarts: list[tuple[float, float]] = []  # checkpoint gaps across a daemon restart
        self._restarted: set[str] = set()
        self._jumps = ClockJumpCheck()

    def restart(self, node: str | None = "") -> None:
        """A daemon session of ``node`` (None: any) starts (a ``start`` row): from its last checkpoint to its next no
        sensor of the node ran, so nothing bridges that time however short (round 12, `restart-gap`)."""
        self._restarted |= set(self._node_cp) if node is None else {node} & set(self._node_cp)

    def _stand(self, kind: str, text: str) -> None:
        if not any(kind in b for b in self.standing):  # one blocker of a kind is enough
            self.standing.append(text)

    def _clock(self, wall: float | None, session: object, ref: object, t_s: object) -> None:
        b = self._jumps.feed(session, ref, t_s, wall)
        if b is not None:
            self.standing.append(b)
        if wall is None:
            return
        # a wall clock that goes back (beyond rounding) moves rows in or out of any window and picks the wrong
        # running total, so nothing may be "below" on such a ledger
        if wall < self._last_wall - _CLOCK_SLACK_S:
            self._stand(
                "backwards", f"the ledger's wall clock goes backwards ({self._last_wall:.0f} → {wall:.0f})"
            )
        self._last_wall = max(self._last_wall, wall)

    def row(
        self, end_wall: object, *, session: object = None, ref: object = None, t_s: object = None
    ) -> None:
        """A workload row ending at ``end_wall`` (None or not finite: no time, no clock check)."""
        self._any_row = True
        self._clock(finite(end_wall), session, ref, t_s)

    def checkpoint(
        self,
        wall: object,
        outside: Mapping[str, object] | None,
        *,
        session: object = None,
        t_s: object = None,
        node: str = "",
    ) -> bool:
        """A checkpoint of ``node`` at ``wall`` with its cumulative outside-workload energy per device (J); False
        when it places nothing (no finite wall or no devices) or comes out of order (the newer one stands)."""
        w = finite(wall)
        self._clock(w, session, "checkpoint", t_s)
        if w is None or not isinstance(outside, Mapping):
            return False
        for d, x in outside.items():
            if x is not None and not (finite(x) is not None and x >= 0):  # type: ignore[operator]
                self._stand(
                    "impossible", f"checkpoint of {d} has an impossible outside-workload energy ({x!r})"
                )
        if self._cp_wall is not None and w < self._cp_wall:
            return False
        if (prev := self._node_cp.get(node)) is not None:  # per node: others' checkpoints saw nothing here
            self._gaps.append((prev, w))
            self.restarts += [(prev, w)] if node in self._restarted else []
        self._restarted.discard(node)
        self._node_cp[node] = self._cp_wall = w
        return True

    def blockers(self, cut: float | None) -> tuple[str, ...]:
        """Why no window starting at ``cut`` (None: the whole ledger) and ending now may be "below"."""
        out = list(self.standing)
        if self._any_row and self._cp_wall is None:
            out.append("no checkpoint in the ledger: the energy outside workloads is unknown")
        # the time after the last checkpoint up to the latest row is a gap too: no outside energy is known in it
        # (round 6, `rows-after-checkpoints`: a row 3 days after the last checkpoint anchored the window there)
        tail = [(self._cp_wall, self._last_wall)] if self._cp_wall is not None else []
        if self._gaps or tail:
            # a gap much longer than the daemon's checkpoint spacing is time nobody observed (monitor stopped, or
            # the clock jumped forward); compute in it is invisible, so a window that overlaps it cannot be "below"
            spans = sorted(b - a for a, b in self._gaps) or [0.0]
            med = spans[len(spans) // 2]
            # few checkpoints: a day
            limit = max(_GAP_FACTOR * med, _GAP_MIN_S) if len(self._gaps) >= 3 else 86400.0
            for a, b in [*self._gaps, *tail]:
                if b - a > limit and (cut is None or b > cut):
                    out.append(
                        f"{b - a:.0f} s between checkpoints at {a:.0f} and {b:.0f} were not observed"
                        if (a, b) not in tail
                        else f"{b - a:.0f} s after the last checkpoint at {a:.0f}, up to a row at {b:.0f}, were not observed"
                    )
                    break
        hit = [(a, b) for a, b in self.restarts if cut is None or b > cut][:1]
        out += [f"the monitor restarted: the {b - a:.0f} s between checkpoints at {a:.0f} and {b:.0f} were not "
                "observed (no sensor ran), never 'below'" for a, b in hit]  # fmt: skip
        return tuple(out)


def outside_at(marks: Sequence[tuple[float, Mapping[str, float]]], dev: str, wall: float | None) -> float:
    """Cumulative net energy outside workloads of ``dev`` at the last mark (checkpoint, in time order) at or
    before ``wall`` (None: the last one); 0 before the first."""
    val = 0.0
    for w, vals in marks:
        if wall is not None and w > wall:
            break
        if dev in vals:
            val = vals[dev]
    return val


def outside_bound(outside_j: Mapping[str, float], envelopes: Mapping[str, float]) -> tuple[float, float]:
    """The outside energy of some devices (J) and the FLOP per joule that bounds it as a whole: each device's
    η_max weighted by its energy (a device without an envelope: inf, the window unbounded)."""
    e = up = 0.0
    for dev, j in outside_j.items():
        if j > 0:
            e += j
            up += j * envelopes.get(dev, math.inf)
    return e, (up / e if e > 0 else math.inf)


# --------------------------------------------------------------------------------------------- ledger
#: Relative slack between a row's signed upper bound and the one recomputed from its observables (rounding).
_SIGNED_SLACK = 1e-6


def reassess_row(
    row: Mapping[str, Any], profile: Profile | None = None, device: str | None = None
) -> dict[str, Any]:
    """A ledger row judged by the verifier's rule, not the signer's (round 9, `signed-bound-understated`): its sound
    bounds recomputed from its observables and context (with ``profile``: also its estimate, lower bound and
    regime; without: the sound upper bound alone). The larger of the recomputed and the signed upper bound stands,
    with the union of the warnings; a signed bound under the recomputed one is named, and so is a row whose
    observables are missing (it cannot be recomputed). Each of these blocks "below"."""
    return reassess_rows([row], profile, device)[0]


def reassess_rows(
    rows: Sequence[Mapping[str, Any]], profile: Profile | None = None, device: str | None = None
) -> list[dict[str, Any]]:
    """:func:`reassess_row` of many rows, their sound bounds in one pass (``estimate.verdict.assess_many``)."""
    from flopwatch.estimate.verdict import assess_many

    args = [_assess_args(r, profile, device) for r in rows]
    done = iter(assess_many(profile, [x for x in args if x is not None]))
    return [
        _reassessed(r, profile, None if x is None else next(done)) for r, x in zip(rows, args, strict=True)
    ]


def _assess_args(
    row: Mapping[str, Any], profile: Profile | None, device: str | None
) -> tuple[Any, dict[str, Any]] | None:
    """``(observables, keyword arguments of assess)`` of a row; None when its observables are missing."""
    from flopwatch.estimate.observe import CONTEXT_KEYS, Observables, timestamp_span_s
    from flopwatch.estimate.verdict import device_claims, unnamed_device

    e, t = finite(row.get("net_energy_j")), finite(row.get("duration_s"))
    if e is None or t is None or t <= 0:
        return None
    obs = Observables(
        net_energy_j=e,
        duration_s=t,
        tb_moved=finite(row.get("tb_moved")),
        mean_util=finite(row.get("mean_util")),
        sm_clock_mhz=finite(row.get("mean_sm_clock_mhz", row.get("sm_clock_mhz"))),
        power_limit_w=finite(row.get("power_limit_w")),
        idle_power_w=finite(row.get("idle_power_w")),
        coverage=finite(row.get("coverage")),
        # the ranges and unobserved time the sound bound needs (monitor rows since issue 21; None: not observed)
        min_sm_clock_mhz=finite(row.get("min_sm_clock_mhz")),
        max_sm_clock_mhz=finite(row.get("max_sm_clock_mhz")),
        peak_power_w=finite(row.get("peak_power_w")),
        unobserved_s=finite(row.get("unobserved_s")),
        pipe_active_s=_pipes(row.get("pipe_active_s")),
        pipe_observed_s=finite(row.get("pipe_observed_s")),
        windows=_windows(row.get("windows")),
        span_s=timestamp_span_s(row),  # a duration under the row's own timestamps is widened (round 8)
    )
    # the row is judged in the verifier's context: a row made under another profile (or none recorded), a
    # replay/simulated sensor, a peak override or too slow a rate is flagged and never "below" (issue 21 item 6)
    ctx = {k: row.get(k) for k in CONTEXT_KEYS if k in row}
    # the verifier's --device and the row's names are claims: another model named is the more capable, warned;
    # a row naming none is judged as the profile's device, warned (round 9)
    dev, claim = device_claims(device, row.get("device_name"), row.get("device"))
    claim = claim or unnamed_device(profile, device, row.get("device_name"), row.get("device"))
    return obs, {
        "device": dev,
        "context": ctx,
        "verifier_context": None if profile is None else {"profile_sha256": profile.sha256()},
        "extra_warnings": () if claim is None else (claim,),
    }


def _reassessed(row: Mapping[str, Any], profile: Profile | None, a: Any) -> dict[str, Any]:
    """``row`` with the verifier's assessment ``a`` of it (None: its observables are missing) merged in."""
    wid = row.get("workload_id", "?")
    old = _strings(row.get("warnings"))
    if a is None:
        why = (
            f"workload {wid}: its net energy and duration are not recorded, so its signed bound cannot be "
            "recomputed from observables: never 'below'"
        )
        out = {**row, "warnings": list(dict.fromkeys([*old, why]))}
        blank = {"lower_flops": 0.0, "upper_flops": None, "estimate_flops": None}
        return out if profile is None else {**out, **blank}
    # what the monitor measured (sensor errors, idle floor, coverage) still holds: keep it
    warns = [*old, *a.warnings]
    signed, assessed = finite(row.get("upper_flops")), row.get("regime") is not None
    if assessed and (signed is None or signed < 0):
        up: float | None = None  # the signer called it unbounded: it may widen, and does
    elif assessed and signed is not None and signed >= a.upper_flops:
        up = signed
    else:
        up = finite(a.upper_flops)
        if assessed and signed is not None and signed < a.upper_flops * (1 - _SIGNED_SLACK):
            warns.append(
                f"workload {wid}: its signed upper bound {signed:.4g} is under {a.upper_flops:.4g}, recomputed "
                "from its observables (signed under another rule, or edited): the larger stands, never 'below'"
            )
    status = row.get("status")
    if status is not None and status != "complete":
        warns.append(
            f"workload {wid} has status {status!r}: the run may be longer than its row, never 'below'"
        )
    est = finite(row.get("estimate_flops"))
    if profile is None and est is not None and est > a.upper_flops:  # two views of one run that disagree
        warns.append(
            f"workload {wid}: its signed estimate {est:.4g} exceeds the sound upper bound {a.upper_flops:.4g} "
            "recomputed from its observables: never 'below'"
        )
    common = {
        "upper_flops": up,
        "warnings": list(dict.fromkeys(warns)),
        # how the bound was taken (a row naming no sensor: its least-observed one)
        "notes": [n for n in a.notes if profile is not None or not n.startswith("no calibration profile")],
    }
    if profile is None:  # the signed estimate and lower bound stand (they never make a "below")
        lo = finite(row.get("lower_flops"))
        return {**row, **common, "lower_flops": None if lo is None else min(lo, up if up is not None else lo)}
    calibrated = {"estimate_flops": a.estimate_flops, "lower_flops": a.lower_flops, "regime": a.regime}
    return {**row, **common, **calibrated}


def _pipes(v: Any) -> dict[str, float] | None:
    """A row's ``pipe_active_s`` when every pipe is a finite number >= 0, else None (not observed)."""
    from flopwatch.estimate.observe import PIPES

    if not isinstance(v, Mapping):
        return None
    out = {k: finite(v.get(k)) for k in PIPES}
    return out if all(x is not None and x >= 0 for x in out.values()) else None  # type: ignore[return-value]


def _windows(v: Any) -> Any:
    """A row's stored ``windows`` (lists of numbers per field, null: not observed) as ``ObservedWindows``; None
    when absent or malformed (the run is then one window, which only loosens the bound)."""
    from flopwatch.estimate.observe import ObservedWindows

    dt, e = (v.get("dt_s"), v.get("net_energy_j")) if isinstance(v, Mapping) else (None, None)
    if not isinstance(dt, list) or not isinstance(e, list) or any(finite(x) is None for x in (*dt, *e)):
        return None

    def arr(x: Any) -> list[float] | None:
        return [float("nan") if finite(y) is None else float(y) for y in x] if isinstance(x, list) else None

    try:
        return ObservedWindows(**{f.name: arr(v.get(f.name)) for f in fields(ObservedWindows)})
    except (TypeError, ValueError):
        return None


def _dev(r: Mapping[str, Any]) -> str:  # a row's device as `devices` names it (a number or list: its text)
    return str(r.get("device") or "")


def _node_of(name: object, labels: Sequence[str]) -> str:
    """The node a device id (``NODE/device``) or a checkpoint's ``node`` names, when it is one of the ledgers'
    ``labels`` (``flopwatch verdict`` over several ledgers: ``monitor.nodes.namespace`` sets both); else the one
    node (a node's own ``node`` key or a slash in its device ids names nothing)."""
    n = str(name or "").split("/", 1)[0]
    return n if n in labels else ""


def ledger_window_verdicts(
    entries: Iterable[Any],
    *,
    source: str = "",
    threshold_flops: float | None,
    window_s: float | None,
    by: str = "all",
    profile: Profile | None = None,
    device: str | None = None,
    blockers: Sequence[str] = (),
    node_labels: Sequence[str] = (),
) -> dict[str, Any]:
    """Window verdicts of a ledger's entries (``flopwatch.monitor.ledger.read_entries``, read by the caller: evaluate
    does not import the monitor, which imports evaluate). ``by``: "all", "device" or "job". ``blockers``: reasons
    from outside the entries that forbid "below" (the caller's ledger verification failed). ``node_labels``: the
    ledgers' labels when the entries are several nodes' (``monitor.nodes.namespace``)."""
    from flopwatch.estimate.bounds import idle_excess_w, resolve_device
    from flopwatch.estimate.context import start_row_sensors, unseen_outside
    from flopwatch.estimate.verdict import device_claims, profile_envelope

    if by not in ("all", "device", "job"):
        raise InputError(f"must be device, job or all, got {by!r}", field="--by")
    if device is not None and resolve_device(device) is None:
        raise InputError(f"unknown device {device!r}", field="--device")
    rows: list[dict[str, Any]] = []
    cps: list[tuple[float, dict[str, float]]] = []  # (wall, finite outside J per device)
    devs_seen: set[str] = set()
    last_cp: dict[str, set[str]] = {}  # the devices of each node's last checkpoint
    names: dict[str, dict[str, None]] = {}  # every name each device is given (start, workload rows), in order
    walls: list[float] = []
    idles: dict[str, float] = {}  # the daemon's idle baseline of each device ("*": all)
    began: list[float] = []  # when sessions began
    starts: list[Mapping[str, Any]] = []  # the daemon's start rows (each session's sensors and rate)
    seen: set[str] = set()
    blockers = list(blockers)
    rules = WindowRules()  # the live gauge's rules, fed in the same (ledger) order
    unknown: dict[str, int] = {}
    # a device's running outside total falls only when rows land that take its energy (round 10, `outside-reset`)
    rowed: dict[str, float] = {}  # per device: net energy of its workload rows since its last checkpoint
    last_out: dict[str, float] = {}
    fell: dict[str, float] = {}
    for ent in entries:
        p = ent.payload if isinstance(ent.payload, Mapping) else {}
        if ent.kind not in LEDGER_KINDS:
            unknown[str(ent.kind)] = unknown.get(str(ent.kind), 0) + 1
        # only the rows the window uses (daemon start/stop rows carry the host's clock, not the sensor's)
        if ent.kind == "workload":
            rules.row(p.get("end_wall"))
            d0 = str(p.get("device") or "")
            rowed[d0] = rowed.get(d0, 0.0) + max(0.0, finite(p.get("net_energy_j")) or 0.0)
            wid = p.get("workload_id")
            if wid is not None and str(wid) in seen:  # one workload counted once (its lower bound too)
                dup = f"workload {wid} appears more than once; counted once"
                blockers += [dup] if dup not in blockers else []
                continue
            if wid is not None:
                seen.add(str(wid))
            rows.append(dict(p))
            walls += [w] if (w := finite(p.get("end_wall"))) is not None else []
            if p.get("device") and p.get("device_name"):
                names.setdefault(str(p["device"]), {})[str(p["device_name"])] = None
        elif ent.kind == "checkpoint":
            devs = p.get("devices")
            devs = devs if isinstance(devs, Mapping) else None
            out = devs and {str(d): v.get("outside_net_energy_j") if isinstance(v, Mapping) else None for d, v in devs.items()}  # fmt: skip
            rules.checkpoint(p.get("wall"), out, node=(nd := _node_of(p.get("node"), node_labels)))
            for d, x in (out or {}).items():
                if (v := finite(x)) is not None:
                    drop = last_out.get(d, v) - v - rowed.pop(d, 0.0) - rowed.get("", 0.0)
                    if drop > 1.0 + 1e-6 * v:
                        fell[d] = max(fell.get(d, 0.0), drop)
                    last_out[d] = v
            w = finite(p.get("wall"))
            if w is not None and out is not None:
                # a window's baseline is a checkpoint certainly before its start: placed at the latest time a
                # witness allows (`witnessed_by`, monitor.nodes.place_by_witness; round 9, `late-witness`)
                at = max(w, finite(p.get("witnessed_by")) or w)
                cps.append((at, {d: float(x) for d, x in out.items() if finite(x) is not None}))
                devs_seen.update(out)
                # (a device listed with no finite value reports nothing either)
                last_cp[nd] = {d for d, x in out.items() if finite(x) is not None}
                walls.append(w)
        elif ent.kind == "start":
            began += [x] if (x := finite(p.get("wall"))) is not None else []
            sens = start_row_sensors(p)
            rules.restart(_node_of(sens[0]["device"], node_labels) if sens else None)
            starts.append(p)
            for s in (s for s in sens if s.get("name")):
                names.setdefault(str(s["device"]), {})[str(s["name"])] = None
            if (x := finite(p.get("idle_power_w"))) is not None:  # the daemon's baseline, for its devices
                idles.update({d: max(idles.get(d, x), x) for d in [str(s["device"]) for s in sens] or ["*"]})
    cps.sort(key=lambda x: x[0])
    if fell:
        blockers.append(
            "the running total of energy outside workloads falls by more than the workload rows between "
            f"checkpoints take ({', '.join(f'{d}: {j:.4g} J' for d, j in fell.items())}): reset, never 'below'"
        )
    if unknown:  # a heavy workload written as another kind is in no window (round 9, `row-kind-unknown`)
        blockers.append(
            f"{sum(unknown.values())} ledger row(s) of a kind the verdict does not know "
            f"({', '.join(map(repr, unknown))}): what they hold is not judged, never 'below'"
        )
    # a device its node's last checkpoint no longer reports: its energy outside workloads since is unknown
    # (round 9, `checkpoint-drops-device`: the window read it as the last value reported, 0 J)
    dropped = sorted(d for d in devs_seen if d not in last_cp.get(_node_of(d, node_labels), {d}))
    if dropped:
        blockers.append(
            f"the last checkpoint no longer reports device(s) {', '.join(dropped)}: their energy outside "
            "workloads since is unknown, never 'below'"
        )
    end = max(walls) if walls else None
    start = None if window_s is None or end is None else end - window_s
    warnings: list[str] = []
    blockers.extend(rules.blockers(start))
    # every row judged by the verifier's rule from its observables, with or without a profile (round 9)
    rows = reassess_rows(rows, profile, device)
    if profile is None and any(r.get("regime") is None for r in rows):
        warnings.append(
            "rows without a regime assessment carry the calibrated interval only, which no verdict may trust "
            "outside the calibrated regime; pass --profile to recompute sound bounds from their observables"
        )
        rows = [flag_unassessed(r) for r in rows]

    def _in(r: Mapping[str, Any], k: str) -> bool:  # a row without a finite time is in every window
        w = finite(r.get(k))
        return start is None or w is None or w >= start

    # a row counts in every window it may have ended in: a witness that saw it only later leaves its time open up
    # to that sighting (`witnessed_by`; round 9, `late-witness`)
    late = [
        r for r in rows if not _in(r, "end_wall") and (finite(r.get("witnessed_by")) or -math.inf) >= start
    ]
    if late:
        warnings.append(
            f"{len(late)} row(s) stamped before the window counted in it: no witnessed head before "
            f"{min(float(r['witnessed_by']) for r in late):.0f} shows they ended earlier"
        )
    in_win = [r for r in rows if _in(r, "end_wall")] + late
    inside = [
        r
        for r in in_win
        if start is None or ((finite(r.get("start_wall")) is not None) and _in(r, "start_wall"))
    ]
    devices = sorted({str(r.get("device")) for r in rows if r.get("device")} | devs_seen)
    ua: dict[str, float] = {}
    env: dict[str, float] = {}
    specs: dict[str, Any] = {}  # each device's datasheet as the window judges it
    # the time the window spans (the ledger's at most): its sensors' blind share outside rows, at peak
    span = None if end is None else (max(-math.inf if start is None else start, min(walls + began)), end)
    for d in devices:
        # up to the last checkpoint (a witness may place marks after the last stamp), from the window's baseline
        ua[d] = max(0.0, outside_at(cps, d, None) - (outside_at(cps, d, start) if start is not None else 0.0))
        # two names of one device that resolve to two models are two claims: the most capable, and a blocker
        # (round 6, `window-name-conflict`); else its last name (the rows' over the start row's)
        nm, why = device_claims(*reversed(names.get(d, {})))
        if why is not None:
            blockers.append(f"device {d}: {why}")
        # a sensor name names its model before the colon (``jetson:VDD_CPU_GPU_CV``), as in estimate.verdict
        spec = resolve_device(
            device, nm, d, *(str(x).removeprefix("sim:").split(":")[0] for x in (nm, d) if isinstance(x, str))
        )
        if spec is None and device is None and profile is not None and profile.device_key:
            spec = resolve_device(profile.device_key)  # the device the profile was calibrated on
            if nm:
                # a recorded name no device answers to (a look-alike letter, round 5): its energy may not be
                # bounded by the profile's device's η_max without a word
                blockers.append(
                    f"device {d} is named {nm!r}, which names no device in the verifier's table; judged "
                    f"as the profile's device {spec.key if spec else '?'}: never 'below'"
                )
            elif ua[d] > 0:  # nothing names it: the profile's device is an assumption (round 9)
                blockers.append(
                    f"device {d} is named by no row: its energy outside workloads judged as the profile's device "
                    f"{spec.key if spec else '?'}, an assumption (give --device), never 'below'"
                )
        env[d] = profile_envelope(None, spec, None).flops_per_j  # physics (η_max), never a profile
        b = max(idles.get(d, -math.inf), idles.get("*", -math.inf))
        if math.isfinite(b) and spec is not None and cps:  # outside energy against the daemon's baseline
            ref = None if profile is None else profile.verifier.get("idle_power_w", profile.idle_power_w)
            x, why = idle_excess_w(b, spec, ref)  # the run's rule (round 12, `daemon-idle`)
            base = max([w for w, _ in cps if start is not None and w <= start], default=min(walls + began))
            ua[d] += x * max(0.0, cps[-1][0] - base)
            blockers += [f"device {d}: the daemon's idle baseline is suspicious: {r}" for r in why]
        specs[d] = spec  # for its sensor's blind time outside rows (round 12, `outside-blind`)
    unseen = {} if span is None else unseen_outside(specs, starts, span, in_win, rules.restarts)

    def group(rs: list[dict[str, Any]], key: str, ins: list[dict[str, Any]], devs: Iterable[str],
              why: tuple[str, ...] = ()) -> WindowVerdict:  # fmt: skip
        e, f = outside_bound({d: ua[d] for d in devs}, env)
        u = [unseen[d] for d in devs if d in unseen]
        return combine_window(
            rs,
            threshold_flops=threshold_flops,
            unattributed_net_energy_j=e,
            envelope_flops_per_j=f,
            key=key,
            lower_rows=ins,
            blockers=(*blockers, *why),
            window_s=window_s,
            unseen=(sum(x for x, _ in u), [n for _, n in u if n]),
        )

    groups: list[WindowVerdict] = []
    if by == "device":
        # a row naming no device may have run on any: its upper bound counts in every device's group, its lower in
        # none (round 10, `device-group-unnamed`: it was in no group, and its device's group "below")
        anon = [r for r in in_win if not _dev(r)]
        msg = f"{len(anon)} row(s) name no device: counted in every device's group, never 'below'"
        why = (msg,) if anon else ()
        for d in devices or (["(device not named)"] if anon else []):
            rs, ins = [r for r in in_win if _dev(r) == d], [r for r in inside if _dev(r) == d]
            groups.append(group(rs + anon, d, ins, [d] if d in ua else [], why))
    elif by == "job":

        def job(r: Mapping[str, Any]) -> str:
            return str(r.get("job_id") or r.get("job") or r.get("workload_id") or "?")

        for j in sorted({job(r) for r in in_win}):
            rs, ins = [r for r in in_win if job(r) == j], [r for r in inside if job(r) == j]
            groups.append(group(rs, j, ins, []))
        groups.append(group([], "(outside workloads)", [], devices))
    total = group(in_win, "all", inside, devices)
    notes: dict[str, int] = {}  # each distinct note of the reassessed rows once, with how many rows it is on
    for r in rows:
        for n in dict.fromkeys(_strings(r.get("notes"))):
            notes[n] = notes.get(n, 0) + 1
    return {
        "ledger": source,
        "threshold_flops": threshold_flops,
        "window_s": window_s,
        "window_start_wall": start,
        "window_end_wall": end,
        "by": by,
        "groups": [g.to_dict() for g in groups] if by != "all" else [total.to_dict()],
        "total": total.to_dict(),
        "warnings": warnings,
        "notes": [f"{k} of {len(rows)} row(s): {n}" for n, k in notes.items()] + list(total.notes),
    }
