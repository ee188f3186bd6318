"""Each core rule file on its own: what it derives, and what it must not."""

import lumos
from lumos.egraph import CORE, Rules, Stage
from lumos.egraph.testing import RuleCheck
from lumos.frontend.tensor import node, scalar
from lumos.shape import Var, sym, z
from lumos.shape.expr import emin

EXPR = Rules(CORE.texts, (Stage(saturate=("expr",)),))


def algebra(g: lumos.Graph) -> RuleCheck:
    return RuleCheck(CORE, graph=g)


def test_commutativity():
    g = lumos.Graph()
    a, b = g.tensor((3, 4), name="a"), g.tensor((4,), name="b")
    s1, s2, p1, p2 = a + b, b + a, a * b, b * a  # b is broadcast: the views swap too
    for t in (s1, s2, p1, p2):
        t.output()
    rc = algebra(g)
    assert rc.equal(s1, s2) and rc.equal(p1, p2)
    assert not rc.equal(s1, p1)


def test_times_one_and_minus_zero():
    g = lumos.Graph()
    x = g.tensor((3, 4), name="x")
    one, mzero, two, twice = x * 1.0, x + (-0.0), x * 2.0, x + x
    plus_zero = x + 0.0
    for t in (one, mzero, two, twice, plus_zero):
        t.output()
    rc = algebra(g)
    assert rc.equal(one, x)
    assert rc.equal(mzero, x)
    assert rc.equal(two, twice)
    assert not rc.equal(plus_zero, x)  # -0.0 + 0.0 is +0.0


def test_times_one_only_for_the_whole_buffer_in_order():
    g = lumos.Graph()
    x = g.tensor((3, 4), name="x")
    t = x.transpose(0, 1) * 1.0         # a permuted read: a different buffer
    part = x.narrow(0, 0, 2) * 1.0       # a row-major prefix: a smaller buffer
    padded = x * lumos.Tensor.pad(lumos.full_like(x[:, :2], 1.0), (1, 1))  # zeros at the edges
    for u in (t, part, padded):
        u.output()
    rc = algebra(g)
    assert not rc.equal(t, x)
    assert not rc.equal(part, x)
    assert not rc.equal(padded, x)


def test_int_and_bool_identities():
    g = lumos.Graph()
    i = g.tensor((5,), lumos.i32, name="i")
    m = g.tensor((5,), lumos.bool_, name="m")
    i1, i2, ii = i * 1, i * 2, i + i
    m1 = node(g, "Mul", [m, scalar(g, True, lumos.bool_).expand(5)])  # bool Mul is and
    for t in (i1, i2, ii, m1):
        t.output()
    rc = algebra(g)
    assert rc.equal(i1, i) and rc.equal(i2, ii) and rc.equal(m1, m)


def test_no_exp2_log2():
    g = lumos.Graph()
    x = g.tensor((4,), name="x")
    y = x.log2().exp2()
    y.output()
    assert not algebra(g).equal(y, x)


def test_dtype_and_shape_facts():
    g = lumos.Graph()
    x = g.tensor(("s", 4), lumos.f16, name="x")
    (x < 1.0).output()
    rc = RuleCheck(Rules(CORE.texts, (Stage(saturate=("dtype",)),)), graph=g)
    assert rc.check('(= (dtype-of (Op (HInput sh d "x") (INil))) "f16")')
    assert rc.check('(= t (Op (HLessThan sh va vb) l)) (= (dtype-of t) "bool")')
    assert rc.check('(= t (Op (HLessThan sh va vb) l)) '
                    '(= (shape-of t) (ECons (Var "s") (ECons (Num 4) (ENil))))')


def test_expr_bounds():
    s = Var("s")
    exprs = [(z(0) % 8, (4,)), (z(0) % 8, (16,)), (z(0) // 8, (8,)), ((z(0) + 3).lt(600), (s,)),
             ((z(0) + 3).lt(600), (s,)), (emin(z(0), s), (s,)), (z(0) * 1 + 0, (s,))]
    rc = RuleCheck(EXPR, exprs=exprs, bounds={"s": (1, 512)})
    assert rc.equal((z(0) % 8, (4,)), (z(0), (4,)))
    assert not rc.equal((z(0) % 8, (16,)), (z(0), (16,)))
    assert rc.equal((z(0) // 8, (8,)), sym(0))
    assert rc.equal(((z(0) + 3).lt(600), (s,)), sym(1))
    assert rc.equal((emin(z(0), s), (s,)), (z(0), (s,)))
    # without an upper bound on s, nothing is decided
    rc = RuleCheck(EXPR, exprs=exprs, bounds={"s": (1, None)})
    assert not rc.equal(((z(0) + 3).lt(600), (s,)), sym(1))
    assert rc.equal((emin(z(0), s), (s,)), (z(0), (s,)))


def test_size_one_axis_collapses():
    rc = RuleCheck(EXPR, exprs=[(z(0) * 4 + z(1), (1, 4))])
    assert rc.equal((z(0) * 4 + z(1), (1, 4)), (z(1), (1, 4)))


def test_empty_axis_decides_nothing():
    """A size-0 axis has no valid index: its bounds must not make 0 equal 1."""
    rc = RuleCheck(EXPR, exprs=[(z(0).lt(1), (0,)), (z(0).ge(0), (0,))])
    assert not rc.equal(sym(0), sym(1))
