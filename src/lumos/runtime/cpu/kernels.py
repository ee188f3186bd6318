"""The CPU's kernel program: what codegen emits, decoded from a genome (or, one kernel
per node, from an HLIR graph).

A `Kernels` program is a list of `Node`s (graph-shaped, so codegen and buffer planning
read it like a Graph): Input, Constant, Iota, Gather and Scatter as in HLIR, plus
kernels `Map`, `SumReduce`, `MaxReduce` and `Output` whose values come from a `Body`
in `bodies` (their `inputs` are the buffers the body loads), and `Gemm` (a SumReduce
over the product of its two inputs read through its two `views`, as a BLAS call: `gemm`).
A body is a tree of `Load(src, view)` (buffer `src` read through `view`, over the
kernel's iteration space), `Apply(op, dtype, args, valid)` (an elementwise primitive
computed inline, 0 where `valid` is 0; or "Select": a Gather at positions known without
data, the frontend's `where`, as `args[0] ? args[1] : args[2]`), `Reduce` (a short max
reduction inlined) and `Tile` (a matrix product computed by the kernel that reads it, in
blocks of rows). A Map may be an operand's copy (KCopy) that a product reads.
Decoding is decision-free: the genome's choices among ELoad and inline alternatives
(lower_cpu.egg) are the kernel boundaries; views are composed here. `Kernels.origin`
names the e-classes each kernel's code comes from (the kernel search judges moves by it).
"""

from __future__ import annotations

import functools
import math
import random
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

from lumos.dtype import DType, as_dtype, bool_
from lumos.egraph import CORE, Rules, SearchSpace, Stage, restrict
from lumos.egraph.encode import text_value
from lumos.egraph.schedule import Budget
from lumos.egraph.space import ENode
from lumos.errors import LumosError
from lumos.graph import Graph
from lumos.hlir import BINARY, REDUCE, UNARY, Node
from lumos.search.genome import Genomes, extract
from lumos.shape import Expr, Var, View, nrange, simplify, z
from lumos.shape.expr import ONE, ZERO, Bounds, is_axis_var

FUSE_ROUNDS = Budget.max_iterations  # inlining depth: one producer level per round
LOWER = CORE + Rules.files(Path(__file__).with_name("lower_cpu.egg"),
                           stages=(Stage(saturate=("lower_facts", "lower_cpu"), required=True),))
RULES = LOWER + Rules((), (Stage(saturate=("loads",)), Stage(
    bounded=("fuse",), saturate=("views", "loads"), rounds=FUSE_ROUNDS),
    Stage(saturate=("schedules",))))
# the kernels that carry a schedule: its first field's index (lower_cpu.egg: `par`,
# `wide`, a sum's `ahead` and `jam`, a map's `inner`), and the values lowering gives them
# (the schedules ruleset adds the others); lowering's `par` and `ahead` are the seeds'
SCHEDULED = {"KMap": 1, "KSumReduce": 2, "KMaxReduce": 2, "KOutput": 2}
PAR_SEED, WIDE_LOWERED, AHEAD_SEED, INNER_LAST = 1 << 15, 0, 1024, -1
JAM_VALUES = (1, 2, 4, 8)  # a sum's `jam` (lower_cpu.egg's jam-value), lowered as 1
# seeds (and kernels without a schedule): a kernel whose output rows hold a multiple of
# WIDE_LANES elements, or at least WIDE_MIN_ROW, or a reduction whose reduced axis does,
# is vectorized 64 bytes wide (`wide`): GCC 12 vectorizes 32 bytes wide for a CPU it does
# not know, slower on long rows; but at 64 bytes a short row leaves most of its elements
# to scalar code
WIDE_LANES, WIDE_MIN_ROW = 16, 256
ELEMENTWISE = (*UNARY, *BINARY, "Cast")
BODY_OPS = (*ELEMENTWISE, "Select")  # (Select: an ESelect, inline only)
EXECUTABLE = frozenset({"Root", "Input", "Constant", "Iota", "Gather", "Scatter", "KMap", "KCopy",
                        "KSumReduce", "KMaxReduce", "KOutput", "KGemm", "KGemmOwn", "KGemmAmx",
                        "KGemmPack", "KGemmWindows", "KGemmWindowsAmx", "KGemmWinograd",
                        "ELoad",
                        "EMaxReduce", "EGemm", "EGemmOwn", "EGemmWindows", "EGemmWindowsAmx",
                        "ERows",
                        *(f"E{op}" for op in BODY_OPS)})
SHORT_AXIS = 16  # an inlined max reduction's axis: a constant length up to this


@dataclass(frozen=True)
class Load:
    src: int
    view: View


@dataclass(frozen=True)
class Apply:
    op: str
    dtype: DType
    args: tuple[Body, ...]
    valid: Expr = ONE


@dataclass(frozen=True)
class Reduce:
    """A max reduction computed where a body reads it: `arg`, a body over the reduction's
    input `shape`, reduced along `axis` (a short constant length) at the output position
    `view` reads (flat, row-major in the output: the input's shape without `axis`); 0
    where `view.valid` is 0."""
    op: str
    dtype: DType
    axis: int
    shape: tuple[Expr, ...]
    view: View
    arg: Body

    @property
    def args(self) -> tuple[Body, ...]:
        return (self.arg,)

    @property
    def valid(self) -> Expr:
        return self.view.valid


@dataclass(frozen=True)
class Tile:
    """A matrix product (`gemm`: a Gemm node, not a buffer of the program) read through
    `view` by the kernel that computes it: in blocks of rows, each product block just
    before the outputs that read it, so that it is read from cache, never written whole
    (codegen: where the read is at the output's own position; else the product first).
    With `windows` (a KGemmWindows product: its B read as a convolution's windows), in
    bands of the output rows the reading kernel's rows need (codegen: `band`)."""
    gemm: Node
    view: View
    windows: Pack | None
    own: bool  # its row blocks multiplied by lumos' own kernel (lumos_gemm_own), not OpenBLAS

    @property
    def dtype(self) -> DType:
        return self.gemm.dtype


@dataclass(frozen=True)
class Rows:
    """A kernel (`node`: a Map or MaxReduce computing `body`, not a buffer of the program)
    read through `view` by the kernel that computes it: in bands of its rows, each just
    before the reader's lines that read it, into the reader's scratch (codegen:
    `row_banded`), so that it is never stored (a depthwise convolution reading the relu6
    of a 1x1 expansion: MobileNetV2's inverted residual)."""
    node: Node
    body: Body
    view: View

    @property
    def dtype(self) -> DType:
        return self.node.dtype


Body = Load | Apply | Reduce | Tile | Rows


@dataclass(frozen=True)
class Pack:
    """A Gemm's factor `side` (0: A, 1: B) computed by the Gemm itself from `body` (a body
    over the factor's `shape`, as the elementwise kernel that would store it), block by
    block into scratch just before each block's product: an im2col copy never stored."""
    side: int
    body: Body
    shape: tuple[Expr, ...]
    panels: bool  # the block's product by lumos' own kernel (B only), not OpenBLAS
    windows: bool  # B: a convolution's windows read where they lie (`windows`), not packed
    amx: bool = False  # ... multiplied as bf16x3 on AMX tiles (KGemmWindowsAmx, EGemmWindowsAmx)
    winograd: bool = False  # ... by Winograd's F(2x2, 3x3) (KGemmWinograd: `winograd`)
    phased: bool = False  # ... each of its steps across all tiles (its schedule field)


@dataclass(frozen=True)
class Matrix:
    """One factor of a Gemm as a row-major cblas operand: element (r, c) of the matrix (or
    of its transpose if `trans`) at offset + r*ld + c, each batch axis stepping `steps`."""
    input: int  # which of the node's inputs
    offset: Expr
    ld: Expr
    trans: bool
    steps: tuple[Expr, ...]


@dataclass(frozen=True)
class Gemm:
    """C[batch..., m, n] = sum_k A[m, k] B[k, n]: one sgemm per batch index, C's rows `ldc`
    apart and each batch axis stepping it by `c_steps`."""
    m: Expr
    n: Expr
    k: Expr
    ldc: Expr
    batch: tuple[Expr, ...]  # sizes
    c_steps: tuple[Expr, ...]
    a: Matrix
    b: Matrix


def _linear(e: Expr, names: Sequence[str]) -> tuple[Expr, tuple[Expr, ...]] | None:
    """(offset, coefficients) if `e` is offset + sum_i c_i * z_i with no z in the c_i."""
    return _linear_in(e, tuple(names))


@functools.lru_cache(maxsize=1 << 14)  # (a space asks for the same few expressions often)
def _linear_in(e: Expr, names: tuple[str, ...]) -> tuple[Expr, tuple[Expr, ...]] | None:
    off = e.subs(dict.fromkeys(names, 0))
    cs = tuple(e.subs({w: int(w == v) for w in names}) - off for v in names)
    if any(is_axis_var(x) for c in cs for x in c.vars()):
        return None
    return (off, cs) if off + sum((c * Var(v) for c, v in zip(cs, names, strict=True)),
                                  ZERO) is e else None


def gemm(views: Sequence[View], axis: int, bounds: Bounds) -> Gemm | None:
    """The BLAS layout of a sum over `axis` of the product of two reads (views over the
    product's shape), if both read strided matrices that cblas_sgemm accepts. C's columns
    are its innermost axis; its rows the innermost other axis that gives a layout (so a
    product written as (b, s, h, e) = sum_k P[b, h, s, k] V[b, h, k, e] has rows s)."""
    shape = views[0].shape
    names = [f"z{i}" for i in range(len(shape))]
    unit = {f"z{i}": 0 for i, s in enumerate(shape) if s is ONE}
    axes = [i for i, s in enumerate(shape) if i != axis and s is not ONE]
    if len(axes) < 2:
        return None
    stride: dict[int, Expr] = {}  # C's row-major strides (C: the shape without `axis`)
    step = ONE
    for i in reversed(range(len(shape))):
        if i != axis:
            stride[i], step = step, step * shape[i]
    reads = []
    for v in views:
        if v.valid.subs(unit) is not ONE:
            return None
        lin = _linear(v.index.subs(unit), names)
        if lin is None:
            return None
        reads.append(lin)

    def matrix(j: int, row: int, col: int, batch: list[int]) -> Matrix | None:
        off, cs = reads[j]
        def fits(rows: int, cols: int, ld: Expr) -> bool:  # cblas: ld >= max(1, row length)
            los = (nrange(ld - shape[cols], bounds)[0], nrange(ld - 1, bounds)[0])
            return shape[rows] is ONE or all(lo is not None and lo >= 0 for lo in los)

        if (cs[col] is ONE or shape[col] is ONE) and fits(row, col, cs[row]):
            return Matrix(j, off, cs[row], False, tuple(cs[i] for i in batch))
        if (cs[row] is ONE or shape[row] is ONE) and fits(col, row, cs[col]):
            return Matrix(j, off, cs[col], True, tuple(cs[i] for i in batch))
        return None

    ni = axes[-1]
    for mi in reversed(axes[:-1]):
        batch = [i for i in axes[:-1] if i != mi]
        for ja, jb in ((0, 1), (1, 0)):
            if reads[ja][1][ni] is ZERO and reads[jb][1][mi] is ZERO:
                a, b = matrix(ja, mi, axis, batch), matrix(jb, axis, ni, batch)
                if a is not None and b is not None:
                    return _merge_rows(Gemm(shape[mi], shape[ni], shape[axis], stride[mi],
                                            tuple(shape[i] for i in batch),
                                            tuple(stride[i] for i in batch), a, b))
    return None


def _merge_rows(g: Gemm) -> Gemm:
    """`g` with the batch axes that continue the rows of A and C (stepping m rows) and
    leave B alone merged into m: one call over B*S rows, not B calls over S (a linear
    layer over a batch of sequences), which OpenBLAS blocks and threads better."""
    if g.a.trans:
        return g
    for i in reversed(range(len(g.batch))):  # the innermost first: it may enable the next
        if g.b.steps[i] is ZERO and g.c_steps[i] - g.m * g.ldc is ZERO and \
                g.a.steps[i] - g.m * g.a.ld is ZERO:
            drop = lambda t, i=i: t[:i] + t[i + 1:]  # noqa: E731
            return _merge_rows(Gemm(g.m * g.batch[i], g.n, g.k, g.ldc, drop(g.batch),
                                    drop(g.c_steps), replace(g.a, steps=drop(g.a.steps)),
                                    replace(g.b, steps=drop(g.b.steps))))
    return g


def gemm_fields(n: ENode) -> tuple:
    """(shape, axis, sum view, a view, b view) of a KGemm(Own), KGemmPack, KGemmWindows,
    EGemm(Own) or EGemmWindows(Amx) e-node."""
    return n.fields[1:6] if n.op.startswith("EGemm") else n.fields[:5]


def gemm_views(n: ENode, bounds: Mapping) -> tuple[View, View]:
    """A KGemm (KGemmPack, EGemm) e-node's two factors as views over the summed product's
    shape."""
    _, _, v, va, vb = gemm_fields(n)
    return compose(("Then", va, ("Top", v)), bounds), compose(("Then", vb, ("Top", v)), bounds)


def in_row_blocks(gm: Gemm, bounds: Mapping) -> bool:
    """Whether blocks of `gm`'s rows are contiguous ranges of its result: one product (no
    batch axes), its rows `n` apart. (Codegen runs an EGemm in row blocks only then.)"""
    return not gm.batch and simplify(gm.ldc - gm.n, bounds) is ZERO


def guarded_bounds(valid: Expr, bounds: Mapping) -> dict:
    """`bounds` narrowed where `valid` holds: each conjunct c * z + k < 0 or >= 0 (one
    axis variable z, numbers c > 0 and k) bounds z (a read through padding is linear
    there: a padded image row's `(1 + x) % W` is `1 + x` where `x + 1 < W`)."""
    out = dict(bounds)
    todo = [valid]
    while todo:
        e = todo.pop()
        if e.op == "and":
            todo += e.args
            continue
        if e.op not in ("lt", "ge"):
            continue
        d = e.args[0] - e.args[1]
        if len(d.vars()) != 1:
            continue
        (v,) = d.vars()
        k = d.subs({v: 0})
        c = d.subs({v: 1}) - k
        if not (is_axis_var(v) and k.is_num and c.is_num and c.value > 0) or \
                k + c * Var(v) is not d:
            continue
        lo, hi = nrange(Var(v), out)
        if e.op == "lt":  # z <= floor((-k - 1) / c)
            top = (-k.value - 1) // c.value
            hi = top if hi is None else min(hi, top)
        else:  # z >= ceil(-k / c)
            lo = max(lo or 0, -(k.value // c.value))
        out[v] = (lo, hi)
    return out


def row_band(view: View, gm: Gemm, bounds: Mapping) -> tuple[int, list[int]] | None:
    """(offset, steps) of a read of product `gm` (one product, rows `n` apart) through
    `view`, where valid, as a flat position offset + sum_k steps[k] * z_k with numbers
    steps >= 0, the last 1 (along the product's rows): a band of the reader's lines then
    reads a range of the product's rows (a depthwise convolution reading an expansion's
    pixels; codegen: `row_banded`)."""
    if not in_row_blocks(gm, bounds):
        return None
    lin = band_steps(view.index, view.valid, len(view.shape), {**bounds, **view.bounds()})
    return lin if lin is not None and lin[1] and lin[1][-1] == 1 else None


def band_steps(index: Expr, valid: Expr, rank: int,
               bounds: Mapping) -> tuple[int, list[int]] | None:
    """(offset, steps) of `index` over axes z0..z<rank-1> where `valid` holds, if it is
    linear there with a number offset and number steps >= 0 (see row_band)."""
    b = guarded_bounds(valid, bounds)
    lin = _linear(simplify(index, b), [f"z{k}" for k in range(rank)])
    if lin is None or not lin[0].is_num or not all(c.is_num and c.value >= 0 for c in lin[1]):
        return None
    return lin[0].value, [c.value for c in lin[1]]


@dataclass(frozen=True)
class Packing:
    """Where a packed factor's matrix lies in its shape (row-major, dense): the axis of
    the product's batch (if any), the axes of its memory rows and of its columns, and
    whether blocks are taken along the rows (else the columns): along M for A, N for B."""
    batch: int | None
    rows: tuple[int, ...]
    cols: tuple[int, ...]
    chunk_rows: bool


def packing(gm: Gemm, side: int, shape: Sequence[Expr], bounds: Mapping) -> Packing | None:
    """The Packing of factor `side` of `gm` over its `shape`, if its matrix is the whole
    of that shape (at most one batch axis, the leading one), else None."""
    mat = gm.a if gm.a.input == side else gm.b
    is_a = mat is gm.a
    if mat.offset is not ZERO or len(gm.batch) > 1:
        return None
    if is_a:
        rows_n, cols_n = (gm.k, gm.m) if mat.trans else (gm.m, gm.k)
    else:
        rows_n, cols_n = (gm.n, gm.k) if mat.trans else (gm.k, gm.n)
    if simplify(mat.ld - cols_n, bounds) is not ZERO:
        return None
    axes = [k for k, e in enumerate(shape) if e is not ONE]

    def group(size: Expr) -> tuple[int, ...] | None:  # trailing axes of `axes` of that size
        taken, n = [], ONE
        while simplify(n - size, bounds) is not ZERO:
            if not axes:
                return None
            taken.insert(0, axes.pop())
            n = n * shape[taken[0]]
        return tuple(taken)
    cols, rows = group(cols_n), group(rows_n)
    if cols is None or rows is None:
        return None
    chunk_rows = is_a != mat.trans
    if not (rows if chunk_rows else cols):
        return None
    if not gm.batch:
        return Packing(None, rows, cols, chunk_rows) if not axes else None
    if len(axes) != 1 or simplify(shape[axes[0]] - gm.batch[0], bounds) is not ZERO or \
            simplify(mat.steps[0] - rows_n * cols_n, bounds) is not ZERO:
        return None
    return Packing(axes[0], rows, cols, chunk_rows)


@dataclass(frozen=True)
class Windows:
    """B of a product (over the copy's `shape`, as `packing` lays it out) as the sliding
    windows of a stride-1, undilated convolution: B's element at row axes (channels...,
    kernel offsets...) and column axes (output positions...) depends only on the
    channels and on each output position plus its paired kernel offset. So one padded
    copy of the input per batch index, [channels][lead][last] with the paired column
    axes widened by their kernel's size - 1, holds every window: B's row k starts at
    `koff(k)` in it, and its columns run along the copy (a row of C at padded positions,
    the widened positions then dropped)."""
    pairs: tuple[tuple[int, int], ...]  # (row axis, column axis): a kernel offset's output axis
    channels: tuple[int, ...]  # the other row axes

    def extent(self, shape: Sequence[Expr], col: int) -> Expr:
        """Column axis `col` in the padded copy: its size plus its kernel's size - 1."""
        return next((shape[col] + shape[r] - 1 for r, c in self.pairs if c == col), shape[col])


def windows(gm: Gemm, side: int, shape: Sequence[Expr], view: View,
            bounds: Mapping) -> Windows | None:
    """The Windows of `view` (the copy's read of its input, over `shape`) if factor `side`
    of `gm` is B untransposed, one dense matrix of the copy (`packing`), at most two
    column axes, A the same for every batch index, and the read is such a convolution's
    windows (its index and validity the same after a kernel offset steps up and its
    output position down)."""
    pk = packing(gm, side, shape, bounds)
    if pk is None or gm.b.input != side or gm.b.trans or len(pk.cols) > 2 or \
            gm.batch and simplify(gm.a.steps[0], bounds) is not ZERO:  # A: one for all
        return None
    names = [f"z{k}" for k in range(len(shape))]
    lin = _linear(view.index, names)
    if lin is None:
        return None
    pairs = []
    for c in pk.cols:
        r = next((r for r in pk.rows if lin[1][r] is not ZERO and
                  simplify(lin[1][r] - lin[1][c], {}) is ZERO), None)
        if r is not None:
            shift = {names[r]: Var(names[r]) + 1, names[c]: Var(names[c]) - 1}
            if any(simplify(e.subs(shift), {}) is not simplify(e, {})
                   for e in (view.index, view.valid)):
                return None
            pairs.append((r, c))
    if not pairs:
        return None
    paired = {r for r, _ in pairs}
    return Windows(tuple(pairs), tuple(r for r in pk.rows if r not in paired))


def winograd(win: Windows, shape: Sequence[Expr]) -> bool:
    """Whether a windows product (`win`, over B's `shape`) is one Winograd's F(2x2, 3x3)
    computes (codegen's lumos_winograd): a 3x3 kernel over both of B's column axes."""
    return len(win.pairs) == 2 and all(shape[r].is_num and shape[r].value == 3
                                       for r, _ in win.pairs)


@dataclass(frozen=True)
class Band:
    """Where a body reads a KGemmWindows product: at batch index `batch` (a variable; None
    if the product has none) and row `row` (a variable), at the padded image's row
    `step` * `line` + `offset` (`line` a variable, `offset` free of these three), column
    `col` (free of `line`): so a band of the reader's lines reads a band of the product's
    image rows, all its rows."""
    batch: str | None
    row: str
    line: str
    step: int
    offset: Expr
    col: Expr

    def image_row(self) -> Expr:
        return Var(self.line) * self.step + self.offset


def band(index: Expr, gm: Gemm, shape: Sequence[Expr], bounds: Mapping) -> Band | None:
    """The Band of a read of the product `gm` (whose B is the windows of a copy of
    `shape`) at flat position `index` (under `bounds`), if it is one."""
    pk = packing(gm, 1, shape, bounds)
    if pk is None or len(pk.cols) > 2:
        return None
    width = shape[pk.cols[-1]]
    rest, batch = index, None
    if gm.batch:
        g = simplify(index // gm.c_steps[0], bounds)
        if g.op != "var":
            return None
        batch, rest = g.args[0], simplify(index % gm.c_steps[0], bounds)
    row = simplify(rest // gm.ldc, bounds)
    col = simplify(rest % gm.ldc, bounds)
    image_row = simplify(col // width, bounds) if len(pk.cols) == 2 else ZERO
    col = simplify(col % width, bounds)
    for line in sorted(image_row.vars()):
        offset = image_row.subs({line: 0})
        step = image_row.subs({line: 1}) - offset
        if step.is_num and step.value >= 1 and offset + Var(line) * step is image_row and \
                row.op == "var" and not offset.vars() & {batch, row.args[0], line} and \
                line not in col.vars() and len({batch, row.args[0], line}) == 3:
            return Band(batch, row.args[0], line, step.value, offset, col)
    return None


def _banded(view: View, gm: Gemm, shape: Sequence[Expr], bounds: Mapping) -> bool:
    """Whether a body reads `gm` through `view` in bands: its batch, row and line axes in
    that order, none the last (the reading kernel's axes in order: codegen.banded)."""
    b = band(view.index, gm, shape, bounds | view.bounds())
    if b is None:
        return False
    axes = [int(v[1:]) for v in (b.batch, b.row, b.line) if v is not None]
    return axes == sorted(axes) and axes[-1] < len(view.shape) - 1


def _elementwise(view: View) -> bool:
    """Whether `view` reads its buffer in the row-major order of its own shape, skipping
    only short constant axes (relu's and clamp's stacked pair) whose positions its
    validity alone may depend on: a body at some output position reads a product's
    element at that same position (an EGemm that codegen can run in row blocks)."""
    names = [f"z{k}" for k in range(len(view.shape))]
    lin = _linear(view.index, names)
    if lin is None or lin[0] is not ZERO:
        return False
    step, skipped = ONE, set()
    for k in reversed(range(len(view.shape))):
        e = view.shape[k]
        if lin[1][k] is ZERO and e is not ONE:
            if not e.is_num or e.value > SHORT_AXIS:
                return False
            skipped.add(names[k])
        elif e is not ONE:
            if simplify(lin[1][k] - step, view.bounds()) is not ZERO:
                return False
            step = step * e
    return view.valid.vars() <= skipped


@dataclass
class Kernels:
    dims: dict[str, tuple[int, int | None]]
    nodes: list[Node] = field(default_factory=list)
    outputs: list[int] = field(default_factory=list)
    bodies: dict[int, Body] = field(default_factory=dict)
    packs: dict[int, Pack] = field(default_factory=dict)  # Gemm node -> its packed factor
    own: set[int] = field(default_factory=set)  # Gemm nodes run by lumos_gemm_own
    amx: set[int] = field(default_factory=set)  # ... by lumos_gemm_amx (bf16x3)
    par: dict[int, int] = field(default_factory=dict)  # kernel -> its schedule's `par`
    wide: dict[int, bool] = field(default_factory=dict)  # ... `wide`
    ahead: dict[int, int] = field(default_factory=dict)  # ... a sum's `ahead`
    jam: dict[int, int] = field(default_factory=dict)  # ... and its `jam`
    inner: dict[int, int] = field(default_factory=dict)  # ... a map's `inner` (-1: last)
    # decoded from a genome: node -> (the e-class it writes, the e-classes its code is from)
    origin: dict[int, tuple[int, frozenset[int]]] = field(default_factory=dict)

    def add(self, node: Node, body: Body | None = None) -> int:
        if body is not None:
            node = Node(node.op, tuple(dict.fromkeys(loads(body))), (), node.shape,
                        node.dtype, axis=node.axis, persist=node.persist)
            self.bodies[len(self.nodes)] = body
        self.nodes.append(node)
        return len(self.nodes) - 1

    def dtype(self, b: Body) -> DType:
        return self.nodes[b.src].dtype if isinstance(b, Load) else b.dtype


def tiles(b: Body) -> list[Tile]:
    """The distinct matrix products body `b` computes (Tile leaves), left to right."""
    out: dict[Node, Tile] = {}
    for x in _leaves(b):
        if isinstance(x, Tile):
            out.setdefault(x.gemm, x)
    return list(out.values())


def body_loads(b: Body) -> list[Load]:
    """The loads in body `b`, each shared subtree visited once, left to right."""
    return [x for x in _leaves(b) if isinstance(x, Load)]


def _leaves(b: Body) -> list[Load | Tile | Rows]:
    out: list[Load | Tile | Rows] = []
    seen, stack = set(), [b]
    while stack:
        x = stack.pop()
        if id(x) in seen:
            continue
        seen.add(id(x))
        if isinstance(x, Load | Tile | Rows):
            out.append(x)
        else:
            stack.extend(reversed(x.args))
    return out


def loads(b: Body) -> list[int]:
    """The buffers body `b` reads (a Tile's: its product's factors; a Rows': its body's)."""
    return [j for x in _leaves(b) for j in ((x.src,) if isinstance(x, Load) else
                                           loads(x.body) if isinstance(x, Rows) else
                                           x.gemm.inputs)]


def rows(b: Body) -> list[Rows]:
    """The distinct kernels body `b` computes in bands (Rows leaves; one per body)."""
    out: dict[int, Rows] = {}
    for x in _leaves(b):
        if isinstance(x, Rows):
            out.setdefault(id(x.body), x)
    return list(out.values())


def from_graph(g: Graph) -> Kernels:
    """One kernel per HLIR node (no fusion)."""
    k = Kernels(dict(g.dims))
    for n in g.nodes:
        ins = [Load(j, v) for j, v in zip(n.inputs, n.views, strict=True)]
        if n.op in ELEMENTWISE:
            k.add(Node("Map", (), (), n.shape, n.dtype), Apply(n.op, n.dtype, tuple(ins)))
        elif n.op in (*REDUCE, "Output"):
            k.add(n, ins[0])
        else:
            k.add(n)
    k.outputs = list(g.outputs)
    return k


def cpu_space(space: SearchSpace, bounds: Mapping | None = None, amx: bool = False) -> SearchSpace:
    """The e-nodes the CPU executes (a KGemm only where `gemm` has a layout for it, under
    the dims' `bounds`; KGemmAmx and KGemmWindowsAmx only if `amx`: bf16x3 products
    allowed and the CPU able to run them), each class's buffer read (ELoad) and loop
    kernels first: the baseline genome is the program without fusion or BLAS."""
    b = bounds or {}
    decided: dict[tuple, bool] = {}  # (KGemm or EGemm, fields): the twins share one

    def ok(n: ENode) -> bool:
        if n.op in ("KGemmAmx", "KGemmWindowsAmx", "EGemmWindowsAmx") and not amx:
            return False
        if n.op in ("KGemm", "KGemmOwn", "KGemmAmx", "EGemm", "EGemmOwn"):
            key = (n.op.removesuffix("Own").removesuffix("Amx"), n.fields)
            if key not in decided:
                decided[key] = product_ok(key[0], n)
            return decided[key]
        if n.op == "KGemmPack":
            gm = gemm(gemm_views(n, b), n.fields[1], b)
            return gm is not None and packing(gm, n.fields[5], n.fields[6], b) is not None \
                and (not n.fields[7] or gm.b.input == n.fields[5] and not gm.b.trans)
        if n.op in ("KGemmWindows", "KGemmWindowsAmx", "KGemmWinograd"):
            gm = gemm(gemm_views(n, b), n.fields[1], b)
            win = None if gm is None else windows(gm, 1, n.fields[5], n.fields[6], b)
            return win is not None and (n.op != "KGemmWinograd" or winograd(win, n.fields[5]))
        if n.op in ("EGemmWindows", "EGemmWindowsAmx"):
            gm = gemm(gemm_views(n, b), n.fields[2], b)
            return gm is not None and windows(gm, 1, n.fields[6], n.fields[7], b) is not None \
                and _banded(compose(n.fields[0], b), gm, n.fields[6], b)
        if n.op == "ERows":  # read linearly where valid: a kernel that codegen can band
            view = compose(n.fields[0], b)
            return any(p.op == "KMaxReduce" for p in space.classes[n.children[0]]) \
                and band_steps(view.index, view.valid, len(view.shape),
                               {**b, **view.bounds()}) is not None
        if n.op == "EMaxReduce":
            length = n.fields[1].shape[n.fields[0]]
            return length.is_num and length.value <= SHORT_AXIS
        return True

    def product_ok(op: str, n: ENode) -> bool:
        if op == "KGemm":
            return gemm(gemm_views(n, b), n.fields[1], b) is not None
        gm = gemm(gemm_views(n, b), n.fields[2], b)  # EGemm
        view = compose(n.fields[0], b)
        return gm is not None and (_elementwise(view) or row_band(view, gm, b) is not None)

    s = SearchSpace([[n for n in c if ok(n)] for c in space.classes], space.root,
                    space.class_keys)
    s = restrict(s, EXECUTABLE, "cpu")
    later = lambda n: (n.op in SCHEDULED and schedule(n) != lowered(n.op),  # noqa: E731
                       n.op.startswith("KGemm") or n.op.startswith("E") and n.op != "ELoad",
                       n.op.endswith(("Own", "Amx")))  # (OpenBLAS first; schedules last)
    return SearchSpace([sorted(c, key=later) for c in s.classes], s.root, s.class_keys)


def compose(c: tuple, bounds: Mapping) -> View:
    """A CView field ("Top", v) / ("Then", w, c) as one view over c's innermost shape."""
    if c[0] == "Top":
        return c[1]
    return _compose(c, tuple(sorted(bounds.items())))


@functools.lru_cache(maxsize=1 << 16)
def _compose(c: tuple, bounds: tuple) -> View:
    """(compose, memoized: the chains of a graph's loads share their inner links, and the
    seeds and the decoder compose the same ones)"""
    w, inner = c[1], compose(c[2], dict(bounds))
    index, valid = w.at_flat(inner.index)
    b = {**dict(bounds), **inner.bounds()}
    return View(inner.shape, simplify(index, b), simplify(inner.valid & valid, b))


def from_genome(space: SearchSpace, choice: Mapping[int, int] | Sequence[int],
                dims: Mapping[str, tuple[int, int | None]]) -> Kernels:
    """The kernel program `choice` picks in a cpu_space."""
    k = Kernels(dict(dims))
    built: dict[int, int] = {}
    bounds = dict(dims)

    def node(c: int) -> ENode:
        return space.classes[c][choice[c]]

    bodies: dict[int, Body] = {}  # by class: a producer inlined twice is one shared object
    under: dict[int, frozenset[int]] = {}  # by class: the classes its body is built from

    def body(c: int) -> Body:
        b = bodies.get(c)
        if b is not None:
            return b
        n = node(c)
        inner = [p for p in n.children if n.op not in ("ELoad", "EGemm", "EGemmOwn",
                                                        "EGemmWindows", "EGemmWindowsAmx")]
        view = compose(n.fields[0 if n.op.startswith("EGemm") else -1], bounds)
        if n.op == "ERows":
            p = node(n.children[0])
            arg = body(p.children[0])
            op = p.op[1:]
            b = Rows(Node(op, (), (), p.fields[0], k.dtype(arg),
                          axis=p.fields[1] if op in REDUCE else None), arg, view)
        elif n.op.startswith("EGemm"):
            ins = tuple(built[a] for a in n.children)
            win = Pack(1, Load(ins[1], n.fields[7]), n.fields[6], False, True,
                       n.op == "EGemmWindowsAmx") if n.op.startswith("EGemmWindows") else None
            b = Tile(Node("Gemm", tuple(dict.fromkeys(ins)), gemm_views(n, bounds), n.fields[1],
                          k.nodes[ins[0]].dtype, axis=n.fields[2]), view, win,
                     n.op == "EGemmOwn")
        elif n.op == "ELoad":
            b = Load(built[n.children[0]], view)
        elif n.op == "EMaxReduce":
            arg = body(n.children[0])
            b = Reduce("MaxReduce", k.dtype(arg), n.fields[0], n.fields[1].shape, view, arg)
        else:
            args = tuple(body(a) for a in n.children)
            op = n.op[1:]
            dt = as_dtype(n.fields[0]) if op == "Cast" else bool_ if op == "LessThan" else \
                k.dtype(args[1]) if op == "Select" else k.dtype(args[0])
            b = Apply(op, dt, args, view.valid)
        if n.op == "ERows":
            inner = [n.children[0], node(n.children[0]).children[0]]
        under[c] = frozenset((c, *(x for p in inner for x in under.get(p, (p,)))))
        bodies[c] = b
        return b

    def buffer(c: int, n: ENode) -> int:
        f = n.fields
        if n.op in ("KMap", "KCopy", "KOutput", "KSumReduce", "KMaxReduce"):
            b = body(n.children[0])
            op = "Map" if n.op == "KCopy" else n.op[1:]
            built[c] = k.add(Node(op, (), (), f[0], k.dtype(b),
                                  axis=f[1] if op in REDUCE else None,
                                  persist=f[1] if op == "Output" else False), b)
            if n.op in SCHEDULED:
                par, wide, *rest = schedule(n)
                k.par[built[c]], k.wide[built[c]] = par, bool(wide)
                if n.op == "KMap":
                    k.inner[built[c]] = rest[0]
                elif rest:
                    k.ahead[built[c]], k.jam[built[c]] = rest
        elif n.op in ("KGemm", "KGemmOwn", "KGemmAmx"):
            built[c] = k.add(Node("Gemm", tuple(built[a] for a in n.children),
                                  gemm_views(n, bounds), f[0], k.nodes[built[n.children[0]]].dtype,
                                  axis=f[1]))
            if n.op == "KGemmOwn":
                k.own.add(built[c])
            elif n.op == "KGemmAmx":
                k.amx.add(built[c])
        elif n.op == "KGemmPack":  # inputs: the other factor, then what the packed one reads
            side = f[5]
            packed = body(n.children[side])
            other = built[n.children[1 - side]]
            built[c] = k.add(Node("Gemm", tuple(dict.fromkeys((other, *loads(packed)))),
                                  gemm_views(n, bounds), f[0], k.nodes[other].dtype, axis=f[1]))
            k.packs[built[c]] = Pack(side, packed, f[6], bool(f[7]), False)
        elif n.op in ("KGemmWindows", "KGemmWindowsAmx", "KGemmWinograd"):  # inputs: A, then
            x = built[n.children[1]]                       # the buffer whose windows B copies
            other = built[n.children[0]]
            built[c] = k.add(Node("Gemm", tuple(dict.fromkeys((other, x))), gemm_views(n, bounds),
                                  f[0], k.nodes[other].dtype, axis=f[1]))
            k.packs[built[c]] = Pack(1, Load(x, f[6]), f[5], False, True,
                                     n.op == "KGemmWindowsAmx", n.op == "KGemmWinograd",
                                     n.op == "KGemmWinograd" and bool(f[7]))
        elif n.op in ("Input", "Constant", "Iota"):
            value = text_value(f[2]) if n.op == "Constant" else None
            built[c] = k.add(Node(n.op, (), (), f[0], as_dtype(f[1]),
                                  name=f[2] if n.op == "Input" else None, value=value,
                                  expr=f[2] if n.op == "Iota" else None))
        elif n.op in ("Gather", "Scatter"):
            ins = tuple(built[a] for a in n.children)
            dt = k.nodes[ins[1 if n.op == "Gather" else 0]].dtype
            built[c] = k.add(Node(n.op, ins, tuple(f[1:]), f[0], dt))
        else:
            raise LumosError(f"cpu decode: {n.op} is not a CPU kernel")
        made = [under[p] for p in n.children if p in under]  # (bodies, not the buffers read)
        k.origin[built[c]] = (c, frozenset((c,)).union(*made))
        return built[c]

    for c, n in extract(space, dict(enumerate(choice)) if isinstance(choice, Sequence)
                        else dict(choice)):  # children first
        if n.op == "Root":
            k.outputs = [built[a] for a in n.children]
        elif not n.op.startswith("E"):  # bodies are built by the kernel that owns them
            buffer(c, n)
    return k


Cost = Callable[[int, ENode], float]
DUPLICATE_OPS = 4  # seeds: ops a producer with several readers may be recomputed by each
# seeds: a product this large (its result's bytes) read by one elementwise kernel is run by
# that kernel in row blocks (EGemm); smaller ones stay in cache between the two kernels
# anyway, and their fewer, smaller blocks split worse over the threads
TILE_MIN_BYTES = 6 << 20
# ... and whose right factor (read again by every row block) stays in L2: a larger one
# is fetched from memory again for each block
TILE_MAX_B_BYTES = 256 << 10
# seeds: a product whose B has at most this many bytes is multiplied by lumos' own kernel
# (lumos_gemm_own: A read where it lies, B copied once per call), not OpenBLAS, which
# copies both: that costs more than it saves while B is small
OWN_MAX_B_BYTES = 256 << 10
# ... and more columns than this (at one vector a row, OpenBLAS is the faster)
OWN_MIN_COLUMNS = 16
# ... or whose B is stored transposed (a linear layer's weight, read where it lies by
# lumos_gemm_rows) and A has at most this many rows, a batch counted whole: for a few rows
# reading the weight in place beats OpenBLAS's copy of it, for many rows OpenBLAS wins.
# lumos_gemm_own takes that path for calls of at most this many rows only (many rows run
# faster from B's panels than by rows) ...
ROWS_MAX_M = 128
# seeds: a copy this large read only by a product is packed by the product block by block
# (KGemmPack), never stored whole (a convolution's im2col windows: its input once per tap)
PACK_MIN_BYTES = 4 << 20
# ... and its blocks multiplied by lumos' own kernel (Pack.panels), not OpenBLAS, where k
# is at most this (lumos' kernel is the faster for a short k, OpenBLAS for a longer one)
PANELS_MAX_K = 256
# ... unless it is a stride-1 convolution's windows, read where they lie (KGemmWindows),
# where each image has at least this many output positions: its panels of 48 then split
# evenly over the threads, its padding columns few (smaller images, a few panels each,
# split badly over the threads and run faster as packed blocks by OpenBLAS)
WINDOWS_MIN_COLUMNS = 784
# seeds: a relu6 this large read only by a product is computed by it block by block too
# (KGemmPack of a max reduction: a stride-1 depthwise convolution's, by the projection
# reading it); smaller ones stay in cache between the kernels anyway, and are slower packed
PACK_RELU_MIN_BYTES = 8 << 20
# seeds: where the space offers bf16x3 products (KGemmAmx), one of at least this many
# multiply-adds a call is one, unless lumos' own kernel takes it (a few rows by a stored
# weight are slower on AMX, its packing of the weight costing more than the product)
AMX_MIN_MACS = 1 << 18


# seeds: a convolution's windows product as bf16x3 where the space offers it, else by
# Winograd's F(2x2, 3x3) where it does, else as it is (weights of the choices)
WINDOWS_FIRST = {"KGemmWindowsAmx": 1.5, "KGemmWinograd": 1.25}
# ... and by Winograd's only where it has at least this many input and output channels
# (fewer: its products are short and its transforms cost more than the multiplies saved;
# on the Zen 4 at batch 8, 16 channels ran at 0.8-1.0x the windows, 32 at 1.1-1.2x, 64 and
# 128 at 1.4-1.5x)
WINOGRAD_MIN_CHANNELS = 32
# ... and tiles of 2x2 outputs (all images): every call transforms the filters, and its
# products are 48 tiles wide (phased, at batch 1: 49 tiles at 256 channels 0.8x the
# windows, 64 at 128 channels 0.8x; at batch 8, 128 tiles at 256 channels 1.15-1.3x)
WINOGRAD_MIN_TILES = 128
# ... each step across all tiles (phased) below this many, else by blocks of 48 tiles (at
# batch 8, 256 channels at 8x8, 128 tiles: phased 1.15-1.31x the windows, blocks
# 1.01-1.07x; 64 channels at 32x32, 2048 tiles: blocks 1.5x, phased 1.03x)
WINOGRAD_PHASED_TILES = 384
NARROW_INTS = frozenset({"i8", "u8", "i16"})  # (seeds: a weight's value stored as such)


def schedule(n: ENode) -> tuple:
    """A scheduled kernel's schedule fields: (par, wide), a sum's (ahead, jam) after them
    and a map's inner."""
    return n.fields[SCHEDULED[n.op]:]


def lowered(op: str) -> tuple:
    """The schedule lowering gives kernels of `op`."""
    return (PAR_SEED, WIDE_LOWERED, AHEAD_SEED, 1) if op == "KSumReduce" else \
        (PAR_SEED, WIDE_LOWERED, INNER_LAST) if op == "KMap" else (PAR_SEED, WIDE_LOWERED)


def wide_seed(shape: Sequence[Expr], length: Expr | None, bounds: Mapping) -> bool:
    """Whether a kernel of output `shape` (a reduction: over an axis of `length`) is
    vectorized 64 bytes wide by the rule of thumb (WIDE_LANES, WIDE_MIN_ROW) under the
    dims' `bounds`: the seeds' choice, and that of a kernel without a schedule."""
    row = shape[-1] if shape else ONE
    if row.is_num and (row.value % WIDE_LANES == 0 or row.value >= WIDE_MIN_ROW):
        return True
    if length is None:
        return False
    hi = nrange(length, bounds)[1]
    return length.is_num and length.value % WIDE_LANES == 0 or \
        hi is not None and hi >= WIDE_MIN_ROW


def seeds(space: SearchSpace, env: Mapping[str, int], genomes: Genomes | None = None,
          weights: frozenset[str] = frozenset(),
          bounds: Mapping[str, tuple[int, int | None]] | None = None) -> tuple[Cost, Cost]:
    """Rules of thumb for the search's first genomes (Genomes.preferring). Inline an
    elementwise producer into a kernel reading it unless that kernel reads it through a
    broadcast (every element computed again per broadcast step) or the producer has
    readers that are not all computed by one kernel (its `home`: then it is computed once
    there, however many reads) and is not cheap: `DUPLICATE_OPS` ops of recomputation per
    extra reader at most (so a residual stream is stored now and then, not recomputed from
    its start; a ConvNeXt block's depthwise convolution, read by its layer norm's mean,
    variance and output, is computed once).
    An axis the read is valid at one position of (relu's and maximum's stacked pair) is
    no broadcast (a depthwise convolution is computed in the relu6 reading it: its guards
    are the same along the vector loop, rows or zeros picked per block, as in its own map).
    Matrix products are BLAS calls or (second seed) the fused multiply-sum: the first is
    the faster on all but small products, so the second's timing is often cut short (see
    tune.timed). In the first, a large product read by one kernel (elementwise) is
    computed by it in row blocks (EGemm, `TILE_MIN_BYTES`, `TILE_MAX_B_BYTES`), and a large
    copy read only by a product is packed by it (KGemmPack, `PACK_MIN_BYTES`), or read
    where it lies if it is a convolution's windows (KGemmWindows: computed by the pool
    reading it, in bands, where it can: EGemmWindows), and so is a large
    relu6 read only by a product (a depthwise convolution's, `PACK_RELU_MIN_BYTES`); a
    product (in row blocks or whole) whose B is small is lumos' own kernel's, not
    OpenBLAS' (`OWN_MAX_B_BYTES`, `OWN_MIN_COLUMNS`), and so is one whose B is stored
    transposed and A short (`ROWS_MAX_M`); any other of `AMX_MIN_MACS` or more is a
    bf16x3 product (KGemmAmx) where the space has them, and so is a windows product
    (KGemmWindowsAmx), in bands a long one (EGemmWindowsAmx).
    A value of the `weights` inputs alone cast to a narrow integer (nn.quant's int8 quants)
    is stored, not inlined: its kernel runs once per binding (codegen.generate), its
    readers read a byte an element instead of unpacking bits; what such kernels alone
    read is inlined into them (run once, it would only take memory stored).
    Each kernel's schedule: `par` and `ahead` as lowered, 64-byte vectors by `wide_seed`;
    a sum whose product reads weights unpacked from integers the same along its first
    axis (a batch's product) computes its outputs along that axis together, as many as
    there are (up to 8: `jam`), and a value it reads through a broadcast along that axis
    counts as no broadcast (it is computed once for them all).
    `env` gives the dims' sizes, `bounds` their ranges; `genomes`, the space's Genomes if
    the caller made one.
    The search times the seeds like any other candidate."""
    bounds = bounds or {}
    parents: dict[int, list[tuple[int, ENode]]] = {}  # class -> (class, node) using it
    for i, nodes in enumerate(space.classes):
        for n in nodes:
            for ch in n.children:
                parents.setdefault(ch, []).append((i, n))

    made = genomes if genomes is not None else Genomes(space)
    baseline = made.baseline(random.Random(0))  # cpu_space: the unfused program first
    program = extract(space, baseline)  # producers before their readers
    used_by: dict[int, list[tuple[int, ENode]]] = {}  # class -> (class, node) of the
    for i, n in program:                              # unfused program using it
        for ch in n.children:
            used_by.setdefault(ch, []).append((i, n))

    @functools.cache
    def owners(c: int) -> frozenset[int]:  # the unfused program's kernels holding class c
        out: set[int] = set()
        for pc, pn in used_by.get(c, ()):
            if pn.op.startswith("K"):
                out.add(pc)
            elif pn.op.startswith("E") and pn.op != "ELoad":
                out |= owners(pc)
        return frozenset(out)
    # producer class -> kernels reading its buffer (distinct consumers: equal reads by two
    # kernels are one e-class; an operand's copy for a product is not counted)
    reading: dict[int, set[int]] = {}
    views_read: dict[int, set[int]] = {}  # producer class -> its distinct loads' classes
    for c, nodes in enumerate(space.classes):
        for n in nodes:
            if n.op == "ELoad" and n.fields[0][0] == "Top":
                ks = {k for k in owners(c) if not any(m.op == "KCopy" for m in space.classes[k])}
                reading.setdefault(n.children[0], set()).update(ks)
                if ks:
                    views_read.setdefault(n.children[0], set()).add(c)
    for c, n in program:  # a Gather reads its operands' buffers directly (a where's pair)
        if n.op == "Gather":
            for ch in n.children:
                reading.setdefault(ch, set()).add(c)
    readers = {p: len(ks) for p, ks in reading.items()}
    of_weights: set[int] = set()  # classes of the unfused program computed from weights
    for c, n in program:
        if n.op == "Input" and n.fields[2] in weights or n.op == "Constant" or \
                n.op == "Iota" and not any(d in repr(n.fields) for d in env) or \
                n.op not in ("Input", "Iota") and n.children and \
                all(ch in of_weights for ch in n.children):
            of_weights.add(c)
    of_constants: set[int] = set()  # ... of which some read no weight (constants alone)
    for c, n in program:
        if c in of_weights and (n.op in ("Constant", "Iota") or n.op != "Input" and
                                all(ch in of_constants for ch in n.children)):
            of_constants.add(c)
    unpacked: set[int] = set()  # ... of which some read weights packed as integers
    for c, n in program:
        if c in of_weights and (n.op == "Input" and n.fields[1] in NARROW_INTS or
                                any(ch in unpacked for ch in n.children)):
            unpacked.add(c)
    stored = {c for c, n in program if n.op == "KMap" and c in of_weights and any(
        m.op == "ECast" and m.fields[0] in NARROW_INTS for m in space.classes[n.children[0]])}
    ops: dict[int, int] = {}  # buffer class -> elementwise ops its body inlines (chosen so)
    decided: dict[int, bool] = {}  # ELoad class -> inline?

    @functools.cache
    def jam(n: ENode) -> int:
        """A sum computes outputs along its first axis together (up to its extent) where
        its product reads a factor unpacked from integer weights that is the same for all
        of them (a matrix-vector product of a batch: the weights unpacked once for its
        rows)."""
        if n.op != "KSumReduce" or len(n.fields[0]) < 2:
            return 1
        extent = _numel(n.fields[0][:1], env)
        shared = any(ld.op == "ELoad" and "z0" not in compose(ld.fields[0], {}).index.vars()
                     and ld.children[0] in unpacked
                     for e in space.classes[n.children[0]] if e.op == "EMul"
                     for ch in e.children for ld in space.classes[ch])
        return max(j for j in JAM_VALUES if j <= extent) if shared else 1

    @functools.cache
    def holders(c: int, depth: int = 0) -> frozenset[int]:
        """The kernels whose bodies hold class c (a read made by fusion, which the
        unfused program does not have), through the body nodes above it."""
        out: set[int] = set()
        for pc, pn in parents.get(c, ()):
            if pn.op.startswith("K"):
                out.add(pc)
            elif pn.op.startswith("E") and depth <= FUSE_ROUNDS:
                out |= holders(pc, depth + 1)
        return frozenset(out)

    @functools.cache
    def jammed(k: int, depth: int = 0) -> bool:
        """Whether kernel class k is a jammed sum, or a map read only where such sums
        inline it (a product's multiply)."""
        if any(m.op == "KSumReduce" and jam(m) > 1 for m in space.classes[k]):
            return True
        if depth > FUSE_ROUNDS or not any(m.op == "KMap" for m in space.classes[k]):
            return False
        reads = views_read.get(k, ())
        return bool(reads) and all(owners(r) and all(jammed(o, depth + 1) for o in owners(r))
                                   for r in reads)

    def inline(c: int) -> bool:
        if c not in decided:
            load = next((n for n in space.classes[c] if n.op == "ELoad"), None)
            p = load.children[0] if load is not None else -1
            if load is None or p not in ops or len(space.classes[c]) == 1 or p in stored:
                decided[c] = load is None
            elif p in of_weights and ((held := owners(c)) and held <= of_weights or not held and
                                      (p in of_constants or holders(c) <= of_weights)):
                # (computed once per binding: stored, it takes memory. A load that fusion
                # made is held by no kernel of the unfused program: a value of constants
                # alone is inlined, one of weights where its holders read weights alone; a
                # weight's copy transposed for a convolution that reads it is stored)
                decided[c] = True
            else:
                view = compose(load.fields[0], {})
                used = view.index.vars()
                # (a sum jammed along its first axis computes what it reads the same
                # along it once for the outputs it computes together)
                held = owners(c) or holders(c)
                jam0 = bool(held) and all(jammed(k) for k in held)
                broadcast = any(f"z{k}" not in used and _numel((e,), env) > 1
                                and not _once(view, k) and not (k == 0 and jam0)
                                for k, e in enumerate(view.shape))
                # a reduction is inlined only where each of its outputs is read once (an
                # im2col copy reads a pooled activation 9 times: 4 max steps each) and in
                # order, linearly (a 2x2 pool reading relu's outputs two apart through
                # its windows runs scalar, not vectorized like relu's own loop)
                red = next((m for m in space.classes[p] if m.op == "KMaxReduce"), None)
                again = red is not None and _read_again(view, red.fields[0], env,
                                                        stepwise(c, len(view.shape)))
                # (computed where its readers are: once, unless they read it through
                # several views, as a convolution's taps do)
                decided[c] = not broadcast and not again and (
                    home.get(p, p) != p and len({_plain(compose(ld.fields[0], {}))
                                                 for v in views_read.get(p, ())
                                                 for ld in space.classes[v]
                                                 if ld.op == "ELoad"}) <= 1 or
                    ops[p] * (readers.get(p, 1) - 1) <= DUPLICATE_OPS)
        return decided[c]

    def stepwise(c: int, rank: int) -> bool:
        """Whether a kernel reading class c (a body of `rank` axes) is a reduction over its
        short last axis: written out step by step, its vector loop along the axis before
        (a global average pool's rows of 14, a 2x2 pool's rows)."""
        todo, seen = [c], {c}
        while todo:
            for i, n in parents.get(todo.pop(), ()):
                if n.op in ("KSumReduce", "KMaxReduce"):
                    root = space.classes[n.children[0]][0]
                    length = compose(root.fields[0 if root.op.startswith("EGemm") else -1],
                                     {}).shape[n.fields[1]]
                    if n.fields[1] == rank - 1 > 0 and length.is_num and \
                            length.value <= SHORT_AXIS:
                        return True
                elif n.op.startswith("E") and n.op != "ELoad" and i not in seen:
                    seen.add(i)
                    todo.append(i)
        return False

    def body_ops(b: int) -> int:
        n = next(n for n in space.classes[b] if n.op != "ELoad" or len(space.classes[b]) == 1)
        if n.op == "ELoad":
            return 0
        return 1 + sum(ops.get(space.classes[ch][0].children[0], 0) if inline(ch) else 0
                       for ch in n.children if space.classes[ch][0].op == "ELoad")

    short = {m.children[0] for r in space.classes for m in r if m.op == "EMaxReduce"}
    selects = {m.children[0] for r in space.classes if any(x.op == "ESelect" for x in r)
               for m in r if m.op == "ELoad"}  # Gathers that a reader may compute as selects
    inlinable = {c for c, n in program if n.op in ("KMap", "KCopy", "KOutput") or
                 n.op == "KMaxReduce" and n.children[0] in short or
                 n.op == "Gather" and c in selects}
    # the kernel computing each inlinable kernel's values: the one all its readers are
    # computed by, if there is one (then inlining it there computes it once), else itself
    home: dict[int, int] = {}
    for c, _ in reversed(program):  # readers before their producers
        if c in inlinable:
            hs = {home.get(r, r) for r in reading.get(c, ())}
            home[c] = hs.pop() if len(hs) == 1 else c
    for c, n in program:
        if c in inlinable:
            ops[c] = 1 if n.op == "Gather" else body_ops(n.children[0])

    sizes = {d: (v, v) for d, v in env.items()}

    def own(gm: Gemm | None) -> bool:  # a product by lumos_gemm_own: B in L2 once copied,
        # or B stored transposed and A a few rows, batch included (lumos_gemm_rows; codegen
        # may merge a batch into the rows: MiniLM's 32 x 128)
        return gm is not None and (_numel((gm.k, gm.n), env) * 4 <= OWN_MAX_B_BYTES and
                                   _numel((gm.n,), env) > OWN_MIN_COLUMNS or
                                   gm.b.trans and _numel((gm.m, *gm.batch), env) <= ROWS_MAX_M)

    def amx(gm: Gemm | None) -> bool:  # a product by lumos_gemm_amx (where the space has it)
        return gm is not None and not own(gm) and \
            _numel((gm.m, gm.n, gm.k), env) >= AMX_MIN_MACS

    @functools.cache
    def tiled(c: int) -> bool:  # a product read once, by its reader in row blocks (EGemm)
        g = next((m for m in space.classes[c] if m.op == "EGemm"), None)
        load = next((m for m in space.classes[c] if m.op == "ELoad"), None)
        if g is None or load is None or readers.get(load.children[0]) != 1 or \
                _numel(g.fields[1], env) * 4 < TILE_MIN_BYTES or \
                not _elementwise(compose(g.fields[0], sizes)):  # (bands: the search's)
            return False
        gm = gemm(gemm_views(g, sizes), g.fields[2], sizes)  # one product, rows contiguous
        return gm is not None and in_row_blocks(gm, sizes) and \
            _numel((gm.k, gm.n), env) * 4 <= TILE_MAX_B_BYTES

    def one(c: int) -> bool:  # a read of the constant 1
        return any(m.op == "ELoad" and any(k.op == "Constant" and text_value(k.fields[2]) == 1
                                           for k in space.classes[m.children[0]])
                   for m in space.classes[c])

    def copy(c: int) -> bool:  # x * 1 (Tensor.contiguous: an im2col's windows)
        return any(m.op == "KMap" and any(e.op == "EMul" and any(one(a) for a in e.children)
                                          for e in space.classes[m.children[0]])
                   for m in space.classes[c])

    def packed(c: int, n: ENode) -> bool:  # a copy read only by this product: not stored
        win_op = n.op.startswith(("KGemmWindows", "KGemmWinograd"))
        side, bsh = (1, n.fields[5]) if win_op else n.fields[5:7]
        other = n.children[0 if win_op else 1 - side]
        f = next((g.children[side] for g in space.classes[c]  # (a commuted product: the
                  if g.op == "KGemm" and g.children[1 - side] == other and not copied(g)),
                 None)                                    # other; a copied one: none)
        if f is None:
            return False
        if n.op == "KGemmPack" and any(m.op == "KMaxReduce" for m in space.classes[f]):
            # ... or a relu6 read only by this product (a depthwise convolution's, read by
            # the projection after it), large, its body computing no kernel in bands
            return readers.get(f) == 1 and _numel(bsh, env) * 4 >= PACK_RELU_MIN_BYTES and \
                not computes_rows(n.children[side])
        if readers.get(f) != 1 or not copy(f) or _numel(bsh, env) * 4 < PACK_MIN_BYTES:
            return False
        # ... by lumos' own kernels where they can: its windows; else, k short, its blocks
        gm = gemm(gemm_views(n, sizes), n.fields[1], sizes)
        short = gm is not None and _numel((gm.k,), env) <= PANELS_MAX_K
        wide = gm is not None and _numel((gm.n,), env) >= WINDOWS_MIN_COLUMNS
        if n.op == "KGemmWinograd":
            return gm is not None and \
                min(_numel((gm.m,), env), _numel((gm.k,), env) / 9) >= WINOGRAD_MIN_CHANNELS \
                and tiles_of(gm) >= WINOGRAD_MIN_TILES
        if win_op:
            return wide
        win = wide and any(m.op == "KGemmWindows" for m in space.classes[c])
        panels = short and any(m.op == "KGemmPack" and m.fields[7] for m in space.classes[c])
        return not win and bool(n.fields[7]) == panels

    def tiles_of(gm: Gemm) -> float:  # Winograd's tiles of 2x2 outputs, of all images
        return _numel((gm.n, *gm.batch), env) / 4

    def phased(n: ENode) -> bool:  # Winograd's steps each across all tiles: few tiles
        gm = gemm(gemm_views(n, sizes), n.fields[1], sizes)
        return gm is not None and tiles_of(gm) < WINOGRAD_PHASED_TILES

    @functools.cache
    def banded(c: int) -> str | None:  # windows read once, by their reader in bands: the op
        load = next((m for m in space.classes[c] if m.op == "ELoad"), None)
        if load is None or readers.get(load.children[0]) != 1 or \
                not any(m.op == "EGemmWindows" for m in space.classes[c]):
            return None
        p = load.children[0]
        # ... wherever the seed reads them where they lie (KGemmWindows): where k is short
        # the product is bound by writing its output; a long one gains its output's trip
        # to memory and back. A long one is bf16x3 where the space has it
        if not any(m.op == "KGemmWindowsAmx" for m in space.classes[p]) and \
                any(m.op == "KGemmWinograd" and packed(p, m) for m in space.classes[p]):
            return None  # (stored by Winograd's product instead, where there is no bf16x3)
        gms = [gemm(gemm_views(m, sizes), m.fields[1], sizes) for m in space.classes[p]
               if m.op == "KGemmWindows" and packed(p, m)]
        if not any(gm is not None for gm in gms):
            return None
        long = any(gm is not None and _numel((gm.k,), env) > PANELS_MAX_K for gm in gms)
        bf16x3 = any(m.op == "EGemmWindowsAmx" for m in space.classes[c])
        return "EGemmWindowsAmx" if long and bf16x3 else "EGemmWindows"

    loaded: dict[int, list[int]] = {}  # producer class -> the classes of its loads
    for i, nodes in enumerate(space.classes):
        for n in nodes:
            if n.op == "ELoad":
                loaded.setdefault(n.children[0], []).append(i)

    @functools.cache  # (a DAG: uncached, its shared classes are walked once per path)
    def computes_tile(c: int, depth: int = 0) -> bool:  # (as inlined by this seed)
        if tiled(c):
            return True
        if depth > FUSE_ROUNDS or any(m.op == "ELoad" for m in space.classes[c]) and \
                not inline(c):
            return False
        return any(computes_tile(ch, depth + 1) for m in space.classes[c]
                   if m.op.startswith("E") and m.op not in ("ELoad", "ERows") or
                   m.op in ("KMap", "KCopy", "KMaxReduce") for ch in m.children)

    @functools.cache
    def computes_rows(c: int, depth: int = 0) -> bool:  # (as this seed chooses ERows)
        return depth <= FUSE_ROUNDS and any(
            m.op == "ERows" and in_rows(m.children[0]) or m.op.startswith("E") and
            m.op not in ("ELoad", "ERows") and any(computes_rows(ch, depth + 1)
                                                   for ch in m.children)
            for m in space.classes[c])

    @functools.cache
    def in_rows(p: int) -> bool:
        """Whether reads of producer class p (its kernel a large product's epilogue, run
        in row blocks) are computed by their reader in bands (ERows): where the reader
        downsamples it (a stride-2 depthwise convolution reading a 1x1 expansion's
        relu6: 4x fewer outputs than the expansion's, which is never stored). A stride-1
        reader gains nothing from bands."""
        k = next((m for m in space.classes[p] if m.op == "KMaxReduce"), None)
        if k is None or _numel(k.fields[0], env) * 4 < TILE_MIN_BYTES or not computes_tile(p):
            return False
        return any(_numel(compose(m.fields[0], sizes).shape, env) * 2 <= _numel(k.fields[0], env)
                   for ld in loaded.get(p, []) for m in space.classes[ld] if m.op == "ERows")

    def wide(n: ENode) -> bool:  # (WIDE_LANES, WIDE_MIN_ROW)
        length = None
        if n.op in ("KSumReduce", "KMaxReduce"):
            root = space.classes[n.children[0]][0]
            length = compose(root.fields[0 if root.op.startswith("EGemm") else -1],
                             {}).shape[n.fields[1]]
        shape = n.fields[0]
        if n.op == "KMap" and n.fields[3] != INNER_LAST:  # (its vector loop's axis last)
            shape = (*shape[:n.fields[3]], *shape[n.fields[3] + 1:], shape[n.fields[3]])
        return wide_seed(shape, length, bounds)

    def copied(n: ENode) -> bool:  # a product of a factor copied first (KCopy)
        return any(m.op == "KCopy" for ch in n.children for m in space.classes[ch])

    def fused(blas: float, inner: Mapping[int, int] | None = None) -> Cost:
        def cost(c: int, n: ENode) -> float:
            if n.op in ("KGemm", "KGemmOwn", "KGemmAmx"):  # a product whose factor is a copy
                return product(n) * (0.1 if copied(n) else 1.0)  # only where none is not
            return other(c, n)

        def product(n: ENode) -> float:
            if n.op == "KGemm":
                return blas
            if n.op == "KGemmOwn":  # (second seed: neither)
                return blas * (1.5 if own(gemm(gemm_views(n, sizes), n.fields[1], sizes))
                               else 0.5)
            return blas * (2.0 if amx(gemm(gemm_views(n, sizes), n.fields[1], sizes))
                           else 0.5)

        def other(c: int, n: ENode) -> float:
            if n.op in ("KGemmPack", "KGemmWindows", "KGemmWindowsAmx", "KGemmWinograd"):
                first = WINDOWS_FIRST.get(n.op, 1.0)  # (where offered)
                if n.op == "KGemmWinograd" and bool(n.fields[7]) != phased(n):
                    first *= 0.99  # (the other schedule)
                return 2 * first * blas if blas < 0 and packed(c, n) else 1.0
            if n.op.startswith("E") and any(m.op == "ELoad" for m in space.classes[c]):
                rows_read = next((m for m in space.classes[c] if m.op == "ERows"), None)
                if blas < 0 and rows_read is not None and in_rows(rows_read.children[0]):
                    return float(n.op != "ERows")
                if blas < 0 and (op := banded(c)) is not None:
                    return float(n.op != op)
                if blas < 0 and tiled(c):
                    g = next(m for m in space.classes[c] if m.op == "EGemm")
                    mine = own(gemm(gemm_views(g, sizes), g.fields[2], sizes))
                    return float(n.op != ("EGemmOwn" if mine else "EGemm"))
                return float((n.op == "ELoad") == inline(c)) if not n.op.startswith("EGemm") \
                    and n.op != "ERows" else 1.0
            if n.op in SCHEDULED:
                par, w, *rest = schedule(n)
                if n.op == "KMap":
                    return float(par != PAR_SEED) + float(bool(w) != wide(n)) + \
                        float(rest[0] != (inner or {}).get(c, INNER_LAST))
                return float(par != PAR_SEED) + float(bool(w) != wide(n)) + \
                    float(rest not in ([], [AHEAD_SEED, jam(n)]))
            return 0.0
        return cost

    def inners(blas: float) -> Cost:  # each map's vector loop along the axis its reads run
        # along in the program the other choices make (decoded once: its views composed)
        first = made.preferring(fused(blas), random.Random(0))
        k = from_genome(space, first, bounds or {})
        offered = {c: {m.fields[3] for m in space.classes[c] if m.op == "KMap"}
                   for c in first}
        inner = {}
        for i, b in k.bodies.items():
            c = k.origin[i][0] if i in k.origin else None
            if k.nodes[i].op == "Map" and c is not None:
                axis = vector_axis(b, k.nodes[i].shape)
                if axis in offered.get(c, ()):
                    inner[c] = axis
        return fused(blas, inner)
    return inners(-1.0), inners(1.0)


def vector_axis(b: Body, shape: Sequence[Expr]) -> int:
    """The seeds' `inner` for a map computing body `b` over `shape`: the axis along which
    the most of its reads (and its write, along the last) step by one element, the last on
    a tie (INNER_LAST; axes of size 1 are not loops). A channels-last convolution's taps
    read its input along rows. A read that stays in place along an axis does not count
    for it (counted, such reads ran maps along axes they are broadcast over: see
    docs/performance.md)."""
    names = [f"z{k}" for k in range(len(shape))]
    score = {k: 0.0 for k, e in enumerate(shape) if e is not ONE}
    if not score:
        return INNER_LAST
    score[max(score)] += 1  # (the write: row-major, along the last axis of more than one)
    seen, stack = set(), [b]
    while stack:  # each read at its position in the map (a max computed inline: where its
        x = stack.pop()  # result is read, its own reads being over its input's axes)
        if id(x) in seen:
            continue
        seen.add(id(x))
        if isinstance(x, Apply):
            stack.extend(x.args)
            continue
        lin = _linear(x.view.index, names)
        for k in score:
            score[k] += lin is not None and lin[1][k] is ONE
    best = max(score, key=lambda k: (score[k], k))
    return INNER_LAST if best == max(score) else best


def _read_again(view: View, shape: Sequence[Expr], env: Mapping[str, int],
                stepwise: bool = False) -> bool:
    """Whether `view` reads a buffer of `shape` more than once per element, or not linearly
    with unit steps along its last axis (a 0-d read has none). A last axis of a few
    positions (a pooling window, unrolled by codegen) is read position by position: then
    along the axis before it, steps of 1 or 2 (a 2x2 pool's rows); a `stepwise` reader (a
    short reduction over the last axis) reads only so."""
    names = [f"z{k}" for k in range(len(view.shape))]
    lin = _linear(view.index, names)
    linear = not stepwise and lin is not None and (not lin[1] or lin[1][-1] is ONE)
    last = view.shape[-1] if view.shape else ONE
    if not linear and len(view.shape) > 1 and last.is_num and 1 < last.value <= SHORT_AXIS:
        b = view.bounds()
        steps = [_linear(simplify(view.index.subs({names[-1]: k}), b), names[:-1])
                 for k in range(last.value)]
        linear = all(s is not None and s[1][-1].is_num and s[1][-1].value in (1, 2)
                     for s in steps)
    return not linear or math.prod(_numel((e,), env) for k, e in enumerate(view.shape)
                                   if not _once(view, k)) > _numel(shape, env)


def _once(view: View, k: int, most: int = 16) -> bool:
    """Whether `view` is valid at one position at most along axis k (of at most `most`)."""
    e = view.shape[k]
    if not e.is_num or e.value > most or f"z{k}" not in view.valid.vars():
        return False
    b = view.bounds()
    return sum(simplify(view.valid.subs({f"z{k}": v}), b) is not ZERO
               for v in range(e.value)) <= 1


@functools.cache
def _plain(view: View) -> View:
    """`view` without its axes of one position and those it is valid at one position of
    (a stacked pair's: the maximum of x and -x reads x where x itself does), those axes
    at that position: two reads of a producer that are one read per element."""
    for k in reversed(range(len(view.shape))):
        if view.shape[k] is ONE or _once(view, k):
            b = view.bounds()
            at = next((v for v in range(view.shape[k].value)
                       if simplify(view.valid.subs({f"z{k}": v}), b) is not ZERO), 0)
            shape = view.shape[:k] + view.shape[k + 1:]
            view = view.remap(shape, {f"z{k}": at, **{f"z{j}": z(j - 1)
                                                     for j in range(k + 1, len(view.shape))}})
    return view


def _numel(shape: Sequence[Expr], env: Mapping[str, int]) -> float:
    n = 1.0
    for e in shape:
        n *= float(e.eval({d: env.get(d, 64) for d in e.vars()}))
    return n
