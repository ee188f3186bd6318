"""HLIR graph -> egglog terms (rules/terms.egg), as AST objects.

The whole graph goes in as ONE rule with an empty body whose actions are rule-local
lets: every distinct Expr, shape, view and node is one `let`, so insertion is linear
(program text or global lets are super-linear on egglog 13). Each node becomes
`(Op (H<op> shape fields... views...) (ICons input ...))`, the outputs are joined
under one `(Op (Root) outputs)`, and `(origin kind inputs i)` marks original node i.
"""

from __future__ import annotations

import functools
import hashlib
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import numpy as np

from lumos.graph import Graph
from lumos.hlir import BINARY, REDUCE, UNARY, Node
from lumos.shape import Expr, View
from lumos.shape.expr import is_axis_var

if TYPE_CHECKING:
    from egglog import bindings as b


@functools.cache
def egg() -> Any:
    """egglog's bindings, imported on first use: only the e-graph worker saturates, and
    importing egglog costs 0.23 s (most of it the formatter its pretty-printer imports),
    which `import lumos` and a run from a cached artifact need not pay."""
    from egglog import bindings
    return bindings


@functools.cache
def span() -> b.RustSpan:
    """Where egglog's errors say the terms came from."""
    return egg().RustSpan(__file__, 0, 0)

# HLIR op -> the fields its kind carries after the output shape ("view": one per input)
FIELDS: dict[str, tuple[str, ...]] = {
    "Input": ("dtype", "name"), "Constant": ("dtype", "value"), "Iota": ("dtype", "expr"),
    "Cast": ("dtype", "view"), **dict.fromkeys(UNARY, ("view",)),
    **dict.fromkeys(BINARY, ("view", "view")), **dict.fromkeys(REDUCE, ("axis", "view")),
    "Gather": ("view", "view"), "Scatter": ("view", "view", "view"), "Output": ("view", "persist"),
}
KIND_PREFIX = "H"  # the kind of HLIR op "Add" is "HAdd"

_BINOPS = {"fdiv": "Div", "mod": "Mod", "min": "Min", "max": "Max", "lt": "Lt", "ge": "Ge",
           "and": "And", "or": "Or"}


def call(name: str, *args: object) -> b.Call:
    b = egg()
    return b.Call(span(), name, list(args))


def lit(v: int | str | bool) -> b.Lit:
    b = egg()
    if isinstance(v, bool):
        return b.Lit(span(), b.Bool(v))
    return b.Lit(span(), b.Int(v) if isinstance(v, int) else b.String(v))


def value_text(v: object) -> str:
    """A Constant's value as the String its kind holds (exact: -0.0, nan, inf survive)."""
    if isinstance(v, bool | np.bool_):
        return repr(bool(v))
    if isinstance(v, int | np.integer):
        return repr(int(v))
    return repr(float(v))  # type: ignore[arg-type]


def text_value(s: str) -> bool | int | float:
    if s in ("True", "False"):
        return s == "True"
    try:
        return int(s)
    except ValueError:
        return float(s)


class Encoder:
    """Collects the let-actions of one insertion rule, sharing equal subterms (`inline`:
    returns nested terms instead, for checks)."""

    def __init__(self, inline: bool = False) -> None:
        self.actions: list = []
        self.inline = inline
        self._memo: dict[object, b.Var | b.Call] = {}

    def _let(self, key: object, term: b.Call) -> b.Var | b.Call:
        b = egg()
        v = self._memo.get(key)
        if v is None:
            if self.inline:
                v = self._memo[key] = term
            else:
                v = self._memo[key] = b.Var(span(), f"v{len(self.actions)}")
                self.actions.append(b.Let(span(), v.name, term))
        return v

    def expr(self, e: Expr, shape: tuple[Expr, ...] = ()) -> b.Var | b.Call:
        """`e` as an Expr term; axis variable zi becomes (Z i shape[i])."""
        key = ("e", e, shape if any(map(is_axis_var, e.vars())) else ())
        if key in self._memo:
            return self._memo[key]
        op = e.op
        if op == "num":
            t = call("Num", lit(e.value))
        elif op == "var":
            name = e.args[0]
            if is_axis_var(name):
                t = call("Z", lit(int(name[1:])), self.expr(shape[int(name[1:])]))
            else:
                t = call("Var", lit(name))
        elif op == "sum":
            terms = []
            for mono, c in e.args:
                t = call("Num", lit(c)) if not mono else None
                for atom in mono:
                    a = self.expr(atom, shape)
                    t = a if t is None else call("Mul", t, a)
                if mono and c != 1:
                    t = call("Mul", call("Num", lit(c)), t)
                terms.append(t)
            t = terms[0]
            for u in terms[1:]:
                t = call("Add", t, u)
        else:
            t = call(_BINOPS[op], self.expr(e.args[0], shape), self.expr(e.args[1], shape))
        return self._let(key, t)

    def shape(self, shape: tuple[Expr, ...]) -> b.Var | b.Call:
        key = ("s", shape)
        if key not in self._memo:
            t = call("ENil")
            for s in reversed(shape):
                t = call("ECons", self.expr(s), t)
            self._let(key, t)
        return self._memo[key]

    def view(self, v: View) -> b.Var | b.Call:
        b = egg()
        key = ("v", v)
        if key not in self._memo:
            sh = self.shape(v.shape)
            idx = self.expr(v.index, v.shape)
            self._let(key, call("V", sh, idx, self.expr(v.valid, v.shape)))
            if v.is_contiguous() and ("rm", v.shape) not in self._memo:
                self._memo[("rm", v.shape)] = idx
                self.actions.append(b.Union(span(), call("RowMajor", sh), idx))
        return self._memo[key]

    def kind(self, n: Node) -> b.Call:
        views = iter(n.views)
        args = [self.shape(n.shape)]
        for f in FIELDS[n.op]:
            if f == "view":
                args.append(self.view(next(views)))
            elif f == "dtype":
                args.append(lit(n.dtype.name))
            elif f == "value":
                args.append(lit(value_text(n.value)))
            elif f == "expr":
                assert n.expr is not None
                args.append(self.expr(n.expr, n.shape))
            else:
                args.append(lit(getattr(n, f)))
        return call(KIND_PREFIX + n.op, *args)

    def graph(self, g: Graph) -> None:
        """Every node, and the Root over the outputs."""
        b = egg()
        terms: dict[int, b.Var | b.Call] = {}
        for i, n in enumerate(g.nodes):
            kind = self._let(("k", i), self.kind(n))
            inputs = self._inputs([terms[j] for j in n.inputs])
            terms[i] = self._let(("t", i), call("Op", kind, inputs))
            self.actions.append(b.Expr_(span(), call("origin", kind, inputs, lit(i))))
        self._let(("root",), call("Op", call("Root"), self._inputs([terms[o] for o in g.outputs])))

    def _inputs(self, terms: list) -> b.Call:
        t = call("INil")
        for x in reversed(terms):
            t = call("ICons", x, t)
        return t


def insert_commands(g: Graph, name: str = "insert") -> list:
    """Commands that add `g` to an e-graph (once the rule files are loaded)."""
    b = egg()
    enc = Encoder()
    enc.graph(g)
    rule = b.Rule(span(), enc.actions, [], name, name)
    return [b.AddRuleset(span(), name), b.RuleCommand(rule),
            b.RunSchedule(b.Run(span(), b.RunConfig(name)))]


def bound_facts(bounds: Mapping[str, tuple[int, int | None]]) -> list:
    """Interval facts (lo/hi of rules/expr.egg) for the named dims."""
    b = egg()
    cmds = []
    for name, (lo, hi) in sorted(bounds.items()):
        cmds.append(b.ActionCommand(b.Set(span(), "lo", [call("Var", lit(name))], lit(lo))))
        if hi is not None:
            cmds.append(b.ActionCommand(b.Set(span(), "hi", [call("Var", lit(name))], lit(hi))))
    return cmds


def fingerprints(g: Graph) -> list[str]:
    """A structural hash per node (op, fields, views, inputs' hashes), independent of node
    numbering and of egglog: the stable name of the e-class holding that node."""
    fps: list[str] = []
    for n in g.nodes:
        text = repr((n.op, n.shape, n.views, n.dtype.name, n.name, n.value, n.axis, n.expr,
                     n.persist, [fps[j] for j in n.inputs]))
        fps.append(hashlib.sha256(text.encode()).hexdigest()[:16])
    return fps

