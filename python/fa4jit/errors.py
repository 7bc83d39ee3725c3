"""Exception classes: the C++ typed errors of fa4jit/errors.hpp, one class each.

Every error fa4jit raises derives from :class:`Error`. :class:`ConfigError` and :class:`LaunchError`
(bad arguments) are also :class:`ValueError`, so ``except ValueError`` catches a wrong argument.
"""


class Error(RuntimeError):
    """Base of every fa4jit error (C++ ``jit::Error``)."""


class ConfigError(Error, ValueError):
    """A config that cannot work; names the field, the value and what is allowed."""


class CompileError(Error):
    """NVRTC refused the generated source; the message carries the log (snippet lines point at the snippet)."""


class CacheError(Error):
    """The kernel cache could not do what was asked (unusable directory, bad archive)."""


class CacheMissError(CacheError):
    """Sealed mode (``FA4JIT_SEALED=1``): a kernel is missing from every cache tier."""


class DriverError(Error):
    """No driver, no GPU, wrong arch, out of memory: anything the CUDA driver refused.

    ``result`` is the CUresult (0 when the error did not come from a driver call).
    """

    def __init__(self, message: str, result: int = 0):
        super().__init__(message)
        self.result = result


class LaunchError(Error, ValueError):
    """Launch arguments that do not match the kernel (devices, shapes, strides, dtypes, alignment)."""


# C API status codes (include/fa4jit/c_api.h, fa4jit_status) -> class.
_BY_CODE = {
    1: Error,
    2: ConfigError,
    3: CompileError,
    4: CacheError,
    5: CacheMissError,
    6: DriverError,
    7: LaunchError,
    8: Error,  # FA4JIT_INVALID_ARGUMENT: misuse of the C API, a bug in this package
}


def from_status(code: int, message: str, driver_result: int = 0) -> Error:
    cls = _BY_CODE.get(code, Error)
    if cls is DriverError:
        return DriverError(message, driver_result)
    return cls(message)
