"""Optimizers as graph updates of persistent buffers, and the driver that runs them.

An optimizer reads each parameter, its gradient and its state (graph inputs it creates,
e.g. `w.exp_avg`) and returns the new values as ordinary graph tensors, with PyTorch's
formulas and defaults. `Trainer` puts loss, backward and update into one compiled
program (updates marked `output(persist=True)`) and, after every step, binds each
updated value back as the input it replaces.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from lumos.autograd.reverse import grad
from lumos.dtype import f64, i64
from lumos.errors import ShapeError
from lumos.frontend.tensor import Tensor, pow, sqrt, where
from lumos.runtime import ReferenceRuntime

Update = tuple[Tensor, Tensor]  # (graph input, its value after the step)


class Optimizer:
    """Base: owns the state inputs and their initial values."""

    def __init__(self, params: Sequence[Tensor]) -> None:
        self.params = list(params)
        self.initial: dict[Tensor, np.ndarray] = {}
        for k, p in enumerate(self.params):
            n = p.graph.nodes[p.node]
            if n.op != "Input" or not p.dtype.is_float:
                raise ValueError(f"{type(self).__name__}: parameter {k} must be a float graph "
                                 f"input (g.tensor(...)), got {n.op} of {p.dtype.name}")

    def state(self, like: Tensor, name: str) -> Tensor:
        """A new graph input `<param>.<name>` shaped like `like`, initially zero."""
        if not all(isinstance(s, int) for s in like.shape):
            raise ShapeError(f"{type(self).__name__}: state {name!r} needs a static shape, got "
                             f"{like.shape}")
        n = like.graph.nodes[like.node]
        t = like.graph.tensor(like.shape, like.dtype, name=f"{n.name or 'param'}.{name}")
        self.initial[t] = np.zeros(like.shape, like.dtype.np)
        return t

    def steps(self) -> tuple[Tensor, Tensor]:
        """The step counter: (steps done before this one, as an input; that plus one)."""
        p = self.params[0]
        t = p.graph.tensor((), i64, name=f"{type(self).__name__.lower()}.step")
        self.initial[t] = np.zeros((), np.int64)
        return t, t + 1

    def update(self, grads: Sequence[Tensor]) -> list[Update]:
        raise NotImplementedError


class SGD(Optimizer):
    """torch.optim.SGD: weight decay, momentum (with dampening), Nesterov."""

    def __init__(self, params: Sequence[Tensor], lr: float = 1e-3, momentum: float = 0.0,
                 dampening: float = 0.0, weight_decay: float = 0.0,
                 nesterov: bool = False) -> None:
        super().__init__(params)
        if nesterov and (momentum <= 0 or dampening != 0):
            raise ValueError("SGD: Nesterov momentum requires a momentum and zero dampening")
        self.lr, self.momentum, self.dampening = lr, momentum, dampening
        self.weight_decay, self.nesterov = weight_decay, nesterov

    def update(self, grads: Sequence[Tensor]) -> list[Update]:
        out: list[Update] = []
        first = None
        if self.momentum and self.dampening:
            step, new_step = self.steps()
            first, out = step == 0, [(step, new_step)]
        for p, g in zip(self.params, grads, strict=True):
            if self.weight_decay:
                g = g + p * self.weight_decay
            if self.momentum:
                buf = self.state(p, "momentum_buffer")
                new = buf * self.momentum + g * (1 - self.dampening)
                if first is not None:  # torch starts the buffer at the first gradient
                    new = where(first, g, new)
                out.append((buf, new))
                g = g + new * self.momentum if self.nesterov else new
            out.append((p, p - g * self.lr))
        return out


class AdamW(Optimizer):
    """torch.optim.AdamW (decoupled weight decay, bias-corrected moments)."""

    def __init__(self, params: Sequence[Tensor], lr: float = 1e-3,
                 betas: tuple[float, float] = (0.9, 0.999), eps: float = 1e-8,
                 weight_decay: float = 1e-2) -> None:
        super().__init__(params)
        self.lr, self.betas, self.eps, self.weight_decay = lr, betas, eps, weight_decay

    def update(self, grads: Sequence[Tensor]) -> list[Update]:
        (b1, b2), lr = self.betas, self.lr
        step, new_step = self.steps()
        t = new_step.to(f64)
        step_size = lr / (1.0 - pow(b1, t))
        bc2_sqrt = sqrt(1.0 - pow(b2, t))
        out: list[Update] = [(step, new_step)]
        for p, g in zip(self.params, grads, strict=True):
            m, v = self.state(p, "exp_avg"), self.state(p, "exp_avg_sq")
            m_new = m + (g - m) * (1 - b1)  # torch: exp_avg.lerp_(grad, 1 - beta1)
            v_new = v * b2 + g * g * (1 - b2)
            denom = sqrt(v_new) / bc2_sqrt.to(p.dtype) + self.eps
            p_new = p * (1 - lr * self.weight_decay) - m_new / denom * step_size.to(p.dtype)
            out += [(m, m_new), (v, v_new), (p, p_new)]
        return out


class Trainer:
    """One compiled program per training step (forward, backward, update).

    `step(feeds)` binds the batch, runs the program, binds every updated parameter and
    state buffer back as its input, and returns the loss."""

    def __init__(self, loss: Tensor, optimizer: Optimizer, runtime: Any = None,
                 options: Any = None) -> None:
        self.loss, self.optimizer = loss, optimizer
        self.updates = optimizer.update(grad(loss, optimizer.params))
        loss.output()
        for _, new in self.updates:
            new.output(persist=True)
        self.program = loss.graph.compile(runtime or ReferenceRuntime(), options)
        self._bound: dict[Tensor, np.ndarray] = {}  # input -> the result array bound to it
        for t, value in optimizer.initial.items():
            self.program.set_data(t, value)

    def load(self, values: Mapping[Tensor, Any]) -> None:
        """Bind parameter (or state) values."""
        for t, a in values.items():
            self.program.set_data(t, a)
            self._bound.pop(t, None)

    def step(self, feeds: Mapping[Tensor, Any] | None = None,
             dims: Mapping[str, int] | None = None) -> np.ndarray:
        self.load(feeds or {})
        self.program.execute(dims)
        loss = self.program.get(self.loss).copy()
        for t, new in self.updates:
            value = self.program.get(new)
            if self._bound.get(t) is not value:  # else the run wrote it in place (persist)
                self.program.set_data(t, value)
                self._bound[t] = value
        return loss

    def get(self, t: Tensor) -> np.ndarray:
        """The current value of a parameter or state input."""
        return self.program.get(t)

