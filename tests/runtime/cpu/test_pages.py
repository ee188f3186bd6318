"""plan.pages: the memory of arenas and of weights' stored forms, aligned, on transparent
huge pages where Linux offers them."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import numpy as np
import pytest

from lumos.runtime.cpu.plan import ALIGN, HUGE_PAGE, pages


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
