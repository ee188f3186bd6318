"""The reference runtime: numpy executes the HLIR directly. It is the normative
semantics of every primitive and dtype, and the oracle other runtimes are checked
against (`run_hlir`). Half-precision values are computed in float32 and rounded on store."""

from __future__ import annotations

import functools
import math
import random
from collections.abc import Mapping
from typing import Any

import numpy as np

from lumos.dtype import DType, bf16, f16, from_numpy_value, to_numpy_value
from lumos.egraph import CORE, Budget, build_spaces, decode
from lumos.egraph.buckets import Combo, bounds, combos, select
from lumos.graph import Graph, live_nodes
from lumos.hlir import Node
from lumos.runtime.base import Program
from lumos.search.genome import Genomes
from lumos.search.options import CompileOptions
from lumos.shape import View

_UNARY = {"Exp2": np.exp2, "Log2": np.log2, "Sin": np.sin, "Sqrt": np.sqrt,
          "Recip": np.reciprocal}


def read(arr: np.ndarray, view: View, env: dict[str, int]) -> np.ndarray:
    """The logical array a consumer sees when it reads buffer `arr` through `view`."""
    shape = tuple(int(e.eval(env)) for e in view.shape)
    if view.is_contiguous():  # a row-major prefix of the buffer (all of it, or a narrow)
        return arr.reshape(-1)[:math.prod(shape)].reshape(shape)
    nd = len(shape)
    zs = {f"z{i}": np.arange(n).reshape([n if j == i else 1 for j in range(nd)])
          for i, n in enumerate(shape)}
    if 0 in shape:
        return np.zeros(shape, arr.dtype)
    strided = _strided(arr, view, env, shape)
    if strided is not None:
        return strided
    scope = env | zs
    padded = _padded(arr, view, env, shape)
    if padded is not None:  # (a convolution's padded windows: no index array, no gather)
        return np.where(np.asarray(view.valid.eval(scope)) != 0, padded,
                        np.zeros((), arr.dtype))
    # gather at the index as evaluated (extent 1 on the axes it does not depend on), then
    # broadcast: a broadcast read costs the size of its source, not of its shape
    idx = np.asarray(view.index.eval(scope), dtype=np.int64)
    flat = arr.reshape(-1)
    if view.valid.is_num and view.valid.value == 1:
        return np.broadcast_to(flat[idx], shape)
    valid = np.asarray(view.valid.eval(scope)) != 0
    if flat.size == 0:
        return np.zeros(shape, arr.dtype)
    axes = lambda e: {v for v in e.vars() if v in zs}  # noqa: E731
    if not axes(view.index) & axes(view.valid):  # valid along axes the index ignores (a
        # stacked pair [x, 0]): gathered once, then selected (not gathered per position)
        vals = np.asarray(flat.take(idx, mode="clip"))
        return np.broadcast_to(np.where(valid, vals, np.zeros((), arr.dtype)), shape)
    idx, valid = np.broadcast_arrays(idx, valid)
    vals = np.asarray(flat.take(idx, mode="clip"))  # (clipped as it reads: 3.6x faster)
    np.putmask(vals, ~valid, 0)
    return np.broadcast_to(vals, shape)


def _strided(arr: np.ndarray, view: View, env: dict[str, int],
             shape: tuple[int, ...]) -> np.ndarray | None:
    """`view` of `arr` as a read-only strided view of its memory, if valid everywhere and
    its index is an offset plus a nonnegative multiple of each axis within the buffer (a
    transpose, a broadcast, a slice: no gather), else None."""
    if not (view.valid.is_num and view.valid.value == 1):
        return None
    affine = _affine(view, env, shape)
    if affine is None:
        return None
    off, steps = affine
    if off < 0 or off + sum(c * (n - 1) for c, n in zip(steps, shape, strict=True)) >= arr.size:
        return None
    flat = arr.reshape(-1)[off:]
    return np.lib.stride_tricks.as_strided(flat, shape, [c * flat.itemsize for c in steps],
                                           writeable=False)


def _padded(arr: np.ndarray, view: View, env: dict[str, int],
            shape: tuple[int, ...]) -> np.ndarray | None:
    """For a view whose index is affine as in `_strided` but valid only somewhere (a
    padded or shifted read): its index read as a strided view of `arr` with zeros around
    it where the index leaves the buffer (the caller zeroes where it is not valid), else
    None."""
    affine = _affine(view, env, shape)
    if affine is None or arr.size == 0:
        return None
    off, steps = affine
    lo = max(0, -off)
    hi = max(0, off + sum(c * (n - 1) for c, n in zip(steps, shape, strict=True)) - arr.size + 1)
    if lo + hi > max(arr.size, math.prod(shape)):  # mostly outside: gathered instead
        return None
    flat = arr.reshape(-1)
    if lo or hi:
        flat = np.concatenate([np.zeros(lo, arr.dtype), flat, np.zeros(hi, arr.dtype)])
    flat = flat[off + lo:]
    return np.lib.stride_tricks.as_strided(flat, shape, [c * flat.itemsize for c in steps],
                                           writeable=False)


def _affine(view: View, env: dict[str, int],
            shape: tuple[int, ...]) -> tuple[int, list[int]] | None:
    """(offset, step per axis) if the view's index is an offset plus a nonnegative
    multiple of each axis, else None."""
    e = view.index.subs(env)
    terms = e.args if e.op == "sum" else (((), e.args[0]),) if e.op == "num" else \
        (((e,), 1),) if e.op == "var" else None
    if terms is None:
        return None
    names = [f"z{k}" for k in range(len(shape))]
    off, steps = 0, [0] * len(shape)
    for mono, c in terms:
        if not mono:
            off = c
        elif len(mono) == 1 and mono[0].op == "var" and mono[0].args[0] in names:
            steps[names.index(mono[0].args[0])] = c
        else:
            return None
    return None if min(steps, default=0) < 0 else (off, steps)


def _compute_dtype(d: DType) -> Any:
    return np.float32 if d is f16 or d is bf16 else d.np


def evaluate(node: Node, args: list[np.ndarray], in_dtypes: list[DType], env: dict[str, int],
             data: np.ndarray | None = None) -> np.ndarray:
    """One node's result (storage dtype), given its inputs as logical arrays."""
    op, dt = node.op, node.dtype
    shape = tuple(int(e.eval(env)) for e in node.shape)
    if op == "Input":
        assert data is not None
        return data
    if op == "Constant":
        return from_numpy_value(np.full(shape, node.value, dtype=_compute_dtype(dt)), dt)
    if op == "Iota":
        nd = len(shape)
        zs = {f"z{i}": np.arange(n).reshape([n if j == i else 1 for j in range(nd)])
              for i, n in enumerate(shape)}
        vals = np.broadcast_to(np.asarray(node.expr.eval(env | zs)), shape)
        return vals.astype(dt.np)
    vals = [to_numpy_value(a, d) for a, d in zip(args, in_dtypes, strict=True)]
    if op in _UNARY:
        x = vals[0].astype(_compute_dtype(dt), copy=False)
        return from_numpy_value(_UNARY[op](x), dt)
    if op == "Mul" and _is_one(args[1]) and args[0].shape == shape:  # x * 1 (a contiguous
        x = args[0]  # copy, Tensor.contiguous: the CNN's 29M-element windows, 0.13 s), kept
        return x if x.flags.c_contiguous else x.copy()  # in row-major memory as `read` needs
    if op in ("Add", "Mul", "Mod", "LessThan"):
        ct = _compute_dtype(in_dtypes[0])
        a, b = (v.astype(ct, copy=False) for v in vals)
        if op == "Add":
            r = a + b
        elif op == "Mul":
            r = a * b
        elif op == "Mod":
            r = np.fmod(a, b) if a.dtype.kind == "f" else _int_fmod(a, b)
        else:
            return np.less(a, b)
        return from_numpy_value(r, dt)
    if op == "SumReduce":
        x = vals[0]
        if dt.is_bool:
            return np.any(x, axis=node.axis)
        ct = np.float32 if dt.is_float and dt.bits < 32 else dt.np
        return from_numpy_value(np.sum(x, axis=node.axis, dtype=ct), dt)
    if op == "MaxReduce":
        x = vals[0]
        n = x.shape[node.axis]
        if n == 0:
            return from_numpy_value(np.full(shape, _lowest(dt)), dt)
        if n <= 16:  # a short axis (a pool's window) as elementwise maxima of its slices:
            # numpy reduces a contiguous axis of 4 row by row (NaN propagates either way)
            parts = np.moveaxis(x, node.axis, 0)
            return from_numpy_value(functools.reduce(np.maximum, parts[1:], parts[0]), dt)
        return from_numpy_value(np.max(x, axis=node.axis), dt)
    if op == "Cast":
        return from_numpy_value(vals[0], dt)
    if op == "Gather":
        idx, src = args[0].astype(np.int64), args[1].reshape(-1)
        ok = (idx >= 0) & (idx < src.size)
        if src.size == 0:
            return np.zeros(shape, src.dtype)
        return np.where(ok, src[np.where(ok, idx, 0)], np.zeros((), src.dtype))
    if op == "Scatter":
        dest, idx, src = args[0].reshape(-1).copy(), args[1].reshape(-1), args[2].reshape(-1)
        ok = (idx >= 0) & (idx < dest.size)
        dest[idx[ok].astype(np.int64)] = src[ok]
        return dest.reshape(shape)
    if op == "Output":
        return np.ascontiguousarray(args[0]).reshape(shape)  # (ascontiguousarray makes 0-d 1-d)
    raise NotImplementedError(op)


def _products(g: Graph, needed: set[int]) -> set[int]:
    """Mul nodes (f32, f64, ints) read only by one SumReduce, whole and in order: a
    matrix product's broadcast Mul, which run_hlir never materializes but sums as it
    multiplies (np.einsum; the sum's order is unspecified as it is for np.sum)."""
    readers: dict[int, list[int]] = {}
    for i in needed:
        for j in g.nodes[i].inputs:
            readers.setdefault(j, []).append(i)
    out = set()
    for i in needed:
        n = g.nodes[i]
        if n.op != "Mul" or n.dtype.is_bool or n.dtype is f16 or n.dtype is bf16 \
                or i in g.outputs or len(readers.get(i, ())) != 1:
            continue
        r = g.nodes[readers[i][0]]
        if r.op == "SumReduce" and r.views[0].is_contiguous() and r.views[0].shape == n.shape:
            out.add(i)
    return out


def _sum_of_products(a: np.ndarray, b: np.ndarray, axis: int,
                     wide: bool = True) -> np.ndarray | None:
    """sum(a * b, axis) without the product when it is a matrix product (each factor
    broadcast along an axis the other is not): the broadcast axes are dropped and np.matmul
    (or np.einsum) contracts the rest (BLAS), floats in f64 (then rounded: at least as
    exact as a sum of rounded products; in f32 the oracle's own rounding, 0.011 in
    SmolLM2's KV caches of scale 160, failed its prefill's BLAS program, checked to 1e-4
    of the scale). None otherwise. The factors are cast as matmul reads them, not copied
    first (the torch CNN's 29M-element windows: 0.18-0.42 -> 0.12-0.15 s)."""
    letters = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"[:a.ndim]

    def bcast(x: np.ndarray, k: int) -> bool:
        return x.strides[k] == 0 and x.shape[k] > 1

    drop_a = [bcast(a, k) and not bcast(b, k) for k in range(a.ndim)]
    drop_b = [bcast(b, k) and not drop_a[k] for k in range(a.ndim)]
    if not (any(drop_a) and any(drop_b)) or drop_a[axis] or drop_b[axis]:
        return None
    xa = a[tuple(0 if d else slice(None) for d in drop_a)]
    xb = b[tuple(0 if d else slice(None) for d in drop_b)]
    sa = "".join(c for c, d in zip(letters, drop_a, strict=True) if not d)
    sb = "".join(c for c, d in zip(letters, drop_b, strict=True) if not d)
    out = letters[:axis] + letters[axis + 1:]
    only_a, only_b = [c for c in out if c not in sb], [c for c in out if c not in sa]
    wide = {"dtype": np.float64} if wide and a.dtype.kind == "f" else {}
    if not (only_a and only_b):
        return np.einsum(f"{sa},{sb}->{out}", xa, xb, optimize=True, **wide)
    # one matmul over views: rows and columns the axes each factor steps through fastest,
    # the others batch axes (broadcast where a factor lacks them); einsum's reshapes
    # copied the CNN's 29M-element im2col read as (pixels, taps): 0.5 s
    k = letters[axis]
    m = min(only_a, key=lambda c: abs(xa.strides[sa.index(c)]))
    n = min(only_b, key=lambda c: abs(xb.strides[sb.index(c)]))
    batch = [c for c in out if c not in (m, n)]

    def arranged(x: np.ndarray, s: str, tail: tuple[str, str]) -> np.ndarray:
        for c in batch:
            if c not in s:
                x, s = x[..., None], s + c
        return np.transpose(x, [s.index(c) for c in (*batch, *tail)])
    r = np.matmul(arranged(xa, sa, (m, k)), arranged(xb, sb, (k, n)), **wide)
    order = "".join((*batch, m, n))
    return np.transpose(r, [order.index(c) for c in out])


def _is_one(a: np.ndarray) -> bool:
    """A broadcast read of one element equal to 1."""
    return a.size > 0 and all(s == 0 for s in a.strides) and bool(a.flat[0] == 1)


def _int_fmod(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """C `%` on integers (truncated); x % 0 is defined here as 0."""
    safe = np.where(b == 0, 1, b)
    return np.where(b == 0, 0, np.fmod(a, safe))


def _lowest(dt: DType) -> Any:
    if dt.is_float:
        return -np.inf
    if dt.is_bool:
        return False
    return np.iinfo(dt.np).min


def peak_bytes(g: Graph, env: Mapping[str, int]) -> int:
    """The most bytes `run_hlir` holds at once on `g` at dims `env`: the values alive
    after each node (a matrix product's Mul is never held), floats in a product's sum
    counted as f64 (it sums in f64)."""
    needed = set(live_nodes(g))
    last_use = {j: i for i in sorted(needed) for j in g.nodes[i].inputs}
    products = _products(g, needed)
    size: dict[int, int] = {}
    live = peak = 0
    for i in sorted(needed):
        n = g.nodes[i]
        elems = math.prod(max(0, int(e.eval(env))) for e in n.shape)
        size[i] = 0 if i in products else elems * n.dtype.itemsize
        wide = elems * 8 if n.op == "SumReduce" and n.inputs and n.inputs[0] in products \
            else 0
        live += size[i]
        peak = max(peak, live + wide)
        for j in set(n.inputs):
            if last_use[j] == i and j not in g.outputs:
                live -= size[j]
    return peak


def run_hlir(g: Graph, inputs: Mapping[str, np.ndarray], env: dict[str, int],
             wide: bool = True) -> list[np.ndarray]:
    """Execute the HLIR of `g` node by node (the oracle): the values of `g.outputs`, given
    its inputs' data by name. `wide=False`: float matrix products summed in their own
    dtype (plain BLAS), not in f64 (what an ordinary evaluation rounds: the search's check
    measures its slack by it, see runtime.cpu.tune.matches)."""
    needed = set(live_nodes(g))
    last_use = {j: i for i in sorted(needed) for j in g.nodes[i].inputs}
    products = _products(g, needed)
    vals: dict[int, Any] = {}
    with np.errstate(all="ignore"):
        for i, node in enumerate(g.nodes):
            if i not in needed:
                continue
            args = [read(vals[j], v, env) for j, v in zip(node.inputs, node.views, strict=True)
                    if j not in products]
            if i in products:  # kept as its factors, for the sum that reads it
                vals[i] = args
                continue
            if node.op == "SumReduce" and node.inputs[0] in products:
                j = node.inputs[0]
                r = _sum_of_products(*vals[j], node.axis, wide)
                if r is None:  # not a matrix product: multiply, then sum, as written
                    d = g.nodes[j].dtype
                    args = [evaluate(g.nodes[j], vals[j], [g.nodes[k].dtype
                                                            for k in g.nodes[j].inputs], env)]
                    r = evaluate(node, args, [d], env)
                vals[i] = from_numpy_value(r, node.dtype)
            else:
                in_dtypes = [g.nodes[j].dtype for j in node.inputs]
                data = inputs.get(node.name) if node.op == "Input" else None  # type: ignore[arg-type]
                vals[i] = evaluate(node, args, in_dtypes, env, data)
            del args
            for j in set(node.inputs):  # free what no later node reads
                if last_use[j] == i and j not in g.outputs:
                    del vals[j]
    return [vals[o] for o in g.outputs]


class ReferenceRuntime:
    """numpy, no search: compiles through the e-graph (one SearchSpace per dim bucket),
    takes the original program of each (no timing) and executes it with `run_hlir`."""

    name = "reference"
    rules = CORE  # a backend adds its rule files and stages: CORE + Rules.files(...)

    def compile(self, graph: Graph, options: CompileOptions | None = None) -> ReferenceProgram:
        opts = options or CompileOptions()
        buckets = combos(graph.dims, opts.dim_buckets)
        budget = Budget(opts.max_enodes, opts.max_iterations, opts.saturation_time_limit)
        spaces = build_spaces(graph, [bounds(c) for c in buckets], self.rules, budget)
        rng = random.Random(opts.seed)
        programs = [decode(s, Genomes(s).baseline(rng), graph.dims) for s in spaces]
        return ReferenceProgram(graph, buckets, programs)


class ReferenceProgram(Program):
    def __init__(self, graph: Graph, buckets: list[Combo], programs: list[Graph]) -> None:
        super().__init__(graph)
        self.buckets, self.programs = buckets, programs

    def _run(self, env: dict[str, int]) -> None:
        program = self.programs[select(self.buckets, env)]
        data = {self.graph.nodes[i].name: a for i, a in self._data.items()}
        for out, value in zip(self.graph.outputs, run_hlir(program, data, env), strict=True):
            self._store(out, value)


