"""Checking what rule files derive, in isolation from the rest of the pipeline.

    rc = RuleCheck(CORE, graph=g)                 # load the rules, insert g, run the stages
    assert rc.equal(y, x)                         # tensors: one e-class for their nodes?
    rc = RuleCheck(CORE, exprs=[(z(0) % 8, (4,))])  # index expressions (with axis sizes)
    assert rc.equal((z(0) % 8, (4,)), (z(0), (4,)))
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from egglog import bindings as b

from lumos.egraph.encode import Encoder, bound_facts, call, insert_commands, lit, span
from lumos.egraph.schedule import Budget, Rules, Runner, load
from lumos.graph import Graph
from lumos.shape import Expr, sym

ExprIn = Expr | tuple[Expr, Sequence[Any]]  # an Expr, or (Expr, its axis sizes)


class RuleCheck:
    def __init__(self, rules: Rules, graph: Graph | None = None, exprs: Sequence[ExprIn] = (),
                 bounds: Mapping[str, tuple[int, int | None]] | None = None,
                 budget: Budget | None = None) -> None:
        self.eg = b.EGraph()
        ctors = load(self.eg, rules)
        if graph is not None:
            self.eg.run_program(*insert_commands(graph))
        for e in exprs:
            self.eg.run_program(b.ActionCommand(b.Expr_(span(), _term(e))))
        dims = {**(graph.dims if graph is not None else {}), **(bounds or {})}
        self.eg.run_program(*bound_facts(dims))
        self.runner = Runner(self.eg, ctors, budget or Budget())
        self.runner.schedule(rules.stages)

    def equal(self, x: Any, y: Any) -> bool:
        """Did the rules put x and y in one e-class? Both tensors of the inserted graph
        (their nodes are compared), or both inserted expressions."""
        if isinstance(x, Expr | tuple):
            facts = [b.Eq(span(), _term(x), _term(y))]
        else:
            k, l_ = [b.Var(span(), f"k{i}") for i in range(2)], \
                [b.Var(span(), f"l{i}") for i in range(2)]
            facts = [b.Fact(call("origin", k[i], l_[i], lit(t.node)))
                     for i, t in enumerate((x, y))]
            facts.append(b.Eq(span(), *(call("Op", k[i], l_[i]) for i in range(2))))
        return self.check(facts)

    def check(self, facts: list) -> bool:
        """Do egglog facts (AST, or one string of egglog facts) hold?"""
        try:
            if isinstance(facts, str):
                self.eg.run_program(*self.eg.parse_program(f"(check {facts})"))
            else:
                self.eg.run_program(b.Check(span(), facts))
        except b.EggSmolError:
            return False
        return True


def _term(x: ExprIn) -> b.Call:
    e, shape = x if isinstance(x, tuple) else (x, ())
    return Encoder(inline=True).expr(e, tuple(sym(s) for s in shape))  # type: ignore[return-value]
