"""CLI of the monitor area: ``flopwatch monitor`` (the daemon) and
``flopwatch ledger verify|show|export-key|head|witness``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import typer

from flopwatch.cli import options
from flopwatch.cli._output import (
    EXIT_INTERRUPTED,
    console,
    counted,
    echo_json,
    fmt_flops,
    literal,
    new_app,
    print_fit,
    styled,
)

ledger_app = new_app("Inspect and verify a monitor ledger.")


def _fmt_flops(x: object) -> str:
    if isinstance(x, (int, float)) and not isinstance(x, bool):
        return fmt_flops(float(x))  # compact (3.705e14): a ledger row fits a 160-column line
    return _fmt(x, "{}")


def _bounds(lo: object, hi: object) -> str:
    """The verdict bounds of a row; an upper bound of null under a lower bound is unbounded (row version 3)."""
    if lo is None and hi is None:
        return "—"
    return f"[{_fmt_flops(lo)}, {'∞' if hi is None else _fmt_flops(hi)}]"


def _fmt(x: object, spec: str) -> str:
    """A number formatted with ``spec``; anything else (a hand-edited payload) printed literally."""
    if x is None:
        return "—"
    if isinstance(x, (int, float)) and not isinstance(x, bool):
        return spec.format(x)
    return literal(x)


def _ts(x: object) -> str:
    from datetime import datetime, timezone

    if x is None:
        return "—"
    try:
        return datetime.fromtimestamp(float(x), timezone.utc).strftime("%Y-%m-%d %H:%M:%S")  # type: ignore[arg-type]
    except (TypeError, ValueError, OverflowError, OSError):
        return literal(x)


def _workload_cells(workloads: list[dict]) -> list[list[tuple[str, str]]]:
    """Each workload row (a ledger payload) as (column, text) pairs: estimate, bounds, verdict, status, coverage."""
    # a session's own rows carry no ledger seq yet: no column of dashes for them
    seq = any(w.get("seq") is not None for w in workloads)
    warned = any(w.get("warnings") or w.get("flags") for w in workloads)  # else no column of blanks
    rows = []
    for w in workloads:
        g = w.get
        warns = g("warnings") or g("flags") or []
        n_warn = len(warns) if isinstance(warns, list) else 1
        cells = [
            *((("row", g("seq", "—")),) if seq else ()),  # the ledger's row number (seq), as in the warnings
            ("device", g("device")),
            ("start (UTC)", _ts(g("start_wall"))),
            ("duration s", _fmt(g("duration_s"), "{:.1f}")),
            ("net J", _fmt(g("net_energy_j"), "{:.1f}")),
            ("estimate", _fmt_flops(g("estimate_flops"))),
            ("bounds", _bounds(g("lower_flops"), g("upper_flops"))),
            ("verdict", g("verdict")),
            ("regime", g("regime") or "—"),
            ("status", g("status")),
            ("cover", _fmt(g("coverage"), "{:.3f}")),
            *((("warnings", n_warn or ""),) if warned else ()),
        ]
        rows.append([(k, literal(v)) for k, v in cells])
    return rows


def _workload_table(workloads: list[dict], title: str):  # noqa: ANN202
    """Rich table of workload rows (ledger payloads), one line each.

    Every cell is a ``Text`` (printed literally): device names and payload values are user-controlled.
    """
    from rich.table import Table

    t = Table(
        title=styled(
            f"{title} (estimate and bounds in FLOP; cover: share of the time covered by readings)", ""
        ),
        show_edge=False,
    )  # no outer border (the first column starts the line): a typical row fits 160 columns
    rows = _workload_cells(workloads)
    for col, _ in rows[0] if rows else ():
        t.add_column(col, overflow="fold")  # user text is shown whole, never cut with an ellipsis
    for r in rows:
        t.add_row(*(styled(v, "") for _, v in r))
    return t


def _print_workloads(con: Any, workloads: list[dict], title: str) -> None:
    """The workload table (or, where it does not fit the terminal, one block of lines per workload), then what
    its "warnings" column counts, each warning once with the rows it is on."""
    print_fit(con, _workload_table(workloads, title))
    if any(w.get("verdict") == "n/a" for w in workloads):
        con.print(
            "verdict n/a: the monitor had no --threshold; `flopwatch verdict LEDGER --threshold T` judges these rows"
        )
    seen: dict[str, list[str]] = {}
    for i, w in enumerate(workloads, 1):
        warns = w.get("warnings") or w.get("flags") or []
        for x in warns if isinstance(warns, list) else [warns]:
            seen.setdefault(str(x), []).append(str(w.get("seq", f"#{i}")))
    if not seen:
        return
    con.print("warnings (`--json` lists them per row):")
    for n, (text, rows) in enumerate(seen.items()):
        if n == 10:
            con.print(f"  … and {len(seen) - 10} more")
            break
        where = ", ".join(rows[:5]) + (f" and {len(rows) - 5} more" if len(rows) > 5 else "")
        con.print(f"  - {literal(text)} (row{'s' if len(rows) > 1 else ''} {where})")


@ledger_app.command("verify")
def ledger_verify(
    ledger: Path = typer.Argument(..., help="Ledger file (SQLite)."),
    public_key: Path | None = typer.Option(
        None,
        "--public-key",
        help="Pin exported at installation (`ledger export-key`: public key + chain genesis); "
        "default: LEDGER.pub, else the genesis key.",
    ),
    expect_head: str | None = typer.Option(
        None,
        "--expect-head",
        help="SEQ or SEQ:HASH of the last row recorded earlier off the node (a previous verify's 'last row', "
        "the scraped flopwatch_ledger_head_seq): detects the newest rows being cut off.",
    ),
    witness: Path | None = typer.Option(
        None,
        "--witness",
        help="Witness log (HEADS.jsonl from `ledger witness`): every signed tree head in it must be a prefix "
        "of the ledger (exit 1 naming the head otherwise).",
    ),
    json_out: options.Json = False,
) -> None:
    """Check a ledger for tampering. The schema, the pin, every row's hash, signature, sequence number,
    chain link, and the history tree against the signed and the witnessed heads; exit 1 if anything was tampered with, 2 if the
    file is not a ledger or the witness log does not parse."""
    from flopwatch.errors import InputError
    from flopwatch.monitor.ledger import parse_head, verify_ledger
    from flopwatch.monitor.witness import read_log
    from flopwatch.text import literal as one_line  # newlines escaped too: one problem, one line

    if not ledger.exists():
        raise InputError("ledger not found", file=str(ledger))
    head = parse_head(expect_head) if expect_head is not None else None
    heads = read_log(witness) if witness is not None else None
    res = verify_ledger(ledger, public_key, expect_head=head, witness=heads)
    bad = next((p for p in res.problems if p.kind == "not-a-ledger"), None)
    if bad is not None:
        raise InputError(bad.message, file=str(ledger))
    if json_out:
        echo_json(res.to_dict())
    else:
        for p in res.problems:
            typer.echo(one_line(p.line()))
        for w in res.warnings:
            typer.echo(f"warning: {one_line(w)}", err=True)
        status = "OK" if res.ok else "TAMPERED"
        n = len(res.problems)
        typer.echo(
            f"{literal(ledger)}: {status}: {counted(res.n_rows, 'row')}, {counted(n, 'problem')}; "
            f"last row {res.head_seq}:{literal(res.head_hash)}; key {literal(res.key_source)}"
            + (f" (sha256 {res.key_fingerprint[:16]}…)" if res.key_fingerprint else "")
            + (f"; genesis {literal(res.genesis_hash)[:16]}…" if res.genesis_hash else "")
            + (
                f"; {counted(res.witness_heads, 'witnessed head')}, "
                + (f"rows 1..{res.witnessed_size} witnessed" if res.witnessed_size else "no row witnessed")
                if witness is not None
                else ""
            )
        )
    if not res.ok:
        raise typer.Exit(1)


@ledger_app.command("show")
def ledger_show(
    ledger: Path = typer.Argument(..., help="Ledger file (SQLite)."),
    json_out: options.Json = False,
) -> None:
    """List the recorded workloads and latest totals per device. Printed literally."""
    from flopwatch.monitor.ledger import summarize_ledger, verify_ledger

    doc = summarize_ledger(ledger)
    # `show` lists what the file says; say so when the file fails verification, so nobody trusts it unawares.
    check = verify_ledger(ledger)
    doc["verified"] = check.ok
    if not check.ok:
        typer.echo(
            f"warning: {literal(ledger)} FAILS verification ({counted(len(check.problems), 'problem')}); "
            "run `flopwatch ledger verify` before trusting these rows",
            err=True,
        )
    if json_out:
        echo_json(doc)
        return
    from rich.table import Table

    con = console()
    _print_workloads(con, doc["workloads"], f"Workloads in {ledger}")
    if doc["totals"]:
        tt = Table(title="Running totals since the ledger began (latest checkpoint)")
        for col in (
            "device",
            "energy J",
            "net energy J",
            "est. FLOPs",
            "outside workloads J",
            "busy s",
            "min idle W",
            "checkpoint",
        ):
            tt.add_column(col, overflow="fold")
        for dev, tot in doc["totals"].items():
            g = tot.get
            tt.add_row(
                *(
                    styled(c, "")
                    for c in (
                        dev,
                        _fmt(g("energy_j", 0.0), "{:.1f}"),
                        _fmt(g("net_energy_j", 0.0), "{:.1f}"),
                        _fmt_flops(g("estimated_flops")),
                        _fmt(g("outside_net_energy_j", 0.0), "{:.1f}"),
                        _fmt(g("busy_s", 0.0), "{:.1f}"),
                        _fmt(g("min_idle_power_w"), "{:.3f}"),
                        f"row {g('checkpoint_seq')} {_ts(g('checkpoint_wall'))}",
                    )
                )
            )
        print_fit(con, tt)


@ledger_app.command("export-key")
def ledger_export_key(
    ledger: Path = typer.Argument(..., help="Ledger file (SQLite)."),
    output: Path | None = typer.Option(
        None, "-o", "--output", help="Write the pin here (default: stdout); never the ledger or its key."
    ),
) -> None:
    """Print the ledger's pin: public key and genesis hash. Verifiers keep it off the node.

    Read from the genesis row. `ledger verify --public-key PIN` then rejects another key and a wiped-and-
    restarted chain signed with the same key. The output is written atomically and never through a symlink.
    """
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

    from flopwatch.errors import InputError
    from flopwatch.monitor.keys import Pin, ledger_companions, refuse_clobber, write_public_file
    from flopwatch.monitor.ledger import iter_ledger

    if output is not None:
        refuse_clobber(output, ledger_companions(ledger), "exported key")
    first = next(iter_ledger(ledger), None)
    if first is None or first.kind != "genesis":
        raise InputError("no genesis row", file=str(ledger), record=1)
    try:
        key = serialization.load_pem_public_key(str(first.payload.get("public_key_pem", "")).encode())
    except (ValueError, TypeError):
        key = None
    if not isinstance(key, Ed25519PublicKey):
        raise InputError(
            "genesis row holds no Ed25519 public key", file=str(ledger), record=1, field="public_key_pem"
        )
    pin = Pin(key, first.hash, str(first.payload.get("ledger_id") or "") or None)
    from flopwatch.monitor.ledger import verify_ledger

    check = verify_ledger(ledger, Pin(key))
    if not check.ok:  # a pin of a tampered chain would bless it: say so loudly
        typer.echo(
            f"warning: {literal(ledger)} FAILS verification ({counted(len(check.problems), 'problem')}); "
            "this pin binds the chain as it is now — run `flopwatch ledger verify` first",
            err=True,
        )
    if output is None:
        typer.echo(pin.text(), nl=False)
    else:
        from flopwatch.errors import LedgerError

        try:
            write_public_file(output, pin.text())
        except (LedgerError, OSError) as e:
            raise InputError(str(e), file=str(output), field="output") from None


@ledger_app.command("head")
def ledger_head(
    ledger: Path = typer.Argument(..., help="Ledger file (SQLite); opened read-only."),
    json_out: options.Json = False,
) -> None:
    """Print the ledger's newest signed tree head. A witness keeps it off the node; with --json:
    {"size", "root", "time", "signature", "key_id"} (hex; time in ms)."""
    from flopwatch.monitor.witness import FileSource

    src = FileSource(ledger)
    try:
        h = src.head()
    finally:
        src.close()
    if json_out:
        echo_json(h.to_dict())
        return
    typer.echo(
        f"{literal(ledger)}: signed tree head: size {h.size} rows, Merkle root {h.root}, "
        f"time {_ts(h.time_ms / 1000)} ({h.time_ms} ms), key {h.key_id[:16]}…, signature {h.signature}"
    )


@ledger_app.command("witness")
def ledger_witness(
    source: str = typer.Argument(
        ..., help="The monitor's URL (http://HOST:PORT, serving /head and /consistency) or a ledger file."
    ),
    log: Path = typer.Option(..., "--log", help="Witness log (JSON Lines); appended to, never rewritten."),
    public_key: Path | None = typer.Option(
        None,
        "--public-key",
        help="Pinned key (`ledger export-key`) the head must be signed with; default for a ledger file: "
        "LEDGER.pub beside it (a warning says it is not off the node). Required for a URL.",
    ),
    json_out: options.Json = False,
) -> None:
    """Fetch, check and log the newest signed tree head. Checked against the pinned key and, by consistency
    proofs, against every head already in the log, then append it with this machine's clock. Exit 1 naming the earlier head
    when the new one is not consistent with it."""
    from flopwatch.errors import InputError
    from flopwatch.monitor.keys import default_public_key_path, load_pin
    from flopwatch.monitor.witness import witness
    from flopwatch.text import literal as one_line

    if public_key is None:
        if source.startswith(("http://", "https://")):
            raise InputError("a URL needs --public-key (the pin kept off the node)", field="--public-key")
        public_key = default_public_key_path(source)
        typer.echo(
            f"warning: using {one_line(public_key)} beside the ledger as the pin; keep a copy off the node and "
            "pass it with --public-key",
            err=True,
        )
    pin = load_pin(public_key)
    out = witness(source, log, pin.key)
    if not out.ok:
        typer.echo(f"{literal(log)}: refused: {one_line(out.message)}")
        raise typer.Exit(1)
    if out.entry is not None:
        ahead = out.entry.head.time_ms / 1000 - out.entry.witnessed_at
        # a head is signed before it is fetched: a head dated in the witness's future means a fast node clock
        if ahead > 60:
            typer.echo(
                f"warning: the node's clock is {ahead:.0f} s ahead of this witness's (head time vs now); "
                "windows placed by witnessed times are not affected",
                err=True,
            )
    if json_out and out.entry is not None:
        echo_json(out.entry.to_dict())
    else:
        typer.echo(f"{literal(log)}: {one_line(out.message)}")


def monitor_command(
    sensor: list[str] = typer.Option(
        None,
        "--sensor",
        "-s",
        metavar="<spec>",
        help="Sensor spec (repeatable): nvml, jetson, replay:FILE, sim:NAME …",
    ),
    profile: Path | None = typer.Option(
        None, "--profile", help="Calibration profile (JSON) from `flopwatch calibrate`."
    ),
    ledger: Path | None = typer.Option(
        None,
        "--ledger",
        help="Ledger file (SQLite, created with its signing key). Default: $STATE_DIRECTORY/ledger.db, else "
        "$XDG_STATE_HOME/flopwatch/ledger.db, else ~/.local/state/flopwatch/ledger.db — never the current directory.",
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
    head_interval_s: float | None = typer.Option(
        None,
        "--head-interval-s",
        help="Sign a tree head of the ledger this often (s of sensor time, default 60); served at /head.",
    ),
    duration: float | None = typer.Option(
        None, "--duration", help="Stop after this many seconds of sensor time."
    ),
    speed: float | None = typer.Option(None, "--speed", help="Replay speed for replay:FILE sensors."),
    idle_power_w: float | None = typer.Option(
        None, "--idle-power-w", help="Idle power (default: the profile's)."
    ),
    threshold_flops: options.Threshold = None,
    dtype: str | None = typer.Option(
        None,
        "--precision",
        help="The operator's precision claim (recorded in each row as a claim; never used: the regime is "
        "observed).",
    ),
    verdict_window_s: float | None = typer.Option(
        None, "--verdict-window-s", help="Window of the running window verdict metric (default 86400 s)."
    ),
    new_chain: bool = typer.Option(
        False,
        "--new-chain",
        help="Start a new chain although the signing key exists (the old ledger was moved away on purpose).",
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
    json_out: options.Json = False,
    verbose: int = typer.Option(
        0, "--verbose", "-v", count=True, help="-v: also checkpoints and the running estimate each poll."
    ),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="Log warnings only (no per-workload lines)."),
) -> None:
    """Run the verification daemon. Detect workloads, estimate their FLOPs, sign them into the ledger, export metrics."""
    import logging

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
            "head_interval_s": head_interval_s,
            "duration_s": duration,
            "speed": speed,
            "idle_power_w": idle_power_w,
            "threshold_flops": threshold_flops,
            "dtype": dtype,
            "verdict_window_s": verdict_window_s,
            "new_chain": new_chain or None,
            "key_path": key,
            "keep_trace": keep_trace,
            "schedule": schedule,
            "seed": seed,
        },
        source="command line",
    )
    # Every option is checked here, before the ledger, the port or a sensor is touched.
    if config is not None:
        cfg.validate(str(config))
    else:  # every setting came from an option: name the option, as every other command does
        from flopwatch.errors import ConfigError

        try:
            cfg.validate()
        except ConfigError as e:
            raise ConfigError(e.detail, field=_FLAGS.get(str(e.field), e.field)) from None
    if cfg.duration_s is None and any(str(x).startswith("sim:") for x in cfg.sensors or ()):
        from flopwatch.errors import ConfigError

        # before the ledger and its key are created (the daemon would refuse it only after)
        raise ConfigError(
            "sim: sensors run on a virtual clock and need --duration (seconds of simulated time)",
            field="--duration",
        )
    mon = Monitor(cfg)
    if not quiet:
        # the first workload line comes only when a workload ends (≈ 10 s into the README's replay): say what
        # the daemon is doing meanwhile, so that a silent start does not read as a hang (issue 24); said once
        # the port, ledger and sensors are open, so that an error stays the only line
        mon.on_start = lambda: typer.echo(_start_line(cfg), err=True)
    res = mon.run()
    # Ctrl-C ends the session cleanly (ledger closed, summary below) and, as for every command, with status 130;
    # SIGTERM (systemd's stop) is the daemon's normal end: 0
    code = EXIT_INTERRUPTED if res.end_reason == "SIGINT" else 0
    if json_out:
        echo_json(
            {
                "session_id": res.session_id,
                "end_reason": res.end_reason,
                "ledger": str(cfg.ledger),
                "ledger_head": {"seq": res.ledger_head[0], "hash": res.ledger_head[1]},
                "workloads": res.workloads,
                "totals": res.totals,
            },
        )
    else:
        if res.workloads:
            _print_workloads(console(), res.workloads, "Workloads recorded this session")
        typer.echo(
            f"flopwatch monitor: {literal(res.end_reason)}; {len(res.workloads)} "
            f"workload{'' if len(res.workloads) == 1 else 's'} recorded in "
            f"{literal(cfg.ledger)} (last row {res.ledger_head[0]}:{res.ledger_head[1]})"
        )
    if code:
        raise typer.Exit(code)


def _start_line(cfg: Any) -> str:
    """One line on what the session does before its first workload ends."""
    sensors = [str(x) for x in cfg.sensors or ()]
    replays = [x.split(":", 1)[1] for x in sensors if x.startswith("replay:")]
    if replays:
        names = ", ".join(literal(Path(x).name) for x in replays)
        pace = "as fast as it reads" if not cfg.speed else f"at {cfg.speed:g}× its recorded speed"
        what = f"replaying {names} {pace}"
    elif any(x.startswith("sim:") for x in sensors):
        what = f"running the simulated {', '.join(literal(x) for x in sensors)} for {cfg.duration_s:g} s of virtual time"
    else:
        what = f"watching {', '.join(literal(x) for x in sensors) or 'the detected sensors'} (Ctrl-C to stop)"
    return f"flopwatch monitor: {what}; each workload is printed when it ends"


#: MonitorConfig setting → the option that sets it (for errors about options).
_FLAGS = {
    "sensors": "--sensor",
    "profile": "--profile",
    "ledger": "--ledger",
    "metrics_port": "--metrics-port",
    "metrics_addr": "--metrics-addr",
    "poll_s": "--poll-s",
    "sample_hz": "--sample-hz",
    "checkpoint_s": "--checkpoint-s",
    "head_interval_s": "--head-interval-s",
    "duration_s": "--duration",
    "speed": "--speed",
    "idle_power_w": "--idle-power-w",
    "threshold_flops": "--threshold",
    "dtype": "--precision",
    "verdict_window_s": "--verdict-window-s",
    "key_path": "--key",
    "keep_trace": "--keep-trace",
    "schedule": "--schedule",
    "seed": "--seed",
}


def register(app: typer.Typer) -> None:
    """Add this area's commands to ``app``."""
    app.command("monitor")(monitor_command)
    app.add_typer(ledger_app, name="ledger")
