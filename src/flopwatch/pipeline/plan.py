"""Plan a ``flopwatch run``: its options, the sweep of workloads, their durations, the idle baseline and gaps.

The default sweep on data-center GPUs is :func:`frontier_sweep`; ``--budget-s`` fits the plan into a time budget
(dropping first the runs the frontier gate would exclude). On the simulator each workload also gets its
description (closed-form FLOPs and bytes) so the twin can run it without torch.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from flopwatch.devices import get_device
from flopwatch.errors import FlopwatchError, InputError
from flopwatch.pipeline.device import DeviceChoice
from flopwatch.sim.accelerator import roofline
from flopwatch.workloads.config import make_config
from flopwatch.workloads.formulas import describe
from flopwatch.workloads.sweeps import SWEEP_DESCRIPTIONS, SWEEPS, get_sweep

#: Real-GPU time not spent in timed training (``--budget-s`` planning). Per workload: model build, first-step
#: kernel selection and warm-up (FLOP counting is done during the idle baseline). Per command: Python, torch and
#: CUDA start-up, and the analysis with figures and report.
REAL_PER_RUN_OVERHEAD_S = 4.0
REAL_FIXED_OVERHEAD_S = 40.0

#: ``--budget-s`` planning: fewer, longer runs rather than many short ones (at least this many runs, each at least
#: this long while the budget allows; 12 runs give the study's 2:1 split as 8/4).
BUDGET_MIN_RUNS = 12
BUDGET_MIN_RUN_S = 15.0


@dataclass
class RunOptions:
    """Options of one ``flopwatch run``."""

    outdir: Path
    device: str = "auto"
    sweep: str | None = None
    budget_s: float | None = None
    quick: bool = False
    seed: int = 0
    force: bool = False
    rate_hz: float = 10.0
    n_splits: int | None = None
    progress: bool = True
    models: Sequence[str] | None = None

    def __post_init__(self) -> None:
        # Checked before anything runs (a bad value found after the sweep would waste the GPU budget); fields
        # are named by their CLI flags.
        self.outdir = Path(self.outdir)
        if self.budget_s is not None and not (math.isfinite(self.budget_s) and self.budget_s > 0):
            raise InputError(
                f"must be a positive number of seconds, got {self.budget_s!r}", field="--budget-s"
            )
        if isinstance(self.seed, bool) or int(self.seed) != self.seed or self.seed < 0:
            raise InputError(f"must be a non-negative integer, got {self.seed!r}", field="--seed")
        if not (math.isfinite(self.rate_hz) and self.rate_hz > 0):
            raise InputError(
                f"must be a positive number of samples per second, got {self.rate_hz!r}", field="--rate"
            )
        if self.n_splits is not None and (
            isinstance(self.n_splits, bool) or int(self.n_splits) != self.n_splits or self.n_splits < 1
        ):
            raise InputError(f"must be an integer ≥ 1, got {self.n_splits!r}", field="--splits")


@dataclass
class PlannedWorkload:
    config: Any  # WorkloadConfig
    target_s: float  # timed duration to aim for
    description: Any = None  # WorkloadDescription (simulator)


@dataclass
class Plan:
    sweep_name: str
    sweep_note: str
    workloads: list[PlannedWorkload]
    idle_s: float
    gap_s: float
    warmup_steps: int
    expected_s: float  # expected wall (real) or virtual (sim) seconds of the sweep
    notes: list[str] = field(default_factory=list)


#: What ``frontier`` is (run's plan, ``workload sweeps``).
FRONTIER_SWEEP = (
    "flopwatch's frontier grid: GPT and seed-encoder configs in one precision, sized for data-center GPUs, plus 3 "
    "small host-bound and 2 other-precision runs the frontier gate must exclude"
)


def frontier_sweep(dtype: str = "bf16", *, quick: bool = False) -> list[Any]:
    """The default sweep of ``flopwatch run`` on data-center GPUs: frontier-shaped configs in one precision.

    The published sweeps are sized for a Jetson (``jetson-fp32``: host-bound on an A100) or mix precisions
    (``datacenter``); a calibration needs ≥ 15 GPU-bound runs of one precision. This grid varies width, depth,
    batch, sequence length and architecture (GPT and the seed encoder) the way the study's 26 configs do, at
    data-center scale, plus three small host-bound runs and two other-precision runs that the frontier gate must
    exclude (they show the gate working). ``quick`` keeps 15 frontier configs.
    """
    gpt = [  # (d_model, layers, batch, seq)
        (512, 8, 16, 1024),
        (768, 12, 16, 1024),
        (768, 6, 32, 512),
        (1024, 12, 8, 1024),
        (1024, 24, 16, 1024),
        (1024, 8, 8, 2048),
        (1280, 16, 8, 1024),
        (1536, 12, 8, 1024),
        (1536, 8, 16, 512),
        (2048, 8, 8, 1024),
        (2048, 16, 4, 2048),
        (768, 24, 8, 512),
        (512, 16, 32, 1024),
        (1024, 6, 32, 256),
    ]
    enc = [  # (d_model, layers, batch, seq, ff)
        (1024, 12, 32, 512, 4096),
        (768, 12, 64, 256, 3072),
        (1536, 8, 16, 512, 6144),
        (2048, 6, 16, 512, 8192),
        (1024, 6, 64, 512, 2048),
        (512, 12, 64, 512, 2048),
        (1280, 10, 32, 256, 5120),
    ]
    if quick:
        gpt, enc = gpt[:9], enc[:6]

    def cfg(arch: str, precision: str = dtype, **size: Any) -> Any:  # every run of the sweep: 10 steps
        return make_config(arch, steps=10, precision=precision, **size)

    gpt_cfgs = [
        cfg("gpt", d_model=d, num_layers=L, batch_size=b, seq_len=s, vocab_size=32768) for d, L, b, s in gpt
    ]
    enc_cfgs = [
        cfg("seed-encoder", d_model=d, num_layers=L, batch_size=b, seq_len=s, nhead=max(1, d // 64),
            dim_feedforward=ff)
        for d, L, b, s, ff in enc
    ]  # fmt: skip
    # Interleave the two families (2 GPT : 1 encoder), so a budget that truncates the list keeps both.
    cfgs: list[Any] = []
    gi, ei = iter(gpt_cfgs), iter(enc_cfgs)
    while len(cfgs) < len(gpt_cfgs) + len(enc_cfgs):
        for it, k in ((gi, 2), (ei, 1)):
            for _ in range(k):
                nxt = next(it, None)
                if nxt is not None:
                    cfgs.append(nxt)
    # Excluded by the gate: host-bound (utilisation far below 80 %) and other precisions.
    cfgs += [
        cfg("seed-encoder", d_model=128, num_layers=3, batch_size=8, seq_len=64),
        cfg("gpt", d_model=256, num_layers=2, batch_size=2, seq_len=128, vocab_size=2048),
    ]
    if not quick:
        cfgs.append(cfg("seed-encoder", d_model=192, num_layers=3, batch_size=8, seq_len=64))
    other = "fp32" if dtype != "fp32" else "bf16"
    cfgs += [
        cfg("gpt", other, d_model=768, num_layers=12, batch_size=8, seq_len=1024, vocab_size=32768),
        cfg("seed-encoder", other, d_model=1024, num_layers=6, batch_size=32, seq_len=512, nhead=16,
            dim_feedforward=4096),
    ]  # fmt: skip
    return cfgs


def describe_fast(config: Any) -> Any:
    """The simulator's workload description from the closed-form FLOP count (equal to ``FlopCounterMode``'s
    for both families, by test): no torch import on the simulator path; real runs count with torch."""
    return describe(config, "fused", counter="closed_form")


def plan_run(choice: DeviceChoice, opts: RunOptions) -> Plan:
    """Which workloads to run, for how long, with which idle baseline and gaps (fits ``--budget-s``)."""
    rng = np.random.default_rng([opts.seed, 0xB0D6E7])
    spec = get_device(choice.spec_key) if choice.spec_key else None
    notes: list[str] = []
    if opts.sweep:
        if opts.sweep not in SWEEPS and opts.sweep != "frontier":
            raise InputError(
                f"unknown sweep {opts.sweep!r}; known: frontier, {', '.join(SWEEPS)}", field="--sweep"
            )
        if opts.sweep == "frontier":
            cfgs = frontier_sweep(_frontier_dtype(spec), quick=opts.quick)
        else:
            cfgs = get_sweep(opts.sweep)
        name = opts.sweep
    elif spec is not None and spec.key == "orin-nano":
        cfgs = get_sweep("jetson-fp32")
        name = "jetson-fp32"
        if opts.quick:
            cfgs = cfgs[:18]
    else:
        cfgs = frontier_sweep(_frontier_dtype(spec), quick=opts.quick)
        name = "frontier"
    if spec is not None:
        keep = [c for c in cfgs if spec.supports(c.precision)]
        if len(keep) < len(cfgs):
            notes.append(f"{len(cfgs) - len(keep)} configs skipped: {spec.name} lacks their precision")
        cfgs = keep
    if not cfgs:
        raise InputError(f"sweep {name!r} has no workload this device can run", field="sweep")
    sim = choice.simulated
    # Durations: the study ran each workload for ~100–230 s; we vary 30–90 s (quick: 15–40 s) so duration and
    # power are not confounded with size.
    lo, hi = (15.0, 40.0) if opts.quick else (30.0, 90.0)
    targets = rng.uniform(lo, hi, len(cfgs))
    idle_s = 30.0 if opts.quick else 60.0
    gap_s = 8.0  # > 3 polls × 1.5 s of the detector's end hysteresis, plus margin
    warmup = 3
    # A budget is planned with the real GPU's overheads on the twin too, so `--device sim:h200 --budget-s 420`
    # plays exactly the plan (configs, durations) that `--device cuda --budget-s 420` gets on an H200: a preview.
    per_run_overhead = REAL_PER_RUN_OVERHEAD_S
    fixed_overhead = REAL_FIXED_OVERHEAD_S
    budget = opts.budget_s
    if budget is None and not sim:
        budget = 420.0
        notes.append("no --budget-s given: planning for 420 s on the real GPU")
    if budget is not None:
        idle_s = min(idle_s, max(15.0, 0.08 * budget))
        avail = budget - fixed_overhead - idle_s
        n_min = min(len(cfgs), BUDGET_MIN_RUNS)
        # Drop configs until each run gets BUDGET_MIN_RUN_S: the detected segment carries ~2 s of edges (start
        # and end latency of the 1.5 s polls, warm-up, model build on a real GPU) at low utilisation, so 10 s
        # runs averaged 74–80 % utilisation on the H200 twin and a third of them failed the 80 % gate.
        n = len(cfgs)
        while n > n_min and avail / n - gap_s - per_run_overhead < BUDGET_MIN_RUN_S:
            n -= 1
        if n < len(cfgs):
            keep = _likely_frontier_first(cfgs, spec)[:n]
            notes.append(
                f"--budget-s {budget:g}: ran {n} of {len(cfgs)} configs (dropped first: other precisions and "
                "configs the device's twin predicts near or below the 80 % utilisation gate)"
            )
            cfgs = [cfgs[i] for i in keep]
            targets = targets[keep]
        per_run = max(3.0, avail / len(cfgs) - gap_s - per_run_overhead)
        if per_run < lo:
            targets = np.full(len(cfgs), per_run) * rng.uniform(0.85, 1.0, len(cfgs))
        else:
            targets = np.minimum(targets, per_run)
        if avail / len(cfgs) - gap_s - per_run_overhead < 3.0:
            notes.append(f"--budget-s {budget:g} is too small for {len(cfgs)} runs; the run will take longer")
    workloads = [PlannedWorkload(c, float(t)) for c, t in zip(cfgs, targets, strict=True)]
    if sim:
        for w in workloads:
            w.description = describe_fast(w.config)
    expected = idle_s + sum(w.target_s + gap_s for w in workloads)  # virtual seconds on the twin
    if not sim:
        expected += per_run_overhead * len(workloads) + fixed_overhead
    sweep_note = {"frontier": FRONTIER_SWEEP}.get(name, "")
    if not sweep_note:
        sweep_note = SWEEP_DESCRIPTIONS.get(name, name)
    return Plan(name, sweep_note, workloads, idle_s, gap_s, warmup, expected, notes)


def _likely_frontier_first(cfgs: Sequence[Any], spec: Any) -> list[int]:
    """Indices of ``cfgs`` in the order a budget should keep them (sorted, each group in sweep order).

    A run that fails the frontier gate costs budget and adds nothing to the calibration, so a tight budget drops
    first the configs outside the sweep's main precision, then those the device's twin (roofline host/GPU model)
    puts below 85 % utilisation (:func:`flopwatch.sim.accelerator.roofline`, at the maximum clock): near the 80 %
    gate, as small models on a fast GPU are. Without a twin for the device only the precision rule applies.
    """
    dtypes = [c.precision for c in cfgs]
    main = max(sorted(set(dtypes)), key=dtypes.count)
    util = [1.0] * len(cfgs)
    if spec is not None and spec.vendor != "cpu":
        try:  # the twin's roofline alone (no power model, no fit): utilisation is what the gate checks
            util = [roofline(spec, describe_fast(c)).util for c in cfgs]
        except FlopwatchError:
            pass
    order = sorted(range(len(cfgs)), key=lambda i: (dtypes[i] != main, util[i] < 0.85, i))
    return order


def _frontier_dtype(spec: Any) -> str:
    if spec is None:
        return "bf16"
    return "bf16" if spec.supports("bf16") and spec.key != "orin-nano" else "fp32"
