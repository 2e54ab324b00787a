"""CLI of the monitor area: ``flopwatch monitor`` (the daemon) and ``flopwatch ledger verify|show|export-key``."""

from __future__ import annotations

import json
from pathlib import Path

import typer

ledger_app = typer.Typer(help="Inspect and verify a monitor ledger.", no_args_is_help=True)


def _fmt_flops(x: float | None) -> str:
    return "—" if x is None else f"{x:.4g}"


@ledger_app.command("verify")
def ledger_verify(
    ledger: Path = typer.Argument(..., help="Ledger file (SQLite)."),
    public_key: Path | None = typer.Option(
        None,
        "--public-key",
        help="PEM public key exported at installation (default: LEDGER.pub, else the genesis key).",
    ),
    json_out: bool = typer.Option(False, "--json", help="Print the result as JSON."),
) -> None:
    """Check every row's hash, signature, sequence number and chain link; exit 1 if anything was tampered with."""
    from flopwatch.errors import InputError
    from flopwatch.monitor.ledger import verify_ledger

    if not ledger.exists():
        raise InputError("ledger not found", file=str(ledger))
    res = verify_ledger(ledger, public_key)
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
            f"head seq {res.head_seq} hash {res.head_hash[:16]}…; key {res.key_source}"
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
    from flopwatch.monitor.ledger import summarize_ledger

    doc = summarize_ledger(ledger)
    if json_out:
        typer.echo(json.dumps(doc, indent=2))
        return
    from datetime import datetime, timezone

    from rich.console import Console
    from rich.table import Table

    def ts(x: float | None) -> str:
        return "—" if x is None else datetime.fromtimestamp(x, timezone.utc).strftime("%Y-%m-%d %H:%M:%S")

    con = Console()
    if not con.is_terminal:  # pipes and tests: do not squeeze the table to 80 columns
        con = Console(width=200)
    t = Table(title=f"Workloads in {ledger}")
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
    for w in doc["workloads"]:
        cov = w.get("coverage")
        t.add_row(
            str(w["seq"]),
            str(w["device"]),
            ts(w["start_wall"]),
            "—" if w["duration_s"] is None else f"{w['duration_s']:.1f}",
            "—" if w["net_energy_j"] is None else f"{w['net_energy_j']:.1f}",
            _fmt_flops(w["estimate_flops"]),
            f"[{_fmt_flops(w['lower_flops'])}, {_fmt_flops(w['upper_flops'])}]",
            str(w["verdict"]),
            str(w["status"]),
            "—" if cov is None else f"{cov:.3f}",
        )
    con.print(t)
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
                f"row {tot['checkpoint_seq']} {ts(tot.get('checkpoint_wall'))}",
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


def register(app: typer.Typer) -> None:
    """Add this area's commands to ``app``."""
    app.add_typer(ledger_app, name="ledger")
