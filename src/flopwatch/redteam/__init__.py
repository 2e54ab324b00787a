"""Red-team suite: attacks an evader would try against flopwatch's verdicts, on real and simulated data.

``run_suite(quick=True)`` → :class:`flopwatch.redteam.suite.SuiteResult` (``to_dict()`` is the
``flopwatch redteam --json`` contract). This package may use the simulator; ``estimate/`` never does.
"""

from __future__ import annotations

from flopwatch.redteam.suite import SuiteResult, run_suite

__all__ = ["SuiteResult", "run_suite"]
