"""Energy → FLOP estimation: models, calibration profiles and prediction intervals.

Public API::

    from flopwatch.estimate import calibrate, Profile, Estimate, FrontierGate
    profile = calibrate(load_records("runs.jsonl"))          # default model, 90 % intervals
    est = profile.estimate(net_energy_j=1200.0, duration_s=150.0, tb_moved=0.08)
    # the sound verdict and, apart, the calibrated estimate (issue 21):
    a = assess(profile, Observables(1200.0, 150.0, tb_moved=0.08, mean_util=0.95), device="orin-nano", threshold_flops=1e14)
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

# Lazy (PEP 562), as flopwatch.powermodel: the verdict (`estimate.verdict`, which the fleet imports during an
# estimate) needs neither the fitted models nor the record loaders (records → io → shutil, tempfile, pathlib);
# importing them all cost ≈ 0.065 of a 1,024-GPU fleet estimate's ≈ 1.1 CPU-s (benchmarks/RESULTS.md, "Fleet").
# The submodule is `calibration`, not `calibrate`: importing a submodule binds its name on the package, which
# would then shadow the function `calibrate` this package exports.
_EXPORTS: dict[str, str] = {
    "calibrate": "calibration",
    "FrontierGate": "features",
    "GateResult": "features",
    "Estimate": "intervals",
    "DEFAULT_MODEL": "models",
    "MODELS": "models",
    "get_model": "models",
    "model_names": "models",
    "Observables": "observe",
    "ObservedWindows": "observe",
    "windows_from_trace": "observe",
    "PROFILE_SCHEMA": "profile",
    "Profile": "profile",
    "Assessment": "verdict",
    "assess": "verdict",
    "assess_record": "verdict",
    "threshold_verdict": "verdict",
}

if TYPE_CHECKING:
    from flopwatch.estimate.calibration import calibrate
    from flopwatch.estimate.features import FrontierGate, GateResult
    from flopwatch.estimate.intervals import Estimate
    from flopwatch.estimate.models import DEFAULT_MODEL, MODELS, get_model, model_names
    from flopwatch.estimate.observe import Observables, ObservedWindows, windows_from_trace
    from flopwatch.estimate.profile import PROFILE_SCHEMA, Profile
    from flopwatch.estimate.verdict import Assessment, assess, assess_record, threshold_verdict


def __getattr__(name: str) -> Any:
    sub = _EXPORTS.get(name)
    if sub is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{sub}"), name)
    globals()[name] = value  # once: later lookups are plain attributes
    return value


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
