"""plan.pages: the memory of arenas and of weights' stored forms, aligned, on transparent
huge pages where Linux offers them."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import numpy as np
import pytest

from lumos.runtime.cpu.memory import HUGE_PAGE, Slabs, pages
from lumos.runtime.cpu.plan import ALIGN


@pytest.mark.parametrize("nbytes", [1, 63, 4096, HUGE_PAGE - 1, HUGE_PAGE, 3 * HUGE_PAGE + 5])
def test_pages_are_aligned_and_writable(nbytes: int) -> None:
    a = pages(nbytes)
    assert a.dtype == np.uint8 and a.shape == (nbytes,)
    assert a.ctypes.data % (HUGE_PAGE if nbytes >= HUGE_PAGE else ALIGN) == 0
    a[:] = 7
    assert int(a.sum()) == 7 * nbytes


def _thp_mode() -> str | None:
    p = Path("/sys/kernel/mm/transparent_hugepage/enabled")
    m = re.search(r"\[(\w+)\]", p.read_text()) if p.exists() else None
    return m.group(1) if m else None


@pytest.mark.skipif(not sys.platform.startswith("linux") or _thp_mode() not in
                    ("madvise", "always"), reason="no transparent huge pages here")
def test_large_pages_are_advised_huge() -> None:
    """The mapping holding a large buffer may take huge pages (smaps: THPeligible 1),
    by pages' own advice (numpy's for its allocations of 4 MiB and more: off here)."""
    from numpy._core.multiarray import _set_madvise_hugepage

    before = _set_madvise_hugepage(False)
    try:
        a = pages(4 * HUGE_PAGE)
    finally:
        _set_madvise_hugepage(before)
    a[:] = 1
    at, eligible = a.ctypes.data, None
    for line in Path("/proc/self/smaps").read_text().splitlines():
        head = re.match(r"^([0-9a-f]+)-([0-9a-f]+) ", line)
        if head:
            inside = int(head.group(1), 16) <= at < int(head.group(2), 16)
        elif inside and line.startswith("THPeligible:"):
            eligible = int(line.split()[1])
            break
    assert eligible == 1


def test_slabs_carve_aligned_disjoint_arrays_and_free_their_chunk() -> None:
    import gc
    import weakref

    s = Slabs()
    rng = np.random.default_rng(0)
    sizes = [1, 100, 4096, 3 * HUGE_PAGE, 7]
    srcs = [rng.integers(0, 255, n, dtype=np.uint8) for n in sizes]
    outs = [s.copy(a) for a in srcs]
    spans = sorted((o.ctypes.data, o.ctypes.data + o.nbytes) for o in outs)
    assert all(e <= b for (_, e), (b, _) in zip(spans, spans[1:], strict=False))
    for a, o in zip(srcs, outs, strict=True):
        assert o.ctypes.data % ALIGN == 0 and np.array_equal(a, o)
    f = s.copy(np.arange(12, dtype=np.float32).reshape(3, 4))
    assert f.dtype == np.float32 and f.shape == (3, 4) and f.flags.c_contiguous
    chunk = weakref.ref(outs[0].base)
    s._chunk = np.empty(0, np.uint8)  # (as after a full chunk)
    del outs, f, o
    gc.collect()
    assert chunk() is None


def test_weights_bound_to_a_program_are_its_own_copies() -> None:
    import lumos
    from lumos.runtime.cpu import CpuRuntime
    from tests.runtime.cpu.common import BASELINE

    g = lumos.Graph()
    x = g.tensor((3, 8), name="x")
    w = g.tensor((5, 8), name="w", weight=True)
    y = (x @ w.T).output()
    prog = g.compile(CpuRuntime(), BASELINE)
    rng = np.random.default_rng(1)
    xs, ws = rng.standard_normal((3, 8), np.float32), rng.standard_normal((5, 8), np.float32)
    prog.set_data(x, xs)
    prog.set_data(w, ws)
    bound = prog._data[w.node]
    assert not np.shares_memory(bound, ws) and np.array_equal(bound, ws)
    assert np.shares_memory(prog._data[x.node], xs)  # (not a weight: as passed)
    prog.execute()
    np.testing.assert_allclose(prog.get(y), xs @ ws.T, rtol=1e-5, atol=1e-6)
