"""lumos.nn layers against torch.nn / transformers, on the reference runtime."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import lumos
from lumos import nn
from lumos.errors import BindError, ShapeError

RNG = np.random.default_rng(0)


def run(module: nn.Module, state: dict, inputs: list[tuple[tuple, object, np.ndarray]],
        call=None, dims: dict | None = None) -> np.ndarray:
    """Build module(*inputs) (or call(module, *inputs)), bind `state`, run at `dims`
    (declared with range [0, 1000]), return."""
    g = lumos.Graph()
    for name in dims or {}:
        g.dim(name, 0, 1000)
    ts = [g.tensor(shape, dtype, name=f"x{i}") for i, (shape, dtype, _) in enumerate(inputs)]
    out = (call or (lambda m, *a: m(*a)))(module, *ts).output()
    prog = g.compile(lumos.ReferenceRuntime())
    nn.load_state(module, prog, state)
    for t, (_, _, a) in zip(ts, inputs, strict=True):
        prog.set_data(t, a)
    prog.execute(dims or {})
    return prog.get(out)


def state_of(m: torch.nn.Module) -> dict[str, np.ndarray]:
    return {k: v.detach().numpy() for k, v in m.state_dict().items()
            if not k.endswith("num_batches_tracked")}


def randn(*shape: int) -> np.ndarray:
    return RNG.standard_normal(shape).astype(np.float32)


def test_linear_embedding_norms():
    lin = torch.nn.Linear(8, 5)
    x = randn(3, 8)
    got = run(nn.Linear(8, 5, bias=True), state_of(lin), [((3, 8), "f32", x)])
    np.testing.assert_allclose(got, lin(torch.from_numpy(x)).detach().numpy(), atol=1e-5)

    emb = torch.nn.Embedding(11, 4)
    ids = np.array([[1, 10, 0], [3, 3, 7]])
    got = run(nn.Embedding(11, 4), state_of(emb), [((2, 3), "i64", ids)])
    np.testing.assert_array_equal(got, emb(torch.from_numpy(ids)).detach().numpy())

    ln = torch.nn.LayerNorm(6, eps=1e-6)
    torch.nn.init.normal_(ln.weight)
    torch.nn.init.normal_(ln.bias)
    x = randn(2, 4, 6)
    got = run(nn.LayerNorm(6, 1e-6), state_of(ln), [((2, 4, 6), "f32", x)])
    np.testing.assert_allclose(got, ln(torch.from_numpy(x)).detach().numpy(), atol=1e-5)

    rms = torch.nn.RMSNorm(6, eps=1e-5)
    torch.nn.init.normal_(rms.weight)
    got = run(nn.RMSNorm(6, 1e-5), state_of(rms), [((2, 4, 6), "f32", x)])
    np.testing.assert_allclose(got, rms(torch.from_numpy(x)).detach().numpy(), atol=1e-5)


def test_mlps():
    x = randn(2, 3, 8)
    w = {n: randn(*s) for n, s in (("gate_proj.weight", (16, 8)), ("up_proj.weight", (16, 8)),
                                   ("down_proj.weight", (8, 16)))}
    t = {k: torch.from_numpy(v) for k, v in w.items()}
    xt = torch.from_numpy(x)
    want = F.silu(xt @ t["gate_proj.weight"].T) * (xt @ t["up_proj.weight"].T) \
        @ t["down_proj.weight"].T
    got = run(nn.SwiGLU(8, 16), w, [((2, 3, 8), "f32", x)])
    np.testing.assert_allclose(got, want.numpy(), rtol=1e-4, atol=1e-4)

    fc1, fc2 = torch.nn.Linear(8, 16), torch.nn.Linear(16, 8)
    state = {f"fc1.{k}": v for k, v in state_of(fc1).items()} | \
        {f"fc2.{k}": v for k, v in state_of(fc2).items()}
    got = run(nn.GeluMLP(8, 16), state, [((2, 3, 8), "f32", x)])
    np.testing.assert_allclose(got, fc2(F.gelu(fc1(xt))).detach().numpy(), atol=1e-5)


def rotate_half_reference(x: torch.Tensor, pos: torch.Tensor, base: float) -> torch.Tensor:
    """transformers' default rope (LlamaRotaryEmbedding + apply_rotary_pos_emb)."""
    d = x.shape[-1]
    inv = 1.0 / (base ** (torch.arange(0, d, 2, dtype=torch.int64).float() / d))
    freqs = pos.float()[:, None] * inv[None, :]
    emb = torch.cat([freqs, freqs], -1)
    x1, x2 = x[..., : d // 2], x[..., d // 2:]
    return x * emb.cos() + torch.cat([-x2, x1], -1) * emb.sin()


def test_rotary_start_and_positions():
    rope = nn.RotaryEmbedding(8, 32, base=500.0)
    x = randn(2, 3, 5, 8)
    got = run(rope, {}, [((2, 3, 5, 8), "f32", x)], call=lambda m, t: m(t, lumos.sym("p")),
              dims={"p": 7})
    want = rotate_half_reference(torch.from_numpy(x), torch.arange(7, 12), 500.0)
    np.testing.assert_allclose(got, want.numpy(), atol=1e-5)
    pos = np.array([4, 0, 9, 9, 31])
    got = run(rope, {}, [((2, 3, 5, 8), "f32", x), ((5,), "i64", pos)],
              call=lambda m, t, p: m(t, p))
    want = rotate_half_reference(torch.from_numpy(x), torch.from_numpy(pos), 500.0)
    np.testing.assert_allclose(got, want.numpy(), atol=1e-5)


def attention_reference(x, w, heads, kv_heads, ctx=None, causal=False, keep=None):
    """Plain torch multi-head attention with grouped KV heads."""
    b, s, d = x.shape
    hd = d // heads
    src = x if ctx is None else ctx
    q = (x @ w["q_proj.weight"].T).reshape(b, s, heads, hd).transpose(1, 2)
    k, v = ((src @ w[f"{n}.weight"].T).reshape(b, src.shape[1], kv_heads, hd).transpose(1, 2)
            for n in ("k_proj", "v_proj"))
    k, v = (t.repeat_interleave(heads // kv_heads, 1) for t in (k, v))
    scores = q @ k.transpose(-1, -2) / math.sqrt(hd)
    if causal:
        scores = scores.masked_fill(torch.ones(s, k.shape[2]).triu(1).bool(), float("-inf"))
    if keep is not None:
        scores = scores.masked_fill(~keep, float("-inf"))
    out = (scores.softmax(-1) @ v).transpose(1, 2).reshape(b, s, d)
    return out @ w["o_proj.weight"].T


@pytest.mark.parametrize("heads,kv_heads", [(4, 4), (4, 2), (6, 1)])
def test_attention_grouped_causal(heads, kv_heads):
    d = 24
    w = {"q_proj.weight": randn(d, d), "k_proj.weight": randn(d * kv_heads // heads, d),
         "v_proj.weight": randn(d * kv_heads // heads, d), "o_proj.weight": randn(d, d)}
    x = randn(2, 5, d)
    got = run(nn.Attention(d, heads, kv_heads), w, [((2, 5, d), "f32", x)],
              call=lambda m, t: m(t, causal=True))
    want = attention_reference(torch.from_numpy(x), {k: torch.from_numpy(v) for k, v in
                                                     w.items()}, heads, kv_heads, causal=True)
    np.testing.assert_allclose(got, want.numpy(), rtol=1e-4, atol=1e-4)


def test_attention_products_are_plain_matrix_products():
    """Attention's query heads sharing a KV head are one matrix (its weights times the
    values: a product per KV head, no broadcast), and the heads side by side are stored
    for the output projection: both offered to the CPU runtime as BLAS products."""
    from tests.runtime.cpu.test_fusion import space_of

    g = lumos.Graph()
    nn.Attention(24, 6, 2)(g.tensor((2, 5, 24), lumos.f32, "x"), causal=True).output()
    products = [next(tuple(e.value for e in n.fields[0]) for n in alts if n.op == "KGemm")
                for alts in space_of(g).classes if any(n.op == "KGemm" for n in alts)]
    assert (2, 2, 15, 4) in products  # probabilities (2, 2 KV heads, 3 x 5 rows, 5) @ v
    assert products.count((2, 5, 24)) == 2  # the query and output projections


def test_attention_padding_mask_and_cross():
    d, heads = 16, 2
    w = {n: randn(d, d) for n in ("q_proj.weight", "k_proj.weight", "v_proj.weight",
                                  "o_proj.weight")}
    wt = {k: torch.from_numpy(v) for k, v in w.items()}
    x, ctx = randn(2, 3, d), randn(2, 6, d)
    keep = np.array([[True] * 6, [True] * 4 + [False] * 2])
    got = run(nn.Attention(d, heads), w, [((2, 3, d), "f32", x), ((2, 6, d), "f32", ctx),
                                         ((2, 1, 1, 6), "bool", keep[:, None, None])],
              call=lambda m, t, c, k: m(t, context=c, mask=k))
    want = attention_reference(torch.from_numpy(x), wt, heads, heads, torch.from_numpy(ctx),
                               keep=torch.from_numpy(keep)[:, None, None])
    np.testing.assert_allclose(got, want.numpy(), rtol=1e-4, atol=1e-4)


def test_kv_cache_decode_equals_full_attention():
    """Feeding tokens in chunks through the cache equals attending over all of them."""
    d, heads, kv, n = 16, 4, 2, 7
    w = {"q_proj.weight": randn(d, d), "k_proj.weight": randn(8, d),
         "v_proj.weight": randn(8, d), "o_proj.weight": randn(d, d)}
    attn, rope = nn.Attention(d, heads, kv), nn.RotaryEmbedding(4, 16)
    holder = nn.Module()
    holder.attn, holder.rope, holder.cache = attn, rope, nn.KVCache(1, kv, 16, 4)
    x = randn(1, n, d)
    full = run(holder, w_prefixed(w), [((1, n, d), "f32", x)],
               call=lambda m, t: m.attn(t, rope=m.rope, causal=True))
    g = lumos.Graph()
    g.dim("p", 0, 15)
    t = g.tensor((1, "s", d), name="x")
    out = attn(t, lumos.sym("p"), rope=rope, cache=holder.cache, causal=True).output()
    prog = g.compile(lumos.ReferenceRuntime())
    nn.load_state(holder, prog, w_prefixed(w))
    pieces, pos = [], 0
    for size in (3, 1, 1, 2):
        prog.set_data(t, x[:, pos:pos + size])
        prog.execute({"p": pos})
        nn.carry_over(holder, prog)
        pieces.append(prog.get(out).copy())
        pos += size
    np.testing.assert_allclose(np.concatenate(pieces, 1), full, rtol=1e-5, atol=1e-5)


def w_prefixed(w: dict) -> dict:
    return {f"attn.{k}": v for k, v in w.items()}


def test_conv_batchnorm_pool():
    conv = torch.nn.Conv2d(4, 6, 3, stride=2, padding=1, groups=2)
    bn = torch.nn.BatchNorm2d(6).eval()
    for p in (bn.weight, bn.bias, bn.running_mean):
        torch.nn.init.normal_(p)
    bn.running_var.uniform_(0.5, 2.0)
    x = randn(2, 4, 9, 9)

    class Block(nn.Module):
        def __init__(self):
            self.conv = nn.Conv2d(4, 6, 3, stride=2, padding=1, groups=2)
            self.bn = nn.BatchNorm2d(6)
            self.pool = nn.MaxPool2d(2)
            self.avg = nn.AvgPool2d(2, 1)
            self.gap = nn.AdaptiveAvgPool2d(1)

        def forward(self, t):
            y = self.bn(self.conv(t))
            return self.gap(self.avg(y)) + self.pool(y).mean((-1, -2), keepdim=True)

    state = {f"conv.{k}": v for k, v in state_of(conv).items()} | \
        {f"bn.{k}": v for k, v in state_of(bn).items()}
    got = run(Block(), state, [((2, 4, 9, 9), "f32", x)])
    y = bn(conv(torch.from_numpy(x)))
    want = F.adaptive_avg_pool2d(F.avg_pool2d(y, 2, 1), 1) + \
        F.max_pool2d(y, 2).mean((-1, -2), keepdim=True)
    np.testing.assert_allclose(got, want.detach().numpy(), rtol=1e-4, atol=1e-5)

    c1 = torch.nn.Conv1d(3, 5, 3, padding=1)
    x1 = randn(2, 3, 10)
    got = run(nn.Conv1d(3, 5, 3, padding=1), state_of(c1), [((2, 3, 10), "f32", x1)])
    np.testing.assert_allclose(got, c1(torch.from_numpy(x1)).detach().numpy(), atol=1e-5)


def test_names_and_binding_errors():
    class Net(nn.Module):
        def __init__(self):
            self.blocks = nn.ModuleList([nn.Linear(4, 4), nn.Linear(4, 2, bias=True)])

        def forward(self, t):
            return self.blocks[1](self.blocks[0](t))

    net = Net()
    assert [n for n, _ in net.named_parameters()] == [
        "blocks.0.weight", "blocks.1.weight", "blocks.1.bias"]
    g = lumos.Graph()
    net(g.tensor((1, 4), name="x")).output()
    prog = g.compile(lumos.ReferenceRuntime())
    good = {"blocks.0.weight": randn(4, 4), "blocks.1.weight": randn(2, 4),
            "blocks.1.bias": randn(2)}
    assert nn.load_state(net, prog, good) == sum(a.nbytes for a in good.values())
    with pytest.raises(BindError, match="no data for blocks.1.bias"):
        nn.load_state(net, prog, {k: v for k, v in good.items() if k != "blocks.1.bias"})
    with pytest.raises(ShapeError, match=r"blocks.1.weight: expected shape \(2, 4\), got "
                                         r"\(4, 2\)"):
        nn.load_state(net, prog, good | {"blocks.1.weight": randn(4, 2)})
    with pytest.raises(BindError, match="unexpected tensor extra"):
        nn.load_state(net, prog, good | {"extra": randn(1)})
    with pytest.raises(BindError, match="expected f32 data"):
        nn.load_state(net, prog, good | {"blocks.0.weight": randn(4, 4).astype(np.float16)})
    with pytest.raises(ShapeError, match="Q4_1-packed"):
        bad = nn.Packed("Q4_1", (4, 4), {})
        nn.load_state(net, prog, good | {"blocks.0.weight": bad})
    with pytest.raises(ValueError, match="already belongs"):
        other = Net()
        other.extra = net.blocks
