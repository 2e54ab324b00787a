"""``flopwatch run``: the whole study end to end (real GPU or the simulated accelerator)."""

from __future__ import annotations

from pathlib import Path

import typer


def register(app: typer.Typer) -> None:
    """Add ``run`` to ``app``."""

    @app.command("run")
    def run_cmd(
        out: Path = typer.Option(..., "-o", "--out", help="Output directory (must be empty unless --force)."),
        device: str = typer.Option(
            "auto", "--device", help="auto | cuda[:N] | sim:NAME (e.g. sim:a100, sim:h100)."
        ),
        sweep: str = typer.Option(
            None,
            "--sweep",
            help="Sweep name: frontier (default on data-center GPUs), jetson-fp32, datacenter, …",
        ),
        budget_s: float = typer.Option(
            None, "--budget-s", help="Fit the sweep into about this many seconds."
        ),
        quick: bool = typer.Option(False, "--quick", help="A short sweep (under a minute on the simulator)."),
        seed: int = typer.Option(0, "--seed", help="Seed of every random choice (splits, simulator noise)."),
        force: bool = typer.Option(False, "--force", help="Overwrite flopwatch's files in a non-empty DIR."),
        rate_hz: float = typer.Option(10.0, "--rate", help="Telemetry sampling rate (Hz)."),
        splits: int = typer.Option(
            None, "--splits", help="Number of random train/test splits (default 200)."
        ),
        as_json: bool = typer.Option(False, "--json", help="Print summary.json to stdout (no progress bar)."),
        no_progress: bool = typer.Option(False, "--no-progress", help="Hide the progress bar."),
    ) -> None:
        """Run the study end to end: idle baseline, sweep, detection, calibration, held-out evaluation, report."""
        import json
        import sys

        from rich.console import Console
        from rich.table import Table

        from flopwatch.pipeline import RunOptions, run_pipeline

        err = Console(stderr=True)
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
        summary = run_pipeline(opts, log=(None if as_json else (lambda s: err.print(s))))
        if as_json:
            typer.echo(json.dumps(json.loads((out / "summary.json").read_text()), indent=2))
            return
        con = Console()
        sim = summary["simulated"]
        if sim:
            con.print(
                "[bold white on red] SIMULATED [/] every number below comes from the simulated accelerator"
            )
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
        for m, v in summary.get("published_models_mae_pct", {}).items():
            rows.append((f"held-out MAE ({m})", f"{v:.2f} %"))
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

    sim_app = typer.Typer(
        help="The simulated accelerator: its twins, their validation against MASCOTS, scripted traces.",
        no_args_is_help=True,
    )
    app.add_typer(sim_app, name="sim")
    from flopwatch.cli.fleet_cmds import register_sim  # `sim openmetrics` (issue 12)

    register_sim(sim_app)

    @sim_app.command("specs")
    def sim_specs(as_json: bool = typer.Option(False, "--json", help="Print JSON to stdout.")) -> None:
        """The simulated devices: peaks, bandwidth, idle and maximum power, and where the power model comes from."""
        import json

        from rich.console import Console
        from rich.table import Table

        from flopwatch.sim.accelerator import SimulatedAccelerator
        from flopwatch.sim.artefacts import SensorModel

        rows = []
        for key in ("a100", "h100", "h200", "l40", "l4", "orin-nano"):
            acc = SimulatedAccelerator(key)
            pm = acc.power_model
            rows.append(
                {
                    "device": f"sim:{key}",
                    "name": acc.spec.name,
                    "peak_tflops": {d: v / 1e12 for d, v in acc.spec.peak_flops.items()},
                    "mem_bw_gb_per_s": acc.spec.mem_bw_bytes_per_s / 1e9,
                    "idle_power_w": pm.idle_w,
                    "max_power_w": pm.max_w,
                    "max_sm_clock_mhz": acc.dvfs.f_max_mhz,
                    "power_model": pm.kind,
                    "power_model_source": pm.source,
                    "repeat_noise_pct": pm.repeat_sd_pct,
                    "sensor": SensorModel.for_device(key).kind,
                    "simulated": True,
                }
            )
        if as_json:
            typer.echo(json.dumps(rows, indent=2))
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
        Console().print(t)

    @sim_app.command("validate")
    def sim_validate(
        gpu: list[str] = typer.Option(["A100", "L40", "L4"], "--gpu", help="MASCOTS GPU(s) to replay."),
        seed: int = typer.Option(0, "--seed"),
        as_json: bool = typer.Option(False, "--json", help="Print JSON to stdout."),
    ) -> None:
        """Replay the MASCOTS runs on the twins: per-cell MAPE of simulated vs published mean power, batch-1 floor."""
        import json

        from rich.console import Console
        from rich.table import Table

        from flopwatch.sim.validate import (
            batch1_floor,
            leave_one_model_out,
            replay_mascots,
            roofline_vs_mascots,
        )

        out: dict = {
            "replay": [],
            "leave_one_model_out": [],
            "roofline": [],
            "batch1_floor": batch1_floor("a100"),
            "simulated": True,
        }
        for g in gpu:
            r = replay_mascots(g, seed=seed)
            out["replay"].append(r.to_dict())
            out["leave_one_model_out"].append(leave_one_model_out(g, seed=seed))
            out["roofline"].append(roofline_vs_mascots(g))
        if as_json:
            typer.echo(json.dumps(out, indent=2))
            return
        con = Console()
        t = Table(
            title="Twins vs MASCOTS 2026 (simulated, replaying each run's measured MFU and utilisation)"
        )
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
    def sim_trace(
        device: str = typer.Argument("a100", help="Device to simulate, e.g. a100, sim:h100, l4x2."),
        schedule: Path = typer.Option(
            ..., "--schedule", help="Schedule file (JSON or TOML; see docs/simulator.md)."
        ),
        out: Path = typer.Option(..., "-o", "--out", help="Trace to write (Parquet)."),
        rate_hz: float = typer.Option(10.0, "--rate", help="Sampling rate (Hz)."),
        seed: int = typer.Option(0, "--seed"),
        power_cap_w: float = typer.Option(None, "--power-cap-w", help="Board power limit (W)."),
        locked_clock_mhz: float = typer.Option(None, "--locked-clock-mhz", help="Lock the SM clock (MHz)."),
        tail_s: float = typer.Option(10.0, "--tail-s", help="Idle seconds recorded after the schedule."),
        records: Path = typer.Option(None, "--records", help="Also append the ground-truth records (JSONL)."),
        force: bool = typer.Option(False, "--force", help="Overwrite OUT."),
    ) -> None:
        """Play a scripted schedule on a simulated device and record its (simulated) telemetry trace."""
        from flopwatch.errors import InputError
        from flopwatch.records import append_record
        from flopwatch.sim.sensor import from_spec
        from flopwatch.telemetry.reading import TraceWriter, base_metadata
        from flopwatch.telemetry.sampler import Sampler

        if not rate_hz > 0:
            raise InputError(f"must be > 0, got {rate_hz}", field="rate")
        sensors = from_spec(
            device, seed=seed, schedule=schedule, power_cap_w=power_cap_w, locked_clock_mhz=locked_clock_mhz
        )
        info = sensors[0].info()
        end = max(s.accelerator.end_s for s in sensors) + max(0.0, tail_s)
        md = base_metadata(
            kind="sim",
            rate_hz=rate_hz,
            fingerprint=dict(info.fingerprint),
            simulated=True,
            source=str(schedule),
        )
        with TraceWriter(out, md, overwrite=force) as w:
            stats = Sampler(sensors, rate_hz, sinks=[w], duration_s=end).run()
        n_runs = 0
        if records is not None:
            for s in sensors:
                for r in s.accelerator.runs:
                    append_record(records, r.record())
                    n_runs += 1
        typer.echo(
            f"wrote {out} (SIMULATED {info.name}: {sum(stats.n_samples.values())} samples over {end:.0f} virtual s"
            + (f"; {n_runs} records to {records}" if records is not None else "")
            + ")"
        )
