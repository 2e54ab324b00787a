"""What a newcomer sees (issue 24, the newcomer's retrial): simulated sessions dated now and never in the future,
tables that fit an 80-column terminal, option errors that name the option, `run`'s verdict in three lines."""

from __future__ import annotations

import json
import time

import pytest
from rich.table import Table

from flopwatch.cli import main
from flopwatch.cli._output import console, print_fit


def _sched(tmp_path):
    p = tmp_path / "s.json"
    p.write_text(
        json.dumps(
            {
                "schedule": [
                    {"idle_s": 30},
                    {
                        "label": "w",
                        "flops_per_step": 2e12,
                        "bytes_per_step": 2e9,
                        "tokens_per_step": 8192,
                        "batch_size": 8,
                        "steps": 300,
                    },
                    {"idle_s": 30},
                ]
            }
        )
    )
    return p


def test_a_simulated_monitor_session_is_dated_to_end_now_never_in_2023_or_the_future(tmp_path, capsys):
    led = tmp_path / "l.db"
    before = time.time()
    args = ["monitor", "--sensor", "sim:a100", "--schedule", str(_sched(tmp_path)), "--ledger", str(led)]
    assert main([*args, "--duration", "200", "--idle-power-w", "60", "--json"]) == 0
    after = time.time()
    (w,) = json.loads(capsys.readouterr().out)["workloads"]
    # t = 0 is 200 s before the session started: every row lies between then and now
    assert before - 200 - 5 <= w["start_wall"] < w["end_wall"] <= after
    assert w["end_wall"] - w["start_wall"] == pytest.approx(w["duration_s"], abs=1.0)  # no clock jump


def test_a_sim_monitor_without_duration_is_refused_before_the_ledger_exists(tmp_path, capsys):
    led = tmp_path / "l.db"
    assert main(["monitor", "--sensor", "sim:a100", "--ledger", str(led)]) == 2
    err = capsys.readouterr().err
    assert "option '--duration'" in err and not led.exists() and not (tmp_path / "l.db.key").exists()


def test_monitor_option_errors_name_the_option(tmp_path, capsys):
    assert (
        main(["monitor", "--sensor", "replay:x.json", "--speed", "nan", "--ledger", str(tmp_path / "l")]) == 2
    )
    assert "option '--speed'" in capsys.readouterr().err


def test_a_wide_table_prints_as_blocks_in_80_columns_and_as_a_table_when_it_fits(monkeypatch, capsys):
    t = Table(title="Workloads")
    cols = ("device", "start (UTC)", "duration s", "net J", "estimate", "bounds", "verdict", "status")
    for c in cols:
        t.add_column(c)
    t.add_row(
        "jetson:VDD_CPU_GPU_CV",
        "2026-12-01 18:06:29",
        "525.0",
        "4117.1",
        "3.705e14",
        "[3e14, 9e15]",
        "below",
        "ok",
    )
    monkeypatch.setenv("COLUMNS", "80")  # asked for, even when piped
    print_fit(console(), t)
    out = capsys.readouterr().out
    assert max(len(x) for x in out.splitlines()) <= 80
    assert "  device" in out and "jetson:VDD_CPU_GPU_CV" in out and "[3e14, 9e15]" in out  # nothing cut
    monkeypatch.setenv("COLUMNS", "160")
    print_fit(console(), t)
    out = capsys.readouterr().out
    assert "┃ device" in out and "jetson:VDD_CPU_GPU_CV" in out  # one line per row


def test_run_prints_its_verdict_in_three_short_lines(tmp_path, capsys):
    assert main(["run", "--quick", "--splits", "20", "-o", str(tmp_path / "o")]) == 0
    out = capsys.readouterr().out
    head = json.loads((tmp_path / "o" / "summary.json").read_text())["headline"]
    assert set(head["brief"]) == {"accuracy", "verdicts", "interval"}
    assert "verdict (simulated):" in out
    for k in ("accuracy", "verdicts", "interval"):
        assert f"  {k} " in out
    assert "wrong below in" in head["brief"]["verdicts"]
