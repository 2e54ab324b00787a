"""One evader run ready to judge (:class:`Case`), and the helpers both generators use (SIMULATED or real)."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from flopwatch.estimate.profile import Profile


@dataclass(frozen=True)
class Case:
    """One evader run, ready to judge."""

    family: str
    device: str  # display name ("sim:h100", "orin-nano (real, v2)")
    spec: str  # the device key the verifier judges with
    label: str
    truth_flops: float
    values: Mapping[str, Any]
    profile: Profile | None
    calibration_labels: tuple[str, ...]
    attacked_labels: tuple[str, ...]
    simulated: bool
    note: str
    extra_warnings: tuple[str, ...] = ()
    context: Mapping[str, Any] | None = None
    verifier_context: Mapping[str, Any] | None = None
    window: Mapping[str, Any] | None = None  # for window families: rows and the energy outside them


def shape(label: str) -> str:
    """A configuration's label without its precision (the same shape in another precision is the same config)."""
    for d in ("_fp32", "_tf32", "_fp16", "_bf16", "_fp8"):
        label = label.replace(d, "")
    return label


def profile_hash(p: Profile | None) -> str | None:
    if p is None:
        return None
    return hashlib.sha256(json.dumps(p.to_dict(), sort_keys=True, default=str).encode()).hexdigest()[:16]
