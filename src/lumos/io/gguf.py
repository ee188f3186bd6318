"""GGUF files through the `gguf` package: metadata, tensors and the BPE tokenizer.

Tensors come back in PyTorch's dim order (GGUF lists dims innermost first). F32, F16 and
BF16 tensors are read-only views of the mapped file (bf16 as its uint16 bit pattern);
Q8_0, Q4_0 and Q4_1 tensors stay packed (`lumos.nn.Packed`) and are dequantized in the
graph.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping
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


class GGUFFile(Mapping[str, "np.ndarray | Packed"]):
    """name -> tensor (array or Packed); `metadata` holds the key-value fields."""

    def __init__(self, path: str | os.PathLike) -> None:
        import gguf

        self.path = Path(path)
        if not self.path.is_file():
            raise WeightError(f"{self.path}: no such weight file")
        with open(self.path, "rb") as f:
            if f.read(4) != b"GGUF":
                raise WeightError(f"{self.path}: not a GGUF file (bad magic)")
        try:
            reader = gguf.GGUFReader(self.path)
        except Exception as e:  # the reader fails in numpy on a short file
            raise WeightError(f"{self.path}: truncated or corrupt GGUF file ({e})") from None
        self.metadata: dict[str, Any] = {}
        for key, field in reader.fields.items():
            if not key.startswith("GGUF."):
                self.metadata[key] = field.contents()
        self._tensors = {t.name: t for t in reader.tensors}
        size = self.path.stat().st_size
        for t in reader.tensors:
            if t.data_offset + t.n_bytes > size:
                raise WeightError(f"{self.path}: truncated: tensor {t.name} ends at byte "
                                  f"{t.data_offset + t.n_bytes} of {size}")

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
            score = lambda t: scores[vocab[t]]  # noqa: E731
            # merges make the normal pieces only (SentencePiece's BPE)
            found = [(-score(piece), i, -score(piece[:k]), -score(piece[k:]), piece[:k],
                      piece[k:]) for i, piece in enumerate(tokens) if types[i] == NORMAL
                     for k in range(1, len(piece)) if piece[:k] in vocab and piece[k:] in vocab]
            merges = [(left, right) for *_, left, right in sorted(found)]
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
