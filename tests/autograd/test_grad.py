"""lumos.autograd.grad against PyTorch autograd: the primitives and the derived Tensor ops
over hypothesis shapes, f32 and f64, with the differentiated input read through a
non-contiguous view; finite differences; dynamic dims; what carries no gradient."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st

import lumos
from lumos.autograd import grad
from lumos.frontend import nn
from lumos.frontend.tensor import record_vjp
from tests.helpers import assert_close, run

F32, F64 = lumos.f32, lumos.f64
LAYOUTS = ("contiguous", "permuted", "stepped", "expanded", "flipped")
Draw = Callable[..., Any]


def layout(name: str, shape: tuple[int, ...]) -> tuple[tuple[int, ...], Callable[[Any], Any]]:
    """(shape of the parameter, the view edit that shows it to the op as `shape`); the
    edit uses methods lumos and torch share."""
    nd = len(shape)
    if nd == 0 or name == "contiguous":
        return shape, lambda t: t
    if name == "permuted":
        return shape[::-1], lambda t: t.permute(*reversed(range(nd)))
    if name == "stepped":
        return (*shape[:-1], 2 * shape[-1]), lambda t: t[..., 1::2]
    if name == "expanded":
        return (1, *shape[1:]), lambda t: t.expand(*shape)
    return shape, lambda t: t.flip(-1)


# -- shape strategies: (float input shapes, keyword arguments) ---------------------------

def _shape(draw: Draw, lo: int = 1, hi: int = 3) -> tuple[int, ...]:
    return tuple(draw(st.lists(st.integers(1, 4), min_size=lo, max_size=hi)))


def one(draw: Draw) -> tuple[list, dict]:
    return [_shape(draw, 0)], {}


def two(draw: Draw) -> tuple[list, dict]:
    """Two broadcasting shapes (the second a suffix of the first with some 1s)."""
    a = _shape(draw)
    b = tuple(s if draw(st.booleans()) else 1 for s in a[draw(st.integers(0, len(a) - 1)):])
    return [a, b], {}


def dim(draw: Draw) -> tuple[list, dict]:
    s = _shape(draw)
    return [s], {"dim": draw(st.integers(-len(s), len(s) - 1))}


def square(draw: Draw) -> tuple[list, dict]:
    n = draw(st.integers(1, 4))
    return [(*_shape(draw, 0, 1), n, n)], {}


def matmul(draw: Draw) -> tuple[list, dict]:
    m, k, n = (draw(st.integers(1, 4)) for _ in range(3))
    batch = _shape(draw, 0, 2)
    a = (m, k) if draw(st.booleans()) else (*batch, m, k)
    b = (k,) if draw(st.booleans()) and draw(st.booleans()) else (*batch[1:], k, n)
    return [a, b], {}


def linear(draw: Draw) -> tuple[list, dict]:
    i, o = draw(st.integers(1, 4)), draw(st.integers(1, 4))
    return [(*_shape(draw, 1, 2), i), (o, i), (o,)], {}


def norm(draw: Draw) -> tuple[list, dict]:
    s = _shape(draw, 2, 3)
    return [s, s[-1:], s[-1:]], {}


def attention(draw: Draw) -> tuple[list, dict]:
    b, h, t, e = (draw(st.integers(1, 3)) for _ in range(4))
    return [(b, h, t, e)] * 3, {"is_causal": draw(st.booleans())}


def conv(draw: Draw) -> tuple[list, dict]:
    c, o, k = draw(st.integers(1, 3)), draw(st.integers(1, 3)), draw(st.integers(1, 3))
    length = draw(st.integers(k, 7))
    return [(draw(st.integers(1, 2)), c, length), (o, c, k)], {
        "stride": draw(st.integers(1, 2)), "padding": draw(st.integers(0, 1))}


def image(draw: Draw) -> tuple[list, dict]:
    return [(draw(st.integers(1, 2)), draw(st.integers(1, 2)), *(2 * draw(st.integers(1, 3))
                                                                   for _ in range(2)))], {}


def scattered(draw: Draw) -> tuple[list, dict]:
    """A 2-d destination and a source with at most as many columns."""
    a = _shape(draw, 2, 2)
    return [a, (a[0], draw(st.integers(1, a[1])))], {}


def cat(draw: Draw) -> tuple[list, dict]:
    a = _shape(draw)
    d = draw(st.integers(0, len(a) - 1))
    b = list(a)
    b[d] = draw(st.integers(1, 3))
    return [a, tuple(b)], {"dim": d}


# -- integer inputs -------------------------------------------------------------------------

def gather_index(rng: np.random.Generator, shapes: list, kw: dict) -> list[np.ndarray]:
    s, d = shapes[0], kw["dim"]
    shape = list(s)
    shape[d] = int(rng.integers(1, 4))
    return [rng.integers(0, s[d], shape)]


def rows(rng: np.random.Generator, shapes: list, kw: dict) -> list[np.ndarray]:
    return [rng.integers(0, shapes[0][0], int(rng.integers(1, 5)))]


def scatter_index(rng: np.random.Generator, shapes: list, kw: dict) -> list[np.ndarray]:
    """Distinct positions along the last dim (torch leaves duplicates unspecified)."""
    s, n = shapes[0], shapes[1][-1]
    return [np.stack([rng.permutation(s[-1])[:n] for _ in range(s[0])])]


@dataclass
class Op:
    lumos: Callable[..., lumos.Tensor]
    torch: Callable[..., torch.Tensor]
    draw: Callable[[Draw], tuple[list, dict]] = one
    low: float = -2.0
    high: float = 2.0
    ints: Callable[..., list[np.ndarray]] | None = None
    tol: float = 1.0  # tolerance scale (approximations: the erf fit behind gelu)
    layouts: tuple[str, ...] = LAYOUTS


def _same(fn: str, **kw: Any) -> tuple[Callable, Callable]:
    """A method both frameworks have under the same name."""
    return (lambda x, **k: getattr(x, fn)(**kw, **k)), (lambda x, **k: getattr(x, fn)(**kw, **k))


NO_TIES = ("contiguous", "permuted", "stepped", "flipped")  # tied maxima split differently

OPS: dict[str, Op] = {
    # primitives (through their Tensor ops)
    "exp2": Op(lumos.exp2, torch.exp2),
    "log2": Op(lumos.log2, torch.log2, low=0.3),
    "sin": Op(lumos.sin, torch.sin),
    "sqrt": Op(lumos.sqrt, torch.sqrt, low=0.3),
    "reciprocal": Op(lumos.reciprocal, torch.reciprocal, low=0.3),
    "add": Op(lumos.add, torch.add, two),
    "mul": Op(lumos.mul, torch.mul, two),
    "fmod": Op(lumos.fmod, torch.fmod, two, low=0.3),
    "sum": Op(*_same("sum"), dim),
    "amax": Op(*_same("amax"), dim),
    "cast": Op(lambda x: x.to(F32).to(F64) * x, lambda x: x.float().double() * x),
    "gather": Op(lambda x, i, dim: x.gather(dim, i), lambda x, i, dim: x.gather(dim, i), dim,
                 ints=gather_index),
    "scatter": Op(lambda x, s, i: x.scatter(-1, i, s), lambda x, s, i: x.scatter(-1, i, s),
                  scattered, ints=scatter_index),
    # elementwise
    "exp": Op(lumos.exp, torch.exp),
    "log": Op(*_same("log"), low=0.3),
    "cos": Op(lumos.cos, torch.cos),
    "rsqrt": Op(lumos.rsqrt, torch.rsqrt, low=0.3),
    "tanh": Op(lumos.tanh, torch.tanh),
    "sigmoid": Op(lumos.sigmoid, torch.sigmoid),
    "relu": Op(lumos.relu, torch.relu),
    "gelu": Op(lumos.gelu, F.gelu),
    "gelu_tanh": Op(lambda x: x.gelu("tanh"), lambda x: F.gelu(x, approximate="tanh")),
    "silu": Op(lumos.silu, F.silu),
    "softplus": Op(lumos.softplus, F.softplus),
    "erf": Op(lumos.erf, torch.erf),
    "abs": Op(lumos.abs, torch.abs),
    "neg": Op(lambda x: -x, lambda x: -x),
    "cube": Op(lambda x: x ** 3, lambda x: x ** 3),
    "pow_frac": Op(lambda x: x ** 1.7, lambda x: x ** 1.7, low=0.3),
    "pow": Op(lumos.pow, torch.pow, two, low=0.3),
    "clamp": Op(lambda x: x.clamp(-1.0, 1.0), lambda x: x.clamp(-1.0, 1.0)),
    "floor": Op(lambda x: lumos.Tensor.floor(x) * x, lambda x: x.floor() * x),
    "sub": Op(lumos.sub, torch.sub, two),
    "div": Op(lumos.div, torch.div, two, low=0.3),
    "remainder": Op(lumos.remainder, torch.remainder, two, low=0.3),
    "maximum": Op(lumos.maximum, torch.maximum, two),
    "minimum": Op(lumos.minimum, torch.minimum, two),
    "where": Op(lambda a, b: lumos.where(a > b, a, b * 2),
                lambda a, b: torch.where(a > b, a, b * 2), two),
    "masked_fill": Op(lambda x: x.masked_fill(x > 0.5, 3.0), lambda x: x.masked_fill(x > 0.5, 3.0)),
    # reductions
    "mean": Op(*_same("mean", keepdim=True), dim),
    "var": Op(*_same("var"), dim),
    "std": Op(*_same("std"), dim),
    "amin": Op(*_same("amin"), dim),
    "max_dim": Op(lambda x, dim: x.max(dim)[0], lambda x, dim: x.max(dim)[0], dim,
                  layouts=NO_TIES),
    "min_dim": Op(lambda x, dim: x.min(dim)[0], lambda x, dim: x.min(dim)[0], dim,
                  layouts=NO_TIES),
    "prod": Op(*_same("prod"), dim),
    "cumsum": Op(*_same("cumsum"), dim),
    "logsumexp": Op(*_same("logsumexp"), dim),
    "softmax": Op(*_same("softmax"), dim),
    "log_softmax": Op(*_same("log_softmax"), dim),
    # movement
    "permute": Op(lambda x: x.permute(*reversed(range(x.ndim))),
                  lambda x: x.permute(*reversed(range(x.ndim))), lambda d: ([_shape(d)], {})),
    "expand": Op(lambda x: x.expand(2, *x.shape), lambda x: x.expand(2, *x.shape)),
    "reshape": Op(lambda x: x.reshape(-1), lambda x: x.reshape(-1)),
    "slice": Op(lambda x: x[::-2, 1:], lambda x: x.flip(0)[::2, 1:], lambda d: (
        [_shape(d, 2, 3)], {})),
    "pad": Op(lambda x: x.pad((1, 2, 0, 1)), lambda x: F.pad(x, (1, 2, 0, 1)),
              lambda d: ([_shape(d, 2, 3)], {})),
    "flip": Op(lambda x: x.flip(0), lambda x: x.flip(0), lambda d: ([_shape(d)], {})),
    "roll": Op(lambda x: x.roll(2, -1), lambda x: x.roll(2, -1), lambda d: ([_shape(d)], {})),
    # a roll over several axes (no dims) of a permuted, strided or broadcast view is not
    # supported (a LumosError: the index holds a carry between axes)
    "roll_flat": Op(lambda x: x.roll(3), lambda x: x.roll(3), lambda d: ([_shape(d)], {}),
                    layouts=("contiguous", "flipped")),
    "repeat": Op(lambda x: x.repeat(2, 3), lambda x: x.repeat(2, 3),
                 lambda d: ([_shape(d, 1, 2)], {})),
    "cat": Op(lambda a, b, dim: lumos.cat([a, b], dim), lambda a, b, dim: torch.cat([a, b], dim),
              cat),
    "stack": Op(lambda a, b: lumos.stack([a, b], -1), lambda a, b: torch.stack([a, b], -1),
                lambda d: ([_shape(d)] * 2, {})),
    "tril": Op(lambda x: x.tril(), lambda x: x.tril(), square),
    "getitem": Op(lambda x, i: x[i, ..., :1], lambda x, i: x[i, ..., :1],
                  lambda d: ([_shape(d, 2, 3)], {}), ints=rows),
    "index_select": Op(lambda x, i: x.index_select(0, i), lambda x, i: x.index_select(0, i),
                       lambda d: ([_shape(d)], {}), ints=rows),
    # nn
    "matmul": Op(lambda a, b: a @ b, lambda a, b: a @ b, matmul),
    "linear": Op(nn.linear, F.linear, linear),
    "layer_norm": Op(lambda x, w, b: nn.layer_norm(x, x.shape[-1:], w, b),
                     lambda x, w, b: F.layer_norm(x, x.shape[-1:], w, b), norm, tol=10),
    "rms_norm": Op(lambda x, w, b: nn.rms_norm(x, x.shape[-1:], w) + b,
                   lambda x, w, b: F.rms_norm(x, x.shape[-1:], w) + b, norm, tol=10),
    "embedding": Op(lambda w, i: nn.embedding(i, w), lambda w, i: F.embedding(i, w),
                    lambda d: ([_shape(d, 2, 2)], {}), ints=rows),
    "attention": Op(nn.scaled_dot_product_attention, F.scaled_dot_product_attention,
                    attention, tol=10),
    "conv1d": Op(nn.conv1d, F.conv1d, conv, layouts=("contiguous", "permuted")),
    "max_pool2d": Op(lambda x: nn.max_pool2d(x, 2), lambda x: F.max_pool2d(x, 2), image,
                     layouts=NO_TIES),
    "avg_pool2d": Op(lambda x: nn.avg_pool2d(x, 2, padding=1),
                     lambda x: F.avg_pool2d(x, 2, padding=1), image),
}


def check(op: Op, shapes: list, kw: dict, dtype: lumos.DType, lay: str, seed: int) -> None:
    """Gradients of sum(op(inputs) * random weights) w.r.t. every float input; the first
    input is read through the view `lay`."""
    rng = np.random.default_rng(seed)
    pshape, edit = layout(lay, shapes[0])
    arrays = [rng.uniform(op.low, op.high, s).astype(dtype.np) for s in [pshape, *shapes[1:]]]
    ints = op.ints(rng, shapes, kw) if op.ints else []
    g = lumos.Graph()
    params = [g.tensor(a.shape, dtype) for a in arrays]
    idx = [g.tensor(a.shape, lumos.i64) for a in ints]
    out = op.lumos(edit(params[0]), *params[1:], *idx, **kw)
    w = rng.standard_normal(tuple(int(s) for s in out.shape)).astype(dtype.np)
    wt = g.tensor(w.shape, dtype)
    grads = grad((out * wt).sum(), params)
    feeds = {**dict(zip(params, arrays, strict=True)), **dict(zip(idx, ints, strict=True))}
    got = run(grads, {**feeds, wt: w})

    tp = [torch.tensor(a, requires_grad=True) for a in arrays]
    tout = op.torch(edit(tp[0]), *tp[1:], *[torch.tensor(a) for a in ints], **kw)
    want = torch.autograd.grad((tout * torch.tensor(w)).sum(), tp, allow_unused=True)
    rtol, atol = (1e-4, 2e-5) if dtype is F32 else (1e-9, 1e-11)
    for gv, wv, a in zip(got, want, arrays, strict=True):
        assert_close(gv, np.zeros_like(a) if wv is None else wv, dtype,
                     rtol=rtol * op.tol, atol=atol * op.tol)


@pytest.mark.parametrize("name", list(OPS))
@pytest.mark.filterwarnings("ignore:.*degrees of freedom")  # var/std of one element: NaN
@settings(max_examples=6)
@given(data=st.data())
def test_grad_matches_torch(name: str, data: st.DataObject) -> None:
    op = OPS[name]
    shapes, kw = op.draw(data.draw)
    dtype = data.draw(st.sampled_from((F32, F64)), label="dtype")
    lay = data.draw(st.sampled_from(op.layouts), label="layout")
    check(op, shapes, kw, dtype, lay, data.draw(st.integers(0, 2**16), label="seed"))


# -- finite differences ------------------------------------------------------------------------

def _mlp(x: Any, w: Any, v: Any) -> Any:
    h = (x @ w).tanh()
    return (h.softmax(-1) * v).sum() + (h * h).mean()


def _conv(x: Any, w: Any, v: Any) -> Any:
    m = nn.conv1d if isinstance(x, lumos.Tensor) else F.conv1d
    return (m(x, w, padding=1).relu() * v).sum()


def _select(x: Any, w: Any, v: Any) -> Any:
    wh = lumos.where if isinstance(x, lumos.Tensor) else torch.where
    return (wh(x > 0, x * w.sum(), v.exp()) ** 2).sum()


@pytest.mark.parametrize("fn,shapes", [
    (_mlp, [(3, 4), (4, 5), (3, 5)]),
    (_conv, [(2, 3, 6), (4, 3, 3), (2, 4, 6)]),
    (_select, [(3, 4), (2,), (3, 4)]),
])
def test_finite_differences(fn: Callable, shapes: list) -> None:
    """Central differences of the compiled loss (float64) agree with the gradient."""
    rng = np.random.default_rng(0)
    arrays = [rng.uniform(-1, 1, s) for s in shapes]
    g = lumos.Graph()
    params = [g.tensor(s, F64) for s in shapes]
    loss = fn(*params)
    grads = grad(loss, params)
    for t in (loss, *grads):
        t.output()
    prog = g.compile(lumos.ReferenceRuntime())
    for p, a in zip(params, arrays, strict=True):
        prog.set_data(p, a.copy())
    prog.execute()
    got = [prog.get(t).copy() for t in grads]
    h = 1e-6
    for p, a, gv in zip(params, arrays, got, strict=True):
        num = np.zeros_like(a)
        for i in np.ndindex(a.shape):
            vals = []
            for sign in (1, -1):
                b = a.copy()
                b[i] += sign * h
                prog.set_data(p, b)
                prog.execute()
                vals.append(float(prog.get(loss)))
            num[i] = (vals[0] - vals[1]) / (2 * h)
        prog.set_data(p, a)
        np.testing.assert_allclose(gv, num, rtol=1e-5, atol=1e-7)


# -- dynamic dims ------------------------------------------------------------------------------

def test_dynamic_dim_gradients_at_two_sizes() -> None:
    """One compiled backward graph over a sequence dim `s`, run at s = 3 and s = 6."""
    g = lumos.Graph()
    g.dim("s", 1, 16)
    x, w = g.tensor(("s", 4), F64), g.tensor((4, 5), F64)
    tok, tgt = g.tensor(("s",), lumos.i64), g.tensor(("s",), lumos.i64)
    emb = g.tensor((7, 4), F64)
    h = x + nn.embedding(tok, emb)
    q = h.unsqueeze(0)
    logits = nn.scaled_dot_product_attention(q, q, q, is_causal=True)[0] @ w
    loss = -logits.log_softmax(-1).gather(1, tgt.unsqueeze(1)).mean() + \
        logits[1:].pad((0, 0, 0, 1)).cumsum(0).sum() * 0.1
    grads = grad(loss, [x, w, emb])
    for t in grads:
        t.output()
    prog = g.compile(lumos.ReferenceRuntime())
    rng = np.random.default_rng(0)
    W, E = rng.standard_normal((4, 5)), rng.standard_normal((7, 4))
    prog.set_data(w, W)
    prog.set_data(emb, E)
    for n in (3, 6):
        X, T, Y = rng.standard_normal((n, 4)), rng.integers(0, 7, n), rng.integers(0, 5, n)
        for t, a in ((x, X), (tok, T), (tgt, Y)):
            prog.set_data(t, a)
        prog.execute()
        tx, tw, te = (torch.tensor(a, requires_grad=True) for a in (X, W, E))
        th = (tx + F.embedding(torch.tensor(T), te))[None]
        tl = F.scaled_dot_product_attention(th, th, th, is_causal=True)[0] @ tw
        tloss = F.cross_entropy(tl, torch.tensor(Y)) + \
            F.pad(tl[1:], (0, 0, 0, 1)).cumsum(0).sum() * 0.1
        for got, want in zip(grads, torch.autograd.grad(tloss, [tx, tw, te]), strict=True):
            assert_close(prog.get(got), want, F64)


# -- structure, integers, errors ------------------------------------------------------------------

def test_view_adjoints_are_views() -> None:
    """Through permute, slice, flip and pad the gradient is read back through a view: the
    backward adds one Mul and nothing else; through a broadcast, one SumReduce."""
    g = lumos.Graph()
    x = g.tensor((3, 4), F64)
    y = x.T[1:, ::2].flip(0).pad((1, 0))
    w = g.tensor(tuple(y.shape), F64)
    loss = (y * w).sum()
    before = {op: g.count(op) for op in ("Mul", "SumReduce", "Add")}
    (d,) = grad(loss, [x])
    assert {op: g.count(op) for op in before} == {**before, "Mul": before["Mul"] + 1}
    v = g.tensor((4,), F64)
    loss = (v.expand(3, 4) * x).sum()
    before = g.count("SumReduce")
    (dv,) = grad(loss, [v])
    assert g.count("SumReduce") == before + 1


def test_where_adjoint_is_linear_in_size() -> None:
    """where's Gather is read back as two view reads: no node of the backward holds more
    elements than the data it selects from."""
    g = lumos.Graph()
    a, b = g.tensor((64, 64), F32), g.tensor((64, 64), F32)
    loss = lumos.where(a > b, a, b).sum()
    n = g.count()
    grad(loss, [a, b])
    for node in g.nodes[n:]:
        size = int(np.prod([s.value for s in node.shape]))
        assert size <= 2 * 64 * 64, node


def test_composite_ops_use_their_recorded_vjp() -> None:
    """gelu and softmax are differentiated by their closed forms (record_vjp), not
    through their formulation (a 13-step series, a max shift compared back); a parameter
    inside a recorded op's formulation falls back to the primitives' rules."""
    g = lumos.Graph()
    x = g.tensor((4, 5), F32)
    for f in (lumos.gelu, lambda t: t.softmax(-1), lambda t: t.log_softmax(-1)):
        loss = (f(x) * x).sum()
        n = g.count()
        grad(loss, [x])
        assert g.count() - n < 16 and "MaxReduce" not in {m.op for m in g.nodes[n:]}
    h = x * 2.0
    y = record_vjp(lumos.exp(h), x, lambda g: g * 0.0)  # a wrong VJP
    a = np.random.default_rng(0).standard_normal((4, 5)).astype(np.float32)
    (dx,) = grad(y.sum(), [x])
    dx2, dh = grad(y.sum(), [x, h])
    got = run([dx, dx2, dh], {x: a})
    assert_close(got[0], np.zeros((4, 5)), F32)  # the recorded VJP is what grad uses
    assert_close(got[1], 2 * np.exp(2 * a), F32)
    assert_close(got[2], np.exp(2 * a), F32)


def test_embedding_gradient_is_one_hot_matrix_product() -> None:
    """The weight gradient of an embedding is one SumReduce of g times a one-hot matrix
    compared on the token ids (not their broadcast over the width): BLAS-shaped."""
    g = lumos.Graph()
    w, tok = g.tensor((7, 5), F32), g.tensor((3, 4), lumos.i64)
    loss = (nn.embedding(tok, w) ** 2).sum()
    n = g.count()
    (dw,) = grad(loss, [w])
    new = g.nodes[n:]
    assert "Gather" not in {m.op for m in new}
    (s,) = [m for m in new if m.op == "SumReduce"]
    assert g.nodes[s.inputs[0]].op == "Mul" and s.views[0].shape[-1].value == 12
    assert max(int(np.prod([e.value for e in m.shape])) for m in new) <= 3 * 4 * 5 * 7


def test_integer_paths_carry_no_gradient() -> None:
    """Indices, comparisons and integer casts are not differentiated; the gradient flows
    only into the gathered data, and an unused parameter gets zeros."""
    g = lumos.Graph()
    x, unused = g.tensor((3, 4), F64), g.tensor((2,), F64)
    i = x.argmax(-1, keepdim=True)
    loss = (x.gather(1, i) * (x > 0).to(F64) + x.to(lumos.i64).to(F64)).sum()
    dx, du = grad(loss, [x, unused])
    a = np.random.default_rng(0).uniform(-2, 2, (3, 4))
    got = run([dx, du], {x: a, unused: np.ones(2)})
    tx = torch.tensor(a, requires_grad=True)
    tl = (tx.gather(1, tx.argmax(-1, keepdim=True)) * (tx > 0).double() + tx.long().double()).sum()
    assert_close(got[0], torch.autograd.grad(tl, tx)[0], F64)
    assert_close(got[1], np.zeros(2), F64)


def test_grad_output_weights_a_non_scalar_loss() -> None:
    g = lumos.Graph()
    x, go = g.tensor((3, 4), F64), g.tensor((4,), F64)
    (dx,) = grad(x.softmax(0).sum(0), [x], grad_output=go)
    a, b = np.random.default_rng(0).standard_normal((3, 4)), np.arange(4.0)
    tx = torch.tensor(a, requires_grad=True)
    want = torch.autograd.grad(tx.softmax(0).sum(0), tx, torch.tensor(b))[0]
    assert_close(run([dx], {x: a, go: b})[0], want, F64)


def test_errors() -> None:
    g = lumos.Graph()
    x, i = g.tensor((3, 4), F32), g.tensor((3,), lumos.i32)
    with pytest.raises(lumos.DTypeError, match="grad: parameter 1 .* i32"):
        grad(x.sum(), [x, i])
    with pytest.raises(lumos.ShapeError, match="grad: the loss has shape"):
        grad(x * 2, [x])
    with pytest.raises(lumos.DTypeError, match="grad: the loss must be a float"):
        grad(i.sum(), [x])
    with pytest.raises(ValueError, match="view of node"):
        grad(x.sum(), [x.T])
    with pytest.raises(ValueError, match="another graph"):
        grad(x.sum(), [lumos.Graph().tensor((3, 4))])
    y = g.tensor((3,), F32)
    with pytest.raises(lumos.LumosError, match=r"cannot propagate a gradient through View\("):
        grad(y.repeat(2)[1::2].sum(), [y])
