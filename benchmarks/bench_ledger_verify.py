"""`ledger verify` on an intact and on fully tampered ledgers: time (wall and CPU) and peak memory.

Issue 14 target: a fully tampered 10k-row ledger verifies within 3× the time of an intact one (flopwatch 0.2:
398 s against 4.5 s, because each edited row tried 128 other positions with an Ed25519 check), and memory
stays bounded (rows are streamed, never all loaded).

Variants, each on a copy of the same ledger:

* ``intact``   — nothing changed;
* ``edited``   — every row's payload edited (hash and signature no longer match);
* ``rehashed`` — every row edited and its hash recomputed (only the signature catches it);
* ``shuffled`` — rows swapped pairwise half the ledger apart (every row out of place, each must be located).

The ledger is built with ``Ledger.append_many`` (every row signed, 1000 rows a transaction). Peak memory is ``tracemalloc``'s peak of Python
allocations during a second, separate verify run (tracing slows the run, so times come from the first).

    python benchmarks/bench_ledger_verify.py                 # 10 000 rows
    python benchmarks/bench_ledger_verify.py --rows 40000    # memory stays flat as rows grow
"""

from __future__ import annotations

import argparse
import shutil
import sqlite3
import tempfile
import time
import tracemalloc
from pathlib import Path

from bench_ledger import workload_payload  # this folder: the rows bench_ledger.py appends

from flopwatch.monitor.ledger import Ledger, verify_ledger
from flopwatch.monitor.ledger_format import row_hash


def _payload(i: int) -> dict:
    return {"workload_id": f"bench/nvml:GPU-0/{60.0 * i:.3f}", **workload_payload(i), "warnings": []}


def build(path: Path, n: int) -> None:
    """``n`` rows (genesis included), each signed on its own, committed 1000 to a transaction (one fsync
    each: appending 10k rows one fsync at a time would measure the disk, not verification)."""
    with Ledger(path, key_path=Path(f"{path}.key")) as led:
        for lo in range(0, n - 1, 1000):
            led.append_many([("workload", _payload(i)) for i in range(lo, min(n - 1, lo + 1000))])
        led.sign_head()


def tamper(src: Path, dst: Path, how: str) -> None:
    shutil.copy(src, dst)
    shutil.copy(f"{src}.pub", f"{dst}.pub")
    con = sqlite3.connect(dst)
    if how == "edited":
        con.execute("UPDATE entries SET payload = replace(payload, '\"below\"', '\"above\"') WHERE seq > 1")
    elif how == "rehashed":
        rows = con.execute("SELECT seq, kind, prev_hash, payload FROM entries WHERE seq > 1").fetchall()
        upd = []
        for seq, kind, prev, text in rows:
            text = text.replace('"below"', '"above"')
            upd.append((text, row_hash(seq, kind, prev, text), seq))
        con.executemany("UPDATE entries SET payload=?, hash=? WHERE seq=?", upd)
    elif how == "shuffled":
        (n,) = con.execute("SELECT MAX(seq) FROM entries").fetchone()
        half = (n - 1) // 2
        con.execute("UPDATE entries SET seq = -seq WHERE seq > 1")
        # row k ↔ row k + half, for every k in the first half (2 .. half + 1)
        con.execute(
            "UPDATE entries SET seq = CASE WHEN -seq <= ? THEN -seq + ? WHEN -seq <= ? THEN -seq - ? ELSE -seq END "
            "WHERE seq < 0",
            (half + 1, half, 2 * half + 1, half),
        )
    con.commit()
    con.close()


def measure(path: Path) -> tuple[float, float, float, int, int]:
    w0, c0 = time.perf_counter(), time.process_time()
    res = verify_ledger(path)
    wall, cpu = time.perf_counter() - w0, time.process_time() - c0
    tracemalloc.start()
    verify_ledger(path)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    return wall, cpu, peak / 2**20, res.n_rows, len(res.problems)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=10_000)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as d:
        base = Path(d) / "ledger.db"
        build(base, args.rows)
        print(
            f"{'variant':<10} {'rows':>7} {'problems':>9} {'wall s':>8} {'CPU s':>8} {'peak MiB':>9} {'× intact':>9}"
        )
        ref = None
        for how in ("intact", "edited", "rehashed", "shuffled"):
            p = base if how == "intact" else Path(d) / f"{how}.db"
            if how != "intact":
                tamper(base, p, how)
            wall, cpu, peak, n, probs = measure(p)
            ref = ref or cpu
            print(f"{how:<10} {n:>7} {probs:>9} {wall:>8.2f} {cpu:>8.2f} {peak:>9.2f} {cpu / ref:>8.2f}x")


if __name__ == "__main__":
    main()
