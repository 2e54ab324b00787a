"""Shared fixtures: paths to the published data in ../shared, GPU detection, seeded RNGs."""

from __future__ import annotations

import importlib.abc
import os
import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import settings

from hypothesis_budget import PROFILE, SETTINGS

REPO = Path(__file__).resolve().parents[1]
TEST_DATA = REPO / "tests" / "data"
# The unlicensed Jetson data is never copied into the repo: tests read it from ../shared.
SHARED = Path(os.environ.get("FLOPWATCH_SHARED", REPO.parent / "shared")).resolve()
JETSON_DIR = SHARED / "data" / "jetson_flop_estimator"
V2_RECORDS = JETSON_DIR / "eval_results_v2_records.json"
TIMESERIES = JETSON_DIR / "writeup" / "timeseries.json"
MASCOTS_DIR = SHARED / "data" / "gpu_power_benchmark" / "aggregation_results"

# Property-based tests: a small default volume keeps the suite fast; FLOPWATCH_HYPOTHESIS=full (run by .ci/run)
# draws the full volume. Tests with their own count take it from hypothesis_budget.examples().
settings.register_profile("fast", max_examples=20, **SETTINGS)
settings.register_profile("full", max_examples=200, **SETTINGS)
settings.load_profile(PROFILE)

# Output honours COLUMNS even when piped (a user asks for a width); the tests must not depend on the terminal or
# CI shell they run from, so they start without one (a test that wants a width sets it).
for _var in ("COLUMNS", "LINES"):
    os.environ.pop(_var, None)


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--without-torch",
        action="store_true",
        help="hide torch (import torch raises ImportError) to check the suite where torch is not installed: "
        "torch-dependent tests must skip, saying why",
    )


class _HideTorch(importlib.abc.MetaPathFinder):
    """An import hook under which ``import torch`` raises ModuleNotFoundError, as where torch is not installed.
    (``sys.modules["torch"] = None`` would do the same for imports but trips libraries such as scipy that look
    torch up in ``sys.modules`` to recognise tensors.)"""

    def find_spec(self, name: str, path: object = None, target: object = None) -> None:
        if name == "torch" or name.startswith("torch."):
            raise ModuleNotFoundError(f"No module named {name!r} (hidden by --without-torch)", name=name)
        return None


def pytest_configure(config: pytest.Config) -> None:
    if config.getoption("--without-torch"):
        if any(m == "torch" or m.startswith("torch.") for m in sys.modules):
            raise pytest.UsageError("--without-torch: torch was imported before the tests started")
        sys.meta_path.insert(0, _HideTorch())


def _need(path: Path) -> Path:
    if not path.exists():
        pytest.skip(f"published data not found at {path} (set FLOPWATCH_SHARED to the shared/ folder)")
    # A test that reproduces published numbers must read the published data: an altered copy fails, saying so.
    from flopwatch.published import published_data_problem

    for f in sorted(path.glob("*.csv")) if path.is_dir() else [path]:
        problem = published_data_problem(f)
        if problem is not None:
            pytest.fail(problem)
    return path


@pytest.fixture(scope="session")
def v2_records_path() -> Path:
    """The published Jetson v2 records (unlicensed: read in place, never copied)."""
    return _need(V2_RECORDS)


@pytest.fixture(scope="session")
def timeseries_path() -> Path:
    """The published Jetson trace of one 9000-step run."""
    return _need(TIMESERIES)


@pytest.fixture(scope="session")
def mascots_dir() -> Path:
    return _need(MASCOTS_DIR)


@pytest.fixture
def rng() -> np.random.Generator:
    return np.random.default_rng(12345)


def _have_gpu() -> bool:
    try:
        import pynvml  # type: ignore[import-not-found]

        pynvml.nvmlInit()
        n = pynvml.nvmlDeviceGetCount()
        pynvml.nvmlShutdown()
        return n > 0
    except Exception:
        return False


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if any("gpu" in item.keywords for item in items) and not _have_gpu():
        skip = pytest.mark.skip(reason="needs an NVIDIA GPU with a working driver (NVML)")
        for item in items:
            if "gpu" in item.keywords:
                item.add_marker(skip)


# One SIMULATED bf16 workload family and calibration sessions on it, shared by the verdict tests and the red-team
# rounds (imported lazily: the conftest loads before --without-torch hides torch).
@pytest.fixture(scope="module")
def family():
    from flopwatch.redteam.simulated import datacenter_family

    return datacenter_family("bf16", quick=True)


@pytest.fixture(scope="module")
def a100_profile(family):
    from flopwatch.redteam.simulated import sim_profile

    return sim_profile("a100", family, "bf16")  # SIMULATED calibration session


@pytest.fixture(scope="module")
def h100_profile(family):
    from flopwatch.redteam.simulated import sim_profile

    return sim_profile("h100", family, "bf16")  # SIMULATED calibration session
