"""What observation would make a run decidable: the ``tighten`` hints of an assessment (``estimate.verdict.assess``).

Each hint reads "with X observed: ×a → ×b", a and b the verdict's factor (sound upper bound ÷ estimate) now and with
X; "×never" where the only warnings are too slow a sampling rate, which blocks "below" at any T until a faster
sampler or a cumulative counter lifts it.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from typing import Any

from flopwatch.devices import DeviceSpec
from flopwatch.estimate.observe import Observables
from flopwatch.estimate.sound import sound_upper

#: The words that open the warning for a point sensor read slower than it updates (``verdict.context_warnings``).
RATE_WARNING = "sampling rate below the device's need"


def tighten(
    dev: Any,
    obs: Observables,
    idle_excess: float,
    upper: float,
    est: float | None,
    dtype: str | None,
    spec: DeviceSpec | None,
    warnings: Sequence[str],
    fast_unobserved_s: float | None = None,
) -> list[str]:
    """ "with X observed: ×a → ×b" for each observation that would lower the verdict's factor; "×never → ×b"
    where the only warnings are too slow a sampling rate, which a faster sampler or a cumulative counter lifts
    (``fast_unobserved_s``: the run's unobserved time were every sensor read at its need)."""
    out: list[str] = []
    rate_only = bool(warnings) and all(w.startswith(RATE_WARNING) for w in warnings)
    if warnings and not (rate_only and fast_unobserved_s is not None):
        out.append(f"resolve the {len(warnings)} warning(s): each blocks 'below' whatever the bound")
    if dev is None or est is None or not math.isfinite(upper):
        return out
    a = upper / est
    now = "never" if rate_only else f"{a:.3g}"  # what the run is decisive at until the hint is taken
    if rate_only and fast_unobserved_s is not None:
        su = sound_upper(
            dev, dataclasses.replace(obs, unobserved_s=fast_unobserved_s), idle_excess_w=idle_excess
        )
        out.append(
            f"with the power sensor read as fast as it updates (a faster sampler): ×never → ×{su.flops / est:.3g}"
        )
    w = obs.windows
    clock_seen = obs.min_sm_clock_mhz is not None or (w is not None and w.sm_clock_mhz is not None)
    if not clock_seen and dev.max_clock_mhz:
        b = sound_upper(dev, obs, idle_excess_w=idle_excess, assume_clock_mhz=dev.max_clock_mhz).flops / est
        if b < a * 0.999:
            out.append(f"with the SM clock range observed (at the maximum clock): ×{a:.3g} → ×{b:.3g}")
    pipes_seen = obs.has_pipes or (w is not None and w.has_pipes)
    if not pipes_seen and spec is not None and dtype in spec.peak_flops and dtype != "fp32":
        # the counters count every cycle: they would cover the whole run, the energy sensor's blind time too
        tensor_s = min(obs.duration_s, est / spec.peak_flops[dtype])
        hyp = dataclasses.replace(
            obs,
            windows=None,
            pipe_active_s={"tensor": tensor_s, "fp64": 0.0, "fp32": 0.0, "fp16": 0.0},
            pipe_observed_s=obs.duration_s,
        )
        b = sound_upper(dev, hyp, idle_excess_w=idle_excess).flops / est
        if b < a * 0.999:
            out.append(f"with the pipe-activity counters observed (a {dtype} run): ×{a:.3g} → ×{b:.3g}")
    if obs.unobserved_s:
        su = sound_upper(dev, dataclasses.replace(obs, unobserved_s=0.0), idle_excess_w=idle_excess)
        out.append(
            # (no seconds in the hint: a sweep's records share one line in `estimate`; the basis has them)
            f"with the unobserved time covered by a cumulative counter, at best: ×{now} → ×{su.flops / est:.3g}"
        )
    return out


__all__ = ["RATE_WARNING", "tighten"]
