"""``flopwatch join TRACE RECORDS -o joined.jsonl``: the join stage of the study, by hand.

The same :func:`flopwatch.join.join_records` that ``flopwatch run`` uses: detect the workloads in a trace recorded
with ``flopwatch record`` and give each ``flopwatch workload run`` record the energy of the segment it ran in.
"""

from __future__ import annotations

from pathlib import Path

import typer

from flopwatch.cli import options
from flopwatch.cli._output import console, echo_json, simulated_banner


def join_cmd(
    trace: Path = typer.Argument(
        ..., help="Trace: flopwatch Parquet (flopwatch record) or the seed's timeseries.json."
    ),
    records: Path = typer.Argument(..., help="Workload records (JSON Lines from flopwatch workload run)."),
    output: Path = typer.Option(..., "-o", "--output", help="Joined records to write (JSON Lines)."),
    force: options.Force = False,
    clock: str = typer.Option(
        "auto",
        "--clock",
        help="Match by 'monotonic' time (same host), 'wall' time (UTC), or 'auto' (monotonic when both have it).",
    ),
    device: options.TraceDevice = None,
    idle_power: options.IdlePower = None,
    as_json: options.Json = False,
) -> None:
    """Join workload records with detected workloads, by time. Writes the joined records."""
    options.not_inputs([("--output", output)], [trace, records])  # before any work: never overwrite an input
    from rich.table import Table

    from flopwatch.join import join_trace_file

    res = join_trace_file(
        trace, records, output, overwrite=force, clock=clock, device=device, idle_power_w=idle_power
    )
    if as_json:
        echo_json(res.to_dict())
        return
    con = console()
    if res.simulated:
        simulated_banner(
            con, "the trace or the records come from the simulator: every number below is simulated"
        )
    con.print(
        f"wrote {res.n_records} record(s) to {output}: {res.n_ok} joined with telemetry, "
        f"{len(res.mismatches)} mismatch(es); {res.n_segments} workload(s) detected, idle {res.idle_power_w:.3f} W"
    )
    ctx = res.context
    if res.n_ok:
        con.print(
            f"each joined record carries its sensor: {ctx.get('sensor_kind') or 'none recorded in the trace'}"
            + (
                f" at {ctx['sample_rate_hz']:g} Hz"
                if isinstance(ctx.get("sample_rate_hz"), (int, float))
                else ""
            )
            + " (the verdict applies that sensor's blind share, as to a monitor row)"
        )
    for label, w in res.telemetry_warnings:
        con.print(f"warning: {label}: {w}", style="yellow")
    if res.mismatches:
        t = Table(title="not joined one-to-one (no measured energy)")
        for c in ("record", "kind", "detail"):
            t.add_column(c)
        for m in res.mismatches:
            t.add_row(m.label or "—", m.kind, m.detail)
        con.print(t)


def register(app: typer.Typer) -> None:
    """Add ``join`` to ``app``."""
    app.command("join")(join_cmd)
