"""CUDA checks (skipped without an NVIDIA GPU): fused-kernel counts and CUDA-timed records."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from flopwatch.workloads.config import EncoderConfig, GPTConfig, WorkloadConfig  # noqa: E402
from flopwatch.workloads.ground_truth import count_flops  # noqa: E402

pytestmark = pytest.mark.gpu

CASES = [
    # fp32 encoder with dropout → memory-efficient kernel; bf16 causal GPT → flash
    (EncoderConfig(d_model=128, batch_size=4, seq_len=64, num_layers=2), None),
    (GPTConfig(d_model=128, batch_size=4, seq_len=64, num_layers=2, vocab_size=512), torch.bfloat16),
]


@pytest.mark.parametrize(("cfg", "amp"), CASES, ids=lambda x: getattr(x, "name", str(x)))
def test_cuda_fused_kernels_count_what_the_meta_count_says(
    cfg: WorkloadConfig, amp: torch.dtype | None
) -> None:
    from torch.nn.attention import SDPBackend, sdpa_kernel
    from torch.utils.flop_counter import FlopCounterMode

    from flopwatch.workloads.model import build_model, make_batch

    if not torch.cuda.is_available():
        pytest.skip("torch has no CUDA")
    with torch.device("cuda"):
        model = build_model(cfg)
    batch = make_batch(cfg, "cuda")
    counter = FlopCounterMode(display=False)
    fused = [SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION, SDPBackend.CUDNN_ATTENTION]
    with sdpa_kernel(fused), counter:
        with torch.autocast("cuda", dtype=amp, enabled=amp is not None):
            loss = model(*batch)
        loss.backward()
    assert counter.get_total_flops() == count_flops(cfg, "fused").flops_per_step


def test_cuda_run_record() -> None:
    from flopwatch.workloads.run import run_workload

    if not torch.cuda.is_available():
        pytest.skip("torch has no CUDA")
    rec = run_workload(EncoderConfig(d_model=128, batch_size=4, seq_len=64, steps=5), "cuda", warmup=2)
    assert rec["device"].startswith("cuda:") and rec["step_timer"] == "cuda_events"
    assert rec["attention_convention"] == "fused" and rec["step_time_s"]["n"] == 5
    assert (
        rec["total_flops"]
        == 5 * count_flops(EncoderConfig(d_model=128, batch_size=4, seq_len=64)).flops_per_step
    )


def test_cuda_tf32_run_restores_the_matmul_setting_and_uses_the_tf32_peak() -> None:
    from flopwatch.devices import get_device
    from flopwatch.workloads.run import run_workload

    if not torch.cuda.is_available() or torch.cuda.get_device_capability()[0] < 8:
        pytest.skip("needs CUDA compute capability >= 8.0 for TF32")
    mm = torch.backends.cuda.matmul
    read = (lambda: mm.fp32_precision) if hasattr(mm, "fp32_precision") else (lambda: mm.allow_tf32)
    before = read()
    rec = run_workload(
        EncoderConfig(d_model=128, batch_size=4, seq_len=64, steps=3, precision="tf32"), "cuda"
    )
    assert read() == before
    assert rec["tf32_matmul"] is True and rec["peak_dtype"] == "tf32"
    if rec["device_spec"]:
        assert rec["peak_flops"] == get_device(rec["device_spec"]).peak("tf32")
