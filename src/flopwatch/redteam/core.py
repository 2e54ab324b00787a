"""Result rows of the attack suite, and the verdict the code before issue 15 would have given."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from flopwatch.errors import InputError
from flopwatch.estimate.profile import Profile
from flopwatch.estimate.verdict import Assessment


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
    # the rule of that time, kept here as history (today's rule: estimate.verdict.threshold_verdict)
    if est.lower_flops > threshold_flops:
        return "above"
    return "below" if est.upper_flops < threshold_flops else "uncertain"


@dataclass(frozen=True)
class AttackResult:
    """One attacked run: truth, what the verifier says now, and what it said before."""

    attack: str
    device: str
    label: str
    truth_flops: float
    estimate_flops: float | None
    lower_flops: float
    upper_flops: float
    verdict: str
    expected: str
    before_verdict: str
    regime: str
    note: str
    simulated: bool
    first_warning: str = ""

    @classmethod
    def from_assessment(
        cls,
        attack: str,
        device: str,
        label: str,
        truth: float,
        a: Assessment,
        before: str,
        note: str,
        *,
        simulated: bool,
    ) -> AttackResult:
        return cls(
            attack=attack,
            device=device,
            label=label,
            truth_flops=truth,
            estimate_flops=a.estimate_flops,
            lower_flops=a.lower_flops,
            upper_flops=a.upper_flops,
            verdict=a.verdict,
            expected=expected_verdict(truth, a.threshold_flops),
            before_verdict=before,
            regime=a.regime,
            note=note,
            simulated=simulated,
            first_warning=a.warnings[0] if a.warnings else "",
        )

    @property
    def threshold_flops(self) -> float:
        return 0.8 * self.truth_flops

    @property
    def wrong_below(self) -> bool:
        return self.verdict == "below" and self.truth_flops > self.threshold_flops

    @property
    def hidden_flops(self) -> float:
        """Compute still hidden: the part of the truth above the upper bound, which a threshold between the
        two would clear ("below") although the job exceeds it. 0 when the upper bound holds."""
        return max(0.0, self.truth_flops - self.upper_flops)

    @property
    def unproven_flops(self) -> float:
        """The cost of soundness on the other side: compute the verifier cannot prove (truth − lower bound)."""
        return max(0.0, self.truth_flops - self.lower_flops)

    def to_dict(self) -> dict[str, Any]:
        def fin(x: float | None) -> float | None:
            return x if x is None or math.isfinite(x) else None

        return {
            "attack": self.attack,
            "device": self.device,
            "label": self.label,
            "truth_flops": self.truth_flops,
            "threshold_flops": self.threshold_flops,
            "estimate_flops": fin(self.estimate_flops),
            "lower_flops": fin(self.lower_flops),
            "upper_flops": fin(self.upper_flops),  # null: unbounded
            "verdict": self.verdict,
            "expected": self.expected,
            "before_verdict": self.before_verdict,
            "wrong_below": self.wrong_below,
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
        }


def expected_verdict(truth: float, threshold: float | None) -> str:
    if threshold is None:
        return "n/a"
    return "above" if truth > threshold else "below"


@dataclass(frozen=True)
class HonestResult:
    """An honest frontier run judged at T = 0.5 × and 2 × its truth (correct: "above" and "below")."""

    device: str
    label: str
    truth_flops: float
    verdict_half: str
    verdict_double: str
    simulated: bool

    def to_dict(self) -> dict[str, Any]:
        return {
            "device": self.device,
            "label": self.label,
            "truth_flops": self.truth_flops,
            "verdict_at_half": self.verdict_half,
            "verdict_at_double": self.verdict_double,
            "simulated": self.simulated,
        }
