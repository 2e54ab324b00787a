"""The newcomer retrial's output defects (issue 24, retrial at 5cfc84d): narrow tables, trailing spaces, the red
team's summary first, ledger vocabulary, help summaries, the report's precision and phone hint."""

from __future__ import annotations

import io
import re
from pathlib import Path

import pytest
import typer

from flopwatch.cli import app, main
from monitor_helpers import busy_fn, private_tmp, write_trace  # noqa: F401 - private_tmp: autouse fixture


# ------------------------------------------------------------------ defect 7: no trailing spaces when piped
def test_rstrip_lines_drops_trailing_spaces_across_partial_writes() -> None:
    from flopwatch.cli._output import RstripLines

    buf = io.StringIO()
    w = RstripLines(buf)
    for part in ("a  ", "  b   \nc ", "\n  d", "   ", "e \n", "tail   "):
        w.write(part)
    # spaces inside a line survive, even when split over writes; those before a newline go
    assert buf.getvalue() == "a    b\nc\n  d   e\ntail"
    assert not w.isatty()


def test_piped_console_tables_have_no_trailing_spaces(capsys: pytest.CaptureFixture[str]) -> None:
    from rich.table import Table

    from flopwatch.cli._output import console, print_fit

    t = Table(title="t")
    for c in ("name", "value"):
        t.add_column(c)
    t.add_row("a", "1")
    t.add_row("a much longer name", "22")
    con = console()
    print_fit(con, t)
    con.print("x", "y", end="   \n")
    out = capsys.readouterr().out
    lines = out.splitlines()
    assert "a much longer name" in out and lines[-1] == "x y"
    assert [ln for ln in lines if ln.endswith(" ")] == []


def test_redteam_prints_its_summary_first_and_last(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["redteam", "--quick", "--family", "mixed-fp32-bf16"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("families: 1 (1 held); wrong below: 0 (0 at 0.8 × truth")
    assert lines[1].startswith("before sound bounds: ") and "without a warning" in lines[1]
    honest = [i for i, ln in enumerate(lines) if ln.startswith("honest runs: ")]
    fam = [i for i, ln in enumerate(lines) if ln.startswith("families: ")]
    assert len(fam) == 2 and fam[1] > len(lines) // 2  # repeated after the tables, for `| tail`
    assert len(honest) in (0, 2)
    assert [ln for ln in lines if ln.endswith(" ")] == []


# ------------------------------------------------------------------ defect 4: powermodel tables at 80 columns
@pytest.mark.parametrize("cmd", ["evaluate", "reproduce"])
def test_powermodel_tables_are_whole_at_80_columns(
    cmd: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COLUMNS", "80")
    assert main(["powermodel", cmd]) == 0
    out = capsys.readouterr().out
    assert "…" not in out  # no cell cut to "10.…" or "dty…"
    assert max(len(ln) for ln in out.splitlines()) <= 80
    assert ("cell k-fold" if cmd == "evaluate" else "MAPE 95 % CI") in out


# ------------------------------------------------------------------ defect 12: help summaries
def _commands(cmd: object, path: str = "") -> list[tuple[str, object]]:
    out = []
    for name, sub in getattr(cmd, "commands", {}).items():
        out.append((f"{path} {name}".strip(), sub))
        out += _commands(sub, f"{path} {name}")
    return out


def test_every_help_summary_is_a_whole_sentence_at_80_columns() -> None:
    skip: set[str] = set()
    cut = []
    for name, sub in _commands(typer.main.get_command(app)):
        if name in skip:
            continue
        # click's limit at 80 columns: 78 - 6 - the longest command name of the group (≤ 11)
        short = sub.get_short_help_str(limit=78 - 6 - 11)  # type: ignore[attr-defined]
        if short.endswith("...") or not short.endswith("."):
            cut.append(f"{name}: {short}")
    assert cut == []


# ------------------------------------------------------------------ defect 6: ledger vocabulary
def test_last_row_and_signed_tree_head_are_named_apart(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    trace = write_trace(tmp_path / "t.parquet", t_total=60, busy=busy_fn([(5, 30)]))
    led = tmp_path / "l.db"
    rc = main(["monitor", "--sensor", f"replay:{trace}", "--speed", "200", "--ledger", str(led),
               "--idle-power-w", "50", "-q"])  # fmt: skip
    mon = capsys.readouterr().out
    assert rc == 0
    last = re.search(r"\(last row (\d+):([0-9a-f]{64})\)", mon)
    assert last is not None and "(head " not in mon
    # the session's rows are numbered as the ledger numbers them: the table, the warnings and `ledger show`
    assert main(["ledger", "show", str(led), "--json"]) == 0
    import json

    seqs = [w["seq"] for w in json.loads(capsys.readouterr().out)["workloads"]]
    assert len(seqs) == 1
    assert re.search(rf"\brow\b\s+{seqs[0]}\b", mon) or re.search(rf"^\s*{seqs[0]}\s+│", mon, re.M)
    warned = re.findall(r"\(rows? ([^)]*)\)$", mon, re.M)
    assert warned and all(w == str(seqs[0]) for w in warned) and "#1" not in mon
    assert main(["ledger", "verify", str(led)]) == 0
    ver = capsys.readouterr().out
    assert f"last row {last.group(1)}:{last.group(2)};" in ver
    assert main(["ledger", "head", str(led)]) == 0
    head = capsys.readouterr().out
    assert "signed tree head: size " in head and "Merkle root " in head and last.group(2) not in head
    assert main(["ledger", "head", str(led), "--json"]) == 0  # JSON keys unchanged
    assert {"size", "root", "time", "signature", "key_id"} <= set(json.loads(capsys.readouterr().out))
    # the window verdict's table is whole at 80 columns ("outside-wo…" was cut)
    monkeypatch.setenv("COLUMNS", "80")
    assert main(["verdict", str(led), "--threshold", "1e15"]) == 0
    out = capsys.readouterr().out
    assert "outside workloads J" in out and "…" not in out


def test_workload_table_has_no_unpadded_edge() -> None:
    from flopwatch.cli._output import console
    from flopwatch.cli.monitor_cmds import _workload_table

    row = {"seq": 23, "device": "jetson:VDD_CPU_GPU_CV", "start_wall": 1.8e9, "duration_s": 525.0,
           "net_energy_j": 4117.1, "estimate_flops": 3.705e14, "lower_flops": 3.036e14, "upper_flops": 8.767e15,
           "verdict": "n/a", "regime": "calibrated", "status": "complete", "coverage": 1.0}  # fmt: skip
    con = console()
    with con.capture() as cap:
        con.print(_workload_table([row], "ledger"), width=160)
    lines = cap.get().splitlines()
    assert any(ln.startswith(" row ┃ device") for ln in lines)
    assert not any(re.match(r"^[┃│]\S", ln) for ln in lines)


# ------------------------------------------------------------------ defect 9: the report
def test_gain_is_rounded_to_what_its_spread_supports() -> None:
    from flopwatch.report.fmt import gain_pp, ratio, within

    assert gain_pp({"mean_pp": -0.0267, "p025": -0.9, "p975": 0.9}) == ("0.0", "-0.9", "+0.9")
    assert gain_pp({"mean_pp": 1.234, "p025": 0.3, "p975": 2.1}) == ("+1.2", "+0.3", "+2.1")
    assert within(12.345, 4.0) == "12" and within(12.345, 40.0) == "10"
    assert within(0.5, float("nan")) == "0.500"  # no spread: three significant digits
    assert ratio(0.0380) == "0.038" and ratio(2.87) == "2.87" and ratio(2.80) == "2.8"


def test_headline_words_carry_no_false_precision() -> None:
    from flopwatch.report.headline import _gain_words

    words = _gain_words({"mean_pp": -0.0267, "p025": -0.9, "p975": 0.85})
    assert "-0.0267" not in words and "by 0.0 pp" in words


def test_phone_hint_sits_above_wide_tables_only() -> None:
    from flopwatch.report.html import _table

    narrow = _table("<tr><th class='l'>a</th><th>b</th></tr>", ["<tr><td class='l'>x</td><td>1.0</td></tr>"])
    head = "".join(f"<th>column {i}</th>" for i in range(8))
    wide = _table(f"<tr>{head}</tr>", ["<tr>" + "<td>12.3 %</td>" * 8 + "</tr>"])
    assert "hint" not in narrow
    assert wide.startswith("<p class='hint'>") and wide.index("hint") < wide.index("<table>")
    # a five-column table that fits a phone gets no hint (the old rule counted columns alone)
    five = _table("<tr>" + "<th>n</th>" * 5 + "</tr>", ["<tr>" + "<td>1</td>" * 5 + "</tr>"])
    assert "hint" not in five
