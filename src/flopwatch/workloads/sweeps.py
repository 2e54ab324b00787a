"""Named sweeps of workload configurations.

- ``jetson-fp32``: the 26 fp32 configurations of the published Jetson study (Fowler 2026, v2 session):
  19 size variants plus nhead, dim_feedforward, long-sequence and SGD variants. Labels are the study's.
- ``jetson-precision``: the study's 12 precision variants (tf32 / fp16 / bf16 of four fp32 configs).
- ``datacenter``: sized for A100/H100/H200 so each run takes seconds to tens of seconds there
  (step counts chosen from the counted FLOPs at a plausible 30–60 % MFU; see ``docs/workloads.md``).
- ``quick``: a handful of small configurations that run in seconds on a CPU (tests, demos, simulator).

Only configuration numbers (sizes, steps) are taken from the study; no measured value is copied.
"""

from __future__ import annotations

from collections.abc import Mapping

from flopwatch.errors import ConfigError
from flopwatch.workloads.config import EncoderConfig, GPTConfig, WorkloadConfig


def _enc(d: int, b: int, s: int, L: int, steps: int, **kw: object) -> EncoderConfig:
    return EncoderConfig(d_model=d, batch_size=b, seq_len=s, num_layers=L, steps=steps, **kw)  # type: ignore[arg-type]


# The study's 26 fp32 runs: (d_model, batch, seq_len, layers, steps) and the non-default option.
_JETSON_FP32: tuple[EncoderConfig, ...] = (
    _enc(256, 16, 128, 3, 4000),
    _enc(256, 8, 256, 3, 3500),
    _enc(384, 16, 128, 3, 2500),
    _enc(384, 8, 128, 6, 2800),
    _enc(512, 8, 128, 3, 2600),
    _enc(512, 16, 64, 6, 2400),
    _enc(512, 16, 128, 6, 1200),
    _enc(640, 8, 64, 3, 4000),
    _enc(640, 8, 128, 3, 2400),
    _enc(768, 8, 64, 3, 4000),
    _enc(768, 8, 128, 6, 1400),
    _enc(256, 16, 256, 3, 2200),
    _enc(384, 16, 256, 3, 1600),
    _enc(512, 16, 256, 3, 1200),
    _enc(128, 8, 64, 3, 4800),
    _enc(192, 8, 64, 3, 4800),
    _enc(256, 8, 64, 3, 4800),
    _enc(384, 8, 64, 3, 4500),
    _enc(512, 8, 64, 3, 4500),
    _enc(384, 16, 128, 3, 2500, nhead=8),
    _enc(512, 8, 128, 3, 2600, nhead=2),
    _enc(384, 16, 128, 3, 1100, dim_feedforward=3072),
    _enc(512, 8, 128, 3, 900, dim_feedforward=4096),
    _enc(256, 8, 512, 3, 1500),
    _enc(512, 16, 64, 6, 2400, optimizer="sgd"),
    _enc(640, 8, 128, 3, 2400, optimizer="sgd"),
)

# The study's precision variants: four base configs × (tf32, fp16, bf16), in the study's order.
_PRECISION_BASES = (
    (384, 16, 128, 3, 2500),
    (512, 16, 64, 6, 2400),
    (640, 8, 128, 3, 2400),
    (768, 8, 64, 3, 4000),
)
_JETSON_PRECISION: tuple[EncoderConfig, ...] = tuple(
    _enc(*base, precision=p) for p in ("tf32", "fp16", "bf16") for base in _PRECISION_BASES
)


def _gpt(d: int, b: int, s: int, L: int, steps: int, vocab: int = 32768, **kw: object) -> GPTConfig:
    return GPTConfig(d_model=d, batch_size=b, seq_len=s, num_layers=L, steps=steps, vocab_size=vocab, **kw)  # type: ignore[arg-type]


# Data-center sweep: targets ~5-20 s per run on an H100/H200 at 40 % MFU of the dtype's dense peak
# (devices.py), ~15-50 s on an A100; the sizing table is in docs/workloads.md. fp32 runs are smaller
# because FP32-vector peaks are 7-15x below tensor-core peaks. Memory stays well under 80 GB.
_DATACENTER: tuple[WorkloadConfig, ...] = (
    _gpt(768, 16, 1024, 12, 300, precision="bf16"),
    _gpt(1024, 16, 1024, 24, 120, precision="bf16"),
    _gpt(2048, 8, 2048, 16, 60, precision="bf16"),
    _gpt(1024, 16, 1024, 24, 120, precision="fp16"),
    _gpt(1024, 16, 1024, 24, 60, precision="tf32"),
    _gpt(768, 8, 1024, 12, 40, precision="fp32"),
    _enc(1024, 64, 512, 12, 200, nhead=16, dim_feedforward=4096, precision="bf16"),
    _enc(1024, 64, 512, 12, 100, nhead=16, dim_feedforward=4096, precision="tf32"),
    _enc(1024, 32, 512, 6, 40, nhead=16, dim_feedforward=4096, precision="fp32"),
    _enc(2048, 32, 1024, 8, 60, nhead=16, dim_feedforward=8192, precision="bf16"),
)

_QUICK: tuple[WorkloadConfig, ...] = (
    _enc(64, 4, 32, 2, 20, dim_feedforward=128),
    _enc(128, 8, 64, 3, 10),
    _enc(128, 8, 64, 3, 10, optimizer="sgd"),
    _gpt(64, 4, 32, 2, 20, vocab=512),
    _gpt(128, 4, 64, 2, 10, vocab=2048),
)

_SWEEPS: dict[str, tuple[WorkloadConfig, ...]] = {
    "jetson-fp32": _JETSON_FP32,
    "jetson-precision": _JETSON_PRECISION,
    "datacenter": _DATACENTER,
    "quick": _QUICK,
}
SWEEP_DESCRIPTIONS: Mapping[str, str] = {
    "jetson-fp32": "the Jetson study's 26 fp32 configurations (Fowler 2026, v2)",
    "jetson-precision": "the Jetson study's 12 tf32/fp16/bf16 variants",
    "datacenter": "GPT and encoder configs sized for A100/H100/H200 (seconds to tens of seconds per run)",
    "quick": "a handful of small configs that run in seconds on a CPU",
}
SWEEPS: tuple[str, ...] = tuple(_SWEEPS)


def get_sweep(name: str) -> list[WorkloadConfig]:
    """The configurations of sweep ``name`` (a new list; configs are frozen)."""
    key = str(name).strip().lower()
    if key not in _SWEEPS:
        raise ConfigError(f"unknown sweep {name!r}; known: {', '.join(SWEEPS)}", field="sweep")
    return list(_SWEEPS[key])


def get_config(sweep: str, label: str) -> WorkloadConfig:
    """The configuration labelled ``label`` in ``sweep`` (labels as in the study, e.g. ``d256_b16_s128_L3``)."""
    configs = get_sweep(sweep)
    for c in configs:
        if c.name == label:
            return c
    raise ConfigError(
        f"no configuration labelled {label!r} in sweep {sweep!r}; labels: {', '.join(c.name for c in configs)}",
        field="label",
    )
