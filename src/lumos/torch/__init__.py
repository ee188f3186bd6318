"""`torch.compile(model, backend="lumos")`: PyTorch models through lumos.

The backend is registered under the `torch_dynamo_backends` entry point, so the
name works without importing lumos. Under inference (no graph needs gradients)
each Dynamo graph is lowered by AOTAutograd to functional core ATen (with a few
more decompositions), translated to the lumos Tensor API and compiled for the
chosen runtime; weights stay runtime inputs, bound from the live tensors on every
call. Options (`torch.compile(m, backend="lumos", options={...})`):

- `runtime`: "cpu" (generated C kernels, the default) or "reference" (numpy);
- `strict`: raise, naming the op and its shapes, instead of falling back;
- `cache`: reuse compiled graphs of the same structure (default True): in this process,
  and for the "cpu" runtime across processes through saved artifacts
  (`CompileOptions.cache`);
- `buckets`: a list of (min, max, representative) buckets for every dynamic dim, all
  compiled with the graph (cut to the dim's range). Without them a dynamic graph gets one
  program for every size, timed at the traced call's size rounded up to a power of two.
  A size outside every bucket compiles a program for a new bucket holding it (the
  power-of-two range around it, between the others), logged once, and stays in lumos;
- any `lumos.search.options.CompileOptions` field but `dim_buckets`; `limit` defaults to
  `LIMIT`, CompileOptions' own default (a search of up to 100 candidates and 60 s per
  graph and bucket, its result saved as an artifact; 2: the CPU runtime's two seed
  programs only, 0: the unfused program); `matmul_precision` defaults
  to PyTorch's `torch.get_float32_matmul_precision()` at compile time ("highest", or
  "high" for "high" and "medium": lumos never rounds a factor to one bfloat16).

Fallback: ops lumos cannot translate run in PyTorch (each logged once) and the regions
between them in lumos; so do ops whose output shape depends on the input's values
(`translate.DATA_DEPENDENT`: nonzero, masked_select, unique, ...; Dynamo breaks the
graph at them unless `capture_dynamic_output_shape_ops` is set); a graph that needs
gradients runs eagerly with a one-line notice; a failed search compiles the unfused
program instead; a failed compile for a new bucket runs that bucket's sizes in PyTorch,
and any other error at compile or run time sends the graph to PyTorch, each with a
warning: no internal error reaches the caller. With `strict=True` each of these raises
instead (bad options always raise).
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import fx

from lumos.egraph import worker
from lumos.errors import LumosError
from lumos.graph import Graph
from lumos.logs import warn
from lumos.runtime import Program
from lumos.search.options import Bucket, CompileOptions
from lumos.torch import cache, partition
from lumos.torch.compiled import Buckets, CompiledGraph, Programs, Scope, first_buckets, read_dims
from lumos.torch.translate import known_dims, translate

__all__ = ["Options", "backend"]

_SEARCH_FIELDS = {f.name for f in dataclasses.fields(CompileOptions)} - {"dim_buckets"}
_RUNTIMES = ("cpu", "reference")
LIMIT = CompileOptions.limit  # candidates timed per graph: a search, as g.compile's


@dataclass(frozen=True)
class Options:
    runtime: str = "cpu"
    strict: bool = False
    cache: bool = True
    buckets: tuple | None = None
    search: dict[str, Any] = field(default_factory=dict)

    @staticmethod
    def parse(options: dict[str, Any] | None) -> Options:
        opts = dict(options or {})
        unknown = set(opts) - {"runtime", "strict", "cache", "buckets"} - _SEARCH_FIELDS
        if unknown:
            raise LumosError(f"unknown lumos option(s) {sorted(unknown)}; the options are "
                             f"runtime, strict, cache, buckets and {sorted(_SEARCH_FIELDS)}")
        runtime = opts.pop("runtime", "cpu")
        if runtime not in _RUNTIMES:
            raise LumosError(f"runtime must be one of {_RUNTIMES}, got {runtime!r}")
        buckets = opts.pop("buckets", None)
        opts.setdefault("matmul_precision", "highest" if torch.get_float32_matmul_precision()
                        == "highest" else "high")
        o = Options(runtime, bool(opts.pop("strict", False)), bool(opts.pop("cache", True)),
                    None if buckets is None else tuple(tuple(b) for b in buckets), opts)
        o.compile_options({"s": o.buckets} if o.buckets else {})  # checks them now
        return o

    def compile_options(self, buckets: Mapping[str, Sequence[Bucket]]) -> CompileOptions:
        """The search options of a compile over `buckets` (per dim)."""
        return CompileOptions(**{"limit": LIMIT, **self.search}, cache=self.cache,
                              dim_buckets=buckets)

    def signature(self) -> str:
        """Everything that decides what a compile gives and how its failures behave:
        options with the same signature share compiled graphs (`strict` too, since a
        non-strict compile may have settled for the unfused program)."""
        return repr((self.runtime, self.strict, self.buckets, self.compile_options({})))


def backend(gm: fx.GraphModule, example_inputs: Sequence[Any],
            options: dict[str, Any] | None = None) -> Any:
    """The torch.compile backend: returns the callable that runs the Dynamo graph `gm`."""
    opts = Options.parse(options)
    if torch.is_grad_enabled() and any(isinstance(x, torch.Tensor) and x.requires_grad
                                       for x in example_inputs):
        msg = ("this graph needs gradients and lumos compiles inference only, so it runs "
               "eagerly in PyTorch; call the model under torch.no_grad() or "
               "torch.inference_mode() to compile it")
        if opts.strict:
            raise LumosError(msg)
        _warn_once("gradients", msg)
        return gm.forward
    from torch._functorch.aot_autograd import aot_module_simplified

    if opts.compile_options({}).saturation_time_limit is not None:
        worker.warm()  # the e-graph's process (see build_spaces) starts while PyTorch traces
    try:
        runtime = _runtime(opts.runtime)
        with torch.inference_mode():
            return aot_module_simplified(
                gm, example_inputs, decompositions=_decompositions(),
                fw_compiler=functools.partial(_compile, opts=opts, runtime=runtime),
                keep_inference_input_mutations=True)
    except Exception as e:
        if opts.strict:
            raise
        warn(f"could not compile a graph ({type(e).__name__}: {e}); it runs in PyTorch")
        return gm.forward


def _compile(gm: fx.GraphModule, example_inputs: Any, *, opts: Options, runtime: Any,
             scope: Scope | None = None) -> Any:
    """A callable for a core-ATen graph: all in lumos, or split around what fails.
    `scope` is given for a region of a split graph."""
    outer = scope.names if scope else frozenset()
    key = cache.key(gm, opts.signature(), sorted(outer)) if opts.cache else None
    hit = cache.get(key) if key is not None else None
    if hit is not None:
        return CompiledGraph(hit, gm, opts.strict, scope)
    tr = translate(gm, outer)
    if tr.failures:
        first = next(iter(tr.failures.values()))
        if opts.strict:
            raise LumosError(f"strict: cannot translate {first}")
        if scope is not None:
            raise LumosError(first)
        for node, msg in tr.failures.items():
            _warn_once(str(node.target), f"{msg}; it runs in PyTorch")
        regions = Scope(known_dims(tr))
        split = partition.split(gm, set(tr.failures), functools.partial(
            _compile, example_inputs=None, opts=opts, runtime=runtime, scope=regions))

        def run(*args: Any) -> Any:
            try:
                regions.env = read_dims(tr, args, gm)
            except Exception as e:
                if opts.strict:
                    raise
                _warn_once("dims", f"could not read a graph's sizes ({type(e).__name__}: "
                           f"{e}); it runs in PyTorch")
                return gm(*args)
            return split(*args)

        return run
    programs = Programs(tr, functools.partial(_program, tr.graph, runtime, opts),
                        first_buckets(tr, opts.buckets))
    if key is not None:
        cache.put(key, programs)
    return CompiledGraph(programs, gm, opts.strict, scope)


def _program(g: Graph, runtime: Any, opts: Options, buckets: Buckets) -> Program:
    """The searched program for `buckets`; if the CPU search fails, the unfused one (no
    search, every size): a bug in fusion or tuning costs speed, not the whole graph."""
    try:
        return g.compile(runtime, opts.compile_options(buckets))
    except Exception as e:
        if opts.strict or opts.runtime != "cpu":
            raise
        warn(f"the search for a graph of {len(g.nodes)} nodes failed ({type(e).__name__}: "
             f"{e}); it runs unfused")
        return g.compile(runtime, CompileOptions(limit=0))


def _runtime(name: str) -> Any:
    if name == "reference":
        from lumos.runtime import ReferenceRuntime

        return ReferenceRuntime()
    from lumos.runtime.cpu import CpuRuntime

    return CpuRuntime()


@functools.cache
def _decompositions() -> dict[Any, Any]:
    from torch._decomp import core_aten_decompositions, get_decompositions

    aten = torch.ops.aten
    extra = [aten._softmax, aten._log_softmax, aten.native_layer_norm, aten.gelu, aten.addmm,
             aten.silu]
    return {**core_aten_decompositions(), **get_decompositions(extra)}


_warned: set[str] = set()


def _warn_once(key: str, message: str) -> None:
    if key not in _warned:
        _warned.add(key)
        warn(message)
