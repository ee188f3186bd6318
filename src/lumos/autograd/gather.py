"""The adjoint of Gather: a scatter-add of the gradient onto the gathered positions.

There is no scatter-add primitive, so the adjoint is built from what the index is made
of. The index tensor is read back into `e(z) + sum(c_k(z) * L_k(z))`: `e` and the `c_k`
are symbolic expressions of the position z (from Iota, Constant, Add, Mul, Cast), the
`L_k` are opaque integer tensors (token ids, a condition, user indices).

* no opaque part: the Gather reads the data through a view, so its adjoint is
  `scatter_add` through that view (exact, no comparison at all);
* bool parts (the condition of `where`), whatever their coefficient: one view read
  per value, on the gradient masked to it (`where(cond, g, 0)`);
* an opaque part with a constant coefficient (embedding rows, gather along a dim):
  a one-hot axis over the values it can take where the position is in range, then
  `scatter_add` through the view at `e + c*v` of `g * (L == v)` (alone: a matrix
  product the CPU runs as BLAS; a non-finite g then spreads NaN over its column, as
  0 * inf) or of `where(cond and L == v, g, 0)` (with bool parts). This is
  O(numel(index) * values);
* anything else: one-hot over every data position, O(numel(index) * numel(data)).
"""

from __future__ import annotations

from itertools import product

from lumos.autograd.scatter import coords, scatter_add
from lumos.dtype import DType
from lumos.frontend.tensor import Tensor, eq, iota, logical_and, logical_not, where
from lumos.shape import Expr, View, nrange, proves_lt, simplify, sym, z
from lumos.shape.expr import ONE, ZERO
from lumos.shape.view import numel


def gather_adjoint(g: Tensor, idx: Tensor, data_shape: tuple[Expr, ...]) -> Tensor:
    """d of `data_shape` with d_flat[p] = sum of g[z] over z with idx[z] == p."""
    nd = numel(data_shape)
    bounds = {f"z{i}": (0, s - 1) for i, s in enumerate(idx.view.shape)}
    e, parts = _affine(idx)
    conds = [(c, leaf) for c, leaf in parts if leaf.dtype.is_bool]
    rest = [(c, leaf) for c, leaf in parts if not leaf.dtype.is_bool]
    plans = []
    for choice in product((0, 1), repeat=len(conds)):
        q = e
        for (c, _), v in zip(conds, choice, strict=True):
            q = q + c * v
        rng = _values(q, rest[0][0], nd, bounds) if len(rest) == 1 else None
        plans.append((choice, q, rng))
    if len(conds) > 2 or len(rest) > 1 or any(r is None for _, _, r in plans if rest):
        conds, rest, plans = [], [(ONE, idx)], [((), ZERO, (ZERO, nd))]
    total: Tensor | None = None
    for choice, q, rng in plans:
        mask: Tensor | None = None
        for (_, leaf), v in zip(conds, choice, strict=True):
            hit = leaf if v else logical_not(leaf)
            mask = hit if mask is None else logical_and(mask, hit)
        gg, shape = g, g.view.shape
        if rest and mask is None:  # a one-hot matrix product: g times (leaf == v)
            (c, leaf), (lo, size) = rest[0], rng
            v = z(len(shape)) + lo
            shape, q = (*shape, size), q + c * v
            gg = g.unsqueeze(-1) * _one_hot(leaf, lo, size, g.dtype)
        elif rest:
            (c, leaf), (lo, size) = rest[0], rng
            v = z(len(shape)) + lo
            shape = (*shape, size)
            hit = eq(leaf.unsqueeze(-1), iota(g.graph, v, shape, leaf.dtype))
            mask = logical_and(mask.unsqueeze(-1), hit)
            q, gg = q + c * v, g.unsqueeze(-1)
        if mask is not None:
            gg = where(mask, gg, 0.0)
        part = scatter_add(gg, View(shape, q, q.ge(0) & q.lt(nd)), (nd,))
        total = part if total is None else total + part
    assert total is not None
    return total.reshape(*data_shape)


def _one_hot(leaf: Tensor, lo: Expr, size: Expr, dtype: DType) -> Tensor:
    """(leaf == lo + v) as `dtype`, v along a new last axis of `size` values. Built on the
    leaf's node when that is no larger than the read (token ids broadcast over the
    embedding width), then read through the leaf's view: the hot matrix does not vary
    along broadcast axes, so its product with g sums as one matrix product."""
    n = leaf.graph.nodes[leaf.node]
    shape = leaf.view.shape
    if leaf.view.valid is ONE and not proves_lt(numel(shape), numel(n.shape), {}):
        whole = Tensor(leaf.graph, leaf.node, View.contiguous(n.shape), leaf.dtype)
        hot = eq(whole.unsqueeze(-1), iota(leaf.graph, z(len(n.shape)) + lo, (*n.shape, size),
                                          leaf.dtype)).to(dtype)
        return hot._with_view(View((*shape, size), leaf.view.index * size + z(len(shape))))
    return eq(leaf.unsqueeze(-1), iota(leaf.graph, z(len(shape)) + lo, (*shape, size),
                                       leaf.dtype)).to(dtype)


def _values(q: Expr, c: Expr, nd: Expr, bounds: dict) -> tuple[Expr, Expr] | None:
    """(lowest, count) of the values v for which q + c*v can be in [0, nd)."""
    lo_q, hi_q = nrange(q, bounds)
    if not c.is_num or c.value <= 0 or lo_q is None or hi_q is None or not nd.is_num:
        return None
    lo, hi = -(hi_q // c.value), (nd.value - 1 - lo_q) // c.value
    return sym(lo), sym(max(hi - lo + 1, 0))


def _affine(t: Tensor) -> tuple[Expr, list[tuple[Expr, Tensor]]]:
    """The integer tensor t as e(z) + sum(c(z) * leaf) (leaves: tensors of t's shape)."""
    g = t.graph
    n = g.nodes[t.node]
    at = coords(t.view.index, n.shape)
    plain = t.view.valid is ONE
    if n.op == "Iota" and plain:
        return n.expr.subs(at), []
    if n.op == "Constant" and plain:
        return sym(n.value), []
    if n.op in ("Add", "Mul", "Cast") and plain:
        b = t.view.bounds()
        ins = [Tensor(g, i, View(t.view.shape, simplify(v.index.subs(at), b),
                                 simplify(v.valid.subs(at), b)), g.nodes[i].dtype)
               for i, v in zip(n.inputs, n.views, strict=True)]
        src, dst = ins[0].dtype, n.dtype
        if n.op == "Cast" and src.is_bool:
            return ZERO, [(ONE, ins[0])]
        if n.op == "Cast" and src.is_int and (src.bits <= dst.bits if src.signed == dst.signed
                                              else not src.signed and src.bits < dst.bits):
            return _affine(ins[0])  # a cast that keeps every value
        if n.op == "Add":
            (ea, pa), (eb, pb) = _affine(ins[0]), _affine(ins[1])
            return ea + eb, pa + pb
        if n.op == "Mul":
            (ea, pa), (eb, pb) = _affine(ins[0]), _affine(ins[1])
            if not pa:
                return ea * eb, [(ea * c, leaf) for c, leaf in pb]
            if not pb:
                return ea * eb, [(eb * c, leaf) for c, leaf in pa]
    return ZERO, [(ONE, t)]
