"""``flopwatch fleet estimate`` (a cluster's jobs from Prometheus) and ``flopwatch sim openmetrics`` (a simulated
fleet's dcgm-exporter history as OpenMetrics text). Logic lives in :mod:`flopwatch.fleet` and
:mod:`flopwatch.sim.dcgm`; this module parses options and prints."""

from __future__ import annotations

import math
import sys
from pathlib import Path
from typing import Any

import typer

from flopwatch.cli import options
from flopwatch.cli._output import console, echo_json, fmt_flops, literal, new_app, styled


def _threshold(v: str | None) -> float | None:
    from flopwatch.errors import InputError

    if v is None:
        return None
    try:
        x = float(v)
    except ValueError:
        raise InputError(f"not a number of FLOPs: {v!r} (e.g. 1e25)", field="threshold") from None
    if not (
        math.isfinite(x) and x > 0
    ):  # inf or 1e400 would clear every group "below" (as `estimate` refuses)
        raise InputError(f"must be a positive finite FLOP count, got {v!r}", field="threshold")
    return x


fleet_app = new_app(
    "Fleet scale: estimate every job of a GPU cluster from the dcgm-exporter history in Prometheus."
)


@fleet_app.command("estimate")
def fleet_estimate(
    prometheus: str = typer.Option(..., "--prometheus", help="Prometheus base URL, e.g. http://prom:9090."),
    start: str = typer.Option(..., "--start", help="Start: RFC 3339 (2026-11-30T00:00:00Z) or Unix seconds."),
    end: str = typer.Option(..., "--end", help="End: RFC 3339 or Unix seconds."),
    by: str = typer.Option(
        "pod", "--by", help="Group by pod | namespace | job (hpc_job) | node | gpu | LABEL."
    ),
    selector: str = typer.Option(None, "--selector", help="Label matchers, e.g. '{namespace=\"research\"}'."),
    step: str = typer.Option("15s", "--step", help="Scrape interval of the dcgm-exporter job (resolution)."),
    window: str = typer.Option("1h", "--window", help="Prometheus-side aggregation window."),
    profile_path: Path = typer.Option(
        None, "--profile", help="Calibration profile (default: the device's built-in MFU→power model)."
    ),
    threshold: str = typer.Option(None, "--threshold", help="FLOP threshold for the verdict, e.g. 1e25."),
    dtype: str = typer.Option(
        None, "--dtype", help="Training dtype (default: from the profile, else inferred)."
    ),
    device: str = typer.Option(None, "--device", help="Device model when modelName is missing or unknown."),
    gpus_per_chunk: int = typer.Option(
        32,
        "--gpus-per-chunk",
        help="GPUs per query chunk (memory grows with it); recording rules read at least 128, span resolution "
        "at least 256 (their answers are smaller).",
        callback=options.count(ge=1),
    ),
    time_chunk: str = typer.Option("6h", "--time-chunk", help="Time per query chunk."),
    timeout_s: float = typer.Option(
        60.0,
        "--timeout",
        help="Deadline per query in seconds (connect, retries and the whole answer).",
        callback=options.positive(le=86400, unit="s"),
    ),
    run_timeout_s: float = typer.Option(
        None,
        "--run-timeout",
        help="Deadline for all queries of the run together, in seconds (default: none).",
        callback=options.positive(le=30 * 86400, unit="s"),
    ),
    retries: int = typer.Option(
        3,
        "--retries",
        help="Retries on connection errors, timeouts and 5xx.",
        callback=options.count(ge=0, le=100),
    ),
    rules: str = typer.Option(
        "auto",
        "--rules",
        help="Recording-rule series (flopwatch fleet rules): auto (when they match) | require | off (raw only).",
    ),
    resolution: str = typer.Option(
        "window",
        "--resolution",
        help="window: per-window aggregates folded here (exact edges) | span: per-series totals from Prometheus "
        "(2–3 × faster; edges and clock weighting approximated, docs/fleet.md).",
    ),
    as_json: bool = typer.Option(False, "--json", help="Print JSON to stdout."),
    no_progress: bool = typer.Option(False, "--no-progress", help="Hide the progress bar."),
) -> None:
    """Per-job FLOP estimates (energy and pipe activity), bounds and verdicts for a whole fleet."""
    from flopwatch.fleet.estimate import estimate_fleet
    from flopwatch.fleet.reader import ReadPlan
    from flopwatch.telemetry.prom_client import PrometheusClient
    from flopwatch.telemetry.timespec import parse_duration, parse_time, selector_matchers

    plan = ReadPlan(
        start=parse_time(start, field="start"),
        end=parse_time(end, field="end"),
        step_s=parse_duration(step, field="step"),
        window_s=parse_duration(window, field="window"),
        time_chunk_s=parse_duration(time_chunk, field="time-chunk"),
        gpus_per_chunk=gpus_per_chunk,
        matchers=selector_matchers(selector),
        rules=rules,
        resolution=resolution,
    ).check()
    thr = _threshold(threshold)
    prof = None
    if profile_path is not None:
        from flopwatch.estimate import Profile

        prof = Profile.load(profile_path)
    if dtype is not None:
        from flopwatch.devices import normalize_dtype

        dtype = normalize_dtype(dtype)
    client = PrometheusClient(prometheus, timeout_s=timeout_s, run_timeout_s=run_timeout_s, retries=retries)
    show = not (as_json or no_progress) and sys.stderr.isatty()
    if show:
        from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

        with Progress(
            TextColumn("querying Prometheus"),
            BarColumn(),
            TextColumn("{task.completed}/{task.total}"),
            TimeElapsedColumn(),
            transient=True,
            console=console(stderr=True),
        ) as bar:
            task = bar.add_task("q", total=None)
            res = estimate_fleet(
                client,
                plan,
                by=by,
                profile=prof,
                threshold=thr,
                dtype=dtype,
                device=device,
                progress=lambda d, n: bar.update(task, completed=d, total=n),
            )
    else:
        res = estimate_fleet(client, plan, by=by, profile=prof, threshold=thr, dtype=dtype, device=device)
    if as_json:
        echo_json(res.to_dict())
        return
    _print_table(res.to_dict())


@fleet_app.command("rules")
def fleet_rules(
    output: Path = typer.Option(None, "-o", "--output", help="Write the rules file here (default: stdout)."),
    window: str = typer.Option("1h", "--window", help="Aggregation window = rule group interval."),
    prometheus_major: int = typer.Option(
        3, "--prometheus-major", help="Prometheus major version (2: closed ranges, 3: left-open)."
    ),
    selector: str = typer.Option(
        None, "--selector", help="Label matchers limiting the rules, e.g. '{job=\"dcgm\"}'."
    ),
    force: bool = typer.Option(False, "--force", help="Overwrite an existing rules file."),
) -> None:
    """Print or write the recording rules that pre-aggregate dcgm-exporter series for `fleet estimate`."""
    from flopwatch.fleet.rules import rules_yaml
    from flopwatch.io import atomic_write, check_output
    from flopwatch.telemetry.timespec import parse_duration, selector_matchers

    # before any work: never a ledger, key, directory or FIFO; never over a file silently
    if output is not None:
        check_output(output, overwrite=force, what="rules file")
    text = rules_yaml(parse_duration(window, field="window"), prometheus_major, selector_matchers(selector))
    if output is None:
        sys.stdout.write(text)
        return
    atomic_write(output, text)


@fleet_app.command("metrics")
def fleet_metrics(as_json: bool = typer.Option(False, "--json", help="Print JSON to stdout.")) -> None:
    """The dcgm-exporter metrics flopwatch reads and what each contributes."""
    from flopwatch.telemetry.dcgm_metrics import METRICS

    rows = [{"metric": m.name, "unit": m.unit, "kind": m.kind, "role": m.role} for m in METRICS.values()]
    if as_json:
        echo_json(rows)
        return
    from rich.table import Table

    t = Table(title="dcgm-exporter metrics used by flopwatch fleet")
    for c in ("metric", "unit", "role"):
        t.add_column(c)
    for r in rows:
        t.add_row(r["metric"], r["unit"], r["role"])
    console().print(t)


def register(app: typer.Typer) -> None:
    """Add the ``fleet`` group to ``app``."""
    app.add_typer(fleet_app, name="fleet")


def _print_table(d: dict[str, Any]) -> None:
    from rich.console import Console
    from rich.table import Table

    con = Console()
    if d.get("simulated"):
        con.print(
            "[bold white on red] SIMULATED [/] this Prometheus holds flopwatch's simulated fleet history"
        )
    t = Table(title=f"flopwatch fleet estimate — {d['prometheus']} by {d['by']} ({d['start']} → {d['end']})")
    for c, j in (
        ("group", "left"),
        ("GPUs", "right"),
        ("GPU-h", "right"),
        ("energy MJ (net)", "right"),
        ("energy est. FLOPs [bounds]", "right"),
        ("pipe est. FLOPs", "right"),
        ("verdict", "left"),
        ("coverage", "right"),
        ("missing / flags", "left"),
    ):
        t.add_column(c, justify=j)  # type: ignore[arg-type]
    for g in d["groups"]:
        flags = [*g["missing"], *g["flags"]]
        t.add_row(
            literal(g["key"]),
            str(g["gpus"]),
            f"{g['gpu_hours']:.1f}",
            f"{g['energy_j'] / 1e6:.2f} ({g['net_energy_j'] / 1e6:.2f})",
            f"{fmt_flops(g['estimate_flops'])} [{fmt_flops(g['lower_flops'])}, {fmt_flops(g['upper_flops'])}]",
            fmt_flops(g["pipe_estimate_flops"]),
            styled(
                str(g["verdict"] or "—") + (" ⚠" if g["disagree"] else ""),
                "bold red" if g["disagree"] else "",
            ),
            f"{g['coverage']:.0%}",
            literal("; ".join(flags)),
        )
    con.print(t)
    con.print(literal(f"energy model: {d['energy_model']}"))
    if d["metrics_missing"]:
        con.print(f"metrics not found (estimates degrade without them): {', '.join(d['metrics_missing'])}")
    if d["unattributed_series"]:
        con.print(
            f"{d['unattributed_series']} series had no {'/'.join(d['by_labels'])} label "
            f"({d['unattributed_energy_j'] / 1e6:.2f} MJ, unallocated GPUs): not in any group"
        )
    con.print(
        f"{d['gpu_hours']:.0f} GPU-hours in {d['elapsed_s']:.1f} s ({d['queries']} queries, "
        f"{d['bytes_received'] / 1e6:.1f} MB received; {d['read_from']}, {d.get('resolution', 'window')} resolution"
        + (
            f"; {d['regrid_gpus']} GPUs re-read per window: counter reset or gap"
            if d.get("regrid_gpus")
            else ""
        )
        + (f"; pipes from {d['pipes_from']}" if d.get("pipes_from") else "")
        + (f"; counter energy from the {d['counter_from']}" if d.get("counter_from") == "rise rule" else "")
        + ")"
    )
    for key in ("rules_note", "job_rules_note"):
        if d.get(key):
            con.print(literal(f"recording rules: {d[key]}"))


def sim_openmetrics(
    out: Path = typer.Option(..., "-o", "--out", help="OpenMetrics file to write."),
    gpus: int = typer.Option(
        16,
        "--gpus",
        help="GPUs in the fleet.",
        callback=options.count(ge=1),
    ),
    hours: float = typer.Option(
        6.0,
        "--hours",
        help="Hours of history.",
        callback=options.positive(unit="h"),
    ),
    schedule: str = typer.Option(
        "random",
        "--schedule",
        help="'random' (seeded whole-node jobs) or a JSON/TOML job list (docs/fleet.md).",
    ),
    device: str = typer.Option("h100", "--device", help="Simulated GPU model (a100, h100, h200, l40, l4)."),
    interval: str = typer.Option("15s", "--interval", help="Scrape interval."),
    gpus_per_node: int = typer.Option(
        8,
        "--gpus-per-node",
        help="GPUs per node (one pod per node and job).",
        callback=options.count(ge=1),
    ),
    label_style: str = typer.Option("pod", "--label-style", help="pod | exported | hpc"),
    omit: list[str] = typer.Option(
        [], "--omit", help="Leave out a metric (repeatable), e.g. a consumer GPU's."
    ),
    resets: int = typer.Option(
        0,
        "--resets",
        help="Energy-counter resets (driver reloads) per GPU.",
        callback=options.count(ge=0),
    ),
    drop: float = typer.Option(
        0.0,
        "--drop",
        help="Share of scrapes missing at random.",
        callback=options.finite(ge=0.0, lt=1.0),
    ),
    start: str = typer.Option("1700000000", "--start", help="Wall time of t = 0 (RFC 3339 or Unix seconds)."),
    seed: int = typer.Option(
        0,
        "--seed",
        help="Seed of the schedule and of every simulated draw.",
        callback=options.count(ge=0, le=2**63 - 1),
    ),
    truth: Path = typer.Option(None, "--truth", help="Ground-truth JSON (default: OUT.truth.json)."),
    force: bool = typer.Option(False, "--force", help="Overwrite OUT."),
) -> None:
    """Write a simulated fleet's dcgm-exporter history (OpenMetrics, for `promtool tsdb create-blocks-from
    openmetrics`) and its ground truth. Everything in it is SIMULATED."""
    import json

    from flopwatch.io import atomic_write, check_disk_space, check_output
    from flopwatch.sim.dcgm import (
        SimulatedFleet,
        check_fleet_size,
        load_fleet_schedule,
        openmetrics_bytes,
        random_schedule,
    )
    from flopwatch.telemetry.timespec import parse_duration, parse_time

    truth_path = truth or out.with_name(out.name + ".truth.json")
    options.not_inputs(
        [("--out", out), ("--truth", truth_path)], [None if schedule == "random" else schedule]
    )
    sched_in = None if schedule == "random" else schedule
    check_output(
        out, inputs=(sched_in, truth_path), overwrite=force, what="OpenMetrics history", create_parents=True
    )
    check_output(
        truth_path,
        inputs=(sched_in,),
        overwrite=force,
        what="ground truth",
        option="--truth",
        create_parents=True,
    )
    step = parse_duration(interval, field="interval")
    check_fleet_size(gpus, hours, gpus_per_node, step)
    # Disk arithmetic before any work: every GPU × scrape × family is one line, written once as a piece and
    # once into OUT (a 100 000-GPU, 6 h fleet needs ~1.3 TB, and used to fill the disk from a hidden folder).
    check_disk_space(out, openmetrics_bytes(gpus, hours, step), what="simulated history (pieces and file)")
    jobs = (
        random_schedule(gpus, hours, gpus_per_node=gpus_per_node, seed=seed)
        if schedule == "random"
        else load_fleet_schedule(schedule)
    )
    fleet = SimulatedFleet(
        gpus,
        hours,
        jobs,
        device=device,
        gpus_per_node=gpus_per_node,
        interval_s=step,
        wall0=parse_time(start, field="start"),
        seed=seed,
        label_style=label_style,
        resets=resets,
        drop=drop,
        omit=omit,
    )
    # Both written atomically (missing folders created): never through a symlink, never half a file.
    tr = fleet.write_openmetrics(out)
    atomic_write(truth_path, json.dumps(tr.to_dict(), indent=2))
    console().print(
        f"wrote {out} (SIMULATED {fleet.spec.name} fleet: {gpus} GPUs × {hours:g} h, {len(tr.pods)} pods) "
        f"and {truth_path}; backfill: promtool tsdb create-blocks-from openmetrics {out} DIR"
    )


def register_sim(sim_app: typer.Typer) -> None:
    """Add ``openmetrics`` to the ``sim`` group."""
    sim_app.command("openmetrics")(sim_openmetrics)
