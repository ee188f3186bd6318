"""Encoders of llama.cpp's block formats, in numpy, for writing GGUF files (`lumos
quantize`); the runtime only ever dequantizes (`lumos.nn.quant`).

The legacy types (Q8_0, Q4_0, Q4_1, Q5_0, Q5_1) are the `gguf` package's encoders. The
K-quants are ours: each sub-block's scale (and min) from its range, then the super-block's
scales quantized to 6 or 8 bits and the values rounded against the scales as stored. This
is llama.cpp's layout without its iterative scale search (its files are a little more
accurate; any reader, ours included, reads both the same).
"""

from __future__ import annotations

import numpy as np

from lumos.errors import ShapeError
from lumos.nn.quant import FORMATS, Packed


def quantize(qtype: str, a: np.ndarray) -> Packed:
    """`a` (rows..., n) as `qtype` blocks (n a multiple of the block size)."""
    import gguf

    fmt = FORMATS[qtype]
    a = np.asarray(a, np.float32)
    if a.ndim < 1 or a.shape[-1] % fmt.block:
        raise ShapeError(f"{qtype}: the last dim of {a.shape} must be a multiple of "
                         f"{fmt.block}")
    x = a.reshape(-1, fmt.block)
    if qtype in ("Q4_K", "Q5_K"):
        raw = _qk_min(x, 31 if qtype == "Q5_K" else 15)
    elif qtype == "Q6_K":
        raw = _q6_k(x)
    else:
        raw = gguf.quants.quantize(x, gguf.GGMLQuantizationType[qtype])
    return Packed.from_blocks(qtype, raw, a.shape)


def _f16(x: np.ndarray) -> np.ndarray:
    return x.astype(np.float16)


def _divide(x: np.ndarray, d: np.ndarray) -> np.ndarray:
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(d > 0, x / np.where(d > 0, d, 1), 0.0)


def _qk_min(x: np.ndarray, top: int) -> np.ndarray:
    """Q4_K (top 15) and Q5_K (top 31): 8 sub-blocks of 32, x = d*sc*q - dmin*m."""
    nb = x.shape[0]
    sub = x.reshape(nb, 8, 32)
    lo = np.minimum(sub.min(-1), 0.0)
    scale, mins = (sub.max(-1) - lo) / top, -lo  # (nb, 8), both >= 0
    d, dmin = _f16(scale.max(-1) / 63), _f16(mins.max(-1) / 63)
    sc = np.clip(np.rint(_divide(scale, d.astype(np.float32)[:, None])), 0, 63)
    m = np.clip(np.rint(_divide(mins, dmin.astype(np.float32)[:, None])), 0, 63)
    step = d.astype(np.float32)[:, None] * sc
    offset = dmin.astype(np.float32)[:, None] * m
    q = np.clip(np.rint(_divide(sub + offset[..., None], step[..., None])), 0, top) \
        .astype(np.uint8)
    sc, m = sc.astype(np.uint8), m.astype(np.uint8)
    scales = np.concatenate([(sc[:, :4] & 63) | ((sc[:, 4:] >> 4) << 6),
                             (m[:, :4] & 63) | ((m[:, 4:] >> 4) << 6),
                             (sc[:, 4:] & 15) | ((m[:, 4:] & 15) << 4)], -1)
    low = (q & 15).reshape(nb, 4, 2, 32)
    qs = (low[:, :, 0] | (low[:, :, 1] << 4)).reshape(nb, 128)
    parts = [d.view(np.uint8).reshape(nb, 2), dmin.view(np.uint8).reshape(nb, 2), scales]
    if top == 31:  # bit i of qh[j]: the fifth bit of sub-block i's element j
        high = (q >> 4).reshape(nb, 8, 32)
        parts.append(sum(high[:, i] << i for i in range(8)).astype(np.uint8))
    return np.concatenate([*parts, qs], -1)


def _q6_k(x: np.ndarray) -> np.ndarray:
    """Q6_K: 16 sub-blocks of 16, x = d*scale*(q - 32), int8 scales."""
    nb = x.shape[0]
    sub = x.reshape(nb, 16, 16)
    peak = np.take_along_axis(sub, np.abs(sub).argmax(-1)[..., None], -1)[..., 0]
    scale = peak / -32.0  # the largest magnitude lands on -32, the end with room
    top = np.abs(scale).max(-1)
    d = _f16(top / 127)
    sc = np.clip(np.rint(_divide(scale, d.astype(np.float32)[:, None])), -128, 127)
    step = d.astype(np.float32)[:, None] * sc
    with np.errstate(divide="ignore", invalid="ignore"):
        q = np.where(step[..., None] != 0, sub / np.where(step == 0, 1, step)[..., None], 0)
    q = (np.clip(np.rint(q), -32, 31) + 32).astype(np.uint8).reshape(nb, 2, 128)
    low, high = q & 15, q >> 4
    ql = (low[:, :, :64] | (low[:, :, 64:] << 4)).reshape(nb, 128)
    h = high.reshape(nb, 2, 4, 32)
    qh = (h[:, :, 0] | (h[:, :, 1] << 2) | (h[:, :, 2] << 4) | (h[:, :, 3] << 6)) \
        .reshape(nb, 64)
    return np.concatenate([ql, qh, sc.astype(np.int8).view(np.uint8),
                           d.view(np.uint8).reshape(nb, 2)], -1)


# what a file type quantizes its matrices to; "M" mixes give some of them more bits
# (llama.cpp's choice: the output and, in the first and last eighth of the layers and
# every third between, attn_v and ffn_down)
FILE_TYPES = {"Q4_K_M": ("Q4_K", "Q6_K"), "Q5_K_M": ("Q5_K", "Q6_K"), "Q6_K": ("Q6_K", "Q6_K"),
              "Q8_0": ("Q8_0", "Q8_0"), "Q5_1": ("Q5_1", "Q5_1"), "Q5_0": ("Q5_0", "Q5_0"),
              "Q4_1": ("Q4_1", "Q4_1"), "Q4_0": ("Q4_0", "Q4_0")}
# a K-quant on rows that are not whole super-blocks falls back to a 32-value type
FALLBACK = {"Q4_K": "Q5_0", "Q5_K": "Q5_1", "Q6_K": "Q8_0"}


def _more_bits(layer: int, layers: int) -> bool:
    return layer < layers // 8 or layer >= 7 * layers // 8 or (layer - layers // 8) % 3 == 2


def choose(name: str, shape: tuple[int, ...], file_type: str, layers: int) -> str | None:
    """The type a tensor gets in a `file_type` file; None: kept as it is (vectors)."""
    if len(shape) < 2:
        return None
    base, more = FILE_TYPES[file_type]
    parts = name.split(".")
    kind = base
    if parts[0] == "output":
        kind = more
    elif parts[0] == "blk" and parts[2] in ("attn_v", "ffn_down") and \
            _more_bits(int(parts[1]), layers):
        kind = more
    if shape[-1] % FORMATS[kind].block:
        kind = FALLBACK.get(kind, kind)
    return kind if shape[-1] % FORMATS[kind].block == 0 else "F16"


def requantize(src: str, dst: str, file_type: str, progress=None) -> dict[str, int]:
    """Write `src` (a GGUF file) to `dst` with its matrices as `file_type`: metadata copied,
    each tensor dequantized by the `gguf` package and encoded again. Written to a
    temporary file first, so `dst` is whole or untouched. Returns the count per type."""
    import os

    import gguf

    from lumos.io.errors import WeightError
    from lumos.io.gguf import GGUFFile

    if file_type not in FILE_TYPES:
        raise WeightError(f"unknown file type {file_type!r} (known: {', '.join(FILE_TYPES)})")
    f = GGUFFile(src)  # checks the file
    reader = gguf.GGUFReader(src)
    layers = int(f.metadata.get(f"{f.architecture}.block_count", 0))
    tmp = f"{dst}.part"
    w = gguf.GGUFWriter(tmp, f.architecture)
    for key, field in reader.fields.items():
        if key.startswith("GGUF.") or key in ("general.architecture", "general.file_type"):
            continue
        sub = field.types[-1] if field.types[0] == gguf.GGUFValueType.ARRAY else None
        w.add_key_value(key, field.contents(), field.types[0], sub)
    ftype = getattr(gguf.LlamaFileType, f"MOSTLY_{file_type}")
    w.add_file_type(ftype)
    counts: dict[str, int] = {}
    tensors = list(reader.tensors)
    for i, t in enumerate(tensors):
        shape = f.shape(t.name)
        kind = choose(t.name, shape, file_type, layers)
        if kind is None or kind == t.tensor_type.name:
            kind = t.tensor_type.name
            dense = t.tensor_type in (gguf.GGMLQuantizationType.F32,
                                      gguf.GGMLQuantizationType.F16)
            w.add_tensor(t.name, np.asarray(t.data),
                         raw_dtype=None if dense else t.tensor_type)
        else:
            a = gguf.quants.dequantize(t.data, t.tensor_type).reshape(shape)
            if kind == "F16":
                w.add_tensor(t.name, a.astype(np.float16))
            else:
                w.add_tensor(t.name, quantize(kind, a).raw(),
                             raw_dtype=gguf.GGMLQuantizationType[kind])
        counts[kind] = counts.get(kind, 0) + 1
        if progress:
            progress(i + 1, len(tensors), t.name, kind)
    try:
        w.write_header_to_file()
        w.write_kv_data_to_file()
        w.write_tensors_to_file()
        w.close()
        os.replace(tmp, dst)
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)
    return counts
