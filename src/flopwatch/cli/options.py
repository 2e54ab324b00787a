"""Validators for numeric command-line options, and the guard that an output is not an input.

Every numeric option goes through one of these as a typer ``callback``, so a bad value (``nan``, ``inf``,
a negative count, a sampling rate that would run away) is refused while the command line is parsed — one
line, exit status 2, before any file is read or any sensor opened::

    rate: float = typer.Option(10.0, "--rate", callback=options.rate_hz())
    idle: float | None = typer.Option(None, "--idle-power", callback=options.non_negative(unit="W"))

Click's own ``FLOAT`` type accepts ``nan`` and ``inf``; these callbacks are what refuse them (typer's
``min=``/``max=`` are not used: one check, one message). The message names the option:
``flopwatch: error: Invalid value for '--rate': must be <= 1000 Hz, got 1e+07``.

The options many commands share are declared once, below, as ``Annotated`` aliases (``as_json: options.Json =
False``), with one spelling each: ``-o/--output``, ``--precision``, ``--threshold``, ``--rate``. The old spellings
(``--out``, ``--dtype``, ``--threshold-flops``, ``--rate-hz``) still parse, hidden: :data:`DEPRECATED_SPELLINGS`.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Annotated, Any

import typer

from flopwatch.errors import InputError
from flopwatch.io import check_not_input, check_output_file, refuse_link

# No sensor backend refreshes faster than 1 kHz (NVML's power reading every 20–100 ms, tegrastats ≥ 1 ms,
# RAPL's energy counter ~1 ms): sampling above that only burns CPU, and 1e7 Hz used to run away.
MAX_RATE_HZ = 1000.0
# A replay or a simulated clock faster than 1e6× real time gains nothing (a day replays in 0.1 s).
MAX_SPEED = 1e6

# Options that size the work are bounded by what the work costs (issue 25: `record --rate 1000 --duration 1e7`
# asked for 1e10 samples, `detect --poll 1e-300` divided by zero, `powermodel predict --duration-s 1e308`
# printed inf J):
#: The longest duration any option accepts: a year (366 days). A single recording, workload or prediction
#: longer than that is a typo, and 1e308 s overflows every energy computed from it.
MAX_DURATION_S = 366 * 86400.0
#: Samples one command may take per device: 1e8 rows of a trace are ~10 GB of Parquet (≈ 100 B a row with
#: its columns) and ~28 h at the 1 kHz cap, or a year at 3 Hz.
MAX_SAMPLES = 1e8
#: The shortest detection poll: one sample at the 1 kHz rate cap (a shorter poll sees no new reading).
MIN_POLL_S = 1.0 / MAX_RATE_HZ
#: The longest detection poll: an hour (the study polls every 1.5 s).
MAX_POLL_S = 3600.0
#: Largest count of a repeated unit of work (repeats, warm-up steps, samples, resets …) given on the command
#: line: a million is far above any protocol (MASCOTS: 5 warm-up steps, 50–500 samples).
MAX_COUNT = 1_000_000

Callback = Callable[..., Any]

__all__ = [
    "MAX_COUNT",
    "MAX_DURATION_S",
    "MAX_POLL_S",
    "MAX_RATE_HZ",
    "MAX_SAMPLES",
    "MAX_SPEED",
    "MIN_POLL_S",
    "check_samples",
    "duration_s",
    "poll_s",
    "check_not_input",
    "count",
    "finite",
    "fraction",
    "in_range",
    "non_negative",
    "not_inputs",
    "positive",
    "rate_hz",
    "sensor_files",
    "speed",
]


# Old spelling → the one spelling; still accepted (documented commands keep working), never shown in --help.
DEPRECATED_SPELLINGS: dict[str, str] = {
    "--out": "--output",
    "--dtype": "--precision",
    "--threshold-flops": "--threshold",
    "--rate-hz": "--rate",  # bench's, alone in that spelling
}


def respell(args: list[str]) -> list[str]:
    """``args`` with each deprecated option spelling (also ``--out=X``) replaced by the current one."""
    out = []
    for a in args:
        name, eq, value = a.partition("=")
        new = DEPRECATED_SPELLINGS.get(name)
        out.append(new + eq + value if new and a.startswith("--") else a)
    return out


def _fmt(v: float) -> str:
    return f"{v:g}"


def _problem(
    v: Any,
    *,
    gt: float | None,
    ge: float | None,
    lt: float | None,
    le: float | None,
    integer: bool,
    unit: str,
) -> str | None:
    """Why ``v`` is not acceptable, or None."""
    u = f" {unit}" if unit else ""
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return f"must be a number, got {v!r}"
    if isinstance(v, int):
        # exact comparisons: float() of a 400-digit integer raises OverflowError
        x: float = v
        if abs(v) > 2**1023:
            return "is out of range (too large for a 64-bit float)"
    else:
        x = float(v)
        if math.isnan(x):
            return "must be a number, got nan"
        if math.isinf(x):
            return f"must be finite, got {x}"
        if integer and x != round(x):
            return f"must be a whole number, got {_fmt(x)}"
    if gt is not None and not x > gt:
        return f"must be > {_fmt(gt)}{u}, got {_fmt(x)}"
    if ge is not None and not x >= ge:
        return f"must be >= {_fmt(ge)}{u}, got {_fmt(x)}"
    if lt is not None and not x < lt:
        return f"must be < {_fmt(lt)}{u}, got {_fmt(x)}"
    if le is not None and not x <= le:
        return f"must be <= {_fmt(le)}{u}, got {_fmt(x)}"
    return None


def finite(
    *,
    gt: float | None = None,
    ge: float | None = None,
    lt: float | None = None,
    le: float | None = None,
    integer: bool = False,
    unit: str = "",
    percent_hint: bool = False,
) -> Callback:
    """A typer callback accepting finite numbers within the given bounds (None passes: option not given).

    ``percent_hint``: for a 0–1 ratio, a whole number in [2, 100] gets "did you mean 0.8?" (80 given as a percent).
    """

    def callback(ctx: typer.Context, param: typer.CallbackParam, value: Any) -> Any:
        if value is None or ctx.resilient_parsing:
            return value
        values = value if isinstance(value, (list, tuple)) else [value]
        for v in values:
            msg = _problem(v, gt=gt, ge=ge, lt=lt, le=le, integer=integer, unit=unit)
            if msg is not None:
                # a whole number 2–100 reads as a percent (80 → 0.8); 1.5 is no percent anyone means
                if percent_hint and isinstance(v, (int, float)) and 2 <= v <= 100 and float(v).is_integer():
                    msg += f" (a 0–1 ratio, not a percentage: did you mean {v / 100:g}?)"
                raise typer.BadParameter(msg, ctx=ctx, param=param)
        return value

    return callback


def positive(*, le: float | None = None, unit: str = "") -> Callback:
    """Finite and > 0 (durations, powers, rates), optionally <= ``le``."""
    return finite(gt=0.0, le=le, unit=unit)


def non_negative(*, le: float | None = None, unit: str = "") -> Callback:
    """Finite and >= 0 (idle power, thresholds, tails)."""
    return finite(ge=0.0, le=le, unit=unit)


def fraction(*, open_low: bool = False, open_high: bool = False) -> Callback:
    """A ratio in [0, 1] (utilisation gates); ``open_low``/``open_high`` exclude the ends (confidence)."""
    return finite(
        gt=0.0 if open_low else None,
        ge=None if open_low else 0.0,
        lt=1.0 if open_high else None,
        le=None if open_high else 1.0,
        percent_hint=True,
    )


def in_range(lo: float, hi: float, *, unit: str = "") -> Callback:
    """Finite and within [lo, hi]."""
    return finite(ge=lo, le=hi, unit=unit)


def flop_count(value: str | None, name: str) -> float | None:
    """A FLOP count given as text (``1e25``), None when absent: the one wording of every ``--threshold`` and
    ``--declared`` (typer's float parsing would answer ``nan`` and ``1e1x`` in two other wordings)."""
    if value is None:
        return None
    try:
        v = float(value)
    except ValueError:
        raise InputError(f"must be a FLOP count such as 1e14, got {value!r}", field=name) from None
    if not math.isfinite(v) or v <= 0:
        raise InputError(f"must be a positive finite FLOP count, got {value!r}", field=name)
    return v


def flops() -> Callback:
    """Callback of a FLOP-count option declared as ``str``: :func:`flop_count` while the line is parsed."""

    def callback(ctx: typer.Context, param: typer.CallbackParam, value: Any) -> Any:
        if ctx.resilient_parsing:
            return value
        return flop_count(value, max(param.opts, key=len))

    return callback


def count(*, ge: int = 1, le: float | None = None) -> Callback:
    """A whole number >= ``ge`` (splits, samples, repeats), optionally <= ``le``."""
    return finite(ge=ge, le=le, integer=True)


def rate_hz() -> Callback:
    """A sampling rate: > 0 and <= :data:`MAX_RATE_HZ`."""
    return positive(le=MAX_RATE_HZ, unit="Hz")


def duration_s(*, allow_zero: bool = False, le: float = MAX_DURATION_S) -> Callback:
    """A duration in seconds: > 0 (>= 0 with ``allow_zero``) and <= ``le`` (default :data:`MAX_DURATION_S`)."""
    return finite(ge=0.0, le=le, unit="s") if allow_zero else finite(gt=0.0, le=le, unit="s")


def poll_s() -> Callback:
    """A detection poll interval: within [:data:`MIN_POLL_S`, :data:`MAX_POLL_S`]."""
    return finite(ge=MIN_POLL_S, le=MAX_POLL_S, unit="s")


def check_samples(rate_hz: float, duration_s: float, *, option: str = "--duration", devices: int = 1) -> None:
    """InputError (exit 2, before any work) when ``rate_hz × duration_s`` (× devices) exceeds
    :data:`MAX_SAMPLES`: each option is within its own bounds, their product is not."""
    n = float(rate_hz) * float(duration_s) * max(1, devices)
    if not n <= MAX_SAMPLES:
        raise InputError(
            f"{duration_s:g} s at {rate_hz:g} Hz is {n:.3g} samples (limit {MAX_SAMPLES:.0e}); "
            "record less time or at a lower rate",
            field=option,
        )


def speed() -> Callback:
    """A replay / scaled-clock speed factor: > 0 and <= :data:`MAX_SPEED`."""
    return positive(le=MAX_SPEED)


def not_inputs(
    outputs: Iterable[tuple[str, str | os.PathLike[str] | None]],
    inputs: Iterable[str | os.PathLike[str] | None],
    *,
    directories: Iterable[str] = ("--figures",),
) -> None:
    """Refuse (InputError, exit 2) any ``(option, path)`` output that is one of ``inputs`` or another output,
    or an existing directory where a file is expected (options not in ``directories``).

    Call at the top of a command, before anything is read or written.
    """
    outs = [(opt, Path(p)) for opt, p in outputs if p is not None]
    ins = [p for p in inputs if p is not None]
    for i, (opt, p) in enumerate(outs):
        if opt not in directories:
            try:
                check_output_file(p)  # a directory, FIFO or device where an output file goes
            except InputError as e:
                raise InputError(e.detail, file=str(p), field=opt) from None
        check_not_input(p, ins, option=opt)
        # two outputs on one path: the second would overwrite the first
        check_not_input(p, [q for _, q in outs[i + 1 :]], option=opt)
        if opt not in directories:
            try:
                refuse_link(p)  # no writer writes through a link: refused before any work, --force or not
            except InputError as e:
                raise InputError(e.detail, file=str(p), field=opt) from None


def sensor_files(spec: str | None) -> list[str]:
    """The files a sensor spec reads (``replay:FILE``, ``tegrastats:FILE``, ``jetson:ROOT``…), for :func:`not_inputs`."""
    if not spec:
        return []
    kind, sep, arg = spec.strip().partition(":")
    if not sep or not arg or kind.strip().lower() in ("nvml", "amd", "sim"):
        return []  # device indices, UUIDs and simulator names are not paths
    return [arg.strip()]


# ---------------------------------------------------------------------------------- shared option declarations
SEED_MAX = (
    2**63 - 1
)  # numpy's SeedSequence takes any non-negative int; 64 bits keeps it a SQLite/JSON integer

Json = Annotated[bool, typer.Option("--json", help="Print JSON to stdout (nothing else goes there).")]
Threshold = Annotated[
    str | None,
    typer.Option("--threshold", help="FLOP threshold for the verdict, e.g. 1e25.", callback=flops()),
]  # a float by the time the command runs (str: so that 'nan' and '1e1x' get estimate's one wording)
Seed = Annotated[
    int,
    typer.Option(
        "--seed",
        help="Seed of every random draw (splits, folds, simulator noise): the same seed gives the same result.",
        callback=count(ge=0, le=SEED_MAX),
    ),
]
Confidence = Annotated[
    float,
    typer.Option("--confidence", help="Confidence of the prediction intervals (0–1, e.g. 0.9).",
                 callback=fraction(open_low=True, open_high=True)),
]  # fmt: skip
OptConfidence = Annotated[
    float | None,
    typer.Option("--confidence", help="Confidence of the prediction intervals (0–1; default: the profile's).",
                 callback=fraction(open_low=True, open_high=True)),
]  # fmt: skip
MinUtil = Annotated[
    float,
    typer.Option("--min-util", help="Frontier gate: minimum mean utilisation (0–1; the study: 0.8).",
                 callback=fraction()),
]  # fmt: skip
MinBatch = Annotated[
    int,
    typer.Option(
        "--min-batch", help="Compute-bound regime only: runs with batch >= this.", callback=count(ge=1)
    ),
]
Level = Annotated[
    float,
    typer.Option("--level", help="Level of the interval or quantile of the conservative bound (0.5–0.999).",
                 callback=in_range(0.5, 0.999)),
]  # fmt: skip

# The model size of `workload flops|run` and of `bench`'s grid (without --sweep); unset: the --arch default
# (workloads/config.py).
DModel = Annotated[int | None, typer.Option("--d-model", help="Model width.", callback=count(ge=1))]
NHead = Annotated[
    int | None,
    typer.Option(
        "--nhead", help="Attention heads (seed-encoder default 4, gpt d_model/64).", callback=count(ge=1)
    ),
]
NumLayers = Annotated[
    int | None,
    typer.Option("--num-layers", help="Layers (seed-encoder default 3, gpt 4).", callback=count(ge=1)),
]
SeqLen = Annotated[int | None, typer.Option("--seq-len", help="Tokens per sequence.", callback=count(ge=1))]


def device_model() -> Callback:
    """A device model the datasheet table knows (``h100``, ``NVIDIA A100-SXM4-80GB``): an unknown or empty name
    is refused while parsing, never silently replaced by the data's or the profile's device (the bounds a
    verdict rests on would then come from hardware the user did not name)."""

    def callback(ctx: typer.Context, param: typer.CallbackParam, value: Any) -> Any:
        if value is None or ctx.resilient_parsing:
            return value
        from flopwatch.devices import DEVICES, resolve

        if resolve(value) is None:  # the resolver the estimators use (simulated names such as sim:a100 too)
            raise typer.BadParameter(
                f"unknown device {value!r}; known: {', '.join(DEVICES)}", ctx=ctx, param=param
            )
        return value

    return callback


DeviceModel = Annotated[
    str | None,
    typer.Option("--device", help="Device model for the datasheet bounds, e.g. orin-nano, h100 "
                 "(default: from the data or the profile).", callback=device_model()),
]  # fmt: skip
TraceDevice = Annotated[
    str | None, typer.Option("--device", help="Only this device of a multi-device trace.")
]

# Telemetry options of `record`, `measure-idle`, `sim trace`, `run`, `detect` and `join`: one meaning,
# one check, one help each (`monitor` checks its own in MonitorConfig, which reads its TOML file too).
Sensor = Annotated[
    str, typer.Option("--sensor", "-s", help="Sensor spec: nvml, nvml:N, jetson, rapl, replay:FILE …")
]
Rate = Annotated[
    float, typer.Option("--rate", help="Telemetry sampling rate (samples per second).", callback=rate_hz())
]
ReplaySpeed = Annotated[
    float | None,
    typer.Option("--speed", help="Replay speed factor (replay:FILE sensors).", callback=speed()),
]
IdlePower = Annotated[
    float | None,
    typer.Option("--idle-power", help="Idle power in W (default: from the trace, as `flopwatch detect`).",
                 callback=non_negative(unit="W")),
]  # fmt: skip
#: Overwrite the one output file (not `run`'s output directory: its own --force says what it overwrites).
Force = Annotated[bool, typer.Option("--force", help="Overwrite the output file if it exists.")]
Splits = Annotated[
    int,
    typer.Option("--splits", help="Number of random train/test splits.",
                 callback=count(ge=1, le=MAX_COUNT)),
]  # fmt: skip
