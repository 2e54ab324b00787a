"""CLI: ``flopwatch verdict`` (window verdicts over a ledger).

Domain logic lives in :mod:`flopwatch.evaluate.window`; this module parses options and prints.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import typer

from flopwatch.cli import options
from flopwatch.cli._output import console, counted, echo_json, fmt_flops, print_fit, styled
from flopwatch.cli.redteam_cmds import redteam_cmd
from flopwatch.errors import InputError


def verdict_cmd(
    ledgers: list[Path] = typer.Argument(
        ...,
        metavar="LEDGER...",
        help="Monitor ledger(s) (SQLite) to read, one per node of the job; never written.",
    ),
    threshold: str = typer.Option(..., "--threshold", help="Compute threshold in FLOP (e.g. 1e14)."),
    window: str = typer.Option(
        "all",
        "--window",
        help="Window ending at the last entry (placed by the witness's clock with --witness): 24h, 7d, 90m, … "
        "or all.",
    ),
    by: str = typer.Option("all", "--by", help="Group by device, job or all (all: the job across nodes)."),
    profile: Path | None = typer.Option(
        None,
        "--profile",
        "-p",
        help="Recompute each row's sound bounds from its observables with this profile.",
    ),
    device: options.DeviceModel = None,
    public_key: list[Path] | None = typer.Option(
        None,
        "--public-key",
        metavar="<pin>",
        help="Pin to verify a ledger against (`ledger export-key`), one per ledger in their order; default: "
        "LEDGER.pub, else the genesis key.",
    ),
    witness: list[Path] | None = typer.Option(
        None,
        "--witness",
        metavar="<heads.jsonl>",
        help="Witness log (`ledger witness`) per ledger, in their order: heads checked as prefixes, and the "
        "windows placed by the witness's clock rather than the node's.",
    ),
    as_json: options.Json = False,
) -> None:
    """Judge a window of one or several ledgers as a whole. Chunks, bursts and the nodes of one job
    included. Each ledger is verified first, as `ledger verify` does, against its own pin
    and witness log: a ledger that fails is judged, but never "below"."""
    import time

    from flopwatch.evaluate.window import ledger_window_verdicts, parse_window
    from flopwatch.monitor.ledger import read_entries, verify_ledger
    from flopwatch.monitor.nodes import (
        NodeRows,
        clock_jumps,
        context_of,
        judge_contexts,
        merge_nodes,
        namespace,
        place_by_witness,
    )
    from flopwatch.monitor.witness import read_log

    thr = options.flop_count(threshold, "--threshold")
    win = parse_window(window)
    pins = list(public_key or [])
    logs = list(witness or [])
    for name, given in (("--public-key", pins), ("--witness", logs)):
        if given and len(given) != len(ledgers):
            raise InputError(
                f"give one per ledger ({len(ledgers)}), in the ledgers' order; got {len(given)}", field=name
            )
    for p in ledgers:
        if not p.is_file():
            raise InputError("not found (expected a flopwatch ledger)", file=str(p))
    prof = None
    if profile is not None:
        from flopwatch.estimate.profile import Profile

        prof = Profile.load(profile)
    multi = len(ledgers) > 1
    stems = [p.name for p in ledgers]
    labels = [s if stems.count(s) == 1 else f"{s}#{i + 1}" for i, s in enumerate(stems)]
    now = time.time()  # the verifier's clock bounds rows no witness has seen yet
    nodes: list[NodeRows] = []
    checks = []
    blockers: list[str] = []
    node_docs: list[dict[str, Any]] = []
    for i, path in enumerate(ledgers):
        heads = read_log(logs[i]) if logs else None
        # rows that fail their hashes, signatures, chain links or witnessed heads are not evidence of anything
        check = verify_ledger(path, pins[i] if pins else None, witness=heads)
        bad = next((pr for pr in check.problems if pr.kind == "not-a-ledger"), None)
        if bad is not None:
            raise InputError(bad.message, file=str(path))
        checks.append(check)
        who = f"{labels[i]}: " if multi else ""
        node = NodeRows(labels[i], read_entries(str(path)))
        if not check.ok:
            first = check.problems[0].line() if check.problems else "?"
            node.blockers.append(
                f"{who}the ledger fails verification ({counted(len(check.problems), 'problem')}, first: {first}): run "
                "`flopwatch ledger verify`"
            )
        node.blockers.extend(who + b for b in clock_jumps(node.entries))
        # evidence counts only up to the last head a verifier has seen (issue 23): rows no witnessed head covers,
        # and their times, are the word of whoever holds the node's key (rows dropped or re-timed go unseen)
        if heads is None:
            node.blockers.append(
                f"{who}no witness log (--witness HEADS.jsonl): the rows and their times are the node's word, "
                "which its key holder could have rewritten"
            )
        elif check.ok and check.witnessed_size < check.n_rows:
            node.blockers.append(
                f"{who}rows {check.witnessed_size + 1}..{check.n_rows} come after the newest witnessed head: "
                "run `flopwatch ledger witness` before judging"
            )
        # every row judged in the verifier's context (its profile, its device table, a real sensor): a
        # difference is a named warning on the row, never "below"
        node.entries = judge_contexts(
            node.entries, profile_sha256=prof.sha256() if prof is not None else None, device=device
        )
        if heads is not None:
            good = [h for h in heads if h.head.size <= check.witnessed_size]
            node.entries, notes = place_by_witness(node.entries, good, now)
            node.warnings.extend(who + n for n in notes)
        if multi:
            node.entries = namespace(node.entries, labels[i])
            # gaps and clock steps are judged per node (another node's checkpoints must not fill them)
            alone = ledger_window_verdicts(
                node.entries, source=str(path), threshold_flops=thr, window_s=win, by="all", device=device
            )
            node.blockers.extend(
                f"{who}{w}"
                for w in alone["total"]["warnings"]
                if any(k in w for k in ("were not observed", "goes backwards", "no checkpoint in the ledger"))
            )
        blockers.extend(node.blockers)
        nodes.append(node)
        node_docs.append(
            {
                "ledger": str(path),
                "node": labels[i],
                "ok": check.ok,
                "problems": len(check.problems),
                "key_source": check.key_source,
                "witness_heads": check.witness_heads,
                "witnessed_rows": check.witnessed_size,
                "rows": check.n_rows,
                "context": context_of(node.entries),
            }
        )
    res = ledger_window_verdicts(
        merge_nodes(nodes),
        source=", ".join(str(p) for p in ledgers),
        threshold_flops=thr,
        window_s=win,
        by=by,
        profile=prof,
        device=device,
        blockers=blockers,
        node_labels=labels if multi else (),
    )
    res["warnings"] = [w for n in nodes for w in n.warnings] + list(res["warnings"])
    res["verification"] = {
        "ok": all(c.ok for c in checks),
        "problems": sum(len(c.problems) for c in checks),
        "key_source": "; ".join(c.key_source for c in checks),
        "warnings": [
            (f"{labels[i]}: " if multi else "") + w for i, c in enumerate(checks) for w in c.warnings
        ],
        "nodes": node_docs,
    }
    if as_json:
        echo_json(res)
        return
    from rich.table import Table

    con = console()
    scope = "the whole ledger" if window == "all" else f"the last {window}"
    t = Table(
        title=f"window verdicts vs {fmt_flops(thr)} FLOP over {scope}" + ("" if by == "all" else f", by {by}")
    )
    for col in ("group", "workloads", "estimate", "lower", "upper", "outside workloads J", "verdict"):
        t.add_column(col, justify="left" if col in ("group", "verdict") else "right")
    for g in res["groups"] + ([res["total"]] if by != "all" else []):
        t.add_row(
            g["key"],
            str(g["n_workloads"]),
            fmt_flops(g["estimate_flops"]),
            fmt_flops(g["lower_flops"]),
            "unbounded" if g["upper_flops"] is None else fmt_flops(g["upper_flops"]),
            f"{g['unattributed_net_energy_j']:.4g}",
            g["verdict"],
        )
    print_fit(con, t)
    v = res["verification"]
    con.print(
        f"ledger verification: {'OK' if v['ok'] else 'FAILED'} ({counted(v['problems'], 'problem')}; key {v['key_source']})"
    )
    if multi or logs:
        for n in v["nodes"]:
            con.print(
                f"  {n['node']}: {'OK' if n['ok'] else 'FAILED'}, {counted(n['rows'], 'row')}, "
                f"{n['witnessed_rows']} witnessed ({counted(n['witness_heads'], 'head')} in its log)",
                markup=False,
            )
    for w in v["warnings"] + res["warnings"] + res["total"]["warnings"]:
        con.print(styled("warning: ", "yellow"), w, sep="")
    for n in res["notes"]:  # how the bounds were taken (rows naming no sensor …): not only in --json
        con.print(f"note: {n}", markup=False)


def register(app: typer.Typer) -> None:
    """Add ``verdict`` and ``redteam`` to ``app``."""
    app.command("verdict")(verdict_cmd)
    app.command("redteam")(redteam_cmd)
