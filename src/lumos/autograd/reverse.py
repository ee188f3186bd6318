"""Reverse mode over the fifteen primitives: `grad(loss, params)`.

Newest first, every node between the params and the loss turns the gradient of its
result into gradients of the values it read: one vector-Jacobian product per primitive
(`RULES`), written with ordinary Tensor ops. Each of those is carried back through
the view the node read that input with (`scatter_add`) and added to the producer's
gradient. Everything built is an ordinary node of the same graph: the backward pass
compiles and runs like any other program. Composite ops that recorded a closed-form VJP
(`graph.vjps`, frontend `record_vjp`: gelu, erf, softmax, log_softmax) send the
gradient straight to their input instead of through their formulation.

Integer and bool values (indices, comparisons, Iota, Mod and casts of integers) carry
no gradient. Ties of MaxReduce share the gradient evenly (torch.amax's rule), so
relu'(0) = 1/2 where torch says 0.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

from lumos.autograd.gather import gather_adjoint
from lumos.autograd.scatter import scatter_add
from lumos.errors import DTypeError, ShapeError
from lumos.frontend.tensor import Tensor, cos, eq, full_like, node, trunc
from lumos.graph import Graph
from lumos.hlir import Node
from lumos.shape import View
from lumos.shape.expr import ONE
from lumos.shape.view import numel

LN2 = math.log(2.0)

# rule(g, xs, y, node) -> per input, a thunk building the gradient of that read (or None)
Thunk = Callable[[], Tensor] | None
Rule = Callable[[Tensor, list[Tensor], Tensor, Node], list[Thunk]]


def _spread(t: Tensor, axis: int, like: Tensor) -> Tensor:
    """t (reduced over `axis`) broadcast back to like's shape."""
    return t._with_view(t.view.unsqueeze(axis).expand(like.view.shape))


def _max(g: Tensor, xs: list[Tensor], y: Tensor, n: Node) -> list[Thunk]:
    """torch.amax: (g / count) at every position equal to the max."""
    x = xs[0]

    def dx() -> Tensor:
        hit = eq(x, _spread(y, n.axis, x)).to(g.dtype)
        count = node(g.graph, "SumReduce", [hit], axis=n.axis)
        return _spread(g / count, n.axis, x) * hit

    return [dx]


def _scatter(g: Tensor, xs: list[Tensor], y: Tensor, n: Node) -> list[Thunk]:
    """dest: g with the written positions zeroed; src: g at the written positions."""
    _, idx, src = xs
    return [lambda: node(g.graph, "Scatter", [g, idx, full_like(src, 0)]), None,
            lambda: node(g.graph, "Gather", [idx, g])]


RULES: dict[str, Rule] = {
    "Exp2": lambda g, xs, y, n: [lambda: g * y * LN2],
    "Log2": lambda g, xs, y, n: [lambda: g / (xs[0] * LN2)],
    "Sin": lambda g, xs, y, n: [lambda: g * cos(xs[0])],
    "Sqrt": lambda g, xs, y, n: [lambda: g / (y * 2.0)],
    "Recip": lambda g, xs, y, n: [lambda: -(g * y * y)],
    "Add": lambda g, xs, y, n: [lambda: g, lambda: g],
    "Mul": lambda g, xs, y, n: [lambda: g * xs[1], lambda: g * xs[0]],
    "Mod": lambda g, xs, y, n: [lambda: g, lambda: -(g * trunc(xs[0] / xs[1]))],
    "SumReduce": lambda g, xs, y, n: [lambda: _spread(g, n.axis, xs[0])],
    "MaxReduce": _max,
    "Cast": lambda g, xs, y, n: [lambda: g.to(xs[0].dtype)],
    "Gather": lambda g, xs, y, n: [None, lambda: gather_adjoint(g, xs[0], xs[1].view.shape)],
    "Scatter": _scatter,
}


def grad(loss: Tensor, params: Sequence[Tensor],
         grad_output: Tensor | None = None) -> list[Tensor]:
    """Gradients of `loss` (one element, or weighted by `grad_output`) with respect to
    each of `params` (graph inputs or other whole node results), as graph tensors."""
    graph, nodes = loss.graph, loss.graph.nodes
    _check(loss, params)
    if grad_output is None:
        if numel(loss.view.shape) is not ONE:
            raise ShapeError(f"grad: the loss has shape {loss.shape}; a gradient can only be "
                             "implied for one element, pass grad_output")
        seed = full_like(loss, 1.0)
    else:
        if grad_output.view.shape != loss.view.shape:
            raise ShapeError(f"grad: grad_output has shape {grad_output.shape}, the loss "
                             f"{loss.shape}")
        seed = grad_output.to(loss.dtype)
    live = _between(graph, {p.node for p in params}, loss.node)
    adj: dict[int, Tensor] = {}

    def accumulate(i: int, d: Tensor) -> None:
        adj[i] = d if i not in adj else adj[i] + d

    accumulate(loss.node, scatter_add(seed, loss.view, nodes[loss.node].shape))
    custom = _custom(graph, live, {p.node for p in params})
    for i in sorted(live, reverse=True):
        n = nodes[i]
        if i in custom and i in adj:
            x, vjp = custom[i]
            accumulate(x.node, scatter_add(vjp(adj[i]), x.view, nodes[x.node].shape))
            continue
        if i not in adj or n.op not in RULES:
            continue
        xs = [Tensor(graph, j, v, nodes[j].dtype) for j, v in zip(n.inputs, n.views,
                                                                   strict=True)]
        y = Tensor(graph, i, View.contiguous(n.shape), n.dtype)
        for j, v, d in zip(n.inputs, n.views, RULES[n.op](adj[i], xs, y, n), strict=True):
            if d is not None and j in live and nodes[j].dtype.is_float:
                accumulate(j, scatter_add(d(), v, nodes[j].shape))
    return [adj[p.node] if p.node in adj else full_like(p, 0.0) for p in params]


def _check(loss: Tensor, params: Sequence[Tensor]) -> None:
    if not loss.dtype.is_float:
        raise DTypeError(f"grad: the loss must be a float tensor, got {loss.dtype.name}")
    for k, p in enumerate(params):
        n = loss.graph.nodes[p.node] if p.graph is loss.graph else None
        if n is None:
            raise ValueError(f"grad: parameter {k} belongs to another graph")
        if not p.dtype.is_float:
            raise DTypeError(f"grad: parameter {k} ({n.name or n.op}) is {p.dtype.name}; only "
                             "float tensors have gradients")
        if p.view != View.contiguous(n.shape):
            raise ValueError(f"grad: parameter {k} is a view of node %{p.node}; take the "
                             "gradient with respect to the whole tensor")


def _custom(graph: Graph, live: set[int],
            params: set[int]) -> dict[int, tuple[Tensor, Callable[[Tensor], Tensor]]]:
    """The recorded VJPs of composite ops (frontend `record_vjp`: gelu, softmax, ...)
    that apply: of a float input on the way to the loss, with no parameter among the
    nodes they skip."""
    out = {}
    for i, (x, vjp) in graph.vjps.items():
        if i in live and x.node in live and graph.nodes[x.node].dtype.is_float and \
                not params & (_between(graph, {x.node}, i) - {x.node, i}):
            out[i] = (x, vjp)
    return out


def _between(graph: Graph, sources: set[int], sink: int) -> set[int]:
    """Nodes on a path from one of `sources` to `sink` (sources and sink included)."""
    above, stack = set(), [sink]
    while stack:
        i = stack.pop()
        if i not in above:
            above.add(i)
            stack.extend(graph.nodes[i].inputs)
    live: set[int] = set()
    for i in sorted(above):
        if i in sources or any(j in live for j in graph.nodes[i].inputs):
            live.add(i)
    return live
