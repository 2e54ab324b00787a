"""Loading and validating the MASCOTS per-configuration aggregates (and user CSVs in the same schema).

The study's repository writes one CSV per GPU (``mfu_aggregated_per_config_<TAG>.csv``); one row is one
benchmark run, every metric a mean over that run's ≥ 50 one-second windows. The six files are vendored in
``flopwatch/powermodel/data`` (MIT; see ``data/SOURCE.md``), so this works on a fresh install.

Loading maps the study's columns to our canonical ones (units in names), and handles the known quirks
explicitly, reporting each in :attr:`LoadedAggregates.notes`:

* the idle ``baseline`` row (one per file) is removed and kept as the GPU's idle power;
* rows with an empty power or MFU are dropped from the frame (the MI210's 8 Qwen2.5-3B / fp32 / batch-128 rows,
  whose calflops MFU exceeded 100 % and was sanitised away) unless ``keep_nan_mfu=True``;
* the L4 file lacks the ``io_latency_*`` columns, which no analysis needs.

Anything else that is wrong — a missing required column, a non-numeric value in a numeric column, an unknown
dtype, a non-positive batch — raises :class:`~flopwatch.errors.InputError` naming the file, the CSV line
and the column.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from flopwatch.devices import DEVICES, normalize_dtype, resolve
from flopwatch.errors import InputError
from flopwatch.io import read_bytes
from flopwatch.powermodel.mfu import GPU_FILE_TAGS, MASCOTS_GPUS, canonical_gpu

if TYPE_CHECKING:
    import pandas as pd

#: Canonical columns (contract, see contracts.md) → the study's column they come from.
CANONICAL_FROM_SOURCE: dict[str, str] = {
    "model": "model_name",
    "dtype": "dtype",
    "batch_size": "batch_size",
    "context_window": "context_window",
    "warmup": "warmup_iterations",
    "cooldown": "cooldown_seconds",
    "mfu_pct": "mfu_percentage_calflops_mean",
    "power_w": "power_draw_watts_mean",
    "gpu_util_pct": "gpu_utilization_mean",
    "tokens_per_s": "tokens_per_second_mean",
    "flops_per_step": "calflops_total_mean",
    "samples": "samples_per_config",
}
#: Extra columns carried when present (never required).
OPTIONAL_FROM_SOURCE: dict[str, str] = {
    "sequence_length": "sequence_length",
    "mfu_formula_pct": "mfu_percentage_mean",
    "formula_flops_per_token": "formula_flops_per_token_mean",
    "mem_util_pct": "memory_utilization_mean",
    "memory_used_mb": "memory_used_mb_mean",
    "temp_c": "temperature_celsius_mean",
    "power_meter_w": "power_meter_active_power_w_mean",
}
#: ``flopwatch bench`` writes its MFU against FlopCounterMode's (hardware) FLOPs under this name; the study's
#: ``mfu_percentage_calflops_mean`` is against calflops' count. Read as ``mfu_pct`` when the study's column is absent.
MFU_COLUMN_ALIASES: dict[str, str] = {"mfu_percentage_hardware_flops_mean": "mfu_percentage_calflops_mean"}
CANONICAL_COLUMNS: tuple[str, ...] = ("gpu", *CANONICAL_FROM_SOURCE)
_STRING_COLS = {"model_name", "dtype"}
_INT_COLS = {"batch_size", "context_window", "warmup_iterations", "samples_per_config"}
# Columns where an empty cell is allowed (the row is dropped and reported, or carried as NaN).
_NULLABLE = {"mfu_percentage_calflops_mean", "power_draw_watts_mean", "gpu_utilization_mean"}
# A mean power over ≥ 50 one-second windows cannot exceed the board's power limit (TDP by default, enforced by
# the driver's power capping) by much; 1.5× TDP leaves room for transients and raised limits. Unknown GPUs are
# held to 1.5× the largest TDP in devices.py.
POWER_TDP_FACTOR = 1.5
# The padded prompt is always 11 tokens in the study (SOURCE.md); used when sequence_length is absent.
STUDY_SEQUENCE_LENGTH = 11


@dataclass
class LoadedAggregates:
    """A validated aggregate table plus everything that was done to it on the way in."""

    df: pd.DataFrame
    idle_power_w: dict[str, float] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    dropped: pd.DataFrame | None = None  # rows removed for missing power/MFU (canonical columns + reason)
    sources: list[str] = field(default_factory=list)


def bundled_data_dir() -> Path:
    """The folder holding the vendored CSVs (inside the installed package)."""
    return Path(str(resources.files("flopwatch.powermodel") / "data"))


def bundled_path(gpu: str) -> Path:
    """Path of the vendored CSV of one GPU (display name, file tag or device key)."""
    g = canonical_gpu(gpu)
    return bundled_data_dir() / f"mfu_aggregated_per_config_{GPU_FILE_TAGS[g]}.csv"


def _gpu_from_filename(path: Path) -> str | None:
    stem = path.stem
    prefix = "mfu_aggregated_per_config_"
    if stem.startswith(prefix):
        try:
            return canonical_gpu(stem[len(prefix) :])
        except InputError:
            return stem[len(prefix) :]
    return None


def _header(data: bytes) -> list[str]:
    """The header row's names as the csv module reads them (pandas has no option to refuse duplicates)."""
    import csv

    lines = data.decode("utf-8-sig", errors="replace").splitlines()  # any line break, as pandas reads them
    try:
        return next(csv.reader(lines[:1]), [])
    except csv.Error:  # a header the csv module cannot split: pandas names the problem below
        return []


def read_aggregate_csv(
    path: str | Path, *, gpu: str | None = None, keep_nan_mfu: bool = False
) -> LoadedAggregates:
    """Read one aggregate CSV (study schema) into canonical columns, validating every cell used.

    ``gpu`` names the device when the file has no ``gpu`` column and its name does not follow the study's
    ``mfu_aggregated_per_config_<TAG>.csv`` pattern; otherwise the file stem is used.
    """
    import io as _stdio

    import pandas as pd

    p = Path(path)
    fname = str(p)
    # regular file, size-capped: a FIFO, a device (/dev/zero) or a directory is refused before reading
    data = read_bytes(p, kind="CSV file")
    try:
        # C-parser type inference; only a column that does not come out numeric is inspected cell by cell.
        # index_col=False: a data row with more fields than the header (a trailing comma) would otherwise turn
        # the first columns into an index and shift every column of every row by one, silently.
        with warnings.catch_warnings():
            warnings.simplefilter("error", pd.errors.ParserWarning)
            raw = pd.read_csv(_stdio.BytesIO(data), skipinitialspace=True, low_memory=False, index_col=False)
    except pd.errors.ParserWarning:
        raise InputError(
            "a data row has more fields than the header (a trailing comma?); refusing to guess which are the data",
            file=fname,
        ) from None
    except (
        pd.errors.ParserError,
        pd.errors.EmptyDataError,
        UnicodeDecodeError,
        ValueError,
        OverflowError,
        MemoryError,
    ) as e:
        msg = str(e).strip().splitlines()[0][:160] if str(e).strip() else ""
        raise InputError(f"not a readable CSV ({e.__class__.__name__}: {msg})", file=fname) from None
    header = [str(c).strip() for c in _header(data)]
    seen: set[str] = set()  # a set, not a list scan: a 100 000-column header cost 42 s quadratically
    dup = None
    for c in header:
        if c in seen:
            dup = c
            break
        seen.add(c)
    if dup is not None:  # pandas renames the second copy "NAME.1" and reads the first: which one is meant?
        raise InputError("column appears more than once in the header", file=fname, field=dup)
    raw.columns = [str(c).strip() for c in raw.columns]
    for alias, col in MFU_COLUMN_ALIASES.items():  # flopwatch bench files name their MFU by its convention
        if col not in raw.columns and alias in raw.columns:
            raw = raw.rename(columns={alias: col})
    required = list(CANONICAL_FROM_SOURCE.values())
    missing = [c for c in required if c not in raw.columns]
    if missing:
        raise InputError(
            f"missing required column(s) {', '.join(missing)}; expected the MASCOTS aggregate schema "
            "(mfu_aggregated_per_config_*.csv)",
            file=fname,
            field=missing[0],
        )
    if raw.empty:
        raise InputError("no data rows", file=fname)
    if gpu is not None:
        gpu_name = _canonical_or_free(gpu)
    elif (
        "gpu" in raw.columns and raw["gpu"].notna().all() and raw["gpu"].astype(str).str.strip().ne("").all()
    ):
        gpu_name = None  # per-row names
    else:
        gpu_name = _gpu_from_filename(p) or p.stem

    # CSV line of each data row (header is line 1) so errors point at what an editor shows.
    line = np.arange(len(raw)) + 2
    out = pd.DataFrame(index=raw.index)
    if gpu_name is None:
        gcol = raw["gpu"].astype(str)
        names = {v: _canonical_or_free(v) for v in gcol.unique()}
        out["gpu"] = gcol.map(names)
    else:
        out["gpu"] = gpu_name
    for canon, src in {**CANONICAL_FROM_SOURCE, **OPTIONAL_FROM_SOURCE}.items():
        if src not in raw.columns:
            continue
        col = raw[src]
        if src in _STRING_COLS:
            out[canon] = col.astype("string").fillna("").str.strip()
            continue
        if pd.api.types.is_numeric_dtype(col) and not pd.api.types.is_bool_dtype(col):
            out[canon] = col.astype(float)
            continue
        text = col.astype("string").fillna("").str.strip()
        num = pd.to_numeric(text, errors="coerce")
        bad = num.isna() & text.ne("") & ~text.str.lower().isin(["nan", "none", "null"])
        _refuse_first(bad, line, fname, src, lambda i: f"not a number: {col.iloc[i]!r}")  # noqa: B023
        out[canon] = num.astype(float)

    # Idle baseline rows: excluded from every fit, reported, and used as idle power.
    is_base = out["model"].str.lower().eq("baseline")
    result = LoadedAggregates(df=out, sources=[fname])
    for g, rows in out[is_base].groupby("gpu"):
        pw = rows["power_w"].dropna()
        if len(pw):
            result.idle_power_w[str(g)] = float(pw.mean())
            result.notes.append(
                f"{p.name}: idle 'baseline' row (line {', '.join(str(line[i]) for i in rows.index)}) excluded "
                f"from fits; idle power {pw.mean():.2f} W"
            )
        else:
            result.notes.append(f"{p.name}: idle 'baseline' row has no power reading; excluded")
    work = out[~is_base].copy()
    work_lines = line[~is_base.to_numpy()]

    # Required non-null, well-formed values in the run rows.
    for canon, src in CANONICAL_FROM_SOURCE.items():
        if src in _STRING_COLS:
            empty = work[canon].eq("")
        elif src in _NULLABLE:
            continue
        else:
            empty = work[canon].isna()
        _refuse_first(empty, work_lines, fname, src, lambda i: "empty value")
    # Normalise each distinct dtype once (a per-row loop is slow on arrow-backed strings).
    canon_dtype: dict[str, str] = {}
    for v in work["dtype"].unique():
        try:
            canon_dtype[v] = normalize_dtype(v)
        except InputError:
            i = int(np.flatnonzero((work["dtype"] == v).to_numpy())[0])
            raise InputError(
                f"unknown dtype {v!r} (expected float32/float16/bfloat16)",
                file=fname,
                record=f"line {work_lines[i]}",
                field="dtype",
            ) from None
    work["dtype"] = work["dtype"].map(canon_dtype).astype(object)
    for canon in ("batch_size", "context_window", "warmup", "samples"):
        src = CANONICAL_FROM_SOURCE[canon]
        vals = work[canon].to_numpy()
        bad = (
            ~np.isfinite(vals)
            | (vals != np.round(vals))
            | (vals < (1 if canon in ("batch_size", "samples") else 0))
            | (vals > 2**53)  # beyond exact float integers: a corrupted cell, not a batch size
        )
        sign = "positive" if canon in ("batch_size", "samples") else "non-negative"
        _refuse_first(
            bad, work_lines, fname, src,
            lambda i: f"expected a {sign} integer, got {float(vals[i])!r}",  # noqa: B023
        )  # fmt: skip
        work[canon] = work[canon].astype(np.int64)
    # No infinities anywhere (an empty cell is NaN and handled below; "inf" is a broken writer).
    for canon, src in {**CANONICAL_FROM_SOURCE, **OPTIONAL_FROM_SOURCE}.items():
        if canon not in work.columns or src in _STRING_COLS:
            continue
        vals = work[canon].to_numpy(dtype=float)
        _refuse_first(
            np.isinf(vals), work_lines, fname, src,
            lambda i: f"is infinite ({float(vals[i])!r}); use an empty cell for a missing value",  # noqa: B023
        )  # fmt: skip
    # Percentages: MFU and utilisation lie in [0, 100]. An MFU above 100 % means the peak it was normalised
    # by is wrong (the study's own sanitiser emptied such values, see the MI210 rows).
    for canon in ("mfu_pct", "gpu_util_pct"):
        vals = work[canon].to_numpy(dtype=float)
        bad = (vals < 0) | (vals > 100)
        _refuse_first(
            bad, work_lines, fname, CANONICAL_FROM_SOURCE[canon],
            lambda i: f"must be a percentage in [0, 100], got {float(vals[i])!r}"  # noqa: B023
            + (
                " (MFU > 100 %: check the peak FLOP/s it was normalised by)"
                if vals[i] > 100 and canon == "mfu_pct"  # noqa: B023
                else ""
            ),
        )  # fmt: skip
    for canon in ("power_w", "tokens_per_s", "flops_per_step", "cooldown"):
        vals = work[canon].to_numpy()
        bad = vals < 0 if canon == "cooldown" else vals <= 0
        sign = "non-negative" if canon == "cooldown" else "positive"
        _refuse_first(
            bad & ~np.isnan(vals), work_lines, fname, CANONICAL_FROM_SOURCE[canon],
            lambda i: f"must be {sign}, got {float(vals[i])!r}",  # noqa: B023
        )  # fmt: skip

    _check_power_vs_tdp(work, work_lines, fname)
    base = out[is_base]
    if len(base):
        bp = base["power_w"].to_numpy(dtype=float)
        bad = ~np.isnan(bp) & ((bp < 0) | np.isinf(bp))
        _refuse_first(
            bad, line[is_base.to_numpy()], fname, CANONICAL_FROM_SOURCE["power_w"],
            lambda i: f"idle baseline power must be a finite number >= 0, got {float(bp[i])!r}",
        )  # fmt: skip

    # Derived: FLOPs per token (tokens per step = batch × sequence length) and step time.
    seq = work["sequence_length"] if "sequence_length" in work else STUDY_SEQUENCE_LENGTH
    work["tokens_per_step"] = work["batch_size"] * seq
    work["flops_per_token"] = work["flops_per_step"] / work["tokens_per_step"]
    work["step_time_s"] = work["tokens_per_step"] / work["tokens_per_s"]
    work["source_file"] = p.name
    work["source_line"] = work_lines

    no_power = work["power_w"].isna()
    no_mfu = work["mfu_pct"].isna()
    drop = no_power | (no_mfu & (not keep_nan_mfu))
    if drop.any():
        d = work[drop].copy()
        d["reason"] = np.where(no_power[drop], "empty power", "empty MFU")
        result.dropped = d
        for (_g, reason), rows in d.groupby(["gpu", "reason"]):
            desc = ", ".join(
                sorted(
                    {
                        f"{m} {dt} b{b}"
                        for m, dt, b in zip(rows["model"], rows["dtype"], rows["batch_size"], strict=False)
                    }
                )
            )
            result.notes.append(f"{p.name}: {len(rows)} row(s) with {reason} dropped ({desc})")
    if keep_nan_mfu and no_mfu.any():
        result.notes.append(f"{p.name}: {int(no_mfu.sum())} row(s) with empty MFU kept (power only)")
    missing_opt = [
        s for s in ("io_latency_enabled", "io_latency_profile", "io_latency_pattern") if s not in raw.columns
    ]
    if missing_opt:
        result.notes.append(f"{p.name}: no {', '.join(missing_opt)} column(s) (unused; tolerated)")
    result.df = work[~drop].reset_index(drop=True)
    return result


def _refuse_first(bad: Any, lines: np.ndarray, fname: str, field: str, message: Callable[[int], str]) -> None:
    """InputError (file, CSV line, column) at the first row where the mask ``bad`` holds; none when none does.
    ``message(i)`` words the problem of row ``i`` (called only then)."""
    mask = np.asarray(bad, dtype=bool)
    if mask.any():
        i = int(np.flatnonzero(mask)[0])
        raise InputError(message(i), file=fname, record=f"line {lines[i]}", field=field)


def _tdp_bound_w(gpu: str) -> float:
    spec = resolve(gpu)
    return POWER_TDP_FACTOR * (spec.tdp_w if spec is not None else max(d.tdp_w for d in DEVICES.values()))


def _check_power_vs_tdp(work: pd.DataFrame, lines: np.ndarray, fname: str) -> None:
    """Refuse a mean power far above the GPU's TDP (a glitching meter or a unit mix-up, e.g. mW)."""
    bounds = {g: _tdp_bound_w(str(g)) for g in work["gpu"].unique()}
    limit = work["gpu"].map(bounds).to_numpy(dtype=float)
    pw = work["power_w"].to_numpy(dtype=float)
    bad = ~np.isnan(pw) & (pw > limit)
    _refuse_first(
        bad, lines, fname, CANONICAL_FROM_SOURCE["power_w"],
        lambda i: f"{pw[i]:g} W is implausible for {work['gpu'].iloc[i]} (above {POWER_TDP_FACTOR:g}× its "
        f"TDP, {limit[i]:g} W; units?)",
    )  # fmt: skip


def _canonical_or_free(name: str) -> str:
    try:
        return canonical_gpu(name)
    except InputError:
        return str(name).strip()


def load_aggregates(
    paths: Iterable[str | Path] | None = None,
    *,
    gpu: str | Sequence[str] | None = None,
    keep_nan_mfu: bool = False,
) -> LoadedAggregates:
    """Load several aggregate CSVs (default: the six vendored ones) into one :class:`LoadedAggregates`.

    ``gpu`` filters the bundled files by GPU (name or list of names); with explicit ``paths`` it names the GPU
    of files that carry no ``gpu`` column and no study file name.
    """
    import pandas as pd

    if paths is None:
        gpus = MASCOTS_GPUS if gpu is None else [gpu] if isinstance(gpu, str) else list(gpu)
        files: list[tuple[Path, str | None]] = [(bundled_path(g), canonical_gpu(g)) for g in gpus]
    else:
        label = gpu if isinstance(gpu, str) or gpu is None else None
        files = [(Path(p), label) for p in paths]
        if not files:
            raise InputError("no data files given")
    parts = [read_aggregate_csv(p, gpu=g, keep_nan_mfu=keep_nan_mfu) for p, g in files]
    merged = LoadedAggregates(df=pd.concat([x.df for x in parts], ignore_index=True))
    dropped = [x.dropped for x in parts if x.dropped is not None]
    merged.dropped = pd.concat(dropped, ignore_index=True) if dropped else None
    for x in parts:
        merged.idle_power_w.update(x.idle_power_w)
        merged.notes.extend(x.notes)
        merged.sources.extend(x.sources)
    # Keep the paper's GPU order where the names are the study's.
    order = {g: i for i, g in enumerate(MASCOTS_GPUS)}
    merged.df = merged.df.sort_values(
        "gpu", key=lambda s: s.map(lambda g: order.get(g, len(order))), kind="stable"
    ).reset_index(drop=True)
    merged.df.attrs["idle_power_w"] = dict(merged.idle_power_w)
    merged.df.attrs["notes"] = list(merged.notes)
    return merged


def load_mascots(gpu: str | None = None, *, keep_nan_mfu: bool = False) -> pd.DataFrame:
    """The vendored MASCOTS aggregates as one DataFrame with canonical columns (contract).

    Columns: gpu (A100, L40, L4, Quadro RTX 5000, RTX 4070 Ti, MI210), model, dtype (fp32/fp16/bf16),
    batch_size, context_window, warmup, cooldown, mfu_pct, power_w, gpu_util_pct, tokens_per_s,
    flops_per_step, samples — plus flops_per_token, tokens_per_step, step_time_s and the optional metrics.
    The baseline rows are excluded (their power is in ``df.attrs["idle_power_w"]``); rows with empty MFU are
    dropped unless ``keep_nan_mfu``; ``df.attrs["notes"]`` lists everything that was done.
    """
    return load_aggregates(None, gpu=gpu, keep_nan_mfu=keep_nan_mfu).df
