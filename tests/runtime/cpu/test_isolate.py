"""A candidate that crashes, hangs or raises in the sandbox is an error in the parent,
which stays alive; the sandbox restarts and runs the next candidate."""

from __future__ import annotations

import ctypes
import os

import numpy as np
import pytest

import lumos
from lumos.runtime.cpu import CandidateError, Sandbox, build, run_candidate
from lumos.runtime.cpu.cc import compile_source

SNIPPETS = """
int lumos_crash(void) { volatile int *p = 0; return *p; }
void lumos_hang(void) { volatile int x = 0; for (;;) x++; }
int lumos_fine(void) { return 42; }
"""


def call(library: str, symbol: str) -> int:
    """Runs in the sandbox: a C function of `library`."""
    return getattr(ctypes.CDLL(library), symbol)()


@pytest.fixture(scope="module")
def box() -> Sandbox:
    with Sandbox() as sandbox:
        yield sandbox


def test_crash_and_hang_are_errors_and_the_sandbox_recovers(box: Sandbox) -> None:
    lib = str(compile_source(SNIPPETS))
    assert box.run(call, lib, "lumos_fine", timeout=30) == 42
    with pytest.raises(CandidateError, match="SIGSEGV"):
        box.run(call, lib, "lumos_crash", timeout=30)
    assert box.run(call, lib, "lumos_fine", timeout=30) == 42  # a fresh worker
    with pytest.raises(CandidateError, match="timed out after 0.5 s"):
        box.run(call, lib, "lumos_hang", timeout=0.5)
    assert box.run(call, lib, "lumos_fine", timeout=30) == 42
    assert os.getpid()  # still here


def test_run_candidate(box: Sandbox) -> None:
    g = lumos.Graph()
    n = g.dim("n")
    x = g.tensor((n, 3), lumos.f32, "x")
    (x.T.exp() + 1).output()
    program = build(g)
    data = np.arange(12, dtype=np.float32).reshape(4, 3)
    got = run_candidate(program, [data], {"n": 4}, timeout=30, sandbox=box)
    np.testing.assert_array_equal(got[0], program([data], {"n": 4})[0])
    with pytest.raises(CandidateError, match="BindError: input 0: expected f32 \\(5, 3\\)"):
        run_candidate(program, [data], {"n": 5}, timeout=30, sandbox=box)
