"""Stage **trace** of ``flopwatch run``: play the plan on the device while the sampler records its telemetry.

Two executors share one interface (:class:`Executor`): :class:`SimExecutor` runs the plan on a simulated twin in
virtual time; :class:`CudaExecutor` trains each workload for real (timed with CUDA events by
:func:`flopwatch.workloads.run.run_workload`) while a sampler thread records NVML. Each returns an
:class:`Execution`: the trace on disk, one :class:`~flopwatch.records.WorkloadRecord` per finished workload (ground
truth, not yet joined) and what failed. Every touch point (the workload runner, the sensor opener, the FLOP counter)
is a constructor parameter, so tests inject fakes instead of patching module names.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from flopwatch.devices import get_device
from flopwatch.errors import FlopwatchError
from flopwatch.pipeline.device import DeviceChoice
from flopwatch.pipeline.plan import Plan, RunOptions
from flopwatch.pipeline.progress import Progress, prog_weight_sweep
from flopwatch.records import WorkloadRecord, append_record
from flopwatch.telemetry.sampler import Sampler
from flopwatch.telemetry.schema import base_metadata
from flopwatch.telemetry.writer import TraceWriter

if TYPE_CHECKING:
    from flopwatch.telemetry.sensors.base import SensorInfo


@dataclass(frozen=True)
class SimulationFacts:
    """What the simulated twin was: its power model (kind, source) and the idle power it really drew."""

    power_model: str
    power_model_source: str
    true_idle_power_w: float

    def to_dict(self) -> dict[str, Any]:
        return {
            "note": "SIMULATED: every number comes from flopwatch's simulated accelerator, not a measurement",
            "power_model": self.power_model,
            "power_model_source": self.power_model_source,
            "true_idle_power_w": self.true_idle_power_w,
        }


@dataclass
class Execution:
    """What the sweep produced: the trace on disk, the ground-truth records, what went wrong; for the twin, the
    facts of its power model (``simulation``; None for a real device)."""

    trace_path: Path
    records: list[WorkloadRecord]
    failures: list[dict[str, Any]]
    sampler_stats: dict[str, Any]
    sensor_info: Any
    device_name: str
    simulation: SimulationFacts | None = None


class Executor(Protocol):
    """Plays a plan on a device, recording its telemetry to ``trace_path``."""

    def __call__(
        self, choice: DeviceChoice, plan: Plan, opts: RunOptions, prog: Progress, trace_path: Path
    ) -> Execution: ...


def executor_for(choice: DeviceChoice) -> Executor:
    """The default executor of a device choice."""
    return SimExecutor() if choice.simulated else CudaExecutor()


class SimExecutor:
    """The plan on the simulated twin, in virtual time (everything labelled simulated)."""

    def __call__(
        self, choice: DeviceChoice, plan: Plan, opts: RunOptions, prog: Progress, trace_path: Path
    ) -> Execution:
        from flopwatch.sim.accelerator import Idle, Run, SimulatedAccelerator
        from flopwatch.sim.sensor import from_spec

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
        md = _trace_metadata(
            info, opts, kind="sim", simulated=True, source="flopwatch run (simulated accelerator)"
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
        records = [
            run.record(
                config=w.config.to_dict(), arch=w.config.arch, device_spec=acc.spec.key, target_s=w.target_s
            )
            for run, w in zip(acc.runs, plan.workloads, strict=True)
        ]
        pm = acc.power_model
        facts = SimulationFacts(pm.kind, pm.source, pm.idle_w)
        return Execution(trace_path, records, [], stats.to_dict(), info, acc.name, facts)


class CudaExecutor:
    """The plan on a real CUDA GPU: each workload trains for real while a sampler thread records NVML.

    ``run_workload`` (config, device, seconds=, warmup=, seed=) → record, ``open_sensors`` (spec) → sensors and
    ``count_flops`` (config, attention=) default to flopwatch's own; tests pass fakes.
    """

    def __init__(
        self,
        *,
        run_workload: Callable[..., WorkloadRecord] | None = None,
        open_sensors: Callable[..., list[Any]] | None = None,
        count_flops: Callable[..., Any] | None = None,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self._run_workload = run_workload
        self._open_sensors = open_sensors
        self._count_flops = count_flops
        self._sleep = sleep

    def __call__(
        self, choice: DeviceChoice, plan: Plan, opts: RunOptions, prog: Progress, trace_path: Path
    ) -> Execution:
        run_workload = self._run_workload
        if run_workload is None:
            from flopwatch.workloads.run import run_workload
        open_sensors = self._open_sensors
        if open_sensors is None:
            from flopwatch.backends import open_sensors

        try:
            sensors = open_sensors(choice.nvml_spec or f"nvml:{choice.index}")
        except FlopwatchError:
            sensors = open_sensors(f"nvml:{choice.index}")
        info = sensors[0].info()
        md = _trace_metadata(info, opts, kind=info.kind, simulated=False, source="flopwatch run")
        records: list[WorkloadRecord] = []
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
                self._precount_flops(plan)
                prog.advance(min(time.monotonic() - t_idle, plan.idle_s))
                self._sleep_with_progress(plan.idle_s - (time.monotonic() - t_idle), prog, per_unit)
                for i, w in enumerate(plan.workloads):
                    prog.stage(f"[{i + 1}/{len(plan.workloads)}] {w.config.name} on {dev}")
                    t0 = time.monotonic()
                    try:
                        rec = run_workload(
                            w.config, dev, seconds=w.target_s, warmup=plan.warmup_steps, seed=opts.seed
                        )
                        records.append(replace(rec, extra={**rec.extra, "target_s": w.target_s}))
                    except Exception as e:  # OOM or a kernel failure: record it, keep going
                        failures.append({"label": w.config.name, "error": f"{type(e).__name__}: {e}"})
                        _free_cuda()
                    prog.advance(min(time.monotonic() - t0, w.target_s + 4.0) * per_unit)
                    self._sleep_with_progress(plan.gap_s, prog, per_unit)
                    if sampler.exception is not None:
                        raise sampler.exception
            except BaseException as e:
                # Ctrl-C, a dead sampler or a crashed driver mid-sweep: the trace is closed by the writer's
                # context; keep the ground truth of the workloads that finished (minutes of GPU time) next to it.
                save_unjoined(
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

    def _precount_flops(self, plan: Plan) -> None:
        """Count every planned config's FLOPs (meta device, CPU only, cached by shape) during the idle baseline.

        ``run_workload`` would otherwise count each one between workloads (~0.5–2 s each), time the budget pays
        for; the GPU is untouched, so the idle baseline stays idle. A config that cannot be counted fails later,
        in its run, where the failure is recorded.
        """
        count_flops = self._count_flops
        if count_flops is None:
            from flopwatch.workloads.ground_truth import count_flops
        for w in plan.workloads:
            try:
                count_flops(w.config, attention="fused")  # run_workload's convention on CUDA
            except Exception:  # reported by run_workload for this config
                pass

    def _sleep_with_progress(self, seconds: float, prog: Progress, per_unit: float) -> None:
        end = time.monotonic() + seconds
        while True:
            left = end - time.monotonic()
            if left <= 0:
                break
            step = min(0.5, left)
            self._sleep(step)
            prog.advance(step * per_unit)


def _trace_metadata(
    info: SensorInfo, opts: RunOptions, *, kind: str, simulated: bool, source: str
) -> dict[str, Any]:
    """The run trace's metadata: the sensor's device and fingerprint, the run's rate."""
    return base_metadata(
        kind=kind,
        rate_hz=opts.rate_hz,
        fingerprint=dict(info.fingerprint),
        simulated=simulated,
        device=info.device_id,
        device_name=info.name,
        source=source,
    )


def save_unjoined(
    path: Path, records: list[WorkloadRecord], failures: list[dict[str, Any]], reason: str
) -> None:
    """Append the records of a sweep that could not be analysed, unjoined, so nothing measured is lost."""
    failed = "; ".join(f"{f['label']}: {f['error']}" for f in failures)
    detail = reason + (f"; failed runs: {failed}" if failed else "")
    for rec in records:
        append_record(path, replace(rec, join={"status": "not analysed", "detail": detail}))


def _mem_bw(spec_key: str | None) -> float | None:
    if spec_key is None:
        return None
    return get_device(spec_key).mem_bw_bytes_per_s


def gpm_dram_bytes(sink: Callable[[Any], None], mem_bw_bytes_per_s: float | None) -> Callable[[Any], None]:
    """A sink that fills ``dram_bytes_per_s`` from NVML GPM's DRAM bandwidth utilisation before ``sink`` sees it.

    NVML has no DRAM byte counter, but on Hopper and later GPM reports ``DRAM_BW_UTIL``, the share of the
    theoretical peak bandwidth used over the last sample interval (NVML API reference, ``nvmlGpmMetricsGet``);
    flopwatch's NVML sensor (and the Hopper twins) put it in ``extra["dram_bw_util"]`` (0–1). Times the datasheet
    peak (``devices.py``) it is DRAM bytes per second, so the study's eq. 1 (which needs TB moved) can be evaluated
    on an H100/H200. The converted readings say so: ``extra["dram_from_gpm"] = 1``. Without GPM, or without a known
    peak, readings pass through unchanged.
    """
    if not mem_bw_bytes_per_s:
        return sink

    def convert(item: Any) -> None:
        extra = getattr(item, "extra", None)
        if extra and getattr(item, "dram_bytes_per_s", 1.0) is None and "dram_bw_util" in extra:
            item = replace(
                item,
                dram_bytes_per_s=float(extra["dram_bw_util"]) * mem_bw_bytes_per_s,
                extra={**extra, "dram_from_gpm": 1.0},
            )
        sink(item)

    return convert


def _free_cuda() -> None:
    try:
        import torch

        torch.cuda.empty_cache()
    except Exception:
        pass
