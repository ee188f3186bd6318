"""PyTorch's OpInfo samples through `torch.compile(backend="lumos")`: the op list, how a
sample is drawn, run and compared. tests/torch/test_opinfo.py and benchmarks/opinfo.py
both use this module.

The op list is every entry of `torch.testing._internal.common_methods_invocations.op_db`
(`name` or `name.variant`) that is an inference op (elementwise, reductions, indexing and
movement, linear algebra products, `nn.functional`), less the groups in `EXCLUDED`, each
with its reason. Samples: the first `PER_DTYPE` of `op.sample_inputs` for each of
float32, int64 and bool that the op supports on the CPU. A sample passes when the compiled
function gives eager's structure, dtypes, shapes and values: integers and bools exactly,
floats within `tolerance` (torch.testing's defaults, or the OpInfo's own override where
it has one), NaN where eager has NaN.
"""

from __future__ import annotations

import copy
import functools
import re
import traceback
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import torch
import torch._dynamo

DTYPES = (torch.float32, torch.int64, torch.bool)
PER_DTYPE = 2

# name patterns (re.fullmatch) of the ops left out, by reason
EXCLUDED: dict[str, list[str]] = {
    "random: no reference value to compare with": [
        "bernoulli", "cauchy", "exponential", "geometric", "log_normal", "multinomial",
        r"normal(\..*)?", "uniform", r"rand.*", "nn.functional.(alpha_)?dropout.*",
        r"nn.functional.feature_alpha_dropout\..*", "nn.functional.rrelu",
        r"nn.functional.fractional_max_pool.*", "svd_lowrank", "pca_lowrank"],
    "uninitialized memory: eager's values are arbitrary": [
        "empty", "empty_like", "empty_strided", "empty_permuted", "new_empty",
        "new_empty_strided", "resize_", "resize_as_"],
    "complex numbers (lumos has no complex dtype)": [
        "complex", "polar", "view_as_complex", "view_as_real", "cfloat", "cdouble", "chalf",
        "nn.functional.silu.complex", "imag", "isreal", "angle"],
    "sparse tensors": [r"to_sparse", r"sparse\..*"],
    "FFTs and spectral transforms": [r"fft\..*", "stft", "istft"],
    "linear algebra solvers and decompositions (iterative or pivoting; out of scope)": [
        r"linalg\.(cholesky.*|cond|det|eig.*|householder_product|inv.*|ldl.*|lstsq.*|lu.*"
        r"|matrix_rank.*|pinv.*|qr|slogdet|solve.*|svd.*|tensorinv|tensorsolve"
        r"|matrix_power|matrix_norm|norm.*)",
        r"cholesky.*", "geqrf", "ormqr", "lu", "lu_solve", "lu_unpack", "qr", "svd",
        "triangular_solve", "pinverse", "logdet", "matrix_exp", "norm.nuc"],
    "special functions (gamma, Bessel, zeta families and their inverses)": [
        r"special\..*", "digamma", "lgamma", r"polygamma\..*", r"mvlgamma\..*", "igamma",
        "igammac", "i0", "erfinv"],
    "training and backward ops (lumos compiles inference)": [
        "_softmax_backward_data", "max_pool2d_with_indices_backward",
        "native_dropout_backward", r"nn.functional.max_unpool.d.grad",
        "_batch_norm_with_update", "nn.functional.ctc_loss"],
    "data-dependent output shapes (fall back to PyTorch; strict raises)": [
        "nonzero", "argwhere", "masked_select", "unique", "unique_consecutive", "bincount",
        "histc", "histogram", "histogramdd", "repeat_interleave", "nonzero_static"],
    "results that are not tensors (Dynamo breaks the graph or specializes)": [
        "item", "allclose", "equal", "broadcast_shapes", "hash_tensor"],
    "CUDA-only kernels, quantized and jiterator entries": [
        r"jiterator_.*", r"torch\._scaled_mm.*", r"torch\.ops\.aten\._(efficient|flash)_.*",
        "bmm.triton_optimized"],
}

_EXCLUDE = [(re.compile(p), reason) for reason, ps in EXCLUDED.items() for p in ps]


def op_name(op: Any) -> str:
    return op.name + (f".{op.variant_test_name}" if op.variant_test_name else "")


def excluded(name: str) -> str | None:
    """Why the op named `name` is left out, or None."""
    return next((reason for p, reason in _EXCLUDE if p.fullmatch(name)), None)


@functools.cache
def op_list() -> dict[str, Any]:
    """The OpInfos of the op list, by name (see the module docstring)."""
    from torch.testing._internal.common_methods_invocations import op_db

    ops = {op_name(op): op for op in op_db}
    return {name: op for name, op in sorted(ops.items())
            if excluded(name) is None and dtypes(op)}


def dtypes(op: Any) -> list[torch.dtype]:
    supported = op.supported_dtypes("cpu")
    return [dt for dt in DTYPES if dt in supported]


@dataclass
class Sample:
    op: str
    dtype: torch.dtype
    index: int  # the position among the op's samples of that dtype
    sample: Any  # a SampleInput

    @property
    def id(self) -> str:
        return f"{self.op}-{str(self.dtype).removeprefix('torch.')}-{self.index}"


def samples(name: str, per_dtype: int = PER_DTYPE,
            kinds: tuple[torch.dtype, ...] = DTYPES) -> Iterator[Sample]:
    op = op_list()[name]
    for dt in dtypes(op):
        if dt not in kinds:
            continue
        for i, s in enumerate(op.sample_inputs("cpu", dt, requires_grad=False)):
            if i >= per_dtype:
                break
            yield Sample(name, dt, i, s)


def tolerance(op: Any, dtype: torch.dtype, out: torch.dtype) -> tuple[float, float]:
    """(rtol, atol) for an output of dtype `out` of a sample of dtype `dtype`: exact for
    integers and bools, else torch.testing's defaults for `out`, raised to the largest
    override the OpInfo declares for `dtype` in a value test on any device (the CUDA ones
    allow for kernels that sum in another order, as lumos' do; not gradients or JIT)."""
    from torch.testing._internal.common_device_type import precisionOverride, toleranceOverride

    if not out.is_floating_point:
        return 0.0, 0.0
    rtol, atol = {torch.float16: (1e-3, 1e-5), torch.bfloat16: (1.6e-2, 1e-5),
                  torch.float64: (1e-7, 1e-7)}.get(out, (1.3e-6, 1e-5))
    for info in getattr(op, "decorators", ()) or ():
        if not hasattr(info, "cls_name") or re.search(
                "grad|jit|_ad|vjp|jvp", f"{info.cls_name} {info.test_name}", re.I):
            continue
        for d in info.decorators:
            if isinstance(d, toleranceOverride) and dtype in d.d:
                rtol, atol = max(rtol, d.d[dtype].rtol), max(atol, d.d[dtype].atol)
            elif isinstance(d, precisionOverride) and dtype in d.d:
                atol = max(atol, d.d[dtype])
    return rtol, atol


@dataclass
class Outcome:
    ok: bool
    reason: str = ""  # why it failed: the first line of the error


def _clone(x: Any) -> Any:
    return copy.deepcopy(x) if not isinstance(x, torch.Tensor) else x.clone()


def _args(s: Any) -> tuple[Any, tuple, dict]:
    return _clone(s.input), tuple(map(_clone, s.args)), {k: _clone(v)
                                                         for k, v in s.kwargs.items()}


def run(sample: Sample, backend: Any = "lumos", options: dict | None = None) -> Outcome:
    """The sample through `torch.compile(backend=..., options=...)` against eager."""
    op = op_list()[sample.op]
    inp, args, kwargs = _args(sample.sample)
    with torch.no_grad():
        try:
            want = op(inp, *args, **kwargs)
        except Exception as e:  # eager rejects it: no reference (not counted)
            return Outcome(False, f"eager: {_line(e)}")
        torch._dynamo.reset()
        fn = torch.compile(op.op, backend=backend, options=options)
        inp, args, kwargs = _args(sample.sample)
        try:
            got = fn(inp, *args, **kwargs)
        except Exception as e:
            return Outcome(False, _line(e))
    if sample.op in TIES and not sample.sample.kwargs.get("stable"):
        got, want = (_witness(sample, out) for out in (got, want))
    try:
        _compare(got, want, lambda out: tolerance(op, sample.dtype, out))
    except Exception as e:
        return Outcome(False, "mismatch: " + _line(e, mismatch=True))
    return Outcome(True)


# ops whose indices PyTorch leaves unspecified among equal values (unstable sorts and
# selections): op -> (position of dim among the sample's args, its default, whether the
# op removes the dim without keepdim). Their indices are compared by what they point at.
TIES: dict[str, tuple[int, int, bool]] = {
    "sort": (0, -1, False), "argsort": (0, -1, False), "topk": (1, -1, False),
    "kthvalue": (1, -1, True), "median": (0, -1, True), "nanmedian": (0, -1, True),
    "mode": (0, -1, True)}


def _witness(sample: Sample, out: Any) -> Any:
    """The op's outputs with each index tensor replaced by the input's values at it."""
    at, default, drops = TIES[sample.op]
    s = sample.sample
    x, args = s.input, s.args
    if isinstance(out, torch.Tensor) and sample.op != "argsort":
        return out  # median without a dim: no index
    dim = args[at] if len(args) > at else s.kwargs.get("dim", default)
    keep = (args[at + 1] if len(args) > at + 1 else s.kwargs.get("keepdim", False)) if drops \
        else True
    idx = out if isinstance(out, torch.Tensor) else out[1]
    flat = x.reshape(1) if x.ndim == 0 else x
    i = idx.reshape(1) if idx.ndim == 0 else idx
    if not keep and x.ndim:
        i = i.unsqueeze(dim)
    picked = torch.take_along_dim(flat, i, dim if x.ndim else 0).reshape(idx.shape)
    return picked if isinstance(out, torch.Tensor) else (out[0], picked)


def _compare(got: Any, want: Any, tol: Any) -> None:
    """Same structure; each tensor of eager's dtype and shape, close within tol(dtype)."""
    from torch.utils._pytree import tree_flatten

    gs, gspec = tree_flatten(got)
    ws, wspec = tree_flatten(want)
    if gspec != wspec:
        raise AssertionError(f"Object structure {gspec} differs from eager's {wspec}")
    for g, w in zip(gs, ws, strict=True):
        rtol, atol = tol(w.dtype) if isinstance(w, torch.Tensor) else (None, None)
        torch.testing.assert_close(g, w, rtol=rtol, atol=atol, equal_nan=True,
                                   check_device=False, check_layout=False, check_stride=False)


def _line(e: BaseException, mismatch: bool = False) -> str:
    """A one-line summary of an error (for a mismatch: its headline and largest errors)."""
    while isinstance(getattr(e, "inner_exception", None), BaseException):
        e = e.inner_exception  # BackendCompilerFailed: what the backend raised
    lines = [ln.strip() for ln in str(e).splitlines() if ln.strip()]
    if mismatch:
        keep = [ln for ln in lines if ln.startswith(("Tensor-likes", "Greatest", "Mismatched",
                                                     "The values", "Scalars", "Object",
                                                     "The failure", "Expected", "dtype"))]
        return " | ".join(keep[:4]) or (lines[0] if lines else type(e).__name__)
    head = lines[0] if lines else ""
    if not head:
        head = traceback.format_exception_only(e)[-1].strip()
    return f"{type(e).__name__}: {head}"[:300]
