"""A SmolLM2-135M-shaped decoder graph (random-weight shapes, symbolic sequence length).

Shared by the benchmarks that need a realistic transformer graph. Weights are graph
inputs named like llama.cpp's GGUF tensors; the token ids are an int32 input of shape
("s",).
"""

from __future__ import annotations

import math

import lumos
from lumos.frontend.nn import embedding, linear, rms_norm, scaled_dot_product_attention
from lumos.frontend.tensor import Tensor, iota
from lumos.shape import z

CONFIG = dict(d=576, heads=9, kv_heads=3, ffn=1536, vocab=49152, rope_theta=100000.0,
              eps=1e-5)


def rope_tables(g: lumos.Graph, seq: str, head_dim: int, theta: float) -> tuple[Tensor, Tensor]:
    half = head_dim // 2
    pos = iota(g, z(0), (seq,), lumos.i32).float()
    inv_freq = (iota(g, z(0), (half,), lumos.i32).float() * (-2.0 * math.log2(theta) / head_dim))
    freqs = pos.unsqueeze(1) * inv_freq.exp2().unsqueeze(0)  # (s, half)
    angles = lumos.cat([freqs, freqs], -1)
    return angles.cos(), angles.sin()


def apply_rope(x: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
    half = x.shape[-1] // 2
    x1, x2 = x[..., :half], x[..., half:]
    return x * cos + lumos.cat([-x2, x1], -1) * sin


def build(layers: int = 30, seq: str = "s", **overrides: int) -> tuple[lumos.Graph, Tensor]:
    c = {**CONFIG, **overrides}
    d, nh, nkv, ffn, vocab = c["d"], c["heads"], c["kv_heads"], c["ffn"], c["vocab"]
    hd = d // nh
    g = lumos.Graph()
    g.dim(seq, 1, 8192)
    tokens = g.tensor((seq,), lumos.i32, "tokens")
    embed = g.tensor((vocab, d), lumos.f32, "token_embd.weight")
    x = embedding(tokens, embed)
    cos, sin = rope_tables(g, seq, hd, c["rope_theta"])
    for i in range(layers):
        def w(name: str, *shape: int, i: int = i) -> Tensor:
            return g.tensor(shape, lumos.f32, f"blk.{i}.{name}.weight")

        h = rms_norm(x, (d,), w("attn_norm", d), eps=c["eps"])
        q = linear(h, w("attn_q", d, d)).reshape(seq, nh, hd).transpose(0, 1)
        k = linear(h, w("attn_k", nkv * hd, d)).reshape(seq, nkv, hd).transpose(0, 1)
        v = linear(h, w("attn_v", nkv * hd, d)).reshape(seq, nkv, hd).transpose(0, 1)
        q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
        a = scaled_dot_product_attention(q.unsqueeze(0), k.unsqueeze(0), v.unsqueeze(0),
                                         is_causal=True, enable_gqa=True)[0]
        x = x + linear(a.transpose(0, 1).reshape(seq, d), w("attn_output", d, d))
        h = rms_norm(x, (d,), w("ffn_norm", d), eps=c["eps"])
        gate = linear(h, w("ffn_gate", ffn, d)).silu()
        x = x + linear(gate * linear(h, w("ffn_up", ffn, d)), w("ffn_down", d, ffn))
    x = rms_norm(x, (d,), g.tensor((d,), lumos.f32, "output_norm.weight"), eps=c["eps"])
    logits = linear(x, embed).output()
    return g, logits
