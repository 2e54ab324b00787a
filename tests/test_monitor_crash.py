"""Crash safety of the daemon: kill -9 during a workload and restart; SIGTERM closes the workload cleanly."""

from __future__ import annotations

import re
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from flopwatch.cli import main
from flopwatch.monitor.ledger import read_entries, verify_ledger
from monitor_helpers import (  # noqa: F401 - private_tmp: autouse, temporary files under tmp_path
    P_BUSY_W,
    busy_fn,
    private_tmp,
    write_trace,
)

CLI = "import sys; from flopwatch.cli import main; sys.exit(main())"
CHECKPOINT_S = 5.0
SAMPLE_HZ = 2.0
SPEED = 20.0
POLL_RE = re.compile(r"reading (\S+) t=(\S+) energy_j=(\S+) net_energy_j=(\S+)")

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="POSIX signals")


def _start(trace: Path, ledger: Path, log: Path, *extra: str) -> subprocess.Popen:
    args = [sys.executable, "-c", CLI, "monitor", "--sensor", f"replay:{trace}", "--speed", str(SPEED),
            "--ledger", str(ledger), "--idle-power-w", "50", "--checkpoint-s", str(CHECKPOINT_S),
            "--sample-hz", str(SAMPLE_HZ), "-vv", *extra]  # fmt: skip
    return subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=log.open("w"))


def _checkpoints(ledger: Path) -> list[dict]:
    """Checkpoint payloads written so far (read-only, concurrently with the daemon)."""
    if not ledger.exists():
        return []
    try:
        con = sqlite3.connect(f"file:{ledger}?mode=ro", uri=True, timeout=1.0)
        rows = con.execute("SELECT payload FROM entries WHERE kind='checkpoint' ORDER BY seq").fetchall()
        con.close()
    except sqlite3.OperationalError:  # the daemon is creating the file
        return []
    import json

    return [json.loads(r[0]) for r in rows]


def _wait_in_workload(proc: subprocess.Popen, ledger: Path, n_after: int, timeout_s: float = 60.0) -> None:
    """Bounded wait until ``n_after`` interval checkpoints were written while a workload was open."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        assert proc.poll() is None, "daemon exited early"
        cps = [c for c in _checkpoints(ledger) if any(d.get("open_workload") for d in c["devices"].values())]
        if sum(c["reason"] == "interval" for c in cps) >= n_after:
            return
        time.sleep(0.05)
    proc.kill()
    pytest.fail("no open workload checkpoints within the time limit")


def _last_poll(log: Path) -> tuple[float, float]:
    polls = [POLL_RE.search(line) for line in log.read_text().splitlines()]
    m = [p for p in polls if p][-1]
    return float(m.group(2)), float(m.group(3))


def test_kill_9_during_a_workload_then_restart(tmp_path):
    trace = write_trace(tmp_path / "t.parquet", t_total=400, busy=busy_fn([(10, 390)]))
    ledger, log = tmp_path / "ledger.db", tmp_path / "run1.log"
    proc = _start(trace, ledger, log)
    try:
        _wait_in_workload(proc, ledger, n_after=3)
        time.sleep(0.1)  # land somewhere between two checkpoints
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=10)
    assert proc.returncode == -signal.SIGKILL

    # What the killed daemon knew last (its per-poll log) vs what it had checkpointed.
    t_log, e_log = _last_poll(log)
    last_cp = _checkpoints(ledger)[-1]
    dev, cp_tot = next(iter(last_cp["devices"].items()))
    open_w = cp_tot["open_workload"]
    assert open_w is not None
    lost_s = t_log - cp_tot["t_s"]
    lost_j = e_log - cp_tot["energy_j"]
    print(
        f"kill -9 at t≈{t_log:.1f} s: last checkpoint t={cp_tot['t_s']:.1f} s, lost {lost_s:.1f} s / {lost_j:.0f} J"
    )
    # At most one checkpoint interval (+ one sample period: checkpoints fall on readings).
    assert -1e-9 <= lost_s <= CHECKPOINT_S + 1 / SAMPLE_HZ
    assert lost_j <= P_BUSY_W * (CHECKPOINT_S + 1 / SAMPLE_HZ)

    # Restart briefly on the same ledger.
    log2 = tmp_path / "run2.log"
    proc2 = _start(trace, ledger, log2, "--duration", "3")
    assert proc2.wait(timeout=60) == 0, log2.read_text()

    assert main(["ledger", "verify", str(ledger)]) == 0
    rows = read_entries(ledger)
    workloads = [r.payload for r in rows if r.kind == "workload"]
    assert len(workloads) == 1
    w = workloads[0]
    assert w["status"] == "interrupted" and w["workload_id"] == open_w["workload_id"]
    assert w["duration_s"] == pytest.approx(open_w["duration_s"]) and w["duration_s"] > 10
    assert w["net_energy_j"] == pytest.approx(open_w["net_energy_j"])
    (rec,) = [r.payload for r in rows if r.kind == "recovery"]
    assert rec["interrupted_workloads"] == [w["workload_id"]]
    # Totals continue from the last checkpoint: nothing before it was lost.
    final = [r.payload for r in rows if r.kind == "checkpoint"][-1]["devices"][dev]
    assert final["energy_j"] >= cp_tot["energy_j"]
    assert final["energy_j"] - cp_tot["energy_j"] == pytest.approx(3 * 50, rel=0.35)  # 3 s of idle at 50 W
    assert final["workloads"] == 1
    assert verify_ledger(ledger).ok


def test_sigterm_closes_the_open_workload_as_interrupted(tmp_path):
    trace = write_trace(tmp_path / "t.parquet", t_total=400, busy=busy_fn([(10, 390)]))
    ledger, log = tmp_path / "ledger.db", tmp_path / "run.log"
    proc = _start(trace, ledger, log)
    try:
        _wait_in_workload(proc, ledger, n_after=2)
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 0, log.read_text()
    finally:
        if proc.poll() is None:
            proc.kill()
    t_log, e_log = _last_poll(log)
    rows = read_entries(ledger)
    assert [r.kind for r in rows][-2:] == ["checkpoint", "stop"]
    assert rows[-1].payload["reason"] == "SIGTERM"
    (w,) = [r.payload for r in rows if r.kind == "workload"]
    assert w["status"] == "interrupted" and w["end_t_s"] >= t_log - 1.0
    final = rows[-2].payload["devices"][w["device"]]
    assert final["energy_j"] >= e_log - 1e-3  # flushed: nothing lost on a clean stop (log rounds to 1e-4)
    assert verify_ledger(ledger).ok


def test_restart_counts_a_workload_row_written_after_the_last_checkpoint(tmp_path):
    """Crash between a workload row and the checkpoint that follows it: the row is counted once, in totals
    too, and not recorded a second time as interrupted."""
    from flopwatch.monitor.config import MonitorConfig
    from flopwatch.monitor.daemon import Monitor
    from flopwatch.monitor.ledger import Ledger
    from flopwatch.monitor.totals import Totals
    from flopwatch.telemetry.sensors.base import VirtualClock
    from flopwatch.telemetry.sensors.replay import open_replay
    from monitor_helpers import LinearProfile

    dev, wid = "synthetic:0", "old/synthetic:0/10.000"
    led_path = tmp_path / "ledger.db"
    with Ledger(led_path) as led:
        led.append("start", {"session_id": "old"})
        open_w = {"workload_id": wid, "start_t_s": 10.0, "duration_s": 30.0, "net_energy_j": 6000.0}
        cp = dict(
            Totals(energy_j=9000.0, busy_net_energy_j=6000.0, busy_s=30.0).derived(), open_workload=open_w
        )
        led.append("checkpoint", {"session_id": "old", "devices": {dev: cp}})
        led.append("workload", {"workload_id": wid, "device": dev, "net_energy_j": 8000.0, "duration_s": 40.0,
                                "status": "complete"})  # fmt: skip
    trace = write_trace(tmp_path / "t.parquet", t_total=20, busy=busy_fn([]))
    cfg = MonitorConfig(sensors=["replay:(given)"], ledger=led_path)
    res = Monitor(cfg, sensors=open_replay(trace, clock=VirtualClock()), profile=LinearProfile()).run()
    tot = res.totals[dev]
    assert tot["workloads"] == 1 and tot["workload_net_energy_j"] == 8000.0 and tot["workload_s"] == 40.0
    rows = read_entries(led_path)
    assert [r.payload["status"] for r in rows if r.kind == "workload"] == ["complete"]
    (rec,) = [r.payload for r in rows if r.kind == "recovery"]
    assert rec["interrupted_workloads"] == []
    assert verify_ledger(led_path).ok
