"""Core ATen -> the lumos Tensor API.

`translate(gm)` walks a functional core-ATen FX graph (what AOTAutograd hands a
forward compiler) and records every node in a fresh lumos `Graph`: placeholders
and tensor attributes become graph inputs (bound from the real tensors on every
call), SymInt sizes become lumos dims, `copy_` into an input becomes a mutation
applied after the run. A node that cannot be translated is recorded in
`failures` (and stood in for by a fresh input, so the nodes after it are still
tried): the caller partitions around them.

`TABLE` maps each ATen overload to a function `(ctx, *args, **kwargs)` whose
arguments are already translated (tensors are lumos Tensors, SymInts are Exprs).
"""

from __future__ import annotations

import functools
import operator
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import sympy
import torch
from torch import fx
from torch.fx.experimental.symbolic_shapes import free_unbacked_symbols

from lumos.dtype import DType, bf16, bool_, f16, f32, f64, i8, i16, i32, i64, u8
from lumos.errors import LumosError, ShapeError
from lumos.frontend import bits as B
from lumos.frontend import elementwise as E
from lumos.frontend import grid as G
from lumos.frontend import index as I
from lumos.frontend import nn as F
from lumos.frontend import pool as P
from lumos.frontend import scan as S
from lumos.frontend import sort as O
from lumos.frontend import tensor as T
from lumos.frontend.tensor import Tensor
from lumos.graph import Graph
from lumos.nn.conv import conv2d
from lumos.shape import Expr, View, emax, emin, simplify, sym, z

aten = torch.ops.aten

DTYPES: dict[torch.dtype, DType] = {
    torch.float32: f32, torch.float16: f16, torch.bfloat16: bf16, torch.float64: f64,
    torch.int8: i8, torch.uint8: u8, torch.int16: i16, torch.int32: i32, torch.int64: i64,
    torch.bool: bool_,
}


class Unavailable:
    """An output of a multi-output op that lumos does not compute (e.g. pooling indices)."""

    def __init__(self, what: str) -> None:
        self.what = what


@dataclass
class TensorOut:
    tensor: Tensor
    dtype: torch.dtype


@dataclass
class ArgOut:
    """A graph input returned as it is (the caller returns the very same tensor)."""

    position: int


@dataclass
class Translation:
    graph: Graph
    inputs: list[tuple[Tensor, int | str]] = field(default_factory=list)  # arg position / attr
    dim_args: list[tuple[str, int]] = field(default_factory=list)  # dim read from a SymInt arg
    outputs: Any = None  # the output structure; leaves TensorOut, ArgOut, Expr or constants
    mutations: list[tuple[int, Tensor]] = field(default_factory=list)  # arg position, new value
    failures: dict[fx.Node, str] = field(default_factory=dict)
    hints: dict[str, int] = field(default_factory=dict)  # dim -> its size in the traced call

    @functools.cached_property
    def sized_by(self) -> list[tuple[int | str, list[tuple[int, str]]]]:
        """The inputs with a dim for a size: (source, [(axis, dim)])."""
        return [(source, axes) for t, source in self.inputs
                if (axes := [(k, e.args[0]) for k, e in enumerate(t.view.shape)
                             if e.op == "var"])]


class Symbols:
    """SymInts and sympy expressions as lumos Exprs; every symbol becomes a graph dim, and
    its size in the call PyTorch traced (the shape env's hint) is kept in `hints`."""

    def __init__(self, g: Graph) -> None:
        self.g = g
        self.hints: dict[str, int] = {}

    def expr(self, v: Any) -> Expr:
        if isinstance(v, torch.SymInt):
            if free_unbacked_symbols(v):
                raise LumosError(f"data-dependent size {v} (from a value read at run time)")
            return self._sympy(v.node.expr, v.node.shape_env)
        if isinstance(v, int) and not isinstance(v, bool):
            return sym(v)
        raise LumosError(f"{v!r} ({type(v).__name__}) is not an integer size")

    def shape(self, t: torch.Tensor) -> tuple[Expr, ...]:
        return tuple(self.expr(s) for s in t.shape)

    def _sympy(self, e: sympy.Expr, env: Any) -> Expr:
        go = functools.partial(self._sympy, env=env)
        name = type(e).__name__
        if e.is_Integer:
            return sym(int(e))
        if e.is_Symbol:
            if str(e) not in self.g.dims:
                r = env.var_to_range.get(e) if env is not None else None
                lo = int(r.lower) if r is not None and r.lower.is_integer else 1
                self.g.dim(str(e), max(lo, 0))
                hint = env.backed_var_to_val.get(e) if env is not None else None
                if hint is not None and hint.is_Integer:
                    self.hints[str(e)] = int(hint)
            return sym(str(e))
        if e.is_Add:
            return functools.reduce(operator.add, map(go, e.args))
        if e.is_Mul:
            return functools.reduce(operator.mul, map(go, e.args))
        if name in ("FloorDiv", "CleanDiv"):
            return go(e.args[0]) // go(e.args[1])
        if name == "CeilDiv":
            return -(-go(e.args[0]) // go(e.args[1]))
        if name in ("PythonMod", "Mod"):  # sizes: both operands are non-negative
            return go(e.args[0]) % go(e.args[1])
        if name == "ModularIndexing":
            return (go(e.args[0]) // go(e.args[1])) % go(e.args[2])
        if name in ("Max", "Min"):
            return functools.reduce(emax if name == "Max" else emin, map(go, e.args))
        if name in ("Pow", "PowByNatural") and e.args[1].is_Integer and int(e.args[1]) >= 0:
            return functools.reduce(operator.mul, [go(e.args[0])] * int(e.args[1]), sym(1))
        raise LumosError(f"symbolic size {e} ({name}) has no lumos counterpart")


class Ctx:
    """What an op translation may ask about the node: the graph and the output's meta."""

    def __init__(self, g: Graph, node: fx.Node, syms: Symbols) -> None:
        self.g, self.node, self.syms = g, node, syms

    @property
    def op(self) -> str:
        """The op's name without its overload: `sum` for aten.sum.dim_IntList."""
        return self.node.target.__name__.split(".")[0]

    @property
    def val(self) -> Any:
        return self.node.meta["val"]

    @property
    def dtype(self) -> DType:
        return DTYPES[self.val.dtype]

    @property
    def shape(self) -> tuple[Expr, ...]:
        return self.syms.shape(self.val)


# -- the table ---------------------------------------------------------------------------

TABLE: dict[Any, Callable[..., Any]] = {}


def _op(*names: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    def deco(fn: Callable[..., Any]) -> Callable[..., Any]:
        for name in names:
            packet, _, overload = name.partition(".")
            TABLE[getattr(getattr(aten, packet), overload or "default")] = fn
        return fn

    return deco


def _v(c: Ctx, x: Any) -> Any:
    """A scalar operand: a symbolic size becomes a 0-d tensor holding its value."""
    if isinstance(x, Expr):
        return x.value if x.is_num else T.dim_value(c.g, x, i64)
    return x


def _method(name: str) -> Callable[..., Any]:
    return lambda c, x, *a, **k: getattr(x, name)(*(_v(c, v) for v in a), **k)


def _binary(fn: Callable[..., Tensor]) -> Callable[..., Any]:
    return lambda c, a, b, **k: fn(_v(c, a), _v(c, b), **k)


for _name in ("abs", "neg", "exp", "exp2", "log", "log2", "sqrt", "rsqrt", "reciprocal", "sin",
              "cos", "tanh", "sigmoid", "relu", "erf", "floor", "ceil", "round", "trunc",
              "sign", "isnan", "isinf", "logical_not", "silu", "gelu", "log1p", "expm1"):
    _op(_name)(_method(_name))
_op("sgn")(_method("sign"))


for _name in ("tan", "asin", "acos", "atan", "sinh", "cosh", "asinh", "acosh", "atanh",
              "log10", "erfc", "signbit"):
    _op(_name)(_method(_name))


@_op("frexp.Tensor")
def _frexp(c: Ctx, x: Tensor) -> tuple[Tensor, Tensor]:
    return E.frexp(x)


@_op("round.decimals")
def _round_decimals(c: Ctx, x: Tensor, *, decimals: int = 0) -> Tensor:
    """As PyTorch rounds: x * 10**d rounded, / 10**d (for d < 0: x / 10**-d, * 10**-d)."""
    if decimals >= 0:
        return T.div(T.round(T.mul(x, 10.0 ** decimals)), 10.0 ** decimals)
    return T.mul(T.round(T.div(x, 10.0 ** -decimals)), 10.0 ** -decimals)


@_op("hardtanh")
def _hardtanh(c: Ctx, x: Tensor, min_val: Any = -1.0, max_val: Any = 1.0) -> Tensor:
    return T.clamp(x, min_val, max_val)


@_op("leaky_relu")
def _leaky_relu(c: Ctx, x: Tensor, negative_slope: float = 0.01) -> Tensor:
    return T.where(x > 0, x, x * negative_slope)


@_op("elu")
def _elu(c: Ctx, x: Tensor, alpha: float = 1.0, scale: float = 1.0,
         input_scale: float = 1.0) -> Tensor:
    return T.where(x > 0, x * scale, (x * input_scale).expm1() * (alpha * scale))

for _names, _fn in (
        (("add.Tensor", "add.Scalar"), T.add), (("sub.Tensor", "sub.Scalar"), T.sub),
        (("mul.Tensor", "mul.Scalar"), T.mul),
        (("div.Tensor", "div.Scalar", "div.Tensor_mode", "div.Scalar_mode"), T.div),
        (("pow.Tensor_Scalar", "pow.Tensor_Tensor", "pow.Scalar"), T.pow),
        (("maximum",), T.maximum), (("minimum",), T.minimum),
        (("fmod.Tensor", "fmod.Scalar"), T.fmod),
        (("remainder.Tensor", "remainder.Scalar"), T.remainder),
        (("floor_divide", "floor_divide.Scalar"), T.floor_divide),
        (("eq.Tensor", "eq.Scalar"), T.eq), (("ne.Tensor", "ne.Scalar"), T.ne),
        (("lt.Tensor", "lt.Scalar"), T.lt), (("le.Tensor", "le.Scalar"), T.le),
        (("gt.Tensor", "gt.Scalar"), T.gt), (("ge.Tensor", "ge.Scalar"), T.ge),
        (("logical_and",), T.logical_and), (("logical_or",), T.logical_or),
        (("logical_xor",), T.logical_xor), (("atan2",), E.atan2), (("fmax",), E.fmax),
        (("fmin",), E.fmin), (("copysign.Tensor", "copysign.Scalar"), E.copysign),
        (("hypot",), E.hypot), (("ldexp.Tensor",), E.ldexp), (("gcd",), E.gcd),
        (("lcm",), E.lcm), (("nextafter",), E.nextafter)):
    _op(*_names)(_binary(_fn))


@_op("rsub.Tensor", "rsub.Scalar")
def _rsub(c: Ctx, a: Any, b: Any, alpha: Any = 1) -> Tensor:
    return T.sub(_v(c, b), _v(c, a), alpha)


for _names, _fn in (
        (("bitwise_and.Tensor", "bitwise_and.Scalar"), B.bitwise_and),
        (("bitwise_or.Tensor", "bitwise_or.Scalar"), B.bitwise_or),
        (("bitwise_xor.Tensor", "bitwise_xor.Scalar"), B.bitwise_xor),
        (("bitwise_left_shift.Tensor", "bitwise_left_shift.Tensor_Scalar",
          "__lshift__.Tensor", "__lshift__.Scalar"), B.bitwise_left_shift),
        (("bitwise_right_shift.Tensor", "bitwise_right_shift.Tensor_Scalar",
          "__rshift__.Tensor", "__rshift__.Scalar"), B.bitwise_right_shift)):
    _op(*_names)(_binary(_fn))
_op("bitwise_not")(_method("bitwise_not"))


@_op("where.self")
def _where(c: Ctx, cond: Tensor, a: Tensor, b: Tensor) -> Tensor:
    return T.where(cond, a, b)


@_op("clamp", "clamp.Tensor")
def _clamp(c: Ctx, x: Tensor, min: Any = None, max: Any = None) -> Tensor:
    return x if min is None and max is None else T.clamp(x, _v(c, min), _v(c, max))


@_op("clamp_min", "clamp_min.Tensor")
def _clamp_min(c: Ctx, x: Tensor, v: Any) -> Tensor:
    return T.clamp(x, min=_v(c, v))


@_op("clamp_max", "clamp_max.Tensor")
def _clamp_max(c: Ctx, x: Tensor, v: Any) -> Tensor:
    return T.clamp(x, max=_v(c, v))


@_op("masked_fill.Scalar", "masked_fill.Tensor")
def _masked_fill(c: Ctx, x: Tensor, mask: Tensor, value: Any) -> Tensor:
    return T.masked_fill(x, mask, _v(c, value))


# -- reductions --------------------------------------------------------------------------

@_op("sum.dim_IntList", "sum.default", "mean.dim", "mean.default", "prod.dim_int",
     "prod.default", "any.dim", "any.dims", "any.default", "all.dim", "all.dims",
     "all.default", "amax", "amin", "argmax", "argmin", "cumsum", "logsumexp", "max.default",
     "min.default", "max.dim", "min.dim")
def _reduction(c: Ctx, x: Tensor, *args: Any, **kwargs: Any) -> Any:
    out = getattr(x, c.op)(*args, **kwargs)
    return tuple(out) if c.op in ("max", "min") and args else out


@_op("cummax", "cummin")
def _cum_extreme(c: Ctx, x: Tensor, dim: int) -> tuple[Tensor, Tensor]:
    return getattr(S, c.op)(x, dim)


@_op("cumprod")
def _cumprod(c: Ctx, x: Tensor, dim: int, *, dtype: Any = None) -> Tensor:
    return S.cumprod(x, dim, dtype=None if dtype is None else DTYPES[dtype])


@_op("logcumsumexp")
def _logcumsumexp(c: Ctx, x: Tensor, dim: int) -> Tensor:
    return S.logcumsumexp(x, dim)


@_op("sort", "sort.stable")
def _sort(c: Ctx, x: Tensor, dim: int = -1, descending: bool = False, *,
          stable: bool | None = None) -> tuple[Tensor, Tensor]:
    return O.sort(x, dim, descending)  # always stable


@_op("topk")
def _topk(c: Ctx, x: Tensor, k: int, dim: int = -1, largest: bool = True,
          sorted: bool = True) -> tuple[Tensor, Tensor]:
    return O.topk(x, int(k), dim, largest, sorted)


@_op("kthvalue")
def _kthvalue(c: Ctx, x: Tensor, k: int, dim: int = -1, keepdim: bool = False) -> tuple:
    return O.kthvalue(x, int(k), dim, keepdim)


@_op("median.default", "nanmedian.default")
def _median_all(c: Ctx, x: Tensor) -> Tensor:
    return O.median(x, ignore_nan=c.op == "nanmedian")


@_op("median.dim", "nanmedian.dim")
def _median(c: Ctx, x: Tensor, dim: int = -1, keepdim: bool = False) -> tuple:
    return O.median(x, dim, keepdim, ignore_nan=c.op == "nanmedian")


@_op("mode")
def _mode(c: Ctx, x: Tensor, dim: int = -1, keepdim: bool = False) -> tuple:
    return O.mode(x, dim, keepdim)


@_op("searchsorted.Tensor")
def _searchsorted(c: Ctx, seq: Tensor, values: Tensor, *, out_int32: bool = False,
                  right: bool = False, side: str | None = None,
                  sorter: Tensor | None = None) -> Tensor:
    return O.searchsorted(seq, values, right=right or side == "right", out_int32=out_int32,
                          sorter=sorter)


@_op("bucketize.Tensor", "bucketize.Scalar")
def _bucketize(c: Ctx, values: Any, boundaries: Tensor, *, out_int32: bool = False,
               right: bool = False) -> Tensor:
    if not isinstance(values, Tensor):
        values = I.full(c.g, (), values, boundaries.dtype)
    return O.searchsorted(boundaries, values, right=right, out_int32=out_int32)


@_op("var.correction", "std.correction")
def _var(c: Ctx, x: Tensor, dim: Any = None, *, correction: Any = None,
         keepdim: bool = False) -> Tensor:
    return getattr(x, c.op)(dim, keepdim=keepdim, correction=correction)


@_op("var_mean.correction")
def _var_mean(c: Ctx, x: Tensor, dim: Any = None, *, correction: Any = None,
              keepdim: bool = False) -> tuple[Tensor, Tensor]:
    return x.var(dim, keepdim=keepdim, correction=correction), x.mean(dim, keepdim)


@_op("linalg_vector_norm")
def _vector_norm(c: Ctx, x: Tensor, ord: float = 2, dim: Any = None, keepdim: bool = False, *,
                 dtype: Any = None) -> Tensor:
    return _norm((x if dtype is None else x.to(DTYPES[dtype])).abs(), ord, dim, keepdim)


def _norm(a: Tensor, ord: float, dim: Any, keepdim: bool = False) -> Tensor:
    """The ord-norm of the magnitudes a over dim."""
    if ord in (float("inf"), float("-inf")):
        return (a.amax if ord > 0 else a.amin)(dim or (), keepdim)
    if ord == 0:
        return (a != 0).sum(dim, keepdim).to(a.dtype)
    if ord == 1:
        return a.sum(dim, keepdim)
    if ord == 2:
        return (a * a).sum(dim, keepdim).sqrt()
    return (a ** ord).sum(dim, keepdim) ** (1 / ord)


@_op("dist")
def _dist(c: Ctx, a: Tensor, b: Tensor, p: float = 2) -> Tensor:
    return _norm(T.sub(a, b).abs(), float(p), None)


@_op("_cdist_forward")
def _cdist(c: Ctx, x1: Tensor, x2: Tensor, p: float, compute_mode: Any = None) -> Tensor:
    """Distances between the rows of x1 (..., P, M) and of x2 (..., R, M): (..., P, R)."""
    d = T.sub(x1.unsqueeze(-2), x2.unsqueeze(-3)).abs()
    return _norm(d, float(p), -1)


@_op("_pdist_forward")
def _pdist(c: Ctx, x: Tensor, p: float = 2) -> Tensor:
    """Distances between the rows i < j of x (N, M), in row-major order of (i, j)."""
    n = int(x.view.shape[0])
    rows, cols = np.triu_indices(n, 1)
    if not len(rows):
        return I.full(c.g, (0,), 0.0, x.dtype)
    return _norm(T.sub(x[rows], x[cols]).abs(), float(p), -1)


@_op("addmv")
def _addmv(c: Ctx, bias: Tensor, a: Tensor, v: Tensor, *, beta: Any = 1,
           alpha: Any = 1) -> Tensor:
    return _scaled_sum(bias, beta, a @ v, alpha)


@_op("addbmm")
def _addbmm(c: Ctx, bias: Tensor, a: Tensor, b: Tensor, *, beta: Any = 1,
            alpha: Any = 1) -> Tensor:
    return _scaled_sum(bias, beta, (a @ b).sum(0), alpha)


def _scaled_sum(bias: Tensor, beta: Any, prod: Tensor, alpha: Any) -> Tensor:
    """beta * bias + alpha * prod; a beta of 0 ignores bias (NaN and inf too). Integer
    products take the scalars as integers, as PyTorch does."""
    if not prod.dtype.is_float:
        alpha, beta = int(alpha), int(beta)
    scaled = T.mul(prod, alpha) if alpha != 1 else prod
    if beta == 0:
        return scaled.expand(*T.broadcast_shapes(bias.view.shape, scaled.view.shape))
    return T.add(T.mul(bias, beta) if beta != 1 else bias, scaled)


@_op("_trilinear")
def _trilinear(c: Ctx, i1: Tensor, i2: Tensor, i3: Tensor, expand1: list, expand2: list,
               expand3: list, sumdim: list, unroll_dim: int = 1) -> Tensor:
    """The product of the three inputs, each with new axes at its expand dims, summed over
    sumdim (bilinear's contraction)."""
    ts = []
    for t, ex in ((i1, expand1), (i2, expand2), (i3, expand3)):
        for d in sorted(ex):
            t = t.unsqueeze(d)
        ts.append(t)
    prod = T.mul(T.mul(ts[0], ts[1]), ts[2])
    return prod.sum(list(sumdim)) if sumdim else prod


@_op("_softmax", "_log_softmax")
def _softmax(c: Ctx, x: Tensor, dim: int, half_to_float: bool) -> Tensor:
    return getattr(x, c.op.lstrip("_"))(dim, dtype=f32 if half_to_float else None)


# -- linear algebra and nn ---------------------------------------------------------------

@_op("mm", "bmm")
def _mm(c: Ctx, a: Tensor, b: Tensor) -> Tensor:
    return a @ b


@_op("addmm")
def _addmm(c: Ctx, bias: Tensor, a: Tensor, b: Tensor, *, beta: Any = 1,
           alpha: Any = 1) -> Tensor:
    return _scaled_sum(bias, beta, a @ b, alpha)


@_op("convolution")
def _convolution(c: Ctx, x: Tensor, w: Tensor, b: Tensor | None, stride: list,
                 padding: list, dilation: list, transposed: bool, output_padding: list,
                 groups: int) -> Tensor:
    if x.ndim not in (3, 4, 5):
        raise LumosError(f"{x.ndim - 2}-d convolutions are not translated")
    if transposed:
        return F.conv_transpose(x, w, b, _ints(stride), _ints(padding), _ints(output_padding),
                                int(groups), _ints(dilation), x.ndim - 2)
    conv = {3: F.conv1d, 4: conv2d, 5: F.conv3d}[x.ndim]  # 2-d: lumos.nn's fast formulations
    return conv(x, w, b, _ints(stride), _ints(padding), _ints(dilation), int(groups))


def _ints(xs: Any) -> Any:
    return [int(v) for v in xs] if isinstance(xs, (list, tuple)) else int(xs)


@_op("_native_batch_norm_legit_no_training")
def _batch_norm(c: Ctx, x: Tensor, w: Tensor | None, b: Tensor | None, mean: Tensor,
                var: Tensor, momentum: float, eps: float) -> tuple:
    out = F.batch_norm(x, mean, var, w, b, False, momentum, eps)
    empty = I.full(c.g, (0,), 0.0, x.dtype)  # PyTorch saves no statistics in inference
    return out, empty, empty


@_op("_native_batch_norm_legit.no_stats")
def _instance_stats_norm(c: Ctx, x: Tensor, w: Tensor | None, b: Tensor | None,
                         training: bool, momentum: float, eps: float) -> tuple:
    """Batch norm with the batch's own statistics (instance norm): a group norm with a
    group per channel, over the input read as (1, C, N * rest)."""
    n, ch, *rest = x.view.shape
    y = F.group_norm(x.transpose(0, 1).reshape(1, ch, -1), int(ch), w, b, eps)
    out = y.reshape(ch, n, *rest).transpose(0, 1)
    mean, rstd = _stats(x, [0, *range(2, x.ndim)], eps)
    return out, mean.reshape(-1), rstd.reshape(-1)


@_op("native_group_norm")
def _group_norm(c: Ctx, x: Tensor, w: Tensor | None, b: Tensor | None, n: Any, ch: Any,
                hw: Any, group: int, eps: float) -> tuple:
    out = F.group_norm(x, group, w, b, eps)
    mean, rstd = _stats(x.reshape(x.view.shape[0], group, -1), [2], eps)
    return out, mean.reshape(x.view.shape[0], group), rstd.reshape(x.view.shape[0], group)


def _stats(x: Tensor, axes: list[int], eps: float) -> tuple[Tensor, Tensor]:
    """(mean, 1 / sqrt(biased variance + eps)) over `axes`, kept, in float32 or wider."""
    xf = x.to(f32) if x.dtype.bits < 32 else x
    mean = xf.mean(axes, keepdim=True)
    var = xf.var(axes, keepdim=True, correction=0)
    return mean, T.rsqrt(T.add(var, eps))


@_op("_native_batch_norm_legit_functional")
def _batch_norm_train(c: Ctx, x: Tensor, w: Tensor | None, b: Tensor | None, rmean: Tensor,
                      rvar: Tensor, training: bool, momentum: float, eps: float) -> tuple:
    """Batch norm in training mode: normalized by the batch's statistics, which also move
    the running ones (var unbiased there, as PyTorch keeps it)."""
    if not training:
        out = F.batch_norm(x, rmean, rvar, w, b, False, momentum, eps)
        empty = I.full(c.g, (0,), 0.0, x.dtype)
        return out, empty, empty, rmean, rvar
    axes = [0, *range(2, x.ndim)]
    mean, rstd = _stats(x, axes, eps)
    y = T.mul(T.sub(x.to(mean.dtype), mean), rstd)
    shape = [1, -1] + [1] * (x.ndim - 2)
    if w is not None:
        y = T.mul(y, w.reshape(*shape))
    if b is not None:
        y = T.add(y, b.reshape(*shape))
    count = 1
    for a in axes:
        count *= int(x.view.shape[a])
    m, r = mean.reshape(-1), rstd.reshape(-1)
    var = x.to(mean.dtype).var(axes, correction=1 if count > 1 else 0)
    new_mean = T.add(T.mul(rmean, 1 - momentum), T.mul(m, momentum))
    new_var = T.add(T.mul(rvar, 1 - momentum), T.mul(var, momentum))
    return y.to(x.dtype), m, r, new_mean.to(rmean.dtype), new_var.to(rvar.dtype)


@_op("native_layer_norm")
def _layer_norm(c: Ctx, x: Tensor, shape: list, w: Tensor | None, b: Tensor | None,
                eps: float) -> tuple:
    out = F.layer_norm(x, _ints(shape), w, b, eps)
    mean, rstd = _stats(x, list(range(x.ndim - len(shape), x.ndim)), eps)
    return out, mean, rstd


@_op("max_pool2d_with_indices")
def _max_pool2d(c: Ctx, x: Tensor, kernel: list, stride: list = (), padding: Any = 0,
                dilation: Any = 1, ceil_mode: bool = False) -> tuple:
    args = (_ints(kernel), _ints(stride) if stride else None, _ints(padding), _ints(dilation),
            ceil_mode)
    out = F.max_pool2d(x, *args)  # the formulation lumos' rules know
    return out, P.max_pool(x, 2, *args)[1]


@_op("max_pool3d_with_indices")
def _max_pool3d(c: Ctx, x: Tensor, kernel: list, stride: list = (), padding: Any = 0,
                dilation: Any = 1, ceil_mode: bool = False) -> tuple:
    return P.max_pool(x, 3, _ints(kernel), _ints(stride) if stride else None, _ints(padding),
                      _ints(dilation), ceil_mode)


@_op("avg_pool2d", "avg_pool3d")
def _avg_pool(c: Ctx, x: Tensor, kernel: list, stride: list = (), padding: Any = 0,
              ceil_mode: bool = False, count_include_pad: bool = True,
              divisor_override: int | None = None) -> Tensor:
    args = (_ints(kernel), _ints(stride) if stride else None, _ints(padding), ceil_mode,
            count_include_pad, divisor_override)
    if c.op == "avg_pool2d" and x.dtype.is_float:
        return F.avg_pool2d(x, *args)
    return P.avg_pool(x, 2 if c.op == "avg_pool2d" else 3, *args)


@_op("_adaptive_avg_pool2d")
def _adaptive_avg_pool2d(c: Ctx, x: Tensor, size: list) -> Tensor:
    return F.adaptive_avg_pool2d(x, _ints(size))


@_op("_adaptive_avg_pool3d")
def _adaptive_avg_pool3d(c: Ctx, x: Tensor, size: list) -> Tensor:
    return P.adaptive_avg_pool(x, 3, _ints(size))


@_op("adaptive_max_pool2d", "adaptive_max_pool3d")
def _adaptive_max_pool(c: Ctx, x: Tensor, size: list) -> tuple:
    return P.adaptive_max_pool(x, int(c.op[-2]), _ints(size))


@_op("embedding")
def _embedding(c: Ctx, weight: Tensor, indices: Tensor, *_: Any) -> Tensor:
    return F.embedding(indices, weight)


@_op("_embedding_bag_forward_only", "_embedding_bag")
def _embedding_bag(c: Ctx, weight: Tensor, indices: Tensor, offsets: Tensor,
                   scale_grad_by_freq: bool = False, mode: int = 0, sparse: bool = False,
                   per_sample_weights: Tensor | None = None, include_last_offset: bool = False,
                   padding_idx: int = -1) -> tuple:
    """Bags of weight's rows: bag b holds indices[offsets[b]:offsets[b + 1]] (the last up
    to the end, unless include_last_offset), reduced by sum (0), mean (1) or max (2);
    padding_idx entries are left out, an empty bag is 0."""
    n = int(indices.view.shape[0])
    rows = F.embedding(indices, weight)  # (L, D)
    ends = offsets[1:] if include_last_offset else T.cat([offsets[1:], I.full(
        c.g, (1,), n, offsets.dtype)])
    starts = offsets[:-1] if include_last_offset else offsets
    pos = T.iota(c.g, z(1), (int(starts.view.shape[0]), n), offsets.dtype)
    member = T.logical_and(T.le(starts.unsqueeze(1), pos), T.lt(pos, ends.unsqueeze(1)))
    if padding_idx >= 0:
        member = T.logical_and(member, T.ne(indices, padding_idx).unsqueeze(0))
    if per_sample_weights is not None:
        rows = T.mul(rows, per_sample_weights.unsqueeze(1))
    m3 = member.unsqueeze(2)
    if mode == 2:
        low = T.where(m3, rows.unsqueeze(0), float("-inf")).amax(1)
        out = T.where(member.any(1, keepdim=True), low, 0.0)
    else:
        out = T.where(m3, rows.unsqueeze(0), 0.0).sum(1)
        if mode == 1:
            out = T.div(out, T.maximum(member.sum(1, keepdim=True), 1).to(out.dtype))
    return (out.to(weight.dtype), Unavailable("embedding bag offsets"),
            Unavailable("embedding bag sizes"), Unavailable("embedding bag max indices"))


@_op("segment_reduce")
def _segment_reduce(c: Ctx, data: Tensor, reduce: str, *, lengths: Tensor | None = None,
                    indices: Tensor | None = None, offsets: Tensor | None = None,
                    axis: int = 0, unsafe: bool = False, initial: Any = None) -> Tensor:
    """Segments along axis (1-D lengths or offsets), each reduced from `initial` if given;
    an empty segment is `initial` (else 0 for sums, NaN for means, the identity for
    extrema and products)."""
    if lengths is not None and lengths.ndim == 1:
        ends = lengths.cumsum(0)
        starts = T.sub(ends, lengths)
    elif offsets is not None and offsets.ndim == 1:
        starts, ends = offsets[:-1], offsets[1:]
    else:
        raise LumosError("segment_reduce is translated for 1-d lengths or offsets only")
    a = data._axis(axis)
    n, k = data.view.shape[a], starts.view.shape[0]
    x = data.transpose(a, -1) if a != data.ndim - 1 else data
    pos = T.iota(c.g, z(1), (k, n), starts.dtype)
    member = T.logical_and(T.le(starts.unsqueeze(1), pos), T.lt(pos, ends.unsqueeze(1)))
    xs = x.unsqueeze(-2)  # (..., 1, n) against member (k, n)
    fill = {"sum": 0.0, "mean": 0.0, "prod": 1.0, "max": float("-inf"), "min": float("inf")}
    masked = T.where(member, xs, fill[reduce])
    red = {"sum": masked.sum, "mean": masked.sum, "prod": masked.prod, "max": masked.amax,
           "min": masked.amin}[reduce](-1)
    if initial is not None and reduce != "mean":
        red = {"sum": T.add, "prod": T.mul, "max": T.maximum, "min": T.minimum}[reduce](
            red, initial)
    if reduce == "mean":
        count = member.sum(-1).to(red.dtype)
        red = T.where(T.lt(0, count), T.div(red, count),
                      float("nan") if initial is None else initial)
    out = red.transpose(a, -1) if a != data.ndim - 1 else red
    return out.to(data.dtype)


@_op("tril_indices", "triu_indices")
def _triangle_indices(c: Ctx, row: int, col: int, offset: int = 0, **_: Any) -> Tensor:
    """The (2, N) coordinates of a triangle, in row-major order: a constant."""
    fn = np.tril_indices if c.op == "tril_indices" else np.triu_indices
    arr = np.stack(fn(int(row), int(offset), int(col))).astype(np.int64).reshape(2, -1)
    return I._const_index(c.g, arr, c.dtype)


@_op("_upsample_bilinear2d_aa")
def _upsample_aa(c: Ctx, x: Tensor, size: list, align_corners: bool,
                 scales_h: float | None = None, scales_w: float | None = None) -> Tensor:
    return G.upsample_bilinear_aa(x, _ints(size), align_corners, [scales_h, scales_w])


@_op("grid_sampler_2d", "grid_sampler_3d")
def _grid_sampler(c: Ctx, x: Tensor, grid: Tensor, mode: int, padding: int,
                  align_corners: bool) -> Tensor:
    if mode >= len(G.MODES):
        raise LumosError("grid_sample: bicubic interpolation is not translated")
    return G.grid_sample(x, grid, G.MODES[mode], G.PADDINGS[padding], align_corners)


# -- indexing ----------------------------------------------------------------------------

@_op("index.Tensor")
def _index(c: Ctx, x: Tensor, indices: list) -> Tensor:
    return x[tuple(slice(None) if i is None else i for i in indices)]


@_op("index_put")
def _index_put(c: Ctx, x: Tensor, indices: list, values: Tensor,
               accumulate: bool = False) -> Tensor:
    return x.index_put(indices, values, accumulate)


@_op("index_copy")
def _index_copy(c: Ctx, x: Tensor, dim: int, index: Tensor, source: Tensor) -> Tensor:
    return x.index_put([None] * x._axis(dim) + [index], source)


@_op("index_select")
def _index_select(c: Ctx, x: Tensor, dim: int, index: Tensor) -> Tensor:
    return x.index_select(dim, index)


@_op("gather")
def _gather(c: Ctx, x: Tensor, dim: int, index: Tensor, sparse_grad: bool = False) -> Tensor:
    return x.gather(dim, index)


@_op("scatter.src", "scatter.value")
def _scatter(c: Ctx, x: Tensor, dim: int, index: Tensor, src: Any) -> Tensor:
    return x.scatter(dim, index, _v(c, src))


@_op("scatter_add")
def _scatter_add(c: Ctx, x: Tensor, dim: int, index: Tensor, src: Tensor) -> Tensor:
    return I.scatter_reduce(x, dim, index, src, "sum")


@_op("scatter_reduce.two")
def _scatter_reduce(c: Ctx, x: Tensor, dim: int, index: Tensor, src: Tensor, reduce: str, *,
                    include_self: bool = True) -> Tensor:
    return I.scatter_reduce(x, dim, index, src, reduce, include_self=include_self)


@_op("scatter.reduce", "scatter.value_reduce")
def _scatter_legacy(c: Ctx, x: Tensor, dim: int, index: Tensor, src: Any, *,
                    reduce: str) -> Tensor:
    if not isinstance(src, Tensor):
        src = I.full(c.g, index.view.shape, src, x.dtype)
    return I.scatter_reduce(x, dim, index, src, {"add": "sum", "multiply": "prod"}[reduce])


@_op("index_reduce")
def _index_reduce(c: Ctx, x: Tensor, dim: int, index: Tensor, source: Tensor, reduce: str, *,
                  include_self: bool = True) -> Tensor:
    return I.index_reduce(x, dim, index, source, reduce, include_self=include_self)


@_op("masked_scatter")
def _masked_scatter(c: Ctx, x: Tensor, mask: Tensor, source: Tensor) -> Tensor:
    return I.masked_scatter(x, mask, source)


@_op("put")
def _put(c: Ctx, x: Tensor, index: Tensor, source: Tensor, accumulate: bool = False) -> Tensor:
    flat = x.reshape(-1)
    return flat.index_put([index.reshape(-1)], source.reshape(-1), accumulate) \
        .reshape(*x.view.shape)


@_op("diagonal_scatter")
def _diagonal_scatter(c: Ctx, x: Tensor, src: Tensor, offset: int = 0, dim1: int = 0,
                      dim2: int = 1) -> Tensor:
    """src written on x's diagonal: at the flat positions the diagonal view reads."""
    v = _diagonal_view(View.contiguous(x.view.shape), src.view.shape, offset,
                       x._axis(dim1), x._axis(dim2))
    pos = T.iota(c.g, v.index, src.view.shape, i64)
    return T.node(c.g, "Scatter", [x, pos, src])


@_op("as_strided", "as_strided_copy")
def _as_strided(c: Ctx, x: Tensor, size: list, stride: list,
                storage_offset: Any = None) -> Tensor:
    flat, index = _strided(c, x, size, stride, storage_offset)
    return flat._with_view(flat.view.remap([sym(s) for s in size], {"z0": index}))


@_op("as_strided_scatter")
def _as_strided_scatter(c: Ctx, x: Tensor, src: Tensor, size: list, stride: list,
                        storage_offset: Any = None) -> Tensor:
    flat, index = _strided(c, x, size, stride, storage_offset)
    pos = T.iota(c.g, index, [sym(s) for s in size], i64)
    return T.node(c.g, "Scatter", [flat, pos, src]).reshape(*x.view.shape)


def _strided(c: Ctx, x: Tensor, size: list, stride: list, offset: Any) -> tuple[Tensor, Expr]:
    """x as a flat tensor and the flat position an as_strided view reads at z0, z1, ...
    (x must be a contiguous tensor that starts its storage, as graph values are)."""
    val = c.node.args[0].meta.get("val")
    if not isinstance(val, torch.Tensor) or not val.is_contiguous() or val.storage_offset():
        raise LumosError("as_strided of a view of another tensor's storage")
    index = sym(offset or 0)
    for i, st in enumerate(stride):
        index = index + z(i) * sym(st)
    return x.reshape(-1), index


@_op("unfold")
def _unfold(c: Ctx, x: Tensor, dim: int, size: int, step: int) -> Tensor:
    """Windows of `size` every `step` along dim, as a new last axis: a view."""
    if x.ndim == 0:
        return x.reshape(1)
    d = x._axis(dim)
    shape = list(c.shape)
    m = {f"z{i}": z(i) for i in range(x.ndim)}
    m[f"z{d}"] = z(d) * step + z(x.ndim)
    return x._with_view(x.view.remap(shape, m))


@_op("select.int")
def _select(c: Ctx, x: Tensor, dim: int, index: Any) -> Tensor:
    return x[(slice(None),) * x._axis(dim) + (index,)]


@_op("slice.Tensor")
def _slice(c: Ctx, x: Tensor, dim: int = 0, start: Any = None, end: Any = None,
           step: int = 1) -> Tensor:
    return x[(slice(None),) * x._axis(dim) + (slice(start, _end(end), step),)]


def _end(end: Any) -> Any:
    """PyTorch writes `x[a:]` as an end of 2**63 - 1: to the end, whatever the size."""
    return None if isinstance(end, int) and end >= 2**62 else end


@_op("slice_scatter")
def _slice_scatter(c: Ctx, x: Tensor, src: Tensor, dim: int = 0, start: Any = None,
                   end: Any = None, step: int = 1) -> Tensor:
    """x with src written at x[..., start:end:step, ...]: src spread out by a view whose
    predicate marks the written positions, selected exactly with where."""
    d = x._axis(dim)
    begin, n, step = I._slice(x.view.shape[d], slice(start, _end(end), step), c.g.dims)
    rel = z(d) - begin
    hit = z(d).ge(begin) & rel.lt(n * step) & (rel % step).lt(1)
    spread = src.view.remap(x.view.shape, {f"z{d}": rel // step})
    mask = T.full_like(x, True, bool_)
    return T.where(mask._with_view(_where_valid(mask.view, hit)),
                   src._with_view(_where_valid(spread, hit)), x)


def _where_valid(v: View, pred: Expr) -> View:
    return View(v.shape, v.index, simplify(v.valid & pred, v.bounds()))


@_op("select_scatter")
def _select_scatter(c: Ctx, x: Tensor, src: Tensor, dim: int, index: Any) -> Tensor:
    d = x._axis(dim)
    i = index if not (isinstance(index, int) and index < 0) else x.view.shape[d] + index
    return _slice_scatter(c, x, src.unsqueeze(d), d, i, sym(i) + 1, 1)


@_op("cat")
def _cat(c: Ctx, tensors: list, dim: int = 0) -> Tensor:
    return T.cat(tensors, dim)


@_op("split_with_sizes", "split.Tensor")
def _split(c: Ctx, x: Tensor, sizes: Any, dim: int = 0) -> tuple:
    return tuple(T.split(x, sizes, dim))


@_op("diagonal", "diagonal_copy")
def _diagonal(c: Ctx, x: Tensor, offset: int = 0, dim1: int = 0, dim2: int = 1) -> Tensor:
    return x._with_view(_diagonal_view(x.view, c.shape, offset, x._axis(dim1), x._axis(dim2)))


def _diagonal_view(v: View, shape: Any, offset: int, a: int, b: int) -> View:
    """The diagonal of axes a and b (offset above it if > 0), as the last axis."""
    rest = [i for i in range(v.ndim) if i not in (a, b)]
    m = {f"z{i}": z(j) for j, i in enumerate(rest)}
    m[f"z{a}"], m[f"z{b}"] = z(len(rest)) + max(-offset, 0), z(len(rest)) + max(offset, 0)
    return v.remap(shape, m)


@_op("unbind.int", "unbind_copy.int")
def _unbind(c: Ctx, x: Tensor, dim: int = 0) -> tuple:
    d = x._axis(dim)
    return tuple(x[(slice(None),) * d + (i,)] for i in range(int(x.view.shape[d])))


@_op("narrow_copy")
def _narrow(c: Ctx, x: Tensor, dim: int, start: Any, length: Any) -> Tensor:
    return x.narrow(dim, start, length)


@_op("constant_pad_nd")
def _pad(c: Ctx, x: Tensor, pad: list, value: Any = 0) -> Tensor:
    return x.pad(pad, value)


@_op("tril", "triu")
def _triangle(c: Ctx, x: Tensor, diagonal: Any = 0) -> Tensor:
    return getattr(x, c.op)(diagonal)


# -- layout ------------------------------------------------------------------------------

@_op("view", "_unsafe_view", "view_copy")
def _view(c: Ctx, x: Tensor, size: list) -> Tensor:
    try:
        return x.reshape(*size)
    except ShapeError:
        if all(s.is_num for s in x.view.shape):
            raise
    # equal sizes that lumos cannot prove equal (PyTorch knows more, e.g. that s*t is
    # even): read x at each result element's flat position, as reshape itself does
    shape = [m if isinstance(s, int) and s == -1 else s for s, m in zip(size, c.shape, strict=True)]
    flat = View.contiguous(shape).index
    mapping, stride = {}, sym(1)
    for i in reversed(range(x.ndim)):
        n = x.view.shape[i]
        mapping[f"z{i}"] = (flat // stride) % n if i else flat // stride
        stride = stride * n
    return x._with_view(x.view.remap(shape, mapping))


@_op("expand", "expand_copy")
def _expand(c: Ctx, x: Tensor, size: list, *, implicit: bool = False) -> Tensor:
    return x.expand(*size)


@_op("permute", "permute_copy")
def _permute(c: Ctx, x: Tensor, dims: list) -> Tensor:
    return x.permute(*dims)


@_op("transpose.int")
def _transpose(c: Ctx, x: Tensor, a: int, b: int) -> Tensor:
    return x.transpose(a, b)


@_op("t")
def _t(c: Ctx, x: Tensor) -> Tensor:
    return x.t()


@_op("unsqueeze")
def _unsqueeze(c: Ctx, x: Tensor, dim: int) -> Tensor:
    return x.unsqueeze(dim)


@_op("squeeze", "squeeze.dim", "squeeze.dims")
def _squeeze(c: Ctx, x: Tensor, dim: Any = None) -> Tensor:
    return x.squeeze(dim)


@_op("flip")
def _flip(c: Ctx, x: Tensor, dims: list) -> Tensor:
    return x.flip(*dims)


@_op("roll")
def _roll(c: Ctx, x: Tensor, shifts: list, dims: list = ()) -> Tensor:
    return x.roll(list(shifts), list(dims) or None)


@_op("repeat")
def _repeat(c: Ctx, x: Tensor, repeats: list) -> Tensor:
    return x.repeat(*repeats)


@_op("alias", "detach", "lift_fresh_copy")
def _identity(c: Ctx, x: Tensor, **_: Any) -> Tensor:
    return x


@_op("clone")
def _clone(c: Ctx, x: Tensor, memory_format: Any = None, **_: Any) -> Tensor:
    """A copy asked to be contiguous is one (a kernel the search may still inline into its
    readers): a product reading it then multiplies a plain matrix (attention's heads
    transposed back before the output projection: a BLAS call instead of a loop of dot
    products, 0.7 -> 0.3 ms in the 44M Llama)."""
    return x.contiguous() if memory_format is torch.contiguous_format else x


@_op("_to_copy")
def _to_copy(c: Ctx, x: Tensor, **_: Any) -> Tensor:
    return x.to(c.dtype)


@_op("copy")
def _copy(c: Ctx, dst: Tensor, src: Tensor, non_blocking: bool = False) -> Tensor:
    return src.to(dst.dtype).expand(*dst.view.shape)


# -- construction ------------------------------------------------------------------------

@_op("full", "full_like", "zeros", "ones", "zeros_like", "ones_like", "empty.memory_format",
     "empty_like", "empty_strided", "new_full", "new_zeros", "new_ones", "new_empty",
     "scalar_tensor", "fill.Scalar", "empty_permuted")
def _full(c: Ctx, *args: Any, **_: Any) -> Tensor:
    name = c.op
    at = {"full": 1, "full_like": 1, "new_full": 2, "fill": 1, "scalar_tensor": 0}
    value = args[at[name]] if name in at else 1 if "ones" in name else 0
    if isinstance(value, Expr) and not value.is_num:
        return T.dim_value(c.g, value, c.dtype).expand(*c.shape)
    return I.full(c.g, c.shape, _v(c, value), c.dtype)


@_op("arange", "arange.start", "arange.start_step")
def _arange(c: Ctx, *args: Any, **_: Any) -> Tensor:
    return I.arange(c.g, *args, dtype=c.dtype)


@_op("_assert_tensor_metadata", "_assert_scalar", "_assert_async.msg", "_assert_async",
     "sym_constrain_range_for_size")
def _assert(c: Ctx, *_: Any, **__: Any) -> None:
    return None


# -- the walk ----------------------------------------------------------------------------

def translate(gm: fx.GraphModule, outer: frozenset[str] = frozenset()) -> Translation:
    """Record gm's nodes in a new lumos graph (see the module docstring). `outer`: dims
    that the caller supplies at run time (those of the graph a region belongs to)."""
    g = Graph()
    tr, syms = Translation(g), Symbols(g)
    tr.hints = syms.hints
    env: dict[fx.Node, Any] = {}
    position: dict[fx.Node, int] = {}
    for node in gm.graph.nodes:
        if node.op == "placeholder":
            position[node] = len(position)
            env[node] = _input(tr, syms, node, position[node])
        elif node.op == "get_attr":
            env[node] = _input(tr, syms, node, node.target)
        elif node.op == "call_function":
            try:
                env[node] = _call(tr, syms, node, env, position)
            except Exception as e:  # any reason at all: that node runs in PyTorch
                tr.failures[node] = f"{describe(node)}: {type(e).__name__}: {e}"
                env[node] = _stand_in(g, syms, node)
        elif node.op == "output":
            for n in node.all_input_nodes:
                if isinstance(env[n], Unavailable):
                    tr.failures[n] = f"{describe(n)}: lumos does not compute the {env[n].what}"
            tr.outputs = fx.map_arg(node.args[0], lambda n: _output(n, env, position))
        else:
            tr.failures[node] = f"{describe(node)}: {node.op} nodes are not translated"
            env[node] = _stand_in(g, syms, node)
    _check_dims(tr, outer)
    return tr


def describe(node: fx.Node) -> str:
    """The op and its input shapes and dtypes, e.g. `aten.topk.default(f32[4, 7], 3)`."""
    def show(a: Any) -> str:
        if isinstance(a, fx.Node):
            v = a.meta.get("val")
            if isinstance(v, torch.Tensor):
                return f"{str(v.dtype).removeprefix('torch.')}{list(v.shape)}"
            return str(v) if v is not None else a.name
        if isinstance(a, (list, tuple)):
            return "[" + ", ".join(map(show, a)) + "]"
        return repr(a)

    parts = [show(a) for a in node.args] + [f"{k}={show(v)}" for k, v in node.kwargs.items()]
    return f"{_name(node.target)}({', '.join(parts)})"


def _name(target: Any) -> str:
    return str(target) if isinstance(target, torch._ops.OpOverload) else \
        getattr(target, "__name__", str(target))


def _input(tr: Translation, syms: Symbols, node: fx.Node, source: int | str) -> Any:
    val = node.meta.get("val") if isinstance(source, int) else \
        functools.reduce(getattr, str(source).split("."), node.graph.owning_module)
    if isinstance(val, torch.Tensor):
        _check_tensor(val)
        t = tr.graph.tensor(syms.shape(val), DTYPES[val.dtype], name=f"{node.name}")
        tr.inputs.append((t, source))
        return t
    if isinstance(val, torch.SymInt):
        e = syms.expr(val)
        if e.op == "var" and isinstance(source, int):
            tr.dim_args.append((e.args[0], source))
        return e
    if isinstance(val, (int, float, bool)) or val is None:
        return val
    raise LumosError(f"input {node.name} of type {type(val).__name__} is not translated")


def _check_tensor(v: torch.Tensor) -> None:
    if v.dtype not in DTYPES:
        raise LumosError(f"dtype {v.dtype} is not supported by lumos")
    if v.device.type != "cpu":
        raise LumosError(f"tensors on {v.device} are not supported (CPU only)")


def _call(tr: Translation, syms: Symbols, node: fx.Node, env: dict[fx.Node, Any],
          position: dict[fx.Node, int]) -> Any:
    val = node.meta.get("val")
    if node.target is operator.getitem:
        return env[node.args[0]][node.args[1]]  # if Unavailable, its readers fail
    for n in node.all_input_nodes:
        if isinstance(env[n], Unavailable):
            tr.failures.setdefault(n, f"{describe(n)}: lumos does not compute the {env[n].what}")
            raise LumosError(f"it reads the {env[n].what}, which lumos does not compute")
        if isinstance(n.meta.get("val"), torch.Tensor):
            _check_tensor(n.meta["val"])
    if isinstance(val, torch.Tensor):
        _check_tensor(val)
    if node.target in _SIZES or (isinstance(val, (torch.SymInt, int)) and not isinstance(
            val, bool) and not isinstance(node.target, torch._ops.OpOverload)):
        return syms.expr(val)  # sizes and arithmetic on them: read off the meta
    if node.target is aten.copy_.default:
        dst = node.args[0]
        if dst not in position:
            raise LumosError("copy_ into a value that is not a graph input")
        new = _copy(None, env[dst], env[node.args[1]])  # type: ignore[arg-type]
        tr.mutations.append((position[dst], new.output()))
        return new
    fn = TABLE.get(node.target)
    if fn is None:
        packet = getattr(node.target, "_overloadpacket", None)
        if packet in DATA_DEPENDENT:
            raise LumosError("its output shape depends on the input's values (lumos shapes "
                             "are static)")
        raise LumosError("no translation")
    args = fx.map_arg(node.args, env.__getitem__)
    kwargs = fx.map_arg(node.kwargs, env.__getitem__)
    return _conform(fn(Ctx(tr.graph, node, syms), *args, **kwargs), val, syms)


# ops whose output shape depends on the input's values: they run in PyTorch (in strict
# mode, the error names them); Dynamo breaks the graph at them unless
# torch._dynamo.config.capture_dynamic_output_shape_ops is set
DATA_DEPENDENT = {aten.nonzero, aten.masked_select, aten.unique_consecutive, aten.unique_dim,
                  aten._unique, aten._unique2, aten.bincount, aten.repeat_interleave,
                  aten.histc, aten.histogram, aten.argwhere}

_SIZES = {aten.sym_size.int, aten.sym_numel.default, aten.sym_storage_offset.default}


def _conform(out: Any, val: Any, syms: Symbols) -> Any:
    """The translated value with the dtype PyTorch gives it, its shape checked."""
    if isinstance(out, Tensor) and isinstance(val, torch.Tensor):
        want = syms.shape(val)
        if len(want) != out.ndim or any(a.is_num and b.is_num and a is not b
                                        for a, b in zip(out.view.shape, want, strict=True)):
            raise ShapeError(f"lumos computed shape {out.shape}, PyTorch {tuple(val.shape)}")
        # symbolic sizes in PyTorch's form, simplified under its guards (sizes lumos knows
        # to be a number stay numbers)
        shape = tuple(a if a.is_num else b for a, b in zip(out.view.shape, want, strict=True))
        if shape != out.view.shape:
            out = out._with_view(View(shape, out.view.index, out.view.valid))
        return out.to(DTYPES[val.dtype])
    if isinstance(out, (tuple, list)) and isinstance(val, (tuple, list)):
        return tuple(o if isinstance(o, Unavailable) else _conform(o, v, syms)
                     for o, v in zip(out, val, strict=True))
    return out


def _stand_in(g: Graph, syms: Symbols, node: fx.Node) -> Any:
    """A fresh input in place of a node that did not translate (so its users are still
    tried; such a translation is only used to find what else translates)."""
    def one(v: Any, i: int) -> Any:
        try:
            if isinstance(v, torch.Tensor) and v.dtype in DTYPES:
                return g.tensor(syms.shape(v), DTYPES[v.dtype], name=f"failed_{node.name}_{i}")
            if isinstance(v, torch.SymInt):
                return syms.expr(v)
        except LumosError:
            pass
        return Unavailable(f"result of {node.name}")

    val = node.meta.get("val")
    if isinstance(val, (tuple, list)):
        return tuple(one(v, i) for i, v in enumerate(val))
    return one(val, 0)


def _output(n: fx.Node, env: dict[fx.Node, Any], position: dict[fx.Node, int]) -> Any:
    if n in position:
        return ArgOut(position[n])
    v = env[n]
    if isinstance(v, Tensor):
        return TensorOut(v.output(), n.meta["val"].dtype)
    return v


def known_dims(tr: Translation) -> frozenset[str]:
    """The dims read at run time: sizes of input tensors and SymInt arguments."""
    known = {name for name, _ in tr.dim_args}
    for t, _ in tr.inputs:
        known |= {e.args[0] for e in t.view.shape if e.op == "var"}
    return frozenset(known)


def _check_dims(tr: Translation, outer: frozenset[str]) -> None:
    known = known_dims(tr) | outer
    for name in tr.graph.dims:
        if name not in known:
            raise LumosError(f"dimension {name} cannot be read from the graph's inputs")
