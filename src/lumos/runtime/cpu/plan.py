"""Buffer planning: offsets of the intermediates in one arena, reusing memory; and the
memory that arenas and weights' stored forms live in.

Decision-free: given each buffer's size and the span of kernels it lives through
(inclusive, so a kernel's output never overlaps its inputs), buffers are placed
largest first, each in the smallest gap that fits between the already placed
buffers whose lifetimes overlap its own (greedy best fit), else above them.
"""

from __future__ import annotations

import ctypes
import sys
from collections.abc import Sequence

import numpy as np

ALIGN = 64
HUGE_PAGE = 1 << 21  # x86-64's transparent huge page
MADV_HUGEPAGE = 14


def plan(sizes: Sequence[int], lives: Sequence[tuple[int, int]]) -> tuple[list[int], int]:
    """(offset of each buffer, arena bytes)."""
    offsets = [0] * len(sizes)
    placed: list[tuple[int, int, int, int]] = []  # (offset, end, first, last)
    for t in sorted(range(len(sizes)), key=lambda t: (-sizes[t], t)):
        size = -(-sizes[t] // ALIGN) * ALIGN
        first, last = lives[t]
        busy = sorted((o, e) for o, e, f, la in placed if f <= last and first <= la)
        best, top = None, 0
        for o, e in busy:
            if o - top >= size and (best is None or o - top < best[1]):
                best = (top, o - top)
            top = max(top, e)
        offsets[t] = best[0] if best is not None else top
        placed.append((offsets[t], offsets[t] + size, first, last))
    return offsets, max((e for _, e, _, _ in placed), default=0)


def pages(nbytes: int) -> np.ndarray:
    """`nbytes` of uninitialized memory (uint8), on transparent huge pages where Linux
    offers them: a kernel streaming weights spans a TLB entry per 2 MiB instead of per
    4 KiB (a 2048 x 640 int8 product, 180 of them in turns: 17 GB/s on 4 KiB pages,
    23 GB/s on huge ones; docs/performance.md). Smaller than a huge page: plain memory.
    Aligned to ALIGN bytes (a huge page where it is on them)."""
    huge = nbytes >= HUGE_PAGE and sys.platform.startswith("linux")
    align = HUGE_PAGE if huge else ALIGN
    raw = np.empty(nbytes + align, np.uint8)
    skip = -raw.ctypes.data % align
    if not huge:
        return raw[skip:skip + nbytes]
    try:  # (advice only: where THP is off or unsupported, the memory is what it was)
        _libc().madvise(ctypes.c_void_p(raw.ctypes.data + skip),
                        ctypes.c_size_t((raw.size - skip) // 4096 * 4096), MADV_HUGEPAGE)
    except (OSError, AttributeError):
        pass
    return raw[skip:skip + nbytes]


_LIBC: list = []


def _libc() -> ctypes.CDLL:
    if not _LIBC:
        _LIBC.append(ctypes.CDLL(None, use_errno=True))
    return _LIBC[0]
