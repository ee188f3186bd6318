"""A child process that runs a function under a hard wall-clock limit.

egglog has no timeout and cannot be interrupted, so a time-limited saturation runs in a
child that is killed at the limit. The child is a fresh interpreter, spawned, never
forked (on egglog 13.2 a forked child's results never reach the parent); it is started
with subprocess rather than multiprocessing's spawn context, which would re-run the
user's unguarded __main__ script in the child. It is started on first use and reused
until killed; `warm` starts it early without waiting for it. Calls made at once (one per
dim bucket) run in as many children. A child's egglog uses one thread (RAYON_NUM_THREADS,
unless set by the user).
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


class _Worker:
    """One child: its process, the pid that started it (a forked parent must not share
    it) and whether its "ready" is still to be read."""

    def __init__(self) -> None:
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
        # egglog runs rules on a rayon pool, one thread per core by default: on 2 cores one
        # thread saturated the 44M Llama's e-graph in 1.56 s against 1.84 s with two, and
        # in 1.57 s against 2.24 s while the other core ran the oracle (the compile's case)
        env.setdefault("RAYON_NUM_THREADS", "1")
        code = "from lumos.egraph.worker import main; main()"
        self.proc = subprocess.Popen([sys.executable, "-c", code], env=env,
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE)
        self.owner, self.starting = os.getpid(), True

    def alive(self) -> bool:
        return self.owner == os.getpid() and self.proc.poll() is None

    def ready(self) -> None:
        if self.starting:
            self.starting = False
            try:
                recv(self.proc.stdout)  # "ready": imports done, not counted against a limit
            except EOFError:
                raise Lost(f"worker failed to start (exit code {self.proc.wait()})") from None

    def kill(self) -> None:
        if self.owner == os.getpid():
            self.proc.kill()
            self.proc.wait()


# the worker not in a call (its e-graph has the rules loaded), if any; calls at once
# (build_spaces' dim buckets) each take one, a new one if none is idle
_idle: list[_Worker] = []
_started: list[_Worker] = []  # all of this process's, for `stop`


def _take() -> _Worker:
    with _lock:
        while _idle:
            w = _idle.pop()
            if w.alive():
                return w
            _started.remove(w)
        w = _Worker()
        _started.append(w)
        return w


def _discard(w: _Worker) -> None:
    w.kill()
    with _lock:
        if w in _started:
            _started.remove(w)


def warm() -> None:
    """Start a worker now and return at once: its imports (~0.3 s) overlap the caller's
    work up to the first `call` (the torch backend: PyTorch's tracing)."""
    with _lock:
        _idle[:] = [w for w in _idle if w.alive()]
        if not _idle:
            _idle.append(_Worker())
            _started.append(_idle[-1])


def stop() -> None:
    """Kill this process's workers (a call running in one fails with Lost)."""
    with _lock:
        for w in _started:
            w.kill()
        _started.clear()
        _idle.clear()


atexit.register(stop)


def call(fn: Callable[..., Any], args: tuple, time_limit: float) -> Any:
    """fn(*args) in a worker; raises Lost if it runs past `time_limit` seconds or the
    worker dies, and re-raises what fn raises."""
    w = _take()
    try:
        w.ready()
        assert w.proc.stdin is not None and w.proc.stdout is not None
        send(w.proc.stdin, (fn, args, os.environ.get("LUMOS_LOG", "")))
        ready, _, _ = select.select([w.proc.stdout], [], [], time_limit)
        if not ready:
            raise Lost(f"ran past its time limit of {time_limit:g} s and was killed")
        ok, value, printed = recv(w.proc.stdout)
    except (EOFError, BrokenPipeError):
        code = w.proc.wait()
        _discard(w)
        raise Lost(f"worker died (exit code {code})") from None
    except BaseException:  # the limit, or an interrupt: a late reply must not be read
        _discard(w)
        raise
    with _lock:
        keep = not _idle  # one idle worker: each holds its e-graph's memory (SmolLM2: 0.6 GB)
        if keep:
            _idle.append(w)
    if not keep:
        _discard(w)
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
