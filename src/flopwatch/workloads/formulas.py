"""Analytic FLOP and DRAM-traffic formulas, each cited, for the workloads in this package.

Torch-free (the simulator and the CLI use it without torch). Counted ground truth lives in
``ground_truth.py``; :func:`closed_form_flops_per_step` reproduces it exactly (tested), and the three
published approximations below differ from it for documented reasons:

- **PaLM** (Chowdhery et al. 2022, "PaLM: Scaling Language Modeling with Pathways", App. B): model FLOPs
  per token = 6N + 12·L·H·Q·T (N parameters, L layers, H heads, Q head size, T sequence length).
  6N over-counts non-matmul parameters (biases, LayerNorm, the position embedding) and, for the seed
  encoder, the first layer's input-gradient that autograd never computes; 12·L·H·Q·T is the math-kernel
  attention (3× forward), so it under-counts the fused convention by 0.5× forward attention.
- **Chinchilla** (Hoffmann et al. 2022, "Training Compute-Optimal Large Language Models", App. F):
  forward FLOPs per sequence = embeddings 2·s·V·d + L·(QKV 6·s·d·d_attn + logits 2·s²·d_attn +
  softmax 3·H·s² + reduction 2·s²·d_attn + output 2·s·d_attn·d + MLP 4·s·d·ff) + final logits 2·s·d·V;
  backward = 2× forward. Adds the one-hot embedding "matmul" and softmax FLOPs FlopCounterMode does not
  count; math-kernel attention.
- **Megatron** (Narayanan et al. 2021, "Efficient Large-Scale Language Model Training on GPU Clusters
  Using Megatron-LM", SC21, eq. 3): F = 96·B·s·l·h²·(1 + s/(6h) + V/(16·l·h)) per iteration, which
  assumes MLP width 4h and full activation recomputation (4 forward-equivalents per layer instead of 3);
  ``recompute=False`` gives the paper's 72·B·s·l·h²·(1 + s/(6h)) + 6·B·s·h·V without it.

For the seed encoder (no vocabulary) the Linear(d, d) head plays the part of the output logits (V := d)
and there is no embedding.

MFU conventions (:data:`MFU_CONVENTIONS`; every MFU flopwatch reports names the one it uses):

- **hardware** FLOPs: what the kernels execute, as counted (:func:`closed_form_flops_per_step`, equal to
  ``FlopCounterMode``): fused attention counts 3.5× forward attention (the flash/efficient backward recomputes
  Q·Kᵀ), no causal discount (the counter counts the full s² product). The Jetson study's ground truth.
- **model** FLOPs (PaLM, Chowdhery et al. 2022, App. B "model FLOPs utilization"): the work the model needs,
  without rematerialisation: 6 × matmul weights × tokens + 3 × forward attention, with causal attention halved
  (only the lower triangle of Q·Kᵀ and P·V is needed; the 12·L·H·Q·T term counted per token over the causal
  half, as in Megatron-LM's and FlashAttention's causal accounting). :func:`model_flops_per_step`.

:func:`bytes_per_step` is an analytic DRAM-traffic estimate; :func:`describe` packages what the
simulator needs (:class:`WorkloadDescription`).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from flopwatch.errors import ConfigError
from flopwatch.workloads.config import EncoderConfig, GPTConfig, WorkloadConfig

# Bytes per element of the tensors matmuls read/write under each precision policy. Parameters, grads
# and optimizer state stay fp32 in every policy (autocast keeps fp32 master weights).
_ACT_BYTES = {"fp32": 4, "tf32": 4, "fp16": 2, "bf16": 2}
_PARAM_BYTES = 4
# Optimizer state traffic per parameter element (bytes): AdamW reads+writes p, m, v (3×8) and reads g (4);
# SGD-momentum reads+writes p and the momentum buffer (2×8) and reads g (4).
_OPT_BYTES_PER_PARAM = {"adamw": 28, "sgd": 20}


def _check(config: Any) -> WorkloadConfig:
    if not isinstance(config, (EncoderConfig, GPTConfig)):
        raise ConfigError(f"not a workload config: {config!r}", field="config")
    return config


# --------------------------------------------------------------------------------------------- parameters
def param_count(config: WorkloadConfig) -> int:
    """Trainable parameters (tied embeddings counted once), as ``sum(p.numel() for p in model.parameters())``."""
    c = _check(config)
    d, ff, L = c.d_model, c.dim_feedforward, c.num_layers
    # per layer: QKV (3d²+3d) + out-proj (d²+d) + MLP (2·d·ff + ff + d) + two LayerNorms (4d)
    layer = 4 * d * d + 4 * d + 2 * d * ff + ff + d + 4 * d
    if isinstance(c, EncoderConfig):
        return L * layer + d * d + d  # + Linear(d, d) head
    return c.vocab_size * d + c.seq_len * d + L * layer + 2 * d  # wte (= lm_head), wpe, blocks, ln_f


def matmul_weight_count(config: WorkloadConfig) -> int:
    """Parameters that are matmul weights (no biases, LayerNorm, position embedding)."""
    c = _check(config)
    d, ff, L = c.d_model, c.dim_feedforward, c.num_layers
    layer = 4 * d * d + 2 * d * ff
    if isinstance(c, EncoderConfig):
        return L * layer + d * d
    return L * layer + c.vocab_size * d  # the tied lm_head is a matmul


def attention_forward_flops(config: WorkloadConfig) -> int:
    """Forward attention FLOPs per step: Q·Kᵀ and P·V, 2·(2·b·s²·d) per layer (no causal discount,
    as torch.utils.flop_counter.sdpa_flop_count)."""
    c = _check(config)
    return c.num_layers * 4 * c.batch_size * c.seq_len * c.seq_len * c.d_model


def closed_form_flops_per_step(config: WorkloadConfig, attention: str = "fused") -> int:
    """Exactly what ``ground_truth.count_flops`` counts, in closed form (tested equal).

    matmuls: 3 × forward (forward, input-gradient, weight-gradient), except that the seed encoder's input
    is data, so its first QKV projection has no input-gradient (−6·d²·tokens). Attention: 3× forward
    (math) or 3.5× forward (fused, flash/efficient backward recomputes Q·Kᵀ).
    """
    c = _check(config)
    if attention not in ("fused", "math"):
        raise ConfigError(f"attention convention must be fused or math, got {attention!r}", field="attention")
    t, d, ff, L = c.tokens_per_step, c.d_model, c.dim_feedforward, c.num_layers
    fwd = L * (8 * t * d * d + 4 * t * d * ff)
    if isinstance(c, EncoderConfig):
        fwd += 2 * t * d * d
        matmul = 3 * fwd - 6 * t * d * d
    else:
        fwd += 2 * t * d * c.vocab_size
        matmul = 3 * fwd
    a = attention_forward_flops(c)
    return matmul + (7 * a // 2 if attention == "fused" else 3 * a)


#: MFU conventions, see the module docstring.
MFU_CONVENTIONS = ("hardware", "model")


def model_flops_per_step(config: WorkloadConfig) -> int:
    """PaLM-style model FLOPs per step (module docstring): 6·W·tokens + 3·A_fwd, causal attention halved.

    W = :func:`matmul_weight_count` (the 6N of PaLM over matmul weights only: biases, LayerNorm and the position
    embedding do no matmul work), A_fwd = :func:`attention_forward_flops`. The GPT family is causal (halved); the
    seed encoder attends both ways (not halved).
    """
    c = _check(config)
    attn = 3 * attention_forward_flops(c)
    if isinstance(c, GPTConfig):  # causal: is_causal=True in workloads.gpt
        attn //= 2
    return 6 * matmul_weight_count(c) * c.tokens_per_step + attn


# ----------------------------------------------------------------------------------- published formulas
def _vocab(c: WorkloadConfig) -> int:
    return c.vocab_size if isinstance(c, GPTConfig) else c.d_model  # the encoder's head as "logits"


def palm_flops_per_step(config: WorkloadConfig) -> int:
    """PaLM (Chowdhery et al. 2022, App. B): tokens × (6N + 12·L·H·Q·T), N = all parameters."""
    c = _check(config)
    per_token = 6 * param_count(c) + 12 * c.num_layers * c.nhead * c.head_dim * c.seq_len
    return c.tokens_per_step * per_token


def chinchilla_flops_per_step(config: WorkloadConfig) -> int:
    """Chinchilla (Hoffmann et al. 2022, App. F): 3 × forward, forward per sequence as in the module doc."""
    c = _check(config)
    s, d, ff, h = c.seq_len, c.d_model, c.dim_feedforward, c.nhead
    d_attn = c.head_dim * h  # key_size × num_heads
    emb = 2 * s * c.vocab_size * d if isinstance(c, GPTConfig) else 0
    attn = (
        2 * 3 * s * d * d_attn + 2 * s * s * d_attn + 3 * h * s * s + 2 * s * s * d_attn + 2 * s * d_attn * d
    )
    dense = 2 * s * (d * ff + d * ff)
    logits = 2 * s * d * _vocab(c)
    forward = emb + c.num_layers * (attn + dense) + logits
    return 3 * forward * c.batch_size


def megatron_flops_per_step(config: WorkloadConfig, *, recompute: bool = True) -> float:
    """Megatron-LM (Narayanan et al. 2021, eq. 3): 96·B·s·l·h²·(1 + s/(6h) + V/(16·l·h)).

    ``recompute=False``: 72·B·s·l·h²·(1 + s/(6h)) + 6·B·s·h·V (no activation recomputation). Both
    assume MLP width 4h whatever ``dim_feedforward`` is.
    """
    c = _check(config)
    B, s, n_l, h, V = c.batch_size, c.seq_len, c.num_layers, c.d_model, _vocab(c)
    if recompute:
        return 96.0 * B * s * n_l * h * h * (1.0 + s / (6.0 * h) + V / (16.0 * n_l * h))
    return 72.0 * B * s * n_l * h * h * (1.0 + s / (6.0 * h)) + 6.0 * B * s * h * V


# ------------------------------------------------------------------------------------------ DRAM traffic
def activation_bytes_per_step(config: WorkloadConfig, attention: str = "fused") -> float:
    """Bytes of activations saved for backward, per step.

    Korthikanti et al. 2022 ("Reducing Activation Recomputation in Large Transformer Models", §4.1):
    s·b·h·(34 + 5·a·s/h) bytes per layer for 16-bit activations, 1-byte dropout masks and MLP width 4h.
    Generalised to element size e and MLP width ff: s·b·(e·(8h + 2·ff) + 2h) plus, for the math kernel
    only, the attention scores, softmax and dropout mask (2e + 1)·a·s²·b (fused kernels keep only a
    per-row log-sum-exp). Plus the output/logits tensor (b·s·V·e) for the GPT.
    """
    c = _check(config)
    e = _ACT_BYTES[c.precision]
    s, b, h, ff, a = c.seq_len, c.batch_size, c.d_model, c.dim_feedforward, c.nhead
    per_layer = s * b * (e * (8 * h + 2 * ff) + 2 * h)
    if attention == "math":
        per_layer += (2 * e + 1) * a * s * s * b
    else:
        per_layer += 4 * a * s * b  # fp32 log-sum-exp per row
    extra = s * b * h * e  # head / final LayerNorm input
    if isinstance(c, GPTConfig):
        extra += s * b * c.vocab_size * 4  # logits are upcast to fp32 for the loss
    return float(c.num_layers * per_layer + extra)


def bytes_per_step(config: WorkloadConfig, attention: str = "fused") -> float:
    """Estimated DRAM bytes moved per training step (read + write). Assumptions (documented estimate,
    not a measurement; the simulator uses it for roofline time and DRAM-power terms):

    - weights: read once in forward and once in backward in the compute dtype; under fp16/bf16 autocast
      the fp32 master copy is also read and cast (write of the 16-bit copy) each step;
    - gradients: fp32 weight-gradients written once in backward (accumulate-in-place ignored);
    - optimizer: AdamW 28 B/param, SGD-momentum 20 B/param (read/write of parameter and state, read of
      the gradient); fp16 adds GradScaler's read of every gradient (4 B/param);
    - activations: each saved activation written in forward and read in backward, and its gradient
      written and read once in backward: 4 × :func:`activation_bytes_per_step`;
    - no cache reuse across kernels, perfect reuse within a kernel (the roofline convention).
    """
    c = _check(config)
    p = param_count(c)
    e = _ACT_BYTES[c.precision]
    weights = 2 * p * e
    if c.precision in ("fp16", "bf16"):
        weights += p * (_PARAM_BYTES + e)
    grads = p * _PARAM_BYTES
    opt = p * _OPT_BYTES_PER_PARAM[c.optimizer] + (p * 4 if c.precision == "fp16" else 0)
    return float(weights + grads + opt + 4 * activation_bytes_per_step(c, attention))


# --------------------------------------------------------------------------------------------- describe
@dataclass(frozen=True)
class WorkloadDescription:
    """What the simulator executes: sizes, counted FLOPs and estimated bytes of one training step."""

    label: str
    arch: str
    dtype: str
    batch_size: int
    tokens_per_step: int
    flops_per_step: float
    bytes_per_step: float
    params: int
    steps: int
    seq_len: int
    d_model: int
    num_layers: int
    attention_convention: str
    optimizer_flops_per_step: float
    flops_source: str
    config: dict[str, Any]

    @property
    def arithmetic_intensity(self) -> float:
        """FLOPs per DRAM byte (roofline x-axis)."""
        return self.flops_per_step / self.bytes_per_step

    @property
    def total_flops(self) -> float:
        return self.flops_per_step * self.steps

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def describe(
    config: WorkloadConfig, attention: str = "fused", *, counter: str = "auto"
) -> WorkloadDescription:
    """Describe ``config`` for the simulator; bytes from :func:`bytes_per_step`.

    ``counter``: ``"flop_counter"`` counts with ``FlopCounterMode`` (needs torch); ``"closed_form"`` uses
    :func:`closed_form_flops_per_step`, identical for our two families (by test) and free of the ~2 s torch
    import per process; ``"auto"`` counts with torch when it is importable, else the closed form.
    """
    if counter not in ("auto", "flop_counter", "closed_form"):
        raise ConfigError(f"must be auto, flop_counter or closed_form, got {counter!r}", field="counter")
    c = _check(config)
    fc = None
    if counter != "closed_form":
        try:
            from flopwatch.workloads.ground_truth import count_flops

            fc = count_flops(c, attention)
        except ImportError:
            if counter == "flop_counter":
                raise
    if fc is not None:
        flops, opt, source = fc.flops_per_step, fc.optimizer_flops_per_step, fc.method
    else:
        from flopwatch.workloads.ground_truth import GRADSCALER_FLOPS_PER_PARAM, OPTIMIZER_FLOPS_PER_PARAM

        flops = closed_form_flops_per_step(c, attention)
        per = OPTIMIZER_FLOPS_PER_PARAM[c.optimizer] + (
            GRADSCALER_FLOPS_PER_PARAM if c.precision == "fp16" else 0
        )
        opt, source = per * param_count(c), "closed form (formulas.closed_form_flops_per_step)"
    return WorkloadDescription(
        label=c.name,
        arch=c.arch,
        dtype=c.precision,
        batch_size=c.batch_size,
        tokens_per_step=c.tokens_per_step,
        flops_per_step=float(flops),
        bytes_per_step=bytes_per_step(c, attention),
        params=param_count(c),
        steps=c.steps,
        seq_len=c.seq_len,
        d_model=c.d_model,
        num_layers=c.num_layers,
        attention_convention=attention,
        optimizer_flops_per_step=float(opt),
        flops_source=source,
        config=c.to_dict(),
    )
