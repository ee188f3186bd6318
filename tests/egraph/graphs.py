"""Small graphs for the e-graph tests, covering every HLIR op."""

from __future__ import annotations

import numpy as np

import lumos
from lumos.frontend.tensor import iota, node, scalar
from lumos.runtime.reference import run_hlir
from lumos.shape import z


def every_op() -> tuple[lumos.Graph, dict[str, np.ndarray], dict[str, int]]:
    """A graph with every primitive, a symbolic dim, non-contiguous views and a persisted
    output; returns (graph, input data by name, dims)."""
    g = lumos.Graph()
    x = g.tensor(("s", 4), name="x")
    w = g.tensor((4, 3), name="w")
    idx = g.tensor((5,), lumos.i64, name="idx")
    u = node(g, "Sqrt", [node(g, "Exp2", [x.transpose(0, 1)])])
    v = node(g, "Recip", [node(g, "Log2", [u + 2.0])]).sin()
    m = (x.unsqueeze(-1) * w.unsqueeze(0)).sum(1)                   # (s, 3) matmul
    k = node(g, "MaxReduce", [x.flip(1).pad((1, 0))], axis=1)        # (s,)
    r = lumos.fmod(x, 1.5) < x.narrow(0, 0, 1).expand(x.shape[0], 4)
    i = iota(g, z(0) * 2 + 1, (5,), lumos.i64)
    gat = node(g, "Gather", [idx, w.reshape(12)])
    sca = node(g, "Scatter", [w.reshape(12), i, gat])
    cast = node(g, "Cast", [r], dtype=lumos.f32)
    (v.transpose(0, 1) + m.sum(1, keepdim=True) + k.unsqueeze(1) + cast).output()
    sca.output(persist=True)
    scalar(g, 3.0, lumos.f32)  # dead: not read by any output
    rng = np.random.default_rng(0)
    s = 3
    data = {"x": rng.uniform(0.5, 2, (s, 4)).astype(np.float32),
            "w": rng.uniform(-1, 1, (4, 3)).astype(np.float32),
            "idx": np.array([0, 11, 3, -1, 12])}
    return g, data, {"s": s}


def oracle(g: lumos.Graph, data: dict[str, np.ndarray], dims: dict[str, int]) -> list:
    return run_hlir(g, data, dict(dims))
