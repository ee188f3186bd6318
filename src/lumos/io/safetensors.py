"""safetensors files, memory-mapped: each tensor is a read-only numpy view of the file,
read from disk only when used (binding it copies nothing).

The `safetensors` package validates the file; the tensors are views of one `np.memmap`
at the offsets of the header, so every dtype maps, bf16 included (as its uint16 bit
pattern, lumos' bf16 storage).
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator, Mapping
from pathlib import Path

import numpy as np
from safetensors import SafetensorError, safe_open

from lumos.dtype import DType, as_dtype
from lumos.io.errors import WeightError

DTYPES = {"F32": "f32", "F16": "f16", "BF16": "bf16", "F64": "f64", "I8": "i8", "U8": "u8",
          "I16": "i16", "I32": "i32", "I64": "i64", "BOOL": "bool"}


class SafeTensors(Mapping[str, np.ndarray]):
    """name -> array (a view of the mapped file). `dtype(name)` is the lumos dtype."""

    def __init__(self, path: str | os.PathLike) -> None:
        self.path = Path(path)
        if not self.path.is_file():
            raise WeightError(f"{self.path}: no such weight file")
        try:
            with safe_open(self.path, framework="numpy") as f:  # validates header and size
                self.metadata = f.metadata() or {}
        except (SafetensorError, OSError) as e:
            raise WeightError(f"{self.path}: not a valid safetensors file ({e})") from None
        with open(self.path, "rb") as f:
            n = int.from_bytes(f.read(8), "little")
            header = json.loads(f.read(n))
        header.pop("__metadata__", None)
        self._base = 8 + n
        self._entries = header
        self._map = np.memmap(self.path, np.uint8, mode="r") if header else None
        for name, e in header.items():
            if e["dtype"] not in DTYPES:
                raise WeightError(f"{self.path}: tensor {name} has unsupported dtype "
                                  f"{e['dtype']}")

    def dtype(self, name: str) -> DType:
        return as_dtype(DTYPES[self._entry(name)["dtype"]])

    def shape(self, name: str) -> tuple[int, ...]:
        return tuple(self._entry(name)["shape"])

    def _entry(self, name: str) -> dict:
        if name not in self._entries:
            raise KeyError(f"{self.path}: no tensor named {name!r}")
        return self._entries[name]

    def __getitem__(self, name: str) -> np.ndarray:
        e = self._entry(name)
        start, end = e["data_offsets"]
        assert self._map is not None
        raw = self._map[self._base + start:self._base + end]
        return raw.view(self.dtype(name).np).reshape(e["shape"])

    def __iter__(self) -> Iterator[str]:
        return iter(self._entries)

    def __len__(self) -> int:
        return len(self._entries)
