"""Views: chains of edits read through `reference.read` match the same ops in numpy."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lumos import ShapeError
from lumos.runtime.reference import read
from lumos.shape import Num, Var, View, sym, z

MAX_ELEMS = 600


def _factor(n: int, data: st.DataObject) -> list[int]:
    """A random factorization of n into 1..4 factors (n == 0: some zero entry)."""
    if n == 0:
        k = data.draw(st.integers(1, 3))
        shape = [data.draw(st.integers(0, 4)) for _ in range(k)]
        shape[data.draw(st.integers(0, k - 1))] = 0
        return shape
    out, rest = [], n
    for _ in range(data.draw(st.integers(0, 3))):
        divs = [d for d in range(1, rest + 1) if rest % d == 0]
        d = data.draw(st.sampled_from(divs))
        out.append(d)
        rest //= d
    out.append(rest)
    return data.draw(st.permutations(out))


def edit(v: View, ref: np.ndarray, data: st.DataObject) -> tuple[View, np.ndarray]:
    """One random view edit, applied to the View and to the numpy array it stands for."""
    nd = ref.ndim
    ops = ["unsqueeze", "reshape"]
    if nd:
        ops += ["permute", "expand", "slice", "flip", "pad", "repeat", "roll"]
        if ref.size:
            ops += ["select"]
    op = data.draw(st.sampled_from(ops))
    ax = data.draw(st.integers(0, nd - 1)) if nd else 0
    n = ref.shape[ax] if nd else 0
    if op == "unsqueeze":
        a = data.draw(st.integers(0, nd))
        return v.unsqueeze(a), np.expand_dims(ref, a)
    if op == "reshape":
        shape = _factor(ref.size, data)
        if math.prod(shape) != ref.size:
            return v, ref
        return v.reshape(shape), ref.reshape(shape)
    if op == "permute":
        perm = data.draw(st.permutations(range(nd)))
        return v.permute(perm), ref.transpose(perm)
    if op == "expand":
        shape = [data.draw(st.integers(0, 3)) if s == 1 else s for s in ref.shape]
        lead = [data.draw(st.integers(1, 2)) for _ in range(data.draw(st.integers(0, 1)))]
        shape = lead + shape
        if math.prod(shape) > MAX_ELEMS:
            return v, ref
        return v.expand(shape), np.broadcast_to(ref, shape)
    if op == "slice":
        if n == 0:
            return v.slice(ax, 0, 0), ref
        step = data.draw(st.sampled_from([1, 1, 2, 3, -1, -2]))
        start = data.draw(st.integers(0, n - 1))
        most = (n - 1 - start) // step + 1 if step > 0 else start // -step + 1
        length = data.draw(st.integers(0, most))
        return (v.slice(ax, start, length, step),
                np.take(ref, start + step * np.arange(length), axis=ax))
    if op == "flip":
        return v.flip(ax), np.flip(ref, ax)
    if op == "pad":
        before, after = data.draw(st.integers(0, 2)), data.draw(st.integers(0, 2))
        if ref.size // max(n, 1) * (n + before + after) > MAX_ELEMS:
            return v, ref
        width = [(0, 0)] * nd
        width[ax] = (before, after)
        return v.pad(ax, before, after), np.pad(ref, width)
    if op == "repeat":
        k = data.draw(st.integers(0, 3))
        if ref.size * k > MAX_ELEMS:
            return v, ref
        reps = [1] * nd
        reps[ax] = k
        return v.repeat(ax, k), np.tile(ref, reps)
    if op == "roll":
        if n == 0:
            return v, ref
        s = data.draw(st.integers(-5, 5))
        return (v.remap(v.shape, {f"z{ax}": (z(ax) + (n - s % n)) % n}),
                np.roll(ref, s, axis=ax))
    i = data.draw(st.integers(0, n - 1))
    return v.select(ax, i), np.take(ref, i, axis=ax)


@settings(max_examples=200)
@given(st.lists(st.integers(0, 5), min_size=0, max_size=3), st.integers(1, 7), st.data())
def test_random_edit_chains_match_numpy(shape, steps, data):
    size = math.prod(shape)
    buf = np.arange(1, size + 1, dtype=np.int64)  # 0 only ever comes from padding
    v, ref = View.contiguous(shape), buf.reshape(shape)
    for _ in range(steps):
        v, ref = edit(v, ref, data)
        assert tuple(int(s) for s in v.shape) == ref.shape
        got = read(buf, v, {})
        np.testing.assert_array_equal(got, ref, err_msg=repr(v))
    # at_flat: the element at each flat logical position
    if ref.size:
        p = np.arange(ref.size)
        idx, valid = v.at_flat(Var("p"))
        padded = np.concatenate([buf, [0]])  # invalid positions may index anywhere
        at = np.clip(np.asarray(idx.eval({"p": p})), 0, size)
        vals = np.where(np.asarray(valid.eval({"p": p})) != 0, padded[at], 0)
        np.testing.assert_array_equal(np.broadcast_to(vals, p.shape), ref.reshape(-1))


S = Var("s")

# chains over a symbolic dim s: (description, edits of View, the same in numpy)
CHAINS = [
    ("reshape(transpose(slice(pad)))",
     lambda v: v.pad(0, 1, 2).slice(0, 1, S + 1, 1).permute((1, 0)).reshape((2, 3, S + 1)),
     lambda a: np.pad(a, ((1, 2), (0, 0)))[1:1 + a.shape[0] + 1].T.reshape(2, 3, -1)),
    ("flatten a transposed, flipped, stepped slice",
     lambda v: v.flip(1).slice(1, 5, 3, -2).permute((1, 0)).reshape((3 * S,)),
     lambda a: a[:, ::-1][:, 5::-2].T.reshape(-1)),
    ("split then merge a repeated axis",
     lambda v: v.repeat(0, 2).reshape((2, S, 6)).permute((1, 0, 2)).reshape((S, 12)),
     lambda a: np.tile(a, (2, 1)).reshape(2, -1, 6).transpose(1, 0, 2).reshape(a.shape[0], 12)),
    ("pad a broadcast, select, unsqueeze",
     lambda v: v.unsqueeze(0).expand((3, S, 6)).pad(2, 2, 0).select(1, 0).unsqueeze(1),
     lambda a: np.pad(np.broadcast_to(a, (3,) + a.shape), ((0, 0), (0, 0), (2, 0)))[:, 0, None]),
    ("sliding windows by remap",
     lambda v: v.reshape((6 * S,)).remap((6 * S - 2, 3), {"z0": z(0) + z(1)}),
     lambda a: np.lib.stride_tricks.sliding_window_view(a.reshape(-1), 3)),
    ("diagonal by remap of a transpose",
     lambda v: v.slice(1, 0, S, 1).permute((1, 0)).remap((S,), {"z0": z(0), "z1": z(0)}),
     lambda a: np.diagonal(a[:, :a.shape[0]].T)),
]


@pytest.mark.parametrize("name,edit_view,edit_np", CHAINS, ids=[c[0] for c in CHAINS])
@pytest.mark.parametrize("s", [1, 2, 7])
def test_symbolic_chains(name, edit_view, edit_np, s):
    if "diagonal" in name and s > 6:
        s = 6  # the chain slices s columns out of 6
    v = edit_view(View.contiguous((S, 6)))
    buf = np.arange(1, 6 * s + 1)
    want = edit_np(buf.reshape(s, 6))
    np.testing.assert_array_equal(read(buf, v, {"s": s}), want)


def test_contiguity_detection():
    c = View.contiguous((4, 6))
    assert c.is_contiguous()
    assert c.permute((1, 0)).permute((1, 0)).is_contiguous()
    assert not c.permute((1, 0)).is_contiguous()
    assert c.reshape((2, 12)).reshape((24,)).is_contiguous()
    assert c.slice(1, 0, 6).is_contiguous()
    assert c.slice(0, 0, 2).is_contiguous()  # a prefix: row-major in the first rows
    assert not c.slice(0, 1, 2).is_contiguous()
    assert not c.slice(1, 0, 3).is_contiguous()
    assert not c.flip(0).is_contiguous()
    assert not c.pad(0, 0, 1).is_contiguous()
    assert not c.unsqueeze(0).expand((2, 4, 6)).is_contiguous()
    # size-1 axes do not contribute to the index
    assert View.contiguous((3,)).unsqueeze(0).is_contiguous()
    assert View.contiguous((3,)).unsqueeze(1).is_contiguous()
    assert View.contiguous((1, 3)).permute((1, 0)).is_contiguous()
    assert View.contiguous((2, 1, 3)).select(1, 0).is_contiguous()
    assert View.contiguous((1, 3)).expand((1, 3)).is_contiguous()
    # symbolic: a split and merge through s is still the identity
    sv = View.contiguous((S, 6))
    assert sv.reshape((S, 2, 3)).reshape((6 * S,)).reshape((S, 6)).is_contiguous()
    assert sv.permute((1, 0)).reshape((3, 2, S)).reshape((6, S)).permute((1, 0)).is_contiguous()


def test_read_prefix_of_a_bigger_buffer():
    buf = np.arange(24)
    np.testing.assert_array_equal(read(buf, View.contiguous((4, 6)).slice(0, 0, 2), {}),
                                  buf[:12].reshape(2, 6))


def test_edit_errors():
    c = View.contiguous((4, 6))
    with pytest.raises(ShapeError, match="permute"):
        c.permute((0, 0))
    with pytest.raises(ShapeError, match="reshape"):
        c.reshape((5, 5))
    with pytest.raises(ShapeError, match="expand"):
        c.expand((4, 7))
    with pytest.raises(ShapeError, match="expand"):
        c.expand((6,))


def test_views_are_values():
    a = View.contiguous((S, 6)).permute((1, 0))
    b = View.contiguous((S, 6)).permute((1, 0))
    assert a == b and hash(a) == hash(b)
    assert View.contiguous((sym(2), Num(3))) == View.contiguous((2, 3))
