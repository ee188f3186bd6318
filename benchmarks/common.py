"""Timing and the DRAM yardstick shared by the benchmark scripts (run as
`python benchmarks/NAME.py`)."""

from __future__ import annotations

import os
import statistics
import threading
import time
from collections.abc import Callable, Mapping

import numpy as np


def openblas_core() -> str:
    """The kernel family OpenBLAS runs (scipy-openblas32: the library lumos's GEMMs call;
    numpy's scipy-openblas64 reads the same variables), with `OPENBLAS_CORETYPE` named when
    set. The variable overrides OpenBLAS's CPU detection; some machines here set it to
    Haswell (AVX2), which halves sgemm on an AVX-512 CPU: 245 vs 462 GFLOP/s at 1024^3 on
    this machine. Benchmarks meant to show what users get unset it in that command alone:
    `env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE .venv/bin/python benchmarks/NAME.py`."""
    import ctypes

    import scipy_openblas32

    scipy_openblas32.get_openblas_config()  # loads the library
    get = scipy_openblas32.dll.scipy_openblas_get_corename
    get.restype = ctypes.c_char_p
    forced = os.environ.get("OPENBLAS_CORETYPE")
    return get().decode() + (f" (OPENBLAS_CORETYPE={forced})" if forced else "")


def median_time(fn: Callable[[], object], repeats: int, warmup: int = 1,
                before: Callable[[], object] | None = None, least: float = 0.0) -> float:
    """Median wall time of `fn` in seconds over `repeats` runs, after `warmup` runs;
    `before` (untimed) runs before each timed run. With `least`, runs go on until they
    also add up to that many seconds (a median of 20 sub-millisecond calls moves with
    whatever else the shared machine did in those 20 ms)."""
    for _ in range(warmup):
        fn()
    times: list[float] = []
    while len(times) < repeats or sum(times) < least:
        if before is not None:
            before()
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def keep_freed_memory() -> None:
    """Set glibc's malloc to keep what is freed for the next allocation (no mmap for large
    blocks, no returning the heap's top to the system), as tcmalloc or jemalloc would.
    PyTorch allocates its results afresh on every call, and with glibc's defaults a large
    tensor's pages go back to the system when freed and fault in again on the next call:
    MobileNetV2 under inductor ran at 202 images/s first in a process, 383 so (eager 57 vs
    172). The peers are timed at their best; lumos allocates its buffers once anyway."""
    import ctypes

    libc = ctypes.CDLL(None)
    if hasattr(libc, "mallopt"):  # glibc: M_MMAP_MAX = -4, M_TRIM_THRESHOLD = -1
        libc.mallopt(-4, 0)
        libc.mallopt(-1, 2**31 - 1)


SETTLE = 0.3  # seconds between two peers' turns (see `interleaved`)


def interleaved(fns: Mapping[str, Callable[[], object]], repeats: int, least: float = 0.0,
                rounds: int = 5, warmup: int = 1) -> dict[str, float]:
    """Median wall time in seconds of each of `fns`, timed in turns: `rounds` rounds in
    each of which every fn runs at least repeats / rounds times and least / rounds
    seconds, after `warmup` runs each. A slow spell of the shared machine (seen here: the
    same program 10-20% slower for tens of seconds) then falls on every peer alike, not
    on whichever was being timed. Each turn starts `SETTLE` seconds after the last: a
    peer's idle threads spin on after its last call (OpenBLAS' for ~0.1 s), and took a
    core from the next peer (lumos' 1024^3 product: 8.1 ms alone, 17.2 ms right after
    numpy's)."""
    for fn in fns.values():
        for _ in range(warmup):
            fn()
    times: dict[str, list[float]] = {k: [] for k in fns}
    per = max(1, -(-repeats // rounds))
    for _ in range(rounds):
        for k, fn in fns.items():
            time.sleep(SETTLE)
            got: list[float] = []
            while len(got) < per or sum(got) < least / rounds:
                t0 = time.perf_counter()
                fn()
                got.append(time.perf_counter() - t0)
            times[k] += got
    return {k: statistics.median(v) for k, v in times.items()}


_FLUSH: list[np.ndarray] = []


def evict_caches() -> None:
    """Read a 1 GiB array (allocated once), so that what a timed run reads next comes from
    DRAM: the last-level cache of the machines here can hold 128 MiB."""
    if not _FLUSH:
        _FLUSH.append(np.ones((1 << 30) // 4, np.float32))
    _FLUSH[0].max()


def read_bandwidth(repeats: int) -> tuple[float, int]:
    """Bytes/s of numpy's max (a SIMD reduction, memory-bound) over a 256 MiB f32 array
    split across t threads (numpy releases the GIL in it): the median time of the best t
    in 1..CPUs, and that t."""
    a = np.ones((256 << 20) // 4, np.float32)
    best = (0.0, 1)
    for threads in range(1, (os.cpu_count() or 1) + 1):
        parts = np.array_split(a, threads)

        def run(parts: list[np.ndarray] = parts) -> None:
            ts = [threading.Thread(target=np.max, args=(p,)) for p in parts]
            for t in ts:
                t.start()
            for t in ts:
                t.join()

        best = max(best, (a.nbytes / median_time(run, repeats), threads))
    return best


def llama_cpp_model(path: str, n_ctx: int, threads: int | None = None) -> object:
    """A llama_cpp.Llama on `threads` threads (default: one per CPU). Its AMX weight
    repacking (extra buffer types) crashes on Q4_1 on the Xeon, so it loads with
    use_extra_bufts off."""
    import llama_cpp
    from llama_cpp import llama_cpp as lib

    default = lib.llama_model_default_params

    def params() -> object:
        p = default()
        p.use_extra_bufts = False
        return p

    threads = threads or os.cpu_count()
    lib.llama_model_default_params = params
    try:
        return llama_cpp.Llama(str(path), n_ctx=n_ctx, n_threads=threads,
                               n_threads_batch=threads, verbose=False)
    finally:
        lib.llama_model_default_params = default
