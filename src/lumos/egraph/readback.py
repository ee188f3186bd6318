"""Saturated e-graph -> SearchSpace, read with `eg.freeze()` (fast at any size).

Term e-classes become SearchSpace classes: pruned to what the root reaches, numbered
0..n-1 in a depth-first order from the root (0), each class's alternatives sorted
with the original HLIR nodes first (earliest first, so alternative 0 everywhere is the
original program), the others by structure. Fields are decoded to lumos objects: an
Expr e-class (which expr rules may have unioned with simpler forms) reads as its
smallest term. Class keys are the fingerprints of the original nodes a class holds,
or a structural hash for classes that rules made, never egglog ids.
"""

from __future__ import annotations

import hashlib
import operator
from collections import defaultdict
from collections.abc import Callable, Hashable, Mapping, Set
from typing import TYPE_CHECKING

from lumos.egraph.encode import FIELDS, KIND_PREFIX
from lumos.egraph.space import ENode, SearchSpace
from lumos.errors import LumosError
from lumos.shape import Expr, Num, Var, View, z
from lumos.shape.expr import emax, emin
from lumos.shape.view import numel

if TYPE_CHECKING:
    from egglog import bindings as b

_EXPR: dict[str, Callable[[Expr, Expr], Expr]] = {
    "Add": operator.add, "Mul": operator.mul, "Div": operator.floordiv, "Mod": operator.mod,
    "Min": emin, "Max": emax, "Lt": Expr.lt, "Ge": Expr.ge, "And": operator.and_,
    "Or": operator.or_}
_PRIM = {"i64": "value_to_i64", "String": "value_to_string", "bool": "value_to_bool",
         "f64": "value_to_f64"}
_INF = float("inf")
# sorts whose e-classes may hold several terms (rules union equal ones), each read as its
# smallest term: expressions, and a backend's composed views (lower_cpu.egg's `views`)
_SIZED = ("Expr", "ExprList", "View", "CView")


def read_space(eg: b.EGraph, ctors: Set[str], fingerprints: list[str]) -> SearchSpace:
    """The SearchSpace of the e-graph's Root (see rules/terms.egg)."""
    frozen = eg.freeze()
    rows: dict[tuple[str, b.Value], list[tuple[str, list[b.Value]]]] = defaultdict(list)
    sorts: dict[str, list[str]] = {}
    origin: dict[tuple[b.Value, b.Value], int] = {}
    for name, fn in frozen.functions.items():
        if name == "origin":
            for r in fn.rows:
                k, i = (r.inputs[0], r.inputs[1]), eg.value_to_i64(r.inputs[2])
                origin[k] = min(origin.get(k, i), i)
        elif name in ctors:
            sorts[name] = fn.input_sorts
            for r in fn.rows:
                if not r.subsumed:
                    rows[(fn.output_sort, r.output)].append((name, r.inputs))
    return _Reader(eg, rows, sorts).space(origin, fingerprints)


class _Reader:
    def __init__(self, eg: b.EGraph, rows: dict, sorts: dict[str, list[str]]) -> None:
        self.eg, self.rows, self.sorts = eg, rows, sorts
        self.memo: dict[tuple[str, b.Value], object] = {}
        self.cost = self._expr_costs()

    def _row_cost(self, name: str, ins: list[b.Value], cost: Mapping) -> float:
        return 1 + sum(cost.get((s, v), _INF) for s, v in zip(self.sorts[name], ins, strict=True)
                       if s in _SIZED)

    def _expr_costs(self) -> dict[tuple[str, b.Value], float]:
        """Size of the smallest term of every class of a `_SIZED` sort (a fixpoint: classes
        can hold cycles such as x = x % 8)."""
        keys = [k for k in self.rows if k[0] in _SIZED]
        cost: dict[tuple[str, b.Value], float] = {}
        changed = True
        while changed:
            changed = False
            for k in keys:
                c = min(self._row_cost(n, ins, cost) for n, ins in self.rows[k])
                if c < cost.get(k, _INF):
                    cost[k], changed = c, True
        return cost

    def field(self, sort: str, v: b.Value) -> object:
        if sort in _PRIM:
            return getattr(self.eg, _PRIM[sort])(v)
        key = (sort, v)
        if key in self.memo:
            return self.memo[key]
        alts = self.rows[key]
        if sort == "Expr":  # the smallest term; ties broken by the decoded text
            best = self.cost[key]
            cands = [self._expr(n, ins) for n, ins in alts
                     if self._row_cost(n, ins, self.cost) == best]
            r: object = min(cands, key=Expr.key)
        else:
            if len(alts) != 1 and sort not in _SIZED:
                raise LumosError(f"read-back: a {sort} e-class has {len(alts)} terms")
            name, ins = min(alts, key=lambda a: self._row_cost(*a, self.cost))  # (ties: first)
            args = tuple(self.field(s, x) for s, x in zip(self.sorts[name], ins, strict=True))
            if sort == "ExprList":
                r = () if name == "ENil" else (args[0], *args[1])
            elif sort == "View":
                r = View(*args)
            else:
                r = (name, *args)  # another datatype (a backend's own sort)
        self.memo[key] = r
        return r

    def _expr(self, name: str, ins: list[b.Value]) -> Expr:
        args = [self.field(s, x) for s, x in zip(self.sorts[name], ins, strict=True)]
        if name == "Num":
            return Num(args[0])
        if name == "Var":
            return Var(args[0])
        if name == "Z":
            return z(args[0])
        if name == "RowMajor":
            return View.contiguous(args[0]).index
        if name == "Numel":
            return numel(args[0])
        if name == "Broadcast":
            return _broadcast(args[0])
        return _EXPR[name](*args)

    def items(self, lst: b.Value) -> tuple[b.Value, ...]:
        out = []
        while True:
            ((name, ins),) = self.rows[("Inputs", lst)]
            if name == "INil":
                return tuple(out)
            out.append(ins[0])
            lst = ins[1]

    def enode(self, kind: b.Value, lst: b.Value) -> ENode:
        ((name, ins),) = self.rows[("Kind", kind)]
        op = name.removeprefix(KIND_PREFIX) if name.removeprefix(KIND_PREFIX) in FIELDS else name
        fields = tuple(self.field(s, x) for s, x in zip(self.sorts[name], ins, strict=True))
        return ENode(op, fields, self.items(lst))  # children: e-class values, renumbered later

    def space(self, origin: dict, fingerprints: list[str]) -> SearchSpace:
        terms = {v: [ins for _, ins in rs] for (s, v), rs in self.rows.items() if s == "Term"}
        root = next(v for v, rs in terms.items() for kind, _ in rs
                    if self.rows[("Kind", kind)][0][0] == "Root")
        alts: dict[b.Value, list[tuple[int | None, ENode]]] = {}
        stack = [root]
        while stack:
            c = stack.pop()
            if c in alts:
                continue
            alts[c] = [(origin.get((k, lst)), self.enode(k, lst)) for k, lst in terms[c]]
            stack.extend(k for _, n in alts[c] for k in n.children)
        reprs: dict[int, str] = {}  # (the fields stay alive in `alts`: ids are not reused)
        keys = _class_keys(alts, fingerprints, reprs)
        ordered = {}
        for c, a in alts.items():
            rank = [((0, i) if i is not None else (1, _hash(n, keys, reprs)), n) for i, n in a]
            rank.sort(key=lambda t: t[0])
            ordered[c] = list({n: None for _, n in rank})  # identical decodings once
        return _renumber(root, ordered, keys)


def _hash(n: ENode, keys: Mapping, reprs: dict[int, str]) -> str:
    """A digest of repr((op, fields, children's keys)); `reprs` holds each field object's
    repr by id (read-back shares them: the 44M Llama's read-back wrote 107k views' reprs
    for 17k e-nodes, 0.16 of 0.53 s)."""
    fields = [reprs.get(id(f)) or reprs.setdefault(id(f), repr(f)) for f in n.fields]
    text = f"({n.op!r}, {_tuple(fields)}, {[keys[k] for k in n.children]!r})"
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def _tuple(texts: list[str]) -> str:
    """repr of a tuple, given its items' reprs."""
    return f"({texts[0]},)" if len(texts) == 1 else f"({', '.join(texts)})"


def _class_keys(alts: dict, fingerprints: list[str], reprs: dict[int, str]) -> dict:
    """The fingerprint of a class's earliest original node; for classes that rules made,
    the least hash of an e-node over already-named children (round by round, so the
    result does not depend on iteration order)."""
    keys = {c: fingerprints[min(i for i, _ in a if i is not None)]
            for c, a in alts.items() if any(i is not None for i, _ in a)}
    pending = [c for c in alts if c not in keys]
    while pending:
        new = {}
        for c in pending:
            named = [_hash(n, keys, reprs) for _, n in alts[c]
                     if all(k in keys for k in n.children)]
            if named:
                new[c] = min(named)
        if not new:
            raise LumosError("read-back: e-classes without a finite term")
        keys.update(new)
        pending = [c for c in pending if c not in new]
    return keys


def _renumber(root: Hashable, alts: Mapping[Hashable, list[ENode]],
              keys: Mapping[Hashable, str]) -> SearchSpace:
    """Classes reachable from `root` through `alts`, numbered depth-first from 0."""
    index: dict[Hashable, int] = {}
    stack = [root]
    while stack:
        c = stack.pop()
        if c not in index:
            index[c] = len(index)
            stack.extend(k for n in reversed(alts[c]) for k in reversed(n.children))
    order = sorted(index, key=index.__getitem__)
    classes = [[ENode(n.op, n.fields, tuple(index[k] for k in n.children)) for n in alts[c]]
               for c in order]
    return SearchSpace(classes, 0, [keys[c] for c in order])


def restrict(space: SearchSpace, executable: Set[str], backend: str) -> SearchSpace:
    """Only the e-nodes a backend can execute (its kernels and the structural ops): an
    HLIR e-node with a lowered alternative drops out. Raises, naming the ops and the
    backend, if a class the program needs is left with none."""
    kept = {c: [n for n in nodes if n.op in executable] for c, nodes in enumerate(space.classes)}
    seen, stack = set(), [space.root]
    while stack:
        c = stack.pop()
        if c in seen:
            continue
        seen.add(c)
        if not kept[c]:
            ops = "/".join(sorted({n.op for n in space.classes[c]}))
            raise LumosError(f"backend {backend!r} cannot execute {ops} (e-class "
                             f"{space.class_keys[c]}): no rule lowers it to a {backend} kernel")
        stack.extend(k for n in kept[c] for k in n.children)
    return _renumber(space.root, kept, dict(enumerate(space.class_keys)))


def _broadcast(shape: tuple[Expr, ...]) -> Expr:
    """Broadcast(shape) (rules/terms.egg): the row-major index, axes of size 1 left out."""
    index, step = Num(0), Num(1)
    for i in reversed(range(len(shape))):
        if shape[i] != Num(1):
            index = index + z(i) * step
        step = step * shape[i]
    return index
