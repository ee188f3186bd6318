"""What every runtime provides, and the input binding every program shares."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

from lumos.dtype import bf16
from lumos.errors import BindError
from lumos.graph import Graph

if TYPE_CHECKING:
    from lumos.frontend.tensor import Tensor


class Runtime(Protocol):
    name: str

    def compile(self, graph: Graph, options: Any = None) -> Program: ...


class Program:
    """A compiled graph: bind inputs with `set_data`, run with `execute`, read with `get`.

    Subclasses implement `_run(env)`, which computes every output for the
    resolved dims `env` and stores it with `_store`.
    """

    def __init__(self, graph: Graph) -> None:
        self.graph = graph
        self._data: dict[int, np.ndarray] = {}
        self._results: dict[int, np.ndarray] = {}
        self._inputs: list[int] | None = None  # Input nodes (and those with symbolic shapes)
        self._symbolic: list[int] = []
        self._checked: dict[int, tuple[Tensor, int]] = {}  # id(tensor) -> (it, its node)

    # -- binding ---------------------------------------------------------------
    def set_data(self, tensor: Tensor, array: Any) -> None:
        """Bind `array` to a graph input (kept across executions until rebound)."""
        hit = self._checked.get(id(tensor))
        if hit is None or hit[0] is not tensor:
            if len(self._checked) > 4 * len(self.graph.nodes):
                self._checked.clear()
            hit = self._checked[id(tensor)] = tensor, self._input_node(tensor)
        node = hit[1]
        prev = self._data.get(node)
        if type(array) is np.ndarray and prev is not None and array.shape == prev.shape \
                and array.dtype == prev.dtype and array.flags.c_contiguous:
            self._data[node] = array.view()  # what passed the checks below, as before
            self._bound(node)
            return
        n = self.graph.nodes[node]
        arr = np.asarray(array.numpy() if hasattr(array, "numpy") and not isinstance(
            array, np.ndarray) else array)
        want = n.dtype.np
        if arr.dtype != want:
            hint = " (bf16 data is passed as its uint16 bit pattern)" if n.dtype is bf16 else ""
            raise BindError(f"input {n.name!r}: expected dtype {n.dtype.name} "
                            f"(numpy {want}), got {arr.dtype}{hint}")
        if arr.ndim != len(n.shape):
            raise BindError(f"input {n.name!r}: expected {len(n.shape)} dims "
                            f"{_fmt(n.shape)}, got array of shape {arr.shape}")
        for want_d, got in zip(n.shape, arr.shape, strict=True):
            if want_d.is_num and want_d.value != got:
                raise BindError(f"input {n.name!r}: expected shape {_fmt(n.shape)}, "
                                f"got {arr.shape}")
        self._data[node] = self._keep(node, arr)
        self._bound(node)

    def bound(self, tensor: Tensor) -> np.ndarray | None:
        """The array bound to graph input `tensor` (None if none is)."""
        return self._data.get(tensor.node)

    def _keep(self, node: int, array: np.ndarray) -> np.ndarray:
        """What is bound to input `node` for `array` (checked): a C-contiguous array of the
        same shape, a copy where it must be (a runtime may keep weights in memory of its
        own)."""
        return np.ascontiguousarray(array).reshape(array.shape)  # keeps 0-d 0-d

    def _bound(self, node: int) -> None:
        """Called when input `node` is bound anew (a runtime may cache its bindings)."""

    def _input_node(self, tensor: Tensor) -> int:
        nodes = self.graph.nodes
        if getattr(tensor, "graph", None) is not self.graph:
            raise BindError("set_data: that tensor belongs to another graph")
        if nodes[tensor.node].op != "Input" or not tensor.view.is_contiguous() or \
                tensor.view.shape != nodes[tensor.node].shape:
            raise BindError("set_data takes a graph input as returned by g.tensor(...), "
                            f"not a derived tensor ({nodes[tensor.node].op})")
        return tensor.node

    def resolve_dims(self, dims: Mapping[str, int] | None) -> dict[str, int]:
        """Dims given at execute, plus those read off the bound inputs' shapes."""
        env = {k: int(v) for k, v in (dims or {}).items()}
        for k in env:
            if k not in self.graph.dims:
                raise BindError(f"execute: unknown dimension {k!r}; the graph has "
                                f"{sorted(self.graph.dims)}")
        if self._inputs is None:  # (static shapes were checked by set_data)
            self._inputs = [i for i, n in enumerate(self.graph.nodes) if n.op == "Input"]
            self._symbolic = [i for i in self._inputs
                              if any(not e.is_num for e in self.graph.nodes[i].shape)]
        for i in self._inputs:
            if i not in self._data:
                raise BindError(f"execute: input {self.graph.nodes[i].name!r} has no data; "
                                "bind it with program.set_data(tensor, array)")
        for i in self._symbolic:
            for e, got in zip(self.graph.nodes[i].shape, self._data[i].shape, strict=True):
                if e.op == "var":
                    name = e.args[0]
                    if env.setdefault(name, got) != got:
                        raise BindError(
                            f"input {self.graph.nodes[i].name!r}: dimension {name!r} is "
                            f"{env[name]} but the data has {got}")
        for name, (lo, hi) in self.graph.dims.items():
            if name not in env:
                raise BindError(f"execute: dimension {name!r} is unbound; pass "
                                f"dims={{{name!r}: ...}}")
            if env[name] < lo or (hi is not None and env[name] > hi):
                raise BindError(f"execute: dimension {name!r}={env[name]} is outside its "
                                f"declared range [{lo}, {hi}]")
        memo: dict[tuple, tuple] = {}  # (each distinct shape once: a decoder's KV caches)
        for i in self._symbolic:
            n = self.graph.nodes[i]
            want = memo.get(n.shape)
            if want is None:
                want = memo[n.shape] = tuple(e.eval(env) for e in n.shape)
            if want != self._data[i].shape:
                raise BindError(f"input {n.name!r}: expected shape {_fmt(n.shape)} = {want} "
                                f"for dims {env}, got {self._data[i].shape}")
        return env

    # -- running -------------------------------------------------------------
    def execute(self, dims: Mapping[str, int] | None = None) -> None:
        env = self.resolve_dims(dims)
        self._run(env)

    def _run(self, env: dict[str, int]) -> None:
        raise NotImplementedError

    def _store(self, out_node: int, value: np.ndarray) -> None:
        prev = self._results.get(out_node)
        if self.graph.nodes[out_node].persist and prev is not None and prev.shape == value.shape:
            np.copyto(prev, value)  # persisted outputs keep their buffer
        else:
            self._results[out_node] = value

    def get(self, tensor: Tensor) -> np.ndarray:
        """The value of an output (marked with `t.output()`) or of a bound input."""
        key = (tensor.node, tensor.view)
        out = self.graph.output_of.get(key)
        if out is not None:
            if out not in self._results:
                raise BindError("get: the program has not been executed yet")
            return self._results[out]
        if tensor.node in self._data and self.graph.nodes[tensor.node].op == "Input":
            return self._data[tensor.node]
        raise BindError("get: that tensor is not an output of the graph; mark it with "
                        "t.output() before compiling")


def _fmt(shape: tuple) -> str:
    return "(" + ", ".join(map(repr, shape)) + ("," if len(shape) == 1 else "") + ")"
