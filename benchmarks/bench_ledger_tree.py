"""The witnessed history tree (issue 23): signed appends per second, proof sizes against n, and
``ledger verify --witness`` against n (time and peak memory).

Targets: ≥ 10,000 signed appends/s on one core with heads signed in batches (Crosby & Wallach, USENIX
Security 2009, measured 1,750); inclusion and consistency proofs ≤ 3 KB at 10⁸ rows; verify linear in rows
with flat memory.

* **appends** — every row hashed, Ed25519-signed, chained and added to the tree; a signed head every
  ``--head-every`` rows. Measured one transaction per row (``synchronous=FULL``: one fsync each, what the
  daemon does for a workload row) and ``append_many`` batches of 100 and 1000 rows (one fsync per batch). CPU time is
  this process's (one core); wall time includes the disk.
* **proofs** — a stored tree (the ``tree_nodes`` table of a ledger file) of 10³ … ``--max-leaves`` leaves:
  the largest inclusion and consistency proof over 200 random positions, in bytes (binary: 32 B a hash;
  the JSON the HTTP endpoint sends is hex, twice that), and the time to read one from SQLite. The proof
  *shape* depends only on the sizes, so sizes at 10⁷ and 10⁸ are computed exactly with placeholder nodes.
* **verify --witness** — ledgers of ``--verify-rows`` rows with a witnessed head every 1000 rows, verified in
  a child process: wall, CPU and peak RSS (``ru_maxrss``).

    python benchmarks/bench_ledger_tree.py                      # quick: 10⁵ leaves, verify to 4·10⁴ rows
    python benchmarks/bench_ledger_tree.py --max-leaves 1000000 --verify-rows 10000,40000,160000
"""

from __future__ import annotations

import argparse
import json
import random
import resource
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench_ledger import workload_payload  # this folder: the rows bench_ledger.py appends

from flopwatch.monitor import merkle
from flopwatch.monitor.ledger import Ledger
from flopwatch.monitor.ledger_format import SCHEMA
from flopwatch.monitor.tree import insert_nodes, node_getter


def bench_appends(d: Path, n_single: int, n_batch: int, head_every: int) -> None:
    print(f"appends (a signed head every {head_every} rows)")
    print(f"  {'mode':<34} {'rows':>7} {'rows/s wall':>12} {'rows/s CPU':>11}")
    modes = (("one row per transaction (fsync)", n_single, 1), ("append_many, 100 rows/transaction", n_batch, 100),
             ("append_many, 1000 rows/transaction", n_batch, 1000))  # fmt: skip
    for mode, n, k in modes:
        path = d / f"append-{n}-{k}.db"
        with Ledger(path, key_path=Path(f"{path}.key"), head_every=head_every) as led:
            w0, c0 = time.perf_counter(), time.process_time()
            if k == 1:
                for i in range(n):
                    led.append("workload", workload_payload(i))
            else:
                for lo in range(0, n, k):
                    led.append_many([("workload", workload_payload(i)) for i in range(lo, min(n, lo + k))])
            wall, cpu = time.perf_counter() - w0, time.process_time() - c0
            heads = led._con.execute("SELECT COUNT(*) FROM tree_heads").fetchone()[0]  # type: ignore[union-attr]
        print(f"  {mode:<34} {n:>7} {n / wall:>12.0f} {n / cpu:>11.0f}   ({heads} heads)")


def bench_proofs(d: Path, max_leaves: int) -> None:
    print("proofs (largest of 200 random positions; binary bytes, 32 B a hash)")
    print(f"  {'leaves':>11} {'inclusion B':>12} {'consistency B':>14} {'read ms':>8}  source")
    rng = random.Random(0)
    path = d / "tree.db"
    con = sqlite3.connect(path, isolation_level=None)
    con.executescript(SCHEMA)
    con.execute("PRAGMA synchronous=OFF")
    cr = merkle.CompactRange()
    get = node_getter(con)
    sizes = [10**k for k in range(3, 9) if 10**k <= max_leaves]
    i = 0
    for n in sizes:
        con.execute("BEGIN")
        batch: list[tuple[int, int, bytes]] = []
        while i < n:
            batch.extend(cr.append(merkle.leaf_hash(i.to_bytes(8, "big"))))
            i += 1
            if len(batch) > 50_000:
                insert_nodes(con, batch)
                batch.clear()
        insert_nodes(con, batch)
        con.execute("COMMIT")
        inc = con_ = 0
        t0 = time.perf_counter()
        reads = 0
        for _ in range(200):
            m = rng.randrange(n)
            inc = max(inc, 32 * len(merkle.inclusion_path(get, m, n)))
            con_ = max(con_, 32 * len(merkle.consistency_proof(get, m + 1, n)))
            reads += 2
        ms = 1e3 * (time.perf_counter() - t0) / reads
        print(f"  {n:>11,} {inc:>12} {con_:>14} {ms:>8.2f}  stored tree in SQLite")
    con.close()
    zero = b"\0" * 32
    for n in (10**7, 10**8):  # the shape only: placeholder nodes, no storage
        inc = max(
            32 * len(merkle.inclusion_path(lambda lv, i: zero, rng.randrange(n), n)) for _ in range(200)
        )
        con_ = max(
            32 * len(merkle.consistency_proof(lambda lv, i: zero, rng.randrange(n) + 1, n))
            for _ in range(200)
        )
        print(f"  {n:>11,} {inc:>12} {con_:>14} {'—':>8}  computed (shape only)")


_VERIFY = """
import json, resource, sys, time
from flopwatch.monitor.ledger import verify_ledger
from flopwatch.monitor.witness import read_log
w0, c0 = time.perf_counter(), time.process_time()
res = verify_ledger(sys.argv[1], witness=read_log(sys.argv[2]))
print(json.dumps({"ok": res.ok, "rows": res.n_rows, "witnessed": res.witnessed_size,
                  "wall": time.perf_counter() - w0, "cpu": time.process_time() - c0,
                  "rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))
"""


def bench_verify(d: Path, rows: list[int]) -> None:
    print("ledger verify --witness (child process; a witnessed head every 1000 rows)")
    print(f"  {'rows':>8} {'wall s':>7} {'CPU s':>7} {'µs/row CPU':>11} {'peak RSS MiB':>13}  ok")
    for n in rows:
        path = d / f"verify-{n}.db"
        log = d / f"verify-{n}.jsonl"
        with Ledger(path, key_path=Path(f"{path}.key"), head_every=1000) as led:
            for lo in range(0, n - 1, 1000):
                led.append_many([("workload", workload_payload(i)) for i in range(lo, min(n - 1, lo + 1000))])
            led.sign_head()
            heads = led._con.execute(  # type: ignore[union-attr]
                "SELECT size, root, time_ms, signature, key_id FROM tree_heads ORDER BY size"
            ).fetchall()
        with log.open("w") as f:
            for s, r, t, sig, k in heads:
                f.write(json.dumps({"size": s, "root": r, "time": t, "signature": sig, "key_id": k,
                                    "witnessed_at": t / 1000 + 1, "source": "bench"}) + "\n")  # fmt: skip
        out = subprocess.run(
            [sys.executable, "-c", _VERIFY, str(path), str(log)], capture_output=True, text=True
        )
        r = json.loads(out.stdout)
        print(
            f"  {r['rows']:>8} {r['wall']:>7.2f} {r['cpu']:>7.2f} {1e6 * r['cpu'] / r['rows']:>11.1f} "
            f"{r['rss_mib']:>13.1f}  {r['ok']} ({r['witnessed']} rows witnessed)"
        )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--single", type=int, default=2000, help="rows appended one transaction each")
    ap.add_argument("--batch", type=int, default=20000, help="rows appended 100 to a transaction")
    ap.add_argument("--head-every", type=int, default=1000)
    ap.add_argument("--max-leaves", type=int, default=100_000)
    ap.add_argument("--verify-rows", default="10000,20000,40000")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        d = Path(tmp)
        bench_appends(d, args.single, args.batch, args.head_every)
        bench_proofs(d, args.max_leaves)
        bench_verify(d, [int(x) for x in args.verify_rows.split(",")])
    print(f"(this process: CPU {time.process_time():.1f} s, peak RSS "
          f"{resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MiB)")  # fmt: skip


if __name__ == "__main__":
    main()
