"""Bitwise operations on integers (and, or, xor, not, shifts), exact for every value.

The primitives have no bit operations, so an integer is taken apart into its 64 bits
along a new last axis (`bits`), combined bit by bit with bool logic, and put back
together with one SumReduce of the bits times their weights (`unbits`). Values are
widened to int64 first (sign-extended; the low bits of a result are the same as in the
narrow dtype) and cast back at the end. Taking a value apart costs a handful of nodes
on a tensor 64 times the input's size:

- the sign bit is x < 0; the other 63 bits are those of L = x + 2**63 for negative x
  (computed as (x + 2**62) + 2**62, which never overflows), x itself otherwise;
- bit 62 is L >= 2**62; with it removed, bit k < 62 is (M mod 2**(k+1)) >= 2**k.

Weights 1, 2, ..., 2**62 and -2**63 add up to the value in any order without overflow
(the positive part stays below 2**63). Shifts move bits along the axis with a Gather.
"""

from __future__ import annotations

from collections.abc import Callable

from lumos.dtype import DType, i64
from lumos.errors import DTypeError
from lumos.frontend import reduce as R
from lumos.frontend.index import gather
from lumos.frontend.tensor import (
    Tensor,
    TensorLike,
    add,
    cat,
    iota,
    lift,
    logical_and,
    logical_not,
    logical_or,
    logical_xor,
    lt,
    minimum,
    mul,
    node,
    scalar,
    sub,
    where,
)
from lumos.graph import Graph
from lumos.shape import z

BITS = 64
_TOP = 1 << 62


def _table(g: Graph, values: list[int]) -> Tensor:
    """A constant int64 vector: one Iota whose expression picks values[z0]."""
    k = z(0)
    e = sum((v * (k.ge(i) & k.lt(i + 1)) for i, v in enumerate(values) if v), start=0 * k)
    return iota(g, e, [len(values)], i64)


def _powers(x: Tensor, lo: int, n: int) -> Tensor:
    """The int64 vector 2**lo, ..., 2**(lo + n - 1), broadcast to x's shape + (n,)."""
    p = _table(x.graph, [1 << (lo + i) for i in range(n)])
    return p._with_view(p.view.expand((*x.view.shape, n)))


def bits(x: Tensor) -> Tensor:
    """The 64 bits of an integer tensor, least significant first: bool (..., 64)."""
    v = x.to(i64)
    neg = lt(v, 0)
    low = where(neg, add(add(v, _TOP), _TOP), v)  # x + 2**63 for negative x, in [0, 2**63)
    b62 = lt(_TOP - 1, low)
    rest = sub(low, mul(b62.to(i64), _TOP))
    col = rest._with_view(rest.view.unsqueeze(rest.ndim).expand((*rest.view.shape, 62)))
    low_bits = lt(_powers(x, 0, 62), add(node(x.graph, "Mod", [col, _powers(x, 1, 62)]), 1))
    return cat([low_bits, b62.unsqueeze(-1), neg.unsqueeze(-1)], -1)


def unbits(b: Tensor, dtype: DType) -> Tensor:
    """The integer whose 64 bits (least significant first) are b, cast to dtype."""
    lead = b[..., 0]
    top = scalar(b.graph, -(1 << 63), i64)
    weights = cat([_powers(lead, 0, 63), top._with_view(top.view.expand((*lead.view.shape, 1)))],
                  -1)
    return R.sum(where(b, weights, 0), -1).to(dtype)


def _binary(name: str, fn: Callable[[Tensor, Tensor], Tensor], a: TensorLike,
            b: TensorLike) -> Tensor:
    (x, y), dt = lift([a, b], op=name)
    if dt.is_float:
        raise DTypeError(f"{name}: needs integer or bool inputs, got {dt.name}")
    if dt.is_bool:
        return fn(x, y)
    return unbits(fn(bits(x), bits(y)), dt)


def bitwise_and(a: TensorLike, b: TensorLike) -> Tensor:
    return _binary("bitwise_and", logical_and, a, b)


def bitwise_or(a: TensorLike, b: TensorLike) -> Tensor:
    return _binary("bitwise_or", logical_or, a, b)


def bitwise_xor(a: TensorLike, b: TensorLike) -> Tensor:
    return _binary("bitwise_xor", logical_xor, a, b)


def bitwise_not(x: Tensor) -> Tensor:
    """~x = -1 - x (wrapping: ~INT_MIN = INT_MAX); bools: logical not."""
    if x.dtype.is_float:
        raise DTypeError(f"bitwise_not: needs an integer or bool input, got {x.dtype.name}")
    if x.dtype.is_bool:
        return logical_not(x)
    return add(mul(x, -1), -1)


def _count(name: str, a: TensorLike, b: TensorLike) -> tuple[Tensor, Tensor, DType]:
    """x as int64 and the shift count, 64 where PyTorch's result is the all-out one (a
    count below 0 or of the dtype's bits or more)."""
    (x, y), dt = lift([a, b], op=name)
    if not dt.is_int:
        raise DTypeError(f"{name}: needs integer inputs, got {dt.name}")
    s = y.to(i64)
    return x.to(i64), where(logical_or(lt(s, 0), lt(dt.bits - 1, s)), BITS, s), dt


def bitwise_left_shift(a: TensorLike, b: TensorLike) -> Tensor:
    """x * 2**s, wrapping (as the C shift of the unsigned value); 0 when all bits leave."""
    x, s, dt = _count("bitwise_left_shift", a, b)
    table = _table(x.graph, [1 << k for k in range(63)] + [-(1 << 63), 0])  # 2**s, wrapped
    return mul(x, node(x.graph, "Gather", [s, table])).to(dt)


def bitwise_right_shift(a: TensorLike, b: TensorLike) -> Tensor:
    """Bits moved down: out bit k is bit min(k + s, 63), the sign filling in from the
    top (narrow dtypes are sign-extended in int64, so this holds for them too)."""
    x, s, dt = _count("bitwise_right_shift", a, b)
    bx = bits(x)
    k = iota(x.graph, z(bx.ndim - 1), bx.view.shape, i64)
    src = minimum(add(k, s.unsqueeze(-1)), BITS - 1)
    return unbits(gather(bx, -1, src), dt)


for _fn in (bitwise_and, bitwise_or, bitwise_xor, bitwise_not, bitwise_left_shift,
            bitwise_right_shift):
    setattr(Tensor, _fn.__name__, _fn)
