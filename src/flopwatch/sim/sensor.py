"""The simulated accelerator exposed as a :class:`~flopwatch.telemetry.sensors.base.Sensor` (``sim:a100`` …).

``from_spec("a100", seed=0, schedule=[...])`` builds a :class:`SimulatedAccelerator`, plays the scripted schedule
(workloads and idle gaps) onto it and returns sensors that read it the way NVML would (:mod:`.artefacts`), on a
:class:`~flopwatch.telemetry.sensors.base.VirtualClock`: the sampler, detector and daemon consume it exactly like a
real device, and ten simulated minutes take milliseconds. After the schedule the device idles forever.

Every reading is simulated and says so: ``SensorInfo(simulated=True, kind="sim")``, ``extra["simulated"] = 1.0``.

Spec strings: ``a100`` (one device), ``a100x4`` (four identical devices running the same schedule, data-parallel,
with independent noise). Options: ``power_cap_w``, ``locked_clock_mhz``, ``clock`` (share a clock), ``speed`` (run on
a :class:`ScaledClock` at ``speed``× real time instead of a virtual clock, for live demos of the daemon),
``wall0`` (UTC epoch of t = 0; default: when the simulator is built), ``start_idle_s`` (idle before the schedule, default 0).

Schedules: a list of :class:`~flopwatch.sim.accelerator.Idle` / :class:`~flopwatch.sim.accelerator.Run` objects,
``(workload, steps)`` tuples, or dicts — ``{"idle_s": 30}``, ``{"label": ..., "flops_per_step": ...,
"bytes_per_step": ..., "tokens_per_step": ..., "batch_size": ..., "dtype": ..., "steps": N}`` (a raw workload),
``{"config": {"arch": "gpt", ...}, "steps": N}`` or ``{"sweep": "quick", "label": ..., "duration_s": 60}`` — or a
path to a JSON (a list, or ``{"schedule": [...]}``) or TOML (``[[schedule]]`` tables) file holding them.
"""

from __future__ import annotations

import math
import re
import time
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from flopwatch.devices import get_device, normalize_dtype
from flopwatch.errors import InputError, SensorError
from flopwatch.io import is_out_of_range, parse_toml, read_json, read_text
from flopwatch.sim.accelerator import Idle, RawWorkload, Run, SimulatedAccelerator
from flopwatch.sim.artefacts import SensorReadout
from flopwatch.telemetry.schema import Reading
from flopwatch.telemetry.sensors.base import Clock, ScaledClock, SensorInfo, VirtualClock

_SPEC_RE = re.compile(r"^(?P<key>[a-z0-9][a-z0-9\- ]*?)(?:x(?P<n>\d+))?$")


class SimSensor:
    """One simulated device read through its simulated sensor (NVML-like, or INA3221 for the Orin)."""

    def __init__(self, accelerator: SimulatedAccelerator, clock: Clock, *, seed: int = 0) -> None:
        self.accelerator = accelerator
        self.readout = SensorReadout(accelerator, seed=seed)
        self._clock = clock
        self._closed = False
        self._seed = seed

    @property
    def clock(self) -> Clock:
        return self._clock

    def info(self) -> SensorInfo:
        acc = self.accelerator
        caps = ["power_w", "util", "mem_util", "sm_clock_mhz", "temp_c"]
        if self.readout.model.has_energy_counter:
            caps.insert(1, "energy_j")
        # DRAM traffic only where the real sensor has it (see artefacts.SensorModel.dram).
        caps += {"bytes": ["dram_bytes_per_s"], "gpm": ["dram_bw_util"]}.get(self.readout.model.dram, [])
        return SensorInfo(
            kind="sim",
            device_id=acc.device_id,
            name=acc.name,
            fingerprint={
                "model": acc.spec.name,
                "simulated": "true",
                "simulator": "flopwatch.sim",
                "seed": str(self._seed),
                "power_model": acc.power_model.kind,
                "power_model_source": acc.power_model.source,
                "sensor_model": self.readout.model.kind,
                "power_limit_w": f"{acc.power_limit_w:g}",
                "locked_clock_mhz": "" if acc.locked_clock_mhz is None else f"{acc.locked_clock_mhz:g}",
            },
            capabilities=tuple(caps),
            simulated=True,
            spec_key=acc.spec.key,
        )

    def read(self) -> Reading:
        if self._closed:
            raise SensorError(f"{self.accelerator.device_id}: sensor closed")
        t = self._clock.now()
        r = self.readout.read_one(t)
        acc = self.accelerator
        extra = {
            "power_instant_w": r["power_instant_w"],
            "power_limit_w": acc.power_limit_w,
            "simulated": 1.0,
        }
        dram = self.readout.model.dram
        if dram == "gpm":
            extra["dram_bw_util"] = min(1.0, r["dram_bytes_per_s"] / acc.spec.mem_bw_bytes_per_s)
        return Reading(
            t_s=t,
            wall_time=self._clock.wall_time(),
            device=self.accelerator.device_id,
            power_w=r["power_w"],
            energy_j=r.get("energy_j"),
            util=r["util"],
            mem_util=r["mem_util"],
            dram_bytes_per_s=r["dram_bytes_per_s"] if dram == "bytes" else None,
            sm_clock_mhz=r["sm_clock_mhz"],
            temp_c=r["temp_c"],
            extra=extra,
        )

    def close(self) -> None:
        self._closed = True


def parse_spec(arg: str) -> tuple[str, int]:
    """``"a100"`` → (``"a100"``, 1); ``"sim:h100x4"`` → (``"h100"``, 4). Unknown devices raise InputError."""
    s = str(arg).strip().lower()
    if s.startswith("sim:"):
        s = s[4:]
    if not s:
        s = "a100"
    m = _SPEC_RE.match(s)
    key, n = (m.group("key"), int(m.group("n") or 1)) if m else (s, 1)
    try:
        spec = get_device(key)
    except InputError:
        spec = get_device(s)  # a name that itself ends in x<digits>
        n = 1
    if spec.vendor == "cpu":
        raise InputError(f"sim:{arg}: the simulator models accelerators, not {spec.name}", field="device")
    if not 1 <= n <= 64:
        raise InputError(f"sim:{arg}: device count must be 1–64", field="device")
    return spec.key, n


def from_spec(
    arg: str,
    *,
    seed: int = 0,
    schedule: Any = None,
    power_cap_w: float | None = None,
    locked_clock_mhz: float | None = None,
    clock: Clock | None = None,
    speed: float | None = None,
    wall0: float | None = None,
    start_idle_s: float = 0.0,
    **opts: Any,
) -> list[SimSensor]:
    """Simulated sensors for ``sim:<arg>`` playing ``schedule`` (see the module docstring)."""
    if opts:
        raise InputError(f"sim:{arg}: unknown option(s) {', '.join(sorted(opts))}", field=sorted(opts)[0])
    key, n = parse_spec(arg)
    if clock is None:
        if speed is not None:
            clock = ScaledClock(speed=float(speed), wall0=wall0)
        else:
            # t = 0 is dated now unless told (was Nov 2023: a newcomer saw 2023 rows in a ledger)
            clock = VirtualClock(wall0=time.time() if wall0 is None else float(wall0))
    items = load_schedule(schedule)
    w0 = clock.wall_time() - clock.now()
    t_start = clock.now()
    sensors = []
    for i in range(n):
        acc = SimulatedAccelerator(
            key,
            seed=seed,
            power_cap_w=power_cap_w,
            locked_clock_mhz=locked_clock_mhz,
            device_index=i,
            wall0=w0,
        )
        # The schedule starts where the clock is now (a ScaledClock starts at t0 = 0 as well).
        acc.idle(max(0.0, t_start) + max(0.0, float(start_idle_s)))
        acc.schedule(items)
        sensors.append(SimSensor(acc, clock, seed=seed))
    return sensors


# -- schedules -------------------------------------------------------------------------------------------------
_RAW_FIELDS = ("flops_per_step", "bytes_per_step", "tokens_per_step")


def load_schedule(schedule: Any, *, file: str | None = None) -> list[Idle | Run]:
    """Normalise a schedule (objects, dicts, tuples, or a JSON/TOML path) into Idle/Run items."""
    if schedule is None:
        return []
    if isinstance(schedule, (str, Path)):
        return _load_schedule_file(Path(schedule))
    if isinstance(schedule, Mapping):
        schedule = schedule.get("schedule", None)
        if schedule is None:
            raise InputError("a schedule mapping needs a 'schedule' list", file=file, field="schedule")
    if isinstance(schedule, Mapping) or not isinstance(schedule, Iterable) or isinstance(schedule, str):
        # a TOML [schedule] table instead of [[schedule]] items: its keys are not items
        kind = "a table (write [[schedule]], one per item)" if isinstance(schedule, Mapping) else None
        raise InputError(
            f"a schedule must be a list, got {kind or type(schedule).__name__}", file=file, field="schedule"
        )
    return [_item(it, i, file) for i, it in enumerate(schedule)]


def _load_schedule_file(p: Path) -> list[Idle | Run]:
    # regular file, size-capped, parsed without RecursionError/OverflowError (flopwatch.io)
    if p.suffix.lower() == ".toml":
        data: Any = parse_toml(read_text(p, kind="schedule (TOML)"), file=str(p))
    else:
        data = read_json(p, kind="schedule (JSON)")
    if isinstance(data, (str, Path)):  # a file's content is never read as another path
        raise InputError("a schedule must be a list, got str", file=str(p), field="schedule")
    return load_schedule(data, file=str(p))


# Sanity bounds of a scripted schedule: a simulated run or gap longer than ~3 years, or more than 1e15 steps,
# is a typo or a hostile file (and would make the virtual clock's arithmetic meaningless).
MAX_SCHEDULE_S = 1e8
MAX_STEPS = 1e15


def _num(
    d: Mapping[str, Any], k: str, i: int, file: str | None, *, positive: bool = True, upper: float = math.inf
) -> float:
    v = d.get(k)
    lit = is_out_of_range(v)
    if lit is not None:
        raise InputError(f"number {lit} is out of range", file=file, record=i, field=k)
    if isinstance(v, bool):
        raise InputError(f"expected a number, got {v!r}", file=file, record=i, field=k)
    try:
        x = float(v)
    except (TypeError, ValueError, OverflowError):
        raise InputError(f"expected a number, got {v!r}"[:120], file=file, record=i, field=k) from None
    if not math.isfinite(x) or (positive and x <= 0) or x < 0:
        raise InputError(
            f"expected a {'positive' if positive else 'non-negative'} number, got {v!r}",
            file=file,
            record=i,
            field=k,
        )
    if x > upper:
        raise InputError(f"{x:g} exceeds the sanity bound {upper:g}", file=file, record=i, field=k)
    return x


def _count(d: Mapping[str, Any], k: str, i: int, file: str | None, *, positive: bool = True) -> int:
    """A whole number of steps (0.5 steps is a typo, not 0 steps)."""
    x = _num(d, k, i, file, positive=positive, upper=MAX_STEPS)
    if x != round(x):
        raise InputError(f"expected a whole number, got {d.get(k)!r}", file=file, record=i, field=k)
    return int(x)


_RUN_KEYS = frozenset({"steps", "duration_s", "warmup_steps"})
#: The keys each kind of schedule item may have. Any other key is refused, not ignored: ``precision = "fp32"``
#: beside a sweep label (whose precision the label fixes) or ``mfu = 0.5`` would otherwise be silently dropped
#: and the run played as something the user did not ask for.
_ITEM_KEYS: dict[str, frozenset[str]] = {
    "idle": frozenset({"idle_s", "idle"}),
    "sweep": _RUN_KEYS | {"sweep", "label"},
    "config": _RUN_KEYS | {"config", "label"},
    "raw": _RUN_KEYS | {*_RAW_FIELDS, "label", "dtype", "arch", "num_layers", "batch_size"},
}


def _check_keys(d: Mapping[str, Any], i: int, file: str | None) -> None:
    kind = (
        "idle"
        if "idle_s" in d or "idle" in d
        else "sweep"
        if "sweep" in d
        else "config"
        if "config" in d
        else "raw"
    )
    unknown = sorted(str(k) for k in d if k not in _ITEM_KEYS[kind])
    if unknown:
        raise InputError(
            f"unknown key for a{'n' if kind == 'idle' else ''} {kind} item (allowed: "
            f"{', '.join(sorted(_ITEM_KEYS[kind]))}); an item is an idle gap or one run",
            file=file,
            record=i,
            field=unknown[0][:60],
        )


def _item(it: Any, i: int, file: str | None) -> Idle | Run:
    if isinstance(it, (Idle, Run)):
        return it
    if isinstance(it, tuple) and len(it) == 2:
        return Run(it[0], steps=_count({"steps": it[1]}, "steps", i, file))
    if not isinstance(it, Mapping):
        if all(hasattr(it, f) for f in (*_RAW_FIELDS, "label", "dtype")):
            raise InputError(
                "a workload in a schedule needs steps: use Run(workload, steps)", file=file, record=i
            )
        raise InputError(f"unrecognised schedule item {it!r}", file=file, record=i)
    d = dict(it)
    if "workload" in d and isinstance(d["workload"], Mapping):
        d = {**d, **d.pop("workload")}
    _check_keys(d, i, file)
    for k in ("idle_s", "idle"):
        if k in d:
            return Idle(_num(d, k, i, file, positive=False, upper=MAX_SCHEDULE_S))
    steps = d.pop("steps", None)
    duration = d.pop("duration_s", None)
    warmup_v = d.pop("warmup_steps", None)
    warmup = (
        0 if warmup_v is None else _count({"warmup_steps": warmup_v}, "warmup_steps", i, file, positive=False)
    )
    if steps is None and duration is None:
        raise InputError("a workload needs steps or duration_s", file=file, record=i, field="steps")
    if steps is not None:
        steps = _count({"steps": steps}, "steps", i, file)
    if duration is not None:
        duration = _num({"duration_s": duration}, "duration_s", i, file, upper=MAX_SCHEDULE_S)
    extra: dict[str, Any] = {}
    if "config" in d or "sweep" in d:
        wl, extra = _describe_config(d, i, file)
    else:
        missing = [k for k in (*_RAW_FIELDS, "label") if k not in d]
        if missing:
            raise InputError(f"missing {', '.join(missing)}", file=file, record=i, field=missing[0])
        try:
            dtype = normalize_dtype(d.get("dtype", "fp32"))
        except InputError as e:
            raise InputError(e.detail, file=file, record=i, field="dtype") from None
        wl = RawWorkload(
            label=str(d["label"]),
            flops_per_step=_num(d, "flops_per_step", i, file),
            bytes_per_step=_num(d, "bytes_per_step", i, file, positive=False),
            tokens_per_step=_num(d, "tokens_per_step", i, file),
            batch_size=_count(d, "batch_size", i, file) if "batch_size" in d else 1,
            dtype=dtype,
            arch=d.get("arch"),
            num_layers=_count(d, "num_layers", i, file) if "num_layers" in d else None,
        )
    return Run(wl, steps=steps, duration_s=duration, warmup_steps=warmup, extra=extra)


def _describe_config(d: Mapping[str, Any], i: int, file: str | None) -> tuple[Any, dict[str, Any]]:
    """A workload from a model config or a sweep entry, through the workloads package (lazily imported)."""
    try:
        from flopwatch.workloads.config import config_from_dict
        from flopwatch.workloads.formulas import describe
        from flopwatch.workloads.sweeps import get_config
    except ImportError as e:  # pragma: no cover - depends on the workloads package being installed
        raise InputError(f"workload configs need flopwatch.workloads ({e})", file=file, record=i) from None
    if "sweep" not in d and not isinstance(d["config"], Mapping):
        raise InputError(
            f"must be an object, got {type(d['config']).__name__}", file=file, record=i, field="config"
        )
    try:
        if "sweep" in d:
            cfg = get_config(str(d["sweep"]), str(d.get("label", "")))
        else:
            cfg = config_from_dict(d["config"])
    except InputError as e:
        raise InputError(e.detail, file=file, record=i, field=e.field or "config") from None
    except (TypeError, ValueError, OverflowError) as e:  # a value of the wrong type deep in the config
        raise InputError(
            f"invalid ({type(e).__name__}: {str(e)[:100]})", file=file, record=i, field="config"
        ) from None
    return describe(cfg), {"config": cfg.to_dict() if hasattr(cfg, "to_dict") else None}
