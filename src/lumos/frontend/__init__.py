"""The Tensor API. Importing this package attaches every op family to `Tensor`."""

from lumos.frontend import bits, elementwise, index, nn, pool, reduce, scan, sort  # noqa: F401
from lumos.frontend.tensor import Tensor, tensor_method

__all__ = ["Tensor", "tensor_method"]
