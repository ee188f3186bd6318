"""Fusion is a choice in the e-graph (lower_cpu.egg): the rules offer, for every load of an
elementwise producer, the producer computed inline; some genome of each graph below runs
in the stated number of kernels, and every genome computes what the oracle computes."""

from __future__ import annotations

import random
import re

import numpy as np
import pytest

import lumos
from lumos.egraph import build_spaces
from lumos.egraph.testing import RuleCheck
from lumos.runtime.cpu import build
from lumos.runtime.cpu.codegen import generate
from lumos.runtime.cpu.kernels import RULES, cpu_space, from_genome
from lumos.runtime.cpu.tune import matches, profiling_inputs
from lumos.runtime.reference import run_hlir
from lumos.search import Genomes


def fused(space: lumos.egraph.SearchSpace) -> dict[int, int]:
    """The genome that inlines wherever the space allows (products stay kernels, and
    kernels are not computed in bands by their readers)."""
    choice = {c: next((i for i, n in enumerate(alts) if n.op.startswith("E")
                       and n.op not in ("ELoad", "EGemm", "EGemmOwn", "ERows")), 0)
              for c, alts in enumerate(space.classes)}
    return Genomes(space).repair(choice, random.Random(0))


def run_genome(g: lumos.Graph, space: lumos.egraph.SearchSpace,
               genome: dict[int, int]) -> int:
    """Checks the genome's program against the oracle; returns its number of C kernels."""
    program = build(from_genome(space, genome, g.dims))
    data = profiling_inputs(g, {}, 0)
    got = program([data[name] for name in program.layout.input_names], {})
    for a, w, o in zip(got, run_hlir(g, data, {}), g.outputs, strict=True):
        assert matches(a, w, g.nodes[o].dtype)
    return program.layout.calls


def graph(make) -> lumos.Graph:
    g = lumos.Graph()
    make(g).output()
    return g


def space_of(g: lumos.Graph) -> lumos.egraph.SearchSpace:
    (space,) = build_spaces(g, [{}], RULES)
    return cpu_space(space)


CASES = {  # name: (graph builder, kernels of the most fused genome, kernels unfused)
    "chain": (lambda g: ((g.tensor((64, 33), lumos.f32, "x") * 2 + 1).exp() * 0.5
                         - 0.25).sqrt(), 1, 7),
    "relu_exp": (lambda g: (g.tensor((100,), lumos.f32, "x") * 2 + 1).relu().exp(), 1, 5),
    # max reductions read through padding, inlined: guarded (nothing read outside)
    "relu6_padded": (lambda g: (lumos.clamp(g.tensor((9, 7), lumos.f32, "x") * 2, 0.0, 6.0)
                                .pad((2, 1)).T + 1).exp(), 1, 11),
    "softmax": (lambda g: g.tensor((16, 40), lumos.f32, "x").softmax(1), 3, 8),
    "rms_norm": (lambda g: lumos.rms_norm(g.tensor((8, 64), lumos.f32, "x"), (64,),
                                          g.tensor((64,), lumos.f32, "w")), 2, 9),
    "matmul": (lambda g: g.tensor((12, 20), lumos.f32, "a") @ g.tensor((20, 7), lumos.f32,
                                                                       "b"), 1, 2),
    "padded_int": (lambda g: ((g.tensor((5, 6), lumos.i32, "x") + 3).flip(1).pad((1, 2))
                              * 5).T, 1, 3),
    # where: a Gather from the two operands stacked, computed by its reader as a select
    "where": (lambda g: (lambda x: lumos.where(x > 0, x * 2.0, (x * 3.0).exp()))(
        g.tensor((6, 35), lumos.f32, "x")), 1, 16),
    # ... a broadcast condition and operand
    "where_broadcast": (lambda g: lumos.where(g.tensor((1, 35), lumos.bool_, "c"),
                                              g.tensor((6, 35), lumos.f32, "x") * 2.0,
                                              g.tensor((35,), lumos.f32, "y")) + 1, 1, 13),
}


@pytest.mark.parametrize("name", CASES)
def test_some_genome_fuses(name: str) -> None:
    make, most, unfused = CASES[name]
    g = graph(make)
    space = space_of(g)
    counts = (run_genome(g, space, fused(space)),
              run_genome(g, space, Genomes(space).baseline(random.Random(0))))
    assert counts == (most, unfused)


@pytest.mark.parametrize("name", CASES)
def test_random_genomes_match_the_oracle(name: str) -> None:
    g = graph(CASES[name][0])
    space = space_of(g)
    rng = random.Random(1)
    for _ in range(4):
        run_genome(g, space, Genomes(space).random(rng))


def test_a_select_keeps_what_the_branch_not_taken_holds_out() -> None:
    """where as a select (ESelect) computes both operands and keeps one: NaN, inf and -0.0
    in either operand reach the result only where selected, as in the oracle."""
    g = lumos.Graph()
    x, y = g.tensor((4, 33), lumos.f32, "x"), g.tensor((4, 33), lumos.f32, "y")
    lumos.where(x > 0, y * x, (y * 1e30) * 1e30).output()  # (the other branch overflows)
    space = space_of(g)
    genome = fused(space)
    program = build(from_genome(space, genome, g.dims))
    assert program.layout.calls == 1
    rng = np.random.default_rng(3)
    a, b = (rng.standard_normal((4, 33)).astype(np.float32) for _ in range(2))
    a[0, :6], b[0, :6] = [1, -1, 1, -1, 1, -0.0], [np.nan, 2, np.inf, np.nan, -0.0, 3]
    data = {"x": a, "y": b}
    (got,) = program([data[name] for name in program.layout.input_names], {})
    (want,) = run_hlir(g, data, {})
    np.testing.assert_array_equal(got, want)
    assert np.signbit(got[0, 4]) and np.isnan(got[0, 0]) and np.isinf(got[0, 1])


def test_only_a_gather_at_known_positions_is_a_select() -> None:
    """The select rule needs both positions known without data (Iotas): a Gather at
    positions read from a tensor (an embedding lookup) keeps its kernel."""
    g = lumos.Graph()
    x = g.tensor((5, 8), lumos.f32, "x")
    w = lumos.where(x > 0, x, x * 2.0)
    table = g.tensor((10, 8), lumos.f32, "t")
    idx = g.tensor((3,), lumos.i64, "i")
    (w.exp() + 1).output()
    table[idx].exp().output()
    rc = RuleCheck(RULES, graph=g)
    assert rc.check("(= r (Op (ESelect c) a))")
    selected = "(= g (Op (HGather sh vi vd) (ICons ix (ICons d (INil))))) " \
        "(= r (Op (ELoad c) (ICons g (INil)))) (= r (Op (ESelect c2) a))"
    assert rc.check(selected)
    assert not rc.check(selected + " (= d (Op (HInput s dt n) (INil)))")  # (the table)


def test_truth_values_are_computed_in_int() -> None:
    """codegen.value_type: the bool locals of a fused kernel are ints (GCC 12 vectorizes no
    loop of uint8_t truth values: a row-wise `any` of NaN tests, 150 -> 16 us), stored as
    bytes; the results the oracle's."""
    def make(g: lumos.Graph) -> lumos.Tensor:
        s = g.tensor((64, 128), lumos.f32, "x") + g.tensor((64, 128), lumos.f32, "y")
        return lumos.logical_not(lumos.isnan(s) | (s < -1.0)).amax(1)
    g = graph(make)
    space = space_of(g)
    genome = fused(space)
    assert run_genome(g, space, genome) == 1
    text = build(from_genome(space, genome, g.dims)).source.read_text()
    assert "const int h" in text and "const uint8_t h" not in text


def test_rule_offers_the_producer_inline() -> None:
    g = lumos.Graph()
    x = g.tensor((4,), lumos.f32, "x")
    (x.exp2() + 1).output()
    rc = RuleCheck(RULES, graph=g)
    view = "(V (ECons (Num 4) (ENil)) (Z 0 (Num 4)) (Num 1))"
    load_exp = f"(Op (ELoad (Top {view})) (ICons e (INil)))"
    assert rc.check(f"(= e (Op (HExp2 s v) (ICons x (INil)))) (= l {load_exp}) "
                    f"(= l (Op (EExp2 (Top {view})) (ICons (Op (ELoad (Then v (Top {view}))) "
                    "(ICons x (INil))) (INil))))")
    assert not rc.check(f"(= e (Op (HInput s d n) (INil))) (= l {load_exp}) "
                        "(= l (Op (EExp2 c) a))")  # an input is never inlined


def quantized_gemv(qtype: str, dtype: lumos.DType = lumos.f32, padded: bool = False):
    """x @ W.T with W packed as `qtype` (dequantized in the graph), `dtype` activations
    (`padded`: x read with a zero row after its two, so its loads are guarded)."""
    from lumos.nn.quant import FORMATS, dequantize, part_dtypes, part_shapes

    def make(g: lumos.Graph) -> lumos.Tensor:
        n = 3 * FORMATS[qtype].block
        dts = part_dtypes(qtype)
        parts = {p: g.tensor(s, dts[p], p) for p, s in part_shapes(qtype, (5, n)).items()}
        x = g.tensor((2, n), dtype, "x")
        x = x.pad((0, 0, 0, 1)) if padded else x
        return x.to(lumos.f32) @ dequantize(qtype, parts).T
    return make


@pytest.mark.parametrize("qtype, dtype, padded", [
    ("Q8_0", lumos.f32, False), ("Q4_0", lumos.f32, False), ("Q4_1", lumos.f32, False),
    ("Q8_0", lumos.i16, False), ("Q4_1", lumos.f32, True)])
def test_block_reductions_are_written_as_vectors(qtype: str, dtype: lumos.DType,
                                                 padded: bool) -> None:
    """A fused matrix-vector product over packed blocks splits its reduction at the blocks
    (32) and nibble halves (16): the 16-lane loops are GCC vector code (codegen.vector),
    reading bytes and widening them, and compute what the oracle computes."""
    g = graph(quantized_gemv(qtype, dtype, padded))
    space = space_of(g)
    genome = fused(space)
    _, *kernels = generate(from_genome(space, genome, g.dims))[0]
    assert any("vector_size" in text for _, text in kernels)  # (the prelude's typedefs too)
    run_genome(g, space, genome)
    rng = random.Random(2)  # partly fused: loads guarded by the stacked nibble halves
    for _ in range(6):
        run_genome(g, space, Genomes(space).random(rng))


@pytest.mark.parametrize("qtype", ["Q5_0", "Q5_1", "Q4_K", "Q5_K", "Q6_K"])
def test_the_other_packed_formats_through_the_generated_c(qtype: str) -> None:
    """The formats with high bits and sub-block scales: fused, and fused in part, their
    products compute what the oracle computes."""
    g = graph(quantized_gemv(qtype))
    space = space_of(g)
    run_genome(g, space, fused(space))
    rng = random.Random(3)
    for _ in range(4):
        run_genome(g, space, Genomes(space).random(rng))


def test_guarded_rows_read_the_data_or_zeros_block_by_block() -> None:
    """Rows of padding along an outer axis: each block of the output loop (BLOCK elements)
    reads one row pointer, the data's or lumos_zero_row (codegen.read), at its offset."""
    from lumos.runtime.cpu.codegen import BLOCK
    g = graph(lambda g: (g.tensor((3, BLOCK + 52), lumos.f32, "x").pad((0, 0, 1, 2)) * 2
                         + 1).exp())
    space = space_of(g)
    for genome in (fused(space), Genomes(space).baseline(random.Random(0))):
        _, *kernels = generate(from_genome(space, genome, g.dims))[0]
        assert any("lumos_zero_row)" in text for _, text in kernels)
        run_genome(g, space, genome)


def _window_sum(width: int, rows: int = 5) -> lumos.Graph:
    """A 7-tap window along the last axis over a zero-padded row (a depthwise
    convolution's row), weighted per tap, with a sin after it (one fused Map)."""
    def make(g: lumos.Graph) -> lumos.Tensor:
        x = g.tensor((rows, width), lumos.f32, "x").pad((3, 3))
        w = g.tensor((7,), lumos.f32, "w")
        return sum((x[:, t:t + width] * w[t] for t in range(7)),
                   g.tensor((rows, 1), lumos.f32, "b")).sin()
    return graph(make)


@pytest.mark.parametrize("width", [1, 4, 6, 7, 31, 97])
def test_padded_windows_split_the_row_at_its_interior(width: int) -> None:
    """A fused kernel reading a padded row computes its interior (where no tap reads
    padding) in a loop of its own with its guards folded away, and its two edges as
    guarded; on rows too short to have an interior, too. Each equals the oracle."""
    g = _window_sum(width)
    space = space_of(g)
    genome = fused(space)
    _, *kernels = generate(from_genome(space, genome, g.dims))[0]
    interior = [text for _, text in kernels if "LUMOS_MAX(lo, 3)" in text]
    assert bool(interior) == (width > 6)
    assert run_genome(g, space, genome) == 1


def _plain_loops(text: str) -> list[list[str]]:
    """The bodies of the kernel's innermost loops that read no guarded element and
    compute no x // n or x % n."""
    lines, out = text.splitlines(), []
    for k, line in enumerate(lines):
        if line.strip().startswith("for (int64_t z") and line.rstrip().endswith("{"):
            body = []
            for b in lines[k + 1:]:
                if b.strip() == "}":
                    break
                body.append(b)
            if body and not any("for (" in b or "?" in b or "LUMOS_F" in b for b in body):
                out.append(body)
    return out


@pytest.mark.parametrize(("shape", "pads"), [((2, 5, 6, 6), (3, 3, 3, 3)),
                                             ((1, 3, 7, 5), (1, 2, 0, 1))])
def test_a_padded_copy_of_a_reshaped_map_reads_its_interior_plainly(
        shape: tuple[int, ...], pads: tuple[int, ...]) -> None:
    """A padded copy of (x + a per-channel bias), x stored as (n, c, h * w): where the
    row's guard on the outer image row holds, the interior is rendered again with that
    row's bounds narrowed, so the bias' channel (x // (h * w) + c) % c) and the guards
    fold away and the loop is plain loads; fused or not, it equals the oracle."""
    n, c, h, w = shape

    def make(g: lumos.Graph) -> lumos.Tensor:
        x = g.tensor((n, c, h * w), lumos.f32, "x")
        return (x + g.tensor((c, 1), lumos.f32, "b")).reshape(shape).pad(pads) * 2
    g = graph(make)
    space = space_of(g)
    genome = fused(space)
    _, *kernels = generate(from_genome(space, genome, g.dims))[0]
    assert any(_plain_loops(text) for _, text in kernels)
    assert run_genome(g, space, genome) == 1
    rng = random.Random(4)
    for _ in range(3):
        run_genome(g, space, Genomes(space).random(rng))


@pytest.mark.parametrize(("channels", "size"), [(3, 5), (1, 7), (4, 16), (3, 3)])
def test_a_merged_axis_loops_over_its_parts_without_dividing(channels: int,
                                                             size: int) -> None:
    """A map over images' positions merged into one axis, read from NCHW (as an im2col
    copy of a channels-last view reads them: image z // (size * size), position
    z % (size * size)) loops over the axis' parts instead, its batch symbolic: no
    element divides, and the result equals the oracle at batch 1 and 3."""
    g = lumos.Graph()
    g.dim("b", 1, 4)
    x = g.tensor(("b", channels, size, size), lumos.f32, "x")
    (x.permute(0, 2, 3, 1).reshape(-1, channels) * 2).output()
    space = space_of(g)
    genome = Genomes(space).baseline(random.Random(0))
    _, *kernels = generate(from_genome(space, genome, g.dims))[0]
    division = re.compile(r"\bz\d+\)? *[/%] *\d")
    assert kernels and not [text for _, text in kernels if division.search(text)]
    program = build(from_genome(space, genome, g.dims))
    for b in (1, 3):
        data = profiling_inputs(g, {"b": b}, 0)
        got = program([data[name] for name in program.layout.input_names], {"b": b})
        for a, w, o in zip(got, run_hlir(g, data, {"b": b}), g.outputs, strict=True):
            assert matches(a, w, g.nodes[o].dtype)
