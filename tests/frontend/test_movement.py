"""Movement ops: view edits that add no nodes, compared with PyTorch on random chains."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st

import lumos
from tests.helpers import run


def _factor(n: int, data: st.DataObject) -> list[int]:
    if n == 0:
        return data.draw(st.sampled_from([[0], [0, 3], [2, 0], [1, 0, 2]]))
    out, rest = [], n
    for _ in range(data.draw(st.integers(0, 3))):
        d = data.draw(st.sampled_from([d for d in range(1, rest + 1) if rest % d == 0]))
        out.append(d)
        rest //= d
    return data.draw(st.permutations(out + [rest]))


def _dim(data: st.DataObject, nd: int) -> int:
    """A dim index, sometimes negative."""
    d = data.draw(st.integers(0, nd - 1))
    return d - nd if data.draw(st.booleans()) else d


def view_edit(x: lumos.Tensor, t: torch.Tensor, data: st.DataObject):
    """One random movement op applied to both; returns (lumos, torch, nodes it may add)."""
    nd = t.ndim
    ops = ["reshape", "unsqueeze", "flatten"]
    if nd:
        ops += ["permute", "transpose", "squeeze", "expand", "narrow", "flip", "roll", "repeat",
                "pad", "unflatten", "T"]
    if nd >= 2:
        ops += ["mT"]
    op = data.draw(st.sampled_from(ops), label="op")
    if op == "reshape":
        shape = _factor(t.numel(), data)
        if t.numel() and data.draw(st.booleans()):
            shape[data.draw(st.integers(0, len(shape) - 1))] = -1
        return x.reshape(*shape), t.reshape(*shape), 0
    if op == "unsqueeze":
        d = data.draw(st.integers(-nd - 1, nd))
        return x.unsqueeze(d), t.unsqueeze(d), 0
    if op == "flatten":
        if nd == 0:
            return x.flatten(), t.flatten(), 0
        a = data.draw(st.integers(0, nd - 1))
        b = data.draw(st.integers(a, nd - 1))
        return x.flatten(a, b), t.flatten(a, b), 0
    if op == "permute":
        perm = data.draw(st.permutations(range(nd)))
        return x.permute(*perm), t.permute(*perm), 0
    if op == "transpose":
        a, b = _dim(data, nd), _dim(data, nd)
        return x.transpose(a, b), t.transpose(a, b), 0
    if op == "T":
        return x.T, t.permute(*reversed(range(nd))), 0
    if op == "mT":
        return x.mT, t.mT, 0
    if op == "squeeze":
        ones = [i for i, s in enumerate(t.shape) if s == 1]
        how = data.draw(st.sampled_from(["all", "one", "tuple"]))
        if how == "all":
            return x.squeeze(), t.squeeze(), 0
        if how == "one":
            d = _dim(data, nd)  # squeezing a dim that is not 1 is a no-op
            return x.squeeze(d), t.squeeze(d), 0
        ds = tuple(ones[:2])
        return x.squeeze(ds), t.squeeze(ds), 0
    if op == "expand":
        shape = [data.draw(st.integers(0, 3)) if s == 1 else -1 for s in t.shape]
        lead = [data.draw(st.integers(1, 2)) for _ in range(data.draw(st.integers(0, 1)))]
        return x.expand(*lead, *shape), t.expand(*lead, *shape), 0
    if op == "narrow":
        d = _dim(data, nd)
        n = t.shape[d]
        start = data.draw(st.integers(0, n))
        length = data.draw(st.integers(0, n - start))
        if start and data.draw(st.booleans()):
            start -= n  # counted from the end
        return x.narrow(d, start, length), t.narrow(d, start, length), 0
    if op == "flip":
        dims = data.draw(st.lists(st.integers(0, nd - 1), min_size=1, max_size=nd, unique=True))
        return x.flip(*dims), t.flip(dims), 0
    if op == "roll":
        if data.draw(st.booleans()):
            s = data.draw(st.integers(-7, 7))
            return x.roll(s), t.roll(s), 0
        dims = data.draw(st.lists(st.integers(-nd, nd - 1), min_size=1, max_size=2))
        shifts = [data.draw(st.integers(-7, 7)) for _ in dims]
        return x.roll(shifts, dims), t.roll(shifts, dims), 0
    if op == "repeat":
        reps = [data.draw(st.integers(0, 2)) for _ in range(nd + data.draw(st.integers(0, 1)))]
        return x.repeat(*reps), t.repeat(*reps), 0
    if op == "unflatten":
        d = _dim(data, nd)
        sizes = _factor(t.shape[d], data)
        if t.shape[d] and data.draw(st.booleans()):
            sizes[0] = -1
        return x.unflatten(d, sizes), t.unflatten(d, sizes), 0
    # pad: negative pads crop, a non-zero value adds a constant and an Add
    k = data.draw(st.integers(1, nd))
    pads = []
    for i in range(k):
        n = t.shape[nd - 1 - i]
        before = data.draw(st.integers(-n, 2))
        after = data.draw(st.integers(-(n + min(before, 0)), 2))
        pads += [before, after]
    value = data.draw(st.sampled_from([0, 0, 1.5, -2.0]))
    return x.pad(pads, value), F.pad(t, pads, value=value), 2 * (value != 0) * k


@settings(max_examples=150)
@given(shape=st.lists(st.integers(0, 4), min_size=0, max_size=3), steps=st.integers(1, 5),
       transposed=st.booleans(), data=st.data())
def test_random_movement_chains(shape, steps, transposed, data):
    g = lumos.Graph()
    src = shape[::-1] if transposed else shape
    x = g.tensor(src, "f32")
    arr = np.arange(1, math.prod(src) + 1, dtype=np.float32).reshape(src)
    t = torch.from_numpy(arr)
    y, ty = x, t
    if transposed and src:
        y, ty = x.permute(*reversed(range(len(src)))), t.permute(*reversed(range(len(src))))
    for _ in range(steps):
        before = len(g.nodes)
        y, ty, allowed = view_edit(y, ty, data)
        assert len(g.nodes) - before <= allowed
        assert tuple(y.shape) == tuple(ty.shape)
        if ty.numel() > 2000:
            break
    (got,) = run([y], {x: arr})
    np.testing.assert_array_equal(got, ty.numpy())


def test_view_ops_add_no_nodes():
    g = lumos.Graph()
    x = g.tensor((2, 3, 4), "f32")
    n = len(g.nodes)
    views = [x.reshape(6, -1), x.reshape(-1), x.flatten(1), x.unflatten(2, (2, 2)),
             x.permute(2, 0, 1), x.transpose(0, -1), x.T, x.mT, x.unsqueeze(-1),
             x.unsqueeze(1).squeeze(1), x.narrow(1, 0, 1).squeeze(), x.expand(5, 2, 3, 4),
             x.narrow(2, 1, 2), x.flip(0, 2), x.roll(3, 2), x.roll(1), x.repeat(2, 1, 1, 2),
             x.pad((1, 1, 0, 2)), x.pad((-1, 0)), x.broadcast_to(1, 2, 3, 4),
             x.flatten(1).t(), *x.split(2, -1), *x.split([1, 2], 1), *x.chunk(2, 2),
             x.view_(4, 6), x.unsqueeze(0).expand_as(g.tensor((3, 2, 3, 4), "f32"))]
    assert len(g.nodes) == n + 1  # the second input only
    assert all(v.node == x.node for v in views[:-1])


def test_joins():
    g = lumos.Graph()
    a = g.tensor((2, 3), "f32")
    b = g.tensor((3, 2), "f32")
    c = g.tensor((0, 3), "f32")
    bt = b.T
    ta = torch.arange(6, dtype=torch.float32).reshape(2, 3)
    tb = -torch.arange(6, dtype=torch.float32).reshape(3, 2)
    tc = torch.zeros(0, 3)
    n = len(g.nodes)
    outs = [lumos.cat([a, bt], 0), lumos.cat([a, bt, a], -1), lumos.cat([a, c], 0),
            lumos.cat([c, a, c], 0), lumos.stack([a, bt]), lumos.stack([a, bt], -1),
            lumos.stack([a], 1), lumos.cat([a.flip(1), bt.narrow(1, 1, 2)], 1)]
    ops = [nd.op for nd in g.nodes[n:]]
    assert ops.count("Add") == 1 + 2 + 0 + 0 + 1 + 1 + 0 + 1  # one Add per extra piece
    # ... and each float piece of a join of several negated twice at most (padded with
    # -0.0; the graph shares equal nodes)
    assert ops.count("Mul") <= 2 * (2 + 3 + 2 + 2 + 2) and len(ops) - ops.count("Add") - \
        ops.count("Mul") <= 1  # (the -1)
    tbt = tb.T
    wants = [torch.cat([ta, tbt], 0), torch.cat([ta, tbt, ta], -1), torch.cat([ta, tc], 0),
             torch.cat([tc, ta, tc], 0), torch.stack([ta, tbt]), torch.stack([ta, tbt], -1),
             torch.stack([ta], 1), torch.cat([ta.flip(1), tbt.narrow(1, 1, 2)], 1)]
    got = run(outs, {a: ta.numpy(), b: tb.numpy(), c: tc.numpy()})
    for r, w in zip(got, wants, strict=True):
        np.testing.assert_array_equal(r, w.numpy())


def test_cat_promotes_dtypes():
    g = lumos.Graph()
    a = g.tensor((2,), "i32")
    b = g.tensor((3,), "f16")
    out = lumos.cat([a, b])
    assert out.dtype is lumos.f16
    (got,) = run([out], {a: np.array([1, 2], np.int32), b: np.array([0.5, 1, 2], np.float16)})
    np.testing.assert_array_equal(got, np.array([1, 2, 0.5, 1, 2], np.float16))


@pytest.mark.parametrize("size", [0, 1, 5, 6, 7])
def test_split_and_chunk(size):
    g = lumos.Graph()
    x = g.tensor((size, 2), "i64")
    t = torch.arange(size * 2).reshape(size, 2)
    parts = [x.split(2), x.split(3, 0), x.chunk(3), x.chunk(4, 0), x.chunk(1, 1), x.split(1, 1)]
    tparts = [t.split(2), t.split(3, 0), t.chunk(3), t.chunk(4, 0), t.chunk(1, 1), t.split(1, 1)]
    for p, tp in zip(parts, tparts, strict=True):
        assert [tuple(q.shape) for q in p] == [tuple(q.shape) for q in tp]
    flat = [q for p in parts for q in p]
    got = run(flat, {x: t.numpy()})
    for r, w in zip(got, [q for tp in tparts for q in tp], strict=True):
        np.testing.assert_array_equal(r, w.numpy())


def test_pad_values_and_dtypes():
    g = lumos.Graph()
    x = g.tensor((2, 3), "i32")
    b = g.tensor((2, 2), "bool")
    t = torch.arange(6, dtype=torch.int32).reshape(2, 3)
    tb = torch.tensor([[True, False], [False, True]])
    outs = [x.pad((1, 2), 7), x.pad((-1, 1, 1, -1), -3), x.pad((0, 0, 2, 0)), b.pad((1, 1), True),
            x.T.pad((2, -1, -1, 0), 5)]
    wants = [F.pad(t, (1, 2), value=7), F.pad(t, (-1, 1, 1, -1), value=-3),
             F.pad(t, (0, 0, 2, 0)), F.pad(tb, (1, 1), value=True), F.pad(t.T, (2, -1, -1, 0),
                                                                       value=5)]
    got = run(outs, {x: t.numpy(), b: tb.numpy()})
    for r, w in zip(got, wants, strict=True):
        np.testing.assert_array_equal(r, w.numpy())


def test_symbolic_movement():
    g = lumos.Graph()
    g.dim("s", 1, 64)
    x = g.tensor(("s", 6), "f32")
    n = len(g.nodes)
    y = x.reshape(-1, 2, 3).permute(1, 0, 2).flatten(1).flip(1).roll(1, 1)
    z = x.T.unsqueeze(0).expand(2, 6, "s").repeat(1, 1, 2).narrow(2, 1, "s")
    assert len(g.nodes) == n
    for s in (1, 5):
        arr = np.arange(6 * s, dtype=np.float32).reshape(s, 6)
        t = torch.from_numpy(arr)
        wy = t.reshape(-1, 2, 3).permute(1, 0, 2).flatten(1).flip(1).roll(1, 1)
        wz = t.T.unsqueeze(0).expand(2, 6, s).repeat(1, 1, 2).narrow(2, 1, s)
        got = run([y, z], {x: arr}, {"s": s})
        np.testing.assert_array_equal(got[0], wy.numpy())
        np.testing.assert_array_equal(got[1], wz.numpy())
