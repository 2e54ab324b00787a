"""Published FLOP formulas vs counted ground truth: each difference, exactly, and why."""

from __future__ import annotations

import pytest

from flopwatch.errors import ConfigError
from flopwatch.workloads import formulas as f
from flopwatch.workloads.config import EncoderConfig, GPTConfig

ENC = [
    EncoderConfig(d_model=256, batch_size=16, seq_len=128, steps=4000),  # the study's d256_b16_s128_L3
    EncoderConfig(d_model=512, batch_size=8, seq_len=128, dim_feedforward=4096),
    EncoderConfig(d_model=384, batch_size=16, seq_len=256, num_layers=6, nhead=8),
]
GPT = [
    GPTConfig(d_model=768, batch_size=8, seq_len=1024, num_layers=12, vocab_size=50304),  # GPT-2 small
    GPTConfig(d_model=128, batch_size=4, seq_len=64, num_layers=2, vocab_size=2048),
]
ALL = ENC + GPT


def _attn_fwd(c: EncoderConfig | GPTConfig) -> int:
    return c.num_layers * 4 * c.batch_size * c.seq_len**2 * c.d_model


def _non_matmul_params(c: EncoderConfig | GPTConfig) -> int:
    return f.param_count(c) - f.matmul_weight_count(c)


@pytest.mark.parametrize("c", ALL, ids=lambda c: c.name)
def test_palm_differs_by_non_matmul_params_missing_dgrad_and_fused_attention(
    c: EncoderConfig | GPTConfig,
) -> None:
    truth = f.closed_form_flops_per_step(c, "fused")
    t = c.tokens_per_step
    # 6N counts biases, LayerNorm and the position embedding as if they were matmul weights;
    expected = 6 * _non_matmul_params(c) * t
    # the encoder's input is data: autograd skips the first QKV input-gradient (2·d·3d per token);
    if isinstance(c, EncoderConfig):
        expected += 6 * c.d_model**2 * t
    # 12·L·H·Q·T is the math kernel (3x forward); the fused kernels count 3.5x.
    expected -= _attn_fwd(c) // 2
    assert f.palm_flops_per_step(c) - truth == expected


@pytest.mark.parametrize("c", ALL, ids=lambda c: c.name)
def test_chinchilla_differs_by_embedding_softmax_missing_dgrad_and_fused_attention(
    c: EncoderConfig | GPTConfig,
) -> None:
    truth = f.closed_form_flops_per_step(c, "fused")
    b, s = c.batch_size, c.seq_len
    expected = 3 * b * c.num_layers * 3 * c.nhead * s * s  # softmax FLOPs (not counted by FlopCounterMode)
    if isinstance(c, GPTConfig):
        expected += 3 * b * 2 * s * c.vocab_size * c.d_model  # one-hot embedding "matmul" (a lookup in torch)
    else:
        expected += 6 * c.d_model**2 * c.tokens_per_step  # first-layer input-gradient never computed
    expected -= _attn_fwd(c) // 2  # math (3x) vs fused (3.5x)
    assert f.chinchilla_flops_per_step(c) - truth == expected


def test_megatron_without_recompute_equals_math_truth_for_a_4h_gpt() -> None:
    c = GPT[0]  # dim_feedforward = 4·d_model, the formula's assumption
    assert f.megatron_flops_per_step(c, recompute=False) == pytest.approx(
        f.closed_form_flops_per_step(c, "math"), rel=1e-12
    )
    # eq. 3 adds a recomputed forward pass per layer: 4/3 of the layer FLOPs
    layers = f.megatron_flops_per_step(c, recompute=False) - 6 * c.tokens_per_step * c.d_model * c.vocab_size
    assert f.megatron_flops_per_step(c) - f.megatron_flops_per_step(c, recompute=False) == pytest.approx(
        layers / 3
    )


def test_megatron_overcounts_the_study_encoder_because_it_assumes_ffn_4h() -> None:
    c = ENC[0]  # d_model 256, dim_feedforward 512 = 2h, not 4h
    truth = f.closed_form_flops_per_step(c, "math") + 6 * c.d_model**2 * c.tokens_per_step
    as_4h = EncoderConfig(d_model=256, batch_size=16, seq_len=128, dim_feedforward=1024)
    truth_4h = f.closed_form_flops_per_step(as_4h, "math") + 6 * c.d_model**2 * c.tokens_per_step
    assert f.megatron_flops_per_step(c, recompute=False) == pytest.approx(truth_4h, rel=1e-12)
    # the extra MLP width (4h - ff) in every layer, forward + backward (3x):
    extra_mlp = 3 * c.num_layers * 4 * c.tokens_per_step * c.d_model * (4 * c.d_model - c.dim_feedforward)
    assert f.megatron_flops_per_step(c, recompute=False) - truth == pytest.approx(extra_mlp, rel=1e-12)


def test_param_count_matches_torch() -> None:
    torch = pytest.importorskip("torch")
    from flopwatch.workloads.model import build_model

    for c in ALL[1:2] + GPT[1:]:
        with torch.device("meta"):
            m = build_model(c)
        assert sum(p.numel() for p in m.parameters()) == f.param_count(c)


def test_bytes_per_step_is_documented_sum_and_behaves() -> None:
    c = EncoderConfig(d_model=256, batch_size=16, seq_len=128)
    p = f.param_count(c)
    act = f.activation_bytes_per_step(c)
    assert f.bytes_per_step(c) == 2 * p * 4 + p * 4 + 28 * p + 4 * act
    # 16-bit activations and weights move fewer bytes; math attention stores the score matrix
    bf16 = EncoderConfig(d_model=256, batch_size=16, seq_len=128, precision="bf16")
    assert f.bytes_per_step(bf16) < f.bytes_per_step(c)
    assert f.bytes_per_step(c, "math") > f.bytes_per_step(c, "fused")
    sgd = EncoderConfig(d_model=256, batch_size=16, seq_len=128, optimizer="sgd")
    assert f.bytes_per_step(c) - f.bytes_per_step(sgd) == 8 * p
    # Korthikanti et al. 2022: 34·s·b·h bytes per layer for 16-bit activations and an MLP of 4h
    k = EncoderConfig(
        d_model=256, batch_size=16, seq_len=128, dim_feedforward=1024, precision="fp16", num_layers=1
    )
    s, b, h, a = 128, 16, 256, 4
    per_layer_math = f.activation_bytes_per_step(k, "math") - s * b * h * 2
    assert per_layer_math == s * b * h * (34 + 5 * a * s / h)


def test_describe_is_what_the_simulator_needs() -> None:
    c = GPT[1]
    d = f.describe(c)
    assert d.label == c.name and d.arch == "gpt" and d.dtype == "fp32"
    assert d.tokens_per_step == 4 * 64 and d.batch_size == 4
    assert d.flops_per_step == f.closed_form_flops_per_step(c)
    assert d.bytes_per_step == f.bytes_per_step(c)
    assert d.params == f.param_count(c)
    assert d.total_flops == d.flops_per_step * c.steps
    assert d.arithmetic_intensity == pytest.approx(d.flops_per_step / d.bytes_per_step)
    assert d.to_dict()["config"]["vocab_size"] == 2048


def test_formulas_refuse_non_configs() -> None:
    with pytest.raises(ConfigError):
        f.bytes_per_step({"d_model": 3})  # type: ignore[arg-type]
    with pytest.raises(ConfigError):
        f.closed_form_flops_per_step(ENC[0], "flash")


def test_describe_without_torch_uses_the_exact_closed_form() -> None:
    import subprocess
    import sys

    code = (
        "import sys; sys.modules['torch'] = None\n"
        "from flopwatch.workloads.config import GPTConfig\n"
        "from flopwatch.workloads.formulas import describe, closed_form_flops_per_step\n"
        "c = GPTConfig(d_model=64, batch_size=2, seq_len=16, num_layers=1, vocab_size=100, precision='fp16')\n"
        "d = describe(c)\n"
        "assert d.flops_per_step == closed_form_flops_per_step(c), d\n"
        "assert d.optimizer_flops_per_step == 16 * d.params\n"
        "print(d.flops_source)\n"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert "closed form" in r.stdout


def test_describe_closed_form_matches_counted_and_rejects_unknown_counter():
    pytest.importorskip("torch", reason="the counted side is FlopCounterMode")
    from flopwatch.errors import ConfigError
    from flopwatch.workloads.formulas import describe
    from flopwatch.workloads.sweeps import get_sweep

    cfg = get_sweep("quick")[0]
    fast, counted = describe(cfg, counter="closed_form"), describe(cfg, counter="flop_counter")
    assert fast.flops_per_step == counted.flops_per_step
    assert fast.optimizer_flops_per_step == counted.optimizer_flops_per_step
    assert fast.bytes_per_step == counted.bytes_per_step
    with pytest.raises(ConfigError):
        describe(cfg, counter="guess")


@pytest.mark.parametrize("c", ALL, ids=lambda c: c.name)
def test_model_flops_drop_the_recompute_and_halve_causal_attention(c: EncoderConfig | GPTConfig) -> None:
    """Model FLOPs (PaLM-style) vs hardware FLOPs (counted, fused): the differences, exactly."""
    hw = f.closed_form_flops_per_step(c, "fused")
    model = f.model_flops_per_step(c)
    a = _attn_fwd(c)
    causal = isinstance(c, GPTConfig)
    attn_model = 3 * a // 2 if causal else 3 * a
    # hardware: fused 3.5 × forward attention (backward recomputes Q·Kᵀ); model: 3×, halved when causal
    dgrad = 6 * c.d_model**2 * c.tokens_per_step if isinstance(c, EncoderConfig) else 0  # never computed
    assert hw - model == 7 * a // 2 - attn_model - dgrad
    # PaLM's 6N counts every parameter: model FLOPs differ from it by the non-matmul parameters and the causal half
    assert (
        f.palm_flops_per_step(c) - model == 6 * _non_matmul_params(c) * c.tokens_per_step + 3 * a - attn_model
    )
