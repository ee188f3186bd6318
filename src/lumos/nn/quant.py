"""Block-quantized weights (llama.cpp's Q8_0, Q4_0, Q4_1): the packed data as bound, and
its dequantization as graph ops, so a kernel can read the packed bytes directly.

A row of `n` values is `n / 32` blocks. Each block stores f16 scales and 32 quants:
Q8_0 `d, qs[32]` (int8, x = d*q); Q4_0 `d, qs[16]` (x = d*(nibble - 8)); Q4_1 `d, m,
qs[16]` (x = d*nibble + m). Byte j of a 4-bit block holds element j in its low nibble
and element j + 16 in its high nibble. Packed tensors bind as separate inputs: the quants
`qs` (..., blocks, bytes) and the scales `d` (and mins `m`) (..., blocks).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from lumos.dtype import DType, f16, f32, i8, u8
from lumos.errors import ShapeError
from lumos.frontend.tensor import Tensor, stack

BLOCK = 32


@dataclass(frozen=True)
class QFormat:
    name: str
    quant: DType        # dtype of the `qs` part
    quant_bytes: int    # bytes of quants per block
    parts: tuple[str, ...]  # in block order: "d", ("m",) then "qs"

    @property
    def block_bytes(self) -> int:
        return 2 * (len(self.parts) - 1) + self.quant_bytes

    def numpy_block(self) -> np.dtype:
        fields = [(p, "<f2") for p in self.parts[:-1]]
        return np.dtype(fields + [("qs", self.quant.np, (self.quant_bytes,))])


FORMATS = {f.name: f for f in (QFormat("Q8_0", i8, 32, ("d", "qs")),
                                QFormat("Q4_0", u8, 16, ("d", "qs")),
                                QFormat("Q4_1", u8, 16, ("d", "m", "qs")))}


@dataclass
class Packed:
    """A quantized tensor of logical `shape` (rows..., n): its parts as numpy arrays,
    `qs` (rows..., n/32, bytes) and `d`, `m` (rows..., n/32)."""

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
        if n % BLOCK or raw.size != int(np.prod(lead, dtype=np.int64)) * (n // BLOCK) * \
                fmt.block_bytes:
            raise ShapeError(f"{qtype}: {raw.size} bytes do not hold a tensor of shape {shape}")
        blocks = np.ascontiguousarray(raw).reshape(-1).view(fmt.numpy_block())
        blocks = blocks.reshape(*lead, n // BLOCK)
        return Packed(qtype, tuple(shape), {p: blocks[p] for p in fmt.parts})

    def rows(self, index: np.ndarray) -> Packed:
        """The rows (first axis) at `index`, in that order."""
        return Packed(self.qtype, self.shape, {k: v[index] for k, v in self.parts.items()})


def part_shapes(qtype: str, shape: tuple) -> dict[str, tuple]:
    """The shape of each part of a packed tensor of logical `shape` (entries may be Exprs)."""
    fmt = FORMATS[qtype]
    *lead, n = shape
    if not isinstance(n, int) or n % BLOCK:
        raise ShapeError(f"{qtype}: the last dim ({n}) must be a multiple of {BLOCK}")
    nb = n // BLOCK
    return {p: (*lead, nb, fmt.quant_bytes) if p == "qs" else (*lead, nb) for p in fmt.parts}


def part_dtypes(qtype: str) -> dict[str, DType]:
    fmt = FORMATS[qtype]
    return {p: fmt.quant if p == "qs" else f16 for p in fmt.parts}


def dequantize(qtype: str, parts: Mapping[str, Tensor]) -> Tensor:
    """The f32 values (..., blocks * 32) of packed parts, as graph ops on the parts:
    exactly gguf's numpy dequantization (f32 products, then the min added)."""
    qs, d = parts["qs"], parts["d"].to(f32)
    *lead, nb, _ = qs.shape
    if qtype == "Q8_0":
        return (d.unsqueeze(-1) * qs.to(f32)).reshape(*lead, nb * BLOCK)
    low = qs.fmod(16)  # the low nibble: an integer remainder of the byte
    # the high one times 16: the byte less its low nibble, in bytes (exact: no borrow);
    # its 1/16 goes on the scale, so the GEMV's inner loop converts and scales once per
    # half. Exact: d/16 and 16*nibble are d and the nibble scaled by powers of two.
    high = (qs - low).to(f32)
    if qtype == "Q4_0":
        nib = stack([low.to(f32) - 8.0, high - 128.0], -2)  # (..., blocks, 2, 16)
    else:
        nib = stack([low.to(f32), high], -2)  # low nibbles first
    w = stack([d, d * (1 / 16)], -1).reshape(*lead, nb, 2, 1) * nib
    if qtype == "Q4_1":
        w = w + parts["m"].to(f32).reshape(*lead, nb, 1, 1)
    return w.reshape(*lead, nb * BLOCK)
