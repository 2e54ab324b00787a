"""Many workloads assessed at once (``estimate.verdict.assess_many``, ``estimate.sound.sound_uppers``: the fleet's
groups) get exactly what each gets alone: the batch shares array passes, never a value between workloads."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from flopwatch.estimate.observe import Observables, ObservedWindows
from flopwatch.estimate.sound import device_basis, sound_upper, sound_uppers
from flopwatch.estimate.verdict import assess, assess_many, drive


def _mixed(seed: int = 5) -> list[tuple[Observables, dict]]:
    """Seeded workloads of every shape a batch can mix: one window or many, pipes or none, a clock range or none,
    unobserved time, a raised idle baseline, windows that leave run time or energy out, four devices, a context."""
    rng = np.random.default_rng(seed)
    out = []
    for i in range(40):
        t = float(rng.uniform(10.0, 5000.0))
        e = float(rng.uniform(0.0, 600.0)) * t
        kw: dict = {
            "device": ["a100", "h100", "h200", "orin-nano"][i % 4],
            "threshold_flops": 1e16,
            "label": f"w{i}",
        }
        obs = Observables(e, t, idle_power_w=[None, 60.0, 140.0][i % 3], mean_util=0.9)
        if i % 2:
            obs = dataclasses.replace(obs, min_sm_clock_mhz=900.0 + 10 * i, max_sm_clock_mhz=1400.0 + 5 * i)
        if i % 3 == 0:
            pa = {p: float(rng.uniform(0, 0.5)) * t for p in ("tensor", "fp64", "fp32", "fp16")}
            obs = dataclasses.replace(obs, pipe_active_s=pa, pipe_observed_s=t * float(rng.uniform(0.5, 1.0)))
        if i % 5 == 0:
            obs = dataclasses.replace(obs, unobserved_s=t * float(rng.uniform(0.0, 0.8)))
        if i % 4 == 1:  # windows: some leave run time out, some place less energy than the run's total
            n = int(rng.integers(2, 9))
            dt = rng.dirichlet(np.ones(n)) * t * float(rng.choice([1.0, 0.7]))
            ew = rng.dirichlet(np.ones(n)) * e * float(rng.choice([1.0, 0.6]))
            acts = (
                {f"{p}_active": rng.uniform(0, 0.6, n) for p in ("tensor", "fp64", "fp32", "fp16")}
                if i % 8 == 1
                else {}
            )
            obs = dataclasses.replace(
                obs, windows=ObservedWindows(dt, ew, sm_clock_mhz=rng.uniform(800, 1400, n), **acts)
            )
        if i % 7 == 0:
            kw["context"] = {"sensor_kind": "nvml", "sample_rate_hz": 10.0}
        out.append((obs, kw))
    return out


def test_the_bounds_of_a_batch_are_each_runs_own():
    from flopwatch.devices import get_device

    runs = [
        (device_basis(get_device(kw["device"]), obs), obs, float(i % 3) * 20.0)
        for i, (obs, kw) in enumerate(_mixed())
    ]
    together = sound_uppers(runs)
    for (dev, obs, idle), su in zip(runs, together, strict=True):
        alone = sound_upper(dev, obs, idle_excess_w=idle)
        assert su.to_dict() == alone.to_dict()
        assert su.basis == alone.basis
    # and in another order: no value follows a run to its neighbour
    rev = sound_uppers(runs[::-1])
    assert [s.to_dict() for s in rev[::-1]] == [s.to_dict() for s in together]


@pytest.mark.parametrize("with_profile", [False, True])
def test_assess_many_is_assess_of_each(with_profile, a100_profile):
    profile = a100_profile if with_profile else None
    items = _mixed(7)
    many = assess_many(profile, items)
    for (obs, kw), a in zip(items, many, strict=True):
        one = assess(profile, obs, **kw)
        assert a.to_dict() == one.to_dict()
    assert {a.verdict for a in many} >= {"uncertain"}


def test_drive_answers_every_round_together_and_keeps_each_result():
    """Generators that ask a different number of times: each round's requests answered in one call, in order."""
    calls: list[list[int]] = []

    def ask(n: int):
        total = 0
        for k in range(n):
            total += yield n * 10 + k
        return total

    def serve(reqs: list[int]) -> list[int]:
        calls.append(list(reqs))
        return [r + 1 for r in reqs]

    assert drive([ask(0), ask(2), ask(1)], serve) == [0, (20 + 1) + (21 + 1), 10 + 1]
    assert calls == [[20, 10], [21]]
