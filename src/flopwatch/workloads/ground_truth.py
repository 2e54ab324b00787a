"""Ground-truth training FLOPs: ``torch.utils.flop_counter.FlopCounterMode``, once per config, on the meta device.

What is counted, and why it matches the published study (Fowler 2026) to the last printed digit:

- **One training step** = forward + backward of the model on one batch, exactly as executed by autograd
  (so the seed encoder's first QKV projection has no input-gradient: its input is data). The count is
  multiplied by ``steps`` for a run. The optimizer step is **not** in ``flops_per_step`` (the study did
  not count it either); it is reported separately as ``optimizer_flops_per_step`` (analytic, below).
- **Counting happens on the meta device**: tensors have shapes but no storage, so a count costs
  milliseconds and no memory, and the timed training loop never runs under a counting mode (the
  in-loop alternative is measured in ``benchmarks/bench_flop_counting.py``). FlopCounterMode counts by
  shape, so precision (fp32/tf32/fp16/bf16), optimizer and step count do not change FLOPs per step.
- **Attention, whatever kernel runs.** On meta (and with PyTorch's math backend) scaled-dot-product
  attention decomposes into two batched matmuls forward and four backward: 3× the forward attention
  FLOPs. Fused CUDA kernels (flash / memory-efficient / cuDNN) recompute the score matrix in backward;
  FlopCounterMode counts them as forward + 5 matmuls = 3.5× forward (``sdpa_backward_flop_count``).
  The CPU flash kernel is not in FlopCounterMode's registry at all (it would count as zero). We intercept
  every ``scaled_dot_product_attention`` call, take the forward count from its shapes with torch's own
  ``sdpa_flop_count``, check that the math decomposition contributed exactly 3× that, and then report
  attention under the requested convention: ``"fused"`` (3.5×, the study's, counted on CUDA) or
  ``"math"`` (3×). Causal masking is not discounted (FlopCounterMode does not either).
- **Breakdown**: ``matmul_flops_per_step`` (mm/addmm/non-attention bmm), ``attention_flops_per_step``,
  ``other_flops_per_step`` (any other op FlopCounterMode counts, e.g. convolutions: 0 for our models);
  ``flops_per_step`` is their sum. ``elementwise_flops_per_step`` is a separate, coarse estimate of
  element-wise work (never part of the total, which — like every published MFU figure — is matmul-class
  FLOPs only).
"""

from __future__ import annotations

import functools
import threading
from dataclasses import asdict, dataclass
from typing import Any

from flopwatch.errors import ConfigError
from flopwatch.workloads.config import WorkloadConfig

_SPY_LOCK = threading.Lock()
CONVENTIONS = ("fused", "math")

# Optimizer FLOPs per parameter element per step (analytic; torch.optim semantics, default options).
# AdamW (Loshchilov & Hutter 2019; torch.optim.AdamW, weight_decay=0.01, amsgrad=False):
#   decoupled decay p·(1−lr·λ): 1;  m ← β1·m + (1−β1)·g: 3;  v ← β2·v + (1−β2)·g²: 4;
#   denom ← √v / √(1−β2^t) + ε: 3;  p ← p − (lr/(1−β1^t))·m/denom: 3.  Per-tensor scalar work ignored.
# SGD with momentum 0.9 (dampening 0, no Nesterov, no decay): buf ← 0.9·buf + g: 2;  p ← p − lr·buf: 2.
# fp16 adds GradScaler.unscale_ (one multiply per grad element) and its inf/NaN check (one compare).
OPTIMIZER_FLOPS_PER_PARAM = {"adamw": 14, "sgd": 4}
GRADSCALER_FLOPS_PER_PARAM = 2


@dataclass(frozen=True)
class FlopCount:
    """FLOPs of one training step (forward + backward), by category. Multiply by steps for a run."""

    flops_per_step: int
    matmul_flops_per_step: int
    attention_flops_per_step: int
    other_flops_per_step: int
    optimizer_flops_per_step: int
    attention_convention: str
    attention_forward_flops_per_step: int
    elementwise_flops_per_step: int
    params: int
    by_op: dict[str, int]
    method: str = "torch.utils.flop_counter.FlopCounterMode on the meta device, forward+backward of one step"

    def total(self, steps: int) -> int:
        """Ground-truth FLOPs of a run of ``steps`` steps (optimizer excluded, as in the study)."""
        return self.flops_per_step * int(steps)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class _RawCount:
    total_counted: int  # everything FlopCounterMode counted (attention as math)
    by_op: tuple[tuple[str, int], ...]
    attention_math: int  # the counted bmm FLOPs of the attention decomposition
    attention_forward: int  # Σ sdpa_flop_count over calls
    attention_fused: int  # Σ (sdpa_flop_count + sdpa_backward_flop_count)
    elementwise: int
    params: int


def count_flops(config: WorkloadConfig, attention: str = "fused") -> FlopCount:
    """Ground-truth FLOPs per training step of ``config`` (meta device; cached per shape).

    ``attention``: ``"fused"`` (CUDA flash/efficient/cuDNN kernels, 3.5× forward; the study's
    convention, default) or ``"math"`` (PyTorch's math kernel, 3× forward).
    """
    conv = str(attention).strip().lower()
    if conv not in CONVENTIONS:
        raise ConfigError(
            f"attention convention must be one of {', '.join(CONVENTIONS)}, got {attention!r}",
            field="attention",
        )
    raw = _count_shape(config.shape_key())
    attn = raw.attention_fused if conv == "fused" else raw.attention_math
    by_op = dict(raw.by_op)
    matmul_ops = {"aten.mm", "aten.addmm", "aten.bmm", "aten.baddbmm"}
    matmul = sum(v for k, v in by_op.items() if k in matmul_ops) - raw.attention_math
    other = raw.total_counted - raw.attention_math - matmul
    opt = optimizer_flops_per_step(config, raw.params)
    return FlopCount(
        flops_per_step=matmul + attn + other,
        matmul_flops_per_step=matmul,
        attention_flops_per_step=attn,
        other_flops_per_step=other,
        optimizer_flops_per_step=opt,
        attention_convention=conv,
        attention_forward_flops_per_step=raw.attention_forward,
        elementwise_flops_per_step=raw.elementwise,
        params=raw.params,
        by_op=by_op,
    )


def optimizer_flops_per_step(config: WorkloadConfig, params: int) -> int:
    """Analytic optimizer FLOPs per step (see ``OPTIMIZER_FLOPS_PER_PARAM``); not part of ``flops_per_step``."""
    per = OPTIMIZER_FLOPS_PER_PARAM[config.optimizer]
    if config.precision == "fp16":
        per += GRADSCALER_FLOPS_PER_PARAM
    return per * int(params)


def clear_cache() -> None:
    """Forget cached counts (tests, benchmarks)."""
    _count_shape.cache_clear()


@functools.lru_cache(maxsize=512)
def _count_shape(config: WorkloadConfig) -> _RawCount:
    import torch
    import torch.nn.functional as F
    from torch.utils._python_dispatch import TorchDispatchMode
    from torch.utils.flop_counter import FlopCounterMode, sdpa_backward_flop_count, sdpa_flop_count

    from flopwatch.workloads.model import build_model, make_batch

    sdpa_shapes: list[tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...]]] = []

    real_sdpa = F.scaled_dot_product_attention

    counting_thread = threading.get_ident()

    def _sdpa_spy(query: Any, key: Any, value: Any, *args: Any, **kwargs: Any) -> Any:
        # MultiheadAttention (F.multi_head_attention_forward) and our GPT both look this name up in
        # torch.nn.functional at call time, so a temporary rebinding sees every attention call. The
        # rebinding is process-wide: a training thread running attention meanwhile must not be counted
        # (FlopCounterMode, a dispatch mode, is thread-local too).
        if threading.get_ident() == counting_thread:
            sdpa_shapes.append((tuple(query.shape), tuple(key.shape), tuple(value.shape)))
        return real_sdpa(query, key, value, *args, **kwargs)

    class _ElementwiseCounter(TorchDispatchMode):
        """Coarse element-wise estimate: 1 FLOP per output element of pointwise ops, 1 per input element
        of reductions and of the normalisation/softmax kernels (and their backward)."""

        _NAMED = ("softmax", "layer_norm", "log_softmax", "nll_loss", "dropout")

        def __init__(self) -> None:
            super().__init__()
            self.flops = 0

        def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
            out = func(*args, **(kwargs or {}))
            tags = getattr(func, "tags", ())
            name = func.__name__
            if torch.Tag.pointwise in tags:
                first = out[0] if isinstance(out, (tuple, list)) else out
                if isinstance(first, torch.Tensor):
                    self.flops += first.numel()
            elif torch.Tag.reduction in tags or any(n in name for n in self._NAMED):
                first_in = next((a for a in args if isinstance(a, torch.Tensor)), None)
                if first_in is not None:
                    self.flops += first_in.numel()
            return out

    with torch.device("meta"):
        model = build_model(config)
    model.train()
    batch = make_batch(config, "meta")
    params = sum(p.numel() for p in model.parameters() if p.requires_grad)

    counter = FlopCounterMode(display=False)
    elementwise = _ElementwiseCounter()
    with _SPY_LOCK:
        F.scaled_dot_product_attention = _sdpa_spy
        try:
            with counter, elementwise:
                loss = model(*batch)
                loss.backward()
        finally:
            F.scaled_dot_product_attention = real_sdpa

    by_op = {str(k): int(v) for k, v in counter.get_flop_counts().get("Global", {}).items()}
    total = int(counter.get_total_flops())
    fwd = sum(int(sdpa_flop_count(q, k, v)) for q, k, v in sdpa_shapes)
    bwd_fused = sum(int(sdpa_backward_flop_count((*q[:-1], v[-1]), q, k, v)) for q, k, v in sdpa_shapes)
    # On meta, SDPA runs PyTorch's math decomposition: 2 bmm forward + 4 bmm backward = 3× forward.
    attention_math = 3 * fwd
    counted_bmm = by_op.get("aten.bmm", 0) + by_op.get("aten.baddbmm", 0)
    if counted_bmm != attention_math:
        # Our models have no bmm outside attention; anything else means torch changed the decomposition.
        raise RuntimeError(
            f"attention accounting failed for {config.name}: counted bmm {counted_bmm} != 3 × forward attention "
            f"{attention_math // 3}; the meta-device SDPA did not decompose as expected (torch {torch.__version__})"
        )
    return _RawCount(
        total_counted=total,
        by_op=tuple(sorted(by_op.items())),
        attention_math=attention_math,
        attention_forward=fwd,
        attention_fused=fwd + bwd_fused,
        elementwise=elementwise.flops,
        params=params,
    )
