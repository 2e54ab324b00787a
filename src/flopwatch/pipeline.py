"""``flopwatch run``: the whole study, end to end, on a real GPU or on the simulated accelerator.

Steps (Fowler 2026's protocol, generalised):

1. **Device** — ``auto`` takes a real NVIDIA GPU with working NVML telemetry (and a CUDA build of torch), else
   ``sim:a100``; ``cuda[:N]`` insists on the real GPU, ``sim:NAME`` on the simulator.
2. **Idle baseline**, then **the sweep**: every workload trains (on a real GPU: really, timed with CUDA events by
   :func:`flopwatch.workloads.run.run_workload`; on the simulator: in virtual time) while the sampler records
   telemetry into ``trace.parquet``. Idle gaps between workloads let the detector separate them.
3. **Detection** of every workload in the trace (the study's hysteresis) and its **join** with the ground-truth
   record by time overlap; anything that does not match one-to-one is reported.
4. **Frontier gate** (mean utilisation ≥ 80 %, one precision), **calibration** of the default estimator
   (``profile.json``), **repeated-split evaluation** of all estimators (200 random 2/3 : 1/3 splits, as the study's
   14/7), **threshold analysis**.
5. Outputs in DIR: ``trace.parquet``, ``records.jsonl``, ``profile.json``, ``summary.json`` (contract keys),
   ``evaluation.json``, ``figures/*.png`` and a self-contained ``report.html``.

Everything from the simulator is labelled simulated: trace metadata, every record, the summary and the report.
"""

from __future__ import annotations

import json
import math
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from flopwatch import __version__
from flopwatch.errors import FlopwatchError, InputError

#: Files ``flopwatch run`` writes (``--force`` removes exactly these, nothing else).
OUTPUT_FILES = (
    "trace.parquet",
    "trace.parquet.journal",
    "records.jsonl",
    "profile.json",
    "summary.json",
    "evaluation.json",
    "report.html",
)
FIGURES_DIR = "figures"

SUMMARY_KEYS = (
    "device",
    "simulated",
    "n_workloads",
    "n_frontier",
    "default_model",
    "heldout_mae_pct",
    "frac_splits_any_over_10pct",
    "idle_power_w",
)

#: Real-GPU time not spent in timed training (``--budget-s`` planning). Per workload: model build, first-step
#: kernel selection and warm-up (FLOP counting is done during the idle baseline). Per command: Python, torch and
#: CUDA start-up, and the analysis with figures and report.
REAL_PER_RUN_OVERHEAD_S = 4.0
REAL_FIXED_OVERHEAD_S = 40.0

#: ``--budget-s`` planning: fewer, longer runs rather than many short ones (at least this many runs, each at least
#: this long while the budget allows; 12 runs give the study's 2:1 split as 8/4).
BUDGET_MIN_RUNS = 12
BUDGET_MIN_RUN_S = 15.0

#: The study's split ratio: 14 training runs of 21 (Fowler 2026).
TRAIN_FRACTION = 14 / 21
MIN_FRONTIER = 6


# ---------------------------------------------------------------------------------------------- options
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


@dataclass(frozen=True)
class DeviceChoice:
    """The device a run uses and why."""

    kind: str  # "sim" | "cuda"
    label: str  # "sim:a100" | "cuda:0"
    spec_key: str | None
    index: int = 0
    reason: str = ""
    nvml_spec: str | None = None  # "nvml:GPU-…" (matched by UUID: CUDA and NVML may number GPUs differently)

    @property
    def simulated(self) -> bool:
        return self.kind == "sim"


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


# ---------------------------------------------------------------------------------------------- device
def _nvml_ok(index: int | None) -> tuple[bool, str, list[Any]]:
    """Whether NVML telemetry works for GPU ``index`` (None: the first): power and utilisation readable."""
    from flopwatch.telemetry.sensors.discover import open_sensors

    spec = "nvml" if index is None else f"nvml:{index}"
    try:
        sensors = open_sensors(spec)
    except (FlopwatchError, OSError, ImportError) as e:
        return False, f"no NVML telemetry ({e})", []
    try:
        r = sensors[0].read()
    except FlopwatchError as e:
        for s in sensors:
            s.close()
        return False, f"NVML read failed ({e})", []
    if r.power_w is None or r.util is None:
        for s in sensors:
            s.close()
        return False, "NVML gives no power or utilisation reading", []
    return True, "", sensors


def _cuda_ok() -> tuple[bool, str]:
    try:
        import torch
    except ImportError:
        return False, "torch is not installed"
    if not torch.cuda.is_available():
        return False, f"torch {torch.__version__} has no CUDA device"
    return True, ""


def resolve_device(spec: str) -> DeviceChoice:
    """Turn ``--device`` into a :class:`DeviceChoice` (InputError when the asked-for device is unusable)."""
    s = str(spec).strip().lower()
    if s.startswith("sim:") or s == "sim":
        from flopwatch.sim.sensor import parse_spec

        key, n = parse_spec(s)
        if n != 1:
            raise InputError(f"{spec}: flopwatch run uses one device; drop the x{n}", field="device")
        return DeviceChoice("sim", f"sim:{key}", key, reason="simulator requested")
    if s == "auto":
        ok, why, sensors = _nvml_ok(None)
        for x in sensors:
            x.close()
        if ok:
            cok, cwhy = _cuda_ok()
            if cok:
                return _cuda_choice(0, "a real GPU with working NVML telemetry was found")
            why = cwhy
        return DeviceChoice(
            "sim", "sim:a100", "a100", reason=f"no usable GPU ({why}); using the simulated A100"
        )
    if s == "cuda" or s.startswith("cuda:"):
        idx = 0
        if s.startswith("cuda:"):
            try:
                idx = int(s.split(":", 1)[1])
            except ValueError:
                raise InputError(f"expected cuda or cuda:N, got {spec!r}", field="device") from None
        ok, why, sensors = _nvml_ok(idx)
        for x in sensors:
            x.close()
        if not ok:
            raise InputError(f"{spec}: {why}; use --device sim:a100 to run on the simulator", field="device")
        cok, cwhy = _cuda_ok()
        if not cok:
            raise InputError(f"{spec}: {cwhy}", field="device")
        return _cuda_choice(idx, "requested")
    raise InputError(f"unknown device {spec!r}; expected auto, cuda[:N] or sim:NAME", field="device")


def _cuda_choice(idx: int, reason: str) -> DeviceChoice:
    import torch

    from flopwatch.devices import get_device

    name = torch.cuda.get_device_name(idx)
    try:
        key: str | None = get_device(name).key
    except InputError:
        key = None
    nvml_spec = f"nvml:{idx}"
    try:  # CUDA orders devices fastest-first, NVML by PCI bus: match the telemetry to the GPU by UUID
        uuid = str(torch.cuda.get_device_properties(idx).uuid)
        nvml_spec = "nvml:" + (uuid if uuid.startswith("GPU-") else f"GPU-{uuid}")
    except Exception:  # older torch: fall back to the index (correct unless CUDA_DEVICE_ORDER differs)
        pass
    return DeviceChoice(
        "cuda", f"cuda:{idx}", key, index=idx, reason=f"{reason}: {name}", nvml_spec=nvml_spec
    )


# ---------------------------------------------------------------------------------------------- sweep
def frontier_sweep(dtype: str = "bf16", *, quick: bool = False) -> list[Any]:
    """The default sweep of ``flopwatch run`` on data-center GPUs: frontier-shaped configs in one precision.

    The published sweeps are sized for a Jetson (``jetson-fp32``: host-bound on an A100) or mix precisions
    (``datacenter``); a calibration needs ≥ 15 GPU-bound runs of one precision. This grid varies width, depth,
    batch, sequence length and architecture (GPT and the seed encoder) the way the study's 26 configs do, at
    data-center scale, plus three small host-bound runs and two other-precision runs that the frontier gate must
    exclude (they show the gate working). ``quick`` keeps 15 frontier configs.
    """
    from flopwatch.workloads.config import make_config

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
    gpt_cfgs = [
        make_config(
            "gpt",
            d_model=d,
            num_layers=L,
            batch_size=b,
            seq_len=s,
            steps=10,
            vocab_size=32768,
            precision=dtype,
        )
        for d, L, b, s in gpt
    ]
    enc_cfgs = [
        make_config(
            "seed-encoder",
            d_model=d,
            num_layers=L,
            batch_size=b,
            seq_len=s,
            steps=10,
            nhead=max(1, d // 64),
            dim_feedforward=ff,
            precision=dtype,
        )
        for d, L, b, s, ff in enc
    ]
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
        make_config(
            "seed-encoder", d_model=128, num_layers=3, batch_size=8, seq_len=64, steps=10, precision=dtype
        ),
        make_config(
            "gpt",
            d_model=256,
            num_layers=2,
            batch_size=2,
            seq_len=128,
            steps=10,
            vocab_size=2048,
            precision=dtype,
        ),
    ]
    if not quick:
        cfgs.append(
            make_config(
                "seed-encoder", d_model=192, num_layers=3, batch_size=8, seq_len=64, steps=10, precision=dtype
            )
        )
    other = "fp32" if dtype != "fp32" else "bf16"
    cfgs += [
        make_config(
            "gpt",
            d_model=768,
            num_layers=12,
            batch_size=8,
            seq_len=1024,
            steps=10,
            vocab_size=32768,
            precision=other,
        ),
        make_config(
            "seed-encoder",
            d_model=1024,
            num_layers=6,
            batch_size=32,
            seq_len=512,
            steps=10,
            nhead=16,
            dim_feedforward=4096,
            precision=other,
        ),
    ]
    return cfgs


def describe_fast(config: Any) -> Any:
    """The simulator's workload description from the closed-form FLOP count (equal to ``FlopCounterMode``'s
    for both families, by test): no torch import on the simulator path; real runs count with torch."""
    from flopwatch.workloads.formulas import describe

    return describe(config, "fused", counter="closed_form")


def plan_run(choice: DeviceChoice, opts: RunOptions) -> Plan:
    """Which workloads to run, for how long, with which idle baseline and gaps (fits ``--budget-s``)."""
    from flopwatch.devices import get_device

    rng = np.random.default_rng([opts.seed, 0xB0D6E7])
    spec = get_device(choice.spec_key) if choice.spec_key else None
    notes: list[str] = []
    if opts.sweep:
        from flopwatch.workloads.sweeps import SWEEPS, get_sweep

        if opts.sweep not in SWEEPS and opts.sweep != "frontier":
            raise InputError(
                f"unknown sweep {opts.sweep!r}; known: frontier, {', '.join(SWEEPS)}", field="sweep"
            )
        if opts.sweep == "frontier":
            cfgs = frontier_sweep(_frontier_dtype(spec), quick=opts.quick)
        else:
            cfgs = get_sweep(opts.sweep)
        name = opts.sweep
    elif spec is not None and spec.key == "orin-nano":
        from flopwatch.workloads.sweeps import get_sweep

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
    sweep_note = {
        "frontier": "flopwatch's frontier grid: GPT and seed-encoder configs in one precision, sized for data-center "
        "GPUs, plus 3 small host-bound and 2 other-precision runs the frontier gate must exclude",
    }.get(name, "")
    if not sweep_note:
        from flopwatch.workloads.sweeps import SWEEP_DESCRIPTIONS

        sweep_note = SWEEP_DESCRIPTIONS.get(name, name)
    return Plan(name, sweep_note, workloads, idle_s, gap_s, warmup, expected, notes)


def _likely_frontier_first(cfgs: Sequence[Any], spec: Any) -> list[int]:
    """Indices of ``cfgs`` in the order a budget should keep them (sorted, each group in sweep order).

    A run that fails the frontier gate costs budget and adds nothing to the calibration, so a tight budget drops
    first the configs outside the sweep's main precision, then those the device's twin (roofline host/GPU model)
    puts below 85 % utilisation: near the 80 % gate, as small models on a fast GPU are. Without a twin for the
    device (or without the data it needs) only the precision rule applies.
    """
    dtypes = [c.precision for c in cfgs]
    main = max(sorted(set(dtypes)), key=dtypes.count)
    util = [1.0] * len(cfgs)
    if spec is not None:
        try:
            from flopwatch.sim.accelerator import SimulatedAccelerator

            acc = SimulatedAccelerator(spec.key)
            util = [acc.operating_point(describe_fast(c)).util for c in cfgs]
        except (FlopwatchError, OSError, ImportError):
            pass
    order = sorted(range(len(cfgs)), key=lambda i: (dtypes[i] != main, util[i] < 0.85, i))
    return order


def _frontier_dtype(spec: Any) -> str:
    if spec is None:
        return "bf16"
    return "bf16" if spec.supports("bf16") and spec.key != "orin-nano" else "fp32"


# ---------------------------------------------------------------------------------------------- progress
class _Progress:
    """One rich progress bar over the whole run, advanced in expected-seconds units (so the ETA is honest)."""

    def __init__(self, enabled: bool, total: float) -> None:
        self.enabled = enabled
        self._p: Any = None
        self._task: Any = None
        self._done = 0.0
        if enabled:
            from rich.console import Console
            from rich.progress import (
                BarColumn,
                Progress,
                TaskProgressColumn,
                TextColumn,
                TimeElapsedColumn,
                TimeRemainingColumn,
            )

            self._p = Progress(
                TextColumn("[bold]{task.description}"),
                BarColumn(),
                TaskProgressColumn(),
                TimeElapsedColumn(),
                TextColumn("ETA"),
                TimeRemainingColumn(),
                transient=False,
                console=Console(stderr=True),  # stdout stays for the results (and --json)
            )
            self._p.start()
            self._task = self._p.add_task("starting", total=total)

    def stage(self, text: str) -> None:
        if self._p is not None:
            self._p.update(self._task, description=text)

    def advance(self, units: float) -> None:
        self._done += units
        if self._p is not None:
            self._p.update(self._task, advance=units)

    def close(self) -> None:
        if self._p is not None:
            self._p.update(self._task, completed=self._p.tasks[0].total, description="done")
            self._p.stop()


# ---------------------------------------------------------------------------------------------- execution
@dataclass
class Execution:
    """What the sweep produced: the trace on disk, the ground-truth records, what went wrong."""

    trace_path: Path
    records: list[dict[str, Any]]
    failures: list[dict[str, Any]]
    sampler_stats: dict[str, Any]
    sensor_info: Any
    device_name: str


def _execute_sim(
    choice: DeviceChoice, plan: Plan, opts: RunOptions, prog: _Progress, trace_path: Path
) -> Execution:
    from flopwatch.sim.accelerator import Idle, Run, SimulatedAccelerator
    from flopwatch.sim.sensor import from_spec
    from flopwatch.telemetry.reading import TraceWriter, base_metadata
    from flopwatch.telemetry.sampler import Sampler

    items: list[Any] = [Idle(plan.idle_s)]
    probe = SimulatedAccelerator(choice.spec_key or "a100", seed=opts.seed)
    for w in plan.workloads:
        d = w.description
        # Steps so the timed region lasts ~target_s on this device (like run_workload(seconds=...)).
        steps = max(1, int(round(w.target_s / probe.operating_point(d).step_time_s)))
        extra = {
            "attention_convention": d.attention_convention,
            "optimizer_flops_per_step": d.optimizer_flops_per_step,
            "params": d.params,
            "flop_counting": d.flops_source,
            "seed": opts.seed,
            "peak_dtype": d.dtype,
        }
        items += [Run(d, steps=steps, warmup_steps=plan.warmup_steps, extra=extra), Idle(plan.gap_s)]
    sensors = from_spec(choice.spec_key or "a100", seed=opts.seed, schedule=items)
    acc = sensors[0].accelerator
    info = sensors[0].info()
    md = base_metadata(
        kind="sim",
        rate_hz=opts.rate_hz,
        fingerprint=dict(info.fingerprint),
        simulated=True,
        device=info.device_id,
        device_name=info.name,
        source="flopwatch run (simulated accelerator)",
    )
    total_virtual = acc.end_s + 5.0
    scale = 1.0 / max(total_virtual, 1e-9)
    last = [0.0]
    weight = prog_weight_sweep(True, plan, opts.rate_hz)

    def progress_sink(item: Any) -> None:
        t = item.t_s
        if t - last[0] >= 30.0:  # update every 30 virtual seconds
            prog.advance((t - last[0]) * scale * weight)
            last[0] = t

    with TraceWriter(
        trace_path, md, flush_every_s=1e9, row_group_rows=50_000, overwrite=opts.force
    ) as writer:
        sink = gpm_dram_bytes(writer, acc.spec.mem_bw_bytes_per_s)
        sampler = Sampler(sensors, opts.rate_hz, sinks=[sink, progress_sink], duration_s=total_virtual)
        prog.stage(f"simulating {len(plan.workloads)} workloads on {choice.label}")
        stats = sampler.run()
    prog.advance(max(0.0, (total_virtual - last[0]) * scale * weight))
    records = []
    for run, w in zip(acc.runs, plan.workloads, strict=True):
        rec = run.record()
        rec["config"] = w.config.to_dict()
        rec["arch"] = w.config.arch
        rec["device_spec"] = acc.spec.key
        rec["target_s"] = w.target_s
        records.append(rec)
    return Execution(trace_path, records, [], stats.to_dict(), info, acc.name)


def _execute_cuda(
    choice: DeviceChoice, plan: Plan, opts: RunOptions, prog: _Progress, trace_path: Path
) -> Execution:
    from flopwatch.telemetry.reading import TraceWriter, base_metadata
    from flopwatch.telemetry.sampler import Sampler
    from flopwatch.telemetry.sensors.discover import open_sensors
    from flopwatch.workloads.run import run_workload

    try:
        sensors = open_sensors(choice.nvml_spec or f"nvml:{choice.index}")
    except FlopwatchError:
        sensors = open_sensors(f"nvml:{choice.index}")
    info = sensors[0].info()
    md = base_metadata(
        kind=info.kind,
        rate_hz=opts.rate_hz,
        fingerprint=dict(info.fingerprint),
        simulated=False,
        device=info.device_id,
        device_name=info.name,
        source="flopwatch run",
    )
    records: list[dict[str, Any]] = []
    failures: list[dict[str, Any]] = []
    per_unit = 1.0  # progress units are wall seconds on a real GPU
    dev = f"cuda:{choice.index}"
    with TraceWriter(trace_path, md, overwrite=opts.force) as writer:
        sink = gpm_dram_bytes(writer, _mem_bw(choice.spec_key))
        sampler = Sampler(sensors, opts.rate_hz, sinks=[sink])
        sampler.start()
        try:
            prog.stage(f"idle baseline ({plan.idle_s:.0f} s) while counting FLOPs on the meta device")
            t_idle = time.monotonic()
            _precount_flops(plan)
            prog.advance(min(time.monotonic() - t_idle, plan.idle_s))
            _sleep_with_progress(plan.idle_s - (time.monotonic() - t_idle), prog, per_unit)
            for i, w in enumerate(plan.workloads):
                prog.stage(f"[{i + 1}/{len(plan.workloads)}] {w.config.name} on {dev}")
                t0 = time.monotonic()
                try:
                    rec = run_workload(
                        w.config, dev, seconds=w.target_s, warmup=plan.warmup_steps, seed=opts.seed
                    )
                    rec["target_s"] = w.target_s
                    records.append(rec)
                except Exception as e:  # OOM or a kernel failure: record it, keep going
                    failures.append({"label": w.config.name, "error": f"{type(e).__name__}: {e}"})
                    _free_cuda()
                prog.advance(min(time.monotonic() - t0, w.target_s + 4.0) * per_unit)
                _sleep_with_progress(plan.gap_s, prog, per_unit)
                if sampler.exception is not None:
                    raise sampler.exception
        except BaseException as e:
            # Ctrl-C, a dead sampler or a crashed driver mid-sweep: the trace is closed by the writer's context;
            # keep the ground truth of the workloads that finished (minutes of GPU time) next to it.
            _save_unjoined(
                trace_path.parent / "records.jsonl",
                records,
                failures,
                f"sweep interrupted: {type(e).__name__}: {e}",
            )
            raise
        finally:
            stats = sampler.stop()
            for s in sensors:
                s.close()
    return Execution(trace_path, records, failures, stats.to_dict(), info, info.name)


def _save_unjoined(
    path: Path, records: list[dict[str, Any]], failures: list[dict[str, Any]], reason: str
) -> None:
    """Append the records of a sweep that could not be analysed, unjoined, so nothing measured is lost."""
    from flopwatch.records import append_record

    failed = "; ".join(f"{f['label']}: {f['error']}" for f in failures)
    detail = reason + (f"; failed runs: {failed}" if failed else "")
    for rec in records:
        append_record(path, {**rec, "join": {"status": "not analysed", "detail": detail}})


def _mem_bw(spec_key: str | None) -> float | None:
    if spec_key is None:
        return None
    from flopwatch.devices import get_device

    return get_device(spec_key).mem_bw_bytes_per_s


def gpm_dram_bytes(sink: Callable[[Any], None], mem_bw_bytes_per_s: float | None) -> Callable[[Any], None]:
    """A sink that fills ``dram_bytes_per_s`` from NVML GPM's DRAM bandwidth utilisation before ``sink`` sees it.

    NVML has no DRAM byte counter, but on Hopper and later GPM reports ``DRAM_BW_UTIL``, the share of the
    theoretical peak bandwidth used over the last sample interval (NVML API reference, ``nvmlGpmMetricsGet``);
    flopwatch's NVML sensor (and the Hopper twins) put it in ``extra["dram_bw_util"]`` (0–1). Times the datasheet
    peak (``devices.py``) it is DRAM bytes per second, so the study's eq. 1 (which needs TB moved) can be evaluated on
    an H100/H200. The converted readings say so: ``extra["dram_from_gpm"] = 1``. Without GPM, or without a known
    peak, readings pass through unchanged.
    """
    if not mem_bw_bytes_per_s:
        return sink

    def convert(item: Any) -> None:
        extra = getattr(item, "extra", None)
        if extra and getattr(item, "dram_bytes_per_s", 1.0) is None and "dram_bw_util" in extra:
            from dataclasses import replace

            item = replace(
                item,
                dram_bytes_per_s=float(extra["dram_bw_util"]) * mem_bw_bytes_per_s,
                extra={**extra, "dram_from_gpm": 1.0},
            )
        sink(item)

    return convert


def _precount_flops(plan: Plan) -> None:
    """Count every planned config's FLOPs (meta device, CPU only, cached by shape) during the idle baseline.

    ``run_workload`` would otherwise count each one between workloads (~0.5–2 s each), time the budget pays for;
    the GPU is untouched, so the idle baseline stays idle. A config that cannot be counted fails later, in its run,
    where the failure is recorded.
    """
    from flopwatch.workloads.ground_truth import count_flops

    for w in plan.workloads:
        try:
            count_flops(w.config, attention="fused")  # run_workload's convention on CUDA
        except Exception:  # reported by run_workload for this config
            pass


def _sleep_with_progress(seconds: float, prog: _Progress, per_unit: float) -> None:
    end = time.monotonic() + seconds
    while True:
        left = end - time.monotonic()
        if left <= 0:
            break
        step = min(0.5, left)
        time.sleep(step)
        prog.advance(step * per_unit)


def _free_cuda() -> None:
    try:
        import torch

        torch.cuda.empty_cache()
    except Exception:
        pass


#: Expected wall seconds of the analysis stages (2 shared CPU cores; figures dominate), the progress bar's units.
ANALYSIS_S = {"detect": 0.6, "calibrate": 0.2, "evaluate": 0.6, "threshold": 0.05, "figure": 0.7}
#: Wall seconds per simulated sample (sensor read, Sampler, TraceWriter) and to build the simulated device.
SIM_S_PER_SAMPLE, SIM_SETUP_S = 4e-4, 1.5


def prog_weight_sweep(sim: bool, plan: Plan, rate_hz: float = 10.0) -> float:
    """Progress units (expected wall seconds) of the sweep stage.

    On a real GPU the sweep takes the wall time the plan expects (start-up and analysis are counted separately);
    on the simulator it takes what sampling ``plan.expected_s`` virtual seconds costs.
    """
    if sim:
        return SIM_SETUP_S + SIM_S_PER_SAMPLE * plan.expected_s * rate_hz
    return plan.expected_s - REAL_FIXED_OVERHEAD_S


def _analysis_units(n_figures: int = 8) -> float:
    a = ANALYSIS_S
    return a["detect"] + a["calibrate"] + a["evaluate"] + a["threshold"] + a["figure"] * n_figures


# ---------------------------------------------------------------------------------------------- join
def join_records(
    records: list[dict[str, Any]], detection: Any, *, t0_monotonic_s: float, device: str
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Match each ground-truth record to the detected segment it overlaps most (one-to-one).

    The measured fields (``duration_s``, ``energy_j``, ``net_energy_j``, ``idle_power_w``, ``mean_util``,
    ``tb_moved``, ``coverage``) come from the detected segment, as in the study (the estimate sees only telemetry);
    the record keeps its own timed region. Only a clean one-to-one match (``join.status == "ok"``) gets them: a run
    split into several segments, two runs merged into one segment, or a segment covering < 90 % of its run would
    give the calibration a wrong energy, so those records keep the join details but no measured energy (they are
    reported and left out of calibration and evaluation). Returns (joined records, mismatches).
    """
    segs = [s for s in detection.segments if s.device == device] or list(detection.segments)
    problems: list[dict[str, Any]] = []
    # Pass 1: each record's best segment and its own status; pass 2 needs every record to see merges.
    plans: list[tuple[dict[str, Any], float, float, int | None, str, float, int]] = []
    claimed: dict[int, list[str]] = {}
    split_pieces: dict[int, str] = {}
    for rec in records:
        a = float(rec["start_monotonic_s"]) - t0_monotonic_s
        b = float(rec["end_monotonic_s"]) - t0_monotonic_s
        overlaps = sorted(
            ((max(0.0, min(b, s.end_s) - max(a, s.start_s)), i) for i, s in enumerate(segs)), reverse=True
        )
        overlaps = [(o, i) for o, i in overlaps if o > 0]
        if not overlaps:
            plans.append((rec, a, b, None, "not detected", 0.0, 0))
            continue
        o, i = overlaps[0]
        n_big = sum(1 for x, _ in overlaps if x > 0.1 * (b - a))
        status = "split" if n_big > 1 else ("partial" if o / max(b - a, 1e-9) < 0.9 else "ok")
        for _, j in overlaps[1:]:  # pieces of this run: not "unmatched" activity
            split_pieces.setdefault(j, str(rec["label"]))
        claimed.setdefault(i, []).append(str(rec["label"]))
        plans.append((rec, a, b, i, status, o / max(b - a, 1e-9), len(overlaps)))

    out: list[dict[str, Any]] = []
    for rec, a, b, i, status, cover, n_overlaps in plans:
        r = dict(rec)
        r["idle_power_w"] = detection.idle_power_w
        if i is None:
            problems.append(
                {"label": rec["label"], "kind": "not detected", "detail": "no segment overlaps its run"}
            )
            r["join"] = {"status": "not detected"}
            out.append(r)
            continue
        seg = segs[i]
        others = [x for x in claimed[i] if x != str(rec["label"])]
        if others:
            status = "merged"
            problems.append(
                {
                    "label": rec["label"],
                    "kind": "merged",
                    "detail": f"shares a segment with {', '.join(others)}",
                }
            )
        elif status == "split":
            problems.append(
                {"label": rec["label"], "kind": "split", "detail": f"{n_overlaps} segments overlap its run"}
            )
        elif status == "partial":
            problems.append(
                {"label": rec["label"], "kind": "partial", "detail": f"segment covers {cover:.0%} of its run"}
            )
        if status == "ok":
            r.update(
                {
                    "duration_s": seg.duration_s,
                    "energy_j": seg.energy_j,
                    "net_energy_j": seg.net_energy_j,
                    "mean_util": seg.mean_util,
                    "tb_moved": seg.tb_moved,
                    "coverage": seg.coverage,
                }
            )
        r["join"] = {
            "status": status,
            "segment_start_s": seg.start_s,
            "segment_end_s": seg.end_s,
            "segment_net_energy_j": seg.net_energy_j,
            "run_start_s": a,
            "run_end_s": b,
            "overlap_frac": cover,
            "energy_method": getattr(seg, "method", None),
        }
        out.append(r)
    for i, s in enumerate(segs):
        if i not in claimed and i not in split_pieces:
            problems.append(
                {
                    "label": None,
                    "kind": "unmatched segment",
                    "detail": f"activity {s.start_s:.1f}–{s.end_s:.1f} s ({s.duration_s:.1f} s) matches no record",
                }
            )
    return out, problems


# ---------------------------------------------------------------------------------------------- main
def prepare_outdir(outdir: Path, force: bool) -> None:
    """Create DIR; refuse a non-empty one unless ``force`` (which removes only flopwatch's own outputs)."""
    if outdir.exists() and not outdir.is_dir():
        raise InputError("exists and is not a directory", file=str(outdir))
    if outdir.exists() and any(outdir.iterdir()):
        if not force:
            raise InputError(
                "output directory is not empty (use --force to overwrite flopwatch's files in it)",
                file=str(outdir),
            )
        for name in OUTPUT_FILES:
            p = outdir / name
            if p.is_file():
                p.unlink()
        figs = outdir / FIGURES_DIR
        if figs.is_dir():
            for png in figs.glob("*.png"):
                png.unlink()
    outdir.mkdir(parents=True, exist_ok=True)


def run_pipeline(opts: RunOptions, *, log: Callable[[str], None] | None = None) -> dict[str, Any]:
    """Run the whole study (see the module docstring). Returns the summary (also written to summary.json)."""
    t_start = time.perf_counter()
    wall_start = time.time()
    say = log or (lambda s: None)
    outdir = opts.outdir
    choice = resolve_device(opts.device)
    plan = plan_run(choice, opts)  # before touching DIR: a bad --sweep leaves nothing behind
    prepare_outdir(outdir, opts.force)
    sweep_units = prog_weight_sweep(choice.simulated, plan, opts.rate_hz)
    prog = _Progress(opts.progress, sweep_units + _analysis_units())
    try:
        prog.stage(f"planned {len(plan.workloads)} workloads ({plan.sweep_name}) on {choice.label}")
        say(f"device: {choice.label} ({choice.reason})")
        trace_path = outdir / "trace.parquet"
        if choice.simulated:
            ex = _execute_sim(choice, plan, opts, prog, trace_path)
        else:
            ex = _execute_cuda(choice, plan, opts, prog, trace_path)
        try:
            summary = _analyse(choice, plan, opts, ex, prog)
        except Exception as e:
            # Minutes of GPU time are on disk: keep the trace and the ground truth (appended unjoined if the
            # analysis failed before writing records.jsonl), say what failed in summary.json and the report,
            # then raise (an InputError prints one line; anything else is a bug and keeps its traceback).
            if not (outdir / "records.jsonl").exists():
                reason = str(e) if isinstance(e, FlopwatchError) else f"{type(e).__name__}: {e}"
                _save_unjoined(
                    outdir / "records.jsonl", ex.records, ex.failures, f"analysis failed: {reason}"
                )
            summary = _failed_summary(choice, plan, opts, ex, e)
            summary["wall_time_s"] = time.perf_counter() - t_start
            summary["started_wall"] = wall_start
            _write_json(outdir / "summary.json", summary)
            from flopwatch.report.html import write_report

            write_report(outdir, summary)
            raise
    finally:
        prog.close()
    summary["wall_time_s"] = time.perf_counter() - t_start
    summary["started_wall"] = wall_start
    _write_json(outdir / "summary.json", summary)
    # The report states the final wall time; write it last.
    from flopwatch.report.html import write_report

    write_report(outdir, summary)
    return summary


def _analyse(
    choice: DeviceChoice, plan: Plan, opts: RunOptions, ex: Execution, prog: _Progress
) -> dict[str, Any]:
    from flopwatch.detect import detect_workloads
    from flopwatch.estimate.calibrate import calibrate
    from flopwatch.estimate.features import FrontierGate
    from flopwatch.evaluate.splits import evaluate_models
    from flopwatch.evaluate.threshold import verdict
    from flopwatch.records import append_record, load_records
    from flopwatch.telemetry.reading import Trace

    outdir = opts.outdir
    prog.stage("detecting workloads")
    trace = Trace.read(ex.trace_path)
    device_id = ex.sensor_info.device_id
    det = detect_workloads(trace)
    t0 = trace.t0_monotonic_s or 0.0
    joined, mismatches = join_records(ex.records, det, t0_monotonic_s=t0, device=device_id)
    for f in ex.failures:
        mismatches.append({"label": f["label"], "kind": "failed", "detail": f["error"]})
    rec_path = outdir / "records.jsonl"
    for r in joined:
        r["simulated"] = bool(choice.simulated)
        r.setdefault("idle_power_w", det.idle_power_w)
        append_record(rec_path, r)
    prog.advance(ANALYSIS_S["detect"])

    prog.stage("frontier gate and calibration")
    allrs = load_records(rec_path, require=())
    measured = [r for r in allrs if r.net_energy_j is not None and r.duration_s is not None and r.total_flops]
    rs = allrs.subset(measured)
    util_ok = [r for r in rs if r.mean_util is not None and r.mean_util >= 0.8]
    if not util_ok:
        raise InputError(
            f"no workload reached 80 % mean utilisation on {choice.label}; nothing to calibrate on "
            f"({len(rs)} measured, sweep {plan.sweep_name!r})",
            file=str(rec_path),
        )
    dtypes = [r.dtype for r in util_ok]
    calib_dtype = max(sorted(set(dtypes)), key=dtypes.count)
    gate = FrontierGate(min_util=0.8, precision=calib_dtype)
    gres = gate.apply(rs)
    n_frontier = len(gres.kept)
    if n_frontier < MIN_FRONTIER:
        raise InputError(
            f"only {n_frontier} workloads pass the frontier gate (util ≥ 80 %, {calib_dtype}); at least "
            f"{MIN_FRONTIER} are needed to calibrate and evaluate",
            file=str(rec_path),
        )
    profile = calibrate(rs, "default", gate=gate)
    profile.save(outdir / "profile.json")
    prog.advance(ANALYSIS_S["calibrate"])

    prog.stage("repeated-split evaluation of all estimators")
    n_train = max(2, min(14, int(round(TRAIN_FRACTION * n_frontier)), n_frontier - 1))
    n_splits = 200 if opts.n_splits is None else opts.n_splits
    models = list(opts.models) if opts.models else None
    # models=None lets evaluate_models skip (and list) estimators this data cannot support: too few
    # calibration runs, or no DRAM-traffic counter (eq1 and the bandwidth models on pre-Hopper NVML).
    ev = evaluate_models(rs, models, n_splits=n_splits, n_train=n_train, seed=opts.seed, gate=gate)
    evd = ev.to_dict()
    evd["simulated"] = bool(choice.simulated)
    _write_json(outdir / "evaluation.json", evd)
    prog.advance(ANALYSIS_S["evaluate"])

    prog.stage("threshold analysis")
    truth = ev.truth
    threshold = float(np.exp(np.mean(np.log(truth))))  # geometric middle of the sweep's compute range
    verdicts = []
    for r in gres.kept:
        est = profile.estimate_record(r)
        v = verdict(est, threshold_flops=threshold)
        truth_side = "above" if r.total_flops > threshold else "below"
        verdicts.append(
            {
                "label": r.label,
                "total_flops": r.total_flops,
                "estimate_flops": est.flops,
                "lower_flops": est.lower_flops,
                "upper_flops": est.upper_flops,
                "err_pct": (est.flops / r.total_flops - 1) * 100,
                "verdict": v,
                "truth": truth_side,
                "correct": v == truth_side if v != "uncertain" else None,
            }
        )
    dm = ev.default_model
    rates = ev.thresholds(dm)
    prog.advance(ANALYSIS_S["threshold"])

    prog.stage("figures")
    figs: list[Path] = []
    figure_errors: list[str] = []

    def run_figs() -> list[Path]:
        from flopwatch.report.run_figures import write_run_figures

        return write_run_figures(
            trace, det, joined, gres, ev, outdir / FIGURES_DIR, simulated=choice.simulated
        )

    def est_figs() -> list[Path]:
        from flopwatch.report.estimate_figures import write_figures

        return list(
            write_figures(ev, outdir / FIGURES_DIR, watermark="SIMULATED" if choice.simulated else None)
        )

    for make, n in ((run_figs, 3), (est_figs, 5)):
        # A figure that cannot be drawn must not cost the run its summary and report: say so in both.
        try:
            figs += make()
        except Exception as e:
            figure_errors.append(f"{make.__name__}: {type(e).__name__}: {e}")
        prog.advance(ANALYSIS_S["figure"] * n)

    metrics = evd["models"][dm]
    published = {m: evd["models"][m]["mae_pct"] for m in ("eq1", "eq2") if m in evd["models"]}
    summary: dict[str, Any] = {
        "device": choice.label,
        "simulated": bool(choice.simulated),
        "n_workloads": len(ex.records),
        "n_frontier": n_frontier,
        "default_model": dm,
        "heldout_mae_pct": metrics["mae_pct"],
        "frac_splits_any_over_10pct": metrics["frac_splits_any_over_10pct"],
        "idle_power_w": det.idle_power_w,
        # extra keys
        "schema": "flopwatch.run/1",
        "flopwatch_version": __version__,
        "device_name": ex.device_name,
        "device_reason": choice.reason,
        "spec_key": choice.spec_key,
        "sweep": plan.sweep_name,
        "sweep_note": plan.sweep_note,
        "plan_notes": plan.notes,
        "quick": opts.quick,
        "budget_s": opts.budget_s,
        "seed": opts.seed,
        "rate_hz": opts.rate_hz,
        "idle_baseline_s": plan.idle_s,
        "idle_source": det.idle_source,
        "calibration_dtype": calib_dtype,
        "n_detected": len(det.segments),
        "n_measured": len(rs),
        "gate": {**gres.to_dict(), "kept_labels": gres.kept.labels},
        "join_mismatches": mismatches,
        "component": profile.component,
        "profile_sha256": profile.sha256(),
        "profile_params": profile.params,
        "heldout": {
            k: metrics.get(k)
            for k in (
                "mae_pct",
                "sd_pct",
                "mean_signed_pct",
                "median_abs_pct",
                "p90_abs_pct",
                "worst_pct",
                "coverage",
                "confidence",
                "median_interval_halfwidth_pct",
            )
        },
        "heldout_mae_pct_by_model": {m: d["mae_pct"] for m, d in evd["models"].items()},
        "frac_splits_any_over_10pct_by_model": {
            m: d["frac_splits_any_over_10pct"] for m, d in evd["models"].items()
        },
        "published_models_mae_pct": published,
        "skipped_models": dict(ev.skipped_models),
        "constant_jpf_baseline": constant_jpf_baseline(
            ev
        ),  # estimators the data cannot support, with the reason
        "n_splits": evd["n_splits"],
        "n_train": evd["n_train"],
        "n_test": evd["n_test"],
        "threshold": {"threshold_flops": threshold, "verdicts": verdicts, "rates": rates},
        "sampler": ex.sampler_stats,
        "trace_rows": len(trace),
        "figures": [str(p.relative_to(outdir)) for p in figs],
        "figure_errors": figure_errors,
        "outputs": [n for n in OUTPUT_FILES if (outdir / n).exists()] + ["summary.json", "report.html"],
    }
    if choice.simulated:
        from flopwatch.sim.power import power_model_for

        pm = power_model_for(choice.spec_key or "a100")
        summary["simulation"] = {
            "note": "SIMULATED: every number comes from flopwatch's simulated accelerator, not a measurement",
            "power_model": pm.kind,
            "power_model_source": pm.source,
            "true_idle_power_w": pm.idle_w,
        }
    from flopwatch.report.headline import apply_headline  # the verdict on top of summary.json and the report

    return apply_headline(summary, ev)


def constant_jpf_baseline(ev: Any) -> dict[str, float]:
    """The no-model yardstick on the evaluation's own splits: every test run predicted as E_net / (median J/FLOP of
    its split's calibration runs). An estimator is worth its features only by how far it beats this; and the spread of
    J/FLOP (``jpf_cv_pct``) says how far from proportional energy and FLOPs are on this device."""
    e = np.array([float(r.net_energy_j) for r in ev.records])
    jpf = e / ev.truth
    k = np.median(jpf[ev.train_idx], axis=1, keepdims=True)  # (splits, 1)
    err = np.abs(e[ev.test_idx] / k / ev.truth[ev.test_idx] - 1.0)
    return {
        "mae_pct": float(100 * err.mean()),
        "frac_splits_any_over_10pct": float((err > 0.10).any(axis=1).mean()),
        "jpf_cv_pct": float(100 * jpf.std(ddof=1) / jpf.mean()),
    }


def _failed_summary(
    choice: DeviceChoice, plan: Plan, opts: RunOptions, ex: Execution, err: Exception
) -> dict[str, Any]:
    """The summary of a run whose analysis failed: contract keys present (null where unknown) plus the error."""
    return {
        "device": choice.label,
        "simulated": bool(choice.simulated),
        "n_workloads": len(ex.records),
        "n_frontier": None,
        "default_model": None,
        "heldout_mae_pct": None,
        "frac_splits_any_over_10pct": None,
        "idle_power_w": None,
        "schema": "flopwatch.run/2",
        "flopwatch_version": __version__,
        "error": str(err) if isinstance(err, FlopwatchError) else f"{type(err).__name__}: {err}",
        "device_name": ex.device_name,
        "device_reason": choice.reason,
        "sweep": plan.sweep_name,
        "sweep_note": plan.sweep_note,
        "plan_notes": plan.notes,
        "quick": opts.quick,
        "budget_s": opts.budget_s,
        "seed": opts.seed,
        "join_mismatches": [
            {"label": f["label"], "kind": "failed", "detail": f["error"]} for f in ex.failures
        ],
        "outputs": [n for n in OUTPUT_FILES if (opts.outdir / n).exists()],
    }


def _write_json(path: Path, obj: Any) -> None:
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(_finite(obj), f, indent=2, default=_json_default, allow_nan=False)
        f.write("\n")
    os.replace(tmp, path)


def _finite(o: Any) -> Any:
    """NaN/inf → None, recursively (JSON has no NaN; a null says "undefined" honestly)."""
    if isinstance(o, dict):
        return {k: _finite(v) for k, v in o.items()}
    if isinstance(o, (list, tuple)):
        return [_finite(v) for v in o]
    if isinstance(o, np.ndarray):
        return _finite(o.tolist())
    if isinstance(o, (float, np.floating)):
        return float(o) if math.isfinite(o) else None
    if isinstance(o, np.integer):
        return int(o)
    return o


def _json_default(o: Any) -> Any:
    if isinstance(o, (np.floating, np.integer)):
        return o.item()
    if isinstance(o, np.ndarray):
        return o.tolist()
    if isinstance(o, Path):
        return str(o)
    raise TypeError(f"not JSON serialisable: {type(o).__name__}")


__all__ = [
    "DeviceChoice",
    "RunOptions",
    "SUMMARY_KEYS",
    "frontier_sweep",
    "join_records",
    "plan_run",
    "prepare_outdir",
    "resolve_device",
    "run_pipeline",
]
