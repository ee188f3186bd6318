"""Pooling over 1, 2 or 3 spatial dims: max (with PyTorch's indices), average (integer
inputs too), adaptive max and average.

A pool reads the (padded) input through a window view (N, C, *out, K), K the window's
elements in row-major order, and reduces the last axis. Max pool indices are flat
positions in the input's spatial dims: the first maximum in window order (the smallest
position), or the last NaN, as PyTorch's CPU kernels pick them.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from lumos.dtype import f64, i64
from lumos.errors import ShapeError
from lumos.frontend import reduce as R
from lumos.frontend.nn import _batched, _compute, _pool_geometry, _same_dtype, _unbatch
from lumos.frontend.tensor import (
    Tensor,
    div,
    eq,
    iota,
    isnan,
    logical_and,
    node,
    scalar,
    where,
)
from lumos.shape import Expr, View, emax, emin, simplify, sym, z
from lumos.shape.expr import ONE, ZERO
from lumos.shape.view import numel

Size = int | Sequence[int]


def _digits(j: Expr, k: Sequence[int | Expr]) -> list[Expr]:
    """The row-major coordinates of window element j in a window of sizes k."""
    out = []
    for i in range(len(k)):
        rest = numel(k[i + 1:])
        out.append((j // rest) % k[i] if i else j // rest)
    return out


def _window_view(v: View, k: Sequence[int], s: Sequence[int], d: Sequence[int],
                 out: Sequence[Expr]) -> View:
    nd = len(k)
    j = z(2 + nd)
    m = {f"z{2 + i}": z(2 + i) * s[i] + c * d[i] for i, c in enumerate(_digits(j, k))}
    return v.remap((*v.shape[:2], *out, math.prod(k)), m)


def _positions(x: Tensor, shape: Sequence[Expr], coords: Sequence[Expr]) -> tuple[Tensor, Tensor]:
    """(flat spatial position in x, whether it lies inside x) of each window element whose
    input coordinates are `coords`, as tensors of `shape`."""
    size = x.view.shape[2:]
    pos, inside = ZERO, ONE
    for c, n in zip(coords, size, strict=True):
        pos = pos * n + c
        inside = inside & c.ge(0) & c.lt(n)
    b = {f"z{i}": (0, e - 1) for i, e in enumerate(shape)}
    return (iota(x.graph, simplify(pos, b), shape, i64),
            iota(x.graph, simplify(inside, b), shape, i64).to("bool"))


def _low(x: Tensor) -> float | int:
    dt = x.dtype
    return -math.inf if dt.is_float else -(1 << (dt.bits - 1)) if dt.signed else 0


def _argmax(w: Tensor, m: Tensor, pos: Tensor, inside: Tensor) -> Tensor:
    """PyTorch's index of the max m of windows w (last axis): the smallest position holding
    it, or the largest holding a NaN."""
    mm = m.unsqueeze(-1)._with_view(m.unsqueeze(-1).view.expand(w.view.shape))
    big = (1 << 62)
    first = R.amin(where(logical_and(eq(w, mm), inside), pos, big), -1)
    if not w.dtype.is_float:
        return first
    last_nan = R.amax(where(logical_and(isnan(w), inside), pos, -1), -1)
    return where(isnan(m), last_nan, first)


def max_pool(input: Tensor, nd: int, kernel: Size, stride: Size | None = None,
             padding: Size = 0, dilation: Size = 1,
             ceil_mode: bool = False) -> tuple[Tensor, Tensor]:
    """(values, indices) of an nd max pool; padding reads as the dtype's lowest value."""
    op = f"max_pool{nd}d"
    _same_dtype(op, input)
    x = _batched(input, nd, op)
    k, s, p, d, out, extra = _pool_geometry(op, x, kernel, stride, padding, dilation, ceil_mode, nd)
    pads: list = []
    for i in reversed(range(nd)):
        pads += [p[i], p[i] + extra[i]]
    xp = x.pad(pads, value=_low(x))
    w = xp._with_view(_window_view(xp.view, k, s, d, out))
    vals = node(x.graph, "MaxReduce", [w], axis=2 + nd)
    j = z(2 + nd)
    coords = [z(2 + i) * s[i] + c * d[i] - p[i] for i, c in enumerate(_digits(j, k))]
    pos, inside = _positions(x, w.view.shape, coords)
    idx = _argmax(w, vals, pos, inside)
    return _unbatch(vals, input, nd), _unbatch(idx, input, nd)


def avg_pool(input: Tensor, nd: int, kernel: Size, stride: Size | None = None,
             padding: Size = 0, ceil_mode: bool = False, count_include_pad: bool = True,
             divisor_override: int | None = None) -> Tensor:
    """An nd average pool with PyTorch's per-window divisor; integers sum in int64 and
    divide truncating, as PyTorch's CPU kernels do."""
    op = f"avg_pool{nd}d"
    dt = _same_dtype(op, input)
    x = _batched(input, nd, op)
    k, s, p, _, out, extra = _pool_geometry(op, x, kernel, stride, padding, 1, ceil_mode, nd)
    x = x.to(_compute(dt) if dt.is_float else i64)
    v = x.view
    for i in range(nd):
        v = v.pad(2 + i, p[i], p[i] + extra[i])
    total = node(x.graph, "SumReduce", [x._with_view(_window_view(v, k, s, (1,) * nd, out))],
                 axis=2 + nd)
    if divisor_override is not None:
        count: Expr = sym(divisor_override)
    else:  # the window clipped to the padded (or the real) input
        count = ONE
        for i, (h, ki, si, pi) in enumerate(zip(x.view.shape[2:], k, s, p, strict=True)):
            start = z(i) * si - pi
            end = emin(start + ki, h + pi)
            count = count * (end - start if count_include_pad else emin(end, h) - emax(start, 0))
    c = _divisor(x, count, out)
    if dt.is_float:
        return _unbatch(div(total, c).to(dt), input, nd)
    return _unbatch(div(total.to(f64), c.to(f64), rounding_mode="trunc").to(dt), input, nd)


def _divisor(x: Tensor, count: Expr, out: Sequence[Expr]) -> Tensor:
    """The divisor of each output position (z0, z1, ... over `out`): a scalar if constant."""
    count = simplify(count, {f"z{i}": (0, o - 1) for i, o in enumerate(out)})
    if count.is_num:
        return scalar(x.graph, count.value, x.dtype)
    return iota(x.graph, count, out, i64).to(x.dtype)


def _bins(x: Tensor, nd: int, output_size: Size) -> tuple[list[Expr], Expr, View, list[Expr]]:
    """Adaptive pooling: bin i of n inputs into o outputs spans [floor(i*n/o),
    ceil((i+1)*n/o)). Returns the output sizes, each bin's element count (an expression of
    z0, z1, ...), x read as windows of the largest bin (N, C, *out, K) with the elements
    outside a bin invalid, and the input coordinates each window element reads."""
    if isinstance(output_size, int):
        output_size = [output_size] * nd
    sizes = list(output_size) * (nd if len(output_size) == 1 else 1)
    if len(sizes) != nd or any(o is not None and o < 0 for o in sizes):
        raise ShapeError(f"adaptive pool: bad output_size {output_size!r}")
    ins = x.view.shape[2:]
    out = [n if o is None else sym(o) for n, o in zip(ins, sizes, strict=True)]

    def bin_(i: int, at: Expr) -> tuple[Expr, Expr]:  # (start, size) of the bin at `at`
        n, o = ins[i], out[i]
        start = (at * n) // o
        return start, ((at + 1) * n + o - 1) // o - start

    k = [max((bin_(i, sym(j))[1].value for j in range(out[i].value)), default=1)
         for i in range(nd)]
    coords, valid, count = [], ONE, ONE
    for i, c in enumerate(_digits(z(2 + nd), k)):
        start, size = bin_(i, z(2 + i))
        coords.append(start + c)
        valid = valid & c.lt(size)
        count = count * bin_(i, z(i))[1]
    v = x.view.remap((*x.view.shape[:2], *out, math.prod(k)),
                     {f"z{2 + i}": c for i, c in enumerate(coords)})
    v = View(v.shape, v.index, simplify(v.valid & valid, v.bounds()))
    return out, count, v, coords


def adaptive_avg_pool(input: Tensor, nd: int, output_size: Size) -> Tensor:
    op = f"adaptive_avg_pool{nd}d"
    dt = _same_dtype(op, input, float_only=True)
    x = _batched(input, nd, op).to(_compute(dt))
    out, count, v, _ = _bins(x, nd, output_size)
    total = node(x.graph, "SumReduce", [x._with_view(v)], axis=2 + nd)
    return _unbatch(div(total, _divisor(x, count, out)).to(dt), input, nd)


def adaptive_max_pool(input: Tensor, nd: int, output_size: Size) -> tuple[Tensor, Tensor]:
    """(values, indices); the elements outside a bin read as the dtype's lowest value."""
    op = f"adaptive_max_pool{nd}d"
    _same_dtype(op, input)
    x = _batched(input, nd, op)
    out, _, v, coords = _bins(x, nd, output_size)
    b = v.bounds()
    inside = iota(x.graph, v.valid, v.shape, i64).to("bool")
    w = where(inside, x._with_view(v), scalar(x.graph, _low(x), x.dtype))
    vals = R.amax(w, -1)
    pos, _ = _positions(x, v.shape, [simplify(c, b) for c in coords])
    idx = _argmax(w, vals, pos, inside)
    return _unbatch(vals, input, nd), _unbatch(idx, input, nd)
