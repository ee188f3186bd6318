"""Training, outside the core: reverse mode over the HLIR primitives and optimizers as
graph updates of persistent buffers. See `reverse.py` (the walk and the per-primitive
rules) and `scatter.py` (adjoints of views)."""

from lumos.autograd.optim import SGD, AdamW, Optimizer, Trainer
from lumos.autograd.reverse import grad

__all__ = ["SGD", "AdamW", "Optimizer", "Trainer", "grad"]
