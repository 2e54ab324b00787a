"""The running window verdict: all compute of the last ``verdict_window_s`` judged as a whole.

A run split into chunks that each stay under the threshold, or into bursts below the detection hysteresis,
must not escape the threshold: the exporter publishes a verdict over a sliding window of the ledger's workload
rows *plus* the busy energy outside any workload (gauge ``flopwatch_window_verdict``).

**The hook.** The combination rule is a plain function, :data:`WindowVerdictFn`::

    fn(rows: Sequence[WorkloadRow], outside: Mapping[str, Totals], threshold_flops: float | None,
       window_s: float) -> WindowVerdict

passed as ``Monitor(config, window_verdict=fn)``. :func:`default_window_verdict` is deliberately simple and
conservative; a ledger-wide verdict with soundly combined bounds (``flopwatch verdict``, issue 15) replaces it
by passing its own function — nothing else in the daemon changes.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from flopwatch.monitor.accounting import Totals
    from flopwatch.monitor.rows import WorkloadRow

VERDICTS = ("above", "below", "uncertain", "n/a")


@dataclass(frozen=True)
class WindowVerdict:
    """Verdict over a window: bounds on the FLOPs done in it and the decision against the threshold."""

    verdict: str  # one of VERDICTS
    lower_flops: float
    upper_flops: float  # may be inf: unknown
    workloads: int
    window_s: float
    threshold_flops: float | None
    reasons: tuple[str, ...] = ()


WindowVerdictFn = Callable[
    [Sequence["WorkloadRow"], Mapping[str, "Totals"], "float | None", float], WindowVerdict
]


def _finite(x: object) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


def default_window_verdict(
    rows: Sequence[WorkloadRow],
    outside: Mapping[str, Totals],
    threshold_flops: float | None,
    window_s: float,
) -> WindowVerdict:
    """Sum of the rows' bounds, plus an upper allowance for busy energy outside workloads.

    * lower = Σ lower bounds of rows in the window (a row without one adds 0: the lower bound stays a bound);
    * upper = Σ upper bounds; a row without a finite positive upper bound makes the upper bound unknown (inf);
    * busy net energy outside workloads since the ledger began (short bursts, not windowed: conservative)
      adds the devices' running FLOPs estimate in proportion, times the widest upper/estimate ratio of the
      rows (at least 1);
    * any row with warnings or a non-decisive verdict cannot be the basis of a "below": the window is
      "below" only when the upper bound is finite, under the threshold, and no row carries a warning.
    """
    lower = 0.0
    upper = 0.0
    ratio = 1.0
    reasons: list[str] = []
    warned = 0
    for r in rows:
        if _finite(r.lower_flops) and r.lower_flops > 0:  # type: ignore[operator]
            lower += r.lower_flops  # type: ignore[operator]
        if (
            _finite(r.upper_flops)
            and r.upper_flops > 0
            and _finite(r.estimate_flops)
            and r.estimate_flops > 0
        ):  # type: ignore[operator]
            upper += r.upper_flops  # type: ignore[operator]
            ratio = max(ratio, r.upper_flops / r.estimate_flops)  # type: ignore[operator]
        else:
            upper = math.inf
        if r.warnings:
            warned += 1
    if math.isinf(upper):
        reasons.append("a workload in the window has no finite positive upper bound")
    if warned:
        reasons.append(f"{warned} workload(s) in the window carry warnings")
    for dev, t in outside.items():
        busy, out = t.busy_net_energy_j, t.busy_net_energy_j - t.workload_net_energy_j
        if out > 0 and busy > 0:
            share = min(1.0, out / busy)
            upper += ratio * share * t.estimated_flops
            reasons.append(f"{dev}: {out:.4g} J of busy energy outside workloads counted in the upper bound")
    if threshold_flops is None:
        verdict = "n/a"
    elif lower > threshold_flops:
        verdict = "above"
    elif upper < threshold_flops and not warned:
        verdict = "below"
    else:
        verdict = "uncertain"
    return WindowVerdict(verdict, lower, upper, len(rows), window_s, threshold_flops, tuple(reasons))


class WorkloadWindow:
    """Workload rows of the last ``window_s`` seconds (by end wall time) and the verdict function over them."""

    def __init__(
        self, *, window_s: float, threshold_flops: float | None, verdict_fn: WindowVerdictFn
    ) -> None:
        self.window_s = window_s
        self.threshold_flops = threshold_flops
        self.verdict_fn = verdict_fn
        self._rows: deque[WorkloadRow] = deque()
        self._newest = -math.inf

    def add(self, row: WorkloadRow) -> None:
        self._rows.append(row)
        # Rows arrive roughly in end-time order: drop what the newest row already puts out of the window.
        if row.end_wall is not None:
            self._newest = max(self._newest, row.end_wall)
            self.rows(self._newest)

    def rows(self, now_wall: float) -> list[WorkloadRow]:
        cut = now_wall - self.window_s
        while self._rows and (self._rows[0].end_wall or 0.0) < cut:
            self._rows.popleft()
        return list(self._rows)

    def evaluate(self, outside: Mapping[str, Totals], *, now_wall: float) -> WindowVerdict:
        return self.verdict_fn(self.rows(now_wall), outside, self.threshold_flops, self.window_s)
