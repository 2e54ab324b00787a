"""Speed of the simulated accelerator: virtual seconds simulated per wall second.

Run: ``python benchmarks/bench_sim.py``. Prints the wall time of a ten-minute simulated workload
(schedule build, bulk read-out and a full Sampler pass at 10 Hz), side by side with the virtual duration.
"""

from __future__ import annotations

import time

import numpy as np

from flopwatch.powermodel.device_power import power_model_for
from flopwatch.sim.accelerator import Idle, RawWorkload, Run
from flopwatch.sim.sensor import from_spec
from flopwatch.telemetry.sampler import Sampler


def main() -> None:
    t = time.perf_counter()
    power_model_for("a100")  # one-off per process: fits the MASCOTS cells
    t_fit = time.perf_counter() - t
    wl = RawWorkload(
        "bench",
        flops_per_step=2.6e13,
        bytes_per_step=8e10,
        tokens_per_step=1408,
        batch_size=128,
        dtype="bf16",
        num_layers=36,
    )
    virtual_s = 600.0
    t = time.perf_counter()
    sensors = from_spec("a100", seed=0, schedule=[Idle(10.0), Run(wl, duration_s=virtual_s), Idle(10.0)])
    t_build = time.perf_counter() - t
    acc = sensors[0].accelerator
    t = time.perf_counter()
    ts = np.arange(0.0, acc.end_s, 0.1)
    sensors[0].readout.read(ts)
    t_bulk = time.perf_counter() - t
    fresh = from_spec("a100", seed=0, schedule=[Idle(10.0), Run(wl, duration_s=virtual_s), Idle(10.0)])
    items: list = []
    t = time.perf_counter()
    Sampler(fresh, 10.0, sinks=[items.append], duration_s=acc.end_s).run()
    t_sampler = time.perf_counter() - t
    print(f"power model fit (once per process): {t_fit:8.3f} s")
    print(f"schedule build:                     {t_build:8.3f} s")
    print(f"{'':36s}{'wall s':>9s} {'virtual s':>10s} {'speed-up':>10s}")
    for name, wall, n in (
        ("bulk read-out, 10 Hz", t_bulk, ts.size),
        ("Sampler at 10 Hz", t_sampler, len(items)),
    ):
        print(f"{name:36s}{wall:9.3f} {acc.end_s:10.0f} {acc.end_s / wall:9.0f}x  ({n} readings)")


if __name__ == "__main__":
    main()
