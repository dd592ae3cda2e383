"""The project's exception type and the one helper that formats every refusal.

Every refusal names four things: the parameter, the value given, what is allowed,
and how to fix it.  Keeping the format in one function keeps the messages
uniform, which docs/errors.md and the tests rely on.
"""

from __future__ import annotations

__all__ = ["AsyncStoreError", "CheckerLimit", "refuse", "refuse_limit", "refuse_type"]


class AsyncStoreError(ValueError):
  """An input that the asynchronous store cannot accept.

  Attributes:
    param: the name of the offending parameter (e.g. ``"swizzle"``).
    value: the value given, as text.
  """

  def __init__(self, message: str, *, param: str = "", value: str = ""):
    super().__init__(message)
    self.param = param
    self.value = value


class CheckerLimit(AsyncStoreError):
  """A kernel the PTX checker cannot check: an instruction, run-time case, launch shape
  or element type it does not run exactly (docs/checker.md).  A limit of the checker,
  not a fault of the kernel: the CLI's ``check`` exits 5 on it, a refusal of the
  kernel's own inputs exits 2."""


def _message(param: str, value: object, allowed: str, fix: str) -> str:
  shown = value if isinstance(value, str) else repr(value)
  return f"{param}={shown} is not supported: allowed {allowed}. Fix: {fix}"


def refuse(param: str, value: object, allowed: str, fix: str) -> AsyncStoreError:
  """Builds (does not raise) an AsyncStoreError in the project's format."""
  return AsyncStoreError(
      _message(param, value, allowed, fix), param=param, value=str(value)
  )


def refuse_limit(param: str, value: object, allowed: str, fix: str) -> CheckerLimit:
  """Builds (does not raise) a ``CheckerLimit`` in the project's format."""
  return CheckerLimit(_message(param, value, allowed, fix), param=param, value=str(value))


def _brief(value: object) -> str:
  """A value as an error message shows it: an array by its type, shape and dtype (its
  repr would take lines), anything else by its type and a repr of one line."""
  shown = type(value).__name__
  if hasattr(value, "shape") and hasattr(value, "dtype"):
    return f"<{shown} of shape {tuple(value.shape)} and dtype {value.dtype}>"
  text = " ".join(repr(value).split())
  return f"<{shown}> {text if len(text) <= 120 else text[:117] + '...'}"


def refuse_type(param: str, value: object, allowed: str, fix: str) -> TypeError:
  """Builds a TypeError in the same format, for values of the wrong kind."""
  return TypeError(_message(param, _brief(value), allowed, fix))
