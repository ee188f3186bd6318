"""The search's check of a candidate against the oracle (tune.matches, tune.slack): a
wrong element, a tail element or a spurious NaN loses; what an ordinary float evaluation
of the same graph rounds to passes, however deep the graph."""

from __future__ import annotations

import numpy as np

import lumos
from lumos.runtime.cpu.tune import RTOL, SLACK, matches, profiling_inputs, slack
from lumos.runtime.reference import run_hlir

F32 = lumos.f32


def test_rtol_of_the_scale_bounds_a_well_conditioned_output():
    rng = np.random.default_rng(0)
    want = rng.standard_normal((7, 33)).astype(np.float32) * 10
    scale = float(np.abs(want).max())
    near = want.copy()
    near[3, 5] += 0.9 * RTOL["f32"] * scale
    assert matches(near, want, F32)
    for k in ((3, 5), (6, 32)):  # an element inside, the tail element
        bad = want.copy()
        bad[k] += 2.5 * RTOL["f32"] * scale  # just over: rtol + atol of the scale
        assert not matches(bad, want, F32)
    nan = want.copy()
    nan[6, 32] = np.nan
    assert not matches(nan, want, F32)
    assert not matches(nan, want, F32, drift=1e9)  # a spurious NaN loses whatever the slack
    assert matches(nan, nan, F32)  # ... a NaN where the oracle has one does not


def test_slack_widens_the_bound_to_a_multiple_of_the_plain_evaluations_drift():
    want = np.full((4, 4), 100.0, np.float32)
    off = want + np.float32(0.05)  # 5e-4 of the scale: past RTOL
    assert not matches(off, want, F32)
    assert matches(off, want, F32, drift=0.05 / SLACK * 1.01)
    assert not matches(off, want, F32, drift=0.05 / SLACK * 0.5)
    ints = np.arange(6, dtype=np.int32)
    assert not matches(ints + 1, ints, lumos.i32, drift=1e9)  # ints stay exact


def deep_products(layers: int) -> lumos.Graph:
    """x @ w_1 @ ... @ w_layers, each product renormalized: float rounding of the sums
    accumulates with depth."""
    g = lumos.Graph()
    x = g.tensor((16, 64), F32, "x")
    for i in range(layers):
        w = g.tensor((64, 64), F32, f"w{i}")
        x = x @ w
        x = x * (x * x).mean(-1, keepdim=True).rsqrt()
    x.output()
    return g


def test_slack_is_what_plain_sums_round_and_zero_without_products():
    env: dict[str, int] = {}
    g = deep_products(12)
    data = profiling_inputs(g, env, 0)
    want = run_hlir(g, data, env)
    (s,) = slack(g, data, env, want)
    plain = run_hlir(g, data, env, wide=False)[0]
    assert s == float(np.abs(plain.astype(np.float64) - want[0]).max()) > 0
    assert matches(plain, want[0], F32, s)  # the plain evaluation itself passes
    h = lumos.Graph()
    y = h.tensor((8,), F32, "y")
    (y * 2 + 1).exp().output()
    hd = profiling_inputs(h, env, 0)
    assert slack(h, hd, env, run_hlir(h, hd, env)) == [0.0]


def test_an_overflow_of_the_plain_sums_widens_nothing():
    """Products whose f32 sums overflow where the oracle's f64 sums do not: the plain
    evaluation's inf is no drift to allow (it would let any finite candidate pass)."""
    g = lumos.Graph()
    a = g.tensor((2, 3), F32, "a")
    b = g.tensor((3, 2), F32, "b")
    (a @ b).output()
    env: dict[str, int] = {}
    # 3e38 + 3e38 - 3e38: inf summed in order in f32, 3e38 in f64
    data = {"a": np.array([[1e19, 1e19, -1e19]] * 2, np.float32),
            "b": np.full((3, 2), 3e19, np.float32)}
    want = run_hlir(g, data, env)
    assert np.isfinite(want[0]).all()
    with np.errstate(over="ignore"):
        assert not np.isfinite(run_hlir(g, data, env, wide=False)[0]).all()
        assert slack(g, data, env, want) == [0.0]
