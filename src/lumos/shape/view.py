"""Views: how a consumer reads a row-major buffer.

A `View` has a logical shape, an `index` expression giving the element offset
in the source buffer as a function of the axis variables z0..z{n-1}, and a
`valid` predicate of the same variables: where it is 0 the element reads as 0
(padding). Permute, expand, reshape, slice, flip, pad, select and repeat are
edits of these expressions; none of them copies data or adds a graph node.

One joint index expression (rather than one function per axis) keeps views
closed under reshape: splitting a padded, repeated or permuted-then-merged
axis is not a sum of per-axis functions.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass

from lumos.errors import ShapeError
from lumos.shape.expr import ONE, ZERO, Expr, IntLike, simplify, sym, z


def row_major_strides(shape: Sequence[Expr]) -> tuple[Expr, ...]:
    strides, acc = [], ONE
    for s in reversed(shape):
        strides.append(acc)
        acc = acc * s
    return tuple(reversed(strides))


@functools.lru_cache(maxsize=65536)
def _contiguous(shape: tuple[Expr, ...]) -> View:
    return View._build_contiguous(shape)


def numel(shape: Sequence[IntLike]) -> Expr:
    n = ONE
    for s in shape:
        n = n * sym(s)
    return n


@dataclass(frozen=True, slots=True)
class View:
    shape: tuple[Expr, ...]
    index: Expr
    valid: Expr = ONE

    @staticmethod
    def contiguous(shape: Sequence[IntLike]) -> View:
        return _contiguous(tuple(sym(s) for s in shape))

    @staticmethod
    def _build_contiguous(shape: tuple[Expr, ...]) -> View:
        idx = ZERO
        for i, st in enumerate(row_major_strides(shape)):
            idx = idx + z(i) * st
        return View(shape, simplify(idx, View(shape, idx).bounds()))  # size-1 axes drop out

    @property
    def ndim(self) -> int:
        return len(self.shape)

    def bounds(self) -> dict[str, tuple[IntLike, Expr]]:
        return {f"z{i}": (0, s - 1) for i, s in enumerate(self.shape)}

    def is_contiguous(self) -> bool:
        return self.valid is ONE and self.index is View.contiguous(self.shape).index

    def _new(self, shape: Sequence[Expr], index: Expr, valid: Expr) -> View:
        v = View(tuple(shape), index, valid)
        b = v.bounds()
        return View(v.shape, simplify(index, b), simplify(valid, b))

    def remap(self, shape: Sequence[IntLike], mapping: dict[str, IntLike]) -> View:
        """The general edit: a view of `shape` whose old axis variables are the given
        expressions of the new ones (sliding windows, rolls, diagonals)."""
        return self._subs([sym(s) for s in shape], mapping)

    def _subs(self, shape: Sequence[Expr], mapping: dict[str, IntLike]) -> View:
        return self._new(shape, self.index.subs(mapping), self.valid.subs(mapping))

    # -- edits ------------------------------------------------------------------
    def permute(self, perm: Sequence[int]) -> View:
        if sorted(perm) != list(range(self.ndim)):
            raise ShapeError(f"permute: {list(perm)} is not a permutation of {self.ndim} axes")
        m = {f"z{p}": z(i) for i, p in enumerate(perm)}
        return self._subs([self.shape[p] for p in perm], m)

    def expand(self, shape: Sequence[IntLike]) -> View:
        """Broadcast to `shape`: new leading axes, and size-1 axes stretched (index 0)."""
        shape = tuple(sym(s) for s in shape)
        k = len(shape) - self.ndim
        if k < 0:
            raise ShapeError(f"expand: cannot expand shape {self.shape} to fewer axes {shape}")
        mapping: dict[str, IntLike] = {}
        for i, s in enumerate(self.shape):
            if s is shape[i + k]:
                mapping[f"z{i}"] = z(i + k)
            elif s is ONE:
                mapping[f"z{i}"] = 0
            else:
                raise ShapeError(f"expand: shape {tuple(self.shape)} cannot broadcast to {shape}")
        return self._subs(shape, mapping)

    def reshape(self, shape: Sequence[IntLike]) -> View:
        shape = tuple(sym(s) for s in shape)
        if numel(shape) is not numel(self.shape):
            raise ShapeError(f"reshape: cannot view shape {self.shape} as {shape}")
        if self.is_contiguous() or numel(shape) is ZERO:  # nothing to read if empty
            return View.contiguous(shape)
        flat = View.contiguous(shape).index
        mapping: dict[str, IntLike] = {}
        strides = row_major_strides(self.shape)
        for i, (s, st) in enumerate(zip(self.shape, strides, strict=True)):
            e = flat // st
            mapping[f"z{i}"] = e if i == 0 else e % s
        return self._subs(shape, mapping)

    def slice(self, axis: int, start: IntLike, length: IntLike, step: int = 1) -> View:
        """Elements start, start+step, ... (`length` of them) along `axis`; step may be < 0."""
        shape = list(self.shape)
        shape[axis] = sym(length)
        return self._subs(shape, {f"z{axis}": sym(start) + z(axis) * step})

    def flip(self, axis: int) -> View:
        return self.slice(axis, self.shape[axis] - 1, self.shape[axis], -1)

    def pad(self, axis: int, before: IntLike, after: IntLike) -> View:
        """Zeros before and after along `axis` (both >= 0)."""
        before, after = sym(before), sym(after)
        shape = list(self.shape)
        shape[axis] = self.shape[axis] + before + after
        za = z(axis)
        inside = za.ge(before) & za.lt(before + self.shape[axis])
        m = {f"z{axis}": za - before}
        return self._new(shape, self.index.subs(m), self.valid.subs(m) & inside)

    def select(self, axis: int, i: IntLike) -> View:
        """Drop `axis`, reading position i along it."""
        m: dict[str, IntLike] = {f"z{axis}": i}
        m.update({f"z{j}": z(j - 1) for j in range(axis + 1, self.ndim)})
        return self._subs(self.shape[:axis] + self.shape[axis + 1:], m)

    def unsqueeze(self, axis: int) -> View:
        m = {f"z{j}": z(j + 1) for j in range(axis, self.ndim)}
        return self._subs(self.shape[:axis] + (ONE,) + self.shape[axis:], m)

    def repeat(self, axis: int, times: IntLike) -> View:
        """Tile `axis` `times` times (torch.Tensor.repeat along one axis)."""
        shape = list(self.shape)
        shape[axis] = self.shape[axis] * sym(times)
        if self.shape[axis] is ZERO:
            return self._subs(shape, {})
        return self._subs(shape, {f"z{axis}": z(axis) % self.shape[axis]})

    def at_flat(self, p: Expr) -> tuple[Expr, Expr]:
        """(index, valid) of the element at flat row-major logical position `p`."""
        if numel(self.shape) is ZERO:
            return ZERO, ZERO
        m: dict[str, IntLike] = {}
        for i, (s, st) in enumerate(zip(self.shape, row_major_strides(self.shape), strict=True)):
            e = p // st
            m[f"z{i}"] = e if i == 0 else e % s
        return self.index.subs(m), self.valid.subs(m)

    def __repr__(self) -> str:
        shape = ", ".join(map(repr, self.shape))
        v = "" if self.valid is ONE else f", valid={self.valid}"
        return f"View(({shape}), index={self.index}{v})"
