"""Every translated ATen overload against PyTorch eager: odd shapes, broadcasting,
non-contiguous inputs and the dtypes the op takes. Each case traces the single op to
an FX graph, compiles it strictly (no fallback) and runs it with the real tensors."""

from __future__ import annotations

import collections
import itertools
from typing import Any

import pytest
import torch

from lumos.torch.translate import TABLE
from tests.torch.harness import assert_same, call_op, compile_aten

aten = torch.ops.aten
f16, bf16, f32, f64 = torch.float16, torch.bfloat16, torch.float32, torch.float64
i8, u8, i16, i32, i64, b8 = (torch.int8, torch.uint8, torch.int16, torch.int32, torch.int64,
                             torch.bool)
G = torch.Generator().manual_seed(0)


def r(*shape: int, dtype: torch.dtype = f32, low: float = -3.0, high: float = 3.0,
      nc: bool = False) -> torch.Tensor:
    """Random data; nc=True gives the same logical shape through a transposed layout."""
    s = shape[::-1] if nc else shape
    if dtype is b8:
        t = torch.rand(s, generator=G) < 0.5
    elif not dtype.is_floating_point:
        lo = 0 if dtype is u8 else int(low * 7)
        t = torch.randint(lo, int(high * 7) + 1, s, generator=G).to(dtype)
    else:
        t = (torch.rand(s, generator=G, dtype=f64) * (high - low) + low).to(dtype)
    return t.permute(*reversed(range(len(s)))) if nc else t


def ix(*shape: int, n: int) -> torch.Tensor:
    return torch.randint(-n, n, shape, generator=G)


SPECIAL = torch.tensor([[0.0, -1.5, float("nan"), float("inf")], [-float("inf"), 2.5, -0.0, 7.0]])
CASES: list[Any] = []
ids: collections.Counter = collections.Counter()


def case(op: Any, *args: Any, values: bool = True, pick: int | None = None,
         tol: float | None = None, **kwargs: Any) -> None:
    """A test of op(*args, **kwargs); `pick`: compare only that output; `values=False`:
    only dtypes and shapes; `tol`: rtol and atol instead of the dtype's."""
    name = str(op).removeprefix("aten.")
    ids[name] += 1
    CASES.append(pytest.param(op, args, kwargs, values, pick, tol, id=f"{name}-{ids[name]}"))


# -- elementwise ---------------------------------------------------------------------------
FLOATS = [dict(dtype=f32, nc=True), dict(dtype=f16), dict(dtype=bf16), dict(dtype=f64)]
for name in ("abs", "neg", "exp", "exp2", "sin", "cos", "tanh", "sigmoid", "relu", "erf",
             "floor", "ceil", "round", "trunc", "sign", "sgn", "silu", "gelu", "reciprocal",
             "expm1", "tan", "leaky_relu", "elu"):
    for kw in FLOATS:  # lumos' erf is accurate to float32 precision, in f64 too
        case(getattr(aten, name).default, r(3, 5, **kw),
             tol=1e-6 if name in ("erf", "gelu", "tan") and kw["dtype"] is f64 else None)
for name in ("log", "log2", "sqrt", "rsqrt", "log1p"):
    for kw in FLOATS:
        case(getattr(aten, name).default, r(4, 3, low=0.05, high=9.0, **kw))
for name in ("abs", "neg", "sign", "relu", "floor", "round"):
    case(getattr(aten, name).default, r(2, 7, dtype=i32))
case(aten.abs.default, r(5, dtype=i8))
for name in ("isnan", "isinf", "sign", "relu", "abs", "floor", "round"):
    case(getattr(aten, name).default, SPECIAL)
case(aten.isnan.default, r(3, dtype=i64))
case(aten.gelu.default, r(3, 4), approximate="tanh")
case(aten.log1p.default, torch.tensor([1e-9, -1e-7, 3e-5, -0.5, 2.0, -1.0, float("inf")]))
case(aten.expm1.default, torch.tensor([1e-9, -1e-7, 3e-5, -0.5, 2.0, -float("inf"), 80.0]))
case(aten.tan.default, r(5, dtype=i32, low=-0.2, high=0.2))
case(aten.leaky_relu.default, SPECIAL, 0.2)
case(aten.elu.default, r(3, 4), 0.5, 2.0, 1.5)
case(aten.logical_not.default, r(3, 4, dtype=b8, nc=True))
case(aten.logical_not.default, r(6, dtype=f32))
case(aten.bitwise_not.default, r(2, 5, dtype=b8))

BROADCAST = [(r(3, 1, 5), r(4, 5, nc=True)), (r(2, 3, dtype=i32), r(3, dtype=i64)),
             (r(4, 1, dtype=bf16), r(1, 3, dtype=f32)), (r(3, dtype=f16), r(dtype=f64)),
             (r(2, 3, dtype=u8), r(2, 3, dtype=i8)), (r(2, 3, dtype=i16), r(3, dtype=u8))]
for op in (aten.add.Tensor, aten.sub.Tensor, aten.mul.Tensor, aten.maximum.default,
           aten.minimum.default, aten.eq.Tensor, aten.ne.Tensor, aten.lt.Tensor, aten.le.Tensor,
           aten.gt.Tensor, aten.ge.Tensor, aten.logical_and.default, aten.logical_or.default,
           aten.logical_xor.default, aten.rsub.Tensor):
    for a, b in BROADCAST:
        case(op, a, b)
for op in (aten.eq.Tensor, aten.maximum.default, aten.minimum.default, aten.lt.Tensor):
    case(op, SPECIAL, SPECIAL.flip(1))
case(aten.add.Tensor, r(3, 4, dtype=b8), r(4, dtype=b8))
case(aten.mul.Tensor, r(3, 4, dtype=b8), r(3, 1, dtype=b8))
case(aten.add.Tensor, r(3, 4), r(4), alpha=2.5)
case(aten.sub.Tensor, r(3, 4, dtype=i64), r(4, dtype=i64), alpha=3)
case(aten.rsub.Tensor, r(3, 4), r(4), alpha=2)
for op in (aten.add.Scalar, aten.sub.Scalar, aten.mul.Scalar, aten.rsub.Scalar, aten.div.Scalar,
           aten.eq.Scalar, aten.ne.Scalar, aten.lt.Scalar, aten.le.Scalar, aten.gt.Scalar,
           aten.ge.Scalar, aten.fmod.Scalar, aten.remainder.Scalar, aten.floor_divide.Scalar):
    case(op, r(3, 5, nc=True), 1.5)
    case(op, r(2, 4, dtype=i64), 3)
    case(op, r(4, dtype=bf16), 2)
for op in (aten.div.Tensor, aten.fmod.Tensor, aten.remainder.Tensor,
           aten.floor_divide.default):
    case(op, r(3, 4, nc=True), r(4, low=0.5, high=2.0))
    case(op, r(3, 4, dtype=i32, low=-5, high=5), r(3, 4, dtype=i32, low=1, high=3))
    case(op, r(5, dtype=f16), r(5, dtype=f16, low=0.5, high=2.0))
case(aten.div.Tensor, r(2, 3, dtype=i64), r(3, dtype=i64, low=1, high=2))
for mode in ("floor", "trunc"):
    case(aten.div.Tensor_mode, r(3, 4, dtype=i64), r(4, dtype=i64, low=1, high=2),
         rounding_mode=mode)
    case(aten.div.Tensor_mode, r(3, 4), r(3, 4, low=0.5, high=2.0), rounding_mode=mode)
    case(aten.div.Scalar_mode, r(3, 4, dtype=i32), -2, rounding_mode=mode)
for e in (2, 3, 0.5, -1.5, 2.5):
    case(aten.pow.Tensor_Scalar, r(3, 4, low=0.1, high=3.0, nc=True), e)
case(aten.pow.Tensor_Scalar, r(3, 4), 2)
case(aten.pow.Tensor_Scalar, r(3, 4, dtype=i64, low=-1, high=1), 3)
case(aten.pow.Tensor_Scalar, r(3, 4, dtype=bf16), 2)
case(aten.pow.Tensor_Tensor, r(3, 4, low=0.1), r(4, low=-2.0, high=2.0))
case(aten.pow.Scalar, 2.0, r(3, 4))
for op in (aten.bitwise_and.Tensor, aten.bitwise_or.Tensor, aten.bitwise_xor.Tensor):
    case(op, r(3, 4, dtype=b8), r(4, dtype=b8))
for op in (aten.bitwise_and.Scalar, aten.bitwise_or.Scalar, aten.bitwise_xor.Scalar):
    case(op, r(3, 4, dtype=b8), True)
case(aten.where.self, r(3, 1, dtype=b8), r(4, nc=False), r(3, 4, nc=True))
case(aten.where.self, r(2, 3, dtype=b8), SPECIAL[:, :3], r(2, 3, dtype=f32))
case(aten.where.self, r(4, dtype=b8), r(4, dtype=i64), r(dtype=i64))
case(aten.clamp.default, r(3, 4, nc=True), -1.0, 1.5)
case(aten.clamp.default, r(3, 4, dtype=i32), None, 4)
case(aten.clamp.Tensor, r(3, 4), r(4, high=0.0), r(3, 1, low=0.0))
case(aten.clamp_min.default, r(3, 5, dtype=bf16), 0.5)
case(aten.clamp_min.Tensor, r(3, 5), r(5))
case(aten.clamp_max.default, r(3, 5, dtype=i64), 2)
case(aten.clamp_max.Tensor, r(3, 5), r(3, 1))
case(aten.masked_fill.Scalar, r(3, 5, nc=True), r(5, dtype=b8), float("-inf"))
case(aten.masked_fill.Scalar, r(3, 5, dtype=i32), r(3, 1, dtype=b8), 7)
case(aten.masked_fill.Tensor, r(3, 5), r(3, 5, dtype=b8), torch.tensor(2.0))

# inverse trigonometric and hyperbolic functions, reduced arguments (accuracy: test_math.py)
UNIT = torch.tensor([-1.0, -0.999, -0.5, -1e-6, -0.0, 0.0, 3e-8, 0.3, 0.75, 0.9999, 1.0, 1.5,
                     float("nan")])
WIDE = torch.tensor([-1e30, -40.0, -3.0, -1.0, -1e-7, 0.0, 2e-9, 0.2, 1.0, 2.5, 7.0, 90.0,
                     1e20, float("inf"), -float("inf"), float("nan")])
for name in ("asin", "acos", "atanh"):
    for x in (UNIT, UNIT.double(), UNIT.half(), r(3, 4, dtype=i64, low=-0.15, high=0.15)):
        case(getattr(aten, name).default, x)
for name in ("atan", "sinh", "cosh", "asinh", "tan"):
    for x in (WIDE, WIDE.double(), r(3, 4, dtype=bf16), r(5, dtype=i32)):
        case(getattr(aten, name).default, x)
for x in (torch.tensor([1.0, 1.0 + 1e-6, 1.5, 2.0, 3.0, 1e10, 1e30, 0.5, float("inf")]),
          r(4, dtype=f64, low=1.0, high=40.0), r(3, dtype=i64, low=0.2, high=2)):
    case(aten.acosh.default, x)
for x in (r(3, 4, low=0.01, high=100.0, nc=True), r(4, dtype=f64, low=1e-3, high=1e3),
          torch.tensor([0.0, -1.0, float("inf"), 1e-30])):
    case(aten.log10.default, x)
case(aten.erfc.default, WIDE)
case(aten.erfc.default, r(3, 4, dtype=f64))
for x in (SPECIAL, r(4, dtype=i32), r(3, dtype=b8)):
    case(aten.signbit.default, x)
case(aten.frexp.Tensor, torch.tensor([0.0, -0.0, 1.0, 0.5, -3.0, 1e-40, 6e-39, 1e38, 1023.9,
                                      float("inf"), float("nan")]))
case(aten.frexp.Tensor, r(3, 4, dtype=f64, low=-1e5, high=1e5))
for d in (0, 2, -1):
    case(aten.round.decimals, r(3, 4, low=-500, high=500), decimals=d)
case(aten.hardtanh.default, SPECIAL, -1.0, 2.0)
case(aten.hardtanh.default, r(3, 4, dtype=i64), 0, 6)
ZEROS = torch.tensor([0.0, -0.0, 0.0, -0.0, 1.0, -1.0, float("inf"), -float("inf"), 2.0, -3.0,
                      float("inf"), float("nan")])
case(aten.atan2.default, ZEROS, ZEROS.flip(0))
case(aten.atan2.default, ZEROS.repeat(12).reshape(12, 12), ZEROS.reshape(12, 1))
case(aten.atan2.default, r(3, 4, dtype=f64), r(4, dtype=f64))
case(aten.atan2.default, r(3, 4, dtype=i64), r(4, dtype=i32))
case(aten.atan2.default, r(5, dtype=bf16), r(5, dtype=bf16))
for op in (aten.fmax.default, aten.fmin.default, aten.copysign.Tensor, aten.hypot.default):
    case(op, ZEROS, ZEROS.flip(0))
    case(op, r(3, 4, nc=True), r(4))
for op in (aten.fmax.default, aten.fmin.default):
    case(op, r(3, 4, dtype=i64), r(4, dtype=i64))
case(aten.copysign.Tensor, r(3, 4, dtype=i64), r(4))
case(aten.copysign.Scalar, r(3, 4), -2.0)
case(aten.hypot.default, torch.tensor([3e38, 1e-40, 0.0, 5.0]), torch.tensor([4e38, 1e-40, 0.0,
                                                                                12.0]))
case(aten.ldexp.Tensor, r(3, 4), r(4, dtype=i64))
case(aten.ldexp.Tensor, r(3, 4, dtype=i32), r(3, 4, dtype=i32))
for op in (aten.gcd.default, aten.lcm.default):
    case(op, r(4, 5, dtype=i64, low=-10, high=10), r(5, dtype=i64, low=-10, high=10))
    case(op, torch.tensor([0, 0, 7, -12, 2**40 * 3, 832040, 5], dtype=i64),
         torch.tensor([0, 5, 0, 18, 2**41, 514229, -5], dtype=i64))
case(aten.gcd.default, torch.tensor([2**62 + 2**61, -2**63 + 2**10, 2**63 - 1], dtype=i64),
     torch.tensor([2**61, 2**20, 2**31 - 1], dtype=i64))
case(aten.gcd.default, r(3, 4, dtype=i8, low=-18, high=18), r(4, dtype=i8, low=-18, high=18))

NEXT = torch.tensor([0.0, -0.0, 1.0, 1.0, -1.0, 0.5, 3.0, 1e-45, -2e-38, 1e38, float("nan"), 2.0])
case(aten.nextafter.default, NEXT, torch.tensor([1.0, -1.0, 2.0, 0.0, -2.0, 0.0, 3.0, 0.0, 0.0,
                                                 float("inf"), 0.0, float("nan")]))
case(aten.nextafter.default, NEXT.double(), -NEXT.double())
# integer bitwise ops, exact for every value (extremes and random 64-bit patterns)
EXTREMES = torch.tensor([0, 1, -1, 2**63 - 1, -2**63, 2**62, -2**62, 2**53 + 1, -(2**53) - 3,
                         12345678901234567, 255, -256], dtype=i64)
BITS_A = torch.cat([EXTREMES.repeat_interleave(12), torch.randint(-2**63, 2**63 - 1, (40,),
                                                                  generator=G)])
BITS_B = torch.cat([EXTREMES.repeat(12), torch.randint(-2**63, 2**63 - 1, (40,), generator=G)])
for op in (aten.bitwise_and.Tensor, aten.bitwise_or.Tensor, aten.bitwise_xor.Tensor):
    case(op, BITS_A, BITS_B)
    case(op, r(3, 4, dtype=i32, low=-9e8, high=9e8), r(4, dtype=i32, low=-9e8, high=9e8))
    case(op, r(3, 4, dtype=u8, high=30), r(3, 4, dtype=u8, high=30))
    case(op, r(2, 5, dtype=i16), r(2, 1, dtype=i8))
for op in (aten.bitwise_and.Scalar, aten.bitwise_or.Scalar, aten.bitwise_xor.Scalar):
    case(op, BITS_A, -6148914691236517206)
case(aten.bitwise_not.default, BITS_A)
case(aten.bitwise_not.default, r(3, 4, dtype=u8))
case(aten.bitwise_not.default, r(3, 4, dtype=b8))
SHIFTS = torch.randint(-3, 70, BITS_A.shape, generator=G)
for op in (aten.bitwise_left_shift.Tensor, aten.bitwise_right_shift.Tensor,
           aten.__lshift__.Tensor, aten.__rshift__.Tensor):
    case(op, BITS_A, SHIFTS)
    case(op, r(3, 4, dtype=i8), r(3, 4, dtype=i8, low=-0.3, high=1.3))
    case(op, r(3, 4, dtype=u8), r(4, dtype=u8, high=1.3))
for op in (aten.bitwise_left_shift.Tensor_Scalar, aten.bitwise_right_shift.Tensor_Scalar,
           aten.__lshift__.Scalar, aten.__rshift__.Scalar):
    case(op, BITS_A, 5)
    case(op, r(3, 4, dtype=i32), 31)

# -- reductions ----------------------------------------------------------------------------
X = r(3, 5, 4, nc=True)
for op in (aten.sum.dim_IntList, aten.mean.dim, aten.amax.default, aten.amin.default):
    case(op, X, [1])
    case(op, X, [0, -1], True)
    case(op, r(2, 7, dtype=bf16), [-1])
case(aten.sum.dim_IntList, r(3, 4, dtype=i32), [0])
case(aten.sum.dim_IntList, r(3, 4, dtype=b8), [1], True)
case(aten.sum.dim_IntList, r(3, 4, dtype=f16), [1], dtype=f32)
case(aten.sum.dim_IntList, X, None)
case(aten.mean.dim, r(3, 4, dtype=i64), [1], dtype=f64)
case(aten.amax.default, r(3, 4, dtype=i64), [1])
case(aten.amax.default, SPECIAL, [1])
case(aten.amin.default, r(2, 6, dtype=u8), [])
for op in (aten.sum.default, aten.mean.default, aten.prod.default, aten.any.default,
           aten.all.default, aten.max.default, aten.min.default):
    case(op, r(3, 5, nc=True))
case(aten.sum.default, r(4, 3, dtype=i32))
case(aten.prod.dim_int, r(3, 5, low=0.5, high=1.5), 1)
case(aten.prod.dim_int, r(3, 5, dtype=i64, low=-0.3, high=0.3), 0, True)
case(aten.any.default, r(4, 3, dtype=b8))
for op in (aten.any.dim, aten.all.dim):
    case(op, r(3, 4, dtype=b8, nc=True), 1)
    case(op, r(3, 4, dtype=i32, low=-0.2, high=0.2), 0, True)
for op in (aten.any.dims, aten.all.dims):
    case(op, r(2, 3, 4, dtype=b8), [0, 2])
for op in (aten.argmax.default, aten.argmin.default):
    case(op, X, 1)
    case(op, r(3, 4, dtype=i32), -1, True)
    case(op, r(3, 4))
for op in (aten.max.dim, aten.min.dim):
    case(op, X, 2)
    case(op, r(3, 4, dtype=i64), 0, True)
case(aten.cumsum.default, X, 1)
case(aten.cumsum.default, r(3, 4, dtype=i32), -1)
case(aten.cumsum.default, r(3, 4, dtype=b8), 0)
case(aten.cumsum.default, r(3, 4, dtype=bf16), 1, dtype=f32)
case(aten.logsumexp.default, X, [1])
case(aten.logsumexp.default, X, [0, 2], True)
for op in (aten.var.correction, aten.std.correction):
    case(op, X, [1])
    case(op, X, [0, 2], correction=0, keepdim=True)
    case(op, r(4, 6, dtype=bf16), None)
case(aten.var_mean.correction, X, [2], correction=0, keepdim=True)
case(aten.var_mean.correction, r(3, 5, dtype=f16), [1])
case(aten.linalg_vector_norm.default, X)
for o in (1, 2, 3.5, 0, float("inf"), float("-inf")):
    case(aten.linalg_vector_norm.default, X, o, [1, 2], True)
case(aten.linalg_vector_norm.default, r(3, 4, dtype=bf16), 2, [-1])
case(aten.linalg_vector_norm.default, r(3, 4, dtype=f16), 2, [-1], dtype=f32)
for op in (aten._softmax.default, aten._log_softmax.default):
    case(op, X, 1, False)
    case(op, r(3, 6, dtype=bf16), -1, False)

# scans, sorts and order statistics (ties on purpose: small integer ranges)
SCAN = r(4, 6, 3, low=-2, high=2, nc=True)
for op in (aten.cummax.default, aten.cummin.default):
    case(op, SCAN, 1)
    case(op, r(3, 7, dtype=i64, low=-0.3, high=0.3), -1)
    case(op, SPECIAL, 1)
    case(op, r(5, dtype=b8), 0)
    case(op, r(dtype=f32), 0)
case(aten.cumprod.default, SCAN, 1)
case(aten.cumprod.default, r(3, 5, dtype=i32, low=-0.4, high=0.4), -1)
case(aten.cumprod.default, SPECIAL, 1)
case(aten.cumprod.default, r(4, 3, dtype=b8), 0, dtype=f64)
case(aten.logcumsumexp.default, SCAN, 1)
case(aten.logcumsumexp.default, SPECIAL, 1)
case(aten.logcumsumexp.default, r(3, 5, dtype=f64, low=-100, high=100), 0)
TIES = r(3, 9, dtype=i64, low=-0.3, high=0.3)
NANS = torch.tensor([[3.0, float("nan"), 1.0, -0.0, 0.0, float("nan"), -float("inf"), 1.0]])
PERM = torch.randperm(20, generator=G).reshape(4, 5)
# unique values: indices compared too; with ties (PyTorch's order among equal values is
# unspecified but for stable sorts) only the values
for x, tied in ((r(3, 37, 2, nc=True), False), (PERM.to(bf16), False), (PERM, False),
                (TIES, True), (NANS, True), (r(6, dtype=b8), True)):
    pick = 0 if tied else None
    case(aten.sort.default, x, 1 if x.ndim > 1 else 0, pick=pick)
    case(aten.sort.default, x, 0, True, pick=pick)
    case(aten.sort.stable, x, stable=True, dim=-1, descending=True)
    if x.dtype is b8:
        continue
    case(aten.topk.default, x, 2, -1, pick=pick)
    case(aten.topk.default, x, 1, 0, False, pick=pick)
    case(aten.kthvalue.default, x, 2, -1, True, pick=pick)
    case(aten.median.default, x)
    case(aten.nanmedian.default, x)
    case(aten.median.dim, x, -1, pick=pick)
    case(aten.nanmedian.dim, x, 0, True, pick=pick)
    if x is not NANS:  # PyTorch's mode counts NaNs as it meets them in its sort
        case(aten.mode.default, x, -1, pick=pick)
case(aten.nanmedian.dim, torch.tensor([[float("nan")] * 3, [1.0, float("nan"), 2.0]]), 1)
case(aten.sort.default, r(1000), 0)
SEQ = torch.tensor([[-1.0, 0.0, 0.0, 2.0, 5.0], [1.0, 1.0, 1.0, 3.0, float("inf")]])
VALUES = torch.tensor([[-2.0, 0.0, 1.0, 5.0, float("nan")], [1.0, 0.5, 3.0, 4.0, 10.0]])
for right in (False, True):
    case(aten.searchsorted.Tensor, SEQ, VALUES, right=right)
    case(aten.searchsorted.Tensor, SEQ[0], VALUES, right=right, out_int32=True)
    case(aten.bucketize.Tensor, VALUES, SEQ[0], right=right)
case(aten.searchsorted.Tensor, torch.tensor([5, 1, 3]), torch.tensor([0, 2, 3, 9]),
     sorter=torch.tensor([1, 2, 0]), side="right")
case(aten.bucketize.Scalar, 2.5, SEQ[0])

# -- linear algebra and nn -----------------------------------------------------------------
case(aten.mm.default, r(3, 5, nc=True), r(5, 4))
case(aten.mm.default, r(2, 7, dtype=bf16), r(7, 3, dtype=bf16))
case(aten.mm.default, r(3, 4, dtype=f64), r(4, 1, dtype=f64, nc=True))
case(aten.bmm.default, r(2, 3, 5), r(2, 5, 4, nc=True))
case(aten.bmm.default, r(3, 1, 6, dtype=f16), r(3, 6, 2, dtype=f16))
case(aten.addmm.default, r(4), r(3, 5), r(5, 4))
case(aten.addmm.default, r(3, 1), r(3, 5), r(5, 4, nc=True), beta=0.5, alpha=2.0)
case(aten.convolution.default, r(2, 3, 9, 7), r(4, 3, 3, 2), r(4), [1, 1], [1, 0], [1, 1],
     False, [0, 0], 1)
case(aten.convolution.default, r(1, 4, 8, 8, nc=True), r(6, 2, 3, 3), None, [2, 1], [1, 1],
     [1, 2], False, [0, 0], 2)
case(aten.convolution.default, r(2, 3, 11), r(5, 3, 4), r(5), [2], [1], [1], False, [0], 1)
case(aten.convolution.default, r(1, 2, 6, 5, dtype=bf16), r(3, 2, 3, 3, dtype=bf16),
     r(3, dtype=bf16), [1, 1], [0, 0], [1, 1], False, [0, 0], 1)
BN = (r(4), r(4), r(4), r(4, low=0.5, high=2.0))
case(aten._native_batch_norm_legit_no_training.default, r(2, 4, 3, 5, nc=True), *BN, 0.1, 1e-5,
     pick=0)
case(aten._native_batch_norm_legit_no_training.default, r(3, 4), None, None, *BN[2:], 0.1,
     1e-3, pick=0)
case(aten.native_layer_norm.default, r(2, 3, 6, nc=True), [6], r(6), r(6), 1e-5, pick=0)
case(aten.native_layer_norm.default, r(2, 3, 6, dtype=bf16), [3, 6], None, None, 1e-6, pick=0)
case(aten._native_batch_norm_legit.no_stats, r(2, 4, 3, 5, nc=True), r(4), r(4), True, 0.1,
     1e-5, pick=0)
case(aten._native_batch_norm_legit.no_stats, r(3, 2, 6, dtype=bf16), None, None, True, 0.1,
     1e-5, pick=0)
case(aten.native_group_norm.default, r(2, 6, 3, 5), r(6), r(6), 2, 6, 15, 3, 1e-5,
     pick=0)
case(aten.native_group_norm.default, r(2, 4, 7), None, None, 2, 4, 7, 4, 1e-6, pick=0)
case(aten.max_pool2d_with_indices.default, r(2, 3, 7, 9, nc=True), [2, 2], pick=0)
case(aten.max_pool2d_with_indices.default, r(1, 2, 9, 8), [3, 2], [2, 1], [1, 1], [1, 1], True,
     pick=0)
case(aten.max_pool2d_with_indices.default, r(1, 2, 6, 6, dtype=i64), [2, 2], [2, 2], pick=0)
case(aten.avg_pool2d.default, r(2, 3, 7, 9, nc=True), [3, 3], [2, 2], [1, 1])
case(aten.avg_pool2d.default, r(1, 2, 7, 6), [2, 3], [2, 2], [1, 1], True, False)
case(aten.avg_pool2d.default, r(1, 2, 6, 6, dtype=bf16), [2, 2])
case(aten._adaptive_avg_pool2d.default, r(2, 3, 7, 5, nc=True), [3, 2])
case(aten._adaptive_avg_pool2d.default, r(1, 4, 6, 6), [1, 1])
case(aten.embedding.default, r(11, 4), torch.randint(0, 11, (2, 5), generator=G))
case(aten.embedding.default, r(7, 3, dtype=bf16), torch.randint(0, 7, (6,), generator=G).int())

case(aten.addmv.default, r(4), r(4, 5, nc=True), r(5))
case(aten.addmv.default, torch.full((3,), float("nan")), r(3, 2), r(2), beta=0, alpha=-1.5)
case(aten.addmv.default, r(3, dtype=i64), r(3, 2, dtype=i64), r(2, dtype=i64), beta=2, alpha=3)
case(aten.addbmm.default, r(3, 4), r(2, 3, 5), r(2, 5, 4, nc=True), beta=0.5)
case(aten._trilinear.default, r(2, 3), r(5, 3, 4), r(2, 4), [1, 3], [0], [1, 2], [2, 3])
case(aten.dist.default, r(3, 4), r(4), 3.0)
for p in (0.0, 1.0, 2.0, float("inf")):
    case(aten._cdist_forward.default, r(2, 4, 3), r(2, 5, 3), p, None)
case(aten._pdist_forward.default, r(5, 3), 2.0)
case(aten._pdist_forward.default, r(4, 2, dtype=f64), 1.0)
case(aten.convolution.default, r(1, 2, 4, 5, 3), r(3, 2, 2, 3, 1), r(3), [1, 2, 1], [1, 0, 0],
     [1, 1, 2], False, [0, 0, 0], 1)
case(aten.convolution.default, r(2, 4, 5, 6), r(4, 3, 3, 2), r(6), [2, 1], [1, 1], [1, 2],
     True, [1, 0], 2)  # transposed: weight (C_in, C_out / groups, ...)
case(aten.convolution.default, r(1, 3, 7), r(3, 2, 4), None, [3], [2], [1], True, [2], 1)
case(aten.convolution.default, r(1, 2, 3, 4, 3), r(2, 2, 2, 2, 2), None, [2, 1, 2], [0, 1, 0],
     [1, 1, 1], True, [1, 0, 0], 1)
case(aten._native_batch_norm_legit_functional.default, r(4, 3, 5, nc=True), r(3), r(3), r(3),
     r(3, low=0.5, high=2.0), True, 0.3, 1e-5)
case(aten._native_batch_norm_legit_functional.default, r(2, 3, 2, 2), None, None, r(3),
     r(3, low=0.5, high=2.0), False, 0.1, 1e-3)
case(aten.native_group_norm.default, r(2, 6, 3, 5), r(6), r(6), 2, 6, 15, 3, 1e-5)
case(aten.native_layer_norm.default, r(2, 3, 6), [3, 6], r(3, 6), None, 1e-5)
case(aten._native_batch_norm_legit.no_stats, r(2, 4, 3, nc=True), r(4), r(4), True, 0.1, 1e-5)
case(aten._native_batch_norm_legit_no_training.default, r(2, 4, 3), *BN, 0.1, 1e-5)
PEAKS = torch.tensor([[[[1.0, 3.0, 3.0, 0.0], [3.0, float("nan"), 2.0, float("nan")],
                        [-float("inf")] * 4]]])
case(aten.max_pool2d_with_indices.default, PEAKS, [2, 2], [1, 1], [1, 1])
case(aten.max_pool2d_with_indices.default, r(1, 2, 9, 8, dtype=i64), [3, 2], [2, 1], [1, 1],
     [1, 2], True)
case(aten.max_pool3d_with_indices.default, r(1, 2, 5, 6, 4), [2, 3, 2], [2, 2, 1], [1, 1, 0],
     [1, 1, 2], True)
case(aten.max_pool3d_with_indices.default, r(2, 3, 3, 4, dtype=i64), [2, 2, 2])
case(aten.avg_pool2d.default, r(1, 2, 7, 6, dtype=i64, low=-40, high=40), [3, 2], [2, 2], [1, 1],
     True, False)
case(aten.avg_pool2d.default, r(1, 1, 5, 5, dtype=i64), [2, 2], [2, 2], [0, 0], False, True, 3)
case(aten.avg_pool3d.default, r(1, 2, 5, 6, 4), [2, 3, 2], [2, 2, 1], [1, 1, 0], True)
case(aten.avg_pool3d.default, r(2, 3, 3, 4, dtype=i64), [2, 2, 2])
case(aten._adaptive_avg_pool3d.default, r(1, 2, 5, 7, 3), [2, 3, 1])
for op in (aten.adaptive_max_pool2d.default, aten.adaptive_max_pool3d.default):
    nd = 2 if op is aten.adaptive_max_pool2d.default else 3
    case(op, r(2, 3, *(5, 7, 4)[:nd], nc=True), [3, 2, 3][:nd])
    case(op, r(1, 2, *(6, 4, 3)[:nd], low=-0.3, high=0.3).round(), [4, 1, 2][:nd])
case(aten.adaptive_max_pool2d.default, PEAKS, [2, 3])

BAG = torch.tensor([3, 0, 7, 7, 2, 5, 1])
for mode in (0, 1, 2):
    case(aten._embedding_bag_forward_only.default, r(8, 3), BAG, torch.tensor([0, 2, 2, 5]),
         False, mode, pick=0)
case(aten._embedding_bag_forward_only.default, r(8, 3), BAG, torch.tensor([0, 3, 7]), False, 0,
     False, r(7), True, 7, pick=0)
case(aten._embedding_bag.default, r(8, 3), BAG, torch.tensor([0, 4]), False, 1, pick=0)
for red in ("sum", "mean", "max", "min", "prod"):
    case(aten.segment_reduce.default, r(6, 2), red, lengths=torch.tensor([2, 0, 3, 1]))
case(aten.segment_reduce.default, r(5, 3), "max", offsets=torch.tensor([0, 2, 2, 5]),
     initial=1.0)
case(aten.tril_indices.default, 4, 3, 1)
case(aten.triu_indices.default, 3, 5, -1)

GRID2 = r(2, 4, 3, 2, low=-1.4, high=1.4)  # reaches outside [-1, 1]
for mode, padding, corners in itertools.product((0, 1), (0, 1, 2), (False, True)):
    case(aten.grid_sampler_2d.default, r(2, 3, 5, 6), GRID2, mode, padding, corners)
case(aten.grid_sampler_3d.default, r(1, 2, 3, 4, 5), r(1, 2, 3, 2, 3, low=-1.3, high=1.3), 0, 2,
     False)
case(aten.grid_sampler_3d.default, r(1, 2, 3, 4, 5), r(1, 2, 3, 2, 3, low=-1.3, high=1.3), 1, 1,
     True)

case(aten._upsample_bilinear2d_aa.default, r(2, 3, 10, 17, nc=True), [3, 5], False)
case(aten._upsample_bilinear2d_aa.default, r(1, 2, 4, 5), [9, 7], False)
case(aten._upsample_bilinear2d_aa.default, r(1, 1, 12, 12, dtype=f64), [5, 4], False, 0.4, 0.3)

# -- indexing ------------------------------------------------------------------------------
Y = r(4, 5, 6, nc=True)
case(aten.index.Tensor, Y, [ix(3, n=4)])
case(aten.index.Tensor, Y, [None, ix(2, 3, n=5), ix(3, n=6)])
case(aten.index.Tensor, Y, [ix(2, n=4), None, ix(2, n=6)])
case(aten.index.Tensor, r(5, 3, dtype=i64), [ix(4, n=5).int()])
case(aten.index_put.default, Y, [ix(3, n=4)], r(3, 5, 6))
case(aten.index_put.default, Y, [None, torch.tensor([4, 0, 2]), ix(3, n=6)], r(3))
case(aten.index_put.default, r(6, 3), [torch.tensor([1, 1, 5])], r(3, 3), True)
case(aten.index_put.default, r(2, 8, 3, dtype=bf16), [None, torch.tensor([2, 3])],
     r(2, 2, 3, dtype=bf16))
case(aten.index_copy.default, r(2, 6, 3), 1, torch.tensor([4, 0]), r(2, 2, 3))
case(aten.index_select.default, Y, 1, torch.randint(0, 5, (7,), generator=G))
case(aten.index_select.default, r(5, dtype=i32), 0, torch.tensor([4, 4, 0]))
case(aten.gather.default, Y, 2, torch.randint(0, 6, (4, 5, 3), generator=G))
case(aten.gather.default, r(3, 4, dtype=bf16), 0, torch.randint(0, 3, (2, 4), generator=G))
case(aten.scatter.src, r(4, 5), 0, torch.tensor([[0, 1, 2, 3, 0]]), r(2, 5))
case(aten.scatter.value, r(4, 5, dtype=i64), 1, torch.tensor([[4], [0], [2], [1]]), 9)
case(aten.select.int, Y, 1, -1)
case(aten.select.int, r(3, 4, dtype=b8), 0, 2)
case(aten.slice.Tensor, Y, 2, 1, 5, 2)
case(aten.slice.Tensor, Y, 0, -3, 2**63 - 1)
case(aten.slice.Tensor, r(9, dtype=f16), 0, None, -2, 3)
case(aten.slice_scatter.default, Y, r(4, 2, 6), 1, 1, 5, 2)
case(aten.slice_scatter.default, r(6, 3, dtype=i32), r(2, 3, dtype=i32), 0, -2)
case(aten.select_scatter.default, Y, r(4, 6), 1, -2)
case(aten.select_scatter.default, r(3, 4, dtype=b8), r(3, dtype=b8), 1, 0)
case(aten.cat.default, [r(2, 3), r(2, 1, nc=True), r(2, 4)], 1)
case(aten.cat.default, [torch.empty(0), r(2, 3)], -2)
case(aten.cat.default, [r(1, 3, dtype=i32), r(2, 3, dtype=i64)])
case(aten.split_with_sizes.default, Y, [1, 3, 2], -1)
case(aten.split.Tensor, r(7, 3), 3)
case(aten.unbind.int, r(3, 4, dtype=bf16), 1)
case(aten.diagonal.default, Y)
case(aten.diagonal.default, Y, 2, 2, 0)
case(aten.diagonal.default, r(3, 5, dtype=i32), -1)
case(aten.constant_pad_nd.default, Y, [1, 2, 0, 1])
case(aten.constant_pad_nd.default, r(3, 5, dtype=i32), [-1, 2], 7)
case(aten.tril.default, r(4, 5, nc=True))
case(aten.tril.default, r(2, 4, 4, dtype=i64), -1)
case(aten.triu.default, r(4, 5), 1)
case(aten.triu.default, r(3, 3, dtype=b8))

case(aten.scatter_add.default, r(4, 5), 0, torch.tensor([[0, 1, 1, 3, 0], [1, 1, 1, 0, 3]]),
     r(2, 5))
case(aten.scatter_add.default, r(3, 4, dtype=i64), 1, torch.randint(0, 4, (3, 6), generator=G),
     r(3, 6, dtype=i64))
for red in ("sum", "prod", "mean", "amax", "amin"):
    for include_self in (True, False):
        case(aten.scatter_reduce.two, r(4, 5, nc=True), 0,
             torch.randint(0, 4, (3, 5), generator=G), r(3, 5), red, include_self=include_self)
    case(aten.scatter_reduce.two, r(4, 5, dtype=i64), 1, torch.randint(0, 5, (4, 7), generator=G),
         r(4, 7, dtype=i64), red, include_self=False)
    if red != "sum":
        case(aten.index_reduce.default, r(5, 3), 0, torch.tensor([0, 4, 0, 2]), r(4, 3), red)
case(aten.scatter_reduce.two, SPECIAL.reshape(-1), 0, torch.tensor([0, 0, 1, 1, 2]),
     SPECIAL.reshape(-1)[3:], "amax")
case(aten.scatter.reduce, r(4, 5), 0, torch.tensor([[0, 1, 1, 3, 0]]), r(2, 5), reduce="add")
case(aten.scatter.reduce, r(4, 5), 1, torch.tensor([[0, 1, 1], [4, 4, 2]]), r(2, 3),
     reduce="multiply")
case(aten.scatter.value_reduce, r(4, 5, dtype=i64), 1, torch.tensor([[4], [4], [2], [1]]), 3,
     reduce="add")
case(aten.masked_scatter.default, r(3, 4), r(3, 4, dtype=b8), r(5, 3))
case(aten.masked_scatter.default, r(3, 4, dtype=i64), r(4, dtype=b8), r(12, dtype=i64))
case(aten.put.default, r(3, 4), torch.tensor([0, -1, 5, 5]), r(4))
case(aten.put.default, r(3, 4, dtype=i32), torch.tensor([[1, 1], [7, -12]]), r(2, 2, dtype=i32),
     True)
case(aten.diagonal_scatter.default, r(4, 5), r(4), 1)
case(aten.diagonal_scatter.default, Y, r(5, 3), -1, 0, 2)
case(aten.as_strided.default, r(4, 6), [3, 3], [2, 5], 1)
case(aten.as_strided_copy.default, r(10, dtype=i64), [2, 4], [1, 2])
case(aten.as_strided_scatter.default, r(4, 6), r(3, 2), [3, 2], [6, 2], 1)
case(aten.unfold.default, Y, 1, 2, 2)
case(aten.unfold.default, r(7, dtype=i32), 0, 3, 1)
case(aten.unfold.default, r(dtype=f32), 0, 1, 1)

# -- layout --------------------------------------------------------------------------------
case(aten.view.default, r(3, 4), [2, -1, 3])
case(aten._unsafe_view.default, r(3, 4), [12])
case(aten.expand.default, r(3, 1), [2, 3, 5])
case(aten.expand.default, r(4, dtype=b8), [3, -1])
case(aten.permute.default, Y, [2, 0, 1])
case(aten.transpose.int, Y, 0, -1)
case(aten.t.default, r(3, 4, dtype=i32))
case(aten.unsqueeze.default, Y, -1)
case(aten.squeeze.default, r(3, 1, 4, 1))
case(aten.squeeze.dim, r(3, 1, 4), 1)
case(aten.squeeze.dims, r(1, 3, 1, 4), [0, 2])
case(aten.flip.default, Y, [0, 2])
case(aten.roll.default, Y, [2, -1], [0, 2])
case(aten.roll.default, r(3, 4), [5])
case(aten.repeat.default, r(2, 3, nc=True), [2, 1, 3])
for op in (aten.alias.default, aten.clone.default, aten.detach.default,
           aten.lift_fresh_copy.default):
    case(op, r(3, 4, nc=True))
case(aten.clone.default, r(3, 4, dtype=i16, nc=True), memory_format=torch.contiguous_format)
case(aten.clone.default, r(2, 3, 4, dtype=bf16).permute(1, 0, 2),
     memory_format=torch.contiguous_format)
case(aten._to_copy.default, r(3, 4, nc=True), dtype=bf16)
case(aten._to_copy.default, r(3, 4), dtype=i32)
case(aten._to_copy.default, r(3, 4, dtype=i64), dtype=f16)
case(aten._to_copy.default, r(3, 4, dtype=b8), dtype=f32)
case(aten._to_copy.default, r(3, 4, low=-40, high=40), dtype=i16)
case(aten._to_copy.default, r(3, 4, dtype=i16), dtype=u8)
case(aten.copy.default, r(3, 4), r(4, dtype=i64))

case(aten.view_copy.default, r(3, 4, nc=True), [6, 2])
case(aten.permute_copy.default, Y, [1, 2, 0])
case(aten.unbind_copy.int, r(3, 2), 0)
case(aten.expand_copy.default, r(3, 1), [3, 4])
case(aten.diagonal_copy.default, Y, 0, 0, 2)
case(aten.narrow_copy.default, Y, 2, 1, 3)

# -- construction --------------------------------------------------------------------------
case(aten.full.default, [2, 3], 1.5)
case(aten.full.default, [4], 7, dtype=i32)
case(aten.full.default, [2, 2], float("-inf"), dtype=bf16)
case(aten.full_like.default, r(3, 2, dtype=i64), 5)
case(aten.full_like.default, r(3, 2), True, dtype=b8)
case(aten.zeros.default, [3, 2], dtype=f16)
case(aten.ones.default, [2, 1, 3])
case(aten.zeros_like.default, r(2, 3, dtype=i32))
case(aten.ones_like.default, r(2, 3), dtype=f64)
case(aten.new_full.default, r(2), [3, 4], 2.5)
case(aten.new_zeros.default, r(2, dtype=i64), [3])
case(aten.new_ones.default, r(2), [2, 2], dtype=bf16)
case(aten.scalar_tensor.default, 3.5)
case(aten.scalar_tensor.default, 4, dtype=i64)
case(aten.fill.Scalar, r(3, 4, dtype=i32), 3)
case(aten.arange.default, 7)
case(aten.arange.start, 2, 9, dtype=f32)
case(aten.arange.start_step, 0, 11, 3)
case(aten.arange.start_step, 1.0, 2.0, 0.25)
case(aten.arange.start_step, 10, 0, -4, dtype=i32)
for op, args in ((aten.empty.memory_format, ([2, 3],)), (aten.empty_like.default, (r(3, 2),)),
                 (aten.empty_strided.default, ([2, 3], [3, 1])),
                 (aten.new_empty.default, (r(2), [4])),
                 (aten.empty_permuted.default, ([2, 3, 4], [2, 0, 1]))):
    case(op, *args, values=False)


@pytest.mark.parametrize(("op", "args", "kwargs", "values", "pick", "tol"), CASES)
def test_op(op: Any, args: tuple, kwargs: dict, values: bool, pick: int | None,
            tol: float | None) -> None:
    fn, tensors = call_op(op, args, kwargs)
    if pick is not None:
        fn = (lambda f, i: lambda *ts: f(*ts)[i])(fn, pick)
    gm, compiled = compile_aten(fn, *tensors)
    assert op in {n.target for n in gm.graph.nodes}, "the traced graph lost the op"
    assert_same(compiled(*tensors), fn(*tensors), values, tol, tol)


def test_every_translation_is_tested() -> None:
    tested = {p.values[0] for p in CASES} | {aten.copy_.default}
    untested = {str(k) for k in TABLE} - {str(k) for k in tested} - {
        # cannot be traced on their own; covered by test_sizes and test_asserts below
        "aten._assert_tensor_metadata.default", "aten._assert_scalar.default",
        "aten.sym_constrain_range_for_size.default", "aten._assert_async.default",
        "aten._assert_async.msg"}
    assert not untested, f"translations without a test case: {sorted(untested)}"


def test_sizes() -> None:
    """SymInt arithmetic (sym_size, operator add/mul/floordiv) becomes lumos dims."""
    def fn(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        n = x.shape[0] * x.shape[1]
        z = x.reshape(n // 2, 2) + y[: n // 2].unsqueeze(-1)
        return torch.cat([z, z[:1]]).sum(0) * x.shape[0] + torch.arange(x.shape[1] + 1)[:2]

    x, y = r(4, 6), r(30)
    gm, compiled = compile_aten(fn, x, y, dynamic=True)
    assert aten.sym_size.int in {n.target for n in gm.graph.nodes}
    for a, b in ((x, y), (r(2, 3), r(5)), (r(6, 10), r(31))):
        assert_same(compiled(a, b), fn(a, b))


def test_asserts() -> None:
    def fn(x: torch.Tensor) -> torch.Tensor:
        aten._assert_async.msg(x.abs().sum() >= 0, "non-negative")
        return x + 1

    x = r(3)
    gm, compiled = compile_aten(fn, x)
    assert aten._assert_async.msg in {n.target for n in gm.graph.nodes}
    assert_same(compiled(x), x + 1)


@pytest.mark.parametrize(("a", "b"), list(itertools.product([f32, bf16, i64], [f16, i32, b8])))
def test_promotion(a: torch.dtype, b: torch.dtype) -> None:
    """Mixed dtypes come out as PyTorch types them (the translation casts to the meta)."""
    x, y = r(3, 4, dtype=a), r(4, dtype=b)
    fn = lambda u, v: (u * v + 1, torch.where(v.bool(), u, 2))  # noqa: E731
    _, compiled = compile_aten(fn, x, y)
    assert_same(compiled(x, y), fn(x, y))


def test_a_clone_asked_contiguous_is_a_copy() -> None:
    """clone(memory_format=contiguous_format) of a transposed tensor is a copy node (x * 1)
    in the lumos graph, so a product reading it can multiply a plain matrix; a clone that
    keeps the format is none. Both as in eager."""
    x, w = r(4, 3), r(4, 5)
    for fmt, copies in ((torch.contiguous_format, 1), (torch.preserve_format, 0)):
        fn = lambda t, u: t.T.clone(memory_format=fmt) @ u  # noqa: B023, E731
        _, compiled = compile_aten(fn, x, w)
        assert [n.op for n in compiled.tr.graph.nodes].count("Mul") == 1 + copies
        assert_same(compiled(x, w), fn(x, w))
