"""Neural-network ops (torch.nn.functional names): matmul, norms, convolution, pooling,
embedding and attention, all derived from the primitives.

A contraction is one broadcast `Mul` of two views followed by one `SumReduce`
over the contracted axis (the last one): matmul reads `a` as (..., m, 1, k) and
`b` transposed as (..., 1, n, k); a convolution reads the padded input through a
sliding-window view. Half-precision inputs are computed in float32 and rounded
once at the end, as PyTorch does on CPU.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from lumos.dtype import DType, f32, i32, i64
from lumos.errors import DTypeError, ShapeError
from lumos.frontend.tensor import (
    Tensor,
    add,
    broadcast_shapes,
    dim_value,
    div,
    iota,
    lt,
    mul,
    node,
    rsqrt,
    scalar,
    sub,
    tensor_method,
    where,
)
from lumos.shape import Expr, View, emax, emin, simplify, sym, z
from lumos.shape.expr import ONE, ZERO
from lumos.shape.view import numel

Size = int | Sequence[int]


def _compute(dt: DType) -> DType:
    return f32 if dt.is_float and dt.bits < 32 else dt


def _fmt(*ts: Tensor) -> str:
    return " and ".join(str(t.shape) for t in ts)


def _same_dtype(op: str, *ts: Tensor | None, float_only: bool = False) -> DType:
    given = [t for t in ts if t is not None]
    dt = given[0].dtype
    if any(t.dtype is not dt for t in given):
        raise DTypeError(f"{op}: expected one dtype, got {[t.dtype.name for t in given]}")
    if dt.is_bool or (float_only and not dt.is_float):
        raise DTypeError(f"{op}: {dt.name} inputs are not supported")
    return dt


# -- matmul -----------------------------------------------------------------------------

def _matmul(a: Tensor, b: Tensor, op: str = "matmul") -> Tensor:
    """torch.matmul in the compute dtype (float32 for half inputs): a 1-D operand becomes
    a matrix, then a (..., m, k) and b (..., k, n) are read as (..., m, n, k) for one Mul
    and one SumReduce over k."""
    if a.ndim == 0 or b.ndim == 0:
        raise ShapeError(f"{op}: both arguments need at least 1 dim, got shapes {_fmt(a, b)}")
    dt = _compute(_same_dtype(op, a, b))
    a2 = a.unsqueeze(0) if a.ndim == 1 else a
    b2 = b.unsqueeze(-1) if b.ndim == 1 else b
    (m, k), (k2, n) = a2.view.shape[-2:], b2.view.shape[-2:]
    if k is not k2:
        raise ShapeError(f"{op}: shapes {_fmt(a, b)} cannot be multiplied ({k} vs {k2})")
    try:
        batch = broadcast_shapes(a2.view.shape[:-2], b2.view.shape[:-2], op=op)
    except ShapeError:
        raise ShapeError(f"{op}: batch dims of shapes {_fmt(a, b)} do not broadcast") from None
    full = (*batch, m, n, k)
    a2, b2 = a2.to(dt), b2.to(dt)
    x = a2._with_view(a2.view.unsqueeze(a2.ndim - 1).expand(full))
    y = b2._with_view(b2.mT.view.unsqueeze(b2.ndim - 2).expand(full))
    out = node(a.graph, "SumReduce", [node(a.graph, "Mul", [x, y])], axis=len(full) - 1)
    if a.ndim == 1:
        out = out.squeeze(-2)
    if b.ndim == 1:
        out = out.squeeze(-1)
    return out


@tensor_method
def matmul(input: Tensor, other: Tensor) -> Tensor:
    """torch.matmul: dot, matrix-vector, vector-matrix and batched (broadcast) products."""
    return _matmul(input, other).to(input.dtype)


@tensor_method
def mm(input: Tensor, mat2: Tensor) -> Tensor:
    if input.ndim != 2 or mat2.ndim != 2:
        raise ShapeError(f"mm: expects 2-D tensors, got shapes {_fmt(input, mat2)}")
    return _matmul(input, mat2, "mm").to(input.dtype)


@tensor_method
def bmm(input: Tensor, mat2: Tensor) -> Tensor:
    if input.ndim != 3 or mat2.ndim != 3 or input.view.shape[0] is not mat2.view.shape[0]:
        raise ShapeError(f"bmm: expects 3-D tensors with one batch size, "
                         f"got shapes {_fmt(input, mat2)}")
    return _matmul(input, mat2, "bmm").to(input.dtype)


Tensor.__matmul__ = matmul
Tensor.__rmatmul__ = lambda self, other: matmul(other, self)


def linear(input: Tensor, weight: Tensor, bias: Tensor | None = None) -> Tensor:
    """x @ weight.T + bias (weight is (out, in); the transpose is a view)."""
    _same_dtype("linear", input, weight, bias)
    _params("linear", weight.view.shape[:1], bias)
    y = _matmul(input, weight.T, "linear")
    if bias is not None:
        y = add(y, bias.to(y.dtype))
    return y.to(input.dtype)


# -- normalization ----------------------------------------------------------------------

def _params(op: str, shape: Sequence[Expr], *ts: Tensor | None) -> None:
    for t in ts:
        if t is not None and t.view.shape != tuple(shape):
            raise ShapeError(f"{op}: expected a parameter of shape {tuple(shape)}, "
                             f"got {t.shape}")


def _normalize(x: Tensor, eps: float) -> Tensor:
    """(x - mean) / sqrt(var + eps) over the last axis (biased variance)."""
    centered = sub(x, x.mean(-1, keepdim=True))
    var = mul(centered, centered).mean(-1, keepdim=True)
    return mul(centered, rsqrt(add(var, eps)))


def _affine(y: Tensor, weight: Tensor | None, bias: Tensor | None) -> Tensor:
    if weight is not None:
        y = mul(y, weight.to(y.dtype))
    if bias is not None:
        y = add(y, bias.to(y.dtype))
    return y


def _trailing(op: str, x: Tensor, normalized_shape: Size) -> tuple[Expr, ...]:
    ns = (normalized_shape,) if isinstance(normalized_shape, int) else tuple(normalized_shape)
    shp = tuple(sym(s) for s in ns)
    if not ns or len(shp) > x.ndim or x.view.shape[x.ndim - len(shp):] != shp:
        raise ShapeError(f"{op}: normalized_shape {ns} does not match the last dims of "
                         f"input shape {x.shape}")
    return shp


def layer_norm(input: Tensor, normalized_shape: Size, weight: Tensor | None = None,
               bias: Tensor | None = None, eps: float = 1e-5) -> Tensor:
    dt = _same_dtype("layer_norm", input, weight, bias, float_only=True)
    shp = _trailing("layer_norm", input, normalized_shape)
    _params("layer_norm", shp, weight, bias)
    lead = input.view.shape[:input.ndim - len(shp)]
    x = input.to(_compute(dt)).reshape(*lead, numel(shp))
    y = _normalize(x, eps).reshape(*input.view.shape)
    return _affine(y, weight, bias).to(dt)


def rms_norm(input: Tensor, normalized_shape: Size, weight: Tensor | None = None,
             eps: float | None = None) -> Tensor:
    """x / sqrt(mean(x^2) + eps) * weight. eps defaults to the epsilon of the compute
    dtype (float32 for half inputs: what PyTorch does, though its docs name the input's)."""
    dt = _same_dtype("rms_norm", input, weight, float_only=True)
    shp = _trailing("rms_norm", input, normalized_shape)
    _params("rms_norm", shp, weight)
    ct = _compute(dt)
    lead = input.view.shape[:input.ndim - len(shp)]
    x = input.to(ct).reshape(*lead, numel(shp))
    ms = mul(x, x).mean(-1, keepdim=True)
    eps = float(np.finfo(ct.np).eps) if eps is None else eps
    y = mul(x, rsqrt(add(ms, eps))).reshape(*input.view.shape)
    return _affine(y, weight, None).to(dt)


def _channel(t: Tensor | None, ndim: int) -> Tensor | None:
    """A per-channel (C,) vector as (C, 1, ..., 1) against an (N, C, *) input."""
    return None if t is None else t.reshape(t.view.shape[0], *[1] * (ndim - 2))


def group_norm(input: Tensor, num_groups: int, weight: Tensor | None = None,
               bias: Tensor | None = None, eps: float = 1e-5) -> Tensor:
    dt = _same_dtype("group_norm", input, weight, bias, float_only=True)
    if input.ndim < 2:
        raise ShapeError(f"group_norm: expected an (N, C, *) input, got shape {input.shape}")
    n, c = input.view.shape[:2]
    if num_groups < 1 or not c.is_num or c.value % num_groups:
        raise ShapeError(f"group_norm: {c} channels are not divisible into {num_groups} groups")
    _params("group_norm", (c,), weight, bias)
    x = input.to(_compute(dt)).reshape(n, num_groups, -1)
    y = _normalize(x, eps).reshape(*input.view.shape)
    return _affine(y, _channel(weight, input.ndim), _channel(bias, input.ndim)).to(dt)


def batch_norm(input: Tensor, running_mean: Tensor, running_var: Tensor,
               weight: Tensor | None = None, bias: Tensor | None = None,
               training: bool = False, momentum: float = 0.1, eps: float = 1e-5) -> Tensor:
    """Inference batch norm with running statistics (`momentum` only matters in training)."""
    if training:
        raise ValueError("batch_norm: only inference (training=False) is supported")
    dt = _same_dtype("batch_norm", input, weight, bias, float_only=True)
    if input.ndim < 2:
        raise ShapeError(f"batch_norm: expected an (N, C, *) input, got shape {input.shape}")
    _params("batch_norm", input.view.shape[1:2], running_mean, running_var, weight, bias)
    ct = _compute(dt)
    x = input.to(ct)
    mean = _channel(running_mean.to(ct), x.ndim)
    inv = rsqrt(add(_channel(running_var.to(ct), x.ndim), eps))
    y = mul(sub(x, mean), inv)
    return _affine(y, _channel(weight, x.ndim), _channel(bias, x.ndim)).to(dt)


# -- convolution ------------------------------------------------------------------------

def _tuple(v: Size, n: int, what: str, op: str) -> tuple[int, ...]:
    t = (v,) * n if isinstance(v, int) else tuple(v)
    if len(t) == 1:
        t = t * n
    if len(t) != n or any(not isinstance(e, int) for e in t):
        raise ValueError(f"{op}: {what} must be an int or {n} ints, got {v!r}")
    return t


def _batched(x: Tensor, nd: int, op: str) -> Tensor:
    if x.ndim not in (nd + 1, nd + 2):
        raise ShapeError(f"{op}: expected a {nd + 1}-D or {nd + 2}-D input, got shape {x.shape}")
    return x if x.ndim == nd + 2 else x.unsqueeze(0)


def _unbatch(y: Tensor, x: Tensor, nd: int) -> Tensor:
    return y if x.ndim == nd + 2 else y.squeeze(0)


def _conv(input: Tensor, weight: Tensor, bias: Tensor | None, stride: Size,
          padding: Size | str, dilation: Size, groups: int, nd: int) -> Tensor:
    op = f"conv{nd}d"
    dt = _same_dtype(op, input, weight, bias)
    x = _batched(input, nd, op)
    s, d = _tuple(stride, nd, "stride", op), _tuple(dilation, nd, "dilation", op)
    if weight.ndim != nd + 2:
        raise ShapeError(f"{op}: expected a {nd + 2}-D weight, got shape {weight.shape}")
    cout, cig, *ks = weight.view.shape
    n, c, *size = x.view.shape
    if groups < 1 or not cout.is_num or cout.value % groups or cig * groups is not c:
        raise ShapeError(f"{op}: input shape {input.shape}, weight shape {weight.shape} and "
                         f"groups={groups} do not fit")
    _params(op, (cout,), bias)
    if padding == "same":
        if any(v != 1 for v in s):
            raise ValueError(f"{op}: padding='same' is not supported for strided convolutions")
        total = [di * (k.value - 1) for di, k in zip(d, ks, strict=True)]
        pads = [(t // 2, t - t // 2) for t in total]
    elif padding == "valid":
        pads = [(0, 0)] * nd
    elif isinstance(padding, str):
        raise ValueError(f"{op}: padding must be 'same', 'valid', an int or ints, "
                         f"not {padding!r}")
    else:
        pads = [(p, p) for p in _tuple(padding, nd, "padding", op)]
    out = [(h + pb + pe - di * (k - 1) - 1) // si + 1
           for h, (pb, pe), di, k, si in zip(size, pads, d, ks, s, strict=True)]
    if any(o.is_num and o.value < 1 for o in out):
        raise ShapeError(f"{op}: kernel {tuple(ks)} (dilation {d}) does not fit input shape "
                         f"{input.shape} with padding {padding}")
    cog = cout // groups
    ct = _compute(dt)
    x, w = x.to(ct), weight.to(ct)
    # product axes: n, group, c_out in group, *out, c_in in group, *kernel
    full = (n, sym(groups), cog, *out, cig, *ks)
    ci, kz = 3 + nd, 4 + nd
    xv = x.view
    for i, (pb, pe) in enumerate(pads):
        xv = xv.pad(2 + i, pb, pe)
    xm = {"z0": z(0), "z1": z(1) * cig + z(ci)}
    xm |= {f"z{2 + i}": z(3 + i) * s[i] + z(kz + i) * d[i] for i in range(nd)}
    wm = {"z0": z(1), "z1": z(2), "z2": z(ci)} | {f"z{3 + i}": z(kz + i) for i in range(nd)}
    wv = w.view.reshape((groups, cog, cig, *ks))
    prod = node(x.graph, "Mul", [x._with_view(xv.remap(full, xm)),
                                 w._with_view(wv.remap(full, wm))])
    flat = prod.reshape(n, cout, *out, numel((cig, *ks)))
    y = node(x.graph, "SumReduce", [flat], axis=nd + 2)
    if bias is not None:
        y = add(y, bias.to(ct).reshape(cout, *[1] * nd))
    return _unbatch(y.to(dt), input, nd)


def conv1d(input: Tensor, weight: Tensor, bias: Tensor | None = None, stride: Size = 1,
           padding: Size | str = 0, dilation: Size = 1, groups: int = 1) -> Tensor:
    return _conv(input, weight, bias, stride, padding, dilation, groups, 1)


def conv2d(input: Tensor, weight: Tensor, bias: Tensor | None = None, stride: Size = 1,
           padding: Size | str = 0, dilation: Size = 1, groups: int = 1) -> Tensor:
    return _conv(input, weight, bias, stride, padding, dilation, groups, 2)


def conv3d(input: Tensor, weight: Tensor, bias: Tensor | None = None, stride: Size = 1,
           padding: Size | str = 0, dilation: Size = 1, groups: int = 1) -> Tensor:
    return _conv(input, weight, bias, stride, padding, dilation, groups, 3)


def conv_transpose(input: Tensor, weight: Tensor, bias: Tensor | None, stride: Size,
                   padding: Size, output_padding: Size, groups: int, dilation: Size,
                   nd: int) -> Tensor:
    """The transposed convolution (the gradient of a convolution by its input): a
    convolution with stride 1 over the input spread out by the stride (zeros between its
    elements, a view), padded by dilation * (k - 1) - padding on each side (plus
    output_padding after; a negative pad crops), with the kernel flipped and its in and out
    channels swapped within each group. Weight: (C_in, C_out / groups, *k)."""
    op = f"conv_transpose{nd}d"
    x = _batched(input, nd, op)
    s, d = _tuple(stride, nd, "stride", op), _tuple(dilation, nd, "dilation", op)
    p, op_ = _tuple(padding, nd, "padding", op), _tuple(output_padding, nd, "output_padding", op)
    cin, cog, *ks = weight.view.shape
    if weight.ndim != nd + 2 or not cin.is_num or cin.value % groups:
        raise ShapeError(f"{op}: weight shape {weight.shape} does not fit groups={groups}")
    v = x.view
    for i in range(nd):
        a, n = 2 + i, v.shape[2 + i]
        spread = (n - 1) * s[i] + 1
        za = z(a)
        m = {f"z{a}": za // s[i]}
        v = v._new(v.shape[:a] + (spread,) + v.shape[a + 1:], v.index.subs(m),
                   v.valid.subs(m) & (za % s[i]).lt(1))
    xs = x._with_view(v)
    pads: list = []
    for i in reversed(range(nd)):
        edge = d[i] * (ks[i].value - 1) - p[i]
        pads += [edge, edge + op_[i]]
    xs = xs.pad(pads)
    cig = cin // groups
    w = weight.reshape(groups, cig, cog, *ks).transpose(1, 2)
    for i in range(nd):
        w = w.flip(3 + i)
    w = w.reshape(groups * cog, cig, *ks)
    y = _conv(xs, w, bias, 1, 0, d, groups, nd)
    return _unbatch(y, input, nd)


# -- pooling ----------------------------------------------------------------------------

def _pool_geometry(op: str, x: Tensor, kernel_size: Size, stride: Size | None, padding: Size,
                   dilation: Size, ceil_mode: bool, nd: int = 2) -> tuple:
    """Kernel, stride, padding, dilation, output sizes and extra right padding (ceil mode)
    of an nd pool over x (N, C, ...)."""
    k = _tuple(kernel_size, nd, "kernel_size", op)
    s = k if stride is None or stride == [] else _tuple(stride, nd, "stride", op)
    p, d = _tuple(padding, nd, "padding", op), _tuple(dilation, nd, "dilation", op)
    if any(pi > (di * (ki - 1) + 1) // 2 for pi, di, ki in zip(p, d, k, strict=True)):
        raise ValueError(f"{op}: padding {p} must be at most half the effective kernel {k}")
    outs, extra = [], []
    for h, ki, si, pi, di in zip(x.view.shape[2:], k, s, p, d, strict=True):
        span = h + 2 * pi - di * (ki - 1) - 1
        o = (span + (si - 1 if ceil_mode else 0)) // si + 1
        if ceil_mode:  # the last window must start inside the input or the left padding
            o = o - ((o - 1) * si).ge(h + pi)
        if o.is_num and o.value < 1:
            raise ShapeError(f"{op}: kernel {k} does not fit input shape {x.shape} "
                             f"(padding {p}, dilation {d})")
        outs.append(o)
        extra.append(emax(0, (o - 1) * si - span) if ceil_mode else ZERO)
    return k, s, p, d, outs, extra


def _windows(v: View, k: Sequence[int], s: Sequence[int], d: Sequence[int],
             out: Sequence[Expr]) -> View:
    """(N, C, H, W) -> (N, C, OH, OW, KH*KW): the pooling windows as one axis, a view."""
    j = z(4)
    return v.remap((*v.shape[:2], *out, k[0] * k[1]),
                   {"z2": z(2) * s[0] + (j // k[1]) * d[0], "z3": z(3) * s[1] + (j % k[1]) * d[1]})


def max_pool2d(input: Tensor, kernel_size: Size, stride: Size | None = None,
               padding: Size = 0, dilation: Size = 1, ceil_mode: bool = False) -> Tensor:
    """Max over windows; padding reads as -inf (the lowest value for integers)."""
    dt = _same_dtype("max_pool2d", input)
    x = _batched(input, 2, "max_pool2d")
    k, s, p, d, out, extra = _pool_geometry("max_pool2d", x, kernel_size, stride, padding,
                                            dilation, ceil_mode)
    low = float("-inf") if dt.is_float else -(2 ** (dt.bits - 1)) if dt.signed else 0
    xp = x.pad([p[1], p[1] + extra[1], p[0], p[0] + extra[0]], value=low)
    y = node(x.graph, "MaxReduce", [xp._with_view(_windows(xp.view, k, s, d, out))], axis=4)
    return _unbatch(y, input, 2)


def avg_pool2d(input: Tensor, kernel_size: Size, stride: Size | None = None,
               padding: Size = 0, ceil_mode: bool = False, count_include_pad: bool = True,
               divisor_override: int | None = None) -> Tensor:
    dt = _same_dtype("avg_pool2d", input, float_only=True)
    x = _batched(input, 2, "avg_pool2d")
    k, s, p, _, out, extra = _pool_geometry("avg_pool2d", x, kernel_size, stride, padding, 1,
                                            ceil_mode)
    x = x.to(_compute(dt))
    v = x.view.pad(2, p[0], p[0] + extra[0]).pad(3, p[1], p[1] + extra[1])
    total = node(x.graph, "SumReduce", [x._with_view(_windows(v, k, s, (1, 1), out))], axis=4)
    if divisor_override is not None:
        count: Expr = sym(divisor_override)
    else:  # PyTorch's per-window divisor: the window clipped to the padded (or real) input
        count = ONE
        for i, (h, ki, si, pi) in enumerate(zip(x.view.shape[2:], k, s, p, strict=True)):
            start = z(i) * si - pi
            end = emin(start + ki, h + pi)
            count = count * (end - start if count_include_pad
                             else emin(end, h) - emax(start, 0))
    return _unbatch(div(total, _count(x, count, out)).to(dt), input, 2)


def _count(x: Tensor, count: Expr, out: Sequence[Expr]) -> Tensor:
    """A divisor given as an expression of the output position (z0, z1): a scalar if it is
    constant, else an Iota over (OH, OW)."""
    count = simplify(count, {"z0": (0, out[0] - 1), "z1": (0, out[1] - 1)})
    if count.is_num:
        return scalar(x.graph, count.value, x.dtype)
    return iota(x.graph, count, out, i32).to(x.dtype)


def adaptive_avg_pool2d(input: Tensor, output_size: int | Sequence[int | None]) -> Tensor:
    """Bin i of n inputs into o outputs spans [floor(i*n/o), ceil((i+1)*n/o)): windows of
    the largest bin size, masked by a view predicate to each bin's own size."""
    dt = _same_dtype("adaptive_avg_pool2d", input, float_only=True)
    x = _batched(input, 2, "adaptive_avg_pool2d")
    sizes = (output_size, output_size) if isinstance(output_size, int) else tuple(output_size)
    if len(sizes) != 2 or any(o is not None and o < 1 for o in sizes):
        raise ShapeError(f"adaptive_avg_pool2d: bad output_size {output_size!r}")
    x = x.to(_compute(dt))
    ins = x.view.shape[2:]
    out = [n if o is None else sym(o) for n, o in zip(ins, sizes, strict=True)]

    def bin_(i: int, at: Expr) -> tuple[Expr, Expr]:  # (start, size) of the bin at `at`
        n, o = ins[i], out[i]
        start = (at * n) // o
        return start, ((at + 1) * n + o - 1) // o - start

    k = [sym(max(bin_(i, sym(j))[1].value for j in range(out[i].value)))
         if ins[i].is_num and out[i].is_num else (ins[i] + out[i] - 1) // out[i] + 1
         for i in range(2)]
    (sh, lh), (sw, lw) = bin_(0, z(2)), bin_(1, z(3))
    row, col = z(4) // k[1], z(4) % k[1]
    v = x.view.remap((*x.view.shape[:2], *out, k[0] * k[1]), {"z2": sh + row, "z3": sw + col})
    v = View(v.shape, v.index, simplify(v.valid & row.lt(lh) & col.lt(lw), v.bounds()))
    total = node(x.graph, "SumReduce", [x._with_view(v)], axis=4)
    count = bin_(0, z(0))[1] * bin_(1, z(1))[1]
    return _unbatch(div(total, _count(x, count, out)).to(dt), input, 2)


# -- embedding and attention ------------------------------------------------------------

def embedding(input: Tensor, weight: Tensor) -> Tensor:
    """Rows of weight (V, D) at integer indices: a Gather at idx * D + column."""
    if not input.dtype.is_int:
        raise DTypeError(f"embedding: indices must be integers, got {input.dtype.name}")
    if weight.ndim != 2:
        raise ShapeError(f"embedding: weight must be 2-D, got shape {weight.shape}")
    vocab, dim = weight.view.shape
    total = vocab * dim
    it = i32 if total.is_num and total.value < 2**31 and input.dtype.bits <= 32 else i64
    shape = (*input.view.shape, dim)
    rows = input.to(it).unsqueeze(-1).expand(*shape)
    col = iota(input.graph, z(len(shape) - 1), shape, it)
    return node(input.graph, "Gather", [add(mul(rows, dim_value(input.graph, dim, it)), col),
                                        weight])


def scaled_dot_product_attention(query: Tensor, key: Tensor, value: Tensor,
                                 attn_mask: Tensor | None = None, dropout_p: float = 0.0,
                                 is_causal: bool = False, scale: float | None = None,
                                 enable_gqa: bool = False) -> Tensor:
    """softmax(q @ k^T * scale + mask) @ v. A bool mask is True where attention is
    allowed; the causal mask (top-left aligned, as in PyTorch) is a view predicate on
    one -inf constant. Rows with nothing to attend to give 0, as in PyTorch."""
    op = "scaled_dot_product_attention"
    dt = _same_dtype(op, query, key, value, float_only=True)
    if dropout_p:
        raise ValueError(f"{op}: dropout is not supported (inference only)")
    if is_causal and attn_mask is not None:
        raise ValueError(f"{op}: attn_mask must not be given with is_causal=True")
    if attn_mask is not None and not (attn_mask.dtype.is_bool or attn_mask.dtype is dt):
        raise DTypeError(f"{op}: attn_mask must be bool or {dt.name}, got "
                         f"{attn_mask.dtype.name}")
    if min(query.ndim, key.ndim, value.ndim) < 2:
        raise ShapeError(f"{op}: q, k, v need at least 2 dims, got shapes "
                         f"{_fmt(query, key, value)}")
    hq, hk = (query.view.shape[-3] if query.ndim > 2 else ONE,
              key.view.shape[-3] if key.ndim > 2 else ONE)
    if enable_gqa and hq is not hk:
        if key.ndim < 3 or value.ndim < 3 or value.view.shape[-3] is not hk \
                or not (hq.is_num and hk.is_num) or hq.value % hk.value:
            raise ShapeError(f"{op}: {hq} query heads cannot be grouped over the key/value "
                             f"heads of shapes {_fmt(key, value)}")
        key, value = _repeat_heads(key, hq.value // hk.value), \
            _repeat_heads(value, hq.value // hk.value)
    _attention_shapes(query, key, value, attn_mask, op)
    ct = _compute(dt)
    q, k, v = query.to(ct), key.to(ct), value.to(ct)
    e = q.view.shape[-1]
    factor = scale if scale is not None else (
        1 / math.sqrt(e.value) if e.is_num else rsqrt(dim_value(q.graph, e, ct)))
    scores = _matmul(mul(q, factor), k.mT, op)
    if is_causal:
        neg = scalar(q.graph, float("-inf"), ct)
        nv = neg.view.expand(scores.view.shape[-2:])
        scores = add(scores, neg._with_view(View(nv.shape, nv.index, z(0).lt(z(1)))))
    if attn_mask is not None:
        bias = where(attn_mask, 0.0, float("-inf")).to(ct) if attn_mask.dtype.is_bool \
            else attn_mask.to(ct)
        scores = add(scores, bias)
    p = scores.softmax(-1)
    if attn_mask is not None:  # a fully masked row (max = -inf) attends to nothing
        lowest = -float(np.finfo(ct.np).max)
        p = where(lt(scores.amax(-1, keepdim=True), lowest), 0.0, p)
    return _matmul(p, v, op).to(dt)


def _attention_shapes(q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None, op: str) -> None:
    (qs, ks, vs) = (q.view.shape, k.view.shape, v.view.shape)
    try:
        if qs[-1] is not ks[-1] or ks[-2] is not vs[-2]:
            raise ShapeError(op)
        scores = (*broadcast_shapes(qs[:-2], ks[:-2], vs[:-2]), qs[-2], ks[-2])
        if mask is not None and broadcast_shapes(mask.view.shape, scores) != scores:
            raise ShapeError(op)
    except ShapeError:
        m = "" if mask is None else f", mask {mask.shape}"
        raise ShapeError(f"{op}: shapes q {q.shape}, k {k.shape}, v {v.shape}{m} "
                         f"do not fit") from None


def _repeat_heads(t: Tensor, rep: int) -> Tensor:
    """(..., H, S, E) -> (..., H*rep, S, E), each head repeated `rep` times: a view."""
    *lead, h, s, e = t.view.shape
    return t.unsqueeze(-3).expand(*lead, h, rep, s, e).reshape(*lead, h * rep, s, e)
