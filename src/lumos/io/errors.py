"""The error of weight files that cannot be used."""

from lumos.errors import LumosError


class WeightError(LumosError):
    """A weight file that is missing, truncated, corrupt or of an unsupported kind; the
    message names the file (and the tensor)."""
