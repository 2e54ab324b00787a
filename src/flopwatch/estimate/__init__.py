"""Energy → FLOP estimation: models, calibration profiles and prediction intervals.

Public API::

    from flopwatch.estimate import calibrate, Profile, Estimate, FrontierGate
    profile = calibrate(load_records("runs.jsonl"))          # default model, 90 % intervals
    est = profile.estimate(net_energy_j=1200.0, duration_s=150.0, tb_moved=0.08)
    # a verdict that holds in every regime the run could be in (issue 15):
    a = assess(profile, Observables(1200.0, 150.0, tb_moved=0.08, mean_util=0.95), threshold_flops=1e14)
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

# Lazy (PEP 562): ``flopwatch.estimate.bounds`` and the other light submodules must not pull in calibration and
# every model (≈ 0.2 s of imports a fleet estimate does not need).
_EXPORTS: dict[str, str] = {
    "calibrate": "calibrate",
    "FrontierGate": "features",
    "GateResult": "features",
    "Estimate": "intervals",
    "DEFAULT_MODEL": "models",
    "MODELS": "models",
    "get_model": "models",
    "model_names": "models",
    "PROFILE_SCHEMA": "profile",
    "Profile": "profile",
    "Observables": "regime",
    "Assessment": "verdict",
    "assess": "verdict",
    "assess_record": "verdict",
    "assess_workload": "verdict",
}

if TYPE_CHECKING:
    from flopwatch.estimate.calibrate import calibrate
    from flopwatch.estimate.features import FrontierGate, GateResult
    from flopwatch.estimate.intervals import Estimate
    from flopwatch.estimate.models import DEFAULT_MODEL, MODELS, get_model, model_names
    from flopwatch.estimate.profile import PROFILE_SCHEMA, Profile
    from flopwatch.estimate.regime import Observables
    from flopwatch.estimate.verdict import Assessment, assess, assess_record, assess_workload


def __getattr__(name: str) -> Any:
    mod = _EXPORTS.get(name)
    if mod is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{mod}"), name)
    globals()[name] = value
    return value


__all__ = [
    "DEFAULT_MODEL",
    "Assessment",
    "Observables",
    "assess",
    "assess_record",
    "assess_workload",
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
