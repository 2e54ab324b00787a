"""Per device model, the FLOP per joule of the fleet's groups with pipe counters, applied to those without: an
apportionment within the fleet, never in a verdict (docs/fleet.md, "Calibration from pipe counters").
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

import numpy as np

from flopwatch.devices import get_device
from flopwatch.fleet.groups import OPERATOR_SERIES, PIPE_USEFUL_RANGE
from flopwatch.units import nanmedian

#: Fewer jobs calibrate nothing: from three, a median outvotes one odd job (another precision, memory-bound).
MIN_JOBS = 3
#: The one note every group without a profile carries; any other note disqualifies a source.
INFORMATIONAL = frozenset({"no calibration profile: no calibrated estimate", OPERATOR_SERIES})
#: Net power per GPU outside the sources' range widened by this factor: an extrapolation, named.
LOAD_SLACK = 1.2
SUMMED = ("pipe_estimate_flops", "net_energy_j", "gpu_hours", "gpus")
CALIBRATED = ("calibrated_flops", "calibrated_lower_flops", "calibrated_upper_flops", "calibrated_from")


def _win(iso: str, window_s: float) -> int:
    return round(datetime.fromisoformat(iso.replace("Z", "+00:00")).timestamp() / window_s)  # 3.10: no "Z"


def calibrate(rows: list[dict[str, Any]], window_s: float, min_jobs: int = MIN_JOBS) -> dict[str, Any]:
    """Per device key of one-model groups (``meta.pipe_calibration``): η (FLOP per joule of net energy, median
    over jobs), its range, jobs, GPU-jobs, groups, their net power per GPU (load covered); or ``refused``."""
    from flopwatch.estimate.sound import eta_max

    best = {d: eta_max(get_device(d)) for d in {r["devices"][0] for r in rows if len(r["devices"]) == 1}}
    jobs: dict[str, dict[tuple[int, ...], list[dict[str, Any]]]] = {d: {} for d in best}
    for r in rows:
        p, e, ok = r["pipe_estimate_flops"], r["net_energy_j"], not set(r["notes"]) - INFORMATIONAL
        dev = r["devices"][0] if len(r["devices"]) == 1 else ""
        if dev and ok and p is not None and p > 0 and e > 0 and r["start"] and p / e <= best[dev]:
            jobs[dev].setdefault((_win(r["start"], window_s), _win(r["end"], window_s)), []).append(r)
    out: dict[str, Any] = {}
    for dev, per in jobs.items():
        why = f"{len(per)} independent job(s) of model {dev} with trusted pipe counters, {min_jobs} needed"
        out[dev] = {"refused": f"{why} (flagged groups unused; pods starting and ending together count once)"}
        if len(per) >= min_jobs:
            s = np.array([[sum(r[k] for r in g) for k in SUMMED] for g in per.values()])
            eta, w = s[:, 0] / s[:, 1], s[:, 1] / (s[:, 2] * 3600.0)
            out[dev] = {"device": dev, "eta": float(nanmedian(eta, 0)), "eta_min": float(eta.min()),
                        "eta_max": float(eta.max()), "jobs": len(per), "gpu_jobs": int(s[:, 3].sum()),
                        "net_w": [float(w.min()), float(w.max())],
                        "groups": [r["key"] for g in per.values() for r in g]}  # fmt: skip
    return out


def apply(rows: list[dict[str, Any]], cals: dict[str, Any]) -> None:
    """Add ``calibrated_*`` (null where none) and notes saying what it rests on to each row; nothing else."""
    lo, hi = PIPE_USEFUL_RANGE
    for r in rows:
        r |= dict.fromkeys(CALIBRATED)
        c, e = cals.get(r["devices"][0]) if len(r["devices"]) == 1 else None, r["net_energy_j"]
        if c is None or r["pipe_estimate_flops"] is not None:
            continue
        if "refused" in c or not e > 0:
            r["notes"].append(
                f"no calibrated estimate from pipe counters: {c.get('refused', 'no net energy')}"
            )
            continue
        eta, e_lo, e_hi, (w_lo, w_hi) = c["eta"], c["eta_min"] * lo * e, c["eta_max"] * hi * e, c["net_w"]
        label = (f"calibrated from {c['gpu_jobs']} GPU-jobs ({c['jobs']} independent jobs) with pipe "
                 f"counters of model {c['device']} in this fleet (η = {eta:.3g} FLOP/J, spread "
                 f"{c['eta_min']:.3g}–{c['eta_max']:.3g})")  # fmt: skip
        r |= dict(zip(CALIBRATED, (eta * e, e_lo, e_hi, label), strict=True))
        r["notes"].append(
            f"calibrated estimate {eta * e:.3g} FLOP [{e_lo:.3g}, {e_hi:.3g}], {label}: an apportionment of "
            "evidence within the fleet, not physics; it rests on the GPUs the operator let export counters "
            "resembling these, and never enters the verdict"
        )
        w = e / max(r["gpu_hours"] * 3600.0, 1e-9)
        if not w_lo / LOAD_SLACK <= w <= w_hi * LOAD_SLACK:
            r["notes"].append(
                f"calibrated estimate extrapolated: {w:.0f} W per GPU above idle, the calibration jobs "
                f"{w_lo:.0f}–{w_hi:.0f} W"
            )
