"""Shared test helpers: run lumos graphs on a runtime and compare with PyTorch."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np
import torch

import lumos
from lumos.dtype import DType, bf16_to_f32, f32_to_bf16

TORCH_DTYPES = {
    "f32": torch.float32, "f16": torch.float16, "bf16": torch.bfloat16, "f64": torch.float64,
    "i8": torch.int8, "u8": torch.uint8, "i16": torch.int16, "i32": torch.int32,
    "i64": torch.int64, "bool": torch.bool,
}

# (rtol, atol) by dtype, for results of short op chains
TOL = {"f32": (1e-5, 1e-5), "f64": (1e-10, 1e-10), "f16": (2e-3, 2e-3), "bf16": (1.6e-2, 1e-2)}

RUNTIMES: list[Callable[[], object]] = [lumos.ReferenceRuntime]


def to_torch(arr: np.ndarray, dtype: DType) -> torch.Tensor:
    if dtype is lumos.bf16:
        return torch.from_numpy(bf16_to_f32(arr).copy()).to(torch.bfloat16)
    return torch.from_numpy(np.array(arr, copy=True))


def from_torch(t: torch.Tensor) -> np.ndarray:
    t = t.detach().cpu()
    if t.dtype == torch.bfloat16:
        return f32_to_bf16(t.float().numpy())
    return t.numpy()


def run(outputs: Sequence[lumos.Tensor], feeds: dict, dims: dict | None = None,
        runtime: object | None = None) -> list[np.ndarray]:
    """Mark `outputs`, compile their graph, bind `feeds` {tensor: array}, execute, fetch."""
    g = outputs[0].graph
    for o in outputs:
        o.output()
    prog = g.compile(runtime or lumos.ReferenceRuntime())
    for t, a in feeds.items():
        prog.set_data(t, a)
    prog.execute(dims or {})
    return [prog.get(o) for o in outputs]


def assert_close(got: np.ndarray, want: torch.Tensor | np.ndarray, dtype: DType | None = None,
                 rtol: float | None = None, atol: float | None = None) -> None:
    """Compare a lumos result (storage array) with a reference, dtype-aware."""
    if isinstance(want, torch.Tensor):
        want_t = want.detach()
        if want_t.dtype == torch.bfloat16:
            want_np = want_t.float().numpy()
            got = bf16_to_f32(got) if got.dtype == np.uint16 else got
        else:
            want_np = want_t.numpy()
    else:
        want_np = np.asarray(want)
    if dtype is lumos.bf16 and got.dtype == np.uint16:
        got = bf16_to_f32(got)
    assert got.shape == want_np.shape, f"shape {got.shape} != {want_np.shape}"
    name = dtype.name if dtype is not None else None
    if want_np.dtype.kind in "biu" and got.dtype.kind in "biu":
        np.testing.assert_array_equal(got, want_np)
        return
    r, a = TOL.get(name or "f32", TOL["f32"])
    np.testing.assert_allclose(got.astype(np.float64), want_np.astype(np.float64),
                               rtol=rtol if rtol is not None else r,
                               atol=atol if atol is not None else a, equal_nan=True)


def random_array(rng: np.random.Generator, shape: Sequence[int], dtype: DType,
                 low: float = -3, high: float = 3) -> np.ndarray:
    """Random data stored as `dtype` (bf16 as bit patterns)."""
    if dtype.is_bool:
        return rng.random(shape) < 0.5
    if dtype.is_int:
        info = np.iinfo(dtype.np)
        lo, hi = max(int(low) * 10, info.min), min(int(high) * 10, info.max)
        return rng.integers(lo, hi + 1, size=shape, dtype=dtype.np)
    vals = rng.uniform(low, high, size=shape)
    if dtype is lumos.bf16:
        return f32_to_bf16(vals.astype(np.float32))
    return vals.astype(dtype.np)
