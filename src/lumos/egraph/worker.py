"""A child process that runs a function under a hard wall-clock limit.

egglog has no timeout and cannot be interrupted, so a time-limited saturation runs in a
child that is killed at the limit. The child is a fresh interpreter, spawned, never
forked (on egglog 13.2 a forked child's results never reach the parent); it is started
with subprocess rather than multiprocessing's spawn context, which would re-run the
user's unguarded __main__ script in the child. It is started on first use and reused
until killed; `warm` starts it early without waiting for it.
Messages are length-prefixed pickles over its stdin/stdout; what the call prints to
stderr is handed back and printed by the parent.
"""

from __future__ import annotations

import atexit
import contextlib
import io
import os
import pickle
import select
import struct
import subprocess
import sys
import threading
from collections.abc import Callable
from typing import IO, Any

_proc: subprocess.Popen | None = None
_owner = os.getpid()  # a forked parent must not share its worker
_starting = False  # _proc's "ready" not read yet (started by warm)
_lock = threading.Lock()


class Lost(Exception):
    """The call did not finish: killed at its time limit, or the child died."""


def send(f: IO[bytes], obj: object) -> None:
    """One length-prefixed pickle (the framing of every lumos worker channel)."""
    data = pickle.dumps(obj)
    f.write(struct.pack("<Q", len(data)) + data)
    f.flush()


def recv(f: IO[bytes]) -> Any:
    """The next message written by `send`; EOFError when the channel closed."""
    head = f.read(8)
    if len(head) < 8:
        raise EOFError
    return pickle.loads(f.read(struct.unpack("<Q", head)[0]))


def _spawn() -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
    code = "from lumos.egraph.worker import main; main()"
    return subprocess.Popen([sys.executable, "-c", code], env=env,
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE)


def _ready(proc: subprocess.Popen) -> subprocess.Popen:
    try:
        recv(proc.stdout)  # "ready": imports done, so they do not count against a limit
    except EOFError:
        raise Lost(f"worker failed to start (exit code {proc.wait()})") from None
    return proc


def _alive() -> bool:
    return _proc is not None and _proc.poll() is None and _owner == os.getpid()


def warm() -> None:
    """Start the worker now and return at once: its imports (~0.3 s) overlap the caller's
    work up to the first `call` (the torch backend: PyTorch's tracing)."""
    global _proc, _owner, _starting
    with _lock:
        if not _alive():
            _proc, _owner, _starting = _spawn(), os.getpid(), True


def stop() -> None:
    global _proc
    if _proc is not None and _owner == os.getpid():
        _proc.kill()
        _proc.wait()
        _proc = None


atexit.register(stop)


def call(fn: Callable[..., Any], args: tuple, time_limit: float) -> Any:
    """fn(*args) in the worker; raises Lost if it runs past `time_limit` seconds or the
    worker dies, and re-raises what fn raises."""
    global _proc, _owner, _starting
    with _lock:
        if not _alive():
            _proc, _owner, _starting = _spawn(), os.getpid(), True
        if _starting:
            _starting = False
            try:
                _ready(_proc)
            except Lost:
                stop()
                raise
        assert _proc.stdin is not None and _proc.stdout is not None
        try:
            send(_proc.stdin, (fn, args, os.environ.get("LUMOS_LOG", "")))
            ready, _, _ = select.select([_proc.stdout], [], [], time_limit)
            if not ready:
                raise Lost(f"ran past its time limit of {time_limit:g} s and was killed")
            ok, value, printed = recv(_proc.stdout)
        except (EOFError, BrokenPipeError):
            code = _proc.wait()
            stop()
            raise Lost(f"worker died (exit code {code})") from None
        except BaseException:  # the limit, or an interrupt: a late reply must not be read
            stop()
            raise
    sys.stderr.write(printed)
    if not ok:
        raise value
    return value


def main() -> None:
    out = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)  # stray prints must not corrupt the channel
    inp = sys.stdin.buffer
    import lumos.egraph.build  # noqa: F401  (the usual callee: imported before "ready")

    send(out, "ready")
    while True:
        try:
            fn, args, topics = recv(inp)
        except EOFError:
            return
        os.environ["LUMOS_LOG"] = topics
        printed = io.StringIO()
        try:
            with contextlib.redirect_stderr(printed):
                ok, value = True, fn(*args)
        except Exception as e:  # handed to the parent, which re-raises it
            ok, value = False, e
        try:
            send(out, (ok, value, printed.getvalue()))
        except Exception as e:  # unpicklable (egglog's errors are)
            what = f"{type(value).__name__}: {value}" if not ok else repr(e)
            send(out, (False, RuntimeError(f"e-graph worker: {what}"), printed.getvalue()))
