"""GGUF files: metadata, tensors and the tokenizer.

The header (metadata and tensor table) is read here, the quant types' sizes come from the
`gguf` package. Tensors come back in PyTorch's dim order (GGUF lists dims innermost
first). F32, F16 and BF16 tensors are read-only views of the mapped file (bf16 as its
uint16 bit pattern); quantized tensors stay packed (`lumos.nn.Packed`) and are
dequantized in the graph.
"""

from __future__ import annotations

import os
import struct
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from lumos.dtype import DType, as_dtype
from lumos.io.errors import WeightError
from lumos.nn.quant import FORMATS, Packed

DENSE = {"F32": "f32", "F16": "f16", "BF16": "bf16"}
SUPPORTED = (*DENSE, *FORMATS)

# llama.cpp's pre-tokenizer regexes by `tokenizer.ggml.pre` (applied before byte-level BPE)
_GPT2 = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)"
_LLAMA3 = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+"
           r"[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
_QWEN2 = _LLAMA3.replace(r"\p{N}{1,3}", r"\p{N}")
PRE_TOKENIZERS = {"gpt2": [_GPT2], "default": [_GPT2],
                  "smollm": [r"\p{N}", _GPT2], "starcoder": [r"\p{N}", _GPT2],
                  "refact": [r"\p{N}", _GPT2], "llama-bpe": [_LLAMA3], "qwen2": [_QWEN2]}


# tokenizer.ggml.token_type values (SentencePiece's piece types)
NORMAL, CONTROL, USER_DEFINED = 1, 3, 4


@dataclass
class TensorInfo:
    """A tensor of the file: its name, GGML type, dims (GGUF's order: innermost first),
    absolute byte offset and size, and `data`: a read-only view of its bytes (dense types
    as their numpy dtype in PyTorch's dim order, quantized ones as rows of bytes)."""
    name: str
    tensor_type: Any  # gguf.GGMLQuantizationType
    shape: tuple[int, ...]
    data_offset: int
    n_bytes: int
    data: Any = None


# GGUF metadata value types: scalars by their struct code (little-endian)
_SCALARS = {0: "B", 1: "b", 2: "H", 3: "h", 4: "I", 5: "i", 6: "f", 7: "?", 10: "Q", 11: "q",
            12: "d"}
_STRING, _ARRAY = 8, 9


def _read_header(buf: np.ndarray) -> tuple[dict[str, Any], dict[str, TensorInfo]]:
    """The metadata (GGUF.* fields left out) and tensor table of a little-endian GGUF
    file of version 2 or 3. Read here rather than by gguf.GGUFReader, which makes a numpy
    view per string (10 s for Gemma 3's 262,144 tokens; this takes a fraction of one)."""
    from gguf import GGML_QUANT_SIZES, GGMLQuantizationType

    mem = memoryview(buf)
    at = 4

    def take(code: str) -> Any:
        nonlocal at
        (v,) = struct.unpack_from("<" + code, mem, at)
        at += struct.calcsize(code)
        return v

    def string() -> str:
        nonlocal at
        n = take("Q")
        if at + n > len(mem):
            raise ValueError(f"a string of {n} bytes at byte {at} runs past the end")
        at += n
        return bytes(mem[at - n:at]).decode("utf-8")

    def value(kind: int) -> Any:
        nonlocal at
        if kind in _SCALARS:
            return take(_SCALARS[kind])
        if kind == _STRING:
            return string()
        if kind != _ARRAY:
            raise ValueError(f"unknown metadata value type {kind}")
        item, n = take("I"), take("Q")
        if item in _SCALARS:  # numbers in one read
            code = _SCALARS[item]
            size = struct.calcsize(code) * n
            if at + size > len(mem):
                raise ValueError(f"an array of {n} values at byte {at} runs past the end")
            out = np.frombuffer(mem, f"<{code}", n, at).tolist()
            at += size
            return out
        return [value(item) for _ in range(n)]

    version = take("I")
    if version not in (2, 3):
        raise ValueError(f"GGUF version {version} (supported: 2, 3, little-endian)")
    n_tensors, n_kv = take("Q"), take("Q")
    metadata: dict[str, Any] = {}
    for _ in range(n_kv):
        key = string()
        metadata[key] = value(take("I"))
    infos = []
    for _ in range(n_tensors):
        name = string()
        dims = tuple(take("Q") for _ in range(take("I")))
        infos.append((name, dims, GGMLQuantizationType(take("I")), take("Q")))
    align = int(metadata.get("general.alignment", 32))
    start = -(-at // align) * align
    tensors = {}
    for name, dims, kind, offset in infos:
        if name in tensors:
            raise ValueError(f"tensor {name} twice")
        block, size = GGML_QUANT_SIZES[kind]
        tensors[name] = TensorInfo(name, kind, dims, start + offset,
                                   int(np.prod(dims, dtype=np.int64)) * size // block)
    return metadata, tensors


def _tensor_data(buf: np.ndarray, t: TensorInfo) -> np.ndarray:
    """A tensor's bytes as gguf.GGUFReader shapes them: dense types as arrays in PyTorch's
    dim order, quantized types as rows of bytes."""
    from gguf import GGML_QUANT_SIZES
    from gguf import GGMLQuantizationType as Q

    raw = buf[t.data_offset:t.data_offset + t.n_bytes]
    dims = tuple(reversed(t.shape))
    dense = {Q.F32: np.float32, Q.F16: np.float16, Q.F64: np.float64, Q.I8: np.int8,
             Q.I16: np.int16, Q.I32: np.int32, Q.I64: np.int64}
    if t.tensor_type in dense:
        return raw.view(dense[t.tensor_type]).reshape(dims)
    block, size = GGML_QUANT_SIZES[t.tensor_type]
    return raw.reshape(*dims[:-1], dims[-1] // block * size)


class GGUFFile(Mapping[str, "np.ndarray | Packed"]):
    """name -> tensor (array or Packed); `metadata` holds the key-value fields."""

    def __init__(self, path: str | os.PathLike) -> None:
        self.path = Path(path)
        if not self.path.is_file():
            raise WeightError(f"{self.path}: no such weight file")
        with open(self.path, "rb") as f:
            if f.read(4) != b"GGUF":
                raise WeightError(f"{self.path}: not a GGUF file (bad magic)")
        self._data = np.memmap(self.path, mode="r")
        try:
            self.metadata, self._tensors = _read_header(self._data)
        except (ValueError, IndexError, KeyError, UnicodeDecodeError, struct.error) as e:
            raise WeightError(f"{self.path}: truncated or corrupt GGUF file ({e})") from None
        size = len(self._data)
        for t in self._tensors.values():
            if t.data_offset + t.n_bytes > size:
                raise WeightError(f"{self.path}: truncated: tensor {t.name} ends at byte "
                                  f"{t.data_offset + t.n_bytes} of {size}")
            t.data = _tensor_data(self._data, t)

    @property
    def architecture(self) -> str:
        return str(self.metadata.get("general.architecture", ""))

    def fmt(self, name: str) -> str:
        """The storage format: a dtype name (f32, f16, bf16) or a quantization type."""
        kind = self._tensor(name).tensor_type.name
        if kind not in SUPPORTED:
            raise WeightError(f"{self.path}: tensor {name} has unsupported type {kind} "
                              f"(supported: {', '.join(SUPPORTED)})")
        return DENSE.get(kind, kind)

    def dtype(self, name: str) -> DType | None:
        f = self.fmt(name)
        return None if f in FORMATS else as_dtype(f)

    def shape(self, name: str) -> tuple[int, ...]:
        return tuple(int(s) for s in reversed(self._tensor(name).shape))

    def _tensor(self, name: str) -> Any:
        if name not in self._tensors:
            raise KeyError(f"{self.path}: no tensor named {name!r}")
        return self._tensors[name]

    def __getitem__(self, name: str) -> np.ndarray | Packed:
        t, fmt, shape = self._tensor(name), self.fmt(name), self.shape(name)
        if fmt in FORMATS:
            return Packed.from_blocks(fmt, t.data, shape)
        return np.asarray(t.data).view(as_dtype(fmt).np).reshape(shape)

    def __iter__(self) -> Iterator[str]:
        return iter(self._tensors)

    def __len__(self) -> int:
        return len(self._tensors)

    def nbytes(self) -> int:
        return sum(int(t.n_bytes) for t in self._tensors.values())

    def tokenizer(self) -> Any:
        """The tokenizer of the metadata as a `tokenizers.Tokenizer`: byte-level BPE
        (`tokenizer.ggml.model` gpt2, with its pre-tokenizer) or SentencePiece BPE (llama:
        Llama 2, Mistral, Gemma; merges from the scores when the file has none). Control
        tokens are special, user-defined ones text matched whole; a BOS token is prepended
        where `tokenizer.ggml.add_bos_token` says (default: SentencePiece's yes, gpt2's
        no)."""
        from tokenizers import AddedToken, processors

        md = self.metadata
        kind = md.get("tokenizer.ggml.model")
        if kind == "gpt2":
            tok = self._byte_bpe()
        elif kind == "llama":
            tok = self._sentencepiece()
        else:
            raise WeightError(f"{self.path}: unsupported tokenizer {kind!r} (supported: gpt2, "
                              "llama)")
        tokens = md["tokenizer.ggml.tokens"]
        types = md.get("tokenizer.ggml.token_type", [])
        # control tokens are special (skipped when decoding with skip_special_tokens);
        # user-defined ones (Gemma's newlines and runs of spaces, Qwen's <tool_call>) are
        # text matched whole in the raw text before the model, as llama.cpp matches them
        # (the text between such tokens is tokenized piece by piece, each with the space
        # prefix where the file asks for one)
        tok.add_special_tokens([AddedToken(tokens[i], special=True, normalized=False)
                                for i, k in enumerate(types) if k == CONTROL])
        tok.add_tokens([AddedToken(tokens[i], special=False, normalized=False)
                        for i, k in enumerate(types) if k == USER_DEFINED])
        bos = md.get("tokenizer.ggml.bos_token_id")
        if md.get("tokenizer.ggml.add_bos_token", kind == "llama") and bos is not None:
            name = tokens[bos]
            tok.post_processor = processors.TemplateProcessing(
                single=f"{name}:0 $A:0", pair=f"{name}:0 $A:0 $B:1",
                special_tokens=[(name, int(bos))])
        return tok

    def _byte_bpe(self) -> Any:
        from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers

        md = self.metadata
        pre = md.get("tokenizer.ggml.pre", "default")
        if pre not in PRE_TOKENIZERS:
            raise WeightError(f"{self.path}: unsupported tokenizer 'gpt2' (pre-tokenizer "
                              f"{pre!r}); supported: gpt2 with {sorted(PRE_TOKENIZERS)}")
        tokens = md["tokenizer.ggml.tokens"]
        merges = [tuple(m.split(" ", 1)) for m in md["tokenizer.ggml.merges"]]
        tok = Tokenizer(models.BPE({t: i for i, t in enumerate(tokens)}, merges))
        splits = [pre_tokenizers.Split(Regex(r), "isolated") for r in PRE_TOKENIZERS[pre]]
        tok.pre_tokenizer = pre_tokenizers.Sequence(
            [*splits, pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
        tok.decoder = decoders.ByteLevel()
        return tok

    def _sentencepiece(self) -> Any:
        """SentencePiece's BPE: pieces merge in the order of the merged piece's score,
        spaces are "▁", unknown bytes fall back to <0xNN> tokens."""
        from tokenizers import Tokenizer, decoders, models, normalizers

        md = self.metadata
        tokens = md["tokenizer.ggml.tokens"]
        types = md.get("tokenizer.ggml.token_type") or [NORMAL] * len(tokens)
        vocab = {t: i for i, t in enumerate(tokens)}
        if "tokenizer.ggml.merges" in md:
            merges = [tuple(m.split(" ", 1)) for m in md["tokenizer.ggml.merges"]]
        else:
            scores = md.get("tokenizer.ggml.scores")
            if scores is None:
                raise WeightError(f"{self.path}: a SentencePiece tokenizer without scores "
                                  "or merges")
            # merges make the normal pieces only (SentencePiece's BPE), the best-scored
            # merged piece first, then by the parts' scores
            at = vocab.get
            found = [(-scores[i], i, -scores[a], -scores[b], k)
                     for i, piece in enumerate(tokens) if types[i] == NORMAL
                     for k in range(1, len(piece))
                     if (a := at(piece[:k])) is not None and (b := at(piece[k:])) is not None]
            found.sort()
            merges = [(tokens[i][:k], tokens[i][k:]) for _, i, _, _, k in found]
        unk = md.get("tokenizer.ggml.unknown_token_id")
        tok = Tokenizer(models.BPE(vocab, merges, unk_token=None if unk is None else
                                   tokens[unk], fuse_unk=True, byte_fallback=True))
        prefix = md.get("tokenizer.ggml.add_space_prefix", True)
        tok.normalizer = normalizers.Sequence(
            [*([normalizers.Prepend("▁")] if prefix else []), normalizers.Replace(" ", "▁")])
        tok.decoder = decoders.Sequence(
            [decoders.ByteFallback(), decoders.Fuse(), decoders.Replace("▁", " "),
             *([decoders.Strip(" ", 1, 0)] if prefix else [])])
        return tok
