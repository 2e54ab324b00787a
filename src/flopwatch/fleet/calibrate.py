"""Per device model, the FLOP per joule of the fleet's groups with pipe counters, applied to those without.

A group is a calibration source when it carries no note at all (pipe counters present, not paused, not stuck at
0, consistent with its energy; coverage, labels and device sound), one resolved device model, positive net energy
and η = pipe FLOPs / net energy within the device's physical best. Groups that start and end in the same windows
count as one job (pods of one job). With :data:`MIN_JOBS` jobs of a model, their median η (one vote per job: no
single large job sets it) calibrates that model's groups without a pipe estimate: ``calibrated_flops`` = η × net
energy, interval = net energy × [min η × 0.7, max η × 1.05] (the spread across jobs and the pipe interval,
:data:`~flopwatch.fleet.groups.PIPE_USEFUL_RANGE`). An apportionment of evidence within the fleet, not physics:
the operator chooses which GPUs export counters, so it is shown beside the verdict and never read by it.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from datetime import datetime
from typing import Any

import numpy as np

from flopwatch.devices import get_device
from flopwatch.fleet.groups import PIPE_USEFUL_RANGE

#: Fewer independent jobs calibrate nothing: a median needs three to outvote one odd job (another precision, a
#: memory-bound phase), and one or two jobs say nothing of the spread the next job may have.
MIN_JOBS = 3
#: The one note every group without a profile carries; any other note disqualifies a calibration source.
INFORMATIONAL = frozenset({"no calibration profile: no calibrated estimate"})
#: A group drawing net power per GPU outside the sources' range, widened by this factor, is an extrapolation.
LOAD_SLACK = 1.2


@dataclass(frozen=True)
class ModelCalibration:
    """η (FLOP per joule of net energy) of one device model from its groups with trustworthy pipe counters."""

    device: str
    eta: float  # median over independent jobs
    eta_min: float
    eta_max: float
    jobs: int
    gpu_jobs: int
    net_w: tuple[float, float]  # the jobs' net power per GPU: the load the calibration covers
    groups: tuple[str, ...]

    def label(self) -> str:
        return (
            f"calibrated from {self.gpu_jobs} GPU-jobs ({self.jobs} independent jobs) with pipe counters of model "
            f"{self.device} in this fleet (η = {self.eta:.3g} FLOP/J, spread {self.eta_min:.3g}–{self.eta_max:.3g})"
        )


def _ts(iso: str) -> float:
    return datetime.fromisoformat(iso.replace("Z", "+00:00")).timestamp()


def calibrate(rows: list[dict[str, Any]], window_s: float, min_jobs: int = MIN_JOBS) -> dict[str, Any]:
    """Per device key seen in a one-model group: its :class:`ModelCalibration`, or a line saying why none."""
    from flopwatch.estimate.sound import eta_max

    jobs: dict[str, dict[tuple[int, int], list[dict[str, Any]]]] = {}
    for r in rows:
        if len(r["devices"]) != 1:
            continue
        per = jobs.setdefault(dev := r["devices"][0], {})
        p, e = r["pipe_estimate_flops"], r["net_energy_j"]
        if p is None or not (p > 0 and e > 0 and r["start"] and r["end"]) or set(r["notes"]) - INFORMATIONAL:
            continue
        if p / e <= eta_max(get_device(dev)):
            per.setdefault((round(_ts(r["start"]) / window_s), round(_ts(r["end"]) / window_s)), []).append(r)
    out: dict[str, Any] = {}
    for dev, per in jobs.items():
        if len(per) < min_jobs:
            out[dev] = (
                f"{len(per)} independent job(s) of model {dev} with trustworthy pipe counters, {min_jobs} needed "
                "(groups flagged anything are not used; groups starting and ending in the same windows count once)"
            )
            continue
        sums = np.array([[sum(r[k] for r in g) for k in ("pipe_estimate_flops", "net_energy_j", "gpu_hours", "gpus")]
                         for g in per.values()])  # fmt: skip
        eta, w = sums[:, 0] / sums[:, 1], sums[:, 1] / (sums[:, 2] * 3600.0)
        names = tuple(r["key"] for g in per.values() for r in g)
        out[dev] = ModelCalibration(dev, float(np.median(eta)), float(eta.min()), float(eta.max()), len(per),
                                    int(sums[:, 3].sum()), (float(w.min()), float(w.max())), names)  # fmt: skip
    return out


def summary(cals: dict[str, Any] | None) -> dict[str, Any] | None:
    """The calibrations as JSON (``meta.pipe_calibration``): per device key its fields, or ``{"refused": why}``."""
    return (
        None
        if cals is None
        else {k: asdict(c) if isinstance(c, ModelCalibration) else {"refused": c} for k, c in cals.items()}
    )


def apply(rows: list[dict[str, Any]], cals: dict[str, Any]) -> None:
    """Add ``calibrated_*`` (null where none) and a note saying what it rests on to each row; verdicts untouched."""
    lo, hi = PIPE_USEFUL_RANGE
    for r in rows:
        r |= dict.fromkeys(
            ("calibrated_flops", "calibrated_lower_flops", "calibrated_upper_flops", "calibrated_from")
        )
        if r["pipe_estimate_flops"] is not None or len(r["devices"]) != 1:
            continue
        c, e = cals.get(r["devices"][0]), r["net_energy_j"]
        if not isinstance(c, ModelCalibration) or not e > 0:
            why = (
                c if isinstance(c, str) else "no calibration of this model" if c is None else "no net energy"
            )
            r["notes"].append(f"no calibrated estimate from pipe counters: {why}")
            continue
        r |= {"calibrated_flops": c.eta * e, "calibrated_lower_flops": c.eta_min * lo * e,
              "calibrated_upper_flops": c.eta_max * hi * e, "calibrated_from": c.label()}  # fmt: skip
        r["notes"].append(
            f"calibrated estimate {c.eta * e:.3g} FLOP [{c.eta_min * lo * e:.3g}, {c.eta_max * hi * e:.3g}], "
            f"{c.label()}: an apportionment of evidence within the fleet, not physics; it rests on the GPUs the "
            "operator let export counters resembling these, and never enters the verdict"
        )
        w = e / max(r["gpu_hours"] * 3600.0, 1e-9)
        if not c.net_w[0] / LOAD_SLACK <= w <= c.net_w[1] * LOAD_SLACK:
            r["notes"].append(
                f"calibrated estimate extrapolated: {w:.0f} W per GPU above idle, the calibration jobs "
                f"{c.net_w[0]:.0f}–{c.net_w[1]:.0f} W"
            )
