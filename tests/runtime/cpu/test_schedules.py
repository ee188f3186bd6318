"""A kernel's schedule is an e-graph alternative (lower_cpu.egg's `schedules` ruleset):
every kernel that carries one (`kernels.SCHEDULED`) is offered at each combination of its
fields' values, lowering's first; codegen renders the chosen values and nothing else; the
seeds pick what the rules of thumb did; and every schedule computes what the oracle
computes, on either side of its threshold."""

from __future__ import annotations

import itertools
import random
import re

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import lumos
from lumos.egraph import build_spaces
from lumos.runtime.cpu import build
from lumos.runtime.cpu.codegen import generate
from lumos.runtime.cpu.kernels import (
    AHEAD_SEED,
    INNER_LAST,
    JAM_VALUES,
    PAR_SEED,
    RULES,
    SCHEDULED,
    cpu_space,
    from_genome,
    lowered,
    schedule,
    seeds,
)
from lumos.runtime.cpu.tune import matches, profiling_inputs
from lumos.runtime.reference import run_hlir
from lumos.search import Genomes
from lumos.search.genome import extract

PARS = (PAR_SEED, 0, -1)
AHEADS = (AHEAD_SEED, 0, 4096)
# (a sum's, its first axis not 1; other sums' have jam 1; other kernels': par, wide)
SCHEDULES = tuple(itertools.product(PARS, (0, 1), AHEADS, JAM_VALUES))


def norm_graph(row: int = 48) -> lumos.Graph:
    """A row softmax and a residual over `n` rows: maps, both reductions and an output."""
    g = lumos.Graph()
    n = g.dim("n", 1, 4096)
    x = g.tensor((n, row), lumos.f32, "x")
    y = (x - x.amax(1, keepdim=True)).exp()
    (y / y.sum(1, keepdim=True) + x * 0.5).output()
    return g


def space_of(g: lumos.Graph) -> lumos.egraph.SearchSpace:
    (space,) = build_spaces(g, [dict(g.dims)], RULES)
    return cpu_space(space, g.dims)


def scheduled(space: lumos.egraph.SearchSpace, values: tuple[int, ...]) -> dict[int, int]:
    """The unfused program with every scheduled kernel at `values` (par, wide, ahead, jam:
    as many as it has; a map's vector loop along its last axis)."""
    def wanted(n: lumos.egraph.space.ENode) -> bool:  # (a map's vector loop: the last axis)
        v = schedule(n)
        return v == (values[:2] + (INNER_LAST,) if n.op == "KMap" else values[:len(v)])
    choice = {c: next((i for i, n in enumerate(alts) if n.op in SCHEDULED and wanted(n)), 0)
              for c, alts in enumerate(space.classes)}
    return Genomes(space).repair(choice, random.Random(0))


def test_each_kernel_is_offered_every_schedule_lowerings_first() -> None:
    space = space_of(norm_graph())
    seen = set()
    for alts in space.classes:
        kernels = [n for n in alts if n.op in SCHEDULED]
        if not kernels:
            continue
        assert alts[0].op in SCHEDULED and schedule(alts[0]) == lowered(alts[0].op)
        by_kernel: dict[tuple, list[tuple]] = {}
        for n in kernels:
            own = n.fields[:SCHEDULED[n.op]]
            by_kernel.setdefault((n.op, own, n.children), []).append(schedule(n))
        for (op, own, _), schedules in by_kernel.items():  # (no variant of a variant)
            jams = len(own[0]) > 1 and own[0][0] != 1  # (a sum: axes, the first not 1)
            want = {v[:len(lowered(op))] for v in SCHEDULES if jams or v[3] == 1}
            if op == "KMap":  # (par, wide, inner): its vector loop along each other axis
                want = {v[:2] + (INNER_LAST,) for v in SCHEDULES} | {
                    (PAR_SEED, w, k) for w in (0, 1) for k in range(min(len(own[0]) - 1, 4))}
            assert sorted(schedules) == sorted(want), op
            seen.add(op)
    assert seen >= {"KMap", "KSumReduce", "KMaxReduce", "KOutput"}


@pytest.mark.parametrize("values", [(PAR_SEED, 0), (PAR_SEED, 1), (0, 0), (-1, 1)])
def test_codegen_renders_the_schedule_it_is_given(values: tuple[int, int]) -> None:
    par, wide = values
    g = norm_graph()
    space = space_of(g)
    kernels = from_genome(space, scheduled(space, values + (AHEAD_SEED, 1)), g.dims)
    assert set(kernels.par.values()) == {par} and set(kernels.wide.values()) == {bool(wide)}
    units, _ = generate(kernels)
    defs = [u[1] for u in units if not isinstance(u, str)]
    pragmas = re.findall(r"#pragma omp parallel.*", "\n".join(defs))
    if par < 0:
        assert not pragmas
    elif par == 0:
        assert pragmas and not any(" if(" in p for p in pragmas)
    else:
        assert pragmas and all(f">= {par})" in p for p in pragmas)
    assert all(("LUMOS_WIDE void" in d) == bool(wide) for d in defs)


@pytest.mark.parametrize("row", [48, 40, 300])
def test_the_seeds_vectorize_as_the_rule_of_thumb_says(row: int) -> None:
    """64 bytes wide where the rows (a reduction's: its reduced axis) hold a multiple of
    16 floats, or at least 256."""
    g = norm_graph(row)
    space = space_of(g)
    made = Genomes(space)
    for cost in seeds(space, {"n": 64}, made, bounds=g.dims):
        genome = made.preferring(cost, random.Random(0))
        chosen = [n for _, n in extract(space, genome) if n.op in SCHEDULED]
        assert chosen
        for n in chosen:  # reductions over rows, outputs of rows, or a column (n, 1)
            last = n.fields[0][-1]
            wide = n.op.endswith("Reduce") or last.is_num and last.value == row
            assert schedule(n)[:2] == (PAR_SEED, int(wide and row != 40)), n
            assert schedule(n)[2:] in ((), (AHEAD_SEED, 1), (INNER_LAST,)), n


@pytest.mark.parametrize("ahead", AHEADS)
def test_a_matrix_vector_product_prefetches_its_rows_as_far_as_its_schedule_says(
        ahead: int) -> None:
    g = lumos.Graph()
    w, x = g.tensor((256, 64), lumos.f32, "w"), g.tensor((64,), lumos.f32, "x")
    (w * x).sum(1).output()
    space = space_of(g)
    kernels = from_genome(space, scheduled(space, (PAR_SEED, 0, ahead, 1)), g.dims)
    assert set(kernels.ahead.values()) == {ahead}
    units, _ = generate(kernels)
    lines = re.findall(r"__builtin_prefetch\(.*\);", "\n".join(
        u[1] for u in units if not isinstance(u, str)))
    if ahead == 0:
        assert not lines
    else:  # rows of 256 bytes: `ahead` bytes are ahead / 256 rows of 64 floats; each row's
        first = ahead // 256 * 64  # 4 cache lines (+ 1) of 16 floats
        assert [int(x) for x in re.findall(r"\+ (\d+)\);", "\n".join(lines))] == \
            [first + 16 * k for k in range(5)], lines


@settings(max_examples=6, deadline=None)
@given(values=st.sampled_from(SCHEDULES), n=st.sampled_from([1, 5, 87, 683, 3001]))
def test_every_schedule_computes_what_the_oracle_does(values: tuple[int, ...],
                                                      n: int) -> None:
    g = norm_graph()
    space = space_of(g)
    program = build(from_genome(space, scheduled(space, values), g.dims))
    data = profiling_inputs(g, {"n": n}, 0)
    got = program([data[name] for name in program.layout.input_names], {"n": n})
    for a, w, o in zip(got, run_hlir(g, data, {"n": n}), g.outputs, strict=True):
        assert matches(a, w, g.nodes[o].dtype)


def batched_matvec(qtype: str | None = "Q4_1") -> tuple[lumos.Graph, dict]:
    """x (b, 256) @ W.T, W (40, 256) f32 or packed and unpacked in the graph: each row of the
    batch reads the same weights."""
    from lumos.io.quantize import quantize
    from lumos.nn.quant import dequantize, part_dtypes

    rng = np.random.default_rng(0)
    w = rng.standard_normal((40, 256)).astype(np.float32)
    g = lumos.Graph()
    g.dim("b", 1, 16)
    x = g.tensor(("b", 256), lumos.f32, "x")
    if qtype is None:
        wt, data = g.tensor(w.shape, lumos.f32, "w", weight=True), {"w": w}
    else:
        packed, dt = quantize(qtype, w), part_dtypes(qtype)
        parts = {k: g.tensor(a.shape, dt[k], f"w.{k}", weight=True)
                 for k, a in packed.parts.items()}
        wt, data = dequantize(qtype, parts), {f"w.{k}": a for k, a in packed.parts.items()}
    (x @ wt.T).output()
    return g, data


@pytest.mark.parametrize("qtype", ["Q4_1", "Q4_K"])
@pytest.mark.parametrize("jam", JAM_VALUES)
def test_a_batched_product_jammed_computes_what_the_oracle_does(qtype: str,
                                                                jam: int) -> None:
    """Each jam, at batch sizes below, at and past it (a last group of fewer rows)."""
    g, weights = batched_matvec(qtype)
    space = space_of(g)
    made = Genomes(space)  # the fused seed's program (the unpacking inlined), that jam
    genome = made.preferring(seeds(space, {"b": 8}, made, frozenset(weights), g.dims)[1],
                             random.Random(0))
    for c, i in list(genome.items()):
        n = space.classes[c][i]
        if n.op == "KSumReduce":
            genome[c] = next(k for k, m in enumerate(space.classes[c]) if m.op == n.op and
                             m.children == n.children and schedule(m) == schedule(n)[:3] + (jam,))
    kernels = from_genome(space, genome, g.dims)
    assert jam in kernels.jam.values()
    units, _ = generate(kernels)
    code = "\n".join(u[1] for u in units if not isinstance(u, str))
    assert (f"z0 += {jam})" in code) == (jam > 1)
    # a last group of fewer rows: in groups of 4, 2 and 1
    assert [p for p in (4, 2, 1) if f"(zleft & {p})" in code] == [p for p in (4, 2, 1) if p < jam]
    program = build(kernels)
    for b in (1, 3, 6, 8, 11):
        data = profiling_inputs(g, {"b": b}, 0) | weights
        got = program([data[name] for name in program.layout.input_names], {"b": b})
        for a, w, o in zip(got, run_hlir(g, data, {"b": b}), g.outputs, strict=True):
            assert matches(a, w, g.nodes[o].dtype), (b, np.abs(a - w).max())


def test_the_seeds_jam_a_batched_product_up_to_its_batch() -> None:
    """... of packed weights (unpacked once for the rows), not of f32 ones."""
    g, weights = batched_matvec()
    space = space_of(g)
    made = Genomes(space)
    for b, want in ((1, 1), (3, 2), (8, 8), (16, 8)):
        fused = seeds(space, {"b": b}, made, frozenset(weights), g.dims)[1]
        chosen = [n for _, n in extract(space, made.preferring(fused, random.Random(0)))
                  if n.op == "KSumReduce"]
        assert chosen and {schedule(n)[3] for n in chosen} == {want}, b
    g, weights = batched_matvec(None)
    space = space_of(g)
    made = Genomes(space)
    fused = seeds(space, {"b": 8}, made, frozenset(weights), g.dims)[1]
    assert {schedule(n)[3] for _, n in extract(space, made.preferring(fused, random.Random(0)))
            if n.op == "KSumReduce"} == {1}


def test_jam_is_offered_where_a_factor_reads_the_same_along_the_first_axis() -> None:
    """x @ W.T of a batch, W unpacked: offered; W as it lies, or a batch of products each
    of its own (attention's): not."""
    def jams(g: lumos.Graph) -> set[int]:
        return {schedule(n)[3] for alts in space_of(g).classes for n in alts
                if n.op == "KSumReduce"}

    assert jams(batched_matvec()[0]) == set(JAM_VALUES)
    assert jams(batched_matvec(None)[0]) == {1}
    g = lumos.Graph()
    g.dim("b", 1, 16)
    a, c = g.tensor(("b", 8, 32), lumos.f32, "a"), g.tensor(("b", 32, 16), lumos.f32, "c")
    (a @ c).output()
    assert jams(g) == {1}


def channels_last_window() -> lumos.Graph:
    """A 3-tap window along the rows of x (b, c, h, w), zero-padded, written channels-last
    (b, h, w, c) with a bias per channel (a depthwise convolution's map in a permute), then
    mixed across channels by a product."""
    g = lumos.Graph()
    n = g.dim("n", 1, 64)
    x = g.tensor((2, 5, 3, n), lumos.f32, "x").pad((1, 1))
    w, bias = g.tensor((5, 3), lumos.f32, "w"), g.tensor((5,), lumos.f32, "bias")
    y = sum((x[:, :, :, t:t + n] * w[:, t].reshape((5, 1, 1)) for t in range(3)),
            bias.reshape((5, 1, 1)))
    mix = g.tensor((5, 8), lumos.f32, "mix")
    ((y.permute((0, 2, 3, 1)) * 2 + 1) @ mix).output()  # (a product's factor: stored)
    return g


def with_inner(space: lumos.egraph.SearchSpace, genome: dict[int, int],
               axis: int) -> dict[int, int]:
    """`genome` with each map's vector loop along `axis` where it is offered."""
    out = dict(genome)
    for c, i in genome.items():
        n = space.classes[c][i]
        if n.op == "KMap":
            out[c] = next((k for k, m in enumerate(space.classes[c]) if m.op == "KMap" and
                           m.children == n.children and schedule(m)[2] == axis), i)
    return out


def test_the_seeds_run_a_channels_last_window_along_its_input_rows() -> None:
    """The seeds' map computing the window in the permute has its vector loop along w (the
    input's rows: axis 2 of its output), not along c (its output's rows, read a whole
    plane apart); its code loops over w innermost and computes what the oracle does."""
    g = channels_last_window()
    space = space_of(g)
    made = Genomes(space)
    fused = made.preferring(seeds(space, {"n": 40}, made, bounds=g.dims)[1],
                            random.Random(0))
    kernels = from_genome(space, fused, g.dims)
    maps = [i for i in kernels.inner if str(kernels.nodes[i].shape) == "(2, 3, n, 5)"]
    assert maps and all(kernels.inner[i] == 2 for i in maps)
    units, _ = generate(kernels)
    code = "\n".join(u[1] for u in units if not isinstance(u, str))
    assert "for (int64_t z2 = lo; z2 < " in code and "for (int64_t z3 = 0; z3 < 5; " in code
    program = build(kernels)
    data = profiling_inputs(g, {"n": 40}, 0)
    got = program([data[name] for name in program.layout.input_names], {"n": 40})
    for a, w, o in zip(got, run_hlir(g, data, {"n": 40}), g.outputs, strict=True):
        assert matches(a, w, g.nodes[o].dtype)


@settings(max_examples=8, deadline=None)
@given(axis=st.sampled_from([INNER_LAST, 0, 1, 2]), n=st.sampled_from([1, 2, 17, 61]),
       fuse=st.booleans())
def test_every_inner_axis_computes_what_the_oracle_does(axis: int, n: int,
                                                        fuse: bool) -> None:
    """Each map's vector loop along any axis, the window fused into the permute or not, at
    rows shorter than the window and past a vector."""
    g = channels_last_window()
    space = space_of(g)
    made = Genomes(space)
    genome = made.preferring(seeds(space, {"n": 40}, made, bounds=g.dims)[int(fuse)],
                             random.Random(0))
    program = build(from_genome(space, with_inner(space, genome, axis), g.dims))
    data = profiling_inputs(g, {"n": n}, 0)
    got = program([data[name] for name in program.layout.input_names], {"n": n})
    for a, w, o in zip(got, run_hlir(g, data, {"n": n}), g.outputs, strict=True):
        assert matches(a, w, g.nodes[o].dtype)
