"""Compiling C into a shared library, cached by source hash, and loading it.

`$CC` (default `cc`) with FLAGS, and for source that includes cblas.h, OpenBLAS from the
scipy-openblas32 package (symbols prefixed `scipy_`, found at run time by rpath); the
library and its source are kept under `$LUMOS_CACHE/cpu/` (default `~/.cache/lumos/cpu/`)
as `<hash>.so` / `<hash>.c`, the hash covering the compiler, the flags (the OpenBLAS
version included), this CPU and the source.
"""

from __future__ import annotations

import ctypes
import hashlib
import os
import platform
import shlex
import subprocess
from functools import cache
from pathlib import Path

import scipy_openblas32

from lumos.errors import LumosError

FLAGS = ("-O3", "-march=native", "-fopenmp", "-fPIC", "-shared",
         "-fwrapv",  # integer arithmetic wraps, as in numpy
         "-fno-math-errno",  # sqrt inlines; values are unchanged
         "-ffp-contract=off")  # no FMA contraction: rounding as written


def blas_flags() -> list[str]:
    lib = scipy_openblas32.get_lib_dir()
    return [f"-I{scipy_openblas32.get_include_dir()}", f"-L{lib}", f"-Wl,-rpath,{lib}",
            f"-l{scipy_openblas32.get_library()}"]


class CompileError(LumosError, RuntimeError):
    """The C compiler rejected generated source (the message names the saved source)."""


def cache_dir() -> Path:
    root = os.environ.get("LUMOS_CACHE") or Path.home() / ".cache" / "lumos"
    return Path(root) / "cpu"


@cache
def cpu_id() -> str:
    """This CPU: its architecture, model name and feature flags."""
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return platform.processor()
    lines = [ln for ln in text.splitlines() if ln.startswith(("model name", "flags"))]
    return platform.machine() + "\n" + "\n".join(dict.fromkeys(lines))


def compile_source(source: str) -> Path:
    """The path of the shared library built from C `source` (compiled on a cache miss)."""
    cc = shlex.split(os.environ.get("CC") or "cc")
    blas = "#include <cblas.h>" in source
    flags = [*FLAGS, *(blas_flags() if blas else ())]
    version = scipy_openblas32.__version__ if blas else ""
    key = hashlib.sha256("\0".join([*cc, *flags, version, cpu_id(), source]).encode()
                         ).hexdigest()[:32]
    d = cache_dir()
    lib = d / f"{key}.so"
    if lib.exists():
        return lib
    d.mkdir(parents=True, exist_ok=True)
    src = d / f"{key}.c"
    tmp = d / f"{key}.{os.getpid()}.tmp"
    tmp.write_text(source)
    os.replace(tmp, src)
    proc = subprocess.run([*cc, *flags, "-o", str(tmp), str(src), "-lm"],
                          capture_output=True, text=True)
    if proc.returncode != 0:
        tmp.unlink(missing_ok=True)
        raise CompileError(f"{cc[0]} failed on generated source {src} "
                           f"(exit {proc.returncode}):\n{proc.stderr[-4000:]}")
    os.replace(tmp, lib)
    return lib


@cache
def load(lib: Path) -> ctypes.CDLL:
    """The loaded library (once per process)."""
    return ctypes.CDLL(str(lib))
