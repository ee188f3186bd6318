"""The reference runtime is the normative semantics of every primitive: check each one
directly, through `run_hlir` (the oracle) and through a compiled program."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import lumos
from lumos.dtype import bf16_to_f32, f32_to_bf16
from lumos.frontend.tensor import Tensor, iota, node, scalar
from lumos.runtime.reference import read, run_hlir
from lumos.shape import View, z
from tests.helpers import run


def both(outs: list[Tensor], feeds: dict[Tensor, np.ndarray], dims: dict | None = None):
    """Results of the oracle and of a compiled program; they must agree bit for bit."""
    g = outs[0].graph
    for o in outs:
        o.output()
    oracle = run_hlir(g, {g.nodes[t.node].name: a for t, a in feeds.items()}, dims or {})
    program = run(outs, feeds, dims)
    for a, b in zip(oracle, program, strict=True):
        assert a.dtype == b.dtype and a.shape == b.shape
        np.testing.assert_array_equal(a, b)
    return program


def test_mod_truncates_like_c():
    g = lumos.Graph()
    a, b = g.tensor((6,), "i32"), g.tensor((6,), "i32")
    fa, fb = g.tensor((5,), "f32"), g.tensor((5,), "f32")
    ai, bi = np.array([7, -7, 7, -7, 5, -3], np.int32), np.array([3, 3, -3, -3, 0, 0], np.int32)
    af = np.array([7.5, -7.5, 7.5, 1.0, np.inf], np.float32)
    bf = np.array([2.0, 2.0, -2.0, 0.0, 2.0], np.float32)
    ri, rf = both([node(g, "Mod", [a, b]), node(g, "Mod", [fa, fb])], {a: ai, b: bi, fa: af,
                                                                       fb: bf})
    np.testing.assert_array_equal(ri, [1, -1, 1, -1, 0, 0])  # int % 0 is defined as 0
    np.testing.assert_array_equal(rf, [1.5, -1.5, 1.5, np.nan, np.nan])


def test_add_mul_on_bools_are_or_and():
    g = lumos.Graph()
    a, b = g.tensor((4,), "bool"), g.tensor((4,), "bool")
    av, bv = np.array([0, 0, 1, 1], bool), np.array([0, 1, 0, 1], bool)
    r_or, r_and = both([node(g, "Add", [a, b]), node(g, "Mul", [a, b])], {a: av, b: bv})
    np.testing.assert_array_equal(r_or, av | bv)
    np.testing.assert_array_equal(r_and, av & bv)
    assert r_or.dtype == np.bool_


def test_integer_arithmetic_wraps():
    g = lumos.Graph()
    a = g.tensor((3,), "i8")
    c = scalar(g, 100, "i8")
    c = c._with_view(c.view.expand((3,)))
    r_add, r_mul = both([node(g, "Add", [a, c]), node(g, "Mul", [a, c])],
                        {a: np.array([27, 28, -128], np.int8)})
    np.testing.assert_array_equal(r_add, np.array([127, -128, -28], np.int8))
    np.testing.assert_array_equal(r_mul, np.array([27 * 100, 28 * 100, -12800]).astype(np.int8))


def test_less_than_is_bool_and_false_for_nan():
    g = lumos.Graph()
    a, b = g.tensor((5,), "f32"), g.tensor((5,), "f32")
    (r,) = both([node(g, "LessThan", [a, b])],
                {a: np.array([1, np.nan, 0, -0.0, -np.inf], np.float32),
                 b: np.array([2, 1, np.nan, 0.0, np.inf], np.float32)})
    assert r.dtype == np.bool_
    np.testing.assert_array_equal(r, [True, False, False, False, True])


@pytest.mark.parametrize("dst", ["i8", "u8", "i32", "i64", "bool"])
def test_cast_float_to_int_truncates(dst):
    g = lumos.Graph()
    a = g.tensor((6,), "f32")
    v = np.array([2.7, -2.7, 0.5, -0.5, 100.9, 0.0], np.float32)
    if dst == "u8":
        v = np.abs(v)
    (r,) = both([a.to(dst)], {a: v})
    want = v.astype(bool) if dst == "bool" else np.trunc(v).astype(lumos.dtype.as_dtype(dst).np)
    np.testing.assert_array_equal(r, want)


def test_cast_to_bf16_rounds_to_nearest_even():
    g = lumos.Graph()
    a = g.tensor((7,), "f32")
    one_ulp = 2.0 ** -7  # bf16 spacing at 1
    v = np.array([1 + one_ulp / 2, 1 + 3 * one_ulp / 2, 1 + one_ulp / 2 + 2 ** -20,
                  -(1 + one_ulp / 2), np.nan, np.inf, 3.4e38], np.float32)
    (r,) = both([a.to("bf16")], {a: v})
    got = bf16_to_f32(r)
    np.testing.assert_array_equal(got[:4], [1.0, 1 + 2 * one_ulp, 1 + one_ulp, -1.0])
    assert np.isnan(got[4]) and got[5] == np.inf and got[6] == np.inf  # 3.4e38 rounds up
    np.testing.assert_array_equal(got, torch.from_numpy(v).bfloat16().float().numpy())
    # and bf16 arithmetic rounds its f32 result the same way
    g = lumos.Graph()
    b, c = g.tensor((2,), "bf16"), g.tensor((2,), "bf16")
    (s,) = both([node(g, "Add", [b, c])],
                {b: f32_to_bf16(np.array([1.0, 1 + one_ulp], np.float32)),
                 c: f32_to_bf16(np.array([one_ulp / 2, one_ulp / 2], np.float32))})
    np.testing.assert_array_equal(bf16_to_f32(s), [1.0, 1 + 2 * one_ulp])  # ties to even


def test_half_unary_computes_in_f32_and_rounds():
    g = lumos.Graph()
    a = g.tensor((3,), "f16")
    v = np.array([0.1, 2.0, 15.9], np.float16)  # 2 ** 15.9 is near the f16 maximum
    (r,) = both([node(g, "Exp2", [a])], {a: v})
    np.testing.assert_array_equal(r, np.exp2(v.astype(np.float32)).astype(np.float16))
    assert np.isfinite(r[2])


def test_gather_reads_logical_positions_and_zero_out_of_range():
    g = lumos.Graph()
    data = g.tensor((2, 3), "f32")
    idx = g.tensor((6,), "i64")
    d = np.arange(1, 7, dtype=np.float32).reshape(2, 3)
    i = np.array([0, 5, -1, 6, 100, 3], np.int64)
    r, rt = both([node(g, "Gather", [idx, data]), node(g, "Gather", [idx, data.T])],
                 {data: d, idx: i})
    np.testing.assert_array_equal(r, [1, 6, 0, 0, 0, 4])
    np.testing.assert_array_equal(rt, [1, 6, 0, 0, 0, d.T.reshape(-1)[3]])


def test_scatter_skips_out_of_range():
    g = lumos.Graph()
    dest = g.tensor((5,), "i32")
    idx = g.tensor((4,), "i32")
    src = g.tensor((4,), "i32")
    (r,) = both([node(g, "Scatter", [dest, idx, src])],
                {dest: np.zeros(5, np.int32), idx: np.array([4, -1, 5, 0], np.int32),
                 src: np.array([10, 20, 30, 40], np.int32)})
    np.testing.assert_array_equal(r, [40, 0, 0, 0, 10])


def test_reductions_of_empty_axes():
    g = lumos.Graph()
    f = g.tensor((3, 0), "f32")
    i = g.tensor((2, 0), "i16")
    outs = [node(g, "SumReduce", [f], axis=1), node(g, "MaxReduce", [f], axis=1),
            node(g, "SumReduce", [i], axis=1), node(g, "MaxReduce", [i], axis=1)]
    s, m, si, mi = both(outs, {f: np.zeros((3, 0), np.float32), i: np.zeros((2, 0), np.int16)})
    np.testing.assert_array_equal(s, [0, 0, 0])
    np.testing.assert_array_equal(m, [-np.inf] * 3)
    np.testing.assert_array_equal(si, [0, 0])
    np.testing.assert_array_equal(mi, [np.iinfo(np.int16).min] * 2)


def test_max_reduce_propagates_nan_and_sum_accumulates_half_in_f32():
    g = lumos.Graph()
    f = g.tensor((2, 3), "f32")
    h = g.tensor((4096,), "f16")
    m, s = both([node(g, "MaxReduce", [f], axis=1), node(g, "SumReduce", [h], axis=0)],
                {f: np.array([[1, np.nan, 3], [-np.inf, -1, -2]], np.float32),
                 h: np.full(4096, 1.0, np.float16)})
    np.testing.assert_array_equal(m, [np.nan, -1])
    assert s == 4096  # an f16 running sum would stop at 2048


def test_iota_and_views_with_padding():
    g = lumos.Graph()
    g.dim("s", 1, 16)
    it = iota(g, z(0) * 10 + z(1), ("s", 3), "i32")
    x = g.tensor(("s",), "f32")
    padded = x._with_view(x.view.pad(0, 1, 2))  # reads 0 outside
    out = node(g, "Add", [padded, padded])
    r_it, r_pad = both([it, out], {x: np.array([1, 2], np.float32)}, {"s": 2})
    np.testing.assert_array_equal(r_it, [[0, 1, 2], [10, 11, 12]])
    np.testing.assert_array_equal(r_pad, [0, 2, 4, 0, 0])


def test_constants_and_dedup():
    g = lumos.Graph()
    a, b = scalar(g, 1.5, "f32"), scalar(g, 1.5, "f32")
    assert a.node == b.node  # identical pure nodes are shared
    c = scalar(g, -0.0, "f32")
    assert c.node != scalar(g, 0.0, "f32").node
    (r,) = both([c], {})
    assert np.signbit(r)


def test_persisted_outputs_keep_their_buffer():
    g = lumos.Graph()
    x = g.tensor((3,), "f32")
    y = (x * 2).output(persist=True)
    w = (x + 1).output()
    prog = g.compile(lumos.ReferenceRuntime())
    prog.set_data(x, np.array([1, 2, 3], np.float32))
    prog.execute()
    buf = prog.get(y)
    prog.set_data(x, np.array([4, 5, 6], np.float32))
    prog.execute()
    assert prog.get(y) is buf
    np.testing.assert_array_equal(buf, [8, 10, 12])
    np.testing.assert_array_equal(prog.get(w), [5, 6, 7])


def test_view_read_of_a_prefix_and_of_size_zero():
    g = lumos.Graph()
    x = g.tensor((4, 3), "i32")
    first = x.narrow(0, 0, 2)  # contiguous, but smaller than the buffer
    none = x.narrow(0, 1, 0)
    assert first.view.is_contiguous()
    r1, r2 = both([first + 0, none + 0], {x: np.arange(12, dtype=np.int32).reshape(4, 3)})
    np.testing.assert_array_equal(r1, [[0, 1, 2], [3, 4, 5]])
    assert r2.shape == (0, 3)


def test_oracle_view_is_the_contiguous_one():
    v = View.contiguous((2, 3))
    assert v.permute((1, 0)).permute((1, 0)) == v


def _read_element_by_element(arr: np.ndarray, view: View) -> np.ndarray:
    shape = tuple(e.value for e in view.shape)
    out = np.zeros(shape, arr.dtype)
    flat = arr.reshape(-1)
    for pos in np.ndindex(*shape):
        env = {f"z{k}": p for k, p in enumerate(pos)}
        if view.valid.eval(env):
            out[pos] = flat[view.index.eval(env)]
    return out


@pytest.mark.parametrize("move", [
    lambda x: x.permute(2, 0, 1),  # a transpose: strided
    lambda x: x[1:, ::2, 3:],  # a slice with a step: strided, offset
    lambda x: x.unsqueeze(0).expand(2, 3, 4, 5),  # a broadcast: stride 0
    lambda x: x.reshape(4, 15)[:, 3:9].T,  # ... of a reshape
    lambda x: x.reshape(60)[7:].reshape(53)[::-2],  # a reversed step: gathered
    lambda x: x.pad((1, 2, 0, 1)),  # padding: strided over zeros around x, 0 where invalid
    lambda x: x.pad((2, 1, 1, 0))[:, ::2, 1:],  # ... then sliced with a step
    lambda x: x.pad((0, 0, 0, 0, 40, 40)),  # mostly padding: gathered
    lambda x: x._with_view(x.view.unsqueeze(0).pad(0, 0, 1)),  # relu's stacked pair [x, 0]
    lambda x: x.reshape(3, 2, 2, 5).permute(0, 2, 1, 3).reshape(3, 4, 5),  # not affine
    lambda x: x[1, 2, 3],  # one element (0-d)
])
def test_a_view_reads_what_its_index_says(move) -> None:
    """`read` (strided views where the index is affine, masked where it is not valid
    everywhere, a gather once per source element where validity depends on other axes,
    else a gather) against a read element by element."""
    g = lumos.Graph()
    x = g.tensor((3, 4, 5), "f32")
    view = move(x).view
    arr = np.arange(60, dtype=np.float32).reshape(3, 4, 5) + 1
    got = read(arr, view, {})
    np.testing.assert_array_equal(got, _read_element_by_element(arr, view))


@pytest.mark.parametrize("shapes", [
    # (a's shape, b's shape, summed axis): each broadcast along axes the other is not
    ((5, 1, 4), (1, 3, 4), 2),  # a matmul, rows x columns
    ((2, 5, 1, 4), (2, 1, 3, 4), 3),  # a batch of them
    ((1, 5, 1, 4), (2, 1, 3, 4), 3),  # a's rows shared by the batch (a convolution's weights)
    ((2, 5, 3, 1, 4), (2, 1, 3, 6, 4), 4),  # two batch axes, one inside
    ((4, 5, 1), (4, 1, 3), 0),  # the summed axis first
])
def test_a_sum_of_products_is_the_matrix_product(shapes) -> None:
    from lumos.runtime.reference import _sum_of_products
    sa, sb, axis = shapes
    out = np.broadcast_shapes(sa, sb)
    rng = np.random.default_rng(0)
    a = np.broadcast_to(rng.standard_normal(sa).astype(np.float32), out)
    b = np.broadcast_to(np.asfortranarray(rng.standard_normal(sb).astype(np.float32)),
                        out)  # (its memory in the other order)
    want = (a.astype(np.float64) * b).sum(axis)
    got = _sum_of_products(a, b, axis)
    assert got.dtype == np.float64
    np.testing.assert_allclose(got, want, rtol=1e-12)


def test_a_copy_by_one_of_a_strided_read_is_read_again_right() -> None:
    """x * 1 is x (Tensor.contiguous's copy), stored in row-major memory: a strided read
    of a strided read kept as a view read the wrong elements (an attention gradient)."""
    g = lumos.Graph()
    x = g.tensor((12,), "f32", "x")
    y = x[1::2] * 1.0
    (y[::2] + 0.0).output()
    (y * 1.0).output()
    a = np.arange(12, dtype=np.float32)
    got = run_hlir(g, {"x": a}, {})
    np.testing.assert_array_equal(got[0], a[1::2][::2])
    np.testing.assert_array_equal(got[1], a[1::2])


def test_peak_bytes_is_what_the_oracle_holds():
    import tracemalloc

    from lumos.runtime.reference import peak_bytes
    g = lumos.Graph()
    g.dim("s", 1, 4096)
    x = g.tensor(("s", 64), name="x")
    w = g.tensor((64, 64), name="w")
    h = (x @ w).exp2()  # the product's Mul (s, 64, 64) is never held
    (h * h + 1.0).sum(1).output()
    n = 2048
    want = peak_bytes(g, {"s": n})
    # x, w; then x @ w (summed in f64), exp2, h * h, + 1, the sum: at most three (s, 64)
    assert 3 * n * 64 * 4 <= want <= 4 * n * 64 * 4 + n * 64 * 8
    rng = np.random.default_rng(0)
    data = {"x": rng.standard_normal((n, 64), np.float32),
            "w": rng.standard_normal((64, 64), np.float32)}
    tracemalloc.start()
    run_hlir(g, data, {"s": n})
    peak = tracemalloc.get_traced_memory()[1] + data["x"].nbytes  # (x was held before)
    tracemalloc.stop()
    assert 0.5 * want <= peak <= 2 * want, (peak, want)
