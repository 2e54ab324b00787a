"""CLI of the monitor area: ``flopwatch monitor`` (the daemon) and ``flopwatch ledger verify|show|export-key``."""

from __future__ import annotations

import json
from pathlib import Path

import typer

ledger_app = typer.Typer(help="Inspect and verify a monitor ledger.", no_args_is_help=True)


def _fmt_flops(x: float | None) -> str:
    return "—" if x is None else f"{x:.4g}"


def _ts(x: float | None) -> str:
    from datetime import datetime, timezone

    return "—" if x is None else datetime.fromtimestamp(x, timezone.utc).strftime("%Y-%m-%d %H:%M:%S")


def _console():  # noqa: ANN202 - rich is imported lazily
    from rich.console import Console

    con = Console()
    return con if con.is_terminal else Console(width=200)  # pipes and tests: do not squeeze to 80 columns


def _workload_table(workloads: list[dict], title: str):  # noqa: ANN202
    """Rich table of workload rows (ledger payloads): estimate, interval, verdict, status, coverage."""
    from rich.table import Table

    t = Table(title=title)
    for col in (
        "seq",
        "device",
        "start (UTC)",
        "duration s",
        "net energy J",
        "estimate",
        "interval",
        "verdict",
        "status",
        "coverage",
    ):
        t.add_column(col)
    for w in workloads:
        cov = w.get("coverage")
        t.add_row(
            str(w.get("seq", "—")),
            str(w["device"]),
            _ts(w["start_wall"]),
            "—" if w["duration_s"] is None else f"{w['duration_s']:.1f}",
            "—" if w["net_energy_j"] is None else f"{w['net_energy_j']:.1f}",
            _fmt_flops(w["estimate_flops"]),
            f"[{_fmt_flops(w['lower_flops'])}, {_fmt_flops(w['upper_flops'])}]",
            str(w["verdict"]),
            str(w["status"]),
            "—" if cov is None else f"{cov:.3f}",
        )
    return t


@ledger_app.command("verify")
def ledger_verify(
    ledger: Path = typer.Argument(..., help="Ledger file (SQLite)."),
    public_key: Path | None = typer.Option(
        None,
        "--public-key",
        help="PEM public key exported at installation (default: LEDGER.pub, else the genesis key).",
    ),
    expect_head: str | None = typer.Option(
        None,
        "--expect-head",
        help="SEQ or SEQ:HASH of a head recorded earlier off the node (a previous verify, the scraped "
        "flopwatch_ledger_head_seq): detects the newest rows being cut off.",
    ),
    json_out: bool = typer.Option(False, "--json", help="Print the result as JSON."),
) -> None:
    """Check every row's hash, signature, sequence number and chain link; exit 1 if anything was tampered with."""
    from flopwatch.errors import InputError
    from flopwatch.monitor.ledger import parse_head, verify_ledger

    if not ledger.exists():
        raise InputError("ledger not found", file=str(ledger))
    head = parse_head(expect_head) if expect_head is not None else None
    res = verify_ledger(ledger, public_key, expect_head=head)
    if json_out:
        typer.echo(json.dumps(res.to_dict(), indent=2))
    else:
        for p in res.problems:
            typer.echo(p.line())
        for w in res.warnings:
            typer.echo(f"warning: {w}", err=True)
        status = "OK" if res.ok else "TAMPERED"
        n = len(res.problems)
        typer.echo(
            f"{ledger}: {status}: {res.n_rows} rows, {n} problem{'s' if n != 1 else ''}; "
            f"head {res.head_seq}:{res.head_hash}; key {res.key_source}"
            + (f" (sha256 {res.key_fingerprint[:16]}…)" if res.key_fingerprint else "")
        )
    if not res.ok:
        raise typer.Exit(1)


@ledger_app.command("show")
def ledger_show(
    ledger: Path = typer.Argument(..., help="Ledger file (SQLite)."),
    json_out: bool = typer.Option(False, "--json", help="Print JSON: {workloads: [...], totals: {...}}."),
) -> None:
    """List the recorded workloads and the latest running totals per device."""
    from flopwatch.monitor.ledger import summarize_ledger, verify_ledger

    doc = summarize_ledger(ledger)
    # `show` lists what the file says; say so when the file fails verification, so nobody trusts it unawares.
    check = verify_ledger(ledger)
    doc["verified"] = check.ok
    if not check.ok:
        typer.echo(
            f"warning: {ledger} FAILS verification ({len(check.problems)} problem(s)); "
            "run `flopwatch ledger verify` before trusting these rows",
            err=True,
        )
    if json_out:
        typer.echo(json.dumps(doc, indent=2))
        return
    from rich.table import Table

    con = _console()
    con.print(_workload_table(doc["workloads"], f"Workloads in {ledger}"))
    if doc["totals"]:
        tt = Table(title="Running totals since the ledger began (latest checkpoint)")
        for col in (
            "device",
            "energy J",
            "net energy J",
            "est. FLOPs",
            "outside workloads J",
            "busy s",
            "checkpoint",
        ):
            tt.add_column(col)
        for dev, tot in doc["totals"].items():
            tt.add_row(
                dev,
                f"{tot.get('energy_j', 0.0):.1f}",
                f"{tot.get('net_energy_j', 0.0):.1f}",
                _fmt_flops(tot.get("estimated_flops")),
                f"{tot.get('outside_net_energy_j', 0.0):.1f}",
                f"{tot.get('busy_s', 0.0):.1f}",
                f"row {tot['checkpoint_seq']} {_ts(tot.get('checkpoint_wall'))}",
            )
        con.print(tt)


@ledger_app.command("export-key")
def ledger_export_key(
    ledger: Path = typer.Argument(..., help="Ledger file (SQLite)."),
    output: Path | None = typer.Option(None, "-o", "--output", help="Write the PEM here (default: stdout)."),
) -> None:
    """Print the ledger's public key (PEM) from its genesis row, for verifiers to pin."""
    from flopwatch.errors import InputError
    from flopwatch.monitor.ledger import read_entries

    rows = read_entries(ledger)
    if not rows or rows[0].kind != "genesis":
        raise InputError("no genesis row", file=str(ledger), record=1)
    pem = rows[0].payload["public_key_pem"]
    if output is None:
        typer.echo(pem, nl=False)
    else:
        output.write_text(pem)


def monitor_command(
    sensor: list[str] = typer.Option(
        None, "--sensor", "-s", help="Sensor spec (repeatable): nvml, jetson, replay:FILE, sim:NAME …"
    ),
    profile: Path | None = typer.Option(
        None, "--profile", help="Calibration profile (JSON) from `flopwatch calibrate`."
    ),
    ledger: Path | None = typer.Option(
        None, "--ledger", help="Ledger file (SQLite, created with its signing key)."
    ),
    config: Path | None = typer.Option(
        None, "--config", help="TOML file ([monitor] table); flags override it."
    ),
    metrics_port: int | None = typer.Option(
        None, "--metrics-port", help="Serve Prometheus metrics on this port (0: off)."
    ),
    metrics_addr: str | None = typer.Option(
        None, "--metrics-addr", help="Address to bind the exporter (default 127.0.0.1)."
    ),
    poll_s: float | None = typer.Option(None, "--poll-s", help="Detection poll interval in s (study: 1.5)."),
    sample_hz: float | None = typer.Option(
        None, "--sample-hz", help="Sampling rate of power/energy (default 2 Hz)."
    ),
    checkpoint_s: float | None = typer.Option(
        None, "--checkpoint-s", help="Checkpoint interval of the running totals (s)."
    ),
    duration: float | None = typer.Option(
        None, "--duration", help="Stop after this many seconds of sensor time."
    ),
    speed: float | None = typer.Option(None, "--speed", help="Replay speed for replay:FILE sensors."),
    idle_power_w: float | None = typer.Option(
        None, "--idle-power-w", help="Idle power (default: the profile's)."
    ),
    threshold_flops: float | None = typer.Option(
        None, "--threshold-flops", help="Verdict threshold (FLOPs)."
    ),
    dtype: str | None = typer.Option(
        None, "--dtype", help="Precision the profile should assume (default fp32)."
    ),
    key: Path | None = typer.Option(
        None, "--key", help="Signing key path (default LEDGER.key, created with mode 0600)."
    ),
    keep_trace: Path | None = typer.Option(
        None, "--keep-trace", help="Opt-in: also write the raw trace (Parquet) here."
    ),
    schedule: Path | None = typer.Option(
        None, "--schedule", help="Workload schedule (JSON/TOML) for sim: sensors."
    ),
    seed: int | None = typer.Option(None, "--seed", help="Seed of simulated sensors."),
    json_out: bool = typer.Option(False, "--json", help="Print a JSON summary on exit."),
    verbose: int = typer.Option(
        0, "--verbose", "-v", count=True, help="-v: also checkpoints and the running estimate each poll."
    ),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="Log warnings only (no per-workload lines)."),
) -> None:
    """Run the verification daemon: detect workloads, estimate their FLOPs, sign them into the ledger, export metrics."""
    import logging

    from flopwatch.errors import ConfigError
    from flopwatch.monitor.config import MonitorConfig
    from flopwatch.monitor.daemon import Monitor

    logging.basicConfig(
        # Default INFO: each workload's start and final estimate/interval/verdict is logged as it happens.
        level=logging.WARNING if quiet else (logging.DEBUG if verbose else logging.INFO),
        format="%(asctime)s flopwatch-monitor %(levelname)s %(message)s",
    )
    cfg = MonitorConfig.from_toml(config) if config is not None else MonitorConfig()
    cfg.update(
        {
            "sensors": sensor or None,
            "profile": profile,
            "ledger": ledger,
            "metrics_port": metrics_port,
            "metrics_addr": metrics_addr,
            "poll_s": poll_s,
            "sample_hz": sample_hz,
            "checkpoint_s": checkpoint_s,
            "duration_s": duration,
            "speed": speed,
            "idle_power_w": idle_power_w,
            "threshold_flops": threshold_flops,
            "dtype": dtype,
            "key_path": key,
            "keep_trace": keep_trace,
            "schedule": schedule,
            "seed": seed,
        },
        source="command line",
    )
    if config is None and ledger is None:
        raise ConfigError("--ledger is required (or set ledger in --config)", field="ledger")
    cfg.validate(str(config) if config else "command line")
    res = Monitor(cfg).run()
    if json_out:
        typer.echo(
            json.dumps(
                {
                    "session_id": res.session_id,
                    "end_reason": res.end_reason,
                    "ledger": str(cfg.ledger),
                    "ledger_head": {"seq": res.ledger_head[0], "hash": res.ledger_head[1]},
                    "workloads": res.workloads,
                    "totals": res.totals,
                },
                indent=2,
            )
        )
    else:
        if res.workloads:
            _console().print(_workload_table(res.workloads, "Workloads recorded this session"))
        typer.echo(
            f"flopwatch monitor: {res.end_reason}; {len(res.workloads)} workload(s) recorded in {cfg.ledger} "
            f"(head {res.ledger_head[0]}:{res.ledger_head[1]})"
        )


def register(app: typer.Typer) -> None:
    """Add this area's commands to ``app``."""
    app.command("monitor")(monitor_command)
    app.add_typer(ledger_app, name="ledger")
