"""Scatter-add through a view: the adjoint of reading a buffer.

A consumer reads its producer's row-major buffer through a `View`: element z of the
read is `buf[view.index(z)]` where `view.valid(z)`, else 0. The adjoint sends every
element of the consumer's gradient g back to the position it was read from, adding
where several elements read the same one:

    d[p] = sum of g[z] over the z with valid(z) and index(z) == p

`scatter_add` builds d as a view of g followed by SumReduce, with one mechanism for
every view (permute -> inverse permute, broadcast -> sum, slice -> pad, pad -> slice,
reshape -> reshape, repeat -> reshape + sum, flip, roll, overlapping windows -> sum
over the window index):

1. Crop each axis to the interval its validity states (a pad's inside). Number the
   read's elements flat (per group of axes that a `//` or `%` of the index mixes, as
   a reshape merged them) and cut that number into mixed-radix digits at every
   divisor the index uses, so that the index becomes linear in the digits (a roll's
   `(d + e) % size(d)` counts as one digit).
2. Per producer axis j (or, failing that, for the flat buffer position) the index is
   `w_j = off + sum(c_k * d_k)`. Digits with `c_k * n_k <= c_{k+1}` form a chain whose
   mixed-radix number is injective: w_j determines them through `//` and `%`. Every
   other digit (absent: broadcast; overlapping the chain: windows) is summed over.
3. d = g read at (digits of w, summed digits), valid where w is hit, then SumReduce
   over the summed digits, computed only over the box of positions hit (a slice's
   adjoint: the sum over its inside, read padded). When the summed digits are absent
   from the index (broadcast: a matrix product's operands), g is summed first in the
   read's own order, over the elements read only, and the sum is then viewed at the
   producer's positions; neighbouring digits g reads with one stride are one axis
   (one summed axis, one BLAS call over a product's batch and rows).

An index the analysis cannot make linear raises a `LumosError` naming the view.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from functools import cmp_to_key

from lumos.errors import LumosError
from lumos.frontend.tensor import Tensor, full_like, node
from lumos.shape import Expr, View, emax, emin, nrange, proves_lt, simplify, z
from lumos.shape.expr import ONE, ZERO, Num, is_axis_var
from lumos.shape.view import numel, row_major_strides

_TMP = 10_000  # temporaries are axis variables z10000, ...: the simplifier bounds them
_OPS: dict[str, Callable[[Expr, Expr], Expr]] = {
    "fdiv": lambda a, b: a // b, "mod": lambda a, b: a % b, "min": emin, "max": emax,
    "lt": lambda a, b: a.lt(b), "ge": lambda a, b: a.ge(b),
    "and": lambda a, b: a & b, "or": lambda a, b: a | b}


def scatter_add(g: Tensor, view: View, shape: Sequence[Expr]) -> Tensor:
    """d of `shape` with d[p] = sum of g[z] over valid z with view.index(z) == p."""
    shape = tuple(shape)
    if view.valid is ONE and view.shape == shape and view.index is View.contiguous(shape).index:
        return g
    if any(s is ZERO for s in (*shape, *view.shape)):
        return full_like(g._with_view(View.contiguous(shape)), 0)
    read = _Read(view)
    eqs = read.equations(shape)
    kept = {d.name for eq in eqs for d in eq.kept}
    summed = [d for d in read.digits if d.name not in kept]
    if summed and not any(d in summed for eq in eqs for d, _ in eq.terms):
        return _broadcast(g, view, shape, read, eqs, kept, summed)
    value = _number([[d] for d in summed], len(shape))
    ok = ONE
    for eq in eqs:
        ok = ok & eq.solve(value)
    src, start = _crop(_read_at(g, view, read, value, shape + tuple(d.size for d in summed), ok))
    out = g._with_view(src)  # cropped: summed only where some z lands (a slice: its inside)
    for axis in reversed(range(len(shape), len(src.shape))):
        out = node(g.graph, "SumReduce", [out], axis=axis)
    at = out.view
    for i, size in enumerate(shape):
        if start[f"z{i}"] is not ZERO or at.shape[i] is not size:
            at = at.pad(i, start[f"z{i}"], size - start[f"z{i}"] - at.shape[i])
    return out._with_view(at)


def _broadcast(g: Tensor, view: View, shape: tuple[Expr, ...], read: _Read,
               eqs: list[_Equation], kept: set[str], summed: list[_Digit]) -> Tensor:
    """The adjoint of a read whose summed digits are absent from the index (broadcast):
    g summed over them in the read's own order first (a matrix product's reduction,
    Gemm-shaped, over only the positions read), then that sum viewed at the producer's
    positions. Neighbouring digits (kept, or summed) that g reads as one stride are one
    axis: a matrix product's batch and rows are one BLAS call."""
    keep = [[d] for d in read.digits if d.name in kept]
    groups = [[d] for d in summed]

    def summands(keep: list[list[_Digit]], groups: list[list[_Digit]]) -> View:
        sizes = tuple(numel([d.size for d in grp]) for grp in (*keep, *groups))
        return _read_at(g, view, read, _number([*keep, *groups], 0), sizes, ONE)

    groups = _merged(g, groups, lambda gs: summands(keep, gs), len(keep))[0]
    keep, src = _merged(g, keep, lambda ks: summands(ks, groups), 0)
    out = g._with_view(src)
    for axis in reversed(range(len(keep), len(src.shape))):
        out = node(g.graph, "SumReduce", [out], axis=axis)
    value: dict[str, Expr] = {}
    ok = ONE
    for eq in eqs:
        ok = ok & eq.solve(value)
    digits = [d for grp in keep for d in grp]  # merging keeps the row-major layout
    index = ZERO
    for d, stride in zip(digits, row_major_strides([d.size for d in digits]), strict=True):
        index = index + value[d.var.args[0]] * stride
    bounds = {f"z{i}": (0, s - 1) for i, s in enumerate(shape)}
    return out._with_view(View(shape, _simplify(index, bounds), _simplify(ok, bounds)))


def _merged(g: Tensor, groups: list[list[_Digit]], build: Callable[[list[list[_Digit]]], View],
            first: int) -> tuple[list[list[_Digit]], View]:
    """Neighbouring groups (numbered from axis `first` of the views `build` makes) joined
    wherever g, and the reads of g's node when it is a product, see one stride."""
    src, k = build(groups), 0
    while k + 1 < len(groups):
        merged = [*groups[:k], groups[k] + groups[k + 1], *groups[k + 2:]]
        cand = build(merged)
        n = g.graph.nodes[g.node]
        reads = [w.at_flat(cand.index) for w in n.views] if n.op == "Mul" else []
        bounds = {f"z{i}": (0, s - 1) for i, s in enumerate(cand.shape)}
        if all(_strided(_simplify(e, bounds), first + k)
               for e in (cand.index, cand.valid, *(e for r in reads for e in r))):
            groups, src = merged, cand
        else:
            k += 1
    return groups, src


def _number(groups: list[list[_Digit]], first: int) -> dict[str, Expr]:
    """Each digit's value when group i is numbered (mixed radix) by axis `first + i`."""
    value = {}
    for i, group in enumerate(groups):
        weight = ONE
        for j, d in enumerate(reversed(group)):
            at = z(first + i) // weight if weight is not ONE else z(first + i)
            value[d.var.args[0]] = at % d.size if j < len(group) - 1 else at
            weight = weight * d.size
    return value


def _read_at(g: Tensor, view: View, read: _Read, value: dict[str, Expr],
             shape: tuple[Expr, ...], ok: Expr) -> View:
    """g over `shape`, read where the digits take `value` (valid there and where `ok`)."""
    digits = {d.name: d.back.subs(value) for d in read.digits}
    at = {k: e.subs(digits) for k, e in read.axes.items()}
    src = g.view.remap(shape, at)
    bounds = {f"z{i}": (0, s - 1) for i, s in enumerate(shape)}
    valid = src.valid & view.valid.subs(at) & read.inside.subs(digits) & ok
    return View(src.shape, _simplify(src.index, bounds), _simplify(valid, bounds))


def _strided(e: Expr, axis: int) -> bool:
    """Whether no `//` or `%` of e reads axis `axis`."""
    name = f"z{axis}"
    return not any(t.op in ("fdiv", "mod") and name in t.args[0].vars() for t in _subterms(e))


def coords(flat: Expr, shape: Sequence[Expr]) -> dict[str, Expr]:
    """Row-major coordinates z0..z{n-1} of flat position `flat` in `shape`."""
    out = {}
    for i, (s, st) in enumerate(zip(shape, row_major_strides(shape), strict=True)):
        out[f"z{i}"] = flat // st if i == 0 else (flat // st) % s
    return out


class _Digit:
    """One mixed-radix digit (named `name`) of the flat read position. The index is
    linear in `var`; `back` is the digit as a function of `var` (itself, or an undone
    roll or flip)."""

    def __init__(self, var: Expr, size: Expr) -> None:
        self.name, self.var, self.size, self.back = var.args[0], var, size, var


class _Equation:
    """target = off + sum(coef * digit): the digits of `kept` are solved from it."""

    def __init__(self, target: Expr, off: Expr, terms: list[tuple[_Digit, Expr]],
                 fresh: Callable[[], Expr]) -> None:
        self.target, self.off, self.terms = target, off, []
        cands = []
        for d, c in terms:
            lo, hi = nrange(c, {})
            if hi is not None and hi < 0:  # a flip: count the digit from the other end
                var = fresh()
                d.back = d.back.subs({d.var.args[0]: d.size - 1 - var})
                d.var, c = var, -c
                self.off = self.off - c * (d.size - 1)
                lo = 1
            self.terms.append((d, c))
            if lo is not None and lo > 0:
                cands.append((d, c))

        def cmp(a: tuple[_Digit, Expr], b: tuple[_Digit, Expr]) -> int:
            if proves_lt(a[1], b[1], {}):
                return -1
            if proves_lt(b[1], a[1], {}):
                return 1
            sa, sb = nrange(a[0].size, {})[0] or 0, nrange(b[0].size, {})[0] or 0
            return sb - sa  # equal coefficients: keep the larger digit, sum the smaller

        self.chain: list[tuple[_Digit, Expr]] = []
        for d, c in sorted(cands, key=cmp_to_key(cmp)):
            if not self.chain or proves_lt(self.chain[-1][1] * self.chain[-1][0].size, c + 1, {}):
                self.chain.append((d, c))
        self.kept = [d for d, _ in self.chain]

    def solve(self, value: dict[str, Expr]) -> Expr:
        """Put the kept digits (as functions of the target and the summed digits) into
        `value`; returns the condition that the target is hit."""
        r = self.target - self.off
        for d, c in self.terms:
            if d not in self.kept:
                r = r - c * value[d.var.args[0]]
        ok, rem = r.ge(0), r
        for d, c in reversed(self.chain):
            u = rem // c
            value[d.var.args[0]] = u
            ok, rem = ok & u.lt(d.size), rem % c
        return ok & rem.lt(1)


class _Read:
    """A view's index as a linear function of mixed-radix digits of the read position."""

    def __init__(self, view: View) -> None:
        self.view, self._count = view, 0
        self.digits: list[_Digit] = []
        self.axes: dict[str, Expr] = {}  # each axis variable of the view in digits
        self.inside = ONE  # which digit values are positions of the read
        view, start = _crop(view)
        for group in _groups(view):
            sizes = [view.shape[i] for i in group]
            m, n = self._fresh(), numel(sizes)
            for pos in (m, n - 1 - m):  # count the group backwards if its index does (a flip)
                at = {f"z{i}": e for i, e in zip(group, coords(pos, sizes).values(),
                                                  strict=True)}
                part = _simplify(view.index.subs(at), {m.args[0]: (0, n - 1)})
                if not _backwards(part, m):
                    break
            digits = self._cut(part, m, n)
            flat, weight = ZERO, ONE
            for d in reversed(digits):
                flat, weight = flat + d.var * weight, weight * d.size
            if weight is not n:  # the top digit overshoots: positions past n are not read
                self.inside = self.inside & flat.lt(n)
            self.axes.update({k: e.subs({m.args[0]: flat}) for k, e in at.items()})
            self.digits += digits
        self.bounds: dict[str, tuple[Expr, Expr]] = {d.name: (ZERO, d.size - 1)
                                                     for d in self.digits}
        valid = _simplify(view.valid.subs(self.axes), self.bounds)
        for d in self.digits:
            los, his = _limits(valid, d.var)
            lo, hi = self.bounds[d.name]
            self.bounds[d.name] = (_fold(emax, lo, los), _fold(emin, hi, [h - 1 for h in his]))
        self.index = self._rolls(_simplify(view.index.subs(self.axes), self.bounds))
        self.axes = {k: e + start[k] for k, e in self.axes.items()}

    def fail(self, why: str) -> LumosError:
        return LumosError(f"autograd: cannot propagate a gradient through {self.view}: {why}")

    def _fresh(self) -> Expr:
        self._count += 1
        return z(_TMP + self._count)

    def _cut(self, index: Expr, m: Expr, n: Expr) -> list[_Digit]:
        """Digits of m, most significant first, cut at every divisor the index uses."""
        cuts: set[Expr] = set()
        for e in _subterms(index):
            if e.op in ("fdiv", "mod") and m.args[0] in e.args[0].vars():
                if _has_tmp(e.args[1]):
                    raise self.fail(f"divisor {e.args[1]} depends on the position")
                cuts.add(_scale(e.args[0]) * e.args[1])
        chain: list[Expr] = []
        rest = {c for c in cuts if c is not ONE and c is not n}
        while rest:
            low = [c for c in rest if all(_divides(c, o) for o in rest)]
            if not low or (chain and not _divides(chain[-1], low[0])):
                raise self.fail(f"its index cuts the flat position at "
                                f"{sorted(map(str, cuts))}, which do not nest")
            chain.append(low[0])
            rest.discard(low[0])
        last = chain[-1] if chain else ONE
        edges = [ONE, *chain]
        sizes = [edges[i + 1] // edges[i] for i in range(len(chain))]
        sizes.append(n // last if _divides(last, n) else (n + last - 1) // last)
        return [_Digit(self._fresh(), s) for s in reversed(sizes)]

    def _rolls(self, index: Expr) -> Expr:
        """Replace every `(c +- d) % size(d)` (a roll, maybe flipped) by a fresh digit."""
        def roll(e: Expr) -> Expr | None:
            for d in self.digits if e.op == "mod" else ():
                for sign in (1, -1):
                    shift = e.args[0] - d.var * sign
                    if e.args[1] is d.size and not _has_tmp(shift):
                        var = self._fresh()
                        self.bounds[var.args[0]] = (ZERO, d.size - 1)
                        old = ((var - shift) * sign) % d.size
                        d.back, d.var = d.back.subs({d.var.args[0]: old}), var
                        return var
            return None

        while True:  # rolls of rolls
            index, prev = _replace(index, roll), index
            if index is prev:
                return index

    def _linear(self, e: Expr) -> tuple[Expr, list[tuple[_Digit, Expr]]] | None:
        """e as (offset, [(digit, coefficient)]), or None if it is not linear."""
        by_var = {d.var: d for d in self.digits}
        coef: dict[str, Expr] = {}
        off = ZERO
        terms = e.args if e.op == "sum" else (((), e.value),) if e.is_num else (((e,), 1),)
        for mono, c in terms:
            vs = [a for a in mono if a in by_var]
            rest = Num(c)
            for a in mono:
                if a not in by_var:
                    rest = rest * a
            if len(vs) > 1 or _has_tmp(rest):
                return None
            if vs:
                coef[vs[0].args[0]] = coef.get(vs[0].args[0], ZERO) + rest
            else:
                off = off + rest
        return off, [(d, coef[d.var.args[0]]) for d in self.digits if d.var.args[0] in coef]

    def equations(self, shape: tuple[Expr, ...]) -> list[_Equation]:
        """One equation per producer axis when every axis coordinate of the index is
        linear in distinct digits (no carries between axes), else one for the flat
        position."""
        eqs, seen = [], set()
        for j, w in coords(self.index, shape).items():
            lin = self._linear(_simplify(w, self.bounds))
            if lin is None or seen & {d.name for d, _ in lin[1]}:
                break
            seen |= {d.name for d, _ in lin[1]}
            eqs.append((z(int(j[1:])), *lin))
        else:
            return [_Equation(*eq, self._fresh) for eq in eqs]
        lin = self._linear(self.index)
        if lin is None:
            raise self.fail(f"its index {self.index} is not linear in the read position")
        return [_Equation(View.contiguous(shape).index, *lin, self._fresh)]


def _simplify(e: Expr, bounds: dict) -> Expr:
    for _ in range(4):  # atoms a rewrite exposes are decided on the next pass
        e, prev = simplify(e, bounds), e
        if e is prev:
            break
    return e


def _crop(view: View) -> tuple[View, dict[str, Expr]]:
    """The view restricted, per axis, to the interval its validity states (a padded axis
    to its inside), and each axis' start."""
    shape, start = list(view.shape), {}
    for i, size in enumerate(view.shape):
        los, his = _limits(view.valid, z(i))
        lo, hi = _fold(emax, ZERO, los), _fold(emin, size, his)
        ok = not ({lo.op, hi.op} & {"min", "max"}) and proves_lt(lo, hi, {})
        start[f"z{i}"] = lo if ok else ZERO
        shape[i] = hi - lo if ok else size
    if all(e is ZERO for e in start.values()):
        return view, start
    m = {k: z(int(k[1:])) + e for k, e in start.items()}
    bounds = {f"z{i}": (0, s - 1) for i, s in enumerate(shape)}
    return View(tuple(shape), _simplify(view.index.subs(m), bounds),
                _simplify(view.valid.subs(m), bounds)), start


def _limits(valid: Expr, var: Expr) -> tuple[list[Expr], list[Expr]]:
    """Lower and (exclusive) upper limits of `var` stated by the conjuncts of `valid`
    that compare `+-var + c` with 0."""
    if valid.op == "and":
        (la, ha), (lb, hb) = _limits(valid.args[0], var), _limits(valid.args[1], var)
        return la + lb, ha + hb
    los: list[Expr] = []
    his: list[Expr] = []
    if valid.op in ("lt", "ge"):
        diff = valid.args[0] - valid.args[1]
        for sign in (1, -1):
            c = diff - var * sign
            if any(is_axis_var(v) for v in c.vars()):
                continue
            if (valid.op == "lt") == (sign == 1):  # var < -c  /  var <= c
                his.append(-c if sign == 1 else c + 1)
            else:  # var >= -c  /  var > c
                los.append(-c if sign == 1 else c + 1)
    return los, his


def _fold(f: Callable[[Expr, Expr], Expr], e: Expr, more: list[Expr]) -> Expr:
    for x in more:
        e = f(e, x)
    return e


def _groups(view: View) -> list[list[int]]:
    """The view's axes, grouped where one `//` or `%` of the index mixes them (those
    are numbered flat together, as a reshape merged them)."""
    parent = list(range(view.ndim))

    def root(i: int) -> int:
        while parent[i] != i:
            i = parent[i]
        return i

    for e in _subterms(view.index):
        if e.op in ("fdiv", "mod"):
            axes = sorted(int(v[1:]) for v in e.args[0].vars() if is_axis_var(v))
            for a in axes[1:]:
                parent[root(a)] = root(axes[0])
    groups: dict[int, list[int]] = {}
    for i in range(view.ndim):
        groups.setdefault(root(i), []).append(i)
    return list(groups.values())


def _has_tmp(e: Expr) -> bool:
    return any(v[0] == "z" and v[1:].isdigit() and int(v[1:]) > _TMP for v in e.vars())


def _subterms(e: Expr) -> list[Expr]:
    out: dict[int, Expr] = {}

    def go(e: Expr) -> None:
        if id(e) in out:
            return
        out[id(e)] = e
        kids = [a for mono, _ in e.args for a in mono] if e.op == "sum" else \
            [] if e.op in ("num", "var") else list(e.args)
        for k in kids:
            go(k)

    go(e)
    return list(out.values())


def _replace(e: Expr, fn: Callable[[Expr], Expr | None]) -> Expr:
    """e with every subterm t for which fn(t) is not None replaced by fn(t)."""
    memo: dict[int, Expr] = {}

    def go(e: Expr) -> Expr:
        if id(e) in memo:
            return memo[id(e)]
        r = fn(e)
        if r is None:
            if e.op == "sum":
                r = ZERO
                for mono, c in e.args:
                    t = Num(c)
                    for a in mono:
                        t = t * go(a)
                    r = r + t
            elif e.op in ("num", "var"):
                r = e
            else:
                r = _OPS[e.op](go(e.args[0]), go(e.args[1]))
        memo[id(e)] = r
        return r

    return go(e)


def _backwards(index: Expr, m: Expr) -> bool:
    """Whether every `//` and `%` of the index divides something that falls as m grows."""
    name, found = m.args[0], False
    for e in _subterms(index):
        if e.op in ("fdiv", "mod") and name in e.args[0].vars():
            x = e.args[0]
            base, c = x.subs({name: ZERO}), x.subs({name: ONE}) - x.subs({name: ZERO})
            if not c.is_num or c.value >= 0 or base + c * m is not x:
                return False
            found = True
    return found


def _scale(x: Expr) -> Expr:
    """a for x = m // a (nested divisions multiply); 1 for anything else."""
    if x.op == "fdiv" and not _has_tmp(x.args[1]):
        return _scale(x.args[0]) * x.args[1]
    return ONE


def _divides(a: Expr, b: Expr) -> bool:
    return (b // a) * a is b
