"""The layers: linear and embedding (dense or packed), norms, rotary embeddings,
attention with grouped KV heads, masks and a KV cache, MLPs, convolution, batch norm and
pooling. Parameter names follow PyTorch / Hugging Face."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import numpy as np

from lumos.dtype import DType, f32
from lumos.errors import ShapeError
from lumos.frontend.index import arange
from lumos.frontend.nn import (
    adaptive_avg_pool2d,
    avg_pool2d,
    batch_norm,
    conv1d,
    embedding,
    layer_norm,
    linear,
    max_pool2d,
    rms_norm,
)
from lumos.frontend.tensor import Tensor, cat, gelu, scalar, silu, where
from lumos.graph import Graph
from lumos.nn import conv
from lumos.nn.module import Module, Param
from lumos.nn.quant import dequantize
from lumos.shape import View, sym, z
from lumos.shape.expr import IntLike

Fmt = str | DType
Fmts = Fmt | Mapping[str, Fmt]  # one format, or one per sub-layer name (missing: f32)


def _pick(fmt: Fmts, name: str) -> Fmt:
    return fmt.get(name, "f32") if isinstance(fmt, Mapping) else fmt


def _cast(t: Tensor, like: Tensor) -> Tensor:
    return t if t.dtype is like.dtype else t.to(like.dtype)


class Linear(Module):
    """y = x @ weight.T + bias; the weight (out, in) may be packed (then dequantized in the
    graph, f32)."""

    def __init__(self, in_features: int, out_features: int, bias: bool = False,
                 fmt: Fmt = "f32", bias_fmt: Fmt = "f32") -> None:
        self.in_features, self.out_features = in_features, out_features
        self.weight = Param((out_features, in_features), fmt)
        self.bias = Param((out_features,), bias_fmt) if bias else None

    def forward(self, x: Tensor) -> Tensor:
        g = x.graph
        b = None if self.bias is None else _cast(self.bias.of(g), x)
        return linear(x, _cast(self.weight.of(g), x), b)


class Embedding(Module):
    """Rows of weight (num, dim) at integer ids. A packed table gathers the packed rows
    and dequantizes only those."""

    def __init__(self, num_embeddings: int, embedding_dim: int, fmt: Fmt = "f32") -> None:
        self.weight = Param((num_embeddings, embedding_dim), fmt)

    def forward(self, ids: Tensor) -> Tensor:
        w = self.weight
        if w.qtype is None:
            return embedding(ids, w.of(ids.graph))
        rows = {}
        for name, part in w.parts(ids.graph).items():
            flat = part.reshape(part.shape[0], -1)
            rows[name] = embedding(ids, flat).reshape(*ids.shape, *part.shape[1:])
        return dequantize(w.qtype, rows)

    def attend(self, x: Tensor) -> Tensor:
        """x @ weight.T: the output projection of tied embeddings."""
        return linear(x, _cast(self.weight.of(x.graph), x))


class RMSNorm(Module):
    def __init__(self, dim: int, eps: float = 1e-6, fmt: Fmt = "f32") -> None:
        self.dim, self.eps = dim, eps
        self.weight = Param((dim,), fmt)

    def forward(self, x: Tensor) -> Tensor:
        return rms_norm(x, (self.dim,), _cast(self.weight.of(x.graph), x), self.eps)


class LayerNorm(Module):
    def __init__(self, dim: int, eps: float = 1e-5, bias: bool = True, fmt: Fmt = "f32") -> None:
        self.dim, self.eps = dim, eps
        self.weight = Param((dim,), fmt)
        self.bias = Param((dim,), fmt) if bias else None

    def forward(self, x: Tensor) -> Tensor:
        g = x.graph
        b = None if self.bias is None else _cast(self.bias.of(g), x)
        return layer_norm(x, (self.dim,), _cast(self.weight.of(g), x), b, self.eps)


class RotaryEmbedding(Module):
    """Rotary position embedding in the "rotate half" layout (Hugging Face's): tables of
    cos and sin (max_positions, head_dim), computed like transformers' default rope and
    bound as buffers; positions are a start (int or dim expression) or an int tensor."""

    def __init__(self, head_dim: int, max_positions: int, base: float = 10000.0,
                 divisors: Sequence[float] | None = None) -> None:
        """`divisors` (head_dim / 2) scale each frequency down (llama.cpp's `rope_freqs`:
        Llama 3's long-context rope, or a linear factor repeated)."""
        self.head_dim, self.max_positions, self.base = head_dim, max_positions, base
        self.divisors = None if divisors is None else np.asarray(divisors, np.float32)
        if self.divisors is not None and self.divisors.shape != (head_dim // 2,):
            raise ValueError(f"rope: {self.divisors.shape[0]} frequency divisors for a head "
                             f"of {head_dim} (want {head_dim // 2})")
        self.cos = Param((max_positions, head_dim), default=lambda: self.tables()[0])
        self.sin = Param((max_positions, head_dim), default=lambda: self.tables()[1])

    def tables(self) -> tuple[np.ndarray, np.ndarray]:
        d = self.head_dim
        inv_freq = np.float32(1.0) / np.float32(self.base) ** (
            np.arange(0, d, 2).astype(np.float32) / np.float32(d))
        if self.divisors is not None:
            inv_freq = inv_freq / self.divisors
        freqs = np.arange(self.max_positions, dtype=np.float32)[:, None] * inv_freq[None, :]
        emb = np.concatenate([freqs, freqs], axis=-1)
        return np.cos(emb).astype(np.float32), np.sin(emb).astype(np.float32)

    def forward(self, x: Tensor, positions: IntLike | Tensor) -> Tensor:
        """x (..., seq, head_dim) rotated at `positions` (start of the seq, or ids (seq,)
        or broadcastable to x's leading dims + seq)."""
        g = x.graph
        cos, sin = self.cos.of(g), self.sin.of(g)
        if isinstance(positions, Tensor):
            cos, sin = embedding(positions, cos), embedding(positions, sin)
        else:
            n = x.shape[-2]
            cos, sin = cos.narrow(0, positions, n), sin.narrow(0, positions, n)
        if cos.ndim == 3 and x.ndim == 4:  # per-batch positions (b, s, d) against (b, h, s, d)
            cos, sin = cos.unsqueeze(1), sin.unsqueeze(1)
        cos, sin = _cast(cos, x), _cast(sin, x)
        h = self.head_dim // 2
        x1, x2 = x.narrow(-1, 0, h), x.narrow(-1, h, h)
        return x * cos + cat([-x2, x1], -1) * sin


class KVCache(Module):
    """Keys and values of the tokens seen so far, (batch, kv_heads, max_len, head_dim)
    buffers kept across executions: `update` scatters the new entries at positions
    start..start+seq and returns the first start+seq of them. With `rows` (b, seq), row r
    of the b <= batch rows fed writes at positions rows[r] of cache row r (a batch
    of sequences each at its own length, `start` their maximum): the first b rows and
    start+seq positions are returned, each row's later positions stale (mask them)."""

    def __init__(self, batch: int, kv_heads: int, max_len: int, head_dim: int,
                 fmt: Fmt = "f32") -> None:
        shape = (batch, kv_heads, max_len, head_dim)
        self.max_len = max_len
        self.k = Param(shape, fmt, default=lambda: np.zeros(shape, self.k.dtype.np),
                       buffer=True)
        self.v = Param(shape, fmt, default=lambda: np.zeros(shape, self.v.dtype.np),
                       buffer=True)

    def update(self, k: Tensor, v: Tensor, start: IntLike,
               rows: Tensor | None = None) -> tuple[Tensor, Tensor]:
        g = k.graph
        b, seq = k.shape[0], k.shape[-2]
        idx = arange(g, start, sym(start) + sym(seq)).reshape(1, 1, seq, 1) if rows is None \
            else rows.reshape(b, 1, seq, 1)
        idx = idx.expand(*k.shape)
        out = []
        for buf, new in ((self.k, k), (self.v, v)):
            full = buf.assign(buf.of(g).scatter(2, idx, _cast(new, buf.of(g))))
            if rows is not None:
                full = full.narrow(0, 0, b)
            out.append(full.narrow(2, 0, sym(start) + sym(seq)))
        return out[0], out[1]


def row_causal_mask(positions: Tensor, keys: IntLike, window: int | None = None) -> Tensor:
    """(b, 1, queries, keys) bool, True where row r's query i (at `positions` (b,
    queries)[r, i]) sees key j: j <= that position (and, with a sliding `window`,
    j > it - window)."""
    b, q = positions.shape
    pos = positions.reshape(b, 1, q, 1)
    key = arange(positions.graph, 0, keys).reshape(1, 1, 1, -1)
    seen = key <= pos
    return seen if window is None else seen & (key > pos - window)


def causal_bias(g: Graph, queries: IntLike, keys: IntLike, start: IntLike = 0,
                window: int | None = None) -> Tensor:
    """(queries, keys) additive mask: -inf where key j is after query i's position
    p = start + i (or, with a sliding `window`, at or before p - window), else 0. Views of
    one constant (the predicate picks the -inf entries)."""
    neg = scalar(g, float("-inf"), f32)
    v = neg.view.expand(g._shape([queries, keys]))
    pos = sym(start) + z(0)
    bias = neg._with_view(View(v.shape, v.index, z(1).ge(pos + 1)))
    if window is not None:
        bias = bias + neg._with_view(View(v.shape, v.index, z(1).lt(pos - window + 1)))
    return bias


class Attention(Module):
    """Multi-head attention with grouped KV heads (n_kv_heads divides n_heads). `fmt` is
    one weight format or one per projection name.

    forward(x (b, s, d), start, ...): queries from x; keys/values from `context` (cross
    attention) or x. With `rope` (shared by the layers, so an argument), queries and keys
    are rotated at positions start..start+s (or `positions`); with `cache`, the new
    keys/values are stored and attention covers all start+s of them.
    `causal` masks later keys; `mask` is an additive bias or a bool (True: attend)
    broadcastable to (b, heads, s, keys)."""

    def __init__(self, dim: int, n_heads: int, n_kv_heads: int | None = None,
                 head_dim: int | None = None, bias: bool = False, out_bias: bool = False,
                 fmt: Fmts = "f32", kv_dim: int | None = None,
                 out_name: str = "o_proj", qk_norm: float | None = None,
                 scale: float | None = None, softcap: float | None = None) -> None:
        """`qk_norm`: the eps of an RMSNorm of each head's queries and keys before the
        rope (Qwen3's `q_norm`/`k_norm`); None: no such norm. `scale` multiplies the
        scores (default 1/sqrt(head_dim)); `softcap` c bounds them as c*tanh(x/c) before
        any mask (Gemma 2)."""
        self.n_heads, self.n_kv_heads = n_heads, n_kv_heads or n_heads
        self.head_dim = head_dim or dim // n_heads
        self.scale = scale if scale is not None else 1.0 / math.sqrt(self.head_dim)
        self.softcap = softcap
        self.q_norm = self.k_norm = None
        if qk_norm is not None:
            self.q_norm = RMSNorm(self.head_dim, qk_norm, _pick(fmt, "q_norm"))
            self.k_norm = RMSNorm(self.head_dim, qk_norm, _pick(fmt, "k_norm"))
        kv_in, hq, hk = kv_dim or dim, n_heads * self.head_dim, self.n_kv_heads * self.head_dim
        self.q_proj = Linear(dim, hq, bias, _pick(fmt, "q_proj"))
        self.k_proj = Linear(kv_in, hk, bias, _pick(fmt, "k_proj"))
        self.v_proj = Linear(kv_in, hk, bias, _pick(fmt, "v_proj"))
        setattr(self, out_name, Linear(hq, dim, out_bias, _pick(fmt, out_name)))
        self.out_name = out_name

    def _heads(self, t: Tensor, n: int) -> Tensor:  # (b, s, n*hd) -> (b, n, s, hd)
        b, s, _ = t.shape
        return t.reshape(b, s, n, self.head_dim).transpose(1, 2)

    def forward(self, x: Tensor, start: IntLike = 0, *, context: Tensor | None = None,
                rope: RotaryEmbedding | None = None, positions: Tensor | None = None,
                cache: KVCache | None = None, causal: bool = False,
                mask: Tensor | None = None, window: int | None = None,
                starts: Tensor | None = None) -> Tensor:
        """`window`: with `causal`, each query sees only the last `window` keys.
        `starts` (b,) int: each row's own start (a batch of sequences at their own
        lengths, `start` their maximum): rope, the cache and the causal mask by row."""
        b, s, _ = x.shape
        if starts is not None:
            if positions is not None:
                raise ValueError("Attention: give `starts` or `positions`, not both")
            positions = starts.reshape(b, 1) + arange(x.graph, 0, s).reshape(1, s)
        src = x if context is None else context
        q = self._heads(self.q_proj(x), self.n_heads)
        k = self._heads(self.k_proj(src), self.n_kv_heads)
        v = self._heads(self.v_proj(src), self.n_kv_heads)
        if self.q_norm is not None and self.k_norm is not None:
            q, k = self.q_norm(q), self.k_norm(k)
        if rope is not None:
            pos = start if positions is None else positions
            q, k = rope(q, pos), rope(k, pos)
        if cache is not None:
            k, v = cache.update(k, v, start, positions if starts is not None else None)
        # each KV head serves `rep` query heads, whose rows are one matrix: the products
        # are batched over the KV heads, each a plain matrix product (a KV head read
        # through a broadcast per query head took SmolLM2's prefill 0.6 ms a layer)
        hk, n, hd, rep = self.n_kv_heads, k.shape[-2], self.head_dim, \
            self.n_heads // self.n_kv_heads
        grouped = (b, hk, rep * s, -1)
        scores = q.reshape(grouped) @ k.transpose(-2, -1)
        scores = scores.reshape(b, self.n_heads, s, n) * self.scale
        if self.softcap is not None:
            scores = (scores * (1.0 / self.softcap)).tanh() * self.softcap
        if causal and starts is not None:
            seen = row_causal_mask(positions, n, window)
            scores = scores + where(seen, 0.0, float("-inf"))
        elif causal:
            scores = scores + causal_bias(x.graph, s, n, start, window)
        if mask is not None:
            scores = scores + (where(mask, 0.0, float("-inf")) if mask.dtype.is_bool
                               else _cast(mask, scores))
        out = (scores.softmax(-1).reshape(grouped) @ v).reshape(b, self.n_heads, s, hd)
        # the heads side by side again, stored so (the output projection multiplies a
        # plain matrix, not a loop of dot products: 1 -> 0.3 ms a layer)
        out = out.transpose(1, 2).reshape(b, s, self.n_heads * hd).contiguous()
        return getattr(self, self.out_name)(out)


class SwiGLU(Module):
    """down(act(gate(x)) * up(x)): Llama's MLP (act silu), Gemma's (act "gelu_tanh")."""

    def __init__(self, dim: int, hidden: int, fmt: Fmts = "f32", bias: bool = False,
                 act: str = "silu") -> None:
        if act not in ("silu", "gelu_tanh"):
            raise ValueError(f"SwiGLU: act must be 'silu' or 'gelu_tanh', not {act!r}")
        self.act = act
        self.gate_proj = Linear(dim, hidden, bias, _pick(fmt, "gate_proj"))
        self.up_proj = Linear(dim, hidden, bias, _pick(fmt, "up_proj"))
        self.down_proj = Linear(hidden, dim, bias, _pick(fmt, "down_proj"))

    def forward(self, x: Tensor) -> Tensor:
        g = self.gate_proj(x)
        g = silu(g) if self.act == "silu" else gelu(g, approximate="tanh")
        return self.down_proj(g * self.up_proj(x))


class GeluMLP(Module):
    """fc2(gelu(fc1(x))) (BERT's and Whisper's MLP)."""

    def __init__(self, dim: int, hidden: int, bias: bool = True, fmt: Fmt = "f32",
                 approximate: str = "none") -> None:
        self.fc1 = Linear(dim, hidden, bias, fmt, fmt)
        self.fc2 = Linear(hidden, dim, bias, fmt, fmt)
        self.approximate = approximate

    def forward(self, x: Tensor) -> Tensor:
        return self.fc2(gelu(self.fc1(x), self.approximate))


def _pair(v: int | Sequence[int], n: int) -> tuple[int, ...]:
    return (v,) * n if isinstance(v, int) else tuple(v)


class _ConvNd(Module):
    nd = 2

    def __init__(self, in_channels: int, out_channels: int, kernel_size: int | Sequence[int],
                 stride: int | Sequence[int] = 1, padding: int | Sequence[int] | str = 0,
                 dilation: int | Sequence[int] = 1, groups: int = 1, bias: bool = True,
                 fmt: Fmt = "f32") -> None:
        k = _pair(kernel_size, self.nd)
        self.stride, self.padding, self.dilation, self.groups = stride, padding, dilation, groups
        self.weight = Param((out_channels, in_channels // groups, *k), fmt)
        self.bias = Param((out_channels,), fmt) if bias else None


class Conv2d(_ConvNd):
    """torch.nn.Conv2d, in the formulations of `lumos.nn.conv`. With `channels_last`
    the input and output are (N, H, W, C) (the weight keeps PyTorch's layout)."""

    nd = 2

    def __init__(self, in_channels: int, out_channels: int, kernel_size: int | Sequence[int],
                 stride: int | Sequence[int] = 1, padding: int | Sequence[int] | str = 0,
                 dilation: int | Sequence[int] = 1, groups: int = 1, bias: bool = True,
                 fmt: Fmt = "f32", channels_last: bool = False) -> None:
        super().__init__(in_channels, out_channels, kernel_size, stride, padding, dilation,
                         groups, bias, fmt)
        self.channels_last = channels_last

    def forward(self, x: Tensor) -> Tensor:
        g = x.graph
        b = None if self.bias is None else _cast(self.bias.of(g), x)
        return conv.conv2d(x, _cast(self.weight.of(g), x), b, self.stride, self.padding,
                           self.dilation, self.groups, self.channels_last)


class Conv1d(_ConvNd):
    nd = 1

    def forward(self, x: Tensor) -> Tensor:
        g = x.graph
        b = None if self.bias is None else _cast(self.bias.of(g), x)
        return conv1d(x, _cast(self.weight.of(g), x), b, self.stride, self.padding,
                      self.dilation, self.groups)


class BatchNorm2d(Module):
    """Inference batch norm with running statistics (torchvision's names). With
    `channels_last` the channels are the last axis, (N, H, W, C)."""

    def __init__(self, num_features: int, eps: float = 1e-5, fmt: Fmt = "f32",
                 channels_last: bool = False) -> None:
        self.eps, self.channels_last = eps, channels_last
        for name in ("weight", "bias", "running_mean", "running_var"):
            setattr(self, name, Param((num_features,), fmt))

    def forward(self, x: Tensor) -> Tensor:
        g = x.graph
        p = [_cast(getattr(self, n).of(g), x)
             for n in ("running_mean", "running_var", "weight", "bias")]
        if not self.channels_last:
            return batch_norm(x, p[0], p[1], p[2], p[3], eps=self.eps)
        if x.ndim != 4:
            raise ShapeError(f"BatchNorm2d: a channels-last input must be 4-D (N, H, W, C), "
                             f"got shape {x.shape}")
        # batch_norm's arithmetic with the per-channel parameters broadcast along the last axis
        c = x.view.shape[-1]
        return batch_norm(x.reshape(-1, c), *p, eps=self.eps).reshape(*x.view.shape)


class MaxPool2d(Module):
    def __init__(self, kernel_size: int | Sequence[int], stride: int | Sequence[int] | None = None,
                 padding: int | Sequence[int] = 0) -> None:
        self.args = (kernel_size, stride, padding)

    def forward(self, x: Tensor) -> Tensor:
        return max_pool2d(x, *self.args)


class AvgPool2d(Module):
    def __init__(self, kernel_size: int | Sequence[int], stride: int | Sequence[int] | None = None,
                 padding: int | Sequence[int] = 0) -> None:
        self.args = (kernel_size, stride, padding)

    def forward(self, x: Tensor) -> Tensor:
        return avg_pool2d(x, *self.args)


class AdaptiveAvgPool2d(Module):
    def __init__(self, output_size: int | Sequence[int]) -> None:
        self.output_size = output_size

    def forward(self, x: Tensor) -> Tensor:
        return adaptive_avg_pool2d(x, self.output_size)


__all__ = ["AdaptiveAvgPool2d", "Attention", "AvgPool2d", "BatchNorm2d", "Conv1d", "Conv2d",
           "Embedding", "GeluMLP", "KVCache", "LayerNorm", "Linear", "MaxPool2d",
           "RMSNorm", "RotaryEmbedding", "SwiGLU", "causal_bias"]
