"""Running untrusted candidates in a child process, so that a segfault or an endless loop
in generated code costs the child, not the compiler.

    with Sandbox() as box:
        outputs = run_candidate(compiled, inputs, dims, timeout=10, sandbox=box)

A `Sandbox` is one long-lived worker process (a fresh interpreter: a forked copy of a
process that already ran OpenMP may hang, and multiprocessing's `spawn` would re-run
the caller's main script). A crash, a timeout or an exception
raises `CandidateError` in the parent; after a crash or a timeout the worker is
killed and the next call starts a fresh one.
"""

from __future__ import annotations

import os
import pickle
import select
import signal
import subprocess
import sys
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from lumos.egraph.worker import recv, send
from lumos.errors import LumosError
from lumos.runtime.cpu.program import CompiledProgram

STARTUP_TIMEOUT = 120.0  # seconds for a fresh worker to import lumos


class CandidateError(LumosError, RuntimeError):
    """A candidate crashed, hung or raised while running in the sandbox."""


_STASH: dict[str, Mapping[str, Any]] = {}  # in the worker: values sent once (Sandbox.put)


def _stash(key: str, value: Mapping[str, Any]) -> None:
    _STASH[key] = value


class Stashed:
    """An argument standing for `[stash[key][n] for n in names]` of a value `put` into
    the worker earlier: large inputs cross the pipe once per search, not per call."""

    def __init__(self, key: str, names: Sequence[str]) -> None:
        self.key, self.names = key, list(names)

    def resolve(self) -> list[Any]:
        return [_STASH[self.key][n] for n in self.names]


def serve() -> None:
    """The worker's loop: calls from stdin, replies on (a private copy of) stdout."""
    out = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)  # stray prints must not corrupt the channel
    send(out, ("ready", None))
    while True:
        try:
            fn, args = recv(sys.stdin.buffer)
        except EOFError:
            return
        try:
            args = [a.resolve() if isinstance(a, Stashed) else a for a in args]
            reply = ("ok", fn(*args))
        except Exception as e:  # reported to the parent, which raises it
            reply = ("error", f"{type(e).__name__}: {e}")
        send(out, reply)


class Sandbox:
    """A worker process that runs picklable functions for the parent."""

    def __init__(self) -> None:
        self._proc: subprocess.Popen | None = None
        self._ready = False  # the current worker said it is ready
        self._stashed: set[str] = set()  # keys the current worker holds

    def start(self) -> None:
        """Start a worker if none is alive, without waiting for it to import lumos (the
        first `run` waits): its start overlaps whatever the caller does next."""
        if self._proc is None or self._proc.poll() is not None:
            env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
            self._proc = subprocess.Popen(
                [sys.executable, "-c", "from lumos.runtime.cpu.isolate import serve; serve()"],
                env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE)
            self._ready = False
            self._stashed = set()

    def _started(self) -> subprocess.Popen:
        self.start()
        if not self._ready:
            self._receive(STARTUP_TIMEOUT, "starting the sandbox")
            self._ready = True
        assert self._proc is not None
        return self._proc

    def _receive(self, timeout: float | None, what: str) -> Any:
        proc = self._proc
        assert proc is not None and proc.stdout is not None
        ready, _, _ = select.select([proc.stdout], [], [], timeout)
        if not ready:
            self.close()
            raise CandidateError(f"{what}: timed out after {timeout:g} s")
        try:
            status, value = recv(proc.stdout)
        except (EOFError, pickle.UnpicklingError):
            code = proc.wait()
            self.close()
            raise CandidateError(f"{what}: the sandbox process died ({_describe(code)})") \
                from None
        if status == "error":
            raise CandidateError(f"{what}: {value}")
        return value

    def run(self, fn: Callable[..., Any], *args: Any, timeout: float | None) -> Any:
        """`fn(*args)` in the worker; its result, or CandidateError."""
        proc = self._started()
        assert proc.stdin is not None
        what = f"running {getattr(fn, '__name__', type(fn).__name__)}"
        try:
            send(proc.stdin, (fn, args))
        except BrokenPipeError:
            self.close()
            raise CandidateError(f"{what}: the sandbox process died") from None
        return self._receive(timeout, what)

    def put(self, key: str, value: Mapping[str, Any], timeout: float | None) -> None:
        """Keep `value` in the worker under `key` (sent again only to a new worker); pass
        `Stashed(key, names)` to `run` to use it."""
        alive = self._proc is not None and self._proc.poll() is None
        if not alive or key not in self._stashed:
            self.run(_stash, key, value, timeout=timeout)
            self._stashed.add(key)

    def close(self) -> None:
        if self._proc is not None:
            if self._proc.poll() is None:
                self._proc.kill()
            self._proc.wait()
            for f in (self._proc.stdin, self._proc.stdout):
                if f is not None:
                    f.close()
            self._proc = None

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
