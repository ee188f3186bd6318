"""Where lumos keeps files: `$LUMOS_CACHE` (default ~/.cache/lumos), holding compiled
kernels (cpu/), artifacts (artifacts/), shipped kernels (shipped/), weight files joined
from chunk packages (weights/) and the verdicts of earlier searches (search.sqlite).
LUMOS_CACHE=off keeps nothing: kernels compile into a directory of the process's own
(its children use the same), removed when the process that made it exits; no artifact
or verdict is read or written."""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile
from pathlib import Path

_OWN = "LUMOS_CACHE_OFF_DIR"  # (LUMOS_CACHE=off: the directory, for child processes)


def cache_off() -> bool:
    return os.environ.get("LUMOS_CACHE", "").strip().lower() == "off"


def cache_root() -> Path:
    if not cache_off():
        return Path(os.environ.get("LUMOS_CACHE") or Path.home() / ".cache" / "lumos")
    own = os.environ.get(_OWN)
    if own is None or not Path(own).is_dir():
        own = tempfile.mkdtemp(prefix="lumos-")
        os.environ[_OWN] = own
        atexit.register(shutil.rmtree, own, True)
    return Path(own)
