"""Timed search on the CPU: each candidate program of a SearchSpace is compiled, run on
profiling inputs in the sandbox, checked against the oracle, and timed.

    program, genome = tune(graph, search, realize, envs, sandbox,
                           lambda: [prepare(graph, env, seed, sandbox) for env in envs])

A compile error is `Rejected`, and so is a candidate one of whose compiler processes
runs longer than `candidate_timeout` (it is killed then): one candidate whose source
chokes the C compiler must not stall the search. A crash, a hang (past
`execution_timeout`) or an output that differs from `run_hlir` of the original graph is
`Invalid`; otherwise the median of `trials` timed runs (after one warm-up run, which also
computes what depends on weights alone: a program runs that once per binding) is
`Measured`. Each candidate runs at each of a few sizes standing for its bucket (`envs`), its
time the mean over them, each size weighted by its ratio (`_weighted`). Profiling inputs
are random (seeded by `options.seed`) at each size; `prepare` draws them, runs the oracle
on them and stashes them in the sandbox (starting it), none of which needs the e-graph:
CpuRuntime.compile runs it in a thread while the e-graph saturates in its worker process
and the first candidate compiles; `tune` asks for it when the first candidate is ready
to run.
"""

from __future__ import annotations

import itertools
import math
import os
import statistics
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from lumos.dtype import DType, from_numpy_value, to_numpy_value
from lumos.graph import Graph
from lumos.logs import log, warn
from lumos.runtime.cpu.cc import CompileError, CompileTimeout, UnsupportedProgram, time_limit
from lumos.runtime.cpu.isolate import CandidateError, Sandbox, Stashed
from lumos.runtime.cpu.program import CompiledProgram, Statics
from lumos.runtime.reference import peak_bytes, run_hlir
from lumos.search import (
    GeneticSearch,
    Genome,
    Invalid,
    KernelSearch,
    KernelTime,
    Measured,
    Outcome,
    Rejected,
    SearchError,
)
from lumos.search.genome import genome_key
from lumos.search.options import CompileOptions

MAX_ARENA_FRACTION = 0.5  # of physical memory: a candidate needing more is not run
# the most bytes the oracle may hold at once at the sizes a search times by default; fixed,
# so every machine times the same sizes
PROFILING_BYTES = 1 << 31


def _memory() -> int:
    """Bytes of physical memory (inf where unknown)."""
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return 1 << 62


# relative tolerance per float dtype; the absolute one is scaled by the output's magnitude,
# so a reduction summed in another order (relative error ~ eps * sqrt(n)) still matches
RTOL = {"f64": 1e-10, "f32": 1e-4, "f16": 1e-2, "bf16": 5e-2}
# a candidate may also lie this many times as far from the oracle as the graph evaluated
# plainly does (`slack`): its own order of sums rounds differently, not worse by much
SLACK = 4.0


def fits_profiling(graph: Graph) -> Callable[[Mapping[str, int]], bool]:
    """Whether the oracle's values on `graph` at dims `env` take at most PROFILING_BYTES
    at once (reference.peak_bytes): the test `combos` lowers default sizes by."""
    return lambda env: peak_bytes(graph, env) <= PROFILING_BYTES


def profiling_inputs(graph: Graph, env: Mapping[str, int], seed: int) -> dict[str, np.ndarray]:
    """Random data for every input, by name: floats normal with standard deviation
    1/sqrt(fan-in) (the product of all but the first axis: 1 for vectors), as weights are
    initialized, so that a deep model's activations stay O(1) and its rounding errors small
    instead of growing layer by layer; ints in [-8, 8) ([0, 16) unsigned), bools fair coins.
    A float input that reaches a square root or a logarithm through additions alone (a
    batch norm's running variance, plus eps) is drawn positive (|x| + its scale): a
    negative one made the torch CNN's oracle outputs all NaN, which any NaN candidate
    matches."""
    rng = np.random.default_rng(seed)
    positive = _under_a_root(graph)
    out = {}
    for i, n in enumerate(graph.nodes):
        if n.op != "Input":
            continue
        shape = tuple(int(e.eval(env)) for e in n.shape)
        dt = n.dtype
        if dt.is_bool:
            a = rng.random(shape) < 0.5
        elif dt.is_int:
            lo = -8 if dt.signed else 0
            a = rng.integers(lo, lo + 16, shape).astype(dt.np)
        else:
            scale = 1 / math.sqrt(max(1, math.prod(shape[1:])))
            a = rng.standard_normal(shape, np.float32)  # (drawn as float32: fast for large weights)
            a *= np.float32(scale)
            if i in positive:
                np.abs(a, out=a)
                a += np.float32(scale)
            a = from_numpy_value(a, dt)
        out[n.name] = np.asarray(a, dtype=dt.np, order="C")  # keeps 0-d 0-d
    return out


def _under_a_root(graph: Graph) -> set[int]:
    """The float inputs (node indices) that reach a Sqrt or Log2 through Add and Cast."""
    readers: dict[int, list[int]] = {}
    for i, n in enumerate(graph.nodes):
        for j in n.inputs:
            readers.setdefault(j, []).append(i)
    found = set()
    for i, n in enumerate(graph.nodes):
        todo, seen = ([i] if n.op == "Input" and n.dtype.is_float else []), {i}
        while todo and i not in found:
            for r in readers.get(todo.pop(), ()):
                op = graph.nodes[r].op
                if op in ("Sqrt", "Log2"):
                    found.add(i)
                elif op in ("Add", "Cast") and r not in seen:
                    seen.add(r)
                    todo.append(r)
    return found


def matches(got: np.ndarray, want: np.ndarray, dt: DType, drift: float = 0.0) -> bool:
    """Exact for ints and bools; floats within RTOL of the oracle's largest magnitude (or
    `SLACK` x `drift`, the plain evaluation's: see `slack`, if more), NaN where the oracle
    has NaN."""
    if got.shape != want.shape or got.dtype != want.dtype:
        return False
    if not dt.is_float:
        return bool(np.array_equal(got, want))
    g = to_numpy_value(got, dt).astype(np.float64)
    w = to_numpy_value(want, dt).astype(np.float64)
    finite = np.isfinite(w)
    scale = float(np.abs(w[finite]).max()) if finite.any() else 1.0
    tol = RTOL[dt.name]
    return bool(np.allclose(g, w, rtol=tol, atol=max(tol * max(1.0, scale), SLACK * drift),
                            equal_nan=True))


def slack(graph: Graph, data: Mapping[str, np.ndarray], env: Mapping[str, int],
          want: Sequence[np.ndarray]) -> list[float]:
    """Per output, how far the graph evaluated plainly (float products summed in their
    own dtype: run_hlir(wide=False)) lies from the oracle (summed in f64): the rounding
    an ordinary evaluation of this graph on these inputs accumulates. A deep network's
    outputs legitimately drift that far (the KV caches of SmolLM2's last layers: 1.2e-4
    of their scale, past RTOL, by rounding that grows smoothly layer by layer, where a
    candidate's errors were 0.8-2.5x the plain evaluation's)."""
    plain = run_hlir(graph, data, dict(env), wide=False)
    out = []
    for o, p, w in zip(graph.outputs, plain, want, strict=True):
        dt = graph.nodes[o].dtype
        d = np.abs(to_numpy_value(p, dt).astype(np.float64) -
                   to_numpy_value(w, dt).astype(np.float64)) if dt.is_float else None
        if d is not None:
            d = d[np.isfinite(d)]  # (an overflow of the plain sums widens nothing)
        out.append(float(d.max()) if d is not None and d.size else 0.0)
    return out


_SEARCHES = itertools.count()


def _geomean(xs: Sequence[float]) -> float:
    """The geometric mean (a zero counts as a nanosecond: a kernel skipped at one size)."""
    return math.exp(statistics.fmean(math.log(max(x, 1e-9)) for x in xs))


def _weighted(times: Sequence[float], share: Sequence[float]) -> float:
    """The mean of `times` (one per size), each over its size's `share`: the geometric
    mean to first order about the first candidate measured, so each size counts by its
    ratio, and linear, so a program's kernels add up to it (a kernel 2x faster at the
    smallest size and 1.6x slower at the largest is not judged faster unless it gains
    there as much program time as it loses here)."""
    return statistics.fmean(t / s for t, s in zip(times, share, strict=True))


def timed(program: CompiledProgram, inputs: Sequence[np.ndarray], env: Mapping[str, int],
          trials: int, bound: float = math.inf) -> tuple[float, list[float]]:
    """Runs in the sandbox: the median seconds of `trials` runs after one warm-up, or the
    warm-up's seconds if they exceed `bound` (the candidate has lost); the warm-up stops
    after the kernel that passes `bound` (a losing candidate's whole run can take many
    times the best one's). And, of a profiled program, each kernel's least seconds over
    the trials (what else runs on the machine only ever adds time); when the warm-up
    stopped, each kernel's seconds in it (0 for those it did not reach)."""
    outs = [np.empty(program.shape(b, env), b.dtype.np) for b in program.layout.outputs]
    statics = Statics()  # (the kernels of weights alone run in the warm-up, untimed)
    program.clear_kernel_ns()
    t = time.perf_counter()
    program.run(inputs, env, outs, budget=bound if math.isfinite(bound) else None,
                statics=statics)
    if (warm := time.perf_counter() - t) > bound:
        return warm, [ns * 1e-9 for ns in program.kernel_ns()]
    times, kernels = [], []
    for _ in range(trials):
        t = time.perf_counter()
        program.run(inputs, env, outs, statics=statics)
        times.append(time.perf_counter() - t)
        if program.layout.profiled:
            kernels.append(program.kernel_ns())
    per_kernel = [min(k) * 1e-9 for k in zip(*kernels, strict=True)]
    return statistics.median(times), per_kernel


@dataclass
class Profiling:
    """One search's profiling inputs (stashed in the sandbox under `key`) and the oracle's
    outputs on them."""
    key: str
    data: dict[str, np.ndarray]
    want: list[np.ndarray]
    slack: list[float]  # per output (see `slack`)

    def stash(self, sandbox: Sandbox) -> None:
        """Both in the sandbox (again only if its worker was replaced): candidates are
        checked there, so only a verdict crosses the pipe, not every output."""
        sandbox.put(self.key, self.data, timeout=120.0)
        sandbox.put(f"{self.key}/want", {"want": self.want}, timeout=120.0)


def differs(program: CompiledProgram, inputs: Sequence[np.ndarray], env: Mapping[str, int],
            want: Sequence[list[np.ndarray]], dtypes: Sequence[DType],
            slacks: Sequence[float]) -> int | None:
    """Runs in the sandbox: the first output of `program` that does not match the
    oracle's (`want[0]`; `slacks`: see `slack`), or None."""
    got = program(inputs, env)
    return next((k for k, (a, w, dt, sl) in enumerate(zip(got, want[0], dtypes, slacks,
                                                          strict=True))
                 if not matches(a, w, dt, sl)), None)


def prepare(graph: Graph, env: Mapping[str, int], seed: int, sandbox: Sandbox) -> Profiling:
    """Profiling inputs at `env`, the oracle's outputs, and the inputs stashed in the
    sandbox (a worker that fails to start here is started again, and reported, by the
    first candidate's run)."""
    sandbox.start()  # its worker imports lumos while the oracle runs
    data = profiling_inputs(graph, env, seed)
    # the sandbox holds them for the whole search
    want = run_hlir(graph, data, dict(env))
    profiling = Profiling(f"inputs-{next(_SEARCHES)}", data, want, slack(graph, data, env, want))
    try:
        profiling.stash(sandbox)
    except CandidateError:
        pass
    return profiling


def tune(graph: Graph, search: GeneticSearch | KernelSearch,
         realize: Callable[[Genome], CompiledProgram],
         envs: Sequence[Mapping[str, int]], sandbox: Sandbox,
         profiling: Callable[[], Sequence[Profiling]]) -> tuple[CompiledProgram, Genome]:
    """The fastest correct program `search` finds, and its genome; `realize` compiles a
    genome; each candidate is checked and timed at each of `envs` (the sizes that stand
    for its bucket), its time (and each kernel's) the mean over them, each weighted by
    the inverse of its time in the first candidate measured (`_weighted`), so that each
    size counts by its ratio; `profiling` gives the Profiling of each (called once,
    when the first candidate has compiled)."""
    opts: CompileOptions = search.options
    prepared: list[Profiling] = []
    dtypes = [graph.nodes[o].dtype for o in graph.outputs]
    programs: dict[tuple, CompiledProgram] = {}
    share: list[float] = []  # per env: its time over the geometric mean, once measured

    timed_out: list[Genome] = []
    compile_limit = [opts.candidate_timeout]

    def evaluate(genome: Genome) -> Outcome:
        try:
            with time_limit(compile_limit[0]):
                program = realize(genome)
        except CompileError as e:
            if isinstance(e, CompileTimeout):
                timed_out.append(genome)
            # the search goes on without it, but say so: a timeout may cost the fast
            # program, and C that does not compile is a lumos bug to report (a program
            # codegen does not cover is neither)
            if not isinstance(e, UnsupportedProgram):
                warn(f"search candidate rejected: {str(e).splitlines()[0]}")
            log("search", f"candidate rejected: {str(e)[:4000]}")
            return Rejected(str(e))
        # (a product materialized whole, say; or every weight dequantized once)
        arena = max(program.plan(env)[1] for env in envs) + \
            sum(b for _, b in program.layout.statics)
        if arena > MAX_ARENA_FRACTION * _memory():
            log("search", f"candidate rejected: {arena / 2**30:.1f} GiB of intermediates")
            return Rejected(f"its intermediates take {arena / 2**30:.1f} GiB, more than "
                            f"{MAX_ARENA_FRACTION:.0%} of this machine's memory")
        if not prepared:
            prepared.extend(profiling())
        best = search.best()
        bound = search.bound() if hasattr(search, "bound") else \
            2 * best[1] if best else math.inf
        runs = opts.trials + 1
        limit = None if opts.execution_timeout is None else opts.execution_timeout * runs
        times, kernels = [], []
        try:
            for e, (env, p) in enumerate(zip(envs, prepared, strict=True)):
                p.stash(sandbox)
                inputs = Stashed(p.key, program.layout.input_names)
                cap = bound * share[e] if share else bound
                seconds, per_kernel = sandbox.run(timed, program, inputs, dict(env),
                                                  opts.trials, cap, timeout=limit)
                if seconds > cap:  # it has lost: its time here, as a whole's, and the
                    # kernels it reached (the search may tell which move lost it)
                    log("search", f"candidate cut short at {dict(env)} ({program.source}): "
                                  f"{seconds:.3g} s, "
                                  f"more than {cap:.3g} s")
                    s, origin = share[e] if share else 1.0, getattr(program, "origin", {})
                    return Measured(seconds / s, reached=tuple(
                        KernelTime(k.name, *origin[k.node], t / s)
                        for k, t in zip(program.layout.profiled, per_kernel, strict=False)
                        if t > 0 and k.node in origin))
                times.append(seconds)
                kernels.append(per_kernel)
            if not share:  # the sizes' weights: the first candidate measured whole
                g = _geomean(times)
                share.extend(t / g if g > 0 else 1.0 for t in times)
            seconds = _weighted(times, share)
            # checked where it would be the best (a wrong program never wins, and a slower
            # one costs no comparison with the oracle), or
            # always where the search keeps parts of candidates (KernelSearch)
            check = best is None or seconds < best[1] or \
                (hasattr(search, "check_all") and search.check_all())
            for env, p in zip(envs, prepared, strict=True):
                inputs = Stashed(p.key, program.layout.input_names)
                k = sandbox.run(differs, program, inputs, dict(env),
                                Stashed(f"{p.key}/want", ["want"]), dtypes, p.slack,
                                timeout=opts.execution_timeout) if check else None
                if k is not None:
                    log("search", f"candidate output {k} differs from the reference at "
                                  f"{dict(env)} (source {program.source})")
                    return Invalid(f"output {k} differs from the reference")
        except CandidateError as e:
            return Invalid(str(e))
        programs[genome_key(genome)] = program
        origin = getattr(program, "origin", {})
        per_kernel = [_weighted(ts, share) for ts in zip(*kernels, strict=True)] \
            if all(kernels) else []
        return Measured(seconds, tuple(
            KernelTime(k.name, *origin[k.node], t)
            for k, t in zip(program.layout.profiled, per_kernel, strict=False)
            if k.node in origin) if per_kernel else ())

    try:
        best, seconds = search.run(evaluate)
    except SearchError:
        # nothing measured, and some compiles only ran past the limit (a large program on
        # a busy machine): a slow compile is not a wrong program, so the first of them is
        # compiled again without the limit rather than the whole compile failing
        if not timed_out:
            raise
        warn("no candidate compiled within candidate_timeout; compiling the first one "
             "without the limit")
        compile_limit[0], genome = None, timed_out[0]
        outcome = evaluate(genome)
        if not isinstance(outcome, Measured):
            raise
        best, seconds = genome, outcome.seconds
    log("search", f"best {seconds * 1e3:.4g} ms: {programs[genome_key(best)].source}")
    return programs[genome_key(best)], best
