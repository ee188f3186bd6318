"""Where lumos keeps files: `$LUMOS_CACHE` (default ~/.cache/lumos), holding compiled
kernels (cpu/), artifacts (artifacts/), shipped kernels (shipped/), weight files joined
from chunk packages (weights/) and the verdicts of earlier searches (search.sqlite)."""

from __future__ import annotations

import os
from pathlib import Path


def cache_root() -> Path:
    return Path(os.environ.get("LUMOS_CACHE") or Path.home() / ".cache" / "lumos")
