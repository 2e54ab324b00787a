"""Property-based tests (hypothesis) of the CLI's numeric options, through ``flopwatch.cli.main`` in process.

Each case runs a real command with one numeric option set to a generated value (finite, NaN, ±inf, 1e400,
huge integers, fractions for counts, text) and an input file that does not exist (or, for a command without
inputs, an existing directory as its output file). Properties:

* always exit status 2 and exactly one stderr line starting ``flopwatch: error:`` — no traceback;
* a value outside the option's documented domain (the independent table ``SPEC`` below) is refused *naming
  the option*, i.e. while the command line is parsed, before the missing input is even looked at;
* a value inside the domain gets past option parsing (the error is about the missing input instead).

Derandomized (fixed seed, no example database): deterministic in CI. The volume is in
``tests/hypothesis_budget.py`` (small by default, full under ``FLOPWATCH_HYPOTHESIS=full``).
"""

from __future__ import annotations

import math
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from flopwatch.cli import main
from flopwatch.cli.options import MAX_COUNT, MAX_DURATION_S, MAX_POLL_S, MIN_POLL_S
from hypothesis_budget import examples

INF = math.inf
# option → (lower, lower inclusive, upper, upper inclusive, integer): the documented domain of each option
F = False
T = True
SPEC: dict[str, tuple[float, bool, float, bool, bool]] = {
    "confidence": (0, F, 1, F, F),
    "min-util": (0, T, 1, T, F),
    "splits": (1, T, 1e6, T, T),
    "train": (2, T, INF, F, T),
    "seed": (0, T, 2**63 - 1, T, T),
    "idle-power": (0, T, INF, F, F),
    "mfu": (0, T, 100, T, F),
    "level": (0.5, T, 0.999, T, F),
    "k": (2, T, INF, F, T),
    "min-batch": (1, T, INF, F, T),
    "power-w": (0, T, 5000, T, F),
    "util-pct": (0, T, 100, T, F),
    "rate": (0, F, 1000, T, F),
    "duration": (0, F, MAX_DURATION_S, T, F),
    "speed": (0, F, 1e6, T, F),
    "flush-every": (0, F, 86400, T, F),
    "poll": (MIN_POLL_S, T, MAX_POLL_S, T, F),
    "util-threshold": (0, T, 1, F, F),
    "start-polls": (1, T, INF, F, T),
    "end-polls": (1, T, INF, F, T),
    "tail-s": (0, T, 86400, T, F),
    "power-cap-w": (0, F, INF, F, F),
    "locked-clock-mhz": (0, F, INF, F, F),
    "budget-s": (0, F, MAX_DURATION_S, T, F),
    "d-model": (1, T, INF, F, T),
    "window-s": (0, F, 3600, T, F),
    "rel-ci": (0, F, INF, F, F),
    "cooldown-s": (0, T, 3600, T, F),
    "duration-s": (0, T, MAX_DURATION_S, T, F),
    "gpus": (1, T, INF, F, T),
    "hours": (0, F, INF, F, F),
    "gpus-per-node": (1, T, INF, F, T),
    "resets": (0, T, MAX_COUNT, T, T),
    "drop": (0, T, 1, F, F),
}

# (command line with {m} = a missing input and {o} = an output path, options it is tried with)
COMMANDS: list[tuple[list[str], list[str]]] = [
    (["calibrate", "{m}.jsonl", "-o", "{o}.json"], ["confidence", "min-util"]),
    (["evaluate", "{m}.jsonl"], ["splits", "train", "seed", "confidence", "min-util"]),
    (["estimate", "--profile", "{m}.json", "{m}.jsonl"], ["confidence"]),
    (["join", "{m}.parquet", "{m}.jsonl", "-o", "{o}.jsonl"], ["idle-power"]),
    (
        ["powermodel", "predict", "--model", "{m}.json", "--gpu", "A100", "--dtype", "bf16", "--batch", "8"],
        ["mfu", "level", "duration-s"],
    ),
    (
        ["powermodel", "inverse", "--data", "{m}.csv", "--gpu", "A100", "--dtype", "bf16"],
        ["power-w", "util-pct", "level", "min-batch"],
    ),
    (["powermodel", "evaluate", "{m}.csv"], ["k", "seed", "min-batch", "level"]),
    (
        ["record", "--sensor", "replay:{m}.parquet", "-o", "{o}.parquet"],
        ["rate", "duration", "speed", "flush-every"],
    ),
    (["idle", "--sensor", "replay:{m}.parquet"], ["duration", "rate", "speed"]),
    (
        ["detect", "{m}.parquet"],
        ["poll", "util-threshold", "start-polls", "end-polls", "idle-power"],
    ),
    (
        ["sim", "trace", "a100", "--schedule", "{m}.json", "-o", "{o}.parquet"],
        ["rate", "seed", "power-cap-w", "locked-clock-mhz", "tail-s"],
    ),
    (["run", "--device", "bogus:x", "-o", "{o}"], ["budget-s", "seed", "rate", "splits"]),
    # an existing directory as the output file: refused (naming --out) right after parsing, before any work
    (["sim", "openmetrics", "-o", "{d}"], ["gpus", "hours", "gpus-per-node", "resets", "drop", "seed"]),
    (
        ["bench", "-o", "{o}.csv", "--sensor", "replay:{m}.parquet"],
        ["window-s", "rel-ci", "cooldown-s", "rate", "seed"],
    ),
]
CASES = [(argv, opt) for argv, opts in COMMANDS for opt in opts]
# options some commands need to reach their input (e.g. record needs --duration): a valid default
NEEDS = {"record": {"duration": "1"}}


# where one option name has another domain in one command
# (command, option) whose domain differs from SPEC's; none today (idle's --duration has record's bound since
# issue 24)
SPEC_BY_COMMAND: dict[tuple[str, str], tuple[float, bool, float, bool, bool]] = {}


def _valid(opt: str, text: str, command: str = "") -> bool | None:
    """Whether ``text`` is in the option's domain; None where typer's integer parsing decides ("2.0", "1e3")."""
    lo, lo_incl, hi, hi_incl, integer = SPEC_BY_COMMAND.get((command, opt), SPEC[opt])
    try:
        x = float(text)
    except (ValueError, OverflowError):
        return False
    if not math.isfinite(x) or (integer and not x.is_integer()):
        return False
    if integer:
        try:
            int(text)
        except ValueError:
            return None  # an integral float literal: typer accepts "2.0" but not "1e+16"; either is fine
    if x < lo or (x == lo and not lo_incl) or x > hi or (x == hi and not hi_incl):
        return False
    return True


def _float_str(x: float) -> str:
    return repr(x)


values = st.one_of(
    st.floats(allow_nan=True, allow_infinity=True).map(_float_str),
    st.floats(min_value=-10, max_value=2000).map(_float_str),
    st.integers(-(10**20), 10**20).map(str),
    st.integers(-5, 1100).map(str),
    st.sampled_from(
        [
            "nan",
            "NaN",
            "inf",
            "-inf",
            "Infinity",
            "1e7",
            "1e400",
            "-1e400",
            "-0",
            "0",
            "0.0",
            "1e-300",
            "abc",
            "",
        ]
        + ["9" * 400, "1_000", "0x10", " 5", "1.5", "100", "101", "0.999", "1", "2"]
    ),
)


@settings(max_examples=examples("cli_numeric"))
@given(case=st.sampled_from(CASES), value=values)
def test_numeric_options(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, case: tuple[list[str], str], value: str
) -> None:
    argv_t, opt = case
    subs = {"{m}": str(tmp_path / "missing"), "{o}": str(tmp_path / "out"), "{d}": str(tmp_path)}
    argv = list(argv_t)
    for k, v in subs.items():
        argv = [a.replace(k, v) for a in argv]
    extra = {k: v for k, v in NEEDS.get(argv[0], {}).items() if k != opt}
    for k, v in extra.items():
        argv += [f"--{k}", v]
    argv += [f"--{opt}={value}"]
    code = main(argv)
    cap = capsys.readouterr()
    err = cap.err.strip().splitlines()
    assert "Traceback" not in cap.err + cap.out
    assert code == 2, (argv, code, cap.err[-500:])
    assert len(err) == 1 and err[0].startswith("flopwatch: error: "), err
    names_option = f"'--{opt}'" in err[0]
    valid = _valid(opt, value.strip(), argv[0])
    if valid is True:
        assert not names_option, (argv, err[0])
    elif valid is False:
        assert names_option, (argv, err[0])
    assert not (tmp_path / "out").exists() and not any(tmp_path.glob("out*")), (
        "a refused command wrote output"
    )


def test_issue_examples(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """The examples the issue names, as a user types them."""
    cases = [
        (
            ["join", "t.parquet", "r.jsonl", "-o", str(tmp_path / "o.jsonl"), "--idle-power", "nan"],
            "--idle-power",
        ),
        (
            [
                "record",
                "--sensor",
                "sim:a100",
                "--rate",
                "1e7",
                "--duration",
                "1",
                "-o",
                str(tmp_path / "t.parquet"),
            ],
            "--rate",
        ),  # fmt: skip
        (
            [
                "record",
                "--sensor",
                "replay:x.parquet",
                "--speed",
                "inf",
                "--duration",
                "1",
                "-o",
                "t.parquet",
            ],
            "--speed",
        ),
        (["detect", "t.parquet", "--idle-power", "-1"], "--idle-power"),
    ]
    for argv, opt in cases:
        assert main(argv) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and f"'{opt}'" in err[0], err
