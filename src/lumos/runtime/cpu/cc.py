"""Compiling C into a shared library, cached, and loading it.

`$CC` (default `cc`) with FLAGS, and for source that includes cblas.h, OpenBLAS from the
scipy-openblas32 package (symbols prefixed `scipy_`, found at run time by rpath). Under
`$LUMOS_CACHE/cpu/` (default `~/.cache/lumos/cpu/`): one object per translation unit
(`<hash>.o`, from `<hash>.unit.c`) and per program the library `<hash>.so` with all its
source in `<hash>.c`; the hashes cover the compiler, the flags (the OpenBLAS version
included), this CPU and the source. Within `time_limit(seconds)` the compilers still
running at the deadline are killed and `CompileTimeout` is raised.
"""

from __future__ import annotations

import ctypes
import hashlib
import os
import platform
import shlex
import signal
import subprocess
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager, suppress
from contextvars import ContextVar
from functools import cache
from multiprocessing.connection import wait as wait_any
from pathlib import Path

import scipy_openblas32

from lumos.errors import LumosError
from lumos.paths import cache_root

FLAGS = ("-O3", "-march=native", "-fopenmp", "-fPIC",
         "-fwrapv",  # integer arithmetic wraps, as in numpy
         "-fno-math-errno",  # sqrt inlines; values are unchanged
         # floating point never traps (no FP exceptions are enabled): GCC may compute both
         # sides of a select, so a loop whose selects' branches it had sunk arithmetic
         # into (a fused GELU's erf or tanh) still vectorizes; values are unchanged
         "-fno-trapping-math",
         "-ffp-contract=off")  # no FMA contraction: rounding as written
LINK = ("-Wl,-Bsymbolic",)  # a library's calls bind to its own kernels, never another's
# the most bytes of definitions one compiler process gets: a batch's time grows with its
# text (a program of 1,300 kernels in 4 batches of 2.7 MB ran past the 60 s
# candidate_timeout each), so a large program compiles in more, smaller batches
BATCH_BYTES = 256 << 10


def blas_flags() -> list[str]:
    lib = scipy_openblas32.get_lib_dir()
    return [f"-I{scipy_openblas32.get_include_dir()}", f"-L{lib}", f"-Wl,-rpath,{lib}",
            f"-l{scipy_openblas32.get_library()}"]


class CompileError(LumosError, RuntimeError):
    """The C compiler rejected generated source (the message names the saved source)."""


class UnsupportedProgram(CompileError):
    """A program codegen writes no C for: a combination of choices the search can reach
    that no kernel covers (a search rejects it quietly; the C compiler's errors are bugs)."""


class CompileTimeout(CompileError):
    """The compilers were still running at the deadline of `time_limit` (and were killed)."""


_LIMIT: ContextVar[float | None] = ContextVar("cc_limit", default=None)


@contextmanager
def time_limit(seconds: float | None) -> Iterator[None]:
    """Within it, each compiler process (one unit's compile, the link) is killed after
    `seconds` (None: no limit): a search must not wait forever on a compiler that chokes
    on one candidate's source. The limit is per process, not per program: a model of
    hundreds of kernels legitimately compiles for minutes on a busy machine."""
    token = _LIMIT.set(seconds)
    try:
        yield
    finally:
        _LIMIT.reset(token)


def _remaining(started: float) -> float | None:
    """Seconds left to a compiler process started at `started` (monotonic)."""
    limit = _LIMIT.get()
    return None if limit is None else max(0.0, started + limit - time.monotonic())


def _kill(proc: subprocess.Popen) -> None:
    """Kills a compiler and what it started (cc1, as, ld), which hold its stderr open."""
    with suppress(ProcessLookupError):  # it had ended, and all it started
        os.killpg(proc.pid, signal.SIGKILL)
    proc.communicate()


def _timed_out(cc: str, what: Path) -> CompileTimeout:
    return CompileTimeout(f"compile timed out: {cc} was still running on {what} after "
                          f"{_LIMIT.get():g} s")


def cache_dir() -> Path:
    return cache_root() / "cpu"


@cache
def cpu_id() -> str:
    """This CPU: its architecture, model name and feature flags."""
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return platform.processor()
    lines = [ln for ln in text.splitlines() if ln.startswith(("model name", "flags"))]
    return platform.machine() + "\n" + "\n".join(dict.fromkeys(lines))


@cache
def macros() -> str:
    """The C compiler's predefined macros under FLAGS (what -march=native targets here);
    empty when it cannot be asked."""
    try:
        return subprocess.run([*shlex.split(os.environ.get("CC") or "cc"), *FLAGS, "-dM",
                               "-E", "-x", "c", os.devnull], capture_output=True, text=True,
                              timeout=60).stdout
    except (OSError, subprocess.SubprocessError):
        return ""


@cache
def vector_bytes() -> int:
    """The width of the vector registers FLAGS target: 64 (AVX-512F), 32 (AVX), else 16
    (SSE, NEON). GCC's vector types wider than this are split, and some of their
    operations go lane by lane through memory."""
    m = macros()
    return 64 if "#define __AVX512F__ 1" in m else 32 if "#define __AVX__ 1" in m else 16


@cache
def amx() -> bool:
    """Whether products can run on AMX tiles here (codegen's lumos_gemm_amx): x86-64 Linux
    granting this process the tiles' state (ARCH_REQ_XCOMP_PERM; each compiled program's
    unit asks again for the process that loads it) and a compiler that targets AMX and
    AVX512-BF16 under FLAGS."""
    if platform.machine() != "x86_64" or platform.system() != "Linux":
        return False
    try:
        if ctypes.CDLL(None).syscall(158, 0x1023, 18) != 0:  # SYS_arch_prctl, XTILEDATA
            return False
    except (OSError, AttributeError):
        return False
    return all(f"#define {m} 1" in macros() for m in ("__AMX_TILE__", "__AMX_BF16__",
                                                      "__AVX512BF16__"))


def compile_source(source: str) -> Path:
    """The path of the shared library built from one C translation unit."""
    return compile_units((source,))


Unit = str | tuple[str, str]  # a whole translation unit, or (prelude, definitions)


def compile_units(units: Sequence[Unit]) -> Path:
    """The path of the shared library linked from C translation `units`. Each unit's
    object is cached by the unit's hash (a program that differs from an earlier one in a
    few kernels compiles only those). A unit given as (prelude, definitions) may be
    compiled in one source with others of the same prelude: the missing ones are split
    into 2 x `LUMOS_CC_JOBS` (default: the CPU count) batches, or more where a batch
    would hold more than `BATCH_BYTES` of definitions, compiled in parallel, each
    unit's `<hash>.ref` naming its batch's object (gcc's start and the prelude cost
    18 ms of a kernel's 36; definitions are weak, so batches that overlap, from processes
    compiling at once, link). The library is cached by the units' hashes, and `<hash>.c`
    next to it holds all units for reading."""
    cc = shlex.split(os.environ.get("CC") or "cc")
    texts = [u if isinstance(u, str) else u[0] + u[1] for u in units]
    uses = ["#include <cblas.h>" in t for t in texts]
    link = [*LINK, *(blas_flags() if any(uses) else ())]
    base = "\0".join([*cc, *FLAGS, cpu_id()])
    # a unit's key names OpenBLAS only if it includes it: a kernel shared by a program that
    # calls BLAS and one that does not (the search's two seeds) compiles once
    keys = [hashlib.sha256("\0".join([base, scipy_openblas32.__version__ if b else "", t])
                           .encode()).hexdigest()[:32] for t, b in zip(texts, uses, strict=True)]
    key = hashlib.sha256("\0".join([*keys, *link]).encode()).hexdigest()[:32]
    d = cache_dir()
    lib = d / f"{key}.so"
    if lib.exists():
        return lib
    d.mkdir(parents=True, exist_ok=True)
    src = d / f"{key}.c"
    _write(src, "\n".join(texts))
    objects = {k: _cached(d, k) for k in keys}
    jobs = int(os.environ.get("LUMOS_CC_JOBS") or os.cpu_count() or 1)
    sources: dict[str, str] = {}  # object key -> its source
    members: dict[str, list[str]] = {}  # batch object key -> the unit keys it compiles
    batches: dict[str, dict[str, str]] = {}  # prelude -> missing unit key -> definitions
    for k, u in zip(keys, units, strict=True):
        if objects[k] is None:
            if isinstance(u, str):
                sources[k] = u
            else:
                batches.setdefault(u[0], {})[k] = u[1]
    for prelude, defs in batches.items():
        items = list(defs.items())
        size = sum(len(text) for _, text in items)
        n = min(len(items), max(2 * jobs, -(-size // BATCH_BYTES)))
        for part in (items[i::n] for i in range(n)):
            bk = hashlib.sha256("\0".join(k for k, _ in part).encode()).hexdigest()[:32]
            sources[bk] = prelude + "\n".join(text for _, text in part)
            members[bk] = [k for k, _ in part]
    failure = _run_compilers(cc, d, sources, jobs)
    if failure is not None:
        k, code, err = failure
        raise CompileError(f"{cc[0]} failed on generated source {d / f'{k}.unit.c'} (part of "
                           f"{src}, exit {code}):\n{err[-4000:]}")
    for k in sources:
        for m in members.get(k, [k]):
            objects[m] = f"{k}.o"
            if m != k:
                _write(d / f"{m}.ref", f"{k}.o")
    tmp = d / f"{key}.{os.getpid()}.tmp"
    proc = subprocess.Popen([*cc, *FLAGS, "-shared", "-o", str(tmp),
                             *(str(d / o) for o in dict.fromkeys(objects[k] for k in keys)),
                             *link, "-lm"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            process_group=0)
    try:
        err = proc.communicate(timeout=_remaining(time.monotonic()))[1]
    except subprocess.TimeoutExpired:
        _kill(proc)
        tmp.unlink(missing_ok=True)
        raise _timed_out(cc[0], src) from None
    if proc.returncode != 0:
        tmp.unlink(missing_ok=True)
        raise CompileError(f"{cc[0]} failed to link {src} (exit {proc.returncode}):\n"
                           f"{err[-4000:]}")
    os.replace(tmp, lib)
    return lib


def _cached(d: Path, k: str) -> str | None:
    """The object file (name in `d`) that holds unit `k`, if one was compiled."""
    if (d / f"{k}.o").exists():
        return f"{k}.o"
    with suppress(OSError):
        name = (d / f"{k}.ref").read_text()
        if (d / name).exists():
            return name
    return None


def _run_compilers(cc: list[str], d: Path, sources: dict[str, str],
                   jobs: int) -> tuple[str, int, str] | None:
    """Compiles each source (by key) to `<key>.o` in `d`, `jobs` at a time; the first
    failure (key, exit code, stderr), if any."""
    running: list[tuple[str, subprocess.Popen, float]] = []
    failure = None
    for k, unit in [*sources.items(), *[(None, None)] * jobs]:  # the Nones drain the queue
        while running and (len(running) >= jobs or k is None):
            # the first to end (its stderr closes), not the first started: OWN_GEMM's unit
            # (0.42 s) held up the other job's queue behind it (0.05-0.16 s each)
            left = [r for r in (_remaining(s) for _, _, s in running) if r is not None]
            ready = wait_any([p.stderr for _, p, _ in running], min(left) if left else None)
            done, proc, started = running.pop(next(
                (i for i, (_, p, _) in enumerate(running) if p.stderr in ready), 0))
            try:
                err = proc.communicate(timeout=_remaining(started))[1]
            except subprocess.TimeoutExpired:
                for k2, p, _ in [(done, proc, started), *running]:
                    _kill(p)
                    (d / f"{k2}.{os.getpid()}.o.tmp").unlink(missing_ok=True)
                raise _timed_out(cc[0], d / f"{done}.unit.c") from None
            tmp = d / f"{done}.{os.getpid()}.o.tmp"
            if proc.returncode != 0:
                tmp.unlink(missing_ok=True)
                failure = failure or (done, proc.returncode, err)
            else:
                os.replace(tmp, d / f"{done}.o")
        if k is None or unit is None:
            continue
        unit_src = d / f"{k}.unit.c"
        _write(unit_src, unit)
        tmp = d / f"{k}.{os.getpid()}.o.tmp"
        running.append((k, subprocess.Popen(
            [*cc, *FLAGS, *(blas_flags()[:1] if "#include <cblas.h>" in unit else ()),
             "-c", "-o", str(tmp), str(unit_src)], stderr=subprocess.PIPE, text=True,
            process_group=0), time.monotonic()))
    return failure


def _write(path: Path, text: str) -> None:
    tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


@cache
def load(lib: Path) -> ctypes.CDLL:
    """The loaded library (once per process)."""
    return ctypes.CDLL(str(lib))
