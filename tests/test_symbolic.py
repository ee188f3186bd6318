"""One graph with a symbolic dim s, built once and executed for several values of s."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import lumos
from tests.helpers import assert_close

SIZES = (1, 7, 128)


def _compile(outs):
    g = outs[0].graph
    for o in outs:
        o.output()
    return g.compile(lumos.ReferenceRuntime())


def test_elementwise_and_movement_chain():
    g = lumos.Graph()
    g.dim("s", 1, 256)
    x = g.tensor(("s", 8), "f32", name="x")
    b = g.tensor((8,), "f32", name="b")
    n = len(g.nodes)
    y = x.T.unsqueeze(0).expand(2, 8, "s").flip(2).reshape(2, 2, 4, -1).permute(0, 3, 2, 1)
    views = len(g.nodes)
    z = lumos.gelu(x * 0.5 + b).pad((1, 1, 0, 2), 1.0).roll(1, 0)
    w = lumos.where(x > 0, lumos.exp(-x), lumos.sigmoid(x)) - lumos.cat([b.unsqueeze(0), x], 0)[1:]
    assert views == n  # the movement chain added nothing
    prog = _compile([y, z, w])
    rng = np.random.default_rng(0)
    bv = rng.standard_normal(8).astype(np.float32)
    prog.set_data(b, bv)
    for s in SIZES:
        xv = rng.standard_normal((s, 8)).astype(np.float32)
        prog.set_data(x, xv)
        prog.execute()  # s is read off x's data
        tx, tb = torch.from_numpy(xv), torch.from_numpy(bv)
        wy = tx.T.unsqueeze(0).expand(2, 8, s).flip(2).reshape(2, 2, 4, -1).permute(0, 3, 2, 1)
        wz = F.pad(F.gelu(tx * 0.5 + tb), (1, 1, 0, 2), value=1.0).roll(1, 0)
        ww = torch.where(tx > 0, torch.exp(-tx), torch.sigmoid(tx)) - tx
        for o, want in ((y, wy), (z, wz), (w, ww)):
            assert_close(prog.get(o), want, lumos.f32)


def test_dim_values_and_symbolic_arithmetic():
    g = lumos.Graph()
    s = g.dim("s", 1, 256)
    x = g.tensor(("s",), "i64", name="x")
    pos = lumos.frontend.tensor.iota(g, lumos.shape.z(0), ("s",), "i64")
    scale = lumos.frontend.tensor.dim_value(g, s * 2 + 1, "f32")
    out = (x + pos).to("f32") / scale
    prog = _compile([out])
    for n in SIZES:
        xv = np.arange(n, dtype=np.int64) * 3
        prog.set_data(x, xv)
        prog.execute({"s": n})
        np.testing.assert_allclose(prog.get(out), (xv + np.arange(n)) / (2 * n + 1), rtol=1e-6)


@pytest.mark.skipif(not (hasattr(lumos.Tensor, "softmax") and hasattr(lumos.Tensor, "matmul")),
                    reason="reductions / matmul not available yet")
def test_attention_like_block():
    """A causal single-head attention over s tokens, with a residual and an RMS-style norm."""
    g = lumos.Graph()
    g.dim("s", 1, 256)
    d = 16
    x = g.tensor(("s", d), "f32", name="x")
    wq, wk, wv = (g.tensor((d, d), "f32", name=n) for n in ("wq", "wk", "wv"))
    q, k, v = x.matmul(wq), x.matmul(wk), x.matmul(wv)
    scores = q.matmul(k.T) * (1.0 / math.sqrt(d))
    s_ = x.shape[0]
    rows = lumos.frontend.tensor.iota(g, lumos.shape.z(0), (s_, s_), "i32")
    cols = lumos.frontend.tensor.iota(g, lumos.shape.z(1), (s_, s_), "i32")
    scores = scores.masked_fill(cols > rows, float("-inf"))
    h = scores.softmax(-1).matmul(v) + x
    out = h * (h * h).mean(-1, keepdim=True).add(1e-6).rsqrt()
    prog = _compile([out])
    rng = np.random.default_rng(1)
    ws = [rng.standard_normal((d, d)).astype(np.float32) / 4 for _ in range(3)]
    for t, wv_ in zip((wq, wk, wv), ws, strict=True):
        prog.set_data(t, wv_)
    for n in SIZES:
        xv = rng.standard_normal((n, d)).astype(np.float32)
        prog.set_data(x, xv)
        prog.execute()
        tx = torch.from_numpy(xv)
        tq, tk, tv = (tx @ torch.from_numpy(w) for w in ws)
        sc = (tq @ tk.T) / math.sqrt(d)
        sc = sc.masked_fill(torch.ones(n, n, dtype=torch.bool).triu(1), float("-inf"))
        th = sc.softmax(-1) @ tv + tx
        want = th * torch.rsqrt((th * th).mean(-1, keepdim=True) + 1e-6)
        assert_close(prog.get(out), want, lumos.f32)


def test_joins_and_splits_over_two_dims():
    g = lumos.Graph()
    a = g.tensor(("s", 2), "i32", name="a")
    b = g.tensor(("t", 2), "i32", name="b")
    c = lumos.cat([a, b, a], 0)
    parts = c.split([a.shape[0], b.shape[0], a.shape[0]], 0)
    out = [c.flip(0), parts[1] * 2, lumos.stack([a, a], 1).flatten(0, 1), c.roll(3, 0)]
    prog = _compile(out)
    for s, t in ((1, 1), (3, 5), (7, 2)):
        av = np.arange(2 * s, dtype=np.int32).reshape(s, 2)
        bv = -np.arange(2 * t, dtype=np.int32).reshape(t, 2) - 1
        prog.set_data(a, av)
        prog.set_data(b, bv)
        prog.execute()
        ta, tb = torch.from_numpy(av), torch.from_numpy(bv)
        tc = torch.cat([ta, tb, ta], 0)
        wants = [tc.flip(0), tb * 2, torch.stack([ta, ta], 1).flatten(0, 1), tc.roll(3, 0)]
        for o, w in zip(out, wants, strict=True):
            np.testing.assert_array_equal(prog.get(o), w.numpy())
