"""The witnessed history-tree ledger (issue 23): RFC 9162 tree and proofs, signed heads, witnessing, every
rewrite after a witnessed head detected, time from the witness, several nodes judged as one job."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import sqlite3
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from flopwatch.cli import main
from flopwatch.devices import DEVICES
from flopwatch.monitor import merkle
from flopwatch.monitor.exporter import MonitorMetrics
from flopwatch.monitor.keys import load_private_key
from flopwatch.monitor.ledger import Ledger, verify_ledger
from flopwatch.monitor.ledger_format import GENESIS_PREV, signed_bytes
from flopwatch.monitor.signer import KeySigner, Signer
from flopwatch.monitor.tree import head_message, leaf_of
from flopwatch.monitor.witness import read_log, witness
from monitor_helpers import private_tmp  # noqa: F401 - autouse: temporary files under tmp_path
from window_cases import light_observables

T0 = 1.8e9  # node and witness clocks of the synthetic ledgers


# --------------------------------------------------------------------------------------------- the tree
def _mth(d: list[bytes]) -> bytes:
    """RFC 9162 §2.1.1 MTH, straight from its definition (the reference for the stored tree)."""
    if not d:
        return hashlib.sha256(b"").digest()
    if len(d) == 1:
        return merkle.leaf_hash(d[0])
    k = 1 << ((len(d) - 1).bit_length() - 1)
    return merkle.node_hash(_mth(d[:k]), _mth(d[k:]))


def _path(m: int, d: list[bytes]) -> list[bytes]:
    if len(d) <= 1:
        return []
    k = 1 << ((len(d) - 1).bit_length() - 1)
    return _path(m, d[:k]) + [_mth(d[k:])] if m < k else _path(m - k, d[k:]) + [_mth(d[:k])]


def _subproof(m: int, d: list[bytes], b: bool) -> list[bytes]:
    if m == len(d):
        return [] if b else [_mth(d)]
    k = 1 << ((len(d) - 1).bit_length() - 1)
    if m <= k:
        return _subproof(m, d[:k], b) + [_mth(d[k:])]
    return _subproof(m - k, d[k:], False) + [_mth(d[:k])]


def test_tree_roots_and_proofs_match_the_rfc_definitions() -> None:
    data = [f"leaf {i}".encode() for i in range(37)]
    cr, store = merkle.CompactRange(), {}
    for x in data:
        for lv, i, h in cr.append(merkle.leaf_hash(x)):
            store[(lv, i)] = h
    get = lambda lv, i: store[(lv, i)]  # noqa: E731
    for n in range(1, len(data) + 1):
        root = merkle.root(get, n)
        assert root == _mth(data[:n])
        for m in range(n):
            p = merkle.inclusion_path(get, m, n)
            assert p == _path(m, data[:n])
            assert merkle.verify_inclusion(merkle.leaf_hash(data[m]), m, n, p, root)
            assert not merkle.verify_inclusion(merkle.leaf_hash(b"forged"), m, n, p, root)
        for m in range(1, n + 1):
            p = merkle.consistency_proof(get, m, n)
            assert p == _subproof(m, data[:n], True)
            assert merkle.verify_consistency(m, n, _mth(data[:m]), root, p)
            if m < n:
                assert not merkle.verify_consistency(m, n, _mth(data[: m - 1] + [b"x"]), root, p)
                assert not merkle.verify_consistency(m, n, _mth(data[:m]), root, p[:-1])
    assert cr.root() == _mth(data)


# --------------------------------------------------------------------------------------------- helpers
def _workload(i: int, wall: float = T0, **kw) -> dict:
    return {
        "device": "gpu0",
        "workload_id": f"w{i}",
        "session_id": "s1",
        "start_wall": wall - 100,
        "end_wall": wall,
        "end_t_s": wall - T0 + 1000,
        "duration_s": 100.0,
        "estimate_flops": 1e17,
        "lower_flops": 0.9e17,
        "upper_flops": 1.1e17,
        "regime": "calibrated",
        "warnings": [],
        "verdict": "below",
        "status": "complete",
        # a real sensor and the datasheet's peaks of the device it names: the verifier checks them
        "context": {
            "sensor_kind": "nvml",
            "sample_rate_hz": 2.0,
            "peaks_in_force": dict(DEVICES["h100"].peak_flops),
        },
        # the model and the observables `verdict` recomputes the row's sound bound from (round 9): the tensor pipe
        # busy 52 s of 100 gives 1.03e17, between the estimate and the signed bound
        "device_name": "NVIDIA H100 80GB HBM3",
        **{
            k: v
            for k, v in light_observables(wall - 100, wall, tensor_s=52.0).items()
            if k not in ("sensor_kind", "sample_rate_hz")
        },
        **kw,
    }


def _checkpoint(wall: float, t_s: float | None = None, outside: float = 0.0) -> dict:
    return {
        "session_id": "s1",
        "reason": "interval",
        "wall": wall,
        "t_s": wall - T0 + 1000 if t_s is None else t_s,
        "devices": {"gpu0": {"outside_net_energy_j": outside}},
    }


def _ledger(path: Path, n: int = 12) -> Path:
    with Ledger(path) as led:
        for i in range(n):
            led.append("workload", _workload(i, T0 + 10 * i))
        led.sign_head()
    return path


def _grow(path: Path, n: int, start: int = 100) -> None:
    with Ledger(path) as led:
        for i in range(start, start + n):
            led.append("workload", _workload(i, T0 + 10 * i))
        led.sign_head()


def _witness(db: Path, log: Path, at: float | None = None) -> None:
    pin = Path(f"{db}.pub")
    from flopwatch.monitor.keys import load_pin

    out = witness(
        str(db), log, load_pin(pin).key, clock=(lambda: at) if at is not None else __import__("time").time
    )
    assert out.ok, out.message


def _resign(db: Path, edit) -> None:  # noqa: ANN001
    """The operator who is root on the node: rewrite the rows (``edit(payloads) -> payloads``, genesis kept)
    and re-sign everything — chain, tree, heads — with the node's own key, leaving no internal trace."""
    key = load_private_key(Path(f"{db}.key"))
    con = sqlite3.connect(db, isolation_level=None)
    rows = con.execute("SELECT seq, kind, payload FROM entries ORDER BY seq").fetchall()
    kept = [(k, p) for _s, k, p in rows[:1]] + [(k, json.dumps(p2, sort_keys=True, separators=(",", ":")))
                                                 for k, p2 in edit([(k, json.loads(p)) for _s, k, p in rows[1:]])]  # fmt: skip
    con.execute("BEGIN")
    for t in ("entries", "tree_nodes", "tree_heads"):
        con.execute(f"DELETE FROM {t}")
    cr, prev = merkle.CompactRange(), GENESIS_PREV
    for seq, (kind, text) in enumerate(kept, start=1):
        msg = signed_bytes(seq, kind, prev, text)
        h = hashlib.sha256(msg).hexdigest()
        con.execute(
            "INSERT INTO entries VALUES (?,?,?,?,?,?)", (seq, kind, prev, text, h, key.sign(msg).hex())
        )
        con.executemany("INSERT INTO tree_nodes VALUES (?,?,?)", cr.append(merkle.leaf_hash(msg)))
        prev = h
    kid = KeySigner(key).key_id
    root = cr.root().hex()
    sig = key.sign(head_message(cr.size, root, 1, kid)).hex()
    con.execute("INSERT INTO tree_heads VALUES (?,?,?,?,?)", (cr.size, root, 1, sig, kid))
    con.execute("COMMIT")
    con.close()


def _verify_witness(db: Path, log: Path, capsys) -> tuple[int, str]:  # noqa: ANN001
    code = main(["ledger", "verify", str(db), "--witness", str(log)])
    cap = capsys.readouterr()
    return code, cap.out + cap.err


# --------------------------------------------------------------------------------------------- contract
def test_head_witness_and_verify_contract(tmp_path: Path, capsys) -> None:
    db = _ledger(tmp_path / "node.db")
    assert main(["ledger", "head", str(db), "--json"]) == 0
    head = json.loads(capsys.readouterr().out)
    assert set(head) == {"size", "root", "time", "signature", "key_id"} and head["size"] == 13
    log = tmp_path / "heads.jsonl"
    pin = tmp_path / "pin.pub"
    shutil.copy(f"{db}.pub", pin)  # kept off the node
    assert main(["ledger", "witness", str(db), "--log", str(log), "--public-key", str(pin)]) == 0
    _grow(db, 5)
    assert main(["ledger", "witness", str(db), "--log", str(log), "--public-key", str(pin), "--json"]) == 0
    capsys.readouterr()
    logged = read_log(log)
    assert [h.head.size for h in logged] == [13, 18]
    assert logged[0].head.root == head["root"]
    code, out = _verify_witness(db, log, capsys)
    assert code == 0 and "2 witnessed heads, rows 1..18 witnessed" in out
    # another node's log against this ledger: its heads are refused and no row is witnessed (not "rows 1..0")
    code, out = _verify_witness(_ledger(tmp_path / "other.db"), log, capsys)
    assert code == 1 and "2 witnessed heads, no row witnessed" in out and "1..0" not in out
    # inclusion proofs of every row against the newest head
    with Ledger(db) as led:
        h = led.latest_head
        assert h is not None
        for i, e in enumerate(led.entries()):
            path = [bytes.fromhex(x) for x in led.inclusion(i, h.size)]
            assert merkle.verify_inclusion(leaf_of(e.seq, e.kind, e.prev_hash, e.payload_text), i, h.size, path,
                                           bytes.fromhex(h.root))  # fmt: skip


def test_a_file_that_is_not_a_ledger_exits_2(tmp_path: Path, capsys) -> None:
    junk = tmp_path / "junk.db"
    junk.write_text("not sqlite\n" * 100)
    other = tmp_path / "other.db"
    sqlite3.connect(other).execute("CREATE TABLE t(x)").connection.commit()
    for f in (junk, other):
        assert main(["ledger", "verify", str(f)]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and str(f) in err[0]


# --------------------------------------------------------------------------------------------- rewrites
def _truncate(db: Path) -> None:
    con = sqlite3.connect(db)
    con.execute("DELETE FROM entries WHERE seq > 8")
    con.commit()


def _delete_row(db: Path) -> None:
    con = sqlite3.connect(db)
    con.execute("DELETE FROM entries WHERE seq = 5")
    con.commit()


def _edit_row(db: Path) -> None:
    _resign(
        db,
        lambda rows: [
            (k, {**p, "estimate_flops": 1.0}) if i == 3 else (k, p) for i, (k, p) in enumerate(rows)
        ],
    )


def _delete_resigned(db: Path) -> None:
    _resign(db, lambda rows: [r for i, r in enumerate(rows) if i != 4])


def _truncate_resigned(db: Path) -> None:
    _resign(db, lambda rows: rows[:6])


def _fork(db: Path) -> None:
    # the node's file as it was at size 13, continued differently: same genesis, same first rows
    fork = db.with_name("fork.db")
    shutil.copy(db.with_name("at13.db"), fork)
    with Ledger(fork, key_path=Path(f"{db}.key"), public_key_path=db.with_name("fork.pub")) as led:
        for i in range(5):
            led.append("workload", _workload(500 + i, T0 + 5000 + i))
        led.sign_head()
    os.replace(fork, db)


def _wipe_resign(db: Path) -> None:
    for suffix in ("", "-wal", "-shm"):
        Path(f"{db}{suffix}").unlink(missing_ok=True)
    with Ledger(db, new_chain=True) as led:  # the kept key, a fresh chain
        for i in range(20):
            led.append("workload", _workload(i, T0 + 10 * i))
        led.sign_head()


@pytest.mark.parametrize(
    "attack",
    [_truncate, _delete_row, _edit_row, _delete_resigned, _truncate_resigned, _fork, _wipe_resign],
    ids=[
        "truncation",
        "deleted-row",
        "edited-row-resigned",
        "deleted-row-resigned",
        "truncation-resigned",
        "fork",
        "wipe-and-resign-same-key",
    ],  # fmt: skip
)
def test_every_rewrite_after_a_witnessed_head_is_named(tmp_path: Path, attack, capsys) -> None:  # noqa: ANN001
    db = _ledger(tmp_path / "node.db")
    shutil.copy(db, tmp_path / "at13.db")
    log = tmp_path / "heads.jsonl"
    _witness(db, log, at=T0 + 1000)
    _grow(db, 5)
    _witness(db, log, at=T0 + 2000)
    before = log.read_bytes()
    attack(db)
    code, out = _verify_witness(db, log, capsys)
    assert code == 1, out
    assert "witnessed at" in out and ("size 13" in out or "size 18" in out), out
    # the witness refuses the rewritten ledger's head, naming the earlier head; its log is untouched
    if attack not in (_truncate, _delete_row):  # (those left the node's own heads beside the cut rows)
        pin = tmp_path / "pin.pub"
        shutil.copy(tmp_path / "at13.db.pub" if (tmp_path / "at13.db.pub").exists() else f"{db}.pub", pin)
        assert main(["ledger", "witness", str(db), "--log", str(log), "--public-key", str(pin)]) == 1
        line = capsys.readouterr().out.strip().splitlines()
        assert len(line) == 1 and "witnessed at" in line[0]
    assert log.read_bytes() == before


def test_the_node_key_alone_passes_the_rewrite_only_the_witness_catches_it(tmp_path: Path) -> None:
    db = _ledger(tmp_path / "node.db")
    log = tmp_path / "heads.jsonl"
    _witness(db, log, at=T0 + 1000)
    _edit_row(db)
    assert verify_ledger(db).ok  # chain, signatures, tree and the node's heads all agree: the finding
    res = verify_ledger(db, witness=read_log(log))
    assert not res.ok and any(p.kind == "witness" for p in res.problems)


# --------------------------------------------------------------------------------------------- bad input
def test_a_log_or_head_that_does_not_parse_is_one_line_exit_2(tmp_path: Path, capsys) -> None:
    db = _ledger(tmp_path / "node.db")
    log = tmp_path / "heads.jsonl"
    _witness(db, log, at=T0)
    good = log.read_text()
    for bad, field in (('{"size": "x"}', "size"), ("[1, 2]", None), ("{not json", None),
                       (good.replace('"root":"', '"root":"zz'), "root")):  # fmt: skip
        log.write_text(good + bad + "\n")
        code, out = _verify_witness(db, log, capsys)
        lines = out.strip().splitlines()
        assert code == 2 and len(lines) == 1 and str(log) in lines[0] and "record 2" in lines[0], out
        if field:
            assert f"field '{field}'" in lines[0]


def test_witness_over_http_from_the_monitor_port(tmp_path: Path, capsys) -> None:
    db = _ledger(tmp_path / "node.db")
    pin = tmp_path / "pin.pub"
    shutil.copy(f"{db}.pub", pin)
    log = tmp_path / "heads.jsonl"
    m = MonitorMetrics()
    with Ledger(db) as led:
        m.serve_ledger(lambda: led.latest_head.to_dict(), led.consistency)  # type: ignore[union-attr]
        port = m.start(0)
        try:
            url = f"http://127.0.0.1:{port}"
            assert main(["ledger", "witness", url, "--log", str(log), "--public-key", str(pin)]) == 0
            for i in range(7):
                led.append("workload", _workload(200 + i))
            led.sign_head()
            assert (
                main(["ledger", "witness", url + "/head", "--log", str(log), "--public-key", str(pin)]) == 0
            )
            with urllib.request.urlopen(f"{url}/consistency?first=3&second=20", timeout=5) as r:
                proof = json.loads(r.read())["proof"]
            assert 0 < len(proof) <= 2 * 5
            with pytest.raises(urllib.error.HTTPError) as ei:
                urllib.request.urlopen(f"{url}/consistency?first=x&second=2", timeout=5)
            assert ei.value.code == 400
            with urllib.request.urlopen(f"{url}/metrics", timeout=5) as r:
                assert b"flopwatch_info" in r.read()
            # a head that does not parse: one line naming the URL and the field, exit 2
            m.serve_ledger(lambda: {"size": -1}, led.consistency)
            capsys.readouterr()
            assert main(["ledger", "witness", url, "--log", str(log), "--public-key", str(pin)]) == 2
            err = capsys.readouterr().err.strip().splitlines()
            assert len(err) == 1 and "/head" in err[0] and "field 'size'" in err[0]
        finally:
            m.stop()
    assert [h.head.size for h in read_log(log)] == [13, 20]


# --------------------------------------------------------------------------------------------- old ledgers, signer
def test_a_chain_only_ledger_verifies_as_a_chain_and_says_it_has_no_witness(tmp_path: Path, capsys) -> None:
    db = _ledger(tmp_path / "old.db")
    con = sqlite3.connect(db)
    con.executescript("DROP TABLE tree_nodes; DROP TABLE tree_heads;")  # the 0.2 layout
    con.close()
    res = verify_ledger(db)
    assert res.ok and not res.has_tree and any("no witness" in w for w in res.warnings)
    assert main(["ledger", "head", str(db)]) == 2
    assert "chain-only" in capsys.readouterr().err
    with Ledger(db) as led:  # the writer adds the tree computed from the rows
        led.append("workload", _workload(99))
        led.sign_head()
    res = verify_ledger(db)
    assert res.ok and res.has_tree and res.n_rows == 14


class _OtherSigner:
    """A signer that is not a key file (what a TPM or TEE key would look like to the ledger)."""

    def __init__(self) -> None:
        from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

        self._inner = KeySigner(Ed25519PrivateKey.generate())
        self.calls = 0

    @property
    def key_id(self) -> str:
        return self._inner.key_id

    @property
    def public_key(self):  # noqa: ANN201
        return self._inner.public_key

    def sign(self, data: bytes) -> bytes:
        self.calls += 1
        return self._inner.sign(data)


def test_the_ledger_signs_through_the_signer_protocol(tmp_path: Path) -> None:
    s = _OtherSigner()
    assert isinstance(s, Signer)
    db = tmp_path / "tee.db"
    with Ledger(db, signer=s, head_every=4) as led:
        for i in range(8):
            led.append("workload", _workload(i))
    assert s.calls == 9 + 2  # every row, and a head every 4 appends (heads in batches)
    assert not Path(f"{db}.key").exists() and not Path(f"{db}.key.pending").exists()
    assert verify_ledger(db).ok


# --------------------------------------------------------------------------------------------- time, nodes
def _fast_clock_ledger(db: Path, log: Path) -> None:
    """A job at T0, witnessed at T0 + 60; then the node's wall clock runs two days fast."""
    with Ledger(db) as led:
        led.append("checkpoint", _checkpoint(T0 - 200))
        led.append("workload", _workload(1, T0, estimate_flops=1e18, lower_flops=0.9e18, upper_flops=1.1e18))
        led.append("checkpoint", _checkpoint(T0 + 30))
        led.sign_head()
    _witness(db, log, at=T0 + 60)
    with Ledger(db) as led:
        for k in range(1, 6):  # monotonic time moves 30 s a row; the wall clock jumped 2 days
            led.append("checkpoint", _checkpoint(T0 + 2 * 86400 + 30 * k, t_s=1030 + 30 * k))
        led.sign_head()
    _witness(db, log, at=T0 + 240)


def test_a_node_clock_run_fast_does_not_empty_the_window(tmp_path: Path, capsys) -> None:
    db, log = tmp_path / "node.db", tmp_path / "heads.jsonl"
    _fast_clock_ledger(db, log)
    args = ["verdict", str(db), "--threshold", "5e17", "--window", "24h", "--json"]
    assert main(args) == 0
    plain = json.loads(capsys.readouterr().out)
    assert plain["total"]["n_workloads"] == 0  # the finding: by the node's clock the job left the window …
    assert plain["total"]["verdict"] != "below"  # … and the jump of its clock now blocks "below"
    assert any("clock jump" in w for w in plain["total"]["warnings"])
    assert main([*args, "--witness", str(log)]) == 0
    placed = json.loads(capsys.readouterr().out)
    assert placed["total"]["n_workloads"] == 1  # placed by the witness's clock the job is in the window
    assert placed["total"]["verdict"] == "above"
    assert placed["window_end_wall"] <= T0 + 240


def test_several_nodes_are_judged_as_one_job(tmp_path: Path, capsys) -> None:
    dbs, logs = [], []
    for n in range(3):
        db, log = tmp_path / f"node{n}.db", tmp_path / f"heads{n}.jsonl"
        with Ledger(db) as led:
            # checkpoints close around the row: the ~10 s outside it, NVML's blind 75 % at the H100's peak, add
            # 1.5e16 (round 12, `outside-blind`), leaving each piece under the threshold
            led.append("checkpoint", _checkpoint(T0 - 105))
            led.append("workload", _workload(1, T0 + n, workload_id=f"n{n}-w1"))
            led.append("checkpoint", _checkpoint(T0 + 5))
            led.sign_head()
        _witness(db, log, at=T0 + 60)
        dbs.append(str(db))
        logs += ["--witness", str(log)]
    thr = "2e17"  # each node's piece (0.9–1.1e17) is below it; the job (2.7–3.3e17) is above
    for db, log in zip(dbs, logs[1::2], strict=True):
        assert main(["verdict", db, "--witness", log, "--threshold", thr, "--json"]) == 0
        assert json.loads(capsys.readouterr().out)["total"]["verdict"] == "below"
    assert main(["verdict", *dbs, *logs, "--threshold", thr, "--json"]) == 0
    res = json.loads(capsys.readouterr().out)
    assert res["total"]["verdict"] == "above" and res["total"]["n_workloads"] == 3
    assert res["verification"]["ok"] and len(res["verification"]["nodes"]) == 3
    assert all(n["witnessed_rows"] == 4 for n in res["verification"]["nodes"])
    assert main(["verdict", *dbs, "--threshold", thr, "--by", "device", "--json"]) == 0
    keys = {g["key"] for g in json.loads(capsys.readouterr().out)["groups"]}
    assert keys == {"node0.db/gpu0", "node1.db/gpu0", "node2.db/gpu0"}
    # one witness log per ledger, or none
    assert main(["verdict", *dbs, "--witness", logs[1], "--threshold", thr]) == 2
    # a node whose ledger fails blocks "below" for the whole job
    _resign(
        Path(dbs[0]),
        lambda rows: [(k, {**p, "upper_flops": 1.0}) if k == "workload" else (k, p) for k, p in rows],
    )
    assert main(["verdict", *dbs, *logs, "--threshold", "1e30", "--json"]) == 0
    res = json.loads(capsys.readouterr().out)
    assert res["total"]["verdict"] != "below" and not res["verification"]["ok"]


def test_the_monitor_signs_heads_and_records_its_context(tmp_path: Path) -> None:
    db = tmp_path / "mon.db"
    code = main(["monitor", "--sensor", "sim:a100", "--duration", "300", "--ledger", str(db),
                 "--head-interval-s", "60", "--checkpoint-s", "30", "-q"])  # fmt: skip
    assert code == 0
    con = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    heads = con.execute("SELECT size FROM tree_heads ORDER BY size").fetchall()
    start = json.loads(con.execute("SELECT payload FROM entries WHERE kind='start'").fetchone()[0])
    n = con.execute("SELECT COUNT(*) FROM entries").fetchone()[0]
    con.close()
    assert len(heads) >= 4 and heads[-1][0] == n  # the first, one per minute, and the last
    ctx = start["context"]
    assert set(ctx) >= {"profile_sha256", "peaks_in_force", "peak_override", "sensor_kind", "sensor_spec",
                        "sample_rate_hz", "jitter_seed", "flopwatch_version"}  # fmt: skip
    assert ctx["sensor_spec"] == ["sim:a100"] and ctx["peaks_in_force"]
    assert verify_ledger(db).ok


def test_a_damaged_stored_tree_is_reported_even_when_every_row_is_intact(tmp_path: Path) -> None:
    db = _ledger(tmp_path / "node.db")  # 13 rows: the right edge is nodes (3, 0), (2, 2), (0, 12)
    con = sqlite3.connect(db)
    con.execute("UPDATE tree_nodes SET hash = zeroblob(32) WHERE level = 2 AND idx = 2")
    con.commit()
    con.close()
    res = verify_ledger(db)
    assert [p.kind for p in res.problems] == ["tree"]
