"""The chosen CPU program's kernels: each one's time (the program built with the driver's
per-kernel clock, LUMOS_LOG=profile, and run on the search's random profiling inputs),
its output, and what it computes inline (fused) rather than reading from a buffer."""

from __future__ import annotations

import ctypes
import os
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from lumos.graph import Graph
from lumos.record import BucketRecord


@dataclass
class KernelRow:
    index: int
    op: str
    shape: str
    dtype: str
    microseconds: float | None
    fused: str


def _profiled_build(kernels: Any, flush: bool) -> Any:
    from lumos.runtime.cpu.program import build

    old = os.environ.get("LUMOS_LOG")
    os.environ["LUMOS_LOG"] = ",".join(x for x in (old, "profile") if x)
    try:
        return build(kernels, flush)
    finally:
        if old is None:
            del os.environ["LUMOS_LOG"]
        else:
            os.environ["LUMOS_LOG"] = old


def fused(kernels: Any, node: int) -> str:
    """What kernel `node` of a Kernels program computes inline: its body's elementwise
    ops, inlined reductions, products and banded producers, and the buffers it reads."""
    n = kernels.nodes[node]
    if n.op == "Gemm":
        how = "lumos' AMX bf16x3 product" if node in getattr(kernels, "amx", ()) else \
            "lumos' own product" if node in getattr(kernels, "own", ()) else "BLAS product"
        pack = getattr(kernels, "packs", {}).get(node)
        return how + (", its factor computed as it is packed" if pack is not None else "")
    body = getattr(kernels, "bodies", {}).get(node)
    if body is None:
        return "-"
    seen: Counter = Counter()
    loads: set = set()
    stack, visited = [body], set()
    while stack:
        b = stack.pop()
        if id(b) in visited:
            continue
        visited.add(id(b))
        kind = type(b).__name__
        if kind == "Load":
            loads.add(getattr(b, "src", None))
        elif kind == "Apply":
            seen[getattr(b, "op", "?")] += 1
        elif kind == "Reduce":
            seen[f"inline {getattr(b, 'op', 'reduce')}"] += 1
        elif kind == "Tile":
            seen["matrix product (row blocks)"] += 1
        elif kind == "Rows":
            seen[f"{getattr(getattr(b, 'node', None), 'op', '?')} in bands"] += 1
        stack.extend(getattr(b, "args", ()) or ())
        if kind == "Rows":
            stack.append(b.body)
    ops = ", ".join(f"{k} x{v}" if v > 1 else k for k, v in seen.most_common())
    return f"{ops or 'nothing inline'}; reads {len(loads)} buffer{'s' * (len(loads) != 1)}"


def kernel_rows(graph: Graph, rec: BucketRecord, flush: bool, seed: int = 0,
                runs: int = 3) -> list[KernelRow]:
    """One row per kernel the chosen program's driver calls, with its median time."""
    from lumos.runtime.cpu.cc import load
    from lumos.runtime.cpu.kernels import from_genome
    from lumos.runtime.cpu.tune import profiling_inputs

    kernels = from_genome(rec.space, rec.genome, graph.dims)
    program = _profiled_build(kernels, flush)
    env: Mapping[str, int] = rec.env or {d: lo for d, (lo, _) in graph.dims.items()}
    data = profiling_inputs(graph, env, seed)
    inputs = [data[name] for name in program.layout.input_names]
    outs = [np.empty(program.shape(b, env), b.dtype.np) for b in program.layout.outputs]
    profiled = program.layout.profiled
    ns = (ctypes.c_int64 * len(profiled)).in_dll(load(program.library), "lumos_profile_ns") \
        if profiled else []
    times = []
    for _ in range(runs + 1):  # the first touches the buffers
        program.run(inputs, env, outs)
        times.append(list(ns))
    med = np.median(np.array(times[1:], dtype=np.float64), axis=0) if profiled else []
    return [KernelRow(k, kern.op, str(program.shape(kern, env)),
                      kern.dtype.name, float(med[k]) / 1e3, fused(kernels, kern.node))
            for k, kern in enumerate(profiled)]
