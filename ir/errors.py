"""The one error hierarchy of wgjit (re-exported by `tracer`)."""


class WgjitError(Exception):
    """Base class of every error wgjit raises on purpose."""


class ShapeError(WgjitError, ValueError):
    """Shapes that do not fit the op: broadcasting, axes, reshape sizes, matmul inner dims."""


class DTypeError(WgjitError, TypeError):
    """A dtype the op, the promotion rules or the adapter cannot handle."""


class DeviceError(WgjitError, RuntimeError):
    """No adapter, a lost device, or a limit of the device exceeded."""


class KernelCompileError(WgjitError, RuntimeError):
    """A generated kernel failed to compile; carries its cache key and WGSL source."""

    def __init__(self, message: str, key: str = "", wgsl: str = "") -> None:
        super().__init__(message)
        self.key = key
        self.wgsl = wgsl


class JitError(WgjitError, RuntimeError):
    """A jitted function's result depends on python state that changed after it was traced."""


class IndexOutOfRangeError(ShapeError, IndexError):
    """An index past the end of an axis (also an IndexError, as numpy raises)."""


class FormatError(WgjitError, ValueError):
    """A weights file wgjit cannot read: not its format, truncated, or a tensor it cannot hold (named)."""


class SettingError(WgjitError, ValueError):
    """A WGJIT_* environment variable whose value wgjit cannot use (README: Knobs); names the variable."""
