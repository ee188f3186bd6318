"""Reductions against PyTorch: shapes with size-0/1 dims, dims (None, int, tuple,
negative), keepdim, every dtype, non-contiguous inputs, infinities and NaN."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st

import lumos
from lumos.dtype import as_dtype, f32_to_bf16
from lumos.frontend import reduce as R
from tests.helpers import TORCH_DTYPES, assert_close, random_array, run, to_torch

FLOATS = ("f32", "f64", "f16", "bf16")
INTS = ("i8", "u8", "i16", "i32", "i64")
ALL = FLOATS + INTS + ("bool",)
LAYOUTS = ("contiguous", "permuted", "expanded", "stepped", "padded")
SPECIALS = np.array([-2, -1, 0, 1, 2, np.inf, -np.inf, np.nan])


# each dtype is its own test item; hypothesis draws the rest
PER_DTYPE = settings(max_examples=max(settings().max_examples // 4, 8))


@dataclass(frozen=True)
class Case:
    shape: tuple[int, ...]
    layout: str
    special: bool  # floats drawn from SPECIALS: ties, infinities, NaN
    seed: int
    dim: object
    keepdim: bool


@st.composite
def cases(draw: st.DrawFn, tuples: bool = True, none: bool = True) -> Case:
    """A shape (sizes 1-5, one size 0 in a quarter of the cases), a layout, data, and a
    dim: None, an int or a tuple of distinct dims, some negative."""
    nd = draw(st.sampled_from((0, 1, 2, 2, 3, 3)))
    shape = draw(st.lists(st.sampled_from((1, 2, 3, 5)), min_size=nd, max_size=nd))
    if nd and draw(st.sampled_from((False, False, False, True))):
        shape[draw(st.integers(0, nd - 1))] = 0
    kinds = ["int"] + ["none"] * none + ["tuple"] * (tuples and nd > 0)
    kind = draw(st.sampled_from(kinds))
    dim: object = None
    if kind == "int":
        dim = draw(st.integers(-max(nd, 1), max(nd, 1) - 1))
    elif kind == "tuple":
        axes = draw(st.lists(st.integers(0, nd - 1), min_size=1, max_size=nd, unique=True))
        dim = tuple(a - nd if draw(st.booleans()) else a for a in axes)
    return Case(tuple(shape), draw(st.sampled_from(LAYOUTS)), draw(st.booleans()),
                draw(st.integers(0, 99)), dim, draw(st.booleans()))


def build(case: Case, dtype: str) -> tuple[lumos.Tensor, torch.Tensor, dict]:
    """A lumos tensor of `case.shape` read through a view of a graph input as
    `case.layout` says, the same values in torch, and the feed."""
    shape, nd = case.shape, len(case.shape)
    layout = case.layout
    if (nd == 0 or (layout == "padded" and shape[-1] < 2)
            or (layout == "expanded" and shape[0] == 0)):
        layout = "contiguous"
    base = {"contiguous": shape, "permuted": shape[::-1], "expanded": (1, *shape[1:]),
            "stepped": (*shape[:-1], 2 * shape[-1] + 1),
            "padded": (*shape[:-1], shape[-1] - 2)}[layout] if nd else (1,)
    dt = as_dtype(dtype)
    rng = np.random.default_rng(case.seed)
    if case.special and dt.is_float:
        vals = rng.choice(SPECIALS, size=base, p=[0.12] * 5 + [0.13, 0.13, 0.14])
        arr = f32_to_bf16(vals.astype(np.float32)) if dt is lumos.bf16 else vals.astype(dt.np)
    else:
        arr = random_array(rng, base, dt)
    g = lumos.Graph()
    inp = g.tensor(base, dt)
    x, t = inp, to_torch(arr, dt)
    if nd == 0:
        x, t = x.reshape(()), t.reshape(())
    elif layout == "permuted":
        x, t = x.permute(*reversed(range(nd))), t.permute(*reversed(range(nd)))
    elif layout == "expanded":
        x, t = x.expand(*shape), t.expand(*shape)
    elif layout == "stepped":  # elements 2n, 2n-2, ..., 2 of the last axis
        n = shape[-1]
        x = x._with_view(x.view.slice(nd - 1, 2 * n, n, -2))
        t = t.flip(-1)[..., 0:2 * n:2]
    elif layout == "padded":
        x, t = x.pad((1, 1)), F.pad(t, (1, 1))
    assert x.shape == tuple(t.shape) == shape
    return x, t, {inp: arr}


def check(case: Case, dtype: str, fn: Callable, torch_fn: Callable, rtol: float | None = None,
          atol: float | None = None) -> None:
    """fn(x) matches torch_fn(t) in values and dtypes; where torch raises, lumos raises
    its own error and leaves the graph as it was."""
    x, t, feeds = build(case, dtype)
    try:
        want = torch_fn(t)
    except (RuntimeError, IndexError):
        before = len(x.graph.nodes)
        with pytest.raises(lumos.LumosError):
            fn(x)
        assert len(x.graph.nodes) == before
        return
    got = fn(x)
    wants, gots = (want, got) if isinstance(want, tuple) else ((want,), (got,))
    assert len(gots) == len(wants)
    for o, w in zip(gots, wants, strict=True):
        assert TORCH_DTYPES[o.dtype.name] == w.dtype, (o.dtype, w.dtype)
    for r, o, w in zip(run(list(gots), feeds), gots, wants, strict=True):
        assert_close(r, w, o.dtype, rtol=rtol, atol=atol)


# -- against torch over generated cases --------------------------------------------------

@pytest.mark.parametrize("dtype", ALL)
@PER_DTYPE
@given(cases())
def test_sum(dtype: str, case: Case) -> None:
    d, k = case.dim, case.keepdim
    check(case, dtype, lambda x: R.sum(x, d, k), lambda t: torch.sum(t, d, k))


@pytest.mark.parametrize("dtype", FLOATS + ("i32",))
@PER_DTYPE
@given(cases(), st.sampled_from([None, "f64"]))
def test_mean(dtype: str, case: Case, out: str | None) -> None:
    d, k = case.dim, case.keepdim
    check(case, dtype, lambda x: x.mean(d, k, dtype=out),
          lambda t: t.mean(d, k, dtype=out and TORCH_DTYPES[out]))


@pytest.mark.parametrize("dtype", FLOATS + ("i64",))
@PER_DTYPE
@given(cases(), st.sampled_from([None, 0, 1, 2, "unbiased=False"]))
def test_var_std(dtype: str, case: Case, corr: int | str | None) -> None:
    d, k = case.dim, case.keepdim
    kw = {"unbiased": False} if corr == "unbiased=False" else {"correction": corr}
    check(case, dtype, lambda x: (R.var(x, d, keepdim=k, **kw), x.std(d, keepdim=k, **kw)),
          lambda t: (torch.var(t, d, keepdim=k, **kw), t.std(d, keepdim=k, **kw)),
          rtol=1e-4 if dtype == "f32" else None)


@pytest.mark.parametrize("dtype", ALL)
@PER_DTYPE
@given(cases(tuples=False))
def test_max_min(dtype: str, case: Case) -> None:
    d, k = case.dim, case.keepdim
    if d is None:
        check(case, dtype, lambda x: (x.min(), R.max(x)), lambda t: (t.min(), torch.max(t)))
    else:
        check(case, dtype, lambda x: (*x.min(d, k), *R.max(x, d, k)),
              lambda t: (*t.min(d, k), *torch.max(t, d, k)))


@pytest.mark.parametrize("dtype", ALL)
@PER_DTYPE
@given(cases())
def test_amax_amin(dtype: str, case: Case) -> None:
    d, k = () if case.dim is None else case.dim, case.keepdim
    check(case, dtype, lambda x: (x.amin(d, k), R.amax(x, d, k)),
          lambda t: (t.amin(d, k), torch.amax(t, d, k)))


@pytest.mark.parametrize("dtype", ALL)
@PER_DTYPE
@given(cases(tuples=False))
def test_argmax_argmin(dtype: str, case: Case) -> None:
    d, k = case.dim, case.keepdim
    check(case, dtype, lambda x: (x.argmin(d, k), R.argmax(x, d, k)),
          lambda t: (t.argmin(d, k), torch.argmax(t, d, k)))


def _prod_f32(t: torch.Tensor, *args: object) -> torch.Tensor:
    """torch.prod, but f16/bf16 accumulate in f32 (torch rounds after every product;
    lumos rounds once, as its sums do)."""
    if t.dtype in (torch.float16, torch.bfloat16):
        return torch.prod(t.float(), *args).to(t.dtype)
    return torch.prod(t, *args)


@pytest.mark.parametrize("dtype", ALL)
@PER_DTYPE
@given(cases(tuples=False))
def test_prod(dtype: str, case: Case) -> None:
    d, k = case.dim, case.keepdim
    if d is None:
        check(case, dtype, R.prod, _prod_f32, rtol=1e-4)
    else:
        check(case, dtype, lambda x: x.prod(d, k), lambda t: _prod_f32(t, d, k), rtol=1e-4)


@pytest.mark.parametrize("dtype", ALL)
@PER_DTYPE
@given(cases())
def test_any_all(dtype: str, case: Case) -> None:
    d, k = case.dim, case.keepdim
    check(case, dtype, lambda x: (x.all(d, k), R.any(x, d, k)),
          lambda t: (t.all(d, k), torch.any(t, d, k)))


@pytest.mark.parametrize("dtype", FLOATS + ("i16", "bool"))
@PER_DTYPE
@given(cases(none=False))
def test_logsumexp(dtype: str, case: Case) -> None:
    d, k = case.dim, case.keepdim
    check(case, dtype, lambda x: R.logsumexp(x, d, k), lambda t: torch.logsumexp(t, d, k))


@pytest.mark.parametrize("dtype", ALL)
@PER_DTYPE
@given(cases(tuples=False, none=False), st.sampled_from([None, "f64", "i32"]))
def test_cumsum(dtype: str, case: Case, out: str | None) -> None:
    d = case.dim
    check(case, dtype, lambda x: x.cumsum(d, dtype=out),
          lambda t: torch.cumsum(t, d, dtype=out and TORCH_DTYPES[out]))


@pytest.mark.parametrize("dtype", FLOATS)
@PER_DTYPE
@given(cases(tuples=False, none=False), st.sampled_from([None, "f32", "f64"]))
def test_softmax_log_softmax(dtype: str, case: Case, out: str | None) -> None:
    d, tdt = case.dim, out and TORCH_DTYPES[out]
    check(case, dtype, lambda x: (R.softmax(x, d, out), x.log_softmax(d, dtype=out)),
          lambda t: (torch.softmax(t, d, dtype=tdt), t.log_softmax(d, dtype=tdt)))


@PER_DTYPE
@given(cases(), st.sampled_from(["f64", "i64", "f32"]))
def test_sum_dtype_argument(case: Case, out: str) -> None:
    check(case, "i8", lambda x: R.sum(x, case.dim, case.keepdim, dtype=out),
          lambda t: t.sum(case.dim, case.keepdim, dtype=TORCH_DTYPES[out]))


# -- exact corners ----------------------------------------------------------------------

INF, NAN = float("inf"), float("nan")
ROWS = [[-INF, -INF, -INF], [1.0, INF, 2.0], [NAN, 1.0, 5.0], [3.0, 3.0, -1.0],
        [-INF, 0.0, -INF], [INF, -INF, 0.0]]


@pytest.mark.parametrize("op", ["softmax", "log_softmax", "logsumexp", "cumsum", "argmax",
                                "argmin", "max", "prod", "sum", "var"])
def test_infinities_and_nan(op: str) -> None:
    a = np.array(ROWS, np.float32)
    g = lumos.Graph()
    x = g.tensor(a.shape)
    got = getattr(R, op)(x, 1)
    want = getattr(torch, op)(torch.from_numpy(a), 1)
    if op == "max":
        got, want = got.indices, want.indices
    assert_close(run([got], {x: a})[0], want, got.dtype)


def test_exact_integer_reductions() -> None:
    a = np.array([[2**40, 3, -7, 2**21, 5], [-(2**62), 1, 1, 2**62 - 1, 0]], np.int64)
    g = lumos.Graph()
    x = g.tensor(a.shape, lumos.i64)
    i8 = g.tensor((4,), lumos.i8, "small")
    b = np.array([-128, 127, -128, 5], np.int8)
    outs = [R.prod(x, 1), R.sum(x, 1), R.cumsum(x, 1), R.amin(i8), R.min(i8, 0).indices,
            R.argmax(i8)]
    got = run(outs, {x: a, i8: b})
    t, tb = torch.from_numpy(a), torch.from_numpy(b)
    want = [t.prod(1), t.sum(1), t.cumsum(1), tb.amin(), tb.min(0).indices, tb.argmax()]
    for r, w in zip(got, want, strict=True):
        np.testing.assert_array_equal(r, w.numpy())


def test_symbolic_dim() -> None:
    g = lumos.Graph()
    x = g.tensor(("s", 5), lumos.f32)
    outs = [R.sum(x, 0), R.mean(x), R.mean(x, 0, True), R.var(x, 0), R.max(x, 0).indices,
            R.argmin(x), R.cumsum(x, 0), R.softmax(x, 0), R.logsumexp(x, (0, 1)),
            R.amax(x, 0), R.all(x > -2.0, 0)]
    for o in outs:
        o.output()
    prog = g.compile(lumos.ReferenceRuntime())
    for s in (1, 7, 128):
        a = np.random.default_rng(s).uniform(-3, 3, (s, 5)).astype(np.float32)
        t = torch.from_numpy(a)
        want = [t.sum(0), t.mean(), t.mean(0, True), t.var(0), t.max(0).indices, t.argmin(),
                t.cumsum(0), t.softmax(0), t.logsumexp((0, 1)), t.amax(0), (t > -2.0).all(0)]
        prog.set_data(x, a)
        prog.execute({"s": s} if s == 7 else None)  # given, or read off the data
        for o, w in zip(outs, want, strict=True):
            assert_close(prog.get(o), w, o.dtype, rtol=1e-4)


def test_half_accumulates_in_f32() -> None:
    """f16 sums round once: not per element (a running sum of ones would stall at 2048)
    nor per reduced axis (each row of three 1+2^-10 would round to 3.0039)."""
    a = np.full((3, 4096), 1.0, np.float16)
    b = np.array([2048] + [1] * 7, np.float16)  # 2048 + 1 rounds back to 2048 in f16
    c = np.full((1000, 3), 1 + 2**-10, np.float16)
    g = lumos.Graph()
    x, y, w = g.tensor(a.shape, lumos.f16), g.tensor(b.shape, lumos.f16, "y"), g.tensor(
        c.shape, lumos.f16, "w")
    outs = [R.sum(x), R.mean(x, 1), R.cumsum(y, 0), R.sum(w), R.mean(w)]
    got = run(outs, {x: a, y: b, w: c})
    t, u, v = torch.from_numpy(a), torch.from_numpy(b), torch.from_numpy(c)
    for r, want in zip(got, [t.sum(), t.mean(1), u.cumsum(0), v.sum(), v.mean()], strict=True):
        assert_close(r, want, lumos.f16, rtol=0, atol=0)


def test_legacy_var_signature() -> None:
    a = np.random.default_rng(0).normal(size=(4, 3)).astype(np.float32)
    g = lumos.Graph()
    x = g.tensor(a.shape)
    outs = [R.var(x, False), x.std(1, False, True), R.var(x, 0, True)]
    t = torch.from_numpy(a)
    for r, w in zip(run(outs, {x: a}), [t.var(False), t.std(1, False, True), t.var(0, True)],
                    strict=True):
        assert_close(r, w, lumos.f32)


def test_methods_are_the_module_functions() -> None:
    for name in ("sum", "mean", "max", "min", "amax", "amin", "prod", "var", "std", "argmax",
                 "argmin", "any", "all", "logsumexp", "cumsum", "softmax", "log_softmax"):
        assert getattr(lumos.Tensor, name) is getattr(R, name)


def test_max_with_tensor_is_maximum() -> None:
    g = lumos.Graph()
    x, y = g.tensor((3,)), g.tensor((3,), name="y")
    a, b = np.array([1, -2, 5], np.float32), np.array([0, 4, 5], np.float32)
    hi, lo = run([R.max(x, y), x.min(y)], {x: a, y: b})
    np.testing.assert_array_equal(hi, np.maximum(a, b))
    np.testing.assert_array_equal(lo, np.minimum(a, b))


# -- errors -------------------------------------------------------------------------------

@pytest.mark.parametrize("op,call", [
    ("sum", lambda x: R.sum(x, 2)),
    ("mean", lambda x: x.mean((0, -3))),
    ("amax", lambda x: R.amax(x, (0, -2))),
    ("max", lambda x: x.max(-3)),
    ("argmin", lambda x: R.argmin(x, 5)),
    ("cumsum", lambda x: x.cumsum(2)),
    ("softmax", lambda x: R.softmax(x, -3)),
    ("prod", lambda x: x.prod(2)),
    ("var", lambda x: R.var(x, (1, 1))),
    ("any", lambda x: x.any(7)),
])
def test_bad_dim(op: str, call: Callable) -> None:
    g = lumos.Graph()
    x = g.tensor((2, 3))
    n = len(g.nodes)
    with pytest.raises(lumos.ShapeError, match=op):
        call(x)
    assert len(g.nodes) == n


def test_errors() -> None:
    g = lumos.Graph()
    sym = g.tensor(("s", 3))
    empty = g.tensor((4, 0))
    ints = g.tensor((3,), lumos.i32, "ints")
    flags = g.tensor((3,), lumos.bool_, "flags")
    n = len(g.nodes)
    with pytest.raises(lumos.ShapeError, match="prod.*symbolic"):
        R.prod(sym, 0)
    with pytest.raises(lumos.ShapeError, match="max.*size 0"):
        R.max(empty)
    with pytest.raises(lumos.ShapeError, match="amin.*size 0"):
        empty.amin(1)
    with pytest.raises(lumos.DTypeError, match="mean"):
        R.mean(ints)
    with pytest.raises(lumos.DTypeError, match="softmax"):
        R.softmax(ints, 0)
    with pytest.raises(lumos.DTypeError, match="argmax"):
        R.argmax(flags)
    with pytest.raises(ValueError, match="var"):
        R.var(sym, 0, unbiased=True, correction=1)
    with pytest.raises(TypeError, match="max"):
        R.max(sym, (0, 1))
    assert len(g.nodes) == n
    R.prod(sym, 1)  # a static reduced size is fine
