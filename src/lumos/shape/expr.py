"""Symbolic integer expressions: hash-consed, canonical, bound-aware.

An `Expr` is a number, a named dimension (`s`, `batch`), an axis variable
(`z0`, `z1`, ... — the position along one axis of a view), or an operation on
those. Sums and products are kept as canonical polynomials (a sorted tuple of
(monomial, coefficient) pairs), so equal polynomials are the same object and
`a is b` / `a == b` is structural equality. `//` and `%` follow Python's floor
semantics; every rewrite applied while building is valid for a positive
divisor, which is all that shapes and index math produce.

Bound-aware rules (``(z % 8) -> z`` when ``z < 8``) need to know the ranges of
the variables; they run in `simplify(e, bounds)`.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from typing import Any, Union

import numpy as np

IntLike = Union[int, "Expr"]

_BINARY = ("fdiv", "mod", "min", "max", "lt", "ge", "and", "or")


class Expr:
    """One interned node. Build with `sym`, `Num`, `Var` and Python operators."""

    __slots__ = ("op", "args", "_key", "__weakref__")
    op: str
    args: tuple

    def __new__(cls, op: str, args: tuple) -> Expr:  # only through _make
        raise TypeError("use lumos.shape.sym(...) / Num / Var to build expressions")

    # -- arithmetic ---------------------------------------------------------
    def __add__(self, o: IntLike) -> Expr:
        return _add(self, sym(o))

    __radd__ = __add__

    def __sub__(self, o: IntLike) -> Expr:
        return _add(self, _mul(sym(o), NEG_ONE))

    def __rsub__(self, o: IntLike) -> Expr:
        return _add(sym(o), _mul(self, NEG_ONE))

    def __mul__(self, o: IntLike) -> Expr:
        return _mul(self, sym(o))

    __rmul__ = __mul__

    def __neg__(self) -> Expr:
        return _mul(self, NEG_ONE)

    def __floordiv__(self, o: IntLike) -> Expr:
        return fdiv(self, sym(o))

    def __rfloordiv__(self, o: IntLike) -> Expr:
        return fdiv(sym(o), self)

    def __mod__(self, o: IntLike) -> Expr:
        return mod(self, sym(o))

    def __rmod__(self, o: IntLike) -> Expr:
        return mod(sym(o), self)

    def lt(self, o: IntLike) -> Expr:
        return lt(self, sym(o))

    def ge(self, o: IntLike) -> Expr:
        return ge(self, sym(o))

    def __and__(self, o: IntLike) -> Expr:
        return and_(self, sym(o))

    def __or__(self, o: IntLike) -> Expr:
        return or_(self, sym(o))

    # -- inspection ---------------------------------------------------------
    @property
    def is_num(self) -> bool:
        return self.op == "num"

    @property
    def value(self) -> int:
        if self.op != "num":
            raise ValueError(f"expression {self} is not a number")
        return self.args[0]

    def __int__(self) -> int:
        return self.value

    def __index__(self) -> int:
        return self.value

    def __bool__(self) -> bool:
        raise TypeError(f"truth value of symbolic expression {self} is ambiguous")

    def vars(self) -> frozenset[str]:
        return _vars(self)

    def subs(self, mapping: Mapping[str, IntLike]) -> Expr:
        """Simultaneous substitution of variables by expressions."""
        m = {k: sym(v) for k, v in mapping.items()}
        if not m or not (self.vars() & m.keys()):
            return self
        memo: dict[int, Expr] = {}

        def go(e: Expr) -> Expr:
            r = memo.get(id(e))
            if r is not None:
                return r
            if e.op == "var":
                r = m.get(e.args[0], e)
            elif e.op == "num" or not (e.vars() & m.keys()):
                r = e
            elif e.op == "sum":
                r = ZERO
                for mono, c in e.args:
                    t = Num(c)
                    for a in mono:
                        t = _mul(t, go(a))
                    r = _add(r, t)
            else:
                r = _BUILD[e.op](go(e.args[0]), go(e.args[1]))
            memo[id(e)] = r
            return r

        return go(self)

    def eval(self, env: Mapping[str, Any]) -> Any:
        """Evaluate with ints or numpy arrays bound to the variables (floor semantics)."""
        return _eval(self, env, {})

    def to_c(self, bounds: Mapping[str, tuple[IntLike, IntLike | None]] | None = None) -> str:
        """C source. `//` and `%` become C `/` and `%` where `bounds` proves the
        dividend non-negative, else the macros LUMOS_FDIV / LUMOS_FMOD."""
        return _to_c(self, bounds or {}, {})

    def key(self) -> str:
        """A structural string, stable across processes (used for ordering and hashing)."""
        return self._key

    def __repr__(self) -> str:
        return self._key

    def __reduce__(self):
        return (_rebuild, (self.op, self.args))


_TABLE: dict[tuple, Expr] = {}


def _make(op: str, args: tuple) -> Expr:
    k = (op, args)
    e = _TABLE.get(k)
    if e is None:
        e = object.__new__(Expr)
        e.op, e.args = op, args
        e._key = _render(op, args)
        _TABLE[k] = e
    return e


def _rebuild(op: str, args: tuple) -> Expr:
    if op in ("num", "var"):
        return _make(op, args)
    if op == "sum":
        r = ZERO
        for mono, c in args:
            t = Num(c)
            for a in mono:
                t = _mul(t, a)
            r = _add(r, t)
        return r
    return _BUILD[op](*args)


def _render(op: str, args: tuple) -> str:
    if op == "num":
        return str(args[0])
    if op == "var":
        return args[0]
    if op == "sum":
        parts = []
        for mono, c in args:
            if not mono:
                parts.append(str(c))
                continue
            body = "*".join(_paren(a) for a in mono)
            parts.append(body if c == 1 else f"-{body}" if c == -1 else f"{c}*{body}")
        s = " + ".join(parts)
        return s.replace("+ -", "- ")
    sym_ = {"fdiv": "//", "mod": "%", "lt": "<", "ge": ">=", "and": "&&", "or": "||"}
    a, b = args
    if op in sym_:
        return f"{_paren(a)} {sym_[op]} {_paren(b)}"
    return f"{op}({a._key}, {b._key})"


def _paren(e: Expr) -> str:
    return e._key if e.op in ("num", "var") else f"({e._key})"


def Num(v: int) -> Expr:
    return _make("num", (int(v),))


def Var(name: str) -> Expr:
    return _make("var", (name,))


def sym(x: IntLike | str) -> Expr:
    if isinstance(x, Expr):
        return x
    if isinstance(x, str):
        return Var(x)
    if isinstance(x, (bool, int, np.integer)):
        return Num(int(x))
    raise TypeError(f"cannot use {x!r} ({type(x).__name__}) as a symbolic integer")


_AXIS = re.compile(r"z(?:[0-9]+|r[0-9]*|p|g[0-9]+)")  # and the CPU codegen's zr, zr<k>, zp, zg<k>


def is_axis_var(name: str) -> bool:
    """Axis variables are named z0, z1, ... (loop variables of generated code: zr, zr0,
    zp, zg0, ...); named dimensions may not look like that."""
    return _AXIS.fullmatch(name) is not None


def z(i: int) -> Expr:
    """The axis variable of axis `i` of a view."""
    return Var(f"z{i}")


ZERO, ONE, NEG_ONE = Num(0), Num(1), Num(-1)


# -- polynomials ------------------------------------------------------------

Poly = dict  # monomial (tuple of atom Exprs, sorted by key) -> int coefficient


def _poly(e: Expr) -> Poly:
    if e.op == "num":
        return {(): e.args[0]} if e.args[0] else {}
    if e.op == "sum":
        return dict(e.args)
    return {(e,): 1}


def _from_poly(p: Poly) -> Expr:
    p = {m: c for m, c in p.items() if c}
    if any(a.op == "mod" for m in p for a in m):
        p = _recombine(p)
    if not p:
        return ZERO
    if len(p) == 1:
        (m, c), = p.items()
        if not m:
            return Num(c)
        if c == 1 and len(m) == 1:
            return m[0]
    items = tuple(sorted(p.items(), key=lambda mc: (len(mc[0]), [a._key for a in mc[0]])))
    return _make("sum", items)


def _recombine(p: Poly) -> Poly:
    """(x // k) * k + x % k  ->  x, for a single-term k (a number, 4*s, s*t)."""
    changed = True
    while changed:
        changed = False
        for m, c in list(p.items()):
            if len(m) != 1 or m[0].op != "mod" or m not in p:
                continue
            x, k = m[0].args
            kt = _single_term(k)
            if kt is None:
                continue
            q = fdiv(x, k)
            if q.op == "sum":
                continue
            qm, qc = tuple(sorted((q, *kt[0]), key=lambda a: a._key)), c * kt[1]
            if p.get(qm) == qc:
                del p[m], p[qm]
                for xm, xc in _poly(x).items():
                    p[xm] = p.get(xm, 0) + xc * c
                    if not p[xm]:
                        del p[xm]
                changed = True
    return p


def _add(a: Expr, b: Expr) -> Expr:
    if a.op == "num" and b.op == "num":
        return Num(a.args[0] + b.args[0])
    if b is ZERO:
        return a
    if a is ZERO:
        return b
    p = _poly(a)
    for m, c in _poly(b).items():
        p[m] = p.get(m, 0) + c
    return _from_poly(p)


def _mul(a: Expr, b: Expr) -> Expr:
    if a.op == "num" and b.op == "num":
        return Num(a.args[0] * b.args[0])
    if a is ONE:
        return b
    if b is ONE:
        return a
    if a is ZERO or b is ZERO:
        return ZERO
    p: Poly = {}
    for ma, ca in _poly(a).items():
        for mb, cb in _poly(b).items():
            m = tuple(sorted(ma + mb, key=lambda x: x._key))
            p[m] = p.get(m, 0) + ca * cb
    return _from_poly(p)


def _single_term(e: Expr) -> tuple[tuple, int] | None:
    p = _poly(e)
    if len(p) == 1:
        (m, c), = p.items()
        if c > 0:
            return m, c
    return None


def _divides(mono: tuple, by: tuple) -> tuple | None:
    rest = list(mono)
    for a in by:
        if a in rest:
            rest.remove(a)
        else:
            return None
    return tuple(rest)


def _split_multiples(p: Poly, mono: tuple, coeff: int) -> tuple[Poly, Poly]:
    """Split p into q * (coeff * mono) + r: q takes the terms that are exact multiples."""
    q: Poly = {}
    r: Poly = {}
    for m, c in p.items():
        rest = _divides(m, mono)
        if rest is not None and c % coeff == 0:
            q[rest] = q.get(rest, 0) + c // coeff
        else:
            r[m] = c
    return q, r


def _split_poly(p: Poly, b: Poly) -> tuple[Poly, Poly]:
    """Split p into q * b + r for a polynomial b (e.g. 64 + 64*s), q taking the multiples
    of b whose every term is found intact in p."""
    lm, lc = max(b.items(), key=lambda mc: (len(mc[0]), [a._key for a in mc[0]]))
    q: Poly = {}
    r = dict(p)
    for m, c in p.items():
        rest = _divides(m, lm)
        if m not in r or rest is None or c % lc:
            continue
        k = c // lc
        prod = {tuple(sorted(rest + bm, key=lambda x: x._key)): k * bc for bm, bc in b.items()}
        if all(r.get(pm) == pc for pm, pc in prod.items()):
            for pm in prod:
                del r[pm]
            q[rest] = q.get(rest, 0) + k
    return q, r


def fdiv(a: Expr, b: Expr) -> Expr:
    if b.op == "num":
        if b.args[0] == 0:
            raise ZeroDivisionError(f"symbolic division of {a} by zero")
        if a.op == "num":
            return Num(a.args[0] // b.args[0])
        if b is ONE:
            return a
    if a is ZERO:
        return ZERO
    if a is b:
        return ONE
    t = _single_term(b)
    if t is None:
        q, r = _split_poly(_poly(a), _poly(b)) if b.op == "sum" else ({}, {})
        if q:  # (q*b + r) // b -> q + r // b
            return _add(_from_poly(q), fdiv(_from_poly(r), b))
        return _make("fdiv", (a, b))
    bm, bc = t
    p = _poly(a)
    g = math.gcd(bc, *p.values())
    if g > 1 and (bm or bc != g):
        return fdiv(_from_poly({m: c // g for m, c in p.items()}), _from_poly({bm: bc // g}))
    q, r = _split_multiples(p, bm, bc)  # move exact multiples of b out of the division
    if q:
        return _add(_from_poly(q), fdiv(_from_poly(r), b))
    if a.op == "fdiv" and _single_term(a.args[1]) is not None:  # (x // k1) // k2
        return fdiv(a.args[0], _mul(a.args[1], b))
    if a.op == "mod" and b.op == "num" and a.args[1].op == "num":
        k = a.args[1].args[0]
        if k % b.args[0] == 0 and k > 0:  # (x % (k1*k2)) // k1 -> (x // k1) % k2
            return mod(fdiv(a.args[0], b), Num(k // b.args[0]))
    return _make("fdiv", (a, b))


def mod(a: Expr, b: Expr) -> Expr:
    if b.op == "num":
        if b.args[0] == 0:
            raise ZeroDivisionError(f"symbolic modulo of {a} by zero")
        if a.op == "num":
            return Num(a.args[0] % b.args[0])
        if b is ONE:
            return ZERO
    if a is ZERO or a is b:
        return ZERO
    t = _single_term(b)
    if t is None:
        q, r = _split_poly(_poly(a), _poly(b)) if b.op == "sum" else ({}, {})
        return mod(_from_poly(r), b) if q else _make("mod", (a, b))
    bm, bc = t
    p = _poly(a)
    g = math.gcd(bc, *p.values())
    if g > 1 and (bm or bc != g):  # (2x) % 4 -> 2 * (x % 2)
        inner = mod(_from_poly({m: c // g for m, c in p.items()}), _from_poly({bm: bc // g}))
        return _mul(Num(g), inner)
    r = {m: c for m, c in p.items() if not (_divides(m, bm) is not None and c % bc == 0)}
    if not bm and r.get((), 0) >= bc:  # (225 + 2x) % 224 -> (1 + 2x) % 224
        r[()] %= bc
    if r != p:
        return mod(_from_poly(r), b)
    if a.op == "mod":
        inner = _single_term(a.args[1])
        if inner is not None and _divides(inner[0], bm) is not None and inner[1] % bc == 0:
            return mod(a.args[0], b)  # (x % (n*k)) % k -> x % k
    return _make("mod", (a, b))


def emin(a: IntLike, b: IntLike) -> Expr:
    a, b = sym(a), sym(b)
    if a.op == "num" and b.op == "num":
        return Num(min(a.args[0], b.args[0]))
    if a is b:
        return a
    d = _add(a, _mul(b, NEG_ONE))
    if d.op == "num":
        return a if d.args[0] <= 0 else b
    return _make("min", tuple(sorted((a, b), key=lambda x: x._key)))


def emax(a: IntLike, b: IntLike) -> Expr:
    a, b = sym(a), sym(b)
    if a.op == "num" and b.op == "num":
        return Num(max(a.args[0], b.args[0]))
    if a is b:
        return a
    d = _add(a, _mul(b, NEG_ONE))
    if d.op == "num":
        return a if d.args[0] >= 0 else b
    return _make("max", tuple(sorted((a, b), key=lambda x: x._key)))


def lt(a: Expr, b: Expr) -> Expr:
    d = _add(a, _mul(b, NEG_ONE))
    if d.op == "num":
        return Num(int(d.args[0] < 0))
    return _make("lt", (a, b))


def ge(a: Expr, b: Expr) -> Expr:
    d = _add(a, _mul(b, NEG_ONE))
    if d.op == "num":
        return Num(int(d.args[0] >= 0))
    return _make("ge", (a, b))


def _is_bool(e: Expr) -> bool:
    """Whether `e` only takes the values 0 and 1 (so `e && 1` may become `e`)."""
    return e.op in ("lt", "ge", "and", "or") or (e.op == "num" and e.args[0] in (0, 1))


def and_(a: Expr, b: Expr) -> Expr:
    if a.op == "num" and b.op == "num":
        return Num(int(bool(a.args[0]) and bool(b.args[0])))
    for x, y in ((a, b), (b, a)):
        if x.op == "num" and (not x.args[0] or _is_bool(y)):
            return y if x.args[0] else ZERO
    if a is b and _is_bool(a):
        return a
    return _make("and", tuple(sorted((a, b), key=lambda x: x._key)))


def or_(a: Expr, b: Expr) -> Expr:
    if a.op == "num" and b.op == "num":
        return Num(int(bool(a.args[0]) or bool(b.args[0])))
    for x, y in ((a, b), (b, a)):
        if x.op == "num" and (x.args[0] or _is_bool(y)):
            return ONE if x.args[0] else y
    if a is b and _is_bool(a):
        return a
    return _make("or", tuple(sorted((a, b), key=lambda x: x._key)))


_BUILD = {"fdiv": fdiv, "mod": mod, "min": emin, "max": emax, "lt": lt, "ge": ge,
          "and": and_, "or": or_}

# -- variables, evaluation, C -------------------------------------------------

_VARS: dict[int, frozenset[str]] = {}


def _vars(e: Expr) -> frozenset[str]:
    r = _VARS.get(id(e))
    if r is not None:
        return r
    if e.op == "num":
        r = frozenset()
    elif e.op == "var":
        r = frozenset((e.args[0],))
    elif e.op == "sum":
        r = frozenset().union(*(_vars(a) for m, _ in e.args for a in m))
    else:
        r = _vars(e.args[0]) | _vars(e.args[1])
    _VARS[id(e)] = r
    return r


def _eval(e: Expr, env: Mapping[str, Any], memo: dict) -> Any:
    r = memo.get(id(e))
    if r is not None:
        return r
    op = e.op
    if op == "num":
        r = e.args[0]
    elif op == "var":
        try:
            r = env[e.args[0]]
        except KeyError:
            raise KeyError(f"no value for dimension {e.args[0]!r} in {e}") from None
    elif op == "sum":
        r = 0
        for m, c in e.args:
            t = c
            for a in m:
                t = t * _eval(a, env, memo)
            r = r + t
    else:
        a, b = _eval(e.args[0], env, memo), _eval(e.args[1], env, memo)
        arr = isinstance(a, np.ndarray) or isinstance(b, np.ndarray)
        if op == "fdiv":
            r = a // b
        elif op == "mod":
            r = a % b
        elif op == "min":
            r = np.minimum(a, b) if arr else min(a, b)
        elif op == "max":
            r = np.maximum(a, b) if arr else max(a, b)
        elif op == "lt":
            r = (a < b).astype(np.int64) if arr else int(a < b)
        elif op == "ge":
            r = (a >= b).astype(np.int64) if arr else int(a >= b)
        elif op == "and":
            r = ((a != 0) & (b != 0)).astype(np.int64) if arr else int(bool(a) and bool(b))
        else:
            r = ((a != 0) | (b != 0)).astype(np.int64) if arr else int(bool(a) or bool(b))
    memo[id(e)] = r
    return r


def _c_int(v: int) -> str:
    return str(v) if abs(v) < 2**31 else f"{v}LL"


def _to_c(e: Expr, bounds: Mapping, memo: dict) -> str:
    r = memo.get(id(e))
    if r is not None:
        return r
    op = e.op
    if op == "num":
        r = _c_int(e.args[0])
    elif op == "var":
        r = e.args[0]
    elif op == "sum":
        parts = []
        for m, c in e.args:
            body = "*".join(_to_c(a, bounds, memo) for a in m)
            parts.append(_c_int(c) if not m else body if c == 1 else f"{_c_int(c)}*{body}")
        r = "(" + " + ".join(parts) + ")"
    else:
        a, b = _to_c(e.args[0], bounds, memo), _to_c(e.args[1], bounds, memo)
        if op in ("fdiv", "mod"):
            lo = nrange(e.args[0], bounds)[0]
            if lo is not None and lo >= 0:
                r = f"({a} {'/' if op == 'fdiv' else '%'} {b})"
            else:
                r = f"LUMOS_{'FDIV' if op == 'fdiv' else 'FMOD'}({a}, {b})"
        elif op in ("min", "max"):
            r = f"LUMOS_{op.upper()}({a}, {b})"
        else:
            c_op = {"lt": "<", "ge": ">=", "and": "&&", "or": "||"}[op]
            r = f"({a} {c_op} {b})"
    memo[id(e)] = r
    return r


# -- bounds -------------------------------------------------------------------

Bounds = Mapping[str, tuple[IntLike, IntLike | None]]
"""Variable name -> (lower, upper) inclusive; upper may be symbolic or None."""

DEFAULT_DIM_BOUNDS = (1, None)  # a named dimension is at least 1 unless declared
DEFAULT_AXIS_BOUNDS = (0, None)  # an axis variable is at least 0


def _var_bounds(name: str, bounds: Bounds) -> tuple[Expr, Expr | None]:
    default = DEFAULT_AXIS_BOUNDS if is_axis_var(name) else DEFAULT_DIM_BOUNDS
    lo, hi = bounds.get(name, default)
    return sym(lo), (None if hi is None else sym(hi))


def nrange(e: Expr, bounds: Bounds, _memo: dict | None = None) -> tuple[int | None, int | None]:
    """Numeric interval [lo, hi] of `e` (None: unbounded on that side)."""
    memo = _memos(bounds)[1] if _memo is None else _memo
    r = memo.get(id(e))
    if r is not None:
        return r
    op = e.op
    if op == "num":
        r = (e.args[0], e.args[0])
    elif op == "var":
        lo, hi = _var_bounds(e.args[0], bounds)
        r = (nrange(lo, bounds, memo)[0], None if hi is None else nrange(hi, bounds, memo)[1])
    elif op == "sum":
        lo_t, hi_t = 0, 0
        for m, c in e.args:
            ml, mh = 1, 1
            for a in m:
                ml, mh = _imul((ml, mh), nrange(a, bounds, memo))
            tl, th = _imul((c, c), (ml, mh))
            lo_t = None if lo_t is None or tl is None else lo_t + tl
            hi_t = None if hi_t is None or th is None else hi_t + th
        r = (lo_t, hi_t)
    else:
        (al, ah), (bl, bh) = nrange(e.args[0], bounds, memo), nrange(e.args[1], bounds, memo)
        if op == "fdiv":
            if bl is not None and bl > 0 and bh is not None:
                cands = [x // y for x in (al, ah) for y in (bl, bh) if x is not None]
                lo = min(cands) if al is not None else None
                hi = max(cands) if ah is not None else None
                if al is not None and al >= 0:
                    lo = al // bh
                r = (lo, hi)
            elif bl is not None and bl > 0 and al is not None and al >= 0:
                r = (0, None if ah is None else ah // bl)
            else:
                r = (None, None)
        elif op == "mod":
            if bl is not None and bl > 0:
                hi = None if bh is None else bh - 1
                if al is not None and al >= 0 and ah is not None:
                    hi = ah if hi is None else min(hi, ah)
                r = (0, hi)
            else:
                r = (None, None)
        elif op == "min":
            r = (_opt(min, al, bl, none_wins=True), _opt(min, ah, bh, none_wins=False))
        elif op == "max":
            r = (_opt(max, al, bl, none_wins=False), _opt(max, ah, bh, none_wins=True))
        else:
            r = (0, 1)
    if r[0] is not None and r[1] is not None and r[0] > r[1]:
        r = (r[0], r[0])  # an empty range (size-0 axis): anything is provable; keep it sane
    memo[id(e)] = r
    return r


def _opt(f, a, b, none_wins: bool):
    if a is None or b is None:
        return None if none_wins else (b if a is None else a)
    return f(a, b)


def _imul(x: tuple, y: tuple) -> tuple:
    (al, ah), (bl, bh) = x, y
    if None in (al, ah, bl, bh):
        if al is not None and bl is not None and al >= 0 and bl >= 0:
            return (al * bl, None if ah is None or bh is None else ah * bh)
        return (None, None)
    c = [al * bl, al * bh, ah * bl, ah * bh]
    return (min(c), max(c))


def _sbound(e: Expr, bounds: Bounds, upper: bool) -> Expr | None:
    """A symbolic upper (or lower) bound of `e`: axis variables are replaced by their
    symbolic extremes; named dimensions without a declared bound stay themselves."""
    op = e.op
    if op == "num":
        return e
    if op == "var":
        name = e.args[0]
        if not is_axis_var(name):
            return e
        lo, hi = _var_bounds(name, bounds)
        return hi if upper else lo
    if op == "sum":
        total = ZERO
        for m, c in e.args:
            if not m:
                total = total + c
                continue
            want_upper = upper == (c > 0)
            if len(m) == 1:
                t = _sbound(m[0], bounds, want_upper)
            else:
                if not all(_nonneg(a, bounds) for a in m):
                    return None
                t = ONE
                for a in m:
                    ab = _sbound(a, bounds, want_upper)
                    if ab is None:
                        return None
                    t = t * ab
            if t is None:
                return None
            total = total + t * c
        return total
    a, b = e.args
    if op == "fdiv":
        if not _positive(b, bounds) or any(map(is_axis_var, b.vars())):
            return None
        x = _sbound(a, bounds, upper)
        return None if x is None else fdiv(x, b)
    if op == "mod":
        if not _positive(b, bounds):
            return None
        return b - 1 if upper else ZERO
    if op in ("min", "max"):
        x, y = _sbound(a, bounds, upper), _sbound(b, bounds, upper)
        if x is None or y is None:
            return None
        return (emin if op == "min" else emax)(x, y)
    return ONE if upper else ZERO


def _nonneg(e: Expr, bounds: Bounds) -> bool:
    lo = nrange(e, bounds)[0]
    return lo is not None and lo >= 0


def _positive(e: Expr, bounds: Bounds) -> bool:
    lo = nrange(e, bounds)[0]
    return lo is not None and lo > 0


def proves_lt(a: Expr, b: Expr, bounds: Bounds) -> bool:
    """True if a < b for every assignment within `bounds`."""
    d = b - a
    lo = nrange(d, bounds)[0]
    if lo is not None and lo >= 1:
        return True
    ah = _sbound(a, bounds, upper=True)
    bl = _sbound(b, bounds, upper=False)
    if ah is None or bl is None:
        return False
    lo = nrange(bl - ah, bounds)[0]
    return lo is not None and lo >= 1


def _bounds_key(bounds: Bounds) -> tuple:
    return tuple(sorted((k, sym(lo), None if hi is None else sym(hi))
                        for k, (lo, hi) in bounds.items()))


_MEMOS: dict[tuple, tuple[dict, dict]] = {}  # bounds key -> (simplify memo, nrange memo)
_AS_GIVEN: dict[tuple, tuple[dict, dict]] = {}  # bounds' items as given -> their memos


def _memos(bounds: Bounds) -> tuple[dict, dict]:
    """Per-bounds memo tables; Exprs are interned and never freed, so ids are stable.
    Found by the items as given first (sorting and converting them each time took 0.2 s
    of SmolLM2's CPU space)."""
    given = tuple((k, tuple(v)) for k, v in bounds.items())
    m = _AS_GIVEN.get(given)
    if m is not None:
        return m
    if len(_MEMOS) > 50_000 or len(_AS_GIVEN) > 50_000:
        _MEMOS.clear()
        _AS_GIVEN.clear()
    key = _bounds_key(bounds)
    m = _MEMOS.get(key)
    if m is None:
        m = _MEMOS[key] = ({}, {})
    _AS_GIVEN[given] = m
    return m


def simplify(e: Expr, bounds: Bounds) -> Expr:
    """Apply the bound-aware rules bottom-up: x % m -> x and x // m -> 0 when
    0 <= x < m; min/max and comparisons decided by the bounds; a constant range
    folds to its number."""
    memo, nmemo = _memos(bounds)

    def go(e: Expr) -> Expr:
        r = memo.get(id(e))
        if r is not None:
            return r
        op = e.op
        if op in ("num", "var"):
            r = e
        elif op == "sum":
            r = ZERO
            for m, c in e.args:
                t = Num(c)
                for a in m:
                    t = t * go(a)
                r = r + t
        else:
            a, b = go(e.args[0]), go(e.args[1])
            r = _BUILD[op](a, b)
            if r.op == op:
                r = _decide(r, bounds)
            elif r.op == "sum" and r is not e:  # (2*z) % 16 built as 2*(z % 8): decide those
                r = go(r)
        lo, hi = nrange(r, bounds, nmemo)
        if lo is not None and lo == hi:
            r = Num(lo)
        memo[id(e)] = r
        return r

    return go(e)


def _decide(e: Expr, bounds: Bounds) -> Expr:
    op, (a, b) = e.op, e.args
    if op in ("fdiv", "mod"):
        if _nonneg(a, bounds) and proves_lt(a, b, bounds):
            return ZERO if op == "fdiv" else a
        if op == "mod" and b.op == "num" and b.args[0] > 0:  # one quotient q: a - q * b
            lo, hi = nrange(a, bounds)
            if lo is not None and hi is not None and lo // b.args[0] == hi // b.args[0]:
                return a - (lo // b.args[0]) * b.args[0]
        return _drop_remainder(e, bounds)
    if op in ("min", "max"):
        if proves_lt(a, b + 1, bounds):  # a <= b
            return a if op == "min" else b
        if proves_lt(b, a + 1, bounds):
            return b if op == "min" else a
        return e
    if op in ("lt", "ge"):
        if proves_lt(a, b, bounds):
            return Num(int(op == "lt"))
        if proves_lt(b, a + 1, bounds):
            return Num(int(op == "ge"))
    return e


def _drop_poly_remainder(e: Expr, bounds: Bounds) -> Expr:
    """The same for a polynomial divisor c*F (e.g. 192*(128 + s) = 3 * 64*(128 + s)):
    (F*y + r) // (c*F) -> y // c when 0 <= r < F, and the remainder likewise."""
    b = _poly(e.args[1])
    content = math.gcd(*b.values())
    if content <= 1 or not _positive(e.args[1], bounds):
        return e
    p = _poly(e.args[0])
    small = [k for k in range(1, math.isqrt(content) + 1) if content % k == 0]
    for c in sorted({*small, *(content // k for k in small)} - {1}):  # F largest first
        f = {m: v // c for m, v in b.items()}
        q, r = _split_poly(p, f)
        if not q:
            continue
        rem, fe = _from_poly(r), _from_poly(f)
        if _nonneg(rem, bounds) and proves_lt(rem, fe, bounds):
            y = _from_poly(q)
            return simplify(fdiv(y, Num(c)) if e.op == "fdiv" else fe * mod(y, Num(c)) + rem,
                            bounds)
    return e


def _drop_remainder(e: Expr, bounds: Bounds) -> Expr:
    """(F*y + r) // (F*m) -> y // m and (F*y + r) % (F*m) -> F*(y % m) + r when
    0 <= r < F for a common factor F of a term and the divisor (reshape merge/split)."""
    bt = _single_term(e.args[1])
    if bt is None:
        return _drop_poly_remainder(e, bounds) if e.args[1].op == "sum" else e
    bm, bc = bt
    p = _poly(e.args[0])
    for m, c in p.items():
        fm, rest_b = [], list(bm)  # the atoms m shares with the divisor, and the others
        for x in m:
            if x in rest_b:
                rest_b.remove(x)
                fm.append(x)
        fm, fc = tuple(fm), math.gcd(c, bc)
        f = _from_poly({fm: fc})
        if (not fm and fc == 1) or not _positive(f, bounds):
            continue
        q, r = _split_multiples(p, fm, fc)
        rem = _from_poly(r)
        if _nonneg(rem, bounds) and proves_lt(rem, f, bounds):
            y, k = _from_poly(q), _from_poly({tuple(rest_b): bc // fc})
            return simplify(fdiv(y, k) if e.op == "fdiv" else f * mod(y, k) + rem, bounds)
    return e
