"""Ledger: hash chain, signatures, tamper detection (edits, deletions, insertions, swaps), CLI."""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import stat
from pathlib import Path

import pytest

from flopwatch.cli import main
from flopwatch.errors import InputError, LedgerError
from flopwatch.monitor.ledger import Ledger, read_entries, summarize_ledger, verify_ledger
from monitor_helpers import private_tmp  # noqa: F401 - autouse: temporary files under tmp_path


def _workload(i: int) -> dict:
    return {
        "device": "sim:a100#0",
        "start_wall": 1.7e9 + 100 * i,
        "end_wall": 1.7e9 + 100 * i + 60.25,
        "duration_s": 60.25,
        "energy_j": 12000.0 + i,
        "net_energy_j": 9876.5 + i,
        "estimate_flops": 1.25e15 * (i + 1),
        "lower_flops": 1.1e15 * (i + 1),
        "upper_flops": 1.4e15 * (i + 1),
        "verdict": "below",
        "status": "complete",
        "coverage": 1.0,
    }


@pytest.fixture
def ledger_path(tmp_path: Path) -> Path:
    p = tmp_path / "ledger.db"
    with Ledger(p) as led:
        led.append("start", {"session_id": "s1", "wall": 1.7e9})
        for i in range(3):
            led.append("workload", _workload(i))
            led.append(
                "checkpoint",
                {"wall": 1.7e9 + 100 * i + 90, "devices": {"sim:a100#0": {"net_energy_j": 1.0 * i}}},
            )
        led.append("stop", {"session_id": "s1", "wall": 1.7e9 + 400, "reason": "SIGTERM"})
    return p


def _copy(src: Path, dst_dir: Path) -> Path:
    dst_dir.mkdir()
    dst = dst_dir / src.name
    shutil.copy(src, dst)
    shutil.copy(f"{src}.pub", f"{dst}.pub")
    return dst


def _sql(path: Path, *stmts: str) -> None:
    con = sqlite3.connect(path)
    for s in stmts:
        con.execute(s)
    con.commit()
    con.close()


def test_fresh_ledger_verifies_and_key_is_private(ledger_path: Path) -> None:
    res = verify_ledger(ledger_path)
    assert res.ok, res.problems
    assert res.n_rows == 9 and res.head_seq == 9
    mode = stat.S_IMODE(os.stat(f"{ledger_path}.key").st_mode)
    assert mode == 0o600
    assert Path(f"{ledger_path}.pub").read_text().startswith("-----BEGIN PUBLIC KEY-----")
    # Chain: each row links to the previous row's hash.
    rows = read_entries(ledger_path)
    assert all(b.prev_hash == a.hash for a, b in zip(rows, rows[1:], strict=False))


def test_reopen_appends_to_the_same_chain(ledger_path: Path) -> None:
    with Ledger(ledger_path) as led:
        assert not led.key_created
        e = led.append("workload", _workload(9))
    assert e.seq == 10
    assert verify_ledger(ledger_path).ok


def test_refuses_world_readable_key_and_foreign_key(ledger_path: Path, tmp_path: Path) -> None:
    os.chmod(f"{ledger_path}.key", 0o644)
    with pytest.raises(LedgerError, match="chmod 600"):
        Ledger(ledger_path)
    os.chmod(f"{ledger_path}.key", 0o600)
    other = tmp_path / "other.db"
    Ledger(other).close()
    with pytest.raises(LedgerError, match="does not match"):
        Ledger(ledger_path, key_path=f"{other}.key")


def test_single_byte_edit_in_sql_is_detected(ledger_path: Path, tmp_path: Path) -> None:
    bad = _copy(ledger_path, tmp_path / "c")
    payload = read_entries(bad)[4].payload_text  # seq 5: the second workload row
    edited = payload.replace('"net_energy_j":9877.5', '"net_energy_j":9877.6')
    assert edited != payload and len(edited) == len(payload)
    con = sqlite3.connect(bad)
    con.execute("UPDATE entries SET payload=? WHERE seq=5", (edited,))
    con.commit()
    con.close()
    res = verify_ledger(bad)
    assert not res.ok
    assert [(p.seq, p.kind) for p in res.problems] == [(5, "edited")]


def test_single_byte_flip_in_the_file_is_detected(ledger_path: Path, tmp_path: Path) -> None:
    bad = _copy(ledger_path, tmp_path / "c")
    data = bytearray(bad.read_bytes())
    needle = b'"estimate_flops":2500000000000000.0'  # workload row of i=1 (seq 5)
    pos = data.find(needle)
    assert pos > 0
    data[pos + len(b'"estimate_flops":')] = ord("3")  # one byte: 2.5e15 -> 3.5e15
    bad.write_bytes(bytes(data))
    res = verify_ledger(bad)
    assert not res.ok
    assert {p.seq for p in res.problems} == {5}


def test_edit_with_recomputed_hash_is_caught_by_the_signature(ledger_path: Path, tmp_path: Path) -> None:
    from flopwatch.monitor.ledger import row_hash

    bad = _copy(ledger_path, tmp_path / "c")
    e = read_entries(bad)[4]
    text = e.payload_text.replace('"verdict":"below"', '"verdict":"above"')
    h = row_hash(e.seq, e.kind, e.prev_hash, text)
    _sql(bad, f"UPDATE entries SET payload='{text}', hash='{h}' WHERE seq=5")
    res = verify_ledger(bad)
    kinds = {(p.seq, p.kind) for p in res.problems}
    assert (5, "forged") in kinds
    assert not res.ok


def test_deleted_row_is_detected(ledger_path: Path, tmp_path: Path) -> None:
    bad = _copy(ledger_path, tmp_path / "c")
    _sql(bad, "DELETE FROM entries WHERE seq=5")
    res = verify_ledger(bad)
    assert [(p.seq, p.kind) for p in res.problems] == [(6, "deleted")]
    assert "5 missing" in res.problems[0].message


def test_swapped_rows_are_detected(ledger_path: Path, tmp_path: Path) -> None:
    bad = _copy(ledger_path, tmp_path / "c")
    # Swap rows 4 and 6 (two workload rows) by renumbering them.
    _sql(
        bad,
        "UPDATE entries SET seq=-4 WHERE seq=4",
        "UPDATE entries SET seq=4 WHERE seq=6",
        "UPDATE entries SET seq=6 WHERE seq=-4",
    )
    res = verify_ledger(bad)
    found = {(p.seq, p.kind) for p in res.problems}
    assert found == {(4, "moved"), (6, "moved")}
    assert "signed row 6" in next(p.message for p in res.problems if p.seq == 4)


def test_inserted_row_is_detected(ledger_path: Path, tmp_path: Path) -> None:
    bad = _copy(ledger_path, tmp_path / "c")
    e = read_entries(bad)[-1]
    _sql(
        bad,
        "INSERT INTO entries(seq, kind, prev_hash, payload, hash, signature) VALUES "
        f"(10, 'workload', '{e.hash}', '{{}}', '{'ab' * 32}', '{'00' * 64}')",
    )
    res = verify_ledger(bad)
    assert [(p.seq, p.kind) for p in res.problems] == [(10, "edited")]


def test_foreign_public_key_fails_everything(ledger_path: Path, tmp_path: Path) -> None:
    other = tmp_path / "other.db"
    Ledger(other).close()
    res = verify_ledger(ledger_path, public_key=f"{other}.pub")
    assert not res.ok
    assert any(p.kind == "foreign-key" for p in res.problems)


def test_cli_verify_and_show(ledger_path: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["ledger", "verify", str(ledger_path), "--public-key", f"{ledger_path}.pub"]) == 0
    out = capsys.readouterr().out
    assert "OK" in out

    bad = _copy(ledger_path, tmp_path / "c")
    _sql(bad, "DELETE FROM entries WHERE seq=3")
    assert main(["ledger", "verify", str(bad)]) == 1
    out = capsys.readouterr().out
    assert "row 4: row(s) 3 missing" in out and "1 problem" in out

    assert main(["ledger", "show", str(ledger_path), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert len(doc["workloads"]) == 3
    w = doc["workloads"][1]
    for k in (
        "device",
        "start_wall",
        "end_wall",
        "duration_s",
        "net_energy_j",
        "estimate_flops",
        "lower_flops",
        "upper_flops",
        "verdict",
        "status",
    ):
        assert k in w
    assert w["estimate_flops"] == 2.5e15 and w["status"] == "complete"
    assert doc["totals"]["sim:a100#0"]["net_energy_j"] == 2.0

    assert main(["ledger", "show", str(ledger_path)]) == 0
    assert "complete" in capsys.readouterr().out


def test_cli_missing_ledger_is_an_input_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["ledger", "show", str(tmp_path / "nope.db")]) == 2
    err = capsys.readouterr().err
    assert "nope.db" in err and err.count("\n") == 1


def test_summary_has_sessions(ledger_path: Path) -> None:
    s = summarize_ledger(ledger_path)
    assert [x["kind"] for x in s["sessions"]] == ["start", "stop"]


def test_random_single_byte_flips_are_detected_or_harmless(ledger_path: Path, tmp_path: Path) -> None:
    """Seeded sweep: a flipped bit anywhere in the file either changes no stored row (free space, page
    bookkeeping) or is reported by `ledger verify` — never a traceback, never an accepted altered row."""
    import random

    original = read_entries(ledger_path)
    data = ledger_path.read_bytes()
    # Bytes that hold row content: every stored payload, hash and signature, found in the file.
    content = [
        (pos, pos + len(s))
        for e in original
        for s in (e.payload_text.encode(), e.hash.encode(), e.signature.encode())
        if (pos := data.find(s)) >= 0
    ]
    assert len(content) >= 2 * len(original)
    rng = random.Random(7)
    d = tmp_path / "flip"
    d.mkdir()
    bad = d / ledger_path.name
    shutil.copy(f"{ledger_path}.pub", f"{bad}.pub")
    detected = 0
    for k in range(120):
        a, b = content[k % len(content)] if k % 2 == 0 else (0, len(data))  # half inside row content
        pos = rng.randrange(a, b)
        flipped = bytearray(data)
        flipped[pos] ^= 1 << rng.randrange(8)
        bad.write_bytes(bytes(flipped))
        res = verify_ledger(bad)
        if res.ok:
            assert read_entries(bad) == original, f"byte {pos}: altered ledger accepted"
        else:
            detected += 1
    assert detected >= 60  # every flip inside row content, at least


def test_case_flip_in_a_stored_signature_is_detected(ledger_path: Path, tmp_path: Path) -> None:
    """bytes.fromhex is case-insensitive: 'd'→'D' (one bit) in the signature column must still be reported."""
    bad = _copy(ledger_path, tmp_path / "c")
    e = read_entries(bad)[3]
    i = next(k for k, ch in enumerate(e.signature) if ch in "abcdef")
    sig = e.signature[:i] + e.signature[i].upper() + e.signature[i + 1 :]
    _sql(bad, f"UPDATE entries SET signature='{sig}' WHERE seq={e.seq}")
    res = verify_ledger(bad)
    assert not res.ok and [p.seq for p in res.problems] == [e.seq]


def test_cut_off_newest_rows_are_caught_with_a_recorded_head(
    ledger_path: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Deleting the newest rows leaves a valid shorter chain; a head recorded earlier off the node catches it."""
    assert main(["ledger", "verify", str(ledger_path)]) == 0
    head = capsys.readouterr().out.split("last row ")[1].split(";")[0]  # "9:<64 hex>", as printed
    assert head.startswith("9:") and len(head) == 2 + 64
    bad = _copy(ledger_path, tmp_path / "c")
    _sql(bad, "DELETE FROM entries WHERE seq >= 8")
    assert any(p.kind == "tree" for p in verify_ledger(bad).problems)  # the stored tree still has 9 leaves …
    # … so an operator trims it too (and the node's heads): then nothing in the file shows the cut
    _sql(bad, "DELETE FROM tree_nodes WHERE (idx + 1) * (1 << level) > 7")
    _sql(bad, "DELETE FROM tree_heads WHERE size > 7")
    assert verify_ledger(bad).ok  # undetectable from the file alone …
    assert main(["ledger", "verify", str(bad), "--expect-head", head]) == 1  # … but not against the head
    assert "2 newest row(s) cut off" in capsys.readouterr().out
    assert main(["ledger", "verify", str(ledger_path), "--expect-head", head]) == 0
    assert main(["ledger", "verify", str(ledger_path), "--expect-head", "5"]) == 0  # older heads are fine
    # A rewritten history that reaches the same length does not match the recorded hash.
    res = verify_ledger(ledger_path, expect_head=(9, "ab" * 32))
    assert [(p.seq, p.kind) for p in res.problems] == [(9, "rewritten")]
    capsys.readouterr()
    assert main(["ledger", "verify", str(ledger_path), "--expect-head", "nine"]) == 2
    err = capsys.readouterr().err
    assert "expect_head" in err and "nine" in err and err.count("\n") == 1


def test_show_warns_when_the_ledger_fails_verification(
    ledger_path: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["ledger", "show", str(ledger_path), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["verified"] is True
    bad = _copy(ledger_path, tmp_path / "c")
    _sql(bad, 'UPDATE entries SET payload=replace(payload, \'"verdict":"below"\', \'"verdict":"above"\')')
    assert main(["ledger", "show", str(bad), "--json"]) == 0  # still shows what the file says …
    out = capsys.readouterr()
    assert json.loads(out.out)["verified"] is False
    assert "FAILS verification" in out.err and "ledger verify" in out.err  # … but not silently


def test_a_path_that_is_not_a_ledger_is_an_input_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    junk = tmp_path / "junk.db"
    junk.write_text("not sqlite\n" * 100)
    with pytest.raises(InputError, match="cannot open ledger"):
        Ledger(junk)
    assert main(["monitor", "--sensor", "sim:a100", "--duration", "1", "--ledger", str(junk)]) == 2
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert "junk.db" in err and "cannot open ledger" in err
    assert junk.read_text() == "not sqlite\n" * 100  # untouched


# ------------------------------------------------------------------------------------- issue 11: ledger attacks
def _pin(ledger_path: Path, tmp_path: Path) -> Path:
    """The verifier's pin, exported at installation and kept off the node."""
    pin = tmp_path / "pinned.pem"
    assert main(["ledger", "export-key", str(ledger_path), "-o", str(pin)]) == 0
    return pin


def test_planted_trigger_is_tampering_and_the_writer_refuses(
    ledger_path: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A trigger that silently drops new workload rows: verify (pinned) fails, the daemon refuses the file."""
    pin = _pin(ledger_path, tmp_path)
    _sql(
        ledger_path,
        "CREATE TRIGGER drop_workloads BEFORE INSERT ON entries WHEN NEW.kind = 'workload' "
        "BEGIN SELECT RAISE(IGNORE); END",
    )
    res = verify_ledger(ledger_path, public_key=pin)
    assert not res.ok
    assert [(p.seq, p.kind) for p in res.problems] == [(None, "schema")]
    assert "trigger 'drop_workloads'" in res.problems[0].message
    assert main(["ledger", "verify", str(ledger_path), "--public-key", str(pin)]) == 1
    assert "schema altered" in capsys.readouterr().out
    with pytest.raises(LedgerError, match="schema altered"):
        Ledger(ledger_path)


def test_trigger_planted_while_the_writer_runs_is_caught_at_the_next_append(ledger_path: Path) -> None:
    with Ledger(ledger_path) as led:
        led.append("workload", _workload(7))
        _sql(
            ledger_path,
            "CREATE TRIGGER drop_workloads BEFORE INSERT ON entries WHEN NEW.kind = 'workload' "
            "BEGIN SELECT RAISE(IGNORE); END",
        )
        with pytest.raises(LedgerError, match="did not land as written"):
            led.append("workload", _workload(8))


@pytest.mark.parametrize(
    "stmts, what",
    [
        (
            [
                "DROP VIEW workloads",
                "CREATE VIEW workloads AS SELECT seq, 'sim:a100#0' AS device, 1.0 AS estimate_flops, "
                "'below' AS verdict FROM entries WHERE kind = 'workload'",
            ],
            "view 'workloads' was redefined",
        ),
        (["CREATE TABLE notes (x TEXT)"], "unexpected table 'notes'"),
        (["CREATE INDEX entries_kind ON entries(kind)"], "unexpected index 'entries_kind'"),
        (["DROP VIEW workloads"], "view 'workloads' is missing"),
    ],
)
def test_altered_schema_objects_are_tampering(
    ledger_path: Path, tmp_path: Path, stmts: list[str], what: str
) -> None:
    pin = _pin(ledger_path, tmp_path)
    _sql(ledger_path, *stmts)
    res = verify_ledger(ledger_path, public_key=pin)
    assert not res.ok and any(what in p.message for p in res.problems), res.problems


def test_wiped_chain_with_kept_key_fails_the_pin_and_needs_new_chain(
    ledger_path: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Delete the ledger, keep the key: the daemon refuses a new chain unless told; the pin catches it anyway."""
    pin = _pin(ledger_path, tmp_path)
    assert "flopwatch-ledger-genesis: " in pin.read_text()
    ledger_path.unlink()
    with pytest.raises(LedgerError, match="--new-chain"):
        Ledger(ledger_path)
    assert not ledger_path.exists()  # refused before anything was created
    rc = main(["monitor", "--sensor", "sim:a100", "--duration", "1", "--ledger", str(ledger_path)])
    err = capsys.readouterr().err
    assert rc == 1 and "--new-chain" in err and err.count("\n") == 1
    with Ledger(ledger_path, new_chain=True) as led:  # told explicitly
        led.append("workload", _workload(0))
    assert verify_ledger(ledger_path).ok  # self-consistent …
    res = verify_ledger(ledger_path, public_key=pin)  # … but not the chain the verifier pinned
    assert not res.ok and [p.kind for p in res.problems] == ["foreign-genesis"]
    assert "wiped and restarted" in res.problems[0].message
    assert main(["ledger", "verify", str(ledger_path), "--public-key", str(pin)]) == 1


def test_a_key_only_pin_still_verifies_with_a_warning(ledger_path: Path, tmp_path: Path) -> None:
    """Pins exported before the genesis was bound (PEM only) are read, and the verifier is told their limit."""
    old = tmp_path / "old.pem"
    text = Path(f"{ledger_path}.pub").read_text()
    old.write_text(text[: text.index("-----END PUBLIC KEY-----") + len("-----END PUBLIC KEY-----")] + "\n")
    res = verify_ledger(ledger_path, public_key=old)
    assert res.ok and any("no genesis hash" in w for w in res.warnings)


def test_a_second_writer_refuses_with_one_line(ledger_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from flopwatch.monitor.ledger import LedgerLocked

    with Ledger(ledger_path):
        with pytest.raises(LedgerLocked, match="another flopwatch monitor") as ei:
            Ledger(ledger_path)
        assert f"pid {os.getpid()}" in str(ei.value) and "\n" not in str(ei.value)
        rc = main(["monitor", "--sensor", "sim:a100", "--duration", "5", "--ledger", str(ledger_path)])
        err = capsys.readouterr().err
        assert rc == 1 and "one writer at a time" in err and err.count("\n") == 1
    n = len(read_entries(ledger_path))
    with Ledger(ledger_path):  # released on close
        pass
    assert len(read_entries(ledger_path)) == n  # the refused daemon wrote nothing


def test_the_writer_lock_is_released_by_kill_9(ledger_path: Path) -> None:
    import signal
    import subprocess
    import sys

    code = (
        "import sys, time; from flopwatch.monitor.ledger import Ledger; "
        "led = Ledger(sys.argv[1]); print('locked', flush=True); time.sleep(60)"
    )
    proc = subprocess.Popen([sys.executable, "-c", code, str(ledger_path)], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "locked"
        with pytest.raises(LedgerError, match="one writer at a time"):
            Ledger(ledger_path)
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=10)
    with Ledger(ledger_path) as led:  # the kernel dropped the dead process's lock
        led.append("workload", _workload(5))
    assert verify_ledger(ledger_path).ok


def test_foreign_owned_or_loose_keys_are_refused(ledger_path: Path) -> None:
    from flopwatch.monitor.keys import load_private_key

    key = Path(f"{ledger_path}.key")
    with pytest.raises(LedgerError, match="not by this daemon's user"):
        load_private_key(key, expected_uid=os.geteuid() + 1)
    if os.geteuid() == 0:  # really owned by someone else (needs root to chown)
        os.chown(key, 65534, -1)
        with pytest.raises(LedgerError, match="owned by uid 65534"):
            Ledger(ledger_path)
        os.chown(key, 0, -1)
    for mode in (0o620, 0o602, 0o640):  # group/world-writable or readable
        os.chmod(key, mode)
        with pytest.raises(LedgerError, match="chmod 600"):
            Ledger(ledger_path)
    os.chmod(key, 0o600)
    with Ledger(ledger_path):
        pass


def test_keys_and_pins_are_never_written_or_read_through_symlinks(ledger_path: Path, tmp_path: Path) -> None:
    victim = tmp_path / "victim.txt"
    victim.write_text("precious\n")
    pub = Path(f"{ledger_path}.pub")
    pub.unlink()
    pub.symlink_to(victim)
    with pytest.raises(LedgerError, match="symlink"):
        Ledger(ledger_path)
    assert victim.read_text() == "precious\n"
    pub.unlink()
    # A symlinked signing key is refused (it could point at a key someone else controls).
    fresh = tmp_path / "fresh"
    fresh.mkdir()
    real_key = tmp_path / "real.key"
    real_key.write_bytes(Path(f"{ledger_path}.key").read_bytes())
    os.chmod(real_key, 0o600)
    (fresh / "l.db.key").symlink_to(real_key)
    with pytest.raises(LedgerError, match="symlink"):
        Ledger(fresh / "l.db", new_chain=True)
    # export-key -o onto a symlink replaces nothing behind it.
    link = tmp_path / "out.pem"
    link.symlink_to(victim)
    assert main(["ledger", "export-key", str(ledger_path), "-o", str(link)]) == 2
    assert victim.read_text() == "precious\n"


def test_pins_and_witness_logs_are_read_only_from_small_regular_files(
    ledger_path: Path, tmp_path: Path
) -> None:
    """A verifier's pin and witness log: a symlink, a directory, a FIFO (never blocks) or an oversized file is
    one InputError naming the file (io.read_bytes/open_regular with follow_symlinks=False)."""
    from flopwatch.monitor.keys import load_pin
    from flopwatch.monitor.witness import read_log

    pub = Path(f"{ledger_path}.pub")
    assert load_pin(pub).key is not None
    log = tmp_path / "heads.jsonl"
    log.write_text("")
    assert read_log(log) == []
    for real, read in ((pub, load_pin), (log, read_log)):
        link = tmp_path / f"link-{real.name}"
        link.symlink_to(real)
        with pytest.raises(InputError, match="symlink; refusing") as e:
            read(link)
        assert e.value.file == str(link)
        fifo = tmp_path / f"fifo-{real.name}"
        os.mkfifo(fifo)
        with pytest.raises(InputError, match="FIFO"):
            read(fifo)
        with pytest.raises(InputError, match="directory"):
            read(tmp_path)
    big = tmp_path / "big.pub"
    big.write_bytes(pub.read_bytes() + b"#" * 70_000)
    with pytest.raises(InputError, match="byte limit for a PEM key"):
        load_pin(big)
    # the signing key too: a FIFO or a directory is refused before anything is read (LedgerError, exit 1)
    from flopwatch.monitor.keys import load_private_key

    os.mkfifo(tmp_path / "fifo.key")
    for bad, what in ((tmp_path / "fifo.key", "FIFO"), (tmp_path, "directory")):
        with pytest.raises(LedgerError, match=what):
            load_private_key(bad)


@pytest.mark.parametrize("suffix", ["", ".key", "-wal"])
def test_export_key_never_overwrites_the_ledger_or_its_key(
    ledger_path: Path, suffix: str, capsys: pytest.CaptureFixture[str]
) -> None:
    target = Path(f"{ledger_path}{suffix}")
    before = target.read_bytes() if target.exists() else None
    assert main(["ledger", "export-key", str(ledger_path), "-o", str(target)]) == 2
    err = capsys.readouterr().err
    assert "refusing to overwrite" in err and err.count("\n") == 1
    assert (target.read_bytes() if target.exists() else None) == before
    assert verify_ledger(ledger_path).ok


@pytest.mark.parametrize("name", ["a#b", "q?x=1", "pct%41", "sp ace&amp;"])
def test_any_path_opens_correctly(tmp_path: Path, name: str, capsys: pytest.CaptureFixture[str]) -> None:
    d = tmp_path / name
    p = d / f"{name}.db"
    with Ledger(p) as led:
        led.append("workload", _workload(1))
    assert {x.name for x in d.iterdir()} >= {f"{name}.db", f"{name}.db.key", f"{name}.db.pub"}
    assert not (tmp_path / "a").exists() and not (tmp_path / "pctA").exists()  # nothing created elsewhere
    assert [e.kind for e in read_entries(p)] == ["genesis", "workload"]
    assert verify_ledger(p, public_key=f"{p}.pub").ok
    assert main(["ledger", "show", str(p), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["workloads"][0]["estimate_flops"] == 2.5e15


def test_no_default_key_inside_a_git_working_tree(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    (repo / ".git").mkdir(parents=True)
    with pytest.raises(LedgerError, match="git working tree"):
        Ledger(repo / "ledger.db")
    assert not (repo / "ledger.db.key").exists()
    with Ledger(repo / "ledger.db", key_path=tmp_path / "outside.key"):  # an explicit key path is a choice
        pass


def test_version_1_rows_are_read_as_version_2(tmp_path: Path) -> None:
    """Ledgers written before the row was typed (free-text flags, no row_version) stay readable."""
    p = tmp_path / "old.db"
    with Ledger(p) as led:
        led.append("workload", dict(_workload(0), flags=["telemetry covers 90.0 % of the workload"]))
    (w,) = summarize_ledger(p)["workloads"]
    assert w["row_version"] == 1 and w["warnings"] == ["telemetry covers 90.0 % of the workload"]
    assert "flags" not in w and w["regime"] is None


def test_ledger_show_prints_user_strings_literally(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Markup and ANSI escapes in stored strings neither crash `ledger show` nor fake output."""
    p = tmp_path / "odd.db"
    evil = "[/bold]gpu\x1b[2K\x1b[1A[red]FAKE[/red]\nrow"
    with Ledger(p) as led:
        led.append("workload", dict(_workload(0), device=evil, status="[bold]", duration_s="60 s"))
        led.append(
            "checkpoint", {"devices": {evil: {"energy_j": "x", "checkpoint_wall": 1e300}}, "wall": 1e300}
        )
    assert main(["ledger", "show", str(p)]) == 0
    out = capsys.readouterr().out
    assert "\x1b" not in out and "\\x1b[2K" in out and "[/bold]gpu" in out and "[bold]" in out
    assert main(["ledger", "show", str(p), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["workloads"][0]["device"] == evil


def test_verify_locates_rows_moved_far_apart(tmp_path: Path) -> None:
    """A row moved 200 places is found by the row it follows, not by a neighbour search."""
    p = tmp_path / "long.db"
    with Ledger(p) as led:
        for i in range(300):
            led.append("workload", _workload(i))
    _sql(
        p,
        "UPDATE entries SET seq=-1 WHERE seq=10",
        "UPDATE entries SET seq=10 WHERE seq=250",
        "UPDATE entries SET seq=250 WHERE seq=-1",
    )
    res = verify_ledger(p)
    assert {(x.seq, x.kind) for x in res.problems} == {(10, "moved"), (250, "moved")}
    assert "signed row 250" in next(x.message for x in res.problems if x.seq == 10)


def test_fully_edited_ledger_names_every_row(tmp_path: Path) -> None:
    p = tmp_path / "all.db"
    with Ledger(p) as led:
        for i in range(50):
            led.append("workload", _workload(i))
    _sql(
        p,
        'UPDATE entries SET payload = replace(payload, \'"status":"complete"\', \'"status":"n"\') WHERE seq > 1',
    )
    res = verify_ledger(p)
    assert [(x.seq, x.kind) for x in res.problems] == [(s, "edited") for s in range(2, 52)]


def test_verify_locates_every_row_of_a_moved_block(tmp_path: Path) -> None:
    """Rows 2..11 and 12..21 exchanged as blocks: inner rows still link to their neighbours, yet each is
    found at the position it was signed at."""
    p = tmp_path / "blocks.db"
    with Ledger(p) as led:
        for i in range(25):
            led.append("workload", _workload(i))
    _sql(
        p,
        "UPDATE entries SET seq = -seq WHERE seq BETWEEN 2 AND 21",
        "UPDATE entries SET seq = CASE WHEN -seq <= 11 THEN -seq + 10 ELSE -seq - 10 END WHERE seq < 0",
    )
    res = verify_ledger(p)
    assert [(x.seq, x.kind) for x in res.problems] == [(s, "moved") for s in range(2, 22)]
    assert "signed row 12" in res.problems[0].message


def test_show_survives_hand_edited_payloads(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Junk written into the file (not JSON, wrong types, NaN) is shown as it is; `show` never fails on it."""
    p = tmp_path / "junk.db"
    with Ledger(p) as led:
        led.append("workload", _workload(0))
    _sql(
        p,
        "INSERT INTO entries VALUES (3, 'workload', 'x', 'not json {', 'h', 's')",
        "INSERT INTO entries VALUES (4, 'workload', 'x', '[1, 2]', 'h', 's')",
        "INSERT INTO entries VALUES (5, 'workload', 'x', "
        '\'{"device": 7, "duration_s": "long", "estimate_flops": NaN, "warnings": "one"}\', \'h\', \'s\')',
        "INSERT INTO entries VALUES (6, 'checkpoint', 'x', '{\"devices\": [1], \"wall\": \"later\"}', 'h', 's')",
    )
    assert main(["ledger", "show", str(p)]) == 0
    out = capsys.readouterr()
    assert "FAILS verification" in out.err and "long" in out.out
    assert main(["ledger", "show", str(p), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)  # strict JSON: NaN became null
    assert len(doc["workloads"]) == 4 and doc["workloads"][3]["estimate_flops"] is None


def test_cli_verify_counts_in_the_singular(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """One row and no problem read "1 row, 0 problems", never "1 rows" (issue 24: one counting helper)."""
    p = tmp_path / "one.db"
    Ledger(p).close()  # its genesis row only
    assert main(["ledger", "verify", str(p)]) == 0
    out = capsys.readouterr().out
    assert ": OK: 1 row, 0 problems;" in out and "1 rows" not in out
