"""Weight packages for the model tests: their folder, or a skip that says how to install."""

from __future__ import annotations

from pathlib import Path

import pytest

from lumos.io.errors import WeightError
from lumos.models.packages import package_dir


def require(requirement: str) -> Path:
    try:
        return package_dir(requirement)
    except WeightError as e:
        pytest.skip(str(e))
