"""Dimension buckets: one e-graph per bucket combination, dispatch at execute."""

import numpy as np
import pytest
import torch

import lumos
from lumos.egraph import DimBucket
from lumos.egraph.buckets import combos, select
from lumos.search.options import CompileOptions
from tests.helpers import assert_close


def test_combos_and_select():
    dims = {"s": (1, 8192), "b": (1, None)}
    cs = combos(dims, {"s": [(2, 512, 64), DimBucket(1, 1, 1)]})
    assert cs == [{"b": DimBucket(1, None, 1), "s": DimBucket(1, 1, 1)},
                  {"b": DimBucket(1, None, 1), "s": DimBucket(2, 512, 64)}]
    assert select(cs, {"s": 1, "b": 7}) == 0 and select(cs, {"s": 300, "b": 1}) == 1
    with pytest.raises(lumos.BindError, match=r"'s'=600 is in none of its buckets \[1, 1\], "
                                              r"\[2, 512\]"):
        select(cs, {"s": 600, "b": 1})
    # clipped to the declared range
    assert combos({"s": (4, 100)}, {"s": [(1, None, 8)]}) == [{"s": DimBucket(4, 100, 8)}]


def test_a_dim_without_buckets_is_timed_at_its_upper_end_unless_it_does_not_fit():
    dims = {"s": (1, 512), "b": (2, None), "p": (0, 99)}
    assert combos(dims, {"p": [(0, 99, 7)]}) == [
        {"b": DimBucket(2, None, 2), "p": DimBucket(0, 99, 7), "s": DimBucket(1, 512, 512)}]
    seen = []

    def fits(env):
        seen.append(dict(env))
        return env["s"] <= 100
    # halved towards the minimum, the explicit bucket kept
    assert combos(dims, {"p": [(0, 99, 7)]}, fits)[0]["s"] == DimBucket(1, 512, 64)
    assert [e["s"] for e in seen] == [512, 256, 128, 64] and {e["p"] for e in seen} == {7}
    assert combos(dims, {}, lambda env: False)[0] == \
        {"b": DimBucket(2, None, 2), "p": DimBucket(0, 99, 0), "s": DimBucket(1, 512, 1)}


def test_joint_buckets_give_only_their_combinations():
    dims = {"b": (1, 16), "s": (1, 512), "p": (0, 99)}
    joint = {("b", "s"): [((1, 1, 1), (2, 512, 128)), ((1, 16, 8), (1, 1, 1))]}
    cs = combos(dims, CompileOptions(dim_buckets=joint).dim_buckets)
    p = DimBucket(0, 99, 99)  # (a dim without buckets: timed at its upper end)
    assert cs == [{"b": DimBucket(1, 1, 1), "p": p, "s": DimBucket(2, 512, 128)},
                  {"b": DimBucket(1, 16, 8), "p": p, "s": DimBucket(1, 1, 1)}]
    assert select(cs, {"b": 1, "s": 300, "p": 5}) == 0
    assert select(cs, {"b": 1, "s": 1, "p": 5}) == 1 and select(cs, {"b": 9, "s": 1, "p": 0}) == 1
    with pytest.raises(lumos.BindError, match=r"b=4, p=0, s=7 are in no bucket combination"):
        select(cs, {"b": 4, "s": 7, "p": 0})
    # with a dim bucketed alone: the product of the groups
    cs = combos(dims, {**joint, "p": [(0, 9, 0), (10, 99, 50)]})
    assert len(cs) == 4 and [c["p"].max for c in cs] == [9, 99, 9, 99]


@pytest.mark.parametrize("buckets, msg", [
    ({("b", "s"): [((1, 1, 1), (1, 8, 1)), ((1, 4, 1), (2, 9, 2))]}, "buckets overlap"),
    ({("b", "s"): [((1, 1, 1),)]}, "one .min, max, representative. per dim"),
    ({("b", "s"): [((1, 1, 1), (1, 1, 1))], "s": [(1, 2, 1)]}, r"dim \['s'\] is bucketed "
                                                                 "twice"),
    ({("b", 3): [((1, 1, 1), (1, 1, 1))]}, "a key is a dim name or a tuple"),
])
def test_bad_joint_buckets(buckets, msg):
    with pytest.raises(ValueError, match=msg):
        CompileOptions(dim_buckets=buckets)


@pytest.mark.parametrize("buckets, msg", [
    ({"s": [(1, 8, 1), (8, 16, 8)]}, r"buckets \[1, 8\] and \[8, 16\] overlap"),
    ({"s": [(1, None, 1), (8, 16, 8)]}, r"buckets \[1, inf\] and \[8, 16\] overlap"),
    ({"s": [(600, 700, 600)]}, r"bucket \[600, 700\] is outside its declared range"),
    ({"t": [(1, 2, 1)]}, r"unknown dims \['t'\]"),
])
def test_bad_buckets(buckets, msg):
    with pytest.raises(ValueError, match=msg):
        combos({"s": (1, 512)}, buckets)


def test_dispatch_runs_the_bucket_program():
    g = lumos.Graph()
    g.dim("s", 1, 8192)
    x = g.tensor(("s", 4), name="x")
    w = g.tensor((4, 4), name="w")
    y = ((x @ w).softmax(-1) * 2.0 + x.sum(0, keepdim=True)).output()
    opts = CompileOptions(dim_buckets={"s": [(1, 1, 1), (2, 512, 64)]})
    prog = g.compile(lumos.ReferenceRuntime(), opts)
    one, many = prog.programs
    # the s=1 program is specialized: its input has the shape (1, 4)
    (xin,) = [n for n in one.nodes if n.name == "x"]
    assert [int(e) for e in xin.shape] == [1, 4]
    (xin,) = [n for n in many.nodes if n.name == "x"]
    assert not xin.shape[0].is_num
    rng = np.random.default_rng(0)
    wd = rng.standard_normal((4, 4)).astype(np.float32)
    prog.set_data(w, wd)
    for s in (1, 7, 512):
        xd = rng.standard_normal((s, 4)).astype(np.float32)
        prog.set_data(x, xd)
        prog.execute()
        xt, wt = torch.from_numpy(xd), torch.from_numpy(wd)
        assert_close(prog.get(y), (xt @ wt).softmax(-1) * 2.0 + xt.sum(0, keepdim=True))
    prog.set_data(x, np.zeros((513, 4), np.float32))
    with pytest.raises(lumos.BindError, match=r"'s'=513 is in none of its buckets"):
        prog.execute()
