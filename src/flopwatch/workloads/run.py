"""Train a workload and write one record (the calibration data the estimator needs).

The timed region carries no counting overhead: FLOPs come from ``count_flops`` (meta device, once per
configuration, cached) and are multiplied by the number of timed steps. The timed region starts after
the warm-up steps and a device synchronisation; its monotonic timestamps are what joins the record
with a telemetry trace recorded on the same host (``time.monotonic`` is the clock of
``flopwatch.telemetry.sensors.base.MonotonicClock``).

Step times: CUDA events on a GPU (device time per step), ``time.perf_counter`` on the CPU.

Attention kernels are pinned so that the record's convention is the one that actually ran:
CUDA + ``"fused"`` → flash / memory-efficient / cuDNN only; ``"math"`` → the math kernel only. The CPU
runs the math kernel (its flash kernel is not in FlopCounterMode's registry).
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import platform
import socket
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np

from flopwatch.errors import ConfigError, InputError
from flopwatch.records import WorkloadRecord, append_record
from flopwatch.workloads.config import WorkloadConfig, check_device_support
from flopwatch.workloads.formulas import MFU_CONVENTIONS, model_flops_per_step

# Optimizers as in the study: AdamW lr 1e-4 (torch defaults otherwise), or SGD with momentum 0.9.
LEARNING_RATE = 1e-4
SGD_MOMENTUM = 0.9


def _normalize_device(device: str) -> str:
    dev = str(device).strip().lower()
    if dev == "cuda":
        import torch

        return f"cuda:{torch.cuda.current_device()}" if torch.cuda.is_available() else "cuda"
    return dev


@contextlib.contextmanager
def matmul_precision(device: str, precision: str) -> Iterator[None]:
    """CUDA fp32 matmuls in full FP32 (PyTorch's default; FP32-vector peak), or in TF32 for ``tf32``.

    Only cuBLAS matmuls are switched (our models have no convolutions); the previous setting is restored.
    torch >= 2.9 has ``torch.backends.cuda.matmul.fp32_precision`` and *raises* when the legacy
    ``allow_tf32`` flag is read after the new API was used anywhere in the process, so the new API is used
    when present (reading it works whichever API set it) and ``allow_tf32`` only on older torch.
    """
    import torch

    if not device.startswith("cuda"):
        yield
        return
    mm = torch.backends.cuda.matmul
    if hasattr(mm, "fp32_precision"):
        old = mm.fp32_precision
        mm.fp32_precision = "tf32" if precision == "tf32" else "ieee"
        try:
            yield
        finally:
            mm.fp32_precision = old
        return
    old_flag = mm.allow_tf32
    mm.allow_tf32 = precision == "tf32"
    try:
        yield
    finally:
        mm.allow_tf32 = old_flag


def sdpa_backends(device: str, attention: str) -> list[Any]:
    """The attention kernels allowed for ``attention`` (``fused`` | ``math``) on ``device``.

    Pinning them makes the counting convention of the record the one that actually ran: ``fused`` on CUDA
    allows flash, memory-efficient and cuDNN attention only (FlopCounterMode: 3.5x forward); ``math`` the
    math kernel only (3x). A fused run whose shapes no fused kernel supports fails instead of silently
    falling back to the math kernel (see :func:`step_error`).
    """
    from torch.nn.attention import SDPBackend

    if attention == "math":
        return [SDPBackend.MATH]
    if not device.startswith("cuda"):
        raise ConfigError(
            "attention 'fused' needs CUDA: the CPU's flash kernel is not counted by FlopCounterMode; use math",
            field="attention",
        )
    return [SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION, SDPBackend.CUDNN_ATTENTION]


def step_error(exc: RuntimeError, config: WorkloadConfig, attention: str) -> ConfigError | None:
    """A ConfigError for a configuration the device cannot run (raised by its first step), else None.

    Two cases, both before anything is recorded: no attention kernel for these shapes under the pinned
    backends, and a configuration that does not fit in device memory.
    """
    if "out of memory" in str(exc).lower():
        return ConfigError(
            f"{config.name} does not fit in device memory ({config.tokens_per_step} tokens/step, "
            f"{config.precision}); reduce --batch-size or --seq-len",
            field="batch_size",
        )
    if "No available kernel" not in str(exc):
        return None
    return ConfigError(
        f"no {attention} attention kernel supports {config.name} (head size {config.head_dim}, "
        f"{config.precision}) on this GPU; fused kernels need a head size that is a multiple of 8 "
        "(flash: fp16/bf16 only). Change --nhead/--d-model or use --attention math",
        field="attention",
    )


def check_records_path(records: str | os.PathLike[str]) -> None:
    """Refuse, before anything runs, a records path the record could not be appended to."""
    p = Path(records).expanduser()
    parent = p.resolve().parent
    if p.is_dir():
        raise InputError("is a directory, not a records file", file=str(records), field="records")
    if not parent.is_dir():
        raise InputError("directory does not exist", file=str(records), field="records")
    target = p if p.exists() else parent
    if not os.access(target, os.W_OK):
        raise InputError("is not writable", file=str(records), field="records")


def resolve_device(device: str) -> str:
    """``auto`` → ``cuda`` when torch sees a CUDA device, else ``cpu``; anything else through :func:`parse_device`."""
    if str(device).strip().lower() == "auto":
        import torch

        return "cuda" if torch.cuda.is_available() else "cpu"
    return parse_device(device)


def parse_device(device: str) -> str:
    """``cpu``, ``cuda`` or ``cuda:N`` (lower-cased); anything else is a ConfigError."""
    dev = str(device).strip().lower()
    if dev in ("cpu", "cuda"):
        return dev
    if dev.startswith("cuda:") and dev[5:].isdigit():
        return dev
    raise ConfigError(f"unknown device {device!r}; expected cpu, cuda or cuda:N", field="device")


def _cpu_name(cpuinfo: str = "/proc/cpuinfo") -> str:
    """The CPU's model name (Linux ``/proc/cpuinfo``), else what ``platform`` knows."""
    try:
        with open(cpuinfo, encoding="utf-8", errors="replace") as fh:
            for line in fh:
                if line.lower().startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _device_peak(device: str, device_name: str, dtype: str) -> tuple[float | None, str | None, str | None]:
    """Peak FLOP/s from ``devices.py`` (never hard-coded here), the spec key and the peak's source.

    :meth:`~flopwatch.devices.DeviceSpec.mfu_peak`: fp32 is the FP32-vector peak (the matrix peak where fp32
    GEMMs run on matrix units, MI200) and tf32 the TF32 tensor peak (``matmul_precision`` runs exactly that);
    fp16/bf16 the dense tensor peaks. None when the device or dtype is not in the table.
    """
    from flopwatch.devices import resolve

    spec = resolve("cpu" if device == "cpu" else device_name)
    if spec is None:
        return None, None, None
    if not spec.supports(dtype):
        return None, spec.key, None
    source = f"{spec.mfu_peak_label(dtype)}: " + "; ".join(spec.sources)
    if spec.vendor == "cpu":
        source = f"nominal placeholder peak ({spec.idle_source.split(': ', 1)[-1]})"
    return spec.mfu_peak(dtype), spec.key, source


#: ``progress(phase, done, total)``: see :func:`run_workload`.
ProgressCallback = Callable[[str, float, float | None], None]


class _Throttle:
    """Calls ``fn`` at most every ``min_interval_s`` per phase (always on a new phase or ``force``)."""

    def __init__(self, fn: ProgressCallback | None, min_interval_s: float = 0.2) -> None:
        self.fn, self.dt, self.last, self.phase = fn, min_interval_s, -math.inf, ""

    def __call__(self, phase: str, done: float, total: float | None, *, force: bool = False) -> None:
        if self.fn is None:
            return
        now = time.monotonic()
        if force or phase != self.phase or now - self.last >= self.dt:
            self.phase, self.last = phase, now
            self.fn(phase, done, total)


@contextlib.contextmanager
def progress_bar(enabled: bool = True) -> Iterator[ProgressCallback | None]:
    """A rich progress bar on stderr for :func:`run_workload`'s ``progress`` (None when disabled). On stderr so
    stdout stays clean for ``--json``; started on the first update, so a configuration refused before anything
    runs prints its one error line and nothing else."""
    if not enabled:
        yield None
        return
    state: dict[str, Any] = {}

    def update(phase: str, done: float, total: float | None) -> None:
        if "bar" not in state:
            from rich.console import Console
            from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

            bar = Progress(
                TextColumn("{task.description}"),
                BarColumn(),
                TextColumn("{task.fields[count]}"),
                TimeElapsedColumn(),
                console=Console(stderr=True),
                transient=True,
            )
            bar.start()
            state["bar"], state["task"] = bar, bar.add_task(phase, total=None, count="")
        if total is None:
            count = ""
        elif phase == "training" and isinstance(total, float):
            count = f"{done:.0f}/{total:.0f} s"
        else:
            count = f"{done:.0f}/{total:.0f}"
        state["bar"].update(state["task"], description=phase, completed=done, total=total, count=count)

    try:
        yield update
    finally:
        if "bar" in state:
            state["bar"].stop()


def _step_stats(times_s: list[float]) -> dict[str, float]:
    a = np.asarray(times_s, dtype=float)
    return {
        "mean": float(a.mean()),
        "median": float(np.median(a)),
        "p10": float(np.percentile(a, 10)),
        "p90": float(np.percentile(a, 90)),
        "std": float(a.std(ddof=1)) if a.size > 1 else 0.0,
        "n": int(a.size),
    }


def append_jsonl(path: str | os.PathLike[str], record: WorkloadRecord) -> None:
    """Append ``record`` as one JSON line (:func:`flopwatch.records.append_record`: one write, fsync)."""
    append_record(path, record)


def make_train_step(config: WorkloadConfig, device: Any, *, seed: int = 0) -> Callable[[], Any]:
    """Build ``config`` on ``device`` and return a function running one training step (returns the loss).

    The study's recipe: AdamW lr 1e-4 (or SGD momentum 0.9); fp16 = autocast + GradScaler, bf16 = autocast,
    parameters in fp32. One fixed random batch (seeded) is reused: FLOPs do not depend on the values, and a
    per-step ``randn`` would put input generation inside the timed region. Shared by ``run_workload`` and
    ``flopwatch bench`` so both time the same step.
    """
    import torch

    from flopwatch.workloads.model import build_model, make_batch

    tdev = torch.device(device)
    torch.manual_seed(seed)
    with torch.device(tdev):
        model = build_model(config)
    model.train()
    batch = make_batch(config, tdev, torch.Generator(device=tdev).manual_seed(seed))
    if config.optimizer == "adamw":
        opt: torch.optim.Optimizer = torch.optim.AdamW(model.parameters(), lr=LEARNING_RATE)
    else:
        opt = torch.optim.SGD(model.parameters(), lr=LEARNING_RATE, momentum=SGD_MOMENTUM)
    amp_dtype = {"fp16": torch.float16, "bf16": torch.bfloat16}.get(config.precision)
    scaler = torch.amp.GradScaler(tdev.type) if config.precision == "fp16" else None

    def train_step() -> torch.Tensor:
        opt.zero_grad(set_to_none=True)
        ctx = (
            torch.autocast(device_type=tdev.type, dtype=amp_dtype)
            if amp_dtype is not None
            else contextlib.nullcontext()
        )
        with ctx:
            loss = model(*batch)
        if scaler is not None:
            scaler.scale(loss).backward()
            scaler.step(opt)
            scaler.update()
        else:
            loss.backward()
            opt.step()
        return loss

    return train_step


def run_workload(
    config: WorkloadConfig,
    device: str = "cpu",
    *,
    steps: int | None = None,
    seconds: float | None = None,
    warmup: int = 5,
    records: str | os.PathLike[str] | None = None,
    seed: int = 0,
    attention: str | None = None,
    mfu_convention: str = "hardware",
    progress: ProgressCallback | None = None,
) -> WorkloadRecord:
    """Train ``config`` on ``device`` and return (and append to ``records``) its record.

    ``steps`` (default ``config.steps``) or ``seconds`` (train until that much time has passed, at least
    one step) set the timed region; ``warmup`` steps run first, untimed. ``attention`` defaults to
    ``"fused"`` on CUDA (the study's convention) and ``"math"`` on the CPU.

    MFU: the record carries both ``mfu_hardware`` (counted FLOPs, the ground truth's convention) and
    ``mfu_model`` (PaLM-style model FLOPs: no recompute, causal attention halved; ``formulas.MFU_CONVENTIONS``);
    ``mfu`` is the one ``mfu_convention`` selects, named in ``mfu_convention``.

    ``progress(phase, done, total)`` is called as the run advances (phases ``"loading torch"``, ``"counting FLOPs"``,
    ``"building model"``, ``"warm-up"``, ``"training"``; ``total`` is steps, or seconds with ``seconds``), at most every
    0.2 s within a phase, never blocking on the device. Invalid combinations raise :class:`ConfigError`
    before anything is built.
    """
    dev = _normalize_device(parse_device(device))
    check_device_support(config, dev)
    if steps is not None and seconds is not None:
        raise ConfigError("give either steps or seconds, not both", field="steps")
    if steps is not None and (isinstance(steps, bool) or int(steps) != steps or steps <= 0):
        raise ConfigError(f"steps must be a positive integer, got {steps!r}", field="steps")
    if seconds is not None and not (math.isfinite(seconds) and seconds > 0):
        raise ConfigError(f"seconds must be a positive number, got {seconds!r}", field="seconds")
    if isinstance(warmup, bool) or int(warmup) != warmup or warmup < 0:
        raise ConfigError(f"warmup must be a non-negative integer, got {warmup!r}", field="warmup")
    if mfu_convention not in MFU_CONVENTIONS:
        raise ConfigError(
            f"MFU convention must be one of {', '.join(MFU_CONVENTIONS)}, got {mfu_convention!r}",
            field="mfu_convention",
        )
    report = _Throttle(progress)
    conv = attention or ("fused" if dev.startswith("cuda") else "math")
    if conv not in ("fused", "math"):
        raise ConfigError(f"attention convention must be fused or math, got {attention!r}", field="attention")
    backends = sdpa_backends(dev, conv)
    if records is not None:
        check_records_path(records)
    n_steps = int(steps if steps is not None else (None if seconds is not None else config.steps) or 0)

    report("loading torch", 0, None, force=True)
    import torch
    from torch.nn.attention import sdpa_kernel

    from flopwatch.workloads.ground_truth import count_flops

    # Counted once, before and outside the timed loop (meta device, cached).
    report("counting FLOPs", 0, None, force=True)
    fc = count_flops(config, attention=conv)
    model_flops = model_flops_per_step(config)
    report("building model", 0, None, force=True)

    tdev = torch.device(dev)
    is_cuda = tdev.type == "cuda"
    device_name = torch.cuda.get_device_name(tdev) if is_cuda else _cpu_name()
    train_step = make_train_step(config, tdev, seed=seed)

    def sync() -> None:
        if is_cuda:
            torch.cuda.synchronize(tdev)

    def timed_region() -> tuple[float, float, float, float, int, Any, list[Any]]:
        """Warm-up, then the timed steps: (start/end monotonic, start/end wall, steps, last loss, events)."""
        for i in range(int(warmup)):
            report("warm-up", i, int(warmup))
            train_step()
        sync()
        goal = float(seconds) if seconds is not None else n_steps
        report("training", 0, goal, force=True)
        events: list[Any] = []
        start_mono, start_wall = time.monotonic(), time.time()
        done = 0
        last = None
        while True:
            if seconds is None and done >= n_steps:
                break
            if seconds is not None and done > 0 and time.monotonic() - start_mono >= seconds:
                break
            if is_cuda:
                ev = torch.cuda.Event(enable_timing=True)
                ev.record()
                events.append(ev)
                last = train_step()
            else:
                t0 = time.perf_counter()
                last = train_step()
                step_times.append(time.perf_counter() - t0)
            done += 1
            report("training", done if seconds is None else time.monotonic() - start_mono, goal)
        report("training", goal, goal, force=True)
        if is_cuda:
            ev = torch.cuda.Event(enable_timing=True)
            ev.record()
            events.append(ev)
        sync()
        return start_mono, time.monotonic(), start_wall, time.time(), done, last, events

    step_times: list[float] = []
    # torch.cuda.device: CUDA events record on the *current* device's stream, which must be the run's.
    on_device = torch.cuda.device(tdev) if is_cuda else contextlib.nullcontext()
    with on_device, matmul_precision(dev, config.precision), sdpa_kernel(backends):
        try:
            start_mono, end_mono, start_wall, end_wall, done, last, events = timed_region()
        except RuntimeError as e:  # nothing is recorded yet: a missing fused kernel is a config error
            err = step_error(e, config, conv)
            if err is None:
                raise
            raise err from None
    if is_cuda:
        step_times = [a.elapsed_time(b) / 1e3 for a, b in zip(events[:-1], events[1:], strict=False)]
    final_loss = float(last.detach().float().item()) if last is not None else None

    duration_s = end_mono - start_mono
    total = fc.flops_per_step * done
    achieved = total / duration_s if duration_s > 0 else None
    achieved_model = model_flops * done / duration_s if duration_s > 0 else None
    peak, spec_key, peak_source = _device_peak(dev, device_name, config.precision)
    mfu_hw = (achieved / peak) if (achieved is not None and peak) else None
    mfu_model = (achieved_model / peak) if (achieved_model is not None and peak) else None
    fields: dict[str, Any] = {
        "label": config.name,
        "arch": config.arch,
        "config": config.to_dict(),
        "device": dev,
        "device_name": device_name,
        "device_spec": spec_key,
        "dtype": config.precision,
        "start_monotonic_s": start_mono,
        "end_monotonic_s": end_mono,
        "start_wall": start_wall,
        "end_wall": end_wall,
        "steps": done,
        "warmup_steps": int(warmup),
        "flops_per_step": fc.flops_per_step,
        "total_flops": total,
        "attention_convention": conv,
        "matmul_flops_per_step": fc.matmul_flops_per_step,
        "attention_flops_per_step": fc.attention_flops_per_step,
        "other_flops_per_step": fc.other_flops_per_step,
        "optimizer_flops_per_step": fc.optimizer_flops_per_step,
        "elementwise_flops_per_step": fc.elementwise_flops_per_step,
        "params": fc.params,
        "flop_counting": "FlopCounterMode on the meta device, once per config (outside the timed loop)",
        "achieved_flops_per_s": achieved,
        "peak_flops": peak,
        "peak_dtype": config.precision if peak is not None else None,
        "peak_source": peak_source,
        "mfu": mfu_hw if mfu_convention == "hardware" else mfu_model,
        "mfu_convention": mfu_convention,
        "mfu_hardware": mfu_hw,  # counted FLOPs (attention_convention), FlopCounterMode
        "mfu_model": mfu_model,  # PaLM-style model FLOPs: no recompute, causal attention halved
        "model_flops_per_step": model_flops,
        "step_time_s": _step_stats(step_times) if step_times else None,
        "step_timer": "cuda_events" if is_cuda else "perf_counter",
        "tf32_matmul": bool(is_cuda and config.precision == "tf32"),
        "final_loss": final_loss if final_loss is None or math.isfinite(final_loss) else None,
        "seed": seed,
        "host": socket.gethostname(),
        "torch_version": torch.__version__,
        "duration_s": duration_s,
        "energy_j": None,
        "net_energy_j": None,
        "idle_power_w": None,
        "mean_util": None,
        "tb_moved": None,
        "coverage": None,
        "simulated": False,
    }
    record = WorkloadRecord.from_dict(fields, file="run_workload", where=config.name)
    if records is not None:
        try:
            append_jsonl(records, record)
        except OSError as e:
            # The run is done and cannot be repeated for free: keep the record on stderr before failing.
            import sys

            print(json.dumps(record.to_dict()), file=sys.stderr)
            raise InputError(
                f"could not append the record ({e.strerror or e}); it was printed on stderr above",
                file=str(records),
                field="records",
            ) from None
    return record
