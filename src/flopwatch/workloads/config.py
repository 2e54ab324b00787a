"""Workload configurations: one frozen dataclass per model family.

This module is torch-free on purpose (the CLI and the simulator import it without torch).

- :class:`EncoderConfig` (``arch="seed-encoder"``) is the published Jetson study's workload
  (Fowler 2026, verification-games): a stack of ``torch.nn.TransformerEncoderLayer`` on random float
  inputs plus a Linear head. Its defaults (nhead 4, 3 layers, dim_feedforward 512, AdamW) are the study's.
- :class:`GPTConfig` (``arch="gpt"``) is a decoder-only language model on random token ids, closer to
  frontier training (nanoGPT-style, GPT-2 conventions: head size 64, MLP width 4·d_model).

Validation happens in ``__post_init__`` and raises :class:`~flopwatch.errors.ConfigError` (exit 2 on the
CLI) before anything is built or run. Device-dependent checks (fp16 on a CPU …) live in
:func:`check_device_support`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, fields, replace
from typing import Any, ClassVar

from flopwatch.devices import DTYPE_ALIASES
from flopwatch.errors import ConfigError

ARCHS = ("seed-encoder", "gpt")
OPTIMIZERS = ("adamw", "sgd")
PRECISIONS = ("fp32", "tf32", "fp16", "bf16")


def _positive_int(name: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        try:
            as_float = float(value)
        except (TypeError, ValueError):
            raise ConfigError(f"{name} must be a positive integer, got {value!r}", field=name) from None
        if not as_float.is_integer():
            raise ConfigError(f"{name} must be a positive integer, got {value!r}", field=name)
        value = int(as_float)
    if value <= 0:
        raise ConfigError(f"{name} must be a positive integer, got {value}", field=name)
    return value


def _choice(name: str, value: Any, choices: tuple[str, ...], aliases: Mapping[str, str] | None = None) -> str:
    key = str(value).strip().lower()
    if aliases is not None:
        key = aliases.get(key, key)
    if key not in choices:
        raise ConfigError(f"{name} must be one of {', '.join(choices)}, got {value!r}", field=name)
    return key


#: Largest tensor (elements) a config may ask for: 2^53 elements is 36 PB in fp32, beyond any device, and the
#: largest count that float64 FLOP totals hold exactly; torch's meta-device shapes overflow int64 not far above.
MAX_TENSOR_ELEMENTS = 2**53
#: Most layers and steps: 10× and 1000× beyond any trained model (hundreds of layers) and run (~1e6 steps), so
#: a typo (``--steps 1e15``) is refused instead of building or running for ever.
MAX_LAYERS = 10_000
MAX_STEPS = 10**9


def _check_size(c: Any) -> None:
    """ConfigError when the config's largest tensors or counts are absurd (one line naming the field)."""
    if c.num_layers > MAX_LAYERS:
        raise ConfigError(f"num_layers must be <= {MAX_LAYERS}, got {c.num_layers}", field="num_layers")
    if c.steps > MAX_STEPS:
        raise ConfigError(f"steps must be <= {MAX_STEPS:.0e}, got {c.steps}", field="steps")
    width = max(c.d_model, c.dim_feedforward, int(getattr(c, "vocab_size", 0) or 0))
    tensors = {
        "seq_len": c.batch_size * c.nhead * c.seq_len * c.seq_len,  # attention scores
        "batch_size": c.batch_size * c.seq_len * width,  # activations
        "d_model": c.d_model * width,  # weights
    }
    for fld, n in tensors.items():
        if n > MAX_TENSOR_ELEMENTS:
            raise ConfigError(
                f"the config's largest tensor would hold {float(n):.3g} elements (limit 2^53 ≈ 9e15): "
                "far beyond any device",
                field=fld,
            )


@dataclass(frozen=True)
class _Common:
    """Fields and checks shared by both families (not used directly)."""

    arch: ClassVar[str] = ""

    def _validate_common(self) -> None:
        for name in ("d_model", "batch_size", "seq_len", "num_layers", "nhead", "dim_feedforward", "steps"):
            object.__setattr__(self, name, _positive_int(name, getattr(self, name)))
        d_model, nhead = self.d_model, self.nhead
        _check_size(self)
        if d_model % nhead != 0:
            raise ConfigError(
                f"d_model ({d_model}) must be divisible by nhead ({nhead}) (head size = d_model / nhead)",
                field="nhead",
            )
        object.__setattr__(self, "optimizer", _choice("optimizer", self.optimizer, OPTIMIZERS))
        object.__setattr__(
            self,
            "precision",
            _choice("precision", self.precision, PRECISIONS, DTYPE_ALIASES),
        )
        dropout = getattr(self, "dropout", 0.0)
        try:
            dropout = float(dropout)
        except (TypeError, ValueError):
            raise ConfigError(
                f"dropout must be a number in [0, 1), got {dropout!r}", field="dropout"
            ) from None
        if not 0.0 <= dropout < 1.0:
            raise ConfigError(f"dropout must be in [0, 1), got {dropout}", field="dropout")
        object.__setattr__(self, "dropout", dropout)
        label = self.label
        if label is not None and (not isinstance(label, str) or not label.strip()):
            raise ConfigError(f"label must be a non-empty string, got {label!r}", field="label")

    @property
    def name(self) -> str:
        """The explicit label, or one built from the sizes (the study's scheme, e.g. ``d256_b16_s128_L3``)."""
        return self.label or self.auto_label()

    def auto_label(self) -> str:  # pragma: no cover - overridden
        raise NotImplementedError

    @property
    def tokens_per_step(self) -> int:
        return self.batch_size * self.seq_len

    @property
    def head_dim(self) -> int:
        return self.d_model // self.nhead

    def to_dict(self) -> dict[str, Any]:
        """Plain dict (JSON-ready) with ``arch``; inverse of :func:`config_from_dict`."""
        d = {"arch": self.arch}
        d.update(asdict(self))
        if d.get("label") is None:
            d["label"] = self.name
        return d

    def shape_key(self) -> WorkloadConfig:
        """The config with everything that cannot change FLOPs per step normalised (for caching counts).

        FlopCounterMode counts by tensor shape, so precision, optimizer, steps and label do not matter.
        """
        return replace(self, steps=1, optimizer="adamw", precision="fp32", label=None)  # type: ignore[return-value]


@dataclass(frozen=True)
class EncoderConfig(_Common):
    """The Jetson study's workload: ``num_layers`` × TransformerEncoderLayer(batch_first, dropout 0.1) + Linear.

    Defaults are the study's (Fowler 2026): nhead 4, num_layers 3, dim_feedforward 512, AdamW lr 1e-4.
    """

    arch: ClassVar[str] = "seed-encoder"

    d_model: int
    batch_size: int
    seq_len: int
    num_layers: int = 3
    nhead: int = 4
    dim_feedforward: int = 512
    steps: int = 100
    optimizer: str = "adamw"
    precision: str = "fp32"
    dropout: float = 0.1
    label: str | None = None

    def __post_init__(self) -> None:
        self._validate_common()

    def auto_label(self) -> str:
        # The study's label scheme: base sizes, then one suffix per non-default option.
        s = f"d{self.d_model}_b{self.batch_size}_s{self.seq_len}_L{self.num_layers}"
        if self.precision != "fp32":
            s += f"_{self.precision}"
        if self.nhead != 4:
            s += f"_h{self.nhead}"
        if self.dim_feedforward != 512:
            s += f"_ff{self.dim_feedforward}"
        if self.optimizer != "adamw":
            s += f"_{self.optimizer}"
        return s


@dataclass(frozen=True)
class GPTConfig(_Common):
    """A decoder-only LM (pre-LayerNorm GPT-2 block, causal attention, tied input/output embeddings).

    ``nhead`` defaults to d_model // 64 (GPT-2's head size 64) and ``dim_feedforward`` to 4·d_model
    (Radford et al. 2019; Vaswani et al. 2017).
    """

    arch: ClassVar[str] = "gpt"

    d_model: int
    batch_size: int
    seq_len: int
    num_layers: int = 4
    nhead: int = field(default=None)  # type: ignore[assignment]  # None → d_model // 64 (at least 1)
    dim_feedforward: int = field(default=None)  # type: ignore[assignment]  # None → 4 · d_model
    vocab_size: int = 8192
    steps: int = 100
    optimizer: str = "adamw"
    precision: str = "fp32"
    dropout: float = 0.0
    label: str | None = None

    def __post_init__(self) -> None:
        # Only None means "default": an explicit 0 is a non-positive size and refused by _validate_common.
        if self.nhead is None:
            object.__setattr__(
                self, "nhead", max(1, int(self.d_model) // 64) if _is_number(self.d_model) else 1
            )
        if self.dim_feedforward is None:
            object.__setattr__(
                self, "dim_feedforward", 4 * int(self.d_model) if _is_number(self.d_model) else 1
            )
        self._validate_common()
        object.__setattr__(self, "vocab_size", _positive_int("vocab_size", self.vocab_size))

    def auto_label(self) -> str:
        s = f"gpt_d{self.d_model}_b{self.batch_size}_s{self.seq_len}_L{self.num_layers}_v{self.vocab_size}"
        if self.precision != "fp32":
            s += f"_{self.precision}"
        if self.optimizer != "adamw":
            s += f"_{self.optimizer}"
        return s


def _is_number(x: Any) -> bool:
    try:
        int(x)
    except (TypeError, ValueError):
        return False
    return True


WorkloadConfig = EncoderConfig | GPTConfig
_CLASSES: dict[str, type] = {"seed-encoder": EncoderConfig, "gpt": GPTConfig}


def make_config(arch: str, **kw: Any) -> WorkloadConfig:
    """Build a config of family ``arch`` (``"seed-encoder"`` or ``"gpt"``); ``None`` values mean "default".

    Unknown keys and invalid values raise :class:`ConfigError` naming the field.
    """
    key = str(arch).strip().lower()
    if key in ("encoder", "seed_encoder"):
        key = "seed-encoder"
    if key not in _CLASSES:
        raise ConfigError(f"unknown arch {arch!r}; expected one of {', '.join(ARCHS)}", field="arch")
    cls = _CLASSES[key]
    known = {f.name for f in fields(cls)}
    kw = {k: v for k, v in kw.items() if v is not None}
    unknown = sorted(set(kw) - known)
    if unknown:
        raise ConfigError(
            f"unknown option(s) for arch {key!r}: {', '.join(unknown)} (known: {', '.join(sorted(known))})",
            field=unknown[0],
        )
    for required in ("d_model", "batch_size", "seq_len"):
        if required not in kw:
            raise ConfigError(f"{required} is required for arch {key!r}", field=required)
    return cls(**kw)  # type: ignore[no-any-return]


def config_from_dict(d: Mapping[str, Any]) -> WorkloadConfig:
    """Inverse of ``to_dict``. Also reads the study's record configs (no ``arch`` → seed-encoder)."""
    d = dict(d)
    arch = d.pop("arch", "seed-encoder")
    return make_config(arch, **d)


def check_device_support(config: WorkloadConfig, device: str) -> None:
    """Refuse a precision the device cannot run, before anything is built (raises :class:`ConfigError`).

    - CPU: fp32 only, plus bf16 where the CPU has native bf16 (AVX512-BF16 or AMX); fp16 training needs
      a CUDA GradScaler and tf32 is a CUDA tensor-core mode.
    - CUDA: tf32 and bf16 need compute capability ≥ 8.0 (Ampere).
    """
    import torch

    dev = str(device).strip().lower()
    p = config.precision
    if dev == "cpu":
        if p in ("fp16", "tf32"):
            raise ConfigError(
                f"precision {p!r} is not available on the CPU ({'TF32 is a CUDA tensor-core mode' if p == 'tf32' else 'fp16 training with GradScaler needs CUDA'}); use fp32 or bf16",
                field="precision",
            )
        if p == "bf16" and not cpu_has_bf16():
            raise ConfigError(
                "precision 'bf16' needs a CPU with native bf16 (AVX512-BF16 or AMX); this CPU has neither",
                field="precision",
            )
        return
    if dev == "cuda" or dev.startswith("cuda:"):
        if not torch.cuda.is_available():
            raise ConfigError("device 'cuda' requested but torch sees no CUDA device", field="device")
        index = int(dev.split(":", 1)[1]) if ":" in dev else torch.cuda.current_device()
        if index >= torch.cuda.device_count():
            raise ConfigError(
                f"device {device!r}: only {torch.cuda.device_count()} CUDA device(s)", field="device"
            )
        major, _minor = torch.cuda.get_device_capability(index)
        if p in ("tf32", "bf16") and major < 8:
            raise ConfigError(
                f"precision {p!r} needs compute capability >= 8.0; {torch.cuda.get_device_name(index)} has {major}.x",
                field="precision",
            )
        return
    raise ConfigError(f"unknown device {device!r}; expected cpu, cuda or cuda:N", field="device")


def cpu_has_bf16() -> bool:
    """Whether this CPU computes bf16 natively (AVX512-BF16 or AMX tiles)."""
    import torch

    checks = ("_is_avx512_bf16_supported", "_is_amx_tile_supported")
    return any(bool(getattr(torch.cpu, c, lambda: False)()) for c in checks)
