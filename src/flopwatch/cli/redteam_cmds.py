"""CLI: ``flopwatch redteam`` — the attack suite (docs/redteam.md, docs/threat-model.md).

Domain logic lives in :mod:`flopwatch.redteam`; this module parses options and prints. The one error the suite
counts is called **wrong below** (a run above the threshold that the verifier cleared) everywhere in its output; an
honest run judged "above" is **wrongly accused** (the JSON key stays ``false_above``).
"""

from __future__ import annotations

import math
import re
from pathlib import Path
from typing import Any

import typer

from flopwatch.cli import options
from flopwatch.cli._output import console, echo_json, print_fit, styled
from flopwatch.errors import InputError


def _range(v: list[float | None] | None) -> str:
    """A ratio range as "lo–hi" (also for ``flopwatch verdict``): "–" if none, ∞ for an open upper end."""
    if not v:
        return "–"
    lo, hi = v
    if lo is None or not math.isfinite(lo):
        return "unbounded"
    if hi is None or not math.isfinite(hi):
        return f"{lo:.2f}–∞"
    return f"{lo:.2f}–{hi:.2f}" if not math.isclose(lo, hi) else f"{lo:.2f}"


def _counts(c: dict[str, int]) -> str:
    return " ".join(f"{k} {v}" for k, v in c.items() if v)


def _summary(con: Any, d: dict[str, Any]) -> None:
    """The lines a reader needs (families held, wrong below, wrongly accused, decided at): printed first and
    repeated after the tables, so both ``| head`` and ``| tail`` show them."""
    con.print(
        f"families: {d['n_families']} ({d['families_held']} held"
        + (f", BROKEN: {', '.join(d['families_broken'])}" if d["families_broken"] else "")
        + f"); wrong below: {d['wrong_below']} ({d['wrong_below_at_0_8']} at 0.8 × truth, "
        f"{d['wrong_below_at_best_threshold']} at the evader's best threshold)"
    )
    con.print(
        f"before sound bounds: {d['wrong_below_before']} wrong below; runs whose truth exceeds the upper bound: "
        f"{d['upper_bound_violations']} ({d['upper_bound_violations_unwarned']} without a warning)"
    )
    if d["honest"]:
        con.print(
            f"honest runs: {len(d['honest'])}; wrongly accused ('above' at T = truth): {d['false_above']}; "
            f"decided correctly at 0.5 × truth {d['honest_decisive_pct_at_half']:.1f} %, "
            f"at 2 × truth {d['honest_decisive_pct_at_double']:.1f} %"
        )


def redteam_cmd(
    quick: bool = typer.Option(False, "--quick", help="One configuration per family and device (CI)."),
    seed: int = typer.Option(
        0,
        "--seed",
        help="Offset of the simulated sessions' seeds.",
        callback=options.count(ge=0, le=2**31 - 1),
    ),
    data: Path | None = typer.Option(
        None, "--data", help="Folder holding jetson_flop_estimator/ (default ../shared/data)."
    ),
    family: list[str] | None = typer.Option(
        None,
        "--family",
        metavar="<family>",
        help="Run only this family (its key; repeatable). Default: every family.",
    ),
    as_json: options.Json = False,
) -> None:
    """Run every attack family against the verifier. See docs/redteam.md and docs/threat-model.md; each is
    judged with itself left out of calibration, at T = 0.8 × truth and at the evader's best threshold."""
    from flopwatch.redteam import run_suite
    from flopwatch.redteam.families import FAMILY_BY_KEY

    if seed < 0:
        raise InputError(f"must be >= 0, got {seed}", field="--seed")
    for k in family or ():
        if k not in FAMILY_BY_KEY:
            raise InputError(
                f"unknown family {k!r}; known: {', '.join(sorted(FAMILY_BY_KEY))}", field="--family"
            )
    d: dict[str, Any] = run_suite(quick=quick, seed=seed, data_root=data, families=family or None).to_dict()
    if as_json:
        echo_json(d)
        return
    from rich.table import Table

    con = console()
    _summary(con, d)
    con.print()
    t = Table(
        title="red team: each family judged at T = 0.8 × truth and at the evader's best threshold "
        "(just above the upper bound); a cleared run above T is a 'wrong below'"
    )
    for col in (
        "family",
        "devices",
        "n",
        "status",
        "wrong below",
        "verdicts at 0.8",
        "upper ÷ truth",
        "defence",
    ):
        t.add_column(col, justify="right" if col in ("n", "wrong below", "upper ÷ truth") else "left")
    for f in d["by_family"]:
        sim = " SIM" if f["simulated"] else ""
        status = f["status"]
        t.add_row(
            f"{f['name']} [{f['key']}]",
            ", ".join(f["devices_run"]) + sim,
            str(f["n"]),
            styled(status, "bold red") if status == "BROKEN" else status,
            f"{f['wrong_below']} ({f['wrong_below_at_0_8']} at 0.8, {f['wrong_below_at_best_threshold']} at best)",
            _counts(f["verdicts"]),
            _range(f["upper_over_truth"]),
            f["defence"] if f["defence"] == "defended" else f"{f['defence']}: {f['needs']}",
        )
    print_fit(con, t)
    n_h = len(d["honest"])
    if n_h:
        dt = Table(
            title="decisive at (median T ÷ truth at which an honest run is 'below'), per observable set"
        )
        for col in ("device", "precision", "observables", "n", "median", "decided"):
            dt.add_column(col)
        for r in d["decisive_at"]:
            m = r["median_decisive_at"]
            dt.add_row(
                r["device"],
                r["dtype"],
                r["observables"],
                str(r["n"]),
                "never" if m is None or not math.isfinite(m) else f"× {m:.2f}",
                f"{r['decided_pct']:.0f} %",
            )
        print_fit(con, dt)
        for line in _never_lines(d["honest"]):  # why "never": the warning that blocks "below" at any T
            con.print(line, markup=False)
    con.print()
    _summary(con, d)
    con.print(
        "SIM: simulated digital twins (flopwatch.sim), not measurements; real: the Jetson Orin Nano v2 records "
        "(Fowler 2026). Statuses and what each defence rests on: docs/threat-model.md"
    )
    for s in d["skipped"]:
        con.print(f"skipped: {s}")
    con.print(f"took {d['timing_s']:.1f} s")


def _never_lines(honest: list[dict[str, Any]]) -> list[str]:
    """One line per device and blocking warning of the honest runs that are never "below" (the numbers in a
    warning, a sampling rate, vary per run: the device's first run's words stand for the group)."""
    groups: dict[tuple[str, str], list[str]] = {}
    for h in honest:
        if h.get("blocked_by"):
            key = (h["device"], re.sub(r"[0-9][0-9.e+-]*", "#", h["blocked_by"]))
            groups.setdefault(key, []).append(h["blocked_by"])
    n_dev = {d: sum(h["device"] == d for h in honest) for d, _ in groups}
    return [f"never on {d} ({len(ws)} of {n_dev[d]} runs): {ws[0]}" for (d, _), ws in groups.items()]


def register(app: typer.Typer) -> None:
    """Add ``redteam`` to ``app``."""
    app.command("redteam")(redteam_cmd)
