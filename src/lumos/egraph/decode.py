"""A chosen program (one e-node per reachable class) -> a lumos Graph of HLIR nodes."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from lumos.dtype import as_dtype
from lumos.egraph.encode import FIELDS, text_value
from lumos.egraph.space import SearchSpace
from lumos.errors import LumosError
from lumos.graph import Graph


def decode(space: SearchSpace, choice: Mapping[int, int] | Sequence[int],
           dims: Mapping[str, tuple[int, int | None]]) -> Graph:
    """The Graph of the program `choice` picks (class id -> alternative index): inputs by
    name, the Root's outputs in order with their persist flags. Only HLIR e-nodes can be
    decoded; raises on a cyclic choice."""
    g = Graph()
    g.dims.update(dims)
    built: dict[int, int] = {}
    on_path: set[int] = set()
    stack = [space.root]
    while stack:
        c = stack[-1]
        if c in built:
            stack.pop()
            continue
        n = space.classes[c][choice[c]]
        todo = [k for k in n.children if k not in built]
        if todo:
            if c in on_path or any(k in on_path for k in todo):
                raise LumosError(f"decode: the chosen program has a cycle through e-class {c}")
            on_path.add(c)
            stack.extend(reversed(todo))
            continue
        stack.pop()
        on_path.discard(c)
        inputs = [built[k] for k in n.children]
        if n.op == "Root":
            g.outputs[:] = inputs
            return g
        if n.op not in FIELDS:
            raise LumosError(f"decode: {n.op} is not an HLIR op")
        f = dict(zip(("shape",) + FIELDS[n.op], n.fields, strict=True))
        views = [v for name, v in zip(FIELDS[n.op], n.fields[1:], strict=True) if name == "view"]
        if n.op == "Input":
            built[c] = g.tensor(f["shape"], as_dtype(f["dtype"]), f["name"]).node
        elif n.op == "Output":
            built[c] = g.add("Output", inputs, views, persist=f["persist"])
            g.output_of.setdefault((inputs[0], views[0]), built[c])
        else:
            dt = as_dtype(f["dtype"]) if "dtype" in f else None
            value = text_value(f["value"]) if "value" in f else None
            built[c] = g.add(n.op, inputs, views, shape=f["shape"], dtype=dt, value=value,
                             axis=f.get("axis"), expr=f.get("expr"))
    raise LumosError("decode: the space has no Root")
