"""lumos: a search-based deep-learning inference compiler."""

import lumos.frontend  # noqa: F401  (attaches the op families to Tensor)
from lumos.dtype import DType, bf16, bool_, f16, f32, f64, i8, i16, i32, i64, u8
from lumos.errors import BindError, DTypeError, LumosError, ShapeError
from lumos.frontend.tensor import (
    Tensor,
    abs,
    add,
    cat,
    chunk,
    clamp,
    cos,
    div,
    eq,
    erf,
    erfc,
    exp,
    exp2,
    floor_divide,
    fmod,
    full_like,
    gelu,
    isfinite,
    isinf,
    isnan,
    log,
    log2,
    logical_and,
    logical_not,
    logical_or,
    logical_xor,
    maximum,
    minimum,
    mul,
    pow,
    reciprocal,
    relu,
    remainder,
    rsqrt,
    sigmoid,
    silu,
    sin,
    softplus,
    split,
    sqrt,
    stack,
    sub,
    tanh,
    where,
)
from lumos.graph import Graph
from lumos.runtime import ReferenceRuntime
from lumos.shape import Expr, View, sym

__all__ = [
    "BindError", "DType", "DTypeError", "Expr", "Graph", "LumosError", "ReferenceRuntime",
    "ShapeError", "Tensor", "View", "abs", "add", "bf16", "bool_", "cat", "chunk", "clamp",
    "cos", "div", "eq", "erf", "erfc", "exp", "exp2", "f16", "f32", "f64", "floor_divide", "fmod",
    "full_like", "gelu", "i8", "i16", "i32", "i64", "isfinite", "isinf", "isnan", "log",
    "log2", "logical_and", "logical_not", "logical_or", "logical_xor", "maximum", "minimum",
    "mul", "pow", "reciprocal", "relu", "remainder", "rsqrt", "sigmoid", "silu", "sin",
    "softplus", "split", "sqrt", "stack", "sub", "sym", "tanh", "u8", "where",
]
