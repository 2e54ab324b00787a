"""``flopwatch sim specs|validate|trace``: the simulated accelerator (every number it prints is simulated)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import typer

from flopwatch.cli import options
from flopwatch.cli._output import console, counted, echo_json, new_app

sim_app = new_app(
    "The simulated accelerator: twins, validation, traces. Validated against MASCOTS; scripted traces."
)

SIM_KEYS = ("a100", "h100", "h200", "l40", "l4", "orin-nano")


@sim_app.command("specs")
def specs_cmd(as_json: options.Json = False) -> None:
    """The simulated devices' peaks, bandwidth and power. Idle and maximum power, and where the power model comes from."""
    from rich.table import Table

    from flopwatch.sim.specs import describe_twins

    rows = describe_twins(SIM_KEYS)
    if as_json:
        echo_json(rows)
        return
    t = Table(title="Simulated accelerators (sim:NAME)")
    for c in ("device", "bf16 / fp32 TFLOPS", "GB/s", "idle W", "max W", "power model", "sensor"):
        t.add_column(c)
    for r in rows:
        pk = r["peak_tflops"]
        t.add_row(
            r["device"],
            f"{pk.get('bf16', float('nan')):.0f} / {pk['fp32']:.1f}",
            f"{r['mem_bw_gb_per_s']:.0f}",
            f"{r['idle_power_w']:.1f}",
            f"{r['max_power_w']:.0f}",
            r["power_model"],
            r["sensor"],
        )
    console().print(t)


@sim_app.command("validate")
def validate_cmd(
    gpu: list[str] = typer.Option(
        ["A100", "L40", "L4"], "--gpu", metavar="<gpu>", help="MASCOTS GPU(s) to replay (repeatable)."
    ),
    seed: options.Seed = 0,
    as_json: options.Json = False,
) -> None:
    """Replay the MASCOTS runs on the twins. Per-cell MAPE of simulated vs published mean power, batch-1 floor."""
    from rich.table import Table

    from flopwatch.sim.validate import validate_twins

    out = validate_twins(gpu, seed=seed)
    if as_json:
        echo_json(out)
        return
    con = console()
    t = Table(title="Twins vs MASCOTS 2026 (simulated, replaying each run's measured MFU and utilisation)")
    for c in (
        "GPU",
        "runs",
        "cell MAPE %",
        "worst cell %",
        "run MAPE %",
        "held-out model: cell MAPE % (worst)",
        "roofline power MAPE %",
    ):
        t.add_column(c, justify="right")
    for r, lo, rf in zip(out["replay"], out["leave_one_model_out"], out["roofline"], strict=True):
        t.add_row(
            r["gpu"],
            str(r["n_runs"]),
            f"{r['cell_mape_pct']:.2f}",
            f"{r['cell_max_abs_pct']:.2f}",
            f"{r['row_mape_pct']:.2f}",
            f"{lo['cell_mape_pct']:.2f} ({lo['cell_max_abs_pct']:.1f})",
            f"{rf['power_mape_pct']:.2f}",
        )
    con.print(t)
    con.print(
        "cell MAPE: in sample (the cell lines were fitted on these runs). held-out model: each architecture "
        "replayed on lines fitted without it (out of sample). roofline: MFU from model sizes, not measured."
    )
    f = out["batch1_floor"]
    con.print(
        f"A100 memory-bound floor (gpt2-xl bf16, simulated): batch 1 draws {f['batch_1']['power_w']:.0f} W "
        f"({f['batch_1']['power_over_idle']:.1f}× idle) at MFU {f['batch_1']['mfu_pct']:.2f} %; "
        f"batch 128 {f['batch_128']['power_w']:.0f} W at MFU {f['batch_128']['mfu_pct']:.1f} %."
    )


@sim_app.command("trace")
def trace_cmd(
    device: str = typer.Argument("a100", help="Device to simulate, e.g. a100, sim:h100, l4x2."),
    schedule: Path = typer.Option(
        ..., "--schedule", help="Schedule file (JSON or TOML; see docs/simulator.md)."
    ),
    out: Path = typer.Option(..., "-o", "--output", help="Trace to write (Parquet)."),
    rate_hz: options.Rate = 10.0,
    seed: options.Seed = 0,
    power_cap_w: float | None = typer.Option(
        None,
        "--power-cap-w",
        help="Board power limit (W).",
        callback=options.positive(unit="W"),
    ),
    locked_clock_mhz: float | None = typer.Option(
        None,
        "--locked-clock-mhz",
        help="Lock the SM clock (MHz).",
        callback=options.positive(unit="MHz"),
    ),
    tail_s: float = typer.Option(
        10.0,
        "--tail-s",
        help="Idle seconds recorded after the schedule.",
        callback=options.duration_s(allow_zero=True, le=86400.0),
    ),
    records: Path | None = typer.Option(
        None, "--records", help="Also append the ground-truth records (JSONL)."
    ),
    force: options.Force = False,
) -> None:
    """Play a scripted schedule on a simulated device. Records its (simulated) telemetry trace."""
    options.not_inputs(
        [("--output", out), ("--records", records)], [schedule]
    )  # before any work: never overwrite an input
    from flopwatch.sim.record import record_schedule

    res: Any = record_schedule(
        device,
        schedule,
        out,
        rate_hz=rate_hz,
        seed=seed,
        power_cap_w=power_cap_w,
        locked_clock_mhz=locked_clock_mhz,
        tail_s=tail_s,
        records=records,
        overwrite=force,
    )
    console().print(
        f"wrote {out} (SIMULATED {str(res.device_name).removesuffix(' (simulated)')}: {counted(res.n_samples, 'sample')} over {res.duration_s:.0f} virtual s"
        + (f"; {counted(res.n_records, 'record')} to {records}" if records is not None else "")
        + ")"
    )


def register(app: typer.Typer) -> None:
    """Add ``sim`` to ``app``."""
    from flopwatch.cli.fleet_cmds import register_sim  # `sim openmetrics` (issue 12)

    register_sim(sim_app)
    app.add_typer(sim_app, name="sim")
