"""Family dispatch: build the model and a batch for any workload config."""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from flopwatch.workloads.config import EncoderConfig, GPTConfig, WorkloadConfig


def _family(cfg: WorkloadConfig) -> Any:
    if isinstance(cfg, EncoderConfig):
        from flopwatch.workloads import seed_encoder

        return seed_encoder
    if isinstance(cfg, GPTConfig):
        from flopwatch.workloads import gpt

        return gpt
    raise TypeError(f"not a workload config: {cfg!r}")


def build_model(cfg: WorkloadConfig) -> nn.Module:
    """The model (on torch's current default device); ``model(*batch)`` returns the scalar loss."""
    return _family(cfg).build_model(cfg)  # type: ignore[no-any-return]


def make_batch(
    cfg: WorkloadConfig, device: torch.device | str | None = None, generator: torch.Generator | None = None
) -> tuple[torch.Tensor, ...]:
    return _family(cfg).make_batch(cfg, device, generator)  # type: ignore[no-any-return]
