"""The running window verdict: all compute of the last ``verdict_window_s`` judged as a whole.

A run split into chunks that each stay under the threshold, or into bursts below the detection hysteresis,
must not escape the threshold: the exporter publishes a verdict over a sliding window of the ledger's workload
rows *plus* the net energy measured outside any workload in that window (gauge ``flopwatch_window_verdict``).

The combination is :func:`flopwatch.evaluate.window.combine_window` — the same function, on the same rows and
the same outside energy, as ``flopwatch verdict LEDGER --window W --profile P``, so the live gauge and the
verifier's command agree:

* rows: those that *end* inside the window (their upper bounds count); of them, those that also *start* inside
  it add their lower bounds;
* outside energy of each device: its cumulative ``outside_net_energy_j`` (checkpoint rows, see
  :class:`~flopwatch.monitor.accounting.Totals`) now, minus its value at the last checkpoint at or before the
  window's start — exactly what the command reads back from the ledger's checkpoint rows;
* the time outside the rows is what the device's sensor (its ``start`` rows' kind and rate, :meth:`WorkloadWindow.started`)
  partly did not see: its blind share of that time is bounded at the fastest format's peak
  (:func:`flopwatch.estimate.context.unseen_outside`, the command's own arithmetic; round 12, `outside-blind`);
* the outside energy is bounded by the device's η_max (:func:`flopwatch.estimate.verdict.profile_envelope`:
  physics and the datasheet only, never the profile); an unknown device has none and any outside energy leaves
  the window unbounded ("uncertain").

What forbids a window's "below" (a clock set back or jumped, an impossible running total, no checkpoint, an
unobserved gap) is :class:`~flopwatch.evaluate.window.WindowRules`, the command's own rule set, fed the rows as
they arrive.

One :class:`~flopwatch.evaluate.window.WindowVerdict` type for the gauge and the command; the monitor passes its
typed rows (:class:`~flopwatch.monitor.rows.WorkloadRow`) straight to ``combine_window``, no payload round trip.

**The hook.** The combination rule is a plain function, :data:`WindowVerdictFn`: ``fn(WindowInput) ->
WindowVerdict``, passed as ``Monitor(config, window_verdict=fn)``; :func:`default_window_verdict` is the one
above.
"""

from __future__ import annotations

import dataclasses
import math
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from flopwatch.estimate.bounds import resolve_device
from flopwatch.estimate.context import start_row_sensors, unseen_outside
from flopwatch.evaluate.window import (
    WindowRules,
    WindowVerdict,
    combine_window,
    flag_unassessed,
    outside_at,
    outside_bound,
)
from flopwatch.units import finite

if TYPE_CHECKING:
    from flopwatch.monitor.rows import WorkloadRow

VERDICTS = ("above", "below", "uncertain", "n/a")
#: Checkpoint gaps remembered for the median spacing (``flopwatch verdict`` takes every gap in the ledger; a
#: daemon checkpointing every minute keeps about four hours of them: memory bounded, the median is stable).
_GAPS_KEPT = 256


@dataclass(frozen=True)
class WindowInput:
    """What a window verdict function is given."""

    rows: Sequence[WorkloadRow]  # rows ending inside the window
    lower_rows: Sequence[WorkloadRow]  # of them, those starting inside it too
    outside_net_energy_j: Mapping[str, float]  # per device, net energy outside workloads in the window
    envelope_flops_per_j: Mapping[str, float]  # per device, best FLOP per joule the hardware can reach
    threshold_flops: float | None
    window_s: float
    start_wall: float
    end_wall: float
    notes: tuple[str, ...] = field(default=())
    #: reasons of the window itself that forbid "below" (a clock that went backwards, an unobserved gap, an
    #: impossible running total): the ones ``flopwatch verdict`` finds in the ledger
    blockers: tuple[str, ...] = field(default=())
    #: FLOPs the window's time outside rows may hold unseen by each device's sensor, and the notes that say so
    unseen: tuple[float, tuple[str, ...]] = (0.0, ())


WindowVerdictFn = Callable[[WindowInput], WindowVerdict]


def default_window_verdict(w: WindowInput) -> WindowVerdict:
    """:func:`flopwatch.evaluate.window.combine_window` on the window's typed rows (as ``flopwatch verdict`` groups
    "all"): one :class:`~flopwatch.evaluate.window.WindowVerdict`, decided by ``threshold_verdict``."""
    e, f = outside_bound(w.outside_net_energy_j, w.envelope_flops_per_j)
    v = combine_window(
        [flag_unassessed(r) for r in w.rows],  # as `flopwatch verdict` flags them
        threshold_flops=w.threshold_flops,
        unattributed_net_energy_j=e,
        envelope_flops_per_j=f,
        lower_rows=w.lower_rows,
        blockers=w.blockers,
        window_s=w.window_s,
        unseen=w.unseen,
    )
    return dataclasses.replace(v, warnings=(*w.notes, *v.warnings))


class WorkloadWindow:
    """Workload rows and outside-energy marks of the last ``window_s`` seconds, and the verdict over them.

    ``mark(wall, outside)`` records each checkpoint's cumulative ``outside_net_energy_j`` per device (the daemon
    calls it with the values it writes into the checkpoint row); the oldest mark at or before the window's
    start is kept as the baseline, older ones are dropped, so memory stays bounded by the window.
    """

    def __init__(
        self,
        *,
        window_s: float,
        threshold_flops: float | None,
        verdict_fn: WindowVerdictFn = default_window_verdict,
        envelopes: Mapping[str, float] | None = None,
    ) -> None:
        self.window_s = window_s
        self.threshold_flops = threshold_flops
        self.verdict_fn = verdict_fn
        self.envelopes: dict[str, float] = dict(envelopes or {})
        self._rows: deque[WorkloadRow] = deque()
        self._open: list[WorkloadRow] = []  # rows without a finite end time (a damaged ledger): never trimmed
        self._marks: deque[tuple[float, dict[str, float]]] = deque()
        self._newest = -math.inf
        self._first = math.inf  # the earliest time the ledger shows (rows' ends, checkpoints, session starts)
        self.starts: list[Mapping[str, Any]] = []  # the daemon's start rows (each session's sensors and rate)
        self.names: dict[str, str] = {}  # each device's name (start rows, rows), for its datasheet
        # the rules `flopwatch verdict` applies to the ledger, fed as the rows arrive in ledger order
        self.rules = WindowRules(gaps_kept=_GAPS_KEPT)

    def started(self, payload: Mapping[str, Any]) -> None:
        """A daemon ``start`` row (earlier sessions' replayed, then this session's): its time and each device's
        sensor context and name, as ``flopwatch verdict`` reads them."""
        self.starts.append({k: payload.get(k) for k in ("sensors", "context")})
        for s in start_row_sensors(payload):
            if s.get("name"):
                self.names[str(s["device"])] = str(s["name"])
        self._seen(payload.get("wall"))

    def _seen(self, wall: object) -> None:
        if (w := finite(wall)) is not None:
            self._first = min(self._first, w)

    def _spec(self, device: str) -> Any:
        """The device's datasheet as ``flopwatch verdict`` resolves it (a name, then the id; ``sim:KEY`` as KEY)."""
        nm = self.names.get(device)
        return resolve_device(
            None, nm, device, *(str(x).removeprefix("sim:").split(":")[0] for x in (nm, device) if x)
        )

    def add(self, row: WorkloadRow) -> None:
        if row.device_name and row.device:
            self.names[str(row.device)] = str(row.device_name)
        self._seen(row.end_wall)
        self.rules.row(row.end_wall, session=row.session_id, ref=row.workload_id, t_s=row.end_t_s)
        if row.end_wall is None:  # no finite end time: in every window, as `flopwatch verdict` counts it
            self._open.append(row)
            return
        self._rows.append(row)
        if math.isfinite(row.end_wall):
            self._newest = max(self._newest, row.end_wall)
            self._trim(self._newest)

    def mark(
        self,
        wall: float | None,
        outside: Mapping[str, float],
        *,
        t_s: float | None = None,
        session_id: str | None = None,
    ) -> None:
        """A checkpoint at ``wall`` with these cumulative outside energies (J per device); ``t_s`` and
        ``session_id`` (its monotonic time and daemon session) let a clock jump block the window."""
        self._seen(wall)
        if wall is None or not self.rules.checkpoint(wall, outside, session=session_id, t_s=t_s):
            return  # no time, or out of order (a clock step back, a standing blocker now): the newer mark stands
        vals = {d: float(x) for d, x in outside.items() if finite(x) is not None}
        self._marks.append((wall, vals))
        self._newest = max(self._newest, wall)
        self._trim(self._newest)

    def _trim(self, now_wall: float) -> None:
        cut = now_wall - self.window_s
        while self._rows and (self._rows[0].end_wall or -math.inf) <= cut:
            self._rows.popleft()
        # keep the last mark at or before the cut (the window's baseline) and everything after it
        while len(self._marks) >= 2 and self._marks[1][0] <= cut:
            self._marks.popleft()

    def rows(self, now_wall: float) -> list[WorkloadRow]:
        self._trim(now_wall)
        return [*self._open, *self._rows]

    def evaluate(self, outside_now: Mapping[str, float], *, now_wall: float) -> WindowVerdict:
        """The verdict over ``(now_wall − window_s, now_wall]``; ``outside_now``: cumulative J per device."""
        cut = now_wall - self.window_s
        rows = [r for r in self.rows(now_wall) if (r.end_wall if r.end_wall is not None else math.inf) > cut]
        inside = [r for r in rows if (r.start_wall if r.start_wall is not None else -math.inf) >= cut]
        outside = {
            d: max(0.0, float(x) - outside_at(self._marks, d, cut))
            for d, x in outside_now.items()
            if finite(x) is not None
        }
        devs = sorted({*outside, *(str(r.device) for r in rows if r.device)})
        span = (max(cut, self._first), now_wall)
        specs = {d: self._spec(d) for d in devs}
        parts = unseen_outside(specs, self.starts, span, rows, self.rules.restarts).values()
        notes: tuple[str, ...] = ()
        missing = sorted(d for d, j in outside.items() if j > 0 and finite(self.envelopes.get(d)) is None)
        if missing:
            notes = (
                f"no efficiency envelope for {', '.join(missing)} (no profile or unknown device): "
                "energy outside workloads leaves the window unbounded",
            )
        return self.verdict_fn(
            WindowInput(
                rows=rows,
                lower_rows=inside,
                outside_net_energy_j=outside,
                envelope_flops_per_j=self.envelopes,
                threshold_flops=self.threshold_flops,
                window_s=self.window_s,
                start_wall=cut,
                end_wall=now_wall,
                notes=notes,
                blockers=self.rules.blockers(cut),
                unseen=(sum(x for x, _ in parts), tuple(n for _, n in parts if n)),
            )
        )


__all__ = [
    "VERDICTS",
    "WindowInput",
    "WindowVerdict",
    "WindowVerdictFn",
    "WorkloadWindow",
    "default_window_verdict",
]
