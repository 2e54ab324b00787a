"""Apply a calibration profile to workload records: per-record estimates, intervals, verdicts, and errors where
ground truth is present (what ``flopwatch estimate`` reports)."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from flopwatch.errors import InputError, ProfileError
from flopwatch.evaluate.threshold import verdict


@dataclass(frozen=True)
class EstimateRun:
    """The estimates of one records file under one profile (JSON shape: :meth:`to_dict`)."""

    profile_path: str
    profile_sha256: str
    model: str
    threshold_flops: float | None
    declared_flops: float | None
    rows: list[dict[str, Any]]
    skipped: list[dict[str, Any]] = field(default_factory=list)

    @property
    def summary(self) -> dict[str, Any]:
        """MAE, max |error|, mean signed error and interval coverage over the records with ground truth."""
        errs = np.array(
            [x["rel_error_pct"] for x in self.rows if x["rel_error_pct"] is not None], dtype=float
        )
        inside = [x["in_interval"] for x in self.rows if x["in_interval"] is not None]
        return {
            "n": len(self.rows),
            "n_with_ground_truth": int(errs.size),
            "mae_pct": float(np.mean(np.abs(errs))) if errs.size else None,
            "max_abs_pct": float(np.max(np.abs(errs))) if errs.size else None,
            "mean_signed_pct": float(np.mean(errs)) if errs.size else None,
            "coverage": float(np.mean(inside)) if inside else None,
        }

    def to_dict(self) -> dict[str, Any]:
        return {
            "profile": self.profile_path,
            "profile_sha256": self.profile_sha256,
            "model": self.model,
            "threshold_flops": self.threshold_flops,
            "declared_flops": self.declared_flops,
            "records": self.rows,
            "skipped": self.skipped,
            "summary": self.summary,
        }


def estimate_records(
    profile: Any,
    records: Iterable[Any],
    *,
    profile_path: str,
    records_path: str,
    confidence: float | None = None,
    threshold_flops: float | None = None,
    declared_flops: float | None = None,
    strict: bool = False,
    device: str | None = None,
) -> EstimateRun:
    """Estimate every record with ``profile`` (a :class:`~flopwatch.estimate.profile.Profile`).

    Records of another precision than the profile's are skipped and listed unless ``strict`` (then the
    profile's own check raises). Errors name ``records_path`` and the record's label.

    Threshold verdicts use the sound bounds of :func:`flopwatch.estimate.verdict.assess` (regime from
    observables only; ``device`` names the hardware for the datasheet bounds, default the profile's):
    each row adds ``regime``, ``verdict_lower_flops``, ``verdict_upper_flops``, ``bound``,
    ``regime_deviations`` and every violated assumption in ``warnings``; ``lower_flops``/``upper_flops``
    stay the calibrated interval (the quantity whose coverage is measured). A skipped record still gets
    the sound verdict: a declared precision is a claim, not an input.
    """
    from flopwatch.estimate.verdict import assess_record

    rows: list[dict[str, Any]] = []
    skipped: list[dict[str, Any]] = []
    for r in records:
        if profile.dtype != "all" and r.dtype != profile.dtype and not strict:
            a = assess_record(profile, r, device=device, threshold_flops=threshold_flops)
            skipped.append(
                {
                    "label": r.label,
                    "reason": f"precision {r.dtype} != profile's {profile.dtype}",
                    "regime": a.regime,
                    "verdict_lower_flops": a.lower_flops,
                    "verdict_upper_flops": a.upper_flops,
                    **({"threshold_verdict": a.verdict} if threshold_flops is not None else {}),
                }
            )
            continue
        try:
            e = profile.estimate_record(r, confidence=confidence)
        except ProfileError as err:
            raise ProfileError(err.detail, file=records_path, record=r.label, field=err.field) from None
        except InputError as err:
            raise InputError(err.detail, file=records_path, record=r.label, field=err.field) from None
        gt = r.total_flops
        row: dict[str, Any] = {
            "label": r.label,
            "estimate_flops": e.flops,
            "lower_flops": e.lower_flops,
            "upper_flops": e.upper_flops,
            "ground_truth_flops": gt,
            "rel_error_pct": None if gt is None else (e.flops / gt - 1.0) * 100.0,
            "confidence": e.confidence,
            "in_interval": None if gt is None else bool(e.lower_flops <= gt <= e.upper_flops),
            "simulated": r.simulated,
            "warnings": list(e.warnings),
        }
        try:
            a = assess_record(
                profile, r, device=device, threshold_flops=threshold_flops, confidence=confidence
            )
        except InputError as err:
            raise InputError(err.detail, file=records_path, record=r.label, field=err.field) from None
        row.update(
            regime=a.regime,
            verdict_lower_flops=a.lower_flops,
            verdict_upper_flops=a.upper_flops,
            bound=a.bound,
            regime_deviations=[d.to_dict() for d in a.deviations],
            warnings=list(a.warnings),
        )
        if threshold_flops is not None:
            row["threshold_verdict"] = a.verdict
        if declared_flops is not None:
            row["declaration_verdict"] = verdict(e, declared_flops=declared_flops)
        rows.append(row)
    return EstimateRun(
        profile_path=profile_path,
        profile_sha256=profile.sha256(),
        model=profile.model_name,
        threshold_flops=threshold_flops,
        declared_flops=declared_flops,
        rows=rows,
        skipped=skipped,
    )
