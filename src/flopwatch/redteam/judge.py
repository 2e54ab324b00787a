"""The one place the red team asks the verifier for a verdict.

Every attacked and honest run of the suite goes through :func:`judge`, which calls
:func:`flopwatch.estimate.verdict.assess` exactly once per threshold. Keeping the call here means a change of
the verifier's API is one edit. Values :class:`~flopwatch.estimate.observe.Observables` has no field for are
dropped and listed in :attr:`Judgement.dropped`.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from flopwatch.estimate.observe import Observables
from flopwatch.estimate.profile import Profile
from flopwatch.estimate.verdict import assess

OBS_FIELDS = frozenset(f.name for f in dataclasses.fields(Observables))
#: Just above the upper bound: the evader's best threshold (the largest T the verifier still clears).
BEST_T_FACTOR = 1.0 + 1e-6


def make_observables(values: Mapping[str, Any]) -> tuple[Observables, tuple[str, ...]]:
    """Observables from a dict, keeping the fields the installed verifier knows; the rest are returned."""
    keep = {k: v for k, v in values.items() if k in OBS_FIELDS}
    dropped = tuple(sorted(k for k, v in values.items() if k not in OBS_FIELDS and v is not None))
    return Observables(**keep), dropped


@dataclass(frozen=True)
class Judgement:
    """The verifier's answer for one run at one threshold."""

    verdict: str
    lower_flops: float
    upper_flops: float
    estimate_flops: float | None
    warnings: tuple[str, ...]
    threshold_flops: float
    decisive_at_flops: float | None  # the smallest T at which the verdict would be "below" (None: never)
    dropped: tuple[str, ...] = ()


def judge(
    profile: Profile | None,
    values: Mapping[str, Any],
    *,
    device: str,
    threshold_flops: float,
    label: str | None = None,
    extra_warnings: Sequence[str] = (),
    context: Mapping[str, Any] | None = None,
    verifier_context: Mapping[str, Any] | None = None,
) -> Judgement:
    """Assess one run (observables ``values``) at ``threshold_flops`` with the verifier's ``profile``."""
    obs, dropped = make_observables(values)
    a = assess(
        profile, obs, device=device, threshold_flops=threshold_flops, label=label,
        extra_warnings=tuple(extra_warnings), context=context, verifier_context=verifier_context,
    )  # fmt: skip
    warnings = tuple(a.warnings)
    upper = float(a.verdict_upper_flops)
    # decisive at: the smallest T with a "below" — just above the upper bound, when nothing else blocks it
    # (threshold_verdict: a positive estimate, no warning). The verifier's own ``decisive_at`` is relative to
    # its estimate; the suite reports T ÷ truth, so it is computed from the bound here.
    ok = (
        not warnings
        and a.estimate_flops is not None
        and math.isfinite(a.estimate_flops)
        and a.estimate_flops > 0
        and math.isfinite(upper)
    )
    dec = upper * BEST_T_FACTOR if ok else None
    lower = float(a.verdict_lower_flops)
    return Judgement(a.verdict, lower, upper, a.estimate_flops, warnings, threshold_flops, dec, dropped)
