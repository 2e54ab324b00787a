"""``flopwatch bench``: MFU, utilisation and power per configuration with the MASCOTS measurement protocol."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import typer

from flopwatch.cli import options
from flopwatch.cli._output import console, counted, echo_json, fmt_num, print_fit


def bench_cmd(
    output: Path = typer.Option(..., "-o", "--output", help="Aggregate CSV to write (MASCOTS schema)."),
    device: str = typer.Option(
        "cpu", "--device", help="cpu, cuda, cuda:N, or sim:KEY (simulated, virtual time)."
    ),
    sensor: str | None = typer.Option(
        None,
        "--sensor",
        help="Telemetry spec (nvml, rapl, replay:FILE …); default nvml on CUDA, none on CPU.",
    ),
    sweep: str | None = typer.Option(None, "--sweep", help="Named workload sweep (e.g. quick, datacenter)."),
    label: list[str] | None = typer.Option(
        None, "--label", metavar="<label>", help="Only these configs of the sweep (repeatable)."
    ),
    arch: str = typer.Option("gpt", "--arch", help="Grid mode: gpt or seed-encoder."),
    d_model: options.DModel = None,
    seq_len: options.SeqLen = None,
    num_layers: options.NumLayers = None,
    nhead: options.NHead = None,
    batch: str = typer.Option("1,8,32", "--batch", help="Grid mode: comma-separated batch sizes."),
    dtype: str = typer.Option("fp32", "--precision", help="Grid mode: comma-separated dtypes."),
    repeats: int = typer.Option(
        1,
        "--repeats",
        help="Repeats per configuration (noise floor).",
        callback=options.count(ge=1, le=options.MAX_COUNT),
    ),
    window_s: float = typer.Option(
        1.0,
        "--window-s",
        help="Minimum device-timed length of one sample window.",
        callback=options.duration_s(le=3600.0),
    ),
    min_samples: int = typer.Option(
        50,
        "--min-samples",
        help="Windows before the CI rule may stop.",
        callback=options.count(ge=1, le=options.MAX_COUNT),
    ),
    max_samples: int = typer.Option(
        500,
        "--max-samples",
        help="Hard cap on windows per configuration.",
        callback=options.count(ge=1, le=options.MAX_COUNT),
    ),
    rel_ci: float = typer.Option(
        0.05,
        "--rel-ci",
        help="Stop when the 95 % CI half-width ≤ this × mean.",
        callback=options.positive(),
    ),
    warmup_steps: int = typer.Option(
        5,
        "--warmup-steps",
        help="Untimed steps before measuring (the protocol: 5).",
        callback=options.count(ge=0, le=options.MAX_COUNT),
    ),
    cooldown_s: float = typer.Option(
        5.0,
        "--cooldown-s",
        help="Idle seconds between configurations (the protocol: 5).",
        callback=options.duration_s(allow_zero=True, le=3600.0),
    ),
    rate_hz: options.Rate = 10.0,
    seed: options.Seed = 0,
    append: bool = typer.Option(False, "--append", help="Append to an existing CSV of the same schema."),
    fit: bool = typer.Option(False, "--fit", help="Fit power ~ MFU on the measured rows afterwards."),
    json_out: options.Json = False,
) -> None:
    """Measure MFU, utilisation and power per configuration. The MASCOTS protocol; writes aggregate CSV rows."""
    options.not_inputs(
        [("--output", output)], options.sensor_files(sensor)
    )  # before any work: never overwrite an input
    from flopwatch.backends import open_sensors
    from flopwatch.devices import DTYPE_ALIASES
    from flopwatch.errors import InputError
    from flopwatch.powermodel.bench import BenchSettings, bench_grid, default_sensor_spec, write_aggregate_csv
    from flopwatch.workloads.select import grid_configs

    settings = BenchSettings(
        window_s=window_s, min_samples=min_samples, max_samples=max_samples, rel_ci=rel_ci,
        warmup_steps=warmup_steps, cooldown_s=cooldown_s, rate_hz=rate_hz,
    )  # fmt: skip
    configs = grid_configs(sweep, arch, d_model, seq_len, num_layers, nhead, batch, dtype, label)
    if output.is_dir():
        raise InputError("is a directory; give a CSV file path", file=str(output), field="output")
    if not output.expanduser().resolve().parent.is_dir():
        raise InputError("directory does not exist", file=str(output), field="output")
    if output.exists() and output.stat().st_size > 0 and not append:
        raise InputError("exists; refusing to overwrite (use --append)", file=str(output))
    state = {"append": append}
    con = None if json_out else console()
    if window_s < 1.0:
        # Not the study's protocol (>= 1 s windows); allowed for quick checks, said so on stderr.
        typer.echo(
            f"flopwatch: warning: --window-s {window_s:g} is shorter than the protocol's 1 s windows; "
            "rows record window_s_mean",
            err=True,
        )

    def on_row(row: dict[str, Any]) -> None:
        # Each configuration is written as soon as it is measured: an interrupted grid keeps what it measured.
        write_aggregate_csv([row], output, append=state["append"])
        state["append"] = True
        if con is not None:
            con.print(
                f"{row['model_name']} b{row['batch_size']} {DTYPE_ALIASES.get(row['dtype'], row['dtype'])} rep {row['repeat']}: "
                f"MFU {row['mfu_percentage_hardware_flops_mean']:.3g} % (hardware FLOPs), util {fmt_num(row['gpu_utilization_mean'], 1)} %, "
                f"power {fmt_num(row['power_draw_watts_mean'], 1)} W, {counted(row['samples_per_config'], 'window')} ({row['stop_reason']})"
                + (" [simulated]" if row["simulated"] else "")
            )

    if device.startswith("sim"):
        from flopwatch.sim.bench import bench_grid_sim

        rows = bench_grid_sim(
            configs, spec=device, settings=settings, repeats=repeats, seed=seed, on_row=on_row
        )
    else:
        spec = sensor if sensor is not None else default_sensor_spec(device)
        if spec is None and con is not None:
            con.print(
                "no --sensor on the CPU: power is not measured (MFU and step timing only)", style="yellow"
            )
        rows = bench_grid(
            configs, device=device, sensor_spec=None if spec == "none" else spec, settings=settings,
            repeats=repeats, seed=seed, on_row=on_row, open_sensors=open_sensors,
        )  # fmt: skip
    result: dict[str, Any] = {"output": str(output), "rows": rows}
    if fit:
        from flopwatch.powermodel.datasets import load_aggregates
        from flopwatch.powermodel.fit import fit_power_model

        loaded = load_aggregates([output])
        if len(loaded.df) >= 3:
            m = fit_power_model(loaded.df, by="gpu")
            result["fit"] = m.to_dict()
            if con is not None:
                from flopwatch.cli.powermodel_cmds import fit_table

                print_fit(con, fit_table(m))
        elif con is not None:
            con.print("fewer than 3 rows with power: no fit", style="yellow")
    if json_out:
        echo_json(result)
    elif con is not None:
        con.print(f"wrote {counted(len(rows), 'row')} to {output}")


def register(app: typer.Typer) -> None:
    """Add ``bench`` to ``app``."""
    app.command("bench")(bench_cmd)
