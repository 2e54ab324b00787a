"""What does tamper evidence cost? Ledger append and verification throughput.

Each append signs one row (Ed25519) and commits it with SQLite ``synchronous=FULL`` (an fsync per row, so a
committed row survives power loss); verification recomputes every SHA-256 and Ed25519 signature. The daemon
appends one row per workload and one checkpoint every ``checkpoint_s`` (30 s), so even the slowest disk is far
from the limit; this prints the figures side by side with an unsigned, unchained SQLite insert as the baseline.

    python benchmarks/bench_ledger.py            # 2000 rows
    python benchmarks/bench_ledger.py --rows 200
"""

from __future__ import annotations

import argparse
import json
import sqlite3
import tempfile
import time
from pathlib import Path

from flopwatch.monitor.ledger import Ledger, verify_ledger


def workload_payload(i: int) -> dict:
    """The i-th workload row of a bench ledger (bench_ledger_verify.py signs the same rows)."""
    return {
        "device": "nvml:GPU-0",
        "start_wall": 1.7e9 + 60 * i,
        "end_wall": 1.7e9 + 60 * i + 55.5,
        "duration_s": 55.5,
        "energy_j": 15000.0 + i,
        "net_energy_j": 12000.0 + i,
        "estimate_flops": 1.2e17 + i,
        "lower_flops": 1.1e17,
        "upper_flops": 1.3e17,
        "verdict": "below",
        "status": "complete",
        "coverage": 1.0,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=2000)
    args = ap.parse_args()
    n = args.rows
    with tempfile.TemporaryDirectory() as d:
        base = sqlite3.connect(Path(d) / "plain.db", isolation_level=None)
        base.execute("PRAGMA journal_mode=WAL")
        base.execute("PRAGMA synchronous=FULL")
        base.execute("CREATE TABLE t (seq INTEGER PRIMARY KEY, payload TEXT)")
        t0 = time.perf_counter()
        for i in range(n):
            base.execute("INSERT INTO t(payload) VALUES (?)", (json.dumps(workload_payload(i)),))
        plain_s = time.perf_counter() - t0
        base.close()

        path = Path(d) / "ledger.db"
        with Ledger(path) as led:
            t0 = time.perf_counter()
            for i in range(n):
                led.append("workload", workload_payload(i))
            append_s = time.perf_counter() - t0
        t0 = time.perf_counter()
        res = verify_ledger(path)
        verify_s = time.perf_counter() - t0
        size = path.stat().st_size
    assert res.ok
    print(f"rows: {n} (+ genesis); ledger file {size / 1024:.0f} KiB ({size / (n + 1):.0f} B/row)")
    print(f"{'operation':<34} {'per row':>10} {'rows/s':>9}")
    print(f"{'plain SQLite insert (FULL sync)':<34} {1e3 * plain_s / n:8.3f}ms {n / plain_s:9.0f}")
    print(f"{'ledger append (hash+sign+FULL)':<34} {1e3 * append_s / n:8.3f}ms {n / append_s:9.0f}")
    print(f"{'ledger verify (hash+signature)':<34} {1e3 * verify_s / n:8.3f}ms {n / verify_s:9.0f}")
    print(f"signed append / plain insert: {append_s / plain_s:.2f}x")


if __name__ == "__main__":
    main()
