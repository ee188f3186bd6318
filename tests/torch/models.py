"""Small hand-written PyTorch models of the shapes real ones have (random weights)."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn


class RMSNorm(nn.Module):
    def __init__(self, d: int, eps: float = 1e-6) -> None:
        super().__init__()
        self.weight = nn.Parameter(1 + 0.1 * torch.randn(d))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        dt = x.dtype
        x = x.float()
        x = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * x.to(dt)


def rotate_half(x: torch.Tensor) -> torch.Tensor:
    a, b = x.chunk(2, dim=-1)
    return torch.cat((-b, a), dim=-1)


class LlamaBlock(nn.Module):
    """Pre-norm decoder block: RMSNorm, rotary embeddings, grouped-query attention with a
    causal mask, SwiGLU feed-forward."""

    def __init__(self, d: int = 32, heads: int = 4, kv_heads: int = 2, ffn: int = 48,
                 theta: float = 10000.0) -> None:
        super().__init__()
        self.heads, self.kv_heads, self.hd = heads, kv_heads, d // heads
        self.norm1, self.norm2 = RMSNorm(d), RMSNorm(d)
        self.q = nn.Linear(d, heads * self.hd, bias=False)
        self.k = nn.Linear(d, kv_heads * self.hd, bias=False)
        self.v = nn.Linear(d, kv_heads * self.hd, bias=False)
        self.o = nn.Linear(heads * self.hd, d, bias=False)
        self.gate = nn.Linear(d, ffn, bias=False)
        self.up = nn.Linear(d, ffn, bias=False)
        self.down = nn.Linear(ffn, d, bias=False)
        inv = 1.0 / theta ** (torch.arange(0, self.hd, 2).float() / self.hd)
        self.register_buffer("inv_freq", inv, persistent=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, s, _ = x.shape
        h = self.norm1(x)
        q = self.q(h).view(b, s, self.heads, self.hd).transpose(1, 2)
        k = self.k(h).view(b, s, self.kv_heads, self.hd).transpose(1, 2)
        v = self.v(h).view(b, s, self.kv_heads, self.hd).transpose(1, 2)
        pos = torch.arange(s, device=x.device).float()
        freqs = torch.outer(pos, self.inv_freq)
        emb = torch.cat((freqs, freqs), dim=-1)
        cos, sin = emb.cos().to(x.dtype), emb.sin().to(x.dtype)
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        rep = self.heads // self.kv_heads
        k = k.repeat_interleave(rep, dim=1)
        v = v.repeat_interleave(rep, dim=1)
        scores = q @ k.transpose(-1, -2) / math.sqrt(self.hd)
        mask = torch.full((s, s), float("-inf"), dtype=x.dtype, device=x.device).triu(1)
        attn = torch.softmax(scores + mask, dim=-1) @ v
        x = x + self.o(attn.transpose(1, 2).reshape(b, s, -1))
        h = self.norm2(x)
        return x + self.down(F.silu(self.gate(h)) * self.up(h))


class TinyLlama(nn.Module):
    def __init__(self, vocab: int = 61, d: int = 32, layers: int = 2) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab, d)
        self.layers = nn.ModuleList([LlamaBlock(d) for _ in range(layers)])
        self.norm = RMSNorm(d)
        self.head = nn.Linear(d, vocab, bias=False)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        x = self.embed(ids)
        for layer in self.layers:
            x = layer(x)
        return self.head(self.norm(x))


class BertLayer(nn.Module):
    """Post-norm encoder layer with a padding mask (1 = token, 0 = padding)."""

    def __init__(self, d: int = 32, heads: int = 4, ffn: int = 64) -> None:
        super().__init__()
        self.heads, self.hd = heads, d // heads
        self.qkv = nn.Linear(d, 3 * d)
        self.out = nn.Linear(d, d)
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.ff1, self.ff2 = nn.Linear(d, ffn), nn.Linear(ffn, d)

    def forward(self, x: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        b, s, d = x.shape
        q, k, v = self.qkv(x).view(b, s, 3, self.heads, self.hd).permute(2, 0, 3, 1, 4)
        bias = (1.0 - attention_mask[:, None, None, :].to(x.dtype)) * torch.finfo(x.dtype).min
        scores = q @ k.transpose(-1, -2) / math.sqrt(self.hd) + bias
        attn = (scores.softmax(-1) @ v).transpose(1, 2).reshape(b, s, d)
        x = self.ln1(x + self.out(attn))
        return self.ln2(x + self.ff2(F.gelu(self.ff1(x))))


class SmallCNN(nn.Module):
    def __init__(self, classes: int = 10) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(3, 8, 3, padding=1)
        self.bn1 = nn.BatchNorm2d(8)
        self.conv2 = nn.Conv2d(8, 16, 3, stride=2, padding=1, groups=2)
        self.bn2 = nn.BatchNorm2d(16)
        self.fc = nn.Linear(16, classes)
        for bn in (self.bn1, self.bn2):  # non-trivial running statistics
            bn.running_mean.uniform_(-0.5, 0.5)
            bn.running_var.uniform_(0.5, 2.0)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = F.max_pool2d(F.relu(self.bn1(self.conv1(x))), 2)
        x = F.relu(self.bn2(self.conv2(x)))
        x = F.adaptive_avg_pool2d(x, 1).flatten(1)
        return self.fc(x)
