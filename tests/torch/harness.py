"""Run ATen graphs through the lumos backend's graph compiler and compare with PyTorch."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import torch
from torch.fx.experimental.proxy_tensor import make_fx
from torch.utils._pytree import tree_flatten, tree_unflatten

import lumos.torch as lt
from tests.helpers import TOL

STRICT = lt.Options(runtime="reference", strict=True)  # translation checks: the numpy oracle


def compile_aten(fn: Callable[..., Any], *tensors: torch.Tensor, dynamic: bool = False,
                 opts: lt.Options = STRICT) -> tuple[torch.fx.GraphModule, Any]:
    """fn traced to ATen (no decompositions) and compiled as the backend compiles graphs."""
    gm = make_fx(fn, tracing_mode="symbolic" if dynamic else "fake")(*tensors)
    return gm, lt._compile(gm, None, opts=opts, runtime=lt._runtime(opts.runtime))


def call_op(op: Any, args: tuple, kwargs: dict) -> tuple[Callable[..., Any], list]:
    """`op(*args, **kwargs)` as a function of the tensors among its arguments."""
    leaves, spec = tree_flatten((args, kwargs))
    at = [i for i, x in enumerate(leaves) if isinstance(x, torch.Tensor)]

    def fn(*ts: torch.Tensor) -> Any:
        ls = list(leaves)
        for i, t in zip(at, ts, strict=True):
            ls[i] = t
        a, k = tree_unflatten(ls, spec)
        return op(*a, **k)

    return fn, [leaves[i] for i in at]


def assert_same(got: Any, want: Any, values: bool = True, rtol: float | None = None,
                atol: float | None = None) -> None:
    """Same structure, dtypes and shapes; values equal (ints, bools) or close by dtype."""
    if isinstance(want, (tuple, list)):
        assert isinstance(got, (tuple, list)) and len(got) == len(want)
        for g, w in zip(got, want, strict=True):
            assert_same(g, w, values, rtol, atol)
        return
    if not isinstance(want, torch.Tensor):
        assert got == want
        return
    assert isinstance(got, torch.Tensor), type(got)
    assert got.dtype == want.dtype, f"dtype {got.dtype} != {want.dtype}"
    assert got.shape == want.shape, f"shape {tuple(got.shape)} != {tuple(want.shape)}"
    if not values:
        return
    if not want.dtype.is_floating_point:
        assert torch.equal(got, want), f"{got} != {want}"
        return
    name = {torch.float16: "f16", torch.bfloat16: "bf16", torch.float64: "f64"}.get(
        want.dtype, "f32")
    r, a = TOL[name]
    np.testing.assert_allclose(got.double().numpy(), want.double().numpy(),
                               rtol=r if rtol is None else rtol, atol=a if atol is None else atol,
                               equal_nan=True)
