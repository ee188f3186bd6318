"""A matmul is also a BLAS call (lower_cpu.egg's KGemm, kernels.gemm): an f32 sum over a
product of two strided matrices has a genome that runs it as cblas_sgemm, that genome
computes what the oracle computes, and the timed search tries it (the BLAS seed)."""

from __future__ import annotations

import random
import re

import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

import lumos
from lumos.egraph import build_spaces
from lumos.graph import live_nodes
from lumos.models.mobilenet import relu6
from lumos.nn.conv import conv2d
from lumos.runtime.cpu import CpuRuntime, build, cc
from lumos.runtime.cpu import kernels as cpu_kernels
from lumos.runtime.cpu import program as program_module
from lumos.runtime.cpu.cc import UnsupportedProgram
from lumos.runtime.cpu.kernels import (
    RULES,
    Reduce,
    cpu_space,
    from_genome,
    gemm,
    seeds,
    tiles,
)
from lumos.runtime.cpu.tune import matches, profiling_inputs
from lumos.runtime.reference import run_hlir
from lumos.search import CompileOptions, Genomes
from lumos.shape import sym

CASES = {  # name: (graph builder, whether a Gemm genome reading the factors where they lie
    # exists)
    "matmul": (lambda g: g.tensor((12, 20), lumos.f32, "a") @ g.tensor((20, 7), lumos.f32,
                                                                       "b"), True),
    "linear": (lambda g: lumos.linear(g.tensor((12, 20), lumos.f32, "x"),
                                      g.tensor((7, 20), lumos.f32, "w")), True),
    "transposed_a": (lambda g: g.tensor((20, 12), lumos.f32, "a").T
                     @ g.tensor((20, 7), lumos.f32, "b"), True),
    "broadcast_batch": (lambda g: g.tensor((3, 12, 20), lumos.f32, "a")
                        @ g.tensor((20, 7), lumos.f32, "b"), True),
    "batched": (lambda g: g.tensor((2, 3, 5, 6), lumos.f32, "a")
                @ g.tensor((1, 3, 6, 4), lumos.f32, "b").expand(2, 3, 6, 4), True),
    "sliced_rows": (lambda g: g.tensor((12, 30), lumos.f32, "a")[:, 5:25]
                    @ g.tensor((20, 7), lumos.f32, "b"), True),
    "merged_rows": (lambda g: g.tensor((2, 3, 5, 20), lumos.f32, "a")
                    @ g.tensor((20, 7), lumos.f32, "b"), True),
    "sliced_merged_rows": (lambda g: g.tensor((3, 5, 30), lumos.f32, "a")[:, :, 4:24]
                           @ g.tensor((20, 7), lumos.f32, "b"), True),
    "gapped_batch": (lambda g: g.tensor((3, 6, 20), lumos.f32, "a")[:, :5]
                     @ g.tensor((20, 7), lumos.f32, "b"), True),
    "interleaved_batch": (lambda g: g.tensor((5, 3, 20), lumos.f32, "a").transpose(0, 1)
                          @ g.tensor((20, 7), lumos.f32, "b"), True),
    "transposed_batch": (lambda g: g.tensor((3, 20, 12), lumos.f32, "a").mT
                         @ g.tensor((20, 7), lumos.f32, "b"), True),
    "symbolic_rows": (lambda g: g.tensor(("b", "s", 20), lumos.f32, "a")
                      @ g.tensor((20, 7), lumos.f32, "b"), True),
    "heads_out": (lambda g: heads_out(g.tensor((2, 3, 5, 6), lumos.f32, "p"),
                                      g.tensor((2, 6, 3, 4), lumos.f32, "v")), True),
    "k1_outer": (lambda g: g.tensor((3, 5, 1), lumos.f32, "a")
                 @ g.tensor((1, 7), lumos.f32, "b"), True),
    "k1_broadcast_rows": (lambda g: g.tensor((3, 1, 1), lumos.f32, "a").expand(3, 5, 1)
                          @ g.tensor((1, 7), lumos.f32, "b"), True),  # rows: not the 5
    # products large enough to be split over the threads (lumos_sgemm): by rows, by
    # columns (not a multiple of the 16-column step), with transposed operands
    "split_rows": (lambda g: g.tensor((300, 64), lumos.f32, "a")
                   @ g.tensor((64, 40), lumos.f32, "b"), True),
    "split_rows_transposed_a": (lambda g: g.tensor((64, 300), lumos.f32, "a").T
                                @ g.tensor((64, 40), lumos.f32, "b"), True),
    "split_columns": (lambda g: g.tensor((9, 64), lumos.f32, "a")
                      @ g.tensor((64, 300), lumos.f32, "b"), True),
    "split_columns_transposed_b": (lambda g: lumos.linear(g.tensor((9, 64), lumos.f32, "x"),
                                                          g.tensor((300, 64), lumos.f32, "w")),
                                   True),
    # B stored transposed (lumos_gemm_rows): A's rows in blocks of 16 (4 at a time, then
    # a partial one), k not a multiple of the 16 transposed in registers nor of the 4
    # unrolled, a last block of 2 columns; A read transposed too
    "linear_blocks": (lambda g: lumos.linear(g.tensor((70, 37), lumos.f32, "x"),
                                             g.tensor((98, 37), lumos.f32, "w")), True),
    "linear_transposed_a": (lambda g: lumos.linear(g.tensor((37, 40), lumos.f32, "x").T,
                                                   g.tensor((50, 37), lumos.f32, "w")), True),
    # ... 4 whole blocks of rows by 2 column blocks, k shorter than the unrolled 4; two rows
    "linear_k3": (lambda g: lumos.linear(g.tensor((64, 3), lumos.f32, "x"),
                                         g.tensor((32, 3), lumos.f32, "w")), True),
    "linear_two_rows": (lambda g: lumos.linear(g.tensor((2, 20), lumos.f32, "x"),
                                               g.tensor((40, 20), lumos.f32, "w")), True),
    # ... and more rows than it takes (kernels.ROWS_MAX_M): B copied into panels
    "linear_tall": (lambda g: lumos.linear(g.tensor((600, 37), lumos.f32, "x"),
                                           g.tensor((50, 37), lumos.f32, "w")), True),
    "parallel_rows": (lambda g: g.tensor((600, 64), lumos.f32, "a")  # row blocks on threads
                      @ g.tensor((64, 100), lumos.f32, "b"), True),
    "f64": (lambda g: g.tensor((12, 20), lumos.f64, "a") @ g.tensor((20, 7), lumos.f64,
                                                                    "b"), False),
    "strided_k": (lambda g: g.tensor((12, 40), lumos.f32, "a")[:, ::2]
                  @ g.tensor((20, 7), lumos.f32, "b"), False),
    "padded": (lambda g: g.tensor((12, 18), lumos.f32, "a").pad((1, 1))
               @ g.tensor((20, 7), lumos.f32, "b"), False),
}


# batch axes each case's Gemm keeps (the others are merged into its rows)
BATCH_LEFT = {"broadcast_batch": 0, "batched": 2, "merged_rows": 0, "sliced_merged_rows": 0,
              "gapped_batch": 1, "interleaved_batch": 1, "transposed_batch": 1, "symbolic_rows": 0,
              "heads_out": 2, "k1_broadcast_rows": 1}
ENV = {"b": 3, "s": 5}


def heads_out(p: lumos.Tensor, v: lumos.Tensor) -> lumos.Tensor:
    """out[b, s, h, e] = sum_k p[b, h, s, k] v[b, k, h, e]: attention's P @ V written with
    the heads inside each row (rows s, C's row stride h*e, not e)."""
    return (p.permute(0, 2, 1, 3).unsqueeze(3) * v.permute(0, 2, 3, 1).unsqueeze(1)).sum(-1)


def space_and_graph(make, amx: bool = False) -> tuple[lumos.Graph, lumos.egraph.SearchSpace]:
    g = lumos.Graph()
    g.dim("b", 1, 8)
    g.dim("s", 1, 64)
    make(g).output()
    (space,) = build_spaces(g, [{}], RULES)
    return g, cpu_space(space, amx=amx)


needs_amx = pytest.mark.skipif(not cc.amx(), reason="no AMX tiles on this CPU or compiler")
KINDS = {"KGemm": "", "KGemmOwn": "_own", "KGemmAmx": "_amx"}  # e-node: its lumos_sgemm


@pytest.mark.parametrize("kind", [pytest.param(k, marks=needs_amx) if k == "KGemmAmx" else k
                                  for k in KINDS])
@pytest.mark.parametrize("name", CASES)
def test_gemm_genome_matches_the_oracle(name: str, kind: str) -> None:
    """Each layout's product by OpenBLAS, by lumos_gemm_own (KGemmOwn) or as bf16x3 on AMX
    tiles (KGemmAmx): transposed factors, batches, k = 1, columns fewer than a vector (7),
    more than a panel of 64 (300), rows not a multiple of a block's, split over the threads
    by rows or columns."""
    make, expected = CASES[name]
    g, space = space_and_graph(make, amx=True)
    gemms = {c: i for c, alts in enumerate(space.classes) for i, n in enumerate(alts)
             if n.op == kind and copied(space, n) == 0}
    assert bool(gemms) == expected
    if not gemms:
        return
    genome = with_choices(space, gemms)
    kernels = from_genome(space, genome, g.dims)
    (layout,) = [gemm(n.views, n.axis, g.dims) for n in kernels.nodes if n.op == "Gemm"]
    assert layout is not None and len(layout.batch) == BATCH_LEFT.get(name, 0)
    calls = re.findall(r"lumos_sgemm(_own|_amx)?\(\d, \d, ", checked_source(g, kernels))
    assert calls and all(c == KINDS[kind] for c in calls)


def with_choices(space: lumos.egraph.SearchSpace, choice: dict[int, int]) -> dict[int, int]:
    """The baseline genome (each class's first alternative) with `choice` made."""
    made = Genomes(space)
    return made.repair(made.baseline(random.Random(0)) | choice, random.Random(0))


def prefer(space: lumos.egraph.SearchSpace, cost) -> dict[int, int]:
    """The genome of least `cost` in each class, products of copied factors (KCopy) after
    those reading their factors where they lie."""
    return Genomes(space).preferring(lambda c, n: cost(c, n) + 10.0 * copied(space, n),
                                     random.Random(0))


def copied(space: lumos.egraph.SearchSpace, n) -> int:
    """How many factors of a product e-node are first copied (KCopy)."""
    return sum(any(m.op == "KCopy" for m in space.classes[ch]) for ch in n.children)


@pytest.mark.parametrize("name", [n for n in CASES if n != "f64"])
def test_a_factor_read_through_any_view_is_also_copied_for_a_product(name: str) -> None:
    """Every f32 product also has the alternative of its factors copied first (KCopy:
    contiguous, over the axes each depends on), one or both: a strided k, a padded factor,
    heads merged through a transposed view are then BLAS products too."""
    g, space = space_and_graph(CASES[name][0])
    for both in (False, True):
        pick = {c: i for c, alts in enumerate(space.classes) for i, n in enumerate(alts)
                if n.op == "KGemm" and copied(space, n) == 1 + both}
        assert pick
        kernels = from_genome(space, with_choices(space, pick), g.dims)
        assert sum(n.op == "Gemm" for n in kernels.nodes) == 1
        assert sum(n.op == "Map" for n in kernels.nodes) == 1 + both  # the copies
        assert "lumos_sgemm(" in checked_source(g, kernels)


def test_the_demo_blocks_output_projection_is_a_product_of_a_copy() -> None:
    """lumos.demo's attention merges its heads through a transposed view, which no strided
    matrix reads: the output projection's BLAS alternative copies that factor first."""
    from lumos.demo import build as demo_block

    g, _, _ = demo_block(64, 4)
    (space,) = build_spaces(g, [{"s": (8, 8)}], RULES)
    space = cpu_space(space, {"s": (8, 8)})
    sums = [alts for alts in space.classes if alts[0].op == "KSumReduce"
            and alts[0].fields[0] == (sym(8), sym(64)) and any(n.op == "KGemm" for n in alts)]
    assert sums and all(any(n.op == "KGemm" and copied(space, n) for n in alts)
                        for alts in sums)
    assert any(not any(n.op == "KGemm" and not copied(space, n) for n in alts)
               for alts in sums)  # (the projection: no product reads the heads as they lie)


def test_a_space_offers_bf16x3_products_only_when_told() -> None:
    """KGemmAmx (PyTorch's "high" float32 matmul precision), and a convolution's
    KGemmWindowsAmx and EGemmWindowsAmx, are in the CPU space only where
    CompileOptions.matmul_precision allows it (cpu_space's `amx`)."""
    for amx in (False, True):
        _, space = space_and_graph(CASES["matmul"][0], amx=amx)
        ops = {n.op for alts in space.classes for n in alts}
        assert ("KGemmAmx" in ops, "KGemm" in ops) == (amx, True)
        _, space = space_and_graph(conv_then("pool"), amx=amx)
        ops = {n.op for alts in space.classes for n in alts}
        assert ("KGemmWindowsAmx" in ops, "EGemmWindowsAmx" in ops) == (amx, amx)
        assert {"KGemmWindows", "EGemmWindows"} <= ops


@needs_amx
@pytest.mark.parametrize("ta,tb", [(False, False), (False, True), (True, False)])
def test_a_bf16x3_product_is_as_close_as_its_three_terms_make_it(ta: bool, tb: bool) -> None:
    """lumos_gemm_amx against float64: a relative error well under bfloat16's (~3e-3) and
    float's check (1e-4), but over float's own (~4e-7): the product did run in bf16x3 on
    the tiles, not as OpenBLAS' float product (its fallback without AMX). Sizes not
    multiples of its 32 x 32 blocks of C nor of its 32 k; split over the threads."""
    g = lumos.Graph()
    a = g.tensor((383, 301) if ta else (301, 383), lumos.f32, "a")
    b = g.tensor((250, 383) if tb else (383, 250), lumos.f32, "b")
    ((a.T if ta else a) @ (b.T if tb else b)).output()
    (space,) = build_spaces(g, [{}], RULES)
    space = cpu_space(space, amx=True)
    gemms = {c: i for c, alts in enumerate(space.classes) for i, n in enumerate(alts)
             if n.op == "KGemmAmx"}
    program = build(from_genome(space, with_choices(space, gemms), g.dims))
    assert "lumos_sgemm_amx(" in program.source.read_text()
    rng = np.random.default_rng(0)
    x, y = (rng.standard_normal(v.shape).astype(np.float32) for v in (a, b))
    (got,) = program([{"a": x, "b": y}[n] for n in program.layout.input_names], {})
    want = (x.T if ta else x).astype(np.float64) @ (y.T if tb else y).astype(np.float64)
    err = np.linalg.norm(got - want) / np.linalg.norm(want)
    assert 1e-6 < err < 2e-5, err


def checked_source(g: lumos.Graph, kernels) -> str:
    """The program's C, after checking what it computes against the oracle."""
    program = build(kernels)
    data = profiling_inputs(g, ENV, 0)
    got = program([data[n] for n in program.layout.input_names], ENV)
    for a, w, o in zip(got, run_hlir(g, data, ENV), g.outputs, strict=True):
        assert matches(a, w, g.nodes[o].dtype)
    return program.source.read_text()


def test_the_blas_seed_of_a_256_matmul_is_a_product(monkeypatch: pytest.MonkeyPatch) -> None:
    seen = []  # every candidate's sources: the search times the BLAS seed (which one wins
    real = program_module.generate  # is the benchmarks' business, not a test's)

    def generate(*args, **kwargs):
        units, layout = real(*args, **kwargs)
        seen.append("\n".join(u if isinstance(u, str) else u[1] for u in units[1:]))  # kernels
        return units, layout
    monkeypatch.setattr(program_module, "generate", generate)
    g = lumos.Graph()
    n = g.dim("n", 1, 512)
    a, b = g.tensor((n, n), lumos.f32, "a"), g.tensor((n, n), lumos.f32, "b")
    c = (a @ b).output()
    opts = CompileOptions(limit=3, generation_size=3, trials=1,
                          dim_buckets={"n": [(1, 512, 256)]})
    prog = g.compile(CpuRuntime(), opts)
    assert any(re.search(r"lumos_sgemm(_own)?\(\d", src) for src in seen)
    rng = np.random.default_rng(0)
    x, y = (rng.standard_normal((33, 33)).astype(np.float32) for _ in range(2))
    prog.set_data(a, x)
    prog.set_data(b, y)
    prog.execute()
    np.testing.assert_allclose(prog.get(c), x @ y, rtol=1e-4, atol=1e-4)


def test_the_blas_seed_multiplies_few_rows_by_a_stored_weight_itself() -> None:
    """A linear layer of a few rows (at most kernels.ROWS_MAX_M) by a weight too large for
    lumos_gemm_own's copy (1 MiB): the BLAS seed picks lumos' own kernel, which reads the
    weight's rows where they lie (lumos_gemm_rows); more rows (a batch counted whole), or
    the weight stored untransposed, OpenBLAS."""
    for rows, transposed, own in ((16, True, True), (128, True, True), (129, True, False),
                                  (("b", "s"), True, False), (16, False, False)):
        g = lumos.Graph()
        g.dim("b", 1, 8)
        g.dim("s", 1, 512)
        x = g.tensor((*rows, 64) if isinstance(rows, tuple) else (rows, 64), lumos.f32, "x")
        if transposed:
            lumos.linear(x, g.tensor((4096, 64), lumos.f32, "w")).output()
        else:
            (x @ g.tensor((64, 4096), lumos.f32, "w")).output()
        (space,) = build_spaces(g, [{}], RULES)
        space = cpu_space(space)
        env = {"b": 2, "s": 128}  # (the batch: 256 rows)
        genome = Genomes(space).preferring(seeds(space, env)[0], random.Random(0))
        chosen = [space.classes[c][i].op for c, i in genome.items()]
        assert ("KGemmOwn" in chosen, "KGemm" in chosen) == (own, not own), (rows, transposed)


def test_the_blas_seed_runs_large_products_as_bf16x3_where_the_space_allows() -> None:
    """Where the space offers KGemmAmx (matmul_precision "high", AMX), the BLAS seed takes
    it for a product of at least kernels.AMX_MIN_MACS multiply-adds a call, not for a
    smaller one nor for one lumos' own kernel takes (few rows by a stored weight)."""
    for rows, n, linear, amx in ((256, 384, False, True), (4, 64, False, False),
                                 (16, 384, True, False)):
        g = lumos.Graph()
        x = g.tensor((rows, 256), lumos.f32, "x")
        if linear:  # (lumos_gemm_rows reads the weight where it lies)
            lumos.linear(x, g.tensor((n, 256), lumos.f32, "w")).output()
        else:
            (x @ g.tensor((256, n), lumos.f32, "w")).output()
        (space,) = build_spaces(g, [{}], RULES)
        for offered in (False, True):
            s = cpu_space(space, amx=offered)
            genome = Genomes(s).preferring(seeds(s, {})[0], random.Random(0))
            chosen = {s.classes[c][i].op for c, i in genome.items()}
            assert ("KGemmAmx" in chosen) == (amx and offered), (rows, n, offered)


@needs_amx
def test_a_search_in_high_precision_times_a_bf16x3_program() -> None:
    """CompileOptions(matmul_precision="high") on a CPU with AMX: the search's BLAS seed
    runs the product on AMX tiles, and the compiled program, whichever candidate won,
    computes within float's check of the product."""
    seen: list[str] = []
    g = lumos.Graph()
    a, b = g.tensor((256, 320), lumos.f32, "a"), g.tensor((320, 384), lumos.f32, "b")
    c = (a @ b).output()
    real = program_module.generate

    def generate(*args, **kwargs):
        units, layout = real(*args, **kwargs)
        seen.append("\n".join(u if isinstance(u, str) else u[1] for u in units[1:]))
        return units, layout
    with pytest.MonkeyPatch.context() as m:
        m.setattr(program_module, "generate", generate)
        prog = g.compile(CpuRuntime(), CompileOptions(limit=2, trials=1, cache=False,
                                                      matmul_precision="high"))
    assert any("lumos_sgemm_amx(" in src for src in seen)
    rng = np.random.default_rng(0)
    x, y = rng.standard_normal((256, 320), np.float32), rng.standard_normal((320, 384), np.float32)
    prog.set_data(a, x)
    prog.set_data(b, y)
    prog.execute()
    np.testing.assert_allclose(prog.get(c), x.astype(np.float64) @ y, rtol=1e-4, atol=1e-3)


# -- a product run by the kernel reading it (lower_cpu.egg's EGemm, kernels.Tile) -----------

READERS = {  # name: (reader of the product y, whether codegen runs it in row blocks)
    "bias_relu6": (lambda y: lumos.clamp(y + y.graph.tensor((y.shape[-1],), lumos.f32,
                                                             "bias"), 0.0, 6.0), True),
    "row_sum": (lambda y: y.sum(-1), False),  # reads a row per output: the product first
}
TILED = ("matmul", "linear", "symbolic_rows", "split_rows", "split_rows_transposed_a",
         "split_columns_transposed_b", "sliced_rows", "parallel_rows")


def tiled_program(make, reader, own: bool = False) -> tuple[lumos.Graph, str, list]:
    """The genome reading every product through its reader's EGemm (EGemmOwn: by
    lumos_gemm_own), built and run on the profiling inputs against the oracle; the source
    and its kernel nodes."""
    g, space = space_and_graph(lambda g: reader(make(g)))
    op = "EGemmOwn" if own else "EGemm"
    assert any(n.op == op for alts in space.classes for n in alts)
    genome = prefer(space, lambda c, n: -float(n.op == op))
    kernels = from_genome(space, genome, g.dims)
    return g, checked_source(g, kernels), kernels.nodes


@pytest.mark.parametrize("own", [False, True])
@pytest.mark.parametrize("reader", READERS)
@pytest.mark.parametrize("name", [n for n in CASES if n in TILED or n in BATCH_LEFT])
def test_a_product_run_by_its_reader_matches_the_oracle(name: str, reader: str,
                                                        own: bool) -> None:
    """In row blocks where its reader is elementwise and its rows are the output's
    leading axes (lumos_tile: no Gemm kernel, no buffer for the product); in bands of the
    rows a band of the reader's lines reads where those lines are an axis of known size
    before its last (codegen.row_banded: a reader of whole rows, 3 x 12 or 2 x 3 x 5 sums);
    else the product whole into a scratch buffer just before the reader's loops (a batch
    of products, a reader of whole rows with one axis or a symbolic one). Each block by
    OpenBLAS or by lumos_gemm_own."""
    make, row_blocks = READERS[reader]
    _, source, nodes = tiled_program(CASES[name][0], make, own)
    assert not any(n.op == "Gemm" for n in nodes)
    blocks = row_blocks and BATCH_LEFT.get(name, 0) == 0
    bands = not row_blocks and name in ("broadcast_batch", "merged_rows", "sliced_merged_rows")
    assert ("t0 = lumos_tile(0, R" in source) == blocks
    assert ("const int64_t q0 = zq %" in source) == bands
    assert ("t0 = (float *)malloc(" in source) != (blocks or bands)
    mine = re.findall(r"lumos_gemm_own\(\d, \d, r1 - r0|lumos_sgemm_own\(\d", source)
    blas = re.findall(r"scipy_cblas_sgemm\(CblasRowMajor, \w+, \w+, \(blasint\)\(r1 - r0\)|"
                      r"lumos_sgemm\(\d", source)
    assert (mine, blas) == ((mine, []) if own else ([], blas)) and (mine or blas)


def test_a_transposed_read_of_a_product_is_no_tile() -> None:
    _, space = space_and_graph(lambda g: (g.tensor((12, 20), lumos.f32, "a")
                                          @ g.tensor((20, 7), lumos.f32, "b")).T + 1.0)
    assert not any(n.op == "EGemm" for alts in space.classes for n in alts)


def test_the_blas_seed_runs_a_large_product_in_its_reader() -> None:
    """8 MiB of result read by one elementwise kernel: the BLAS seed picks EGemm (not below:
    kernels.TILE_MIN_BYTES; nor with a right factor each row block would read again from
    beyond L2: TILE_MAX_B_BYTES; nor for a batch of products, which would run whole), its
    B (256 KiB at most) multiplied by lumos' own kernel (kernels.OWN_MAX_B_BYTES)."""
    for batch, rows, k, tiled in ((1, 2048, 64, True), (1, 1024, 64, False),
                                  (1, 2048, 128, False), (8, 256, 64, False)):
        g = lumos.Graph()
        x = g.tensor((batch, rows, k), lumos.f32, "x")
        w = g.tensor((batch, k, 1024), lumos.f32, "w")
        lumos.relu(x @ w).output()
        (space,) = build_spaces(g, [{}], RULES)
        space = cpu_space(space)
        genome = Genomes(space).preferring(seeds(space, {})[0], random.Random(0))
        chosen = [space.classes[c][i].op for c, i in genome.items()]
        assert ("EGemmOwn" in chosen) == tiled and "EGemm" not in chosen
        assert ("KGemmOwn" in chosen) == (not tiled and k == 64)
        assert ("KGemm" in chosen) == (k == 128)


# -- a product that computes a factor itself (lower_cpu.egg's KGemmPack, kernels.Pack) ----

PACKED = {  # name: graph builder whose product's factor is computed by an elementwise kernel
    # im2col (NCHW: B, one product per image; NHWC, strided: A, the pixels its rows)
    "conv_nchw": lambda g: conv2d(g.tensor((2, 3, 10, 12), lumos.f32, "x"),
                                  g.tensor((4, 3, 3, 3), lumos.f32, "w"), padding=1),
    "conv_nhwc_strided": lambda g: conv2d(g.tensor((2, 10, 12, 3), lumos.f32, "x"),
                                          g.tensor((4, 3, 3, 3), lumos.f32, "w"), padding=1,
                                          stride=2, channels_last=True),
    "transposed_a": lambda g: (g.tensor((20, 12), lumos.f32, "a") * 2.0).T
    @ g.tensor((20, 7), lumos.f32, "b"),
    "transposed_b": lambda g: g.tensor((12, 20), lumos.f32, "a")
    @ (g.tensor((7, 20), lumos.f32, "b") + 1.0).T,
    "symbolic_rows": lambda g: g.tensor(("b", "s", 20), lumos.f32, "a").exp()
    @ g.tensor((20, 7), lumos.f32, "b"),
    "blocks_on_threads": lambda g: g.tensor((16, 300), lumos.f32, "a")  # blocks of 873
    @ (g.tensor((300, 2000), lumos.f32, "b") * 0.5),  # columns (1 MiB) on the threads
    "few_images": lambda g: g.tensor((3, 64, 300), lumos.f32, "a").exp()  # 3 images of
    @ g.tensor((300, 24), lumos.f32, "b"),  # 64 rows fit one block: split, 2 and 1, per thread
    "a_short_last_block": lambda g: conv2d(  # 32 rows of 32 positions, k 288: 1 MiB
        g.tensor((1, 32, 64, 64), lumos.f32, "x"),  # holds 28 rows: blocks of 28 and 4
        g.tensor((8, 32, 3, 3), lumos.f32, "w"), padding=1, stride=2),
}


@pytest.mark.parametrize("panels", [False, True])
@pytest.mark.parametrize("name", PACKED)
def test_a_product_that_packs_its_factor_matches_the_oracle(name: str, panels: bool) -> None:
    """Each packed product, its blocks multiplied by OpenBLAS or (where the packed factor is
    B untransposed) by lumos_gemm_panels: rows and columns that fill no whole 8 x 48 tile
    (4 rows; 873-column blocks), k short and long."""
    g, space = space_and_graph(PACKED[name])
    inline = lambda n: n.op.startswith("E") and n.op not in (  # noqa: E731
        "ELoad", "EGemm", "EGemmOwn", "EGemmWindows", "ERows")
    genome = prefer(space, lambda c, n: -float(inline(n)) if n.op != "KGemmPack" else
                    -2.0 if bool(n.fields[7]) == panels else -1.0)
    kernels = from_genome(space, genome, g.dims)
    (pack,) = kernels.packs.values()  # and no kernel stores the factor
    offered = any(n.op == "KGemmPack" and n.fields[7] for c in space.classes for n in c)
    assert offered == (name in ("conv_nchw", "conv_nhwc_strided", "blocks_on_threads",
                                "a_short_last_block"))
    assert pack.panels == (panels and offered)
    assert not any(n.op == "Map" and n.shape == pack.shape for n in kernels.nodes)
    source = checked_source(g, kernels)
    assert "pk = lumos_tile(0, S" in source
    assert bool(re.search(r"lumos_gemm_panels\(.*, pk, ", source)) == pack.panels


@pytest.mark.parametrize("panels", [False, True])
def test_a_packed_factor_may_read_a_product(panels: bool) -> None:
    """A packed factor whose body reads another product computed by the kernel (EGemm):
    that product is run whole first (a genome the search may reach: a scaled score matrix
    packed for its product with the values)."""
    def make(g: lumos.Graph) -> lumos.Tensor:
        s = g.tensor((12, 20), lumos.f32, "x") @ g.tensor((20, 16), lumos.f32, "w")
        return g.tensor((7, 12), lumos.f32, "b") @ (s * 2.0 + 1.0)
    g, space = space_and_graph(make)
    inner = lambda n: n.op == "EGemm" and [int(e) for e in n.fields[1]] == [12, 16]  # noqa: E731
    genome = prefer(space, lambda c, n: -3.0 if n.op == "KGemmPack" and bool(n.fields[7])
                    == panels else -2.0 if inner(n) else -float(n.op in ("EMul", "EAdd")))
    kernels = from_genome(space, genome, g.dims)
    (pack,) = kernels.packs.values()
    assert pack.panels == panels and tiles(pack.body)
    assert "(float *)malloc(" in checked_source(g, kernels)


def test_the_blas_seed_packs_a_large_im2col() -> None:
    """A copy of 4 MiB or more read only by a product (kernels.PACK_MIN_BYTES): a 3x3
    kernel's by Winograd's F(2x2, 3x3) where it has channels and tiles enough
    (WINOGRAD_MIN_CHANNELS, WINOGRAD_MIN_TILES; each step across all tiles where they are
    few: WINOGRAD_PHASED_TILES); another's read as windows where each image has
    enough positions (kernels.WINDOWS_MIN_COLUMNS), else its blocks multiplied by lumos'
    own kernel where k is short (kernels.PANELS_MAX_K), else by OpenBLAS."""
    for batch, c_in, size, side, kernel in (
            (1, 32, 112, 5, "windows"), (8, 32, 112, 5, "windows"), (1, 16, 112, 5, "windows"),
            (1, 32, 32, 5, None), (8, 64, 28, 5, "windows"), (8, 8, 26, 5, "panels"),
            (8, 64, 26, 5, "blas"), (8, 64, 26, 3, "winograd"), (1, 32, 112, 3, "winograd"),
            (1, 32, 32, 3, None), (1, 16, 112, 3, "windows"), (2, 1024, 8, 3, "blas"),
            (8, 128, 12, 3, "phased")):
        g = lumos.Graph()
        x = g.tensor((batch, c_in, size, size), lumos.f32, "x")
        conv2d(x, g.tensor((64, c_in, side, side), lumos.f32, "w"), padding=side // 2).output()
        (space,) = build_spaces(g, [{}], RULES)
        space = cpu_space(space)
        genome = Genomes(space).preferring(seeds(space, {})[0], random.Random(0))
        chosen = [space.classes[c][i] for c, i in genome.items()]
        ops = [n.op for n in chosen]
        assert ("KGemm" in ops) == (kernel is None)
        # (k short, the windows product is computed by the output's copy: EGemmWindows)
        assert ("KGemmWindows" in ops or "EGemmWindows" in ops) == (kernel == "windows")
        assert [bool(n.fields[7]) for n in chosen if n.op == "KGemmWinograd"] == \
            {"winograd": [False], "phased": [True]}.get(kernel, [])
        assert [n.fields[7] for n in chosen if n.op == "KGemmPack"] == \
            {"panels": [1], "blas": [0]}.get(kernel, [])


# -- a product that reads a convolution's windows where they lie (KGemmWindows) ----------

WINDOWS = {  # name: (input shape, weight shape, conv2d arguments, whether offered)
    "3x3": ((2, 3, 10, 12), (9, 3, 3, 3), {"padding": 1}, True),  # 9 rows: a partial strip
    "5x5_one_image": ((1, 4, 7, 30), (8, 4, 5, 5), {"padding": 2}, True),
    "1x3": ((2, 5, 6, 50), (16, 5, 1, 3), {"padding": (0, 1)}, True),  # no kernel rows
    "unpadded": ((2, 3, 9, 9), (4, 3, 3, 3), {"padding": 0}, True),
    "uneven_padding": ((2, 3, 9, 11), (4, 3, 2, 2), {"padding": "same"}, True),  # (0, 1)
    "wide": ((1, 2, 3, 100), (20, 2, 3, 3), {"padding": 1}, True),  # tiles within a row
    "strided": ((2, 3, 9, 11), (4, 3, 3, 3), {"padding": 1, "stride": 2}, False),
    "dilated": ((2, 3, 9, 11), (4, 3, 3, 3), {"padding": 2, "dilation": 2}, False),
}


@pytest.mark.parametrize("kind", ["KGemmWindows",
                                  pytest.param("KGemmWindowsAmx", marks=needs_amx)])
@pytest.mark.parametrize("name", WINDOWS)
def test_a_product_that_reads_windows_matches_the_oracle(name: str, kind: str) -> None:
    """A stride-1 convolution's im2col product as lumos_gemm_windows (or as bf16x3 on AMX
    tiles, lumos_amx_windows): the input copied with its padding, B's rows read where they
    lie in it, the padded columns dropped."""
    xs, ws, args, offered = WINDOWS[name]
    g, space = space_and_graph(lambda g: conv2d(g.tensor(xs, lumos.f32, "x"),
                                                g.tensor(ws, lumos.f32, "w"), **args), amx=True)
    assert any(n.op == kind for c in space.classes for n in c) == offered
    if not offered:
        return
    genome = prefer(space, lambda c, n: -float(n.op == kind))
    kernels = from_genome(space, genome, g.dims)
    (pack,) = kernels.packs.values()  # and no kernel stores the windows
    assert pack.windows and not any(n.op == "Map" for n in kernels.nodes)
    assert pack.amx == (kind == "KGemmWindowsAmx")
    source = checked_source(g, kernels)
    assert re.search(r"lumos_gemm_windows\(\d+, ", source)
    assert bool(re.search(r"lumos_amx_windows\(\d+, ", source)) == pack.amx



WINOGRAD = {  # name: (input shape, weight shape, conv2d arguments)
    "odd": ((2, 3, 9, 11), (4, 3, 3, 3), {"padding": 1}),  # a half tile at each image's edge
    "unpadded": ((2, 5, 9, 10), (9, 5, 3, 3), {"padding": 0}),
    "one_image_many_blocks": ((1, 17, 23, 31), (20, 17, 3, 3), {"padding": 1}),  # runs across
    "small_images": ((7, 8, 3, 5), (16, 8, 3, 3), {"padding": 1}),  # ... rows and images
    "wide": ((1, 2, 3, 100), (20, 2, 3, 3), {"padding": 1}),
}


@pytest.mark.parametrize("phased", [False, True])
@pytest.mark.parametrize("name", [*WINOGRAD, *WINDOWS])
def test_a_3x3_windows_product_by_winograd_matches_the_oracle(name: str, phased: bool) -> None:
    """A stride-1 3x3 convolution's windows product by Winograd's F(2x2, 3x3)
    (lumos_winograd): offered for a 3x3 kernel only; every output position, odd sizes'
    half tiles and blocks of tiles across image rows and images included, within the
    oracle's tolerance; by blocks of tiles, or each step across all tiles (`phased`)."""
    xs, ws, args = WINOGRAD[name] if name in WINOGRAD else WINDOWS[name][:3]
    g, space = space_and_graph(lambda g: conv2d(g.tensor(xs, lumos.f32, "x"),
                                                g.tensor(ws, lumos.f32, "w"), **args))
    offered = name in WINOGRAD or name in ("3x3", "unpadded", "wide")
    assert any(n.op == "KGemmWinograd" for c in space.classes for n in c) == offered
    if not offered:
        return
    genome = prefer(space, lambda c, n: -float(n.op == "KGemmWinograd" and
                                               bool(n.fields[7]) == phased))
    kernels = from_genome(space, genome, g.dims)
    (pack,) = kernels.packs.values()
    assert pack.winograd and pack.phased == phased
    assert not any(n.op == "Map" for n in kernels.nodes)
    assert re.search(r"lumos_winograd\(\d+, ", checked_source(g, kernels))


@settings(max_examples=8, deadline=None)
@given(batch=st.integers(1, 3), c_in=st.integers(1, 20), c_out=st.integers(1, 20),
       h=st.integers(3, 13), w=st.integers(3, 13), padding=st.sampled_from([0, 1]),
       bias=st.booleans(), phased=st.booleans())
def test_winograd_of_random_convolutions_matches_the_oracle(
        batch: int, c_in: int, c_out: int, h: int, w: int, padding: int, bias: bool,
        phased: bool) -> None:
    """Any sizes (primes, odd images, partial strips of 8 output channels, blocks of 48
    tiles across images), with and without padding or a bias read after it."""
    def make(g: lumos.Graph) -> lumos.Tensor:
        y = conv2d(g.tensor((batch, c_in, h, w), lumos.f32, "x"),
                   g.tensor((c_out, c_in, 3, 3), lumos.f32, "w"), padding=padding)
        return y + g.tensor((c_out, 1, 1), lumos.f32, "b") if bias else y
    g, space = space_and_graph(make)
    # (not offered where an image axis has one output: no windows along it)
    assume(any(n.op == "KGemmWinograd" for c in space.classes for n in c))
    genome = prefer(space, lambda c, n: float(n.op.startswith("EGemm")) -
                    float(n.op == "KGemmWinograd" and bool(n.fields[7]) == phased))
    kernels = from_genome(space, genome, g.dims)
    assert any(p.winograd and p.phased == phased for p in kernels.packs.values())
    checked_source(g, kernels)


def test_winograd_at_a_symbolic_batch_matches_the_oracle() -> None:
    """The batch a dim: the padded copies and the tiles of every image, at each size."""
    g = lumos.Graph()
    g.dim("b", 1, 8)
    x = g.tensor(("b", 6, 7, 9), lumos.f32, "x")
    conv2d(x, g.tensor((5, 6, 3, 3), lumos.f32, "w"), padding=1).output()
    (space,) = build_spaces(g, [{}], RULES)
    space = cpu_space(space)
    for phased in (False, True):
        genome = prefer(space, lambda c, n, p=phased: -float(n.op == "KGemmWinograd" and
                                                             bool(n.fields[7]) == p))
        check_batches(g, build(from_genome(space, genome, g.dims)))


def check_batches(g: lumos.Graph, program) -> None:
    """The program against the oracle at batch 1, 3 and 8."""
    for b in (1, 3, 8):
        data = profiling_inputs(g, {"b": b}, b)
        got = program([data[n] for n in program.layout.input_names], {"b": b})
        (want,) = run_hlir(g, data, {"b": b})
        assert matches(got[0], want, lumos.f32)


# -- a kernel that computes the windows product it reads, in bands (EGemmWindows) --------

def conv_then(reader: str, batch: int = 2, c_out: int = 9):
    """A 3x3 convolution of (batch, 3, 10, 12), scaled and shifted per channel, then
    `reader`: relu and a 2x2 max pool, a 3x3 stride-2 pool (windows that overlap), one
    with padding (its reads step across rows in the flat product: no band), relu alone,
    or a channels-last copy."""
    def make(g: lumos.Graph) -> lumos.Tensor:
        x = g.tensor((batch, 3, 10, 12), lumos.f32, "x")
        y = conv2d(x, g.tensor((c_out, 3, 3, 3), lumos.f32, "w"), padding=1)
        y = y * g.tensor((c_out, 1, 1), lumos.f32, "s") + g.tensor((c_out, 1, 1), lumos.f32, "b")
        if reader == "pool":
            return lumos.max_pool2d(lumos.relu(y), 2)
        if reader.endswith("_pool"):
            return lumos.max_pool2d(y, 3, stride=2, padding=int(reader == "padded_pool"))
        return lumos.relu(y) if reader == "relu" else y.permute(0, 2, 3, 1).contiguous()
    return make


@pytest.mark.parametrize("kind", ["EGemmWindows",
                                  pytest.param("EGemmWindowsAmx", marks=needs_amx)])
@pytest.mark.parametrize(("reader", "batch", "c_out", "banded"), [
    ("pool", 2, 9, True), ("pool", 1, 16, True), ("overlapping_pool", 2, 8, True),
    ("padded_pool", 2, 8, False), ("relu", 2, 9, True), ("channels_last", 2, 9, False)])
def test_a_kernel_computes_the_windows_product_it_reads_in_bands(
        reader: str, batch: int, c_out: int, banded: bool, kind: str) -> None:
    """The reader runs the product band of image rows by band (codegen.banded), its
    outputs from the band in its scratch (the product in float, or as bf16x3 on AMX
    tiles: lumos_amx_windows): offered only where the reader's axes are the product's
    batch, rows and image rows in order (kernels.band), not to a padded pool (its reads
    step across rows of the flat product) or a channels-last copy."""
    g, space = space_and_graph(conv_then(reader, batch, c_out), amx=kind.endswith("Amx"))
    inline = lambda n: n.op.startswith("E") and not n.op.startswith("EGemm") and \
        n.op not in ("ELoad", "ERows")  # noqa: E731
    genome = prefer(space, lambda c, n: -3.0 if n.op == kind else -2.0 if n.op ==
                    "KGemmWindows" else -float(inline(n)))
    program = from_genome(space, genome, g.dims)
    assert [n.op for n in program.nodes if n.op not in ("Input", "Constant")] == \
        ["Output"] if banded else ["Gemm", "Output"]  # banded: the product never stored
    source = checked_source(g, program)
    assert ("for (int64_t zq = 0; zq < NB; zq++)" in source) == banded
    assert ("if (amx) lumos_amx_windows(" in source) == (banded and kind.endswith("Amx"))


def test_the_blas_seed_runs_a_convolution_in_its_pool() -> None:
    """The seed fuses a convolution into the pool reading it (its output never stored),
    a long one as bf16x3 where the space offers that (EGemmWindowsAmx), a short one (the
    3-channel stem: memory-bound) in float even then; else a long one stores its output,
    by Winograd's F(2x2, 3x3)."""
    for c_in, size, amx, kind in ((3, 224, False, "EGemmWindows"),
                                  (32, 112, False, "KGemmWinograd"),
                                  (3, 224, True, "EGemmWindows"),
                                  (32, 112, True, "EGemmWindowsAmx")):
        g = lumos.Graph()
        x = g.tensor((1, c_in, size, size), lumos.f32, "x")
        y = conv2d(x, g.tensor((32, c_in, 3, 3), lumos.f32, "w"), padding=1)
        lumos.max_pool2d(lumos.relu(y), 2).output()
        (space,) = build_spaces(g, [{}], RULES)
        space = cpu_space(space, amx=amx)
        genome = Genomes(space).preferring(seeds(space, {})[0], random.Random(0))
        ops = [space.classes[c][i].op for c, i in genome.items()]
        assert [op for op in ops if "Windows" in op or "Winograd" in op] == [kind]


# -- a kernel computed in bands by the kernel reading it (lower_cpu.egg's ERows) ----------

def inverted_residual(stride: int, batch: int = 2, height: int = 9, width: int = 7):
    """MobileNetV2's block, channels-last: a 1x1 expansion 4 -> 24 with batch norm and
    relu6 (a product's epilogue), then a 3x3 depthwise convolution (padding 1, `stride`)
    with its own, reading the expansion at 9 shifted positions."""
    def make(g: lumos.Graph) -> lumos.Tensor:
        x = g.tensor((batch, height, width, 4), lumos.f32, "x")
        y = conv2d(x, g.tensor((24, 4, 1, 1), lumos.f32, "we"), channels_last=True)
        y = lumos.clamp(y * g.tensor((24,), lumos.f32, "s1") + g.tensor((24,), lumos.f32, "b1"),
                        0.0, 6.0)
        y = conv2d(y, g.tensor((24, 1, 3, 3), lumos.f32, "wd"), stride=stride, padding=1,
                   groups=24, channels_last=True)
        return lumos.clamp(y * g.tensor((24,), lumos.f32, "s2"), 0.0, 6.0)
    return make


@pytest.mark.parametrize("own", [False, True])
@pytest.mark.parametrize(("stride", "batch", "height", "width"),
                         [(1, 2, 9, 7), (2, 2, 9, 7), (2, 1, 16, 16), (1, 1, 30, 5)])
def test_a_kernel_computes_the_expansion_it_reads_in_bands(
        stride: int, batch: int, height: int, width: int, own: bool) -> None:
    """The depthwise convolution runs the expansion's relu6 band of its rows by band
    (codegen.row_banded): the product's rows a band of output rows reads (the rows above
    and below included), then the epilogue into scratch, then the band's outputs; the
    expansion is never stored (no kernel computes it, no Gemm) and the result is the
    oracle's (batches of one and two, an odd height, bands cut short at the edges); its
    rows by OpenBLAS or by lumos_gemm_own (then linked: only the band's code calls it)."""
    g, space = space_and_graph(inverted_residual(stride, batch, height, width))
    inline = lambda n: n.op.startswith("E") and n.op not in ("ELoad", "EGemm", "EGemmOwn", "ERows")  # noqa: E731
    readers: dict[int, set[int]] = {}  # a max-reduction kernel -> its reads offering ERows
    for c, alts in enumerate(space.classes):
        for n in alts:
            if n.op == "ERows":
                readers.setdefault(n.children[0], set()).add(c)
    rows_read = max(readers.values(), key=len)  # the relu6 the taps read (the inner clamp:
    # read by the outer alone; the depthwise's: by the output)
    product = "EGemmOwn" if own else "EGemm"
    genome = Genomes(space).preferring(
        lambda c, n: -3.0 if n.op == "ERows" and c in rows_read else -2.0 if n.op == product
        else 1.0 if n.op == "ERows" else -float(inline(n)), random.Random(0))
    program = from_genome(space, genome, g.dims)
    source = checked_source(g, program)
    assert bool(re.search(r"lumos_gemm_own\(\d, \d, r1 - r0", source)) == own
    live = [program.nodes[i].op for i in live_nodes(program)
            if program.nodes[i].op not in ("Input", "Constant")]
    assert "Gemm" not in live and len([n for n in live if n == "MaxReduce"]) <= 1
    assert "const int64_t q0 = zq %" in source and "sizeof(float) + 1)" not in source


def test_the_blas_seed_bands_an_expansion_read_by_a_strided_convolution() -> None:
    """The seed computes a large expansion's relu6 in bands where a stride-2 depthwise
    convolution reads it (4x fewer outputs: the expansion never stored), not where a
    stride-1 one does (measured no faster) nor below kernels.TILE_MIN_BYTES."""
    for stride, height, banded in ((2, 112, True), (1, 112, False), (2, 56, False)):
        g = lumos.Graph()
        inverted_residual(stride, 8, height, height)(g).output()
        (space,) = build_spaces(g, [{}], RULES)
        space = cpu_space(space)
        genome = Genomes(space).preferring(seeds(space, {})[0], random.Random(0))
        ops = [space.classes[c][i].op for c, i in genome.items()]
        assert ("ERows" in ops) == banded, (stride, height)


def depthwise_projection(stride: int, batch: int = 2, height: int = 9, width: int = 7,
                         channels: int = 24, expand: bool = False):
    """The end of MobileNetV2's block, channels-last: a 3x3 depthwise convolution (padding
    1, `stride`) with batch norm and relu6, then the 1x1 projection 24 -> 8 with its batch
    norm; with `expand`, a 1x1 expansion 4 -> 24 and its relu6 first."""
    def make(g: lumos.Graph) -> lumos.Tensor:
        y = g.tensor((batch, height, width, 4 if expand else channels), lumos.f32, "x")
        if expand:
            y = relu6(conv2d(y, g.tensor((channels, 4, 1, 1), lumos.f32, "we"),
                             channels_last=True) + g.tensor((channels,), lumos.f32, "b0"))
        y = conv2d(y, g.tensor((channels, 1, 3, 3), lumos.f32, "wd"), stride=stride, padding=1,
                   groups=channels, channels_last=True)
        y = relu6(y * g.tensor((channels,), lumos.f32, "s1") + g.tensor((channels,), lumos.f32,
                                                                         "b1"))
        y = conv2d(y, g.tensor((8, channels, 1, 1), lumos.f32, "wp"), channels_last=True)
        return y * g.tensor((8,), lumos.f32, "s2") + g.tensor((8,), lumos.f32, "b2")
    return make


@pytest.mark.parametrize(("stride", "batch", "height", "width"),
                         [(1, 2, 9, 7), (2, 2, 9, 7), (1, 1, 5, 30)])
def test_a_projection_computes_the_depthwise_convolution_it_reads(
        stride: int, batch: int, height: int, width: int) -> None:
    """The projection computes its A, the depthwise convolution's relu6 (a max reduction
    over stacked pairs), block by block into scratch from that kernel's body (KGemmPack):
    no kernel stores it, and the result is the oracle's."""
    g, space = space_and_graph(depthwise_projection(stride, batch, height, width))
    inline = lambda n: n.op.startswith("E") and n.op not in ("ELoad", "EGemm", "EGemmOwn", "ERows")  # noqa: E731
    genome = Genomes(space).preferring(
        lambda c, n: -3.0 if n.op == "KGemmPack" and n.fields[5] == 0 else
        1.0 if n.op in ("EGemm", "EGemmOwn", "ERows") else -float(inline(n)), random.Random(0))
    program = from_genome(space, genome, g.dims)
    (pack,) = program.packs.values()
    assert pack.side == 0 and isinstance(pack.body, Reduce) and pack.body.op == "MaxReduce"
    live = [program.nodes[i].op for i in live_nodes(program)]
    assert "MaxReduce" not in live and live.count("Gemm") == 1
    assert "pk = lumos_tile(0, S" in checked_source(g, program)


def test_a_packed_factor_computing_a_kernel_in_bands_is_rejected() -> None:
    """A packed A whose body reads the expansion in bands (ERows inside the pack: a genome
    the search may reach) is a candidate that fails to compile (bands run for an output
    loop only), not a crash."""
    g, space = space_and_graph(depthwise_projection(1, expand=True))
    inline = lambda n: n.op.startswith("E") and n.op not in ("ELoad", "EGemm", "EGemmOwn")  # noqa: E731
    genome = Genomes(space).preferring(
        lambda c, n: -3.0 if n.op == "KGemmPack" and n.fields[5] == 0 or n.op == "ERows"
        else -float(inline(n)), random.Random(0))
    program = from_genome(space, genome, g.dims)
    assert any(cpu_kernels.rows(p.body) for p in program.packs.values())
    with pytest.raises(UnsupportedProgram, match="a packed factor computing a kernel in bands"):
        build(program)


def test_the_blas_seed_packs_a_large_relu6_read_by_a_projection() -> None:
    """The seed has a projection compute the depthwise convolution it reads where that is
    8 MiB or more (kernels.PACK_RELU_MIN_BYTES: 8x56x56x144, never stored), not below
    (8x28x28x192: in cache between the two kernels), nor where the convolution reads an
    expansion in bands (stride 2, kernels.in_rows)."""
    for stride, height, channels, expand, packed in (
            (1, 56, 144, False, True), (1, 28, 192, False, False), (2, 112, 96, True, False),
            (1, 56, 144, True, True)):
        g = lumos.Graph()
        depthwise_projection(stride, 8, height, height, channels, expand)(g).output()
        (space,) = build_spaces(g, [{}], RULES)
        space = cpu_space(space)
        genome = Genomes(space).preferring(seeds(space, {})[0], random.Random(0))
        chosen = [space.classes[c][i] for c, i in genome.items()]
        assert any(n.op == "KGemmPack" and n.fields[5] == 0 for n in chosen) == packed, \
            (stride, height, channels, expand)
