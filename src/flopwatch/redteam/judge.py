"""The one place the red team asks the verifier for a verdict.

Every attacked and honest run of the suite goes through :func:`judge`, which calls
:func:`flopwatch.estimate.verdict.assess` exactly once per threshold. Keeping the call here means a change of
the verifier's API is one edit. Arguments the installed ``assess`` does not take yet (the verifier's context,
extra warnings) are handled as that API defines them: extra warnings are passed through the project's one
rule, :func:`~flopwatch.estimate.verdict.threshold_verdict`, which turns any warning into "never below".
Observables the installed :class:`~flopwatch.estimate.regime.Observables` lacks (pipe counters, clock
extremes, unobserved time) are dropped and listed in :attr:`Judgement.dropped`.
"""

from __future__ import annotations

import dataclasses
import inspect
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from flopwatch.estimate.profile import Profile
from flopwatch.estimate.regime import Observables
from flopwatch.estimate.verdict import assess, threshold_verdict

_ASSESS_PARAMS = frozenset(inspect.signature(assess).parameters)
OBS_FIELDS = frozenset(f.name for f in dataclasses.fields(Observables))
#: Just above the upper bound: the evader's best threshold (the largest T the verifier still clears).
BEST_T_FACTOR = 1.0 + 1e-6


def supports(observable: str) -> bool:
    """Whether the installed verifier reads ``observable`` (e.g. ``pipe_active_s``)."""
    return observable in OBS_FIELDS


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
    kw: dict[str, Any] = {"device": device, "threshold_flops": threshold_flops, "label": label}
    passed_extra = "extra_warnings" in _ASSESS_PARAMS
    if passed_extra:
        kw["extra_warnings"] = tuple(extra_warnings)
    if "context" in _ASSESS_PARAMS and context is not None:
        kw["context"] = dict(context)
    if "verifier_context" in _ASSESS_PARAMS and verifier_context is not None:
        kw["verifier_context"] = dict(verifier_context)
    a = assess(profile, obs, **kw)
    warnings = tuple(a.warnings)
    verdict = a.verdict
    if not passed_extra and extra_warnings:
        warnings = warnings + tuple(extra_warnings)
        verdict = threshold_verdict(a.estimate_flops, a.lower_flops, a.upper_flops, threshold_flops, warnings)
    lower = float(getattr(a, "verdict_lower_flops", a.lower_flops))
    upper = float(getattr(a, "verdict_upper_flops", a.upper_flops))
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
    return Judgement(verdict, lower, upper, a.estimate_flops, warnings, threshold_flops, dec, dropped)
