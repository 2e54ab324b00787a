"""Which device ``flopwatch run`` uses: a real NVIDIA GPU with working NVML telemetry, or a simulated twin.

``auto`` takes a real GPU with working NVML telemetry (and a CUDA build of torch), else ``sim:a100``; ``cuda[:N]``
insists on the real GPU, ``sim:NAME`` on the simulator.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from flopwatch.backends import open_sensors
from flopwatch.devices import resolve
from flopwatch.errors import FlopwatchError, InputError
from flopwatch.sim.sensor import parse_spec


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


def _nvml_ok(index: int | None) -> tuple[bool, str, list[Any]]:
    """Whether NVML telemetry works for GPU ``index`` (None: the first): power and utilisation readable."""
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


def _flat(why: str) -> str:
    """A nested reason ("a (b (c))") as one level of clauses ("a: b; c"), to fit in one plain sentence."""
    parts = [p.strip() for p in why.replace(")", "").split(" (")]
    return ": ".join(parts[:2]) + "".join(f"; {p}" for p in parts[2:])


def resolve_device(spec: str) -> DeviceChoice:
    """Turn ``--device`` into a :class:`DeviceChoice` (InputError when the asked-for device is unusable)."""
    s = str(spec).strip().lower()
    if s.startswith("sim:") or s == "sim":
        try:
            key, n = parse_spec(s)
        except InputError as e:  # the simulator names its field 'device'; here it is the --device option
            raise InputError(e.detail, file=e.file, record=e.record, field="--device") from None
        if n != 1:
            raise InputError(f"{spec}: flopwatch run uses one device; drop the x{n}", field="--device")
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
            "sim",
            "sim:a100",
            "a100",
            reason=f"the simulated A100, since no usable GPU was found ({_flat(why)})",
        )
    if s == "cuda" or s.startswith("cuda:"):
        idx = 0
        if s.startswith("cuda:"):
            try:
                idx = int(s.split(":", 1)[1])
            except ValueError:
                raise InputError(f"expected cuda or cuda:N, got {spec!r}", field="--device") from None
        ok, why, sensors = _nvml_ok(idx)
        for x in sensors:
            x.close()
        if not ok:
            raise InputError(
                f"{spec}: {_flat(why)}; use --device sim:a100 to run on the simulator", field="--device"
            )
        cok, cwhy = _cuda_ok()
        if not cok:
            raise InputError(f"{spec}: {cwhy}", field="--device")
        return _cuda_choice(idx, "requested")
    raise InputError(f"unknown device {spec!r}; expected auto, cuda[:N] or sim:NAME", field="--device")


def _cuda_choice(idx: int, reason: str) -> DeviceChoice:
    import torch

    name = torch.cuda.get_device_name(idx)
    spec = resolve(name)
    key = spec.key if spec is not None else None
    nvml_spec = f"nvml:{idx}"
    try:  # CUDA orders devices fastest-first, NVML by PCI bus: match the telemetry to the GPU by UUID
        uuid = str(torch.cuda.get_device_properties(idx).uuid)
        nvml_spec = "nvml:" + (uuid if uuid.startswith("GPU-") else f"GPU-{uuid}")
    except Exception:  # older torch: fall back to the index (correct unless CUDA_DEVICE_ORDER differs)
        pass
    return DeviceChoice(
        "cuda", f"cuda:{idx}", key, index=idx, reason=f"{reason}: {name}", nvml_spec=nvml_spec
    )
