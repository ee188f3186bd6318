"""scatter_add (the adjoint of a read through a view) against a brute-force loop over
every element of the read, for chains of view edits and for symbolic dims."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import lumos
from lumos.autograd.scatter import scatter_add
from lumos.shape import View, sym, z
from tests.helpers import run

C = View.contiguous


def brute(g: np.ndarray, view: View, shape: tuple[int, ...], env: dict) -> np.ndarray:
    """d[p] = sum of g[z] over valid z with view.index(z) == p, one element at a time."""
    out = np.zeros(shape)
    flat = out.reshape(-1)
    for pos in itertools.product(*(range(n) for n in g.shape)):
        e = {**env, **{f"z{i}": v for i, v in enumerate(pos)}}
        if view.valid.eval(e):
            flat[view.index.eval(e)] += g[pos]
    return out


def check(view: View, shape: tuple, env: dict | None = None) -> lumos.Graph:
    env = env or {}
    g = lumos.Graph()
    for name in env:
        g.dim(name, 1, 16)
    gt = g.tensor(view.shape, lumos.f64)
    d = scatter_add(gt, view, tuple(sym(s) for s in shape))
    garr = np.random.default_rng(0).standard_normal([int(s.eval(env)) for s in view.shape])
    (got,) = run([d], {gt: garr}, env)
    np.testing.assert_allclose(got, brute(garr, view, got.shape, env), atol=1e-12)
    return g


@pytest.mark.parametrize("name,view", [
    ("permute", C((3, 4)).permute((1, 0))),
    ("broadcast", C((3, 4)).unsqueeze(0).expand((5, 3, 4))),
    ("slice", C((3, 4)).slice(1, 1, 2)),
    ("strided", C((3, 4)).slice(1, 3, 2, -2)),
    ("pad", C((3, 4)).pad(1, 2, 1)),
    ("flip", C((3, 4)).flip(0)),
    ("repeat", C((3, 4)).repeat(1, 3)),
    ("roll", C((3, 4)).remap((3, 4), {"z1": (z(1) + 1) % 4})),
    ("transposed reshape", C((3, 4)).permute((1, 0)).reshape((2, 6))),
    ("select", C((3, 4)).select(0, 2)),
])
def test_single_edits(name: str, view: View) -> None:
    g = check(view, (3, 4))
    if name in ("permute", "slice", "strided", "pad", "flip", "roll", "transposed reshape"):
        assert g.count("SumReduce") == 0  # an injective view: its adjoint is a view
    if name in ("broadcast", "repeat"):
        assert g.count("SumReduce") == 1


def test_broadcast_sums_once_over_what_is_read() -> None:
    """Broadcast axes that g reads with one stride are summed as one axis (a matrix
    product's batch and rows: one Gemm), and only the elements read are summed (a
    slice's adjoint is a view of the sum, zero outside)."""
    g = check(C((3, 8)).slice(1, 2, 4).unsqueeze(0).unsqueeze(0).expand((5, 2, 3, 4)), (3, 8))
    (s,) = [n for n in g.nodes if n.op == "SumReduce"]
    assert np.prod([e.value for e in s.shape]) == 12 and s.views[0].shape[-1].value == 10
    g = check(C((3, 4)).unsqueeze(0).expand((2, 3, 4)).unsqueeze(0).expand((5, 2, 3, 4)),
              (3, 4))
    assert g.count("SumReduce") == 1


def test_windows_and_diagonals() -> None:
    """Overlapping windows sum over the window index; a diagonal scatters into a square."""
    check(C((10,)).remap((4, 4), {"z0": z(0) * 2 + z(1)}), (10,))
    check(C((4, 4)).remap((4,), {"z0": z(0), "z1": z(0)}), (4, 4))


@pytest.mark.parametrize("n", [1, 3])
def test_symbolic_dims(n: int) -> None:
    s = sym("s")
    check(C((s, 4)).permute((1, 0)), (s, 4), {"s": n})
    check(C((s, 4)).repeat(0, 2), (s, 4), {"s": n})
    check(C((s, 4)).pad(0, 1, 2).permute((1, 0)), (s, 4), {"s": n})
    check(C((4, s)).permute((1, 0)).reshape((s * 4,)), (4, s), {"s": n})
    check(C((s, 4)).unsqueeze(1).expand((s, s, 4)), (s, 4), {"s": n})


EDITS = ("permute", "expand", "slice", "pad", "flip", "reshape", "select", "roll", "repeat")


@st.composite
def chains(draw: st.DrawFn) -> tuple[View, tuple[int, ...]]:
    """A contiguous shape and a chain of up to four random edits of its view."""
    shape = tuple(draw(st.lists(st.integers(1, 4), min_size=1, max_size=3)))
    v = C(shape)
    for _ in range(draw(st.integers(1, 4))):
        s = [x.value for x in v.shape]
        if not s or int(np.prod(s)) > 200:
            break
        a = draw(st.integers(0, len(s) - 1))
        kind = draw(st.sampled_from(EDITS))
        if kind == "permute":
            v = v.permute(draw(st.permutations(range(len(s)))))
        elif kind == "expand":
            v = v.unsqueeze(a).expand((*s[:a], draw(st.integers(1, 3)), *s[a:]))
        elif kind == "slice":
            step = draw(st.sampled_from((1, 2, -1, -2)))
            start = draw(st.integers(0, s[a] - 1))
            v = v.slice(a, start, len(range(start, s[a] if step > 0 else -1, step)), step)
        elif kind == "pad":
            v = v.pad(a, draw(st.integers(0, 2)), draw(st.integers(0, 2)))
        elif kind == "flip":
            v = v.flip(a)
        elif kind == "reshape":
            n = int(np.prod(s))
            k = draw(st.sampled_from([d for d in range(1, n + 1) if n % d == 0]))
            v = v.reshape((k, n // k))
        elif kind == "select":
            v = v.select(a, draw(st.integers(0, s[a] - 1)))
        elif kind == "roll":
            v = v.remap(v.shape, {f"z{a}": (z(a) + draw(st.integers(0, s[a]))) % s[a]})
        else:
            v = v.repeat(a, draw(st.integers(2, 3)))
    return v, shape


@given(chains())
def test_random_chains_are_exact_or_refused(case: tuple[View, tuple[int, ...]]) -> None:
    """Every chain gives the brute-force result, or a LumosError naming the view (a few
    reshapes of rolled or repeated views whose index cuts do not nest)."""
    view, shape = case
    try:
        check(view, shape)
    except lumos.LumosError as e:
        assert "cannot propagate a gradient through View(" in str(e)
