"""device_basis builds a spec's basis once per spec object when what was seen is possible for it (a fleet judges
thousands of groups on a handful of specs), and still rebuilds it from the observations when it is not."""

from __future__ import annotations

import dataclasses

from flopwatch.devices import get_device
from flopwatch.estimate import sound as S
from flopwatch.estimate.observe import Observables


def test_possible_observations_share_the_specs_basis():
    spec = get_device("h100")
    a = S.device_basis(spec, Observables(1.8e6, 3600.0, peak_power_w=650.0, max_sm_clock_mhz=1900.0))
    b = S.device_basis(spec, Observables(1.0e4, 60.0))
    assert a is b and a == S._device_basis(spec, None) and a.key == "h100" and not a.warnings


def test_impossible_observations_are_never_taken_from_the_memo():
    spec = get_device("a100")
    S.device_basis(spec)  # the possible basis, memoised
    hot = S.device_basis(spec, Observables(3.6e6, 3600.0, peak_power_w=5 * spec.tdp_w))
    assert hot == S._device_basis(spec, Observables(3.6e6, 3600.0, peak_power_w=5 * spec.tdp_w))
    assert hot.key.startswith("a100→") and any("impossible for" in w for w in hot.warnings)


def test_another_spec_object_gets_its_own_basis():
    spec = get_device("h100")
    other = dataclasses.replace(
        spec, tdp_w=spec.tdp_w * 2
    )  # same key, another object: never the cached basis
    assert S.device_basis(other) == S._device_basis(other, None) != S.device_basis(spec)
