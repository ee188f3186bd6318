"""HLIR: the fifteen primitives, the structural nodes, and their typing rules.

Every node writes one contiguous row-major result of `shape`. How it reads each
input is that input's `View`, stored on the node. `infer` checks a proposed
node and returns its (shape, dtype); a rejected node never enters a graph.
"""

from __future__ import annotations

from dataclasses import dataclass

from lumos.dtype import DType, bool_
from lumos.errors import DTypeError, ShapeError
from lumos.shape import Expr, View

UNARY = ("Exp2", "Log2", "Sin", "Sqrt", "Recip")
BINARY = ("Add", "Mul", "Mod", "LessThan")
REDUCE = ("SumReduce", "MaxReduce")
INDEX = ("Iota", "Gather", "Scatter")
PRIMITIVES = UNARY + BINARY + REDUCE + INDEX + ("Cast",)
STRUCTURAL = ("Input", "Output", "Constant")
OPS = PRIMITIVES + STRUCTURAL


@dataclass(frozen=True, slots=True)
class Node:
    """One HLIR node. Op-specific fields: Input `name` and `persist` (a weight: bound
    once, see Graph.tensor); Output `persist`; Constant
    `value`; SumReduce/MaxReduce `axis`; Iota `expr` (of z0..z{n-1})."""

    op: str
    inputs: tuple[int, ...]
    views: tuple[View, ...]
    shape: tuple[Expr, ...]
    dtype: DType
    name: str | None = None
    value: float | int | bool | None = None
    axis: int | None = None
    expr: Expr | None = None
    persist: bool = False

    def __repr__(self) -> str:
        extra = {"name": self.name, "value": self.value, "axis": self.axis, "expr": self.expr}
        fields = "".join(f", {k}={v}" for k, v in extra.items() if v is not None)
        shape = "(" + ", ".join(map(repr, self.shape)) + ")"
        return f"{self.op}{list(self.inputs)} -> {shape} {self.dtype.name}{fields}"


def _fmt(shape: tuple[Expr, ...]) -> str:
    return "(" + ", ".join(map(repr, shape)) + ("," if len(shape) == 1 else "") + ")"


def infer(op: str, in_dtypes: tuple[DType, ...], views: tuple[View, ...], *,
          shape: tuple[Expr, ...] | None = None, dtype: DType | None = None,
          axis: int | None = None) -> tuple[tuple[Expr, ...], DType]:
    """Shape and dtype of a proposed node; raises ShapeError / DTypeError naming the op."""
    arity = {**dict.fromkeys(UNARY + REDUCE + ("Cast", "Output"), 1),
             **dict.fromkeys(BINARY + ("Gather",), 2), "Scatter": 3,
             "Iota": 0, "Input": 0, "Constant": 0}
    if op not in arity:
        raise ValueError(f"unknown HLIR op {op!r}")
    if len(views) != arity[op] or len(in_dtypes) != arity[op]:
        raise ValueError(f"{op} takes {arity[op]} inputs, got {len(views)}")
    if op in UNARY:
        if not in_dtypes[0].is_float:
            raise DTypeError(f"{op} needs a float input, got {in_dtypes[0].name}")
        return views[0].shape, in_dtypes[0]
    if op in BINARY:
        (va, vb), (da, db) = views, in_dtypes
        if va.shape != vb.shape:
            raise ShapeError(f"{op}: input shapes differ: {_fmt(va.shape)} vs {_fmt(vb.shape)}")
        if da is not db:
            raise DTypeError(f"{op}: input dtypes differ: {da.name} vs {db.name}")
        if op == "Mod" and da.is_bool:
            raise DTypeError("Mod: bool inputs are not supported")
        return va.shape, (bool_ if op == "LessThan" else da)
    if op in REDUCE:
        nd = views[0].ndim
        if axis is None or not 0 <= axis < nd:
            raise ShapeError(f"{op}: axis {axis} out of range for shape {_fmt(views[0].shape)}")
        return views[0].shape[:axis] + views[0].shape[axis + 1:], in_dtypes[0]
    if op == "Cast":
        assert dtype is not None
        return views[0].shape, dtype
    if op == "Output":
        return views[0].shape, in_dtypes[0]
    if op == "Gather":
        (vi, _), (di, dd) = views, in_dtypes
        if not di.is_int:
            raise DTypeError(f"Gather: indices must be integers, got {di.name}")
        return vi.shape, dd
    if op == "Scatter":
        (vd, vi, vs), (dd, di, ds) = views, in_dtypes
        if not di.is_int:
            raise DTypeError(f"Scatter: indices must be integers, got {di.name}")
        if vi.shape != vs.shape:
            raise ShapeError(f"Scatter: index shape {_fmt(vi.shape)} != source shape "
                             f"{_fmt(vs.shape)}")
        if dd is not ds:
            raise DTypeError(f"Scatter: destination {dd.name} != source {ds.name}")
        return vd.shape, dd
    # Iota, Input, Constant: the shape and dtype are given
    assert shape is not None and dtype is not None
    if op == "Iota" and not dtype.is_int:
        raise DTypeError(f"Iota makes integers, not {dtype.name}")
    return shape, dtype
