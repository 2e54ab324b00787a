"""The output directory of ``flopwatch run``: which files it holds, how it is prepared, how JSON is written."""

from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import Any

import numpy as np

from flopwatch.errors import InputError

TRACE_FILE = "trace.parquet"
RECORDS_FILE = "records.jsonl"
PROFILE_FILE = "profile.json"
SUMMARY_FILE = "summary.json"
EVALUATION_FILE = "evaluation.json"
REPORT_FILE = "report.html"
FIGURES_DIR = "figures"

#: Files ``flopwatch run`` writes (``--force`` removes exactly these, nothing else).
OUTPUT_FILES = (
    TRACE_FILE,
    TRACE_FILE + ".journal",
    RECORDS_FILE,
    PROFILE_FILE,
    SUMMARY_FILE,
    EVALUATION_FILE,
    REPORT_FILE,
)


def prepare_outdir(outdir: Path, force: bool) -> None:
    """Create DIR; refuse a non-empty one unless ``force`` (which removes only flopwatch's own outputs)."""
    if outdir.exists() and not outdir.is_dir():
        raise InputError("exists and is not a directory", file=str(outdir))
    if outdir.exists() and any(outdir.iterdir()):
        if not force:
            raise InputError(
                "output directory is not empty (use --force to overwrite flopwatch's files in it)",
                file=str(outdir),
            )
        for name in OUTPUT_FILES:
            p = outdir / name
            if p.is_file():
                p.unlink()
        figs = outdir / FIGURES_DIR
        if figs.is_dir():
            for png in figs.glob("*.png"):
                png.unlink()
    outdir.mkdir(parents=True, exist_ok=True)


def write_json(path: Path, obj: Any) -> None:
    """Write ``obj`` as strict JSON (NaN/inf → null), atomically (temp file, then rename)."""
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(_finite(obj), f, indent=2, default=_json_default, allow_nan=False)
        f.write("\n")
    os.replace(tmp, path)


def _finite(o: Any) -> Any:
    """NaN/inf → None, recursively (JSON has no NaN; a null says "undefined" honestly)."""
    if isinstance(o, dict):
        return {k: _finite(v) for k, v in o.items()}
    if isinstance(o, (list, tuple)):
        return [_finite(v) for v in o]
    if isinstance(o, np.ndarray):
        return _finite(o.tolist())
    if isinstance(o, (float, np.floating)):
        return float(o) if math.isfinite(o) else None
    if isinstance(o, np.integer):
        return int(o)
    return o


def _json_default(o: Any) -> Any:
    if isinstance(o, (np.floating, np.integer)):
        return o.item()
    if isinstance(o, np.ndarray):
        return o.tolist()
    if isinstance(o, Path):
        return str(o)
    raise TypeError(f"not JSON serialisable: {type(o).__name__}")
