import random

import pytest
from hypothesis import given
from hypothesis import strategies as st

from lumos.egraph.space import ENode, SearchSpace
from lumos.search import Genomes, SearchError, extract, genome_key
from tests.search.spaces import MUL_ONE, RECIP, alt, make_space, random_spaces


def check_genome(space: SearchSpace, genome: dict[int, int]) -> None:
    """Complete over exactly its reachable classes, acyclic, children first."""
    assert set(genome) == set(space.reachable(genome))
    assert all(0 <= i < len(space.classes[c]) for c, i in genome.items())
    order = extract(space, genome)
    assert [c for c, _ in order] == list(genome)
    pos = {c: k for k, (c, _) in enumerate(order)}
    assert all(pos[k] < pos[c] for c, n in order for k in n.children)
    assert order[-1][0] == space.root


def program(space: SearchSpace, genome: dict[int, int]) -> list[tuple[str, tuple]]:
    return [(n.op, n.fields) for _, n in extract(space, genome)]


@given(random_spaces(), st.integers(0, 2**32))
def test_random_mutated_and_baseline_genomes_are_acyclic_and_complete(space, seed):
    gs, rng = Genomes(space), random.Random(seed)
    g = gs.baseline(rng)
    check_genome(space, g)
    for _ in range(5):
        check_genome(space, gs.random(rng))
        g = gs.mutate(g, rng, rng.randint(1, 4))
        check_genome(space, g)
    # any choice at all, cyclic or not, repairs into a valid genome
    wild = {c: rng.randrange(len(alts)) for c, alts in enumerate(space.classes)}
    check_genome(space, gs.repair(wild, rng))


def test_recip_cycle_is_repaired_to_the_input():
    space = make_space(RECIP, "out")
    gs, rng = Genomes(space), random.Random(0)
    cyclic = {0: 0, 1: 0, 2: 0}  # out -> x = recip(r), r = recip(x)
    with pytest.raises(SearchError, match="cycle"):
        extract(space, cyclic)
    fixed = gs.repair(cyclic, rng)
    assert program(space, fixed) == [("Input", ("x",)), ("Output", ())]
    for _ in range(20):
        assert program(space, gs.random(rng)) == [("Input", ("x",)), ("Output", ())]


def test_self_loops_are_never_chosen_but_real_choices_survive():
    space = make_space(MUL_ONE, "out")
    gs, rng = Genomes(space), random.Random(1)
    seen = {tuple(program(space, gs.random(rng))) for _ in range(40)}
    assert {p[-2] for p in seen} == {("Mul", ())}
    assert all(len(p) == 4 for p in seen)  # a, b, mul, out: never the m*1 loop
    assert len(seen) == 2  # a*b and b*a


def test_repair_keeps_acyclic_choices():
    space = make_space(MUL_ONE, "out")
    gs = Genomes(space)
    m, b = space.class_keys.index("m"), space.class_keys.index("b")
    g = gs.repair({m: 2}, random.Random(3))  # b*a, no cycle: kept
    assert g[m] == 2 and list(g)[0] == b


def test_unusable_class_is_avoided_and_no_program_is_an_error():
    spec = {"out": [alt("Output", "a")],
            "a": [alt("Neg", "t"), alt("Input", fields=("a",))],
            "t": [alt("Neg", "t")]}
    space = make_space(spec, "out")
    gs = Genomes(space)
    for seed in range(10):
        assert program(space, gs.random(random.Random(seed)))[0] == ("Input", ("a",))
    with pytest.raises(SearchError, match="no acyclic program.*root e-class 1"):
        Genomes(make_space(RECIP | {"x": [alt("Recip", "r")]}, "x"))


def test_extract_rejects_missing_or_bad_choices():
    space = make_space(RECIP, "out")
    with pytest.raises(SearchError, match="no valid choice for reachable e-class 1"):
        extract(space, {0: 0})
    with pytest.raises(SearchError, match="no valid choice"):
        extract(space, {0: 0, 1: 5})


def test_mutation_changes_the_program_and_keys_ignore_order():
    space = make_space({"out": [alt("Output", "a", "b")],
                        "a": [alt("P"), alt("Q"), alt("R")],
                        "b": [alt("S"), alt("T")]}, "out")
    gs, rng = Genomes(space), random.Random(0)
    g = gs.baseline(rng)
    assert program(space, g) == [("P", ()), ("S", ()), ("Output", ())]
    for _ in range(10):
        assert gs.mutate(g, rng, 1) != g
    assert genome_key({2: 1, 1: 0, 0: 0}) == genome_key({0: 0, 1: 0, 2: 1})


def test_fingerprint_is_structural():
    spec = {"out": [alt("Output", "a")],
            "a": [alt("Neg", "x"), alt("Neg", "y"), alt("Neg", "z")],
            "x": [alt("Input", fields=("x",))], "y": [alt("Input", fields=("x",))],
            "z": [alt("Input", fields=("z",))]}
    space = make_space(spec, "out")
    gs, rng = Genomes(space), random.Random(0)
    fps = [gs.fingerprint(gs.repair({0: 0, 1: i}, rng)) for i in range(3)]
    assert fps[0] == fps[1] != fps[2]


def test_deep_chain_with_loops_everywhere():
    n = 3000  # iterative: no recursion limit; a repair per self-loop stays cheap
    classes = [[ENode("Input", ("x",), ())]]
    classes += [[ENode("Mul", (), (c, 0)), ENode("Neg", (), (c - 1,))] for c in range(1, n)]
    space = SearchSpace(classes, n - 1, [str(c) for c in range(n)])
    gs, rng = Genomes(space), random.Random(0)
    for _ in range(3):
        g = gs.random(rng)
        assert len(g) == n and all(op == "Neg" for op, _ in program(space, g)[1:])
