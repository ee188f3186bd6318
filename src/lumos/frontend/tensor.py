"""The Tensor API: a handle (graph, node, view, dtype) whose methods record nodes.

Every operation is derived from the fifteen primitives; movement (permute,
reshape, slice, pad, broadcast) edits the view and adds no node. Names and
semantics follow PyTorch: broadcasting, type promotion, negative dims.

Families of ops live in sibling modules and attach themselves with
`@tensor_method`; this module holds the mechanics, elementwise math,
comparisons and movement.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any, TypeVar, Union

from lumos.dtype import DType, as_dtype, bool_, f32, i32, i64, result_type
from lumos.errors import DTypeError, ShapeError
from lumos.graph import Graph
from lumos.shape import Expr, View, sym, z
from lumos.shape.expr import ONE, ZERO, IntLike
from lumos.shape.view import numel as _numel

Scalar = bool | int | float
TensorLike = Union["Tensor", bool, int, float]
F = TypeVar("F", bound=Callable[..., Any])


def tensor_method(fn: F) -> F:
    """Attach `fn` to Tensor under its own name (it takes the tensor first)."""
    setattr(Tensor, fn.__name__, fn)
    return fn


class Tensor:
    """A lazy value in a `Graph`: node `node` read through `view`."""

    __slots__ = ("graph", "node", "view", "dtype")

    def __init__(self, graph: Graph, node: int, view: View, dtype: DType) -> None:
        self.graph, self.node, self.view, self.dtype = graph, node, view, dtype

    # -- basics -----------------------------------------------------------------
    @property
    def shape(self) -> tuple[int | Expr, ...]:
        return tuple(s.value if s.is_num else s for s in self.view.shape)

    def size(self, dim: int | None = None) -> Any:
        return self.shape if dim is None else self.shape[self._axis(dim)]

    @property
    def ndim(self) -> int:
        return self.view.ndim

    def dim(self) -> int:
        return self.view.ndim

    def numel(self) -> int | Expr:
        n = _numel(self.view.shape)
        return n.value if n.is_num else n

    def __len__(self) -> int:
        if not self.ndim:
            raise TypeError("len() of a 0-d tensor")
        s = self.view.shape[0]
        if not s.is_num:
            raise TypeError(f"len() of a tensor with symbolic first dim {s}")
        return s.value

    def __repr__(self) -> str:
        shape = ", ".join(map(repr, self.view.shape))
        return f"Tensor(%{self.node}, shape=({shape}), dtype={self.dtype.name})"

    def __bool__(self) -> bool:
        raise TypeError("a lumos Tensor is lazy: it has no truth value while the graph is built")

    __hash__ = object.__hash__

    def output(self, persist: bool = False) -> Tensor:
        """Mark this value as a graph result; returns self (read it with program.get)."""
        self.graph.output(self.node, self.view, persist)
        return self

    def _axis(self, d: int, ndim: int | None = None) -> int:
        n = self.ndim if ndim is None else ndim
        if not -max(n, 1) <= d < max(n, 1):
            raise ShapeError(f"dim {d} is out of range for a tensor of {self.ndim} dims "
                             f"with shape {self.shape}")
        return d % max(n, 1)

    def _with_view(self, v: View) -> Tensor:
        return Tensor(self.graph, self.node, v, self.dtype)

    # -- conversion --------------------------------------------------------------
    def to(self, dtype: Any) -> Tensor:
        dt = as_dtype(dtype)
        if dt is self.dtype:
            return self
        return node(self.graph, "Cast", [self], dtype=dt)

    cast = to

    def float(self) -> Tensor:
        return self.to(f32)

    def int(self) -> Tensor:
        return self.to(i32)

    def long(self) -> Tensor:
        return self.to(i64)

    def bool(self) -> Tensor:
        return self.to(bool_)

    def contiguous(self) -> Tensor:
        """A copy into a fresh row-major buffer (x * 1 is exact for every dtype)."""
        if self.view.is_contiguous() and self.view.shape == self.graph.nodes[self.node].shape:
            return self
        return node(self.graph, "Mul", [self, full_like(self, 1)])

    # -- movement: view edits, no nodes -------------------------------------------
    def reshape(self, *shape: Any) -> Tensor:
        shape = _shape_args(shape)
        known = [s for s in shape if not (isinstance(s, int) and s == -1)]
        if len(known) < len(shape) - 1:
            raise ShapeError(f"reshape: only one -1 allowed in {tuple(shape)}")
        total = _numel(self.view.shape)
        if len(known) == len(shape) - 1:
            rest = _numel([sym(s) for s in known])
            if rest is ZERO:
                raise ShapeError(f"reshape: cannot view shape {self.shape} as {tuple(shape)}: "
                                 "the size of -1 is ambiguous for 0 elements")
            inferred = total // rest
            if inferred * rest is not total:
                raise ShapeError(f"reshape: cannot view shape {self.shape} as {tuple(shape)}")
            shape = [inferred if isinstance(s, int) and s == -1 else s for s in shape]
        shp = self.graph._shape(shape)
        if _numel(shp) is not total:
            raise ShapeError(f"reshape: cannot view shape {self.shape} "
                             f"({total} elements) as {tuple(shape)}")
        return self._with_view(self.view.reshape(shp))

    view_as_shape = reshape

    def view_(self, *shape: Any) -> Tensor:
        return self.reshape(*shape)

    def flatten(self, start_dim: int = 0, end_dim: int = -1) -> Tensor:
        if self.ndim == 0:
            return self.reshape(1)
        a, b = self._axis(start_dim), self._axis(end_dim)
        s = self.view.shape
        return self.reshape(*s[:a], _numel(s[a:b + 1]), *s[b + 1:])

    def unflatten(self, dim: int, sizes: Sequence[Any]) -> Tensor:
        d = self._axis(dim)
        s = self.view.shape
        flat = self._with_view(View.contiguous((s[d],))).reshape(*sizes)  # resolves a -1
        return self.reshape(*s[:d], *flat.view.shape, *s[d + 1:])

    def permute(self, *dims: Any) -> Tensor:
        dims = _shape_args(dims)
        perm = [self._axis(d) for d in dims]
        if sorted(perm) != list(range(self.ndim)):
            raise ShapeError(f"permute: {tuple(dims)} is not a permutation of "
                             f"{self.ndim} dims (shape {self.shape})")
        return self._with_view(self.view.permute(perm))

    def transpose(self, d0: int, d1: int) -> Tensor:
        perm = list(range(self.ndim))
        a, b = self._axis(d0), self._axis(d1)
        perm[a], perm[b] = perm[b], perm[a]
        return self._with_view(self.view.permute(perm))

    swapaxes = transpose

    @property
    def T(self) -> Tensor:
        return self.permute(*reversed(range(self.ndim)))

    @property
    def mT(self) -> Tensor:
        return self.transpose(-2, -1)

    def t(self) -> Tensor:
        if self.ndim > 2:
            raise ShapeError(f"t() expects <= 2 dims, got shape {self.shape}")
        return self.T

    def unsqueeze(self, dim: int) -> Tensor:
        d = self._axis(dim, self.ndim + 1)
        return self._with_view(self.view.unsqueeze(d))

    def squeeze(self, dim: int | Sequence[int] | None = None) -> Tensor:
        if dim is None:
            dims = [i for i, s in enumerate(self.view.shape) if s is ONE]
        else:
            dims = [self._axis(d) for d in ([dim] if isinstance(dim, int) else dim)]
        v = self.view
        for d in sorted(set(dims), reverse=True):
            if v.shape[d] is ONE:
                v = v.select(d, 0)
        return self._with_view(v)

    def expand(self, *shape: Any) -> Tensor:
        shape = _shape_args(shape)
        k = len(shape) - self.ndim
        if k < 0:
            raise ShapeError(f"expand: shape {tuple(shape)} has fewer dims than {self.shape}")
        if any(isinstance(s, int) and s == -1 for s in shape[:k]):
            raise ShapeError(f"expand: -1 in a new leading dim of {tuple(shape)} "
                             f"(shape {self.shape})")
        full = [self.view.shape[i - k] if (isinstance(s, int) and s == -1) else s
                for i, s in enumerate(shape)]
        try:
            return self._with_view(self.view.expand(self.graph._shape(full)))
        except ShapeError:
            raise ShapeError(f"expand: shape {self.shape} cannot broadcast to "
                             f"{tuple(shape)}") from None

    def broadcast_to(self, *shape: Any) -> Tensor:
        return self.expand(*shape)

    def expand_as(self, other: Tensor) -> Tensor:
        return self.expand(*other.view.shape)

    def narrow(self, dim: int, start: IntLike, length: IntLike) -> Tensor:
        d = self._axis(dim)
        n, st, ln = self.view.shape[d], sym(start), sym(length)
        if st.is_num and st.value < 0:  # counts from the end, as in PyTorch
            st = st + n
        if n.is_num and st.is_num and ln.is_num and not (
                0 <= st.value and 0 <= ln.value and st.value + ln.value <= n.value):
            raise ShapeError(f"narrow: start {start} and length {length} do not fit dim {d} "
                             f"of shape {self.shape}")
        return self._with_view(self.view.slice(d, st, ln, 1))

    def flip(self, *dims: Any) -> Tensor:
        v = self.view
        for d in _shape_args(dims):
            v = v.flip(self._axis(d))
        return self._with_view(v)

    def roll(self, shifts: int | Sequence[int], dims: int | Sequence[int] | None = None) -> Tensor:
        if dims is None:
            return self.flatten().roll(shifts, 0).reshape(*self.view.shape)
        shifts_ = [shifts] if isinstance(shifts, int) else list(shifts)
        dims_ = [dims] if isinstance(dims, int) else list(dims)
        if len(shifts_) != len(dims_):
            raise ShapeError(f"roll: {len(shifts_)} shifts for {len(dims_)} dims")
        v = self.view
        for s, d in zip(shifts_, dims_, strict=True):
            a = self._axis(d)
            n = v.shape[a]
            if n is ZERO:
                continue
            m = {f"z{a}": (z(a) + n - (s % n if n.is_num else s)) % n}
            v = v.remap(v.shape, m)
        return self._with_view(v)

    def repeat(self, *sizes: Any) -> Tensor:
        sizes = _shape_args(sizes)
        if len(sizes) < self.ndim:
            raise ShapeError(f"repeat: {len(sizes)} sizes for a {self.ndim}-dim tensor")
        v = self.view
        for _ in range(len(sizes) - self.ndim):
            v = v.unsqueeze(0)
        for a, k in enumerate(sizes):
            if not (isinstance(k, int) and k == 1):
                v = v.repeat(a, k)
        return self._with_view(v)

    def pad(self, pad: Sequence[IntLike], value: Scalar = 0) -> Tensor:
        """torch.nn.functional.pad, constant mode: (last_before, last_after, ...)."""
        if len(pad) % 2 or len(pad) // 2 > self.ndim:
            raise ShapeError(f"pad: {len(pad)} pad sizes for a {self.ndim}-dim tensor")
        x = self
        for i in range(len(pad) // 2):
            a = self.ndim - 1 - i
            before, after = sym(pad[2 * i]), sym(pad[2 * i + 1])
            for side in ("before", "after"):  # negative pads crop
                amt = before if side == "before" else after
                if amt.is_num and amt.value < 0:
                    n = x.view.shape[a]
                    start = -amt.value if side == "before" else 0
                    x = x._with_view(x.view.slice(a, start, n + amt, 1))
            b = before if not (before.is_num and before.value < 0) else ZERO
            e = after if not (after.is_num and after.value < 0) else ZERO
            if b is ZERO and e is ZERO:
                continue
            inner = x.view.shape[a]
            padded = x._with_view(x.view.pad(a, b, e))
            if value != 0:
                c = scalar(self.graph, value, x.dtype)
                za = z(a)
                outside = za.lt(b) | za.ge(b + inner)
                v = c.view.expand(padded.view.shape)
                fill = c._with_view(View(v.shape, v.index, outside))
                padded = node(self.graph, "Add", [padded, fill])
            x = padded
        return x

    # -- elementwise arithmetic ------------------------------------------------------
    def __add__(self, o: TensorLike) -> Tensor:
        return add(self, o)

    def __radd__(self, o: TensorLike) -> Tensor:
        return add(o, self)

    def __sub__(self, o: TensorLike) -> Tensor:
        return sub(self, o)

    def __rsub__(self, o: TensorLike) -> Tensor:
        return sub(o, self)

    def __mul__(self, o: TensorLike) -> Tensor:
        return mul(self, o)

    def __rmul__(self, o: TensorLike) -> Tensor:
        return mul(o, self)

    def __truediv__(self, o: TensorLike) -> Tensor:
        return div(self, o)

    def __rtruediv__(self, o: TensorLike) -> Tensor:
        return div(o, self)

    def __floordiv__(self, o: TensorLike) -> Tensor:
        return floor_divide(self, o)

    def __rfloordiv__(self, o: TensorLike) -> Tensor:
        return floor_divide(o, self)

    def __mod__(self, o: TensorLike) -> Tensor:
        return remainder(self, o)

    def __rmod__(self, o: TensorLike) -> Tensor:
        return remainder(o, self)

    def __pow__(self, o: TensorLike) -> Tensor:
        return pow(self, o)

    def __rpow__(self, o: TensorLike) -> Tensor:
        return pow(o, self)

    def __neg__(self) -> Tensor:
        return neg(self)

    def __abs__(self) -> Tensor:
        return abs(self)

    def __invert__(self) -> Tensor:
        if not self.dtype.is_bool:
            raise DTypeError(f"~ is only supported on bool tensors, got {self.dtype.name}")
        return logical_not(self)

    def __and__(self, o: TensorLike) -> Tensor:
        return _bool_op(self, o, logical_and, "&")

    __rand__ = __and__

    def __or__(self, o: TensorLike) -> Tensor:
        return _bool_op(self, o, logical_or, "|")

    __ror__ = __or__

    def __xor__(self, o: TensorLike) -> Tensor:
        return _bool_op(self, o, logical_xor, "^")

    __rxor__ = __xor__

    def __lt__(self, o: TensorLike) -> Tensor:
        return lt(self, o)

    def __le__(self, o: TensorLike) -> Tensor:
        return le(self, o)

    def __gt__(self, o: TensorLike) -> Tensor:
        return gt(self, o)

    def __ge__(self, o: TensorLike) -> Tensor:
        return ge(self, o)

    def __eq__(self, o: TensorLike) -> Tensor:  # type: ignore[override]
        return eq(self, o)

    def __ne__(self, o: TensorLike) -> Tensor:  # type: ignore[override]
        return ne(self, o)


# -- node construction ------------------------------------------------------------------

def node(g: Graph, op: str, inputs: Sequence[Tensor], **fields: Any) -> Tensor:
    """Add one HLIR node reading `inputs` through their views; returns its result."""
    for t in inputs:
        if t.graph is not g:
            raise ValueError(f"{op}: tensors from different graphs")
    nid = g.add(op, [t.node for t in inputs], [t.view for t in inputs], **fields)
    n = g.nodes[nid]
    return Tensor(g, nid, View.contiguous(n.shape), n.dtype)


def scalar(g: Graph, value: Scalar, dtype: Any) -> Tensor:
    """A 0-d constant (broadcast it with views). Integers wrap into the dtype's range, as
    PyTorch wraps a Python scalar combined with an integer tensor (i8 * 200 == i8 * -56)."""
    dt = as_dtype(dtype)
    v: Scalar = bool(value) if dt.is_bool else (int(value) if dt.is_int else float(value))
    if dt.is_int:
        lo = -(1 << (dt.bits - 1)) if dt.signed else 0
        v = (v - lo) % (1 << dt.bits) + lo
    return node(g, "Constant", [], shape=(), dtype=dt, value=v)


def dim_value(g: Graph, e: IntLike, dtype: Any = f32) -> Tensor:
    """A 0-d tensor holding the value of a (possibly symbolic) integer expression."""
    e = sym(e)
    if e.is_num:
        return scalar(g, e.value, dtype)
    return node(g, "Iota", [], shape=(), dtype=i64, expr=e).to(dtype)


def iota(g: Graph, expr: IntLike, shape: Sequence[IntLike], dtype: Any = i64) -> Tensor:
    """Integers computed from the axis variables z0..z{n-1} of `shape`."""
    return node(g, "Iota", [], shape=g._shape(shape), dtype=as_dtype(dtype), expr=sym(expr))


def _graph_of(*xs: Any) -> Graph:
    for x in xs:
        if isinstance(x, Tensor):
            return x.graph
    raise TypeError("at least one operand must be a lumos Tensor")


def _scalar_dtype(x: Scalar) -> DType:
    if isinstance(x, bool):
        return bool_
    if isinstance(x, int):
        return i64
    if isinstance(x, float):
        return f32
    raise TypeError(f"unsupported operand {x!r} of type {type(x).__name__}")


def promote_types(*xs: TensorLike) -> DType:
    dimmed = [x.dtype for x in xs if isinstance(x, Tensor) and x.ndim > 0]
    zero = [x.dtype for x in xs if isinstance(x, Tensor) and x.ndim == 0]
    scalars = [_scalar_dtype(x) for x in xs if not isinstance(x, Tensor)]
    return result_type(dimmed, zero, scalars)


def broadcast_shapes(*shapes: Sequence[Expr], op: str = "broadcast") -> tuple[Expr, ...]:
    n = max((len(s) for s in shapes), default=0)
    out: list[Expr] = []
    for i in range(n):
        size: Expr = ONE
        for s in shapes:
            j = len(s) - n + i
            if j < 0:
                continue
            d = sym(s[j])
            if d is ONE or d is size:
                continue
            if size is ONE:
                size = d
            else:
                fmt = " and ".join(str(tuple(sh)) for sh in shapes)
                raise ShapeError(f"{op}: shapes {fmt} do not broadcast (dim {i}: {size} vs {d})")
        out.append(size)
    return tuple(out)


def lift(xs: Sequence[TensorLike], dtype: DType | None = None,
         op: str = "op") -> tuple[list[Tensor], DType]:
    """Tensors of one promoted dtype (Python scalars become constants), broadcast views."""
    g = _graph_of(*xs)
    tensors = [x for x in xs if isinstance(x, Tensor)]
    if any(t.graph is not g for t in tensors):
        raise ValueError(f"{op}: tensors from different graphs")
    shape = broadcast_shapes(*(t.view.shape for t in tensors), op=op)  # before adding nodes
    dt = dtype or promote_types(*xs)
    ts = [x.to(dt) if isinstance(x, Tensor) else scalar(g, x, dt) for x in xs]
    return [t._with_view(t.view.expand(shape)) for t in ts], dt


def _binary(op: str, a: TensorLike, b: TensorLike, name: str,
            dtype: DType | None = None) -> Tensor:
    (x, y), _ = lift([a, b], dtype, name)
    return node(x.graph, op, [x, y])


def _floating(x: Tensor) -> Tensor:
    return x if x.dtype.is_float else x.to(f32)


def _half_safe(fn: Callable[..., Tensor]) -> Callable[..., Tensor]:
    """Compute a derived float op of f16/bf16 inputs in f32 (as PyTorch does), then round."""

    def wrapped(x: Tensor, *args: Any, **kw: Any) -> Tensor:
        x = _floating(x)
        if x.dtype.bits < 32:
            return fn(x.to(f32), *args, **kw).to(x.dtype)
        return fn(x, *args, **kw)

    wrapped.__name__, wrapped.__doc__ = fn.__name__, fn.__doc__
    return wrapped


# -- arithmetic -----------------------------------------------------------------------

def add(a: TensorLike, b: TensorLike, alpha: Scalar = 1) -> Tensor:
    if alpha != 1:
        b = mul(b, alpha)
    return _binary("Add", a, b, "add")


def mul(a: TensorLike, b: TensorLike) -> Tensor:
    return _binary("Mul", a, b, "mul")


def neg(x: Tensor) -> Tensor:
    if x.dtype.is_bool:
        raise DTypeError("neg: bool tensors cannot be negated; use ~ or logical_not")
    return mul(x, -1)


def sub(a: TensorLike, b: TensorLike, alpha: Scalar = 1) -> Tensor:
    if promote_types(a, b).is_bool:
        raise DTypeError("sub: subtracting bool tensors is not supported; use ^ or logical_xor")
    dt = promote_types(a, b)
    if isinstance(a, Tensor) and isinstance(b, Tensor):  # validate before adding nodes
        broadcast_shapes(a.view.shape, b.view.shape, op="sub")
    if not isinstance(b, Tensor):
        return add(a, -alpha * b)
    return add(a, mul(b.to(dt), -alpha))  # negate before broadcasting: no full-size constant


def div(a: TensorLike, b: TensorLike, rounding_mode: str | None = None) -> Tensor:
    if rounding_mode == "floor":
        return floor_divide(a, b)
    if rounding_mode == "trunc":
        (x, y), dt = lift([a, b], op="div")
        if dt.is_float:
            return trunc(div(x, y))
        q = trunc(div(x.to(_wide_float(dt)), y.to(_wide_float(dt))))
        return q.to(dt)
    if rounding_mode is not None:
        raise ValueError(f"div: rounding_mode must be None, 'floor' or 'trunc', not "
                         f"{rounding_mode!r}")
    dt = promote_types(a, b)  # integer operands divide as f32, Python scalars unwrapped
    (x, y), _ = lift([a, b], dt if dt.is_float else f32, "div")
    if x.dtype.bits < 32:
        return mul(x.to(f32), reciprocal(y.to(f32))).to(x.dtype)
    return mul(x, reciprocal(y))


true_divide = div


def _wide_float(dt: DType) -> DType:
    from lumos.dtype import f64

    return f64 if dt.bits >= 32 else f32


def fmod(a: TensorLike, b: TensorLike) -> Tensor:
    """C fmod / %: the remainder has the sign of the dividend (the Mod primitive)."""
    (x, y), _ = lift([a, b], op="fmod")
    return node(x.graph, "Mod", [x, y])


def remainder(a: TensorLike, b: TensorLike) -> Tensor:
    """Python-style modulo: the result has the sign of the divisor (torch.remainder)."""
    (x, y), _ = lift([a, b], op="remainder")
    r = node(x.graph, "Mod", [x, y])
    fix = logical_and(ne(r, 0), ne(lt(r, 0), lt(y, 0)))
    return where(fix, add(r, y), r)  # exact: 5 % inf is 5


def floor_divide(a: TensorLike, b: TensorLike) -> Tensor:
    """Division rounded toward -inf (torch.floor_divide / //)."""
    if promote_types(a, b).is_bool:
        raise DTypeError("floor_divide: bool tensors are not supported")
    (x, y), dt = lift([a, b], op="floor_divide")
    if dt.is_int:  # the truncated quotient (x - fmod(x, y) cannot overflow), floored
        w = _wide_float(dt)
        m = fmod(x, y)
        q = round(div(sub(x, m).to(w), y.to(w))).to(dt)
        return sub(q, logical_and(ne(m, 0), ne(lt(m, 0), lt(y, 0))).to(dt))
    # torch's div_floor: (a - fmod(a, b)) / b, corrected toward -inf, then rounded; a / 0
    # is the IEEE quotient (+-inf or nan)
    m = fmod(x, y)
    d = div(sub(x, m), y)
    d = sub(d, logical_and(ne(m, 0), ne(lt(y, 0), lt(m, 0))).to(dt))
    f = floor(d)
    return where(eq(y, 0), div(x, y), add(f, gt(sub(d, f), 0.5).to(dt)))


def reciprocal(x: Tensor) -> Tensor:
    return node(x.graph, "Recip", [_floating(x)])


def sqrt(x: Tensor) -> Tensor:
    return node(x.graph, "Sqrt", [_floating(x)])


def rsqrt(x: Tensor) -> Tensor:
    return reciprocal(sqrt(x))


def exp2(x: Tensor) -> Tensor:
    return node(x.graph, "Exp2", [_floating(x)])


def log2(x: Tensor) -> Tensor:
    return node(x.graph, "Log2", [_floating(x)])


def sin(x: Tensor) -> Tensor:
    return node(x.graph, "Sin", [_floating(x)])


@_half_safe
def exp(x: Tensor) -> Tensor:
    return exp2(mul(x, 1.0 / math.log(2.0)))


@_half_safe
def log(x: Tensor) -> Tensor:
    return mul(log2(x), math.log(2.0))


@_half_safe
def expm1(x: Tensor) -> Tensor:
    """exp(x) - 1, accurate near 0: Kahan's (w - 1) * x / log(w) with w = exp(x)."""
    w = exp(x)
    d = sub(w, 1.0)
    near0 = where(eq(w, 1.0), x, div(mul(d, x), log(w)))
    return where(lt(abs(x), 1.0), near0, d)


@_half_safe
def log1p(x: Tensor) -> Tensor:
    """log(1 + x), accurate near 0: Goldberg's log(w) * x / (w - 1) with w = 1 + x."""
    w = add(x, 1.0)
    d = sub(w, 1.0)
    near0 = where(eq(d, 0.0), x, div(mul(log(w), x), d))
    return where(lt(abs(x), 1.0), near0, log(w))


@_half_safe
def cos(x: Tensor) -> Tensor:
    return sin(add(x, math.pi / 2))


@_half_safe
def sigmoid(x: Tensor) -> Tensor:
    return reciprocal(add(exp(neg(x)), 1.0))


@_half_safe
def tanh(x: Tensor) -> Tensor:
    """sign(x) * (1 - e) / (1 + e) with e = exp(-2|x|), through expm1 (exact near 0)."""
    m = expm1(mul(abs(x), -2.0))
    return mul(sign(x), div(neg(m), add(m, 2.0)))


@_half_safe
def silu(x: Tensor) -> Tensor:
    return mul(x, sigmoid(x))


# Chebyshev coefficients of log(erfc(z) / t) + z*z in ty = 4t - 2, t = 2 / (2 + z), z >= 0
# (Numerical Recipes 3rd ed., Erf::erfccheb). Truncating after n terms errs by about the
# next coefficient: 28 terms for f64 (~1e-17), 13 for f32 and below (~1e-8).
_ERFC_CHEB = (
    -1.3026537197817094, 0.6419697923564902, 0.019476473204185836, -0.009561514786808632,
    -0.0009465953444820369, 0.00036683949785276145, 4.252332480690777e-05,
    -2.0278578112534242e-05, -1.6242900046470256e-06, 1.3036558355805232e-06,
    1.5626441722066142e-08, -8.523809591492654e-08, 6.5290544390988515e-09,
    5.059343495551469e-09, -9.91364156493033e-10, -2.273651222931836e-10,
    9.646791102015527e-11, 2.3940380830391146e-12, -6.886027526497553e-12,
    8.944879273090725e-13, 3.130921399342958e-13, -1.1270822361367252e-13,
    3.810905255189232e-16, 7.106097613609237e-15, -1.5230282014571043e-15,
    -9.457494571291233e-17, 1.210237189224279e-16, -2.816663087747177e-17)


@_half_safe
def erfc(x: Tensor) -> Tensor:
    """erfc(|x|) = t * exp(-x*x + f(ty)), f a Chebyshev series summed by Clenshaw's
    recurrence; erfc(x) = 2 - erfc(-x) for x < 0. Accurate to the dtype (f32 or f64)."""
    a = abs(x)
    t = reciprocal(add(mul(a, 0.5), 1.0))
    ty = sub(mul(t, 4.0), 2.0)
    n = 28 if x.dtype.bits == 64 else 13
    d: Tensor | float = _ERFC_CHEB[n - 1]
    dd: Tensor | float = 0.0
    for c in reversed(_ERFC_CHEB[1:n - 1]):
        d, dd = add(sub(mul(ty, d), dd), c), d
    f = sub(mul(add(mul(ty, d), _ERFC_CHEB[0]), 0.5), dd)
    r = mul(t, exp(sub(f, mul(a, a))))
    return where(lt(x, 0.0), sub(2.0, r), r)


# erf(x) = x * sum_k a_k x^(2k): the Taylor series, used in f64 where |x| < 0.5 (13 terms
# reach f64 precision there), so that tiny x keep their relative precision
_ERF_TAYLOR = tuple((-1) ** k * 2 / math.sqrt(math.pi) / (math.factorial(k) * (2 * k + 1))
                    for k in range(13))


# erf in f32: below |x| = 0.921875, x + x * A(x^2) (A fits erf(x)/x - 1); above it
# 1 - 2^B(|x|) (B fits log2(erfc), |x| clamped at 4, where erf rounds to 1). Least-squares
# fits on Chebyshev nodes, rounded to f32: within 1.3 ulp of erf in f32 arithmetic. Half
# the ops of the series beside erfc's Chebyshev sum, as f64 computes it
_ERF_A = (0.12837916612625122, -0.37612634897232056, 0.11283694207668304,
          -0.02685934118926525, 0.005200905259698629, -0.0008141392027027905,
          8.365006215171888e-05)
_ERF_B = (0.0005033545312471688, -1.6307953596115112, -0.9110690951347351,
          -0.1593719720840454, 0.03853427618741989, -0.007065113168209791,
          0.0009217324550263584, -7.799024024279788e-05, 3.6023122902406612e-06,
          -5.757057053301651e-08)


def _horner(x: Tensor, coefficients: Sequence[float]) -> Tensor:
    r: Tensor | float = coefficients[-1]
    for c in reversed(coefficients[:-1]):
        r = add(mul(x, r), c)
    assert isinstance(r, Tensor)
    return r


@_half_safe
def erf(x: Tensor) -> Tensor:
    x2, a = mul(x, x), abs(x)
    if x.dtype.bits == 64:
        y = where(lt(a, 0.5), mul(x, _horner(x2, _ERF_TAYLOR)), sub(1.0, erfc(x)))
    else:
        near = add(x, mul(x, _horner(x2, _ERF_A)))
        e = exp2(_horner(minimum(a, 4.0), _ERF_B))  # (past 4 the fit turns: clamped)
        # signed by a select of constants: a select between 1 - e and e - 1 would have
        # its fused kernel compute e for each operand
        far = mul(sub(1.0, e), where(lt(x, 0.0), -1.0, 1.0))
        y = where(lt(a, 0.921875), near, far)
    return record_vjp(y, x, lambda g: mul(g, mul(exp(mul(x2, -1.0)), 2.0 / math.sqrt(math.pi))))


@_half_safe
def gelu(x: Tensor, approximate: str = "none") -> Tensor:
    if approximate == "tanh":
        inner = mul(add(x, mul(pow(x, 3), 0.044715)), math.sqrt(2.0 / math.pi))
        return mul(mul(x, 0.5), add(tanh(inner), 1.0))
    if approximate != "none":
        raise ValueError(f"gelu: approximate must be 'none' or 'tanh', not {approximate!r}")
    cdf = mul(erfc(mul(x, -1.0 / math.sqrt(2.0))), 0.5)  # Phi(x)
    pdf = lambda: mul(exp(mul(mul(x, x), -0.5)), 1.0 / math.sqrt(2.0 * math.pi))  # noqa: E731
    return record_vjp(mul(x, cdf), x, lambda g: mul(g, add(cdf, mul(x, pdf()))))


def record_vjp(y: Tensor, x: Tensor, vjp: Callable[[Tensor], Tensor]) -> Tensor:
    """Record (in `graph.vjps`, for lumos.autograd) that y, a whole node and a function of
    x alone, has gradient vjp(g) with respect to x (of x's shape) for a gradient g of y;
    returns y. Reverse mode through a composite op's formulation (gelu's 13-step series
    and selects, softmax's max shift compared back with isnan checks) stores and reads
    back every step; the closed form is a few ops."""
    if y.view == View.contiguous(y.graph.nodes[y.node].shape):
        y.graph.vjps[y.node] = (x, vjp)
    return y


@_half_safe
def softplus(x: Tensor, beta: float = 1.0, threshold: float = 20.0) -> Tensor:
    bx = mul(x, beta)
    soft = div(log1p(exp(bx)), beta)
    return where(gt(bx, threshold), x, soft)


def relu(x: Tensor) -> Tensor:
    """max(x, 0) as one MaxReduce over [x, 0] (the 0 is padding: exact for inf and NaN)."""
    if x.dtype.is_bool:
        return x
    v = x.view.unsqueeze(0).pad(0, 0, 1)
    return node(x.graph, "MaxReduce", [x._with_view(v)], axis=0)


def maximum(a: TensorLike, b: TensorLike) -> Tensor:
    """Elementwise max, NaN-propagating: one MaxReduce over the stacked pair."""
    (x, y), _ = lift([a, b], op="maximum")  # (IEEE leaves the sign of max(-0.0, 0.0) open)
    return node(x.graph, "MaxReduce", [stack([x, y], 0, signed_zeros=False)], axis=0)


def minimum(a: TensorLike, b: TensorLike) -> Tensor:
    (x, y), dt = lift([a, b], op="minimum")
    if dt.is_bool:
        return logical_and(x, y)
    if dt.is_int:  # -1 - x reverses the order without overflow (-x wraps for 0 and -128)
        return sub(-1, maximum(sub(-1, x), sub(-1, y)))
    return neg(maximum(neg(x), neg(y)))


def clamp(x: Tensor, min: TensorLike | None = None, max: TensorLike | None = None) -> Tensor:
    if min is None and max is None:
        raise ValueError("clamp: at least one of min and max must be given")
    if min is not None:
        x = maximum(x, min)
    if max is not None:
        x = minimum(x, max)
    return x


clip = clamp


def abs(x: Tensor) -> Tensor:
    if x.dtype.is_bool or not x.dtype.signed:
        return x
    return maximum(x, neg(x))


def sign(x: Tensor) -> Tensor:
    if x.dtype.is_bool:
        return x
    return sub(gt(x, 0).to(x.dtype), lt(x, 0).to(x.dtype))  # sign(NaN) = 0, as in torch


def trunc(x: Tensor) -> Tensor:
    if not x.dtype.is_float:
        return x
    big = 2.0 ** (52 if x.dtype.bits == 64 else 23 if x.dtype.bits == 32 else 10)
    # fmod(x, 1) is NaN for +-inf; such magnitudes are integers already
    return where(lt(abs(x), big), sub(x, fmod(x, 1.0)), x)


def floor(x: Tensor) -> Tensor:
    if not x.dtype.is_float:
        return x
    t = trunc(x)
    return sub(t, lt(x, t).to(x.dtype))


def ceil(x: Tensor) -> Tensor:
    if not x.dtype.is_float:
        return x
    t = trunc(x)
    return add(t, lt(t, x).to(x.dtype))


def round(x: Tensor, decimals: int = 0) -> Tensor:
    """Round half to even (torch.round)."""
    if not x.dtype.is_float:
        return x
    if decimals:
        s = 10.0 ** decimals
        return div(round(mul(x, s)), s)
    f = floor(x)
    d = sub(x, f)
    odd = ne(fmod(f, 2.0), 0)
    up = logical_or(gt(d, 0.5), logical_and(eq(d, 0.5), odd))
    return add(f, up.to(x.dtype))


def pow(a: TensorLike, b: TensorLike) -> Tensor:
    if isinstance(b, (int, float)) and not isinstance(b, bool) and isinstance(a, Tensor):
        if float(b).is_integer() and -16 <= b <= 16:
            return _int_power(a, int(b))
        if b == 0.5:  # as torch does: (-inf) ** 0.5 is nan here, inf with a tensor exponent
            return sqrt(a)
        if b == -0.5:
            return rsqrt(a)
    (x, y), dt = lift([a, b], op="pow")
    if not dt.is_float:  # integer tensor exponents: through float64, rounded back
        r = pow(x.to(_wide_float(dt)), y.to(_wide_float(dt)))
        return round(r).to(dt)
    compute = f32 if dt.bits < 32 else dt
    xf, yf = x.to(compute), y.to(compute)
    # C pow: |x| ** y, negative for a negative base (-0 included) and an odd integer y,
    # NaN for a finite negative base and a finite non-integer y, 1 for y == 0, x == 1
    # and (-1) ** +-inf
    mag = exp2(mul(yf, log2(abs(xf))))
    y_int = logical_and(eq(trunc(yf), yf), isfinite(yf))
    y_odd = logical_and(y_int, ne(fmod(yf, 2.0), 0))
    negative = logical_or(lt(xf, 0), lt(reciprocal(xf), 0))
    r = where(logical_and(negative, y_odd), neg(mag), mag)
    undefined = logical_and(logical_and(lt(xf, 0), isfinite(xf)),
                            logical_and(isfinite(yf), logical_not(y_int)))
    r = where(undefined, math.nan, r)
    one = logical_or(eq(yf, 0), logical_or(eq(xf, 1), logical_and(eq(xf, -1), isinf(yf))))
    return where(one, 1.0, r).to(dt)


def _int_power(x: Tensor, n: int) -> Tensor:
    if n < 0:
        return reciprocal(_int_power(_floating(x), -n))
    if n == 0:
        return full_like(x, 1)
    result: Tensor | None = None
    base = x
    while n:
        if n & 1:
            result = base if result is None else mul(result, base)
        n >>= 1
        if n:
            base = mul(base, base)
    assert result is not None
    return result


# -- comparisons and logic ----------------------------------------------------------

def lt(a: TensorLike, b: TensorLike) -> Tensor:
    return _binary("LessThan", a, b, "lt")


def gt(a: TensorLike, b: TensorLike) -> Tensor:
    return lt(b, a)


def isnan(x: Tensor) -> Tensor:
    """NaN is neither < 0, > 0, nor finite (x * 0 < 1 holds for finite x only)."""
    if not x.dtype.is_float:
        return full_like(x, False, bool_)
    finite = lt(mul(x, 0.0), 1.0)
    return logical_not(logical_or(finite, logical_or(lt(x, 0.0), gt(x, 0.0))))


def isfinite(x: Tensor) -> Tensor:
    if not x.dtype.is_float:
        return full_like(x, True, bool_)
    return lt(mul(x, 0.0), 1.0)


def isinf(x: Tensor) -> Tensor:
    if not x.dtype.is_float:
        return full_like(x, False, bool_)
    return logical_and(logical_not(isfinite(x)), logical_or(lt(x, 0.0), gt(x, 0.0)))


def full_like(x: Tensor, value: Scalar, dtype: Any = None) -> Tensor:
    """A constant broadcast to x's shape (a view of one Constant node)."""
    c = scalar(x.graph, value, x.dtype if dtype is None else dtype)
    return c._with_view(c.view.expand(x.view.shape))


def le(a: TensorLike, b: TensorLike) -> Tensor:
    (x, y), dt = lift([a, b], op="le")
    r = logical_not(lt(y, x))
    if dt.is_float:
        r = logical_and(r, logical_not(logical_or(isnan(x), isnan(y))))
    return r


def ge(a: TensorLike, b: TensorLike) -> Tensor:
    return le(b, a)


def eq(a: TensorLike, b: TensorLike) -> Tensor:
    (x, y), dt = lift([a, b], op="eq")
    if dt.is_bool:
        return logical_not(logical_xor(x, y))
    r = logical_not(logical_or(lt(x, y), lt(y, x)))
    if dt.is_float:
        r = logical_and(r, logical_not(logical_or(isnan(x), isnan(y))))
    return r


def ne(a: TensorLike, b: TensorLike) -> Tensor:
    return logical_not(eq(a, b))


def _truth(x: TensorLike) -> Tensor | bool:
    if not isinstance(x, Tensor):
        return bool(x)
    return x if x.dtype.is_bool else ne(x, 0)


def logical_not(x: TensorLike) -> Tensor:
    t = _truth(x)
    assert isinstance(t, Tensor)
    return _binary("LessThan", t, True, "logical_not")  # b < 1 is true iff b is false


def logical_and(a: TensorLike, b: TensorLike) -> Tensor:
    return _binary("Mul", _truth(a), _truth(b), "logical_and", bool_)


def logical_or(a: TensorLike, b: TensorLike) -> Tensor:
    return _binary("Add", _truth(a), _truth(b), "logical_or", bool_)


def logical_xor(a: TensorLike, b: TensorLike) -> Tensor:
    (x, y), _ = lift([_truth(a), _truth(b)], bool_, "logical_xor")
    return _binary("LessThan", logical_and(x, y), logical_or(x, y), "logical_xor")


def _bool_op(a: TensorLike, b: TensorLike, fn: Callable[..., Tensor], sym_: str) -> Tensor:
    for x in (a, b):
        if isinstance(x, Tensor) and not x.dtype.is_bool:
            raise DTypeError(f"{sym_} is only supported on bool tensors here, got {x.dtype.name}")
    return fn(a, b)


# -- selection ---------------------------------------------------------------------------

def where(cond: TensorLike, a: TensorLike, b: TensorLike) -> Tensor:
    """Exact select (inf and NaN in the unselected branch do not leak): a Gather from
    [a's elements, b's elements] at positions computed from the condition."""
    g = _graph_of(cond, a, b)
    shape = broadcast_shapes(*(x.view.shape for x in (cond, a, b) if isinstance(x, Tensor)),
                             op="where")
    c = _truth(cond)
    if not isinstance(c, Tensor):
        c = scalar(g, c, bool_)
    dt = promote_types(a, b)
    ta = a.to(dt) if isinstance(a, Tensor) else scalar(g, a, dt)
    tb = b.to(dt) if isinstance(b, Tensor) else scalar(g, b, dt)
    c = c._with_view(c.view.expand(shape))
    na, nb = _numel(ta.view.shape), _numel(tb.view.shape)
    # the same elements either way; stacked, the kernel computing them keeps the operands'
    # axes (flat, its loop decodes them by division: an attention's masked softmax 4x slower)
    whole = all(len(t.view.shape) == len(shape) and all(
        sym(a) is b for a, b in zip(t.view.shape, shape, strict=True)) for t in (ta, tb))
    data = stack([ta, tb], 0).reshape(-1) if whole else \
        cat([ta.reshape(-1), tb.reshape(-1)], 0)
    pos_a = _broadcast_position(ta.view.shape, shape)
    pos_b = _broadcast_position(tb.view.shape, shape)
    total = _numel(shape) + na + nb
    it = i32 if total.is_num and total.value < 2**31 else i64
    base = iota(g, na + pos_b, shape, it)
    delta = iota(g, pos_a - na - pos_b, shape, it)
    idx = add(base, mul(c.to(it), delta))
    return node(g, "Gather", [idx, data])


def _broadcast_position(src: Sequence[Expr], shape: Sequence[Expr]) -> Expr:
    """Flat position in a tensor of shape `src` of the element that broadcasting to
    `shape` puts at z0..z{n-1}."""
    k = len(shape) - len(src)
    pos, stride = ZERO, ONE
    for i in reversed(range(len(src))):
        if src[i] is not ONE:
            pos = pos + z(i + k) * stride
        stride = stride * src[i]
    return pos


def masked_fill(x: Tensor, mask: Tensor, value: TensorLike) -> Tensor:
    return where(mask, value, x).to(x.dtype)


# -- joining -----------------------------------------------------------------------------

def cat(tensors: Sequence[Tensor], dim: int = 0, signed_zeros: bool = True) -> Tensor:
    """Concatenate: each input padded into place, the pieces added. Float pieces are padded
    with -0.0 (negated, padded with 0, negated back), the identity of addition: padded
    with 0.0, a -0.0 would come out as 0.0 (-0.0 + 0.0 is 0.0); `signed_zeros=False`
    pads with 0.0 (a maximum's stacked pair, where the sign of a zero is unspecified)."""
    if not tensors:
        raise ValueError("cat: expected a non-empty list of tensors")
    ts, dt = list(tensors), promote_types(*tensors)
    ref = next((t for t in ts if t.ndim and not (t.ndim == 1 and t.view.shape[0] is ZERO)),
               ts[0])  # 1-d empty tensors are skipped, as in PyTorch
    if ref.ndim == 0:
        raise ShapeError("cat: zero-dimensional tensors cannot be concatenated")
    d = ref._axis(dim)
    ts = [t for t in ts if not (t.ndim == 1 and t.view.shape[0] is ZERO)] or [ts[0]]
    for t in ts:
        if t.ndim != ref.ndim or any(a != b for i, (a, b) in enumerate(
                zip(t.view.shape, ref.view.shape, strict=True)) if i != d):
            raise ShapeError(f"cat: shapes {[x.shape for x in tensors]} differ outside dim {d}")
    ts = [t.to(dt) for t in ts]
    sizes = [t.view.shape[d] for t in ts]
    total = ZERO
    for s in sizes:
        total = total + s
    out: Tensor | None = None
    off: Expr = ZERO
    pieces = sum(1 for s in sizes if s is not ZERO) > 1
    for t, s in zip(ts, sizes, strict=True):
        if s is ZERO and len(ts) > 1:
            continue
        if pieces and signed_zeros and dt.is_float:  # -0.0 pads: x + -0.0 is x, -0.0 too
            m = neg(t)
            piece = neg(m._with_view(m.view.pad(d, off, total - off - s)))
        else:
            piece = t._with_view(t.view.pad(d, off, total - off - s))
        out = piece if out is None else node(t.graph, "Add", [out, piece])
        off = off + s
    assert out is not None
    return out


def stack(tensors: Sequence[Tensor], dim: int = 0, signed_zeros: bool = True) -> Tensor:
    if not tensors:
        raise ValueError("stack: expected a non-empty list of tensors")
    shape = tensors[0].view.shape
    for t in tensors:
        if t.view.shape != shape:
            raise ShapeError(f"stack: all shapes must match, got {[x.shape for x in tensors]}")
    d = tensors[0]._axis(dim, tensors[0].ndim + 1)
    return cat([t.unsqueeze(d) for t in tensors], d, signed_zeros)


def split(x: Tensor, split_size_or_sections: int | Sequence[int], dim: int = 0) -> list[Tensor]:
    d = x._axis(dim)
    n = x.view.shape[d]
    if isinstance(split_size_or_sections, int):
        if not n.is_num:
            raise ShapeError(f"split: dim {d} has symbolic size {n}; give explicit sections")
        k = split_size_or_sections
        sizes = [min(k, n.value - i) for i in range(0, n.value, k)] or [0]
    else:
        sizes = list(split_size_or_sections)
        tot = ZERO
        for s in sizes:
            tot = tot + sym(s)
        if tot is not n:
            raise ShapeError(f"split: sections {sizes} do not add up to size {n} of dim {d}")
    out, off = [], ZERO
    for s in sizes:
        out.append(x.narrow(d, off, s))
        off = off + sym(s)
    return out


def chunk(x: Tensor, chunks: int, dim: int = 0) -> list[Tensor]:
    d = x._axis(dim)
    n = x.view.shape[d]
    if not n.is_num:
        raise ShapeError(f"chunk: dim {d} has symbolic size {n}")
    size = -(-n.value // chunks) if n.value else 0
    return split(x, max(size, 1), d) if n.value else [x] * chunks  # as torch: empty chunks


def _shape_args(args: tuple) -> list:
    if len(args) == 1 and isinstance(args[0], (list, tuple)):
        return list(args[0])
    return list(args)


for _fn in (add, mul, neg, sub, div, true_divide, fmod, remainder, floor_divide, reciprocal,
            sqrt, rsqrt, exp2, log2, sin, exp, log, expm1, log1p, cos, sigmoid, tanh, silu, erf,
            erfc, gelu, softplus, relu, maximum, minimum, clamp, clip, abs, sign, trunc, floor,
            ceil, round, pow, lt, gt, le, ge, eq, ne, isnan, isfinite, isinf, logical_not,
            logical_and, logical_or, logical_xor, where, masked_fill, split, chunk, full_like):
    setattr(Tensor, _fn.__name__ if _fn is not true_divide else "true_divide", _fn)
Tensor.less, Tensor.greater, Tensor.less_equal, Tensor.greater_equal = lt, gt, le, ge
Tensor.subtract, Tensor.multiply, Tensor.divide = sub, mul, div
