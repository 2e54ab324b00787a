"""``flopwatch run``: the whole study end to end (real GPU or the simulated accelerator)."""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import typer

from flopwatch.cli import options
from flopwatch.cli._output import console, echo_json, simulated_banner


def run_cmd(
    out: Path = typer.Option(..., "-o", "--output", help="Output directory (must be empty unless --force)."),
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
    seed: options.Seed = 0,
    force: bool = typer.Option(False, "--force", help="Overwrite flopwatch's files in a non-empty DIR."),
    rate_hz: options.Rate = 10.0,
    splits: options.Splits = 200,
    as_json: options.Json = False,
    no_progress: bool = typer.Option(False, "--no-progress", help="Hide the progress bar."),
) -> None:
    """Run the study end to end. Idle baseline, sweep, detection, calibration, held-out evaluation, report."""
    from flopwatch.pipeline import RunOptions, run_pipeline

    err = console(stderr=True)
    if not force and _only_an_interrupted_run(out):
        (out / INCOMPLETE_FILE).unlink()
        force = True  # removes exactly flopwatch's own files, as --force does
        if not as_json:
            err.print(f"note: {out} holds only the files of an interrupted run: reusing it")
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
    try:
        with _interrupt_never_swallowed():
            summary = run_pipeline(opts, log=(None if as_json else err.print))
    except KeyboardInterrupt:
        _mark_interrupted(out)
        raise  # the CLI's group prints "flopwatch: interrupted" and exits 130
    (out / INCOMPLETE_FILE).unlink(missing_ok=True)  # a --force run over an interrupted one is complete now
    if as_json:
        echo_json(summary)
        return
    print_summary(summary, out)


@contextlib.contextmanager
def _interrupt_never_swallowed() -> Iterator[None]:
    """A Ctrl-C that lands inside a callback Python cannot raise from (matplotlib's weakref callbacks while
    figures are drawn) is printed as "Exception ignored" and lost, and the run went on. Raise it again, at once,
    where it can stop the run, and print no traceback."""
    import signal
    import threading

    default = sys.unraisablehook
    main = threading.main_thread().ident

    def again() -> None:  # to the main thread, so a sleep or a blocking read there is cut short too
        if main is not None and hasattr(signal, "pthread_kill"):
            signal.pthread_kill(main, signal.SIGINT)
        else:
            signal.raise_signal(signal.SIGINT)

    def hook(u: Any) -> None:
        if u.exc_type is not None and issubclass(u.exc_type, KeyboardInterrupt):
            # from another thread, just after this hook returns (raised here, it would be ignored again)
            threading.Timer(0.01, again).start()
            return
        default(u)

    sys.unraisablehook = hook
    try:
        yield
    finally:
        sys.unraisablehook = default


#: Written into DIR when a run is interrupted: the files beside it are partial. A DIR holding only this and
#: flopwatch's own files is reused by the next ``flopwatch run`` without ``--force``.
INCOMPLETE_FILE = "INCOMPLETE"


def _mark_interrupted(out: Path) -> None:
    from datetime import datetime, timezone

    if not out.is_dir():
        return
    when = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")
    (out / INCOMPLETE_FILE).write_text(
        f"flopwatch run was interrupted at {when}: the files in this directory are partial.\n"
        f"Run `flopwatch run -o {out}` again: it reuses this directory (only flopwatch's own files are here).\n",
        encoding="utf-8",
    )


def _only_an_interrupted_run(out: Path) -> bool:
    """DIR holds the INCOMPLETE marker and nothing but flopwatch's own outputs (files and figures/*.png)."""
    from flopwatch.pipeline.layout import FIGURES_DIR, OUTPUT_FILES

    if not (out / INCOMPLETE_FILE).is_file():
        return False
    own = {INCOMPLETE_FILE, *OUTPUT_FILES}
    for p in out.iterdir():
        if p.name == FIGURES_DIR and p.is_dir():
            if any(f.suffix != ".png" or not f.is_file() for f in p.iterdir()):
                return False
        elif p.name.removesuffix(".tmp") not in own or not p.is_file():  # .tmp: an atomic write cut short
            return False
    return True


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
        dm = f"{dm}, as {summary['component']}: no DRAM counter"
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
    head = summary.get("headline") or {}
    brief = head.get("brief")
    if brief:  # summary.json's headline in three lines; the report's verdict box has the whole paragraph
        b = Table(title=None, show_header=False, box=None, padding=(0, 1, 0, 2))
        b.add_column(no_wrap=True, style="bold")
        b.add_column()
        for k, v in brief.items():
            b.add_row(k, v)
        con.print(f"verdict{' (simulated)' if sim else ''}:")
        con.print(b)
    elif head.get("verdict"):
        con.print(f"verdict{' (simulated)' if sim else ''}: {head['verdict']}")
    con.print(f"report: {out / 'report.html'}")


def register(app: typer.Typer) -> None:
    """Add ``run`` to ``app``."""
    app.command("run")(run_cmd)
