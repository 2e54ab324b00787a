"""Apply a calibration profile to workload records: per-record estimates, intervals, verdicts, and errors where
ground truth is present (what ``flopwatch estimate`` reports)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from flopwatch.errors import InputError, ProfileError
from flopwatch.units import finite


def _summarise(rows: list[dict[str, Any]]) -> dict[str, Any]:
    errs = np.array([x["rel_error_pct"] for x in rows if x["rel_error_pct"] is not None], dtype=float)
    inside = [x["in_interval"] for x in rows if x["in_interval"] is not None]
    held = [x["in_verdict_bounds"] for x in rows if x["in_verdict_bounds"] is not None]
    return {
        "n": len(rows),
        "n_with_ground_truth": int(errs.size),
        "mae_pct": float(np.mean(np.abs(errs))) if errs.size else None,
        "max_abs_pct": float(np.max(np.abs(errs))) if errs.size else None,
        "mean_signed_pct": float(np.mean(errs)) if errs.size else None,
        "coverage": float(np.mean(inside)) if inside else None,
        "verdict_bounds_hold": float(np.mean(held)) if held else None,
    }


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
        """MAE, max |error|, mean signed error, calibrated-interval coverage (``coverage``) and how often the
        sound verdict bounds hold the truth (``verdict_bounds_hold``) over the records with ground truth; the same
        over the records inside the calibrated regime only under ``in_regime`` (``regime == "calibrated"``: the
        interval claims nothing outside it, so a summary mixing both misleads)."""
        out = _summarise(self.rows)
        out["in_regime"] = _summarise([x for x in self.rows if x["regime"] == "calibrated"])
        return out

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
    sampled: Mapping[str, Any] | None = None,
) -> EstimateRun:
    """Estimate every record with ``profile`` (a :class:`~flopwatch.estimate.profile.Profile`).

    Records of another precision than the profile's are skipped and listed unless ``strict`` (then the
    profile's own check raises). Errors name ``records_path`` and the record's label.

    Two answers per row, never mixed (issue 21): the **verdict** — ``lower_flops``/``upper_flops`` (contract
    keys, also ``verdict_lower_flops``/``verdict_upper_flops``), ``bound``/``verdict_basis``, ``threshold_verdict``,
    ``decisive_at``, ``tighten`` and every violated assumption in ``warnings`` — from
    :func:`flopwatch.estimate.verdict.assess` (``device`` names the hardware for the datasheet bounds, default the
    profile's); and the **calibrated estimate** — ``estimate_flops``, ``calibrated_lower_flops``/
    ``calibrated_upper_flops`` (the interval whose coverage ``in_interval`` and the summary measure, widened for
    a later session), ``assumptions``. ``declaration_verdict``: :func:`flopwatch.estimate.verdict.declaration_verdict`
    ("consistent" only inside the sound bounds of a run with no violated assumption, else "unverified" or
    "inconsistent"). A skipped record still gets the sound verdict: a declared precision is a claim.
    ``sampled``: per record label, its segment of the trace (``estimate.observe.windows_from_trace``): the bounds
    are then summed over the trace's windows, the gaps bounded at peak rate.
    """
    from flopwatch.estimate.verdict import assess_record, declaration_verdict

    rows: list[dict[str, Any]] = []
    skipped: list[dict[str, Any]] = []
    for r in records:
        if profile.dtype != "all" and r.dtype != profile.dtype and not strict:
            a = assess_record(
                profile,
                r,
                device=device,
                threshold_flops=threshold_flops,
                sampled=(sampled or {}).get(r.label),
            )
            skipped.append(
                {
                    "label": r.label,
                    "reason": f"precision {r.dtype} != profile's {profile.dtype}",
                    "regime": a.regime,
                    "lower_flops": finite(a.lower_flops),
                    "upper_flops": finite(a.upper_flops),
                    "verdict_lower_flops": finite(a.lower_flops),
                    "verdict_upper_flops": finite(a.upper_flops),
                    "verdict_basis": a.verdict_basis,
                    "warnings": list(a.warnings),
                    **({"threshold_verdict": a.verdict} if threshold_flops is not None else {}),
                }
            )
            continue
        try:
            profile.estimate_record(
                r, confidence=confidence
            )  # the profile's own checks (precision, features)
            a = assess_record(
                profile,
                r,
                device=device,
                threshold_flops=threshold_flops,
                confidence=confidence,
                sampled=(sampled or {}).get(r.label),
            )
        except ProfileError as err:
            raise ProfileError(err.detail, file=records_path, record=r.label, field=err.field) from None
        except InputError as err:
            raise InputError(err.detail, file=records_path, record=r.label, field=err.field) from None
        gt = r.total_flops
        est, clo, chi = a.estimate_flops, a.calibrated_lower_flops, a.calibrated_upper_flops
        row: dict[str, Any] = {
            "label": r.label,
            "estimate_flops": est,
            "calibrated_lower_flops": clo,
            "calibrated_upper_flops": chi,
            "lower_flops": finite(a.lower_flops),
            "upper_flops": finite(a.upper_flops),
            "verdict_lower_flops": finite(a.lower_flops),
            "verdict_upper_flops": finite(a.upper_flops),
            "bound": a.verdict_basis,
            "verdict_basis": a.verdict_basis,
            "ground_truth_flops": gt,
            "rel_error_pct": None if gt is None or not est else (est / gt - 1.0) * 100.0,
            "confidence": a.confidence,
            "in_interval": None if gt is None or clo is None or chi is None else bool(clo <= gt <= chi),
            "in_verdict_bounds": None if gt is None else bool(a.lower_flops <= gt <= a.upper_flops),
            "simulated": r.simulated,
            "regime": a.regime,
            "regime_deviations": [d.to_dict() for d in a.deviations],
            "assumptions": a.assumptions,
            "warnings": list(a.warnings),
            "notes": list(a.notes),
            "decisive_at": finite(a.decisive_at),
            "tighten": list(a.tighten),
        }
        if threshold_flops is not None:
            row["threshold_verdict"] = a.verdict
        if declared_flops is not None:
            row["declaration_verdict"] = declaration_verdict(
                a.lower_flops, a.upper_flops, declared_flops, a.warnings
            )
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
