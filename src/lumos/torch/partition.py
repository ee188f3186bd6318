"""Fallback: the regions of an ATen graph that translate run in lumos, the rest in PyTorch.

The failed nodes come from a translation of the whole graph. PyTorch's
CapabilityBasedPartitioner groups the other nodes into regions (as large as the
graph allows without cycles), fuses each into a submodule, and each submodule is
replaced by its compiled lumos graph. Regions with at most one computing node stay
in PyTorch: moving a lone view or op costs more than it saves.
"""

from __future__ import annotations

import operator
from collections.abc import Callable
from typing import Any

import torch
from torch import fx
from torch.fx.node import _get_qualified_name
from torch.fx.passes.infra.partitioner import CapabilityBasedPartitioner
from torch.fx.passes.operator_support import OperatorSupportBase

from lumos.logs import warn

aten = torch.ops.aten
_NON_COMPUTE = [_get_qualified_name(t) for t in (
    aten.view.default, aten._unsafe_view.default, aten.permute.default, aten.expand.default,
    aten.unsqueeze.default, aten.squeeze.dim, aten.squeeze.dims, aten.alias.default,
    aten.clone.default, aten.slice.Tensor, aten.select.int, aten.sym_size.int,
    operator.getitem, operator.add, operator.mul, operator.sub, operator.floordiv)]


class _Support(OperatorSupportBase):
    def __init__(self, ok: set[fx.Node]) -> None:
        self.ok = ok

    def is_node_supported(self, submodules: Any, node: fx.Node) -> bool:
        return node in self.ok


class Region(torch.nn.Module):
    """A fused region, run by its compiled lumos graph."""

    def __init__(self, run: Callable[..., Any]) -> None:
        super().__init__()
        self.run = run

    def forward(self, *args: Any) -> Any:
        return self.run(*args)


def split(gm: fx.GraphModule, failed: set[fx.Node],
          compile_region: Callable[[fx.GraphModule], Callable[..., Any]]) -> fx.GraphModule:
    """A copy of gm whose translatable regions call `compile_region(submodule)`."""
    graph, copies = fx.Graph(), {}
    graph.output(graph.graph_copy(gm.graph, copies))
    copy = fx.GraphModule(gm, graph)
    bad = {copies[n] for n in failed if n in copies}
    # a tuple and the getitems reading it stay together: both in lumos, or both not
    for n in list(bad):
        if n.target is operator.getitem:
            bad.add(n.args[0])
    for n in list(bad):
        bad.update(u for u in n.users if u.target is operator.getitem)
    ok = {n for n in copy.graph.nodes if n.op == "call_function" and n not in bad}
    partitioner = CapabilityBasedPartitioner(copy, _Support(ok),
                                             non_compute_ops=_NON_COMPUTE)
    fused = partitioner.fuse_partitions(partitioner.propose_partitions())
    for name, sub in list(fused.named_children()):
        if name.startswith("fused_") and isinstance(sub, fx.GraphModule):
            try:
                setattr(fused, name, Region(compile_region(sub)))
            except Exception as e:
                warn(f"a region of {len(sub.graph.nodes)} nodes could not be compiled "
                     f"({type(e).__name__}: {e}); it runs in PyTorch")
    fused.recompile()
    return fused
