"""How many examples each property-based test draws.

The default run (``python -m pytest -q``) draws 1/25 of the full volume, so the suite stays fast; CI (``.ci/run``)
runs every ``@given`` test again with ``FLOPWATCH_HYPOTHESIS=full`` (``-m hypothesis``), which draws the full
counts below (over 11 000 cases in all). ``tests/conftest.py`` loads the hypothesis profile of the same name.
"""

from __future__ import annotations

import os

from hypothesis import HealthCheck

PROFILE = os.environ.get("FLOPWATCH_HYPOTHESIS", "fast")
if PROFILE not in ("fast", "full"):
    raise RuntimeError(f"FLOPWATCH_HYPOTHESIS must be 'fast' or 'full', got {PROFILE!r}")
FULL = PROFILE == "full"

# full volume per property test; test_properties_loaders checks the hostile-input ones sum to ≥ 10 000
FULL_EXAMPLES: dict[str, int] = {
    "cli_numeric": 2000,
    "records": 2000,
    "seed_records": 1000,
    "profile": 1200,
    "csv": 400,
    "schedule": 1000,
    "config": 1200,
    "raw_bytes": 1200,
    "json_text": 1000,
    "detect_hysteresis": 200,
    "monitor_config": 400,
}
HOSTILE_INPUT = (
    "cli_numeric",
    "records",
    "seed_records",
    "profile",
    "csv",
    "schedule",
    "config",
    "raw_bytes",
    "json_text",
)

# derandomized and without an example database: the same cases on every run, so CI is deterministic;
# no deadline: a loaded 2-core machine is slow
SETTINGS: dict = {
    "deadline": None,
    "derandomize": True,
    "database": None,
    "suppress_health_check": [HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
}


def examples(name: str) -> int:
    """The number of examples test ``name`` draws under the active profile (at least 5)."""
    n = FULL_EXAMPLES[name]
    return n if FULL else max(5, min(n, n // 25))
