"""What the `lumos` subcommands share: the runtime and search flags, progress on stderr,
timing helpers."""

from __future__ import annotations

import argparse
import importlib
import os
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from lumos.errors import LumosError

DEFAULT_SEARCH = 100  # candidates per shape bucket on the CPU runtime: CompileOptions'


def default_runtime() -> str:
    try:
        importlib.import_module("lumos.runtime.cpu")
        return "cpu"
    except Exception:  # a broken or missing backend: the reference runtime still works
        return "reference"


def make_runtime(name: str, artifacts: str | None = None) -> Any:
    """The runtime of `--runtime NAME`; `artifacts`: a shipped artifact file the CPU
    runtime loads its programs from (`lumos compile`)."""
    if name == "cpu":
        from lumos.runtime.cpu import CpuRuntime

        return CpuRuntime(artifacts=artifacts)
    if artifacts is not None:
        raise LumosError("an artifact file holds CPU programs: use --runtime cpu")
    from lumos.runtime import ReferenceRuntime

    return ReferenceRuntime()


def add_runtime(p: argparse.ArgumentParser, default: str = "cpu", help: str | None = None) -> None:
    p.add_argument("--runtime", choices=("cpu", "reference"), default=default, help=help)


def compile_options(args: argparse.Namespace) -> Any:
    """The CompileOptions of `--search N`, `--flush-denormals` and `--matmul-precision`
    (by default, on the CPU runtime, CompileOptions' search, whose result the artifact
    cache keeps; 0: no search)."""
    from lumos.search import CompileOptions

    cpu = args.runtime == "cpu"
    n = (DEFAULT_SEARCH if cpu else 0) if args.search is None else args.search
    for flag, given in (("--flush-denormals", args.flush_denormals),
                        ("--matmul-precision", args.matmul_precision != "highest")):
        if given and cpu and not n:
            raise LumosError(f"{flag} applies to a searched program: give --search 1 or more")
    return CompileOptions(limit=n, flush_denormals=args.flush_denormals,
                          matmul_precision=args.matmul_precision)


def add_compile_options(p: argparse.ArgumentParser) -> None:
    from lumos.search.options import MATMUL_PRECISIONS

    p.add_argument("--search", type=int, default=None, metavar="N",
                   help="time N candidate programs per compiled shape bucket; 0: the runtime's "
                        f"unsearched baseline; 2: the two seed programs only (default: "
                        f"{DEFAULT_SEARCH} on the cpu runtime, within 60 s per bucket; 0 on "
                        "the reference runtime)")
    p.add_argument("--flush-denormals", action="store_true",
                   help="cpu runtime: subnormal floats computed as zero (faster where a model's "
                        "weights hold some; results within 1.2e-38 of the exact ones)")
    p.add_argument("--matmul-precision", choices=MATMUL_PRECISIONS, default="highest",
                   help="cpu runtime: 'high' lets float32 matrix products run as bf16x3 on "
                        "AMX tiles where the CPU has them (as PyTorch's setting of that name; "
                        "relative errors ~4e-6 instead of ~4e-7); default: highest")


def median_seconds(fn: Callable[[], object], rounds: int) -> float:
    """The median wall time of `fn` over `rounds` calls, after one warm-up call (the first
    touch of a program's buffers): the model commands' `bench`."""
    fn()
    times = []
    for _ in range(rounds):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return float(np.median(times))


def say(message: str) -> None:
    print(f"[lumos] {message}", file=sys.stderr, flush=True)


class Ticker:
    """Elapsed seconds on stderr while a long step runs (a terminal only)."""

    def __init__(self, what: str) -> None:
        self.what, self.t0 = what, time.perf_counter()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.wait(0.5):
            print(f"\r[lumos] {self.what} {time.perf_counter() - self.t0:5.1f}s",
                  end="", file=sys.stderr, flush=True)

    def __enter__(self) -> Ticker:
        if sys.stderr.isatty():
            self._thread.start()
        else:
            say(f"{self.what} ...")
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join()
            print("\r", end="", file=sys.stderr)
        if exc[0] is None:
            say(f"{self.what} done in {time.perf_counter() - self.t0:.1f}s")


def copy_bandwidth(seconds: float = 0.5) -> float:
    """Measured memory bandwidth in bytes/s: threads copying 256 MiB buffers (read + write
    bytes), the best of repeated runs."""
    threads = os.cpu_count() or 1
    n = (256 << 20) // 4 // threads
    src = [np.ones(n, np.float32) for _ in range(threads)]
    dst = [np.empty_like(a) for a in src]
    best, t_end = 0.0, time.perf_counter() + seconds
    while True:
        t0 = time.perf_counter()
        ts = [threading.Thread(target=np.copyto, args=(d, s))
              for d, s in zip(dst, src, strict=True)]
        for t in ts:
            t.start()
        for t in ts:
            t.join()
        best = max(best, 2 * n * 4 * threads / (time.perf_counter() - t0))
        if time.perf_counter() > t_end:
            return best
