"""Exceptions raised by flashkit.

Every failing library call (a C status other than FK_OK) becomes a :class:`FlashkitError` subclass
carrying the library's own message, which names the argument at fault and what was expected.
The subclasses also derive from the matching built-in exception, so generic handlers work too::

    try:
        flashkit.attention(q, k, v, impl="standard")
    except MemoryError:          # catches flashkit.OutOfMemoryError
        ...
"""

__all__ = [
    "FlashkitError",
    "InvalidArgumentError",
    "UnsupportedError",
    "OutOfMemoryError",
    "DeviceError",
    "InternalError",
    "error_for_status",
]


class FlashkitError(Exception):
    """Base class of every error the flashkit library reports.

    Attributes:
        status: the C status code (an ``fk_status`` value, 1..5).
        message: the library's message (what ``fk_last_error()`` returned).
    """

    status = None
    status_name = "error"

    def __init__(self, message, status=None):
        super().__init__(message)
        self.message = message
        if status is not None:
            self.status = status


class InvalidArgumentError(FlashkitError, ValueError):
    """An argument had the wrong shape, dtype, stride or value (FK_INVALID_ARGUMENT)."""

    status = 1
    status_name = "invalid_argument"


class UnsupportedError(FlashkitError, NotImplementedError):
    """A valid request this build or device cannot serve (FK_UNSUPPORTED)."""

    status = 2
    status_name = "unsupported"


class OutOfMemoryError(FlashkitError, MemoryError):
    """The call would need (or failed to get) more memory than allowed (FK_OUT_OF_MEMORY)."""

    status = 3
    status_name = "out_of_memory"


class DeviceError(FlashkitError, RuntimeError):
    """The accelerator runtime reported a failure (FK_DEVICE_ERROR)."""

    status = 4
    status_name = "device_error"


class InternalError(FlashkitError, RuntimeError):
    """A bug or an unexpected condition inside the library (FK_INTERNAL)."""

    status = 5
    status_name = "internal"


_BY_STATUS = {
    cls.status: cls
    for cls in (InvalidArgumentError, UnsupportedError, OutOfMemoryError, DeviceError, InternalError)
}


def error_for_status(status, message):
    """Returns the exception instance for a non-zero C status and its message.

    Unknown status codes map to :class:`InternalError` (the message then says which code it was).
    """
    status = int(status)
    cls = _BY_STATUS.get(status)
    if cls is None:
        return InternalError("unknown flashkit status %d: %s" % (status, message), status)
    return cls(message, status)
