"""The Tensor API. Importing this package attaches every op family to `Tensor`."""

from lumos.frontend import index, nn, reduce  # noqa: F401  (attach methods)
from lumos.frontend.tensor import Tensor, tensor_method

__all__ = ["Tensor", "tensor_method"]
