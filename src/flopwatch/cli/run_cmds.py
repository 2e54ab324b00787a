"""``flopwatch run``: the whole study end to end (real GPU or the simulated accelerator)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import typer

from flopwatch.cli import options
from flopwatch.cli._output import console, echo_json, simulated_banner


def run_cmd(
    out: Path = typer.Option(..., "-o", "--out", help="Output directory (must be empty unless --force)."),
    device: str = typer.Option(
        "auto", "--device", help="auto | cuda[:N] | sim:NAME (e.g. sim:a100, sim:h100)."
    ),
    sweep: str | None = typer.Option(
        None, "--sweep", help="Sweep name: frontier (default on data-center GPUs), jetson-fp32, datacenter, …"
    ),
    budget_s: float | None = typer.Option(
        None,
        "--budget-s",
        help="Fit the sweep into about this many seconds.",
        callback=options.duration_s(),
    ),
    quick: bool = typer.Option(False, "--quick", help="A short sweep (under a minute on the simulator)."),
    seed: int = typer.Option(
        0,
        "--seed",
        help="Seed of every random choice (splits, simulator noise).",
        callback=options.count(ge=0, le=2**63 - 1),
    ),
    force: bool = typer.Option(False, "--force", help="Overwrite flopwatch's files in a non-empty DIR."),
    rate_hz: float = typer.Option(
        10.0,
        "--rate",
        help="Telemetry sampling rate (Hz).",
        callback=options.rate_hz(),
    ),
    splits: int | None = typer.Option(
        None,
        "--splits",
        help="Number of random train/test splits (default 200).",
        callback=options.count(ge=1, le=1_000_000),
    ),
    as_json: bool = typer.Option(False, "--json", help="Print summary.json to stdout (no progress bar)."),
    no_progress: bool = typer.Option(False, "--no-progress", help="Hide the progress bar."),
) -> None:
    """Run the study end to end: idle baseline, sweep, detection, calibration, held-out evaluation, report."""
    from flopwatch.pipeline import RunOptions, run_pipeline

    err = console(stderr=True)
    opts = RunOptions(
        outdir=out,
        device=device,
        sweep=sweep,
        budget_s=budget_s,
        quick=quick,
        seed=seed,
        force=force,
        rate_hz=rate_hz,
        n_splits=splits,
        progress=not (as_json or no_progress) and sys.stderr.isatty(),
    )
    summary = run_pipeline(opts, log=(None if as_json else err.print))
    if as_json:
        echo_json(summary)
        return
    print_summary(summary, out)


def print_summary(summary: dict[str, Any], out: Path) -> None:
    """The run's headline table on stdout."""
    from rich.table import Table

    con = console()
    sim = summary["simulated"]
    if sim:
        simulated_banner(con, "every number below comes from the simulated accelerator")
    t = Table(title=f"flopwatch run on {summary['device']}" + (" (simulated)" if sim else ""))
    t.add_column("quantity")
    t.add_column("value", justify="right")
    dm = summary["default_model"]
    if summary.get("component") not in (None, dm):  # "default" without DRAM traffic → "default-p"
        dm = f"{dm} → {summary['component']}"
    rows = [
        ("workloads run / frontier", f"{summary['n_workloads']} / {summary['n_frontier']}"),
        ("idle power", f"{summary['idle_power_w']:.2f} W"),
        (f"held-out MAE ({dm})", f"{summary['heldout_mae_pct']:.2f} %"),
        ("splits with a workload > 10 % off", f"{100 * summary['frac_splits_any_over_10pct']:.1f} %"),
    ]
    from flopwatch.report.headline import study_models_mae_pct

    for m, v in study_models_mae_pct(summary).items():  # refitted here, not the published value
        rows.append((f"held-out MAE ({m}, measured here)", f"{v:.2f} %"))
    base = summary.get("constant_jpf_baseline")
    if base:
        rows.append(("no-model yardstick (median J/FLOP)", f"{base['mae_pct']:.2f} %"))
    if summary.get("skipped_models"):
        rows.append(("models not evaluated (see report)", ", ".join(summary["skipped_models"])))
    rows.append(("join mismatches", str(len(summary.get("join_mismatches", [])))))
    rows.append(("wall time", f"{summary['wall_time_s']:.1f} s"))
    for k, v in rows:
        t.add_row(k, v)
    con.print(t)
    con.print(f"report: {out / 'report.html'}")


def register(app: typer.Typer) -> None:
    """Add ``run`` to ``app``."""
    app.command("run")(run_cmd)
