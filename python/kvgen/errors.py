"""Exceptions: one class per kvrt status, plus the compiler's and the cache's.

A kvrt failure carries kvrt's own message (``kvrt_last_error()``), which names
the tensor and the rule it broke; the class says which status kvrt returned,
so a caller can catch ``kvgen.InvalidArgumentError`` (also a ``ValueError``)
without parsing text.
"""


class KvgenError(Exception):
    """Base class of every error the kvgen package raises."""


class KvrtError(KvgenError):
    """kvrt returned a status other than KVRT_SUCCESS.

    ``status`` is the numeric kvrt_status, ``status_name`` its C name and
    ``message`` kvrt's message for the failed call.
    """

    status = None
    status_name = "KVRT_ERROR"

    def __init__(self, message, status=None, status_name=None):
        super().__init__(message)
        self.message = message
        if status is not None:
            self.status = status
        if status_name is not None:
            self.status_name = status_name

    def __str__(self):
        return "%s: %s" % (self.status_name, self.message)


class InvalidArgumentError(KvrtError, ValueError):
    """A tensor or argument broke a rule (KVRT_ERROR_INVALID_ARGUMENT)."""

    status = 1
    status_name = "KVRT_ERROR_INVALID_ARGUMENT"


class InvalidBundleError(KvrtError):
    """The bundle or its manifest is malformed (KVRT_ERROR_INVALID_BUNDLE)."""

    status = 2
    status_name = "KVRT_ERROR_INVALID_BUNDLE"


class NotFoundError(KvrtError, LookupError):
    """No such kernel, or a driver entry point (KVRT_ERROR_NOT_FOUND)."""

    status = 3
    status_name = "KVRT_ERROR_NOT_FOUND"


class NoDriverError(KvrtError):
    """libcuda.so.1 could not be loaded (KVRT_ERROR_NO_DRIVER)."""

    status = 4
    status_name = "KVRT_ERROR_NO_DRIVER"


class NoDeviceError(KvrtError):
    """The driver reports no usable device (KVRT_ERROR_NO_DEVICE)."""

    status = 5
    status_name = "KVRT_ERROR_NO_DEVICE"


class UnsupportedDeviceError(KvrtError):
    """The device is older than the bundle's target (KVRT_ERROR_UNSUPPORTED_DEVICE)."""

    status = 6
    status_name = "KVRT_ERROR_UNSUPPORTED_DEVICE"


class DriverError(KvrtError):
    """A CUDA driver call failed (KVRT_ERROR_DRIVER)."""

    status = 7
    status_name = "KVRT_ERROR_DRIVER"


class BundleIOError(KvrtError):
    """A file could not be read (KVRT_ERROR_IO)."""

    status = 8
    status_name = "KVRT_ERROR_IO"


class InternalError(KvrtError):
    """kvrt failed inside itself (KVRT_ERROR_INTERNAL)."""

    status = 9
    status_name = "KVRT_ERROR_INTERNAL"


class OutOfMemoryError(KvrtError, MemoryError):
    """kvrt could not allocate (KVRT_ERROR_OUT_OF_MEMORY)."""

    status = 10
    status_name = "KVRT_ERROR_OUT_OF_MEMORY"


#: kvrt_status -> exception class.
STATUS_ERRORS = {
    cls.status: cls
    for cls in (
        InvalidArgumentError,
        InvalidBundleError,
        NotFoundError,
        NoDriverError,
        NoDeviceError,
        UnsupportedDeviceError,
        DriverError,
        BundleIOError,
        InternalError,
        OutOfMemoryError,
    )
}


def error_for_status(status, message, status_name=None):
    """The exception for a kvrt status (a plain KvrtError for an unknown one)."""
    cls = STATUS_ERRORS.get(status, KvrtError)
    return cls(message, status=status, status_name=status_name)


class LibraryNotFoundError(KvgenError, ImportError):
    """libkvrt could not be found or loaded."""


class CompilerError(KvgenError):
    """The kvgen compiler refused a description: its diagnostic."""


class CompilerNotFoundError(CompilerError):
    """No kvgen compiler: neither KVGEN_COMPILER nor `kvgen` on PATH."""


class CompilerFailedError(KvgenError):
    """The compiler did not do its work, for a reason other than the
    description: killed by a signal (``signal``: SIGSEGV, SIGXFSZ under
    ``ulimit -f``), an OS error while it wrote its output (a full disk), an
    exit status it never uses, or a success without its output. Never a
    refusal (that is CompilerError)."""

    def __init__(self, message, signal=None):
        super().__init__(message)
        self.signal = signal


class CacheError(KvgenError):
    """The kernel cache on disk cannot be used: its folder cannot be made
    or written (``path``, ``errno``), or an entry failed its check and
    there is no compiler to rebuild it. The message names the path and what
    is wrong."""

    def __init__(self, message, path=None, errno=None):
        super().__init__(message)
        self.path = path
        self.errno = errno


class KernelNotAvailableError(KvgenError, LookupError):
    """No bundle offers the kernel, the cache lacks it and it cannot be compiled."""
