"""Buffer planning: offsets of the intermediates in one arena, reusing memory.

Decision-free: given each buffer's size and the span of kernels it lives through
(inclusive, so a kernel's output never overlaps its inputs), buffers are placed
largest first, each in the smallest gap that fits between the already placed
buffers whose lifetimes overlap its own (greedy best fit), else above them.
"""

from __future__ import annotations

from collections.abc import Sequence

ALIGN = 64


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
