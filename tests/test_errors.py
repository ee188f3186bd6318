"""Bad input raises ShapeError / DTypeError / BindError naming the op, the shapes, the
dtypes or the input, and a rejected op leaves nothing half-built in the graph."""

from __future__ import annotations

import re
from collections.abc import Callable

import numpy as np
import pytest

import lumos
from lumos import BindError, DTypeError, ShapeError
from lumos.frontend.tensor import node


def _bools(x, y):
    return y > 0, y > 1


def _xy(x, y):
    return x, y


# (name, operands from the inputs x (2, 3) f32 and y (4, 3) i32, the rejected op on them,
#  the error, words its message must contain)
REJECTED: list[tuple[str, Callable, Callable, type, list[str]]] = [
    ("add broadcast", _xy, lambda x, y: x + y, ShapeError, ["add", r"\(2, 3\)", r"\(4, 3\)"]),
    ("mul broadcast", _xy, lambda x, y: x * y.T, ShapeError, ["mul", r"\(2, 3\)", r"\(3, 4\)"]),
    ("sub broadcast", _xy, lumos.sub, ShapeError, ["sub", r"\(2, 3\)"]),
    ("compare broadcast", _xy, lambda x, y: x < y, ShapeError, ["lt", r"\(4, 3\)"]),
    ("where broadcast", _xy, lambda x, y: lumos.where(y, x, 1.0), ShapeError,
     ["where", r"\(4, 3\)"]),
    ("maximum broadcast", _xy, lumos.maximum, ShapeError, ["maximum"]),
    ("floordiv broadcast", _xy, lambda x, y: x // y, ShapeError, ["floor_divide"]),
    ("cat shapes", _xy, lambda x, y: lumos.cat([x, y], 1), ShapeError,
     ["cat", r"\(2, 3\)", r"\(4, 3\)"]),
    ("stack shapes", _xy, lambda x, y: lumos.stack([x, y]), ShapeError, ["stack"]),
    ("reshape", _xy, lambda x, y: x.reshape(4, 2), ShapeError,
     ["reshape", r"\(2, 3\)", r"\(4, 2\)"]),
    ("reshape two -1", _xy, lambda x, y: x.reshape(-1, -1), ShapeError, ["reshape", "-1"]),
    ("reshape -1 of empty", _xy, lambda x, y: y.narrow(0, 0, 0).reshape(0, -1), ShapeError,
     ["reshape"]),
    ("permute", _xy, lambda x, y: x.permute(0, 0), ShapeError, ["permute"]),
    ("narrow past the end", _xy, lambda x, y: x.narrow(1, 2, 2), ShapeError,
     ["narrow", r"\(2, 3\)"]),
    ("narrow before the start", _xy, lambda x, y: x.narrow(1, -4, 1), ShapeError, ["narrow"]),
    ("expand -1 leading", _xy, lambda x, y: x.expand(-1, 2, 3), ShapeError, ["expand", "-1"]),
    ("expand", _xy, lambda x, y: x.expand(4, 3), ShapeError,
     ["expand", r"\(2, 3\)", r"\(4, 3\)"]),
    ("dim out of range", _xy, lambda x, y: x.transpose(0, 2), ShapeError,
     ["dim 2", r"\(2, 3\)"]),
    ("pad sizes", _xy, lambda x, y: x.pad((1, 1, 1, 1, 1, 1)), ShapeError, ["pad"]),
    ("split sections", _xy, lambda x, y: x.split([1, 1], 1), ShapeError, ["split"]),
    ("unflatten", _xy, lambda x, y: x.unflatten(1, (2, 2)), ShapeError, ["reshape"]),
    ("neg bool", _bools, lambda a, b: -a, DTypeError, ["neg", "bool"]),
    ("sub bools", _bools, lambda a, b: a - b, DTypeError, ["sub", "bool"]),
    ("sub bool scalar", _bools, lambda a, b: lumos.sub(a, True), DTypeError, ["sub", "bool"]),
    ("floordiv bools", _bools, lambda a, b: a // b, DTypeError, ["floor_divide", "bool"]),
    ("invert int", _xy, lambda x, y: ~y, DTypeError, ["~", "i32"]),
    ("and floats", _xy, lambda x, y: x & x, DTypeError, ["&", "f32"]),
    ("Exp2 of ints", _xy, lambda x, y: node(y.graph, "Exp2", [y]), DTypeError, ["Exp2", "i32"]),
    ("Add dtypes", lambda x, y: (x, x.to("f64")), lambda x, x64: node(x.graph, "Add", [x, x64]),
     DTypeError, ["Add", "f32", "f64"]),
    ("Add shapes", lambda x, y: (x, y.to("f32")), lambda x, yf: node(x.graph, "Add", [x, yf]),
     ShapeError, ["Add", r"\(2, 3\)", r"\(4, 3\)"]),
    ("Gather float indices", _xy, lambda x, y: node(x.graph, "Gather", [x, x]), DTypeError,
     ["Gather", "f32"]),
    ("Mod bools", _bools, lambda a, b: node(a.graph, "Mod", [a, b]), DTypeError,
     ["Mod", "bool"]),
    ("SumReduce axis", _xy, lambda x, y: node(x.graph, "SumReduce", [x], axis=2), ShapeError,
     ["SumReduce", "axis 2"]),
]


@pytest.mark.parametrize("name,operands,build,err,words", REJECTED, ids=[r[0] for r in REJECTED])
def test_rejected_ops_name_the_problem_and_add_nothing(name, operands, build, err, words):
    g = lumos.Graph()
    args = operands(g.tensor((2, 3), "f32", name="x"), g.tensor((4, 3), "i32", name="y"))
    before = len(g.nodes)
    with pytest.raises(err) as info:
        build(*args)
    for w in words:
        assert re.search(w, str(info.value)), f"{w!r} not in {str(info.value)!r}"
    assert len(g.nodes) == before, [g.nodes[i] for i in range(before, len(g.nodes))]


def test_cross_graph_operands():
    g1, g2 = lumos.Graph(), lumos.Graph()
    a, b = g1.tensor((2,)), g2.tensor((2,))
    with pytest.raises(ValueError, match="different graphs"):
        a + b
    assert len(g1.nodes) == 1 and len(g2.nodes) == 1


def test_graph_building_errors():
    g = lumos.Graph()
    g.tensor((2,), name="a")
    with pytest.raises(ValueError, match="'a'"):
        g.tensor((3,), name="a")
    with pytest.raises(ShapeError, match="-2"):
        g.tensor((2, -2))
    with pytest.raises(ValueError, match="z0"):
        g.dim("z0")
    with pytest.raises(ValueError, match="range"):
        g.dim("n", 5, 2)
    with pytest.raises(TypeError):
        bool(g.tensor((1,)) > 0)
    with pytest.raises(TypeError, match="dtype"):
        g.tensor((2,), "complex64")
    with pytest.raises(ValueError, match="no outputs"):
        g.compile(lumos.ReferenceRuntime())


def _program(dims=None):
    g = lumos.Graph()
    g.dim("n", 1, 8)
    x = g.tensor(("s", 3), "f32", name="x")
    w = g.tensor((3,), "i64", name="w")
    y = (x + w).unsqueeze(0).expand("n", -1, 3).output()
    return g, x, w, y, g.compile(lumos.ReferenceRuntime())


def test_set_data_names_the_input():
    g, x, w, y, prog = _program()
    with pytest.raises(BindError, match=r"'w'.*i64.*int32"):
        prog.set_data(w, np.zeros(3, np.int32))
    with pytest.raises(BindError, match=r"'w'.*\(3,\).*\(4,\)"):
        prog.set_data(w, np.zeros(4, np.int64))
    with pytest.raises(BindError, match=r"'x'.*2 dims"):
        prog.set_data(x, np.zeros(3, np.float32))
    with pytest.raises(BindError, match="derived"):
        prog.set_data(y, np.zeros((1, 1, 3), np.float32))
    with pytest.raises(BindError, match="another graph"):
        prog.set_data(lumos.Graph().tensor((3,)), np.zeros(3, np.float32))
    with pytest.raises(BindError, match="bf16"):
        g2 = lumos.Graph()
        t = g2.tensor((2,), "bf16")
        (t + t).output()
        g2.compile(lumos.ReferenceRuntime()).set_data(t, np.zeros(2, np.float32))


def test_execute_errors_name_the_dim_or_input():
    g, x, w, y, prog = _program()
    with pytest.raises(BindError, match="not been executed"):
        prog.get(y)
    prog.set_data(x, np.zeros((2, 3), np.float32))
    with pytest.raises(BindError, match="'w'.*no data"):
        prog.execute({"n": 2})
    prog.set_data(w, np.zeros(3, np.int64))
    with pytest.raises(BindError, match="'n'.*unbound"):
        prog.execute()
    with pytest.raises(BindError, match="'n'=9.*range"):
        prog.execute({"n": 9})
    with pytest.raises(BindError, match="unknown dimension 'm'"):
        prog.execute({"n": 2, "m": 1})
    with pytest.raises(BindError, match="'s'"):
        prog.execute({"n": 2, "s": 5})  # the data says s == 2
    with pytest.raises(BindError, match="not an output"):
        prog.get(x + 1)
    prog.execute({"n": 2})
    assert prog.get(y).shape == (2, 2, 3)
