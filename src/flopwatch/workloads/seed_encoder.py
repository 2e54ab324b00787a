"""The published Jetson study's workload ("seed-encoder"), rebuilt from its description.

Fowler (2026, verification-games) trains ``num_layers`` × ``torch.nn.TransformerEncoderLayer``
(batch_first, dropout 0.1, ReLU, post-LayerNorm: PyTorch's defaults) on random float inputs of width
d_model, followed by a ``Linear(d_model, d_model)`` head; the loss is the mean of the output.

The inputs do not require grad, so autograd never computes the input-gradient of the first layer's
QKV projection: that is why the counted FLOPs are 6·d_model²·tokens below "3 × forward" (and why the
PaLM/Chinchilla formulas over-count this model, see ``formulas.py``).
"""

from __future__ import annotations

import torch
from torch import nn

from flopwatch.workloads.config import EncoderConfig


class SeedEncoder(nn.Module):
    """TransformerEncoder stack + Linear head; ``forward(x)`` returns the scalar loss (output mean)."""

    def __init__(self, cfg: EncoderConfig) -> None:
        super().__init__()
        layer = nn.TransformerEncoderLayer(
            d_model=cfg.d_model,
            nhead=cfg.nhead,
            dim_feedforward=cfg.dim_feedforward,
            dropout=cfg.dropout,
            batch_first=True,
        )
        # enable_nested_tensor only matters for padding masks in eval; off avoids a warning, same maths.
        self.encoder = nn.TransformerEncoder(layer, num_layers=cfg.num_layers, enable_nested_tensor=False)
        self.head = nn.Linear(cfg.d_model, cfg.d_model)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.encoder(x)).mean()


def build_model(cfg: EncoderConfig) -> SeedEncoder:
    """The model, on the current default device (``with torch.device("meta")`` for counting)."""
    return SeedEncoder(cfg)


def make_batch(
    cfg: EncoderConfig, device: torch.device | str | None = None, generator: torch.Generator | None = None
) -> tuple[torch.Tensor]:
    """One batch of random float inputs [batch, seq, d_model] (no grad: they are data, not parameters)."""
    dev = torch.device(device) if device is not None else None
    if dev is not None and dev.type == "meta":
        return (torch.empty(cfg.batch_size, cfg.seq_len, cfg.d_model, device=dev),)
    return (torch.randn(cfg.batch_size, cfg.seq_len, cfg.d_model, device=dev, generator=generator),)
