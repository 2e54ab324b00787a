"""Shared fixtures: paths to the published data in ../shared, GPU detection, seeded RNGs."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest

REPO = Path(__file__).resolve().parents[1]
TEST_DATA = REPO / "tests" / "data"
# The unlicensed Jetson data is never copied into the repo: tests read it from ../shared.
SHARED = Path(os.environ.get("FLOPWATCH_SHARED", REPO.parent / "shared")).resolve()
JETSON_DIR = SHARED / "data" / "jetson_flop_estimator"
V2_RECORDS = JETSON_DIR / "eval_results_v2_records.json"
TIMESERIES = JETSON_DIR / "writeup" / "timeseries.json"
MASCOTS_DIR = SHARED / "data" / "gpu_power_benchmark" / "aggregation_results"


def _need(path: Path) -> Path:
    if not path.exists():
        pytest.skip(f"published data not found at {path} (set FLOPWATCH_SHARED to the shared/ folder)")
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
