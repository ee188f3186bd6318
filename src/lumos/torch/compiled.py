"""A translated ATen graph and its lumos program, called with the real tensors.

Every call binds every input afresh (weights included) without copying: a CPU
tensor and the numpy array bound to the program share memory, bf16 as its
16-bit pattern. Results come back as tensors over the program's result arrays.
Anything that goes wrong at run time sends this graph to PyTorch for good, with
one warning (or raises, with `strict`).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
from torch import fx

from lumos.logs import warn
from lumos.runtime import Program
from lumos.shape import Expr
from lumos.torch.translate import ArgOut, TensorOut, Translation


@dataclass
class Scope:
    """The dims of a whole graph, read from its arguments on each call, for its regions
    (a region's own inputs may not reveal them, e.g. when it only sees s + 1)."""

    names: frozenset[str]
    env: dict[str, int] = field(default_factory=dict)


class CompiledGraph:
    def __init__(self, tr: Translation, program: Program | None, module: fx.GraphModule,
                 strict: bool, scope: Scope | None = None) -> None:
        self.tr, self.program, self.module, self.strict = tr, program, module, strict
        self.scope = scope
        self.failed = False

    def __call__(self, *args: Any) -> Any:
        if not self.failed:
            try:
                return self._run(args)
            except Exception as e:
                if self.strict:
                    raise
                warn(f"a compiled graph failed to run ({type(e).__name__}: {e}); "
                     "it runs in PyTorch from now on")
                self.failed = True
        return self.module(*args)

    def _run(self, args: tuple) -> Any:
        tr, prog = self.tr, self.program
        env = self._dims(args)
        taken: list[np.ndarray] = []  # memory a result must not share: inputs, results
        if prog is not None:
            for t, source in tr.inputs:
                a = to_numpy(args[source] if isinstance(source, int) else self._attr(source))
                prog.set_data(t, a)
                taken.append(a)
            prog.execute({k: v for k, v in env.items() if k in tr.graph.dims})

        def tensor(t: Any, dtype: torch.dtype) -> torch.Tensor:
            assert prog is not None
            arr = prog.get(t)
            if not arr.flags.writeable or any(np.may_share_memory(arr, a) for a in taken):
                arr = arr.copy()
            taken.append(arr)
            return to_torch(arr, dtype)

        def result(o: Any) -> Any:
            if isinstance(o, (tuple, list)):
                return type(o)(result(x) for x in o)
            if isinstance(o, TensorOut):
                return tensor(o.tensor, o.dtype)
            if isinstance(o, ArgOut):
                return args[o.position]
            if isinstance(o, Expr):
                return int(o.eval(env))
            return o

        outs = result(tr.outputs)
        for i, t in tr.mutations:
            args[i].copy_(tensor(t, args[i].dtype))
        return outs

    def _dims(self, args: tuple) -> dict[str, int]:
        return (self.scope.env if self.scope else {}) | read_dims(self.tr, args, self.module)

    def _attr(self, name: str) -> torch.Tensor:
        return functools.reduce(getattr, name.split("."), self.module)


def read_dims(tr: Translation, args: tuple, module: fx.GraphModule) -> dict[str, int]:
    """The values of the dims `tr` reads from its arguments (see `known_dims`)."""
    env = {name: int(args[i]) for name, i in tr.dim_args}
    for t, source in tr.inputs:
        x = args[source] if isinstance(source, int) else \
            functools.reduce(getattr, source.split("."), module)
        for e, n in zip(t.view.shape, x.shape, strict=True):
            if e.op == "var":
                env[e.args[0]] = int(n)
    return env


def to_numpy(t: torch.Tensor) -> np.ndarray:
    """The tensor's memory as a numpy array (a copy only if it is not contiguous)."""
    t = t.detach()
    if not t.is_contiguous():
        t = t.contiguous()
    if t.dtype == torch.bfloat16:
        return t.view(torch.int16).numpy().view(np.uint16)
    return t.numpy()


def to_torch(arr: np.ndarray, dtype: torch.dtype) -> torch.Tensor:
    """A tensor over a result array (bf16 results are their bit patterns)."""
    if dtype == torch.bfloat16:
        return torch.from_numpy(arr.view(np.int16)).view(torch.bfloat16)
    return torch.from_numpy(arr)
