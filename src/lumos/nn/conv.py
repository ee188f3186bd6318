"""2-D convolution in the graph formulations the CPU runtime compiles well, in either
layout: NCHW (PyTorch's) or channels-last NHWC.

The functional `lumos.frontend.nn.conv2d` reads a padded sliding-window view and sums
over one flattened (in-channel x kernel) axis: correct for every convolution, but its
reduction over 9 or 27 taps runs as a short scalar loop per output, and a 1x1
convolution's windows are no matrix that BLAS accepts. Here:

- a 1x1 convolution (groups 1, no padding) is a matrix product over the channels:
  one GEMM over all pixels (NHWC), or one per image (NCHW);
- a grouped convolution with few taps per output (in-channels per group x kernel, at
  most `TAPS_MAX`: depthwise 3x3 or 7x7) is a sum of that many shifted products,
  one elementwise Map over the output whose innermost loop vectorizes (NHWC: along the
  channels, the weights made contiguous (ci, kh, kw, co) once per run; NCHW: along the
  image rows, read from a zero-padded copy of the input, so no row has guarded edges);
- any other convolution of one group is a matrix product over its unrolled windows
  (im2col): the windows copied once into rows of (in-channel x kernel) values, one GEMM
  (NHWC) or one per image (NCHW) with the weights (a 3-channel stem too: as shifted
  products in NCHW its guarded loads along the rows did not vectorize, 27.6 -> 6.6 ms);
- grouped convolutions with many taps are the functional one (NHWC through a permuted view).
"""

from __future__ import annotations

from collections.abc import Sequence
from itertools import product

from lumos.dtype import f32
from lumos.errors import ShapeError
from lumos.frontend import nn as F
from lumos.frontend.tensor import Tensor
from lumos.shape import Expr, sym, z

TAPS_MAX = 64  # products per output up to which a grouped convolution is a sum of products
# (7x7 depthwise: 49; the graph grows by two nodes per product)

Size = int | Sequence[int]
Geometry = tuple[tuple[int, int], tuple[tuple[int, int], ...], tuple[int, int], tuple[Expr, Expr]]


def _pair(v: Size | str) -> tuple[int, int] | None:
    t = (v, v) if isinstance(v, int) else tuple(v) if not isinstance(v, str) else ()
    if len(t) == 1:
        t = t * 2
    ok = len(t) == 2 and all(isinstance(e, int) and not isinstance(e, bool) for e in t)
    return t if ok else None  # type: ignore[return-value]


def _geometry(x: Tensor, weight: Tensor, bias: Tensor | None, stride: Size,
              padding: Size | str, dilation: Size, groups: int) -> Geometry | None:
    """(stride, (before, after) pads, dilation, output size) of a well-formed 2-D
    convolution of x (N, C, H, W); None for anything else (the functional reports it)."""
    s, d = _pair(stride), _pair(dilation)
    if x.ndim != 4 or weight.ndim != 4 or s is None or d is None or x.dtype.is_bool or \
            weight.dtype is not x.dtype or (bias is not None and bias.dtype is not x.dtype):
        return None
    cout, cig, kh, kw = weight.view.shape
    c = x.view.shape[1]
    if not all(e.is_num for e in (cout, cig, kh, kw)) or groups < 1 or \
            cout.value % groups or cig * groups is not c or min(*s, *d) < 1 or \
            (bias is not None and bias.view.shape != (cout,)):
        return None
    ks = (kh.value, kw.value)
    if padding == "same":
        if s != (1, 1):
            return None
        total = [di * (k - 1) for di, k in zip(d, ks, strict=True)]
        pads = tuple((t // 2, t - t // 2) for t in total)
    elif padding == "valid":
        pads = ((0, 0), (0, 0))
    else:
        p = _pair(padding)
        if p is None or min(p) < 0:
            return None
        pads = tuple((e, e) for e in p)
    out = tuple((h + pb + pe - di * (k - 1) - 1) // si + 1
                for h, (pb, pe), di, k, si in zip(x.view.shape[2:], pads, d, ks, s, strict=True))
    if any(o.is_num and o.value < 1 for o in out):
        return None
    return s, pads, d, out  # type: ignore[return-value]


def conv2d(x: Tensor, weight: Tensor, bias: Tensor | None = None, stride: Size = 1,
           padding: Size | str = 0, dilation: Size = 1, groups: int = 1,
           channels_last: bool = False) -> Tensor:
    """torch.nn.functional.conv2d, weight (C_out, C_in/groups, kH, kW); with
    `channels_last`, x is (N, H, W, C_in) and the result (N, H_out, W_out, C_out) (bad
    arguments are then reported with the shapes in NCHW order)."""
    if channels_last and x.ndim != 4:
        raise ShapeError(f"conv2d: a channels-last input must be 4-D (N, H, W, C), "
                         f"got shape {x.shape}")
    nchw = x.permute(0, 3, 1, 2) if channels_last else x
    geo = _geometry(nchw, weight, bias, stride, padding, dilation, groups)
    cout, cig, kh, kw = (e.value for e in weight.view.shape) if geo else (0, 0, 0, 0)
    pointwise = kh == kw == 1 and groups == 1 and geo is not None and \
        geo[1] == ((0, 0), (0, 0))
    taps = cig * kh * kw <= TAPS_MAX and groups > 1
    if geo is None or not (pointwise or taps or groups == 1):
        y = F.conv2d(nchw, weight, bias, stride, padding, dilation, groups)
        return y.permute(0, 2, 3, 1) if channels_last else y
    dt = x.dtype
    ct = f32 if dt.is_float and dt.bits < 32 else dt  # halves: computed in f32, as torch
    xc, w = x.to(ct), weight.to(ct)
    y = _matmul(xc, w, geo, channels_last) if pointwise else \
        _taps(xc, w, geo, groups, channels_last) if taps else \
        _im2col(xc, w, geo, channels_last)
    if bias is not None:
        b = bias.to(ct)
        y = y + (b if channels_last else b.reshape(cout, 1, 1))
    return y.to(dt)


def _matmul(x: Tensor, w: Tensor, geo: Geometry, channels_last: bool) -> Tensor:
    """A 1x1 convolution as a matrix product over the channels (strides: a view)."""
    (sh, sw), _, _, (oh, ow) = geo
    cout, cin = w.view.shape[:2]
    w2 = w.reshape(cout, cin)
    ha, wa = (1, 2) if channels_last else (2, 3)
    v = x.view
    if sh > 1:
        v = v.slice(ha, 0, oh, sh)
    if sw > 1:
        v = v.slice(wa, 0, ow, sw)
    xs = x._with_view(v)
    n = v.shape[0]
    if channels_last:  # (pixels, C_in) @ (C_in, C_out): one GEMM when the pixels merge
        return (xs.reshape(n * oh * ow, cin) @ w2.T).reshape(n, oh, ow, cout)
    return (w2 @ xs.reshape(n, cin, oh * ow)).reshape(n, cout, oh, ow)


def _im2col(x: Tensor, w: Tensor, geo: Geometry, channels_last: bool) -> Tensor:
    """A convolution of one group as a matrix product: each output pixel's window
    (in-channel, kernel row, kernel column; padding reads 0) copied into a row of a
    contiguous matrix, times the weights as a (C_in kH kW, C_out) matrix."""
    (sh, sw), pads, (dh, dw), (oh, ow) = geo
    cout, cin, kh, kw = (e.value for e in w.view.shape)
    n = x.view.shape[0]
    ca, ha, wa = (3, 1, 2) if channels_last else (1, 2, 3)
    xv = x.view.pad(ha, *pads[0]).pad(wa, *pads[1])
    # axes of the windows: NHWC (n, oh, ow, i, j, c); NCHW (n, c, i, j, oh, ow)
    o, k = (1, 3) if channels_last else (4, 1)
    c, i, j = (z(k + 2), z(k), z(k + 1)) if channels_last else (z(k), z(k + 1), z(k + 2))
    shape = [n, sym(oh), sym(ow), sym(kh), sym(kw), sym(cin)] if channels_last else \
        [n, sym(cin), sym(kh), sym(kw), sym(oh), sym(ow)]
    cols = x._with_view(xv.remap(shape, {"z0": z(0), f"z{ca}": c,
                                         f"z{ha}": z(o) * sh + i * dh,
                                         f"z{wa}": z(o + 1) * sw + j * dw})).contiguous()
    taps = cin * kh * kw
    if channels_last:  # (pixels, kH kW C_in) @ (kH kW C_in, C_out): one GEMM
        w2 = w.permute(2, 3, 1, 0).contiguous().reshape(taps, cout)  # rows as the windows'
        return (cols.reshape(n * oh * ow, taps) @ w2).reshape(n, oh, ow, cout)
    return (w.reshape(cout, taps) @ cols.reshape(n, taps, oh * ow)).reshape(n, cout, oh, ow)


def _taps(x: Tensor, w: Tensor, geo: Geometry, groups: int, channels_last: bool) -> Tensor:
    """The sum over (ci, i, j) of the input shifted by tap (i, j), read at channel
    ci of each output channel's group, times weight[:, ci, i, j] (padding reads 0)."""
    (sh, sw), pads, (dh, dw), (oh, ow) = geo
    cout, cig, kh, kw = (e.value for e in w.view.shape)
    cog = cout // groups
    ca, ha, wa = (3, 1, 2) if channels_last else (1, 2, 3)
    if channels_last and cout > 1:  # contiguous along the output channels (the inner loop)
        w = w.permute(1, 2, 3, 0).contiguous().permute(3, 0, 1, 2)
    xv = x.view.pad(ha, *pads[0]).pad(wa, *pads[1])
    if not channels_last and any(p for pp in pads for p in pp):
        # NCHW: the vector loop runs along the image rows, where a padded view's guards
        # leave each row's edges scalar; read a zero-padded copy instead (a node the
        # e-graph may still fuse back into the taps: then the guarded reads return)
        x = x._with_view(xv).contiguous()
        xv = x.view
    shape: list[Expr] = [x.view.shape[0], sym(oh), sym(ow)]
    shape.insert(ca, sym(cout))
    co = z(ca)
    terms = []
    for ci, i, j in product(range(cig), range(kh), range(kw)):
        ch = co if cig == cog == 1 else (co // cog) * cig + ci
        xt = x._with_view(xv.remap(shape, {"z0": z(0), f"z{ca}": ch, f"z{ha}": z(ha) * sh + i * dh,
                                           f"z{wa}": z(wa) * sw + j * dw}))
        wt = w._with_view(w.view.remap(shape, {"z0": co, "z1": ci, "z2": i, "z3": j}))
        terms.append(xt * wt)
    # summed pairwise: a tree of depth log2(taps), so that fusing the sum and what reads
    # it into one kernel stays within the fusion depth (kernels.FUSE_ROUNDS)
    while len(terms) > 1:
        terms = [a + b for a, b in zip(terms[::2], terms[1::2], strict=False)] + \
            terms[len(terms) - len(terms) % 2:]
    return terms[0]
