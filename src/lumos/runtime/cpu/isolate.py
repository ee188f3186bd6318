"""Running untrusted candidates in a child process, so that a segfault or an endless loop
in generated code costs the child, not the compiler.

    with Sandbox() as box:
        outputs = run_candidate(compiled, inputs, dims, timeout=10, sandbox=box)

A `Sandbox` is one long-lived worker process (started with `spawn`: a forked copy of
a process that already ran OpenMP may hang). A crash, a timeout or an exception
raises `CandidateError` in the parent; after a crash or a timeout the worker is
killed and the next call starts a fresh one.
"""

from __future__ import annotations

import multiprocessing
import signal
from collections.abc import Callable, Mapping, Sequence
from multiprocessing.connection import Connection
from typing import Any

import numpy as np

from lumos.errors import LumosError
from lumos.runtime.cpu.program import CompiledProgram

STARTUP_TIMEOUT = 120.0  # seconds for a fresh worker to import lumos


class CandidateError(LumosError, RuntimeError):
    """A candidate crashed, hung or raised while running in the sandbox."""


def _serve(conn: Connection) -> None:
    conn.send(("ready", None))
    while True:
        try:
            fn, args = conn.recv()
        except EOFError:
            return
        try:
            reply = ("ok", fn(*args))
        except Exception as e:  # reported to the parent, which raises it
            reply = ("error", f"{type(e).__name__}: {e}")
        conn.send(reply)


class Sandbox:
    """A worker process that runs picklable functions for the parent."""

    def __init__(self) -> None:
        self._proc: Any = None
        self._conn: Connection | None = None

    def _start(self) -> Connection:
        ctx = multiprocessing.get_context("spawn")
        parent, child = ctx.Pipe()
        self._proc = ctx.Process(target=_serve, args=(child,), daemon=True)
        self._proc.start()
        child.close()
        self._conn = parent
        self._receive(STARTUP_TIMEOUT, "starting the sandbox")
        return parent

    def _receive(self, timeout: float, what: str) -> Any:
        conn = self._conn
        assert conn is not None
        if not conn.poll(timeout):
            self.close()
            raise CandidateError(f"{what}: timed out after {timeout:g} s")
        try:
            status, value = conn.recv()
        except (EOFError, ConnectionError):
            self._proc.join(5)
            code = self._proc.exitcode
            self.close()
            raise CandidateError(f"{what}: the sandbox process died ({_describe(code)})") \
                from None
        if status == "error":
            raise CandidateError(f"{what}: {value}")
        return value

    def run(self, fn: Callable[..., Any], *args: Any, timeout: float) -> Any:
        """`fn(*args)` in the worker; its result, or CandidateError."""
        conn = self._conn if self._proc is not None and self._proc.is_alive() else None
        conn = conn or self._start()
        conn.send((fn, args))
        return self._receive(timeout, f"running {getattr(fn, '__name__', type(fn).__name__)}")

    def close(self) -> None:
        if self._proc is not None:
            if self._proc.is_alive():
                self._proc.kill()
            self._proc.join()
            self._proc = None
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    def __enter__(self) -> Sandbox:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _describe(code: int | None) -> str:
    if code is not None and code < 0:
        try:
            return f"killed by {signal.Signals(-code).name}"
        except ValueError:
            pass
    return f"exit code {code}"


def run_candidate(program: CompiledProgram, inputs: Sequence[np.ndarray],
                  dims: Mapping[str, int], timeout: float,
                  sandbox: Sandbox | None = None) -> list[np.ndarray]:
    """The outputs of `program` on `inputs`, computed in a sandbox (a fresh one if none
    is given); a crash, hang or error raises CandidateError."""
    if sandbox is not None:
        return sandbox.run(program, list(inputs), dict(dims), timeout=timeout)
    with Sandbox() as box:
        return box.run(program, list(inputs), dict(dims), timeout=timeout)
