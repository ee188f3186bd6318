"""Every primitive on CpuRuntime against the reference semantics (`run_hlir`), all dtypes,
edge values (NaN, inf, -0, integer extremes, x % 0, out-of-range indices). Each test
builds one graph holding all its cases, so it compiles once."""

from __future__ import annotations

import numpy as np

import lumos
from lumos.dtype import ALL, bf16, bool_, f16, f32, f64, i8, i16, i32, i64, u8
from lumos.frontend.tensor import iota, node, scalar
from lumos.shape import View, z
from tests.runtime.cpu.common import assert_same, edge_values, run_both

FLOATS = (f32, f64, f16, bf16)
N = 48


def check_all(cases: list[tuple[str, lumos.Tensor, bool]], feeds: dict,
              dims: dict | None = None) -> None:
    results = run_both([t for _, t, _ in cases], feeds, dims)
    for (what, t, exact), (got, want) in zip(cases, results, strict=True):
        assert_same(got, want, t.dtype, exact, what)


def test_unary() -> None:
    rng = np.random.default_rng(0)
    g = lumos.Graph()
    cases, feeds = [], {}
    for dt in FLOATS:
        x = g.tensor((N,), dt, f"x_{dt.name}")
        feeds[x] = edge_values(dt, rng, N)
        for op in ("Exp2", "Log2", "Sin", "Sqrt", "Recip"):
            cases.append((f"{op} {dt.name}", node(g, op, [x]), op in ("Sqrt", "Recip")))
    check_all(cases, feeds)


def test_exp2_f32_within_an_ulp_of_the_exact_power() -> None:
    """codegen's lumos_exp2f (branch-free, so a loop over a mask's -inf vectorizes): within
    an ulp of 2^x computed in f64 over [-160, 130], subnormal results included; 0, inf
    and NaN exactly where 2^x rounds to them."""
    rng = np.random.default_rng(3)
    x = np.concatenate([np.linspace(-160, 130, 300001), rng.uniform(-1, 1, 4096),
                        [-np.inf, np.inf, np.nan, -0.0, 0.0, -149.5, -150.0, -151.0, -152.0,
                         127.99, 128.0, -126.0, -3.4e38, 3.4e38]]).astype(np.float32)
    g = lumos.Graph()
    t = g.tensor(x.shape, f32, "x")
    (got, _), = run_both([t.exp2()], {t: x})
    with np.errstate(over="ignore"):  # (2^x past the f64 and f32 ranges: inf)
        want = np.exp2(x.astype(np.float64))
        exact = want.astype(np.float32)
    special = ~np.isfinite(exact) | (exact == 0)
    np.testing.assert_array_equal(got[special], exact[special])
    ulp = np.abs(got[~special] - want[~special]) / np.spacing(np.abs(exact[~special]))
    # 0.88 ulp by FMA (x86-64 since Haswell, AArch64); 1.14 on a CPU without it
    assert ulp.max() <= 1.0, (ulp.max(), x[~special][ulp.argmax()])


def test_binary() -> None:
    """Add, Mul, Mod, LessThan for every dtype; one operand broadcast along an axis, the
    other transposed, so every pair of edge values meets."""
    rng = np.random.default_rng(1)
    g = lumos.Graph()
    cases, feeds = [], {}
    n = 16
    for dt in ALL:
        a = g.tensor((n,), dt, f"a_{dt.name}")
        b = g.tensor((n, n), dt, f"b_{dt.name}")
        feeds[a], feeds[b] = edge_values(dt, rng, n), edge_values(dt, rng, n * n).reshape(n, n)
        va = a.view.unsqueeze(1).expand((n, n))  # a[i] against b[j, i]
        bt = b._with_view(b.view.permute((1, 0)))
        for op in ("Add", "Mul", "Mod", "LessThan"):
            if op == "Mod" and dt is bool_:
                continue
            cases.append((f"{op} {dt.name}", node(g, op, [a._with_view(va), bt]), True))
    check_all(cases, feeds)


def test_reductions() -> None:
    """SumReduce and MaxReduce over each axis of a 3-d input (one axis empty) and over a
    long axis (the vector loops; short ones are written out per element), all dtypes;
    NaN propagates through max; empty max is -inf or the dtype's minimum."""
    rng = np.random.default_rng(2)
    g = lumos.Graph()
    cases, feeds = [], {}
    for dt in ALL:
        x = g.tensor((3, 5, 7), dt, f"x_{dt.name}")
        e = g.tensor((4, 0, 2), dt, f"e_{dt.name}")
        feeds[x] = edge_values(dt, rng, 105).reshape(3, 5, 7)
        if dt.is_float:  # sums of finite values (inf - inf is NaN either way)
            feeds[x] = np.where(np.arange(105).reshape(3, 5, 7) < 12,
                                feeds[x].reshape(-1)[::-1].reshape(3, 5, 7), feeds[x])
        feeds[e] = np.zeros((4, 0, 2), dt.np)
        long = g.tensor((5, 37), dt, f"l_{dt.name}")
        feeds[long] = edge_values(dt, rng, 185).reshape(5, 37)  # NaN and inf in row 0
        if dt.is_float:
            feeds[long][2, 30] = feeds[long][0, 6]  # a NaN late in a row
        cases.append((f"MaxReduce long {dt.name}", node(g, "MaxReduce", [long], axis=1), True))
        if not dt.is_float:
            cases.append((f"SumReduce long {dt.name}", node(g, "SumReduce", [long], axis=1),
                          True))
        for op in ("SumReduce", "MaxReduce"):
            for ax in range(3):
                cases.append((f"{op}{ax} {dt.name}", node(g, op, [x], axis=ax),
                              op == "MaxReduce" or not dt.is_float))
                cases.append((f"{op}{ax} empty {dt.name}", node(g, op, [e], axis=ax), True))
    check_all(cases, feeds)


def test_sum_accumulates_in_float_for_halves() -> None:
    g = lumos.Graph()
    cases, feeds = [], {}
    for dt in (f16, bf16):
        x = g.tensor((4096,), dt, f"x_{dt.name}")
        feeds[x] = lumos.dtype.from_numpy_value(np.full(4096, 1.0, np.float32), dt)
        cases.append((f"sum {dt.name}", node(g, "SumReduce", [x], axis=0), True))
    results = run_both([t for _, t, _ in cases], feeds)
    for (_, t, _), (got, want) in zip(cases, results, strict=True):
        assert float(lumos.dtype.to_numpy_value(got, t.dtype)) == 4096.0
        assert_same(got, want, t.dtype)


def test_casts() -> None:
    """Every dtype to every dtype, on values each target can represent or truncate."""
    rng = np.random.default_rng(3)
    g = lumos.Graph()
    cases, feeds = [], {}
    for src in ALL:
        x = g.tensor((N,), src, f"x_{src.name}")
        if src.is_float:
            v = np.concatenate([[0.0, -0.0, 0.5, 1.0, 1.99, 100.7, 127.0, 7e4],
                                rng.uniform(0, 120, N - 8)])
            with np.errstate(over="ignore"):  # 7e4 is inf in f16
                vals = lumos.dtype.from_numpy_value(v.astype(np.float32), src)
        else:
            vals = edge_values(src, rng, N)
        feeds[x] = vals
        for dst in ALL:
            if src.is_float and dst.is_int:  # keep float -> int inside the target's range
                y = node(g, "Cast", [x._with_view(x.view.slice(0, 0, N - 1))], dtype=dst)
            else:
                y = node(g, "Cast", [x], dtype=dst)
            cases.append((f"{src.name} -> {dst.name}", y, True))
    # special floats to floats and bool
    s = g.tensor((6,), f32, "specials")
    feeds[s] = np.array([np.nan, np.inf, -np.inf, -0.0, 1e-40, 3.0e38], np.float32)
    for dst in (f64, f16, bf16, bool_):
        cases.append((f"specials -> {dst.name}", node(g, "Cast", [s], dtype=dst), True))
    check_all(cases, feeds)


def test_constants_and_iota() -> None:
    g = lumos.Graph()
    n = g.dim("n")
    cases = []
    values = {f32: [0.1, np.inf, -np.inf, np.nan, -0.0], f64: [0.1, 1e300], f16: [0.1, 7e4],
              bf16: [0.1, 3.3e38], i8: [-128, 127], u8: [255], i16: [-32768],
              i32: [-2**31], i64: [-2**63, 2**63 - 1], bool_: [True, False]}
    for dt, vs in values.items():
        for v in vs:
            c = scalar(g, v, dt)
            # a constant read through a padded broadcast view: 0 outside the padding
            t = c._with_view(c.view.unsqueeze(0).expand((3,)).pad(0, 1, 2))
            cases.append((f"const {v} {dt.name}", node(g, "Cast", [t], dtype=dt), True))
    for dt in (i8, u8, i16, i32, i64):
        e = (z(0) * 7 - z(1) * 3) // 4 + (z(0) - 5 * z(1)) % 3 + n
        cases.append((f"iota {dt.name}", iota(g, e, (6, n), dt), True))
    cases.append(("iota big", iota(g, z(0) * (2**40) - 2**41, (4,), i64), True))
    results = run_both([t for _, t, _ in cases], {}, {"n": 5})
    for (what, t, exact), (got, want) in zip(cases, results, strict=True):
        assert_same(got, want, t.dtype, exact, what)


def test_gather() -> None:
    """Out-of-range indices (negative, past the end) read 0; data read through padded,
    permuted views at flat logical positions; every storage dtype copied exactly."""
    rng = np.random.default_rng(4)
    g = lumos.Graph()
    cases, feeds = [], {}
    for it in (i32, i64, u8, i8):
        idx = g.tensor((5, 6), it, f"idx_{it.name}")
        feeds[idx] = rng.integers(-4 if it.signed else 0, 40, (5, 6)).astype(it.np)
        for dt in ALL:
            d = g.tensor((4, 7), dt, f"d_{it.name}_{dt.name}")
            feeds[d] = edge_values(dt, rng, 28).reshape(4, 7)
            view = d.view.permute((1, 0)).pad(1, 1, 0)  # (7, 5): logical size 35
            cases.append((f"gather {it.name} {dt.name}",
                          node(g, "Gather", [idx, d._with_view(view)]), True))
    c = scalar(g, 2.5, f32)
    cview = c._with_view(c.view.unsqueeze(0).expand((3,)))
    cases.append(("gather from a constant", node(g, "Gather", [idx, cview]), True))
    empty = g.tensor((0,), f32, "empty")
    feeds[empty] = np.zeros(0, np.float32)
    cases.append(("gather from empty", node(g, "Gather", [idx, empty]), True))
    check_all(cases, feeds)


def test_scatter() -> None:
    """Repeated indices: the last write in row-major order wins; out-of-range skipped;
    dest read through a flipped view, the source broadcast."""
    rng = np.random.default_rng(5)
    g = lumos.Graph()
    cases, feeds = [], {}
    idx = g.tensor((3, 8), i64, "idx")
    feeds[idx] = rng.integers(-3, 15, (3, 8))
    for dt in ALL:
        dest = g.tensor((12,), dt, f"dest_{dt.name}")
        src = g.tensor((8,), dt, f"src_{dt.name}")
        feeds[dest], feeds[src] = edge_values(dt, rng, 12), edge_values(dt, rng, 8)[::-1].copy()
        dv = dest._with_view(dest.view.flip(0))
        sv = src._with_view(src.view.unsqueeze(0).expand((3, 8)))
        cases.append((f"scatter {dt.name}", node(g, "Scatter", [dv, idx, sv]), True))
    check_all(cases, feeds)


def test_views_of_every_kind() -> None:
    """One binary op per kind of view, each reading a 4x6 input (exact)."""
    rng = np.random.default_rng(6)
    g = lumos.Graph()
    x = g.tensor((4, 6), f32, "x")
    feeds = {x: rng.standard_normal((4, 6)).astype(np.float32)}
    v = x.view
    views = {
        "permute": v.permute((1, 0)),
        "slice step": v.slice(1, 5, 3, -2),
        "flip": v.flip(0),
        "pad": v.pad(0, 2, 1).pad(1, 0, 3),
        "reshape of permute": v.permute((1, 0)).reshape((3, 8)),
        "repeat": v.repeat(0, 3),
        "select": v.select(1, 2),
        "diagonal": v.remap((4,), {"z0": z(0), "z1": z(0)}),
        "sliding window": v.select(0, 1).remap((3, 4), {"z0": z(0) + z(1)}),
        "broadcast": v.select(0, 0).unsqueeze(0).expand((5, 6)),
    }
    cases = []
    for name, view in views.items():
        t = x._with_view(view)
        cases.append((name, node(g, "Add", [t, t]), True))
        cases.append((f"{name} copied out", t, True))
    assert View.contiguous((4, 6)) is v
    check_all(cases, feeds)
