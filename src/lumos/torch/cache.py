"""Compiled graphs by structure: a hash of the ATen graph (ops, arguments, wiring, the
shapes and dtypes of its inputs) and the options' signature (runtime, strict, buckets,
the resolved search options). A graph that comes back (a recompile, a second instance
of the same model) is not translated or compiled again, and a bucket compiled for one
serves all. In this process; across processes the CPU runtime's artifacts do it."""

from __future__ import annotations

import functools
import hashlib
from typing import Any

import torch
from torch import fx

import lumos
from lumos.torch.compiled import Programs

_entries: dict[str, Programs] = {}
stats = {"hits": 0, "misses": 0}


def key(gm: fx.GraphModule, signature: str, outer: Any) -> str:
    """`outer`: the dims a region gets from its whole graph."""
    lines = [f"lumos {getattr(lumos, '__version__', '')} torch {torch.__version__} "
             f"options {signature} outer {outer!r}"]
    number: dict[fx.Node, int] = {}
    for n in gm.graph.nodes:
        number[n] = len(number)
        args = fx.map_arg((n.args, n.kwargs), lambda a: f"%{number[a]}")
        meta = ""
        if n.op == "placeholder":
            meta = _describe(n.meta.get("val"))
        elif n.op == "get_attr":
            meta = _describe(functools.reduce(getattr, str(n.target).split("."), gm))
        lines.append(f"{n.op} {n.target} {args!r} {meta}")
    return hashlib.sha256("\n".join(lines).encode()).hexdigest()


def _describe(v: Any) -> str:
    if isinstance(v, torch.Tensor):
        return f"{v.dtype}{list(v.shape)}@{v.device.type}"
    return f"{type(v).__name__}:{v}"


def get(k: str) -> Programs | None:
    hit = _entries.get(k)
    stats["hits" if hit is not None else "misses"] += 1
    return hit


def put(k: str, value: Programs) -> None:
    _entries[k] = value


def clear() -> None:
    _entries.clear()
    stats.update(hits=0, misses=0)
