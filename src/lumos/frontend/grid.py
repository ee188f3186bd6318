"""Resampling: grid_sample (torch.nn.functional.grid_sample / aten.grid_sampler_2d and
_3d), the input read at the coordinates a grid gives, bilinear (trilinear) or nearest;
and antialiased bilinear resizing (a product with PyTorch's filter weights per axis).

Grid values in [-1, 1] span the input (corner pixels' centres with align_corners, their
outer edges without); coordinates outside are padded with zeros, clamped to the border,
or reflected (PyTorch's rules, reflect_coordinates). Each output element gathers its
2**d neighbours (one for nearest) from the input, a neighbour outside the input counting
as 0, and weights them by the distances.
"""

from __future__ import annotations

import itertools
import math

from lumos.dtype import f32, i64
from lumos.errors import ShapeError
from lumos.frontend import reduce as R
from lumos.frontend.tensor import (
    Tensor,
    abs,
    add,
    eq,
    floor,
    fmod,
    iota,
    logical_and,
    lt,
    maximum,
    minimum,
    mul,
    node,
    reciprocal,
    round,
    sub,
    where,
)
from lumos.shape import z

MODES = ("bilinear", "nearest")
PADDINGS = ("zeros", "border", "reflection")


def _reflect(x: Tensor, twice_low: int, twice_high: int) -> Tensor:
    if twice_low == twice_high:
        return mul(x, 0.0)
    low, span = twice_low / 2, (twice_high - twice_low) / 2
    a = abs(sub(x, low))
    extra = fmod(a, span)
    flips = floor(mul(a, 1.0 / span))
    even = eq(fmod(flips, 2.0), 0.0)
    return where(even, add(extra, low), add(sub(span, extra), low))


def _source(g: Tensor, size: int, padding: str, align_corners: bool) -> Tensor:
    """Grid values -> input coordinates along one axis of `size` elements."""
    x = mul(add(g, 1.0), (size - 1) / 2) if align_corners else \
        mul(sub(mul(add(g, 1.0), float(size)), 1.0), 0.5)
    if padding == "reflection":
        x = _reflect(x, 0, 2 * (size - 1)) if align_corners else _reflect(x, -1, 2 * size - 1)
    if padding != "zeros":
        x = minimum(maximum(x, 0.0), float(size - 1))
    return x


def grid_sample(input: Tensor, grid: Tensor, mode: str = "bilinear",
                padding_mode: str = "zeros", align_corners: bool = False) -> Tensor:
    """input (N, C, *S) at grid (N, *O, d) (the last axis x, y[, z]: reversed S order)."""
    nd = input.ndim - 2
    if mode not in MODES or padding_mode not in PADDINGS:
        raise ValueError(f"grid_sample: mode {mode!r} or padding {padding_mode!r} is not "
                         f"translated (modes {MODES}, paddings {PADDINGS})")
    if nd not in (2, 3) or grid.ndim != nd + 2 or int(grid.view.shape[-1]) != nd:
        raise ShapeError(f"grid_sample: input {input.shape} and grid {grid.shape} do not fit")
    n, c, *size = (int(s) for s in input.view.shape)
    out = [int(s) for s in grid.view.shape[1:-1]]
    ct = input.dtype
    gf = grid.to(ct)
    # coordinates per spatial axis of the input, shaped (N, 1, *O) to broadcast over C
    coords = [_source(gf[..., nd - 1 - i].unsqueeze(1), size[i], padding_mode, align_corners)
              for i in range(nd)]
    shape = (n, c, *out)
    base = iota(input.graph, (z(0) * c + z(1)) * math.prod(size), shape, i64)  # (n, c) plane
    flat = input.reshape(-1)

    def read(ix: list[Tensor]) -> Tensor:
        """input at integer coordinates ix (float tensors), 0 outside."""
        inside: Tensor | None = None
        pos: Tensor | None = None
        for i, xi in enumerate(ix):
            ok = logical_and(lt(-1.0, xi), lt(xi, float(size[i])))
            inside = ok if inside is None else logical_and(inside, ok)
            k = minimum(maximum(xi, 0.0), float(size[i] - 1)).to(i64)
            pos = k if pos is None else add(mul(pos, size[i]), k)
        assert pos is not None and inside is not None
        p = add(base, pos)
        return where(inside, node(input.graph, "Gather", [p, flat]), 0.0)

    if mode == "nearest":
        return read([round(x) for x in coords]).to(input.dtype)
    lows = [floor(x) for x in coords]
    fracs = [sub(x, lo) for x, lo in zip(coords, lows, strict=True)]
    total: Tensor | None = None
    for corner in itertools.product((0, 1), repeat=nd):
        w: Tensor | None = None
        ix = []
        for i, up in enumerate(corner):
            ix.append(add(lows[i], float(up)))
            wi = fracs[i] if up else sub(1.0, fracs[i])
            w = wi if w is None else mul(w, wi)
        term = mul(read(ix), w)
        total = term if total is None else add(total, term)
    assert total is not None
    return total.to(input.dtype)


def _aa_weights(x: Tensor, n_in: int, n_out: int, scale: float) -> Tensor:
    """PyTorch's antialiased linear weights (n_out, n_in): output i reads the inputs within
    `support` of its centre scale * (i + 0.5), weighted by the triangle filter stretched by
    the downscale factor, normalized to sum to 1."""
    support = scale if scale >= 1.0 else 1.0
    inv = 1.0 / scale if scale >= 1.0 else 1.0
    g, ct = x.graph, x.dtype
    shape = (n_out, n_in)
    i, k = iota(g, z(0), shape, i64).to(ct), iota(g, z(1), shape, i64).to(ct)
    centre = mul(add(i, 0.5), scale)
    lo = maximum(add(sub(centre, support), 0.5).to(i64).to(ct), 0.0)  # C's truncation
    hi = minimum(add(add(centre, support), 0.5).to(i64).to(ct), float(n_in))
    inside = logical_and(lt(sub(lo, 1.0), k), lt(k, hi))
    w = maximum(sub(1.0, abs(mul(add(sub(k, centre), 0.5), inv))), 0.0)
    w = where(inside, w, 0.0)
    return mul(w, reciprocal(R.sum(w, 1, keepdim=True)))


def upsample_bilinear_aa(input: Tensor, size: list[int], align_corners: bool = False,
                         scales: list[float | None] | None = None) -> Tensor:
    """F.interpolate(mode="bilinear", antialias=True): separable, a product with the
    weights along H, then along W."""
    if align_corners:
        raise ValueError("upsample_bilinear2d_aa: align_corners=True is not translated")
    ct = input.dtype if input.dtype.bits >= 32 else f32
    x = input.to(ct)
    for axis, out, sc in zip((2, 3), size, scales or (None, None), strict=True):
        n_in = int(x.view.shape[axis])
        scale = 1.0 / sc if sc else n_in / out
        w = _aa_weights(x, n_in, int(out), scale)  # (out, in)
        moved = x.transpose(axis, -1)
        x = (moved @ w.transpose(0, 1)).transpose(axis, -1)
    return x.to(input.dtype)
