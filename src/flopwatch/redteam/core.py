"""Result rows of the attack suite, and the verdict the code before issue 15 would have given."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from flopwatch.errors import InputError
from flopwatch.estimate.profile import Profile
from flopwatch.estimate.verdict import threshold_verdict
from flopwatch.units import finite


def legacy_verdict(
    prof: Profile | None,
    net_energy_j: float,
    duration_s: float,
    tb_moved: float | None,
    mean_util: float | None,
    threshold_flops: float,
) -> str:
    """What flopwatch said before sound bounds: the calibrated interval alone, with the profile's precision
    (a stripped label reads as the profile's), net energy clipped at 0 as the monitor did."""
    if prof is None:
        return "none"
    try:
        est = prof.estimate(
            max(0.0, net_energy_j),
            duration_s,
            tb_moved=tb_moved,
            mean_util=mean_util,
            dtype=prof.dtype if prof.dtype != "all" else "fp32",
        )
    except InputError:
        return "none"
    # the rule of that time was today's one rule applied to the calibrated interval, without its warnings (a
    # negative upper end read as 0: it was "below" then too)
    return threshold_verdict(None, est.lower_flops, max(est.upper_flops, 0.0), threshold_flops)


@dataclass(frozen=True)
class AttackResult:
    """One attacked run: truth, what the verifier says at T = 0.8 × truth and at the evader's best threshold
    (just above the reported upper bound, where a clearance comes without a warning if it comes at all)."""

    attack: str  # the family's name
    family: str  # the family's key
    device: str
    label: str
    truth_flops: float
    estimate_flops: float | None
    lower_flops: float
    upper_flops: float
    verdict: str  # at T = 0.8 × truth
    expected: str
    before_verdict: str
    regime: str
    note: str
    simulated: bool
    first_warning: str = ""
    best_threshold_flops: float | None = None  # None: the upper bound is infinite, no threshold clears it
    verdict_best: str = "n/a"
    n_warnings: int = 0
    dropped: tuple[str, ...] = ()  # observables the installed verifier does not read yet

    @property
    def threshold_flops(self) -> float:
        return 0.8 * self.truth_flops

    @property
    def wrong_below_08(self) -> bool:
        return self.verdict == "below" and self.truth_flops > self.threshold_flops

    @property
    def wrong_below_best(self) -> bool:
        T = self.best_threshold_flops
        return T is not None and self.verdict_best == "below" and self.truth_flops > T

    @property
    def wrong_below(self) -> bool:
        """A run above the threshold cleared ("wrong below") at either threshold."""
        return self.wrong_below_08 or self.wrong_below_best

    @property
    def hidden_flops(self) -> float:
        """Compute still hidden: the part of the truth above the upper bound. 0 when the upper bound holds."""
        return max(0.0, self.truth_flops - self.upper_flops)

    @property
    def unproven_flops(self) -> float:
        """The cost of soundness on the other side: compute the verifier cannot prove (truth − lower bound)."""
        return max(0.0, self.truth_flops - self.lower_flops)

    def to_dict(self) -> dict[str, Any]:
        return {
            "attack": self.attack,
            "family": self.family,
            "device": self.device,
            "label": self.label,
            "truth_flops": self.truth_flops,
            "threshold_flops": self.threshold_flops,
            "estimate_flops": finite(self.estimate_flops),
            "lower_flops": finite(self.lower_flops),
            "upper_flops": finite(self.upper_flops),  # null: unbounded
            "verdict": self.verdict,
            "expected": self.expected,
            "before_verdict": self.before_verdict,
            "wrong_below": self.wrong_below,
            "wrong_below_at_0_8": self.wrong_below_08,
            "best_threshold_flops": self.best_threshold_flops,
            "verdict_at_best_threshold": self.verdict_best,
            "wrong_below_at_best_threshold": self.wrong_below_best,
            "hidden_flops": self.hidden_flops,
            "hidden_pct": self.hidden_flops / self.truth_flops * 100.0,
            "unproven_pct": self.unproven_flops / self.truth_flops * 100.0,
            "upper_over_truth": self.upper_flops / self.truth_flops
            if math.isfinite(self.upper_flops)
            else None,
            "regime": self.regime,
            "note": self.note,
            "simulated": self.simulated,
            "reason": self.first_warning,
            "n_warnings": self.n_warnings,
            "observables_not_read": list(self.dropped),
        }


def expected_verdict(truth: float, threshold: float | None) -> str:
    if threshold is None:
        return "n/a"
    return "above" if truth > threshold else "below"


@dataclass(frozen=True)
class HonestResult:
    """An honest run judged by a calibration without it: at T = truth (an "above" there is a false
    accusation), at 0.5 × and 2 × truth, and the smallest T ÷ truth at which it would be "below"."""

    device: str
    label: str
    dtype: str
    truth_flops: float
    verdict_half: str
    verdict_double: str
    verdict_at_truth: str
    simulated: bool
    decisive_at: Mapping[str, float | None]  # observable set → T ÷ truth (None: never "below")
    note: str = ""
    blocked_by: str = ""  # the first warning that keeps it from "below" at any T with every observable it has

    @property
    def false_above(self) -> bool:
        return self.verdict_at_truth == "above"

    def to_dict(self) -> dict[str, Any]:
        return {
            "device": self.device,
            "label": self.label,
            "dtype": self.dtype,
            "truth_flops": self.truth_flops,
            "verdict_at_half": self.verdict_half,
            "verdict_at_double": self.verdict_double,
            "verdict_at_truth": self.verdict_at_truth,
            "false_above": self.false_above,
            "decisive_at": dict(self.decisive_at),
            "simulated": self.simulated,
            "note": self.note,
            "blocked_by": self.blocked_by,
        }
