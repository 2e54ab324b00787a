"""A decoder-only language model ("gpt"): closer to frontier training than the study's encoder.

nanoGPT-style (Karpathy, github.com/karpathy/nanoGPT), GPT-2 architecture (Radford et al. 2019):
learned token + position embeddings, ``num_layers`` pre-LayerNorm blocks (causal self-attention via
``F.scaled_dot_product_attention``, MLP d→dim_feedforward→d with tanh-GELU), final LayerNorm and an
output projection tied to the token embedding (Press & Wolf 2017). Loss: next-token cross-entropy on
random token ids (uniform over the vocabulary; FLOPs do not depend on the values).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from flopwatch.workloads.config import GPTConfig


class CausalSelfAttention(nn.Module):
    def __init__(self, cfg: GPTConfig) -> None:
        super().__init__()
        self.nhead = cfg.nhead
        self.dropout = cfg.dropout
        self.qkv = nn.Linear(cfg.d_model, 3 * cfg.d_model)
        self.proj = nn.Linear(cfg.d_model, cfg.d_model)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, s, d = x.shape
        q, k, v = self.qkv(x).split(d, dim=2)
        q, k, v = (t.view(b, s, self.nhead, d // self.nhead).transpose(1, 2) for t in (q, k, v))
        p = self.dropout if self.training else 0.0
        y = F.scaled_dot_product_attention(q, k, v, dropout_p=p, is_causal=True)
        return self.proj(y.transpose(1, 2).reshape(b, s, d))


class Block(nn.Module):
    def __init__(self, cfg: GPTConfig) -> None:
        super().__init__()
        self.ln_1 = nn.LayerNorm(cfg.d_model)
        self.attn = CausalSelfAttention(cfg)
        self.ln_2 = nn.LayerNorm(cfg.d_model)
        self.mlp = nn.Sequential(
            nn.Linear(cfg.d_model, cfg.dim_feedforward),
            nn.GELU(approximate="tanh"),
            nn.Linear(cfg.dim_feedforward, cfg.d_model),
            nn.Dropout(cfg.dropout),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class GPT(nn.Module):
    """``forward(idx, targets)`` returns the mean next-token cross-entropy."""

    def __init__(self, cfg: GPTConfig) -> None:
        super().__init__()
        self.cfg = cfg
        self.wte = nn.Embedding(cfg.vocab_size, cfg.d_model)
        self.wpe = nn.Embedding(cfg.seq_len, cfg.d_model)
        self.drop = nn.Dropout(cfg.dropout)
        self.blocks = nn.ModuleList(Block(cfg) for _ in range(cfg.num_layers))
        self.ln_f = nn.LayerNorm(cfg.d_model)
        self.lm_head = nn.Linear(cfg.d_model, cfg.vocab_size, bias=False)
        self.lm_head.weight = self.wte.weight  # tied embeddings
        self.apply(self._init)
        # GPT-2: scale residual projections by 1/sqrt(2·layers).
        for name, p in self.named_parameters():
            if name.endswith("attn.proj.weight") or name.endswith("mlp.2.weight"):
                nn.init.normal_(p, 0.0, 0.02 / math.sqrt(2 * cfg.num_layers))

    @staticmethod
    def _init(m: nn.Module) -> None:
        if isinstance(m, (nn.Linear, nn.Embedding)):
            nn.init.normal_(m.weight, 0.0, 0.02)
        if isinstance(m, nn.Linear) and m.bias is not None:
            nn.init.zeros_(m.bias)

    def forward(self, idx: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        pos = torch.arange(idx.shape[1], device=idx.device)
        x = self.drop(self.wte(idx) + self.wpe(pos))
        for block in self.blocks:
            x = block(x)
        logits = self.lm_head(self.ln_f(x))
        return F.cross_entropy(logits.reshape(-1, logits.shape[-1]).float(), targets.reshape(-1))


def build_model(cfg: GPTConfig) -> GPT:
    return GPT(cfg)


def make_batch(
    cfg: GPTConfig, device: torch.device | str | None = None, generator: torch.Generator | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """Random token ids: inputs [batch, seq] and next-token targets [batch, seq]."""
    dev = torch.device(device) if device is not None else None
    if dev is not None and dev.type == "meta":
        tok = torch.empty(cfg.batch_size, cfg.seq_len + 1, dtype=torch.long, device=dev)
    else:
        tok = torch.randint(
            0, cfg.vocab_size, (cfg.batch_size, cfg.seq_len + 1), device=dev, generator=generator
        )
    return tok[:, :-1], tok[:, 1:]
