"""Random op chains over non-contiguous views (permuted, broadcast, sliced, padded,
repeated, reshaped) on CpuRuntime against the reference. One graph per example holds
several chains, so each example compiles once."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

import lumos
from lumos.dtype import DType, bf16, f16, f32, f64, i8, i32, i64, to_numpy_value
from tests.runtime.cpu.common import edge_values, run_both

DTYPES = [f32, f64, f16, bf16, i32, i64, i8, lumos.bool_]
EDITS = ["permute", "flip", "slice", "pad", "reshape", "expand", "repeat", "select"]
OPS = ["add", "mul", "relu", "sum", "amax", "cast", "where", "mod", "exp", "softmax",
       "cumsum", "argmax", "cat", "gather"]
MAX_NUMEL = 600


def edit(draw: st.DrawFn, t: lumos.Tensor) -> lumos.Tensor:
    kind = draw(st.sampled_from(EDITS))
    v, nd = t.view, t.ndim
    if nd == 0:
        return t.unsqueeze(0).expand(3)
    ax = draw(st.integers(0, nd - 1))
    size = int(v.shape[ax])
    if kind == "permute" and nd > 1:
        v = v.permute(draw(st.permutations(range(nd))))
    elif kind == "flip":
        v = v.flip(ax)
    elif kind == "slice" and size > 1:
        step = draw(st.sampled_from([1, 2, -1, -2]))
        start = draw(st.integers(0, size - 1))
        room = start // -step + 1 if step < 0 else (size - 1 - start) // step + 1
        v = v.slice(ax, start, draw(st.integers(1, room)), step)
    elif kind == "pad":
        v = v.pad(ax, draw(st.integers(0, 2)), draw(st.integers(0, 2)))
    elif kind == "reshape":
        v = v.reshape((int(t.numel()),)) if nd > 1 else v.reshape((1, size, 1))
    elif kind == "expand":
        v = v.unsqueeze(0).expand((2, *v.shape))
    elif kind == "repeat":
        v = v.repeat(ax, 2)
    elif kind == "select" and nd > 1:
        v = v.select(ax, draw(st.integers(0, size - 1)))
    out = t._with_view(v)
    return out if int(out.numel()) <= MAX_NUMEL else t


def op(draw: st.DrawFn, t: lumos.Tensor, exact: bool) -> tuple[lumos.Tensor, bool]:
    """One random op; `exact` tracks whether float values still match bit for bit
    (after exp or a sum they may differ by an ulp, so no float -> int casts)."""
    kind = draw(st.sampled_from(OPS))
    dt, nd = t.dtype, t.ndim
    ax = draw(st.integers(0, nd - 1)) if nd else 0
    if kind == "add":
        return (t + t.flip(ax) if nd else t + t), exact
    if kind == "mul":
        return t * (3 if dt.is_int else 0.5), exact
    if kind == "relu" and not dt.is_bool:
        return t.relu(), exact
    if kind == "sum" and nd:
        return t.sum(ax, keepdim=draw(st.booleans())), exact and not dt.is_float
    if kind == "amax" and nd:
        return t.amax(ax), exact
    if kind == "cast":
        choices = [f32, f16, bf16, i32, i8] if exact or not dt.is_float else [f32, f64, bf16]
        return t.to(draw(st.sampled_from(choices))), exact
    if kind == "where":
        return lumos.where(t > 0, t, t * 2), exact
    if kind == "mod" and not dt.is_bool:
        return t % (3 if dt.is_int else 2.5), exact
    if kind == "exp" and dt.is_float:
        return (t * 0.25).exp(), False
    if kind == "softmax" and dt.is_float and nd:
        return t.softmax(ax), False
    if kind == "cumsum" and nd and not dt.is_bool:
        return t.cumsum(ax), exact and not dt.is_float
    if kind == "argmax" and nd and not dt.is_bool and exact:
        return t.argmax(ax), exact
    if kind == "cat" and nd:
        return lumos.cat([t, t.flip(ax)], ax), exact
    if kind == "gather" and nd:  # a permutation of the positions along `ax`, taken twice
        n = int(t.shape[ax])
        idx = (lumos.arange(t.graph, n) * 7 % n).repeat(2)
        return lumos.index_select(t, ax, idx), exact
    return t, exact


@st.composite
def chains(draw: st.DrawFn) -> tuple[list[tuple[lumos.Tensor, bool]], dict]:
    g = lumos.Graph()
    outs, feeds = [], {}
    rng = np.random.default_rng(draw(st.integers(0, 2**16)))
    for c in range(3):
        dt: DType = draw(st.sampled_from(DTYPES))
        shape = tuple(draw(st.lists(st.integers(1, 5), min_size=1, max_size=3)))
        x = g.tensor(shape, dt, f"x{c}")
        feeds[x] = edge_values(dt, rng, int(np.prod(shape))).reshape(shape)
        if dt.is_float:  # no inf/NaN: chains would turn most values into NaN
            vals = to_numpy_value(feeds[x], dt)
            finite = np.where(np.isfinite(vals), vals, 1.5).astype(np.float32)
            feeds[x] = lumos.dtype.from_numpy_value(finite, dt)
        t, exact = x, True
        for _ in range(draw(st.integers(2, 6))):
            t = edit(draw, t)
            t, exact = op(draw, t, exact)
            if draw(st.booleans()):
                outs.append((t, exact))
        outs.append((t, exact))
    return outs, feeds


@settings(max_examples=15)
@given(chains())
def test_random_chains(case: tuple[list[tuple[lumos.Tensor, bool]], dict]) -> None:
    outs, feeds = case
    results = run_both([t for t, _ in outs], feeds)
    for k, ((t, exact), (got, want)) in enumerate(zip(outs, results, strict=True)):
        what = f"output {k} ({t.dtype.name}, exact={exact})"
        assert got.shape == want.shape and got.dtype == want.dtype, what
        g64 = to_numpy_value(got, t.dtype).astype(np.float64)
        w64 = to_numpy_value(want, t.dtype).astype(np.float64)
        if exact or not t.dtype.is_float:
            np.testing.assert_array_equal(g64, w64, err_msg=what)
        else:
            tol = {"f16": 2e-2, "bf16": 5e-2}.get(t.dtype.name, 1e-4)
            np.testing.assert_allclose(g64, w64, rtol=tol, atol=tol, equal_nan=True,
                                       err_msg=what)
