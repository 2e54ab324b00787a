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
    device: str | None = None,
) -> Profile:
    """Fit ``model`` on the records that pass ``gate`` (default: the study's frontier gate, fp32) → Profile.

    The prediction interval comes from the leave-one-out residuals of the calibration records
    (:mod:`flopwatch.estimate.intervals`). Raises :class:`InputError` when too few records pass the gate
    (the message says how many were excluded and why) or a record lacks ground truth.

    ``device`` (a :data:`flopwatch.devices.DEVICES` key or name) names the hardware for the datasheet
    bounds of :mod:`flopwatch.estimate.bounds`; by default it is read from the records' device names or
    fingerprint. The profile's ``verifier`` block records the regime (the observed range of every
    observable), the best FLOP/J per precision over *all* records with ground truth (not only those the
    gate keeps: the envelope must cover the most efficient regime the hardware reached) and the idle.
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
    # Degenerate (accepted but extreme) records can overflow inside the fit; the finiteness check below turns
    # that into one error line, so numpy's RuntimeWarnings must not reach stderr first.
    with np.errstate(all="ignore"):
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
        "verifier": _verifier_block(rs, kept, gate, device),
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


def _verifier_block(rs: RecordSet, kept: RecordSet, gate: FrontierGate, device: str | None) -> dict[str, Any]:
    from flopwatch.devices import get_device
    from flopwatch.estimate.bounds import idle_drift_w, measured_efficiency, resolve_device
    from flopwatch.estimate.regime import regime_ranges
    from flopwatch.estimate.verdict import observables_from_record

    if device is not None:
        try:
            spec = get_device(device)
        except InputError as e:
            raise InputError(e.detail, field="device") from None
    else:
        fp = rs.fingerprint or {}
        names = [fp.get(k) for k in ("device", "model", "device_name", "name")]
        names += [r.raw.get("device_name") for r in rs] + [r.raw.get("device") for r in rs]
        spec = resolve_device(*names)
    eff = measured_efficiency(
        (r.dtype, r.total_flops, r.net_energy_j) for r in rs if r.total_flops is not None
    )
    counts: dict[str, int] = {}
    for r in rs:
        if r.total_flops is not None and r.net_energy_j > 0:
            counts[r.dtype] = counts.get(r.dtype, 0) + 1
    idle = _idle(rs, kept)
    return {
        "version": 1,
        "device": spec.key if spec is not None else None,
        "regime": regime_ranges(
            (observables_from_record(r) for r in kept), min_util=gate.min_util if gate.min_util > 0 else None
        ),
        "efficiency": {
            "flops_per_j": eff,
            "n_runs": counts,
            "source": "best total_flops / net_energy_j per precision over every calibration record with ground truth",
        },
        "idle_power_w": idle,
        "idle_drift_w": idle_drift_w(idle, spec),
    }
