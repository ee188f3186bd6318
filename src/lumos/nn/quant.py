"""Block-quantized weights (llama.cpp's formats): the packed data as bound, and its
dequantization as graph ops, so a kernel can read the packed bytes directly.

A row of `n` values is `n / block` blocks; each block's fields bind as separate inputs
(parts), `(..., blocks)` for a scalar field and `(..., blocks, count)` for an array. The
layouts (the `gguf` package's dequantizers are the reference, `tests/io/test_gguf.py`):

- 32-value blocks. Q8_0 `d, qs[32]` (int8, x = d*q). Q4_0 `d, qs[16]` (x = d*(q - 8)),
  Q4_1 `d, m, qs[16]` (x = d*q + m): byte j holds element j in its low nibble and j + 16
  in its high one. Q5_0 `d, qh[4], qs[16]` (x = d*(q - 16)), Q5_1 `d, m, qh[4], qs[16]`
  (x = d*q + m): the nibbles as Q4's, and bit j of qh (little-endian) is element j's
  fifth bit.
- 256-value super-blocks of 8 or 16 sub-blocks. Q4_K `d, dmin, scales[12], qs[128]`:
  sub-block i has a 6-bit scale and min (packed in `scales`), x = d*sc_i*q - dmin*m_i;
  32-byte run c of qs holds sub-block 2c in its low nibbles and 2c + 1 in its high ones.
  Q5_K adds `qh[32]` before qs: bit i of qh[j] is the fifth bit of sub-block i's element
  j. Q6_K `ql[128], qh[64], scales[16], d` (int8 scales, 16 sub-blocks of 16): x =
  d*scale*(q - 32), q the 4 bits of ql and 2 bits of qh.

The scales are f16; every step is exact in f32 (bit fields by powers of two and
truncation), in the reference's order of rounding, so the result is bit-exact. The
formats other than Q8_0/Q4_0/Q4_1 take their integer quants through int8 (`_int8`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from lumos.dtype import DType, f16, f32, i8, i32, u8
from lumos.errors import ShapeError
from lumos.frontend.tensor import Tensor, iota, stack
from lumos.shape import z


@dataclass(frozen=True)
class QFormat:
    name: str
    block: int  # values per block
    fields: tuple[tuple[str, DType, int], ...]  # in block order: name, dtype, count (0: scalar)

    @property
    def parts(self) -> tuple[str, ...]:
        return tuple(f[0] for f in self.fields)

    @property
    def block_bytes(self) -> int:
        return sum(dt.itemsize * max(n, 1) for _, dt, n in self.fields)

    def numpy_block(self) -> np.dtype:
        return np.dtype([(p, "<f2" if dt is f16 else dt.np, (n,) if n else ())
                         for p, dt, n in self.fields])


FORMATS = {f.name: f for f in (
    QFormat("Q8_0", 32, (("d", f16, 0), ("qs", i8, 32))),
    QFormat("Q4_0", 32, (("d", f16, 0), ("qs", u8, 16))),
    QFormat("Q4_1", 32, (("d", f16, 0), ("m", f16, 0), ("qs", u8, 16))),
    QFormat("Q5_0", 32, (("d", f16, 0), ("qh", u8, 4), ("qs", u8, 16))),
    QFormat("Q5_1", 32, (("d", f16, 0), ("m", f16, 0), ("qh", u8, 4), ("qs", u8, 16))),
    QFormat("Q4_K", 256, (("d", f16, 0), ("dmin", f16, 0), ("scales", u8, 12),
                          ("qs", u8, 128))),
    QFormat("Q5_K", 256, (("d", f16, 0), ("dmin", f16, 0), ("scales", u8, 12),
                          ("qh", u8, 32), ("qs", u8, 128))),
    QFormat("Q6_K", 256, (("ql", u8, 128), ("qh", u8, 64), ("scales", i8, 16),
                          ("d", f16, 0))),
)}


@dataclass
class Packed:
    """A quantized tensor of logical `shape` (rows..., n): its parts as numpy arrays,
    (rows..., n/block) or (rows..., n/block, count)."""

    qtype: str
    shape: tuple[int, ...]
    parts: dict[str, np.ndarray]

    @property
    def nbytes(self) -> int:
        return sum(a.nbytes for a in self.parts.values())

    @staticmethod
    def from_blocks(qtype: str, raw: np.ndarray, shape: tuple[int, ...]) -> Packed:
        """Split raw block bytes (rows..., blocks * block_bytes) into parts (views)."""
        fmt = FORMATS[qtype]
        *lead, n = shape
        if n % fmt.block or raw.size != int(np.prod(lead, dtype=np.int64)) * \
                (n // fmt.block) * fmt.block_bytes:
            raise ShapeError(f"{qtype}: {raw.size} bytes do not hold a tensor of shape {shape}")
        blocks = np.ascontiguousarray(raw).reshape(-1).view(fmt.numpy_block())
        blocks = blocks.reshape(*lead, n // fmt.block)
        return Packed(qtype, tuple(shape), {p: blocks[p] for p in fmt.parts})

    def raw(self) -> np.ndarray:
        """The block bytes (rows..., blocks * block_bytes), as a GGUF file stores them."""
        fmt = FORMATS[self.qtype]
        *lead, n = self.shape
        blocks = np.empty((*lead, n // fmt.block), fmt.numpy_block())
        for p in fmt.parts:
            blocks[p] = self.parts[p]
        return blocks.view(np.uint8).reshape(*lead, -1)

    def rows(self, index: np.ndarray) -> Packed:
        """The rows (first axis) at `index`, in that order."""
        index = np.asarray(index)
        return Packed(self.qtype, (len(index), *self.shape[1:]),
                      {k: v[index] for k, v in self.parts.items()})


def part_shapes(qtype: str, shape: tuple) -> dict[str, tuple]:
    """The shape of each part of a packed tensor of logical `shape` (entries may be Exprs)."""
    fmt = FORMATS[qtype]
    *lead, n = shape
    if not isinstance(n, int) or n % fmt.block:
        raise ShapeError(f"{qtype}: the last dim ({n}) must be a multiple of {fmt.block}")
    nb = n // fmt.block
    return {p: (*lead, nb, count) if count else (*lead, nb) for p, _, count in fmt.fields}


def part_dtypes(qtype: str) -> dict[str, DType]:
    return {p: dt for p, dt, _ in FORMATS[qtype].fields}


def bits(x: Tensor, shifts: Sequence[int], width: int) -> Tensor:
    """Bits shift..shift+width of each byte of x (..., n), for each of `shifts` (evenly
    spaced): (..., shifts, n) f32. Two fields are stacked; more are one loop over the
    rows, each shifted by its own power of two: floor(x * 2^-shift) (exact), its low
    `width` bits (stacked, each row would be a guarded term of every element)."""
    shifts = list(shifts)
    if len(shifts) <= 2:  # a pair of remainders each: cheaper than the per-row shift
        return stack([_field(x, s, width) for s in shifts], -2)
    step = shifts[1] - shifts[0]
    if shifts != [shifts[0] + step * k for k in range(len(shifts))]:
        raise ValueError(f"bits: shifts {shifts} are not evenly spaced")
    scale = iota(x.graph, -step * z(0) - shifts[0], (len(shifts), 1), i32).to(f32).exp2()
    field = (x.unsqueeze(-2).to(f32) * scale).to(i32)
    if shifts != [8 - width]:  # (the top field of a byte needs no remainder)
        field = field.fmod(1 << width)
    return field.to(f32)


def _field(x: Tensor, s: int, width: int) -> Tensor:
    """Bits s..s+width of x as f32: the difference of two remainders, times 2^-s."""
    top = x.fmod(2 ** (s + width)) if s + width < 8 else x
    return (top - x.fmod(2 ** s)).to(f32) * 2.0 ** -s if s else top.to(f32)


def dequantize(qtype: str, parts: Mapping[str, Tensor]) -> Tensor:
    """The f32 values (..., blocks * block) of packed parts, as graph ops on the parts:
    exactly gguf's numpy dequantization."""
    if qtype in ("Q8_0", "Q4_0", "Q4_1"):
        return _legacy(qtype, parts)
    *lead, nb = parts["d"].shape
    d = parts["d"].to(f32)
    if qtype in ("Q5_0", "Q5_1"):
        q = bits(parts["qs"], (0, 4), 4).reshape(*lead, nb, 32)
        hi = bits(parts["qh"].unsqueeze(-1), range(8), 1).reshape(*lead, nb, 32)  # byte, bit
        q = q + hi * 16.0
        if qtype == "Q5_0":
            return (d.unsqueeze(-1) * _int8(q - 16.0)).reshape(*lead, nb * 32)
        return (d.unsqueeze(-1) * _int8(q) + parts["m"].to(f32).unsqueeze(-1)).reshape(
            *lead, nb * 32)
    if qtype == "Q6_K":
        ql = bits(parts["ql"].reshape(*lead, nb, 2, 64), (0, 4), 4)  # (.., 2, 2, 64)
        qh = bits(parts["qh"].reshape(*lead, nb, 2, 32), (0, 2, 4, 6), 2)  # (.., 2, 4, 32)
        q = _int8(ql.reshape(*lead, nb, 8, 32) + qh.reshape(*lead, nb, 8, 32) * 16.0 - 32.0)
        scale = d.unsqueeze(-1) * parts["scales"].to(f32)  # (.., 16)
        return (scale.unsqueeze(-1) * q.reshape(*lead, nb, 16, 16)).reshape(*lead, nb * 256)
    # Q4_K, Q5_K: the 6-bit scales and mins of the 8 sub-blocks (bytes 0-3 scales 0-3, 4-7
    # mins 0-3, 8-11 the low 4 bits of scales and mins 4-7; the top 2 bits of 0-7 their rest)
    sb = parts["scales"].reshape(*lead, nb, 3, 4)
    lo6, top2 = _field(sb, 0, 6), _field(sb, 6, 2)  # (.., 3, 4): bytes 0-3, 4-7, 8-11
    nib = bits(sb.narrow(-2, 2, 1).squeeze(-2), (0, 4), 4)  # bytes 8-11: (.., 2, 4)

    def row(t: Tensor, r: int) -> Tensor:
        return t.narrow(-2, r, 1).squeeze(-2)

    sc, mn = (stack([row(lo6, r), row(nib, r) + row(top2, r) * 16.0], -2)
              .reshape(*lead, nb, 8) for r in (0, 1))  # row 0: scales, row 1: mins
    scale = (d.unsqueeze(-1) * sc).unsqueeze(-1)
    minus = (parts["dmin"].to(f32).unsqueeze(-1) * mn).unsqueeze(-1)
    q = bits(parts["qs"].reshape(*lead, nb, 4, 32), (0, 4), 4).reshape(*lead, nb, 8, 32)
    if qtype == "Q5_K":
        q = q + bits(parts["qh"], range(8), 1) * 16.0  # (.., 8, 32): bit i, sub-block i
    return (scale * _int8(q) - minus).reshape(*lead, nb * 256)


def _int8(q: Tensor) -> Tensor:
    """`q` (f32 integers in [-128, 127]) through int8 and back: the same values, with an
    int8 tensor in between that a program may compute once per binding of the weights
    and read where it would unpack bits, at a quarter of the f32's bytes."""
    return q.to(i8).to(f32)


def _legacy(qtype: str, parts: Mapping[str, Tensor]) -> Tensor:
    """Q8_0, Q4_0, Q4_1: the high nibble times 16 is the byte less its low nibble (exact:
    no borrow); its 1/16 goes on the scale, so a GEMV's inner loop converts and scales
    once per half. Exact: d/16 and 16*nibble are d and the nibble scaled by powers of two."""
    qs, d = parts["qs"], parts["d"].to(f32)
    *lead, nb, _ = qs.shape
    if qtype == "Q8_0":
        return (d.unsqueeze(-1) * qs.to(f32)).reshape(*lead, nb * 32)
    low = qs.fmod(16)  # the low nibble: an integer remainder of the byte
    high = (qs - low).to(f32)
    if qtype == "Q4_0":
        nib = stack([low.to(f32) - 8.0, high - 128.0], -2)  # (..., blocks, 2, 16)
    else:
        nib = stack([low.to(f32), high], -2)  # low nibbles first
    w = stack([d, d * (1 / 16)], -1).reshape(*lead, nb, 2, 1) * nib
    if qtype == "Q4_1":
        w = w + parts["m"].to(f32).reshape(*lead, nb, 1, 1)
    return w.reshape(*lead, nb * 32)
