"""The attack suite: every family of :data:`flopwatch.redteam.families.FAMILIES`, and the honest-run checks.

Each family's runs are judged (:func:`flopwatch.redteam.judge.judge`) with the family's configurations left
out of the calibration, at **T = 0.8 × truth** and at the **evader's best threshold** (just above the reported
upper bound: the largest T the verifier could still clear). A run above the threshold that is cleared is a
**wrong below**. Honest runs of every precision, clock and power limit are judged at T = truth (an "above"
there is a **wrongly accused** run, ``false_above`` in the JSON), at 0.5 × and 2 × truth, and their ``decisive_at``
(the smallest T ÷ truth at which the verdict is "below") is reported per set of observables (energy only; + clock and power limit; + pipes).
Each honest run is judged with the sensor context it was observed in (``real.v2_context``: the v2 records' INA3221
rail at 2 Hz; ``simulated.twin_context``: the sensor a twin's read-out emulates), as every other caller of the one
rule judges its rows.
"""

from __future__ import annotations

import logging
import math
import statistics
import time
from collections import defaultdict
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from flopwatch.devices import get_device
from flopwatch.estimate.verdict import profile_envelope
from flopwatch.evaluate.window import combine_window
from flopwatch.published import published_data_problem
from flopwatch.redteam.case import Case, shape
from flopwatch.redteam.core import AttackResult, HonestResult, expected_verdict, legacy_verdict
from flopwatch.redteam.engine import KINDS, World, variants
from flopwatch.redteam.families import FAMILIES, Family
from flopwatch.redteam.judge import BEST_T_FACTOR, judge
from flopwatch.redteam.observe import SET_ORDER, keep_set
from flopwatch.redteam.real import real_cases, real_honest, v2_context
from flopwatch.redteam.simulated import honest_run, locked_clock, make_acc, twin_context, with_dtype

log = logging.getLogger("flopwatch.redteam")

#: The one name of the error this suite counts: a run above the threshold that the verifier cleared.
WRONG_BELOW = "wrong below"


def _counts(rs: Sequence[AttackResult], key: str) -> dict[str, int]:
    return {v: sum(getattr(r, key) == v for r in rs) for v in ("above", "uncertain", "below", "none", "n/a")}


@dataclass
class SuiteResult:
    attacks: list[AttackResult]
    honest: list[HonestResult]
    seed: int
    quick: bool
    families: list[Family] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    timing_s: float = 0.0
    calibration: dict[str, dict[str, Any]] = field(default_factory=dict)  # family → attacked / calibrated

    @property
    def wrong_below(self) -> int:
        return sum(a.wrong_below for a in self.attacks)

    @property
    def false_above(self) -> int:
        return sum(h.false_above for h in self.honest)

    def honest_pct(self, which: str) -> float | None:
        if not self.honest:
            return None
        want = "above" if which == "half" else "below"
        ok = sum((h.verdict_half if which == "half" else h.verdict_double) == want for h in self.honest)
        return ok / len(self.honest) * 100.0

    def by_family(self) -> list[dict[str, Any]]:
        groups: dict[str, list[AttackResult]] = defaultdict(list)
        for a in self.attacks:
            groups[a.family].append(a)
        out = []
        for fam in self.families:
            rs = groups.get(fam.key, [])
            n = len(rs)
            wb = sum(r.wrong_below for r in rs)
            up = [r.upper_flops / r.truth_flops for r in rs]
            status = "not run" if n == 0 else ("held" if wb == 0 else "BROKEN")
            out.append(
                {
                    **fam.to_dict(),
                    "n": n,
                    "status": status,
                    "verdicts": _counts(rs, "verdict"),
                    "verdicts_at_best_threshold": _counts(rs, "verdict_best"),
                    "wrong_below": wb,
                    "wrong_below_at_0_8": sum(r.wrong_below_08 for r in rs),
                    "wrong_below_at_best_threshold": sum(r.wrong_below_best for r in rs),
                    "wrong_below_before": sum(r.before_verdict == "below" for r in rs),
                    "hidden_pct_max": max((r.hidden_flops / r.truth_flops * 100 for r in rs), default=None),
                    "upper_over_truth": [min(up), max(up)] if up else None,
                    "devices_run": sorted({r.device for r in rs}),
                    "simulated": any(r.simulated for r in rs),
                    "example_reason": next((r.first_warning for r in rs if r.first_warning), ""),
                    "observables_not_read": sorted({d for r in rs for d in r.dropped}),
                }
            )
        return out

    def decisive_summary(self) -> list[dict[str, Any]]:
        """Median decisive_at of honest runs per device, precision and observable set."""
        groups: dict[tuple[str, str, str], list[float | None]] = defaultdict(list)
        for h in self.honest:
            for s, v in h.decisive_at.items():
                groups[(h.device, h.dtype, s)].append(v)
        out = []
        for (dev, dt, s), vs in sorted(groups.items()):
            fin = [v for v in vs if v is not None]
            n = len(vs)
            out.append(
                {
                    "device": dev,
                    "dtype": dt,
                    "observables": s,
                    "n": n,
                    "median_decisive_at": statistics.median([v if v is not None else math.inf for v in vs])
                    if n
                    else None,
                    "decided_pct": 100.0 * len(fin) / n if n else None,
                    "within_2_5x_pct": 100.0 * sum(v <= 2.5 for v in fin) / n if n else None,
                    "within_5x_pct": 100.0 * sum(v <= 5.0 for v in fin) / n if n else None,
                }
            )
        return out

    def to_dict(self) -> dict[str, Any]:
        half, double = self.honest_pct("half"), self.honest_pct("double")
        fams = self.by_family()
        return {
            "attacks": [a.to_dict() for a in self.attacks],
            "wrong_below": self.wrong_below,
            "wrong_below_at_0_8": sum(a.wrong_below_08 for a in self.attacks),
            "wrong_below_at_best_threshold": sum(a.wrong_below_best for a in self.attacks),
            "wrong_below_before": sum(a.before_verdict == "below" for a in self.attacks),
            "error_name": WRONG_BELOW,
            # stronger than no wrong below: runs whose truth exceeds the sound upper bound at all (a "below" would
            # then be one estimate or warning away); 0 means every bound held
            "upper_bound_violations": sum(a.hidden_flops > 0 for a in self.attacks),
            # of those, the ones no warning flagged (a lie about the observables themselves — a replayed trace,
            # a clock run fast — is bounded by nothing; its warning is the defence) and their families
            "upper_bound_violations_unwarned": sum(
                a.hidden_flops > 0 and a.n_warnings == 0 for a in self.attacks
            ),
            "upper_bound_violation_families": sorted({a.family for a in self.attacks if a.hidden_flops > 0}),
            "n_families": len(self.families),
            "families_held": sum(f["status"] == "held" for f in fams),
            "families_broken": [f["key"] for f in fams if f["status"] == "BROKEN"],
            "by_family": fams,
            "by_attack": fams,  # the name before issue 21
            "false_above": self.false_above,
            # the contract's single figure: the worse of the two thresholds
            "honest_decisive_pct": None if half is None or double is None else min(half, double),
            "honest_decisive_pct_at_half": half,
            "honest_decisive_pct_at_double": double,
            "honest": [h.to_dict() for h in self.honest],
            "decisive_at": self.decisive_summary(),
            "calibration_left_out": self.calibration,
            "open_attacks": [],  # every known attack is a family now (power padding included)
            "open_by_attack": [],
            "open_wrong_below": 0,
            "seed": self.seed,
            "quick": self.quick,
            "skipped": self.skipped,
            "timing_s": self.timing_s,
            "simulated_note": "rows with simulated=true come from flopwatch.sim digital twins, not measurements",
        }


# ------------------------------------------------------------------------------------------------- judging
def _judge_case(c: Case, T: float):  # noqa: ANN202 - a Judgement
    return judge(
        c.profile,
        keep_set(c.values, "+pipes"),  # every observable the verifier configured (None where absent)
        device=c.spec,
        threshold_flops=T,
        label=c.label,
        extra_warnings=c.extra_warnings,
        context=c.context,
        verifier_context=c.verifier_context,
    )


def _window(c: Case, T: float) -> tuple[str, float, float, float | None, tuple[str, ...], tuple[str, ...]]:
    """Window verdict: each row judged, then combined with the energy outside rows (evaluate/window.py)."""
    assert c.window is not None
    rows, blockers, dropped = [], [], ()
    for v in c.window["rows"]:
        j = judge(c.profile, keep_set(v, "+pipes"), device=c.spec, threshold_flops=T)
        rows.append(
            {"lower_flops": j.lower_flops, "upper_flops": j.upper_flops, "estimate_flops": j.estimate_flops}
        )
        blockers.extend(j.warnings)
        dropped = j.dropped
    env = profile_envelope(c.profile, get_device(c.spec), None).flops_per_j
    w = combine_window(
        rows,
        threshold_flops=T,
        unattributed_net_energy_j=c.window["outside_net_energy_j"],
        envelope_flops_per_j=env,
        blockers=tuple(blockers),
    )
    return w.verdict, w.lower_flops, w.upper_flops, w.estimate_flops, tuple(w.warnings), dropped


def cases(world: World, fam: Family, v2_path: Path | None = None) -> Iterator[Case]:
    """The cases of one family: the real v2 records' (when found) or the simulated generator's, one per
    variant of its sweep. Dispatched here, above both ``engine`` and ``real``, so neither imports the other."""
    if fam.kind == "real":
        if v2_path is not None:
            yield from real_cases(v2_path, fam)
        return
    for v in variants(fam, quick=world.quick):
        yield from KINDS[fam.kind](world, v)


def judge_attack(c: Case, attack_name: str) -> AttackResult:
    T = 0.8 * c.truth_flops
    if c.window is not None:
        verdict, lo, up, est, warns, dropped = _window(c, T)
        regime = "window"
    else:
        j = _judge_case(c, T)
        verdict, lo, up, est, warns, dropped = (
            j.verdict,
            j.lower_flops,
            j.upper_flops,
            j.estimate_flops,
            j.warnings,
            j.dropped,
        )
        regime = "—"
    best = up * BEST_T_FACTOR if math.isfinite(up) else None
    vbest = "n/a"
    if best is not None:
        vbest = _window(c, best)[0] if c.window is not None else _judge_case(c, best).verdict
    v = c.values
    before = legacy_verdict(
        c.profile, v.get("net_energy_j", 0.0), v["duration_s"], v.get("tb_moved"), v.get("mean_util"), T
    )
    return AttackResult(
        attack=attack_name,
        family=c.family,
        device=c.device,
        label=c.label,
        truth_flops=c.truth_flops,
        estimate_flops=est,
        lower_flops=lo,
        upper_flops=up,
        verdict=verdict,
        expected=expected_verdict(c.truth_flops, T),
        before_verdict=before,
        regime=regime,
        note=c.note,
        simulated=c.simulated,
        first_warning=warns[0] if warns else "",
        best_threshold_flops=best,
        verdict_best=vbest,
        n_warnings=len(warns),
        dropped=dropped,
    )


def judge_honest(
    profile: Any, values: dict[str, Any], *, spec: str, truth: float, device: str, label: str, dtype: str,
    simulated: bool, context: Mapping[str, Any] | None, sets: Sequence[str] = SET_ORDER, note: str = "",
) -> HonestResult:  # fmt: skip
    """One honest run judged at T = truth, 0.5 × and 2 × truth, and its ``decisive_at`` per observable set.
    ``context``: the sensor and rate the run was observed with (``real.v2_context``, ``simulated.twin_context``),
    required so that no caller judges a run as fully observed by leaving it out (None: the caller's own
    ``unobserved_s`` is all there is)."""

    def v(T: float, vals: dict[str, Any] | None = None):  # noqa: ANN202
        vals = vals if vals is not None else keep_set(values, sets[-1])  # all the observables it has
        return judge(profile, vals, device=spec, threshold_flops=T, label=label, context=context)

    dec: dict[str, float | None] = {}
    for s in sets:
        j = v(truth, keep_set(values, s))
        dec[s] = None if j.decisive_at_flops is None else j.decisive_at_flops / truth
    at = v(truth)
    why = at.warnings[0] if at.decisive_at_flops is None and at.warnings else ""
    return HonestResult(
        device, label, dtype, truth, v(0.5 * truth).verdict, v(2.0 * truth).verdict, at.verdict, simulated, dec, note,
        why,
    )  # fmt: skip


def sim_honest(world: World) -> Iterable[HonestResult]:
    """Honest runs on the twins (SIMULATED): several precisions, a capped and an underclocked variant; each
    judged by the profile of its device calibrated without its configuration (another simulated session)."""
    per = 2 if world.quick else 5
    for key in ("a100", "h100", "h200"):
        base = world.family(key)
        variants: list[tuple[str, float | None, float | None]] = [
            ("bf16", None, None), ("fp16", None, None), ("tf32", None, None), ("bf16", 0.6, None), ("bf16", None, 0.7)
        ]  # fmt: skip
        if key != "a100":
            variants.append(("fp8", None, None))
        for i, w in enumerate(base[:per]):
            for dtype, cap_frac, clk_frac in variants:
                probe = make_acc(key, 0)
                cap = None if cap_frac is None else cap_frac * probe.power_limit_w
                clock = locked_clock(probe, clk_frac)
                wd = with_dtype(w, dtype) if dtype != w.dtype else w
                acc, r, vals = honest_run(key, wd, world.attack_seed + 31 * i, cap=cap, clock=clock)
                prof, _ = world.profile(key, [w.label])
                note = (
                    dtype + (f", cap {cap:g} W" if cap else "") + (f", clock {clock:g} MHz" if clock else "")
                )
                yield judge_honest(
                    prof, vals, spec=key, truth=r.total_flops, device=f"sim:{key}", label=wd.label, dtype=dtype,
                    simulated=True, context=twin_context(acc), note=note,
                )  # fmt: skip
    for w in world.family("orin-nano")[: (4 if world.quick else 10)]:
        acc, r, vals = honest_run("orin-nano", w, world.attack_seed)
        prof, _ = world.profile("orin-nano", [w.label])
        yield judge_honest(
            prof, vals, spec="orin-nano", truth=r.total_flops, device="sim:orin-nano", label=w.label,
            dtype=w.dtype, simulated=True, context=twin_context(acc), sets=("energy", "+clock+pl"),
            note="fp32",  # the Orin reports its GPU clock, no power limit: +clock+pl is the clock alone
        )  # fmt: skip


def run_suite(
    *,
    quick: bool = False,
    seed: int = 0,
    data_root: str | Path | None = None,
    families: Sequence[str] | None = None,
    honest: bool = True,
) -> SuiteResult:
    """Run the families (all, or the keys in ``families``); ``seed`` offsets the simulated sessions."""
    from flopwatch.redteam import real

    t0 = time.perf_counter()
    world = World(quick=quick, cal_seed=1 + 2 * seed, attack_seed=2 + 2 * seed)
    fams = [f for f in FAMILIES if families is None or f.key in families]
    v2 = real.find_v2(data_root)
    skipped: list[str] = []
    altered = published_data_problem(v2) if v2 is not None else None
    if v2 is None:
        skipped.append(
            "real-data families and honest runs: ../shared/data/jetson_flop_estimator/eval_results_v2_records.json "
            "not found"
        )
    elif altered is not None:
        # Results on data that is not the published data would be claims about something else: refuse them.
        log.warning("%s; the real-data families are not run", altered)
        skipped.append(f"real-data families and honest runs: {altered}")
        v2 = None
    attacks: list[AttackResult] = []
    cal: dict[str, dict[str, Any]] = {}
    for fam in fams:
        attacked: set[str] = set()
        overlap: set[str] = set()
        n_cal = 0
        for c in cases(world, fam, v2):
            attacks.append(judge_attack(c, fam.name))
            attacked.update(c.attacked_labels)
            # left out means: no configuration of this case (in any precision) is in its calibration
            overlap |= {shape(x) for x in c.attacked_labels} & {shape(x) for x in c.calibration_labels}
            n_cal = max(n_cal, len(c.calibration_labels))
        cal[fam.key] = {
            "attacked": sorted(attacked),
            "overlap": sorted(overlap),
            "max_calibration_runs": n_cal,
        }
    hon: list[HonestResult] = []
    if honest:
        hon.extend(sim_honest(world))
        if v2 is not None:
            hon.extend(real_honest_results(v2))
    return SuiteResult(attacks, hon, seed, quick, fams, skipped, time.perf_counter() - t0, cal)


def _util_note(r: Any) -> str:
    return f"util {r.mean_util:.0%}" if r.mean_util is not None else ""


def real_honest_results(v2: Path, note: Callable[[Any], str] = _util_note) -> Iterator[HonestResult]:
    """The real v2 records judged as honest runs on the Orin Nano (energy and time only: the Jetson has no clock
    or pipe counter in the records), each with the sensor context it was measured in (``real.v2_context``: the
    INA3221 rail at 2 Hz); ``note(record)`` labels each."""
    for r, prof, vals in real_honest(v2):
        yield judge_honest(
            prof,
            vals,
            spec="orin-nano",
            truth=float(r.total_flops or math.nan),
            device="orin-nano (real, v2)",
            label=r.label,
            dtype=r.dtype or "?",
            simulated=False,
            context=v2_context(r),
            sets=("energy",),
            note=note(r),
        )
