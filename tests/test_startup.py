"""Start-up stays light: the CLI's help path and the modules every command loads import no heavy library
at module top (speed itself is measured by benchmarks/bench_scaling.py --startup, never asserted here)."""

from __future__ import annotations

import subprocess
import sys

# pydantic: typer 0.29 coerces values through pydantic adapters; the help paths must not build one (cli._output.Group)
HEAVY = ("scipy.stats", "pandas", "pyarrow", "matplotlib", "torch", "pydantic")


def _imported(code: str) -> list[str]:
    probe = f"{code}\nimport sys\nprint(','.join(m for m in {HEAVY!r} if m in sys.modules))"
    out = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True, timeout=120
    )
    last = out.stdout.strip().splitlines()[-1] if out.stdout.strip() else ""
    return [m for m in last.split(",") if m]


def test_cli_import_and_help_paths_import_nothing_heavy():
    assert _imported("import flopwatch.cli") == []
    for argv in (
        ["--help"],
        ["estimate", "--help"],
        ["detect", "--help"],
        ["monitor", "--help"],
        ["powermodel", "evaluate", "--help"],  # two groups above the command
        [],  # no arguments: the help
    ):
        code = (
            "import contextlib, io\nfrom flopwatch.cli import main\n"
            f"with contextlib.redirect_stdout(io.StringIO()):\n    main({argv!r})"
        )
        assert _imported(code) == [], argv


def test_estimator_and_trace_modules_import_lazily():
    mods = (
        "flopwatch.estimate.intervals",
        "flopwatch.estimate.profile",
        "flopwatch.detect",
        "flopwatch.telemetry.trace",
        "flopwatch.telemetry.integrate",
        "flopwatch.telemetry.source",
        "flopwatch.telemetry.sensors.replay",
        "flopwatch.telemetry.sampler",
    )
    assert _imported("\n".join(f"import {m}" for m in mods)) == []


def test_student_t_halfwidth_equals_the_scipy_stats_formula():
    """The interval's quantile now comes from scipy.special.stdtrit (what scipy.stats.t.ppf evaluates):
    the same half-widths to the last bit."""
    import math

    import numpy as np
    from scipy import stats

    from flopwatch.estimate.intervals import log_halfwidth

    rng = np.random.default_rng(0)
    for n in (2, 5, 14, 21):
        r = rng.normal(0, 0.05, (3, n))
        for c in (0.5, 0.9, 0.95):
            q, used = log_halfwidth(r, c, method="student-t")
            s = np.sqrt(np.mean(r**2, axis=-1))
            ref = stats.t.ppf(0.5 + c / 2.0, df=n - 1) * s * math.sqrt(1.0 + 1.0 / n)
            assert np.array_equal(q, ref) and set(used.tolist()) == {"student-t"}
