"""Counting overhead: FLOPs counted once on the meta device vs FlopCounterMode inside the training loop.

flopwatch counts each configuration once, on the meta device (no compute), and multiplies by steps, so
the timed loop is plain training. The alternative — wrapping every step in FlopCounterMode — adds a
Python-level dispatch hook to every aten op. This script times both on the CPU (or CUDA with --device)
and prints per-step times side by side with their ratio, plus the one-off cost of the meta count.

    python benchmarks/bench_flop_counting.py [--device cpu|cuda] [--steps 20] [--repeats 3]
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.utils.flop_counter import FlopCounterMode

from flopwatch.workloads.config import EncoderConfig, GPTConfig, WorkloadConfig
from flopwatch.workloads.ground_truth import clear_cache, count_flops
from flopwatch.workloads.model import build_model, make_batch

CONFIGS: tuple[WorkloadConfig, ...] = (
    EncoderConfig(d_model=128, batch_size=8, seq_len=64),
    GPTConfig(d_model=128, batch_size=4, seq_len=64, num_layers=2, vocab_size=2048),
)


def _sync(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def _loop(cfg: WorkloadConfig, device: str, steps: int, in_loop_counting: bool) -> tuple[float, int]:
    torch.manual_seed(0)
    with torch.device(device):
        model = build_model(cfg)
    batch = make_batch(cfg, device, torch.Generator(device=device).manual_seed(0))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    counted = 0

    def step() -> None:
        opt.zero_grad(set_to_none=True)
        model(*batch).backward()
        opt.step()

    for _ in range(3):  # warm-up
        step()
    _sync(device)
    t0 = time.perf_counter()
    for _ in range(steps):
        if in_loop_counting:
            counter = FlopCounterMode(display=False)
            with counter:
                opt.zero_grad(set_to_none=True)
                model(*batch).backward()
            opt.step()
            counted += counter.get_total_flops()
        else:
            step()
    _sync(device)
    return (time.perf_counter() - t0) / steps, counted


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--threads", type=int, default=1, help="torch CPU threads (1: stable on shared machines)")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    print(
        f"torch {torch.__version__}, device {args.device}, {args.threads} CPU thread(s), "
        f"{args.steps} steps x {args.repeats} repeats (median)"
    )
    hdr = f"{'config':<32} {'meta count (once) ms':>20} {'step ms: plain':>14} {'step ms: in-loop':>17} {'ratio':>7}"
    print(hdr)
    print("-" * len(hdr))
    count_flops(EncoderConfig(d_model=8, batch_size=1, seq_len=4))  # imports and first-call costs, not timed
    with sdpa_kernel([SDPBackend.MATH]):
        for cfg in CONFIGS:
            clear_cache()
            t0 = time.perf_counter()
            fc = count_flops(cfg, "math")
            meta_ms = (time.perf_counter() - t0) * 1e3
            plain, inloop = [], []
            counted = 0
            for _ in range(args.repeats):
                plain.append(_loop(cfg, args.device, args.steps, False)[0])
                t, counted = _loop(cfg, args.device, args.steps, True)
                inloop.append(t)
            assert counted == fc.flops_per_step * args.steps, "in-loop count differs from the meta count"
            p, q = statistics.median(plain), statistics.median(inloop)
            print(f"{cfg.name:<32} {meta_ms:>20.1f} {p * 1e3:>14.2f} {q * 1e3:>17.2f} {q / p:>7.2f}")
    print("plain = flopwatch (counted once on meta, outside the loop); ratio = in-loop / plain step time.")


if __name__ == "__main__":
    main()
