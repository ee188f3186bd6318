"""Hugging Face model folders: config.json, the safetensors weights (one file or shards
listed in model.safetensors.index.json) and tokenizer.json."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import numpy as np

from lumos.dtype import DType
from lumos.io.errors import WeightError
from lumos.io.safetensors import SafeTensors


class HFFolder(Mapping[str, np.ndarray]):
    """The weights of a folder by name (memory-mapped), its `config` and `tokenizer()`."""

    def __init__(self, path: str | os.PathLike) -> None:
        self.path = Path(path)
        cfg = self.path / "config.json"
        if not cfg.is_file():
            raise WeightError(f"{self.path}: not a model folder (no config.json)")
        self.config: dict[str, Any] = json.loads(cfg.read_text())
        index = self.path / "model.safetensors.index.json"
        if index.is_file():
            shards = json.loads(index.read_text())["weight_map"]
            files = {f: SafeTensors(self.path / f) for f in sorted(set(shards.values()))}
            self._where = {name: files[f] for name, f in shards.items()}
        else:
            st = SafeTensors(self.path / "model.safetensors")
            self._where = dict.fromkeys(st, st)

    def dtype(self, name: str) -> DType:
        return self._where[name].dtype(name)

    def __getitem__(self, name: str) -> np.ndarray:
        return self._where[name][name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._where)

    def __len__(self) -> int:
        return len(self._where)

    def tokenizer(self) -> Any:
        """The folder's tokenizer.json as a `tokenizers.Tokenizer`."""
        from tokenizers import Tokenizer

        path = self.path / "tokenizer.json"
        if not path.is_file():
            raise WeightError(f"{self.path}: no tokenizer.json")
        return Tokenizer.from_file(str(path))
