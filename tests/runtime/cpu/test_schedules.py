"""A kernel's schedule is an e-graph alternative (lower_cpu.egg's `schedules` ruleset):
every kernel that carries one (`kernels.SCHEDULED`) is offered with each of its values,
the seeds' value first; codegen renders the chosen value and nothing else; and every
schedule computes what the oracle computes, on either side of its threshold."""

from __future__ import annotations

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
from lumos.runtime.cpu.kernels import PAR_SEED, RULES, SCHEDULED, cpu_space, from_genome
from lumos.runtime.cpu.tune import matches, profiling_inputs
from lumos.runtime.reference import run_hlir
from lumos.search import Genomes

PARS = (PAR_SEED, 4096, 262144, 0, -1)


def norm_graph() -> lumos.Graph:
    """A row softmax and a residual over `n` rows: maps, both reductions and an output."""
    g = lumos.Graph()
    n = g.dim("n", 1, 4096)
    x = g.tensor((n, 48), lumos.f32, "x")
    y = (x - x.amax(1, keepdim=True)).exp()
    (y / y.sum(1, keepdim=True) + x * 0.5).output()
    return g


def space_of(g: lumos.Graph) -> lumos.egraph.SearchSpace:
    (space,) = build_spaces(g, [dict(g.dims)], RULES)
    return cpu_space(space, g.dims)


def with_par(space: lumos.egraph.SearchSpace, par: int) -> dict[int, int]:
    """The unfused program with every scheduled kernel at `par`."""
    choice = {c: next((i for i, n in enumerate(alts)
                       if n.op in SCHEDULED and n.fields[-1] == par), 0)
              for c, alts in enumerate(space.classes)}
    return Genomes(space).repair(choice, random.Random(0))


def test_each_kernel_is_offered_every_schedule_the_seeds_first() -> None:
    space = space_of(norm_graph())
    seen = set()
    for alts in space.classes:
        kernels = [n for n in alts if n.op in SCHEDULED]
        if not kernels:
            continue
        assert alts[0].op in SCHEDULED and alts[0].fields[-1] == PAR_SEED
        by_kernel: dict[tuple, list[int]] = {}
        for n in kernels:
            by_kernel.setdefault((n.op, n.fields[:-1], n.children), []).append(n.fields[-1])
        for (op, _, _), pars in by_kernel.items():
            assert sorted(pars) == sorted(PARS), (op, pars)  # no variant of a variant
            seen.add(op)
    assert seen >= {"KMap", "KSumReduce", "KMaxReduce", "KOutput"}


@pytest.mark.parametrize("par", PARS)
def test_codegen_renders_the_schedule_it_is_given(par: int) -> None:
    g = norm_graph()
    space = space_of(g)
    kernels = from_genome(space, with_par(space, par), g.dims)
    assert set(kernels.par.values()) == {par}
    units, _ = generate(kernels)
    source = "\n".join(u if isinstance(u, str) else u[1] for u in units)
    pragmas = re.findall(r"#pragma omp parallel.*", source)
    if par < 0:
        assert not pragmas
    elif par == 0:
        assert pragmas and not any(" if(" in p for p in pragmas)
    else:
        assert pragmas and all(f">= {par})" in p for p in pragmas)


@settings(max_examples=6, deadline=None)
@given(par=st.sampled_from(PARS), n=st.sampled_from([1, 5, 87, 683, 3001]))
def test_every_schedule_computes_what_the_oracle_does(par: int, n: int) -> None:
    g = norm_graph()
    space = space_of(g)
    program = build(from_genome(space, with_par(space, par), g.dims))
    data = profiling_inputs(g, {"n": n}, 0)
    got = program([data[name] for name in program.layout.input_names], {"n": n})
    for a, w, o in zip(got, run_hlir(g, data, {"n": n}), g.outputs, strict=True):
        assert matches(a, w, g.nodes[o].dtype)
    assert np.isfinite(got[0]).all()
