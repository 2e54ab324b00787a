"""Hostile inputs, round 3 (issue 25), the ledger's findings — each reproduces the finding first:

* the one-writer lock through an alias: a second monitor on a symlink or a hard link to the ledger wrote too;
* read-only verifiers: an intact ledger in a directory the verifier cannot write was called TAMPERED (SQLite
  could not create the WAL index beside it: "unable to open database file");
* a crash on first start: kill -9 after the key was created and before the genesis row committed left a state
  the daemon could not restart from;
* a renamed ledger: the ledger and its WAL renamed away while the daemon ran went unnoticed.
"""

from __future__ import annotations

import hashlib
import json
import os
import shlex
import shutil
import signal
import sqlite3
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
_READERS = """
import contextlib, io, json, sys
from flopwatch.cli import main
db = sys.argv[1]
out = {}
for name, args in (("verify", ["ledger", "verify", db]), ("show", ["ledger", "show", db, "--json"]),
                   ("verdict", ["verdict", db, "--threshold", "1e30", "--json"]),
                   ("head", ["ledger", "head", db, "--json"])):
    o, e = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(o), contextlib.redirect_stderr(e):
        code = main(args)
    out[name] = [code, o.getvalue(), e.getvalue()]
print(json.dumps(out))
"""


def _read_from_unwritable(d: Path, db: Path, scratch: Path) -> dict:
    """Run the verifier's commands where ``d`` cannot be written: the finding's read-only directory.

    Not root: the directory loses its write bits. Root ignores write bits, so the commands run in a private
    mount namespace where ``d`` is bind-mounted read-only (the kernel refuses every write with EROFS, as it
    refuses another user's), and nothing outside tmp_path is touched.
    """
    env = {**os.environ, "PYTHONPATH": SRC, "TMPDIR": str(scratch)}
    cmd = [sys.executable, "-c", _READERS, str(db)]
    if os.geteuid() == 0:
        if shutil.which("unshare") is None:
            pytest.skip("root without unshare(1): cannot make a directory read-only for root")
        q = shlex.quote(str(d))
        cmd = ["unshare", "-m", "sh", "-c",
               f"mount --bind {q} {q} && mount -o remount,ro,bind {q} {q} && exec {shlex.join(cmd)}"]  # fmt: skip
        r = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=120)
        if r.returncode != 0 and "mount" in r.stderr:
            pytest.skip(f"cannot bind-mount read-only here: {r.stderr.strip()[:200]}")
    else:
        d.chmod(0o555)
        try:
            r = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=120)
        finally:
            d.chmod(0o755)
    assert r.returncode == 0, r.stderr[-2000:]
    return json.loads(r.stdout.strip().splitlines()[-1])


def _kill_mid_write(db: Path, rows: int) -> None:
    """A writer killed with its rows committed in the WAL only (no checkpoint folded them into the file)."""
    code = (
        "import os, signal, sys; from flopwatch.monitor.ledger import Ledger; "
        "led = Ledger(sys.argv[1]); led._con.execute('PRAGMA wal_autocheckpoint=0'); "
        f"[led.append('workload', {{'i': i}}) for i in range({rows})]; led.sign_head(); "
        "os.kill(os.getpid(), signal.SIGKILL)"
    )
    subprocess.run([sys.executable, "-c", code, str(db)], env={**os.environ, "PYTHONPATH": SRC}, timeout=60)


@pytest.mark.parametrize("state", ["closed", "killed-with-wal", "wal-without-index"])
def test_a_verifier_without_write_access_never_calls_an_intact_ledger_tampered(
    tmp_path: Path, state: str
) -> None:
    d = tmp_path / "ro"
    d.mkdir()
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    db = d / "ledger.db"
    if state != "closed":
        _kill_mid_write(db, 20)
        assert Path(f"{db}-wal").stat().st_size > 0  # the rows are in the WAL only
        if state == "wal-without-index":  # (SQLite rebuilds -shm from the WAL; read-only it cannot create it)
            Path(f"{db}-shm").unlink()
    else:
        _ledger(db, 20)
    before = {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in d.iterdir()}
    got = _read_from_unwritable(d, db, scratch)
    code, out, err = got["verify"]
    assert code == 0 and "OK: 21 rows" in out, (out, err)
    code, out, err = got["show"]
    assert code == 0 and json.loads(out)["verified"] is True and json.loads(out)["rows"] == 21, err
    code, out, err = got["verdict"]
    assert code == 0 and json.loads(out)["verification"]["ok"], err
    code, out, err = got["head"]
    assert code == 0 and json.loads(out)["size"] == 21, err
    after = {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in d.iterdir()}
    assert after == before  # nothing written beside the ledger
    assert not list(scratch.iterdir())  # the private copy of a WAL ledger is gone


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
