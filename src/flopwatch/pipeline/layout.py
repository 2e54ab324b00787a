"""The output directory of ``flopwatch run``: which files it holds, how it is prepared, how JSON is written."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from flopwatch.errors import InputError
from flopwatch.io import atomic_write, jsonable

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
    """Write ``obj`` as strict JSON (NaN/inf → null, :func:`flopwatch.io.jsonable`), atomically."""
    atomic_write(path, json.dumps(jsonable(obj), indent=2, allow_nan=False) + "\n")
