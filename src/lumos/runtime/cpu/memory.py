"""The memory a program's arrays live in: arenas, weights as bound, and their stored
forms, on transparent huge pages where Linux offers them.

A decode step streams every weight once: a TLB entry per 2 MiB instead of per 4 KiB keeps
the products reading at the DRAM's rate (a 2048 x 640 int8 product, 180 of them in
turns: 17 GB/s on 4 KiB pages, 23 GB/s on huge ones; docs/performance.md). Weights are
small arrays each (a layer's matrices), so they are packed into shared chunks (`Slabs`)
that are large enough to be on huge pages at all.
"""

from __future__ import annotations

import ctypes
import functools
import sys

import numpy as np

from lumos.runtime.cpu.plan import ALIGN

HUGE_PAGE = 1 << 21  # x86-64's transparent huge page
MADV_HUGEPAGE = 14
CHUNK = 16 * HUGE_PAGE  # a Slabs chunk's bytes (at least): untouched pages cost nothing


def pages(nbytes: int) -> np.ndarray:
    """`nbytes` of uninitialized memory (uint8), aligned to ALIGN bytes; from a huge page
    boundary on, and advised to be on huge pages, when it spans one or more."""
    huge = nbytes >= HUGE_PAGE and sys.platform.startswith("linux")
    align = HUGE_PAGE if huge else ALIGN
    raw = np.empty(nbytes + align, np.uint8)
    skip = -raw.ctypes.data % align
    if huge:
        try:  # (advice only: where THP is off or unsupported, the memory is what it was)
            _libc().madvise(ctypes.c_void_p(raw.ctypes.data + skip),
                            ctypes.c_size_t((raw.size - skip) // 4096 * 4096), MADV_HUGEPAGE)
        except (OSError, AttributeError):
            pass
    return raw[skip:skip + nbytes]


class Slabs:
    """Arrays carved one after another out of chunks of `pages` (ALIGN-aligned each); a
    chunk is freed once no array of it is left (each holds it as its base)."""

    def __init__(self) -> None:
        self._chunk = np.empty(0, np.uint8)
        self._at = 0

    def take(self, nbytes: int) -> np.ndarray:
        """`nbytes` of uninitialized memory (uint8)."""
        size = -(-max(nbytes, 1) // ALIGN) * ALIGN
        if self._at + size > self._chunk.size:
            self._chunk, self._at = pages(max(CHUNK, -(-size // HUGE_PAGE) * HUGE_PAGE)), 0
        out = self._chunk[self._at:self._at + nbytes]
        self._at += size
        return out

    def copy(self, a: np.ndarray) -> np.ndarray:
        """A C-contiguous copy of `a` in this memory (same dtype and shape)."""
        out = self.take(a.nbytes).view(a.dtype).reshape(a.shape)
        out[...] = a
        return out


@functools.cache
def _libc() -> ctypes.CDLL:
    return ctypes.CDLL(None, use_errno=True)
