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
    head = capsys.readouterr().out.split("head ")[1].split(";")[0]  # "9:<64 hex>", as printed
    assert head.startswith("9:") and len(head) == 2 + 64
    bad = _copy(ledger_path, tmp_path / "c")
    _sql(bad, "DELETE FROM entries WHERE seq >= 8")
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
