"""Symbolic shapes: integer expressions (`Expr`) and views (`View`)."""

from lumos.shape.expr import Expr, Num, Var, emax, emin, nrange, proves_lt, simplify, sym, z
from lumos.shape.view import View  # noqa: E402

__all__ = ["Expr", "Num", "Var", "View", "emax", "emin", "nrange", "proves_lt", "simplify",
           "sym", "z"]
