"""The attack suite: every attack of issue 15's table, plus controls, and the honest-run check.

Attacks run on the published Jetson v2 records where they apply (skipped, with the reason, when the data is
absent) and on the simulated devices otherwise. Each attacked run is judged at T = 0.8 × its truth, so the
correct verdict is "above"; "uncertain" is sound, "below" is a wrong clearance. Honest fp32/bf16 frontier
runs are judged at 0.5 × and 2 × truth, where "above" and "below" are the correct decisive answers.
"""

from __future__ import annotations

import logging
import time
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from flopwatch.io import published_data_problem
from flopwatch.redteam.core import AttackResult, HonestResult

log = logging.getLogger("flopwatch.redteam")


def _counts(rs: list[AttackResult], key: str) -> dict[str, int]:
    return {v: sum(getattr(r, key) == v for r in rs) for v in ("above", "uncertain", "below", "none")}


@dataclass
class SuiteResult:
    attacks: list[AttackResult]
    honest: list[HonestResult]
    seed: int
    quick: bool
    skipped: list[str] = field(default_factory=list)
    open_attacks: list[AttackResult] = field(default_factory=list)  # known, not defended: reported apart
    timing_s: float = 0.0

    @property
    def wrong_below(self) -> int:
        return sum(a.wrong_below for a in self.attacks)

    def honest_pct(self, which: str) -> float | None:
        if not self.honest:
            return None
        want = "above" if which == "half" else "below"
        ok = sum((h.verdict_half if which == "half" else h.verdict_double) == want for h in self.honest)
        return ok / len(self.honest) * 100.0

    def summary_by_attack(self, *, open_: bool = False) -> list[dict[str, Any]]:
        groups: dict[tuple[str, str], list[AttackResult]] = defaultdict(list)
        for a in self.open_attacks if open_ else self.attacks:
            groups[(a.attack, a.device)].append(a)
        out = []
        for (name, dev), rs in groups.items():
            n = len(rs)
            hidden = sorted(r.hidden_flops / r.truth_flops * 100 for r in rs)
            unproven = sorted(r.unproven_flops / r.truth_flops * 100 for r in rs)
            up = sorted(r.upper_flops / r.truth_flops for r in rs)
            ratio = sorted((r.estimate_flops or 0.0) / r.truth_flops for r in rs)
            out.append(
                {
                    "attack": name,
                    "device": dev,
                    "n": n,
                    "estimate_over_truth": [ratio[0], ratio[-1]],
                    "verdicts": _counts(rs, "verdict"),
                    "before_verdicts": _counts(rs, "before_verdict"),
                    "wrong_below": sum(r.wrong_below for r in rs),
                    "wrong_below_before": sum(r.before_verdict == "below" for r in rs),
                    "hidden_pct": [hidden[0], hidden[-1]],
                    "unproven_pct": [unproven[0], unproven[-1]],
                    "upper_over_truth": [up[0], up[-1]],  # inf: unbounded
                    "simulated": rs[0].simulated,
                }
            )
        return out

    def to_dict(self) -> dict[str, Any]:
        half, double = self.honest_pct("half"), self.honest_pct("double")
        return {
            "attacks": [a.to_dict() for a in self.attacks],
            "wrong_below": self.wrong_below,
            "wrong_below_before": sum(a.before_verdict == "below" for a in self.attacks),
            # the contract's single figure: the worse of the two thresholds
            "honest_decisive_pct": None if half is None or double is None else min(half, double),
            "honest_decisive_pct_at_half": half,
            "honest_decisive_pct_at_double": double,
            "honest": [h.to_dict() for h in self.honest],
            "by_attack": self.summary_by_attack(),
            # attacks we know defeat the verifier (docs/redteam.md, "what remains open"): not in wrong_below
            "open_attacks": [a.to_dict() for a in self.open_attacks],
            "open_by_attack": self.summary_by_attack(open_=True),
            "open_wrong_below": sum(a.wrong_below for a in self.open_attacks),
            "seed": self.seed,
            "quick": self.quick,
            "skipped": self.skipped,
            "timing_s": self.timing_s,
            "simulated_note": "rows with simulated=true come from flopwatch.sim digital twins, not measurements",
        }


def run_suite(*, quick: bool = False, seed: int = 0, data_root: str | Path | None = None) -> SuiteResult:
    """Run every attack; ``seed`` offsets the simulated sessions (calibration and attack seeds)."""
    from flopwatch.redteam import real, simulated

    t0 = time.perf_counter()
    simulated.CAL_SEED, simulated.ATTACK_SEED = 1 + 2 * seed, 2 + 2 * seed
    attacks: list[AttackResult] = []
    honest: list[HonestResult] = []
    skipped: list[str] = []
    open_attacks: list[AttackResult] = []
    v2 = real.find_v2(data_root)
    altered = published_data_problem(v2) if v2 is not None else None
    if v2 is None:
        skipped.append(
            "real-data attacks and honest runs: ../shared/data/jetson_flop_estimator/eval_results_v2_records.json "
            "not found"
        )
    elif altered is not None:
        # Results on data that is not the published data would be claims about something else: refuse them.
        log.warning("%s; the real-data attacks are not run", altered)
        skipped.append(f"real-data attacks and honest runs: {altered}")
    else:
        attacks.extend(real.real_attacks(v2))
        honest.extend(real.real_honest(v2))
        open_attacks = list(real.power_padding_attacks(v2))
    attacks.extend(simulated.split_attacks(quick=quick))
    attacks.extend(simulated.burst_attacks(quick=quick))
    attacks.extend(simulated.power_cap_attacks(quick=quick))
    honest.extend(simulated.sim_honest(quick=quick))
    return SuiteResult(attacks, honest, seed, quick, skipped, open_attacks, time.perf_counter() - t0)
