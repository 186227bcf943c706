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


class UnknownDatasetError(StreamkError, ValueError):
    """A dataset name that streamk does not know."""


class GroundTruthError(StreamkError, ValueError):
    """A ground-truth file is missing, malformed or inconsistent with the image list."""


class UnsafePickleError(StreamkError, ValueError):
    """A pickle asks for a global outside the small allowed set (refused, not executed)."""


class DownloadError(StreamkError, OSError):
    """A dataset file could not be fetched."""


class ChecksumError(DownloadError):
    """A downloaded file has the wrong size or SHA-256; it was deleted, nothing extracted."""


class UnsafeArchiveError(StreamkError, ValueError):
    """An archive member would be written outside the destination (absolute path, '..', link)."""


class RankingError(StreamkError, ValueError):
    """A ranking is malformed: wrong number of queries, index out of range, repeated image."""


class ImageReadError(StreamkError, ValueError):
    """An image file is missing, unreadable, empty, truncated, not an image, or a directory.

    ``path`` and ``reason`` are kept as attributes.
    """

    def __init__(self, path, reason):
        self.path = str(path)
        self.reason = str(reason)
        super().__init__(f"cannot read image {self.path}: {self.reason}")

    def __reduce__(self):  # keep (path, reason) across process boundaries
        return (type(self), (self.path, self.reason))


class DescriptorFileError(StreamkError, ValueError):
    """A descriptor file (.siftgeo, .fvecs, .bvecs, .ivecs, .npy) is malformed or unreadable,
    or an array cannot be stored in the requested format."""


class ExtractorUnavailableError(StreamkError, ImportError):
    """A feature extractor's library (pyhesaff, OpenCV, Pillow) is not installed or is broken."""


class DatasetImageError(StreamkError, ValueError):
    """Images of an evaluation dataset are missing or unreadable."""
