"""Cumulative operations beyond cumsum: cummax, cummin, cumprod, logcumsumexp.

Like cumsum, each reads x as a square along the scanned axis, out[i] reducing x[j] for
j <= i (the other half masked to the reduction's identity with where, exact for inf
and NaN), so a scan of n elements costs n * n.
"""

from __future__ import annotations

import math
from typing import Any

from lumos.dtype import DType, i64
from lumos.frontend import reduce as R
from lumos.frontend.tensor import (
    Tensor,
    add,
    eq,
    exp,
    iota,
    isinf,
    isnan,
    log,
    logical_and,
    logical_or,
    lt,
    scalar,
    sub,
    where,
)
from lumos.shape import z


def _square(x: Tensor, a: int, fill: Any) -> tuple[Tensor, Tensor]:
    """(x read as [..., i, j, ...] along axis a (j the new axis a + 1) with positions
    j > i set to `fill`, the mask j <= i)."""
    n = x.view.shape[a]
    shape = (*x.view.shape[:a], n, n, *x.view.shape[a + 1:])
    w = x._with_view(x.view.unsqueeze(a).expand(shape))
    upto = lt(iota(x.graph, z(a + 1), shape, i64), iota(x.graph, z(a) + 1, shape, i64))
    return where(upto, w, scalar(x.graph, fill, x.dtype)), upto


def _extreme_fill(dt: DType, high: bool) -> Any:
    if dt.is_float:
        return math.inf if high else -math.inf
    if dt.is_bool:
        return high
    if not dt.signed:
        return (1 << dt.bits) - 1 if high else 0
    return (1 << (dt.bits - 1)) - 1 if high else -(1 << (dt.bits - 1))


def _cum_extreme(x: Tensor, dim: int, op: str) -> tuple[Tensor, Tensor]:
    """(values, indices): the running max (or min), NaN-propagating; the index is the
    last position at or before i holding that value (PyTorch's, ties included)."""
    axes = R._axis(x, dim, op)
    if not axes:
        return x, scalar(x.graph, 0, i64)._with_view(x.view.expand(()))
    a = axes[0]
    sq, upto = _square(x, a, _extreme_fill(x.dtype, op == "cummin"))
    vals = (R.amax if op == "cummax" else R.amin)(sq, a + 1)
    v = vals._with_view(vals.view.unsqueeze(a + 1).expand(sq.view.shape))
    same = eq(sq, v)
    if x.dtype.is_float:
        same = logical_or(same, logical_and(isnan(sq), isnan(v)))
    j = iota(x.graph, z(a + 1), sq.view.shape, i64)
    idx = R.amax(where(logical_and(same, upto), j, -1), a + 1)
    return vals, idx


def cummax(x: Tensor, dim: int) -> tuple[Tensor, Tensor]:
    return _cum_extreme(x, dim, "cummax")


def cummin(x: Tensor, dim: int) -> tuple[Tensor, Tensor]:
    return _cum_extreme(x, dim, "cummin")


def cumprod(x: Tensor, dim: int, *, dtype: Any = None) -> Tensor:
    """torch.cumprod: bool and integer inputs multiply as int64 unless `dtype` is given."""
    axes = R._axis(x, dim, "cumprod")
    x = x.to(dtype) if dtype is not None else x if x.dtype.is_float else x.to(i64)
    if not axes:
        return x
    a = axes[0]
    sq, _ = _square(x.to(R._accumulator(x.dtype)), a, 1)
    return R.prod(sq, a + 1).to(x.dtype)


def logcumsumexp(x: Tensor, dim: int) -> Tensor:
    """log(sum_{j <= i} exp(x[j])), shifted by the running max (which it is where that
    is infinite)."""
    axes = R._axis(x, dim, "logcumsumexp")
    if x.dtype.is_bool or not x.dtype.is_float:
        raise TypeError(f"logcumsumexp: needs a floating point input, got {x.dtype.name}")
    if not axes:
        return x
    a = axes[0]
    ct = R._accumulator(x.dtype)
    xc = x.to(ct)
    sq, upto = _square(xc, a, -math.inf)
    m = R.amax(sq, a + 1)
    shift = where(isinf(m), 0.0, m)
    s = shift._with_view(shift.view.unsqueeze(a + 1).expand(sq.view.shape))
    total = R.sum(exp(sub(sq, s)), a + 1)
    r = add(log(total), shift)
    return where(logical_and(isinf(m), lt(0.0, m)), m, r).to(x.dtype)


for _fn in (cummax, cummin, cumprod, logcumsumexp):
    setattr(Tensor, _fn.__name__, _fn)
