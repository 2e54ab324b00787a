"""Hostile inputs, round 3 (issue 25), the ledger's findings — each reproduces the finding first:

* the one-writer lock through an alias: a second monitor on a symlink or a hard link to the ledger wrote too;
* read-only verifiers: an intact ledger in a directory the verifier cannot write was called TAMPERED;
* a crash on first start: kill -9 after the key was created and before the genesis row committed left a state
  the daemon could not restart from;
* a renamed ledger: the ledger and its WAL renamed away while the daemon ran went unnoticed.
"""

from __future__ import annotations

import hashlib
import os
import signal
import sqlite3
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest

from flopwatch.cli import main
from flopwatch.errors import LedgerError
from flopwatch.monitor.ledger import Ledger, LedgerLocked, read_entries, verify_ledger

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="POSIX locks and signals")

SRC = str(Path(__file__).resolve().parents[2] / "src")


def _workload(i: int) -> dict:
    return {"device": "gpu0", "start_wall": 1.7e9 + i, "end_wall": 1.7e9 + i + 1, "net_energy_j": 10.0 + i}


def _ledger(path: Path, rows: int = 3) -> Path:
    with Ledger(path) as led:
        for i in range(rows):
            led.append("workload", _workload(i))
        led.sign_head()
    return path


# ------------------------------------------------------------------------------------------ one writer
@pytest.mark.parametrize("alias", ["symlink", "hardlink"])
def test_a_second_monitor_through_an_alias_refuses_with_one_line(tmp_path: Path, alias: str, capsys) -> None:
    real = _ledger(tmp_path / "ledger.db")
    other = tmp_path / "other.db"
    if alias == "symlink":
        other.symlink_to(real)
    else:
        os.link(real, other)
    with Ledger(real) as first:
        n = len(read_entries(real))
        with pytest.raises(LedgerLocked, match="one writer at a time"):
            Ledger(other, key_path=tmp_path / "ledger.db.key")
        # and the daemon, as the CLI runs it: one line, a failure exit, nothing written
        code = main(["monitor", "--sensor", "sim:a100", "--duration", "5", "--ledger", str(other),
                     "--key", str(tmp_path / "ledger.db.key"), "-q"])  # fmt: skip
        err = capsys.readouterr().err.strip().splitlines()
        assert code != 0
        assert len(err) == 1 and "one writer at a time" in err[0]
        first.append("workload", _workload(9))
    assert len(read_entries(real)) == n + 1
    assert verify_ledger(real).ok


# ------------------------------------------------------------------------------------------ read-only
def _unwritable(d: Path) -> None:
    """Make ``d`` a place the verifier cannot write.

    Not root: the directory loses its write bits, exactly the finding. As root (write bits do not bind root,
    and the test must not touch anything outside tmp_path), the same failure SQLite met is produced directly:
    the ``-shm`` file it needs cannot be created because a directory holds its name; the write bits go too.
    """
    db = d / "ledger.db"
    if os.geteuid() == 0:
        shm = Path(f"{db}-shm")
        shm.unlink(missing_ok=True)  # a killed writer's index: rebuilt from the WAL by any reader
        shm.mkdir()
    d.chmod(stat.S_IRUSR | stat.S_IXUSR | stat.S_IRGRP | stat.S_IXGRP | stat.S_IROTH | stat.S_IXOTH)


def _kill_mid_write(db: Path, rows: int) -> None:
    """A writer killed with its rows committed in the WAL only (no checkpoint folded them into the file)."""
    code = (
        "import os, signal, sys; from flopwatch.monitor.ledger import Ledger; "
        "led = Ledger(sys.argv[1]); led._con.execute('PRAGMA wal_autocheckpoint=0'); "
        f"[led.append('workload', {{'i': i}}) for i in range({rows})]; led.sign_head(); "
        "os.kill(os.getpid(), signal.SIGKILL)"
    )
    subprocess.run([sys.executable, "-c", code, str(db)], env={**os.environ, "PYTHONPATH": SRC}, timeout=60)


@pytest.mark.parametrize("wal", [False, True], ids=["closed", "killed-with-wal"])
def test_a_verifier_without_write_access_never_calls_an_intact_ledger_tampered(
    tmp_path: Path, wal: bool, capsys
) -> None:
    d = tmp_path / "ro"
    d.mkdir()
    db = d / "ledger.db"
    if wal:
        _kill_mid_write(db, 20)
        assert Path(f"{db}-wal").stat().st_size > 0  # the rows are in the WAL
    else:
        _ledger(db, 20)
    before = sorted(p.name for p in d.iterdir() if not p.name.endswith("-shm"))
    digest = hashlib.sha256(db.read_bytes()).hexdigest()
    _unwritable(d)
    try:
        assert main(["ledger", "verify", str(db)]) == 0, capsys.readouterr()
        out = capsys.readouterr().out
        assert "OK: 21 rows" in out
        assert main(["ledger", "show", str(db), "--json"]) == 0
        assert '"verified": true' in capsys.readouterr().out
        assert main(["verdict", str(db), "--threshold", "1e30", "--json"]) == 0
        assert "fails verification" not in capsys.readouterr().out
        assert main(["ledger", "head", str(db), "--json"]) == 0
        assert '"size": 21' in capsys.readouterr().out
    finally:
        d.chmod(0o755)
    after = {p.name for p in d.iterdir() if not p.name.endswith("-shm")}
    # nothing written: the file is unchanged and no file appeared (as root SQLite may still create an empty
    # -wal before it meets the missing -shm; in a directory without write bits it cannot)
    assert hashlib.sha256(db.read_bytes()).hexdigest() == digest
    extra = after - set(before)
    assert not extra or (
        os.geteuid() == 0 and extra == {"ledger.db-wal"} and Path(f"{db}-wal").stat().st_size == 0
    )


# ------------------------------------------------------------------------------------------ first start
@pytest.mark.parametrize("where", ["before-genesis", "after-genesis"])
def test_a_first_start_killed_at_any_point_recovers_by_itself(tmp_path: Path, where: str) -> None:
    db = tmp_path / "ledger.db"
    hook = (
        "Ledger.append = lambda self, kind, payload: os.kill(os.getpid(), signal.SIGKILL)"
        if where == "before-genesis"
        else "Ledger._install_pending = lambda self, pending: os.kill(os.getpid(), signal.SIGKILL)"
    )
    code = f"import os, signal, sys; from flopwatch.monitor.ledger import Ledger; {hook}; Ledger(sys.argv[1])"
    r = subprocess.run(
        [sys.executable, "-c", code, str(db)], env={**os.environ, "PYTHONPATH": SRC}, timeout=60
    )
    assert r.returncode == -signal.SIGKILL
    assert Path(f"{db}.key.pending").exists()  # the key was created …
    assert not Path(f"{db}.key").exists()  # … and never took its name
    with Ledger(db) as led:  # the restart recovers on its own
        led.append("workload", _workload(1))
    assert Path(f"{db}.key").exists() and not Path(f"{db}.key.pending").exists()
    res = verify_ledger(db)
    assert res.ok and res.n_rows == 2


# ------------------------------------------------------------------------------------------ renamed ledger
def test_a_ledger_renamed_under_the_writer_stops_it(tmp_path: Path) -> None:
    db = tmp_path / "ledger.db"
    with Ledger(db) as led:
        led.append("workload", _workload(0))
        for suffix in ("", "-wal"):
            if Path(f"{db}{suffix}").exists():
                os.rename(f"{db}{suffix}", f"{tmp_path / 'moved.db'}{suffix}")
        with pytest.raises(LedgerError, match="renamed, removed or replaced"):
            led.append("workload", _workload(1))
    assert not db.exists()  # nothing was re-created at the old name


def test_the_daemon_stops_when_its_ledger_is_renamed_away(tmp_path: Path) -> None:
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from monitor_helpers import busy_fn, write_trace

    trace = write_trace(tmp_path / "t.parquet", t_total=400, busy=busy_fn([(10, 390)]))
    db = tmp_path / "ledger.db"
    log = tmp_path / "daemon.log"
    cli = "import sys; from flopwatch.cli import main; sys.exit(main())"
    args = [sys.executable, "-c", cli, "monitor", "--sensor", f"replay:{trace}", "--speed", "20", "--ledger",
            str(db), "--idle-power-w", "50", "--checkpoint-s", "5"]  # fmt: skip
    proc = subprocess.Popen(
        args, stdout=subprocess.DEVNULL, stderr=log.open("w"), env={**os.environ, "PYTHONPATH": SRC}
    )
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                con = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=1.0)
                n = con.execute("SELECT COUNT(*) FROM entries WHERE kind='checkpoint'").fetchone()[0]
                con.close()
                if n >= 2:
                    break
            except sqlite3.Error:
                pass
            time.sleep(0.05)
        for suffix in ("", "-wal", "-shm"):
            if Path(f"{db}{suffix}").exists():
                os.rename(f"{db}{suffix}", f"{tmp_path / 'moved.db'}{suffix}")
        rc = proc.wait(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    errs = [ln for ln in log.read_text().splitlines() if "error" in ln.lower()]
    assert rc != 0
    assert any("renamed, removed or replaced" in ln for ln in errs), log.read_text()[-2000:]
    assert not db.exists()
