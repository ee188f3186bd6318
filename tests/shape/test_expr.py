"""Symbolic integer expressions: value preservation, canonical forms, bounds, C output."""

from __future__ import annotations

import pickle

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lumos.shape import Num, Var, View, emax, emin, nrange, proves_lt, simplify, sym, z
from lumos.shape.expr import Expr

NAMED = ("a", "b")  # named dims: values >= 1
AXES = ("z0", "z1")  # axis variables: values >= 0

# -- random expression trees, evaluated independently in Python -----------------

leaf = st.one_of(st.tuples(st.just("num"), st.integers(-20, 20)),
                 st.tuples(st.just("var"), st.sampled_from(NAMED + AXES)))

# divisors must be positive (the contract of // and % in shapes and views)
positive = st.recursive(
    st.one_of(st.tuples(st.just("num"), st.integers(1, 12)),
              st.tuples(st.just("var"), st.sampled_from(NAMED)),
              st.tuples(st.just("add"), st.tuples(st.just("var"), st.sampled_from(AXES)),
                        st.tuples(st.just("num"), st.integers(1, 4)))),
    lambda p: st.one_of(st.tuples(st.just("mul"), p, p), st.tuples(st.just("add"), p, p)),
    max_leaves=3)


def _node(children: st.SearchStrategy) -> st.SearchStrategy:
    return st.one_of(
        st.tuples(st.sampled_from(["add", "sub", "mul", "min", "max", "lt", "ge", "and", "or"]),
                  children, children),
        st.tuples(st.sampled_from(["fdiv", "mod"]), children, positive),
        st.tuples(st.just("neg"), children),
        st.tuples(st.sampled_from(["radd", "rsub", "rmul"]), st.integers(-9, 9), children),
    )


trees = st.recursive(leaf, _node, max_leaves=12)


def build(t: tuple) -> Expr:
    op = t[0]
    if op == "num":
        return Num(t[1])
    if op == "var":
        return Var(t[1])
    if op == "neg":
        return -build(t[1])
    if op in ("radd", "rsub", "rmul"):  # a Python int on the left
        k, e = t[1], build(t[2])
        return {"radd": k + e, "rsub": k - e, "rmul": k * e}[op]
    a, b = build(t[1]), build(t[2])
    return {"add": lambda: a + b, "sub": lambda: a - b, "mul": lambda: a * b,
            "fdiv": lambda: a // b, "mod": lambda: a % b, "min": lambda: emin(a, b),
            "max": lambda: emax(a, b), "lt": lambda: a.lt(b), "ge": lambda: a.ge(b),
            "and": lambda: a & b, "or": lambda: a | b}[op]()


def py_eval(t: tuple, env: dict[str, int]) -> int:
    op = t[0]
    if op == "num":
        return t[1]
    if op == "var":
        return env[t[1]]
    if op == "neg":
        return -py_eval(t[1], env)
    if op in ("radd", "rsub", "rmul"):
        k, v = t[1], py_eval(t[2], env)
        return {"radd": k + v, "rsub": k - v, "rmul": k * v}[op]
    a, b = py_eval(t[1], env), py_eval(t[2], env)
    return {"add": a + b, "sub": a - b, "mul": a * b,
            "fdiv": a // b if op == "fdiv" else 0, "mod": a % b if op == "mod" else 0,
            "min": min(a, b), "max": max(a, b), "lt": int(a < b), "ge": int(a >= b),
            "and": int(bool(a) and bool(b)), "or": int(bool(a) or bool(b))}[op]


envs = st.fixed_dictionaries({**{n: st.integers(1, 40) for n in NAMED},
                              **{n: st.integers(0, 40) for n in AXES}})


@settings(max_examples=200)
@given(trees, st.lists(envs, min_size=1, max_size=4))
def test_building_preserves_value(t, env_list):
    e = build(t)
    for env in env_list:
        assert e.eval(env) == py_eval(t, env), (t, e, env)


@settings(max_examples=200)
@given(trees, st.lists(envs, min_size=1, max_size=3))
def test_eval_on_arrays_matches_scalars(t, env_list):
    e = build(t)
    arr_env = {k: np.array([env[k] for env in env_list], dtype=np.int64) for k in env_list[0]}
    got = np.broadcast_to(np.asarray(e.eval(arr_env)), (len(env_list),))
    assert list(got) == [e.eval(env) for env in env_list]


@settings(max_examples=200)
@given(trees, st.integers(0, 9), st.integers(1, 9), st.integers(1, 6), st.booleans(),
       st.randoms(use_true_random=False))
def test_simplify_preserves_value_within_bounds(t, z0_hi, a_hi, b_lo, z1_below_a, rnd):
    """simplify(e, bounds) agrees with e on every assignment inside the bounds."""
    bounds = {"a": (1, a_hi), "b": (b_lo, b_lo + 5), "z0": (0, z0_hi),
              "z1": (0, Var("a") - 1 if z1_below_a else Var("b") + 2)}
    e = build(t)
    s = simplify(e, bounds)
    assert simplify(s, bounds) is s  # idempotent
    for _ in range(25):
        env = {"a": rnd.randint(1, a_hi), "b": rnd.randint(b_lo, b_lo + 5),
               "z0": rnd.randint(0, z0_hi)}
        env["z1"] = rnd.randint(0, env["a"] - 1 if z1_below_a else env["b"] + 2)
        assert s.eval(env) == e.eval(env), (e, s, env)
        lo, hi = nrange(e, bounds)
        v = e.eval(env)
        assert (lo is None or lo <= v) and (hi is None or v <= hi), (e, lo, hi, env)


@settings(max_examples=200)
@given(trees)
def test_pickle_round_trip_keeps_identity(t):
    e = build(t)
    assert pickle.loads(pickle.dumps(e)) is e
    assert sym(e) is e and repr(e) == e.key()


@settings(max_examples=200)
@given(trees, envs)
def test_subs_matches_eval(t, env):
    e = build(t)
    partial = e.subs({"a": env["a"], "z0": env["z0"]})
    assert not ({"a", "z0"} & partial.vars())
    assert partial.eval(env) == e.eval(env)
    swapped = e.subs({"z0": Var("z1"), "z1": Var("z0")})  # simultaneous
    assert swapped.eval({**env, "z0": env["z1"], "z1": env["z0"]}) == e.eval(env)
    assert e.subs({n: env[n] for n in NAMED + AXES}) is Num(e.eval(env))


# -- canonical forms ----------------------------------------------------------------

s, t_, x = Var("s"), Var("t"), z(0)


@pytest.mark.parametrize("k", [1, 2, 8, 64, Var("s"), Var("s") * 4])
def test_div_mod_recombine(k):
    assert (x // k) * k + x % k is x
    assert x % k + k * (x // k) is x
    assert 3 * ((x // k) * k) + 3 * (x % k) - 1 is 3 * x - 1


def test_build_time_identities():
    assert (s * 64) // 64 is s
    assert (s * 64) % 64 is Num(0)
    assert (s * t_) // t_ is s
    assert (x * 8 + 3) // 8 is x + 3 // Num(8)
    assert (4 * x + 8 * s) // 4 is x + 2 * s
    assert (x // 4) // 2 is x // 8
    assert (x % 12) // 4 is (x // 4) % 3
    assert (x % 12) % 4 is x % 4
    assert (2 * x) % 4 is 2 * (x % 2)
    assert (225 + 2 * x) % 224 is (1 + 2 * x) % 224  # the constant reduced modulo 224
    assert simplify((225 + 2 * x) % 224, {"z0": (0, 111)}) is 1 + 2 * x  # (a pool's column)
    assert (-1 + x) % 4 is (x - 1) % 4  # (a negative one left: x - 1 may be in range)
    # one quotient over the bounds: x % m is x - q*m (a padded window's column, x >= 1)
    assert simplify((55 + x) % 56, {"z0": (1, 55)}) is x - 1
    assert simplify((55 + x) % 56, {"z0": (0, 55)}) is (55 + x) % 56  # (two quotients)
    # decided after the build rewrote it: (2*y) % 16 is 2*(y % 8), and y % 8 is y below 8
    assert simplify((2 * z(1)) % 16, {"z1": (0, 7)}) is 2 * z(1)
    assert s + t_ is t_ + s and s * t_ is t_ * s
    assert (s + 1) * 2 is 2 * s + 2
    assert s - s is Num(0) and s // s is Num(1) and s % s is Num(0)
    assert emin(s, s + 1) is s and emax(s, s + 1) is s + 1
    assert emin(s, t_) is emin(t_, s)
    assert s.lt(s + 1) is Num(1) and s.ge(s + 1) is Num(0)
    c = s.lt(t_)
    assert (c & 1) is c and (c & 0) is Num(0) and (c | 1) is Num(1) and (c | 0) is c
    assert (c & c) is c and (s & 0) is Num(0) and (s | 3) is Num(1)
    assert (s & 1).eval({"s": 5}) == 1 and (s | 0).eval({"s": 5}) == 1  # truth values
    assert (-7) // Num(2) is Num(-4) and Num(-7) % 2 is Num(1)  # floor semantics


def test_bound_aware_rules():
    b = {"z0": (0, 7), "s": (1, 64), "z1": (0, s - 1)}
    z1 = z(1)
    assert simplify(x % 8, b) is x
    assert simplify(x // 8, b) is Num(0)
    assert simplify(z1 % s, b) is z1
    assert simplify(z1 // s, b) is Num(0)
    assert simplify((z1 + s * x) // s, b) is x
    assert simplify((z1 + s * x) % s, b) is z1
    assert simplify(emin(x, 9), b) is x and simplify(emax(x, -1), b) is x
    assert simplify(x.lt(8), b) is Num(1) and simplify(z1.ge(s), b) is Num(0)
    assert simplify(x * 0 + emin(s, 100), b) is s
    assert simplify(x, {"z0": (0, 0)}) is Num(0)
    # a remainder below the common factor drops out of // and %
    assert simplify((4 * x + z1) // 8, {"z0": (0, 9), "z1": (0, 3)}) is x // 2
    assert simplify((4 * x + z1) % 8, {"z0": (0, 9), "z1": (0, 3)}) is 4 * (x % 2) + z1
    assert simplify((z1 + s * x) // (2 * s), b) is x // 2


def test_axis_variables_default_to_nonnegative():
    # without declared bounds an axis variable may be 0 (a named dim is >= 1)
    assert nrange(x, {})[0] == 0
    e = 1 // (x + 1)
    assert simplify(e, {}).eval({"z0": 0}) == 1
    assert nrange(s, {})[0] == 1


def test_proves_lt():
    b = {"z0": (0, s - 1), "s": (1, None)}
    assert proves_lt(x, s, b)
    assert not proves_lt(x, s - 1, b)
    assert proves_lt(x + 1, s + 1, b)
    assert not proves_lt(s, x, b)


def test_reshape_merge_split_identities():
    a = View.contiguous((s, 6))
    assert a.reshape((6 * s,)).reshape((s, 6)).is_contiguous()
    assert a.reshape((s, 2, 3)).reshape((s, 6)).is_contiguous()
    tr = a.permute((1, 0))  # (6, s), index z0 + 6*z1
    for mid in [(3, 2, Var("s")), (2, 3, Var("s")), (6, Var("s"), 1)]:
        assert tr.reshape(mid).reshape((6, s)) == tr
    assert tr.reshape((3, 2, s)).reshape((6, s)).permute((1, 0)).is_contiguous()
    n = View.contiguous((4, 6)).permute((1, 0))
    assert n.reshape((3, 2, 4)).reshape((6, 4)) == n
    assert n.reshape((24,)).reshape((6, 4)) == n


def test_errors():
    with pytest.raises(TypeError):
        sym(1.5)
    with pytest.raises(TypeError):
        bool(s)
    with pytest.raises(ZeroDivisionError):
        s // 0
    with pytest.raises(ZeroDivisionError):
        s % 0
    with pytest.raises(ValueError):
        s.value  # noqa: B018
    with pytest.raises(KeyError, match="'s'"):
        (s + 1).eval({})
    assert int(Num(5)) == 5 and [10, 20, 30][Num(1)] == 20


def test_to_c():
    assert (x // 4).to_c({"z0": (0, 100)}) == "(z0 / 4)"
    assert (x % 4).to_c({"z0": (0, 100)}) == "(z0 % 4)"
    assert (x - 5).__floordiv__(4).to_c({"z0": (0, 100)}) == "LUMOS_FDIV((-5 + z0), 4)"
    assert ((x - 5) % 4).to_c({"z0": (0, 100)}) == "LUMOS_FMOD((-5 + z0), 4)"
    assert emin(x, s).to_c() == "LUMOS_MIN(s, z0)"
    assert emax(x, s).to_c() == "LUMOS_MAX(s, z0)"
    assert (x.lt(s) & x.ge(1)).to_c() in ("((z0 < s) && (z0 >= 1))", "((z0 >= 1) && (z0 < s))")
    assert (3 * x + 2**40).to_c() == "(1099511627776LL + 3*z0)"
    assert Num(-3).to_c() == "-3" and s.to_c() == "s"
