"""Every program in the space computes the original's result, bit for bit: random graphs
x random genomes, decoded and executed by the reference interpreter."""

import random

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

import lumos
from lumos.egraph import build_spaces, decode
from lumos.runtime.reference import run_hlir
from lumos.search.genome import Genomes

OPS = [
    lambda a, b: a + b, lambda a, b: a * b, lambda a, b: a * 1.0, lambda a, b: a * 2.0,
    lambda a, b: a + (-0.0), lambda a, b: a + 0.0, lambda a, b: (a * b).exp2(),
    lambda a, b: a.flip(0) * b, lambda a, b: a.sum(-1, keepdim=True) + b,
    lambda a, b: lumos.maximum(a, b), lambda a, b: b.contiguous() * 1.0,
]


@st.composite
def programs(draw):
    g = lumos.Graph()
    shape = draw(st.sampled_from([(3,), (2, 3), (2, 3, 2)]))
    pool = [g.tensor(shape, name=f"x{i}") for i in range(2)]
    for _ in range(draw(st.integers(1, 7))):
        op = draw(st.sampled_from(OPS))
        pool.append(op(draw(st.sampled_from(pool)), draw(st.sampled_from(pool))))
    pool[-1].output()
    draw(st.sampled_from(pool)).output()
    return g, shape


def same(got: np.ndarray, want: np.ndarray) -> None:
    np.testing.assert_array_equal(got, want)  # NaN == NaN here
    ok = ~np.isnan(want)
    np.testing.assert_array_equal(np.signbit(got[ok]), np.signbit(want[ok]))  # and -0.0


@given(programs(), st.integers(0, 2**16))
def test_random_genomes_compute_the_same(prog, seed):
    g, shape = prog
    rng = np.random.default_rng(seed)
    data = {}
    for name in g.inputs:
        d = rng.standard_normal(shape).astype(np.float32)
        d.reshape(-1)[rng.integers(0, d.size, 2)] = rng.choice([np.nan, -0.0, np.inf, 0.0], 2)
        data[name] = d
    want = run_hlir(g, data, {})
    (space,) = build_spaces(g)
    genomes, pick = Genomes(space), random.Random(seed)
    for _ in range(50):
        genome = genomes.random(pick)
        for got, w in zip(run_hlir(decode(space, genome, g.dims), data, {}), want, strict=True):
            same(got, w)
