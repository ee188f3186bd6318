"""Indexing, gather/scatter, index_put, tril/triu and construction against PyTorch
(numpy for negative slice steps, which torch rejects)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

import lumos
from lumos.frontend.index import IndexShapeError
from tests.helpers import TORCH_DTYPES, assert_close, random_array, run, to_torch

DTYPES = [lumos.f32, lumos.f16, lumos.bf16, lumos.i32, lumos.i64, lumos.u8, lumos.bool_]
LAYOUTS = ["contig", "permuted", "flipped", "broadcast", "sliced"]
SIZES = [1, 7, 128]


def source(g: lumos.Graph, rng: np.random.Generator, shape: tuple[int, ...],
           dtype: lumos.DType, layout: str) -> tuple[lumos.Tensor, dict, np.ndarray]:
    """A tensor of logical `shape` read through a non-trivial view, its feed, its value."""
    nd = len(shape)
    if layout == "permuted" and nd >= 2:
        d = random_array(rng, shape[::-1], dtype)
        t = g.tensor(shape[::-1], dtype)
        return t.permute(*reversed(range(nd))), {t: d}, d.transpose()
    if layout == "flipped" and nd >= 1:
        d = random_array(rng, shape, dtype)
        t = g.tensor(shape, dtype)
        return t.flip(0), {t: d}, np.flip(d, 0).copy()
    if layout == "broadcast" and nd >= 1:
        d = random_array(rng, (1,) + shape[1:], dtype)
        t = g.tensor((1,) + shape[1:], dtype)
        return t.expand(*shape), {t: d}, np.broadcast_to(d, shape).copy()
    if layout == "sliced" and nd >= 1:
        d = random_array(rng, shape + (2,), dtype)
        t = g.tensor(shape + (2,), dtype)
        return t.narrow(-1, 1, 1).squeeze(-1), {t: d}, d[..., 1].copy()
    d = random_array(rng, shape, dtype)
    t = g.tensor(shape, dtype)
    return t, {t: d}, d


def check(got: np.ndarray, want: torch.Tensor | np.ndarray, dtype: lumos.DType) -> None:
    if isinstance(want, np.ndarray) and dtype is lumos.bf16:
        want = to_torch(np.ascontiguousarray(want), dtype)
    assert_close(got, want, dtype, rtol=0, atol=0)


def ref(value: np.ndarray, dtype: lumos.DType) -> torch.Tensor:
    return to_torch(value, dtype)


# -- basic indexing ----------------------------------------------------------------------

shapes = st.lists(st.integers(0, 5), min_size=1, max_size=4).map(tuple)


@st.composite
def basic_keys(draw: st.DrawFn, shape: tuple[int, ...], negative_steps: bool) -> tuple:
    items: list = []
    for n in shape[:draw(st.integers(0, len(shape)))]:
        kind = draw(st.sampled_from(["int", "slice", "slice", "none"] if n else
                                    ["slice", "none"]))
        if kind == "none":
            items.append(None)
            kind = "slice"
        if kind == "int":
            items.append(draw(st.integers(-n, n - 1)))
        else:
            bound = st.none() | st.integers(-n - 2, n + 2)
            steps = [None, 1, 2, 3] + ([-1, -2, -3] if negative_steps else [])
            items.append(slice(draw(bound), draw(bound), draw(st.sampled_from(steps))))
    if draw(st.booleans()):
        items.insert(draw(st.integers(0, len(items))), Ellipsis)
    if draw(st.booleans()):
        items.insert(draw(st.integers(0, len(items))), None)
    return tuple(items)


@given(st.data(), shapes, st.sampled_from(DTYPES), st.sampled_from(LAYOUTS))
def test_basic_indexing_is_a_view_and_matches_torch(data, shape, dtype, layout):
    rng = np.random.default_rng(0)
    g = lumos.Graph()
    x, feeds, value = source(g, rng, shape, dtype, layout)
    key = data.draw(basic_keys(shape, negative_steps=False))
    n = len(g.nodes)
    y = x[key]
    assert len(g.nodes) == n, "basic indexing must not add nodes"
    check(run([y], feeds)[0], ref(value, dtype)[key], dtype)


@given(st.data(), shapes, st.sampled_from(LAYOUTS))
def test_negative_steps_match_numpy(data, shape, layout):
    rng = np.random.default_rng(1)
    g = lumos.Graph()
    x, feeds, value = source(g, rng, shape, lumos.f32, layout)
    key = data.draw(basic_keys(shape, negative_steps=True))
    n = len(g.nodes)
    y = x[key]
    assert len(g.nodes) == n
    check(run([y], feeds)[0], value[key], lumos.f32)


def test_python_bool_and_iteration():
    g = lumos.Graph()
    x = g.tensor((2, 3), lumos.i32)
    a = np.arange(6, dtype=np.int32).reshape(2, 3)
    n = len(g.nodes)
    ys = [x[True], x[False], x[:, True, 1], x[None, ..., False], *x]
    assert len(g.nodes) == n
    t = torch.from_numpy(a)
    for got, want in zip(run(ys, {x: a}), [t[True], t[False], t[:, True, 1],
                                            t[None, ..., False], *t], strict=True):
        check(got, want, lumos.i32)


# -- advanced indexing -------------------------------------------------------------------

@st.composite
def advanced_keys(draw: st.DrawFn, shape: tuple[int, ...]) -> tuple[list, list]:
    """Items (with ("T", shape) placeholders for index tensors) and the index shapes."""
    bshape = draw(st.lists(st.integers(1, 3), max_size=2))
    items: list = []
    for n in shape:
        kind = draw(st.sampled_from(["tensor", "tensor", "slice", "int", "none", "list"]))
        if kind == "none":
            items.append(None)
            kind = "slice"
        if kind == "int":
            items.append(draw(st.integers(-n, n - 1)))
        elif kind == "slice":
            items.append(slice(draw(st.none() | st.integers(-n, n)), None,
                               draw(st.sampled_from([None, 2]))))
        elif kind == "list":
            items.append(draw(st.lists(st.integers(-n, n - 1), min_size=1, max_size=3)))
        else:
            k = draw(st.integers(0, len(bshape)))
            tshape = [1 if draw(st.booleans()) else b for b in bshape[len(bshape) - k:]]
            items.append(("T", tuple(tshape), n))
    if not any(isinstance(i, tuple) for i in items):
        items[-1] = ("T", tuple(bshape), shape[-1])
    if draw(st.booleans()):
        items = items[:draw(st.integers(1, len(items)))]
    return items


@given(st.data(), st.lists(st.integers(1, 4), min_size=1, max_size=4).map(tuple),
       st.sampled_from([lumos.f32, lumos.i64, lumos.bf16]), st.sampled_from(LAYOUTS),
       st.sampled_from([lumos.i32, lumos.i64]))
def test_advanced_indexing_matches_torch(data, shape, dtype, layout, index_dtype):
    rng = np.random.default_rng(2)
    g = lumos.Graph()
    x, feeds, value = source(g, rng, shape, dtype, layout)
    items = data.draw(advanced_keys(shape))
    if sum(isinstance(i, list) for i in items) and all(isinstance(i, list) or i is None
                                                       for i in items):
        items.append(slice(None))  # a lone list is torch's deprecated tuple-like form
    key, tkey = [], []
    for i, item in enumerate(items):
        if isinstance(item, tuple):
            _, tshape, n = item
            arr = rng.integers(-n, n, size=tshape)
            t = g.tensor(tshape, index_dtype, f"idx{i}")
            feeds[t] = arr.astype(index_dtype.np)
            key.append(t)
            tkey.append(torch.from_numpy(arr))
        else:
            key.append(item)
            tkey.append(item)
    y = x[tuple(key)]
    want = ref(value, dtype)[tuple(tkey)]
    assert y.shape == tuple(want.shape)
    check(run([y], feeds)[0], want, dtype)


PLACEMENT = [  # (key of index tensors i (2,), k (0-d) and mask m (3, 4), result shape)
    (lambda i, k, m: (slice(None), i, i), (2, 2, 5)),  # adjacent: in place
    (lambda i, k, m: (i, slice(None), i), (2, 3, 5)),  # separated: first
    (lambda i, k, m: (slice(None), i, slice(None), i), (2, 2, 4)),
    (lambda i, k, m: (0, slice(None), i), (3, 2, 5)),  # an int is a select (torch)
    (lambda i, k, m: (slice(None), i, None, i), (2, 2, 1, 5)),
    (lambda i, k, m: (slice(None), [[0], [1]], [0, 1, 2]), (2, 2, 3, 5)),
    (lambda i, k, m: (slice(None), m), (2, 8, 5)),
    (lambda i, k, m: (k, slice(None), i), (3, 2, 5)),  # so is a 0-d tensor
    (lambda i, k, m: (i, k, i), (2, 5)),
    (lambda i, k, m: (slice(None), i, k, i), (2, 2)),
    (lambda i, k, m: (i, slice(None), k, i), (2, 3)),
    (lambda i, k, m: (slice(None), i, True, slice(None), i), (2, 2, 4)),
]


def test_advanced_index_placement():
    g = lumos.Graph()
    x = g.tensor((2, 3, 4, 5), lumos.f32, "x")
    i, k = g.tensor((2,), lumos.i64, "i"), g.tensor((), lumos.i64, "k")
    m = np.array([[True, False, True, False], [False, False, True, True], [True] * 4])
    a = np.random.default_rng(10).standard_normal((2, 3, 4, 5)).astype(np.float32)
    ia, ka = np.array([1, -1]), np.array(1)
    ys = [x[key(i, k, m)] for key, _ in PLACEMENT]
    t, ti, tk = torch.from_numpy(a), torch.from_numpy(ia), torch.from_numpy(ka)
    for y, got, (key, shape) in zip(ys, run(ys, {x: a, i: ia, k: ka}), PLACEMENT, strict=True):
        want = t[key(ti, tk, torch.from_numpy(m))]
        assert y.shape == tuple(want.shape) == shape
        check(got, want, lumos.f32)
    assert x.index_put((k, None, i), 1.0).shape == (2, 3, 4, 5)


def test_static_masks_and_lists():
    g = lumos.Graph()
    x = g.tensor((2, 3, 4), lumos.f32)
    a = np.random.default_rng(3).standard_normal((2, 3, 4)).astype(np.float32)
    m = np.array([[True, False, True], [False, False, True]])
    keys = [(m,), (slice(None), [True, False, True]), ([1, -1, 0],), ([[1, 0], [0, 1]], 2),
            (..., []), (1, [2, 0], [3, -1])]
    outs = run([x[k] for k in keys], {x: a})
    for got, k in zip(outs, keys, strict=True):
        check(got, a[k], lumos.f32)


# -- symbolic sizes ----------------------------------------------------------------------

def test_symbolic_indexing():
    g = lumos.Graph()
    x = g.tensor(("s", 6), lumos.f32, "x")
    n = g.dim("n", 1, 6)
    i = g.tensor((3,), lumos.i64, "i")
    j = g.tensor((3,), lumos.i64, "j")
    before = len(g.nodes)
    basic = {
        "x[:, 1:]": x[:, 1:], "x[-1]": x[-1], "x[:, -1]": x[:, -1], "x[..., :n]": x[..., :n],
        "x[1:]": x[1:], "x[:-1]": x[:-1], "x[::-1]": x[::-1], "x[-3:]": x[-3:],
        "x[::2, 4::-2]": x[::2, 4::-2], "x[None, :n, 0]": x[None, :n, 0],
        "x[:, n - 1]": x[:, n - 1], "x[:, -n:]": x[:, -n:], "x[:, :-n]": x[:, :-n],
        "x[1 - n::-1]": x[1 - n::-1],
    }
    assert len(g.nodes) == before
    assert basic["x[:, 1:]"].shape == (lumos.sym("s"), 5)
    assert basic["x[1:]"].shape == (lumos.sym("s") - 1, 6)
    adv = {"x[i]": x[i], "x[i, 1:]": x[i, 1:], "x[:, j]": x[:, j], "x[1:, [0, -1]]": x[1:, [0, -1]]}
    for s in SIZES:
        a = np.random.default_rng(s).standard_normal((s, 6)).astype(np.float32)
        idx = np.array([0, -1, s - 1])
        jdx = np.array([0, -1, 5])
        outs = run(list(basic.values()) + list(adv.values()), {x: a, i: idx, j: jdx},
                   {"n": 4})
        env = {"x": a, "i": idx, "j": jdx, "n": 4}
        for got, k in zip(outs, list(basic) + list(adv), strict=True):
            check(got, eval(k, {}, env), lumos.f32)


def test_symbolic_gather_scatter_put():
    g = lumos.Graph()
    x = g.tensor(("s", 4), lumos.f32, "x")
    j = g.tensor(("s", 2), lumos.i64, "j")
    r = g.tensor((2,), lumos.i64, "r")
    ys = [x.gather(1, j), x.scatter(1, j, -1.0), x.index_put((r,), x[0] * 0 + 9.0),
          x.index_select(0, r), x.take(r), x.tril(), x.triu(1), g.arange("s"),
          g.arange(1, "s", 2, dtype=lumos.f32), g.full(("s", 3), 2.5), x.new_zeros("s", 2)]
    for s in SIZES:
        rng = np.random.default_rng(s)
        a = rng.standard_normal((s, 4)).astype(np.float32)
        jj = np.stack([rng.permutation(4)[:2] for _ in range(s)])
        rr = np.array([0, s - 1]) if s > 1 else np.array([0, -1])
        outs = run(ys, {x: a, j: jj, r: rr})
        t, tj, tr = torch.from_numpy(a), torch.from_numpy(jj), torch.from_numpy(rr)
        wants = [t.gather(1, tj), t.scatter(1, tj, -1.0),
                 t.index_put((tr,), t[0] * 0 + 9.0), t.index_select(0, tr % s),
                 t.take(tr), t.tril(), t.triu(1), torch.arange(s),
                 torch.arange(1, s, 2, dtype=torch.float32), torch.full((s, 3), 2.5),
                 torch.zeros(s, 2)]
        for got, want in zip(outs, wants, strict=True):
            check(got, want, lumos.f32 if want.is_floating_point() else lumos.i64)


# -- gather / index_select / take / scatter ----------------------------------------------

@st.composite
def along_case(draw: st.DrawFn) -> tuple:
    shape = tuple(draw(st.lists(st.integers(1, 4), min_size=1, max_size=3)))
    dim = draw(st.integers(-len(shape), len(shape) - 1))
    d = dim % len(shape)
    ishape = tuple(draw(st.integers(1, n)) if a != d else draw(st.integers(1, n))
                   for a, n in enumerate(shape))
    return shape, dim, ishape


@given(along_case(), st.sampled_from([lumos.f32, lumos.i32, lumos.bool_, lumos.f16]),
       st.sampled_from(LAYOUTS), st.sampled_from([lumos.i32, lumos.i64]))
def test_gather_matches_torch(case, dtype, layout, index_dtype):
    shape, dim, ishape = case
    rng = np.random.default_rng(4)
    g = lumos.Graph()
    x, feeds, value = source(g, rng, shape, dtype, layout)
    ia = rng.integers(0, shape[dim], size=ishape)
    i = g.tensor(ishape, index_dtype, "i")
    feeds[i] = ia.astype(index_dtype.np)
    want = torch.gather(ref(value, dtype), dim, torch.from_numpy(ia))
    check(run([x.gather(dim, i)], feeds)[0], want, dtype)


@given(along_case(), st.sampled_from([lumos.f32, lumos.i64, lumos.bf16]),
       st.sampled_from(LAYOUTS), st.booleans())
def test_scatter_matches_torch(case, dtype, layout, with_value):
    shape, dim, ishape = case
    d = dim % len(shape)
    rng = np.random.default_rng(5)
    g = lumos.Graph()
    x, feeds, value = source(g, rng, shape, dtype, layout)
    # distinct targets along `dim` for each position of the other axes (torch is then exact)
    perm = np.argsort(rng.random(ishape[:d] + (shape[d],) + ishape[d + 1:]), axis=d)
    ia = np.take(perm, np.arange(ishape[d]), axis=d)
    i = g.tensor(ishape, lumos.i64, "i")
    feeds[i] = ia
    if with_value:
        y, want = x.scatter(dim, i, value=3), ref(value, dtype).scatter(dim, torch.from_numpy(
            ia), value=3)
    else:
        sshape = tuple(n + 1 for n in ishape)
        src, sfeeds, sval = source(g, rng, sshape, dtype, "contig")
        feeds.update(sfeeds)
        y = x.scatter(dim, i, src)
        want = ref(value, dtype).scatter(dim, torch.from_numpy(ia), ref(sval, dtype))
    check(run([y], feeds)[0], want, dtype)


@given(st.lists(st.integers(1, 4), min_size=1, max_size=3).map(tuple), st.data(),
       st.sampled_from(LAYOUTS))
def test_index_select_and_take(shape, data, layout):
    rng = np.random.default_rng(6)
    g = lumos.Graph()
    x, feeds, value = source(g, rng, shape, lumos.f32, layout)
    dim = data.draw(st.integers(-len(shape), len(shape) - 1))
    k = data.draw(st.integers(0, 5))
    sel = rng.integers(0, shape[dim], size=k)
    flat = rng.integers(-value.size, value.size, size=(k, 2))
    i, f = g.tensor((k,), lumos.i64, "i"), g.tensor((k, 2), lumos.i64, "f")
    feeds.update({i: sel, f: flat})
    t = torch.from_numpy(value)
    outs = run([x.index_select(dim, i), x.take(f)], feeds)
    check(outs[0], t.index_select(dim, torch.from_numpy(sel)), lumos.f32)
    check(outs[1], t.take(torch.from_numpy(flat)), lumos.f32)


def test_zero_dim_gather_family():
    g = lumos.Graph()
    x = g.tensor((), lumos.f32, "x")
    v = g.tensor((5,), lumos.f32, "v")
    i0 = g.tensor((), lumos.i64, "i0")
    i1 = g.tensor((1,), lumos.i64, "i1")
    ys = [x.gather(0, i0), x.gather(0, i1), v.gather(0, i0), x.index_select(0, i1),
          x.scatter(0, i0, 2.0), x.take(i0)]
    xa, va = np.float32(1.5).reshape(()), np.arange(5, dtype=np.float32)
    outs = run(ys, {x: xa, v: va, i0: np.array(0), i1: np.array([0])})
    tx, tv = torch.tensor(1.5), torch.from_numpy(va)
    t0, t1 = torch.tensor(0), torch.tensor([0])
    wants = [tx.gather(0, t0), tx.gather(0, t1), tv.gather(0, t0), tx.index_select(0, t1),
             tx.scatter(0, t0, 2.0), tx.take(t0)]
    for got, want in zip(outs, wants, strict=True):
        check(got, want, lumos.f32)


# -- index_put ---------------------------------------------------------------------------

@given(st.lists(st.integers(1, 4), min_size=2, max_size=4).map(tuple), st.data(),
       st.sampled_from([lumos.f32, lumos.i64]), st.sampled_from(LAYOUTS))
def test_index_put_matches_torch(shape, data, dtype, layout):
    rng = np.random.default_rng(7)
    g = lumos.Graph()
    x, feeds, value = source(g, rng, shape, dtype, layout)
    axes = sorted(data.draw(st.sets(st.integers(0, len(shape) - 1), min_size=1, max_size=2)))
    accumulate = data.draw(st.booleans())
    combos = int(np.prod([shape[a] for a in axes]))
    k = data.draw(st.integers(1, combos if not accumulate else 6))
    flat = rng.choice(combos, size=k, replace=accumulate)  # duplicates only when summed
    cols = np.unravel_index(flat, [shape[a] for a in axes])
    indices: list = [None] * (axes[-1] + 1)
    tindices: list = [slice(None)] * (axes[-1] + 1)
    for a, c in zip(axes, cols, strict=True):
        c = c - shape[a] * (rng.random(k) < 0.5)  # negative indices wrap
        t = g.tensor((k,), lumos.i64, f"i{a}")
        feeds[t] = c
        indices[a], tindices[a] = t, torch.from_numpy(c)
    out_shape = tuple(torch.empty(shape)[tuple(tindices)].shape)
    vshape = out_shape[data.draw(st.integers(0, len(out_shape))):]
    vals, vfeeds, vval = source(g, rng, vshape, dtype, "contig")
    feeds.update(vfeeds)
    y = x.index_put(tuple(indices), vals, accumulate=accumulate)
    tfull = [None if i is None else ti for i, ti in zip(indices, tindices, strict=True)]
    want = torch.ops.aten.index_put(torch.from_numpy(value), tfull, torch.from_numpy(vval),
                                    accumulate)
    assert_close(run([y], feeds)[0], want, dtype)


def test_index_put_accumulate_duplicates_and_bool_masks():
    g = lumos.Graph()
    x = g.tensor((4, 3), lumos.f32, "x")
    i = g.tensor((5,), lumos.i64, "i")
    v = g.tensor((5, 3), lumos.f32, "v")
    m = g.tensor((4,), lumos.bool_, "m")
    m2 = g.tensor((4, 3), lumos.bool_, "m2")
    row = g.tensor((3,), lumos.f32, "row")
    rng = np.random.default_rng(8)
    a = rng.standard_normal((4, 3)).astype(np.float32)
    a[0, 0] = np.nan
    ia = np.array([1, 1, -1, 0, 1])
    va = rng.standard_normal((5, 3)).astype(np.float32)
    ma, m2a = np.array([True, False, True, False]), rng.random((4, 3)) < 0.5
    ra = np.array([np.inf, -1.0, 2.0], np.float32)
    ys = [x.index_put((i,), v, accumulate=True), x.index_put((m,), row),
          x.index_put((m,), row, accumulate=True), x.index_put((m2,), 0.0),
          x.index_put((None, m2[0]), 7.0)]
    outs = run(ys, {x: a, i: ia, v: va, m: ma, m2: m2a, row: ra})
    t = torch.from_numpy(a)
    ti, tv, tm, tm2, tr = (torch.from_numpy(z) for z in (ia, va, ma, m2a, ra))
    wants = [t.index_put((ti,), tv, accumulate=True), t.index_put((tm,), tr),
             t.index_put((tm,), tr, accumulate=True), t.index_put((tm2,), torch.tensor(0.0)),
             torch.ops.aten.index_put(t, [None, tm2[0]], torch.tensor(7.0))]
    for got, want in zip(outs, wants, strict=True):
        assert_close(got, want, lumos.f32)


# -- tril / triu -------------------------------------------------------------------------

@given(st.lists(st.integers(0, 5), min_size=2, max_size=4).map(tuple), st.integers(-5, 5),
       st.sampled_from([lumos.f32, lumos.i32, lumos.bool_]), st.sampled_from(LAYOUTS))
def test_tril_triu_exact_views(shape, k, dtype, layout):
    rng = np.random.default_rng(9)
    g = lumos.Graph()
    x, feeds, value = source(g, rng, shape, dtype, layout)
    if dtype.is_float:  # inf and NaN outside the triangle must read as exact zeros
        value = np.where(rng.random(shape) < 0.3, np.nan, value).astype(np.float32)
        value = np.where(rng.random(shape) < 0.2, -np.inf, value).astype(np.float32)
        g = lumos.Graph()
        t = g.tensor(shape, dtype)
        x, feeds = t, {t: value}
    n = len(g.nodes)
    lo, hi = x.tril(k), x.triu(k)
    assert len(g.nodes) == n
    outs = run([lo, hi], feeds)
    t = ref(value, dtype)
    check(outs[0], torch.tril(t, k), dtype)
    check(outs[1], torch.triu(t, k), dtype)


# -- construction ------------------------------------------------------------------------

@pytest.mark.parametrize("args,kw", [
    ((5,), {}), ((2, 10, 3), {}), ((10, 2, -3), {}), ((0.5, 3.1, 0.3), {}),
    ((0, 1, 0.1), {"dtype": lumos.f64}), ((-1.5, 2), {"dtype": lumos.f16}),
    ((0.5, 5), {"dtype": lumos.i64}), ((3, 3), {}), ((1, 100, 7), {"dtype": lumos.i32}),
    ((0, 2.5, 0.5), {"dtype": lumos.bf16}),
])
def test_arange_matches_torch(args, kw):
    g = lumos.Graph()
    y = g.arange(*args, **kw)
    tkw = {"dtype": TORCH_DTYPES[kw["dtype"].name]} if kw else {}
    want = torch.arange(*args, **tkw)
    assert y.dtype.name == {v: k for k, v in TORCH_DTYPES.items()}[want.dtype]
    assert_close(run([y], {})[0], want, y.dtype)


def test_full_zeros_ones_and_likes():
    g = lumos.Graph()
    x = g.tensor((2, "s"), lumos.f16, "x")
    before = len(g.nodes)
    f = g.full((2, "s"), 1.5)
    assert len(g.nodes) == before + 1  # one Constant, viewed at the shape
    ys = [f, g.full((3,), 7), g.full((2,), True), g.zeros(2, 3), g.ones((4,), dtype=lumos.i32),
          g.zeros("s", 1), x.zeros_like(),
          x.ones_like(), x.ones_like(lumos.i64), x.new_zeros(3), x.new_ones((2, 2)),
          x.new_full(("s",), -2.0), x.new_zeros(2, dtype=lumos.bool_)]
    wants = [torch.full((2, 4), 1.5), torch.full((3,), 7), torch.full((2,), True),
             torch.zeros(2, 3), torch.ones(4, dtype=torch.int32), torch.zeros(4, 1),
             torch.zeros(2, 4, dtype=torch.float16), torch.ones(2, 4, dtype=torch.float16),
             torch.ones(2, 4, dtype=torch.int64), torch.zeros(3, dtype=torch.float16),
             torch.ones(2, 2, dtype=torch.float16), torch.full((4,), -2.0,
                                                              dtype=torch.float16),
             torch.zeros(2, dtype=torch.bool)]
    outs = run(ys, {x: np.zeros((2, 4), np.float16)})
    for y, got, want in zip(ys, outs, wants, strict=True):
        assert y.dtype.name == {v: k for k, v in TORCH_DTYPES.items()}[want.dtype]
        assert_close(got, want, y.dtype)


# -- errors ------------------------------------------------------------------------------

def test_index_errors():
    g = lumos.Graph()
    x = g.tensor((4, 5), lumos.f32)
    s = g.tensor(("s",), lumos.f32)
    fi = g.tensor((2,), lumos.f32, "fi")
    bi = g.tensor((4,), lumos.bool_, "bi")
    n = len(g.nodes)
    with pytest.raises(IndexShapeError, match=r"index 4 .* dim 0 of size 4"):
        x[4]
    with pytest.raises(IndexError, match=r"index -6 .* dim 1 of size 5"):
        x[:, -6]
    with pytest.raises(lumos.ShapeError, match="too many indices"):
        x[0, 0, 0]
    with pytest.raises(lumos.ShapeError, match="single ellipsis"):
        x[..., ...]
    with pytest.raises(lumos.ShapeError, match="step cannot be zero"):
        x[::0]
    with pytest.raises(lumos.ShapeError, match="data-dependent"):
        x[bi]
    with pytest.raises(lumos.DTypeError, match="f32"):
        x[fi]
    with pytest.raises(TypeError, match="not a valid index"):
        x[1.5]
    with pytest.raises(IndexError, match="mask"):
        x[[True, False]]
    with pytest.raises(TypeError, match="symbolic"):
        list(s)
    assert len(g.nodes) == n


def test_gather_scatter_put_errors_leave_the_graph_unchanged():
    g = lumos.Graph()
    x = g.tensor((4, 5), lumos.f32)
    i = g.tensor((4, 6), lumos.i64, "i")
    j = g.tensor((2, 2), lumos.i64, "j")
    k = g.tensor((3,), lumos.i64, "k")
    v = g.tensor((2,), lumos.f32, "v")
    m = g.tensor((3,), lumos.bool_, "m")
    m4 = g.tensor((4,), lumos.bool_, "m4")
    rows = g.tensor((2, 5), lumos.f32, "rows")
    n = len(g.nodes)
    cases = [
        (lumos.ShapeError, "larger than input", lambda: x.gather(0, i)),
        (lumos.ShapeError, "same number of dims", lambda: x.gather(0, k)),
        (lumos.DTypeError, "bool", lambda: x.gather(0, m.reshape(3, 1))),
        (lumos.ShapeError, "0-d or 1-d", lambda: x.index_select(0, j)),
        (lumos.DTypeError, "src dtype", lambda: x.scatter(0, j, j)),
        (lumos.ShapeError, "larger than src", lambda: x.scatter(0, j, v.reshape(1, 2))),
        (TypeError, "exactly one", lambda: x.scatter(0, j)),
        (lumos.DTypeError, "values dtype", lambda: x.index_put((k,), j)),
        (lumos.ShapeError, "broadcast", lambda: x.index_put((k,), v)),
        (IndexError, "mask of shape", lambda: x.index_put((m,), 1.0)),
        (lumos.ShapeError, "data-dependent", lambda: x.index_put((m4,), rows)),
        (lumos.ShapeError, "too many", lambda: x.index_put((k, k, k), 1.0)),
        (lumos.ShapeError, "at least 2 dims", lambda: v.tril()),
    ]
    for err, msg, fn in cases:
        with pytest.raises(err, match=msg):
            fn()
    assert len(g.nodes) == n


def test_arange_errors():
    g = lumos.Graph()
    with pytest.raises(lumos.ShapeError, match="inconsistent with step sign"):
        g.arange(5, 0, 1)
    with pytest.raises(lumos.ShapeError, match="nonzero"):
        g.arange(0, 5, 0)
    with pytest.raises(lumos.DTypeError, match="bool"):
        g.arange(3, dtype=lumos.bool_)
    with pytest.raises(lumos.ShapeError, match="symbolic"):
        g.arange(0.5, lumos.sym("s"))
    assert len(g.nodes) == 0
