"""The reference runtime through the e-graph computes what the HLIR does directly."""

import numpy as np
import pytest

import lumos
from lumos.runtime.reference import run_hlir
from tests.egraph.graphs import every_op


def elementwise(g, x, y):
    return [((x * 1.0 + y * 2.0) * (x + -0.0)).sigmoid() - y.exp()]


def views(g, x, y):
    a = x.transpose(0, 1)[1:, ::2].flip(0)
    b = lumos.Tensor.pad(y[:, :2], (1, 0)).reshape(2, 3, 3)[1]
    return [a * 1.0, (b + x[:3, :3] * 2.0).expand(2, 3, 3).contiguous()]


def reductions(g, x, y):
    return [x.sum(0), (x * y).sum(-1, keepdim=True), x.amax(1),
            (x.unsqueeze(-1) * y.T.unsqueeze(0)).sum(1)]


@pytest.mark.parametrize("build", [elementwise, views, reductions])
def test_egraph_program_matches_hlir(build):
    g = lumos.Graph()
    x, y = g.tensor((6, 6), name="x"), g.tensor((6, 6), name="y")
    outs = [o.output() for o in build(g, x, y)]
    rng = np.random.default_rng(1)
    data = {"x": rng.standard_normal((6, 6)).astype(np.float32),
            "y": rng.standard_normal((6, 6)).astype(np.float32)}
    data["x"][0, :3] = [np.nan, -0.0, np.inf]
    prog = g.compile(lumos.ReferenceRuntime())
    for t, d in zip((x, y), data.values(), strict=True):
        prog.set_data(t, d)
    prog.execute()
    for o, want in zip(outs, run_hlir(g, data, {}), strict=True):
        np.testing.assert_array_equal(prog.get(o), want)


def test_every_op_and_persist():
    g, data, dims = every_op()
    prog = g.compile(lumos.ReferenceRuntime())
    for name, nid in g.inputs.items():
        prog.set_data(lumos.Tensor(g, nid, lumos.View.contiguous(g.nodes[nid].shape),
                                   g.nodes[nid].dtype), data[name])
    prog.execute(dims)
    want = run_hlir(g, data, dims)
    got = [prog._results[o] for o in g.outputs]
    for a, b in zip(got, want, strict=True):
        np.testing.assert_array_equal(a, b)
    kept = got[1]
    prog.execute(dims)
    assert prog._results[g.outputs[1]] is kept  # the persisted output keeps its buffer
