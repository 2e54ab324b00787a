"""The MASCOTS measurement protocol (:mod:`flopwatch.powermodel.bench`) on the simulated accelerator.

``flopwatch bench --device sim:KEY``: the same windows, stopping rule and aggregate rows as on a real GPU, in
virtual time; every number is simulated and labelled so. Lives in ``sim`` (which may import ``powermodel``), so
``powermodel`` never imports the simulator.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

from flopwatch.powermodel.bench import (
    BenchSettings,
    ReadingCollector,
    WindowTelemetry,
    measure_config,
    peak_for,
)
from flopwatch.sim.sensor import from_spec
from flopwatch.telemetry.sampler import Sampler
from flopwatch.workloads.formulas import describe


def bench_grid_sim(
    configs: Sequence[Any],
    *,
    spec: str = "a100",
    settings: BenchSettings | None = None,
    repeats: int = 1,
    seed: int = 0,
    on_row: Callable[[dict[str, Any]], None] | None = None,
) -> list[dict[str, Any]]:
    """The protocol on the simulated accelerator (``sim:KEY``), in virtual time: every number is simulated.

    Each config × repeat is scheduled on the digital twin (warm-up, then enough steps for ``max_samples``
    windows, then ``cooldown_s`` idle); windows advance virtual time by the simulated step time and the
    Sampler reads the simulated sensor jointly over each window at ``rate_hz``.
    """
    s = settings or BenchSettings()
    key = spec.split(":", 1)[1] if spec.startswith("sim:") else spec
    sensors = from_spec(key, seed=seed)
    sensor = sensors[0]
    acc = sensor.accelerator
    clock = sensor.clock
    collector = ReadingCollector()
    sampler = Sampler([sensor], s.rate_hz, sinks=[collector])
    info = sensor.info()
    # The whole grid is scheduled on the twin before the first reading (the simulated sensor reads a fixed
    # schedule): per config × repeat, warm-up + enough steps for max_samples windows (+20 % for the
    # run-to-run speed spread), then the cool-down idle.
    plan = []
    for config in configs:
        desc = describe(config)
        peak, _, _ = peak_for(info.name, info.spec_key, config.precision)
        for rep in range(repeats):
            st0 = acc.operating_point(desc).step_time_s
            per_window = max(1, math.ceil(s.window_s / st0))
            run = acc.run(desc, int((s.max_samples + 2) * per_window * 1.2) + 1, warmup_steps=s.warmup_steps)
            acc.idle(s.cooldown_s)
            plan.append((config, desc, peak, rep, run))
    rows: list[dict[str, Any]] = []
    for config, desc, peak, rep, run in plan:
        st = run.point.step_time_s
        cursor = {"t": run.warmup_start_s}

        def step(st: float = st, cursor: dict[str, float] = cursor) -> float:
            cursor["t"] += st
            return st

        def window(t0: float, t1: float) -> WindowTelemetry:
            clock.sleep_until(t0)
            n_ticks = max(1, int(round((t1 - t0) * s.rate_hz)))
            sampler.run(n_ticks=sampler.stats.n_ticks + n_ticks)
            clock.sleep_until(t1)
            return collector.window(t0, t1)

        row = measure_config(
            step,
            config,
            now=lambda cursor=cursor: cursor["t"],
            telemetry=window,
            flops_per_step=desc.flops_per_step,
            tokens_per_step=desc.tokens_per_step,
            peak_flops=peak,
            settings=s,
            gpu=info.name if info.simulated and "simulated" in info.name else f"{info.name} (simulated)",
            device=f"sim:{key}",
            sensor=f"sim:{key}",
            simulated=True,
            repeat=rep,
        )
        rows.append(row)
        if on_row:
            on_row(row)
    return rows
