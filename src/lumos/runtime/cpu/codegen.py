"""C source for a kernel program (lumos.runtime.cpu.kernels): one C function per kernel,
and one driver that runs them all.

A kernel loops over its output in row-major order (the outer axes and blocks
of the innermost axis in parallel under OpenMP) and computes each element from its
body: loads of buffers through their views (the view's index expression and validity
predicate inlined as C) and elementwise primitives computed inline, each rounded to its
dtype as if stored. An index that is linear in the innermost loop variable has its base
hoisted out of that loop, so a contiguous or strided read is a plain load the compiler
can vectorize. Dims are renamed `D_<name>` in C (no clash with C names or ours).

The semantics are the ReferenceRuntime's: bf16 is stored as its bit pattern and, like
f16, computed in float and rounded to nearest even on store; integer arithmetic wraps
(`-fwrapv`); `x % 0` is 0; casts are C casts.

With `LUMOS_LOG=profile` at compile time, the driver also times each kernel call
(CLOCK_MONOTONIC) into the exported array `lumos_profile_ns`, one int64 per kernel.
"""

from __future__ import annotations

import hashlib
import math
import re
from collections.abc import Callable, Iterator, Mapping, MutableMapping
from contextlib import contextmanager
from dataclasses import dataclass
from functools import cached_property
from itertools import pairwise, product
from pathlib import Path

import numpy as np

from lumos.dtype import DType, bf16, f16, f32, from_numpy_value
from lumos.graph import live_nodes
from lumos.hlir import REDUCE, UNARY, Node
from lumos.logs import enabled
from lumos.runtime.cpu.cc import Unit, UnsupportedProgram, vector_bytes
from lumos.runtime.cpu.kernels import (
    AHEAD_SEED,
    INNER_LAST,
    PAR_SEED,
    ROWS_MAX_M,
    Apply,
    Body,
    Gemm,
    Kernels,
    Load,
    Matrix,
    Pack,
    Reduce,
    Rows,
    Tile,
    band,
    band_steps,
    body_loads,
    gemm,
    in_row_blocks,
    packing,
    rows,
    tiles,
    wide_seed,
    windows,
)
from lumos.shape import Expr, Num, Var, View, simplify, z
from lumos.shape.expr import ONE, ZERO, emax, emin
from lumos.shape.view import numel

_C = Path(__file__).with_name("c")  # the fixed C: prelude, own and AMX products, driver
BLOCK = 2048  # innermost-axis elements per parallel task (at most PRELUDE's lumos_zero_row)
TILE_FLOATS = 24576  # a row block of a product run by its reader (Tile): 96 KiB, in L2
TILES = 4  # products one kernel may run in row blocks (more: each whole, first)
BAND_FLOATS = 1 << 17  # a band of a product's rows its reader runs (row_banded): 512 KiB
# (bands half or twice as large were slower)
PACK_FLOATS = 262144  # a block of a factor a product packs itself (Pack): 1 MiB, about L2
PACK_MIN_WIDTH = 256  # ... but at least this many of its M or N (narrower products are slow)
# a long reduction's outputs go to threads in blocks this small, so that a matrix-vector
# product's few hundred outputs still spread over every core
REDUCE_BLOCK, REDUCE_BLOCK_MIN_LENGTH = 16, 64
OUTER_BLOCK = 256  # outputs per accumulator block of a reduction run outside their loop
MAX_LANES = 64  # a split reduction's innermost loop up to this long keeps per-lane results
MAX_UNROLL = 4  # copies of a split reduction's inner loop, one per value of its tiny loops
SHORT_REDUCE = 16  # a reduction this short is written out, one step per element (pools)
# a float maximum's step, NaN winning: written so that GCC makes it vmaxps and one select
# of x where it is NaN (`x > a || x != x` takes two compares and a mask or)
MAX_STEP = "{a} = {x} != {x} ? {x} : ({x} > {a} ? {x} : {a});"
# a reduction whose outputs each read their own row of an input (a matrix-vector product's
# weights) prefetches the rows its schedule's `ahead` bytes ahead (Kernels.ahead), the
# first PREFETCH_LINES cache lines of each: rows of a few hundred bytes (a quantized
# matrix-vector product's) are too short for the hardware prefetcher, which waits for
# misses. (A kernel without a schedule of its own, a product's, a copy's or a gather's,
# runs as lowering's schedule says: kernels.PAR_SEED, AHEAD_SEED.)
PREFETCH_LINES, PREFETCH_MIN_ROW = 16, 32

PRELUDE = (_C / "prelude.h").read_text().replace("@TILES@", str(TILES))

# lumos_gemm_own: one translation unit of fixed text after BLAS + PRELUDE, so compiled
# once and cached (in each kernel's unit, its unrolled variants would compile every time)
OWN_GEMM = (_C / "own_gemm.c").read_text()


def _transpose16() -> str:
    """C for lumos_transpose16: r[0..15], 16 rows of 16 floats, transposed in registers by
    4 steps, step d swapping the off-diagonal d x d blocks of rows i and i + d."""
    steps = []
    for d in (1, 2, 4, 8):
        lo = ", ".join(str(e + 16 - d if e & d else e) for e in range(16))
        hi = ", ".join(str(e + 16 if e & d else e + d) for e in range(16))
        steps.append(f"  for (int i = 0; i < 16; i++)\n"
                     f"    if (!(i & {d})) {{\n"
                     f"      const lumos_f32x16 x = r[i], y = r[i + {d}];\n"
                     f"      r[i] = __builtin_shufflevector(x, y, {lo});\n"
                     f"      r[i + {d}] = __builtin_shufflevector(x, y, {hi});\n"
                     f"    }}\n")
    return ("/* r[0..15], 16 rows of 16 floats, transposed in registers */\n"
            "static inline void lumos_transpose16(lumos_f32x16 r[16]) {\n"
            + "".join(steps) + "}")


OWN_GEMM = OWN_GEMM.replace("@TRANSPOSE16@", _transpose16()).replace("@ROWS_MAX_M@",
                                                                       str(ROWS_MAX_M))

AMX_GEMM = (_C / "amx_gemm.c").read_text()
WINOGRAD = (_C / "winograd.c").read_text()  # lumos_winograd: a unit of its own, as OWN_GEMM

DRIVER = (_C / "driver.c").read_text()
BLAS = "#define LUMOS_BLAS 1\n#include <cblas.h>\n"  # OpenBLAS (see cc.py)
# CompileOptions.flush_denormals: each thread of the pool saves its float control register
# and sets flush-to-zero (x86: MXCSR's DAZ and FTZ bits; AArch64: FPCR's FZ), the run, then
# each restores what it saved (the calling thread is one of them, and the pool's threads run
# other code of the process too)
_FLUSH = (_C / "flush.c").read_text()

_STORAGE = {"f32": "float", "f64": "double", "f16": "uint16_t", "bf16": "uint16_t",
            "i8": "int8_t", "u8": "uint8_t", "i16": "int16_t", "i32": "int32_t",
            "i64": "int64_t", "bool": "uint8_t"}
_MATH = {"Exp2": "exp2", "Log2": "log2", "Sin": "sin", "Sqrt": "sqrt"}


def storage(dt: DType) -> str:
    return _STORAGE[dt.name]


def value_type(dt: DType) -> str:
    """The C type values of `dt` are computed in (half types in float; bools in int: GCC 12
    vectorizes no loop of uint8_t truth values, e.g. an `any` over float compares)."""
    return "float" if dt is f16 or dt is bf16 else "int" if dt.is_bool else storage(dt)


def load(dt: DType, raw: str) -> str:
    if dt is bf16:
        return f"lumos_bf16_f32({raw})"
    return f"lumos_f16_f32({raw})" if dt is f16 else raw


def store(dt: DType, value: str) -> str:
    if dt is bf16:
        return f"lumos_f32_bf16((float)({value}))"
    if dt is f16:
        return f"lumos_f64_f16((double)({value}))"
    if dt.is_bool:
        return f"(uint8_t)(({value}) != 0)"
    return f"({storage(dt)})({value})"


def c_number(v: float | int, ctype: str) -> str:
    """An exact C literal of `v` as `ctype`."""
    if ctype in ("float", "double"):
        v = float(v)
        if v != v:
            return f"({ctype})NAN"
        if v in (float("inf"), float("-inf")):
            return f"({ctype})({'-' if v < 0 else ''}INFINITY)"
        return f"({ctype}){v.hex()}"
    v = int(v)
    return f"({ctype})({v + 1}LL - 1)" if v < -(2**62) else f"({ctype}){v}LL"


def constant_literal(n: Node) -> str:
    """A Constant's element as stored (rounded like the reference: via float for halves)."""
    dt = n.dtype
    compute = np.float32 if dt is f16 or dt is bf16 else dt.np
    with np.errstate(over="ignore"):  # e.g. 7e4 in f16 is inf, as in the reference
        stored = from_numpy_value(np.full((), n.value, dtype=compute), dt)
    if dt is f16:
        stored = stored.view(np.uint16)
    return c_number(stored.item(), storage(dt))


def _lowest(dt: DType, ctype: str) -> str:
    if dt.is_float:
        return "-INFINITY"
    if dt.is_bool or not dt.signed:
        return "0"
    return c_number(-(1 << (dt.bits - 1)), ctype)


@dataclass(frozen=True)
class Temp:
    """An intermediate buffer in the arena: its size and the kernels it lives through."""
    nbytes: Expr
    first: int
    last: int


@dataclass(frozen=True)
class Buffer:
    """A graph input (by name) or output the caller passes by pointer."""
    node: int
    shape: tuple[Expr, ...]
    dtype: DType
    name: str | None = None


@dataclass(frozen=True)
class Kernel:
    """A kernel the driver calls (profiled): its node, kind, output, and its function's
    name (a hash of its code: equal names, equal kernels)."""
    node: int
    op: str
    shape: tuple[Expr, ...]
    dtype: DType
    name: str = ""


@dataclass(frozen=True)
class Layout:
    """What the driver `lumos_run(arena, offsets, inputs, outputs, dims, stat)` expects:
    `dims` values in this order, a pointer per Input node in `inputs` and per Output
    node in `outputs`, and an arena offset per `temps` entry. `calls`: kernels run per
    execution. `profiled`: the kernels timed into `lumos_profile_ns`, in call order (empty
    when not profiling). `inplace`: (output, input) positions where the output may be
    the input's own memory: a Scatter into that input writes the output, and nothing
    reads the input after it (a KV cache updated in place, not copied each step).
    `statics`: (key, bytes) of each buffer `stat` points to: STATIC_HEADER bytes whose
    first int64 says the kernel writing the data after them has run (computed from
    weights alone, see `generate`); equal keys, equal contents, so programs (the buckets
    of one graph) can share them."""
    dims: tuple[str, ...]
    inputs: tuple[Buffer, ...]
    outputs: tuple[Buffer, ...]
    temps: tuple[Temp, ...]
    calls: int = 0
    profiled: tuple[Kernel, ...] = ()
    inplace: tuple[tuple[int, int], ...] = ()
    statics: tuple[tuple[str, int], ...] = ()

    @cached_property
    def input_names(self) -> tuple[str, ...]:
        return tuple(b.name for b in self.inputs)  # type: ignore[misc]

    @cached_property
    def inplace_of(self) -> dict[int, int]:
        return dict(self.inplace)


@dataclass
class _WindowsCode:
    """A windows product's code (codegen.windows_code): `setup` (the scratch pd, ap and
    koff, A packed), `copy` (batch index zg's padded copy, a worksharing loop), and C
    expressions: rows m, depth k, padded width wp (an Expr), batch indices, padded columns
    of an image, its output width and height, the work."""
    gm: Gemm
    c: Callable[[Expr], str]
    setup: list[str]
    copy: list[str]
    m: str
    k: str
    wp: Expr
    batches: str
    cols: str
    width: str
    height: str
    work: str
    koff: list[str]  # the koff table alone (in `setup` too)
    a: tuple[str, str, str]  # A: its first element's address, row step, column step
    hp: str  # the padded height of an image
    plane: str  # floats of one batch index's padded copy


UNSWITCH = 2  # the most conditions a loop is unswitched on (2^UNSWITCH copies of it)


def _unswitched(preds: list[str], loop: list[str]) -> list[str]:
    """`loop` once for each value of the loop-invariant conditions it tests (the first
    UNSWITCH of them), each copy with its conditions' values written in: a select on a
    row's guard (a stacked pair's half) is then no select, and a copy computes only its
    own side, whatever GCC's if-conversion would otherwise do with both."""
    text = "\n".join(loop)
    used = [p for p in preds if re.search(rf"\b{p}\b", text)][:UNSWITCH]
    if not used:
        return loop
    p, sub = used[0], re.compile(rf"\b{used[0]}\b")
    return [f"if ({p}) {{", *_unswitched(used[1:], [sub.sub("1", x) for x in loop]),
            "} else {", *_unswitched(used[1:], [sub.sub("0", x) for x in loop]), "}"]


class _Scope:
    """One loop level with variable `var`: expressions linear in it get their base
    hoisted into `decls` (emitted just before the loop); others are inlined."""

    def __init__(self, var: str | None, bounds: dict, names: Callable[[], str]) -> None:
        self.var, self.bounds, self.names = var, bounds, names
        self.decls: list[str] = []
        self.preds: list[str] = []  # the hoisted conditions (C ints), in order
        # the guards' bounds on `var` (v >= lo, v < hi), each free of other loop variables
        self.lows: list[Expr] = []
        self.highs: list[Expr] = []
        self._hoisted: dict[Expr, str] = {}
        self._values: dict[str, str] = {}

    def _hoist(self, e: Expr, ctype: str) -> str:
        if e.is_num:
            return e.to_c()
        name = self._hoisted.get(e)
        if name is None:
            name = self._hoisted[e] = self.names()
            self.decls.append(f"const {ctype} {name} = {e.to_c(self.bounds)};")
            if ctype == "int":
                self.preds.append(name)
        return name

    def hoist_value(self, c: str, ctype: str) -> str:
        """A C value that does not change in this loop, computed once before it."""
        name = self._values.get(c)
        if name is None:
            name = self._values[c] = self.names()
            self.decls.append(f"const {ctype} {name} = {c};")
        return name

    def index(self, e: Expr) -> str:
        v = self.var
        if v is None:
            return e.to_c(self.bounds)
        if v not in e.vars():
            return self._hoist(e, "int64_t")
        base = e.subs({v: 0})
        step = e.subs({v: 1}) - base
        if any(n.startswith("z") for n in step.vars()) or base + Var(v) * step is not e:
            return e.to_c(self.bounds)
        b = self._hoist(base, "int64_t")
        return f"({b} + {v})" if step is ONE else f"({b} + {step.to_c(self.bounds)}*{v})"

    def pred(self, e: Expr) -> str:
        if self.var is None or self.var in e.vars():
            if self.var is not None:
                self._limits(e)
            return e.to_c(self.bounds)
        return self._hoist(e, "int")

    def _limits(self, e: Expr) -> None:
        """Record where each comparison of `e`'s conjunction that is v + c against
        loop-invariant sizes (a padded window, a stacked pair's half) holds."""
        assert self.var is not None
        lows, highs = _limits(e, self.var)
        self.lows += lows
        self.highs += highs

    def outer_limits(self) -> tuple[list[str], dict[str, tuple[list[Expr], list[Expr]]]]:
        """(conditions, limits): the hoisted conditions that compare another loop
        variable u as u + c against loop-invariant sizes, and for each such u where
        those comparisons hold (u >= each low, u < each high) wherever the conditions
        do."""
        names: list[str] = []
        out: dict[str, tuple[list[Expr], list[Expr]]] = {}
        for e, name in self._hoisted.items():
            if name not in self.preds:
                continue
            for u in sorted(n for n in e.vars() if n.startswith("z") and n != self.var):
                lows, highs = _limits(e, u)
                if lows or highs:
                    have = out.setdefault(u, ([], []))
                    have[0].extend(lows)
                    have[1].extend(highs)
                    names += [] if name in names else [name]
        return names, out


def _limits(e: Expr, v: str) -> tuple[list[Expr], list[Expr]]:
    """(lows, highs): the comparisons of `e`'s conjunction that are v + c (or c - v)
    against sizes free of loop variables hold for lows <= v < highs."""
    lows: list[Expr] = []
    highs: list[Expr] = []
    if e.op == "and":
        for a in e.args:
            lo, hi = _limits(a, v)
            lows += lo
            highs += hi
        return lows, highs
    if e.op not in ("lt", "ge"):
        return lows, highs
    d = e.args[0] - e.args[1]
    rest = d.subs({v: 0})
    step = d.subs({v: 1}) - rest
    if not step.is_num or abs(step.value) != 1 or rest + Var(v) * step is not d or \
            any(n.startswith("z") for n in rest.vars()):
        return lows, highs
    if e.op == "lt":  # v + rest < 0, or rest - v < 0
        (highs if step.value == 1 else lows).append(-rest if step.value == 1 else rest + 1)
    else:  # v + rest >= 0, or rest - v >= 0
        (lows if step.value == 1 else highs).append(-rest if step.value == 1 else rest + 1)
    return lows, highs


class _Codegen:
    def __init__(self, graph: Kernels) -> None:
        self.g = graph
        self.rename = {d: Var(f"D_{d}") for d in graph.dims}
        self.dim_bounds = {f"D_{d}": (lo, hi) for d, (lo, hi) in graph.dims.items()}
        self.slots: dict[int, str] = {}  # node -> C pointer expression in the driver
        self.args: dict[int, str] = {}  # per kernel: producer node -> parameter name
        self._count = 0
        self._unsigned_zero: set[str] = set()  # per kernel: float values never -0
        self.tiles: dict[Node, int] = {}  # per kernel: the products it runs (Tile) -> number
        self.own: set[Node] = set()  # per kernel: its products run by lumos_gemm_own
        self.amx = False  # per kernel: a product run by lumos_gemm_amx
        self.used_own = False  # some kernel calls lumos_gemm_own (OWN_GEMM is linked)
        self.used_amx = False  # ... lumos_gemm_amx (AMX_GEMM is linked)
        self.used_winograd = False  # ... lumos_winograd (WINOGRAD is linked)
        self.tile_out: Expr = ZERO  # per kernel: its output's flat index
        self.tile_rows = True  # per kernel: every Tile read is at the output's position
        # per kernel: each Tile or Rows read's (index, valid, rank, bounds), for row_banded
        self.row_reads: list[tuple[Expr, Expr, int, dict]] = []
        self.guard: Expr = ONE  # what the reads of an inlined max must also check
        self.rows_in: list[Rows] = []  # per kernel: the kernels it computes in bands
        self.rows_names: dict[int, str] = {}  # ... their scratch, by body (unique names)
        self.out, self.out_shift = "out", ""  # where a kernel writes (a band: scratch s0)
        self.filling = False  # generating a Rows' kernel for a band of its rows
        self.windowed: list[Tile] = []  # per kernel: its windows products (banded)
        self.band_reads: list[tuple[int, int]] = []  # per kernel: (step, offset) of each read
        self.windows_made: dict[Node, _WindowsCode] = {}  # per kernel: their code
        self.par = PAR_SEED  # per kernel: its schedule's threading (Kernels.par)
        self.ahead = AHEAD_SEED  # ... and how far ahead it prefetches rows
        self.jam = 1  # ... and a sum's outputs computed together along its first axis
        self.inner = INNER_LAST  # ... and a map's axis of its innermost loop

    def _name(self) -> str:
        self._count += 1
        return f"h{self._count}"

    def ren(self, e: Expr) -> Expr:
        return e.subs(self.rename)

    def bounds(self, shape: tuple[Expr, ...]) -> dict:
        return self.dim_bounds | {f"z{k}": (0, self.ren(s) - 1) for k, s in enumerate(shape)}

    def prep(self, e: Expr, shape: tuple[Expr, ...]) -> Expr:
        """`e` in C names, with the variables of size-1 axes of `shape` set to 0."""
        return self.ren(e).subs({f"z{k}": 0 for k, s in enumerate(shape) if s is ONE})

    # -- reading -----------------------------------------------------------------
    def arg(self, j: int) -> str:
        return self.args.setdefault(j, f"b{len(self.args)}")  # by position: kernels dedupe

    def read(self, j: int, index: Expr, valid: Expr, sc: _Scope) -> str:
        """Producer `j`'s element at `index` as stored (0 where `valid` is 0)."""
        n = self.g.nodes[j]
        zero = f"({storage(n.dtype)})0"
        if self.guard is not ONE and n.op != "Constant":  # (a constant reads no memory)
            valid = simplify(valid & self.guard, sc.bounds)
        if valid is ZERO:
            return zero
        if n.op == "Constant":
            raw = constant_literal(n)
            return raw if valid is ONE else f"({sc.pred(valid)} ? {raw} : {zero})"
        v = sc.var
        if valid is not ONE and v is not None and v.startswith("z") and \
                not v.startswith("zr") and v not in valid.vars() and \
                index.subs({v: 0}) + Var(v) is index:
            # guarded, but the same guard all along the output loop (`lo` <= v < `hi`, one
            # block): read a row that is the data or zeros, picked once; GCC 12 vectorizes
            # no `pred ? b[i] : 0`, even with `pred` loop-invariant (a depthwise convolution
            # under padding)
            row = sc.hoist_value(f"({sc.pred(valid)} ? {self.arg(j)} + "
                                 f"{sc.index(index.subs({v: 0}))} + lo : "
                                 f"(const {storage(n.dtype)} *)lumos_zero_row)",
                                 f"{storage(n.dtype)} *restrict")
            return f"{row}[{v} - lo]"
        raw = f"{self.arg(j)}[{sc.index(index)}]"
        value = raw if valid is ONE else f"({sc.pred(valid)} ? {raw} : {zero})"
        if sc.var is not None and sc.var not in index.vars() | valid.vars():
            return sc.hoist_value(value, storage(n.dtype))  # loop-invariant: load it once
        return value

    def read_view(self, j: int, view: View, shape: tuple[Expr, ...], sc: _Scope) -> str:
        return self.read(j, self.prep(view.index, shape), self.prep(view.valid, shape), sc)

    def read_flat(self, j: int, view: View, p: str) -> tuple[str, str]:
        """(C declarations, element) of `view` of producer `j` at flat logical position
        `p` (an int64 C expression), 0 when out of range: Gather's data read."""
        n = self.ren(numel(view.shape))
        index, valid = view.at_flat(Var("zp"))
        sc = _Scope(None, self.dim_bounds | {"zp": (0, n - 1)}, self._name)
        index, valid = (simplify(self.ren(e), sc.bounds) for e in (index, valid))
        value = self.read(j, index, valid, sc)
        zero = f"({storage(self.g.nodes[j].dtype)})0"
        return f"const int64_t zp = {p};", f"((zp >= 0 && zp < {n.to_c()}) ? {value} : {zero})"

    # -- loops -------------------------------------------------------------------
    def nest(self, shape: tuple[Expr, ...], body: Callable[[_Scope], list[str]],
             work: Expr | None, around: tuple[list[str], str, list[str]] | None = None,
             extra: Mapping | None = None, block: int = BLOCK,
             jam: int = 1, split: bool = False, inner_axis: int = INNER_LAST) -> list[str]:
        """Loops over `shape` row-major; the innermost axis in blocks. Parallel over the
        outer axes and blocks (of `block` elements) when `work` (elements of work) is
        large; sequential if None. `jam` > 1: the first axis steps by that many (the
        body computes the outputs at z0 .. z0 + jam - 1 that are in the shape).
        `around` = (before, loop, after): a loop run inside each block around the
        innermost loop (an outer reduction), whose variable's bounds are in `extra`.
        `split`: the innermost loop split at its guards' bounds (see interior).
        `inner_axis`: the innermost loop's (INNER_LAST: the last), the others around it in
        order."""
        bounds = self.bounds(shape) | dict(extra or {})
        active = [k for k, s in enumerate(shape) if s is not ONE]
        if not active:
            sc = _Scope(None, bounds, self._name)
            inner = body(sc)
            return ["{", *sc.decls, *inner, "}"]
        plain = not (self.tiles or self.rows_in or self.windowed or self.filling)
        if inner_axis in active and plain:  # (a product's row blocks: along the last axis)
            active = [k for k in active if k != inner_axis] + [inner_axis]
        last = active[-1]
        size = {k: self.ren(shape[k]).to_c(bounds) for k in active}
        zl = f"z{last}"
        sc = _Scope(zl, bounds, self._name)
        inner = body(sc)
        pragma = "#pragma omp simd" if around and around[1] else "#pragma GCC ivdep"
        loop_lines = self.interior(sc, body, inner, bounds, shape[last], pragma) \
            if split and plain else None
        if loop_lines is None:
            loop_lines = [*sc.decls, *_unswitched(sc.preds, [  # outputs never alias inputs
                pragma, f"for (int64_t {zl} = lo; {zl} < hi; {zl}++) {{", *inner, "}"])]
        lines = []
        work = None if work is None else self.ren(work)
        if (cond := self.parallel_if(work)) is not None:
            lines.append(f"#pragma omp parallel for collapse({len(active)}) schedule(static)"
                         f"{cond} num_threads(lumos_threads())")
        lines += [f"for (int64_t z{k} = 0; z{k} < {size[k]}; "
                  f"{f'z{k} += {jam}' if k == 0 and jam > 1 else f'z{k}++'})"
                  for k in active[:-1]]
        before, loop, after = around or ([], "", [])
        blocks = [
            f"for (int64_t zb = 0; zb < ({size[last]} + {block - 1}) / {block}; zb++) {{",
            f"const int64_t lo = zb * {block}, hi = LUMOS_MIN(lo + {block}, {size[last]});",
            *before, *([loop + " {"] if loop else []), *loop_lines,
            *(["}"] if loop else []), *after, "}"]  # (restrict is lost in omp)
        if self.filling:  # a Rows kernel's band: its product's rows, then its outputs there
            band = self.tiled(shape, active, bounds, blocks, work) if self.tiles else None
            if band is None:
                raise _NoFill
            return band
        if self.windowed:  # (a kernel it reads in bands, too: that one run whole first)
            lines = self.banded(shape, bounds, blocks, work)
            return self.rows_whole(lines) if self.rows_in else lines
        if self.rows_in:
            return self.row_banded(shape, active, bounds, blocks, work) or self.rows_whole(
                (self.tiled(shape, active, bounds, blocks, work) or
                 self.whole_products(lines + blocks)) if self.tiles else lines + blocks)
        if self.tiles:
            return self.tiled(shape, active, bounds, blocks, work) or \
                self.row_banded(shape, active, bounds, blocks, work) or \
                self.whole_products(lines + blocks)
        return lines + blocks

    def tiled(self, shape: tuple[Expr, ...], active: list[int], bounds: dict,
              blocks: list[str], work: Expr | None) -> list[str] | None:
        """The kernel's loops over row blocks of the products it runs (Tile): each thread
        runs a block of rows of each product into its scratch (`lumos_tile`), then the
        outputs at those rows. None where a read is not at the output's own position or
        the products' rows are not the output's leading axes."""
        c = lambda e: self.ren(e).to_c(bounds)  # noqa: E731
        gms = [gemm(t.views, t.axis, self.g.dims) for t in self.tiles]
        if not self.tile_rows or len(gms) > TILES:
            return None
        layouts = [gm for gm in gms if gm is not None and in_row_blocks(gm, bounds)]
        if len(layouts) < len(gms):
            return None
        m, n = layouts[0].m, layouts[0].n
        if any(simplify(gm.m - m, bounds) is not ZERO or simplify(gm.n - n, bounds) is not ZERO
               for gm in layouts):
            return None
        size = lambda axes: numel(tuple(shape[k] for k in axes))  # noqa: E731
        split = next((t for t in range(len(active))
                      if simplify(size(active[t:]) - n, bounds) is ZERO), None)
        if split is None or simplify(size(active[:split]) - m, bounds) is not ZERO:
            return None
        lead, mid = active[:split], active[split:-1]

        calls = [self.tile_rows_call(t, gm, j, bounds)
                 for j, (t, gm) in enumerate(zip(self.tiles, layouts, strict=True))]
        # the rows' indices decoded once, then stepped like an odometer (a division per
        # row and axis can cost as much as a short row's own work)
        carry = f"++z{lead[0]};" if lead else ""
        for k in lead[1:]:
            carry = f"if (++z{k} == {c(shape[k])}) {{ z{k} = 0; {carry} }}"
        rows_at = ["{", *[f"int64_t z{k} = r0 / {c(size(lead[p + 1:]))} % {c(shape[k])};"
                          for p, k in enumerate(lead)],
                   "for (int64_t zq = r0; zq < r1; zq++) {",
                   *[f"for (int64_t z{k} = 0; z{k} < {c(shape[k])}; z{k}++)" for k in mid],
                   *blocks, carry, "}", "}"]
        if self.filling:
            return [*calls, *rows_at] if len(calls) == 1 else None
        cond = self.parallel_if(work)
        par = [] if cond is None else [f"#pragma omp parallel{cond} num_threads(lumos_threads())"]
        return [*par, "{",
                f"const int64_t R = LUMOS_MAX(1, LUMOS_MIN({TILE_FLOATS} / LUMOS_MAX({c(n)}, 1), "
                f"({c(m)} + lumos_threads() - 1) / lumos_threads()));",
                *[f"float *restrict t{j} = lumos_tile({j}, R * {c(n)});"
                  for j in range(len(gms))],
                *(["#pragma omp for schedule(static)"] if par else []),
                f"for (int64_t zc = 0; zc < ({c(m)} + R - 1) / R; zc++) {{",
                f"const int64_t r0 = zc * R, r1 = LUMOS_MIN(r0 + R, {c(m)}), tb = r0 * {c(n)};",
                *calls, *rows_at, "}", "}"]

    def tile_rows_call(self, t: Node, gm: Gemm, j: int, bounds: dict) -> str:
        """The cblas_sgemm (or lumos_gemm_own) that runs rows [r0, r1) of product `t`
        (rows `n` apart) into scratch `t<j>`."""
        c = lambda e: self.ren(e).to_c(bounds)  # noqa: E731

        def ld(mat: Matrix, width: Expr) -> str:
            return f"(blasint)LUMOS_MAX(LUMOS_MAX({c(mat.ld)}, {c(width)}), 1)"
        a, b = gm.a, gm.b
        rows = "r0" if a.trans else f"r0 * {c(a.ld)}"
        operands = (f"{self.arg(t.inputs[a.input])} + {c(a.offset)} + {rows}, "
                    f"{ld(a, gm.m if a.trans else gm.k)}, {self.arg(t.inputs[b.input])} + "
                    f"{c(b.offset)}, {ld(b, gm.k if b.trans else gm.n)}")
        if t in self.own:
            self.used_own = True
            return (f"lumos_gemm_own({int(a.trans)}, {int(b.trans)}, r1 - r0, {c(gm.n)}, "
                    f"{c(gm.k)}, {operands}, t{j}, LUMOS_MAX({c(gm.n)}, 1));")
        trans = lambda mat: "CblasTrans" if mat.trans else "CblasNoTrans"  # noqa: E731
        return (f"scipy_cblas_sgemm(CblasRowMajor, {trans(a)}, {trans(b)}, (blasint)(r1 - r0), "
                f"(blasint){c(gm.n)}, (blasint){c(gm.k)}, 1.0f, {operands}, 0.0f, t{j}, "
                f"(blasint)LUMOS_MAX({c(gm.n)}, 1));")

    def row_banded(self, shape: tuple[Expr, ...], active: list[int], bounds: dict,
                   blocks: list[str], work: Expr | None) -> list[str] | None:
        """The kernel's loops over bands of its lines (an axis L), around the one product
        it reads (Tile) or the one kernel it computes (Rows): each thread runs the rows of
        it that a band of lines reads into its scratch, then the band's outputs. The
        reads, where valid, are linear in the loop variables with the same steps
        (kernels.band_steps), so the rows a band reads lie between its first line's least
        offset and its last line's greatest plus the span of the axes after L. L: the
        outermost axis (not the last) one line of which reads at most BAND_FLOATS; lines
        per band: as many as fit, at most a quarter of L's. None where the reads are not
        so, or a Rows kernel is not a product's rows plus an epilogue."""
        if self.rows_in:
            if len(self.rows_in) != 1 or self.tiles:
                return None
            fill = self.fill(self.rows_in[0])
            if fill is None:
                return None
            gm, fill_lines = fill
            name, slot = self.rows_names[id(self.rows_in[0].body)], 1  # (its product: t0)
        else:
            if len(self.tiles) != 1:
                return None
            ((t, j),) = self.tiles.items()
            gm = gemm(t.views, t.axis, self.g.dims)  # type: ignore[arg-type]
            if gm is None:
                return None
            fill_lines = [self.tile_rows_call(t, gm, j, bounds)]
            name, slot = f"t{j}", j
        if not self.row_reads or not in_row_blocks(gm, bounds) or not gm.n.is_num or \
                not gm.m.vars() <= set(self.g.dims):
            return None
        reads = [band_steps(*r) for r in self.row_reads]  # (offset, steps) where valid
        if None in reads:
            return None
        steps = reads[0][1]
        if any(r[1] != steps for r in reads):
            return None
        sizes = [self.ren(e) for e in shape]
        n = gm.n.value
        lo, hi = min(r[0] for r in reads), max(r[0] for r in reads)

        def span(after: int) -> int | None:  # the flat positions one line's reads cover
            inner = [k for k in active if k > after]
            if not all(sizes[k].is_num for k in inner):
                return None
            return hi - lo + sum(steps[k] * (sizes[k].value - 1) for k in inner)
        spans = {k: span(k) for k in active[:-1] if sizes[k].is_num}
        axis = next((k for k, sp in spans.items() if sp is not None and
                     (sp // n + 2) * n <= BAND_FLOATS), None)
        if axis is None:
            return None
        inner_span, size_l = spans[axis], sizes[axis].value
        assert inner_span is not None
        fit = (BAND_FLOATS // n - 2 - inner_span // n) * n // max(steps[axis], 1) + 1
        per = max(1, min(fit, size_l // 4, size_l))
        rows_max = (inner_span + steps[axis] * (per - 1)) // n + 2
        outer = [k for k in active if k < axis]
        c = lambda e: self.ren(e).to_c(bounds)  # noqa: E731
        nb = -(-size_l // per)
        decode, div = [], Num(nb)
        for k in reversed(outer):
            decode.insert(0, f"const int64_t z{k} = zq / {c(div)} % {c(sizes[k])};")
            div = div * sizes[k]
        at = " + ".join([f"{steps[k]} * z{k}" for k in outer] or ["0"])
        cond = self.parallel_if(work)
        par = [] if cond is None else [f"#pragma omp parallel{cond} num_threads(lumos_threads())"]
        scratch = [f"float *restrict {name} = lumos_tile({slot}, {rows_max * n});",
                   *([f"float *restrict t0 = lumos_tile(0, {rows_max * n});"]
                     if self.rows_in else [])]
        return [*par, "{", *scratch,
                *(["#pragma omp for schedule(static)"] if par else []),
                f"for (int64_t zq = 0; zq < {c(numel(tuple(sizes[k] for k in outer)) * nb)}; "
                "zq++) {",
                *decode,
                f"const int64_t q0 = zq % {nb} * {per}, q1 = LUMOS_MIN(q0 + {per}, {size_l});",
                f"const int64_t at = {at};",
                f"const int64_t r0 = LUMOS_MAX(lumos_fdiv(at + {steps[axis]} * q0 + {lo}, {n}), "
                "0);",
                f"const int64_t r1 = LUMOS_MIN(lumos_fdiv(at + {steps[axis]} * (q1 - 1) + "
                f"{lo + inner_span}, {n}) + 1, {c(gm.m)}), tb = r0 * {n}, sb = tb;",
                "if (r1 > r0) {", *fill_lines, "}",
                f"for (int64_t z{axis} = q0; z{axis} < q1; z{axis}++)",
                *[f"for (int64_t z{k} = 0; z{k} < {c(sizes[k])}; z{k}++)"
                  for k in active[:-1] if k > axis],
                *blocks, "}", "}"]

    def fill(self, r: Rows) -> tuple[Gemm, list[str]] | None:
        """(its product, the code) computing kernel `r` (a product's rows and an epilogue
        at each, kernels.Rows) at its rows [r0, r1) into its scratch (from `sb` on), the
        product's rows into t0: its own kernel's row block (`tiled`) for those rows. None
        if it is not such a kernel."""
        length = _body_shape(r.body)[r.node.axis] if r.node.axis is not None else None
        if rows(r.body) or not (length is None or length.is_num and
                                length.value <= SHORT_REDUCE):  # (a row per output: nest)
            return None
        try:
            with self._inner(filling=True, out=self.rows_names[id(r.body)], out_shift=" - sb"):
                lines = self._kernel(r.node, r.body, None)
                (t,) = self.tiles  # (one: else `tiled` raised _NoFill)
        except _NoFill:
            return None
        gm = gemm(t.views, t.axis, self.g.dims) if r.dtype == f32 else None  # type: ignore[arg-type]
        return None if gm is None else (gm, lines)

    @contextmanager
    def _inner(self, **state: object) -> Iterator[None]:
        """Generating another kernel's code inside this one's (a Rows kernel): its own
        per-kernel state, then this one's again (the parameters and names stay shared)."""
        saved = dict(self.__dict__)
        self.__dict__.update(state)
        try:
            yield
        finally:
            args, count = self.args, self._count
            used = (self.used_own, self.used_amx, self.used_winograd)
            self.__dict__.update(saved)
            self.args, self._count = args, count
            self.used_own, self.used_amx, self.used_winograd = used

    def rows_whole(self, lines: list[str]) -> list[str]:
        """The kernel's loops after each kernel it reads in bands (Rows) is run whole into
        a buffer of its own (reads not in bands of rows)."""
        head, tail = [], []
        for r in self.rows_in:
            if r.dtype != f32:
                raise UnsupportedProgram(f"a {r.dtype} kernel read in bands (f32 only)")
            name = self.rows_names[id(r.body)]
            with self._inner(out=name, out_shift=""):
                inner = self._kernel(r.node, r.body, None)
            size = self.ren(numel(r.node.shape)).to_c(self.dim_bounds)
            head += [f"float *restrict {name} = (float *)malloc({size} * sizeof(float) + 1);",
                     f"if (!{name}) abort();", *inner]
            tail.append(f"free({name});")
        return ["{", *head, "const int64_t sb = 0;", *lines, *tail, "}"]

    def whole_products(self, lines: list[str]) -> list[str]:
        """The kernel's loops after each product it reads (Tile) is run whole into a
        buffer of its own (a read elsewhere than at the output's position)."""
        head, tail = [], []
        for t, j in self.tiles.items():
            head += [f"float *restrict t{j} = (float *)malloc("
                     f"{self.ren(numel(t.shape)).to_c(self.dim_bounds)} * sizeof(float) + 1);",
                     f"if (!t{j}) abort();", *self.gemm(t, f"t{j}")]
            tail.append(f"free(t{j});")
        return ["{", *head, "const int64_t tb = 0;", *lines, *tail, "}"]

    # -- kernels -----------------------------------------------------------------
    def interior(self, sc: _Scope, body: Callable[[_Scope], list[str]], inner: list[str],
                 bounds: dict, size: Expr, pragma: str) -> list[str] | None:
        """The innermost loop of a block [lo, hi) as three: its part where every guard
        compared with its variable holds (a padded window's interior, rendered again
        with the variable's bounds narrowed there, so those guards fold away and its
        reads are plain loads that vectorize), and the parts before and after it as
        rendered for the whole row. None: no such guard, or no interior."""
        v = sc.var
        assert v is not None
        if not sc.lows and not sc.highs:
            return None
        a: Expr = ZERO
        for x in sc.lows:
            a = emax(a, x)
        b: Expr = self.ren(size)
        for x in sc.highs:
            b = emin(b, x)
        if a.is_num and b.is_num and a.value >= b.value:
            return None
        inside = _Scope(v, bounds | {v: (a, b - 1)}, self._name)
        middle = body(inside)
        m0, m1 = self._name(), self._name()

        def loop(start: str, end: str, lines: list[str]) -> list[str]:
            return [pragma, f"for (int64_t {v} = {start}; {v} < {end}; {v}++) {{", *lines, "}"]
        rows = _unswitched(inside.preds, loop(m0, m1, middle))
        conds, outer = inside.outer_limits()
        narrow = dict(inside.bounds)
        for u, (lows, highs) in outer.items():
            lo_u, hi_u = (e if isinstance(e, Expr) else Num(e) for e in narrow[u])
            for x in lows:
                lo_u = emax(lo_u, x)
            for x in highs:
                hi_u = emin(hi_u, x - 1)
            narrow[u] = (lo_u, hi_u)
            if lo_u.is_num and hi_u.is_num and lo_u.value > hi_u.value:
                outer = {}  # (they never all hold)
                break
        if outer:
            # where the hoisted conditions hold, the outer variables they compare lie in
            # a narrower range: rendered again there, those guards fold away and an index
            # through a reshape of the padded data (x // n, x % n) simplifies
            held = _Scope(v, narrow, self._name)
            again = body(held)
            rows = [f"if ({' && '.join(conds)}) {{", *held.decls,
                    *_unswitched(held.preds, loop(m0, m1, again)), "} else {", *rows, "}"]
        return [*sc.decls,  # (the interior's own loads only where it has elements)
                f"const int64_t {m0} = LUMOS_MIN(LUMOS_MAX(lo, {a.to_c(bounds)}), hi);",
                f"const int64_t {m1} = LUMOS_MAX(LUMOS_MIN(hi, {b.to_c(bounds)}), {m0});",
                *_unswitched(sc.preds, loop("lo", m0, inner)),
                f"if ({m0} < {m1}) {{", *inside.decls, *rows, "}",
                *_unswitched(sc.preds, loop(m1, "hi", inner))]

    def parallel_if(self, work: Expr | None) -> str | None:
        """The clause of a kernel's parallel pragma given its elements of `work` under its
        schedule's `par` ("" always on all threads, " if(...)" from `par` elements of
        work), or None: no pragma (one thread; `work` None: a loop that must not split)."""
        if work is None or self.par < 0:
            return None
        w = self.ren(work)
        if self.par == 0 or w.is_num and w.value >= self.par:
            return ""
        return None if w.is_num else f" if({w.to_c()} >= {self.par})"

    def kernel(self, i: int) -> list[str]:
        """The loops computing node `i` into `out` (parameters collected in self.args)."""
        self.par = self.g.par.get(i, PAR_SEED)
        self.ahead = self.g.ahead.get(i, AHEAD_SEED)
        self.jam = self.g.jam.get(i, 1)
        self.inner = self.g.inner.get(i, INNER_LAST)
        return self._kernel(self.g.nodes[i], self.g.bodies.get(i), self.g.packs.get(i),
                            i in self.g.own, i in self.g.amx)

    def _kernel(self, n: Node, b: Body | None, pack: Pack | None,
                own: bool = False, amx: bool = False) -> list[str]:
        shape = n.shape
        inner, self.inner = self.inner, INNER_LAST  # (this kernel's, not a band's inside it)
        out_index = self.prep(View.contiguous(shape).index, shape)
        b = b or (pack.body if pack is not None else None)
        self.tiles = {t.gemm: j for j, t in enumerate(tiles(b))} if b is not None else {}
        self.own = {t.gemm for t in tiles(b) if t.own} if b is not None else set()
        if own:
            self.own.add(n)
        self.amx = amx  # (a whole product: KGemmAmx)
        self.windowed = [t for t in tiles(b) if t.windows is not None] if b is not None else []
        self.tile_out = simplify(out_index, self.bounds(shape))
        self.tile_rows = True
        self.row_reads = []
        self.guard = ONE
        self.band_reads = []
        self.windows_made = {}
        self.rows_in = rows(b) if b is not None else []
        self.rows_names = {id(r.body): f"s{self._name()}" for r in self.rows_in}
        if n.op in ("SumReduce", "MaxReduce"):
            assert b is not None
            return self.reduce(n, b, out_index)
        if n.op == "Gemm":
            if pack is None:
                return self.gemm(n)
            if pack.winograd:
                return self.gemm_winograd(n, pack)
            if pack.windows:
                return self.gemm_windows(n, pack)
            if rows(pack.body):  # (row_banded runs bands for an output loop only)
                raise UnsupportedProgram("a packed factor computing a kernel in bands")
            # a product the packed body reads (EGemm) is run whole first
            lines = self.gemm_pack(n, pack)
            return self.whole_products(lines) if self.tiles else lines
        if n.op == "Gather":
            return self.gather(n, out_index)
        if n.op == "Scatter":
            return self.scatter(n, out_index)
        if n.op == "Iota":
            value = lambda sc, _: f"({storage(n.dtype)})({sc.index(self.prep(n.expr, shape))})"
        else:  # Map, Output
            assert b is not None
            m, shape = self.unmerged(n, b, shape, inner)
            if m:
                out_index, inner = self.prep(View.contiguous(shape).index, shape), INNER_LAST
            value = lambda sc, stmts: self.value(b, m, shape, sc, stmts, {}, root=True)

        def body(sc: _Scope) -> list[str]:
            stmts: list[str] = []
            x = value(sc, stmts)
            return [*stmts, f"{self.out}[{sc.index(out_index)}{self.out_shift}] = {x};"]
        return self.nest(shape, body, numel(shape), split=True, inner_axis=inner)

    def unmerged(self, n: Node, b: Body, shape: tuple[Expr, ...],
                 inner: int) -> tuple[dict, tuple[Expr, ...]]:
        """A map's axes as nested loops at the constant steps its reads' indices split them
        at (an im2col copy's row of (kh, kw, ci) taps: z // 9, z // 3 % 3, z % 3; its rows
        of (oh, ow) positions), so that no element divides: (renaming of the axes'
        variables, the loops' shape), or ({}, `shape`). The same elements in the same
        order: decision-free."""
        if n.op != "Map" or inner not in (INNER_LAST, len(shape) - 1) or self.tiles or \
                self.rows_in or self.windowed or not _loads_only(b):
            return {}, shape
        m: dict = {}
        loops: list[Expr] = []
        for k, e in enumerate(shape):
            steps = _splits(b, f"z{k}", self.ren(e), symbolic=True)
            at = len(loops)
            loops += [e // steps[0], *(a // c for a, c in pairwise(steps)), steps[-1]] \
                if steps else [e]
            m[f"z{k}"] = sum((z(at + j) * st for j, st in enumerate(steps)),
                             z(at + len(steps)))
        return (m, tuple(loops)) if len(loops) > len(shape) else ({}, shape)

    def value(self, b: Body, m: dict, shape: tuple[Expr, ...], sc: _Scope, stmts: list[str],
              done: dict[int, str], root: bool = False, known: frozenset = frozenset()) -> str:
        """Body `b` at the loop position (its axis variables renamed by `m`, then in C
        names for loops over `shape`): a value of its value type, or as stored if `root`.
        Each inner op becomes a local appended to `stmts` (`done`: by body object), so a
        subtree shared in the body is computed once. `known`: predicates the enclosing ops'
        validity implies (their result is 0 unless these hold), dropped from the guards of
        constants (no memory is read, and the value only counts where they hold), so e.g.
        `x % 16` stays a constant divisor under padding."""
        if isinstance(b, Tile | Rows):
            return self.tile_read(b, m, shape, sc)
        if isinstance(b, Load):
            v = b.view
            index, valid = (simplify(self.prep(e.subs(m), shape), sc.bounds)
                            for e in (v.index, v.valid))
            if known and self.g.nodes[b.src].op == "Constant":
                valid = _assume(valid, known)
            raw = self.read(b.src, index, valid, sc)
            return raw if root else load(self.g.nodes[b.src].dtype, raw)
        if id(b) in done:
            return done[id(b)]
        if isinstance(b, Reduce):
            name = done[id(b)] = self.inline_max(b, m, shape, sc, stmts)
            return store(b.dtype, name) if root else name
        in_dt = self.g.dtype(b.args[0])
        valid = simplify(self.prep(b.valid.subs(m), shape), sc.bounds)
        inner = known | _conjuncts(valid)
        x = self.compute(b.op, in_dt, [
            self.value(a, m, shape, sc, stmts, done, known=inner) for a in b.args])
        x = f"(({x}) != 0)" if b.dtype.is_bool and not root else store(b.dtype, x)
        if valid is not ONE:  # read through padding: 0 outside
            x = f"({sc.pred(valid)} ? {x} : ({storage(b.dtype)})0)"
        if root:
            return x
        name = done[id(b)] = self._name()
        stmts.append(f"const {value_type(b.dtype)} {name} = {load(b.dtype, x)};")
        return name

    def tile_read(self, b: Tile | Rows, m: dict, shape: tuple[Expr, ...], sc: _Scope) -> str:
        """A product's element from the block of it the kernel holds (`t<j>`, its rows
        from `tb` on; a windows product's: its band of padded image rows from `r0` on,
        `bw` wide; a Rows kernel's: its scratch, from `sb` on); notes whether the read is at the
        output's own position, or the rows a band reads."""
        index, valid = (simplify(self.prep(e.subs(m), shape), sc.bounds)
                        for e in (b.view.index, b.view.valid))
        if valid is ZERO:
            return "0.0f"
        if isinstance(b, Rows):
            name, base = self.rows_names[id(b.body)], "sb"
        elif b.windows is not None:
            gm = gemm(b.gemm.views, b.gemm.axis, self.g.dims)  # type: ignore[arg-type]
            at = None if gm is None else band(index, gm, b.windows.shape, sc.bounds)
            if at is None or not at.offset.is_num or at.row != "z1" or at.line != "z2" or \
                    at.batch not in (None, "z0") or len(shape) < 4 or \
                    simplify(shape[1] - gm.m, sc.bounds) is not ZERO:  # type: ignore[union-attr]
                raise UnsupportedProgram("a windows product read outside a band of its rows")
            self.band_reads.append((at.step, at.offset.value))
            wp = self.windows_code(b.gemm, b.windows).wp
            pos = Var("z1") * Var("bw") + (at.image_row() - Var("r0")) * self.ren(wp) + at.col
            raw = f"t{self.tiles[b.gemm]}[{sc.index(simplify(pos, sc.bounds))}]"
            return raw if valid is ONE else f"({sc.pred(valid)} ? {raw} : 0.0f)"
        else:
            name, base = f"t{self.tiles[b.gemm]}", "tb"
            if simplify(index - self.tile_out, sc.bounds) is not ZERO:
                self.tile_rows = False
        valid = simplify(valid & self.guard, sc.bounds)
        self.row_reads.append((index, valid, len(shape), sc.bounds))
        v = sc.var
        if valid is not ONE and v is not None and v.startswith("z") and \
                not v.startswith("zr") and v not in valid.vars() and \
                index.subs({v: 0}) + Var(v) is index:  # (as `read`: the rows or zeros)
            row = sc.hoist_value(f"({sc.pred(valid)} ? {name} + {sc.index(index.subs({v: 0}))}"
                                 f" - {base} + lo : (const float *)lumos_zero_row)",
                                 "float *restrict")
            return f"{row}[{v} - lo]"
        raw = f"{name}[{sc.index(index)} - {base}]"
        return raw if valid is ONE else f"({sc.pred(valid)} ? {raw} : 0.0f)"

    def compute(self, op: str, in_dt: DType, vals: list[str]) -> str:
        """A pointwise op on input values (C expressions of the inputs' value types)."""
        ct = value_type(in_dt)
        a = vals[0]
        if op == "Cast":
            return a
        if op in UNARY:
            suffix = "f" if ct == "float" else ""
            if op == "Recip":
                return f"(1.0{suffix} / ({a}))"
            if op == "Exp2" and ct == "float":
                return f"lumos_exp2f({a})"
            return f"{_MATH[op]}{suffix}({a})"
        b = vals[1]
        if op == "Select":  # (an int, then the values where it is not 0 and where it is)
            return f"(({a}) != 0 ? ({b}) : ({vals[2]}))"
        if op == "Add":
            return f"(({a}) | ({b}))" if in_dt.is_bool else f"(({a}) + ({b}))"
        if op == "Mul":
            return f"(({a}) & ({b}))" if in_dt.is_bool else f"(({a}) * ({b}))"
        if op == "LessThan":
            return f"(({a}) < ({b}))"
        assert op == "Mod"
        if in_dt.is_float:
            return f"fmod{'f' if ct == 'float' else ''}({a}, {b})"
        return f"lumos_imod_{ct}({a}, {b})"

    def inline_max(self, b: Reduce, m: dict, shape: tuple[Expr, ...], sc: _Scope,
                   stmts: list[str]) -> str:
        """A local holding max reduction `b` at the position `b.view` reads (its value
        type; 0 where the view is not valid: then nothing is read)."""
        dt, ax = b.dtype, b.axis
        out_shape = b.shape[:ax] + b.shape[ax + 1:]
        flat = b.view.index.subs(m)
        index, step = [], ONE  # the output's position, axis by axis, from its flat index
        for k in reversed(range(len(out_shape))):
            q = flat // step
            index.insert(0, q if k == 0 else q % out_shape[k])
            step = step * out_shape[k]
        places = [k for k in range(len(b.shape)) if k != ax]
        vt, acc = value_type(dt), self._name()
        if dt.is_bool:
            first, step_c = "{a} = {x};", "{a} |= {x};"
        elif dt.is_float:  # NaN wins, as in the kernel
            first, step_c = "{a} = {x};", MAX_STEP
        else:
            first, step_c = "{a} = {x};", "{a} = {x} > {a} ? {x} : {a};"
        valid = simplify(self.prep(b.valid.subs(m), shape), sc.bounds)
        if valid is ZERO:
            return f"({vt})0"
        # read through padding, the position may be outside the reduction's output: where
        # that is so along the whole vector loop, its reads check it too (rows or zeros:
        # no branch in the loop), and the result is 0 there; else a branch
        branchless = valid is not ONE and sc.var is not None and sc.var not in valid.vars()
        saved = self.guard
        if branchless:
            self.guard = simplify(saved & valid, sc.bounds)
        body: list[str] = []
        for r in range(b.shape[ax].value):
            mr = {f"z{k}": e for k, e in zip(places, index, strict=True)} | {f"z{ax}": Num(r)}
            x = self.value(b.arg, mr, shape, sc, body, {})
            body.append((first if r == 0 else step_c).format(a=acc, x=f"({x})"))
        self.guard = saved
        if valid is ONE:
            stmts += [f"{vt} {acc};", *body]
        elif branchless:  # (a float's bits masked: GCC 12 vectorizes no select of it here)
            bits = {"float": "int32_t", "double": "int64_t"}.get(vt)
            keep = f"{acc} = {sc.pred(valid)} ? {acc} : ({vt})0;" if bits is None else \
                (f"{{ union {{ {vt} f; {bits} i; }} u_ = {{{acc}}}; "
                 f"u_.i &= -({bits})({sc.pred(valid)} != 0); {acc} = u_.f; }}")
            stmts += [f"{vt} {acc};", *body, keep]
        else:
            stmts += [f"{vt} {acc} = 0;", f"if ({sc.pred(valid)}) {{", *body, "}"]
        return acc

    def vector(self, b: Body, m: dict, shape: tuple[Expr, ...], sc: _Scope, stmts: list[str],
               done: dict[object, tuple[str, str, bool]], lanes: int,
               known: frozenset = frozenset()) -> tuple[str, str, bool]:
        """Body `b` over the `lanes` iterations of the innermost loop `sc.var` as GCC vector
        code: (C value, its C element type, whether it is a vector; else a scalar the same
        in every lane). Loads must read contiguously or not move in the loop; an op or
        type this does not cover raises _Scalar (then the scalar loop is emitted): GCC
        picks one vector size per loop by its narrowest type, so a byte-matrix reduction
        of 16 lanes ran in 4-float registers; written as vectors it runs in 16-float ones."""
        if isinstance(b, Tile | Rows):
            raise _Scalar
        if isinstance(b, Load):
            n = self.g.nodes[b.src]
            v = b.view
            index, valid = (simplify(self.prep(e.subs(m), shape), sc.bounds)
                            for e in (v.index, v.valid))
            if known and n.op == "Constant":
                valid = _assume(valid, known)
            var = sc.var
            assert var is not None
            if var in valid.vars() or n.dtype is f16 or n.dtype is bf16 or n.dtype.is_bool:
                if var in valid.vars() or var in index.vars():
                    raise _Scalar
                raw = self.read(b.src, index, valid, sc)
                return (f"lumos_f16_f32_one({raw})" if n.dtype is f16 else load(n.dtype, raw),
                        value_type(n.dtype), False)
            if n.op == "Constant" or var not in index.vars():
                return self.read(b.src, index, valid, sc), storage(n.dtype), False
            if index.subs({var: 0}) + Var(var) is not index:
                raise _Scalar  # strided or not linear
            ct, vt = storage(n.dtype), _vtype(storage(n.dtype), lanes)
            if valid is ZERO:
                return f"({ct})0", ct, False
            key = (b.src, index, valid)  # the same vector is loaded once
            if key not in done:
                # through an unaligned, may_alias type: GCC widens a vector memcpy'd in
                # byte by byte
                x = f"({vt})*(const {vt}u *)&{self.arg(b.src)}[{sc.index(index)}]"
                if valid is not ONE:
                    x = f"({sc.pred(valid)} ? {x} : ({vt}){{0}})"
                done[key] = self._name(), ct, True
                stmts.append(f"const {vt} {done[key][0]} = {x};")
            return done[key]
        if id(b) in done:
            return done[id(b)]
        if isinstance(b, Reduce):
            raise _Scalar
        valid = simplify(self.prep(b.valid.subs(m), shape), sc.bounds)
        in_dt = self.g.dtype(b.args[0])
        ct = value_type(b.dtype)
        if valid is ZERO:
            return f"({ct})0", ct, False
        if sc.var in valid.vars() or in_dt.is_bool or b.dtype.is_bool or \
                b.dtype is f16 or b.dtype is bf16:
            raise _Scalar
        inner = known | _conjuncts(valid)
        args = [self.vector(a, m, shape, sc, stmts, done, lanes, inner) for a in b.args]
        if not any(vec for _, _, vec in args):  # the same in every lane: a scalar
            x, vec = store(b.dtype, self.compute(b.op, in_dt, [a for a, _, _ in args])), False
        elif b.op == "Cast":
            (a, act, _), = args
            x, vec = _convert(a, act, ct, lanes), True
        elif b.op == "Add" and (kept := self._plus_zero(args)) is not None:
            x, vec = kept, True  # (the two halves of a stack: each plus the other's 0)
        elif b.op in ("Add", "Mul") or (b.op == "Recip" and in_dt.is_float):
            x, vec = self.compute(b.op, in_dt, [a for a, _, _ in args]), True
        elif b.op == "Mod" and not in_dt.is_float and _divisor(self.g, b.args[1], args[1][0]):
            x, vec = f"(({args[0][0]}) % ({args[1][0]}))", True
        else:
            raise _Scalar
        if valid is not ONE:
            zero = f"({_vtype(ct, lanes)}){{0}}" if vec else f"({ct})0"
            x = f"({sc.pred(valid)} ? {x} : {zero})"
        name = self._name()
        stmts.append(f"const {_vtype(ct, lanes) if vec else ct} {name} = {x};")
        if vec and (b.op == "Cast" and not in_dt.is_float or x in self._unsigned_zero):
            self._unsigned_zero.add(name)
        done[id(b)] = name, ct, vec
        return done[id(b)]

    def _plus_zero(self, args: list[tuple[str, str, bool]]) -> str | None:
        """The vector operand of a float `x + 0` when x is never -0 (an integer converted,
        or such a value plus 0), so the sum is x exactly; else None."""
        (a, at, av), (c, _, cv) = args
        if at not in ("float", "double"):
            return None
        for x, xv, zero in ((a, av, c), (c, cv, a)):
            if xv and x in self._unsigned_zero and zero == f"({at})0":
                return x
        return None

    def reduce(self, n: Node, b: Body, out_index: Expr) -> list[str]:
        """Loops over the output; inside, a loop over the reduced axis evaluating `b`
        (a body over the input's shape, the output's axes plus `axis`)."""
        dt, ax, shape = n.dtype, n.axis, n.shape
        assert ax is not None
        in_shape = _body_shape(b)
        length = self.ren(in_shape[ax])
        vt = value_type(dt)
        acc_t = "float" if dt.is_float and dt.bits < 32 else vt
        if dt.is_bool:
            init, step = "0", "{a} |= {x};"
        elif n.op == "SumReduce":
            init, step = "0", "{a} += {x};"
        elif dt.is_float:
            init, step = "-INFINITY", MAX_STEP
        else:
            init, step = _lowest(dt, acc_t), "{a} = {x} > {a} ? {x} : {a};"

        later = {f"z{k}": z(k - 1) for k in range(ax + 1, len(in_shape))}
        if length.is_num and length.value <= SHORT_REDUCE:
            return self.reduce_short(n, b, later, length.value, out_index, init, step, acc_t)
        m0 = {f"z{ax}": Var("zr")} | later
        if self._outer_reduction(b, m0, shape, length):
            return self.reduce_outer(n, b, m0, length, out_index, init, step, acc_t, vt)
        # the reduced axis as nested loops at the constant steps its index splits at
        # (e.g. 32-element quantization blocks, 16-byte nibble halves), so that the
        # innermost loop reads linearly and vectorizes; it then accumulates into one
        # partial result per lane, combined at the end
        steps = _splits(b, f"z{ax}", length)
        outer = [Var(f"zr{k}") for k in range(len(steps))]
        zr = sum((v * st for v, st in zip(outer, steps, strict=True)), Var("zr"))
        m = {f"z{ax}": zr} | {f"z{k}": z(k - 1) for k in range(ax + 1, len(in_shape))}
        sizes = [length // steps[0], *(a // b for a, b in pairwise(steps))] \
            if steps else []
        inner = steps[-1] if steps else length
        lanes = inner.value if steps and inner.value <= MAX_LANES else 0
        inner_step, nan = step, n.op == "MaxReduce" and dt.is_float and not lanes
        if lanes:
            simd, acc = ["#pragma omp simd"], f"lane[{{c}}*{lanes} + zr]"
        elif nan:  # a vector max, NaNs counted apart (GCC vectorizes no NaN-aware select)
            simd, acc = ["#pragma omp simd reduction(max:acc) reduction(|:nan)"], "acc"
            inner_step = "{a} = {x} > {a} ? {x} : {a}; nan |= {x} != {x};"
        else:  # float sums still take vector lanes: reassociated, not exact
            simd, acc = ["#pragma omp simd reduction(+:acc)"] if n.op == "SumReduce" and \
                dt.is_float else [], "acc"

        # trailing outer loops of a few iterations (e.g. the two nibble halves) are
        # unrolled: each copy knows its index, so its predicates fold away
        unroll = len(outer)
        while unroll > 0 and sizes[unroll - 1].is_num and \
                math.prod(s.value for s in sizes[unroll - 1:]) <= MAX_UNROLL:
            unroll -= 1
        names = [v.args[0] for v in outer]
        # sums over a power-of-two number of lanes are written as GCC vectors when the
        # body allows (see `vector`)
        vector = lanes >= 4 and lanes & (lanes - 1) == 0 and n.op == "SumReduce" and \
            not dt.is_bool and acc_t == vt

        def body(sc: _Scope) -> list[str]:
            loops, rb, cases = _split_loops(sc, m, (lanes, inner, unroll, names, sizes))
            head = [f"{acc_t} acc = {init};", *(["int nan = 0;"] if nan else [])]
            tail = [*(["if (nan) acc = NAN;"] if nan else []),
                    f"{self.out}[{sc.index(out_index)}{self.out_shift}] = {store(dt, 'acc')};"]
            n_lanes = lanes * len(cases)
            if vector:
                try:  # the lanes as vectors of (at most) one register each
                    register = vector_bytes() // 4  # floats in this machine's registers
                    width, copies = min(lanes, register), []
                    per = lanes // width
                    for c, mc in enumerate(cases):
                        rs, stmts = _Scope("zr", rb, self._name), []
                        a, done = f"lv[{c * per} + zr / {width}]", {}
                        factors = self.fma_factors(b, mc, shape, rs, stmts, done, width) \
                            if acc_t == "float" and width in (8, 16) and width == register \
                            else None
                        if factors:
                            add = f"{a} = LUMOS_FMA_F32X{width}({factors[0]}, " \
                                  f"{factors[1]}, {a});"
                        else:
                            x = self.vector(b, mc, shape, rs, stmts, done, width)[0]
                            add = f"{a} += {x};"
                        copies += ["{", *rs.decls,
                                   f"for (int64_t zr = 0; zr < {lanes}; zr += {width}) {{",
                                   *stmts, add, "}", "}"]
                    lv, nv = _vtype(acc_t, width), n_lanes // width
                    head += [*self.prefetch_rows(b, m, shape, sc), f"{lv} lv[{nv}];",
                             f"for (int zl = 0; zl < {nv}; zl++) lv[zl] = ({lv}){{0}};"]
                    tail = [*_lane_sum("lv", nv, acc_t, width), *tail]
                    return [*head, *loops, *copies, *["}"] * len(loops), *tail]
                except _Scalar:
                    pass
            copies = []
            for c, mc in enumerate(cases):
                rs, stmts = _Scope("zr", rb, self._name), []
                x = self.value(b, mc, shape, rs, stmts, {})
                copies += ["{", *rs.decls, *simd,
                           f"for (int64_t zr = 0; zr < {inner.to_c()}; zr++) {{", *stmts,
                           f"const {vt} x = {x};",
                           inner_step.format(a=acc.format(c=c), x="x"), "}", "}"]
            if lanes:  # one set of lanes per copy: independent chains of vector adds
                head += [f"{acc_t} lane[{n_lanes}];",
                         f"for (int zl = 0; zl < {n_lanes}; zl++) lane[zl] = {init};"]
                tail = [f"for (int zl = 0; zl < {n_lanes}; zl++) {{",
                        step.format(a="acc", x="lane[zl]"), "}", *tail]
            head = [*self.prefetch_rows(b, m, shape, sc), *head]
            return [*head, *loops, *copies, *["}"] * len(loops), *tail]
        long = not (length.is_num and length.value < REDUCE_BLOCK_MIN_LENGTH)
        block = REDUCE_BLOCK if long else BLOCK
        active = [k for k, s in enumerate(shape) if s is not ONE]
        if self.jam > 1 and vector and active[:1] == [0] and len(active) > 1 and not (
                self.tiles or self.rows_in or self.windowed or self.filling):
            jammed = self.jammed(n, b, m, out_index, (lanes, inner, unroll, names, sizes))
            try:
                lines = self.nest(shape, jammed, numel(shape) * in_shape[ax], block=block,
                                  jam=self.jam)
                return _typedefs(lines) + lines
            except _Scalar:
                pass
        lines = self.nest(shape, body, numel(shape) * in_shape[ax], block=block)
        return _typedefs(lines) + lines

    def jammed(self, n: Node, b: Body, m: dict, out_index: Expr,
               loop: tuple) -> Callable[[_Scope], list[str]]:
        """The body of a vector sum computing `self.jam` outputs along the first axis at
        once (z0 .. z0 + jam - 1; a last group of fewer rows in groups of half as many,
        and so on): what does not read that axis (a matrix-vector product's unpacked
        weights) is computed once for the group, each output accumulating into a vector
        of its own. Raises _Scalar where the body is not vector code."""
        lanes = loop[0]  # (the sum split as `reduce` splits it: _split_loops)
        shape, dt, jam = n.shape, n.dtype, self.jam
        private = {id(x) for x in _apply_nodes(b) if any(
            "z0" in (self.prep(ld.view.index.subs(m), shape).vars() |
                     self.prep(ld.view.valid.subs(m), shape).vars())
            for ld in body_loads(x))}
        register = vector_bytes() // 4
        width = min(lanes, register)
        if width not in (8, 16) or width != register:
            raise _Scalar
        acc_t, lv = value_type(dt), _vtype(value_type(dt), width)

        def rows(sc: _Scope, count: int, zo: Expr) -> list[str]:
            """The outputs at rows z0 + zo .. z0 + zo + count - 1."""
            at = [{"z0": Var("z0") + zo + j} for j in range(count)]  # output j's row
            loops, rb, cases = _split_loops(sc, m, loop)
            rb["zo"] = (0, jam - 1)
            copies = []
            for mc in cases:
                rs, stmts, adds, shared = _Scope("zr", rb, self._name), [], [], {}
                for j in range(count):  # (input axes before the sum's are the output's)
                    mj = {"z0": at[j]["z0"]} | {k: e.subs(at[j]) for k, e in mc.items()}
                    done = _PerOutput(shared, j, private)
                    factors = self.fma_factors(b, mj, shape, rs, stmts, done, width)
                    if factors:
                        adds.append(f"lv[{j}] = LUMOS_FMA_F32X{width}({factors[0]}, "
                                    f"{factors[1]}, lv[{j}]);")
                    else:
                        x = self.vector(b, mj, shape, rs, stmts, done, width)[0]
                        adds.append(f"lv[{j}] += {x};")
                copies += ["{", *rs.decls,
                           f"for (int64_t zr = 0; zr < {lanes}; zr += {width}) {{",
                           *stmts, *adds, "}", "}"]
            head = [f"{lv} lv[{count}];",
                    f"for (int zl = 0; zl < {count}; zl++) lv[zl] = ({lv}){{0}};"]
            tail = []
            for j in range(count):  # (the index written out: zo is set in the body)
                to = out_index.subs(at[j]).to_c(rb)
                tail += ["{", f"{acc_t} acc = 0;", *_lane_sum(f"(lv + {j})", 1, acc_t, width),
                         f"{self.out}[{to}{self.out_shift}] = {store(dt, 'acc')};", "}"]
            return ["{", *head, *loops, *copies, *["}"] * len(loops), *tail, "}"]

        def body(sc: _Scope) -> list[str]:
            left = f"{(self.ren(shape[0]) - Var('z0')).to_c(sc.bounds)}"
            rest = ["int64_t zo = 0;"]
            part = jam // 2
            while part:
                rest += [f"if (zleft & {part}) {{", *rows(sc, part, Var("zo")),
                         f"zo += {part};", "}"]
                part //= 2
            return [*self.prefetch_rows(b, m, shape, sc), f"const int64_t zleft = {left};",
                    f"if (zleft >= {jam}) {{", *rows(sc, jam, Num(0)), "} else {", *rest, "}"]
        return body

    def prefetch_rows(self, b: Body, m: dict, shape: tuple[Expr, ...],
                      sc: _Scope) -> list[str]:
        """Prefetches of the rows a few outputs ahead of each input read in a row of its
        own per output (its index steps PREFETCH_MIN_ROW bytes or more per output and is
        linear in the output's innermost variable); called after the body is generated,
        so that every input it names is already an argument."""
        v, rows = sc.var, []
        if v is None or self.ahead <= 0:
            return []
        for x in body_loads(b):
            n = self.g.nodes[x.src]
            if n.op == "Constant" or x.src not in self.args:
                continue
            e = self.prep(x.view.index.subs(m), shape)
            start = e.subs({u: 0 for u in e.vars() if u.startswith("zr")})
            if not set(start.vars()) <= set(sc.bounds):  # (a loop's inside the body)
                continue
            step = start.subs({v: 1}) - start.subs({v: 0})
            if not step.is_num or start.subs({v: 0}) + Var(v) * step is not start:
                continue
            row = step.value * n.dtype.bits // 8
            if row >= PREFETCH_MIN_ROW:
                rows.append((x.src, start, step.value, row))
        rows = list(dict.fromkeys(rows))
        ahead = -(-self.ahead // max(sum(r[3] for r in rows), 1))  # rows ahead
        lines = []
        for j, start, step, row in rows:
            elems = 512 // self.g.nodes[j].dtype.bits  # elements per 64-byte line
            base = f"{self.arg(j)} + {start.to_c(sc.bounds)}"
            lines += [f"__builtin_prefetch({base} + {ahead * step + k * elems});"
                      for k in range(min(-(-row // 64) + 1, PREFETCH_LINES))]
        return lines

    def fma_factors(self, b: Body, m: dict, shape: tuple[Expr, ...], sc: _Scope,
                    stmts: list[str], done: dict[object, tuple[str, str, bool]],
                    lanes: int) -> tuple[str, str] | None:
        """The two vector factors of a reduction body that is a product valid everywhere
        (a dot product: accumulated with FMA), else None."""
        if isinstance(b, Load | Tile | Rows) or b.op != "Mul" or \
                simplify(self.prep(b.valid.subs(m), shape), sc.bounds) is not ONE:
            return None
        (x, _, xv), (y, _, yv) = (self.vector(a, m, shape, sc, stmts, done, lanes)
                                  for a in b.args)
        return (x, y) if xv and yv else None

    def _outer_reduction(self, b: Body, m: dict, shape: tuple[Expr, ...],
                         length: Expr) -> bool:
        """Whether to run the reduction loop outside the output's innermost loop: every
        load reads that output axis contiguously (or not at all) and some load steps
        through memory along the reduced axis (e.g. a column sum, attention @ V)."""
        active = [k for k, s in enumerate(shape) if s is not ONE]
        if not active or (length.is_num and length.value < 2):
            return False
        zl = f"z{active[-1]}"
        strided = False
        for x in body_loads(b):
            e = self.prep(x.view.index.subs(m), shape)
            for v, ok in ((zl, (0, 1)), ("zr", None)):
                base = e.subs({v: 0})
                step = e.subs({v: 1}) - base
                if base + Var(v) * step is not e or not step.is_num:
                    return False  # not linear in it: leave it to the default loops
                if ok is not None and step.value not in ok:
                    return False
                if ok is None and step.value not in (0, 1):
                    strided = True
        return strided

    def reduce_short(self, n: Node, b: Body, later: dict, length: int, out_index: Expr,
                     init: str, step: str, acc_t: str) -> list[str]:
        """A reduction of a few elements as one step per element, in order, in the body of
        the output loop (each with its index known, so guards fold), which vectorizes
        along the outputs (per-output loops of two, a 2x2 max pool's, are slow). A
        maximum starts from its first element, not from the identity: the same value, one
        compare and select fewer."""
        assert n.axis is not None

        def body(sc: _Scope) -> list[str]:
            stmts = [f"{acc_t} acc = {init};"]
            for k in range(length):
                x = self.value(b, {f"z{n.axis}": Num(k)} | later, n.shape, sc, stmts, {})
                first = k == 0 and n.op == "MaxReduce"
                stmts.append(f"{{ const {acc_t} x = {x}; "
                             f"{'acc = x;' if first else step.format(a='acc', x='x')} }}")
            return [*stmts, f"{self.out}[{sc.index(out_index)}{self.out_shift}] = "
                    f"{store(n.dtype, 'acc')};"]
        return self.nest(n.shape, body, numel(n.shape) * length)

    def reduce_outer(self, n: Node, b: Body, m: dict, length: Expr, out_index: Expr,
                     init: str, step: str, acc_t: str, vt: str) -> list[str]:
        """A reduction as a loop over the reduced axis around a vector loop over a block
        of the output's innermost axis, accumulating into one partial result per output."""
        shape = n.shape
        zl = f"z{[k for k, s in enumerate(shape) if s is not ONE][-1]}"

        def body(sc: _Scope) -> list[str]:
            stmts: list[str] = []
            x = self.value(b, m, shape, sc, stmts, {})
            return [*stmts, f"const {vt} x = {x};",
                    step.format(a=f"acc[{zl} - lo]", x="x")]

        def store_out(sc: _Scope) -> list[str]:
            return [f"for (int64_t {zl} = lo; {zl} < hi; {zl}++) "
                    f"{self.out}[{sc.index(out_index)}{self.out_shift}] = "
                    f"{store(n.dtype, f'acc[{zl} - lo]')};"]
        tail_scope = _Scope(None, self.bounds(shape), self._name)
        before = [f"{acc_t} acc[{OUTER_BLOCK}];",
                  f"for (int64_t zi = 0; zi < hi - lo; zi++) acc[zi] = {init};"]
        loop = f"for (int64_t zr = 0; zr < {self.ren(length).to_c()}; zr++)"
        return self.nest(shape, body, numel(shape) * length, (before, loop,
                         store_out(tail_scope)), {"zr": (0, self.ren(length) - 1)},
                         OUTER_BLOCK)

    def gemm(self, n: Node, out: str = "out") -> list[str]:
        """One lumos_sgemm (OpenBLAS, lumos_gemm_own or lumos_gemm_amx) per batch index, in
        nested loops over the batch (the axes kernels.gemm could not merge into the rows):
        the threads take batch indices when there are at least as many, else each product
        is split among them."""
        assert n.axis is not None
        gm = gemm(n.views, n.axis, self.g.dims)  # as cpu_space found it
        assert gm is not None, "a Gemm node without a BLAS layout"
        c = lambda e: self.ren(e).to_c(self.dim_bounds)  # noqa: E731
        zs = [Var(f"zg{i}") for i in range(len(gm.batch))]
        at = lambda base, steps: c(sum((s * v for s, v in zip(steps, zs, strict=True)),  # noqa: E731
                                       base))

        def operand(mat: Matrix, width: Expr) -> str:
            ptr = self.arg(n.inputs[mat.input])
            return f"{ptr} + {at(mat.offset, mat.steps)}, (blasint)LUMOS_MAX(LUMOS_MAX(" \
                   f"{c(mat.ld)}, {c(width)}), 1)"
        a, b = gm.a, gm.b
        self.used_own |= n in self.own
        self.used_amx |= self.amx
        call = (f"lumos_sgemm{'_own' if n in self.own else '_amx' if self.amx else ''}("
                f"{int(a.trans)}, "
                f"{int(b.trans)}, {c(gm.m)}, {c(gm.n)}, {c(gm.k)}, "
                f"{operand(a, gm.m if a.trans else gm.k)}, "
                f"{operand(b, gm.k if b.trans else gm.n)}, "
                f"{out} + {at(ZERO, gm.c_steps)}, LUMOS_MAX({c(gm.ldc)}, 1));")
        if not gm.batch:
            return [call]
        loops = [f"for (int64_t {v} = 0; {v} < {c(s)}; {v}++)" for v, s in zip(zs, gm.batch,
                                                                                  strict=True)]
        count = c(numel(gm.batch))
        return [f"#pragma omp parallel for collapse({len(zs)}) if({count} >= lumos_threads()) "
                "num_threads(lumos_threads())", *loops, call]

    def gemm_pack(self, n: Node, pack: Pack) -> list[str]:
        """A product one of whose factors it computes itself (kernels.Pack): the threads
        take (batch index, block) pairs; each evaluates the factor's body over a block of
        its M (A) or N (B) axis into its scratch (`lumos_tile`), then multiplies that
        block with OpenBLAS (single-threaded) into its part of the output."""
        assert n.axis is not None
        bounds = self.dim_bounds
        gm = gemm(n.views, n.axis, self.g.dims)
        assert gm is not None, "a Gemm node without a BLAS layout"
        pk = packing(gm, pack.side, pack.shape, self.g.dims)
        assert pk is not None, "a packed factor that is not one dense matrix"
        c = lambda e: self.ren(e).to_c(bounds)  # noqa: E731
        shape = pack.shape
        mat, other = (gm.a, gm.b) if gm.a.input == pack.side else (gm.b, gm.a)
        is_a = mat is gm.a
        group = pk.rows if pk.chunk_rows else pk.cols  # the blocked (M or N) axes
        lead, rest = group[0], numel(tuple(shape[k] for k in group[1:]))
        flat = lambda axes: sum((Var(f"z{k}") * numel(tuple(shape[j] for j in axes[p + 1:]))  # noqa: E731
                                 for p, k in enumerate(axes)), ZERO)
        q0 = Var("q0")
        if pk.chunk_rows:  # the block: rows from q0 * rest on, all columns
            width = numel(tuple(shape[k] for k in pk.cols))
            at = (flat(pk.rows) - q0 * rest) * width + flat(pk.cols)
        else:  # all rows, columns from q0 * rest on: a matrix `pc` wide
            at = flat(pk.rows) * Var("pc") + flat(pk.cols) - q0 * rest
        loops = [k for k in range(len(shape)) if k != pk.batch and shape[k] is not ONE]
        inner = loops[-1]
        sc = _Scope(f"z{inner}", self.bounds(shape) | {"q0": (0, self.ren(shape[lead]) - 1),
                                                       "pc": (1, None)}, self._name)
        stmts: list[str] = []
        value = self.value(pack.body, {}, shape, sc, stmts, {}, root=True)
        target = sc.index(simplify(self.prep(at, shape), sc.bounds))
        fill = [f"for (int64_t z{k} = {'q0' if k == lead else 0}; "
                f"z{k} < {'q1' if k == lead else c(shape[k])}; z{k}++)" for k in loops[:-1]]
        lo, hi = ("q0", "q1") if inner == lead else ("0", c(shape[inner]))
        fill += [f"for (int64_t zb = 0; zb < ({hi} - {lo} + {BLOCK - 1}) / {BLOCK}; zb++) {{",
                 f"const int64_t lo = {lo} + zb * {BLOCK}, hi = LUMOS_MIN(lo + {BLOCK}, {hi});",
                 *sc.decls, "#pragma GCC ivdep",
                 f"for (int64_t z{inner} = lo; z{inner} < hi; z{inner}++) {{", *stmts,
                 f"pk[{target}] = {value};", "}", "}"]
        k = c(gm.k)
        blocked = f"(q1 - q0) * {c(rest)}"  # rows (A) or columns (B) of this block
        start = f"q0 * {c(rest)}"
        step = lambda mat: f" + zg * {c(mat.steps[0])}" if gm.batch else ""  # noqa: E731
        optr = f"{self.arg(n.inputs[0])} + {c(other.offset)}{step(other)}"

        def ld(mat: Matrix, width: Expr) -> str:
            return f"(blasint)LUMOS_MAX(LUMOS_MAX({c(mat.ld)}, {c(width)}), 1)"
        tr = lambda mat: "CblasTrans" if mat.trans else "CblasNoTrans"  # noqa: E731
        cout = f"out + zg * {c(gm.c_steps[0])}" if gm.batch else "out"
        if is_a:  # the block's rows of C, all its columns
            own_ld = f"(blasint)LUMOS_MAX({blocked if mat.trans else k}, 1)"
            call = (f"scipy_cblas_sgemm(CblasRowMajor, {tr(mat)}, {tr(other)}, "
                    f"(blasint)({blocked}), (blasint){c(gm.n)}, (blasint){k}, 1.0f, pk, {own_ld}, "
                    f"{optr}, {ld(other, gm.k if other.trans else gm.n)}, 0.0f, "
                    f"{cout} + {start} * {c(gm.ldc)}, (blasint)LUMOS_MAX({c(gm.ldc)}, 1));")
        else:  # all rows of C, the block's columns
            own_ld = f"(blasint)LUMOS_MAX({k if mat.trans else blocked}, 1)"
            call = (f"scipy_cblas_sgemm(CblasRowMajor, {tr(other)}, {tr(mat)}, "
                    f"(blasint){c(gm.m)}, (blasint)({blocked}), (blasint){k}, 1.0f, "
                    f"{optr}, {ld(other, gm.m if other.trans else gm.k)}, pk, {own_ld}, 0.0f, "
                    f"{cout} + {start}, (blasint)LUMOS_MAX({c(gm.ldc)}, 1));")
            if pack.panels:
                assert not mat.trans, "lumos_gemm_panels reads B untransposed"
                lda = c(other.ld)
                sam, sak = ("1", lda) if other.trans else (lda, "1")
                call = "\n".join([
                    "#ifdef LUMOS_PANELS",
                    f"lumos_gemm_panels({c(gm.m)}, {blocked}, {k}, {optr}, {sam}, {sak}, pk, "
                    f"{blocked}, {cout} + {start}, {c(gm.ldc)});",
                    "#else", call, "#endif"])
        batches = c(gm.batch[0]) if gm.batch else "1"
        size = c(shape[lead])
        work = self.ren(gm.m * gm.n * gm.k * (gm.batch[0] if gm.batch else ONE)).to_c(bounds)
        # the blocks: about PACK_FLOATS each, but at least as many as there are threads
        # where the product has that many slices of `rest` (else a thread waits)
        return [
            f"const int64_t SB = LUMOS_MAX({batches}, 1), SPER = (lumos_threads() + SB - 1) / SB;",
            f"const int64_t S = LUMOS_MIN(LUMOS_MAX(LUMOS_MAX({PACK_FLOATS} / LUMOS_MAX({k} * "
            f"{c(rest)}, 1), ({PACK_MIN_WIDTH} + {c(rest)} - 1) / {c(rest)}), 1), "
            f"LUMOS_MAX(({size} + SPER - 1) / SPER, 1));",
            f"const int64_t NQ = ({size} + S - 1) / S;",
            f"#pragma omp parallel if({work} >= 131072) num_threads(lumos_threads())", "{",
            f"float *restrict pk = lumos_tile(0, S * {c(rest)} * LUMOS_MAX({k}, 1));",
            "#pragma omp for schedule(static)",
            f"for (int64_t zc = 0; zc < {batches} * NQ; zc++) {{",
            "const int64_t zg = zc / NQ, q0 = zc % NQ * S, q1 = LUMOS_MIN(q0 + S, "
            f"{size});",
            *([f"const int64_t z{pk.batch} = zg;"] if pk.batch is not None else []),
            *([] if pk.chunk_rows else [f"const int64_t pc = {blocked};"]), *fill, call,
            "}", "}"]

    def gemm_windows(self, n: Node, pack: Pack) -> list[str]:
        """A product whose B is a convolution's windows (kernels.Windows): A packed into
        strips once; per batch index the threads first copy the input with its padding
        (B's body at kernel offset 0 over the widened output positions), then take panels
        of 48 padded columns (`lumos_gemm_windows`)."""
        w = self.windows_code(n, pack)
        cstep = f" + zg * {w.c(w.gm.c_steps[0])}" if w.gm.batch else ""
        args = (f"pd, koff, zj * 48, {w.cols}, {w.width}, {w.c(w.wp)}, out{cstep}, "
                f"{w.c(w.gm.ldc)});")
        call = [f"lumos_gemm_windows({w.m}, {w.k}, ap, {args}"]
        if pack.amx:  # (bf16x3: KGemmWindowsAmx)
            self.used_amx = True
            call = [f"if (amx) lumos_amx_windows({w.m}, {w.k}, aq, {args}", "else", *call]
        return [
            "{", *w.setup,
            f"#pragma omp parallel if({w.work} >= 131072) num_threads(lumos_threads())", "{",
            f"for (int64_t zg = 0; zg < {w.batches}; zg++) {{",
            *w.copy,
            "#pragma omp for schedule(static)",
            f"for (int64_t zj = 0; zj < ({w.cols} + 47) / 48; zj++)", "{", *call, "}",
            "}", "}", "}"]

    def gemm_winograd(self, n: Node, pack: Pack) -> list[str]:
        """A windows product of a 3x3 kernel (kernels.winograd) by Winograd's F(2x2, 3x3):
        every batch index's padded copy first (as gemm_windows makes them), one after the
        other in scratch, then `lumos_winograd` (its own unit, WINOGRAD) on them all."""
        w = self.windows_code(n, pack)
        self.used_winograd = True
        a, sam, sak = w.a
        cstep = w.c(w.gm.c_steps[0]) if w.gm.batch else "0"
        return [
            "{", *w.koff,
            f"float *restrict pall = lumos_tile(0, {w.batches} * {w.plane} + {w.c(w.wp)} + 4);",
            f"memset(pall + {w.batches} * {w.plane}, 0, ({w.c(w.wp)} + 4) * sizeof(float));",
            f"#pragma omp parallel if({w.work} >= 131072) num_threads(lumos_threads())", "{",
            f"for (int64_t zg = 0; zg < {w.batches}; zg++) {{",
            f"float *restrict pd = pall + zg * {w.plane};", *w.copy, "}", "}",
            f"lumos_winograd({w.m}, {w.k} / 9, {w.batches}, {a}, {sam}, {sak}, koff, pall, "
            f"{w.plane}, {w.hp}, {w.c(w.wp)}, {w.height}, {w.width}, out, {w.c(w.gm.ldc)}, "
            f"{cstep}, {int(pack.phased)});", "}"]

    def windows_code(self, n: Node, pack: Pack) -> _WindowsCode:
        """The parts of a windows product's code (see gemm_windows and banded), made once
        per kernel."""
        if n in self.windows_made:
            return self.windows_made[n]
        self.windows_made[n] = made = self._windows_code(n, pack)
        return made

    def _windows_code(self, n: Node, pack: Pack) -> _WindowsCode:
        assert n.axis is not None
        bounds = self.dim_bounds
        gm = gemm(n.views, n.axis, self.g.dims)
        assert gm is not None, "a Gemm node without a BLAS layout"
        shape = pack.shape
        win = windows(gm, 1, shape, pack.body.view, self.g.dims)  # type: ignore[union-attr]
        pk = packing(gm, 1, shape, self.g.dims)
        assert win is not None and pk is not None, "windows that are no convolution's"
        c = lambda e: self.ren(e).to_c(bounds)  # noqa: E731
        lead, last = (pk.cols[0], pk.cols[-1]) if len(pk.cols) == 2 else (None, pk.cols[0])
        hp = ONE if lead is None else win.extent(shape, lead)
        wp = win.extent(shape, last)
        chans = numel(tuple(shape[k] for k in win.channels))
        # the padded copy: B's body at kernel offsets 0 (their axes of size 1 here)
        paired = {r for r, _ in win.pairs}
        cshape = tuple(ONE if k in paired or k == pk.batch else
                       win.extent(shape, k) if k in pk.cols else e for k, e in enumerate(shape))
        m = {} if pk.batch is None else {f"z{pk.batch}": Var("zg")}
        batches = gm.batch[0] if gm.batch else ONE
        sc = _Scope(f"z{last}", self.bounds(cshape) | {"zg": (0, self.ren(batches) - 1)},
                    self._name)
        stmts: list[str] = []
        value = self.value(pack.body, m, cshape, sc, stmts, {}, root=True)
        outer = [*win.channels, *(() if lead is None else (lead,))]
        decomp = [f"const int64_t z{k} = zr / {c(numel(tuple(cshape[j] for j in outer[p + 1:])))}"
                  f" % {c(cshape[k])};" for p, k in enumerate(outer)]
        rows = c(chans * hp)
        copy = [
            "#pragma omp for schedule(static)",
            f"for (int64_t zr = 0; zr < {rows}; zr++) {{", *decomp,
            f"for (int64_t zb = 0; zb < ({c(wp)} + {BLOCK - 1}) / {BLOCK}; zb++) {{",
            f"const int64_t lo = zb * {BLOCK}, hi = LUMOS_MIN(lo + {BLOCK}, {c(wp)});",
            *sc.decls, "#pragma GCC ivdep",
            f"for (int64_t z{last} = lo; z{last} < hi; z{last}++) {{", *stmts,
            f"pd[zr * {c(wp)} + z{last}] = {value};", "}", "}", "}"]
        # koff: each row of B (row-major over its axes) in the padded copy
        off = sum((Var(f"z{k}") * numel(tuple(shape[j] for j in win.channels[p + 1:]))
                   for p, k in enumerate(win.channels)), ZERO) * hp * wp
        off = off + sum((Var(f"z{r}") * (wp if col == lead else ONE) for r, col in win.pairs),
                        ZERO)
        koff = [*(f"for (int64_t z{k} = 0; z{k} < {c(shape[k])}; z{k}++)" for k in pk.rows),
                f"koff[zk++] = {self.ren(off).to_c(self.bounds(shape))};"]
        other = gm.a
        optr = self.arg(n.inputs[0])
        lda = c(other.ld)
        sam, sak = ("1", lda) if other.trans else (lda, "1")
        k, mm = c(gm.k), c(gm.m)
        koff = [f"int64_t *restrict koff = (int64_t *)lumos_tile(2, 2 * {k});",
                "int64_t zk = 0;", *koff]
        setup = [
            f"float *restrict pd = lumos_tile(0, {c(chans * hp * wp)} + {2 * 48} + {c(wp)});",
            f"float *restrict ap = lumos_tile(1, ({mm} + 7) / 8 * 8 * {k});", *koff,
            f"for (int64_t s = 0; s < ({mm} + 7) / 8; s++)",
            f"for (int64_t p = 0; p < {k}; p++)", "for (int64_t i = 0; i < 8; i++)",
            f"ap[(s * {k} + p) * 8 + i] = s * 8 + i < {mm} ? "
            f"{optr}[{c(other.offset)} + (s * 8 + i) * {sam} + p * {sak}] : 0.0f;"]
        if pack.amx:  # ... and again as AMX tiles (bf16x3), where the process has them
            setup += ["const int amx = lumos_amx_ready();",
                      f"uint16_t *restrict aq = amx ? (uint16_t *)lumos_tile(LUMOS_TILES, "
                      f"(lumos_amx_a_size({mm}, {k}) + 1) / 2) : 0;",
                      f"if (amx) lumos_amx_pack_a({mm}, {k}, {optr} + {c(other.offset)}, "
                      f"{sam}, {sak}, aq);"]
        return _WindowsCode(gm, c, setup, copy, mm, k, wp, c(batches),
                            c(shape[lead] * wp if lead is not None else wp), c(shape[last]),
                            c(shape[lead]) if lead is not None else "1",
                            self.ren(gm.m * gm.n * gm.k * batches).to_c(bounds), koff,
                            (f"{optr} + {c(other.offset)}", sam, sak), c(hp),
                            c(chans * hp * wp))

    def banded(self, shape: tuple[Expr, ...], bounds: dict, blocks: list[str],
               work: Expr | None) -> list[str]:
        """The kernel's loops around the windows product it reads (a Tile with windows):
        per batch index the padded copy, then bands of its output rows (axis 2) on the
        threads: each computes the product's image rows the band reads (`band`) into its
        scratch (`t0`, padded rows, all the product's rows), then the band's outputs."""
        (t,) = self.windowed
        j = self.tiles[t.gemm]
        if len(self.tiles) > 1 or len(shape) < 4 or not self.band_reads:
            raise UnsupportedProgram("a windows product read by a kernel that is not banded")
        w = self.windows_code(t.gemm, t.windows)  # type: ignore[arg-type]
        step = max(s for s, _ in self.band_reads)
        if any(s != step for s, _ in self.band_reads):
            raise UnsupportedProgram("a windows product read at rows of two steps")
        lo = min(o for _, o in self.band_reads)
        hi = max(o for _, o in self.band_reads)
        c = lambda e: self.ren(e).to_c(bounds)  # noqa: E731
        rows_out = c(shape[2])
        # output rows per band at most: its product rows (padded) in TILE_FLOATS * 8 floats
        # (768 KiB, in L2: narrower bands waste much of their last panel of 48 columns)
        per = f"LUMOS_MAX(1, {TILE_FLOATS * 8} / ({w.m} * {w.c(w.wp)} * {step}))"
        args = (f"pd + r0 * {w.c(w.wp)}, koff, j0, bw, {w.c(w.wp)}, {w.c(w.wp)}, t{j}, bw);")
        call = [f"lumos_gemm_windows({w.m}, {w.k}, ap, {args}"]
        if t.windows is not None and t.windows.amx:  # (bf16x3: EGemmWindowsAmx)
            self.used_amx = True
            call = [f"if (amx) lumos_amx_windows({w.m}, {w.k}, aq, {args}", "else", *call]
        return [
            "{", *w.setup,
            # bands of at most `per` rows: the fewest panels per thread (rounds of bands
            # on the threads times each band's panels of 48, its last one partial)
            f"const int64_t RM = LUMOS_MIN({per}, {rows_out}), NT = lumos_threads();",
            "int64_t RB = 1, least = INT64_MAX;",
            "for (int64_t rb = 1; rb <= RM; rb++) {",
            f"const int64_t rounds = (({rows_out} + rb - 1) / rb + NT - 1) / NT;",
            f"const int64_t panels = (({step} * (rb - 1) + {hi - lo + 1}) * {w.c(w.wp)} + 47) "
            "/ 48;",
            "if (rounds * panels < least) { least = rounds * panels; RB = rb; }", "}",
            f"const int64_t NB = ({rows_out} + RB - 1) / RB;",
            *([] if (cond := self.parallel_if(work)) is None else
              [f"#pragma omp parallel{cond} num_threads(lumos_threads())"]),
            "{",
            f"float *restrict t{j} = lumos_tile(3, {w.m} * ({step} * (RB - 1) + {hi - lo + 1}) * "
            f"{w.c(w.wp)} + 48);",
            f"for (int64_t zg = 0; zg < {w.batches}; zg++) {{",
            *w.copy,
            "#pragma omp for schedule(static)",
            "for (int64_t zq = 0; zq < NB; zq++) {",
            f"const int64_t q0 = zq * RB, q1 = LUMOS_MIN(q0 + RB, {rows_out});",
            f"const int64_t r0 = LUMOS_MAX({step} * q0 + {lo}, 0), "
            f"r1 = LUMOS_MIN({step} * (q1 - 1) + {hi} + 1, {w.height});",
            f"const int64_t bw = (r1 - r0) * {w.c(w.wp)};",
            "for (int64_t j0 = 0; j0 < bw; j0 += 48)", *call,
            *(["const int64_t z0 = zg;"] if shape[0] is not ONE else []),
            f"for (int64_t z1 = 0; z1 < {c(shape[1])}; z1++)",
            "for (int64_t z2 = q0; z2 < q1; z2++)",
            *[f"for (int64_t z{k} = 0; z{k} < {c(shape[k])}; z{k}++)"
              for k in range(3, len(shape) - 1) if shape[k] is not ONE],
            "{", *blocks, "}", "}", "}", "}", "}"]

    def gather(self, n: Node, out_index: Expr) -> list[str]:
        (ji, jd), (vi, vd) = n.inputs, n.views
        shape = n.shape

        def body(sc: _Scope) -> list[str]:
            p = load(self.g.nodes[ji].dtype, self.read_view(ji, vi, shape, sc))
            decl, value = self.read_flat(jd, vd, f"(int64_t)({p})")
            return ["{", decl, f"out[{sc.index(out_index)}] = {value};", "}"]
        return self.nest(shape, body, numel(shape))

    def scatter(self, n: Node, out_index: Expr) -> list[str]:
        """A copy of dest, then the writes in row-major order of idx (the last one wins)."""
        (jd, ji, js), (vd, vi, vs) = n.inputs, n.views
        shape, ishape = n.shape, vi.shape
        size = self.ren(numel(shape)).to_c()

        def copy(sc: _Scope) -> list[str]:
            return [f"out[{sc.index(out_index)}] = {self.read_view(jd, vd, shape, sc)};"]

        def write(sc: _Scope) -> list[str]:
            p = load(self.g.nodes[ji].dtype, self.read_view(ji, vi, ishape, sc))
            return [f"{{ const int64_t zp = (int64_t)({p});",
                    f"if (zp >= 0 && zp < {size}) out[zp] = "
                    f"{self.read_view(js, vs, ishape, sc)}; }}"]
        copies = self.nest(shape, copy, numel(shape))
        if jd not in (ji, js) and _whole(vd, self.g.nodes[jd]):  # (Layout.inplace)
            copies = [f"if ((const void *)out != (const void *){self.arg(jd)}) {{",
                      *copies, "}"]
        return [*copies, *self.nest(ishape, write, None)]


_IMOD = "".join(  # C's truncated %, with x % 0 == 0 (and x % -1 == 0 without INT_MIN's trap)
    f"static inline {t} lumos_imod_{t}({t} a, {t} b) "
    f"{{ return (b == 0{'' if t == 'uint8_t' else ' || b == -1'}) ? 0 : ({t})(a % b); }}\n"
    for t in ("int8_t", "uint8_t", "int16_t", "int32_t", "int64_t"))


_DIM = re.compile(r"\bD_")  # a dim's value in a kernel's code
STATIC_HEADER = 64  # bytes before a static buffer's data: its flag (int64, 1: computed)
_PROFILE = "int64_t lumos_profile_ns[{n}];\n"  # (lumos_now: the driver's)
_LATE = "  if (lumos_budget_ns > 0 && lumos_now() - t0 > lumos_budget_ns) goto done;"
DRIVER_PART = 64  # kernel calls per function of the driver


def generate(g: Kernels, flush_denormals: bool = False, profile: bool = False,
             weights: frozenset[str] = frozenset()) -> tuple[tuple[Unit, ...], Layout]:
    """The C translation units of `g`: the driver `lumos_run` first, then one per distinct
    kernel as (prelude, definition) (cached separately, compiled in batches: see
    cc.compile_units); and its buffer layout. `flush_denormals`: see CompileOptions.
    `profile` (or LUMOS_LOG=profile): the driver times each kernel into lumos_profile_ns.
    `weights`: the names of the inputs bound once (Graph.tensor); a kernel that reads only
    them (and such kernels) runs once per binding into a buffer of its own (Layout.statics),
    not every run."""
    gen = _Codegen(g)
    nodes = g.nodes
    inputs = tuple(i for i, n in enumerate(nodes) if n.op == "Input")
    slots = gen.slots
    for k, i in enumerate(inputs):
        slots[i] = f"in[{k}]"
    copies = []  # Output nodes that need a copy kernel
    for m, o in enumerate(g.outputs):
        slots[o] = f"out[{m}]"
        b = g.bodies[o]
        if (isinstance(b, Load) and b.src not in slots and nodes[b.src].op != "Constant"
                and b.view.is_contiguous() and numel(b.view.shape) is numel(nodes[b.src].shape)):
            slots[b.src] = slots[o]  # the producer writes the output directly
        else:
            copies.append(o)
    order = [i for i in live_nodes(g) if nodes[i].op not in ("Input", "Constant", "Output")
             or i in copies]
    pos = {i: k for k, i in enumerate(order)}
    last = {}
    for i in order:
        for j in nodes[i].inputs:
            last[j] = pos[i]
    inplace = []  # (Layout.inplace)
    for m, o in enumerate(g.outputs):
        b = g.bodies[o]
        w = b.src if o not in copies and isinstance(b, Load) else o
        if nodes[w].op == "Scatter":
            jd = nodes[w].inputs[0]
            if nodes[jd].op == "Input" and jd not in nodes[w].inputs[1:] and \
                    _whole(nodes[w].views[0], nodes[jd]) and last[jd] == pos[w]:
                inplace.append((m, inputs.index(jd)))

    any_blas = any(nodes[i].op == "Gemm" or (i in g.bodies and (tiles(g.bodies[i]) or any(
        tiles(r.body) for r in rows(g.bodies[i])))) for i in order)
    dim_decls = "".join(f"  const int64_t D_{d} = dims[{k}];\n" for k, d in enumerate(g.dims))
    units: dict[str, tuple[str, str]] = {}  # kernel function name -> (prelude, definition)
    decls, calls, names = [], [], []
    weight_in = {i for i in inputs if nodes[i].name in weights}
    once: dict[int, str] = {}  # kernels run once per binding -> their buffer's key
    reads: dict[int, tuple[int, ...]] = {}
    for i in order:
        gen.args = {}
        gen._count = 0  # hoisted names restart: equal kernels have equal text
        gen._unsigned_zero = set()
        body = gen.kernel(i)
        n = nodes[i]
        params = [f"{storage(n.dtype)} *restrict out"]
        params += [f"const {storage(nodes[j].dtype)} *restrict {a}" for j, a in gen.args.items()]
        signature = f"({', '.join(params)}, const int64_t *restrict dims)"
        wide = g.wide[i] if i in g.wide else wide_seed(  # (its schedule's, if it has one)
            n.shape, _body_shape(g.bodies[i])[n.axis] if n.op in REDUCE and i in g.bodies
            else None, g.dims)
        attrs = "__attribute__((weak)) LUMOS_WIDE" if wide else "__attribute__((weak))"
        text = signature + " {\n" + dim_decls + _indent(body) + "}\n"
        # named by content: equal kernels (layers, other programs) share one compiled object
        name = "k_" + hashlib.sha256((attrs + text).encode()).hexdigest()[:20]
        names.append(name)
        if name not in units:
            head = BLAS if n.op == "Gemm" or gen.tiles or gen.rows_in else ""
            # weak: batches of units compiled at once by two processes may overlap
            units[name] = (head + PRELUDE + _IMOD, f"{attrs} void {name}{text}")
            decls.append(f"void {name}{signature};")
        reads[i] = tuple(gen.args)
        # computed once per binding of the weights: it reads only weights and kernels
        # that are, no dim, and writes no output (decision-free: what the choice implies)
        if i not in slots and not _DIM.search(_indent(body)) and all(
                j in weight_in or j in once for j in reads[i]):
            once[i] = hashlib.sha256(repr((name, [
                nodes[j].name if j in weight_in else once[j] for j in reads[i]])).encode()
            ).hexdigest()[:24]
    temps, statics = [], {}  # (statics: key -> (index, bytes))
    for i in order:
        if i in once:
            n = nodes[i]
            at = statics.setdefault(once[i], (len(statics),
                                              int(numel(n.shape).value) * n.dtype.itemsize))[0]
            slots[i] = f"(stat[{at}] + {STATIC_HEADER})"
        elif i not in slots:
            slots[i] = f"(arena + off[{len(temps)}])"
            n = nodes[i]
            temps.append(Temp(numel(n.shape) * n.dtype.itemsize, pos[i], last.get(i, pos[i])))
    for i, name in zip(order, names, strict=True):
        n = nodes[i]
        ptrs = [f"({storage(n.dtype)} *){slots[i]}"]
        ptrs += [f"(const {storage(nodes[j].dtype)} *){slots[j]}" for j in reads[i]]
        call = f"  {name}({', '.join(ptrs)}, dims);"
        if i in once:  # (its time is not the run's: a search's budget leaves it out)
            flag = f"*(int64_t *)stat[{statics[once[i]][0]}]"
            call = (f"  if (!{flag}) {{\n    const int64_t ts = lumos_budget_ns > 0 ? "
                    f"lumos_now() : 0;\n  {call}\n    {flag} = 1;\n    t0 += ts ? "
                    "lumos_now() - ts : 0;\n  }")
        calls.append(call)
    parts = [(BLAS if any_blas else "") + PRELUDE + DRIVER, *decls]
    profiled = tuple(Kernel(i, nodes[i].op, nodes[i].shape, nodes[i].dtype, name)
                     for i, name in zip(order, names, strict=True)) \
        if profile or enabled("profile") else ()
    if profiled:
        parts.append(_PROFILE.format(n=len(profiled)))
        calls = [f"  t = lumos_now();\n{c}\n  lumos_profile_ns[{k}] = lumos_now() - t;"
                 for k, c in enumerate(calls)]
    # the calls in parts of DRIVER_PART each (a function of thousands of calls, the
    # unfused program of a large model, took gcc minutes), each part a function of its own
    args = "char *arena, const int64_t *off, void **in, void **out, const int64_t *dims, " \
        "char **stat"
    steps = []
    for k in range(0, len(calls), DRIVER_PART):
        part = [line for c in calls[k:k + DRIVER_PART] for line in (c, _LATE)]
        if k + DRIVER_PART >= len(calls):
            part = part[:-1]
        parts.append(f"static int lumos_part_{len(steps)}({args}, int64_t *lumos_t0) {{\n"
                     "  int64_t t0 = *lumos_t0;\n" + ("  int64_t t;\n" if profiled else "") +
                     "\n".join(part) + "\n  *lumos_t0 = t0;\n  return 0;\ndone:\n  return 1;\n}\n")
        steps.append(f"  if (lumos_part_{len(steps)}(arena, off, in, out, dims, stat, &t0)) "
                     "goto done;")
    calls = ["  int64_t t0 = lumos_budget_ns > 0 ? lumos_now() : 0;", *steps, "done:;"]
    if flush_denormals:
        parts.append(_FLUSH)
        calls = ["  lumos_flush_denormals(1);", *calls, "  lumos_flush_denormals(0);"]
    parts.append(f"void lumos_run({args}) {{\n" + "\n".join(calls) + "\n}\n")
    buffers = [Buffer(i, nodes[i].shape, nodes[i].dtype, nodes[i].name)
               for i in (*inputs, *g.outputs)]
    layout = Layout(tuple(g.dims), tuple(buffers[:len(inputs)]),
                    tuple(buffers[len(inputs):]), tuple(temps), len(order), profiled,
                    tuple(inplace), tuple((k, b) for k, (_, b) in statics.items()))
    own = [BLAS + PRELUDE + OWN_GEMM] if gen.used_own else []
    amx = [BLAS + PRELUDE + AMX_GEMM] if gen.used_amx else []
    winograd = [BLAS + PRELUDE + WINOGRAD] if gen.used_winograd else []
    return ("\n".join(parts), *units.values(), *own, *amx, *winograd), layout


class _NoFill(Exception):
    """A Rows kernel that is not one product's row blocks plus an epilogue (codegen.fill)."""


def _split_loops(sc: _Scope, m: dict, loop: tuple) -> tuple[list[str], dict, list[dict]]:
    """A split sum's loops (`loop`: lanes, inner, unroll, names, sizes as `reduce` splits
    it): the C loops of its outer variables not unrolled, the bounds inside them, and the
    index map `m` for each unrolled copy."""
    _, inner, unroll, names, sizes = loop
    loops = [f"for (int64_t {v} = 0; {v} < {s.to_c()}; {v}++) {{"
             for v, s in zip(names[:unroll], sizes[:unroll], strict=True)]
    rb = sc.bounds | {"zr": (0, inner - 1)} | {
        v: (0, s - 1) for v, s in zip(names[:unroll], sizes[:unroll], strict=True)}
    cases = [{k: e.subs(dict(zip(names[unroll:], values, strict=True))) for k, e in m.items()}
             for values in product(*(range(s.value) for s in sizes[unroll:]))]
    return loops, rb, cases


def _apply_nodes(b: Body) -> list[Apply]:
    """The computing nodes of body `b`, each shared subtree once."""
    out: list[Apply] = []
    seen, stack = set(), [b]
    while stack:
        x = stack.pop()
        if id(x) in seen or not isinstance(x, Apply):
            continue
        seen.add(id(x))
        out.append(x)
        stack.extend(x.args)
    return out


class _PerOutput(MutableMapping):
    """The vector code of one of a jammed sum's outputs (CodeGen.jammed): body nodes that
    read the jammed axis (ids in `private`) are kept per output `j`, the others (and loads,
    keyed by their index) shared by all."""

    def __init__(self, shared: dict, j: int, private: set[int]) -> None:
        self.shared, self.j, self.private = shared, j, private

    def _key(self, key: object) -> object:
        return (key, self.j) if isinstance(key, int) and key in self.private else key

    def __getitem__(self, key: object) -> tuple[str, str, bool]:
        return self.shared[self._key(key)]

    def __setitem__(self, key: object, value: tuple[str, str, bool]) -> None:
        self.shared[self._key(key)] = value

    def __delitem__(self, key: object) -> None:
        del self.shared[self._key(key)]

    def __iter__(self) -> Iterator[object]:
        return iter(self.shared)

    def __len__(self) -> int:
        return len(self.shared)


class _Scalar(Exception):
    """A body the vector form does not cover: its loop is emitted as scalar C."""


_SIZE = {"float": 4, "double": 8} | {f"{u}int{b}_t": b // 8 for u in ("", "u")
                                     for b in (8, 16, 32, 64)}


def _vtype(ct: str, lanes: int) -> str:
    """The GCC vector type of `lanes` `ct`s (typedefs at the top of the kernel)."""
    return f"lumos_{ct}_x{lanes}"


def _typedefs(lines: list[str]) -> list[str]:
    """Block-scope typedefs of the vector types `lines` use (`..._x16`; `..._x16u`: for
    unaligned loads)."""
    used = sorted({w for line in lines for w in re.findall(r"\blumos_\w+_x\d+u?\b", line)})
    out = []
    for name in used:
        ct, lanes = name[len("lumos_"):].rstrip("u").rsplit("_x", 1)
        extra = ", aligned(1), may_alias" if name.endswith("u") else ""
        out.append(f"typedef {ct} {name} "
                   f"__attribute__((vector_size({_SIZE[ct] * int(lanes)}){extra}));")
    return out


def _whole(view: View, n: Node) -> bool:
    """Whether `view` reads all of node `n` in memory order."""
    return view.is_contiguous() and view.shape == n.shape


def _lane_sum(lv: str, nv: int, ct: str, width: int) -> list[str]:
    """`acc += ` the sum of all lanes of the `nv` vectors `lv[]`: the vectors added, then
    halves of the register added pairwise (a sequential sum over the lanes was a chain of
    dependent scalar adds as long as a 576-element GEMV row's whole vector loop)."""
    out = ["{", f"{_vtype(ct, width)} s{width} = {lv}[0];",
           f"for (int zl = 1; zl < {nv}; zl++) s{width} += {lv}[zl];"]
    w = width
    while w > 2:
        h, x = w // 2, f"s{w}"
        lo, hi = ", ".join(map(str, range(h))), ", ".join(map(str, range(h, w)))
        out.append(f"const {_vtype(ct, h)} s{h} = __builtin_shufflevector({x}, {x}, {lo}) + "
                   f"__builtin_shufflevector({x}, {x}, {hi});")
        w = h
    return [*out, "acc += s2[0] + s2[1];", "}"]


def _convert(x: str, src: str, dst: str, lanes: int) -> str:
    """Vector `x` of `src`s as `dst`s, like C's scalar cast. Integers change width one
    doubling (or halving) at a time (values kept: a wider signed type holds any narrower
    integer), and meet floats as 32 or 64 bits: GCC 12 lowers other conversions lane by
    lane."""
    fl = ("float", "double")

    def walk(x: str, a: str, b: str) -> str:  # integer a -> integer b, a width at a time
        sa, sb = _SIZE[a], _SIZE[b]
        while sa != sb:
            sa = sa * 2 if sa < sb else sa // 2
            t = b if sa == sb else f"int{8 * sa}_t"
            x = f"__builtin_convertvector({x}, {_vtype(t, lanes)})"
        return x
    if src == dst:
        return x
    if src not in fl and dst not in fl:
        return walk(x, src, dst)
    if src not in fl:  # integer -> float: widen to 32 bits first
        mid = src if _SIZE[src] >= 4 else "int32_t"
        wide = f"LUMOS_WIDEN_{src[:-2].upper()}_X16({x}, {_vtype(mid, lanes)})" \
            if _SIZE[src] == 1 and lanes == 16 else walk(x, src, mid)
        return f"__builtin_convertvector({wide}, {_vtype(dst, lanes)})"
    if dst not in fl:  # float -> integer: via 32 bits, then narrow
        mid = dst if _SIZE[dst] >= 4 else "int32_t"
        return walk(f"__builtin_convertvector({x}, {_vtype(mid, lanes)})", mid, dst)
    return f"__builtin_convertvector({x}, {_vtype(dst, lanes)})"


def _divisor(g: Kernels, b: Body, c: str) -> bool:
    """Whether `b`, emitted as `c`, is a constant integer divisor (unguarded) for which
    C's % is lumos's (not 0 or -1)."""
    if not isinstance(b, Load) or g.nodes[b.src].op != "Constant":
        return False
    n = g.nodes[b.src]
    return c == constant_literal(n) and int(n.value) not in (0, -1)  # type: ignore[arg-type]


def _conjuncts(e: Expr) -> frozenset[Expr]:
    if e.op == "and":
        return _conjuncts(e.args[0]) | _conjuncts(e.args[1])
    return frozenset() if e is ONE else frozenset((e,))


def _assume(e: Expr, known: frozenset[Expr]) -> Expr:
    """Predicate `e` with the conjuncts in `known` taken as true."""
    if e in known:
        return ONE
    if e.op == "and":
        return _assume(e.args[0], known) & _assume(e.args[1], known)
    return e


def _splits(b: Body, var: str, length: Expr, symbolic: bool = False) -> list[Expr]:
    """The constant divisors c of `var // c` and `var % c` in `b`'s views that divide
    `length` (a number; or, `symbolic`, a multiple of c: 12544 * batch) and each other:
    the loop steps to split `var`'s loop at, largest first (none if they do not nest)."""
    if not length.is_num and not symbolic:
        return []
    found: set[int] = set()
    seen: set[int] = set()
    # (a load's validity includes that of the ops above it)
    stack = [e for ld in body_loads(b) for e in (ld.view.index, ld.view.valid)]
    while stack:
        x = stack.pop()
        if id(x) in seen:
            continue
        seen.add(id(x))
        if x.op in ("fdiv", "mod"):
            a, d = x.args
            if d.is_num and var in a.vars():
                base = a.subs({var: 0})  # a = base + k*var: splits var at d / k
                k = a.subs({var: 1}) - base
                step = d.value // k.value if k.is_num and k.value > 0 and \
                    d.value % k.value == 0 and base + Var(var) * k is a else 0
                rest = length % step if step > 1 else None
                if rest is not None and rest.is_num and rest.value == 0 and \
                        (not length.is_num or step < length.value):
                    found.add(step)
            stack += list(x.args)
        elif x.op == "sum":
            stack += [a for mono, _ in x.args for a in mono]
        elif x.op not in ("num", "var"):
            stack += list(x.args)
    steps = sorted(found, reverse=True)
    if any(a % b for a, b in pairwise(steps)):
        return []
    return [Num(s) for s in steps]


def _loads_only(b: Body) -> bool:
    """Whether body `b` is elementwise ops over loads (no reduction, product or band)."""
    return isinstance(b, Apply | Load) and all(isinstance(a, Apply | Load)
                                               for x in _apply_nodes(b) for a in x.args)


def _body_shape(b: Body) -> tuple[Expr, ...]:
    while isinstance(b, Apply):
        b = b.args[0]
    return b.view.shape


def _indent(lines: list[str]) -> str:
    out, depth = [], 1
    for line in lines:
        depth -= line.startswith("}")
        out.append("  " * depth + line)
        depth += line.endswith("{")
    return "\n".join(out) + "\n"
