"""Kernels of weights alone (Graph.tensor(weight=True)) run once per binding: their
results live in buffers of their own (Layout.statics, CpuProgram.statics) that later runs
read, shared by a graph's buckets, computed again when a weight is bound anew."""

from __future__ import annotations

import numpy as np
import pytest

import lumos
from lumos.io.quantize import quantize
from lumos.nn.quant import dequantize, part_dtypes
from lumos.runtime.cpu import CpuRuntime
from lumos.runtime.cpu.codegen import STATIC_HEADER
from tests.runtime.cpu.common import BASELINE

SEEDS = lumos.CompileOptions(limit=2, trials=1, execution_timeout=20, cache=False)


def flags(prog: lumos.runtime.cpu.program.CpuProgram) -> list[int]:
    return [int(b[:8].view(np.int64)[0]) for b in prog.statics._buffers.values()]


def affine(weight: bool) -> tuple[lumos.Tensor, lumos.Tensor, lumos.Tensor]:
    """y = x @ (2 w + 1).T: the baseline stores 2 w + 1, a kernel of w alone."""
    g = lumos.Graph()
    x = g.tensor((3, 8), name="x")
    w = g.tensor((5, 8), name="w", weight=weight)
    return x, w, (x @ (w * 2.0 + 1.0).T).output()


def test_a_kernel_of_weights_runs_once_per_binding() -> None:
    x, w, y = affine(weight=True)
    prog = x.graph.compile(CpuRuntime(), BASELINE)
    assert prog.compiled.layout.statics  # (2 w, then + 1)
    rng = np.random.default_rng(0)
    xs, w0 = rng.standard_normal((3, 8), np.float32), rng.standard_normal((5, 8), np.float32)
    prog.set_data(x, xs)
    prog.set_data(w, w0)
    assert set(flags(prog)) <= {0}
    prog.execute()
    assert flags(prog) and set(flags(prog)) == {1}
    first = xs @ (2 * w0 + 1).T
    np.testing.assert_allclose(prog.get(y), first, rtol=1e-5)
    w0[:] = 0  # changed behind the program's back: the stored 2 w + 1 is still read
    prog.execute()
    np.testing.assert_allclose(prog.get(y), first, rtol=1e-5)
    prog.set_data(w, w0)  # bound anew: computed again
    assert set(flags(prog)) == {0}
    prog.execute()
    np.testing.assert_allclose(prog.get(y), xs @ np.ones((5, 8), np.float32).T, rtol=1e-5)
    x2 = rng.standard_normal((3, 8), np.float32)
    prog.set_data(x, x2)  # an input that is no weight keeps the stored values
    assert set(flags(prog)) == {1}
    prog.execute()
    np.testing.assert_allclose(prog.get(y), x2 @ np.ones((5, 8), np.float32).T, rtol=1e-5)


def test_inputs_that_are_no_weights_store_nothing() -> None:
    x, _, _ = affine(weight=False)
    assert not x.graph.compile(CpuRuntime(), BASELINE).compiled.layout.statics


def test_a_kernel_that_reads_a_dim_runs_every_time() -> None:
    """w's rows up to s, times 3: the product with a dim's size is computed per run."""
    g = lumos.Graph()
    g.dim("s", 1, 8)
    x = g.tensor(("s", 4), name="x")
    w = g.tensor((8, 4), name="w", weight=True)
    y = (x + (w * 3.0).narrow(0, 0, lumos.sym("s")).exp()).output()
    prog = g.compile(CpuRuntime(), BASELINE)
    rng = np.random.default_rng(1)
    w0 = rng.standard_normal((8, 4), np.float32)
    prog.set_data(w, w0)
    for s in (3, 8, 2):
        xs = rng.standard_normal((s, 4), np.float32)
        prog.set_data(x, xs)
        prog.execute({"s": s})
        np.testing.assert_allclose(prog.get(y), xs + np.exp(3 * w0[:s]), rtol=1e-5)
    # 3 w is stored; exp of its first s rows is not (its kernel reads s)
    assert len(prog.compiled.layout.statics) == 1


def test_the_buckets_of_a_graph_share_their_stored_values() -> None:
    g = lumos.Graph()
    g.dim("s", 1, 16)
    x = g.tensor(("s", 8), name="x")
    w = g.tensor((5, 8), name="w", weight=True)
    y = (x @ (w * 2.0 + 1.0).T).output()
    opts = lumos.CompileOptions(limit=0, dim_buckets={"s": [(1, 1, 1), (2, 16, 8)]})
    prog = g.compile(CpuRuntime(), opts)
    assert len(prog.programs) == 2
    rng = np.random.default_rng(2)
    w0 = rng.standard_normal((5, 8), np.float32)
    prog.set_data(w, w0)
    for s in (1, 7):
        xs = rng.standard_normal((s, 8), np.float32)
        prog.set_data(x, xs)
        prog.execute({"s": s})
        np.testing.assert_allclose(prog.get(y), xs @ (2 * w0 + 1).T, rtol=1e-5)
    keys = {k for p in prog.programs for k, _ in p.layout.statics}
    assert len(prog.statics._buffers) == len(keys)
    assert prog.statics.nbytes < 2 * sum(b + STATIC_HEADER for _, b in
                                         prog.programs[0].layout.statics) + 1024


@pytest.mark.parametrize("qtype", ["Q5_0", "Q4_K", "Q6_K"])
def test_the_seeds_keep_int8_quants_of_packed_weights(qtype: str) -> None:
    """A GEMV over packed weights reads the int8 quants the program computed once (n k
    bytes stored at least), and matches the gguf package's dequantization."""
    import gguf

    n, k = 32, 512
    rng = np.random.default_rng(3)
    packed = quantize(qtype, rng.standard_normal((n, k)).astype(np.float32))
    ref = gguf.quants.dequantize(packed.raw(), gguf.GGMLQuantizationType[qtype]).reshape(n, k)
    g = lumos.Graph()
    x = g.tensor((1, k), name="x")
    dts = part_dtypes(qtype)
    parts = {p: g.tensor(a.shape, dts[p], f"w.{p}", weight=True)
             for p, a in packed.parts.items()}
    y = (x @ dequantize(qtype, parts).T).output()
    prog = g.compile(CpuRuntime(), SEEDS)
    for p, a in packed.parts.items():
        prog.set_data(parts[p], a)
    xs = rng.standard_normal((1, k), np.float32)
    prog.set_data(x, xs)
    prog.execute()
    np.testing.assert_allclose(prog.get(y), xs @ ref.T, rtol=1e-4, atol=1e-4)
    # (both seeds store the quants; which wins, and what else it stores, is timing's)
    assert prog.statics.nbytes >= n * k
