"""The search's seed genomes (kernels.seeds): which producers the fused seed inlines."""

from __future__ import annotations

import random
import signal

import lumos
from lumos.egraph import build_spaces
from lumos.nn.conv import conv2d
from lumos.runtime.cpu import build
from lumos.runtime.cpu.codegen import generate
from lumos.runtime.cpu.kernels import (
    RULES,
    Kernels,
    Reduce,
    cpu_space,
    from_genome,
    loads,
    seeds,
)
from lumos.runtime.cpu.tune import matches, profiling_inputs
from lumos.runtime.reference import run_hlir
from lumos.search import Genomes


def fused_seed(g: lumos.Graph) -> Kernels:
    """The fused seed's program, checked against the oracle."""
    (space,) = build_spaces(g, [{}], RULES)
    space = cpu_space(space)
    k = from_genome(space, Genomes(space).preferring(seeds(space, {})[1], random.Random(0)),
                    g.dims)
    program = build(k)
    data = profiling_inputs(g, {}, 0)
    got = program([data[name] for name in program.layout.input_names], {})
    for a, w, o in zip(got, run_hlir(g, data, {}), g.outputs, strict=True):
        assert matches(a, w, g.nodes[o].dtype)
    return k


def kernels(k: Kernels, shape: tuple) -> list[int]:
    return [i for i, n in enumerate(k.nodes) if n.op in ("Map", "MaxReduce")
            and tuple(e.value for e in n.shape) == shape]


def test_relu6_inlines_its_producers() -> None:
    """clamp's two MaxReduces over stacked pairs read their elementwise producers inline
    (each stacked element is read once: no broadcast), and the inner one is read inline
    by the outer (a stacked pair's guards are constants at each unrolled step: no padding
    to carry): computed where the output is copied, then one kernel where a padded
    convolution reads it, not four."""
    g = lumos.Graph()
    x = g.tensor((64, 32), lumos.f32, "x")
    lumos.clamp(lumos.clamp(x * 2 + 1, max=6.0), min=0.0).output()
    k = fused_seed(g)
    assert kernels(k, (64, 32)) == [] and isinstance(k.bodies[k.outputs[0]], Reduce)
    g = lumos.Graph()
    x, w = g.tensor((2, 6, 5, 8), lumos.f32, "x"), g.tensor((8, 1, 3, 3), lumos.f32, "w")
    conv2d(lumos.clamp(x * 2 + 1, 0.0, 6.0), w, padding=1, groups=8, channels_last=True).output()
    k = fused_seed(g)
    (relu6,) = kernels(k, (2, 6, 5, 8))  # both maxes and x * 2 + 1: one pass over x
    assert {k.nodes[j].op for j in loads(k.bodies[relu6])} == {"Input", "Constant"}


def test_padded_taps_are_computed_in_the_relu() -> None:
    """A depthwise convolution (a sum of padded, shifted products) read by a relu is
    computed in it, and the relu where the output is copied: one pass over x (the weights'
    contiguous copy aside), its guards the same along the vector loop (rows or zeros
    picked per block: no predicate inside it), as in the convolution's own map."""
    g = lumos.Graph()
    x, w = g.tensor((2, 6, 5, 8), lumos.f32, "x"), g.tensor((8, 1, 3, 3), lumos.f32, "w")
    conv2d(x, w, padding=1, groups=8, channels_last=True).relu().output()
    k = fused_seed(g)
    out = k.outputs[0]
    assert [n.op for n in k.nodes if n.op not in ("Input", "Constant")] == ["Map", "Output"]
    assert isinstance(k.bodies[out], Reduce) and \
        {k.nodes[j].op for j in loads(k.bodies[out])} == {"Input", "Map"}
    (_, kernel), = generate(k)[0][-1:]
    inner = kernel[kernel.index("for (int64_t z3 = lo"):].splitlines()
    assert "lumos_zero_row" in kernel and not any(  # (the max's NaN-aware select aside)
        "?" in line.replace("(0 ?", "") for line in inner if "!=" not in line)


def test_a_pool_computes_the_relu_it_reads() -> None:
    """A relu read by a 2x2 max pool (each element once, a window's rows two apart) is
    computed inside the pool, and the pool where the output reads it in order: one pass
    over x, whose reads are linear in the vector loop (a window's second column read as
    `(225 + 2*z3) % 224` before expr.mod reduced the constant: scalar, 27x slower)."""
    g = lumos.Graph()
    x = g.tensor((2, 4, 8, 8), lumos.f32, "x")
    lumos.max_pool2d((x * 2 + 1).relu(), 2).output()
    k = fused_seed(g)
    assert [n.op for n in k.nodes if n.op not in ("Input", "Constant")] == ["Output"]
    assert {k.nodes[j].op for j in loads(k.bodies[k.outputs[0]])} == {"Input", "Constant"}
    (_, kernel), = generate(k)[0][1:]
    assert not any("%" in line for line in kernel.splitlines() if "z3" in line)  # (inner)


def test_a_pool_read_by_a_short_sum_is_stored() -> None:
    """A global average pool of a max pool's output sums rows of 4 step by step, its vector
    loop along the pooled rows: inlined there, the pool would read x's rows 2 x 8 apart in
    that loop (scalar; the CNN's 2.9 ms against 0.6 for the pool stored)."""
    g = lumos.Graph()
    x = g.tensor((2, 4, 8, 8), lumos.f32, "x")
    lumos.adaptive_avg_pool2d(lumos.max_pool2d(x.relu(), 2), 1).output()
    k = fused_seed(g)
    (pool,) = [n for n in k.nodes if n.op == "MaxReduce"]
    assert tuple(e.value for e in pool.shape) == (2, 4, 4, 4)


def test_a_reduction_read_as_a_scalar() -> None:
    """A 0-d read of a short max reduction (relu's element 1) is read once: inlined, and
    the seed's linearity test has no last axis to look at (it raised IndexError)."""
    g = lumos.Graph()
    x = g.tensor((4,), lumos.f32, "x")
    (x.relu()[1] * 2).output()
    k = fused_seed(g)
    assert [n.op for n in k.nodes if n.op not in ("Input", "Constant")] == ["Output"]


def test_gelu_is_one_pass() -> None:
    """GELU as PyTorch decomposes it, x/2 * (1 + erf(x/sqrt 2)), and its tanh form: chains
    31 and 32 ops deep (erf's polynomials, selects and clamp), inlined whole within the
    fusion rounds (kernels.FUSE_ROUNDS) where the output is written: no kernel of their
    own, so each element is read once and written once."""
    for gelu in (lambda x: x * 0.5 * (lumos.erf(x * 0.7071067811865476) + 1.0),
                 lambda x: lumos.gelu(x, approximate="tanh")):
        g = lumos.Graph()
        gelu(g.tensor((64, 256), lumos.f32, "x") + g.tensor((256,), lumos.f32, "b")).output()
        k = fused_seed(g)
        assert kernels(k, (64, 256)) == []


def test_seeds_of_a_deep_network_take_seconds() -> None:
    """The seeds walk each e-class's children to a depth of FUSE_ROUNDS: a walk along
    every path of MobileNetV2's DAG (batch 8, where its relu6s are large enough to ask
    whether a product packs them) never ended; memoized, it takes about two seconds."""
    from lumos.models.mobilenet import MobileNetV2

    g = lumos.Graph()
    g.dim("batch", 1, 8)
    MobileNetV2()(g.tensor(("batch", 3, 224, 224), name="images")).output()
    (space,) = build_spaces(g, [{"batch": (8, 8)}], RULES)
    space = cpu_space(space)

    def late(*_: object) -> None:
        raise TimeoutError("the seeds took over 60 s")

    old = signal.signal(signal.SIGALRM, late)
    signal.alarm(60)
    try:
        assert len(seeds(space, {"batch": 8}, bounds=g.dims)) == 2
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)


def test_a_weights_transposed_copy_is_stored_not_read_across() -> None:
    """A channels-last depthwise convolution reads its weight through a copy made
    contiguous along the channels (nn.conv's _taps), the vector loop's axis. The fused
    seed stores that copy, computed once per binding of the weights: inlined, each of
    the 9 taps read the weight 9 floats apart along the channels and GCC vectorized no
    part of the convolution (MobileNetV2: 0.35x inductor's images/s, 1.19x stored)."""
    g = lumos.Graph()
    x = g.tensor((2, 10, 9, 32), lumos.f32, "x")
    w = g.tensor((32, 1, 3, 3), lumos.f32, "w", weight=True)
    lumos.clamp(conv2d(x, w, padding=1, groups=32, channels_last=True), 0.0, 6.0).output()
    (space,) = build_spaces(g, [{}], RULES)
    space = cpu_space(space)
    made = Genomes(space)
    k = from_genome(space, made.preferring(seeds(space, {}, made, frozenset({"w"}))[1],
                                           random.Random(0)), g.dims)
    assert kernels(k, (1, 3, 3, 32)) != []
    program = build(k, weights=frozenset({"w"}))
    data = profiling_inputs(g, {}, 0)
    got = program([data[name] for name in program.layout.input_names], {})
    for a, want, o in zip(got, run_hlir(g, data, {}), g.outputs, strict=True):
        assert matches(a, want, g.nodes[o].dtype)
