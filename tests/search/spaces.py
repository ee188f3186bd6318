"""Hand-built and random SearchSpaces for the search tests (no e-graph needed)."""

from __future__ import annotations

import random

from hypothesis import strategies as st

import lumos
from lumos.egraph.space import ENode, SearchSpace
from lumos.search import Genome, extract

Alt = tuple[str, tuple[str, ...], tuple]


def alt(op: str, *children: str, fields: tuple = ()) -> Alt:
    return op, children, fields


def make_space(spec: dict[str, list[Alt]], root: str,
               order: list[str] | None = None) -> SearchSpace:
    """Classes named by `spec` keys (the names are the stable class keys); `order` lays
    them out under other class ids, as a fresh saturation may."""
    names = order or list(spec)
    idx = {n: i for i, n in enumerate(names)}
    classes = [[ENode(op, fields, tuple(idx[k] for k in kids)) for op, kids, fields in spec[n]]
               for n in names]
    return SearchSpace(classes, idx[root], list(names))


# x = recip(recip(x)): x's class and the recip class form a loop
RECIP = {"out": [alt("Output", "x")],
         "x": [alt("Recip", "r"), alt("Input", fields=("x",))],
         "r": [alt("Recip", "x")]}

# m = a*b = b*a = m*1: a self-loop next to two real choices
MUL_ONE = {"out": [alt("Output", "m")],
           "m": [alt("Mul", "m", "one"), alt("Mul", "a", "b"), alt("Mul", "b", "a")],
           "a": [alt("Input", fields=("a",))], "b": [alt("Input", fields=("b",))],
           "one": [alt("Constant", fields=(1.0,)), alt("Mul", "one", "one")]}


def grid_space(k: int, m: int) -> SearchSpace:
    """A root over k independent classes with m leaf alternatives each: m**k programs."""
    spec = {"out": [alt("Output", *[f"c{i}" for i in range(k)])]}
    for i in range(k):
        spec[f"c{i}"] = [alt(f"v{j}", fields=(i,)) for j in range(m)]
    return make_space(spec, "out")


def grid_time(space: SearchSpace, genome: Genome, seed: int = 0) -> float:
    """A made-up, deterministic running time of a grid_space program."""
    table = random.Random(seed)
    weights = {(i, f"v{j}"): table.uniform(1, 10) for i in range(50) for j in range(10)}
    return sum(weights[(n.fields[0], n.op)] for _, n in extract(space, genome) if n.fields)


@st.composite
def random_spaces(draw) -> SearchSpace:
    """A random DAG (so an acyclic program exists) plus random extra alternatives with back
    edges and self-loops, and trap classes that have no acyclic program at all."""
    n = draw(st.integers(1, 10))
    traps = draw(st.integers(0, 2))
    total = n + traps
    classes = []
    for c in range(n):
        kids = draw(st.lists(st.integers(0, c - 1), max_size=3)) if c else []
        alts = [ENode(f"op{c}", (0,), tuple(kids))]
        for j, extra in enumerate(draw(st.lists(
                st.lists(st.integers(0, total - 1), max_size=3), max_size=3))):
            alts.append(ENode(f"op{c}", (j + 1,), tuple(extra)))
        classes.append(draw(st.permutations(alts)))
    for t in range(n, total):
        classes.append([ENode("trap", (t,), (t,)), ENode("trap", (t, 1), (t, 0))])
    return SearchSpace(classes, n - 1, [f"k{c}" for c in range(total)])


def build_graph() -> lumos.Graph:
    """A small graph with a symbolic dim, for graph fingerprints."""
    g = lumos.Graph()
    a = g.tensor(("s", 4), lumos.f32, name="a")
    b = g.tensor((4,), lumos.f32, name="b")
    ((a * b).exp() + a.permute(1, 0).transpose(0, 1)).sum(1).output()
    return g


def graph_space(g: lumos.Graph, reverse: bool = False) -> SearchSpace:
    """One class per graph node holding it (fields: shape, dtype, views and the op's own),
    plus a swapped-operand alternative for every Mul; class ids reversed on request."""
    spec: dict[str, list[Alt]] = {"root": [alt("Root", *[f"n{o}" for o in g.outputs])]}
    for i, n in enumerate(g.nodes):
        kids = [f"n{k}" for k in n.inputs]
        fields = (n.shape, n.dtype, n.views, n.name, n.value, n.axis)
        spec[f"n{i}"] = [alt(n.op, *kids, fields=fields)]
        if n.op == "Mul":
            spec[f"n{i}"].append(alt("MulSwapped", *kids[::-1], fields=fields))
    order = list(spec)[::-1] if reverse else None
    return make_space(spec, "root", order)
