"""The graph: an append-only list of validated HLIR nodes, its inputs, outputs and dims."""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from lumos import hlir
from lumos.dtype import DType, as_dtype, f32
from lumos.errors import ShapeError
from lumos.hlir import Node
from lumos.shape import Expr, View, sym
from lumos.shape.expr import is_axis_var

if TYPE_CHECKING:
    from lumos.frontend.tensor import Tensor

_DIM_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


class Graph:
    """Records nodes; computes nothing. `tensor()` adds inputs, `Tensor` methods add ops."""

    def __init__(self) -> None:
        self.nodes: list[Node] = []
        self.dims: dict[str, tuple[int, int | None]] = {}
        self.outputs: list[int] = []
        self.output_of: dict[tuple[int, View], int] = {}  # (node, view) -> Output node
        self._dedup: dict[tuple[Node, str], int] = {}
        self._input_names: dict[str, int] = {}
        # composite ops' vector-Jacobian products (frontend record_vjp, for lumos.autograd):
        # node -> (input Tensor, g -> gradient of the input)
        self.vjps: dict[int, tuple[Tensor, Any]] = {}

    def __getstate__(self) -> dict:
        """Without the VJPs (closures): a graph sent to a worker is compiled, not
        differentiated."""
        return self.__dict__ | {"vjps": {}}

    # -- building -----------------------------------------------------------
    def dim(self, name: str, min: int = 1, max: int | None = None) -> Expr:
        """Declare a symbolic dimension with its inclusive range; returns it as an Expr."""
        if not _DIM_NAME.fullmatch(name) or is_axis_var(name):
            raise ValueError(f"bad dimension name {name!r} (identifier, not z0, z1, ...)")
        if min < 0 or (max is not None and max < min):
            raise ValueError(f"dimension {name!r}: bad range [{min}, {max}]")
        self.dims[name] = (min, max)
        return sym(name)

    def _shape(self, shape: Sequence[int | str | Expr]) -> tuple[Expr, ...]:
        out = []
        for s in shape:
            if isinstance(s, str) and s not in self.dims:
                self.dim(s)
            e = sym(s)
            if e.is_num and e.value < 0:
                raise ShapeError(f"negative dimension {e.value} in shape {tuple(shape)}")
            for v in e.vars():
                if is_axis_var(v):
                    raise ShapeError(f"shape {tuple(shape)} uses axis variable {v}")
                if v not in self.dims:
                    self.dim(v)
            out.append(e)
        return tuple(out)

    def tensor(self, shape: Sequence[int | str | Expr], dtype: Any = f32,
               name: str | None = None, weight: bool = False) -> Tensor:
        """A new graph input. Shape entries are ints, dim names or Exprs. `weight`: its
        data is bound once and read many times (a parameter), so a compiled program may
        compute what depends on weights alone once per binding instead of every run."""
        from lumos.frontend.tensor import Tensor

        name = name or f"input{len(self._input_names)}"
        if name in self._input_names:
            raise ValueError(f"an input named {name!r} already exists")
        shp = self._shape(shape)
        nid = self.add("Input", shape=shp, dtype=as_dtype(dtype), name=name, persist=weight)
        self._input_names[name] = nid
        return Tensor(self, nid, View.contiguous(shp), self.nodes[nid].dtype)

    def add(self, op: str, inputs: Sequence[int] = (), views: Sequence[View] = (), *,
            shape: Sequence[Expr] | None = None, dtype: DType | None = None,
            name: str | None = None, value: Any = None, axis: int | None = None,
            expr: Expr | None = None, persist: bool = False) -> int:
        """Validate and append a node (identical pure nodes are shared); returns its id."""
        inputs, views = tuple(inputs), tuple(views)
        for i, v in zip(inputs, views, strict=True):
            if not 0 <= i < len(self.nodes):
                raise ValueError(f"{op}: input node {i} does not exist")
            for e in v.shape:
                if any(is_axis_var(n) for n in e.vars()):
                    raise ShapeError(f"{op}: view shape {v.shape} uses an axis variable")
        out_shape, out_dtype = hlir.infer(
            op, tuple(self.nodes[i].dtype for i in inputs), views,
            shape=None if shape is None else tuple(shape), dtype=dtype, axis=axis)
        node = Node(op, inputs, views, out_shape, out_dtype, name=name, value=value,
                    axis=axis, expr=expr, persist=persist)
        if op not in ("Input", "Output"):
            key = (node, repr(value))  # 0.0 == -0.0, but they are different constants
            hit = self._dedup.get(key)
            if hit is not None:
                return hit
            self._dedup[key] = len(self.nodes)
        self.nodes.append(node)
        if op == "Output":
            self.outputs.append(len(self.nodes) - 1)
        return len(self.nodes) - 1

    def output(self, node: int, view: View, persist: bool = False) -> int:
        """Mark the value `node` read through `view` as a result (idempotent)."""
        key = (node, view)
        if key not in self.output_of:
            self.output_of[key] = self.add("Output", (node,), (view,), persist=persist)
        return self.output_of[key]

    # -- inspection ----------------------------------------------------------
    @property
    def inputs(self) -> dict[str, int]:
        return dict(self._input_names)

    def count(self, op: str | None = None) -> int:
        """Number of nodes (of one op), structural ones included."""
        return len(self.nodes) if op is None else sum(n.op == op for n in self.nodes)

    def compile(self, runtime: Any, options: Any = None) -> Any:
        """Compile for `runtime` (e.g. `lumos.ReferenceRuntime()`); returns its Program."""
        if not self.outputs:
            raise ValueError("the graph has no outputs: mark results with t.output()")
        return runtime.compile(self, options)

    def __repr__(self) -> str:
        lines = [f"Graph({len(self.nodes)} nodes, dims={self.dims})"]
        lines += [f"  %{i} = {n!r}" for i, n in enumerate(self.nodes)]
        return "\n".join(lines)


def live_nodes(g: Any) -> list[int]:
    """The nodes the outputs depend on, in graph (topological) order. Works on any graph
    of nodes with `.inputs` and a list of `.outputs` (a Graph, a CPU kernel program)."""
    live, stack = set(), list(g.outputs)
    while stack:
        i = stack.pop()
        if i not in live:
            live.add(i)
            stack.extend(g.nodes[i].inputs)
    return sorted(live)
