"""CpuRuntime: a graph becomes one C library whose driver runs every kernel in order
over a preplanned arena, entered by one foreign call per `execute`."""

from __future__ import annotations

import ctypes
import dataclasses
import functools
import hashlib
import os
import random
import shlex
import subprocess
import sys
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from functools import cache
from pathlib import Path
from typing import Any

import numpy as np
import scipy_openblas32

import lumos
from lumos import record
from lumos.artifact import (
    Artifact,
    ArtifactError,
    BucketChoice,
    graph_fingerprint,
    load_artifact,
    save_artifact,
)
from lumos.egraph import Budget, ENode, Rules, SearchSpace, build_spaces
from lumos.egraph.buckets import Combo, bounds, combos, select
from lumos.errors import BindError
from lumos.graph import Graph
from lumos.logs import log, warn
from lumos.paths import cache_off
from lumos.runtime.base import Program
from lumos.runtime.cpu.cc import FLAGS, amx, cache_dir, compile_units, cpu_id, load
from lumos.runtime.cpu.codegen import STATIC_HEADER, Buffer, Kernel, Layout, generate
from lumos.runtime.cpu.kernels import (
    LOWER,
    RULES,
    Kernels,
    cpu_space,
    from_genome,
    from_graph,
    seeds,
)
from lumos.runtime.cpu.memory import Slabs, pages
from lumos.runtime.cpu.plan import ALIGN, plan
from lumos.search import GeneticSearch, Genome, Genomes, KernelSearch
from lumos.search.options import CompileOptions
from lumos.search.verdicts import Verdicts


def build(program: Graph | Kernels, flush_denormals: bool = False,
          profile: bool = False, weights: frozenset[str] = frozenset()) -> CompiledProgram:
    """A kernel program (or a Graph: one kernel per node) -> compiled C program
    (`flush_denormals`: see CompileOptions; `profile`: each kernel timed, `kernel_ns`;
    `weights`: the inputs bound once, see codegen.generate)."""
    kernels = program if isinstance(program, Kernels) else from_graph(program)
    units, layout = generate(kernels, flush_denormals, profile, weights)
    compiled = CompiledProgram(compile_units(units), layout)
    compiled.origin = kernels.origin
    return compiled


class CompiledProgram:
    """A compiled graph: `run` (caller-supplied outputs) or call it (fresh outputs).
    Picklable (the library is reloaded by path), so it can run in a sandbox process."""

    def __init__(self, library: Path, layout: Layout) -> None:
        self.library, self.layout = library, layout
        self._plans: dict[tuple[int, ...], tuple[np.ndarray, int]] = {}
        self._rounded: dict[tuple[int, ...], tuple[np.ndarray, int, np.ndarray]] = {}
        self._arena = np.empty(0, np.uint8)
        self._fn: Any = None
        self._sizes: tuple[np.ndarray, list[int]] | None = None  # see `plan`
        self._out_shapes: dict[tuple[int, ...], list[tuple[int, ...]]] = {}  # by dims
        self.origin: dict[int, tuple[int, frozenset[int]]] = {}  # see Kernels.origin

    @property
    def source(self) -> Path:
        return self.library.with_suffix(".c")

    def __getstate__(self) -> dict:
        return {"library": self.library, "layout": self.layout}

    def __setstate__(self, state: dict) -> None:
        self.__init__(state["library"], state["layout"])  # type: ignore[misc]

    def _function(self) -> Any:
        if self._fn is None:
            lib = load(self.library)
            lib.lumos_set_threads(int(os.environ.get("LUMOS_NUM_THREADS") or 0))
            self._budget = ctypes.c_int64.in_dll(lib, "lumos_budget_ns")
            self._fn = lib.lumos_run
            self._fn.argtypes = [ctypes.c_void_p] * 6
            self._fn.restype = None
        return self._fn

    def plan(self, env: Mapping[str, int]) -> tuple[np.ndarray, int]:
        """(arena offset of each intermediate, arena bytes) for these dims (cached). The
        plan is made for the dims rounded up to powers of two and serves every size whose
        buffers fit it (offsets that keep buffers apart keep smaller ones apart), so a
        decode loop plans once per doubling of its context, not per token (a plan can
        cost as much as the step's kernels)."""
        dims = self.layout.dims
        key = tuple(env[d] for d in dims)
        hit = self._plans.get(key)
        if hit is not None:
            return hit
        temps = self.layout.temps
        if self._sizes is None:  # the constant sizes once; those of symbolic size per dims
            self._sizes = (np.array([t.nbytes.value if t.nbytes.is_num else 0 for t in temps],
                                    np.int64),
                           [k for k, t in enumerate(temps) if not t.nbytes.is_num])
        sizes, symbolic = self._sizes[0].copy(), self._sizes[1]
        memo: dict[Any, int] = {}  # (each distinct size once, as for output_shapes)
        sizes[symbolic] = [memo[e] if (e := temps[k].nbytes) in memo else
                           memo.setdefault(e, e.eval(env)) for k in symbolic]
        up = tuple(1 << max(v - 1, 0).bit_length() for v in key)
        rounded = self._rounded.get(up)
        if rounded is None or np.any(sizes > rounded[2]):
            renv = dict(zip(dims, up, strict=True))
            big = np.array([t.nbytes.eval(renv) for t in temps], np.int64)
            if np.any(sizes > big):  # a buffer that shrinks as a dim grows: plan exactly
                up, big = key, sizes
            offsets, total = plan(big.tolist(), [(t.first, t.last) for t in temps])
            log("memory", f"peak intermediates {total} bytes for dims "
                          f"{dict(zip(dims, up, strict=True))} ({len(temps)} buffers, "
                          f"{int(big.sum())} bytes without reuse)")
            rounded = self._rounded[up] = (np.array(offsets, np.int64), total, big)
        hit = self._plans[key] = rounded[:2]
        return hit

    def shape(self, b: Buffer | Kernel, env: Mapping[str, int]) -> tuple[int, ...]:
        return tuple(int(e.eval(env)) for e in b.shape)

    def output_shapes(self, env: Mapping[str, int]) -> list[tuple[int, ...]]:
        key = tuple(env[d] for d in self.layout.dims)
        hit = self._out_shapes.get(key)
        if hit is None:  # (each distinct shape once: SmolLM2's 60 KV caches share one)
            memo: dict[tuple, tuple[int, ...]] = {}
            hit = self._out_shapes[key] = [
                memo[b.shape] if b.shape in memo else memo.setdefault(b.shape, self.shape(b, env))
                for b in self.layout.outputs]
        return hit

    def clear_kernel_ns(self) -> None:
        """Zeroes each profiled kernel's nanoseconds (a run stopped at its budget leaves
        the kernels it did not reach at 0)."""
        if n := len(self.layout.profiled):
            ctypes.memset((ctypes.c_int64 * n).in_dll(load(self.library), "lumos_profile_ns"),
                          0, 8 * n)

    def kernel_ns(self) -> list[int]:
        """Each profiled kernel's nanoseconds in the last run (`layout.profiled` order)."""
        n = len(self.layout.profiled)
        return list((ctypes.c_int64 * n).in_dll(load(self.library), "lumos_profile_ns")) \
            if n else []

    def log_profile(self, env: Mapping[str, int]) -> None:
        """Logs each kernel's time in the last run (of a program compiled with
        LUMOS_LOG=profile) and the bandwidth of writing its output."""
        kernels = self.layout.profiled
        ns = (ctypes.c_int64 * len(kernels)).in_dll(load(self.library), "lumos_profile_ns")
        for k, (kern, t) in enumerate(zip(kernels, ns, strict=True)):
            shape = self.shape(kern, env)
            nbytes = int(np.prod(shape)) * kern.dtype.itemsize
            log("profile", f"kernel {k} (node {kern.node}) {kern.op} {kern.dtype.name}"
                           f"{list(shape)}: {t / 1e3:.1f} us, {nbytes / max(t, 1):.3g} GB/s")

    def run(self, inputs: Sequence[np.ndarray], env: Mapping[str, int],
            outputs: Sequence[np.ndarray], in_pointers: np.ndarray | None = None,
            out_pointers: np.ndarray | None = None, budget: float | None = None,
            statics: Statics | None = None) -> None:
        """Compute into `outputs` (C-contiguous, right shapes) from `inputs`, which must be
        C-contiguous arrays of the inputs' shapes and storage dtypes (unchecked); their
        data pointers (int64 arrays) if the caller has them. With `budget` (seconds) the
        run stops after the kernel that exceeds it, its outputs unfinished (a search's
        timing of a candidate that has already lost). `statics`: where the kernels of
        weights alone keep their results between runs (the caller resets it when a weight
        changes); without, they run every time."""
        offsets, total = self.plan(env)
        if self._arena.size < total:
            self._arena = pages(total)  # (ALIGN-aligned)
        arena = self._arena.ctypes.data
        dims = np.array([env[d] for d in self.layout.dims] or [0], np.int64)
        ins, outs = (p if p is not None else np.array([a.ctypes.data for a in arrays] or [0],
                                                      np.int64)
                     for p, arrays in ((in_pointers, inputs), (out_pointers, outputs)))
        # (the arrays stay referenced until the call returns)
        fn = self._function()
        if statics is None:
            statics = Statics()
        stat = statics.pointers(self.layout)
        if budget is None:
            fn(arena, offsets.ctypes.data, ins.ctypes.data, outs.ctypes.data, dims.ctypes.data,
               stat.ctypes.data)
            return
        self._budget.value = max(1, int(budget * 1e9))
        try:
            fn(arena, offsets.ctypes.data, ins.ctypes.data, outs.ctypes.data, dims.ctypes.data,
               stat.ctypes.data)
        finally:
            self._budget.value = 0

    def __call__(self, inputs: Sequence[np.ndarray], env: Mapping[str, int]) -> list[np.ndarray]:
        """Checked execution: the outputs, freshly allocated."""
        if len(inputs) != len(self.layout.inputs):
            raise BindError(f"expected {len(self.layout.inputs)} inputs, got {len(inputs)}")
        arrays = []
        for b, a in zip(self.layout.inputs, inputs, strict=True):
            a = np.asarray(a, order="C")  # (ascontiguousarray makes 0-d 1-d)
            if a.dtype != b.dtype.np or a.shape != self.shape(b, env):
                raise BindError(f"input {b.node}: expected {b.dtype.name} "
                                f"{self.shape(b, env)}, got {a.dtype} {a.shape}")
            arrays.append(a)
        outs = [np.empty(self.shape(b, env), b.dtype.np) for b in self.layout.outputs]
        self.run(arrays, env, outs)
        return outs


class Statics:
    """The buffers of the kernels that read weights alone (Layout.statics), kept across
    runs and shared by programs with equal keys (one graph's buckets): each is
    STATIC_HEADER bytes, whose first int64 the driver sets once it has computed the data
    after them, 64-byte aligned. `reset` makes every one be computed again."""

    def __init__(self) -> None:
        self._buffers: dict[str, np.ndarray] = {}
        self._pointers: dict[int, tuple[Layout, np.ndarray]] = {}  # by id(layout)

    @property
    def nbytes(self) -> int:
        return sum(b.nbytes for b in self._buffers.values())

    def pointers(self, layout: Layout) -> np.ndarray:
        """The `stat` array of a program of this layout (int64 addresses)."""
        hit = self._pointers.get(id(layout))
        if hit is not None and hit[0] is layout:
            return hit[1]
        missing = {key: STATIC_HEADER + -(-nbytes // ALIGN) * ALIGN
                   for key, nbytes in layout.statics if key not in self._buffers}
        if missing:  # one slab for those of this layout (on huge pages: `pages`)
            slab, at = pages(sum(missing.values())), 0
            for key, size in missing.items():
                buf = self._buffers[key] = slab[at:at + size]
                buf[:8] = 0  # (not computed yet)
                at += size
        addresses = [self._buffers[key].ctypes.data for key, _ in layout.statics]
        ptrs = np.array(addresses or [0], np.int64)
        self._pointers[id(layout)] = (layout, ptrs)
        return ptrs

    def reset(self) -> None:
        for buf in self._buffers.values():
            buf[:8] = 0


class CpuRuntime:
    """Generated C kernels compiled with the system compiler. The graph goes through the
    e-graph (one SearchSpace per dim bucket) and a timed search (lumos.runtime.cpu.tune)
    picks the fastest correct program of each (`CompileOptions.limit=0`: the baseline
    program instead, one kernel per node, no fusion). The choices are saved as an artifact
    and reused by later compiles of the same graph (CompileOptions.cache).

    `artifacts`: a file written by `ship` (lumos.runtime.cpu.ship) that `compile` loads
    each graph's program from, or refuses with an ArtifactError; with `recompile`, a file
    that does not fit is a warning and the graph is compiled. `ship(path, meta)` writes
    the programs this runtime compiled (or loaded) to such a file."""

    name = "cpu"
    rules = RULES

    def __init__(self, artifacts: str | os.PathLike | None = None,
                 recompile: bool = False) -> None:
        self.artifacts, self.recompile = artifacts, recompile
        self._compiled: list[tuple[Artifact, list[Path]]] = []  # for ship: the libraries

    def ship(self, path: str | os.PathLike, meta: Mapping[str, Any] | None = None) -> None:
        from lumos.runtime.cpu.ship import ship

        ship(path, self._compiled, meta)

    def compile(self, graph: Graph, options: CompileOptions | None = None) -> CpuProgram:
        from lumos.runtime.cpu.isolate import Sandbox  # (these import this module)
        from lumos.runtime.cpu.tune import Profiling, fits_profiling, prepare, tune

        opts = options or CompileOptions()
        searched = opts.limit > 0
        flush = opts.flush_denormals
        buckets = combos(graph.dims, opts.dim_buckets, fits_profiling(graph))
        rules = self.rules if searched else LOWER  # the baseline fuses nothing
        named = opts if searched else None  # (the options that name the artifact)
        if self.artifacts is not None:
            from lumos.runtime.cpu import ship

            try:
                art, made = ship.load(self.artifacts, graph, graph_fingerprint(graph),
                                      signature(rules, named), buckets, flush)
                log("cache", f"loaded compiled program from {self.artifacts}")
                return self._keep(art, graph, buckets, made)
            except ArtifactError as e:
                if not self.recompile:
                    raise
                warn(f"{e}; compiling again")
        weights = weight_names(graph)
        saved = ArtifactCache(graph, rules, named) if caching(opts) else None
        hit = saved.load(buckets) if saved is not None else None
        if hit is not None:
            made = [build(from_genome(s, [0] * len(s.classes), graph.dims), flush,
                          weights=weights) for s in hit]
            record.compiled(graph, self.name, named, buckets, [{}] * len(hit), hit, hit,
                            [dict.fromkeys(range(len(s.classes)), 0) for s in hit],
                            [None] * len(hit), str(saved.path) if saved else None)
            return self._keep(saved.artifact if saved else None, graph, buckets, made)
        budget = Budget(opts.max_enodes, opts.max_iterations, opts.saturation_time_limit)
        envs = [{d: b.representative for d, b in combo.items()} for combo in buckets]
        sizes = [timed_sizes(c, opts.dim_buckets) for c in buckets]
        programs, genomes, searches = [], [], []
        with Sandbox() as box, ThreadPoolExecutor(1) as pool:
            # the profiling inputs, the oracle and the sandbox's start need no e-graph:
            # prepared while it saturates (in its worker process) and the first candidate
            # compiles; a candidate runs once all are ready, so none is timed while inputs
            # are still being sent
            prepared = [[pool.submit(prepare, graph, env, opts.seed, box) for env in es]
                        for es in sizes] if searched else []
            bf16x3 = opts.matmul_precision == "high" and amx()
            saturated = build_spaces(graph, [bounds(c) for c in buckets], rules, budget)
            spaces = [cpu_space(s, graph.dims, bf16x3) for s in saturated]  # (its bounds)

            def profiling(k: int) -> list[Profiling]:
                return [[f.result() for f in fs] for fs in prepared][k]
            for k, space in enumerate(spaces):
                def realize(genome: Genome, space: SearchSpace = space,
                            profile: bool = searched) -> CompiledProgram:
                    return build(from_genome(space, genome, graph.dims), flush, profile,
                                 weights)
                if not searched:
                    genomes.append(Genomes(space).baseline(random.Random(0)))
                    programs.append(realize(genomes[-1]))
                    searches.append(None)
                    continue
                made = Genomes(space)  # (one ranking for the seeds and the search)
                ranks = [r for env in sizes[k]
                         for r in seeds(space, env, made, weights, graph.dims)] \
                    if opts.seeds else ()
                store = Verdicts(measured_under(sizes[k])) if opts.cache else None
                search = KernelSearch(space, opts, genomes=made, seeds=ranks,
                                      known=store.load() if store else None) \
                    if opts.search == "kernels" else \
                    GeneticSearch(space, opts, genomes=made, seeds=ranks)
                genomes.append(tune(graph, search, realize, sizes[k], box,
                                    functools.partial(profiling, k))[1])
                if store is not None and isinstance(search, KernelSearch):
                    store.save(search.learned())
                programs.append(realize(genomes[-1], profile=False))  # (its kernels: cached)
                searches.append(search)
        record.compiled(graph, self.name, named, buckets, envs, saturated, spaces, genomes,
                        searches, sizes=sizes)
        cut = next((s.timed_out for s in saturated if s.timed_out), None)
        if saved is not None and cut is not None:
            warn(f"the compiled program is not cached: {cut} (a compile that saturates "
                 "within the limit is; CompileOptions.saturation_time_limit raises it)")
        elif saved is not None:
            saved.save(buckets, spaces, genomes)
        art = saved.artifact if saved is not None else \
            ArtifactCache(graph, rules, named).artifact_of(buckets, spaces, genomes)
        return self._keep(art, graph, buckets, programs)

    def _keep(self, art: Artifact | None, graph: Graph, buckets: list[Combo],
              programs: list[CompiledProgram]) -> CpuProgram:
        """The program; its artifact and libraries kept for `ship` (not the programs, whose
        arenas the caller may drop; None: its choices cannot be named)."""
        if art is not None:
            self._compiled.append((art, [p.library for p in programs]))
        return CpuProgram(graph, buckets, programs)


def weight_names(graph: Graph) -> frozenset[str]:
    """The names of the graph's weight inputs (Graph.tensor(weight=True))."""
    return frozenset(n.name for n in graph.nodes if n.op == "Input" and n.persist)


def caching(options: CompileOptions) -> bool:
    """The artifact cache is on: `options.cache`, and neither LUMOS_ARTIFACTS=off nor
    LUMOS_CACHE=off."""
    return options.cache and not cache_off() and \
        os.environ.get("LUMOS_ARTIFACTS", "").strip().lower() != "off"


class ArtifactCache:
    """The artifact of one compile: `$LUMOS_CACHE/artifacts/<key>.lar`, the key hashing the
    graph fingerprint and `signature` (a changed compiler, rule, lumos source or option
    is another file; the artifact repeats both, and loading checks them)."""

    def __init__(self, graph: Graph, rules: Rules, options: CompileOptions | None) -> None:
        self.graph = graph_fingerprint(graph)
        self.signature = signature(rules, options)
        key = hashlib.sha256(repr((self.graph, sorted(self.signature.items()))).encode())
        self.path = cache_dir().parent / "artifacts" / f"{key.hexdigest()[:32]}.lar"
        self.artifact: Artifact | None = None  # the one loaded or saved last

    def load(self, buckets: list[Combo]) -> list[SearchSpace] | None:
        """Per bucket the saved program as a space of one alternative per class, or None
        when there is no artifact or it cannot be used (a warning: it is recompiled)."""
        if not self.path.exists():
            return None
        try:
            art = load_artifact(self.path, self.graph, self.signature)
            if [b.bucket for b in art.buckets] != [{d: tuple(v) for d, v in c.items()}
                                                   for c in buckets]:
                raise ArtifactError(f"artifact {str(self.path)!r} holds other dim buckets")
            spaces = [saved_space(b.program, self.path) for b in art.buckets]
        except ArtifactError as e:
            warn(f"{e}; compiling again")
            return None
        log("cache", f"loaded compiled program from {self.path}")
        self.artifact = art
        return spaces

    def save(self, buckets: list[Combo], spaces: list[SearchSpace],
             genomes: list[Genome]) -> None:
        art = self.artifact_of(buckets, spaces, genomes)
        if art is None:
            return
        save_artifact(self.path, art)
        log("cache", f"saved compiled program to {self.path}")

    def artifact_of(self, buckets: list[Combo], spaces: list[SearchSpace],
                    genomes: list[Genome]) -> Artifact | None:
        """The artifact of these choices (kept as `self.artifact`), or None with a warning
        when they cannot be named."""
        try:
            choices = [BucketChoice.of(s, g, c)
                       for c, s, g in zip(buckets, spaces, genomes, strict=True)]
        except ArtifactError as e:
            warn(f"the compiled program is not cached: {e}")
            return None
        self.artifact = Artifact(self.graph, self.signature, choices)
        return self.artifact


def saved_space(program: Sequence[tuple[int, ENode]], path: Path) -> SearchSpace:
    """A saved program (`extract` output: children first, the root last) as a space with
    one alternative per class, renumbered 0..n-1 in program order."""
    ids: dict[int, int] = {}
    classes: list[list[ENode]] = []
    for c, n in program:
        if c in ids or any(k not in ids for k in n.children):
            raise ArtifactError(f"artifact {str(path)!r} holds a program that is not in "
                                "children-first order")
        ids[c] = len(classes)
        classes.append([ENode(n.op, n.fields, tuple(ids[k] for k in n.children))])
    if not classes or classes[-1][0].op != "Root":
        raise ArtifactError(f"artifact {str(path)!r} holds a program without a root")
    return SearchSpace(classes, len(classes) - 1)


def signature(rules: Rules, options: CompileOptions | None) -> dict[str, str]:
    """What, besides the graph, decides the compiled program: the compiler, this CPU, the
    rules, the lumos sources, and the options (None: the baseline, no search)."""
    opts = None if options is None else sorted(
        (f.name, getattr(options, f.name)) for f in dataclasses.fields(options)
        if f.name != "cache")
    return {"runtime": "cpu", "cc": compiler(os.environ.get("CC") or "cc"),
            "flags": " ".join(FLAGS), "openblas": scipy_openblas32.__version__,
            "cpu": hashlib.sha256(cpu_id().encode()).hexdigest()[:16],
            "rules": hashlib.sha256(repr(rules).encode()).hexdigest()[:16],
            "lumos": sources_hash(), "options": repr(opts)}


def timed_sizes(combo: Combo, buckets: Mapping[str | tuple[str, ...], Sequence]
                ) -> list[dict[str, int]]:
    """The dims a bucket's candidates are timed at: its representative, and where dims
    were given no buckets (represented by their upper end) also those at their minimum,
    so that the program chosen serves the whole range (docs/performance.md)."""
    given = {n for k in buckets for n in ((k,) if isinstance(k, str) else k)}
    top = {d: b.representative for d, b in combo.items()}
    low = {d: v if d in given else combo[d].min for d, v in top.items()}
    return [top] if low == top else [top, low]


def measured_under(envs: Sequence[Mapping[str, int]]) -> str:
    """The conditions a search's times hold under (search.verdicts): this runtime, CPU,
    compiler and flags, BLAS, threads, and the dims timed at."""
    threads = os.environ.get("OMP_NUM_THREADS") or str(len(os.sched_getaffinity(0)))
    return repr(("cpu", cpu_id(), compiler(os.environ.get("CC") or "cc"), FLAGS,
                 scipy_openblas32.__version__, threads, [sorted(e.items()) for e in envs]))


@cache
def compiler(cc: str) -> str:
    """The C compiler's command and the first line of its `--version`."""
    try:
        out = subprocess.run([*shlex.split(cc), "--version"], capture_output=True, text=True,
                             timeout=30).stdout
    except (OSError, subprocess.SubprocessError):
        out = ""
    return f"{cc}: {next(iter(out.splitlines()), '')}"


@cache
def sources_hash() -> str:
    """sha256 over lumos's Python, rule and C files: an edit to rules, codegen, decoding or
    the fixed C makes earlier artifacts misses."""
    root = Path(lumos.__file__).parent
    h = hashlib.sha256()
    for p in sorted(q for q in root.rglob("*") if q.suffix in (".py", ".egg", ".c", ".h")):
        h.update(str(p.relative_to(root)).encode() + b"\0" + p.read_bytes() + b"\0")
    return h.hexdigest()[:16]


class _Binding:
    """One compiled program's inputs as last passed: the arrays, their data pointers and
    ends (what the C driver and the alias check read), updated for the inputs bound since
    (`pending`) instead of rebuilt each run (SmolLM2's step binds 756 inputs, 61 of them
    anew)."""

    def __init__(self, c: CompiledProgram, data: Mapping[int, np.ndarray],
                 by_name: Mapping[str, int]) -> None:
        nodes = [by_name[name] for name in c.layout.input_names]
        self.slots: dict[int, list[int]] = {}
        for k, node in enumerate(nodes):
            self.slots.setdefault(node, []).append(k)
        self.arrays = [data[node] for node in nodes]
        self.starts = np.array([a.ctypes.data for a in self.arrays] or [0], np.int64)
        self.ends = self.starts + np.array([a.nbytes for a in self.arrays] or [0], np.int64)
        self.pending: set[int] = set()

    def update(self, data: Mapping[int, np.ndarray]) -> None:
        for node in self.pending:
            a = data[node]
            for k in self.slots.get(node, ()):
                self.arrays[k] = a
                self.starts[k] = a.ctypes.data
                self.ends[k] = self.starts[k] + a.nbytes
        self.pending.clear()

    def overlaps(self, pointers: np.ndarray, nbytes: np.ndarray) -> np.ndarray:
        """For each array (data pointer, bytes) and input: whether their memory overlaps."""
        return (self.starts < pointers[:, None] + nbytes[:, None]) & \
            (self.ends > pointers[:, None])


class CpuProgram(Program):
    """One compiled program per dim bucket; `execute` runs the one holding the dims."""

    def __init__(self, graph: Graph, buckets: list[Combo],
                 programs: list[CompiledProgram]) -> None:
        super().__init__(graph)
        self.buckets, self.programs = buckets, programs
        self._by_name = {n.name: i for i, n in enumerate(graph.nodes) if n.op == "Input"}
        self._spare: dict[int, np.ndarray] = {}  # by output: scratch when it is fed back
        self._bindings: dict[int, _Binding] = {}  # by program index
        self._dim_names = sorted(graph.dims)
        self._selected: dict[tuple[int, ...], int] = {}  # dims -> program index
        self._slots: dict[int, np.ndarray] = {}  # by program index: see run_raw
        self.input_nodes = [i for i, n in enumerate(graph.nodes) if n.op == "Input"]
        self.statics = Statics()  # (all buckets': a weight's copy is computed once)
        self._weights = Slabs()  # where the weights bound to it live (memory.py)

    @property
    def compiled(self) -> CompiledProgram:
        """The program of the first bucket (the only one without dim buckets)."""
        return self.programs[0]

    def _keep(self, node: int, array: np.ndarray) -> np.ndarray:
        """A weight is copied into the program's own memory (on huge pages: memory.py);
        other inputs as the base class keeps them."""
        if not self.graph.nodes[node].persist or array.dtype.hasobject:
            return super()._keep(node, array)
        return self._weights.copy(array)

    def _bound(self, node: int) -> None:
        for b in self._bindings.values():
            b.pending.add(node)
        if self.graph.nodes[node].persist:
            self.statics.reset()

    def _select(self, env: Mapping[str, int]) -> int:
        key = tuple(env[d] for d in self._dim_names)
        index = self._selected.get(key)
        if index is None:
            if len(self._selected) > 4096:
                self._selected.clear()
            index = self._selected[key] = select(self.buckets, env)
        return index

    def output_shapes(self, env: Mapping[str, int]) -> list[tuple[int, ...]]:
        """The shapes of the graph's outputs (in `graph.outputs` order) for these dims."""
        return self.programs[self._select(env)].output_shapes(env)

    def run_raw(self, env: Mapping[str, int], inputs: Sequence[int],
                outputs: Sequence[int]) -> None:
        """Run on memory the caller holds, bypassing the bindings: `inputs`, the data
        pointer of each Input node (in `input_nodes` order), `outputs`, one per graph
        output (`output_shapes`). Unchecked: the caller guarantees every dim of the graph
        in `env`, inputs C-contiguous of their storage dtypes and shapes for these dims,
        and outputs that overlap no input and no other output (the torch backend: a
        tensor's pointer costs a fraction of what binding it as an array costs)."""
        index = self._select(env)
        c = self.programs[index]
        slots = self._slots.get(index)
        if slots is None:
            at = {node: k for k, node in enumerate(self.input_nodes)}
            slots = self._slots[index] = np.array(
                [at[self._by_name[name]] for name in c.layout.input_names], np.intp)
        ins = np.array(inputs, np.int64)[slots] if len(slots) else np.zeros(1, np.int64)
        outs = np.array(outputs or [0], np.int64)
        c.run((), env, (), ins, outs, statics=self.statics)
        if c.layout.profiled:
            c.log_profile(env)

    def _run(self, env: dict[str, int]) -> None:
        index = self._select(env)
        c = self.programs[index]
        bind = self._bindings.get(index)
        if bind is None:
            bind = self._bindings[index] = _Binding(c, self._data, self._by_name)
        else:
            bind.update(self._data)
        shapes = c.output_shapes(env)
        outs = self.graph.outputs
        results, kept = [], []
        for k, (o, b, shape) in enumerate(zip(outs, c.layout.outputs, shapes, strict=True)):
            prev = self._results.get(o)
            # reuse the last result if persisted, or if nobody else holds it (its refs:
            # the dict, `prev` and getrefcount's argument)
            if prev is not None and prev.shape == shape and (
                    self.graph.nodes[o].persist or sys.getrefcount(prev) <= 3):
                kept.append(k)
                results.append(prev)
            else:
                results.append(np.empty(shape, b.dtype.np))
        buffers = list(results)
        pointers = np.array([a.ctypes.data for a in results] or [0], np.int64)
        nbytes = np.array([a.nbytes for a in results] or [0], np.int64)
        # a result fed back as an input (a KV cache): the run writes over it where the
        # layout allows (a Scatter into that input, bound to nothing else), else the other
        # of two buffers, which becomes the result
        if kept:
            over = bind.overlaps(pointers[kept], nbytes[kept])
            fed = []
            for k, row in zip(kept, over, strict=True):
                j = c.layout.inplace_of.get(k)
                if j is not None and row[j] and row.sum() == 1 and \
                        bind.starts[j] == pointers[k] and bind.ends[j] == pointers[k] + nbytes[k]:
                    continue
                if row.any():
                    fed.append(k)
            spares = []
            for k in fed:
                s = self._spare.get(outs[k])
                spares.append(s if s is not None and s.shape == results[k].shape
                              else np.empty_like(results[k]))
            at = np.array([s.ctypes.data for s in spares] or [0], np.int64)
            hits = bind.overlaps(at, nbytes[fed]).any(1) if fed else []
            for j, (k, s, hit) in enumerate(zip(fed, spares, hits, strict=True)):
                buffers[k] = np.empty_like(s) if hit else s
                pointers[k] = buffers[k].ctypes.data if hit else at[j]
        c.run(bind.arrays, env, buffers, bind.starts, pointers, statics=self.statics)
        if c.layout.profiled:
            c.log_profile(env)
        for o, result, buf in zip(outs, results, buffers, strict=True):
            if buf is not result:  # no copy: the old result is the next run's spare
                self._spare[o] = result
            self._results[o] = buf
