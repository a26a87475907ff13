"""A small decoder-only transformer, initialised from a seed; nothing is downloaded.

Pre-norm blocks of causal self-attention and a GELU MLP, learned position embeddings, and an
optional tied output head (the head then reads the token embedding, so the state dict holds
each tensor once and exports to safetensors as is). Each block is one FSDP2 unit.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from rljob_trainer.config import ModelConfig

ARCHITECTURE = "rljob_trainer.TransformerLM"


def _norm(kind: str, dim: int) -> nn.Module:
    return nn.RMSNorm(dim) if kind == "rmsnorm" else nn.LayerNorm(dim)


class Attention(nn.Module):
    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.n_heads = cfg.n_heads
        self.qkv = nn.Linear(cfg.d_model, 3 * cfg.d_model, bias=False)
        self.proj = nn.Linear(cfg.d_model, cfg.d_model, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        batch, seq, dim = x.shape
        q, k, v = self.qkv(x).view(batch, seq, 3, self.n_heads, dim // self.n_heads).unbind(2)
        out = F.scaled_dot_product_attention(
            q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), is_causal=True
        )
        return self.proj(out.transpose(1, 2).reshape(batch, seq, dim))


class Block(nn.Module):
    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.attn_norm = _norm(cfg.norm, cfg.d_model)
        self.attn = Attention(cfg)
        self.mlp_norm = _norm(cfg.norm, cfg.d_model)
        self.fc = nn.Linear(cfg.d_model, cfg.d_ff, bias=False)
        self.out = nn.Linear(cfg.d_ff, cfg.d_model, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.attn_norm(x))
        return x + self.out(F.gelu(self.fc(self.mlp_norm(x))))


class TransformerLM(nn.Module):
    def __init__(self, cfg: ModelConfig, vocab_size: int) -> None:
        super().__init__()
        self.cfg = cfg
        self.vocab_size = vocab_size
        self.tok_emb = nn.Embedding(vocab_size, cfg.d_model)
        self.pos_emb = nn.Embedding(cfg.max_seq_len, cfg.d_model)
        self.blocks = nn.ModuleList(Block(cfg) for _ in range(cfg.n_layers))
        self.norm = _norm(cfg.norm, cfg.d_model)
        self.lm_head = (
            None if cfg.tie_embeddings else nn.Linear(cfg.d_model, vocab_size, bias=False)
        )

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        """Token ids [batch, seq] -> next-token logits [batch, seq, vocab]."""
        positions = torch.arange(tokens.shape[1], device=tokens.device)
        x = self.tok_emb(tokens) + self.pos_emb(positions)
        for block in self.blocks:
            x = block(x)
        x = self.norm(x)
        if self.lm_head is None:
            return F.linear(x, self.tok_emb.weight)
        return self.lm_head(x)

    @torch.no_grad()
    def init_weights(self, seed: int) -> None:
        """Deterministic from `seed` alone, independent of the global random state."""
        generator = torch.Generator(device="cpu").manual_seed(seed)
        for name, param in self.named_parameters():
            if "norm" in name:
                param.fill_(1.0 if name.endswith("weight") else 0.0)
                continue
            std = self.cfg.init_std
            if name.endswith("attn.proj.weight") or name.endswith(".out.weight"):
                std /= (2 * self.cfg.n_layers) ** 0.5  # residual branches, GPT-2 style
            values = torch.empty(param.shape, dtype=param.dtype).normal_(
                0.0, std, generator=generator
            )
            param.copy_(values)


def build_model(
    cfg: ModelConfig, vocab_size: int, seed: int, device: torch.device
) -> TransformerLM:
    model = TransformerLM(cfg, vocab_size)
    model.init_weights(seed)
    return model.to(device)


def model_config_dict(
    cfg: ModelConfig,
    vocab_size: int,
    tokenizer: dict[str, Any],
    architecture: str = ARCHITECTURE,
) -> dict[str, Any]:
    """What `actor/model/config.json` holds: enough to rebuild the model and its tokenizer."""
    return {
        "architecture": architecture,
        "vocab_size": vocab_size,
        **dataclasses.asdict(cfg),
        "tokenizer": tokenizer,
    }


def model_from_config_dict(config: dict[str, Any]) -> TransformerLM:
    """An uninitialised model matching a config.json written by model_config_dict."""
    if config.get("architecture") != ARCHITECTURE:
        raise ValueError(
            f"config.json describes {config.get('architecture')!r}, not {ARCHITECTURE}"
        )
    fields = {f.name for f in dataclasses.fields(ModelConfig)}
    cfg = ModelConfig(**{k: v for k, v in config.items() if k in fields})
    return TransformerLM(cfg, int(config["vocab_size"]))
