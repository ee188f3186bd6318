"""Modules build graphs. A `Param` is a named graph input (a few, for a packed quantized
tensor) created in each graph that uses it; `load_state` binds data to it by name.

Names are paths in the module tree, as in PyTorch (`layers.0.self_attn.q_proj.weight`),
worked out when a parameter is first used, once the tree is complete. A persistent buffer
(a KV cache) is a Param whose new value the graph computes: `Param.assign` marks it
`output(persist=True)` and `carry_over` binds it back as the input after each execute.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

import numpy as np

from lumos.dtype import DType, as_dtype
from lumos.errors import BindError, ShapeError
from lumos.frontend.tensor import Tensor
from lumos.graph import Graph
from lumos.nn.quant import FORMATS, Packed, dequantize, part_dtypes, part_shapes

Value = np.ndarray | Packed


class Param:
    """A parameter or buffer of `shape`, stored as `fmt`: a dtype, or a quantization type
    (lumos.nn.quant.FORMATS) whose parts become separate inputs. `default` (an array, or a
    function of nothing returning one) fills it when the state does not name it. A
    parameter is a weight input (Graph.tensor); `buffer=True`: state the graph updates
    (`assign`, a KV cache), so nothing computed from it is kept across runs."""

    def __init__(self, shape: Sequence[int], fmt: str | DType = "f32",
                 default: Value | Callable[[], Value] | None = None,
                 buffer: bool = False) -> None:
        self.shape = tuple(int(s) for s in shape)
        self.qtype = fmt if isinstance(fmt, str) and fmt in FORMATS else None
        self.dtype = None if self.qtype else as_dtype(fmt)
        if self.qtype:
            part_shapes(self.qtype, self.shape)  # checks the block size
        self.default, self.buffer = default, buffer
        self._owner: tuple[Module, str] | None = None
        self._inputs: weakref.WeakKeyDictionary[Graph, dict[str, Tensor]] = \
            weakref.WeakKeyDictionary()
        self._updates: weakref.WeakKeyDictionary[Graph, Tensor] = weakref.WeakKeyDictionary()

    @property
    def name(self) -> str:
        if self._owner is None:
            raise ValueError("a Param must be an attribute of a Module to have a name")
        module, attr = self._owner
        return module._path(attr)

    @property
    def fmt(self) -> str:
        return self.qtype or self.dtype.name  # type: ignore[union-attr]

    def parts(self, g: Graph) -> dict[str, Tensor]:
        """The graph inputs holding this parameter in `g` ({"": input} when not packed)."""
        ins = self._inputs.get(g)
        if ins is None:
            if self.qtype is None:
                ins = {"": g.tensor(self.shape, self.dtype, name=self.name,
                                    weight=not self.buffer)}
            else:
                shapes, dts = part_shapes(self.qtype, self.shape), part_dtypes(self.qtype)
                ins = {p: g.tensor(shapes[p], dts[p], name=f"{self.name}.{p}",
                                   weight=not self.buffer) for p in shapes}
            self._inputs[g] = ins
        return ins

    def of(self, g: Graph) -> Tensor:
        """The value in `g`: the input, or the f32 dequantization of the packed parts."""
        ins = self.parts(g)
        return ins[""] if self.qtype is None else dequantize(self.qtype, ins)

    def assign(self, new: Tensor) -> Tensor:
        """Make `new` this buffer's value after the graph runs (see `carry_over`)."""
        if not self.buffer:
            raise ValueError(f"{self.name}: only a Param(buffer=True) can be assigned")
        self._updates[new.graph] = new.output(persist=True)
        return new

    def arrays(self, value: Value) -> dict[str, np.ndarray]:
        """The arrays to bind per part, after checking `value` fits (ShapeError naming
        the parameter otherwise)."""
        if self.qtype is None:
            if isinstance(value, Packed):
                raise ShapeError(f"{self.name}: expected {self.fmt} data of shape "
                                 f"{self.shape}, got {value.qtype}-packed data")
            arr = np.asarray(value)
            if arr.shape != self.shape:
                raise ShapeError(f"{self.name}: expected shape {self.shape}, got {arr.shape}")
            return {"": arr}
        if not isinstance(value, Packed) or value.qtype != self.qtype:
            got = value.qtype if isinstance(value, Packed) else f"dense {np.asarray(value).dtype}"
            raise ShapeError(f"{self.name}: expected {self.qtype}-packed data, got {got}")
        if value.shape != self.shape:
            raise ShapeError(f"{self.name}: expected shape {self.shape}, got {value.shape}")
        return value.parts


class Module:
    """Base of the layers: Param and Module attributes (and ModuleList items) form a tree;
    `forward` builds the graph (called as `module(x, ...)`)."""

    _owner: tuple[Module, str] | None = None

    def __setattr__(self, name: str, value: Any) -> None:
        members = self.__dict__.setdefault("_members", {})
        if isinstance(value, Param | Module):
            if value._owner is not None and value._owner != (self, name):
                raise ValueError(f"{name}: this {type(value).__name__} already belongs to "
                                 f"{value._owner[0]._path(value._owner[1])}")
            value._owner = (self, name)
            members[name] = value
        else:
            members.pop(name, None)
        object.__setattr__(self, name, value)

    def _path(self, attr: str) -> str:
        if self._owner is None:
            return attr
        parent, name = self._owner
        return parent._path(f"{name}.{attr}")

    def named_parameters(self) -> Iterator[tuple[str, Param]]:
        for m in self.__dict__.get("_members", {}).values():
            if isinstance(m, Param):
                yield m.name, m
            else:
                yield from m.named_parameters()

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.forward(*args, **kwargs)


class ModuleList(Module):
    """Modules named 0, 1, ...; iterable and indexable."""

    def __init__(self, modules: Sequence[Module]) -> None:
        for i, m in enumerate(modules):
            setattr(self, str(i), m)
        self._n = len(modules)

    def __len__(self) -> int:
        return self._n

    def __getitem__(self, i: int) -> Any:
        return getattr(self, str(range(self._n)[i]))

    def __iter__(self) -> Iterator[Any]:
        return (self[i] for i in range(self._n))


def load_state(module: Module, program: Any, state: Mapping[str, Value],
               strict: bool = True) -> int:
    """Bind `state` (name -> array or Packed) to the parameters `module` used in the
    program's graph; a parameter the state lacks takes its default. Returns the bytes
    bound from `state`. Raises BindError for a missing name (or, if strict, an unknown
    one) and ShapeError for data that does not fit."""
    g = program.graph
    params = dict(module.named_parameters())
    if strict:
        unknown = sorted(set(state) - set(params))
        if unknown:
            more = f" (and {len(unknown) - 3} more)" if len(unknown) > 3 else ""
            raise BindError(f"load_state: unexpected tensor {', '.join(unknown[:3])}{more}")
    total = 0
    for name, p in params.items():
        ins = p._inputs.get(g)
        if ins is None:
            continue  # not used by this graph
        value = state.get(name)
        given = value is not None
        if not given:
            value = p.default() if callable(p.default) else p.default
            if value is None:
                raise BindError(f"load_state: no data for {name} (shape {p.shape}, {p.fmt})")
        for part, arr in p.arrays(value).items():
            if arr.dtype != ins[part].dtype.np:
                raise BindError(f"{name}: expected {ins[part].dtype.name} data, got {arr.dtype}")
            program.set_data(ins[part], arr)
            total += arr.nbytes if given else 0
    return total


def carries(module: Module, graph: Any) -> list[tuple[Tensor, Tensor]]:
    """(input, new value) of each buffer of `module` that `graph` updates (`Param.assign`)."""
    return [(p.parts(graph)[""], new) for _, p in module.named_parameters()
            if (new := p._updates.get(graph)) is not None]


def carry_over(module: Module, program: Any,
               pairs: list[tuple[Tensor, Tensor]] | None = None) -> None:
    """Bind each buffer's new value as its input for the next run; `pairs`: `carries`'
    list, kept by a caller that runs often (walking the module's parameters took SmolLM2
    1 ms a token)."""
    for t, new in carries(module, program.graph) if pairs is None else pairs:
        program.set_data(t, program.get(new))
