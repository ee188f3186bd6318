"""Sorting and order statistics: sort, argsort, topk, kthvalue, median, nanmedian, mode,
searchsorted.

`sort` is a bitonic sorting network over (value, original index) pairs along the
sorted axis, padded to a power of two p: log2(p) * (log2(p) + 1) / 2 compare-exchange
steps, each an elementwise step over the axis whose partner is read through a view
(element i meets i xor stride), so n elements cost O(n log^2 n) work in a fixed
number of nodes. Comparing the original index on equal values makes it stable (the
order PyTorch's `stable=True` gives). NaN sorts above everything, as in PyTorch:
last ascending, first descending. topk, kthvalue and the medians read the sorted
result; mode and searchsorted count matches instead (n * n, no sort).
"""

from __future__ import annotations

from typing import Any

from lumos.dtype import i32, i64
from lumos.errors import ShapeError
from lumos.frontend import reduce as R
from lumos.frontend.index import gather
from lumos.frontend.tensor import (
    Tensor,
    add,
    eq,
    floor_divide,
    iota,
    isnan,
    logical_and,
    logical_not,
    logical_or,
    lt,
    where,
)
from lumos.shape import Expr, z


def _before(va: Tensor, ia: Tensor, vb: Tensor, ib: Tensor, n: Expr,
            descending: bool) -> Tensor:
    """Whether (va, ia) sorts before (vb, ib): by value (NaN highest), then by index;
    padding (index >= n) after everything (both cases are the index order)."""
    first = lt(ia, ib)
    less = lt(vb, va) if descending else lt(va, vb)
    same = eq(va, vb)
    if va.dtype.is_float:
        na, nb = isnan(va), isnan(vb)
        hi, lo = (na, nb) if descending else (nb, na)
        less = logical_or(less, logical_and(hi, logical_not(lo)))
        same = logical_or(same, logical_and(na, nb))
    pad = logical_or(lt(iota(va.graph, n - 1, ia.view.shape, ia.dtype), ia),
                     lt(iota(va.graph, n - 1, ib.view.shape, ib.dtype), ib))
    return where(pad, first, logical_or(less, logical_and(same, first)))


def _sort_last(x: Tensor, descending: bool) -> tuple[Tensor, Tensor]:
    """(values, indices) of x sorted along its last axis (of static size)."""
    n = x.view.shape[-1]
    if not n.is_num:
        raise ShapeError(f"sort: the sorted dim of shape {x.shape} must have a static size")
    last = x.ndim - 1
    p = 1 << max(n.value - 1, 0).bit_length()
    v = x.to(i32) if x.dtype.is_bool else x
    if p > n.value:
        v = v._with_view(v.view.pad(last, 0, p - n.value))
    shape = v.view.shape
    it = i32 if p < 2**31 else i64
    i = iota(x.graph, z(last), shape, it)
    k = z(last)
    size = 2
    while size <= p:
        stride = size // 2
        while stride >= 1:
            partner = {f"z{last}": k + stride - 2 * stride * ((k // stride) % 2)}
            vb = v._with_view(v.view.remap(shape, partner))
            ib = i._with_view(i.view.remap(shape, partner))
            keep_min = lt(iota(x.graph, ((k // stride) % 2 + (k // size) % 2) % 2, shape, i32),
                          1)  # the lower of a pair in an ascending block, or the upper
            take = eq(_before(v, i, vb, ib, n, descending), keep_min)
            v, i = where(take, v, vb), where(take, i, ib)
            stride //= 2
        size *= 2
    v, i = v[..., :n.value], i[..., :n.value]
    return v.to(x.dtype), i.to(i64)


def _moved(x: Tensor, dim: int, op: str) -> tuple[Tensor, int]:
    """x with `dim` moved last (a 0-d x as one element), and the normalized dim."""
    if x.ndim == 0:
        return x.reshape(1), 0
    d = x._axis(dim)
    return x.transpose(d, -1) if d != x.ndim - 1 else x, d


def _back(t: Tensor, x: Tensor, d: int) -> Tensor:
    if x.ndim == 0:
        return t.reshape(())
    return t.transpose(d, -1) if d != x.ndim - 1 else t


def sort(x: Tensor, dim: int = -1, descending: bool = False,
         stable: bool | None = None) -> tuple[Tensor, Tensor]:
    """torch.sort, stable always (ties keep their order)."""
    xm, d = _moved(x, dim, "sort")
    v, i = _sort_last(xm, descending)
    return _back(v, x, d), _back(i, x, d)


def argsort(x: Tensor, dim: int = -1, descending: bool = False,
            stable: bool = False) -> Tensor:
    return sort(x, dim, descending)[1]


def topk(x: Tensor, k: int, dim: int = -1, largest: bool = True,
         sorted: bool = True) -> tuple[Tensor, Tensor]:
    """The k largest (or smallest) along dim, in sorted order, ties by index."""
    xm, d = _moved(x, dim, "topk")
    if not 0 <= k <= xm.view.shape[-1].value:
        raise ShapeError(f"topk: k={k} is out of range for dim {dim} of shape {x.shape}")
    v, i = _sort_last(xm, largest)
    return _back(v[..., :k], x, d), _back(i[..., :k], x, d)


def _pick(v: Tensor, i: Tensor, pos: Tensor | int, x: Tensor, d: int,
          keepdim: bool) -> tuple[Tensor, Tensor]:
    """Element `pos` (a number, or a tensor with a size-1 last axis) of sorted (v, i)."""
    if isinstance(pos, int):
        vs, js = v[..., pos:pos + 1], i[..., pos:pos + 1]
    else:
        vs, js = gather(v, -1, pos), gather(i, -1, pos)
    if keepdim and x.ndim:
        return _back(vs, x, d), _back(js, x, d)
    return vs[..., 0], js[..., 0]


def kthvalue(x: Tensor, k: int, dim: int = -1, keepdim: bool = False) -> tuple[Tensor, Tensor]:
    xm, d = _moved(x, dim, "kthvalue")
    n = xm.view.shape[-1].value
    if not 1 <= k <= n:
        raise ShapeError(f"kthvalue: k={k} is out of range for dim {dim} of shape {x.shape}")
    v, i = _sort_last(xm, False)
    return _pick(v, i, k - 1, x, d, keepdim)


def median(x: Tensor, dim: int | None = None, keepdim: bool = False,
           ignore_nan: bool = False) -> Any:
    """The lower median (NaN if the slice holds one; with `ignore_nan`, of the others).
    Without dim: the value over all elements."""
    if dim is None:
        return median(x.reshape(-1), 0, ignore_nan=ignore_nan)[0]
    xm, d = _moved(x, dim, "median")
    n = xm.view.shape[-1].value
    if n == 0:
        raise ShapeError(f"median: dim {dim} of shape {x.shape} is empty")
    v, i = _sort_last(xm, False)
    if not x.dtype.is_float:
        return _pick(v, i, (n - 1) // 2, x, d, keepdim)
    count = R.sum(logical_not(isnan(xm)), -1, keepdim=True)  # NaNs sort last
    if ignore_nan:  # the lower median of the count numbers (the first NaN if none)
        pos = where(lt(count, 1), 0, floor_divide(add(count, -1), 2))
    else:  # the first NaN if there is one
        pos = where(lt(count, n), count, (n - 1) // 2)
    return _pick(v, i, pos, x, d, keepdim)


def nanmedian(x: Tensor, dim: int | None = None, keepdim: bool = False) -> Any:
    return median(x, dim, keepdim, ignore_nan=True)


def mode(x: Tensor, dim: int = -1, keepdim: bool = False) -> tuple[Tensor, Tensor]:
    """The most frequent value along dim (the smallest of equally frequent ones) and the
    last index holding it: every element's count of equals (n * n)."""
    xm, d = _moved(x, dim, "mode")
    n = xm.view.shape[-1]
    shape = (*xm.view.shape, n)
    a = xm._with_view(xm.view.unsqueeze(xm.ndim).expand(shape))
    b = xm._with_view(xm.view.unsqueeze(xm.ndim - 1).expand(shape))
    count = R.sum(eq(a, b), -1)  # count[..., i]: how many equal x[..., i]
    best = R.amax(count, -1, keepdim=True)
    cand = eq(count, best)
    v = R.amin(where(cand, xm, _top(xm)), -1, keepdim=True)
    j = iota(x.graph, z(xm.ndim - 1), xm.view.shape, i64)
    idx = R.amax(where(logical_and(cand, eq(xm, v)), j, -1), -1, keepdim=True)
    return _pick(v, idx, 0, x, d, keepdim)


def _top(x: Tensor) -> Any:
    dt = x.dtype
    if dt.is_float:
        return float("inf")
    if dt.is_bool:
        return True
    return (1 << (dt.bits - 1)) - 1 if dt.signed else (1 << dt.bits) - 1


def searchsorted(seq: Tensor, values: Tensor, *, right: bool = False,
                 out_int32: bool = False, sorter: Tensor | None = None) -> Tensor:
    """Insertion points of values in the sorted last axis of seq: how many entries are
    below each value (right: not above it); NaN values go to the end."""
    if sorter is not None:
        seq = gather(seq, -1, sorter)
    n = seq.view.shape[-1]
    if seq.ndim == 1:
        s = seq._with_view(seq.view.expand((*values.view.shape, n)))
    else:
        s = seq._with_view(seq.view.unsqueeze(seq.ndim - 1).expand((*values.view.shape, n)))
    v = values._with_view(values.view.unsqueeze(values.ndim).expand(s.view.shape))
    below = logical_not(lt(v, s)) if right else logical_not(
        logical_or(lt(v, s), eq(v, s)))  # not (s > v), not (s >= v): NaN counts all
    return R.sum(below, -1).to(i32 if out_int32 else i64)


for _fn in (sort, argsort, topk, kthvalue, median, nanmedian, mode):
    setattr(Tensor, _fn.__name__, _fn)
