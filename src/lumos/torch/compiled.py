"""A translated ATen graph and its lumos programs, called with the real tensors.

Every call binds every input afresh (weights included) without copying. A CPU program
is handed each tensor's memory and computes into fresh output tensors (`RawCall`);
another runtime's program binds numpy arrays sharing the tensors' memory (bf16 as its
16-bit pattern) and its results come back as tensors over its result arrays.

A dynamic graph has programs for dim buckets (`Programs`): a size outside all of them
compiles a program for a new bucket holding it, and only if that compile fails do the
calls of that bucket run in PyTorch. Anything else that goes wrong at run time sends the
graph to PyTorch for good, with one warning (or raises, with `strict`).
"""

from __future__ import annotations

import functools
import operator
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
from torch import fx

from lumos.errors import BindError
from lumos.logs import warn
from lumos.runtime import Program
from lumos.search.options import Bucket
from lumos.shape import Expr
from lumos.torch.translate import DTYPES, ArgOut, TensorOut, Translation

Buckets = dict[str, tuple[Bucket, ...]]  # per dim; a program covers every combination


@dataclass
class Scope:
    """The dims of a whole graph, read from its arguments on each call, for its regions
    (a region's own inputs may not reveal them, e.g. when it only sees s + 1)."""

    names: frozenset[str]
    env: dict[str, int] = field(default_factory=dict)


class NoProgram(Exception):
    """The compile for these sizes failed (warned then): the call runs in PyTorch."""


def _pow2(v: int) -> int:
    """The smallest power of two >= v (1 for v <= 1)."""
    return 1 << max(v - 1, 0).bit_length()


def _holds(b: Bucket, v: int) -> bool:
    return b[0] <= v and (b[1] is None or v <= b[1])


def first_buckets(tr: Translation, user: tuple[Bucket, ...] | None) -> Buckets:
    """The buckets of a graph's first program. With the user's buckets: those, cut to each
    dim's range (PyTorch gives dynamic sizes a range such as [2, inf)). Without: one bucket
    over the whole range, timed at the traced call's size rounded up to a power of two (a
    size someone runs; rounded, so the saved artifact serves the next process too)."""
    out: Buckets = {}
    for d, (lo, hi) in sorted(tr.graph.dims.items()):
        size = tr.hints.get(d, lo)
        if user is None:
            out[d] = ((lo, hi, _clamp(_pow2(size), lo, hi)),)
            continue
        cut = []
        for a, b, rep in user:
            a, b = max(a, lo), b if hi is None else hi if b is None else min(b, hi)
            if b is None or a <= b:
                cut.append((a, b, _clamp(rep, a, b)))
        out[d] = tuple(cut) or (bucket_for(size, lo, hi, ()),)
    return out


def _span(b: Bucket) -> str:
    return f"[{b[0]}, {'inf' if b[1] is None else b[1]}]"


def _clamp(v: int, lo: int, hi: int | None) -> int:
    return max(lo, v if hi is None else min(v, hi))


def bucket_for(v: int, lo: int, hi: int | None, taken: Iterable[Bucket]) -> Bucket:
    """A bucket holding size v, which none of `taken` holds: the power-of-two range
    (2^(k-1), 2^k] around v, cut to the dim's range [lo, hi] and to the gap between the
    taken buckets; timed at its largest size."""
    top = _pow2(v)
    a, b = min(top // 2 + 1, v), top if hi is None else min(top, hi)
    for t_lo, t_hi, _ in taken:
        if t_hi is not None and t_hi < v:
            a = max(a, t_hi + 1)
        elif t_lo > v:
            b = min(b, t_lo - 1)
    a = max(a, min(lo, v))
    return a, b, b


class Programs:
    """The programs of one translation, each compiled for some dim buckets (all their
    combinations) by `build`; shared through the cache by every graph of its structure.
    A call whose sizes no program covers compiles one for buckets holding them: the taken
    bucket of a dim where one holds its size, else a new one (`bucket_for`)."""

    def __init__(self, tr: Translation, build: Callable[[Buckets], Program],
                 first: Buckets) -> None:
        self.tr, self.build = tr, build
        self.entries: list[tuple[Buckets, Program | None]] = []  # None: its compile failed
        if tr.graph.outputs:
            self.entries.append((first, build(first)))

    def find(self, env: Mapping[str, int], strict: bool) -> Program | None:
        """The program for the sizes `env` (None if the graph computes no tensor); raises
        NoProgram when the compile for their bucket failed."""
        if not self.entries:
            return None
        for buckets, program in self.entries:
            if all(any(_holds(b, env[d]) for b in bs) for d, bs in buckets.items()):
                if program is None:
                    raise NoProgram
                return program
        new: Buckets = {}
        for d in sorted(self.entries[0][0]):
            taken = {b for buckets, _ in self.entries for b in buckets[d]}
            held = [b for b in taken if _holds(b, env[d])]
            new[d] = (held[0] if held else bucket_for(env[d], *self.tr.graph.dims[d], taken),)
        what = ", ".join(f"{d}={env[d]} in {_span(bs[0])}" for d, bs in new.items())
        warn(f"no compiled program holds these sizes: compiling one for {what}")
        try:
            program = self.build(new)
        except Exception as e:
            if strict:
                raise
            warn(f"compiling for {what} failed ({type(e).__name__}: {e}); those sizes run "
                 "in PyTorch")
            program = None
        self.entries.append((new, program))
        if program is None:
            raise NoProgram
        return program


class CompiledGraph:
    def __init__(self, programs: Programs, module: fx.GraphModule, strict: bool,
                 scope: Scope | None = None) -> None:
        self.programs, self.tr, self.module, self.strict = programs, programs.tr, module, strict
        self.scope = scope
        self.failed = False
        self._sources = [s if isinstance(s, int) else operator.attrgetter(s)
                         for _, s in self.tr.inputs]
        self._raw: dict[int, RawCall | None] = {}  # by program (None: not a CPU program)

    def __call__(self, *args: Any) -> Any:
        if not self.failed:
            try:
                env = self._dims(args)
                return self._run(self.programs.find(env, self.strict), args, env)
            except NoProgram:
                pass
            except Exception as e:
                if self.strict:
                    raise
                warn(f"a compiled graph failed to run ({type(e).__name__}: {e}); "
                     "it runs in PyTorch from now on")
                self.failed = True
        return self.module(*args)

    def _run(self, prog: Program | None, args: tuple, env: dict[str, int]) -> Any:
        tr = self.tr
        if prog is None:  # (the graph computes no tensor)
            return self._finish(Results(None, None, args, env), args)
        raw = self._raw.get(id(prog), False)
        if raw is False:
            raw = self._raw[id(prog)] = RawCall.of(tr, prog, self._sources)
        if raw is not None:
            return self._finish(raw.run(args, self.module, env), args)
        # another runtime: every input bound through set_data
        spans = (np.zeros(len(tr.inputs), np.int64), np.zeros(len(tr.inputs), np.int64))
        for k, ((t, _), source) in enumerate(zip(tr.inputs, self._sources, strict=True)):
            x = args[source] if isinstance(source, int) else source(self.module)
            prog.set_data(t, to_numpy(x))
            a = prog.bound(t)
            spans[0][k] = a.ctypes.data
            spans[1][k] = spans[0][k] + a.nbytes
        prog.execute({k: v for k, v in env.items() if k in tr.graph.dims})
        return self._finish(Results(prog, spans, args, env), args)

    def _finish(self, results: Results, args: tuple) -> Any:
        """The call's return value; the inputs it mutates updated."""
        outs = results.value(self.tr.outputs)
        # every new value first: a failure leaves the inputs untouched for the fallback
        updates = [(args[i], results.tensor(t, args[i].dtype)) for i, t in self.tr.mutations]
        for dst, new in updates:
            dst.copy_(new)
        return outs

    def _dims(self, args: tuple) -> dict[str, int]:
        return (self.scope.env if self.scope else {}) | read_dims(self.tr, args, self.module)


class Results:
    """One run's results as PyTorch values: tensors over the program's result arrays, or
    copies where an input (`spans`: the bound inputs' memory, [start, end)) or an earlier
    result shares their memory. (A class, not closures: a recursive closure is a reference
    cycle, which kept each call's arguments alive until the next garbage collection.)"""

    def __init__(self, prog: Program | None, spans: tuple[np.ndarray, np.ndarray] | None,
                 args: tuple, env: dict[str, int]) -> None:
        self.prog, self.spans, self.args, self.env = prog, spans, args, env
        self.taken: list[tuple[int, int]] = []

    def tensor(self, t: Any, dtype: torch.dtype) -> torch.Tensor:
        assert self.prog is not None and self.spans is not None
        starts, ends = self.spans
        arr = self.prog.get(t)
        lo = arr.ctypes.data
        hi = lo + arr.nbytes
        if not arr.flags.writeable or bool(((starts < hi) & (ends > lo)).any()) or \
                any(a < hi and b > lo for a, b in self.taken):
            arr = arr.copy()
            lo = arr.ctypes.data
            hi = lo + arr.nbytes
        self.taken.append((lo, hi))
        return to_torch(arr, dtype)

    def value(self, o: Any) -> Any:
        if isinstance(o, (tuple, list)):
            return type(o)(self.value(x) for x in o)
        if isinstance(o, TensorOut):
            return self.tensor(o.tensor, o.dtype)
        if isinstance(o, ArgOut):
            return self.args[o.position]
        if isinstance(o, Expr):
            return int(o.eval(self.env))
        return o


class RawResults(Results):
    """A `RawCall`'s results: the tensors it ran into, one per graph output (a second
    reference to one of them is a copy, as eager PyTorch returns distinct tensors)."""

    def __init__(self, tensors: list[torch.Tensor], at: dict[tuple, int], args: tuple,
                 env: dict[str, int]) -> None:
        super().__init__(None, None, args, env)
        self.tensors, self.at, self.given = tensors, at, [False] * len(tensors)

    def tensor(self, t: Any, dtype: torch.dtype) -> torch.Tensor:
        k = self.at[(t.node, t.view)]
        out = self.tensors[k]
        if self.given[k]:
            return out.clone()
        self.given[k] = True
        return out


class RawCall:
    """A CPU program called with the tensors' own memory (`CpuProgram.run_raw`): each
    input checked (storage dtype, shape for the call's dims, CPU; a non-contiguous one
    copied), the outputs fresh tensors. Binding through `set_data` and reading through
    `get` cost more than the tiny Llama's decode kernels (30 inputs, 5 results: 0.3 ms
    against 0.2)."""

    def __init__(self, tr: Translation, prog: Any, sources: list) -> None:
        g = tr.graph
        by_node = {t.node: k for k, (t, _) in enumerate(tr.inputs)}
        self.prog, self.dims = prog, sorted(g.dims)
        self.sources = [sources[by_node[node]] for node in prog.input_nodes]
        self.shapes = [g.nodes[node].shape for node in prog.input_nodes]
        torch_of = {d: t for t, d in DTYPES.items()}
        self.dtypes = [torch_of[g.nodes[node].dtype] for node in prog.input_nodes]
        self.out_dtypes = [torch_of[g.nodes[o].dtype] for o in g.outputs]
        index = {o: k for k, o in enumerate(g.outputs)}
        self.at = {key: index[o] for key, o in g.output_of.items()}
        self._want: dict[tuple[int, ...], list[tuple[int, ...]]] = {}  # by dims

    @staticmethod
    def of(tr: Translation, prog: Program, sources: list) -> RawCall | None:
        """The raw call of `prog`, or None if it is not a CPU program or some input of
        its graph has no source among the call's arguments."""
        from lumos.runtime.cpu.program import CpuProgram
        if not isinstance(prog, CpuProgram) or \
                {t.node for t, _ in tr.inputs} != set(prog.input_nodes):
            return None
        return RawCall(tr, prog, sources)

    def run(self, args: tuple, module: fx.GraphModule, env: dict[str, int]) -> RawResults:
        key = tuple(env[d] for d in self.dims)
        want = self._want.get(key)
        if want is None:
            if len(self._want) > 4096:
                self._want.clear()
            want = self._want[key] = [tuple(int(e.eval(env)) for e in s) for s in self.shapes]
        xs, pointers = [], []
        for source, shape, dtype in zip(self.sources, want, self.dtypes, strict=True):
            x = args[source] if isinstance(source, int) else source(module)
            if x.dtype != dtype or x.shape != shape or not x.is_cpu:
                raise BindError(f"an input of {x.dtype} {tuple(x.shape)} on {x.device} "
                                f"where the graph has {dtype} {shape} on the CPU")
            if not x.is_contiguous():
                x = x.contiguous()
                xs.append(x)  # (alive until the run returns)
            pointers.append(x.data_ptr())
        outs = [torch.empty(shape, dtype=dtype)
                for shape, dtype in zip(self.prog.output_shapes(env), self.out_dtypes,
                                        strict=True)]
        self.prog.run_raw(env, pointers, [t.data_ptr() for t in outs])
        return RawResults(outs, self.at, args, env)


def read_dims(tr: Translation, args: tuple, module: fx.GraphModule) -> dict[str, int]:
    """The values of the dims `tr` reads from its arguments (see `known_dims`)."""
    env = {name: int(args[i]) for name, i in tr.dim_args}
    for source, axes in tr.sized_by:
        x = args[source] if isinstance(source, int) else \
            functools.reduce(getattr, source.split("."), module)
        for axis, name in axes:
            env[name] = int(x.shape[axis])
    return env


def to_numpy(t: torch.Tensor) -> np.ndarray:
    """The tensor's memory as a numpy array (a copy only if it is not contiguous)."""
    t = t.detach()
    if not t.is_contiguous():
        t = t.contiguous()
    if t.dtype == torch.bfloat16:
        return t.view(torch.int16).numpy().view(np.uint16)
    return t.numpy()


def to_torch(arr: np.ndarray, dtype: torch.dtype) -> torch.Tensor:
    """A tensor over a result array (bf16 results are their bit patterns)."""
    if dtype == torch.bfloat16:
        return torch.from_numpy(arr.view(np.int16)).view(torch.bfloat16)
    return torch.from_numpy(arr)
