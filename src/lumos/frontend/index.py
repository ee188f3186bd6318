"""Indexing and construction: `x[...]`, gather/scatter, index_put, tril/triu, arange/full.

Basic indexing (ints, slices, None, ...) edits the view and adds no node.
Advanced indexing (integer tensors, lists) computes, for every result element,
its flat row-major position in the indexed tensor's logical view — arithmetic
on the index tensors plus one Iota for the axes that are not indexed — and
reads those positions with one Gather. Writes (scatter, index_put) are one
Scatter at positions computed the same way. Names and semantics follow
PyTorch; slices may also step backwards, with numpy's semantics.
"""

from __future__ import annotations

import math
import operator
from collections.abc import Sequence
from typing import Any

import numpy as np

from lumos.dtype import DType, as_dtype, bool_, f32, f64, i32, i64, u8
from lumos.errors import DTypeError, ShapeError
from lumos.frontend import reduce as R
from lumos.frontend.tensor import (
    Scalar,
    Tensor,
    add,
    broadcast_shapes,
    dim_value,
    div,
    eq,
    floor_divide,
    full_like,
    iota,
    lt,
    maximum,
    minimum,
    mul,
    node,
    promote_types,
    scalar,
    tensor_method,
    where,
)
from lumos.graph import Graph
from lumos.shape import Expr, View, emax, emin, proves_lt, simplify, sym, z
from lumos.shape.expr import NEG_ONE, ONE, ZERO, IntLike
from lumos.shape.view import numel, row_major_strides


class IndexShapeError(ShapeError, IndexError):
    """An index out of range for a dimension (also an IndexError, as in PyTorch)."""


# -- x[key] ------------------------------------------------------------------------------

@tensor_method
def __getitem__(x: Tensor, key: Any) -> Tensor:
    """PyTorch indexing. Ints, slices, None and ... are view edits; integer tensors and
    lists are advanced indices (one Gather). Negative slice steps follow numpy."""
    g = x.graph
    v, axis, dim = x.view, 0, 0
    adv: list[tuple[int, Tensor | np.ndarray]] = []  # advanced index at axis of the view
    basic = True  # Python bools are advanced indices too, but alone they are views
    for item in _expand(x, key):
        if item is None or isinstance(item, bool):
            v = v.unsqueeze(axis)
            if isinstance(item, bool):  # like torch: a new axis indexed by [0] or []
                adv.append((axis, np.zeros(int(item), np.int64)))
            axis += 1
        elif isinstance(item, slice):
            start, length, step = _slice(v.shape[axis], item, g.dims)
            v = v.slice(axis, start, length, step)
            axis, dim = axis + 1, dim + 1
        elif isinstance(item, np.ndarray) and item.dtype.kind == "b":  # a static mask
            m = item.ndim
            if v.shape[axis:axis + m] != tuple(sym(n) for n in item.shape):
                raise IndexShapeError(f"index: mask of shape {item.shape} does not match dims "
                                      f"{dim}..{dim + m - 1} of shape {x.shape}")
            adv += [(axis + j, a) for j, a in enumerate(np.nonzero(item))]
            axis, dim, basic = axis + m, dim + m, False
        elif isinstance(item, (Tensor, np.ndarray)):
            adv.append((axis, item))
            axis, dim, basic = axis + 1, dim + 1, False
        else:
            v = v.select(axis, _int_index(item, v.shape[axis], dim, x.shape, g.dims))
            dim += 1
    if basic:
        for a, t in adv:
            v = v.slice(a, 0, t.size)
        return x._with_view(v)
    data = x._with_view(v)
    return node(g, "Gather", [_positions(data, adv, "index", select_0d=True), data])


@tensor_method
def __iter__(x: Tensor) -> Any:
    return (x[i] for i in range(len(x)))


def _expand(x: Tensor, key: Any) -> list[Any]:
    """The items of `key`: lists as int or bool numpy arrays, `...` expanded to slices."""
    items: list[Any] = []
    for k in key if isinstance(key, tuple) else (key,):
        if isinstance(k, (list, np.ndarray)):
            arr = np.asarray(k)
            if arr.size == 0:
                arr = arr.astype(np.int64)
            if arr.dtype.kind not in "biu":
                raise TypeError(f"index: a list index must hold ints or bools, not {arr.dtype}")
            items.append(arr)
        elif isinstance(k, Tensor):
            _check_index_dtype(k, "index")
            if k.dtype.is_bool:
                raise ShapeError(f"index: a bool mask of shape {k.shape} selects a data-"
                                 "dependent number of elements; lumos shapes are static "
                                 "(use where or masked_fill)")
            items.append(k)
        elif k is None or k is Ellipsis or isinstance(k, (bool, slice, Expr)):
            items.append(k)
        else:
            try:
                items.append(operator.index(k))
            except TypeError:
                raise TypeError(f"index: {k!r} ({type(k).__name__}) is not a valid index; "
                                "use ints, slices, None, ..., integer tensors or lists"
                                ) from None
    used = sum(k.ndim if isinstance(k, np.ndarray) and k.dtype.kind == "b" else 1
               for k in items if k is not None and k is not Ellipsis and not isinstance(k, bool))
    if used > x.ndim:
        raise IndexShapeError(f"index: too many indices ({used}) for a tensor of "
                              f"{x.ndim} dims with shape {x.shape}")
    ell = [i for i, k in enumerate(items) if k is Ellipsis]
    if len(ell) > 1:
        raise IndexShapeError("index: an index can only have a single ellipsis (...)")
    if ell:
        i = ell[0]
        items[i:i + 1] = [slice(None)] * (x.ndim - used)
    return items


def _const_index(g: Graph, arr: np.ndarray, dtype: DType) -> Tensor:
    """An int array as one Iota: a sum of its values times indicators of their positions."""
    flat = View.contiguous(arr.shape).index
    e = ZERO
    for i, val in enumerate(arr.reshape(-1).tolist()):
        if val:
            e = e + val * (flat.ge(i) & flat.lt(i + 1))
    return iota(g, e, arr.shape, dtype)


def _check_index_dtype(t: Tensor, op: str) -> None:
    if t.dtype is u8 or not (t.dtype.is_int or t.dtype.is_bool):
        raise DTypeError(f"{op}: index tensors must be integers (i64, i32, i16, i8) or bool, "
                         f"got {t.dtype.name}")


def _from_end(e: Expr, n: Expr, bounds: dict) -> Expr:
    """Index e along a dim of size n, counted from the end where it is negative (decided
    now when the bounds tell, else a symbolic `e + n * (e < 0)`)."""
    if proves_lt(e, ZERO, bounds):
        return e + n
    if proves_lt(NEG_ONE, e, bounds):
        return e
    return e + n * e.lt(0)


def _int_index(i: IntLike, n: Expr, dim: int, shape: tuple, bounds: dict) -> Expr:
    """The position of index i (an int or Expr) along a dim of size n."""
    e = _from_end(sym(i), n, bounds)
    if simplify(e.ge(0) & e.lt(n), bounds) is ZERO:
        raise IndexShapeError(f"index {i} is out of range for dim {dim} of size {n} "
                              f"(shape {shape})")
    return simplify(e, bounds)


def _slice(n: Expr, s: slice, bounds: dict) -> tuple[Expr, Expr, int]:
    """(start, length, step) of a slice of a dim of size n, clamped like Python lists."""
    step = 1 if s.step is None else operator.index(s.step)
    if step == 0:
        raise ShapeError("index: slice step cannot be zero")

    def clamp(b: Any, default: IntLike, lo: IntLike, hi: IntLike) -> Expr:
        if b is None:
            return sym(default)
        e = _from_end(sym(b if isinstance(b, Expr) else operator.index(b)), n, bounds)
        return simplify(emin(emax(e, lo), hi), bounds)

    if step > 0:
        start, stop = clamp(s.start, 0, 0, n), clamp(s.stop, n, 0, n)
        length = (_minus(stop, start) + step - 1) // step
    else:
        start, stop = clamp(s.start, n - 1, -1, n - 1), clamp(s.stop, -1, -1, n - 1)
        length = (_minus(start, stop) - step - 1) // -step
    return start, simplify(emax(length, 0), bounds), step


def _minus(a: Expr, b: Expr) -> Expr:
    """a - b, pushed into a min/max b: x[-3:] gets length min(3, s), not s - max(s - 3, 0)."""
    if b.op in ("min", "max"):
        other = emax if b.op == "min" else emin
        return other(_minus(a, b.args[0]), _minus(a, b.args[1]))
    return a - b


# -- flat positions ----------------------------------------------------------------------

def _pos_dtype(shape: Sequence[Expr]) -> DType:
    n = numel(shape)
    return i32 if n.is_num and n.value < 2**31 else i64


def _wrap(t: Tensor, n: Expr, it: DType) -> Tensor:
    """Index tensor as `it`, negative entries counted from the end (t + n where t < 0)."""
    t = t.to(it)
    return add(t, mul(lt(t, 0).to(it), dim_value(t.graph, n, it)))


def _times(t: Tensor, k: Expr) -> Tensor:
    return t if k is ONE else mul(t, dim_value(t.graph, k, t.dtype))


def _layout(shape: Sequence[Expr], adv: Sequence[tuple[int, Tensor | np.ndarray]], op: str,
            select_0d: bool = False) -> tuple[list[int], tuple[Expr, ...], list[int],
                                               tuple[Expr, ...]]:
    """Where advanced indices at `adv`'s axes put their dims (PyTorch's rule): in place of
    the indexed axes when those are adjacent, else first. With `select_0d` (Python
    indexing), a 0-d index acts like an int: its axis is dropped before that is decided.
    Returns (axes before, the broadcast index shape, axes after, result shape)."""
    axes = [a for a, _ in adv]
    bshape = broadcast_shapes(*(t.shape for _, t in adv), op=op)
    dropped = [a for a, t in adv if select_0d and t.ndim == 0]
    placed = [a - sum(d < a for d in dropped) for a in axes if a not in dropped]
    rest = [a for a in range(len(shape)) if a not in axes]
    adjacent = placed == list(range(placed[0], placed[0] + len(placed))) if placed else True
    first = next((a for a in axes if a not in dropped), len(shape))
    before = [a for a in rest if adjacent and a < first]
    after = [a for a in rest if a not in before]
    return before, bshape, after, tuple(shape[a] for a in before) + bshape + tuple(
        shape[a] for a in after)


def _positions(data: Tensor, adv: Sequence[tuple[int, Tensor | np.ndarray]], op: str,
               select_0d: bool = False) -> Tensor:
    """Flat positions in `data`'s logical shape of the elements that indexing its axes `a`
    by integer tensors or arrays `t` selects (negative entries count from the end)."""
    g, shape = data.graph, data.view.shape
    for _, t in adv:
        if isinstance(t, Tensor):
            _check_index_dtype(t, op)
            if t.dtype.is_bool:
                raise DTypeError(f"{op}: a bool index selects a data-dependent number of "
                                 "elements; use an integer index")
    before, bshape, after, out = _layout(shape, adv, op, select_0d)
    strides, it = row_major_strides(shape), _pos_dtype(shape)
    picked: Tensor | None = None
    for a, t in adv:
        n, st = shape[a], strides[a]
        if isinstance(t, np.ndarray) and n.is_num and st.is_num:  # wrap and scale statically
            term = _const_index(g, np.where(t < 0, t + n.value, t) * st.value, it)
        else:
            ti = t if isinstance(t, Tensor) else _const_index(g, t, i64)
            term = _times(_wrap(ti, n, it), st)
        picked = term if picked is None else add(picked, term)
    assert picked is not None
    pv = picked.view.expand(bshape)
    for _ in before:
        pv = pv.unsqueeze(0)
    for _ in after:
        pv = pv.unsqueeze(pv.ndim)
    out_axes = list(range(len(before))) + list(range(len(before) + len(bshape), len(out)))
    rest_expr = ZERO
    for a, o in zip(before + after, out_axes, strict=True):
        rest_expr = rest_expr + z(o) * strides[a]
    if rest_expr is ZERO:
        return picked._with_view(pv.expand(out))
    return add(iota(g, rest_expr, out, it), picked._with_view(pv))


def _along(x: Tensor, dim: int, index: Tensor, op: str) -> tuple[Tensor, Tensor, int]:
    """gather/scatter checks; x and index as tensors of >= 1 dims (a 0-d tensor counts as a
    1-element vector) and the normalized dim."""
    _check_index_dtype(index, op)
    if index.dtype.is_bool:
        raise DTypeError(f"{op}: index must be an integer tensor, got bool")
    d = x._axis(dim)
    if x.ndim <= 1 and index.ndim <= 1:
        x, index = x.reshape(-1), index.reshape(-1)
    if index.ndim != x.ndim:
        raise ShapeError(f"{op}: index {index.shape} and input {x.shape} must have the same "
                         "number of dims")
    shape, ishape = x.view.shape, index.view.shape
    for a in range(len(shape)):
        if a != d and simplify(ishape[a].lt(shape[a] + 1), x.graph.dims) is ZERO:
            raise ShapeError(f"{op}: index {index.shape} is larger than input {x.shape} at "
                             f"dim {a} (only dim {d} may differ)")
    return x, index, d


def _along_positions(x: Tensor, index: Tensor, d: int) -> Tensor:
    """Flat positions in x of the elements `index` addresses along axis d (on the other
    axes, each index element's own position)."""
    strides, it = row_major_strides(x.view.shape), _pos_dtype(x.view.shape)
    rest = ZERO
    for a, st in enumerate(strides):
        if a != d:
            rest = rest + z(a) * st
    return add(iota(x.graph, rest, index.view.shape, it), _times(index.to(it), strides[d]))


# -- gather / scatter / index_put ----------------------------------------------------------

def gather(x: Tensor, dim: int, index: Tensor) -> Tensor:
    """torch.gather: out[i][j] = x[index[i][j]][j] (for dim 0); index entries in range."""
    flat, idx, d = _along(x, dim, index, "gather")
    pos = _along_positions(flat, idx, d)
    return node(x.graph, "Gather", [pos, flat]).reshape(*index.view.shape)


def index_select(x: Tensor, dim: int, index: Tensor) -> Tensor:
    """torch.index_select: the entries of a 1-d (or 0-d) index along `dim`."""
    if index.ndim > 1:
        raise ShapeError(f"index_select: index must be 0-d or 1-d, got shape {index.shape}")
    d = x._axis(dim)
    if x.ndim == 0:
        return index_select(x.reshape(1), 0, index).reshape(())
    return node(x.graph, "Gather", [_positions(x, [(d, index.reshape(-1))], "index_select"), x])


def take(x: Tensor, index: Tensor) -> Tensor:
    """torch.take: x read as a 1-d tensor at `index` (negative entries count from the end)."""
    return node(x.graph, "Gather", [_positions(x.reshape(-1), [(0, index)], "take"), x])


def scatter(x: Tensor, dim: int, index: Tensor, src: Tensor | Scalar | None = None, *,
            value: Scalar | None = None) -> Tensor:
    """torch.scatter: a copy of x with x[index[i][j]][j] = src[i][j] (for dim 0); src may
    be a tensor or a number (or give `value`)."""
    if (src is None) == (value is None):
        raise TypeError("scatter: give exactly one of src and value")
    if isinstance(src, Tensor) and src.dtype is not x.dtype:
        raise DTypeError(f"scatter: src dtype {src.dtype.name} must equal the input dtype "
                         f"{x.dtype.name}")
    flat, idx, d = _along(x, dim, index, "scatter")
    if isinstance(src, Tensor):
        sv = src.view.unsqueeze(0) if idx.ndim == 1 and src.ndim == 0 else src.view
        if sv.ndim != idx.ndim:
            raise ShapeError(f"scatter: src {src.shape} and index {index.shape} must have "
                             "the same number of dims")
        for a, (n, m) in enumerate(zip(idx.view.shape, sv.shape, strict=True)):
            if simplify(n.lt(m + 1), x.graph.dims) is ZERO:
                raise ShapeError(f"scatter: index {index.shape} is larger than src "
                                 f"{src.shape} at dim {a}")
            sv = sv.slice(a, 0, n)
        vals = src._with_view(sv)
    else:
        vals = full_like(idx, value if src is None else src, x.dtype)
    pos = _along_positions(flat, idx, d)
    return node(x.graph, "Scatter", [flat, pos, vals]).reshape(*x.view.shape)


_REDUCES = ("sum", "prod", "mean", "amax", "amin")


def scatter_reduce(x: Tensor, dim: int, index: Tensor, src: Tensor, reduce: str, *,
                   include_self: bool = True) -> Tensor:
    """torch.scatter_reduce: x with each src[i][j] combined into x[index[i][j]][j] (for
    dim 0) by `reduce` (sum, prod, mean, amax, amin); positions nothing points at keep x.
    Duplicates are exact: a one-hot match of every x position against every src element
    (numel(x) * numel(index) elements), reduced along the src axis."""
    if reduce not in _REDUCES:
        raise ValueError(f"scatter_reduce: reduce must be one of {_REDUCES}, not {reduce!r}")
    if src.dtype is not x.dtype:
        raise DTypeError(f"scatter_reduce: src dtype {src.dtype.name} must equal the input "
                         f"dtype {x.dtype.name}")
    flat, idx, d = _along(x, dim, index, "scatter_reduce")
    sv = src.view.unsqueeze(0) if idx.ndim == 1 and src.ndim == 0 else src.view
    for a, n in enumerate(idx.view.shape):
        sv = sv.slice(a, 0, n)
    vals = src._with_view(sv)
    pos = _along_positions(flat, idx, d)
    return _reduce_into(x, pos, vals, reduce, include_self)


def _reduce_into(x: Tensor, pos: Tensor, vals: Tensor, reduce: str,
                 include_self: bool) -> Tensor:
    """x with vals (at flat logical positions pos, same shape) reduced into it."""
    g, dt = x.graph, x.dtype
    n, m = numel(x.view.shape), numel(pos.view.shape)
    hit = eq(iota(g, z(0), [n, 1], pos.dtype), pos.reshape(1, m))
    v = vals.reshape(1, m).expand(n, m)
    flat = x.reshape(-1)
    if reduce in ("sum", "mean"):
        r = R.sum(where(hit, v, scalar(g, 0, dt)), 1).to(dt)
    elif reduce == "prod":
        r = R.prod(where(hit, v, scalar(g, 1, dt)), 1).to(dt)
    else:
        low = -math.inf if dt.is_float else False if dt.is_bool else (
            -(1 << (dt.bits - 1)) if dt.signed else 0)
        high = math.inf if dt.is_float else True if dt.is_bool else (
            (1 << (dt.bits - 1)) - 1 if dt.signed else (1 << dt.bits) - 1)
        fill = low if reduce == "amax" else high
        r = (R.amax if reduce == "amax" else R.amin)(where(hit, v, scalar(g, fill, dt)), 1)
    hits = R.sum(hit, 1)
    if include_self:
        both = {"sum": add, "mean": add, "prod": mul, "amax": maximum, "amin": minimum}
        r = both[reduce](flat, r)
    if reduce == "mean":  # integers divide rounding down, as PyTorch does
        count = add(hits, 1 if include_self else 0).to(dt)
        r = div(r, count) if dt.is_float else floor_divide(r, maximum(count, 1))
    return where(lt(0, hits), r, flat).to(dt).reshape(*x.view.shape)


def index_reduce(x: Tensor, dim: int, index: Tensor, source: Tensor, reduce: str, *,
                 include_self: bool = True) -> Tensor:
    """torch.index_reduce: source's slices along `dim` reduced into x's slices
    index[j] (reduce: prod, mean, amax, amin)."""
    if index.ndim > 1:
        raise ShapeError(f"index_reduce: index must be 0-d or 1-d, got shape {index.shape}")
    if x.ndim == 0:
        return index_reduce(x.reshape(1), 0, index, source.reshape(-1), reduce,
                            include_self=include_self).reshape(())
    d = x._axis(dim)
    src = source if source.ndim else source.reshape(1)
    iv = index.reshape(-1).view
    for a in range(src.ndim):
        if a != d:
            iv = iv.unsqueeze(a)
    full = index._with_view(iv.expand(src.view.shape))
    return scatter_reduce(x, d, full, src, reduce, include_self=include_self)


def masked_scatter(x: Tensor, mask: Tensor, source: Tensor) -> Tensor:
    """torch.masked_scatter: where mask holds, the next element of source (in row-major
    order), else x: source is read at the running count of the mask, less one."""
    shape = broadcast_shapes(x.view.shape, mask.view.shape, op="masked_scatter")
    xb = x._with_view(x.view.expand(shape))
    mb = mask._with_view(mask.view.expand(shape)).to(bool_)
    src = source.reshape(-1)
    k = numel(src.view.shape)
    if k is ZERO:
        return xb
    taken = add(R.cumsum(mb.reshape(-1), 0), -1)  # in range wherever the mask holds
    at = minimum(maximum(taken, 0), dim_value(x.graph, k - 1, taken.dtype))
    return where(mb, node(x.graph, "Gather", [at, src]).reshape(*shape), xb)


def index_put(x: Tensor, indices: Sequence[Tensor | None], values: Tensor | Scalar,
              accumulate: bool = False) -> Tensor:
    """torch.index_put: a copy of x with x[indices] = values (or += with accumulate).
    `None` entries index a whole dim. A bool mask works when values broadcast over the
    selected elements (their count is data-dependent): then it is a where."""
    g = x.graph
    if isinstance(values, Tensor) and values.dtype is not x.dtype:
        raise DTypeError(f"index_put: values dtype {values.dtype.name} must equal the input "
                         f"dtype {x.dtype.name}")
    adv: list[tuple[int, Tensor]] = []
    dim = 0
    for t in indices:
        if t is not None:
            _check_index_dtype(t, "index_put")
            adv.append((dim, t))
        dim += 1 if t is None or not t.dtype.is_bool else t.ndim
    if dim > x.ndim:
        raise IndexShapeError(f"index_put: too many indices ({dim}) for a tensor of {x.ndim} "
                              f"dims with shape {x.shape}")
    if any(t.dtype.is_bool for _, t in adv):
        return _put_masked(x, adv, values, accumulate)
    if not adv:
        raise ShapeError("index_put: indices must hold at least one tensor")
    out = _layout(x.view.shape, adv, "index_put")[3]
    vshape = values.view.shape if isinstance(values, Tensor) else ()
    if broadcast_shapes(vshape, out, op="index_put") != out:
        raise ShapeError(f"index_put: values of shape {tuple(vshape)} do not broadcast to "
                         f"the indexed shape {tuple(out)}")
    vals = values if isinstance(values, Tensor) else scalar(g, values, x.dtype)
    vals = vals._with_view(vals.view.expand(out))
    pos = _positions(x, adv, "index_put")
    if not accumulate:
        return node(g, "Scatter", [x, pos, vals])
    # sum of the values aimed at each position: a one-hot match, reduced (duplicates add up)
    n, m = numel(x.view.shape), numel(out)
    hit = eq(iota(g, z(0), [n, 1], pos.dtype), pos.reshape(1, m))
    sums = node(g, "SumReduce", [where(hit, vals.reshape(1, m), scalar(g, 0, x.dtype))],
                axis=1)
    return add(x, sums.reshape(*x.view.shape))


def _put_masked(x: Tensor, adv: list[tuple[int, Tensor]], values: Tensor | Scalar,
                accumulate: bool) -> Tensor:
    if len(adv) != 1:
        raise ShapeError("index_put: a bool mask can only be combined with None entries")
    (k, mask), = adv
    shape = x.view.shape
    mshape, rest = shape[k:k + mask.ndim], shape[k + mask.ndim:]
    if tuple(mask.view.shape) != mshape:
        raise IndexShapeError(f"index_put: mask of shape {mask.shape} does not match the "
                              f"indexed dims {tuple(mshape)} of shape {x.shape}")
    vshape = values.view.shape if isinstance(values, Tensor) else ()
    lead, tail = vshape[:max(len(vshape) - len(rest), 0)], vshape[len(vshape) - len(rest):]
    if numel(lead) is not ONE or broadcast_shapes(tail, rest, op="index_put") != rest:
        raise ShapeError(f"index_put: values of shape {tuple(vshape)} must broadcast to the "
                         f"trailing dims {tuple(rest)}: the number of elements a bool mask "
                         "selects is data-dependent")
    vals = (values.reshape(*tail) if isinstance(values, Tensor)
            else scalar(x.graph, values, x.dtype))
    mv = mask.view
    for _ in range(k):
        mv = mv.unsqueeze(0)
    for _ in rest:
        mv = mv.unsqueeze(mv.ndim)
    return where(mask._with_view(mv), add(x, vals) if accumulate else vals, x)


# -- triangles ---------------------------------------------------------------------------

def _triangle(x: Tensor, diagonal: IntLike, lower: bool) -> Tensor:
    if x.ndim < 2:
        name = "tril" if lower else "triu"
        raise ShapeError(f"{name}: input must have at least 2 dims, got shape {x.shape}")
    v = x.view
    d = z(v.ndim - 1) - z(v.ndim - 2)  # column - row
    keep = d.lt(sym(diagonal) + 1) if lower else d.ge(diagonal)
    return x._with_view(View(v.shape, v.index, simplify(v.valid & keep, v.bounds())))


def tril(x: Tensor, diagonal: IntLike = 0) -> Tensor:
    """Zero above the `diagonal`-th diagonal: a view predicate, no node (exact)."""
    return _triangle(x, diagonal, lower=True)


def triu(x: Tensor, diagonal: IntLike = 0) -> Tensor:
    """Zero below the `diagonal`-th diagonal: a view predicate, no node (exact)."""
    return _triangle(x, diagonal, lower=False)


# -- construction ------------------------------------------------------------------------

def _sizes(args: tuple) -> list:
    return list(args[0]) if len(args) == 1 and isinstance(args[0], (list, tuple)) else list(args)


def full(g: Graph, shape: Sequence[IntLike | str], value: Scalar, dtype: Any = None) -> Tensor:
    """A constant of `shape` (a view of one Constant node); dtype from value by default."""
    c = scalar(g, value, promote_types(value) if dtype is None else dtype)
    return c._with_view(c.view.expand(g._shape(shape)))


def zeros(g: Graph, *shape: Any, dtype: Any = f32) -> Tensor:
    return full(g, _sizes(shape), 0, dtype)


def ones(g: Graph, *shape: Any, dtype: Any = f32) -> Tensor:
    return full(g, _sizes(shape), 1, dtype)


def arange(g: Graph, start: IntLike | float | str, end: IntLike | float | str | None = None,
           step: IntLike | float = 1, dtype: Any = None) -> Tensor:
    """torch.arange: start, start + step, ... below `end` (above it for step < 0); an
    integer `end` may be symbolic. Float values are start + i*step in float64, rounded."""
    if end is None:
        start, end = 0, start
    start, end, step = (sym(a) if isinstance(a, str) else a for a in (start, end, step))
    start, end, step = (a.value if isinstance(a, Expr) and a.is_num else a
                        for a in (start, end, step))
    floats = any(isinstance(a, float) for a in (start, end, step))
    dt = as_dtype(dtype) if dtype is not None else (f32 if floats else i64)
    if dt.is_bool:
        raise DTypeError("arange: bool is not supported")
    if isinstance(step, Expr) or (floats and (isinstance(start, Expr) or isinstance(end, Expr))):
        raise ShapeError(f"arange: only an integer start or end may be symbolic, got "
                         f"start={start}, end={end}, step={step}")
    if step == 0:
        raise ShapeError("arange: step must be nonzero")
    if floats:
        span = float(end) - float(start)
        length = sym(max(math.ceil(span / step), 0))
    else:
        span = sym(end) - sym(start)
        k = int(step)
        n = (span + k - 1) // k if k > 0 else (-span - k - 1) // -k
        length = simplify(emax(n, 0), g.dims)
    if isinstance(span, (int, float)) or span.is_num:
        if float(span) * step < 0:
            raise ShapeError(f"arange: upper bound and lower bound inconsistent with step "
                             f"sign (start={start}, end={end}, step={step})")
    if dt.is_int:  # torch casts start and step to the integer type first
        first = start if isinstance(start, Expr) else int(start)
        return iota(g, first + z(0) * int(step), [length], dt)
    i = iota(g, z(0), [length], i64).to(f64)
    first_f = dim_value(g, start, f64) if isinstance(start, Expr) else float(start)
    return add(mul(i, float(step)), first_f).to(dt)


for _name, _fn in (("full", full), ("zeros", zeros), ("ones", ones), ("arange", arange)):
    setattr(Graph, _name, _fn)


def zeros_like(x: Tensor, dtype: Any = None) -> Tensor:
    return full_like(x, 0, dtype)


def ones_like(x: Tensor, dtype: Any = None) -> Tensor:
    return full_like(x, 1, dtype)


def new_full(x: Tensor, size: Sequence[IntLike | str], fill_value: Scalar,
             dtype: Any = None) -> Tensor:
    return full(x.graph, size, fill_value, x.dtype if dtype is None else dtype)


def new_zeros(x: Tensor, *size: Any, dtype: Any = None) -> Tensor:
    return new_full(x, _sizes(size), 0, dtype)


def new_ones(x: Tensor, *size: Any, dtype: Any = None) -> Tensor:
    return new_full(x, _sizes(size), 1, dtype)


for _fn in (gather, index_select, take, scatter, index_put, tril, triu, zeros_like, ones_like,
            new_full, new_zeros, new_ones):
    tensor_method(_fn)
