"""The dtypes of lumos and PyTorch's type-promotion rules over them."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True, slots=True)
class DType:
    name: str
    np: np.dtype  # the numpy storage dtype (bf16 is stored as its uint16 bit pattern)
    kind: str  # "bool" | "int" | "float"
    bits: int
    signed: bool = True

    @property
    def is_float(self) -> bool:
        return self.kind == "float"

    @property
    def is_int(self) -> bool:
        return self.kind == "int"

    @property
    def is_bool(self) -> bool:
        return self.kind == "bool"

    @property
    def itemsize(self) -> int:
        return max(self.bits // 8, 1)

    def __repr__(self) -> str:
        return f"lumos.{self.name}"

    def __reduce__(self) -> tuple:  # unpickle to the singleton: dtypes are compared with `is`
        return as_dtype, (self.name,)


f32 = DType("f32", np.dtype(np.float32), "float", 32)
f16 = DType("f16", np.dtype(np.float16), "float", 16)
bf16 = DType("bf16", np.dtype(np.uint16), "float", 16)
f64 = DType("f64", np.dtype(np.float64), "float", 64)
i8 = DType("i8", np.dtype(np.int8), "int", 8)
u8 = DType("u8", np.dtype(np.uint8), "int", 8, signed=False)
i16 = DType("i16", np.dtype(np.int16), "int", 16)
i32 = DType("i32", np.dtype(np.int32), "int", 32)
i64 = DType("i64", np.dtype(np.int64), "int", 64)
bool_ = DType("bool", np.dtype(np.bool_), "bool", 8)

ALL = (f32, f16, bf16, f64, i8, u8, i16, i32, i64, bool_)
BY_NAME = {d.name: d for d in ALL} | {"bool_": bool_}
_ALIASES = {"float32": f32, "float": f32, "float16": f16, "half": f16, "bfloat16": bf16,
            "float64": f64, "double": f64, "int8": i8, "uint8": u8, "int16": i16,
            "int32": i32, "int": i32, "int64": i64, "long": i64}
_RANK = {"bool": 0, "int": 1, "float": 2}


def as_dtype(x: object) -> DType:
    """A lumos dtype from a DType, a name ('f32', 'float32'), a numpy or a torch dtype."""
    if isinstance(x, DType):
        return x
    if isinstance(x, str):
        name = x.removeprefix("torch.")
        if name in BY_NAME:
            return BY_NAME[name]
        if name in _ALIASES:
            return _ALIASES[name]
        raise TypeError(f"unknown dtype {x!r}; expected one of {[d.name for d in ALL]}")
    if x is bool:
        return bool_
    if x is int:
        return i64
    if x is float:
        return f32
    mod = type(x).__module__
    if mod.startswith("torch"):
        return as_dtype(str(x))
    try:
        d = np.dtype(x)  # type: ignore[call-overload]
    except TypeError:
        raise TypeError(f"cannot interpret {x!r} as a dtype") from None
    for t in ALL:
        if t.np == d and t is not bf16:
            return t
    raise TypeError(f"numpy dtype {d} has no lumos counterpart")


def promote(a: DType, b: DType) -> DType:
    """torch.promote_types for the dtypes lumos supports."""
    if a is b:
        return a
    if _RANK[a.kind] != _RANK[b.kind]:
        return a if _RANK[a.kind] > _RANK[b.kind] else b
    if a.is_float:
        if {a, b} == {f16, bf16}:
            return f32
        return a if a.bits > b.bits else b
    if a.is_int:
        if a.signed == b.signed:
            return a if a.bits > b.bits else b
        s, u = (a, b) if a.signed else (b, a)
        if s.bits > u.bits:
            return s
        return {8: i16, 16: i32, 32: i64, 64: i64}[u.bits]
    return a


def result_type(dimmed: list[DType], zero_dim: list[DType], scalars: list[DType]) -> DType:
    """torch.result_type: tensors with dims outrank 0-d tensors, which outrank Python
    scalars, unless a lower group is of a higher category (bool < int < float)."""

    def fold(ds: list[DType]) -> DType | None:
        r = None
        for d in ds:
            r = d if r is None else promote(r, d)
        return r

    def combine(higher: DType | None, lower: DType | None) -> DType | None:
        if higher is None:
            return lower
        if lower is None or higher.is_float:
            return higher
        if higher.is_bool or lower.is_float:
            return promote(higher, lower)
        return higher

    scalar = fold(scalars)
    if scalar is not None and scalar.is_float:
        scalar = f32
    elif scalar is not None and scalar.is_int:
        scalar = i64
    r = combine(fold(dimmed), combine(fold(zero_dim), scalar))
    assert r is not None
    return r


# -- bf16 bit patterns --------------------------------------------------------

def bf16_to_f32(bits: np.ndarray) -> np.ndarray:
    wide = np.asarray(bits, dtype=np.uint16).astype(np.uint32) << 16
    return np.asarray(wide).view(np.float32)  # 0-d stays an array


def f32_to_bf16(x: np.ndarray) -> np.ndarray:
    """Round-to-nearest-even to bf16 bit patterns; NaN stays NaN."""
    u = np.asarray(x, dtype=np.float32).view(np.uint32)
    rounded = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)
    return np.where(np.isnan(np.asarray(x, dtype=np.float32)), np.uint16(0x7FC0), rounded)


def to_numpy_value(arr: np.ndarray, dtype: DType) -> np.ndarray:
    """Storage -> values numpy can compute with (bf16 becomes float32)."""
    return bf16_to_f32(arr) if dtype is bf16 else arr


def from_numpy_value(arr: np.ndarray, dtype: DType) -> np.ndarray:
    """Values -> storage of `dtype` (C-style casts: float->int truncates toward zero)."""
    if dtype is bf16:
        return f32_to_bf16(np.asarray(arr, dtype=np.float32))
    return np.asarray(arr).astype(dtype.np, copy=False)
