"""Named exceptions for every error a user can cause.

Each subclasses both ``StreamkError`` (catch-all for streamk) and the builtin
that best describes it, so ``except ValueError`` keeps working too.
"""


class StreamkError(Exception):
    """Base class of all streamk errors."""


class EmptyDescriptorSetError(StreamkError, ValueError):
    """A descriptor set has no descriptors (e.g. an image with no features)."""


class NonFiniteError(StreamkError, ValueError):
    """An input array holds NaN or infinite values."""


class DimensionError(StreamkError, ValueError):
    """An input array has the wrong shape or dimensionality."""


class NotFittedError(StreamkError, RuntimeError):
    """A learned component was used before ``fit``."""


class ConfigError(StreamkError, ValueError):
    """An invalid parameter or configuration value."""


class EncoderFileError(StreamkError, ValueError):
    """A saved encoder file is missing, corrupt or of an unknown format."""


class EncoderMismatchError(StreamkError, ValueError):
    """Data encoded with one encoder is used with another."""
