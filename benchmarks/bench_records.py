"""How long reading and writing workload records takes (``load_records`` / ``append_record``), per record.

Run:  python benchmarks/bench_records.py [--n 5000] [--repeat 3]

Writes N records like ``flopwatch run``'s (ground truth, timing, joined energy, a nested ``sim`` block) to a
temporary JSON Lines file, then times reading them back with validation. Prints the best of ``--repeat`` timings
(the machine may be shared) as wall seconds and CPU seconds.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

from flopwatch.records import load_records


def sample_record(i: int) -> dict:
    return {
        "schema": "flopwatch.record/1",
        "label": f"run{i}",
        "arch": "gpt",
        "config": {"arch": "gpt", "d_model": 512, "num_layers": 8, "batch_size": 16, "seq_len": 1024},
        "device": "sim:a100",
        "device_name": "NVIDIA A100-SXM4-80GB (simulated)",
        "dtype": "bf16",
        "start_monotonic_s": 30.0 + i,
        "end_monotonic_s": 50.0 + i,
        "start_wall": 1.7e9 + i,
        "end_wall": 1.7e9 + 20 + i,
        "steps": 381,
        "warmup_steps": 3,
        "flops_per_step": 5.085e12,
        "total_flops": 1.937e15,
        "achieved_flops_per_s": 9.78e13,
        "mfu": 0.31,
        "peak_flops": 3.12e14,
        "step_time_s": {"mean": 0.052, "median": 0.052, "p10": 0.051, "p90": 0.053, "std": 0.0008},
        "simulated": True,
        "sim": {"util": 0.99, "power_w": 320.0, "bound": "compute"},
        "duration_s": 21.0,
        "energy_j": 6472.7,
        "net_energy_j": 5457.3,
        "idle_power_w": 48.35,
        "mean_util": 0.945,
        "tb_moved": None,
        "coverage": 1.0,
        "join": {"status": "ok", "overlap_frac": 1.0},
    }


def best(fn, repeat: int) -> tuple[float, float]:
    walls, cpus = [], []
    for _ in range(repeat):
        w0, c0 = time.perf_counter(), time.process_time()
        fn()
        walls.append(time.perf_counter() - w0)
        cpus.append(time.process_time() - c0)
    return min(walls), min(cpus)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=5000)
    ap.add_argument("--repeat", type=int, default=3)
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as d:
        p = Path(d) / "r.jsonl"
        p.write_text("".join(json.dumps(sample_record(i)) + "\n" for i in range(a.n)))
        wall, cpu = best(lambda: load_records(p), a.repeat)
    print(
        f"load_records: {a.n} records in {wall:.3f} s wall / {cpu:.3f} s CPU ({1e6 * wall / a.n:.0f} µs/record)"
    )


if __name__ == "__main__":
    main()
