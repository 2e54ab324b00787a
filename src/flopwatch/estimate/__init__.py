"""Energy → FLOP estimation: models, calibration profiles and prediction intervals.

Public API::

    from flopwatch.estimate import calibrate, Profile, Estimate, FrontierGate
    profile = calibrate(load_records("runs.jsonl"))          # default model, 90 % intervals
    est = profile.estimate(net_energy_j=1200.0, duration_s=150.0, tb_moved=0.08)
    # the sound verdict and, apart, the calibrated estimate (issue 21):
    a = assess(profile, Observables(1200.0, 150.0, tb_moved=0.08, mean_util=0.95), device="orin-nano", threshold_flops=1e14)
"""

from __future__ import annotations

from flopwatch.estimate.calibrate import calibrate
from flopwatch.estimate.features import FrontierGate, GateResult
from flopwatch.estimate.intervals import Estimate
from flopwatch.estimate.models import DEFAULT_MODEL, MODELS, get_model, model_names
from flopwatch.estimate.observe import Observables, ObservedWindows, windows_from_trace
from flopwatch.estimate.profile import PROFILE_SCHEMA, Profile
from flopwatch.estimate.verdict import Assessment, assess, assess_record, threshold_verdict

__all__ = [
    "DEFAULT_MODEL",
    "Assessment",
    "Observables",
    "assess",
    "assess_record",
    "threshold_verdict",
    "ObservedWindows",
    "windows_from_trace",
    "MODELS",
    "PROFILE_SCHEMA",
    "Estimate",
    "FrontierGate",
    "GateResult",
    "Profile",
    "calibrate",
    "get_model",
    "model_names",
]
