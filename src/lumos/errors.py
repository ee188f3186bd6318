"""The errors lumos raises for bad input."""


class LumosError(Exception):
    """Base class of lumos' own errors."""


class ShapeError(LumosError, ValueError):
    """Shapes that do not fit the op (names the op and the shapes)."""


class DTypeError(LumosError, TypeError):
    """A dtype the op does not accept (names the op and the dtypes)."""


class BindError(LumosError, ValueError):
    """Data bound to an input, or dims given at execute, that do not fit the graph."""
