"""``flopwatch fleet estimate`` (a cluster's jobs from Prometheus) and ``flopwatch sim openmetrics`` (a simulated
fleet's dcgm-exporter history as OpenMetrics text). Logic lives in :mod:`flopwatch.fleet` and
:mod:`flopwatch.sim.dcgm`; this module parses options and prints."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

import typer

from flopwatch.cli import options
from flopwatch.cli._output import console, counted, echo_json, fmt_flops, new_app, simulated_banner

fleet_app = new_app(
    "Fleet scale: estimate every job of a GPU cluster. From the dcgm-exporter history in Prometheus."
)


#: Fields the client names for the command line's own values (an unreachable --prometheus, an empty --selector).
_CLIENT_FIELDS = frozenset({"prometheus", "selector"})


@contextmanager
def _as_options(only: frozenset[str] | None = None) -> Iterator[None]:
    """An error about a value the command line gave names the option (``option '--step'``), not a field
    (``only``: just those fields, where other errors can pass through)."""
    from flopwatch.errors import InputError

    try:
        yield
    except InputError as e:
        if e.file is not None or e.record is not None or not e.field or e.field.startswith("-"):
            raise
        if only is not None and e.field not in only:
            raise
        raise type(e)(e.detail, field="--" + e.field.replace("_", "-")) from None


@fleet_app.command("estimate")
def fleet_estimate(
    prometheus: str = typer.Option(..., "--prometheus", help="Prometheus base URL, e.g. http://prom:9090."),
    start: str = typer.Option(..., "--start", help="Start: RFC 3339 (2026-11-30T00:00:00Z) or Unix seconds."),
    end: str = typer.Option(..., "--end", help="End: RFC 3339 or Unix seconds."),
    by: str = typer.Option(
        "pod",
        "--by",
        help="Group by pod | namespace | job (hpc_job) | node | gpu | LABEL, or cohort (GPUs whose busy intervals "
        "start and stop together, whatever their labels).",
    ),
    selector: str = typer.Option(None, "--selector", help="Label matchers, e.g. '{namespace=\"research\"}'."),
    step: str = typer.Option("15s", "--step", help="Scrape interval of the dcgm-exporter job."),
    window: str = typer.Option("1h", "--window", help="Prometheus-side aggregation window."),
    profile_path: Path = typer.Option(
        None, "--profile", help="Calibration profile (else the built-in model)."
    ),
    threshold: options.Threshold = None,
    confidence: options.OptConfidence = None,
    dtype: str = typer.Option(None, "--precision", help="Training dtype (default: inferred from the pipes)."),
    device: str = typer.Option(
        None,
        "--device",
        help="Device model where modelName is missing or unknown; never replaces a reported model by a less "
        "capable one.",
    ),
    job_info: str = typer.Option(
        None,
        "--job-info",
        help="Join jobs from an info series, e.g. 'slurm_job_info' (labels: --job-label, --job-gpu-labels).",
    ),
    job_label: str = typer.Option("job", "--job-label", help="Label of the info series naming the job."),
    job_gpu_labels: str = typer.Option(
        "Hostname,gpu",
        "--job-gpu-labels",
        help="Labels of the info series naming the GPU: UUID, or host,index.",
    ),
    job_map: Path = typer.Option(
        None,
        "--job-map",
        help="Join jobs from a file: CSV or JSON rows of job, gpu (UUID or host/gpuN), start, end.",
    ),
    gpus_per_chunk: int = typer.Option(
        None,
        "--gpus-per-chunk",
        help="GPUs per query (default: the most the engine limits allow).",
        callback=options.count(ge=1, le=100_000),
    ),
    time_chunk: str = typer.Option(
        None, "--time-chunk", help="Time per query (default: the longest allowed)."
    ),
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
        3, "--retries", help="Retries on connection errors and 5xx.", callback=options.count(ge=0, le=100)
    ),
    pipe_calibration: bool = typer.Option(
        True,
        "--pipe-calibration/--no-pipe-calibration",
        help="calibrated_* from pipe counters (docs/fleet.md)",
    ),
    verifier_operated: bool = typer.Option(
        False,
        "--verifier-operated",
        help="The verifier runs this Prometheus and its scrapes of the nodes' exporters. Without it no group "
        "is 'below': the operator can rewrite its own series consistently (docs/threat-model.md).",
    ),
    as_json: options.Json = False,
    no_progress: bool = typer.Option(False, "--no-progress", help="Hide the progress bar."),
) -> None:
    """Per-job FLOP estimates, sound bounds and verdicts.

    The project's one assessment, for every group of a whole fleet and the fleet-wide total."""
    from flopwatch.devices import normalize_dtype
    from flopwatch.errors import InputError
    from flopwatch.estimate import Profile
    from flopwatch.fleet import JobMap, PrometheusClient, ReadPlan, estimate_fleet
    from flopwatch.telemetry.timespec import parse_duration, parse_time, selector_matchers

    with _as_options():
        plan = ReadPlan(
            start=parse_time(start, field="start"),
            end=parse_time(end, field="end"),
            step_s=parse_duration(step, field="step"),
            window_s=parse_duration(window, field="window"),
            time_chunk_s=None if time_chunk is None else parse_duration(time_chunk, field="time-chunk"),
            gpus_per_chunk=gpus_per_chunk,
            matchers=selector_matchers(selector),
        ).check()
    jobs = None
    if job_info is not None or job_map is not None:
        gl = tuple(x.strip() for x in job_gpu_labels.split(",") if x.strip())
        if not 1 <= len(gl) <= 2:
            raise InputError("expected UUID or HOST_LABEL,INDEX_LABEL", field="--job-gpu-labels")
        allocs = load_job_map(job_map) if job_map is not None else ()
        jobs = JobMap(metric=job_info or "", job_label=job_label, gpu_labels=gl, allocations=allocs)
    prof = None if profile_path is None else Profile.load(profile_path)
    dtype = None if dtype is None else normalize_dtype(dtype)
    with _as_options():
        client = PrometheusClient(
            prometheus, timeout_s=timeout_s, run_timeout_s=run_timeout_s, retries=retries
        )
    kw: dict[str, Any] = dict(by=by, jobs=jobs, profile=prof, confidence=confidence, dtype=dtype)
    kw.update(device=device, pipe_calibration=pipe_calibration, verifier_operated=verifier_operated)
    kw["threshold"] = None if threshold is None else float(threshold)
    with _as_options(_CLIENT_FIELDS), ExitStack() as stack:
        if not (as_json or no_progress) and sys.stderr.isatty():
            from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

            text = TextColumn("{task.completed}/{task.total}")
            cols = (TextColumn("querying Prometheus"), BarColumn(), text, TimeElapsedColumn())
            bar = stack.enter_context(Progress(*cols, transient=True, console=console(stderr=True)))
            task = bar.add_task("q", total=None)
            kw["progress"] = lambda d, n: bar.update(task, completed=d, total=n)
        res = estimate_fleet(client, plan, **kw)
    if as_json:
        echo_json(res.to_dict())
        return
    _print_table(res.to_dict())


def load_job_map(path: Path) -> tuple[tuple[str, str, float, float], ...]:
    """(job, GPU, start, end) rows of a CSV (header job,gpu,start,end) or JSON (list of objects) mapping file."""
    import csv
    import io as _io

    from flopwatch.errors import InputError
    from flopwatch.io import parse_json, read_text
    from flopwatch.telemetry.timespec import parse_time

    text = read_text(path, kind="job map")
    if path.suffix.lower() == ".json":
        doc: Any = parse_json(text, file=str(path))
        rows = doc.get("jobs") if isinstance(doc, dict) else doc
    else:
        rows = list(csv.DictReader(_io.StringIO(text)))
    if not isinstance(rows, list) or not rows:
        raise InputError("expected a non-empty list of job, gpu, start, end rows", file=str(path))
    out = []
    for i, r in enumerate(rows):
        if not isinstance(r, dict):
            raise InputError("each row must be an object", file=str(path), record=i)
        for k in ("job", "gpu", "start", "end"):
            if r.get(k) in (None, ""):
                raise InputError("missing", file=str(path), record=i, field=k)
        try:
            t0, t1 = (parse_time(str(r[k]), field=k) for k in ("start", "end"))
        except InputError as e:  # name the file and the row, not only the field
            raise InputError(e.detail, file=str(path), record=i, field=e.field) from None
        if not t1 > t0:
            raise InputError("end must be after start", file=str(path), record=i, field="end")
        out.append((str(r["job"]), str(r["gpu"]), t0, t1))
    return tuple(out)


@fleet_app.command("metrics")
def fleet_metrics(as_json: options.Json = False) -> None:
    """The dcgm-exporter metrics flopwatch reads.

    The one metric table: each metric, how a window aggregates it, and what it contributes."""
    from flopwatch.telemetry.dcgm_metrics import TABLE

    rows = [
        {"metric": m.name, "unit": m.unit, "kind": m.kind, "window": list(m.window), "role": m.role}
        for m in TABLE
    ]
    if as_json:
        echo_json(rows)
        return
    from rich.table import Table

    t = Table("metric", "unit", "window", "role", title="dcgm-exporter metrics used by flopwatch fleet")
    for r in rows:
        t.add_row(r["metric"], r["unit"], ", ".join(r["window"]) or "—", r["role"])
    console().print(t)


def register(app: typer.Typer) -> None:
    """Add the ``fleet`` group to ``app``."""
    app.add_typer(fleet_app, name="fleet")


def _print_table(d: dict[str, Any], width: int | None = None) -> None:
    """One block per group, wrapped, never cut (docs/fleet.md, "The Prometheus client", last paragraph)."""
    from rich.padding import Padding

    con = console(width=width)
    if d.get("simulated"):
        simulated_banner(con, "this Prometheus holds flopwatch's simulated fleet history")
    thr = d.get("threshold_flops")
    con.print(
        f"flopwatch fleet estimate — {d['prometheus']}{' ' + d['selector'] if d.get('selector') else ''} by {d['by']} ({d['start']} → {d['end']}); verdicts "
        + (f"against {fmt_flops(thr)} FLOP" if thr else "need --threshold")
    )
    if d.get("series_from") == "the operator's Prometheus":
        con.print(
            "series from the operator's Prometheus: it can rewrite them consistently, so no group is 'below' "
            "(give --verifier-operated when you run this Prometheus and its scrapes); 'above' and the estimates stand"
        )
    for g in [*d["groups"], d["fleet"]]:
        e, why = g["estimate_flops"], g.get("estimate_reason")
        if e is not None and not e > 0 and not why:  # a row without the reason key (older JSON)
            e, why = None, "model gives 0 at this power"
        est = fmt_flops(e) if e is not None and e > 0 else ("0" if e is not None else "—")
        est += f" ({why})" if why else ""
        con.print(f"{g['key']}: {g['verdict'] or '—'}")
        for line in (
            f"{g['gpus']} GPUs, {g['gpu_hours']:.1f} GPU-h, coverage {g['coverage']:.0%}, energy "
            f"{g['energy_j'] / 1e6:.2f} MJ (net {g['net_energy_j'] / 1e6:.2f} MJ)",
            f"sound bounds [{fmt_flops(g['lower_flops'])}, {fmt_flops(g['upper_flops'])}] FLOP; estimate {est}; "
            f"pipes {fmt_flops(g['pipe_estimate_flops'])}",
            "notes: " + ("; ".join(g["notes"]) or "—"),
        ):
            con.print(Padding(line, (0, 0, 0, 2)))
    con.print(f"energy model: {d['energy_model']}")
    if d["metrics_missing"]:
        con.print(f"metrics not found (estimates degrade without them): {', '.join(d['metrics_missing'])}")
    con.print(
        f"{d['gpu_hours']:.0f} GPU-hours in {d['elapsed_s']:.2g} s ({d['cpu_s']:.2g} CPU-s here; {d['queries']} "
        f"queries, {d['bytes_received'] / 1e6:.2g} MB received; jobs from {d['jobs_from']}; "
        f"{d['gpus_per_chunk']} GPUs × {d['windows_per_chunk']} windows per query)"
    )


def sim_openmetrics(
    out: Path = typer.Option(..., "-o", "--output", help="OpenMetrics file to write."),
    gpus: int = typer.Option(16, "--gpus", help="GPUs in the fleet.", callback=options.count(ge=1)),
    hours: float = typer.Option(
        6.0, "--hours", help="Hours of history.", callback=options.positive(unit="h")
    ),
    schedule: str = typer.Option(
        "random",
        "--schedule",
        help="'random' (seeded whole-node jobs) or a JSON/TOML job list (docs/fleet.md).",
    ),
    device: str = typer.Option("h100", "--device", help="Simulated GPU model (a100, h100, h200, l40, l4)."),
    interval: str = typer.Option("15s", "--interval", help="Scrape interval."),
    gpus_per_node: int = typer.Option(
        8, "--gpus-per-node", help="GPUs per node (one pod per node and job).", callback=options.count(ge=1)
    ),
    label_style: str = typer.Option(
        "pod",
        "--label-style",
        help="pod | exported | hpc | info (no job label on DCGM series; a slurm_job_info series)",
    ),
    omit: list[str] = typer.Option(
        [], "--omit", metavar="<metric>", help="Leave out a metric (repeatable), e.g. a consumer GPU's."
    ),
    resets: int = typer.Option(
        0,
        "--resets",
        help="Energy-counter resets (driver reloads) per GPU.",
        callback=options.count(ge=0, le=options.MAX_COUNT),
    ),
    drop: float = typer.Option(
        0.0, "--drop", help="Share of scrapes missing at random.", callback=options.finite(ge=0.0, lt=1.0)
    ),
    start: str = typer.Option("1700000000", "--start", help="Wall time of t = 0 (RFC 3339 or Unix seconds)."),
    seed: options.Seed = 0,
    truth: Path = typer.Option(None, "--truth", help="Ground-truth JSON (default: OUT.truth.json)."),
    force: bool = typer.Option(False, "--force", help="Overwrite OUT."),
) -> None:
    """Write a simulated fleet's dcgm-exporter history.

    OpenMetrics for `promtool tsdb create-blocks-from openmetrics`, and its ground truth. Everything in it is
    SIMULATED."""
    import json

    from flopwatch.io import atomic_write, check_disk_space, check_output
    from flopwatch.sim import dcgm as D
    from flopwatch.telemetry.timespec import parse_duration, parse_time

    truth_path = truth or out.with_name(out.name + ".truth.json")
    sched_in = None if schedule == "random" else schedule
    options.not_inputs([("--output", out), ("--truth", truth_path)], [sched_in])
    for path, what, opt, ins in (
        (out, "OpenMetrics history", "-o", (sched_in, truth_path)),
        (truth_path, "ground truth", "--truth", (sched_in,)),
    ):
        check_output(path, inputs=ins, overwrite=force, what=what, option=opt, create_parents=True)
    with _as_options():
        step = parse_duration(interval, field="interval")
        D.check_fleet_size(gpus, hours, gpus_per_node, step)
        wall0 = parse_time(start, field="start")
    # Disk arithmetic before any work: every GPU × scrape × family is one line, written once as a piece and
    # once into OUT (a 100 000-GPU, 6 h fleet needs ~1.3 TB, and used to fill the disk from a hidden folder).
    check_disk_space(out, D.openmetrics_bytes(gpus, hours, step), what="simulated history (pieces and file)")
    jobs = (
        D.random_schedule(gpus, hours, gpus_per_node=gpus_per_node, seed=seed)
        if schedule == "random"
        else D.load_fleet_schedule(schedule)
    )
    fleet = D.SimulatedFleet(gpus, hours, jobs, device=device, gpus_per_node=gpus_per_node, interval_s=step,
                             wall0=wall0, seed=seed, label_style=label_style, resets=resets, drop=drop, omit=omit)  # fmt: skip
    # Both written atomically (missing folders created): never through a symlink, never half a file.
    tr = fleet.write_openmetrics(out)
    atomic_write(truth_path, json.dumps(tr.to_dict(), indent=2))
    console().print(
        f"wrote {out} (SIMULATED {fleet.spec.name} fleet: {counted(gpus, 'GPU')} × {hours:g} h, {counted(len(tr.pods), 'pod')}) "
        f"and {truth_path}; backfill: promtool tsdb create-blocks-from openmetrics {out} DIR"
    )
    # the window to query, dated (the default --start is a fixed 2023 date, so that a file is reproducible)
    console().print(
        f"dated {_utc(wall0)} → {_utc(wall0 + hours * 3600)} (--start {wall0:.0f} --end {wall0 + hours * 3600:.0f})"
        + (" — the default --start, fixed so that the file is reproducible" if start == "1700000000" else "")
    )


def _utc(t: float) -> str:
    import datetime as dt

    try:
        return dt.datetime.fromtimestamp(t, dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    except (OverflowError, OSError, ValueError):  # a --start beyond the calendar's range: the number
        return f"Unix {t:.0f}"


def register_sim(sim_app: typer.Typer) -> None:
    """Add ``openmetrics`` to the ``sim`` group."""
    sim_app.command("openmetrics")(sim_openmetrics)
