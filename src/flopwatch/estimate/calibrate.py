"""Calibrate an estimator on records with ground truth and wrap it in a :class:`Profile`."""

from __future__ import annotations

import datetime as _dt
import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from flopwatch import __version__
from flopwatch.errors import InputError, ProfileError
from flopwatch.estimate.features import (
    Features,
    FrontierGate,
    check_measured,
    ground_truth,
)
from flopwatch.estimate.intervals import check_confidence, log_halfwidth
from flopwatch.estimate.models import DEFAULT_MODEL, SelectModel, get_model, resolve_model
from flopwatch.estimate.profile import PROFILE_SCHEMA, Profile
from flopwatch.records import RecordSet, WorkloadRecord, as_record_set


def calibrate(
    records: RecordSet | Sequence[WorkloadRecord],
    model: str = DEFAULT_MODEL,
    *,
    confidence: float = 0.9,
    gate: FrontierGate | None = None,
    interval: str = "auto",
) -> Profile:
    """Fit ``model`` on the records that pass ``gate`` (default: the study's frontier gate, fp32) → Profile.

    The prediction interval comes from the leave-one-out residuals of the calibration records
    (:mod:`flopwatch.estimate.intervals`). Raises :class:`InputError` when too few records pass the gate
    (the message says how many were excluded and why) or a record lacks ground truth.
    """
    conf = check_confidence(confidence)
    rs = as_record_set(records)
    gate = FrontierGate() if gate is None else gate
    est = get_model(model)
    gr = gate.apply(rs)
    kept = gr.kept
    if len(kept) < est.min_train:
        raise InputError(
            f"only {len(kept)} of {len(rs)} records pass the filters ({gr.describe()}); model {model!r} "
            f"needs at least {est.min_train}",
            file=rs.source or None,
        )
    F = ground_truth(kept)
    check_measured(kept)
    X = Features.from_records(kept)
    est = resolve_model(model, X)  # "default" without DRAM traffic → "default-p"
    check_measured(kept, est.needs, model=est.name)  # names the first record lacking a column the model needs
    est.fit(X, F)
    residuals = np.log(F / est.loo_flops_)
    if not np.all(np.isfinite(residuals)):
        raise InputError(
            f"model {model!r} produced non-positive leave-one-out predictions on these records; "
            "use another model or check the data",
            file=rs.source or None,
        )
    q, used = log_halfwidth(residuals, conf, interval)
    pred = est.predict(X)
    params = est.params_
    component = est.name
    if isinstance(est, SelectModel):
        params = est.compact_params(params)
        component = est.chosen()
    dtypes = sorted({r.dtype for r in kept})
    power = X.avg_net_power_w
    data: dict[str, Any] = {
        "schema": PROFILE_SCHEMA,
        "created": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "flopwatch_version": __version__,
        "model": est.name,  # the registry name that rebuilds this model (may differ from the request)
        "requested_model": model,
        "component": component,
        "model_description": est.description,
        "model_hyper": est.get_params(),
        "params": {k: float(v) for k, v in params.items()},
        "hyper": {k: float(v) for k, v in est.hyper_.items()},
        "idle_power_w": _idle(rs, kept),
        "fingerprint": rs.fingerprint or None,
        "confidence": conf,
        "interval": {
            "method": str(used),
            "log_halfwidth": float(q),
            "rel_halfwidth_pct": float(math.expm1(float(q)) * 100.0),
            "residuals_log_ratio": [float(x) for x in residuals],
            "residuals_are": "leave-one-out log(ground_truth / estimate) of the calibration records",
        },
        "training": {
            "source": rs.source,
            "n": len(kept),
            "labels": kept.labels,
            "dtype": dtypes[0] if len(dtypes) == 1 else "all",
            # which devices the runs came from, and whether any number is from the simulator
            "device_names": sorted({str(r.raw["device_name"]) for r in kept if r.raw.get("device_name")}),
            "n_simulated": sum(1 for r in kept if r.simulated),
            "filters": gr.to_dict(),
            "ranges": {
                "avg_net_power_w": [float(power.min()), float(power.max())],
                "duration_s": [float(X.duration_s.min()), float(X.duration_s.max())],
                "total_flops": [float(F.min()), float(F.max())],
            },
        },
        "diagnostics": {
            "insample_mae_pct": float(np.mean(np.abs(pred / F - 1)) * 100),
            "loo_mae_pct": float(np.mean(np.abs(est.loo_flops_ / F - 1)) * 100),
            "loo_max_abs_pct": float(np.max(np.abs(est.loo_flops_ / F - 1)) * 100),
        },
    }
    try:
        return Profile(data)
    except ProfileError as e:  # e.g. a non-positive J/TFLOP fitted on degenerate data
        raise InputError(
            f"model {model!r} gives an unusable calibration on these records ({e.field}: {e.detail}); "
            "use another model or check the data",
            file=rs.source or None,
        ) from None


def _idle(rs: RecordSet, kept: RecordSet) -> float | None:
    if rs.idle_power_w is not None:
        return float(rs.idle_power_w)
    vals = [r.idle_power_w for r in kept if r.idle_power_w is not None]
    return float(np.median(vals)) if vals else None
