"""How decisive the verifier is on honest runs (issue 21 item 10): median ``decisive_at`` per device, precision and
set of observables.

``decisive_at`` of an honest run is the smallest T ÷ truth at which the verdict is "below" (just above the sound
upper bound, when no assumption is violated); "never" when some warning blocks "below" at every threshold. Each
run is judged by a profile calibrated without its configuration. Observable sets: ``energy`` (net energy,
duration, utilisation, DRAM bytes, idle), ``+clock+pl`` (the SM clock range and power limit too), ``+pipes``
(per-pipe activity counters too). The Jetson v2 records carry energy observables only; the simulated twins
(A100/H100/H200, SIMULATED) carry all three, with the NVML sensor's blind 75 % as ``unobserved_s`` and, in
``+pipes``, the pipe counters' coverage (the whole run: they count every cycle) as ``pipe_observed_s``. Every run is
judged with the sensor context it was observed in: the v2 records the INA3221 rail VDD_CPU_GPU_CV at 2 Hz
(``redteam.real.v2_context``), a twin's the sensor its read-out emulates at the verifier's rate
(``redteam.simulated.twin_context``); an Orin's INA3221 read below its 152 Hz need is "never".

Run:  python benchmarks/bench_decisive.py [--quick] [--json]

Targets (issue 21): honest bf16/fp16 runs on simulated H100/H200 with pipe counters decided "below" at
T ≤ 2.5 × truth for ≥ 90 %; energy only, with clock and power limit observed, ≤ 5 ×.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import time
from collections import defaultdict

from flopwatch.redteam import real
from flopwatch.redteam.engine import World
from flopwatch.redteam.suite import real_honest_results, sim_honest


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument(
        "--quick", action="store_true", help="2 configurations per device (else 5), 4 Orin (else 10)"
    )
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    w0, c0 = time.perf_counter(), time.process_time()
    honest = list(sim_honest(World(quick=args.quick)))
    v2 = real.find_v2()
    if v2 is not None:
        honest.extend(
            real_honest_results(
                v2, note=lambda r: "frontier" if (r.mean_util or 0.0) >= 0.8 else "below the gate"
            )
        )
    groups: dict[tuple[str, str, str], list[float]] = defaultdict(list)
    for h in honest:
        variant = "default" if "," not in h.note else h.note.split(",", 1)[1].strip()
        if h.note in ("frontier", "below the gate"):
            variant = h.note
        for s, v in h.decisive_at.items():
            groups[(h.device, f"{h.dtype} {variant}".strip(), s)].append(math.inf if v is None else v)
    rows = []
    for (dev, what, s), vs in sorted(groups.items()):
        rows.append(
            {
                "device": dev,
                "runs": what,
                "observables": s,
                "n": len(vs),
                "median_decisive_at": statistics.median(vs),
                "within_2_5x_pct": 100.0 * sum(v <= 2.5 for v in vs) / len(vs),
                "within_5x_pct": 100.0 * sum(v <= 5.0 for v in vs) / len(vs),
                "simulated": not dev.startswith("orin-nano (real"),
            }
        )

    def share(devs: tuple[str, ...], dtypes: tuple[str, ...], s: str, k: float) -> float | None:
        vs = [
            (v if v is not None else math.inf)
            for h in honest
            if h.device in devs and h.dtype in dtypes and "," not in h.note
            for ss, v in h.decisive_at.items()
            if ss == s
        ]
        return 100.0 * sum(v <= k for v in vs) / len(vs) if vs else None

    hop = ("sim:h100", "sim:h200")
    targets = {
        "bf16/fp16 on simulated H100/H200 with pipe counters: % decided at ≤ 2.5 × (target ≥ 90)": share(
            hop, ("bf16", "fp16"), "+pipes", 2.5
        ),
        "bf16/fp16 on simulated H100/H200, energy + clock + power limit: % decided at ≤ 5 × (target: all)": share(
            hop, ("bf16", "fp16"), "+clock+pl", 5.0
        ),
        "fp32 frontier (utilisation ≥ 80 %) on the real Jetson v2 records, energy only: median": statistics.median(
            [
                h.decisive_at["energy"] if h.decisive_at["energy"] is not None else math.inf
                for h in honest
                if h.device.startswith("orin-nano (real") and h.dtype == "fp32" and h.note == "frontier"
            ]
            or [math.nan]
        ),
    }
    wall, cpu = time.perf_counter() - w0, time.process_time() - c0
    if args.json:
        print(
            json.dumps(
                {"rows": rows, "targets": targets, "wall_s": wall, "cpu_s": cpu}, indent=1, default=str
            )
        )
        return
    print(
        f"{'device':22s} {'runs':28s} {'observables':11s} {'n':>3s} {'median':>8s} {'≤2.5×':>6s} {'≤5×':>6s}"
    )
    for r in rows:
        m = r["median_decisive_at"]
        med = "never" if not math.isfinite(m) else f"×{m:.2f}"
        print(
            f"{r['device']:22s} {r['runs'][:28]:28s} {r['observables']:11s} {r['n']:3d} {med:>8s} "
            f"{r['within_2_5x_pct']:5.0f}% {r['within_5x_pct']:5.0f}%"
        )
    for k, v in targets.items():
        print(f"{k}: {'n/a' if v is None else 'never' if math.isinf(v) else f'{v:.1f}'}")
    print(
        "sim:* rows are SIMULATED (flopwatch.sim twins); orin-nano (real, v2) rows are the published records"
    )
    print(f"wall {wall:.1f} s, CPU {cpu:.1f} s")


if __name__ == "__main__":
    main()
