"""Run a graph on CpuRuntime and on the oracle (`run_hlir`), and compare."""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

import lumos
from lumos.dtype import DType, bf16, f16, from_numpy_value, to_numpy_value
from lumos.runtime.base import Program
from lumos.runtime.cpu import CpuRuntime
from lumos.runtime.reference import run_hlir

BASELINE = lumos.CompileOptions(limit=0)  # no search: one kernel per node, no fusion

# relative tolerance where libm and numpy may differ by an ulp or two (transcendentals,
# summation order); everything else must match bit for bit
ULPISH = {"f64": 1e-13, "f32": 2e-6, "f16": 2e-3, "bf16": 1.6e-2}


def run_both(outputs: list[lumos.Tensor], feeds: Mapping[lumos.Tensor, np.ndarray],
             dims: Mapping[str, int] | None = None) -> list[tuple[np.ndarray, np.ndarray]]:
    """(CpuRuntime result, reference result) for each output."""
    g = outputs[0].graph
    for o in outputs:
        o.output()
    prog = g.compile(CpuRuntime(), BASELINE)
    return execute_both(prog, outputs, feeds, dims)


def execute_both(prog: Program, outputs: list[lumos.Tensor],
                 feeds: Mapping[lumos.Tensor, np.ndarray],
                 dims: Mapping[str, int] | None = None) -> list[tuple[np.ndarray, np.ndarray]]:
    g = prog.graph
    for t, a in feeds.items():
        prog.set_data(t, a)
    prog.execute(dims)
    env = prog.resolve_dims(dims)
    ref = run_hlir(g, {g.nodes[t.node].name: a for t, a in feeds.items()}, env)
    pos = {o: k for k, o in enumerate(g.outputs)}
    return [(prog.get(o), ref[pos[g.output_of[(o.node, o.view)]]]) for o in outputs]


def assert_same(got: np.ndarray, want: np.ndarray, dtype: DType, exact: bool = True,
                what: str = "") -> None:
    assert got.shape == want.shape and got.dtype == want.dtype, \
        f"{what}: {got.dtype}{got.shape} != {want.dtype}{want.shape}"
    if exact or not dtype.is_float:
        if dtype is bf16 or dtype is f16:  # compare values: NaN payloads may differ
            got, want = to_numpy_value(got, dtype), to_numpy_value(want, dtype)
        np.testing.assert_array_equal(got, want, err_msg=what)
        return
    g64 = to_numpy_value(got, dtype).astype(np.float64)
    w64 = to_numpy_value(want, dtype).astype(np.float64)
    tol = ULPISH[dtype.name]
    # absolute error scaled by the output's magnitude: float sums are reassociated (vector
    # lanes), which changes a cancelling sum by ~eps * max|term|, not eps * |result|
    finite = np.isfinite(w64)
    scale = max(1.0, float(np.abs(w64[finite]).max())) if finite.any() else 1.0
    np.testing.assert_allclose(g64, w64, rtol=tol, atol=tol * scale, equal_nan=True,
                               err_msg=what)


def edge_values(dtype: DType, rng: np.random.Generator, n: int) -> np.ndarray:
    """`n` values of `dtype` (as stored), special values first: zeros, extremes, NaN, inf."""
    if dtype.is_bool:
        return rng.random(n) < 0.5
    if dtype.is_int:
        info = np.iinfo(dtype.np)
        special = [0, 1, -1, info.min, info.max, 2, -2, 7, -7] if dtype.signed else \
            [0, 1, info.max, 2, 7, 128]
        vals = np.concatenate([special, rng.integers(info.min, info.max, n, endpoint=True)])
        return vals[:n].astype(dtype.np)
    special = [0.0, -0.0, 1.0, -1.0, np.inf, -np.inf, np.nan, 0.5, -2.5, 3.0, 1e-3, 100.0]
    vals = np.concatenate([special, rng.uniform(-8, 8, n)])[:n]
    if dtype is f16 or dtype is bf16:
        vals = vals.astype(np.float32)
    return from_numpy_value(vals, dtype)
