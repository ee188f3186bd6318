"""nn ops (matmul, norms, conv, pooling, embedding, attention) against torch.nn.functional."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from hypothesis import given
from hypothesis import strategies as st

import lumos
from lumos.dtype import as_dtype
from lumos.frontend import nn
from tests.helpers import assert_close, random_array, run, to_torch

F32, F16, BF16 = lumos.f32, lumos.f16, lumos.bf16


def check(lfn: Callable[..., lumos.Tensor], tfn: Callable[..., torch.Tensor],
          arrays: Sequence[np.ndarray], dtype: lumos.DType = F32, **tol: float) -> lumos.Graph:
    """Run lfn on graph inputs holding `arrays` and compare with tfn on the same data.
    Float arrays (and bf16 bit patterns) are inputs of `dtype`, others keep their own."""
    g = lumos.Graph()
    dts = [dtype if a.dtype.kind == "f" or (dtype is BF16 and a.dtype == np.uint16)
           else as_dtype(a.dtype) for a in arrays]
    ts = [g.tensor(a.shape, dt) for a, dt in zip(arrays, dts, strict=True)]
    (got,) = run([lfn(*ts)], dict(zip(ts, arrays, strict=True)))
    want = tfn(*[to_torch(a, dt) for a, dt in zip(arrays, dts, strict=True)])
    assert_close(got, want, dtype, **tol)
    return g


def rand(rng: np.random.Generator, *shape: int, dtype: lumos.DType = F32) -> np.ndarray:
    return random_array(rng, shape, dtype)


# -- matmul --------------------------------------------------------------------------------

@st.composite
def matmul_shapes(draw: st.DrawFn) -> tuple[tuple[int, ...], tuple[int, ...], bool]:
    m, k, n = (draw(st.integers(1, 5)) for _ in range(3))
    batch = draw(st.lists(st.integers(1, 3), max_size=3))

    def operand(core: tuple[int, ...], vector: tuple[int, ...]) -> tuple[int, ...]:
        if draw(st.booleans()) and draw(st.booleans()):
            return vector
        lead = batch[draw(st.integers(0, len(batch))):]
        return tuple(1 if draw(st.booleans()) else b for b in lead) + core

    return operand((m, k), (k,)), operand((k, n), (k,)), draw(st.booleans())


@given(matmul_shapes())
def test_matmul_forms_match_torch(case: tuple) -> None:
    """1-D and N-D operands, batch dims broadcast; b optionally stored transposed."""
    sa, sb, transposed = case
    rng = np.random.default_rng(0)
    if transposed and len(sb) >= 2:
        b = rand(rng, *sb[:-2], sb[-1], sb[-2])
        check(lambda x, y: x @ y.mT, lambda x, y: x @ y.mT, [rand(rng, *sa), b])
    else:
        check(lambda x, y: x @ y, torch.matmul, [rand(rng, *sa), rand(rng, *sb)])


def test_matmul_is_one_mul_and_one_sum_without_copies() -> None:
    g = lumos.Graph()
    a, w = g.tensor((2, 3, 4)), g.tensor((5, 4))
    y = a @ w.T
    assert y.shape == (2, 3, 5)
    assert [n.op for n in g.nodes[2:]] == ["Mul", "SumReduce"]


@pytest.mark.parametrize("dtype", [F16, BF16])
@pytest.mark.parametrize("shapes", [((3, 64), (64, 5)), ((2, 3, 33), (33,)), ((40,), (40,))])
def test_matmul_half(dtype: lumos.DType, shapes: tuple) -> None:
    rng = np.random.default_rng(1)
    check(nn.matmul, torch.matmul, [rand(rng, *s, dtype=dtype) for s in shapes], dtype)


def test_matmul_integers_and_methods() -> None:
    rng = np.random.default_rng(2)
    a = rng.integers(-50, 50, (3, 4)).astype(np.int32)
    b = rng.integers(-50, 50, (4, 2)).astype(np.int32)
    check(lambda x, y: x.matmul(y), torch.matmul, [a, b])
    check(lambda x, y: x.mm(y), torch.mm, [rand(rng, 3, 4), rand(rng, 4, 6)])
    check(lambda x, y: x.bmm(y), torch.bmm, [rand(rng, 2, 3, 4), rand(rng, 2, 4, 6)])


def test_rmatmul() -> None:
    g = lumos.Graph()
    a, b = g.tensor((2, 3)), g.tensor((3, 4))
    assert b.__rmatmul__(a).node == (a @ b).node


@pytest.mark.parametrize("sa, sb", [((2, 3), (4, 5)), ((3,), (4,)), ((2, 2, 3), (3, 3, 4)),
                                    ((5, 3), (2,))])
def test_matmul_shape_mismatch_names_both_shapes(sa: tuple, sb: tuple) -> None:
    g = lumos.Graph()
    a, b = g.tensor(sa), g.tensor(sb)
    before = g.count()
    with pytest.raises(lumos.ShapeError, match="matmul") as e:
        a @ b
    assert str(sa) in str(e.value) and str(sb) in str(e.value)
    assert g.count() == before


def test_matmul_bad_inputs() -> None:
    g = lumos.Graph()
    a, b, h = g.tensor((2, 3)), g.tensor((3, 4)), g.tensor((3, 4), F16)
    with pytest.raises(lumos.DTypeError, match="matmul"):
        a @ h
    with pytest.raises(lumos.ShapeError, match="mm"):
        nn.mm(a, b.unsqueeze(0))
    with pytest.raises(lumos.ShapeError, match="bmm"):
        nn.bmm(a.expand(2, 2, 3), b.expand(3, 3, 4))
    with pytest.raises(lumos.ShapeError, match="matmul"):
        a.sum() @ b
    with pytest.raises(lumos.DTypeError, match="matmul"):
        (a > 0) @ (b > 0)


def test_matmul_symbolic_shapes() -> None:
    g = lumos.Graph()
    q, k = g.tensor((2, "s", 8)), g.tensor((2, "s", 8))
    y = (q @ k.mT).output()
    prog = g.compile(lumos.ReferenceRuntime())
    rng = np.random.default_rng(3)
    for s in (1, 6):
        a, b = rand(rng, 2, s, 8), rand(rng, 2, s, 8)
        prog.set_data(q, a)
        prog.set_data(k, b)
        prog.execute({"s": s})
        assert_close(prog.get(y), torch.from_numpy(a) @ torch.from_numpy(b).mT)


@pytest.mark.parametrize("dtype", [F32, F16, BF16])
@pytest.mark.parametrize("bias", [True, False])
def test_linear(dtype: lumos.DType, bias: bool) -> None:
    rng = np.random.default_rng(4)
    x, w, b = rand(rng, 2, 3, 24, dtype=dtype), rand(rng, 7, 24, dtype=dtype), rand(
        rng, 7, dtype=dtype)
    if bias:
        check(nn.linear, F.linear, [x, w, b], dtype)
    else:
        check(nn.linear, F.linear, [x, w], dtype)


def test_linear_noncontiguous() -> None:
    """The weight stored transposed (in, out) and a sliced input."""
    rng = np.random.default_rng(5)
    x, wt = rand(rng, 4, 10), rand(rng, 6, 5)
    check(lambda a, w: nn.linear(a.narrow(1, 2, 6), w.T),
          lambda a, w: F.linear(a.narrow(1, 2, 6), w.T), [x, wt])


# -- normalization ----------------------------------------------------------------------

@pytest.mark.parametrize("dtype", [F32, F16, BF16])
@pytest.mark.parametrize("ns, affine", [((8,), True), ((8,), False), ((3, 8), True)])
def test_layer_norm(dtype: lumos.DType, ns: tuple, affine: bool) -> None:
    rng = np.random.default_rng(6)
    arrays = [rand(rng, 2, 3, 8, dtype=dtype)]
    if affine:
        arrays += [rand(rng, *ns, dtype=dtype), rand(rng, *ns, dtype=dtype)]
    check(lambda x, *wb: nn.layer_norm(x, ns, *wb, eps=1e-4),
          lambda x, *wb: F.layer_norm(x, ns, *wb, eps=1e-4), arrays, dtype)


def test_layer_norm_noncontiguous_and_errors() -> None:
    rng = np.random.default_rng(7)
    check(lambda x: nn.layer_norm(x.transpose(0, 1), [5]),
          lambda x: F.layer_norm(x.transpose(0, 1), [5]), [rand(rng, 5, 4)])
    g = lumos.Graph()
    x = g.tensor((2, 8))
    with pytest.raises(lumos.ShapeError, match="layer_norm"):
        nn.layer_norm(x, (4,))
    with pytest.raises(lumos.DTypeError, match="layer_norm"):
        nn.layer_norm(g.tensor((2, 8), lumos.i32), 8)


@pytest.mark.parametrize("dtype", [F32, F16, BF16])
@pytest.mark.parametrize("weight, eps", [(True, None), (False, 1e-6), (True, 0.5)])
def test_rms_norm(dtype: lumos.DType, weight: bool, eps: float | None) -> None:
    rng = np.random.default_rng(8)
    arrays = [rand(rng, 3, 16, dtype=dtype)] + ([rand(rng, 16, dtype=dtype)] if weight else [])
    check(lambda x, *w: nn.rms_norm(x, 16, *w, eps=eps),
          lambda x, *w: F.rms_norm(x, [16], *w, eps=eps), arrays, dtype)


@pytest.mark.parametrize("dtype, value", [(F32, 3e-4), (F16, 0.03), (BF16, 0.1)])
def test_rms_norm_default_eps_is_the_dtype_epsilon(dtype: lumos.DType, value: float) -> None:
    """eps defaults to finfo(compute dtype).eps (float32 for halves, as torch does), visible
    when mean(x^2) is about that size."""
    x = random_array(np.random.default_rng(8), (2, 4), dtype, value, value * 2)
    check(lambda t: nn.rms_norm(t, 4), lambda t: F.rms_norm(t, [4]), [x], dtype)


@pytest.mark.parametrize("shape, groups", [((2, 6, 5, 4), 3), ((2, 4, 7), 2), ((1, 4, 3), 4)])
@pytest.mark.parametrize("affine", [True, False])
def test_group_norm(shape: tuple, groups: int, affine: bool) -> None:
    rng = np.random.default_rng(9)
    c = shape[1]
    arrays = [rand(rng, *shape)] + ([rand(rng, c), rand(rng, c)] if affine else [])
    check(lambda x, *wb: nn.group_norm(x, groups, *wb),
          lambda x, *wb: F.group_norm(x, groups, *wb), arrays, atol=1e-4)


def test_group_norm_rejects_indivisible_channels() -> None:
    g = lumos.Graph()
    with pytest.raises(lumos.ShapeError, match="group_norm"):
        nn.group_norm(g.tensor((2, 5, 3)), 2)


@pytest.mark.parametrize("shape", [(2, 3, 4, 5), (4, 3), (2, 3, 6)])
@pytest.mark.parametrize("affine", [True, False])
def test_batch_norm(shape: tuple, affine: bool) -> None:
    rng = np.random.default_rng(10)
    mean, var = rand(rng, 3), rng.uniform(0.2, 2.0, 3).astype(np.float32)
    arrays = [rand(rng, *shape), mean, var] + ([rand(rng, 3), rand(rng, 3)] if affine else [])
    check(lambda x, m, v, *wb: nn.batch_norm(x, m, v, *wb, eps=1e-3),
          lambda x, m, v, *wb: F.batch_norm(x, m, v, *wb, eps=1e-3), arrays)


# -- convolution ------------------------------------------------------------------------

CONV1D = [  # input, weight, stride, padding, dilation, groups, bias
    ((2, 3, 10), (4, 3, 3), 1, 0, 1, 1, True),
    ((1, 4, 11), (6, 2, 4), 2, 1, 1, 2, False),
    ((2, 3, 9), (3, 1, 3), 1, "same", 2, 3, True),
    ((2, 2, 8), (5, 2, 4), 1, "same", 1, 1, False),
    ((3, 7), (2, 3, 2), 3, "valid", 1, 1, True),
    ((1, 2, 13), (2, 2, 5), (2,), (3,), (2,), 1, True),
]


@pytest.mark.parametrize("case", CONV1D)
def test_conv1d(case: tuple) -> None:
    sx, sw, stride, padding, dilation, groups, bias = case
    rng = np.random.default_rng(11)
    arrays = [rand(rng, *sx), rand(rng, *sw)] + ([rand(rng, sw[0])] if bias else [])
    kw = dict(stride=stride, padding=padding, dilation=dilation, groups=groups)
    check(lambda x, w, *b: nn.conv1d(x, w, *b, **kw),
          lambda x, w, *b: F.conv1d(x, w, *b, **kw), arrays, atol=1e-4)


CONV2D = [
    ((2, 3, 7, 6), (4, 3, 3, 3), 1, 0, 1, 1, True),
    ((1, 4, 9, 8), (6, 2, 3, 3), (2, 1), 1, (1, 2), 2, True),
    ((2, 6, 7, 7), (6, 1, 3, 3), 2, 1, 1, 6, False),  # depthwise
    ((1, 2, 6, 5), (3, 2, 2, 4), 1, "same", (2, 1), 1, True),
    ((3, 8, 5), (2, 3, 1, 1), 1, "valid", 1, 1, False),  # unbatched, 1x1
    ((1, 3, 11, 10), (2, 3, 5, 3), (3, 2), (2, 0), 1, 1, True),
]


@pytest.mark.parametrize("case", CONV2D)
def test_conv2d(case: tuple) -> None:
    sx, sw, stride, padding, dilation, groups, bias = case
    rng = np.random.default_rng(12)
    arrays = [rand(rng, *sx), rand(rng, *sw)] + ([rand(rng, sw[0])] if bias else [])
    kw = dict(stride=stride, padding=padding, dilation=dilation, groups=groups)
    check(lambda x, w, *b: nn.conv2d(x, w, *b, **kw),
          lambda x, w, *b: F.conv2d(x, w, *b, **kw), arrays, atol=1e-4)


def test_conv2d_noncontiguous_and_structure() -> None:
    """A permuted weight and a sliced input; one Mul and one SumReduce."""
    rng = np.random.default_rng(13)
    x, w = rand(rng, 2, 3, 9, 8), rand(rng, 3, 3, 3, 4)  # w stored as (kh, kw, c_in, c_out)
    g = check(lambda a, b: nn.conv2d(a.narrow(2, 1, 7), b.permute(3, 2, 0, 1), padding=1),
              lambda a, b: F.conv2d(a.narrow(2, 1, 7), b.permute(3, 2, 0, 1), padding=1),
              [x, w], atol=1e-4)
    assert g.count("Mul") == 1 and g.count("SumReduce") == 1


def test_conv1d_symbolic_length() -> None:
    g = lumos.Graph()
    x, w = g.tensor((1, 2, "t")), g.tensor((3, 2, 3))
    y = nn.conv1d(x, w, stride=2, padding=1).output()
    prog = g.compile(lumos.ReferenceRuntime())
    rng = np.random.default_rng(14)
    wa = rand(rng, 3, 2, 3)
    prog.set_data(w, wa)
    for t in (2, 9, 16):
        xa = rand(rng, 1, 2, t)
        prog.set_data(x, xa)
        prog.execute({"t": t})
        want = F.conv1d(torch.from_numpy(xa), torch.from_numpy(wa), stride=2, padding=1)
        assert_close(prog.get(y), want, atol=1e-4)


def test_conv_errors() -> None:
    g = lumos.Graph()
    x = g.tensor((1, 4, 5, 5))
    before = g.count()
    with pytest.raises(lumos.ShapeError, match="conv2d"):
        nn.conv2d(x, g.tensor((2, 3, 3, 3)))  # 3 input channels expected, 4 given
    with pytest.raises(lumos.ShapeError, match="conv2d"):
        nn.conv2d(x, g.tensor((3, 2, 3, 3)), groups=2)  # 3 outputs over 2 groups
    with pytest.raises(lumos.ShapeError, match="conv2d"):
        nn.conv2d(x, g.tensor((2, 4, 7, 3)))  # kernel taller than the input
    with pytest.raises(ValueError, match="same"):
        nn.conv2d(x, g.tensor((2, 4, 3, 3)), stride=2, padding="same")
    with pytest.raises(lumos.ShapeError, match="conv1d"):
        nn.conv1d(x, g.tensor((2, 4, 3)))
    assert g.count() == before + 5  # only the weight inputs were added


# -- pooling ------------------------------------------------------------------------------

POOL = [  # input, kernel, stride, padding, dilation, ceil_mode
    ((2, 3, 8, 8), 2, None, 0, 1, False),
    ((1, 2, 9, 7), 3, 2, 1, 1, False),
    ((1, 2, 9, 7), 3, 2, 1, 1, True),
    ((1, 1, 10, 11), (3, 2), (2, 3), (1, 0), 1, True),
    ((2, 7, 6), (2, 3), 1, (1, 1), 1, False),  # unbatched
    ((1, 2, 11, 9), 3, 2, 1, (2, 1), True),
    ((1, 1, 5, 5), 2, 2, 1, 1, True),  # ceil mode drops a window starting in the padding
]


@pytest.mark.parametrize("case", POOL)
def test_max_pool2d(case: tuple) -> None:
    """All-negative data: zero padding instead of -inf would change the result."""
    shape, k, s, p, d, ceil = case
    rng = np.random.default_rng(15)
    x = rand(rng, *shape) - 4
    check(lambda t: nn.max_pool2d(t, k, s, p, d, ceil),
          lambda t: F.max_pool2d(t, k, s, p, d, ceil), [x])


def test_max_pool2d_nan_and_integers() -> None:
    x = np.arange(32, dtype=np.float32).reshape(1, 2, 4, 4)
    x[0, 0, 1, 2] = np.nan
    check(lambda t: nn.max_pool2d(t, 2), lambda t: F.max_pool2d(t, 2), [x])
    xi = -np.arange(50, dtype=np.int64).reshape(1, 2, 5, 5)
    check(lambda t: nn.max_pool2d(t, 3, 2, 1, ceil_mode=True),
          lambda t: F.max_pool2d(t, 3, 2, 1, ceil_mode=True), [xi])


@pytest.mark.parametrize("case", [c for c in POOL if c[4] == 1])
@pytest.mark.parametrize("count_include_pad", [True, False])
def test_avg_pool2d(case: tuple, count_include_pad: bool) -> None:
    shape, k, s, p, _, ceil = case
    rng = np.random.default_rng(16)
    check(lambda t: nn.avg_pool2d(t, k, s, p, ceil, count_include_pad),
          lambda t: F.avg_pool2d(t, k, s, p, ceil, count_include_pad), [rand(rng, *shape)])


def test_avg_pool2d_divisor_override_and_errors() -> None:
    rng = np.random.default_rng(17)
    check(lambda t: nn.avg_pool2d(t, 3, 2, 1, divisor_override=5),
          lambda t: F.avg_pool2d(t, 3, 2, 1, divisor_override=5), [rand(rng, 1, 2, 7, 6)])
    g = lumos.Graph()
    with pytest.raises(ValueError, match="padding"):
        nn.avg_pool2d(g.tensor((1, 1, 6, 6)), 2, padding=2)
    with pytest.raises(lumos.ShapeError, match="max_pool2d"):
        nn.max_pool2d(g.tensor((1, 1, 2, 2)), 3)


@pytest.mark.parametrize("shape, out", [((2, 3, 8, 8), 1), ((1, 2, 7, 9), (3, 5)),
                                        ((1, 2, 7, 6), (None, 4)), ((1, 1, 3, 2), (5, 7)),
                                        ((2, 5, 4), (2, 3))])
def test_adaptive_avg_pool2d(shape: tuple, out: int | tuple) -> None:
    rng = np.random.default_rng(18)
    check(lambda t: nn.adaptive_avg_pool2d(t, out),
          lambda t: F.adaptive_avg_pool2d(t, out), [rand(rng, *shape)])


def test_adaptive_avg_pool2d_symbolic() -> None:
    g = lumos.Graph()
    x = g.tensor((1, 3, "h", "w"))
    y = nn.adaptive_avg_pool2d(x, (1, 3)).output()
    prog = g.compile(lumos.ReferenceRuntime())
    rng = np.random.default_rng(19)
    for h, w in ((1, 2), (5, 5), (4, 9)):
        a = rand(rng, 1, 3, h, w)
        prog.set_data(x, a)
        prog.execute()
        assert_close(prog.get(y), F.adaptive_avg_pool2d(torch.from_numpy(a), (1, 3)))


# -- embedding ----------------------------------------------------------------------------

@pytest.mark.parametrize("idx_dtype", [np.int64, np.int32])
def test_embedding(idx_dtype: type) -> None:
    rng = np.random.default_rng(20)
    idx = rng.integers(0, 10, (3, 4)).astype(idx_dtype)
    check(nn.embedding, lambda i, w: F.embedding(i.long(), w), [idx, rand(rng, 10, 6)])
    # a transposed weight (stored (D, V)) and a sliced index tensor
    check(lambda i, w: nn.embedding(i.narrow(1, 1, 2), w.T),
          lambda i, w: F.embedding(i.long().narrow(1, 1, 2), w.T), [idx, rand(rng, 6, 10)])


def test_embedding_errors() -> None:
    g = lumos.Graph()
    with pytest.raises(lumos.DTypeError, match="embedding"):
        nn.embedding(g.tensor((3,)), g.tensor((4, 2)))


# -- attention ----------------------------------------------------------------------------

def sdpa_case(rng: np.random.Generator, q: tuple, k: tuple, v: tuple,
              mask: np.ndarray | None = None, dtype: lumos.DType = F32, **kw: object) -> None:
    arrays = [rand(rng, *q, dtype=dtype), rand(rng, *k, dtype=dtype), rand(rng, *v, dtype=dtype)]
    arrays += [] if mask is None else [mask]
    check(lambda *t: nn.scaled_dot_product_attention(*t[:3], t[3] if len(t) > 3 else None, **kw),
          lambda *t: F.scaled_dot_product_attention(*t[:3], t[3] if len(t) > 3 else None, **kw),
          arrays, dtype, atol=1e-4 if dtype is F32 else None)


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("lq, lk", [(5, 5), (3, 6), (6, 3)])
def test_sdpa_plain_and_causal(causal: bool, lq: int, lk: int) -> None:
    rng = np.random.default_rng(21)
    sdpa_case(rng, (2, 3, lq, 8), (2, 3, lk, 8), (2, 3, lk, 5), is_causal=causal)


def test_sdpa_bool_mask_with_fully_masked_row() -> None:
    rng = np.random.default_rng(22)
    mask = rng.random((2, 1, 4, 6)) < 0.6
    mask[0, 0, 1] = False  # torch gives 0 for a row that attends to nothing
    sdpa_case(rng, (2, 2, 4, 8), (2, 2, 6, 8), (2, 2, 6, 8), mask)


def test_sdpa_additive_mask_and_scale() -> None:
    rng = np.random.default_rng(23)
    mask = rand(rng, 4, 6)
    mask[2, :] = -np.inf
    mask[0, 3] = -np.inf
    sdpa_case(rng, (1, 2, 4, 8), (1, 2, 6, 8), (1, 2, 6, 8), mask, scale=0.3)
    sdpa_case(rng, (4, 8), (6, 8), (6, 3), scale=-1.5)  # no batch or head dims


@pytest.mark.parametrize("dtype", [F16, BF16])
def test_sdpa_half(dtype: lumos.DType) -> None:
    sdpa_case(np.random.default_rng(24), (1, 2, 5, 16), (1, 2, 5, 16), (1, 2, 5, 16),
              dtype=dtype, is_causal=True)


def test_sdpa_gqa() -> None:
    rng = np.random.default_rng(25)
    sdpa_case(rng, (2, 6, 4, 8), (2, 2, 5, 8), (2, 2, 5, 4), enable_gqa=True)
    mask = rng.random((4, 5)) < 0.7
    mask[:, 0] = True
    sdpa_case(rng, (1, 4, 4, 8), (1, 1, 5, 8), (1, 1, 5, 8), mask, enable_gqa=True)


def test_sdpa_symbolic_causal_gqa() -> None:
    """q of shape (b, h, s, d) with symbolic s; the causal mask is a view predicate on a
    0-d constant, and k/v heads are repeated by views."""
    g = lumos.Graph()
    q, k, v = g.tensor((1, 4, "s", 16)), g.tensor((1, 2, "s", 16)), g.tensor((1, 2, "s", 16))
    y = nn.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True).output()
    assert all(n.shape == () for n in g.nodes if n.op == "Constant")
    prog = g.compile(lumos.ReferenceRuntime())
    rng = np.random.default_rng(26)
    for s in (1, 7, 128):
        arrays = [rand(rng, 1, 4, s, 16), rand(rng, 1, 2, s, 16), rand(rng, 1, 2, s, 16)]
        for t, a in zip((q, k, v), arrays, strict=True):
            prog.set_data(t, a)
        prog.execute({"s": s})
        want = F.scaled_dot_product_attention(*map(torch.from_numpy, arrays), is_causal=True,
                                              enable_gqa=True)
        assert_close(prog.get(y), want, atol=1e-4)


def test_sdpa_errors() -> None:
    g = lumos.Graph()
    q, k = g.tensor((1, 6, 4, 8)), g.tensor((1, 4, 4, 8))
    before = g.count()
    with pytest.raises(lumos.ShapeError, match="grouped"):
        nn.scaled_dot_product_attention(q, k, k, enable_gqa=True)
    with pytest.raises(lumos.ShapeError):
        nn.scaled_dot_product_attention(q, k, k)
    with pytest.raises(ValueError, match="is_causal"):
        nn.scaled_dot_product_attention(q, q, q, g.tensor((4, 4), lumos.bool_), is_causal=True)
    with pytest.raises(lumos.DTypeError, match="attn_mask"):
        nn.scaled_dot_product_attention(q, q, q, g.tensor((4, 4), lumos.i32))
    assert g.count() == before + 2
