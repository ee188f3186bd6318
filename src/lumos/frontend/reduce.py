"""Reductions: sum, mean, max/min, prod, var/std, arg-extrema, any/all, logsumexp,
cumsum, softmax.

Everything is built from the two reduce primitives, one axis per node:
`SumReduce` (bool: logical or) and `MaxReduce` (NaN-propagating). min is max of
an order-reversing copy (-x for floats, ~x for integers, not x for bool).
f16/bf16 accumulate in f32 and round once at the end, as PyTorch does.
"""

from __future__ import annotations

import builtins
from collections.abc import Sequence
from typing import Any, NamedTuple

from lumos.dtype import DType, as_dtype, f32, i64, u8
from lumos.errors import DTypeError, ShapeError
from lumos.frontend.tensor import (
    Tensor,
    add,
    dim_value,
    div,
    eq,
    exp,
    iota,
    isinf,
    isnan,
    log,
    logical_not,
    logical_or,
    maximum,
    minimum,
    mul,
    ne,
    neg,
    node,
    record_vjp,
    relu,
    scalar,
    sqrt,
    sub,
    tensor_method,
    where,
)
from lumos.shape import Expr, View, z
from lumos.shape.expr import ONE, ZERO

Dim = int | Sequence[int] | None


class ValuesIndices(NamedTuple):
    """What max/min along a dim return (torch.return_types.max)."""

    values: Tensor
    indices: Tensor


# -- mechanics ---------------------------------------------------------------------------

def _axes(x: Tensor, dim: Dim, op: str) -> list[int]:
    """The axes `dim` names, ascending; None or () means all. A 0-d tensor accepts
    dim 0 / -1 and has no axis to reduce."""
    dims = [dim] if isinstance(dim, int) else list(range(x.ndim)) if not dim else list(dim)
    axes = []
    for d in dims:
        if not isinstance(d, int):
            raise TypeError(f"{op}: dim must be an int or a tuple of ints, got {dim!r}")
        try:
            a = x._axis(d)
        except ShapeError as e:
            raise ShapeError(f"{op}: {e}") from None
        if a in axes:
            raise ShapeError(f"{op}: dim {a} appears more than once in {dim!r}")
        axes.append(a)
    return sorted(axes) if x.ndim else []


def _axis(x: Tensor, dim: int, op: str) -> list[int]:
    """A single dim (as a list of at most one axis: none for a 0-d tensor)."""
    if not isinstance(dim, int):
        raise TypeError(f"{op}: dim must be an int, got {dim!r}")
    return _axes(x, dim, op)


def _reduce(x: Tensor, op: str, axes: Sequence[int], keepdim: bool) -> Tensor:
    """One `op` node per axis, innermost first; keepdim puts size-1 axes back."""
    for a in reversed(axes):
        x = node(x.graph, op, [x], axis=a)
    return _keep(x, axes) if keepdim else x


def _keep(x: Tensor, axes: Sequence[int]) -> Tensor:
    v = x.view
    for a in axes:
        v = v.unsqueeze(a)
    return x._with_view(v)


def _count(x: Tensor, axes: Sequence[int]) -> Expr:
    n = ONE
    for a in axes:
        n = n * x.view.shape[a]
    return n


def _nonempty(x: Tensor, axes: Sequence[int], op: str) -> None:
    for a in axes:
        if x.view.shape[a] is ZERO:
            raise ShapeError(f"{op}: cannot reduce dim {a} of size 0 (shape {x.shape}); "
                             "the operation has no identity")


def _accumulator(dt: DType) -> DType:
    return f32 if dt.is_float and dt.bits < 32 else dt


def _float_only(x: Tensor, op: str, dtype: Any = None) -> DType:
    dt = x.dtype if dtype is None else as_dtype(dtype)
    if not dt.is_float:
        raise DTypeError(f"{op}: needs a floating point input (or dtype=...), got {dt.name}")
    return dt


def _complement(x: Tensor) -> Tensor:
    """An order-reversing bijection: -x for floats, ~x = -x - 1 (wrapping, so INT_MIN
    has an image) for integers, not x for bool."""
    if x.dtype.is_float:
        return neg(x)
    if x.dtype.is_bool:
        return logical_not(x)
    return add(mul(x, -1), -1)


# -- sums --------------------------------------------------------------------------------

@tensor_method
def sum(x: Tensor, dim: Dim = None, keepdim: bool = False, *, dtype: Any = None) -> Tensor:
    """torch.sum: bool and integer inputs sum as int64 unless `dtype` is given."""
    axes = _axes(x, dim, "sum")
    x = x.to(dtype) if dtype is not None else x if x.dtype.is_float else x.to(i64)
    dt = x.dtype
    return _reduce(x.to(_accumulator(dt)), "SumReduce", axes, keepdim).to(dt)


@tensor_method
def mean(x: Tensor, dim: Dim = None, keepdim: bool = False, *, dtype: Any = None) -> Tensor:
    """torch.mean (floats only; the mean of nothing is NaN)."""
    axes = _axes(x, dim, "mean")
    dt = _float_only(x, "mean", dtype)
    ct = _accumulator(dt)
    s = _reduce(x.to(dt).to(ct), "SumReduce", axes, keepdim)
    return div(s, dim_value(x.graph, _count(x, axes), ct)).to(dt)


@tensor_method
def var(x: Tensor, dim: Dim | bool = None, unbiased: bool | None = None,
        keepdim: bool = False, *, correction: float | None = None) -> Tensor:
    """torch.var: two-pass, dividing by max(n - correction, 0) (correction defaults to 1;
    the legacy `unbiased` flag means correction 1 or 0)."""
    dt, r = _var(x, dim, unbiased, keepdim, correction, "var")
    return r.to(dt)


@tensor_method
def std(x: Tensor, dim: Dim | bool = None, unbiased: bool | None = None,
        keepdim: bool = False, *, correction: float | None = None) -> Tensor:
    dt, r = _var(x, dim, unbiased, keepdim, correction, "std")
    return sqrt(r).to(dt)


def _var(x: Tensor, dim: Dim | bool, unbiased: bool | None, keepdim: bool,
         correction: float | None, op: str) -> tuple[DType, Tensor]:
    """(dtype of the result, the variance in the accumulation dtype)."""
    if isinstance(dim, bool):  # torch.var(x, True): the flag in the dim slot
        dim, unbiased = None, dim
    if unbiased is not None and correction is not None:
        raise ValueError(f"{op}: give either unbiased or correction, not both")
    c = correction if correction is not None else 0 if unbiased is False else 1
    axes = _axes(x, dim, op)
    dt = _float_only(x, op)
    g, ct = x.graph, _accumulator(dt)
    xc = x.to(ct)
    n = _count(x, axes)
    mu = div(_reduce(xc, "SumReduce", axes, True), dim_value(g, n, ct))
    d = sub(xc, mu)
    ss = _reduce(mul(d, d), "SumReduce", axes, keepdim)
    if n.is_num:
        dof = scalar(g, builtins.max(n.value - c, 0), ct)
    else:
        dof = relu(sub(dim_value(g, n, ct), c))
    return dt, div(ss, dof)


@tensor_method
def prod(x: Tensor, dim: int | None = None, keepdim: bool = False, *,
         dtype: Any = None) -> Tensor:
    """torch.prod as a tree of Muls: each reduced axis is padded with ones to a power of
    two and halved (static sizes only; no log/exp)."""
    axes = _axes(x, dim, "prod") if dim is None else _axis(x, dim, "prod")
    for a in axes:
        if not x.view.shape[a].is_num:
            raise ShapeError(f"prod: dim {a} of shape {x.shape} has a symbolic size; "
                             "prod needs a static size")
    x = x.to(dtype) if dtype is not None else x if x.dtype.is_float else x.to(i64)
    dt = x.dtype
    x = x.to(_accumulator(dt))
    for a in reversed(axes):
        x = _prod_axis(x, a)
    return (_keep(x, axes) if keepdim else x).to(dt)


def _prod_axis(x: Tensor, a: int) -> Tensor:
    n = x.view.shape[a].value
    if n == 0:
        one = scalar(x.graph, 1, x.dtype)
        return one._with_view(one.view.expand(x.view.shape[:a] + x.view.shape[a + 1:]))
    p = 1 << (n - 1).bit_length()
    if p > n:
        x = x.pad([0, 0] * (x.ndim - 1 - a) + [0, p - n], value=1)
    while p > 1:
        p //= 2
        lo, hi = x.view.slice(a, 0, p), x.view.slice(a, p, p)
        x = node(x.graph, "Mul", [x._with_view(lo), x._with_view(hi)])
    return x._with_view(x.view.select(a, 0))


@tensor_method
def cumsum(x: Tensor, dim: int, *, dtype: Any = None) -> Tensor:
    """torch.cumsum, exactly: out[i] sums the view x[j] valid where j <= i (the other
    elements read as 0, so inf and NaN after i do not leak in)."""
    axes = _axis(x, dim, "cumsum")
    x = x.to(dtype) if dtype is not None else x if x.dtype.is_float else x.to(i64)
    dt = x.dtype
    if not axes:
        return x
    a = axes[0]
    xc = x.to(_accumulator(dt))
    n = x.view.shape[a]
    w = xc.view.unsqueeze(a).expand(x.view.shape[:a] + (n, n) + x.view.shape[a + 1:])
    tri = View(w.shape, w.index, w.valid & z(a + 1).lt(z(a) + 1))
    return node(x.graph, "SumReduce", [xc._with_view(tri)], axis=a + 1).to(dt)


# -- extrema -----------------------------------------------------------------------------

@tensor_method
def amax(x: Tensor, dim: Dim = (), keepdim: bool = False) -> Tensor:
    """torch.amax: the max over `dim` (() = all), NaN-propagating."""
    return _extreme(x, dim, keepdim, "amax")


@tensor_method
def amin(x: Tensor, dim: Dim = (), keepdim: bool = False) -> Tensor:
    return _extreme(x, dim, keepdim, "amin")


def _extreme(x: Tensor, dim: Dim, keepdim: bool, op: str) -> Tensor:
    axes = _axes(x, dim, op)
    _nonempty(x, axes, op)
    if op in ("amax", "max"):
        return _reduce(x, "MaxReduce", axes, keepdim)
    return _complement(_reduce(_complement(x), "MaxReduce", axes, keepdim))


@tensor_method
def max(x: Tensor, dim: int | Tensor | None = None,
        keepdim: bool = False) -> Tensor | ValuesIndices:
    """torch.max: the max of all elements; with `dim`, (values, indices of the first
    max); with a tensor, the elementwise maximum."""
    if isinstance(dim, Tensor):
        return maximum(x, dim)
    if dim is None:
        return _extreme(x, None, False, "max")
    axes = _axis(x, dim, "max")
    _nonempty(x, axes, "max")
    return _max_dim(x, axes, keepdim)


@tensor_method
def min(x: Tensor, dim: int | Tensor | None = None,
        keepdim: bool = False) -> Tensor | ValuesIndices:
    if isinstance(dim, Tensor):
        return minimum(x, dim)
    if dim is None:
        return _extreme(x, None, False, "min")
    axes = _axis(x, dim, "min")
    _nonempty(x, axes, "min")
    values, indices = _max_dim(_complement(x), axes, keepdim)
    return ValuesIndices(_complement(values), indices)


def _max_dim(x: Tensor, axes: list[int], keepdim: bool) -> ValuesIndices:
    """Max along one axis (none for 0-d) and the index of its first occurrence (for a
    NaN max, of the first NaN): n - max(hit * (n - k)) over positions k."""
    g = x.graph
    if not axes:
        return ValuesIndices(x, scalar(g, 0, i64))
    a = axes[0]
    n = x.view.shape[a]
    m = node(g, "MaxReduce", [x], axis=a)
    hit = eq(x, m._with_view(m.view.unsqueeze(a).expand(x.view.shape)))
    if x.dtype.is_float:
        hit = logical_or(hit, isnan(x))
    score = mul(hit.to(i64), iota(g, n - z(a), x.view.shape, i64))
    first = sub(dim_value(g, n, i64), node(g, "MaxReduce", [score], axis=a))
    return ValuesIndices(*((_keep(t, axes) if keepdim else t) for t in (m, first)))


@tensor_method
def argmax(x: Tensor, dim: int | None = None, keepdim: bool = False) -> Tensor:
    """torch.argmax: index of the first max (NaN counts as the max); dim=None indexes
    the flattened tensor."""
    return _arg(x, dim, keepdim, "argmax")


@tensor_method
def argmin(x: Tensor, dim: int | None = None, keepdim: bool = False) -> Tensor:
    return _arg(x, dim, keepdim, "argmin")


def _arg(x: Tensor, dim: int | None, keepdim: bool, op: str) -> Tensor:
    if x.dtype.is_bool:
        raise DTypeError(f"{op}: bool input is not supported")
    flat = dim is None
    y = x.reshape(-1) if flat else x
    axes = _axis(y, 0 if flat else dim, op)
    _nonempty(y, axes, op)
    y = y if op == "argmax" else _complement(y)
    idx = _max_dim(y, axes, keepdim and not flat).indices
    return idx.reshape([1] * x.ndim) if keepdim and flat else idx


# -- logic -------------------------------------------------------------------------------

@tensor_method
def any(x: Tensor, dim: Dim = None, keepdim: bool = False) -> Tensor:
    """torch.any: a bool result (uint8 for a uint8 input, as in torch)."""
    axes = _axes(x, dim, "any")
    r = _reduce(_truth(x), "SumReduce", axes, keepdim)  # a bool sum is logical or
    return r.to(u8) if x.dtype is u8 else r


@tensor_method
def all(x: Tensor, dim: Dim = None, keepdim: bool = False) -> Tensor:
    axes = _axes(x, dim, "all")
    r = logical_not(_reduce(logical_not(x), "SumReduce", axes, keepdim))
    return r.to(u8) if x.dtype is u8 else r


def _truth(x: Tensor) -> Tensor:
    return x if x.dtype.is_bool else ne(x, 0)


# -- exponential families ------------------------------------------------------------------

@tensor_method
def logsumexp(x: Tensor, dim: Dim, keepdim: bool = False) -> Tensor:
    """torch.logsumexp: log(sum(exp(x - m))) + m with m the max, taken as 0 where it is
    infinite (so an all -inf row gives -inf, a row with +inf gives +inf)."""
    axes = _axes(x, dim, "logsumexp")
    dt = x.dtype if x.dtype.is_float else f32
    xc = x.to(_accumulator(dt))
    m = _reduce(xc, "MaxReduce", axes, False)
    m = where(isinf(m), 0.0, m)
    s = _reduce(exp(sub(xc, _keep(m, axes))), "SumReduce", axes, keepdim)
    return add(log(s), _keep(m, axes) if keepdim else m).to(dt)


@tensor_method
def softmax(x: Tensor, dim: int, dtype: Any = None) -> Tensor:
    """torch.softmax: exp(x - max) / sum, in f32 for half inputs. A row that is all -inf
    or holds +inf is NaN, as in torch."""
    dt, axes, shifted = _shifted(x, dim, dtype, "softmax")
    e = exp(shifted)
    y = div(e, _reduce(e, "SumReduce", axes, True))
    return record_vjp(y, _xc(x, dt), lambda g: mul(y, sub(g, _reduce(mul(g, y), "SumReduce",
                                                                     axes, True)))).to(dt)


@tensor_method
def log_softmax(x: Tensor, dim: int, dtype: Any = None) -> Tensor:
    dt, axes, shifted = _shifted(x, dim, dtype, "log_softmax")
    y = sub(shifted, log(_reduce(exp(shifted), "SumReduce", axes, True)))
    return record_vjp(y, _xc(x, dt), lambda g: sub(g, mul(exp(y), _reduce(g, "SumReduce", axes,
                                                                          True)))).to(dt)


def _shifted(x: Tensor, dim: int, dtype: Any, op: str) -> tuple[DType, list[int], Tensor]:
    """(result dtype, the axis, x - max along it in the accumulation dtype)."""
    axes = _axis(x, dim, op)
    dt = _float_only(x, op, dtype)
    xc = _xc(x, dt)
    return dt, axes, sub(xc, _reduce(xc, "MaxReduce", axes, True))


def _xc(x: Tensor, dt: DType) -> Tensor:
    """x in dtype dt, then in its accumulation dtype."""
    return x.to(dt).to(_accumulator(dt))
