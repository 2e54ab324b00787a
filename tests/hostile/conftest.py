"""Fixtures the verdict red-team rounds share: one SIMULATED bf16 workload family and calibration sessions on it."""

from __future__ import annotations

import pytest

from flopwatch.redteam.simulated import datacenter_family, sim_profile


@pytest.fixture(scope="module")
def family():
    return datacenter_family("bf16", quick=True)


@pytest.fixture(scope="module")
def a100_profile(family):
    return sim_profile("a100", family, "bf16")  # SIMULATED calibration session


@pytest.fixture(scope="module")
def h100_profile(family):
    return sim_profile("h100", family, "bf16")  # SIMULATED calibration session
